//! Buffered sends (MPI_Bsend, MPI_Ibsend) and their buffers. A buffered send
//! returns at once: its data is packed into memory of its own and the send runs on
//! in the background. The buffer attached to the communicator (MPI-4.1
//! `MPI_Comm_attach_buffer`), or else the process's (`MPI_Buffer_attach`), sets how much
//! may be in flight (each message counts its size plus MPI_BSEND_OVERHEAD), as the
//! standard defines; `MPI_BUFFER_AUTOMATIC` sets no limit. Flushing waits for every
//! buffered send of a buffer; detaching flushes, then gives the buffer back.

use std::cell::RefCell;
use std::ffi::c_void;
use std::os::raw::c_int;

use pontoon::lent::Buffer;

use crate::abi::*;
use crate::args::{send_args, SendArgs};
use crate::boundary::{count, fail, fit, Res};
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::Out;
use crate::requests::{start, wait_buffered};
use crate::state::{mpi, Mpi};
use crate::state::{Attached, BufferOwner as Owner, Buffered, ReqEntry};
use crate::{mpi_fn, mpi_fn_c};

/// Bytes each buffered message takes beyond its data (the constant of mpi.h).
const BSEND_OVERHEAD: usize = 512;
/// `MPI_BUFFER_AUTOMATIC`: no limit.
const BUFFER_AUTOMATIC: usize = 2;

fn with<R>(m: &Mpi, owner: Owner, f: impl FnOnce(&mut Attached) -> R) -> R {
    f(m.bsend_buffers.borrow_mut().entry(owner).or_default())
}

/// The buffer a buffered send on `comm` uses: its own if it has one attached.
fn owner_for(m: &Mpi, comm: MPI_Comm) -> Owner {
    let own = m
        .bsend_buffers
        .borrow()
        .get(&Owner::Comm(comm))
        .is_some_and(|a| a.buffer.is_some());
    if own {
        Owner::Comm(comm)
    } else {
        Owner::Process
    }
}

/// Drops buffered sends that finished; returns the bytes still held.
fn reap(m: &Mpi, owner: Owner) -> usize {
    with(m, owner, |a| {
        a.in_flight.retain(|(p, _)| !p.borrow_mut().is_done());
        a.in_flight.iter().map(|(_, n)| n).sum()
    })
}

fn attach(owner: Owner, buffer: RecvBuf, size: i64) -> Res {
    let m = mpi()?;
    let size = count(size, "size")? as usize;
    with(m, owner, |a| {
        if a.buffer.is_some() {
            return fail(MPI_ERR_BUFFER, "a buffer is attached already: detach it first");
        }
        a.buffer = Some((buffer.addr(), size));
        Ok(())
    })
}

/// The sends in flight of a buffer, taken out of its accounting.
fn take_in_flight(m: &Mpi, owner: Owner) -> Vec<Buffered> {
    with(m, owner, |a| std::mem::take(&mut a.in_flight))
        .into_iter()
        .map(|(p, _)| p)
        .collect()
}

/// Waits until every buffered send is out, then gives the buffer back through
/// `buffer_addr` (a `void **`, which the standard declares `void *`).
fn detach<N: TryFrom<u64>>(owner: Owner, buffer_addr: Out<*mut c_void>, size: Out<N>) -> Res {
    let m = mpi()?;
    let (addr, size) = (buffer_addr.place("buffer_addr")?, size.place("size")?);
    let flushed = wait_buffered(take_in_flight(m, owner));
    let Some((buf, n)) = with(m, owner, |a| a.buffer.take()) else {
        return fail(MPI_ERR_BUFFER, "no buffer is attached");
    };
    m.bsend_buffers.borrow_mut().remove(&owner);
    *addr = buf as *mut c_void;
    *size = fit(n as u64, "the buffer's size")?;
    flushed
}

/// Starts a request that completes once the buffer's sends in flight now are out.
fn iflush(m: &Mpi, owner: Owner, request: Out<MPI_Request>) -> Res {
    let request = request.place("request")?;
    start(m, request, ReqEntry::Flush(take_in_flight(m, owner)))
}

/// A communicator is being freed: its buffer is detached without waiting; its buffered
/// sends run on as freed requests do.
pub fn forget_comm(m: &Mpi, comm: MPI_Comm) {
    let sends = take_in_flight(m, Owner::Comm(comm));
    m.bsend_buffers.borrow_mut().remove(&Owner::Comm(comm));
    if !sends.is_empty() {
        m.detached.borrow_mut().push(ReqEntry::Flush(sends));
    }
}

