//! The mapping of a node segment (a `memfd` shared by the node's ranks) and the
//! wake-up of a rank that sleeps on it.

use std::io;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use rustix::mm::{MapFlags, ProtFlags};
use rustix::net::{SendFlags, SocketAddrUnix};

/// A mapping of a node segment.
pub(super) struct Segment {
    pub(super) base: NonNull<u8>,
    pub(super) len: usize,
}

// SAFETY: the mapping is owned by the segment and unmapped once, in Drop. Its memory is
// shared with other processes anyway: counters are only accessed atomically, and ring
// data only through `put`/`get`, by the one producer or the one consumer of each ring,
// which the counters keep apart. So sharing the mapping between threads adds nothing.
unsafe impl Send for Segment {}
// SAFETY: as for Send.
unsafe impl Sync for Segment {}

impl Segment {
    pub(super) fn map(fd: &OwnedFd, len: usize) -> io::Result<Segment> {
        // Not populated: a page costs memory (and the time to clear it) only once it is
        // touched; most of a node segment never is.
        // SAFETY: a fresh shared mapping of a memfd of at least `len` bytes (checked by
        // the callers); nothing else in this process refers to the address range.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )?
        };
        let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Segment { base, len })
    }

    #[inline]
    pub(super) fn u64_at(&self, offset: usize) -> &AtomicU64 {
        assert!(offset + 8 <= self.len && offset.is_multiple_of(8));
        // SAFETY: in bounds and aligned (checked above; the mapping is page-aligned),
        // and this memory is only ever accessed atomically by every process.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    /// `len` bytes at `offset`, read in place: only where the one process that writes
    /// them does not until the reader is done (a box the producer filled).
    #[inline]
    pub(super) fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: in bounds (checked above); the protocol keeps writers away from these
        // bytes while the returned borrow lives (see the caller).
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(offset), len) }
    }

    #[inline]
    pub(super) fn u32_at(&self, offset: usize) -> &AtomicU32 {
        assert!(offset + 4 <= self.len && offset.is_multiple_of(4));
        // SAFETY: as in `u64_at`.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU32>() }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; no reference into it
        // outlives the segment (pipes and the node hold it through an Arc).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// After publishing something for a rank: rings its bell if it sleeps. The rank sets its
/// flag, then looks; we publish, then look at the flag: with a full fence on both sides
/// one of us sees the other. Whoever clears the flag rings once.
pub(super) fn wake(seg: &Segment, asleep: usize, ringer: &OwnedFd, bell: &SocketAddrUnix) {
    fence(Ordering::SeqCst);
    if take_sleeper(seg, asleep) {
        ring(ringer, bell);
    }
}

/// Whether the rank whose flag is at `asleep` sleeps; if so, clears the flag: the
/// caller rings it. (After a full fence, see [`wake`].)
pub(super) fn take_sleeper(seg: &Segment, asleep: usize) -> bool {
    let flag = seg.u32_at(asleep);
    flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::AcqRel) != 0
}

pub(super) fn ring(ringer: &OwnedFd, bell: &SocketAddrUnix) {
    // A full queue already holds a wake-up: nothing is lost by EAGAIN.
    let _ = rustix::net::sendto(ringer, &[1], SendFlags::DONTWAIT | SendFlags::NOSIGNAL, bell);
}
