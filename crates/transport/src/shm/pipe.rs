//! One lane's half of a node segment (`mod.rs`): the boxes and rings of its two
//! directions, read and written as a byte stream ([`Pipe`]); see `mod.rs` for the layout
//! and why box and ring keep the bytes in order.

use std::cell::Cell;
use std::io::IoSlice;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use rustix::net::SocketAddrUnix;

use super::{
    wake, Segment, BOX, BOX_AT, BOX_DATA, BOX_FILL, BOX_PAYLOAD, BOX_SEQ, BOX_SLOTS, CTL_EMPTIED, CTL_TAIL,
    CTL_WAITS, LINE,
};
use crate::copy::copy_to;
use crate::stream::Pipe;
use crate::LinkError;

/// Bytes of a large write that the consumer may take before the rest is written: one
/// 64 KiB message copied in and out at once, not one copy after the other.
const PUBLISH_EVERY: usize = 8 << 10;

/// Offsets of one direction: its boxes (after their control line, which holds the
/// ring's tail), the ring's head (the consumer's) and the ring's data.
#[derive(Clone, Copy)]
pub(super) struct WayAt {
    pub(super) boxed: usize,
    pub(super) head: usize,
    pub(super) data: usize,
}

/// One direction's control line and boxes, addressed directly: their bounds are checked
/// once, when the pipe is made, not on every access of a small message's way.
#[derive(Clone, Copy)]
pub(super) struct Boxes {
    ctl: NonNull<u8>,
}

// SAFETY: a pointer into the node segment, which the pipe holding these boxes keeps
// mapped (its `Arc<Segment>`); the segment itself is Send and Sync (see `Segment`).
unsafe impl Send for Boxes {}

impl Boxes {
    /// The boxes of the direction whose control line is at `at` in `seg`.
    ///
    /// # Panics
    /// When they do not lie within the segment, line-aligned.
    pub(super) fn new(seg: &Segment, at: usize) -> Boxes {
        assert!(at.is_multiple_of(LINE) && at.checked_add(BOX).is_some_and(|end| end <= seg.len));
        // SAFETY: `at` lies within the mapping (checked above).
        let ctl = unsafe { NonNull::new_unchecked(seg.base.as_ptr().add(at)) };
        Boxes { ctl }
    }

    #[inline(always)]
    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset + 4 <= BOX && offset.is_multiple_of(4));
        // SAFETY: every offset used is a constant field of the control line or a box
        // (below BOX, aligned), within the range `new` checked; this memory is only
        // accessed atomically, by every process.
        unsafe { &*self.ctl.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    #[inline(always)]
    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset + 8 <= BOX && offset.is_multiple_of(8));
        // SAFETY: as in `u32_at`.
        unsafe { &*self.ctl.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    /// Box number `n`'s offset from the control line.
    #[inline(always)]
    fn slot(n: u32) -> usize {
        LINE * (1 + n as usize % BOX_SLOTS)
    }
    #[inline(always)]
    fn seq(&self, n: u32) -> &AtomicU32 {
        self.u32_at(Self::slot(n) + BOX_SEQ)
    }
    #[inline(always)]
    fn fill(&self, n: u32) -> &AtomicU32 {
        self.u32_at(Self::slot(n) + BOX_FILL)
    }
    #[inline(always)]
    fn at(&self, n: u32) -> &AtomicU64 {
        self.u64_at(Self::slot(n) + BOX_AT)
    }
    /// Where box `n`'s bytes go: [`BOX_PAYLOAD`] of them.
    #[inline(always)]
    fn data(&self, n: u32) -> *mut u8 {
        // SAFETY: within box `n`, inside the range `new` checked.
        unsafe { self.ctl.as_ptr().add(Self::slot(n) + BOX_DATA) }
    }
    #[inline(always)]
    fn tail(&self) -> &AtomicU64 {
        self.u64_at(CTL_TAIL)
    }
    #[inline(always)]
    fn emptied(&self) -> &AtomicU32 {
        self.u32_at(CTL_EMPTIED)
    }
    #[inline(always)]
    fn waits(&self) -> &AtomicU32 {
        self.u32_at(CTL_WAITS)
    }
}

