//! The engine's lanes: lanes coming up and going down, the plan of which lane carries
//! what ([`crate::caps::plan`]), and rendezvous fragments handed to lanes as they drain.

use super::{Endpoint, Lane, Output, PeerState, RecvId, SendId, SendSlice, Stream};
use crate::caps::{plan, Caps, LaneId, LanePlan};
use crate::wire::data::{DataRepr, HeaderBytes};
use crate::Rank;

/// What the loss of a lane meant ([`Endpoint::handle_lane_down`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneLoss {
    /// The peer's other lanes carry on (its fragments in flight go again on them).
    FailedOver,
    /// The peer said BYE: its lanes are closing.
    Closing,
    /// The peer is failed: every operation with it ends with an error.
    PeerFailed,
}

impl Endpoint {
    /// A CTS accepted `len` bytes: the fragments wait for lanes with room (`fill_lanes`).
    pub(super) fn queue_fragments(&mut self, peer: Rank, send_id: SendId, recv_id: RecvId, len: u64) {
        if len == 0 {
            return; // the receiver takes nothing (FIN follows its CTS)
        }
        let p = &mut self.peers[peer as usize];
        p.streams.push_back(Stream {
            send_id,
            recv_id,
            next: 0,
            end: len,
        });
        if !self.streaming.contains(&peer) {
            self.streaming.push(peer);
        }
    }

    /// Whether rendezvous fragments wait for room on a lane: call [`Endpoint::fill_lanes`].
    pub fn is_streaming(&self) -> bool {
        !self.streaming.is_empty()
    }

    /// Hands waiting fragments to every bulk lane ([`crate::caps::plan`]) whose queue is
    /// short. `queued(lane)` is the number of bytes the runtime still has to write on
    /// that lane. A lane gets `lane_queue` bytes scaled by its share of the peer's best
    /// bandwidth, so a fast lane that drains sooner comes back for more sooner: large
    /// messages are striped in proportion to the bandwidth the lanes actually deliver.
    /// Returns whether any fragment was handed out.
    pub fn fill_lanes(&mut self, mut queued: impl FnMut(LaneId) -> u64) -> bool {
        let mut handed_out = false;
        let mut i = 0;
        while i < self.streaming.len() {
            let peer = self.streaming[i];
            let p = &mut self.peers[peer as usize];
            let frag = u64::from(p.frag_size);
            let bulk = || p.plan.bulk.iter().map(|&i| p.lanes[i]);
            let best_bw = bulk().map(|l| l.caps.bandwidth).max().unwrap_or(1).max(1);
            for Lane { id: lane, caps } in bulk() {
                let share =
                    u128::from(self.cfg.lane_queue) * u128::from(caps.bandwidth) / u128::from(best_bw);
                let limit = (share as u64).max(1);
                let mut q = queued(lane);
                while q < limit {
                    let Some(s) = p.streams.front_mut() else { break };
                    let (offset, chunk) = (s.next, frag.min(s.end - s.next));
                    let (send_id, recv_id) = (s.send_id, s.recv_id);
                    s.next += chunk;
                    if s.next == s.end {
                        p.streams.pop_front();
                    }
                    q += chunk;
                    handed_out = true;
                    if let Some(s) = self.rdv_sends.get_mut(&send_id) {
                        s.handed.push((lane, offset, chunk));
                    }
                    self.outputs.push_back(Output::Transmit {
                        peer,
                        lane,
                        header: HeaderBytes::new(&DataRepr::Frag {
                            recv_id,
                            offset,
                            len: chunk as u32,
                        }),
                        payload: Some(SendSlice {
                            req: send_id,
                            offset,
                            len: chunk,
                        }),
                        completes: None,
                    });
                }
            }
            if p.streams.is_empty() || p.plan.bulk.is_empty() {
                p.streams.clear();
                self.streaming.swap_remove(i);
            } else {
                i += 1;
            }
        }
        handed_out
    }

    /// A lane to `peer` is connected and authenticated. Returns its identity, by which
    /// [`Output::Transmit`] and [`Endpoint::fill_lanes`] name it from now on. A lane to a
    /// failed peer is not taken (the runtime closes it).
    pub fn handle_lane_up(&mut self, peer: Rank, caps: Caps) -> Option<LaneId> {
        let p = &mut self.peers[peer as usize];
        if matches!(p.state, PeerState::Failed(_)) {
            return None;
        }
        let id = LaneId(self.next_lane);
        self.next_lane += 1;
        p.lanes.push(Lane { id, caps });
        if !self.replan(peer) {
            return Some(id); // not a lane the engine can use yet; the peer waits for another
        }
        let p = &mut self.peers[peer as usize];
        if p.state != PeerState::Finalized {
            p.state = PeerState::Up;
        }
        let backlog = std::mem::take(&mut p.backlog);
        for (repr, payload, completes) in backlog {
            self.emit(peer, repr, payload, completes);
        }
        Some(id)
    }

