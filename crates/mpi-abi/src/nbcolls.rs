//! Non-blocking collectives: each is planned on packed bytes (`pontoon::Plan`) and
//! started on the program's memory when its datatype is dense (nothing copied), or on
//! packed copies that are unpacked when the request completes. The engine's background
//! task advances them while the program does anything else with MPI.

use std::os::raw::c_int;

use pontoon::lent::Buffer;
use pontoon::{Comm, Datatype};

use crate::abi::*;
use crate::boundary::{count, Fail, Res, Wide};
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::{In, Out};
use crate::collargs::{root_rank, Blocks, Reduction, Which};
use crate::intercolls;
use crate::started::{blocks, launch, none, output, pieces_output};
use crate::state::{mpi, Mpi};
use crate::vcollargs::{alltoallv_sides, alltoallw_sides, Exchange, ReduceScatter, ScatterCounts, Varying};
use crate::{mpi_fn, mpi_fn_c};

mpi_fn! {
    fn MPI_Ibarrier(comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return intercolls::barrier(comm, request);
        }
        launch(m, &c, comm, c.plan_barrier(), none(), (none(), None), request)
    }
}

mpi_fn_c! {
    fn MPI_Ibcast | MPI_Ibcast_c(buffer: RecvBuf, n: Count, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return intercolls::bcast(buffer, n, datatype, root, comm, request);
        }
        let dt = m.committed(datatype)?;
        let n = count(n, "count")?;
        let root = root_rank(&c, root)?;
        let plan = c.plan_bcast(root, (n * dt.size()) as usize)?;
        let o = output(buffer, n, &dt, c.rank() == root)?;
        launch(m, &c, comm, plan, none(), o, request)
    }
}

mpi_fn_c! {
    fn MPI_Ireduce | MPI_Ireduce_c(sendbuf: SendBuf, recvbuf: RecvBuf, n: Count, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return intercolls::reduce(sendbuf, recvbuf, n, datatype, op, Some(root), comm, request);
        }
        let r = Reduction::decode(m, &c, sendbuf, n, (datatype, op), Some(root))?;
        let plan = c.plan_reduce(r.root.unwrap_or(0), r.in_place, r.bytes(), &r.dt, &r.op)?;
        let inp = if r.in_place { none() } else { sendbuf.lend(r.n, &r.dt)? };
        let o = if r.lands_at(c.rank()) { output(recvbuf, r.n, &r.dt, r.in_place)? } else { (none(), None) };
        launch(m, &c, comm, plan, inp, o, request)
    }
}

mpi_fn_c! {
    fn MPI_Iallreduce | MPI_Iallreduce_c(sendbuf: SendBuf, recvbuf: RecvBuf, n: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return intercolls::reduce(sendbuf, recvbuf, n, datatype, op, None, comm, request);
        }
        let r = Reduction::decode(m, &c, sendbuf, n, (datatype, op), None)?;
        let plan = c.plan_allreduce(r.in_place, r.bytes(), &r.dt, &r.op)?;
        let inp = if r.in_place { none() } else { sendbuf.lend(r.n, &r.dt)? };
        launch(m, &c, comm, plan, inp, output(recvbuf, r.n, &r.dt, r.in_place)?, request)
    }
}

#[allow(clippy::too_many_arguments)]
fn start_gather_like(
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: RecvBuf,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: Option<c_int>,
    comm: MPI_Comm,
    request: Out<MPI_Request>,
    which: Which,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    if c.is_inter() {
        return intercolls::blocks_of(
            sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request, which,
        );
    }
    let b = Blocks::decode(
        m,
        &c,
        which,
        (sendbuf, sendcount, sendtype),
        (recvbuf, recvcount, recvtype),
        root,
    )?;
    let (p, root, ip, block) = (c.size() as u64, b.root.unwrap_or(0), b.in_place, b.block_bytes());
    let plan = match which {
        Which::Gather => c.plan_gather(root, ip, block)?,
        Which::Allgather => c.plan_allgather(ip, block),
        Which::Alltoall => c.plan_alltoall(ip, block),
        Which::Scatter => c.plan_scatter(root, ip, block)?,
    };
    let inp = match &b.send {
        Some((_, s)) => sendbuf.lend(b.send_count(p), s)?,
        None => none(),
    };
    // What a gather receives in place starts from the buffer's own block.
    let load = ip && which != Which::Scatter;
    let o = match &b.recv {
        Some((_, r)) => output(recvbuf, b.recv_count(p), r, load)?,
        None => (none(), None),
    };
    launch(m, &c, comm, plan, inp, o, request)
}