/// One direction's state kept locally (never re-read from the shared segment).
pub(super) struct Side {
    pub(super) at: WayAt,
    pub(super) lines: Boxes,
    /// Our own counter (the producer's tail, or the consumer's head).
    pub(super) pos: u64,
    /// The last value seen of the other side's counter.
    pub(super) seen: u64,
    /// Boxes filled (producer) or emptied (consumer) so far.
    pub(super) boxes: u32,
    /// Producer: the consumer's count of emptied boxes, as last read.
    pub(super) boxes_seen: u32,
    /// Consumer: bytes of the full box already read.
    pub(super) boxed: usize,
    /// Producer: blocked on a full box and ring with a write of this many bytes, it
    /// asked the consumer to ring.
    pub(super) waiting: Option<usize>,
}

/// The boxes and rings of one lane in the node segment and the peer's bell, as a [`Pipe`].
pub struct ShmPipe {
    pub(super) seg: Arc<Segment>,
    pub(super) ring: usize,
    pub(super) tx: Side,
    pub(super) rx: Side,
    /// A box taken in place (`take_in_place`) whose emptying the producer has not been
    /// told yet: told at this end's next look at the lane, off the latency-critical
    /// path (the store and full fence of [`ShmPipe::emptied_box`] would sit between a
    /// message's arrival and the reply).
    pub(super) emptied_untold: Cell<bool>,
    /// The peer's "asleep" flag (in its slot).
    pub(super) peer_asleep: usize,
    /// On a signalled node: our word in the peer's bitmap of writers, and our bit in it.
    pub(super) written: Option<(usize, u64)>,
    /// On a signalled node: the peer's word in our own bitmap of writers, and its bit.
    /// A write that leaves bytes queued sets it, so the runtime flushes the rest on its
    /// next pass without looking at every lane.
    pub(super) own_written: Option<(usize, u64)>,
    pub(super) ringer: Arc<OwnedFd>,
    pub(super) peer_bell: SocketAddrUnix,
}

impl ShmPipe {
    /// Bytes of each ring.
    pub fn ring_size(&self) -> usize {
        self.ring
    }

    /// Copies `src` into the ring at stream position `pos` (wrapping).
    fn put(&self, data: usize, pos: u64, src: &[u8]) {
        let at = (pos as usize) & (self.ring - 1);
        let first = src.len().min(self.ring - at);
        // SAFETY: both ranges lie inside this ring's data area of the mapping (`at` is
        // masked and `first + rest` is at most the free space, itself at most `ring`);
        // the consumer does not read these bytes before the tail moves past them.
        unsafe {
            let base = self.seg.base.as_ptr().add(data);
            copy_to(&src[..first], base.add(at));
            copy_to(&src[first..], base);
        }
    }

    /// Copies `dst.len()` bytes out of the ring from stream position `pos` (wrapping).
    fn get(&self, data: usize, pos: u64, dst: &mut [u8]) {
        let at = (pos as usize) & (self.ring - 1);
        let first = dst.len().min(self.ring - at);
        // SAFETY: both ranges lie inside this ring's data area (masked start, length at
        // most the fill level, itself checked to be at most `ring`); the producer does
        // not write them again before our head moves past them.
        unsafe {
            let base = self.seg.base.as_ptr().add(data);
            let rest = dst.len() - first;
            copy_to(std::slice::from_raw_parts(base.add(at), first), dst.as_mut_ptr());
            copy_to(
                std::slice::from_raw_parts(base, rest),
                dst.as_mut_ptr().add(first),
            );
        }
    }

