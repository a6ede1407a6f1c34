//! Lane failover for rendezvous data: a lane that breaks while the peer keeps other
//! lanes loses the fragments it had in flight, and the sender hands them again to the
//! lanes left. The sender cannot know which of them had arrived, so the receiver counts
//! each byte once ([`Ranges`]) and drops fragments for a receive that has already
//! completed ([`Recent`]).

use std::collections::VecDeque;

/// Frames a rank receives on a lane between two LANE_ACKs to the sender, which keeps
/// copies of what it sent until then (on a peer with several lanes).
pub const LANE_ACK_EVERY: u64 = 64;

use super::{Endpoint, PayloadDest, PayloadToken, PeerState, RecvId, Stream, TokenKind};
use crate::caps::LaneId;
use crate::wire::data::{DataRepr, Envelope};
use crate::Rank;

/// Disjoint, sorted byte ranges `[start, end)`: what a rendezvous receive has.
#[derive(Debug, Default, Clone)]
pub(super) struct Ranges {
    ranges: Vec<(u64, u64)>,
    covered: u64,
}

impl Ranges {
    /// Adds `[start, end)`; returns how many of its bytes were new.
    pub(super) fn insert(&mut self, start: u64, end: u64) -> u64 {
        if start >= end {
            return 0;
        }
        // Fragments mostly arrive in order: extending the last range is the common case.
        if let Some(last) = self.ranges.last_mut() {
            if last.1 == start {
                last.1 = end;
                self.covered += end - start;
                return end - start;
            }
        }
        let before = self.covered;
        // Ranges that touch or overlap [start, end) merge into one.
        let first = self.ranges.partition_point(|r| r.1 < start);
        let last = self.ranges.partition_point(|r| r.0 <= end);
        let (mut lo, mut hi) = (start, end);
        for &(a, b) in &self.ranges[first..last] {
            lo = lo.min(a);
            hi = hi.max(b);
            self.covered -= b - a;
        }
        self.ranges.splice(first..last, [(lo, hi)]);
        self.covered += hi - lo;
        self.covered - before
    }

    pub(super) fn covered(&self) -> u64 {
        self.covered
    }
}

/// The last rendezvous receives that completed: a fragment sent again after a lane
/// broke may still arrive for them, and is dropped rather than taken for an attack.
#[derive(Debug, Default)]
pub(super) struct Recent {
    done: VecDeque<(Rank, RecvId)>,
}

/// Completed receives remembered: far more than can have fragments in flight at once.
const RECENT: usize = 1024;

impl Recent {
    pub(super) fn push(&mut self, peer: Rank, req: RecvId) {
        if self.done.len() == RECENT {
            self.done.pop_front();
        }
        self.done.push_back((peer, req));
    }

    pub(super) fn contains(&self, peer: Rank, req: RecvId) -> bool {
        self.done.contains(&(peer, req))
    }
}

impl Endpoint {
    /// A payload a broken lane cut off (its token, which the link held): what its
    /// header set in motion is undone or waits for the frame sent again. A matched eager
    /// message keeps its receive, which the copy sent again completes ([`Endpoint::resumed`]);
    /// a buffered one gives back its charge (the copy is charged anew); a fragment is
    /// simply missing (its bytes are counted when they come).
    pub fn payload_abandoned(&mut self, peer: Rank, token: PayloadToken) {
        match token.0 {
            TokenKind::EagerMatched { req, status, seq } => {
                self.resume.insert((peer, seq), (req, status));
            }
            TokenKind::EagerBuffered { env } => {
                self.buffered -= env.msg_len.min(self.buffered);
                self.peers[peer as usize].credit.uncharge(env.msg_len);
            }
            // A batch is looked into only once whole: nothing to undo.
            TokenKind::Frag { .. } | TokenKind::Batch { .. } | TokenKind::None => {}
        }
    }

    /// The MATCH `env` came again after a lane broke part-way through its payload: into
    /// the receive it had matched. `None`: no such receive (a duplicate, a violation).
    pub(super) fn resumed(&mut self, peer: Rank, env: Envelope) -> Option<(PayloadDest, PayloadToken)> {
        let (req, status) = self.resume.remove(&(peer, env.seq))?;
        let dest = PayloadDest::User {
            req,
            offset: 0,
            len: status.count,
            skip: env.msg_len - status.count,
        };
        Some((
            dest,
            PayloadToken(TokenKind::EagerMatched {
                req,
                status,
                seq: env.seq,
            }),
        ))
    }

    /// Tells `peer` how many of its frames on the lane `tag` were processed here.
    pub fn send_lane_ack(&mut self, peer: Rank, tag: u64, frames: u64) {
        self.send_when_up(peer, DataRepr::LaneAck { tag, frames });
    }

    /// Tells `peer` that the lane `tag` broke after `frames` of its frames arrived.
    pub fn send_lane_lost(&mut self, peer: Rank, tag: u64, frames: u64) {
        self.send_when_up(peer, DataRepr::LaneLost { tag, frames });
    }

    pub(super) fn send_when_up(&mut self, peer: Rank, repr: DataRepr) {
        if self
            .peers
            .get(peer as usize)
            .is_some_and(|p| p.state == PeerState::Up)
        {
            self.emit(peer, repr, None, None);
        }
    }

    /// `lane` of `peer` broke while other lanes remain: every fragment it was given for
    /// a send still in progress goes again, ahead of those not sent yet.
    pub(super) fn requeue_fragments(&mut self, peer: Rank, lane: LaneId) {
        let mut sends: Vec<_> = self
            .rdv_sends
            .iter_mut()
            .filter(|(_, s)| s.peer == peer)
            .collect();
        sends.sort_unstable_by_key(|(id, _)| **id);
        let p = &mut self.peers[peer as usize];
        let mut again = Vec::new();
        for (&send_id, s) in sends {
            s.handed.retain(|&(l, offset, len)| {
                if l == lane {
                    again.push(Stream {
                        send_id,
                        recv_id: s.recv_id,
                        next: offset,
                        end: offset + len,
                    });
                }
                l != lane
            });
        }
        if again.is_empty() {
            return;
        }
        for s in again.into_iter().rev() {
            p.streams.push_front(s);
        }
        if !self.streaming.contains(&peer) {
            self.streaming.push(peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_count_each_byte_once() {
        let mut r = Ranges::default();
        assert_eq!(r.insert(0, 10), 10);
        assert_eq!(r.insert(10, 20), 10);
        assert_eq!(r.insert(30, 40), 10);
        assert_eq!(r.insert(0, 10), 0, "a fragment sent again");
        assert_eq!(r.insert(15, 35), 10, "only the gap is new");
        assert_eq!(r.covered(), 40);
        assert_eq!(r.ranges, vec![(0, 40)]);
        assert_eq!(r.insert(50, 50), 0);
        assert_eq!(r.insert(45, 50), 5);
        assert_eq!(r.insert(41, 44), 3);
        assert_eq!(r.ranges, vec![(0, 40), (41, 44), (45, 50)]);
        assert_eq!(r.insert(0, 100), 52);
        assert_eq!(r.ranges, vec![(0, 100)]);
    }

    #[test]
    fn recent_remembers_a_bounded_number() {
        let mut r = Recent::default();
        for i in 0..(RECENT as u64 + 5) {
            r.push(1, i);
        }
        assert!(!r.contains(1, 0));
        assert!(r.contains(1, RECENT as u64 + 4));
        assert!(!r.contains(2, RECENT as u64 + 4));
    }
}
