//! User memory lent to the engine.
//!
//! A [`Buffer`] is a reference-counted view of bytes that the engine and its
//! links may read (sends) or write (receives) while an operation is in flight.
//! Three ways to make one, each keeping the memory valid for as long as any clone
//! of the buffer exists:
//! - [`Buffer::owned`]: the buffer owns a `Vec<u8>`;
//! - [`lend`]/[`lend_mut`]: a borrowed slice for the duration of a closure; if a
//!   clone outlives the closure the process aborts (a bug, never a use-after-free);
//! - [`Buffer::from_raw`] (unsafe): memory of a C caller, valid until its MPI
//!   request completes, as the MPI standard requires of the caller.

use std::ptr::NonNull;
use std::sync::Arc;

enum Owner {
    Vec(#[allow(dead_code)] Vec<u8>),
    /// A typed vector (`Vec<T>` of plain-old-data), kept as it was allocated.
    Typed(Box<dyn std::any::Any + Send>),
    Borrowed,
    /// A view of part of another buffer, which it keeps alive.
    Parent(#[allow(dead_code)] Buffer),
}

struct Inner {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
    _owner: Owner,
}

// SAFETY: the memory behind `ptr` is either owned by `Inner` or lent exclusively to
// the engine for the life of the buffer; the engine touches it from one thread at a time
// (under its lock), so moving the handle between threads is fine.
unsafe impl Send for Inner {}
// SAFETY: shared access only reads `ptr`/`len`; writes go through `write_at`, which the
// single-threaded engine never runs concurrently with a read of the same bytes.
unsafe impl Sync for Inner {}

/// A view of user memory, cheap to clone (one atomic increment).
#[derive(Clone)]
pub struct Buffer(Arc<Inner>);

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Buffer({} bytes{})",
            self.0.len,
            if self.0.writable { ", writable" } else { "" }
        )
    }
}

impl Buffer {
    /// A buffer that owns its bytes (sends and receives of the Rust API that outlive a call).
    pub fn owned(mut v: Vec<u8>) -> Buffer {
        let len = v.len();
        let ptr = NonNull::new(v.as_mut_ptr()).unwrap_or(NonNull::dangling());
        Buffer(Arc::new(Inner {
            ptr,
            len,
            writable: true,
            _owner: Owner::Vec(v),
        }))
    }

    /// A buffer that owns a vector of plain-old-data values (no padding, any bit
    /// pattern valid), viewed as bytes without copying.
    pub fn owned_pod<T: bytemuck::Pod + Send>(mut v: Vec<T>) -> Buffer {
        let len = std::mem::size_of_val(v.as_slice());
        let ptr = NonNull::new(v.as_mut_ptr() as *mut u8).unwrap_or(NonNull::dangling());
        // Moving the Vec into the box moves only its header; the heap block stays put.
        Buffer(Arc::new(Inner {
            ptr,
            len,
            writable: true,
            _owner: Owner::Typed(Box::new(v)),
        }))
    }

    /// Takes the typed vector back from a buffer made by [`Buffer::owned_pod`].
    pub fn into_pod_vec<T: bytemuck::Pod + Send>(self) -> Option<Vec<T>> {
        match Arc::try_unwrap(self.0) {
            Ok(Inner {
                _owner: Owner::Typed(b),
                ..
            }) => b.downcast::<Vec<T>>().ok().map(|b| *b),
            _ => None,
        }
    }

