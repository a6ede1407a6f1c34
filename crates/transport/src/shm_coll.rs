//! The node's collective area: a collective whose members are exactly the ranks of one
//! node (MPI_COMM_WORLD on one host, a communicator split by node) meets here instead
//! of sending messages. A first alltoall of 256 ranks on one host took eight rounds of
//! messages, each to a peer never talked to before (fresh ring pages, a sleep and a
//! wake-up per round); here it is one write, one wait and one read per rank.
//!
//! Every member runs the node's collectives in the same order, numbered 1, 2, …: MPI
//! orders the blocking collectives of a communicator, and the communicators that use
//! this area all have the node's ranks as members, so (one thread calling MPI) their
//! collectives are ordered alike too. Collective `s` uses buffer `s % 2` of each member
//! (its parity):
//!
//! - **Post**: a member writes its bytes into its buffer, then the buffer's stamp (`s`,
//!   release): a reader that sees the stamp sees the bytes.
//! - **Arrived** (per parity, counted over all collectives of that parity): collectives
//!   that wait for every member (barrier, allreduce, allgather, alltoall) count each
//!   member's post. All members posted `s` once it reaches members × such collectives
//!   of that parity up to `s`.
//! - **Departed** (per parity): every member counts itself once it is done with `s`
//!   (read what it needed; a root once it posted). A buffer is written again, for
//!   `s + 2`, only once every member departed from `s`. Nobody can depart from `s + 2`
//!   before all departed from `s` (its post waits for that), so the count never runs
//!   ahead and "members × collectives of this parity up to `s`" is exact.
//!
//! Whoever completes a count rings every sleeping member ([`ShmNode::wake_all`]); so
//! does a root after its post. The area is used only when every rank of the node joined
//! the segment: the verdict is one word in the header, set once by whoever settles it
//! first (the rank that completes the node, or the leader when it stops waiting for
//! joins), so every member decides alike.
//!
//! Members share the area, so what a reader takes from it is bounded by [`COLL_DATA`]
//! and its own arguments, never by a length read from the segment.

use std::io;
use std::sync::atomic::{fence, Ordering};

use super::{Layout, ShmNode, HEADER_VERDICT, LINE, PAGE};

/// A member's buffer: a line for its stamp, then its bytes.
const COLL_BUF: usize = 2 * PAGE;
/// Most bytes one member posts to one collective of the area.
pub const COLL_DATA: usize = COLL_BUF - LINE;

const VERDICT_SERVES: u32 = 1;
const VERDICT_REFUSED: u32 = 2;

/// In the area's first page, after the counters: per parity, whether a member sleeps
/// until every member departed (u32).
const DEPARTURE_WAITERS: usize = 4 * LINE;

/// The area's counters (each per parity, on a line of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollCounter {
    Arrived = 0,
    Departed = 1,
}

impl Layout {
    /// The collective area: a page of counters, then two buffers per rank.
    pub(super) fn coll_at(&self) -> usize {
        self.boxes_at() + self.boxes_bytes()
    }

    pub(super) fn coll_bytes(&self) -> usize {
        PAGE + self.ranks * 2 * COLL_BUF
    }

    pub(super) fn coll_counter(&self, counter: CollCounter, parity: usize) -> usize {
        self.coll_at() + (counter as usize * 2 + (parity & 1)) * LINE
    }

    pub(super) fn coll_buf(&self, index: usize, parity: usize) -> usize {
        self.coll_at() + PAGE + (index * 2 + (parity & 1)) * COLL_BUF
    }
}

impl ShmNode {
    /// Whether the collective area serves the node's collectives: `None` while that is
    /// not settled yet.
    pub fn collectives_verdict(&self) -> Option<bool> {
        match self.seg.u32_at(HEADER_VERDICT).load(Ordering::Acquire) {
            0 => None,
            v => Some(v == VERDICT_SERVES),
        }
    }

    /// Settles the verdict unless someone did first; returns the verdict that holds.
    pub fn decide_collectives(&self, serve: bool) -> bool {
        let want = if serve { VERDICT_SERVES } else { VERDICT_REFUSED };
        let word = self.seg.u32_at(HEADER_VERDICT);
        match word.compare_exchange(0, want, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => serve,
            Err(held) => held == VERDICT_SERVES,
        }
    }

