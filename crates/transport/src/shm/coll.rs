//! The node's collective area: a collective whose members are exactly the ranks of one
//! node (MPI_COMM_WORLD on one host, a communicator split by node) meets here instead
//! of sending messages. A first alltoall of 256 ranks on one host took eight rounds of
//! messages, each to a peer never talked to before (fresh ring pages, a sleep and a
//! wake-up per round); here it is one write, one wait and one read per rank.
//!
//! Every member runs the node's collectives in the same order, numbered 1, 2, …: MPI
//! orders the blocking collectives of a communicator, and the communicators that use
//! this area all have the node's ranks as members, so (one thread calling MPI) their
//! collectives are ordered alike too. Collective `s` uses buffer `s % COLL_PHASES` of
//! each member (its phase):
//!
//! - **Post**: a member writes its bytes (up to 24 into its slot of the phase, beside the
//!   stamp; more into its buffer of the phase), then the slot's stamp (`s`, release): a
//!   reader that sees the stamp sees the bytes. Every member posts the same length, so a
//!   reader knows where to look.
//! - **Arrived**: a collective that waits for every member (barrier, allreduce,
//!   allgather, alltoall; the root of a gather or reduce) waits until every member's
//!   stamp says `s`; on a node of [`COLL_COUNT_FROM`] ranks or more each member counts
//!   its post in its phase's counter instead (one line to watch, not one per member),
//!   and all posted once it reaches members × such collectives of that phase up to `s`.
//! - **Done**: each member stamps its own "done" line with `s` once it read what it
//!   needed (a member that only posts, once it posted). A buffer is written again, for `s + COLL_PHASES`,
//!   only once every member is done with `s`: a member may run that many collectives
//!   ahead (a root broadcasting over and over waits for nobody), and nobody can post to
//!   `s + COLL_PHASES` before all are done with `s`, which keeps the counters exact.
//!
//! Whoever completes an arrival count, and every poster on a small node, rings every
//! sleeping member; a member that sleeps until the others are done says so in a flag
//! the next one done looks at. Posts and "done" stamps look at the flags without a
//! fence ([`ShmNode::wake_sleepers`]): a fence (or a locked write) after every post
//! held a broadcasting root until the readers' copies of the line were gone, where a
//! plain store lets it go on (8 B broadcasts on 2 ranks: 1.5× Open MPI's time with it).
//! Without the fence, a post still on its way when a member said it sleeps may miss
//! it; a member's first sleep in a collective, and each after it was woken early,
//! therefore ends after a millisecond, when any such post is long visible (the others
//! wait for the bell, or the runtime's longest sleep). The area is used only when every
//! rank of the node joined the segment: the verdict is one word in the header, set once
//! by whoever settles it first (the rank that completes the node, or the leader when it
//! stops waiting for joins), so every member decides alike.
//!
//! Members share the area, so what a reader takes from it is bounded by [`COLL_DATA`]
//! and its own arguments, never by a length read from the segment.

use std::io;
use std::sync::atomic::{fence, Ordering};

use super::{Layout, ShmNode, HEADER_VERDICT, LINE, PAGE};
use crate::copy::{copy_into, copy_to};

/// A member's buffer of one phase, for posts of more than [`COLL_SMALL`] bytes.
const COLL_BUF: usize = PAGE;
/// Most bytes one member posts to one collective of the area.
pub const COLL_DATA: usize = COLL_BUF;
/// A member's slot of one phase: the stamp (u64), then a post of up to
/// [`COLL_SMALL`] bytes. A member's slots lie side by side: a reader of small posts
/// (an 8 B broadcast, over and over) gets four of them with one line.
const SLOT: usize = 32;
const STAMP: usize = 8;
pub const COLL_SMALL: usize = SLOT - STAMP;
/// Buffers per member: collective `s` uses buffer `s % COLL_PHASES`, so a member may
/// run this many collectives ahead of the slowest reader before it waits.
pub const COLL_PHASES: usize = 8;
/// Nodes of this many ranks or more count arrivals (see the module's comment).
pub const COLL_COUNT_FROM: usize = 16;

const VERDICT_SERVES: u32 = 1;
const VERDICT_REFUSED: u32 = 2;

/// In the area's first page, after the arrival counters (one line per phase): whether
/// a member sleeps until the others are done with an earlier collective (u32).
const DEPARTURE_WAITERS: usize = COLL_PHASES * LINE;

/// Where the parts of the collective area start: a page of counters, a line per rank
/// for its "done" stamp, each rank's slots (stamps and small posts), then the buffers,
/// those of one phase side by side (a collective's readers fault in sixteen members'
/// buffers at a time). Computed once per layout: every post and read needs them, and
/// computing them each time was a tenth of a small allreduce's instructions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct CollPlaces {
    at: usize,
    slots_at: usize,
    bufs_at: usize,
}

impl CollPlaces {
    pub(super) fn of(layout: &Layout) -> CollPlaces {
        let at = layout.boxes_at() + layout.boxes_bytes();
        let slots_at = at + PAGE + (layout.ranks * LINE).next_multiple_of(PAGE);
        let bufs_at = slots_at + (layout.ranks * COLL_PHASES * SLOT).next_multiple_of(PAGE);
        CollPlaces {
            at,
            slots_at,
            bufs_at,
        }
    }
}

impl Layout {
    pub(super) fn coll_at(&self) -> usize {
        self.coll.at
    }

    fn coll_done_at(&self, index: usize) -> usize {
        self.coll.at + PAGE + index * LINE
    }

