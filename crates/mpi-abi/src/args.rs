//! Decoding the arguments of point-to-point calls: ranks, tags, datatypes, and a send's
//! or a receive's whole set, once for every form (blocking, non-blocking, persistent,
//! buffered, immediate).

use std::os::raw::c_int;

use pontoon::{Comm, Datatype, Rank};

use crate::abi::*;
use crate::boundary::count;
use crate::fail::{fail, Fail};
use crate::state::mpi;

/// A destination: `None` for MPI_PROC_NULL.
pub fn dest_rank(c: &Comm, r: c_int) -> Result<Option<Rank>, Fail> {
    match r {
        MPI_PROC_NULL => Ok(None),
        r if r >= 0 && (r as u32) < c.peer_size() => Ok(Some(r as Rank)),
        r => fail(
            MPI_ERR_RANK,
            format!("rank {r} is not in this communicator of {} ranks", c.peer_size()),
        ),
    }
}

/// A source: `Ok(None)` for MPI_PROC_NULL, `Ok(Some(None))` for any source.
pub fn source_rank(c: &Comm, r: c_int) -> Result<Option<Option<Rank>>, Fail> {
    if r == MPI_ANY_SOURCE {
        return Ok(Some(None));
    }
    Ok(dest_rank(c, r)?.map(Some))
}

pub fn send_tag(tag: c_int) -> Result<i32, Fail> {
    if tag < 0 {
        return fail(
            MPI_ERR_TAG,
            format!("tag {tag} is negative; send tags are 0..=MPI_TAG_UB"),
        );
    }
    Ok(tag)
}

/// A receive tag, MPI_ANY_TAG becoming pontoon's own wildcard.
#[inline]
pub fn recv_tag(tag: c_int) -> Result<i32, Fail> {
    match tag {
        MPI_ANY_TAG => Ok(pontoon::ANY_TAG),
        t if t < 0 => fail(MPI_ERR_TAG, format!("tag {t} is negative and not MPI_ANY_TAG")),
        t => Ok(t),
    }
}

/// The datatype of a send or receive. One with MPI_PROC_NULL moves nothing and
/// completes at once whatever handle it names (MPI_DATATYPE_NULL among them), as in MPICH.
fn datatype_for(m: &crate::state::Mpi, datatype: MPI_Datatype, proc_null: bool) -> Result<Datatype, Fail> {
    match m.committed(datatype) {
        Err(_) if proc_null => Ok(Datatype::basic(pontoon::Basic::U8)),
        other => other,
    }
}

/// A send's arguments, checked once: the communicator, datatype, element count, tag,
/// and the destination (`None`: MPI_PROC_NULL, nothing to send).
pub struct SendArgs {
    pub comm: Comm<'static>,
    pub dt: Datatype,
    pub n: u64,
    pub tag: i32,
    pub dest: Option<Rank>,
}

pub fn send_args(
    n: i64,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> Result<SendArgs, Fail> {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let n = count(n, "count")?;
    let tag = send_tag(tag)?;
    let dest = dest_rank(&c, dest)?;
    let dt = datatype_for(m, datatype, dest.is_none())?;
    Ok(SendArgs {
        comm: c,
        dt,
        n,
        tag,
        dest,
    })
}

/// A receive's arguments, checked once; `source` `None`: MPI_PROC_NULL, `Some(None)`:
/// any source.
pub struct RecvArgs {
    pub comm: Comm<'static>,
    pub dt: Datatype,
    pub n: u64,
    pub tag: i32,
    pub source: Option<Option<Rank>>,
}

pub fn recv_args(
    n: i64,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> Result<RecvArgs, Fail> {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let n = count(n, "count")?;
    let tag = recv_tag(tag)?;
    let source = source_rank(&c, source)?;
    let dt = datatype_for(m, datatype, source.is_none())?;
    Ok(RecvArgs {
        comm: c,
        dt,
        n,
        tag,
        source,
    })
}
