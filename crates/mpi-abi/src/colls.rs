//! Blocking collectives on any datatype (through `pontoon`'s `*_data` functions).

use std::ffi::c_void;
use std::os::raw::c_int;

use pontoon::{DataMut, Datatype};

use crate::abi::*;
use crate::boundary::{count, fail, Res};
use crate::buffers::{data, data_mut};
use crate::collargs::{in_place, root_rank, Blocks, Which};
use crate::intercolls;
use crate::requests::blocking;
use crate::state::mpi;
use crate::{mpi_fn, mpi_fn_c};

/// A receive side that does not matter here (non-root ranks).
fn nothing(dt: &Datatype) -> DataMut<'_> {
    DataMut::new(&mut [], 0, dt)
}

mpi_fn! {
    safe fn MPI_Barrier(comm: MPI_Comm) on comm {
        let c = mpi()?.comm(comm)?;
        if c.is_inter() {
            return blocking(|r| intercolls::barrier(comm, r));
        }
        c.barrier()?;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Bcast | MPI_Bcast_c(buffer: *mut c_void, n: Count, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm) on comm {
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
        let mut d = data_mut(buffer, count(n, "count")?, &dt)?;
        c.bcast_data(&mut d, root)?;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Reduce | MPI_Reduce_c(sendbuf: *const c_void, recvbuf: *mut c_void, n: Count, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm) on comm {
        let n = n.wide();
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return blocking(|r| intercolls::reduce(sendbuf, recvbuf, n, datatype, op, Some(root), comm, r));
        }
        let dt = m.committed(datatype)?;
        let op = m.op(op)?;
        let root = root_rank(&c, root)?;
        let n = count(n, "count")?;
        let at_root = c.rank() == root;
        if in_place(sendbuf) && !at_root {
            return fail(MPI_ERR_BUFFER, "MPI_IN_PLACE is for the root only");
        }
        let send = if in_place(sendbuf) { None } else { Some(data(sendbuf, n, &dt)?) };
        let mut recv = if at_root { data_mut(recvbuf, n, &dt)? } else { nothing(&dt) };
        c.reduce_data(send.as_ref(), &mut recv, &op, root)?;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Allreduce | MPI_Allreduce_c(sendbuf: *const c_void, recvbuf: *mut c_void, n: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) on comm {
        let n = n.wide();
        if let Some(done) = crate::immediate::allreduce(sendbuf, recvbuf, n, datatype, op, comm) {
            return done;
        }
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return blocking(|r| intercolls::reduce(sendbuf, recvbuf, n, datatype, op, None, comm, r));
        }
        let dt = m.committed(datatype)?;
        let op = m.op(op)?;
        let n = count(n, "count")?;
        let send = if in_place(sendbuf) { None } else { Some(data(sendbuf, n, &dt)?) };
        let mut recv = data_mut(recvbuf, n, &dt)?;
        c.allreduce_data(send.as_ref(), &mut recv, &op)?;
        Ok(())
    }
}

mpi_fn_c! {
    /// `inoutbuf = inbuf ∘ inoutbuf`, locally.
    fn MPI_Reduce_local | MPI_Reduce_local_c(inbuf: *const c_void, inoutbuf: *mut c_void, n: Count, datatype: MPI_Datatype, op: MPI_Op) {
        let n = n.wide();
        let m = mpi()?;
        let dt = m.committed(datatype)?;
        let op = m.op(op)?;
        let n = count(n, "count")?;
        let input = data(inbuf, n, &dt)?.packed()?;
        let inout = data_mut(inoutbuf, n, &dt)?;
        let current = pontoon::Data { bytes: &*inout.bytes, origin: inout.origin, count: n, dt: &dt };
        let mut acc = current.packed()?.into_owned();
        op.check(&dt)?;
        op.apply(&dt, n, &input, &mut acc)?;
        dt.unpack(n, &acc, inout.bytes, inout.origin)?;
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn gather_like(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: Option<c_int>,
    comm: MPI_Comm,
    which: Which,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    if c.is_inter() {
        // SAFETY: the program's arguments, valid as the MPI call's contract says.
        return blocking(|r| unsafe {
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
        (recvbuf as *const c_void, recvcount, recvtype),
        root,
    )?;
    let p = c.size() as u64;
    let root = b.root.unwrap_or(0);
    let fallback = Datatype::basic(pontoon::Basic::Byte);
    // SAFETY: the program's buffers, which hold the data their counts and datatypes
    // describe (MPI's contract); `data`/`data_mut` check them for null.
    unsafe {
        let send = match &b.send {
            Some((_, t)) => Some(data(sendbuf, b.send_count(p), t)?),
            None => None,
        };
        let mut recv = match &b.recv {
            Some((_, t)) => Some(data_mut(recvbuf, b.recv_count(p), t)?),
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
                    None => data(std::ptr::null(), 0, &fallback)?,
                };
                c.scatter_data(&send, recv.as_mut(), root)?;
            }
        }
    }
    Ok(())
}

mpi_fn_c! {
    fn MPI_Gather | MPI_Gather_c(sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        gather_like(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, Some(root), comm, Which::Gather)
    }
}

mpi_fn_c! {
    fn MPI_Scatter | MPI_Scatter_c(sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        gather_like(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, Some(root), comm, Which::Scatter)
    }
}

mpi_fn_c! {
    fn MPI_Allgather | MPI_Allgather_c(sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        gather_like(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, None, comm, Which::Allgather)
    }
}

mpi_fn_c! {
    fn MPI_Alltoall | MPI_Alltoall_c(sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        gather_like(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, None, comm, Which::Alltoall)
    }
}
