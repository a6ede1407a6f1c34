//! The receiving half of the latency-critical path: a blocking receive of a small
//! message from one peer, taken straight off the lane its eager frames come on, without
//! a posted receive, a request or a buffered copy (the runtime's `recv_small_now`).
//! Only when nothing else could claim the message first; otherwise the frame stays on
//! the lane and takes the general path (`handle_header`).
//!
//! The engine says what the message must be before the rank waits ([`Awaited`]), so
//! that the look at a frame that has just arrived is a few compares, and accounts for
//! it once taken ([`Endpoint::took_now`]).

use super::credit::cost;
use super::{Endpoint, Status};
use crate::caps::LaneId;
use crate::wire::data::Envelope;
use crate::{Rank, ANY_TAG};

/// A blocking receive waiting on one lane for its message: the frame it takes there.
/// Valid while the engine handles nothing else (the runtime asks again after each
/// progress pass): a MATCH frame whose envelope it [admits](Awaited::admits) is that
/// receive's message, and any other frame goes the general way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Awaited {
    /// The lane `peer`'s eager frames use.
    pub lane: LaneId,
    peer: Rank,
    ctx: u32,
    tag: i32,
    /// The peer's next sequence number.
    seq: u32,
    /// The longest message it takes: the receive's capacity, the eager limit and the
    /// credit the peer has left, whichever is least.
    max_len: u64,
}

impl Awaited {
    /// Whether a MATCH frame with `env` is the awaited message (then the caller copies
    /// its payload, takes it off the lane and calls [`Endpoint::took_now`]).
    #[inline]
    pub fn admits(&self, env: &Envelope) -> bool {
        env.src == self.peer
            && env.ctx == self.ctx
            && (self.tag == ANY_TAG || env.tag == self.tag)
            && env.seq == self.seq
            && env.msg_len <= self.max_len
    }
}

impl Endpoint {
    /// A blocking receive of (`ctx`, `peer`, `tag`) into `capacity` bytes may wait on
    /// one lane for its message when no receive is posted (one posted earlier could
    /// match first), no message waits unmatched (it could be the one) and none from
    /// `peer` is held back: what it waits for, or `None` (the general path).
    #[inline]
    pub fn await_now(&self, peer: Rank, ctx: u32, tag: i32, capacity: u64) -> Option<Awaited> {
        if self.matcher.posted_len() != 0 || self.matcher.unexpected_len() != 0 || peer == self.me {
            return None;
        }
        let p = self.peers.get(peer as usize)?;
        if !p.held.is_empty() || !p.cancels_ahead.is_empty() {
            return None;
        }
        let credit = p.credit.chargeable(self.grant)?;
        Some(Awaited {
            lane: p.control?,
            peer,
            ctx,
            tag,
            seq: p.next_recv_seq,
            max_len: capacity.min(u64::from(self.cfg.largest_eager())).min(credit),
        })
    }

    /// The message `awaited` admitted (`env`) was taken off its lane, with nothing
    /// handled in between: its sequence number and credit are counted, and its status
    /// is that of the receive.
    #[inline(always)]
    pub fn took_now(&mut self, awaited: &Awaited, env: &Envelope) -> Status {
        debug_assert!(awaited.admits(env));
        let (peer, grant) = (awaited.peer, self.grant);
        let p = &mut self.peers[peer as usize];
        p.next_recv_seq = env.seq.wrapping_add(1);
        // Within the credit: `admits` checked the length against what was left.
        let charged = p.credit.charge(env.msg_len, grant);
        debug_assert!(charged.is_ok(), "{charged:?} (cost {})", cost(env.msg_len));
        // Consumed at once: copied into the receive.
        self.consumed(peer, env.msg_len);
        Status {
            source: peer,
            tag: env.tag,
            count: env.msg_len,
            truncated: false,
            cancelled: false,
        }
    }
}