    fn coll_slots_at(&self) -> usize {
        self.coll.slots_at
    }

    fn coll_bufs_at(&self) -> usize {
        self.coll.bufs_at
    }

    pub(super) fn coll_bytes(&self) -> usize {
        self.coll_bufs_at() + COLL_PHASES * self.ranks * COLL_BUF - self.coll_at()
    }

    /// Member `index`'s slot of `phase`: its stamp, then a small post.
    pub(super) fn coll_slot(&self, index: usize, phase: usize) -> usize {
        self.coll_slots_at() + (index * COLL_PHASES + phase % COLL_PHASES) * SLOT
    }

    /// Where member `index`'s post of `len` bytes to a collective of `phase` lies.
    fn coll_data(&self, index: usize, phase: usize, len: usize) -> usize {
        if len <= COLL_SMALL {
            self.coll_slot(index, phase) + STAMP
        } else {
            self.coll_buf(index, phase)
        }
    }

    pub(super) fn coll_arrivals_at(&self, phase: usize) -> usize {
        self.coll_at() + (phase % COLL_PHASES) * LINE
    }

    pub(super) fn coll_buf(&self, index: usize, phase: usize) -> usize {
        self.coll_bufs_at() + ((phase % COLL_PHASES) * self.ranks + index) * COLL_BUF
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

    /// Members that posted to collectives of `phase` that wait for everyone (counted
    /// over all of them).
    pub fn coll_arrivals(&self, phase: usize) -> u64 {
        self.seg
            .u64_at(self.layout.coll_arrivals_at(phase))
            .load(Ordering::Acquire)
    }

    /// Counts this rank's post in the arrivals of `phase`; returns the new count.
    pub fn coll_arrive(&self, phase: usize) -> u64 {
        self.seg
            .u64_at(self.layout.coll_arrivals_at(phase))
            .fetch_add(1, Ordering::SeqCst)
            + 1
    }

    /// Writes `data` into this rank's buffer of `phase`, then stamps it `seq`. The caller made sure every member is done with the collective
    /// that used this buffer before.
    pub fn coll_post(&self, phase: usize, seq: u64, data: &[u8]) -> io::Result<()> {
        if data.len() > COLL_DATA {
            return Err(io::Error::other(format!(
                "{} bytes do not fit a collective buffer of {COLL_DATA}",
                data.len()
            )));
        }
        let at = self.layout.coll_data(self.me, phase, data.len());
        // SAFETY: inside this rank's own slot or buffer of the mapping (the length was
        // checked against its size); no member reads it before the stamp below is
        // published, and none still reads it (the caller waited until all were done).
        unsafe { copy_to(data, self.seg.base.as_ptr().add(at)) }
        // A plain store: the caller then looks at the sleepers' flags without a fence
        // ([`ShmNode::wake_sleepers`]; see the module's comment).
        self.seg
            .u64_at(self.layout.coll_slot(self.me, phase))
            .store(seq, Ordering::Release);
        Ok(())
    }

    /// The stamp of member `index`'s buffer of `phase`: the last collective it posted there.
    pub fn coll_stamp(&self, index: usize, phase: usize) -> u64 {
        if index >= self.layout.ranks {
            return 0;
        }
        self.seg
            .u64_at(self.layout.coll_slot(index, phase))
            .load(Ordering::Acquire)
    }

    /// Copies `out.len()` bytes from byte `offset` of member `index`'s post of
    /// `posted` bytes to the collective of `phase`, once its stamp said it posted.
    pub fn coll_read(
        &self,
        index: usize,
        phase: usize,
        posted: usize,
        offset: usize,
        out: &mut [u8],
    ) -> io::Result<()> {
        if index >= self.layout.ranks
            || posted > COLL_DATA
            || offset.checked_add(out.len()).is_none_or(|end| end > posted)
        {
            return Err(io::Error::other(format!(
                "no bytes {offset}..+{} of member {index}'s collective post of {posted}",
                out.len()
            )));
        }
        let at = self.layout.coll_data(index, phase, posted) + offset;
        // SAFETY: inside member `index`'s buffer (checked above); its owner wrote these
        // bytes before the stamp the caller saw, and writes them again only after every
        // member, this one included, said it is done with this collective.
        let src = unsafe { std::slice::from_raw_parts(self.seg.base.as_ptr().add(at), out.len()) };
        copy_into(out, src);
        Ok(())
    }

    /// This rank is done with collective `seq` (read all it needed from the others'
    /// buffers); returns whether a member sleeps until then, and forgets it (the caller
    /// rings every sleeper; no fence, see the module's comment).
    pub fn coll_done(&self, seq: u64) -> bool {
        self.seg
            .u64_at(self.layout.coll_done_at(self.me))
            .store(seq, Ordering::Release);
        let flag = self.seg.u32_at(self.layout.coll_at() + DEPARTURE_WAITERS);
        flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::AcqRel) != 0
    }

    /// The last collective member `index` is done with.
    pub fn coll_done_of(&self, index: usize) -> u64 {
        if index >= self.layout.ranks {
            return 0;
        }
        self.seg
            .u64_at(self.layout.coll_done_at(index))
            .load(Ordering::Acquire)
    }

    /// Before this rank sleeps until the others are done with an earlier collective.
    pub fn coll_want_departures(&self) {
        self.seg
            .u32_at(self.layout.coll_at() + DEPARTURE_WAITERS)
            .store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
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
