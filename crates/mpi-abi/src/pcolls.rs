//! Persistent collectives (MPI 4.1 §6.13): `MPI_X_init` checks its info, copies the count,
//! displacement and datatype arrays (programs free them after init: mpi4py does) and makes
//! an inactive request; each `MPI_Start` starts the non-blocking `MPI_IX_c` with those
//! arguments (widened: one path for both forms), whose checks and planning run then. The program keeps the buffers and the
//! handles valid while the request exists (MPI's rule for persistent requests).

use std::os::raw::c_int;

use crate::abi::*;
use crate::boundary::{fit_signed, Fail, Res, Wide};
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::{In, Out};
use crate::requests::persistent;
use crate::state::mpi;
use crate::state::ReqEntry;
use crate::{mpi_fn, mpi_fn_c};

/// A copy of an argument array of `n` entries (none for a null pointer: an array that is
/// not significant at this rank).
fn keep<T: Copy>(p: In<T>, n: usize) -> Result<Option<Vec<T>>, Fail> {
    if p.addr() == 0 {
        return Ok(None);
    }
    Ok(Some(p.slice(n, "array")?.to_vec()))
}

/// A copy of a count or displacement array in the large-count form's type, which every
/// `MPI_Start` passes to the `_c` non-blocking form.
fn keep_as<W: TryFrom<i64>, T: Wide>(p: In<T>, n: usize) -> Result<Option<Vec<W>>, Fail> {
    let Some(v) = keep(p, n)? else {
        return Ok(None);
    };
    let wide = v.iter().map(|x| fit_signed(x.wide(), "an array entry"));
    Ok(Some(wide.collect::<Result<_, Fail>>()?))
}

/// The copy, as the non-blocking form takes its array (null: not significant here).
fn at<T>(v: &Option<Vec<T>>) -> In<T> {
    let p = v.as_ref().map_or(std::ptr::null(), |v| v.as_ptr());
    // SAFETY: null, or the copy, which the request's restart closure owns: it outlives
    // every start of the non-blocking form, which reads it during the call only.
    unsafe { In::from_raw(p) }
}

/// The entries of a collective's arrays: one per rank (of the remote group on an
/// intercommunicator).
fn entries(comm: MPI_Comm) -> Result<usize, Fail> {
    Ok(mpi()?.comm(comm)?.peer_size() as usize)
}

/// The entries of a rooted collective's arrays: none except at the root (`MPI_ROOT` on
/// an intercommunicator).
fn root_entries(comm: MPI_Comm, root: c_int) -> Result<usize, Fail> {
    let c = mpi()?.comm(comm)?;
    let at_root = match c.is_inter() {
        true => root == MPI_ROOT,
        false => c.rank() as c_int == root,
    };
    if at_root {
        entries(comm)
    } else {
        Ok(0)
    }
}

/// The entries of a neighbourhood collective's arrays: `(receive side: one per source,
/// send side: one per destination)`.
fn neighbour_entries(comm: MPI_Comm) -> Result<(usize, usize), Fail> {
    let n = mpi()?.comm(comm)?.neighbors()?;
    Ok((n.sources.len(), n.destinations.len()))
}

/// Makes the persistent request: reserves its collective's tag now, so that it matches in
/// the order of the init calls (MPI-4), and each MPI_Start runs `start` with that tag.
fn init(request: Out<MPI_Request>, comm: MPI_Comm, start: impl Fn(Out<MPI_Request>) -> Res + 'static) -> Res {
    let tag = mpi()?.comm(comm)?.reserve_coll_tag();
    persistent(
        request,
        Box::new(move || mpi()?.comm(comm)?.with_coll_tag(tag, || restart(comm, &start))),
    )
}

/// Starts the non-blocking form on a request of its own and takes its entry back for the
/// persistent request; its failure goes to `comm`'s error handler.
fn restart(comm: MPI_Comm, start: &dyn Fn(Out<MPI_Request>) -> Res) -> Result<ReqEntry, Fail> {
    let mut h = MPI_REQUEST_NULL;
    // SAFETY: a local request handle, valid while `start` runs.
    start(unsafe { Out::from_raw(&mut h) }).map_err(|f| match f.on {
        Some(_) => f,
        None => f.on(comm),
    })?;
    mpi()?
        .reqs
        .borrow_mut()
        .remove(h)
        .ok_or_else(|| Fail::new(MPI_ERR_INTERN, "the started collective left no request"))
}

