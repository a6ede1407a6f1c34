//! Collectives on intercommunicators (MPI 4.1 §6.2.2): each is planned over both groups
//! (`pontoon::InterColl`) and started like a non-blocking collective; the blocking
//! forms wait for it, the persistent ones start it at each `MPI_Start`.
//!
//! The arguments that count follow the root: at `MPI_ROOT` the root's side (its receive
//! side for gathers, its send side for scatters), at `MPI_PROC_NULL` none, in the other
//! group the other side. `MPI_IN_PLACE` is not allowed on an intercommunicator.

use std::os::raw::c_int;

use pontoon::{Comm, InterColl, InterRoot};

use crate::abi::*;
use crate::boundary::{count, fail, Fail, Res, Wide};
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::{In, Out};
use crate::collargs::{Pieces, Which};
use crate::comms::inter_root;
use crate::started::{blocks, launch, none, output, pieces_output};
use crate::state::Finish;
use crate::state::{mpi, Mpi};
use crate::vcollargs::{ReduceScatter, ScatterCounts};

/// Fails on `MPI_IN_PLACE`, which no intercommunicator collective takes.
fn not_in_place(in_place: &[bool]) -> Res {
    match in_place.iter().any(|&b| b) {
        true => in_place_refused(),
        false => Ok(()),
    }
}

fn in_place_refused() -> Res {
    fail(
        MPI_ERR_BUFFER,
        "MPI_IN_PLACE is not allowed on an intercommunicator",
    )
}

type Landing = (pontoon::lent::Buffer, Option<Finish>);

/// Plans `what` and starts it on `inp` and `out`.
#[allow(clippy::too_many_arguments)]
fn go(
    m: &Mpi,
    c: &Comm<'static>,
    comm: MPI_Comm,
    what: InterColl,
    reduction: Option<(&pontoon::Op, &pontoon::Datatype)>,
    inp: pontoon::lent::Buffer,
    out: Landing,
    request: Out<MPI_Request>,
) -> Res {
    let plan = c.plan_inter(&what, reduction)?;
    launch(m, c, comm, plan, inp, out, request)
}

pub(crate) fn barrier(comm: MPI_Comm, request: Out<MPI_Request>) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    go(
        m,
        &c,
        comm,
        InterColl::Barrier,
        None,
        none(),
        (none(), None),
        request,
    )
}

pub(crate) fn bcast(
    buffer: RecvBuf,
    n: i64,
    datatype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: Out<MPI_Request>,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let root = inter_root(&c, root)?;
    let (out, bytes) = match root {
        InterRoot::ElsewhereHere => ((none(), None), 0),
        _ => {
            let dt = m.committed(datatype)?;
            let n = count(n, "count")?;
            let o = output(buffer, n, &dt, root == InterRoot::Here)?;
            (o, (n * dt.size()) as usize)
        }
    };
    go(
        m,
        &c,
        comm,
        InterColl::Bcast { root, bytes },
        None,
        none(),
        out,
        request,
    )
}

