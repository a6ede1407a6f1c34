//! The program's buffers as pontoon sees them: `n` elements of a datatype at a C
//! pointer, for reading or writing.

use std::ffi::c_void;

use pontoon::{Data, DataMut, Datatype};

use crate::abi::*;
use crate::fail::{fail, Fail};

/// The bytes `n` elements of `dt` at `buf` touch: `(start, length, origin offset)`.
pub fn region(buf: *const c_void, n: u64, dt: &Datatype) -> Result<(*const u8, usize, usize), Fail> {
    let (first, end) = dt.span(n);
    let start = (buf as *const u8).wrapping_offset(first as isize);
    let len = (end - first) as usize;
    if len > 0 && start.is_null() {
        return fail(
            MPI_ERR_BUFFER,
            "the buffer is NULL but the datatype and count describe data",
        );
    }
    Ok((start, len, (-first) as usize))
}

/// `n` elements of `dt` at the C buffer `buf` (MPI_BOTTOM with absolute displacements too).
///
/// # Safety
/// The caller's buffer holds the data it describes, as MPI requires.
pub unsafe fn data<'a>(buf: *const c_void, n: u64, dt: &'a Datatype) -> Result<Data<'a>, Fail> {
    let (start, len, origin) = region(buf, n, dt)?;
    // SAFETY: the region is what the datatype and count touch, valid by contract.
    let bytes = if len == 0 {
        &[][..]
    } else {
        // SAFETY: the program's receive buffer or array, valid for what its count and datatype
        // describe and untouched until completion (MPI's contract).
        unsafe { std::slice::from_raw_parts(start, len) }
    };
    Ok(Data {
        bytes,
        origin,
        count: n,
        dt,
    })
}

/// The writable form of [`data`].
///
/// # Safety
/// As [`data`], for writing.
pub unsafe fn data_mut<'a>(buf: *mut c_void, n: u64, dt: &'a Datatype) -> Result<DataMut<'a>, Fail> {
    let (start, len, origin) = region(buf, n, dt)?;
    let bytes = if len == 0 {
        &mut [][..]
    } else {
        // SAFETY: as in `data`; the caller lends the region for writing.
        unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) }
    };
    Ok(DataMut {
        bytes,
        origin,
        count: n,
        dt,
    })
}
