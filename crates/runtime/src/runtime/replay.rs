//! A broken lane's frames sent again on another: the failover of a peer's lane of eager
//! messages and control frames. While a peer has several network lanes, each link keeps
//! copies of the frames it sends (all but rendezvous fragments, which the engine sends
//! again itself) until the peer acknowledges them (LANE_ACK every
//! [`proto::LANE_ACK_EVERY`] frames). When a lane breaks, each end tells the other over
//! a lane left how many of its frames on the broken one arrived (LANE_LOST), and each
//! sends the rest again on its lane of control frames. Sequence numbers put messages that
//! overtook each other back in order; an eager message whose payload was cut off keeps
//! its receive, which the copy completes.

use proto::{LaneId, LaneLoss, Rank};
use transport::{Link, LinkError, Transport};

use super::Runtime;

impl Runtime {
    /// A peer with several network lanes (of any kinds: a TCP lane beside a raw-Ethernet
    /// one carries eager messages above a datagram): its links keep copies for a replay.
    pub(super) fn keep_for_replay(&mut self, peer: Rank) {
        let network = self.lanes.of_peer_by(peer, &[Transport::Tcp, Transport::Eth]);
        if network.len() < 2 {
            return;
        }
        for id in network {
            if let Some(l) = self.lanes.get_mut(id) {
                l.link.ledger().keep();
            }
        }
    }

    /// After reading `lane`: acknowledges the peer's frames on it, every so many.
    #[inline]
    pub(super) fn acknowledge(&mut self, lane: LaneId) {
        let Some(l) = self.lanes.get_mut(lane) else { return };
        let received = l.link.ledger().received();
        if received - l.acked >= proto::LANE_ACK_EVERY {
            self.acknowledge_now(lane, received);
        }
    }

    /// The rare part of [`Runtime::acknowledge`], out of the hot path of reads.
    #[inline(never)]
    fn acknowledge_now(&mut self, lane: LaneId, received: u64) {
        let Some(l) = self.lanes.get_mut(lane) else { return };
        l.acked = received;
        let (peer, tag) = (l.peer, l.tag);
        // Only a peer with another lane to replay on keeps copies to acknowledge.
        if self.lanes.of_peer(peer).len() >= 2 {
            self.ep.send_lane_ack(peer, tag, received);
        }
    }

    /// A lane broke, losing what it had in flight. The engine sends its rendezvous
    /// fragments again on the peer's other lanes; the frames the peer did not get go
    /// again once it says how many arrived (when the link kept copies). A lane that
    /// cannot be made good (no copies, or the last) fails the peer, and with it go its
    /// other lanes.
    pub(super) fn lane_down(&mut self, lane: LaneId, e: LinkError) {
        let Some(l) = self.lanes.get_mut(lane) else { return };
        let (peer, info, tag) = (l.peer, l.info, l.tag);
        let ledger = std::mem::take(l.link.ledger());
        // A peer that broke the protocol would only break it again with the replay.
        let replayable = ledger.keeping() && !matches!(e, LinkError::Protocol(_) | LinkError::Wire(_));
        let cut_off = l.link.take_partial();
        // Sends whose frames were still queued: done once their copies are kept for a
        // replay (the peer fails otherwise, and them with it).
        let mut queued = Vec::new();
        if replayable {
            l.link.take_queued_tokens(&mut queued);
        }
        self.close_lane(lane);
        if let Some(token) = cut_off {
            self.ep.payload_abandoned(peer, token);
        }
        if self.life.finalizing && matches!(e, LinkError::Closed) {
            self.ep.handle_peer_finalized(peer);
        }
        let cause = match e {
            LinkError::Closed => "its connection closed unexpectedly (the process probably died)".to_string(),
            other => format!("its connection failed: {other}"),
        };
        if self.life.aborting {
            // The job is ending: a peer whose lane breaks now heard the abort and exited
            // (or died). Its other lanes cannot say so (a raw-Ethernet lane sees no close),
            // and the aborting rank waits for every peer to be gone.
            self.ep.handle_peer_failed(peer, &cause);
            self.drop_lanes(peer);
            return;
        }
        let received = ledger.received();
        let loss = self.ep.handle_lane_down(peer, lane, &cause, replayable);
        if loss == LaneLoss::FailedOver {
            self.passes.done_tokens.extend(queued);
        }
        match loss {
            LaneLoss::PeerFailed => {
                self.drop_lanes(peer);
                match self.job.rendezvous.as_mut() {
                    Some(r) if !self.life.aborting => r.peer_died(self.job.id.rank, peer, &cause),
                    _ => {}
                }
            }
            LaneLoss::Closing => {}
            LaneLoss::FailedOver => {
                tracing::warn!(
                    "rank {}: {lane} to rank {peer} ({} {}) failed: {cause}; its transfers go on over the {} \
                     other lane(s)",
                    self.job.id.rank,
                    info.transport.name(),
                    info.route,
                    self.lanes.of_peer(peer).len()
                );
                if replayable {
                    self.broken.insert((peer, tag), ledger);
                    self.ep.send_lane_lost(peer, tag, received);
                }
            }
        }
    }

    /// `peer` processed `frames` of our frames on lane `tag`.
    pub(super) fn lane_acked(&mut self, peer: Rank, tag: u64, frames: u64) {
        if let Some(id) = self.lane_by_tag(peer, tag) {
            if let Some(l) = self.lanes.get_mut(id) {
                l.link.ledger().forget_below(frames);
            }
        }
    }

    /// `peer` says lane `tag` broke after `frames` of our frames on it arrived: ours
    /// closes too if still open, and the rest goes again on the lane of control frames.
    pub(super) fn lane_lost(&mut self, peer: Rank, tag: u64, frames: u64) {
        if let Some(id) = self.lane_by_tag(peer, tag) {
            self.lane_down(id, LinkError::Stalled(format!("rank {peer} says it broke")));
        }
        let Some(mut ledger) = self.broken.remove(&(peer, tag)) else {
            return; // not a lane this rank could replay: the peer failed with it
        };
        let again = match ledger.take_from(frames) {
            Ok(again) => again,
            Err(why) => {
                let cause = format!("a lane to it broke and its frames cannot be sent again: {why}");
                self.ep.handle_peer_failed(peer, &cause);
                self.drop_lanes(peer);
                return;
            }
        };
        let Some(control) = self.ep.control_lane(peer) else {
            return;
        };
        tracing::info!(
            "rank {}: {} frame(s) of a broken lane to rank {peer} go again on {control}",
            self.job.id.rank,
            again.len()
        );
        for (header, payload) in again {
            let Some(l) = self.lanes.get_mut(control) else {
                return;
            };
            if let Err(e) = l.link.send_copy(&header, &payload) {
                self.lane_down(control, e);
                return;
            }
        }
    }

    fn lane_by_tag(&self, peer: Rank, tag: u64) -> Option<LaneId> {
        self.lanes
            .of_peer(peer)
            .iter()
            .copied()
            .find(|&id| self.lanes.get(id).is_some_and(|l| l.tag == tag && tag != 0))
    }
}