/// Reduce (`root` Some) or allreduce.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce(
    sendbuf: SendBuf,
    recvbuf: RecvBuf,
    n: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: Option<c_int>,
    comm: MPI_Comm,
    request: Out<MPI_Request>,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    not_in_place(&[sendbuf.in_place(), recvbuf.in_place()])?;
    let root = root.map(|r| inter_root(&c, r)).transpose()?;
    if root == Some(InterRoot::ElsewhereHere) {
        return go(
            m,
            &c,
            comm,
            InterColl::Reduce {
                root: InterRoot::ElsewhereHere,
                bytes: 0,
            },
            None,
            none(),
            (none(), None),
            request,
        );
    }
    let (dt, op) = (m.committed(datatype)?, m.op(op)?);
    let n = count(n, "count")?;
    let bytes = (n * dt.size()) as usize;
    let sends = root != Some(InterRoot::Here);
    let receives = matches!(root, None | Some(InterRoot::Here));
    let inp = if sends { sendbuf.lend(n, &dt)? } else { none() };
    let out = if receives {
        output(recvbuf, n, &dt, false)?
    } else {
        (none(), None)
    };
    let what = match root {
        Some(root) => InterColl::Reduce { root, bytes },
        None => InterColl::Allreduce { bytes },
    };
    go(m, &c, comm, what, Some((&op, &dt)), inp, out, request)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn blocks_of(
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
    let root = root.map(|r| inter_root(&c, r)).transpose()?;
    let r = u64::from(c.remote_size()?);
    // Which sides count here, and how many blocks each holds.
    let (send_blocks, recv_blocks) = match (which, root) {
        (_, Some(InterRoot::ElsewhereHere)) => (None, None),
        (Which::Gather, Some(InterRoot::Here)) => (None, Some(r)),
        (Which::Gather, _) => (Some(1), None),
        (Which::Scatter, Some(InterRoot::Here)) => (Some(r), None),
        (Which::Scatter, _) => (None, Some(1)),
        (Which::Allgather, _) => (Some(1), Some(r)),
        (Which::Alltoall, _) => (Some(r), Some(r)),
    };
    if send_blocks.is_some() {
        not_in_place(&[sendbuf.in_place()])?;
    }
    if recv_blocks.is_some() {
        not_in_place(&[recvbuf.in_place()])?;
    }
    let (mut send, mut recv) = (0, 0);
    let inp = match send_blocks {
        Some(k) => {
            let st = m.committed(sendtype)?;
            let n = count(sendcount, "sendcount")?;
            send = (n * st.size()) as usize;
            sendbuf.lend(n * k, &st)?
        }
        None => none(),
    };
    let out = match recv_blocks {
        Some(k) => {
            let rt = m.committed(recvtype)?;
            let n = count(recvcount, "recvcount")?;
            recv = (n * rt.size()) as usize;
            output(recvbuf, n * k, &rt, false)?
        }
        None => (none(), None),
    };
    let root = root.unwrap_or(InterRoot::ElsewhereHere);
    let what = match which {
        Which::Gather => InterColl::Gather { root, send, recv },
        Which::Scatter => InterColl::Scatter { root, send, recv },
        Which::Allgather => InterColl::Allgather { send, recv },
        Which::Alltoall => {
            let each = |n: usize| (0..r as usize).map(|j| (j * n, n)).collect();
            InterColl::Alltoallv {
                send: each(send),
                recv: each(recv),
            }
        }
    };
    go(m, &c, comm, what, None, inp, out, request)
}

