//! The latency-critical calls: MPI_Send and MPI_Recv of a few bytes of a predefined,
//! gapless datatype between two ranks go to the runtime's immediate paths
//! (`Comm::send_now`, `Comm::recv_now`) without the general argument handling: no
//! handle is cloned and no described buffer built. Anything else (a derived datatype,
//! a wildcard source, MPI_PROC_NULL, a bad argument, a larger message, a case the
//! runtime declines) gives `None` and takes the general path, which checks everything
//! and says what is wrong.

use std::ffi::c_void;
use std::os::raw::c_int;

use pontoon::Rank;

use crate::abi::*;
use crate::boundary::Res;
use crate::p2p::{finish_recv, recv_tag};
use crate::state::{try_mpi, Mpi};

/// Largest message (bytes) worth trying here: the runtime's own limit.
const SMALL: u64 = pontoon::Comm::NOW_MAX as u64;

/// The length in bytes of `n` elements of `datatype` at `buf`, if the type is
/// predefined and gapless and the message small.
fn small_len(m: &Mpi, buf: *const c_void, n: i64, datatype: MPI_Datatype) -> Option<usize> {
    let slot = datatype.checked_sub(DATATYPE_FIRST)?;
    let size = (*m.dense_sizes.get(slot)?)?;
    let len = u64::try_from(n).ok()?.checked_mul(size)?;
    (len <= SMALL && (len == 0 || !buf.is_null())).then_some(len as usize)
}

/// MPI_Send's immediate path.
///
/// # Safety
/// As MPI_Send.
#[inline(always)]
pub unsafe fn send(
    buf: *const c_void,
    n: i64,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> Option<Res> {
    let m = try_mpi()?;
    let len = small_len(m, buf, n, datatype)?;
    let data = match len {
        0 => &[][..],
        // SAFETY: `len` bytes of the caller's buffer (not null), per the MPI contract.
        len => unsafe { std::slice::from_raw_parts(buf as *const u8, len) },
    };
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
    Some(c.send_now(data, dest as Rank, tag)?.map_err(Into::into))
}

/// MPI_Recv's immediate path.
///
/// # Safety
/// As MPI_Recv.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn recv(
    buf: *mut c_void,
    n: i64,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> Option<Res> {
    let m = try_mpi()?;
    let len = small_len(m, buf, n, datatype)?;
    let tag = recv_tag(tag).ok()?;
    if source < 0 {
        return None;
    }
    let comms = m.comms.borrow();
    let c = &comms.get(Mpi::comm_key(comm))?.comm;
    if source as u32 >= c.peer_size() {
        return None;
    }
    let room = match len {
        0 => &mut [][..],
        // SAFETY: `len` writable bytes of the caller's receive buffer (not null), per
        // the MPI contract.
        len => unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) },
    };
    let got = c.recv_now(room, source as Rank, tag)?;
    // SAFETY: the caller's optional status.
    Some(unsafe { finish_recv(Ok(got), status) })
}