    /// Memory of a foreign caller.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes (and for writes if `writable`) until
    /// every clone of the returned buffer is dropped, and no one else may write those
    /// bytes meanwhile. A null `ptr` is allowed only with `len == 0`.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize, writable: bool) -> Buffer {
        let ptr = NonNull::new(ptr).unwrap_or(NonNull::dangling());
        Buffer(Arc::new(Inner {
            ptr,
            len,
            writable,
            _owner: Owner::Borrowed,
        }))
    }

    pub fn len(&self) -> usize {
        self.0.len
    }
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// Takes the vector back from an owned buffer that has no other clone.
    pub fn into_vec(self) -> Option<Vec<u8>> {
        match Arc::try_unwrap(self.0) {
            Ok(Inner {
                _owner: Owner::Vec(v),
                ..
            }) => Some(v),
            _ => None,
        }
    }

    /// A buffer for bytes `[offset, offset + len)` of this one (clamped), sharing its
    /// memory and keeping it alive: collectives send and receive parts of one buffer.
    pub fn view(&self, offset: u64, len: u64) -> Buffer {
        let (start, n) = self.clamp(offset, len);
        // SAFETY: `start <= self.len`, so the pointer stays inside (or one past) the
        // allocation, which the parent handle kept in `_owner` keeps valid.
        let ptr = unsafe { NonNull::new_unchecked(self.0.ptr.as_ptr().add(start)) };
        Buffer(Arc::new(Inner {
            ptr,
            len: n,
            writable: self.0.writable,
            _owner: Owner::Parent(self.clone()),
        }))
    }

    /// Runs `f(input, inout)` on bytes `[src_offset, +len)` of `src` and `[offset, +len)`
    /// of this buffer (both clamped to the shorter), as a reduction does. If the two
    /// ranges share memory, `f` reads a copy of `src`. Returns false for a read-only buffer.
    pub fn combine(
        &self,
        offset: u64,
        src: &Buffer,
        src_offset: u64,
        len: u64,
        f: impl FnOnce(&[u8], &mut [u8]),
    ) -> bool {
        if !self.0.writable {
            return false;
        }
        let input = src.slice(src_offset, len);
        let inout = self.slice_mut(offset, input.len() as u64);
        let input = &input[..inout.len()];
        let overlap = {
            let (a, b) = (input.as_ptr_range(), inout.as_ptr_range());
            !input.is_empty() && a.start < b.end && b.start < a.end
        };
        if overlap {
            let copy = input.to_vec();
            f(&copy, inout);
        } else {
            f(input, inout);
        }
        true
    }

    /// Bytes `[offset, offset + len)`, clamped to the buffer.
    pub fn slice(&self, offset: u64, len: u64) -> &[u8] {
        let (start, n) = self.clamp(offset, len);
        // SAFETY: `start + n <= self.len`, and the memory is valid for reads while `self`
        // exists (see the constructors).
        unsafe { std::slice::from_raw_parts(self.0.ptr.as_ptr().add(start), n) }
    }

    /// Writable bytes `[offset, offset + len)`, clamped; empty for a read-only buffer.
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn slice_mut(&self, offset: u64, len: u64) -> &mut [u8] {
        if !self.0.writable {
            return &mut [];
        }
        let (start, n) = self.clamp(offset, len);
        // SAFETY: in bounds as above; writable memory lent exclusively to the engine, and
        // the single-threaded engine holds no other reference to these bytes while writing.
        unsafe { std::slice::from_raw_parts_mut(self.0.ptr.as_ptr().add(start), n) }
    }

    /// Copies `data` to `offset` (clamped to the buffer). Returns the bytes copied.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> usize {
        let dst = self.slice_mut(offset, data.len() as u64);
        let n = dst.len();
        crate::copy::copy_into(dst, &data[..n]);
        n
    }

    /// Whether `other` is a handle of the same memory (a clone of this buffer).
    pub fn same_memory(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    fn clamp(&self, offset: u64, len: u64) -> (usize, usize) {
        let start = (offset.min(self.0.len as u64)) as usize;
        let n = (len.min((self.0.len - start) as u64)) as usize;
        (start, n)
    }
}

thread_local! {
    /// One recycled handle for lent buffers: a blocking call then allocates nothing.
    static SPARE: std::cell::Cell<Option<Arc<Inner>>> = const { std::cell::Cell::new(None) };
}

fn lent(ptr: NonNull<u8>, len: usize, writable: bool) -> Buffer {
    if let Some(mut arc) = SPARE.take() {
        if let Some(inner) = Arc::get_mut(&mut arc) {
            inner.ptr = ptr;
            inner.len = len;
            inner.writable = writable;
            return Buffer(arc);
        }
    }
    Buffer(Arc::new(Inner {
        ptr,
        len,
        writable,
        _owner: Owner::Borrowed,
    }))
}

/// Ends a lending scope: the engine must hold no clone any more.
fn check_returned(buf: Buffer, what: &str) {
    if Arc::strong_count(&buf.0) != 1 {
        // A clone still points into memory whose borrow ends now: continuing could
        // corrupt memory, so stop the process with a clear message instead.
        eprintln!(
            "pontoon: internal error: a lent {what} buffer is still referenced after its operation; aborting"
        );
        std::process::abort();
    }
    // Unshared (checked above), so the handle can serve the next lending scope; its
    // stale pointer is replaced before any use.
    SPARE.set(Some(buf.0));
}