    /// Fills the next box (free: [`ShmPipe::box_free`]) with the `want` bytes of
    /// `slices` (at most [`BOX_PAYLOAD`]) and stamps it.
    #[inline]
    fn fill_box<'a>(&mut self, want: usize, slices: impl IntoIterator<Item = &'a [u8]>) {
        let (b, n) = (self.tx.lines, self.tx.boxes);
        debug_assert!(want <= BOX_PAYLOAD);
        b.at(n).store(self.tx.pos, Ordering::Relaxed);
        b.fill(n).store(want as u32, Ordering::Relaxed);
        let mut dst = b.data(n);
        for s in slices {
            // SAFETY: inside our box's data (the caller checked the total length); the
            // consumer does not read the box before its stamp is published, nor do we
            // write it again before the consumer emptied it.
            unsafe {
                copy_to(s, dst);
                dst = dst.add(s.len());
            }
        }
        self.tx.boxes = n.wrapping_add(1);
        b.seq(n).store(self.tx.boxes, Ordering::Release);
    }

    /// Copies `dst.len()` bytes out of the peer's box at `slot`, from byte `from` of its
    /// data.
    fn get_boxed(&self, slot: usize, from: usize, dst: &mut [u8]) {
        // SAFETY: `from + dst.len()` is at most the box's fill, checked to be at most
        // BOX_PAYLOAD; the producer does not write the box again before we empty it.
        unsafe {
            let src = self.seg.base.as_ptr().add(slot + BOX_DATA + from);
            copy_to(std::slice::from_raw_parts(src, dst.len()), dst.as_mut_ptr());
        }
    }

    fn corrupt(&self, what: &str, fill: u64) -> LinkError {
        LinkError::Protocol(format!(
            "shared-memory ring {what}: {fill} bytes in a ring of {} (the peer corrupted the segment)",
            self.ring
        ))
    }

    /// Bytes in the ring we produce, the consumer's head read again.
    fn tx_fill(&mut self) -> Result<u64, LinkError> {
        self.tx.seen = self.seg.u64_at(self.tx.at.head).load(Ordering::SeqCst);
        let fill = self.tx.pos.wrapping_sub(self.tx.seen);
        if fill > self.ring as u64 {
            return Err(self.corrupt("head", fill));
        }
        Ok(fill)
    }

    /// Whether a box is free for the producer, the consumer's count read again only
    /// when every box was filled since it was last read.
    #[inline]
    fn box_free(&mut self) -> bool {
        if self.tx.boxes.wrapping_sub(self.tx.boxes_seen) as usize >= BOX_SLOTS {
            self.tx.boxes_seen = self.tx.lines.emptied().load(Ordering::Acquire);
        }
        // A count ahead of ours (a corrupted one) makes a large difference: no box.
        (self.tx.boxes.wrapping_sub(self.tx.boxes_seen) as usize) < BOX_SLOTS
    }

    /// Writes what fits: a small write whole into the next box if it is free, otherwise
    /// as much as the ring takes.
    fn try_write(&mut self, iov: &[IoSlice<'_>], want: usize) -> Result<usize, LinkError> {
        if want <= BOX_PAYLOAD && self.box_free() {
            self.fill_box(want, iov.iter().map(|s| &s[..]));
            return Ok(want);
        }
        let cap = self.ring as u64;
        let mut used = self.tx.pos - self.tx.seen;
        if cap - used < want as u64 {
            used = self.tx_fill()?;
        }
        let free = cap - used;
        let mut written = 0u64;
        'slices: for s in iov {
            let mut s = &s[..(s.len() as u64).min(free - written) as usize];
            while !s.is_empty() {
                // A large write is published piece by piece: the consumer copies each
                // piece out while this end copies the next in.
                let n = s.len().min(PUBLISH_EVERY);
                self.put(self.tx.at.data, self.tx.pos + written, &s[..n]);
                written += n as u64;
                s = &s[n..];
                if !s.is_empty() {
                    self.tx
                        .lines
                        .tail()
                        .store(self.tx.pos + written, Ordering::Release);
                }
            }
            if written == free {
                break 'slices;
            }
        }
        if written > 0 {
            self.tx.pos += written;
            self.tx.lines.tail().store(self.tx.pos, Ordering::Release);
        }
        Ok(written as usize)
    }

    /// After a write that took bytes: says so where the consumer looks (and, when some
    /// were `left` queued, where this end's next pass looks), and rings it if it sleeps.
    #[inline]
    fn wrote(&mut self, left: bool) {
        self.tx.waiting = None;
        if let Some((word, bit)) = self.written {
            self.seg.u64_at(word).fetch_or(bit, Ordering::AcqRel);
        }
        if left {
            if let Some((word, bit)) = self.own_written {
                self.seg.u64_at(word).fetch_or(bit, Ordering::Relaxed);
            }
        }
        self.wake_peer();
    }

    fn wake_peer(&self) {
        wake(&self.seg, self.peer_asleep, &self.ringer, &self.peer_bell);
    }

    /// Whether the write we wait with (`want` bytes) would take something now.
    fn room(&mut self, want: usize) -> bool {
        (want <= BOX_PAYLOAD && self.box_free()) || self.tx_fill().is_ok_and(|f| f < self.ring as u64)
    }

    /// After emptying a box or moving the head: rings the producer if it waits for
    /// room. (It says so, then looks again; we make room, then look: with sequentially
    /// consistent accesses on both sides, one of us sees the other.)
    fn room_made(&self) {
        let waits = self.rx.lines.waits();
        if waits.load(Ordering::SeqCst) != 0 && waits.swap(0, Ordering::SeqCst) != 0 {
            // On a signalled node the producer reads the lane when its bit says so.
            if let Some((word, bit)) = self.written {
                self.seg.u64_at(word).fetch_or(bit, Ordering::AcqRel);
            }
            self.wake_peer();
        }
    }

    /// The peer's next box, if it filled it: where it lies, its length and the ring
    /// position it comes before.
    #[inline]
    fn peek_box(&self) -> Result<Option<(usize, usize, u64)>, LinkError> {
        let (b, n) = (self.rx.lines, self.rx.boxes);
        if b.seq(n).load(Ordering::Acquire) != n.wrapping_add(1) {
            return Ok(None);
        }
        let slot = box_slot(self.rx.at.boxed, n);
        let len = b.fill(n).load(Ordering::Relaxed) as usize;
        let at = b.at(n).load(Ordering::Relaxed);
        if len == 0
            || len > BOX_PAYLOAD
            || self.rx.boxed >= len
            || at.wrapping_sub(self.rx.pos) > self.ring as u64
        {
            return Err(self.bad_box(len, at));
        }
        Ok(Some((slot, len, at)))
    }

    #[cold]
    #[inline(never)]
    fn bad_box(&self, len: usize, at: u64) -> LinkError {
        LinkError::Protocol(format!(
            "shared-memory box of {len} bytes at ring position {at} (1 to {BOX_PAYLOAD} \
             bytes, from position {}; the peer corrupted the segment)",
            self.rx.pos
        ))
    }

    /// Copies out of the peer's full box at `slot` of `len` bytes into `dst`; empties
    /// it once all is read (then returns `true` as well).
    fn read_box(&mut self, slot: usize, len: usize, dst: &mut [u8]) -> (usize, bool) {
        let n = (len - self.rx.boxed).min(dst.len());
        self.get_boxed(slot, self.rx.boxed, &mut dst[..n]);
        self.rx.boxed += n;
        if self.rx.boxed < len {
            return (n, false);
        }
        self.rx.boxed = 0;
        self.emptied_box();
        (n, true)
    }

    /// Counts the box just read as emptied, on the control line the producer reads.
    fn emptied_box(&mut self) {
        self.rx.boxes = self.rx.boxes.wrapping_add(1);
        self.publish_emptied();
    }

    /// Writes the count of boxes emptied where the producer reads it.
    fn publish_emptied(&self) {
        self.emptied_untold.set(false);
        // Sequentially consistent: `room_made` reads "the producer waits" next.
        self.rx.lines.emptied().store(self.rx.boxes, Ordering::SeqCst);
    }

    /// Tells the producer of a box taken in place before (`take_in_place`), and rings
    /// it if it waits for room. Every look at the lane starts here, so the producer
    /// learns of it at the latest at this end's next progress pass or sleep.
    #[inline]
    fn tell_emptied(&self) {
        if self.emptied_untold.get() {
            self.tell_emptied_now();
        }
    }

    #[inline(never)]
    fn tell_emptied_now(&self) {
        self.publish_emptied();
        self.room_made();
    }

    /// Whether the peer filled the next box or moved the ring's tail past what this end
    /// read.
    #[inline]
    fn box_or_ring_filled(&self, order: Ordering) -> bool {
        let (b, n) = (self.rx.lines, self.rx.boxes);
        b.seq(n).load(order) == n.wrapping_add(1) || b.tail().load(order) != self.rx.pos
    }
}