/// One block of `n` elements of `dt` at `buf`: the send side of the v forms.
fn one_block(
    m: &Mpi,
    buf: SendBuf,
    n: i64,
    dt: MPI_Datatype,
) -> Result<(pontoon::lent::Buffer, usize), Fail> {
    not_in_place(&[buf.in_place()])?;
    let dt = m.committed(dt)?;
    let n = count(n, "sendcount")?;
    Ok((buf.lend(n, &dt)?, (n * dt.size()) as usize))
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn gatherv<C: Wide, D: Wide>(
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: RecvBuf,
    recvcounts: In<C>,
    displs: In<D>,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: Out<MPI_Request>,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let root = inter_root(&c, root)?;
    let (what, inp, out) = match root {
        InterRoot::Here => {
            not_in_place(&[recvbuf.in_place()])?;
            let pieces = Pieces::uniform(
                m,
                recvbuf,
                c.remote_size()? as usize,
                recvcounts,
                displs,
                recvtype,
            )?;
            let what = InterColl::Gatherv {
                root,
                send: 0,
                blocks: blocks(&pieces),
            };
            (what, none(), pieces_output(pieces, false)?)
        }
        InterRoot::ElsewhereHere => (
            InterColl::Gatherv {
                root,
                send: 0,
                blocks: Vec::new(),
            },
            none(),
            (none(), None),
        ),
        InterRoot::Remote(_) => {
            let (inp, send) = one_block(m, sendbuf, sendcount, sendtype)?;
            (
                InterColl::Gatherv {
                    root,
                    send,
                    blocks: Vec::new(),
                },
                inp,
                (none(), None),
            )
        }
    };
    go(m, &c, comm, what, None, inp, out, request)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn scatterv<C: Wide, D: Wide>(
    sendbuf: SendBuf,
    sendcounts: In<C>,
    displs: In<D>,
    sendtype: MPI_Datatype,
    recvbuf: RecvBuf,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: Out<MPI_Request>,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let root = inter_root(&c, root)?;
    let (what, inp, out) = match root {
        InterRoot::Here => {
            not_in_place(&[sendbuf.in_place()])?;
            let pieces = Pieces::uniform(
                m,
                sendbuf,
                c.remote_size()? as usize,
                sendcounts,
                displs,
                sendtype,
            )?;
            let inp = pontoon::lent::Buffer::owned(pieces.pack()?);
            (
                InterColl::Scatterv {
                    root,
                    blocks: blocks(&pieces),
                    recv: 0,
                },
                inp,
                (none(), None),
            )
        }
        InterRoot::ElsewhereHere => (
            InterColl::Scatterv {
                root,
                blocks: Vec::new(),
                recv: 0,
            },
            none(),
            (none(), None),
        ),
        InterRoot::Remote(_) => {
            not_in_place(&[recvbuf.in_place()])?;
            let rt = m.committed(recvtype)?;
            let n = count(recvcount, "recvcount")?;
            let out = output(recvbuf, n, &rt, false)?;
            (
                InterColl::Scatterv {
                    root,
                    blocks: Vec::new(),
                    recv: (n * rt.size()) as usize,
                },
                none(),
                out,
            )
        }
    };
    go(m, &c, comm, what, None, inp, out, request)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn allgatherv<C: Wide, D: Wide>(
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: RecvBuf,
    recvcounts: In<C>,
    displs: In<D>,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: Out<MPI_Request>,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    not_in_place(&[recvbuf.in_place()])?;
    let (inp, send) = one_block(m, sendbuf, sendcount, sendtype)?;
    let pieces = Pieces::uniform(
        m,
        recvbuf,
        c.remote_size()? as usize,
        recvcounts,
        displs,
        recvtype,
    )?;
    let what = InterColl::Allgatherv {
        send,
        blocks: blocks(&pieces),
    };
    let out = pieces_output(pieces, false)?;
    go(m, &c, comm, what, None, inp, out, request)
}

/// Alltoallv and alltoallw: both sides as pieces of one entry per remote rank (`send`
/// None: the program passed `MPI_IN_PLACE`, refused here).
pub(crate) fn alltoall_pieces(
    comm: MPI_Comm,
    send: Option<Pieces<SendBuf>>,
    recv: Pieces<RecvBuf>,
    request: Out<MPI_Request>,
) -> Res {
    let Some(send) = send else {
        return in_place_refused();
    };
    let m = mpi()?;
    let c = m.comm(comm)?;
    let what = InterColl::Alltoallv {
        send: blocks(&send),
        recv: blocks(&recv),
    };
    let inp = pontoon::lent::Buffer::owned(send.pack()?);
    let out = pieces_output(recv, false)?;
    go(m, &c, comm, what, None, inp, out, request)
}

pub(crate) fn reduce_scatter<C: Wide>(
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
    not_in_place(&[sendbuf.in_place(), recvbuf.in_place()])?;
    let rs = ReduceScatter::decode(m, &c, sendbuf, counts, (datatype, op))?;
    let byte_counts = rs.byte_counts();
    let mut at = 0;
    let blocks = byte_counts
        .iter()
        .map(|&n| {
            let b = (at, n);
            at += n;
            b
        })
        .collect();
    let inp = sendbuf.lend(rs.total(), &rs.dt)?;
    let out = output(recvbuf, rs.mine(c.rank()), &rs.dt, false)?;
    let what = InterColl::ReduceScatter { bytes: at, blocks };
    go(m, &c, comm, what, Some((&rs.op, &rs.dt)), inp, out, request)
}