/// Buffers the message and starts its send; the send (`None`: to MPI_PROC_NULL).
fn bsend(
    buf: SendBuf,
    n: i64,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> Result<Option<Buffered>, crate::boundary::Fail> {
    let SendArgs {
        comm: c,
        dt,
        n,
        tag,
        dest,
    } = send_args(n, datatype, dest, tag, comm)?;
    let Some(dest) = dest else {
        return Ok(None);
    };
    let packed = buf.data(n, &dt)?.packed()?.into_owned();
    let need = packed.len() + BSEND_OVERHEAD;
    let m = mpi()?;
    let owner = owner_for(m, comm);
    let held = reap(m, owner);
    let limit = with(m, owner, |a| {
        a.buffer
            .map(|(p, size)| if p == BUFFER_AUTOMATIC { usize::MAX } else { size })
    });
    let Some(limit) = limit else {
        return fail(
            MPI_ERR_BUFFER,
            "MPI_Bsend without an attached buffer: call MPI_Buffer_attach or MPI_Comm_attach_buffer first",
        );
    };
    if held.saturating_add(need) > limit {
        return fail(
            MPI_ERR_BUFFER,
            format!(
                "the attached buffer of {limit} bytes cannot hold this message ({} bytes + {BSEND_OVERHEAD} overhead) \
                 with {held} bytes of buffered sends still in flight; attach a larger buffer",
                packed.len()
            ),
        );
    }
    let op = std::rc::Rc::new(RefCell::new(c.isend_lent(
        Buffer::owned(packed),
        dest,
        tag,
        false,
    )?));
    with(m, owner, |a| a.in_flight.push((op.clone(), need)));
    Ok(Some(op))
}

mpi_fn_c! {
    fn MPI_Bsend | MPI_Bsend_c(buf: SendBuf, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) on comm {
        let n = n.wide();
        bsend(buf, n, datatype, dest, tag, comm).map(drop)
    }
}

/// The request of a buffered send: complete at once unless cancelled.
fn buffered_entry(send: Option<Buffered>) -> ReqEntry {
    match send {
        Some(send) => ReqEntry::Bsend {
            send,
            cancelled: false,
        },
        None => ReqEntry::Done(crate::statuses::proc_null_status()),
    }
}

mpi_fn_c! {
    /// Buffered, so complete as soon as it is started.
    fn MPI_Ibsend | MPI_Ibsend_c(buf: SendBuf, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        let request = request.place("request")?;
        let entry = buffered_entry(bsend(buf, n, datatype, dest, tag, comm)?);
        start(mpi()?, request, entry)
    }
}

mpi_fn_c! {
    /// Persistent buffered send: each MPI_Start buffers the data and completes.
    fn MPI_Bsend_init | MPI_Bsend_init_c(buf: SendBuf, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        send_args(n, datatype, dest, tag, comm)?;
        // The program keeps the buffer valid while the request exists.
        crate::requests::persistent(
            request,
            Box::new(move || bsend(buf, n, datatype, dest, tag, comm).map(buffered_entry)),
        )
    }
}

mpi_fn_c! {
    fn MPI_Buffer_attach | MPI_Buffer_attach_c(buffer: RecvBuf, size: Count) {
        let size = size.wide();
        attach(Owner::Process, buffer, size)
    }
}

mpi_fn_c! {
    fn MPI_Buffer_detach | MPI_Buffer_detach_c(buffer_addr: Out<*mut c_void>, size: Out<Count>) {
        detach(Owner::Process, buffer_addr, size)
    }
}

mpi_fn! {
    fn MPI_Buffer_flush() {
        wait_buffered(take_in_flight(mpi()?, Owner::Process))
    }
}

mpi_fn! {
    fn MPI_Buffer_iflush(request: Out<MPI_Request>) {
        iflush(mpi()?, Owner::Process, request)
    }
}

mpi_fn_c! {
    fn MPI_Comm_attach_buffer | MPI_Comm_attach_buffer_c(comm: MPI_Comm, buffer: RecvBuf, size: Count) on comm {
        let size = size.wide();
        mpi()?.comm(comm)?;
        attach(Owner::Comm(comm), buffer, size)
    }
}

mpi_fn_c! {
    fn MPI_Comm_detach_buffer | MPI_Comm_detach_buffer_c(comm: MPI_Comm, buffer_addr: Out<*mut c_void>, size: Out<Count>) on comm {
        mpi()?.comm(comm)?;
        detach(Owner::Comm(comm), buffer_addr, size)
    }
}

mpi_fn! {
    fn MPI_Comm_flush_buffer(comm: MPI_Comm) on comm {
        let m = mpi()?;
        m.comm(comm)?;
        wait_buffered(take_in_flight(m, Owner::Comm(comm)))
    }
}

mpi_fn! {
    fn MPI_Comm_iflush_buffer(comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let m = mpi()?;
        m.comm(comm)?;
        iflush(m, Owner::Comm(comm), request)
    }
}
