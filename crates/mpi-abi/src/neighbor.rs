//! Neighbourhood collectives (MPI 4.1 §8.6): each rank exchanges blocks with the
//! neighbours of its topology (`Comm::neighbors`: sources and destinations), planned on
//! packed bytes like every other collective (`Comm::plan_neighbor_alltoallv`). The
//! blocking forms start the non-blocking one and wait for it. The receive side is
//! loaded first, so that the blocks of neighbours off the grid keep what they held.

use pontoon::Comm;

use crate::abi::*;
use crate::boundary::{count, Fail, Res, Wide};
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::{In, Out};
use crate::collargs::Pieces;
use crate::mpi_fn_c;
use crate::requests::blocking;
use crate::started::{blocks, launch, output, pieces_output};
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

#[allow(clippy::too_many_arguments)]
fn start_allgather<C: Wide, D: Wide>(
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: RecvBuf,
    recv: Recv<C, D>,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: Out<MPI_Request>,
) -> Res {
    let m = mpi()?;
    let (c, k, k_out) = comm_and_neighbors(m, comm)?;
    let st = m.committed(sendtype)?;
    let n = count(sendcount, "sendcount")?;
    let inp = sendbuf.lend(n, &st)?;
    let send = vec![(0, (n * st.size()) as usize); k_out];
    match recv {
        Recv::Each(recvcount) => {
            let rt = m.committed(recvtype)?;
            let rn = count(recvcount, "recvcount")?;
            let plan = c.plan_neighbor_alltoallv(&send, &equal(k, (rn * rt.size()) as usize))?;
            let o = output(recvbuf, rn * k as u64, &rt, true)?;
            launch(m, &c, comm, plan, inp, o, request)
        }
        Recv::Pieces(counts, displs) => {
            let pieces = Pieces::uniform(m, recvbuf, k, counts, displs, recvtype)?;
            let plan = c.plan_neighbor_alltoallv(&send, &blocks(&pieces))?;
            let o = pieces_output(pieces, true)?;
            launch(m, &c, comm, plan, inp, o, request)
        }
    }
}

/// A receive side: a count per neighbour, or counts and displacements.
enum Recv<C, D> {
    Each(i64),
    Pieces(In<C>, In<D>),
}

#[allow(clippy::too_many_arguments)]
fn start_alltoall(
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: RecvBuf,
    recvcount: i64,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: Out<MPI_Request>,
) -> Res {
    let m = mpi()?;
    let (c, k_in, k_out) = comm_and_neighbors(m, comm)?;
    let (st, rt) = (m.committed(sendtype)?, m.committed(recvtype)?);
    let (sn, rn) = (count(sendcount, "sendcount")?, count(recvcount, "recvcount")?);
    let plan = c.plan_neighbor_alltoallv(
        &equal(k_out, (sn * st.size()) as usize),
        &equal(k_in, (rn * rt.size()) as usize),
    )?;
    let (inp, o) = (
        sendbuf.lend(sn * k_out as u64, &st)?,
        output(recvbuf, rn * k_in as u64, &rt, true)?,
    );
    launch(m, &c, comm, plan, inp, o, request)
}

/// Starts the exchange of `send` (a piece per destination) and `recv` (a piece per source):
/// the v and w forms, which differ only in how their pieces are described.
fn start_pieces(
    m: &Mpi,
    c: &Comm<'static>,
    comm: MPI_Comm,
    send: Pieces<SendBuf>,
    recv: Pieces<RecvBuf>,
    request: Out<MPI_Request>,
) -> Res {
    let plan = c.plan_neighbor_alltoallv(&blocks(&send), &blocks(&recv))?;
    let (inp, o) = (
        pontoon::lent::Buffer::owned(send.pack()?),
        pieces_output(recv, true)?,
    );
    launch(m, c, comm, plan, inp, o, request)
}

