//! A collective started on the program's memory: what a rank contributes and where
//! results land (the program's memory when dense, else packed copies unpacked at
//! completion), and the request that follows it.

use std::ffi::c_void;

use pontoon::lent::Buffer;
use pontoon::{Comm, Datatype, Plan};

use crate::abi::*;
use crate::boundary::{Fail, Res};
use crate::buffers::{data, data_mut};
use crate::collargs::Pieces;
use crate::requests::start;
use crate::state::{Finish, Mpi, ReqEntry};

/// What a rank contributes: the program's memory if dense, else a packed copy.
///
/// # Safety
/// The program leaves the buffer alone until the request completes (MPI's rule).
pub(crate) unsafe fn input(buf: *const c_void, n: u64, dt: &Datatype) -> Result<Buffer, Fail> {
    // SAFETY: the caller's buffer, as documented.
    let d = unsafe { data(buf, n, dt)? };
    if dt.is_dense() {
        let bytes = &d.bytes[d.origin..];
        // SAFETY: as documented: valid and untouched until completion.
        return Ok(unsafe { Buffer::from_raw(bytes.as_ptr() as *mut u8, (n * dt.size()) as usize, false) });
    }
    Ok(Buffer::owned(d.packed()?.into_owned()))
}

/// Where results land: the program's memory if dense, else a packed temporary
/// (filled from the memory first if `load`) unpacked by the returned finish step.
///
/// # Safety
/// As [`input`], for writing.
pub(crate) unsafe fn output(
    buf: *mut c_void,
    n: u64,
    dt: &Datatype,
    load: bool,
) -> Result<(Buffer, Option<Finish>), Fail> {
    // SAFETY: the caller's buffer, as documented.
    let d = unsafe { data_mut(buf, n, dt)? };
    let len = (n * dt.size()) as usize;
    if dt.is_dense() {
        let at = d.bytes[d.origin..].as_mut_ptr();
        // SAFETY: as documented.
        return Ok((unsafe { Buffer::from_raw(at, len, true) }, None));
    }
    let mut tmp = if load {
        pontoon::Data {
            bytes: &*d.bytes,
            origin: d.origin,
            count: n,
            dt,
        }
        .packed()?
        .into_owned()
    } else {
        vec![0; len]
    };
    // SAFETY: the vector's heap block stays put when it moves into the finish step,
    // which outlives the engine's use of the buffer.
    let b = unsafe { Buffer::from_raw(tmp.as_mut_ptr(), len, true) };
    let dt = dt.clone();
    let finish: Finish = Box::new(move || {
        // SAFETY: the program's buffer, lent until this completion.
        let d = unsafe { data_mut(buf, n, &dt)? };
        dt.unpack(n, &tmp, d.bytes, d.origin)?;
        Ok(())
    });
    Ok((b, Some(finish)))
}

/// Output as pieces, always packed (v and w forms).
pub(crate) unsafe fn pieces_output(p: Pieces, load: bool) -> Result<(Buffer, Option<Finish>), Fail> {
    // SAFETY: the caller's memory, as for `output`.
    let mut tmp = if load {
        // SAFETY: the program's buffer, valid for the pieces the counts and displacements describe
        // (MPI's contract).
        unsafe { p.pack()? }
    } else {
        vec![0; p.total()]
    };
    let len = tmp.len();
    // SAFETY: as in `output`.
    let b = unsafe { Buffer::from_raw(tmp.as_mut_ptr(), len, true) };
    let finish: Finish = Box::new(move || {
        // SAFETY: the program's memory, lent until this completion.
        unsafe { p.unpack(&tmp) }
    });
    Ok((b, Some(finish)))
}

pub(crate) fn launch(
    m: &Mpi,
    c: &Comm<'static>,
    comm: MPI_Comm,
    plan: Plan,
    input: Buffer,
    out: (Buffer, Option<Finish>),
    request: *mut MPI_Request,
) -> Res {
    let op = c.start_plan(plan, input, out.0);
    // SAFETY: the caller's request pointer, checked by `out`.
    let request = unsafe { crate::boundary::out(request, "request")? };
    start(
        m,
        request,
        ReqEntry::Coll {
            op,
            comm,
            finish: out.1,
        },
    )
}

pub(crate) fn none() -> Buffer {
    Buffer::owned(Vec::new())
}

pub(crate) fn blocks(p: &Pieces) -> Vec<(usize, usize)> {
    p.offsets().into_iter().zip(p.counts()).collect()
}
