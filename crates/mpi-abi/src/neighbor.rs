//! Neighbourhood collectives (MPI 4.1 §8.6): each rank exchanges blocks with the
//! neighbours of its topology (`Comm::neighbors`: sources and destinations), planned on
//! packed bytes like every other collective (`Comm::plan_neighbor_alltoallv`). The
//! blocking forms start the non-blocking one and wait for it. The receive side is
//! loaded first, so that the blocks of neighbours off the grid keep what they held.

use std::ffi::c_void;

use pontoon::Comm;

use crate::abi::*;
use crate::boundary::{count, out, Fail, Res, Wide};
use crate::collargs::Pieces;
use crate::mpi_fn_c;
use crate::requests::blocking;
use crate::started::{blocks, input, launch, output, pieces_output};
use crate::state::{mpi, Mpi};

/// `k` blocks of `bytes` back to back.
fn equal(k: usize, bytes: usize) -> Vec<(usize, usize)> {
    (0..k).map(|i| (i * bytes, bytes)).collect()
}

/// The communicator, its number of sources (receive blocks) and of destinations (send
/// blocks).
fn comm_and_neighbors(m: &Mpi, comm: MPI_Comm) -> Result<(Comm<'static>, usize, usize), Fail> {
    let c = m.comm(comm)?;
    let n = c.neighbors()?;
    Ok((c, n.sources.len(), n.destinations.len()))
}