    /// The count of `counter` for collectives of `parity`.
    pub fn coll_count(&self, counter: CollCounter, parity: usize) -> u64 {
        self.seg
            .u64_at(self.layout.coll_counter(counter, parity))
            .load(Ordering::Acquire)
    }

    /// Counts this rank in `counter` for collectives of `parity`; returns the new count.
    pub fn coll_count_me(&self, counter: CollCounter, parity: usize) -> u64 {
        self.seg
            .u64_at(self.layout.coll_counter(counter, parity))
            .fetch_add(1, Ordering::AcqRel)
            + 1
    }

    /// Before this rank sleeps until every member departed from the collective of
    /// `parity`: the member that completes the count rings every sleeper (it looks after
    /// counting; we count on it after saying so: with a full fence on both sides one of
    /// us sees the other).
    pub fn coll_want_departures(&self, parity: usize) {
        let at = self.layout.coll_at() + DEPARTURE_WAITERS + 4 * (parity & 1);
        self.seg.u32_at(at).store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// After this rank completed the departures from a collective of `parity`: whether
    /// anyone sleeps until then (and they are forgotten: the caller rings them).
    pub fn coll_take_departure_waiters(&self, parity: usize) -> bool {
        fence(Ordering::SeqCst);
        let flag = self
            .seg
            .u32_at(self.layout.coll_at() + DEPARTURE_WAITERS + 4 * (parity & 1));
        flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::AcqRel) != 0
    }

    /// Writes `parts` one after the other into this rank's buffer of `parity`, then
    /// stamps it `seq`. The caller made sure every member departed from the collective
    /// that used this buffer before.
    pub fn coll_post(&self, parity: usize, seq: u64, parts: &[&[u8]]) -> io::Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total > COLL_DATA {
            return Err(io::Error::other(format!(
                "{total} bytes do not fit a collective buffer of {COLL_DATA}"
            )));
        }
        let buf = self.layout.coll_buf(self.me, parity);
        let mut at = buf + LINE;
        for part in parts {
            // SAFETY: inside this rank's own buffer of the mapping (the total was checked
            // against COLL_DATA); no member reads it before the stamp below is published,
            // and none still reads it (the caller waited for every departure).
            unsafe {
                let dst = self.seg.base.as_ptr().add(at);
                std::ptr::copy_nonoverlapping(part.as_ptr(), dst, part.len());
            }
            at += part.len();
        }
        self.seg.u64_at(buf).store(seq, Ordering::Release);
        Ok(())
    }

    /// The stamp of member `index`'s buffer of `parity`: the last collective it posted there.
    pub fn coll_stamp(&self, index: usize, parity: usize) -> u64 {
        if index >= self.layout.ranks {
            return 0;
        }
        self.seg
            .u64_at(self.layout.coll_buf(index, parity))
            .load(Ordering::Acquire)
    }

    /// Copies `out.len()` bytes from byte `offset` of member `index`'s buffer of
    /// `parity`, once its stamp said it posted there.
    pub fn coll_read(&self, index: usize, parity: usize, offset: usize, out: &mut [u8]) -> io::Result<()> {
        if index >= self.layout.ranks || offset.checked_add(out.len()).is_none_or(|end| end > COLL_DATA) {
            return Err(io::Error::other(format!(
                "no bytes {offset}..+{} of member {index}'s collective buffer",
                out.len()
            )));
        }
        let at = self.layout.coll_buf(index, parity) + LINE + offset;
        // SAFETY: inside member `index`'s buffer (checked above); its owner wrote these
        // bytes before the stamp the caller saw, and writes them again only after every
        // member, this one included, departed from this collective.
        unsafe {
            let src = self.seg.base.as_ptr().add(at);
            std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len());
        }
        Ok(())
    }

    /// How many members ended (one load: the header's count).
    pub fn gone_count(&self) -> u64 {
        self.seg.u64_at(super::HEADER_GONE).load(Ordering::Acquire)
    }

    /// Whether the member in slot `index` ended without finalizing.
    pub fn failed(&self, index: usize) -> bool {
        index < self.layout.ranks && self.gone(index) && !self.finalized(index)
    }
}