#[allow(clippy::too_many_arguments)]
fn start_alltoallv<C: Wide, D: Wide>(
    sendbuf: SendBuf,
    sendcounts: In<C>,
    sdispls: In<D>,
    sendtype: MPI_Datatype,
    recvbuf: RecvBuf,
    recvcounts: In<C>,
    rdispls: In<D>,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: Out<MPI_Request>,
) -> Res {
    let m = mpi()?;
    let (c, k_in, k_out) = comm_and_neighbors(m, comm)?;
    let (send, recv) = {
        (
            Pieces::uniform(m, sendbuf, k_out, sendcounts, sdispls, sendtype)?,
            Pieces::uniform(m, recvbuf, k_in, recvcounts, rdispls, recvtype)?,
        )
    };
    start_pieces(m, &c, comm, send, recv, request)
}

#[allow(clippy::too_many_arguments)]
fn start_alltoallw<C: Wide, D: Wide>(
    sendbuf: SendBuf,
    sendcounts: In<C>,
    sdispls: In<D>,
    sendtypes: In<MPI_Datatype>,
    recvbuf: RecvBuf,
    recvcounts: In<C>,
    rdispls: In<D>,
    recvtypes: In<MPI_Datatype>,
    comm: MPI_Comm,
    request: Out<MPI_Request>,
) -> Res {
    let m = mpi()?;
    let (c, k_in, k_out) = comm_and_neighbors(m, comm)?;
    let (send, recv) = {
        (
            Pieces::typed(m, sendbuf, k_out, sendcounts, sdispls, sendtypes)?,
            Pieces::typed(m, recvbuf, k_in, recvcounts, rdispls, recvtypes)?,
        )
    };
    start_pieces(m, &c, comm, send, recv, request)
}

mpi_fn_c! {
    fn MPI_Ineighbor_alltoallw | MPI_Ineighbor_alltoallw_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<MPI_Aint>, sendtypes: In<MPI_Datatype>, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<MPI_Aint>, recvtypes: In<MPI_Datatype>, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        request.place("request")?;
        start_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, request)
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_alltoallw | MPI_Neighbor_alltoallw_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<MPI_Aint>, sendtypes: In<MPI_Datatype>, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<MPI_Aint>, recvtypes: In<MPI_Datatype>, comm: MPI_Comm) on comm {
        blocking(|r| start_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Ineighbor_allgather | MPI_Ineighbor_allgather_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        request.place("request")?;
        start_allgather(sendbuf, sendcount, sendtype, recvbuf, Recv::<Count, Displ>::Each(recvcount), recvtype, comm, request)
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_allgather | MPI_Neighbor_allgather_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        blocking(|r| start_allgather(sendbuf, sendcount, sendtype, recvbuf, Recv::<Count, Displ>::Each(recvcount), recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Ineighbor_allgatherv | MPI_Ineighbor_allgatherv_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, displs: In<Displ>, recvtype: MPI_Datatype, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        request.place("request")?;
        start_allgather(sendbuf, sendcount, sendtype, recvbuf, Recv::Pieces(recvcounts, displs), recvtype, comm, request)
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_allgatherv | MPI_Neighbor_allgatherv_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, displs: In<Displ>, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        blocking(|r| start_allgather(sendbuf, sendcount, sendtype, recvbuf, Recv::Pieces(recvcounts, displs), recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Ineighbor_alltoall | MPI_Ineighbor_alltoall_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        request.place("request")?;
        start_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request)
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_alltoall | MPI_Neighbor_alltoall_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        blocking(|r| start_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, r))
    }
}

mpi_fn_c! {
    fn MPI_Ineighbor_alltoallv | MPI_Ineighbor_alltoallv_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<Displ>, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<Displ>, recvtype: MPI_Datatype, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        request.place("request")?;
        start_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request)
    }
}

mpi_fn_c! {
    fn MPI_Neighbor_alltoallv | MPI_Neighbor_alltoallv_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<Displ>, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<Displ>, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        blocking(|r| start_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, r))
    }
}