/// Lends `data` to the engine for the duration of `f`.
pub fn lend<R>(data: &[u8], f: impl FnOnce(&Buffer) -> R) -> R {
    let ptr = NonNull::new(data.as_ptr() as *mut u8).unwrap_or(NonNull::dangling());
    let mut guard = Guard(Some(lent(ptr, data.len(), false)), "send");
    let r = f(guard.0.as_ref().expect("set above"));
    guard.finish();
    r
}

/// Lends `data` mutably to the engine for the duration of `f`.
pub fn lend_mut<R>(data: &mut [u8], f: impl FnOnce(&Buffer) -> R) -> R {
    let ptr = NonNull::new(data.as_mut_ptr()).unwrap_or(NonNull::dangling());
    let mut guard = Guard(Some(lent(ptr, data.len(), true)), "receive");
    let r = f(guard.0.as_ref().expect("set above"));
    guard.finish();
    r
}

/// Checks on every exit from a lending scope, unwinding included.
struct Guard(Option<Buffer>, &'static str);

impl Guard {
    fn finish(&mut self) {
        if let Some(b) = self.0.take() {
            check_returned(b, self.1);
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_buffers_round_trip_and_clamp() {
        let b = Buffer::owned(vec![0; 8]);
        assert_eq!(b.write_at(6, &[1, 2, 3, 4]), 2);
        assert_eq!(b.slice(4, 100), &[0, 0, 1, 2]);
        assert_eq!(b.slice(100, 1), &[] as &[u8]);
        assert_eq!(b.into_vec().unwrap(), vec![0, 0, 0, 0, 0, 0, 1, 2]);
    }

    #[test]
    fn lent_buffers_see_and_change_the_callers_memory() {
        let mut v = vec![5u8; 4];
        lend_mut(&mut v, |b| b.write_at(1, &[9]));
        assert_eq!(v, [5, 9, 5, 5]);
        let read_only = lend(&v, |b| b.write_at(0, &[1]));
        assert_eq!(read_only, 0, "a send buffer is never written");
        // The recycled handle takes the new scope's memory, length and mode.
        let mut w = vec![0u8; 2];
        lend_mut(&mut w, |b| {
            assert_eq!(b.len(), 2);
            b.write_at(0, &[7, 8]);
        });
        assert_eq!(w, [7, 8]);
    }

    #[test]
    fn views_share_memory_and_keep_the_parent_alive() {
        let b = Buffer::owned(vec![0; 8]);
        let v = b.view(2, 4);
        drop(b);
        assert_eq!(v.write_at(0, &[1, 2, 3, 4, 5]), 4);
        assert_eq!(v.slice(0, 8), &[1, 2, 3, 4]);
        assert_eq!(v.view(3, 9).slice(0, 9), &[4]);
        let mut m = vec![0u8; 4];
        lend(&[1, 2, 3, 4], |b| {
            let ro = b.view(0, 2);
            assert_eq!(ro.write_at(0, &[9]), 0, "a view of a send buffer stays read-only");
        });
        lend_mut(&mut m, |b| {
            b.view(1, 2).write_at(0, &[7, 7]);
        });
        assert_eq!(m, [0, 7, 7, 0]);
    }

    #[test]
    fn combine_reads_a_copy_when_the_ranges_overlap() {
        let b = Buffer::owned(vec![1, 2, 3, 4]);
        let add = |i: &[u8], io: &mut [u8]| io.iter_mut().zip(i).for_each(|(o, i)| *o += *i);
        assert!(b.combine(0, &b.clone(), 2, 2, add));
        assert_eq!(b.slice(0, 4), &[4, 6, 3, 4]);
        // Overlapping ranges of one buffer: the input is read before it is changed.
        assert!(b.combine(1, &b.clone(), 0, 3, add));
        assert_eq!(b.slice(0, 4), &[4, 10, 9, 7]);
        let other = Buffer::owned(vec![1; 2]);
        assert!(b.view(2, 2).combine(0, &other, 0, 9, add));
        assert_eq!(b.slice(0, 4), &[4, 10, 10, 8]);
    }
}
