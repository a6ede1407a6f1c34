//! The engine's lanes: lanes coming up and going down, the plan of which lane carries
//! what ([`crate::caps::plan`]), and rendezvous fragments handed to lanes as they drain.

use super::{Endpoint, Lane, Output, PeerState, RecvId, SendId, SendSlice, Stream};
use crate::caps::{plan, Caps, LaneId, LanePlan};
use crate::wire::data::{DataRepr, HeaderBytes};
use crate::Rank;

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
        let Some(plan) = plan(&caps) else {
            return false;
        };
        p.eager_limit = cfg.eager_limit.min(caps[plan.eager].max_eager);
        p.frag_size = plan
            .bulk
            .iter()
            .map(|&i| caps[i].max_frame)
            .min()
            .unwrap_or(cfg.frag_size)
            .min(cfg.frag_size)
            .max(1);
        p.plan = plan;
        true
    }

    /// The lanes of `peer` in the order they came up, with their capabilities.
    pub fn lanes(&self, peer: Rank) -> impl Iterator<Item = (LaneId, Caps)> + '_ {
        self.peers
            .get(peer as usize)
            .into_iter()
            .flat_map(|p| p.lanes.iter().map(|l| (l.id, l.caps)))
    }

    /// Whether messages to `peer` are waiting for a connection.
    pub fn wants_connection(&self, peer: Rank) -> bool {
        self.peers
            .get(peer as usize)
            .is_some_and(|p| p.state == PeerState::Connecting)
    }

    /// Lane `lane` of `peer` broke. A lane loses the frames it had in flight when it
    /// breaks, so the peer counts as failed unless it said BYE.
    pub fn handle_lane_down(&mut self, peer: Rank, lane: LaneId, cause: &str) {
        let p = &mut self.peers[peer as usize];
        p.lanes.retain(|l| l.id != lane);
        if p.state == PeerState::Finalized {
            if !self.replan(peer) {
                let p = &mut self.peers[peer as usize];
                p.plan = LanePlan::default();
                p.streams.clear();
            }
            return;
        }
        self.handle_peer_failed(peer, cause);
    }
}
