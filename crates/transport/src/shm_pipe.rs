//! One lane's half of a node segment (`shm.rs`): the boxes and rings of its two
//! directions, read and written as a byte stream ([`Pipe`]); see `shm.rs` for the layout
//! and why box and ring keep the bytes in order.

use std::io::IoSlice;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rustix::net::SocketAddrUnix;

use super::{
    wake, Segment, BOX_AT, BOX_DATA, BOX_FILL, BOX_PAYLOAD, BOX_SEQ, BOX_SLOTS, CTL_EMPTIED, CTL_TAIL,
    CTL_WAITS, LINE,
};
use crate::stream::Pipe;
use crate::LinkError;

/// Offsets of one direction: its boxes (after their control line, which holds the
/// ring's tail), the ring's head (the consumer's) and the ring's data.
#[derive(Clone, Copy)]
pub(super) struct WayAt {
    pub(super) boxed: usize,
    pub(super) head: usize,
    pub(super) data: usize,
}

/// One direction's state kept locally (never re-read from the shared segment).
pub(super) struct Side {
    pub(super) at: WayAt,
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
            std::ptr::copy_nonoverlapping(src.as_ptr(), base.add(at), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), base, src.len() - first);
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
            std::ptr::copy_nonoverlapping(base.add(at), dst.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(base, dst.as_mut_ptr().add(first), dst.len() - first);
        }
    }

    /// Copies the slices of `iov` (at most [`BOX_PAYLOAD`] bytes in all) into our box
    /// at `slot`.
    fn put_boxed(&self, slot: usize, iov: &[IoSlice<'_>]) {
        let mut at = slot + BOX_DATA;
        for s in iov {
            // SAFETY: inside our box's data (the caller checked the total length); the
            // consumer does not read the box before its fill is published, nor do we
            // write it again before the consumer emptied it.
            unsafe {
                let dst = self.seg.base.as_ptr().add(at);
                std::ptr::copy_nonoverlapping(s.as_ptr(), dst, s.len());
            }
            at += s.len();
        }
    }

    /// Copies `dst.len()` bytes out of the peer's box at `slot`, from byte `from` of its
    /// data.
    fn get_boxed(&self, slot: usize, from: usize, dst: &mut [u8]) {
        // SAFETY: `from + dst.len()` is at most the box's fill, checked to be at most
        // BOX_PAYLOAD; the producer does not write the box again before we empty it.
        unsafe {
            let src = self.seg.base.as_ptr().add(slot + BOX_DATA + from);
            std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len());
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
    fn box_free(&mut self) -> bool {
        if self.tx.boxes.wrapping_sub(self.tx.boxes_seen) as usize >= BOX_SLOTS {
            self.tx.boxes_seen = self
                .seg
                .u32_at(self.tx.at.boxed + CTL_EMPTIED)
                .load(Ordering::Acquire);
        }
        // A count ahead of ours (a corrupted one) makes a large difference: no box.
        (self.tx.boxes.wrapping_sub(self.tx.boxes_seen) as usize) < BOX_SLOTS
    }

    /// Writes what fits: a small write whole into the next box if it is free, otherwise
    /// as much as the ring takes.
    fn try_write(&mut self, iov: &[IoSlice<'_>], want: usize) -> Result<usize, LinkError> {
        if want <= BOX_PAYLOAD && self.box_free() {
            let slot = box_slot(self.tx.at.boxed, self.tx.boxes);
            self.seg
                .u64_at(slot + BOX_AT)
                .store(self.tx.pos, Ordering::Relaxed);
            self.seg
                .u32_at(slot + BOX_FILL)
                .store(want as u32, Ordering::Relaxed);
            self.put_boxed(slot, iov);
            self.tx.boxes = self.tx.boxes.wrapping_add(1);
            self.seg
                .u32_at(slot + BOX_SEQ)
                .store(self.tx.boxes, Ordering::Release);
            return Ok(want);
        }
        let cap = self.ring as u64;
        let mut used = self.tx.pos - self.tx.seen;
        if cap - used < want as u64 {
            used = self.tx_fill()?;
        }
        let free = cap - used;
        let mut written = 0u64;
        for s in iov {
            let n = (s.len() as u64).min(free - written);
            self.put(self.tx.at.data, self.tx.pos + written, &s[..n as usize]);
            written += n;
            if written == free {
                break;
            }
        }
        if written > 0 {
            self.tx.pos += written;
            self.seg
                .u64_at(self.tx.at.boxed + CTL_TAIL)
                .store(self.tx.pos, Ordering::Release);
        }
        Ok(written as usize)
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
        let waits = self.seg.u32_at(self.rx.at.boxed + CTL_WAITS);
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
        let slot = box_slot(self.rx.at.boxed, self.rx.boxes);
        let next = self.rx.boxes.wrapping_add(1);
        if self.seg.u32_at(slot + BOX_SEQ).load(Ordering::Acquire) != next {
            return Ok(None);
        }
        let len = self.seg.u32_at(slot + BOX_FILL).load(Ordering::Relaxed) as usize;
        let at = self.seg.u64_at(slot + BOX_AT).load(Ordering::Relaxed);
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
        // Sequentially consistent: `room_made` reads "the producer waits" next.
        self.seg
            .u32_at(self.rx.at.boxed + CTL_EMPTIED)
            .store(self.rx.boxes, Ordering::SeqCst);
    }

    /// Whether the peer filled the next box or moved the ring's tail past what this end
    /// read.
    #[inline]
    fn box_or_ring_filled(&self, order: Ordering) -> bool {
        let next = self.rx.boxes.wrapping_add(1);
        self.seg
            .u32_at(box_slot(self.rx.at.boxed, self.rx.boxes) + BOX_SEQ)
            .load(order)
            == next
            || self.seg.u64_at(self.rx.at.boxed + CTL_TAIL).load(order) != self.rx.pos
    }
}

/// Where box number `n` (counted from 0) of the direction whose boxes start at `boxes`
/// lies.
pub(super) fn box_slot(boxes: usize, n: u32) -> usize {
    boxes + LINE * (1 + n as usize % BOX_SLOTS)
}

impl Pipe for ShmPipe {
    fn write(&mut self, iov: &[IoSlice<'_>]) -> Result<usize, LinkError> {
        let want: usize = iov.iter().map(|s| s.len()).sum();
        if want == 0 {
            return Ok(0);
        }
        let mut written = self.try_write(iov, want)?;
        if written == 0 {
            // Ask the consumer to ring when it makes room, then look once more.
            self.seg
                .u32_at(self.tx.at.boxed + CTL_WAITS)
                .store(1, Ordering::SeqCst);
            self.tx.waiting = Some(want);
            written = self.try_write(iov, want)?;
        }
        if written > 0 {
            self.tx.waiting = None;
            if let Some((word, bit)) = self.written {
                self.seg.u64_at(word).fetch_or(bit, Ordering::AcqRel);
            }
            if written < want {
                if let Some((word, bit)) = self.own_written {
                    self.seg.u64_at(word).fetch_or(bit, Ordering::Relaxed);
                }
            }
            self.wake_peer();
        }
        Ok(written)
    }

    fn read(&mut self, dst: &mut [u8]) -> Result<Option<usize>, LinkError> {
        if dst.is_empty() {
            return Ok(None);
        }
        // The tail first, then the box: a box filled after we look lies beyond this tail.
        let cap = self.ring as u64;
        if self.rx.seen == self.rx.pos {
            self.rx.seen = self
                .seg
                .u64_at(self.rx.at.boxed + CTL_TAIL)
                .load(Ordering::Acquire);
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

    fn take_in_place(&mut self) {
        self.emptied_box();
        self.room_made();
    }

    /// No bytes known and unread, the next box not stamped and the ring's tail where
    /// this end read up to: two loads of lines the producer writes only to send.
    #[inline]
    fn quiet(&self) -> bool {
        self.rx.seen == self.rx.pos && self.rx.boxed == 0 && !self.box_or_ring_filled(Ordering::Acquire)
    }

    fn signalled(&self) -> bool {
        self.written.is_some()
    }

    /// The rank's "asleep" flag is its node's, set once per sleep by [`ShmNode::arm`]
    /// before the lanes look (a full fence between): a lane only says whether bytes
    /// already wait in its box or ring, or room it waits for is there.
    fn arm_wakeup(&mut self) -> bool {
        !self.box_or_ring_filled(Ordering::SeqCst) && !self.tx.waiting.is_some_and(|want| self.room(want))
    }
}
