//! Blocking collectives on any datatype (through `pontoon`'s `*_data` functions).

use std::os::raw::c_int;

use pontoon::{DataMut, Datatype};

use crate::abi::*;
use crate::boundary::{count, Res};
use crate::buffers::{RecvBuf, SendBuf};
use crate::collargs::{root_rank, Blocks, Reduction, Which};
use crate::intercolls;
use crate::requests::blocking;
use crate::state::mpi;
use crate::{mpi_fn, mpi_fn_c};

/// A receive side that does not matter here (non-root ranks).
fn nothing(dt: &Datatype) -> DataMut<'_> {
    DataMut::new(&mut [], 0, dt)
}

mpi_fn! {
    fn MPI_Barrier(comm: MPI_Comm) on comm {
        let c = mpi()?.comm(comm)?;
        if c.is_inter() {
            return blocking(|r| intercolls::barrier(comm, r));
        }
        c.barrier()?;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Bcast | MPI_Bcast_c(buffer: RecvBuf, n: Count, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm) on comm {
        let n = n.wide();
        if let Some(done) = crate::immediate::bcast(buffer, n, datatype, root, comm) {
            return done;
        }
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return blocking(|r| intercolls::bcast(buffer, n, datatype, root, comm, r));
        }
        let dt = m.committed(datatype)?;
        let root = root_rank(&c, root)?;
        let mut d = buffer.data_mut(count(n, "count")?, &dt)?;
        c.bcast_data(&mut d, root)?;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Reduce | MPI_Reduce_c(sendbuf: SendBuf, recvbuf: RecvBuf, n: Count, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm) on comm {
        let n = n.wide();
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return blocking(|r| intercolls::reduce(sendbuf, recvbuf, n, datatype, op, Some(root), comm, r));
        }
        let r = Reduction::decode(m, &c, sendbuf, n, (datatype, op), Some(root))?;
        let send = if r.in_place { None } else { Some(sendbuf.data(r.n, &r.dt)?) };
        let mut recv = if r.lands_at(c.rank()) { recvbuf.data_mut(r.n, &r.dt)? } else { nothing(&r.dt) };
        c.reduce_data(send.as_ref(), &mut recv, &r.op, r.root.unwrap_or(0))?;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Allreduce | MPI_Allreduce_c(sendbuf: SendBuf, recvbuf: RecvBuf, n: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) on comm {
        let n = n.wide();
        if let Some(done) = crate::immediate::allreduce(sendbuf, recvbuf, n, datatype, op, comm) {
            return done;
        }
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return blocking(|r| intercolls::reduce(sendbuf, recvbuf, n, datatype, op, None, comm, r));
        }
        let r = Reduction::decode(m, &c, sendbuf, n, (datatype, op), None)?;
        let send = if r.in_place { None } else { Some(sendbuf.data(r.n, &r.dt)?) };
        let mut recv = recvbuf.data_mut(r.n, &r.dt)?;
        c.allreduce_data(send.as_ref(), &mut recv, &r.op)?;
        Ok(())
    }
}

mpi_fn_c! {
    /// `inoutbuf = inbuf ∘ inoutbuf`, locally.
    fn MPI_Reduce_local | MPI_Reduce_local_c(inbuf: SendBuf, inoutbuf: RecvBuf, n: Count, datatype: MPI_Datatype, op: MPI_Op) {
        let n = n.wide();
        let m = mpi()?;
        let dt = m.committed(datatype)?;
        let op = m.op(op)?;
        let n = count(n, "count")?;
        let input = inbuf.data(n, &dt)?.packed()?;
        let inout = inoutbuf.data_mut(n, &dt)?;
        let current = pontoon::Data { bytes: &*inout.bytes, origin: inout.origin, count: n, dt: &dt };
        let mut acc = current.packed()?.into_owned();
        op.check(&dt)?;
        op.apply(&dt, n, &input, &mut acc)?;
        dt.unpack(n, &acc, inout.bytes, inout.origin)?;
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
fn gather_like(
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: RecvBuf,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: Option<c_int>,
    comm: MPI_Comm,
    which: Which,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    if c.is_inter() {
        return blocking(|r| {
            intercolls::blocks_of(
                sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, r, which,
            )
        });
    }
    let b = Blocks::decode(
        m,
        &c,
        which,
        (sendbuf, sendcount, sendtype),
        (recvbuf, recvcount, recvtype),
        root,
    )?;
    let p = c.size() as u64;
    let root = b.root.unwrap_or(0);
    let fallback = Datatype::basic(pontoon::Basic::Byte);
    {
        let send = match &b.send {
            Some((_, t)) => Some(sendbuf.data(b.send_count(p), t)?),
            None => None,
        };
        let mut recv = match &b.recv {
            Some((_, t)) => Some(recvbuf.data_mut(b.recv_count(p), t)?),
            None => None,
        };
        match which {
            Which::Gather | Which::Allgather | Which::Alltoall => {
                let mut none = nothing(&fallback);
                let recv = recv.as_mut().unwrap_or(&mut none);
                match which {
                    Which::Gather => c.gather_data(send.as_ref(), recv, root)?,
                    Which::Allgather => c.allgather_data(send.as_ref(), recv)?,
                    _ => c.alltoall_data(send.as_ref(), recv)?,
                }
            }
            Which::Scatter => {
                let send = match send {
                    Some(send) => send,
                    None => pontoon::Data::new(&[], 0, &fallback),
                };
                c.scatter_data(&send, recv.as_mut(), root)?;
            }
        }
    }
    Ok(())
}

mpi_fn_c! {
    fn MPI_Gather | MPI_Gather_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        gather_like(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, Some(root), comm, Which::Gather)
    }
}

mpi_fn_c! {
    fn MPI_Scatter | MPI_Scatter_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        gather_like(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, Some(root), comm, Which::Scatter)
    }
}

mpi_fn_c! {
    fn MPI_Allgather | MPI_Allgather_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        gather_like(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, None, comm, Which::Allgather)
    }
}

mpi_fn_c! {
    fn MPI_Alltoall | MPI_Alltoall_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        gather_like(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, None, comm, Which::Alltoall)
    }
}
