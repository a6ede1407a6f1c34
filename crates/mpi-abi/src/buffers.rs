//! The program's buffers as pontoon sees them: `n` elements of a datatype at a C
//! pointer, for reading or writing.

use std::ffi::c_void;

use pontoon::lent::Buffer;
use pontoon::{Data, DataMut, Datatype};

use crate::abi::*;
use crate::fail::{fail, Fail};
use crate::state::{Finish, Unpack};

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
unsafe fn data<'a>(buf: *const c_void, n: u64, dt: &'a Datatype) -> Result<Data<'a>, Fail> {
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
unsafe fn data_mut<'a>(buf: *mut c_void, n: u64, dt: &'a Datatype) -> Result<DataMut<'a>, Fail> {
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

/// A data buffer argument as a C caller passes it (`const void *`): where the elements
/// a count and a datatype describe are read from (MPI_BOTTOM with absolute
/// displacements too), or MPI_IN_PLACE. `#[repr(transparent)]` over the pointer, so an
/// exported function takes it where the C prototype has the pointer.
///
/// The MPI standard's contract: the buffer holds what its count and datatype describe,
/// for the length of the call, and for a non-blocking or persistent operation until its
/// request completes, untouched meanwhile. Only a C caller makes one; the accessors below
/// are where the contract is relied on.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct SendBuf(*const c_void);

/// The receive side's buffer argument (`void *`): where results are written.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct RecvBuf(*mut c_void);

impl SendBuf {
    pub fn in_place(&self) -> bool {
        self.0 as usize == MPI_IN_PLACE
    }

    pub fn is_null(&self) -> bool {
        self.0.is_null()
    }

    /// The address the caller passed (to compare two buffers).
    pub fn addr(&self) -> usize {
        self.0 as usize
    }

    /// The buffer `disp` bytes on (a piece of a `v` or `w` collective's buffer).
    pub fn offset(&self, disp: i64) -> SendBuf {
        SendBuf(self.0.wrapping_byte_offset(disp as isize))
    }

    /// `n` elements of `dt`.
    pub fn data<'a>(&self, n: u64, dt: &'a Datatype) -> Result<Data<'a>, Fail> {
        // SAFETY: the buffer holds what `n` and `dt` describe (the type's contract).
        unsafe { data(self.0, n, dt) }
    }

    /// The first `len` bytes (the elements of a gapless predefined datatype); None
    /// when the buffer is NULL but `len` is not 0.
    pub fn bytes<'a>(&self, len: usize) -> Option<&'a [u8]> {
        match len {
            0 => Some(&[]),
            _ if self.0.is_null() => None,
            // SAFETY: non-null and holding `len` bytes (the type's contract).
            _ => Some(unsafe { std::slice::from_raw_parts(self.0 as *const u8, len) }),
        }
    }

    /// `n` elements of `dt` lent to an operation that reads them until its request
    /// completes: the program's memory itself for a dense datatype, else a packed copy.
    pub fn lend(&self, n: u64, dt: &Datatype) -> Result<Buffer, Fail> {
        let d = self.data(n, dt)?;
        if !dt.is_dense() {
            return Ok(Buffer::owned(d.packed()?.into_owned()));
        }
        let at = d.bytes[d.origin..].as_ptr() as *mut u8;
        // SAFETY: the program leaves the buffer alone until the request completes (the
        // type's contract); the engine only reads it (`false`).
        Ok(unsafe { Buffer::from_raw(at, (n * dt.size()) as usize, false) })
    }
}

impl RecvBuf {
    pub fn in_place(&self) -> bool {
        self.0 as usize == MPI_IN_PLACE
    }

    pub fn addr(&self) -> usize {
        self.0 as usize
    }

    pub fn is_null(&self) -> bool {
        self.0.is_null()
    }

    /// The buffer `disp` bytes on.
    pub fn offset(&self, disp: i64) -> RecvBuf {
        RecvBuf(self.0.wrapping_byte_offset(disp as isize))
    }

    /// The same memory, to read (an operation that sends from its receive buffer).
    pub fn as_send(&self) -> SendBuf {
        SendBuf(self.0)
    }

    /// `n` elements of `dt`, to write.
    pub fn data_mut<'a>(&self, n: u64, dt: &'a Datatype) -> Result<DataMut<'a>, Fail> {
        // SAFETY: the buffer holds what `n` and `dt` describe, writable (the type's
        // contract).
        unsafe { data_mut(self.0, n, dt) }
    }

    /// The first `len` bytes, to write; None when the buffer is NULL but `len` is not 0.
    pub fn bytes_mut<'a>(&self, len: usize) -> Option<&'a mut [u8]> {
        match len {
            0 => Some(&mut []),
            _ if self.0.is_null() => None,
            // SAFETY: non-null and holding `len` writable bytes (the type's contract).
            _ => Some(unsafe { std::slice::from_raw_parts_mut(self.0 as *mut u8, len) }),
        }
    }

    /// Where `n` elements of `dt` land for an operation that writes them until its
    /// request completes: the program's memory for a dense datatype, else a packed
    /// copy (holding what the memory holds if `load`: an operation that reads it
    /// first), unpacked at completion by the returned [`Unpack`].
    pub fn lend(&self, n: u64, dt: &Datatype, load: bool) -> Result<(Buffer, Option<Unpack>), Fail> {
        let (start_at, _, origin) = region(self.0, n, dt)?;
        let packed_len = (n * dt.size()) as usize;
        if dt.is_dense() {
            // SAFETY: the program leaves the buffer alone until the request completes
            // (the type's contract); the engine writes at most `packed_len` bytes there.
            let b = unsafe { Buffer::from_raw(start_at.wrapping_add(origin) as *mut u8, packed_len, true) };
            return Ok((b, None));
        }
        let mut tmp = match load {
            true => self.as_send().data(n, dt)?.packed()?.into_owned(),
            false => vec![0u8; packed_len],
        };
        // SAFETY: `tmp`'s heap block stays put when the vector moves into the request
        // entry, which keeps it until the engine is done with it.
        let b = unsafe { Buffer::from_raw(tmp.as_mut_ptr(), packed_len, true) };
        let unpack = Unpack {
            tmp,
            buf: *self,
            count: n,
            dt: dt.clone(),
        };
        Ok((b, Some(unpack)))
    }
}

impl Unpack {
    /// The step that unpacks the whole packed copy into the program's buffer at
    /// completion (a collective's result).
    pub fn into_finish(self) -> Finish {
        Box::new(move || {
            let d = self.buf.data_mut(self.count, &self.dt)?;
            self.dt.unpack(self.count, &self.tmp, d.bytes, d.origin)?;
            Ok(())
        })
    }
}
