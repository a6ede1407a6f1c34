//! Neighbourhood collectives (MPI 4.1 §8.6): each rank exchanges blocks with the
//! neighbours of its topology (`Comm::neighbors`: sources and destinations), planned on
//! packed bytes like every other collective (`Comm::plan_neighbor_alltoallv`). The
//! blocking forms start the non-blocking one and wait for it. The receive side is
//! loaded first, so that the blocks of neighbours off the grid keep what they held.

use std::ffi::c_void;
use std::os::raw::c_int;

use pontoon::Comm;

use crate::abi::*;
use crate::boundary::{count, out, Fail, Res};
use crate::mpi_fn;
use crate::nbcolls::{blocks, input, launch, output, pieces_output};
use crate::requests::blocking;
use crate::state::{mpi, Mpi};
use crate::vcolls::Pieces;

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
unsafe fn start_allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recv: Recv,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Res {
    let m = mpi()?;
    let (c, k, k_out) = comm_and_neighbors(m, comm)?;
    let st = m.committed(sendtype)?;
    let n = count(sendcount as i64, "sendcount")?;
    // SAFETY (both blocks): as documented.
    let inp = unsafe { input(sendbuf, n, &st)? };
    let send = vec![(0, (n * st.size()) as usize); k_out];
    match recv {
        Recv::Each(recvcount) => {
            let rt = m.committed(recvtype)?;
            let rn = count(recvcount as i64, "recvcount")?;
            let plan = c.plan_neighbor_alltoallv(&send, &equal(k, (rn * rt.size()) as usize))?;
            let o = unsafe { output(recvbuf, rn * k as u64, &rt, true)? };
            launch(m, &c, comm, plan, inp, o, request)
        }
        Recv::Pieces(counts, displs) => {
            let pieces = unsafe { Pieces::uniform(m, recvbuf, k, counts, displs, recvtype)? };
            let plan = c.plan_neighbor_alltoallv(&send, &blocks(&pieces))?;
            let o = unsafe { pieces_output(pieces, true)? };
            launch(m, &c, comm, plan, inp, o, request)
        }
    }
}

/// A receive side: a count per neighbour, or counts and displacements.
enum Recv {
    Each(c_int),
    Pieces(*const c_int, *const c_int),
}

/// # Safety
/// As [`start_allgather`].
#[allow(clippy::too_many_arguments)]
unsafe fn start_alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Res {
    let m = mpi()?;
    let (c, k_in, k_out) = comm_and_neighbors(m, comm)?;
    let (st, rt) = (m.committed(sendtype)?, m.committed(recvtype)?);
    let (sn, rn) = (
        count(sendcount as i64, "sendcount")?,
        count(recvcount as i64, "recvcount")?,
    );
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
unsafe fn start_alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
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
unsafe fn start_alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const MPI_Aint,
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

mpi_fn! {
    fn MPI_Ineighbor_alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const MPI_Aint, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        out(request, "request")?;
        start_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, request)
    }
}

mpi_fn! {
    fn MPI_Neighbor_alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const MPI_Aint, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm) on comm {
        blocking(|r| start_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, r))
    }
}

mpi_fn! {
    fn MPI_Ineighbor_allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        out(request, "request")?;
        start_allgather(sendbuf, sendcount, sendtype, recvbuf, Recv::Each(recvcount), recvtype, comm, request)
    }
}

mpi_fn! {
    fn MPI_Neighbor_allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        blocking(|r| start_allgather(sendbuf, sendcount, sendtype, recvbuf, Recv::Each(recvcount), recvtype, comm, r))
    }
}

mpi_fn! {
    fn MPI_Ineighbor_allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        out(request, "request")?;
        start_allgather(sendbuf, sendcount, sendtype, recvbuf, Recv::Pieces(recvcounts, displs), recvtype, comm, request)
    }
}

mpi_fn! {
    fn MPI_Neighbor_allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        blocking(|r| start_allgather(sendbuf, sendcount, sendtype, recvbuf, Recv::Pieces(recvcounts, displs), recvtype, comm, r))
    }
}

mpi_fn! {
    fn MPI_Ineighbor_alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        out(request, "request")?;
        start_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request)
    }
}

mpi_fn! {
    fn MPI_Neighbor_alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        blocking(|r| start_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, r))
    }
}

mpi_fn! {
    fn MPI_Ineighbor_alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        out(request, "request")?;
        start_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request)
    }
}

mpi_fn! {
    fn MPI_Neighbor_alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        blocking(|r| start_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, r))
    }
}