mpi_fn_c! {
    fn MPI_Igather | MPI_Igather_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        start_gather_like(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, Some(root), comm, request, Which::Gather)
    }
}

mpi_fn_c! {
    fn MPI_Iscatter | MPI_Iscatter_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        start_gather_like(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, Some(root), comm, request, Which::Scatter)
    }
}

mpi_fn_c! {
    fn MPI_Iallgather | MPI_Iallgather_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        start_gather_like(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, None, comm, request, Which::Allgather)
    }
}

mpi_fn_c! {
    fn MPI_Ialltoall | MPI_Ialltoall_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        start_gather_like(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, None, comm, request, Which::Alltoall)
    }
}

/// The one block a `v` collective sends, lent to the engine with its packed length, if
/// it sends one.
fn lent_block(sendbuf: SendBuf, block: &Option<(u64, Datatype)>) -> Result<(Buffer, Option<usize>), Fail> {
    match block {
        Some((n, st)) => Ok((sendbuf.lend(*n, st)?, Some((n * st.size()) as usize))),
        None => Ok((none(), None)),
    }
}

mpi_fn_c! {
    fn MPI_Igatherv | MPI_Igatherv_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, displs: In<Displ>, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return intercolls::gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, request);
        }
        let v = Varying::gathering(m, &c, (sendbuf, sendcount, sendtype), (recvbuf, recvcounts, displs, recvtype), Some(root))?;
        let root = v.root.unwrap_or_default();
        let (inp, send_len) = lent_block(sendbuf, &v.block)?;
        let Some(pieces) = v.pieces else {
            let plan = c.plan_gatherv(root, send_len, &[])?;
            return launch(m, &c, comm, plan, inp, (none(), None), request);
        };
        let plan = c.plan_gatherv(root, send_len, &blocks(&pieces))?;
        launch(m, &c, comm, plan, inp, pieces_output(pieces, v.in_place)?, request)
    }
}

mpi_fn_c! {
    fn MPI_Iscatterv | MPI_Iscatterv_c(sendbuf: SendBuf, sendcounts: In<Count>, displs: In<Displ>, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let recvcount = recvcount.wide();
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return intercolls::scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, request);
        }
        let v = Varying::scattering(m, &c, (sendbuf, sendcounts, displs, sendtype), (recvbuf, recvcount, recvtype), root)?;
        let root = v.root.unwrap_or_default();
        let (inp, bl) = match &v.pieces {
            Some(pieces) => (Buffer::owned(pieces.pack()?), blocks(pieces)),
            None => (none(), Vec::new()),
        };
        let plan = c.plan_scatterv(root, &bl, v.block_bytes())?;
        let out = match &v.block {
            Some((n, rt)) => output(recvbuf, *n, rt, false)?,
            None => (none(), None),
        };
        launch(m, &c, comm, plan, inp, out, request)
    }
}

mpi_fn_c! {
    fn MPI_Iallgatherv | MPI_Iallgatherv_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, displs: In<Displ>, recvtype: MPI_Datatype, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return intercolls::allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, request);
        }
        let mut v = Varying::gathering(m, &c, (sendbuf, sendcount, sendtype), (recvbuf, recvcounts, displs, recvtype), None)?;
        let (inp, send_len) = lent_block(sendbuf, &v.block)?;
        let pieces = v.every_rank_pieces()?;
        let plan = c.plan_allgatherv(send_len, &blocks(&pieces))?;
        launch(m, &c, comm, plan, inp, pieces_output(pieces, v.in_place)?, request)
    }
}

fn start_alltoall_pieces(
    m: &Mpi,
    c: &Comm<'static>,
    comm: MPI_Comm,
    (send, recv): Exchange,
    request: Out<MPI_Request>,
) -> Res {
    if c.is_inter() {
        return intercolls::alltoall_pieces(comm, send, recv, request);
    }
    let sblocks = send.as_ref().map(blocks);
    let plan = c.plan_alltoallv(sblocks.as_deref(), &blocks(&recv))?;
    let inp = match &send {
        Some(s) => Buffer::owned(s.pack()?),
        None => none(),
    };
    let o = pieces_output(recv, send.is_none())?;
    launch(m, c, comm, plan, inp, o, request)
}

