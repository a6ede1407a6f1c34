//! Diagnostics: what wire-up did, what each lane is and why transports were refused,
//! for `pontoon doctor`, tests and benchmarks. Not part of MPI: reached through
//! [`Universe::diag`].

use crate::{Rank, Universe};

/// A view of a universe's wire-up and lanes.
pub struct Diag<'u> {
    pub(crate) universe: &'u Universe,
}

impl Diag<'_> {
    /// (connected peers, connection attempts abandoned to a simultaneous one), for diagnostics.
    pub fn wireup_stats(&self) -> (usize, usize) {
        self.universe.engine_ref().map_or((0, 0), |rt| rt.wireup_stats())
    }

    /// Most payload bytes of unmatched eager messages this rank ever held at once
    /// (bounded by `PONTOON_UNEXPECTED_CAP`), for diagnostics.
    pub fn unexpected_peak(&self) -> u64 {
        self.universe.engine_ref().map_or(0, |rt| rt.unexpected_peak())
    }

    /// How many progress passes looked at wire-up and the coordinator, for diagnostics
    /// (they do on readiness and every few milliseconds: each look costs system calls).
    pub fn housekeeping_passes(&self) -> u64 {
        self.universe
            .engine_ref()
            .map_or(0, |rt| rt.housekeeping_passes())
    }

    /// Addresses rank `rank` listens on (its endpoint card), for diagnostics.
    pub fn peer_addresses(&self, rank: Rank) -> Vec<std::net::SocketAddr> {
        self.universe
            .engine_ref()
            .map(|rt| rt.peer_addresses(rank))
            .unwrap_or_default()
    }

    /// Rank `rank`'s endpoint card (interfaces, addresses, node, site), for diagnostics.
    pub fn card(&self, rank: Rank) -> Option<runtime::EndpointCard> {
        self.universe.engine_ref()?.card(rank).cloned()
    }

    /// The connection carrying traffic with `peer`, once connected, for diagnostics.
    pub fn path(&self, peer: Rank) -> Option<runtime::PathInfo> {
        self.universe.engine_ref()?.path(peer)
    }

    /// Why punching through NATs towards `peer` ended without a lane, if it did.
    pub fn punch_note(&self, peer: Rank) -> Option<String> {
        self.universe.engine_ref()?.punch_note(peer).map(str::to_string)
    }

    /// Progresses until this rank's connection attempts (further lanes included) are over,
    /// or `limit` passes.
    pub fn settle_wireup(&self, limit: std::time::Duration) {
        if let Ok(mut rt) = self.universe.engine() {
            rt.settle_wireup(limit)
        }
    }

    /// Every lane to `peer` (the first connection, then one per further interface pair).
    pub fn lanes(&self, peer: Rank) -> Vec<runtime::PathInfo> {
        self.universe
            .engine_ref()
            .map(|rt| rt.lanes(peer))
            .unwrap_or_default()
    }

    /// Where this rank takes raw-Ethernet lanes: its interfaces, or why it takes none
    /// (`None`: raw Ethernet is not in `PONTOON_TRANSPORTS`), for diagnostics.
    pub fn raw_ethernet(&self) -> Option<std::result::Result<Vec<String>, String>> {
        let rt = self.universe.engine_ref()?;
        match rt.eth_refusal() {
            Some(why) => Some(Err(why.to_string())),
            None => Some(Ok(rt.eth_interfaces())).filter(|i| i.as_ref().is_ok_and(|v| !v.is_empty())),
        }
    }

    /// Why each transport that carries no lane to `peer` does not (which, why, what
    /// would help), for diagnostics.
    pub fn refusals(&self, peer: Rank) -> Vec<runtime::Refusal> {
        self.universe
            .engine_ref()
            .map(|rt| rt.refusals(peer))
            .unwrap_or_default()
    }

    /// What lane `lane` to `peer` carries (eager messages, bulk), or why nothing, for
    /// diagnostics.
    pub fn lane_use(&self, peer: Rank, lane: runtime::LaneId) -> Option<String> {
        Some(self.universe.engine_ref()?.lane_use(peer, lane)?.to_string())
    }

    /// What lane `lane` can do (latency, bandwidth: measured on TCP lanes), for diagnostics.
    pub fn lane_caps(&self, lane: runtime::LaneId) -> Option<runtime::Caps> {
        self.universe.engine_ref()?.lane_caps(lane)
    }

    /// Every connection attempt this rank made to `peer`, for diagnostics.
    pub fn attempts(&self, peer: Rank) -> Vec<runtime::Attempt> {
        self.universe
            .engine_ref()
            .map(|rt| rt.attempts(peer).to_vec())
            .unwrap_or_default()
    }
}
