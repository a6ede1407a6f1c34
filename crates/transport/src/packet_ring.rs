//! A packet socket's receive ring (`PACKET_RX_RING`, `TPACKET_V2`): the kernel writes
//! each arriving frame into a slot of memory mapped into the process and flips the
//! slot's status word; the process reads frames where they lie and hands each slot
//! back. Looking for a frame is one load from memory, not a `recv()`: a rank that
//! busy-polls a raw lane between other work pays nothing for an empty look (with
//! `recv()` an empty look cost a system call per lane and pass), and a frame that is
//! there is read without the copy into a buffer.
//!
//! `TPACKET_V2` rather than `V3`: V3 hands frames over a block at a time, when the
//! block fills or a timeout (milliseconds) retires it, which is for capture; a
//! ping-pong wants each frame at once.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::packet::PacketSocket;

// linux/if_packet.h
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_VERSION: libc::c_int = 10;
const TPACKET_V2: libc::c_int = 1;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
/// `TPACKET_ALIGN(sizeof(struct tpacket2_hdr)) + sizeof(struct sockaddr_ll)`.
const TPACKET2_HDRLEN: usize = 32 + 20;
const TPACKET_ALIGNMENT: usize = 16;

/// `struct tpacket_req`.
#[repr(C)]
#[derive(Clone, Copy)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

/// `struct tpacket2_hdr`, at the start of every slot; `tp_status` is read and written
/// through an atomic (see [`RxRing::status`]).
#[repr(C)]
#[derive(Clone, Copy)]
struct Tpacket2Hdr {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_sec: u32,
    tp_nsec: u32,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
    tp_padding: [u8; 4],
}

/// Where a frame that [`RxRing::peek`] found lies: `snap` bytes at `at` (the frame was
/// `len` long on the wire).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lent {
    at: *const u8,
    snap: usize,
    pub(crate) len: usize,
}

fn align_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// The receive ring of one packet socket. Unmapped on drop, which must come before the
/// socket is closed (`PacketSocket` declares it first for that reason).
#[derive(Debug)]
pub(crate) struct RxRing {
    map: *mut u8,
    map_len: usize,
    frame_size: usize,
    frames_per_block: usize,
    block_size: usize,
    frames: usize,
    /// The slot the next frame arrives in (the kernel fills them in order).
    next: usize,
}