/// Where box number `n` (counted from 0) of the direction whose boxes start at `boxes`
/// lies.
pub(super) fn box_slot(boxes: usize, n: u32) -> usize {
    boxes + Boxes::slot(n)
}

impl Pipe for ShmPipe {
    fn unread(&mut self) -> u64 {
        self.tx_fill().unwrap_or(0)
    }

    fn write(&mut self, iov: &[IoSlice<'_>]) -> Result<usize, LinkError> {
        let want: usize = iov.iter().map(|s| s.len()).sum();
        if want == 0 {
            return Ok(0);
        }
        let mut written = self.try_write(iov, want)?;
        if written == 0 {
            // Ask the consumer to ring when it makes room, then look once more.
            self.tx.lines.waits().store(1, Ordering::SeqCst);
            self.tx.waiting = Some(want);
            written = self.try_write(iov, want)?;
        }
        if written > 0 {
            self.wrote(written < want);
        }
        Ok(written)
    }

    /// A small frame whole into the next box when it is free (the latency-critical
    /// send), with fixed-width copies; otherwise as [`Pipe::write`].
    #[inline]
    fn write_frame(&mut self, header: &[u8], payload: &[u8]) -> Result<usize, LinkError> {
        let want = header.len() + payload.len();
        if want == 0 || want > BOX_PAYLOAD || !self.box_free() {
            return self.write(&[IoSlice::new(header), IoSlice::new(payload)]);
        }
        self.fill_box(want, [header, payload]);
        self.wrote(false);
        Ok(want)
    }

    fn read(&mut self, dst: &mut [u8]) -> Result<Option<usize>, LinkError> {
        self.tell_emptied();
        if dst.is_empty() {
            return Ok(None);
        }
        // The tail first, then the box: a box filled after we look lies beyond this tail.
        let cap = self.ring as u64;
        if self.rx.seen == self.rx.pos {
            self.rx.seen = self.rx.lines.tail().load(Ordering::Acquire);
            let fill = self.rx.seen.wrapping_sub(self.rx.pos);
            if fill > cap {
                return Err(self.corrupt("tail", fill));
            }
        }
        let boxed = self.peek_box()?;
        let before_box = boxed.map_or(u64::MAX, |(_, _, at)| at - self.rx.pos);
        let n = (self.rx.seen - self.rx.pos).min(before_box).min(dst.len() as u64) as usize;
        if n > 0 {
            self.get(self.rx.at.data, self.rx.pos, &mut dst[..n]);
            self.rx.pos += n as u64;
            self.seg
                .u64_at(self.rx.at.head)
                .store(self.rx.pos, Ordering::SeqCst);
        }
        let (mut taken, mut emptied) = (n, n > 0);
        if let Some((slot, len, at)) = boxed {
            if at == self.rx.pos && taken < dst.len() {
                let (m, box_emptied) = self.read_box(slot, len, &mut dst[taken..]);
                taken += m;
                emptied |= box_emptied;
            }
        }
        if emptied {
            self.room_made();
        }
        Ok((taken > 0).then_some(taken))
    }

    fn gathers(&self) -> bool {
        true
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    fn polled(&self) -> bool {
        true
    }

    /// The next box's data, when it is filled and nothing of the ring comes before it.
    #[inline]
    fn peek_in_place(&self) -> Option<(usize, usize)> {
        self.tell_emptied();
        if self.rx.boxed != 0 {
            return None;
        }
        // A damaged box is left to `read`, which says what is wrong.
        let (slot, len, at) = self.peek_box().ok()??;
        (at == self.rx.pos).then_some((slot + BOX_DATA, len))
    }

    /// The producer does not write a box again before `take_in_place` counts it
    /// emptied, and the caller's borrow of this pipe ends before that.
    #[inline]
    fn in_place(&self, at: usize, len: usize) -> &[u8] {
        self.seg.bytes(at, len)
    }

    /// Counted here; the producer is told at the next look (`tell_emptied`).
    fn take_in_place(&mut self) {
        self.rx.boxes = self.rx.boxes.wrapping_add(1);
        self.emptied_untold.set(true);
    }

    /// No bytes known and unread, the next box not stamped and the ring's tail where
    /// this end read up to: two loads of lines the producer writes only to send.
    #[inline]
    fn quiet(&self) -> bool {
        self.tell_emptied();
        self.rx.seen == self.rx.pos && self.rx.boxed == 0 && !self.box_or_ring_filled(Ordering::Acquire)
    }

    fn signalled(&self) -> bool {
        self.written.is_some()
    }

    /// The rank's "asleep" flag is its node's, set once per sleep by [`ShmNode::arm`]
    /// before the lanes look (a full fence between): a lane only says whether bytes
    /// already wait in its box or ring, or room it waits for is there.
    fn arm_wakeup(&mut self) -> bool {
        self.tell_emptied();
        !self.box_or_ring_filled(Ordering::SeqCst) && !self.tx.waiting.is_some_and(|want| self.room(want))
    }
}