    /// Re-scores `peer`'s lanes and derives the eager limit and fragment size from the
    /// chosen ones; false when no lane is usable.
    pub(super) fn replan(&mut self, peer: Rank) -> bool {
        let cfg = self.cfg;
        let p = &mut self.peers[peer as usize];
        let caps: Vec<Caps> = p.lanes.iter().map(|l| l.caps).collect();
        let current = p.lanes.iter().position(|l| Some(l.id) == p.control);
        let Some(plan) = plan(&caps, current) else {
            return false;
        };
        p.control = Some(p.lanes[plan.eager].id);
        // The eager limit is configuration: a WAN lane's is larger.
        p.eager_limit = if caps[plan.eager].is_wan() {
            cfg.wan_eager_limit
        } else {
            cfg.eager_limit
        };
        p.small_eager = caps[plan.eager]
            .datagram
            .min(crate::caps::RAW_SMALL_MAX)
            .min(p.eager_limit);
        p.frag_size = plan
            .bulk
            .iter()
            .map(|&i| caps[i].max_frame)
            .min()
            .unwrap_or(cfg.frag_size)
            .min(cfg.frag_size)
            .max(1);
        p.coalesce_delay = super::coalesce::delay_bound(&caps[plan.eager], cfg.coalesce_delay_ns);
        p.plan = plan;
        true
    }

    /// The capabilities of a lane were measured anew: the lanes are planned again.
    pub fn handle_lane_caps(&mut self, peer: Rank, lane: LaneId, caps: Caps) {
        let Some(p) = self.peers.get_mut(peer as usize) else {
            return;
        };
        let Some(l) = p.lanes.iter_mut().find(|l| l.id == lane) else {
            return;
        };
        l.caps = caps;
        if p.state == PeerState::Up {
            self.replan(peer);
        }
    }

    /// The lanes of `peer` in the order they came up, with their capabilities.
    pub fn lanes(&self, peer: Rank) -> impl Iterator<Item = (LaneId, Caps)> + '_ {
        self.peers
            .get(peer as usize)
            .into_iter()
            .flat_map(|p| p.lanes.iter().map(|l| (l.id, l.caps)))
    }

    /// What lane `lane` of `peer` carries under the peer's plan, or why nothing (`None`
    /// while the peer has no plan).
    pub fn lane_use(&self, peer: Rank, lane: LaneId) -> Option<crate::caps::LaneUse> {
        let p = self
            .peers
            .get(peer as usize)
            .filter(|p| matches!(p.state, PeerState::Up | PeerState::Finalized))?;
        let i = p.lanes.iter().position(|l| l.id == lane)?;
        let caps: Vec<Caps> = p.lanes.iter().map(|l| l.caps).collect();
        Some(crate::caps::LaneUse::of(&caps, &p.plan, i))
    }

    /// Whether messages to `peer` are waiting for a connection.
    pub fn wants_connection(&self, peer: Rank) -> bool {
        self.peers
            .get(peer as usize)
            .is_some_and(|p| p.state == PeerState::Connecting)
    }

    /// Lane `lane` of `peer` broke, losing the frames it had in flight. If the peer
    /// has other usable lanes, the peer lives on: the fragments the lane was given go
    /// again on the others ([`Endpoint::requeue_fragments`]), and if it carried eager
    /// messages and control frames, so do those the peer did not get — when the link
    /// kept copies of them (`replayable`: the runtime sends them again once the peer
    /// says how many arrived, [`Output::LaneLost`]). Otherwise losing the lane of
    /// control frames, or the last lane, fails the peer, unless it said BYE.
    pub fn handle_lane_down(&mut self, peer: Rank, lane: LaneId, cause: &str, replayable: bool) -> LaneLoss {
        let p = &mut self.peers[peer as usize];
        // Eager frames on it are lost with it unless the link kept copies: those of the
        // control lane, and the large eager messages beside a raw lane.
        let large_eager = p.plan.large_eager.and_then(|i| p.lanes.get(i)).map(|l| l.id);
        let carried_eager = p.control == Some(lane) || large_eager == Some(lane);
        p.lanes.retain(|l| l.id != lane);
        if p.state == PeerState::Up && (!carried_eager || replayable) && self.replan(peer) {
            self.requeue_fragments(peer, lane);
            return LaneLoss::FailedOver;
        }
        let p = &mut self.peers[peer as usize];
        if p.state == PeerState::Finalized {
            if !self.replan(peer) {
                let p = &mut self.peers[peer as usize];
                p.plan = LanePlan::default();
                p.streams.clear();
            }
            return LaneLoss::Closing;
        }
        self.handle_peer_failed(peer, cause);
        LaneLoss::PeerFailed
    }

    /// Sends a hole-punch frame to `peer` on its lane of control frames; only to a peer
    /// that is up (a punch runs over a lane that exists).
    pub fn send_punch(&mut self, peer: Rank, msg: crate::wire::data::PunchMsg) {
        self.send_when_up(peer, DataRepr::Punch(msg));
    }

    /// The lane that carries eager messages and control frames to `peer` now.
    pub fn control_lane(&self, peer: Rank) -> Option<LaneId> {
        self.peers.get(peer as usize)?.control
    }
}