// SAFETY: the mapping is owned by this value alone (nothing else holds the pointer), and
// the kernel's side of it is synchronised through the status words.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Sets up a ring on `sock`, which must not be bound yet (a frame queued before the
    /// ring would stay in the socket's queue, unread, and keep the socket readable for
    /// ever): about `frames` slots, each holding a frame of up to `max_frame` bytes.
    pub(crate) fn new(sock: &PacketSocket, max_frame: usize, frames: usize) -> io::Result<RxRing> {
        // SAFETY: sysconf reads a constant of the system.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        // The kernel puts the frame's MAC header so that its network header is aligned
        // 16 bytes past the slot's headers.
        let net_offset = align_up(TPACKET2_HDRLEN + 16, TPACKET_ALIGNMENT);
        let frame_size = align_up(net_offset + max_frame, TPACKET_ALIGNMENT);
        // Blocks of about 64 KiB (a page multiple holding whole slots); a slot never
        // spans blocks.
        let block_size = align_up(frame_size.max(64 << 10), page);
        let frames_per_block = block_size / frame_size;
        let block_nr = frames.div_ceil(frames_per_block).max(1);
        let req = TpacketReq {
            block_size: block_size as u32,
            block_nr: block_nr as u32,
            frame_size: frame_size as u32,
            frame_nr: (frames_per_block * block_nr) as u32,
        };
        sock.setsockopt(libc::SOL_PACKET, PACKET_VERSION, TPACKET_V2)?;
        sock.setsockopt(libc::SOL_PACKET, PACKET_RX_RING, req)?;
        let map_len = block_size * block_nr;
        // SAFETY: a fresh shared mapping of the socket's ring, of exactly the size the
        // kernel allocated; the result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                sock.as_fd().as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(RxRing {
            map: map.cast(),
            map_len,
            frame_size,
            frames_per_block,
            block_size,
            frames: frames_per_block * block_nr,
            next: 0,
        })
    }

    /// Slots in the ring.
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.frames
    }

    fn slot(&self, i: usize) -> *mut u8 {
        let at =
            (i / self.frames_per_block) * self.block_size + (i % self.frames_per_block) * self.frame_size;
        debug_assert!(at + self.frame_size <= self.map_len);
        // SAFETY: `at` lies within the mapping (slots are laid out as the kernel was
        // told in `new`).
        unsafe { self.map.add(at) }
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: every slot starts with a tpacket2_hdr whose first field, the status
        // word, is 4-byte aligned (slots are 16-aligned in a page-aligned mapping) and
        // lives as long as the mapping, i.e. `self`. The kernel writes it too, which is
        // why it is accessed atomically.
        unsafe { &*(self.slot(i) as *const AtomicU32) }
    }

    /// The next frame, if the kernel has put one in the ring: where it lies, until
    /// [`RxRing::release`].
    pub(crate) fn peek(&self) -> Option<Lent> {
        if self.status(self.next).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            return None;
        }
        let slot = self.slot(self.next);
        // SAFETY: the status says the slot is the process's: the kernel wrote the header
        // before it set the status (the Acquire load above orders the read after that).
        let hdr = unsafe { std::ptr::read(slot as *const Tpacket2Hdr) };
        let (mac, snap) = (usize::from(hdr.tp_mac), hdr.tp_snaplen as usize);
        if mac > self.frame_size || snap > self.frame_size - mac {
            // Not what the kernel writes; an empty frame, never read past the slot.
            return Some(Lent {
                at: slot,
                snap: 0,
                len: 0,
            });
        }
        Some(Lent {
            // SAFETY: `mac` lies within the slot (checked above).
            at: unsafe { slot.add(mac) },
            snap,
            len: hdr.tp_len as usize,
        })
    }

    /// The bytes of the frame `lent` (from [`RxRing::peek`], not released since): from
    /// its Ethernet header on, cut at the slot's end if it was longer.
    pub(crate) fn bytes(&self, lent: Lent) -> &[u8] {
        // SAFETY: `peek` checked that `at..at + snap` lies within the current slot, which
        // the kernel does not write while its status is USER, i.e. until `release`
        // (taking `&mut self`, so not while this borrow of `self` lives).
        unsafe { std::slice::from_raw_parts(lent.at, lent.snap) }
    }

    /// The status word of the next frame's slot: where a look without the port's lock
    /// sees whether the kernel put a frame there ([`frame_ready`]). Valid while the ring
    /// lives; it moves on with every [`RxRing::release`].
    pub(crate) fn next_status(&self) -> *const AtomicU32 {
        self.status(self.next)
    }

    /// Hands the slot [`RxRing::peek`] returned back to the kernel.
    pub(crate) fn release(&mut self) {
        self.status(self.next).store(TP_STATUS_KERNEL, Ordering::Release);
        self.next = (self.next + 1) % self.frames;
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no frame is lent any more
        // (lending borrows `self`).
        unsafe {
            libc::munmap(self.map.cast(), self.map_len);
        }
    }
}

/// Whether the kernel has put a frame in the slot whose status word is at `status` (from
/// [`RxRing::next_status`]).
///
/// # Safety
/// `status` must come from [`RxRing::next_status`] of a ring that still lives.
pub(crate) unsafe fn frame_ready(status: *const AtomicU32) -> bool {
    // SAFETY: the caller guarantees the word lies in a live ring's mapping; it is
    // 4-byte aligned and accessed atomically by the kernel and by us (see `status`).
    unsafe { (*status).load(Ordering::Acquire) & TP_STATUS_USER != 0 }
}