/// # Safety
/// The caller's buffers hold what the counts and datatypes describe, untouched until
/// the request completes (MPI's contract).
#[allow(clippy::too_many_arguments)]
unsafe fn start_allgather<C: Wide, D: Wide>(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recv: Recv<C, D>,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Res {
    let m = mpi()?;
    let (c, k, k_out) = comm_and_neighbors(m, comm)?;
    let st = m.committed(sendtype)?;
    let n = count(sendcount, "sendcount")?;
    // SAFETY: the program's send buffer, valid for what its count and datatype describe and
    // untouched until completion (MPI's contract).
    let inp = unsafe { input(sendbuf, n, &st)? };
    let send = vec![(0, (n * st.size()) as usize); k_out];
    match recv {
        Recv::Each(recvcount) => {
            let rt = m.committed(recvtype)?;
            let rn = count(recvcount, "recvcount")?;
            let plan = c.plan_neighbor_alltoallv(&send, &equal(k, (rn * rt.size()) as usize))?;
            // SAFETY: the program's receive buffer or array, valid for what its count and datatype
            // describe and untouched until completion (MPI's contract).
            let o = unsafe { output(recvbuf, rn * k as u64, &rt, true)? };
            launch(m, &c, comm, plan, inp, o, request)
        }
        Recv::Pieces(counts, displs) => {
            // SAFETY: the program's buffer and its counts and displacements arrays, one per
            // neighbour (MPI's contract).
            let pieces = unsafe { Pieces::uniform(m, recvbuf, k, counts, displs, recvtype)? };
            let plan = c.plan_neighbor_alltoallv(&send, &blocks(&pieces))?;
            // SAFETY: the program's receive buffer or array, valid for what its count and datatype
            // describe and untouched until completion (MPI's contract).
            let o = unsafe { pieces_output(pieces, true)? };
            launch(m, &c, comm, plan, inp, o, request)
        }
    }
}

/// A receive side: a count per neighbour, or counts and displacements.
enum Recv<C, D> {
    Each(i64),
    Pieces(*const C, *const D),
}

/// # Safety
/// As [`start_allgather`].
#[allow(clippy::too_many_arguments)]
unsafe fn start_alltoall(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Res {
    let m = mpi()?;
    let (c, k_in, k_out) = comm_and_neighbors(m, comm)?;
    let (st, rt) = (m.committed(sendtype)?, m.committed(recvtype)?);
    let (sn, rn) = (count(sendcount, "sendcount")?, count(recvcount, "recvcount")?);
    let plan = c.plan_neighbor_alltoallv(
        &equal(k_out, (sn * st.size()) as usize),
        &equal(k_in, (rn * rt.size()) as usize),
    )?;
    // SAFETY: as documented.
    let (inp, o) = unsafe {
        (
            input(sendbuf, sn * k_out as u64, &st)?,
            output(recvbuf, rn * k_in as u64, &rt, true)?,
        )
    };
    launch(m, &c, comm, plan, inp, o, request)
}

/// Starts the exchange of `send` (a piece per destination) and `recv` (a piece per source):
/// the v and w forms, which differ only in how their pieces are described.
fn start_pieces(
    m: &Mpi,
    c: &Comm<'static>,
    comm: MPI_Comm,
    send: Pieces,
    recv: Pieces,
    request: *mut MPI_Request,
) -> Res {
    let plan = c.plan_neighbor_alltoallv(&blocks(&send), &blocks(&recv))?;
    // SAFETY: the pieces are the program's memory, untouched until completion (MPI's contract).
    let (inp, o) = unsafe {
        (
            pontoon::lent::Buffer::owned(send.pack()?),
            pieces_output(recv, true)?,
        )
    };
    launch(m, c, comm, plan, inp, o, request)
}

/// # Safety
/// As [`start_allgather`]; the send arrays hold one entry per destination, the receive
/// arrays one per source.
#[allow(clippy::too_many_arguments)]
unsafe fn start_alltoallv<C: Wide, D: Wide>(
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const D,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const D,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Res {
    let m = mpi()?;
    let (c, k_in, k_out) = comm_and_neighbors(m, comm)?;
    // SAFETY: as documented.
    let (send, recv) = unsafe {
        (
            Pieces::uniform(m, sendbuf, k_out, sendcounts, sdispls, sendtype)?,
            Pieces::uniform(m, recvbuf, k_in, recvcounts, rdispls, recvtype)?,
        )
    };
    start_pieces(m, &c, comm, send, recv, request)
}

/// # Safety
/// As [`start_alltoallv`], with a datatype per piece and byte displacements.
#[allow(clippy::too_many_arguments)]
unsafe fn start_alltoallw<C: Wide, D: Wide>(
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const D,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const D,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Res {
    let m = mpi()?;
    let (c, k_in, k_out) = comm_and_neighbors(m, comm)?;
    // SAFETY: as documented.
    let (send, recv) = unsafe {
        (
            Pieces::typed(m, sendbuf, k_out, sendcounts, sdispls, sendtypes)?,
            Pieces::typed(m, recvbuf, k_in, recvcounts, rdispls, recvtypes)?,
        )
    };
    start_pieces(m, &c, comm, send, recv, request)
}

mpi_fn_c! {
    fn MPI_Ineighbor_alltoallw | MPI_Ineighbor_alltoallw_c(sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const MPI_Aint, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Count, rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        out(request, "request")?;
        start_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, request)
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_alltoallw | MPI_Neighbor_alltoallw_c(sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const MPI_Aint, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Count, rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm) on comm {
        blocking(|r| start_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Ineighbor_allgather | MPI_Ineighbor_allgather_c(sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        out(request, "request")?;
        start_allgather(sendbuf, sendcount, sendtype, recvbuf, Recv::<Count, Displ>::Each(recvcount), recvtype, comm, request)
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_allgather | MPI_Neighbor_allgather_c(sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        blocking(|r| start_allgather(sendbuf, sendcount, sendtype, recvbuf, Recv::<Count, Displ>::Each(recvcount), recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Ineighbor_allgatherv | MPI_Ineighbor_allgatherv_c(sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Count, displs: *const Displ, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        let sendcount = sendcount.wide();
        out(request, "request")?;
        start_allgather(sendbuf, sendcount, sendtype, recvbuf, Recv::Pieces(recvcounts, displs), recvtype, comm, request)
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_allgatherv | MPI_Neighbor_allgatherv_c(sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Count, displs: *const Displ, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        blocking(|r| start_allgather(sendbuf, sendcount, sendtype, recvbuf, Recv::Pieces(recvcounts, displs), recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Ineighbor_alltoall | MPI_Ineighbor_alltoall_c(sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        out(request, "request")?;
        start_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request)
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_alltoall | MPI_Neighbor_alltoall_c(sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        blocking(|r| start_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Ineighbor_alltoallv | MPI_Ineighbor_alltoallv_c(sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Displ, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Count, rdispls: *const Displ, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        out(request, "request")?;
        start_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request)
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_alltoallv | MPI_Neighbor_alltoallv_c(sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Displ, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Count, rdispls: *const Displ, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        blocking(|r| start_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, r))
    }
}
