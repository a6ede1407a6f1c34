//! Collectives on intercommunicators (MPI 4.1 §6.2.2): each is planned over both groups
//! (`pontoon::InterColl`) and started like a non-blocking collective; the blocking
//! forms wait for it, the persistent ones start it at each `MPI_Start`.
//!
//! The arguments that count follow the root: at `MPI_ROOT` the root's side (its receive
//! side for gathers, its send side for scatters), at `MPI_PROC_NULL` none, in the other
//! group the other side. `MPI_IN_PLACE` is not allowed on an intercommunicator.

use std::ffi::c_void;
use std::os::raw::c_int;

use pontoon::{Comm, InterColl, InterRoot};

use crate::abi::*;
use crate::boundary::{count, fail, Fail, Res, Wide};
use crate::collargs::{in_place, Pieces, Which};
use crate::comms::inter_root;
use crate::started::{blocks, input, launch, none, output, pieces_output};
use crate::state::Finish;
use crate::state::{mpi, Mpi};

/// Fails on `MPI_IN_PLACE`, which no intercommunicator collective takes.
fn not_in_place(bufs: &[*const c_void]) -> Res {
    match bufs.iter().any(|&b| in_place(b)) {
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

type Out = (pontoon::lent::Buffer, Option<Finish>);

/// Plans `what` and starts it on `inp` and `out`.
#[allow(clippy::too_many_arguments)]
fn go(
    m: &Mpi,
    c: &Comm<'static>,
    comm: MPI_Comm,
    what: InterColl,
    reduction: Option<(&pontoon::Op, &pontoon::Datatype)>,
    inp: pontoon::lent::Buffer,
    out: Out,
    request: *mut MPI_Request,
) -> Res {
    let plan = c.plan_inter(&what, reduction)?;
    launch(m, c, comm, plan, inp, out, request)
}

pub(crate) fn barrier(comm: MPI_Comm, request: *mut MPI_Request) -> Res {
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

/// # Safety
/// The caller's buffer holds `n` elements of `datatype`, untouched until completion.
pub(crate) unsafe fn bcast(
    buffer: *mut c_void,
    n: i64,
    datatype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let root = inter_root(&c, root)?;
    let (out, bytes) = match root {
        InterRoot::ElsewhereHere => ((none(), None), 0),
        _ => {
            let dt = m.committed(datatype)?;
            let n = count(n, "count")?;
            // SAFETY: as documented.
            let o = unsafe { output(buffer, n, &dt, root == InterRoot::Here)? };
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
///
/// # Safety
/// The caller's buffers hold `n` elements of `datatype`, untouched until completion.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    n: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: Option<c_int>,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    not_in_place(&[sendbuf, recvbuf])?;
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
    // SAFETY: as documented.
    let inp = if sends {
        // SAFETY: the program's send buffer, valid for what its count and datatype describe and
        // untouched until completion (MPI's contract).
        unsafe { input(sendbuf, n, &dt)? }
    } else {
        none()
    };
    let out = if receives {
        // SAFETY: the program's receive buffer or array, valid for what its count and datatype
        // describe and untouched until completion (MPI's contract).
        unsafe { output(recvbuf, n, &dt, false)? }
    } else {
        (none(), None)
    };
    let what = match root {
        Some(root) => InterColl::Reduce { root, bytes },
        None => InterColl::Allreduce { bytes },
    };
    go(m, &c, comm, what, Some((&op, &dt)), inp, out, request)
}

/// # Safety
/// The caller's buffers hold what the counts and datatypes describe, untouched until
/// completion.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn blocks_of(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: Option<c_int>,
    comm: MPI_Comm,
    request: *mut MPI_Request,
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
        not_in_place(&[sendbuf])?;
    }
    if recv_blocks.is_some() {
        not_in_place(&[recvbuf])?;
    }
    let (mut send, mut recv) = (0, 0);
    // SAFETY (both blocks): as documented.
    let inp = match send_blocks {
        Some(k) => {
            let st = m.committed(sendtype)?;
            let n = count(sendcount, "sendcount")?;
            send = (n * st.size()) as usize;
            // SAFETY: the program's send buffer, valid for what its count and datatype describe and
            // untouched until completion (MPI's contract).
            unsafe { input(sendbuf, n * k, &st)? }
        }
        None => none(),
    };
    let out = match recv_blocks {
        Some(k) => {
            let rt = m.committed(recvtype)?;
            let n = count(recvcount, "recvcount")?;
            recv = (n * rt.size()) as usize;
            // SAFETY: the program's receive buffer or array, valid for what its count and datatype
            // describe and untouched until completion (MPI's contract).
            unsafe { output(recvbuf, n * k, &rt, false)? }
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
///
/// # Safety
/// As [`blocks_of`].
unsafe fn one_block(
    m: &Mpi,
    buf: *const c_void,
    n: i64,
    dt: MPI_Datatype,
) -> Result<(pontoon::lent::Buffer, usize), Fail> {
    not_in_place(&[buf])?;
    let dt = m.committed(dt)?;
    let n = count(n, "sendcount")?;
    // SAFETY: as documented.
    Ok((unsafe { input(buf, n, &dt)? }, (n * dt.size()) as usize))
}

/// # Safety
/// As [`blocks_of`]; `recvcounts` and `displs` hold one entry per remote rank at the root.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gatherv<C: Wide, D: Wide>(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    displs: *const D,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let root = inter_root(&c, root)?;
    // SAFETY (every block): as documented.
    let (what, inp, out) = match root {
        InterRoot::Here => {
            not_in_place(&[recvbuf])?;
            // SAFETY: the program's arguments, valid as the MPI call's contract says.
            let pieces = unsafe {
                Pieces::uniform(
                    m,
                    recvbuf,
                    c.remote_size()? as usize,
                    recvcounts,
                    displs,
                    recvtype,
                )?
            };
            let what = InterColl::Gatherv {
                root,
                send: 0,
                blocks: blocks(&pieces),
            };
            // SAFETY: the program's receive buffer or array, valid for what its count and datatype
            // describe and untouched until completion (MPI's contract).
            (what, none(), unsafe { pieces_output(pieces, false)? })
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
            // SAFETY: the program's send buffer, valid for what its count and datatype describe and
            // untouched until completion (MPI's contract).
            let (inp, send) = unsafe { one_block(m, sendbuf, sendcount, sendtype)? };
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

/// # Safety
/// As [`gatherv`], for `sendcounts` and `displs`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scatterv<C: Wide, D: Wide>(
    sendbuf: *const c_void,
    sendcounts: *const C,
    displs: *const D,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let root = inter_root(&c, root)?;
    // SAFETY (every block): as documented.
    let (what, inp, out) = match root {
        InterRoot::Here => {
            not_in_place(&[sendbuf])?;
            // SAFETY: the program's arguments, valid as the MPI call's contract says.
            let pieces = unsafe {
                Pieces::uniform(
                    m,
                    sendbuf,
                    c.remote_size()? as usize,
                    sendcounts,
                    displs,
                    sendtype,
                )?
            };
            // SAFETY: the program's buffer, valid for the pieces the counts and displacements
            // describe (MPI's contract).
            let inp = pontoon::lent::Buffer::owned(unsafe { pieces.pack()? });
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
            not_in_place(&[recvbuf])?;
            let rt = m.committed(recvtype)?;
            let n = count(recvcount, "recvcount")?;
            // SAFETY: the program's receive buffer or array, valid for what its count and datatype
            // describe and untouched until completion (MPI's contract).
            let out = unsafe { output(recvbuf, n, &rt, false)? };
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

/// # Safety
/// As [`gatherv`]: `recvcounts` and `displs` hold one entry per remote rank.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn allgatherv<C: Wide, D: Wide>(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    displs: *const D,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    not_in_place(&[recvbuf])?;
    // SAFETY: the program's send buffer, valid for what its count and datatype describe and
    // untouched until completion (MPI's contract).
    let (inp, send) = unsafe { one_block(m, sendbuf, sendcount, sendtype)? };
    // SAFETY: the program's arguments, valid as the MPI call's contract says.
    let pieces = unsafe {
        Pieces::uniform(
            m,
            recvbuf,
            c.remote_size()? as usize,
            recvcounts,
            displs,
            recvtype,
        )?
    };
    let what = InterColl::Allgatherv {
        send,
        blocks: blocks(&pieces),
    };
    // SAFETY: the program's receive buffer or array, valid for what its count and datatype describe
    // and untouched until completion (MPI's contract).
    let out = unsafe { pieces_output(pieces, false)? };
    go(m, &c, comm, what, None, inp, out, request)
}

/// Alltoallv and alltoallw: both sides as pieces of one entry per remote rank (`send`
/// None: the program passed `MPI_IN_PLACE`, refused here).
///
/// # Safety
/// As [`blocks_of`].
pub(crate) unsafe fn alltoall_pieces(
    comm: MPI_Comm,
    send: Option<Pieces>,
    recv: Pieces,
    request: *mut MPI_Request,
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
    // SAFETY: as documented.
    let inp = pontoon::lent::Buffer::owned(unsafe { send.pack()? });
    // SAFETY: the program's receive buffer or array, valid for what its count and datatype describe
    // and untouched until completion (MPI's contract).
    let out = unsafe { pieces_output(recv, false)? };
    go(m, &c, comm, what, None, inp, out, request)
}

/// # Safety
/// The caller's buffers: `counts` summed elements of `datatype` to send, this rank's
/// count to receive, untouched until completion.
pub(crate) unsafe fn reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: Vec<u64>,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    not_in_place(&[sendbuf, recvbuf])?;
    let (dt, op) = (m.committed(datatype)?, m.op(op)?);
    let size = dt.size();
    let total: u64 = counts.iter().sum();
    let mut at = 0;
    let blocks = counts
        .iter()
        .map(|&n| {
            let b = (at, (n * size) as usize);
            at += b.1;
            b
        })
        .collect();
    let mine = counts[c.rank() as usize];
    // SAFETY: as documented.
    let inp = unsafe { input(sendbuf, total, &dt)? };
    // SAFETY: the program's receive buffer or array, valid for what its count and datatype describe
    // and untouched until completion (MPI's contract).
    let out = unsafe { output(recvbuf, mine, &dt, false)? };
    let what = InterColl::ReduceScatter {
        bytes: (total * size) as usize,
        blocks,
    };
    go(m, &c, comm, what, Some((&op, &dt)), inp, out, request)
}