mpi_fn_c! {
    fn MPI_Ialltoallv | MPI_Ialltoallv_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<Displ>, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<Displ>, recvtype: MPI_Datatype, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let m = mpi()?;
        let c = m.comm(comm)?;
        let sides = alltoallv_sides(m, &c, (sendbuf, sendcounts, sdispls, sendtype), (recvbuf, recvcounts, rdispls, recvtype))?;
        start_alltoall_pieces(m, &c, comm, sides, request)
    }
}

mpi_fn_c! {
    fn MPI_Ialltoallw | MPI_Ialltoallw_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<Displ>, sendtypes: In<MPI_Datatype>, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<Displ>, recvtypes: In<MPI_Datatype>, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let m = mpi()?;
        let c = m.comm(comm)?;
        let sides = alltoallw_sides(m, &c, (sendbuf, sendcounts, sdispls, sendtypes), (recvbuf, recvcounts, rdispls, recvtypes))?;
        start_alltoall_pieces(m, &c, comm, sides, request)
    }
}

fn start_reduce_scatter<C: Wide>(
    sendbuf: SendBuf,
    recvbuf: RecvBuf,
    counts: ScatterCounts<C>,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    request: Out<MPI_Request>,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    if c.is_inter() {
        return intercolls::reduce_scatter(sendbuf, recvbuf, counts, datatype, op, comm, request);
    }
    let rs = ReduceScatter::decode(m, &c, sendbuf, counts, (datatype, op))?;
    let ip = rs.in_place;
    let plan = c.plan_reduce_scatter(ip, &rs.byte_counts(), &rs.dt, &rs.op)?;
    let inp = if ip {
        none()
    } else {
        sendbuf.lend(rs.total(), &rs.dt)?
    };
    let o = output(
        recvbuf,
        if ip { rs.total() } else { rs.mine(c.rank()) },
        &rs.dt,
        ip,
    )?;
    launch(m, &c, comm, plan, inp, o, request)
}

mpi_fn_c! {
    fn MPI_Ireduce_scatter_block | MPI_Ireduce_scatter_block_c(sendbuf: SendBuf, recvbuf: RecvBuf, recvcount: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        start_reduce_scatter::<Count>(sendbuf, recvbuf, ScatterCounts::Each(recvcount.wide()), datatype, op, comm, request)
    }
}

mpi_fn_c! {
    fn MPI_Ireduce_scatter | MPI_Ireduce_scatter_c(sendbuf: SendBuf, recvbuf: RecvBuf, recvcounts: In<Count>, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        start_reduce_scatter(sendbuf, recvbuf, ScatterCounts::PerRank(recvcounts), datatype, op, comm, request)
    }
}

#[allow(clippy::too_many_arguments)]
fn start_scan(
    sendbuf: SendBuf,
    recvbuf: RecvBuf,
    n: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    request: Out<MPI_Request>,
    exclusive: bool,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let r = Reduction::decode(m, &c, sendbuf, n, (datatype, op), None)?;
    let plan = c.plan_scan(r.in_place, r.bytes(), &r.dt, &r.op, exclusive)?;
    let inp = if r.in_place {
        none()
    } else {
        sendbuf.lend(r.n, &r.dt)?
    };
    // Exscan leaves rank 0's buffer as it was: a packed copy starts from it.
    let o = output(recvbuf, r.n, &r.dt, r.in_place || exclusive)?;
    launch(m, &c, comm, plan, inp, o, request)
}

mpi_fn_c! {
    fn MPI_Iscan | MPI_Iscan_c(sendbuf: SendBuf, recvbuf: RecvBuf, n: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        start_scan(sendbuf, recvbuf, n, datatype, op, comm, request, false)
    }
}

mpi_fn_c! {
    fn MPI_Iexscan | MPI_Iexscan_c(sendbuf: SendBuf, recvbuf: RecvBuf, n: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        start_scan(sendbuf, recvbuf, n, datatype, op, comm, request, true)
    }
}
