//! The latency-critical calls: MPI_Send and MPI_Recv of a few bytes of a predefined,
//! gapless datatype between two ranks go to the runtime's immediate paths
//! (`Comm::send_now`, `Comm::recv_now`) without the general argument handling: no
//! handle is cloned and no described buffer built. Anything else (a derived datatype,
//! a wildcard source, MPI_PROC_NULL, a bad argument, a larger message, a case the
//! runtime declines) gives `None` and takes the general path, which checks everything
//! and says what is wrong. MPI_Bcast of such a datatype, and MPI_Allreduce of a
//! predefined operation on one, skip the same handling on their way to the collective.

use std::os::raw::c_int;

use pontoon::Rank;

use crate::abi::*;
use crate::args::recv_tag;
use crate::boundary::Res;
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::Out;
use crate::state::{try_mpi, Mpi};
use crate::statuses::finish_recv;

/// Largest message (bytes) worth trying here: the runtime's own limit.
const SMALL: u64 = pontoon::for_c::NOW_MAX as u64;

/// The length in bytes of `n` elements of `datatype` at `buf`, if the type is
/// predefined and gapless and the message small.
fn small_len(m: &Mpi, n: i64, datatype: MPI_Datatype) -> Option<usize> {
    dense_len(m, n, datatype).filter(|&len| len as u64 <= SMALL)
}

/// The length in bytes of `n` elements of `datatype`, if the type is predefined and
/// gapless (its packed form is the memory itself).
fn dense_len(m: &Mpi, n: i64, datatype: MPI_Datatype) -> Option<usize> {
    let slot = datatype.checked_sub(DATATYPE_FIRST)?;
    let size = (*m.dense_sizes.get(slot)?)?;
    usize::try_from(u64::try_from(n).ok()?.checked_mul(size)?).ok()
}

/// MPI_Send's immediate path.
#[inline(always)]
pub fn send(
    buf: SendBuf,
    n: i64,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> Option<Res> {
    let m = try_mpi()?;
    let data = buf.bytes(small_len(m, n, datatype)?)?;
    if tag < 0 || dest < 0 {
        return None;
    }
    // The table stays borrowed while the message leaves: the runtime calls no user
    // code on this path, so nothing changes communicators meanwhile.
    let comms = m.comms.borrow();
    let c = &comms.get(Mpi::comm_key(comm))?.comm;
    if dest as u32 >= c.peer_size() {
        return None;
    }
    Some(pontoon::for_c::send_now(c, data, dest as Rank, tag)?.map_err(Into::into))
}

/// MPI_Recv's immediate path.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn recv(
    buf: RecvBuf,
    n: i64,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: Out<MPI_Status>,
) -> Option<Res> {
    let m = try_mpi()?;
    let len = small_len(m, n, datatype)?;
    let tag = recv_tag(tag).ok()?;
    if source < 0 {
        return None;
    }
    let comms = m.comms.borrow();
    let c = &comms.get(Mpi::comm_key(comm))?.comm;
    if source as u32 >= c.peer_size() {
        return None;
    }
    let room = buf.bytes_mut(len)?;
    let got = pontoon::for_c::recv_now(c, room, source as Rank, tag)?;
    Some(finish_recv(Ok(got), status))
}

/// MPI_Allreduce's immediate path: a predefined operation on a predefined, gapless
/// datatype over an intracommunicator goes to `Comm::allreduce_bytes` on the caller's
/// memory as it is (for such a type it is the packed form), without building described
/// buffers. A user operation takes the general path: it may call MPI, which must not
/// find the communicator table borrowed.
#[inline(always)]
pub fn allreduce(
    sendbuf: SendBuf,
    recvbuf: RecvBuf,
    n: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> Option<Res> {
    let m = try_mpi()?;
    let len = dense_len(m, n, datatype)?;
    if len > 0 && recvbuf.is_null() {
        return None;
    }
    let dt = m
        .predefined_types
        .get(datatype.checked_sub(DATATYPE_FIRST)?)?
        .as_ref()?;
    let op = crate::state::predefined_op(op)?;
    let in_place = sendbuf.in_place();
    if recvbuf.in_place() || (!in_place && len > 0 && sendbuf.is_null()) {
        return None;
    }
    let (send_at, recv_at) = (sendbuf.addr(), recvbuf.addr());
    if !in_place && len > 0 && send_at < recv_at + len && recv_at < send_at + len {
        return None; // overlapping buffers: erroneous, left to the general path
    }
    // A clone, not the table borrowed: at MPI_THREAD_MULTIPLE other threads call in
    // while this one waits.
    let c = m.comms.borrow().get(Mpi::comm_key(comm))?.comm.clone();
    if c.is_inter() {
        return None;
    }
    // Neither null, not overlapping: checked above.
    let input = match in_place {
        true => None,
        false => Some(sendbuf.bytes(len)?),
    };
    let out = recvbuf.bytes_mut(len)?;
    Some(c.allreduce_bytes(input, out, dt, &op).map_err(Into::into))
}

/// MPI_Bcast's immediate path: a predefined, gapless datatype over an
/// intracommunicator goes to `Comm::bcast` on the caller's memory as it is.
#[inline(always)]
pub fn bcast(buffer: RecvBuf, n: i64, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm) -> Option<Res> {
    let m = try_mpi()?;
    let len = dense_len(m, n, datatype)?;
    if root < 0 || (len > 0 && buffer.is_null()) {
        return None;
    }
    let c = m.comms.borrow().get(Mpi::comm_key(comm))?.comm.clone();
    if c.is_inter() || root as u32 >= c.size() {
        return None;
    }
    let buf = buffer.bytes_mut(len)?;
    Some(c.bcast(buf, root as Rank).map_err(Into::into))
}
