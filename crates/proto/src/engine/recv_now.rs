//! The receiving half of the latency-critical path: a blocking receive of a small
//! message from one peer, taken straight off the lane its eager frames come on, without
//! a posted receive, a request or a buffered copy (the runtime's `recv_small_now`).
//! Only when nothing else could claim the message first; otherwise the frame stays on
//! the lane and takes the general path (`handle_header`).

use super::{Endpoint, Status};
use crate::caps::LaneId;
use crate::wire::data::DataRepr;
use crate::{Rank, ANY_TAG};

impl Endpoint {
    /// Whether a blocking receive may wait on one lane for its message: no receive is
    /// posted (one posted earlier could match first) and no message waits unmatched
    /// (it could be the one). The lane is the one `peer`'s eager frames use.
    #[inline]
    pub fn recv_now_lane(&self, peer: Rank) -> Option<LaneId> {
        if self.matcher.posted_len() != 0 || self.matcher.unexpected_len() != 0 || peer == self.me {
            return None;
        }
        let p = self.peers.get(peer as usize)?;
        if !p.held.is_empty() {
            return None;
        }
        p.control
    }

    /// A frame from `peer` at the head of its eager lane, offered to a blocking receive
    /// of (`ctx`, `peer`, `tag`) into `capacity` bytes: `Some(Ok(status))` when it is
    /// that receive's message (the caller copies the payload and takes the frame off the
    /// lane), `None` when it must take the general path (another envelope, out of order,
    /// too long, not an eager message, beyond its credit: `handle_header` says why).
    #[inline]
    pub fn recv_eager_now(
        &mut self,
        peer: Rank,
        repr: &DataRepr,
        ctx: u32,
        tag: i32,
        capacity: u64,
    ) -> Option<Status> {
        let DataRepr::Match { env } = *repr else {
            return None;
        };
        let fits = env.src == peer
            && env.ctx == ctx
            && (tag == ANY_TAG || env.tag == tag)
            && env.msg_len <= capacity
            && env.msg_len <= u64::from(self.cfg.largest_eager())
            && self.matcher.posted_len() == 0
            && self.matcher.unexpected_len() == 0;
        let grant = self.grant;
        let p = self.peers.get_mut(peer as usize)?;
        if !fits || env.seq != p.next_recv_seq || !p.held.is_empty() {
            return None;
        }
        p.credit.charge(env.msg_len, grant).ok()?;
        p.next_recv_seq = env.seq.wrapping_add(1);
        self.consumed(peer, env.msg_len);
        Some(Status {
            source: peer,
            tag: env.tag,
            count: env.msg_len,
            truncated: false,
        })
    }
}
