//! Buffered sends (MPI_Bsend, MPI_Ibsend) and the attached buffer. A buffered send
//! returns at once: its data is packed into memory of its own and the send runs on
//! in the background. The attached buffer sets how much may be in flight (each message
//! counts its size plus MPI_BSEND_OVERHEAD), as the standard defines; detaching waits
//! for every buffered send to finish.

use std::cell::RefCell;
use std::ffi::c_void;
use std::os::raw::c_int;

use pontoon::lent::Buffer;

use crate::abi::*;
use crate::boundary::{count, fail, out, Fail, Res};
use crate::mpi_fn;
use crate::p2p::{data, empty_status, send_args, SendArgs};
use crate::requests::{start, ReqEntry};
use crate::state::mpi;

/// Bytes each buffered message takes beyond its data (the constant of mpi.h).
const BSEND_OVERHEAD: usize = 512;
/// `MPI_BUFFER_AUTOMATIC`: no limit.
const BUFFER_AUTOMATIC: usize = 2;

#[derive(Default)]
struct Attached {
    /// The program's buffer and its size; `None`: nothing attached.
    buffer: Option<(*mut c_void, usize)>,
    /// Sends in flight with the bytes each holds of the buffer.
    in_flight: Vec<(pontoon::lent::Pending<'static>, usize)>,
}

thread_local! {
    static ATTACHED: RefCell<Attached> = RefCell::new(Attached::default());
}

/// Drops buffered sends that finished; returns the bytes still held.
fn reap() -> usize {
    ATTACHED.with(|a| {
        let mut a = a.borrow_mut();
        a.in_flight.retain_mut(|(p, _)| !p.is_done());
        a.in_flight.iter().map(|(_, n)| n).sum()
    })
}

unsafe fn bsend(
    buf: *const c_void,
    n: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> Res {
    let SendArgs {
        comm: c,
        dt,
        n,
        tag,
        dest,
    } = send_args(n, datatype, dest, tag, comm)?;
    let Some(dest) = dest else {
        return Ok(());
    };
    // SAFETY: the caller's send buffer.
    let packed = unsafe { data(buf, n, &dt)? }.packed()?.into_owned();
    let need = packed.len() + BSEND_OVERHEAD;
    let held = reap();
    let limit = ATTACHED.with(|a| {
        a.borrow().buffer.map(|(p, size)| {
            if p as usize == BUFFER_AUTOMATIC {
                usize::MAX
            } else {
                size
            }
        })
    });
    let Some(limit) = limit else {
        return fail(
            MPI_ERR_BUFFER,
            "MPI_Bsend without an attached buffer: call MPI_Buffer_attach first",
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
    let op = c.isend_lent(Buffer::owned(packed), dest, tag, false)?;
    ATTACHED.with(|a| a.borrow_mut().in_flight.push((op, need)));
    Ok(())
}

mpi_fn! {
    fn MPI_Bsend(buf: *const c_void, n: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) on comm {
        bsend(buf, n, datatype, dest, tag, comm)
    }
}

mpi_fn! {
    /// Buffered, so complete as soon as it is started.
    fn MPI_Ibsend(buf: *const c_void, n: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        let request = out(request, "request")?;
        bsend(buf, n, datatype, dest, tag, comm)?;
        start(mpi()?, request, ReqEntry::Done(empty_status()))
    }
}

mpi_fn! {
    /// Persistent buffered send: each MPI_Start buffers the data and completes.
    fn MPI_Bsend_init(buf: *const c_void, n: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        send_args(n, datatype, dest, tag, comm)?;
        // SAFETY: the program keeps the buffer valid while the request exists.
        crate::requests::persistent(
            request,
            Box::new(move || unsafe { bsend(buf, n, datatype, dest, tag, comm) }.map(|_| ReqEntry::Done(empty_status()))),
        )
    }
}

mpi_fn! {
    fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) {
        mpi()?;
        let size = count(size as i64, "size")? as usize;
        ATTACHED.with(|a| {
            let mut a = a.borrow_mut();
            if a.buffer.is_some() {
                return fail(MPI_ERR_BUFFER, "a buffer is attached already: detach it first");
            }
            a.buffer = Some((buffer, size));
            Ok(())
        })
    }
}

mpi_fn! {
    /// Waits until every buffered send is out, then gives the buffer back.
    fn MPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) {
        mpi()?;
        let (addr, size) = (out(buffer_addr as *mut *mut c_void, "buffer_addr")?, out(size, "size")?);
        let pending = ATTACHED.with(|a| std::mem::take(&mut a.borrow_mut().in_flight));
        let mut first_error: Option<Fail> = None;
        for (mut p, _) in pending {
            if let Err(e) = p.wait() {
                first_error.get_or_insert(e.into());
            }
        }
        let Some((buf, n)) = ATTACHED.with(|a| a.borrow_mut().buffer.take()) else {
            return fail(MPI_ERR_BUFFER, "no buffer is attached");
        };
        *addr = buf;
        *size = n as c_int;
        first_error.map_or(Ok(()), Err)
    }
}