mpi_fn_c! {
    fn MPI_Allgather_init | MPI_Allgather_init_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        crate::info::accepted(info)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Iallgather_c::body(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Allgatherv_init | MPI_Allgatherv_init_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, displs: In<Displ>, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        crate::info::accepted(info)?;
        let n = entries(comm)?;
        let recvcounts = keep_as::<MPI_Count, _>(recvcounts, n)?;
        let displs = keep_as::<MPI_Aint, _>(displs, n)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Iallgatherv_c::body(sendbuf, sendcount, sendtype, recvbuf, at(&recvcounts), at(&displs), recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Allreduce_init | MPI_Allreduce_init_c(sendbuf: SendBuf, recvbuf: RecvBuf, n: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        crate::info::accepted(info)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Iallreduce_c::body(sendbuf, recvbuf, n, datatype, op, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Alltoall_init | MPI_Alltoall_init_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        crate::info::accepted(info)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Ialltoall_c::body(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Alltoallv_init | MPI_Alltoallv_init_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<Displ>, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<Displ>, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        crate::info::accepted(info)?;
        let n = entries(comm)?;
        let sendcounts = keep_as::<MPI_Count, _>(sendcounts, n)?;
        let sdispls = keep_as::<MPI_Aint, _>(sdispls, n)?;
        let recvcounts = keep_as::<MPI_Count, _>(recvcounts, n)?;
        let rdispls = keep_as::<MPI_Aint, _>(rdispls, n)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Ialltoallv_c::body(sendbuf, at(&sendcounts), at(&sdispls), sendtype, recvbuf, at(&recvcounts), at(&rdispls), recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Alltoallw_init | MPI_Alltoallw_init_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<Displ>, sendtypes: In<MPI_Datatype>, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<Displ>, recvtypes: In<MPI_Datatype>, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        crate::info::accepted(info)?;
        let n = entries(comm)?;
        let sendcounts = keep_as::<MPI_Count, _>(sendcounts, n)?;
        let sdispls = keep_as::<MPI_Aint, _>(sdispls, n)?;
        let sendtypes = keep(sendtypes, n)?;
        let recvcounts = keep_as::<MPI_Count, _>(recvcounts, n)?;
        let rdispls = keep_as::<MPI_Aint, _>(rdispls, n)?;
        let recvtypes = keep(recvtypes, n)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Ialltoallw_c::body(sendbuf, at(&sendcounts), at(&sdispls), at(&sendtypes), recvbuf, at(&recvcounts), at(&rdispls), at(&recvtypes), comm, r))
    }
}

mpi_fn! {
    fn MPI_Barrier_init(comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        crate::info::accepted(info)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Ibarrier::body(comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Bcast_init | MPI_Bcast_init_c(buffer: RecvBuf, n: Count, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        crate::info::accepted(info)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Ibcast_c::body(buffer, n, datatype, root, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Exscan_init | MPI_Exscan_init_c(sendbuf: SendBuf, recvbuf: RecvBuf, n: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        crate::info::accepted(info)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Iexscan_c::body(sendbuf, recvbuf, n, datatype, op, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Gather_init | MPI_Gather_init_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        crate::info::accepted(info)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Igather_c::body(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Gatherv_init | MPI_Gatherv_init_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, displs: In<Displ>, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        crate::info::accepted(info)?;
        // Significant at the root only (others may pass anything).
        let n = root_entries(comm, root)?;
        let recvcounts = keep_as::<MPI_Count, _>(recvcounts, n)?;
        let displs = keep_as::<MPI_Aint, _>(displs, n)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Igatherv_c::body(sendbuf, sendcount, sendtype, recvbuf, at(&recvcounts), at(&displs), recvtype, root, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_allgather_init | MPI_Neighbor_allgather_init_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        crate::info::accepted(info)?;
        init(request, comm, move |r| crate::neighbor::MPI_Ineighbor_allgather_c::body(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_allgatherv_init | MPI_Neighbor_allgatherv_init_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, displs: In<Displ>, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        crate::info::accepted(info)?;
        let (n_in, _) = neighbour_entries(comm)?;
        let recvcounts = keep_as::<MPI_Count, _>(recvcounts, n_in)?;
        let displs = keep_as::<MPI_Aint, _>(displs, n_in)?;
        init(request, comm, move |r| crate::neighbor::MPI_Ineighbor_allgatherv_c::body(sendbuf, sendcount, sendtype, recvbuf, at(&recvcounts), at(&displs), recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_alltoall_init | MPI_Neighbor_alltoall_init_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        crate::info::accepted(info)?;
        init(request, comm, move |r| crate::neighbor::MPI_Ineighbor_alltoall_c::body(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_alltoallv_init | MPI_Neighbor_alltoallv_init_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<Displ>, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<Displ>, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        crate::info::accepted(info)?;
        let (n_in, n_out) = neighbour_entries(comm)?;
        let sendcounts = keep_as::<MPI_Count, _>(sendcounts, n_out)?;
        let sdispls = keep_as::<MPI_Aint, _>(sdispls, n_out)?;
        let recvcounts = keep_as::<MPI_Count, _>(recvcounts, n_in)?;
        let rdispls = keep_as::<MPI_Aint, _>(rdispls, n_in)?;
        init(request, comm, move |r| crate::neighbor::MPI_Ineighbor_alltoallv_c::body(sendbuf, at(&sendcounts), at(&sdispls), sendtype, recvbuf, at(&recvcounts), at(&rdispls), recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Reduce_init | MPI_Reduce_init_c(sendbuf: SendBuf, recvbuf: RecvBuf, n: Count, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        crate::info::accepted(info)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Ireduce_c::body(sendbuf, recvbuf, n, datatype, op, root, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Reduce_scatter_block_init | MPI_Reduce_scatter_block_init_c(sendbuf: SendBuf, recvbuf: RecvBuf, recvcount: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let recvcount = recvcount.wide();
        crate::info::accepted(info)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Ireduce_scatter_block_c::body(sendbuf, recvbuf, recvcount, datatype, op, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Reduce_scatter_init | MPI_Reduce_scatter_init_c(sendbuf: SendBuf, recvbuf: RecvBuf, recvcounts: In<Count>, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        crate::info::accepted(info)?;
        // One count per rank of this group, on an intercommunicator too.
        let n = mpi()?.comm(comm)?.size() as usize;
        let recvcounts = keep_as::<MPI_Count, _>(recvcounts, n)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Ireduce_scatter_c::body(sendbuf, recvbuf, at(&recvcounts), datatype, op, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Scan_init | MPI_Scan_init_c(sendbuf: SendBuf, recvbuf: RecvBuf, n: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        crate::info::accepted(info)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Iscan_c::body(sendbuf, recvbuf, n, datatype, op, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Scatter_init | MPI_Scatter_init_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        crate::info::accepted(info)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Iscatter_c::body(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Scatterv_init | MPI_Scatterv_init_c(sendbuf: SendBuf, sendcounts: In<Count>, displs: In<Displ>, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        let recvcount = recvcount.wide();
        crate::info::accepted(info)?;
        // Significant at the root only (others may pass anything).
        let n = root_entries(comm, root)?;
        let sendcounts = keep_as::<MPI_Count, _>(sendcounts, n)?;
        let displs = keep_as::<MPI_Aint, _>(displs, n)?;
        init(request, comm, move |r| crate::nbcolls::MPI_Iscatterv_c::body(sendbuf, at(&sendcounts), at(&displs), sendtype, recvbuf, recvcount, recvtype, root, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_alltoallw_init | MPI_Neighbor_alltoallw_init_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<MPI_Aint>, sendtypes: In<MPI_Datatype>, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<MPI_Aint>, recvtypes: In<MPI_Datatype>, comm: MPI_Comm, info: MPI_Info, request: Out<MPI_Request>) on comm {
        crate::info::accepted(info)?;
        let (n_in, n_out) = neighbour_entries(comm)?;
        let sendcounts = keep_as::<MPI_Count, _>(sendcounts, n_out)?;
        let sdispls = keep_as::<MPI_Aint, _>(sdispls, n_out)?;
        let sendtypes = keep(sendtypes, n_out)?;
        let recvcounts = keep_as::<MPI_Count, _>(recvcounts, n_in)?;
        let rdispls = keep_as::<MPI_Aint, _>(rdispls, n_in)?;
        let recvtypes = keep(recvtypes, n_in)?;
        init(request, comm, move |r| crate::neighbor::MPI_Ineighbor_alltoallw_c::body(sendbuf, at(&sendcounts), at(&sdispls), at(&sendtypes), recvbuf, at(&recvcounts), at(&rdispls), at(&recvtypes), comm, r))
    }
}
