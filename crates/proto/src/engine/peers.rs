//! Peers that fail, and finalizing: every operation that needs a failed peer ends with
//! its error instead of hanging (lanes and fragments: `engine/lanes.rs`).

use super::{Endpoint, Held, Output, PeerState};
use crate::caps::LanePlan;
use crate::matching::ReqId;
use crate::wire::data::DataRepr;
use crate::{Failure, Rank, ANY_SOURCE};
use rustc_hash::FxHashMap as HashMap;

impl Endpoint {
    /// `peer` is gone (its process died, or it cannot be reached): every operation
    /// that needs it fails instead of hanging.
    pub fn handle_peer_failed(&mut self, peer: Rank, cause: &str) {
        let Some(p) = self.peers.get_mut(peer as usize) else {
            return;
        };
        if matches!(p.state, PeerState::Failed(_)) || peer == self.me {
            return;
        }
        p.state = PeerState::Failed(cause.to_string());
        p.cancels_ahead.clear();
        p.lanes.clear();
        p.plan = LanePlan::default();
        p.control = None;
        for held in std::mem::take(&mut p.held).into_values() {
            if let Held::Match { data, .. } = held {
                self.buffered -= data.len() as u64;
            }
        }
        p.streams.clear();
        p.batch = Default::default();
        self.batching.retain(|&r| r != peer);
        let fail = Failure::PeerFailed {
            rank: peer,
            cause: cause.to_string(),
        };
        // Eager sends still waiting for a connection; a backlogged RTS is in `rdv_sends`.
        for (_, _, completes) in std::mem::take(&mut p.backlog) {
            if let Some(req) = completes {
                self.outputs.push_back(Output::SendDone {
                    req,
                    result: Err(fail.clone()),
                });
            }
        }
        self.peers[peer as usize].offered_out = 0;
        self.cancels_of_failed_peer(peer);
        for req in take_where(&mut self.rdv_sends, |s| s.peer == peer) {
            self.outputs.push_back(Output::SendDone {
                req,
                result: Err(fail.clone()),
            });
        }
        for req in take_where(&mut self.rdv_recvs, |r| r.peer == peer) {
            self.outputs.push_back(Output::RecvDone {
                req,
                result: Err(fail.clone()),
            });
        }
        let all_others_failed = (0..self.size)
            .filter(|r| *r != self.me)
            .all(|r| matches!(self.peers[r as usize].state, PeerState::Failed(_)));
        let doomed = self
            .matcher
            .remove_posted_where(|src| src == peer as i32 || (all_others_failed && src == ANY_SOURCE));
        for req in doomed {
            self.outputs.push_back(Output::RecvDone {
                req,
                result: Err(fail.clone()),
            });
        }
    }

    /// Finalize: tells every connected peer that a closing connection is expected —
    /// but those reached only by node-local lanes, which learn it from their node (a
    /// goodbye per pair of a node's ranks, each landing behind the last message in a
    /// ring page of its own, was most of a 256-rank job's finalize).
    pub fn finalize(&mut self) {
        for peer in 0..self.size {
            // Coalesced messages go before the goodbye.
            self.flush_batch(peer);
            let p = &self.peers[peer as usize];
            if p.state == PeerState::Up && !p.lanes.iter().all(|l| l.caps.node_local) {
                self.emit(peer, DataRepr::Bye, None, None);
            }
        }
    }

    /// `peer` finalized (its goodbye, or its node's word for a node-local peer): its
    /// lanes closing from now on is no failure.
    pub fn handle_peer_finalized(&mut self, peer: Rank) {
        if self
            .peers
            .get(peer as usize)
            .is_some_and(|p| p.state == PeerState::Up)
        {
            self.peers[peer as usize].state = PeerState::Finalized;
        }
    }

    /// Tells every connected peer that rank `origin` aborted the job with `code`.
    pub fn abort_job(&mut self, origin: Rank, code: i32) {
        for peer in 0..self.size {
            if self.peers[peer as usize].state == PeerState::Up {
                self.emit(peer, DataRepr::Abort { code, origin }, None, None);
            }
        }
    }

    /// Whether `peer` has failed, and why.
    pub fn peer_failure(&self, peer: Rank) -> Option<&str> {
        match &self.peers.get(peer as usize)?.state {
            PeerState::Failed(c) => Some(c),
            _ => None,
        }
    }
}

/// Removes the entries for which `doomed` holds; returns their ids in ascending order,
/// so that failures are reported deterministically.
fn take_where<V>(map: &mut HashMap<ReqId, V>, doomed: impl Fn(&V) -> bool) -> Vec<ReqId> {
    let mut ids: Vec<ReqId> = map.iter().filter(|(_, v)| doomed(v)).map(|(k, _)| *k).collect();
    ids.sort_unstable();
    for id in &ids {
        map.remove(id);
    }
    ids
}
