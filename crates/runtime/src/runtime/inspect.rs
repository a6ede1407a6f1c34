//! What a rank's runtime tells the layers above, `pontoon doctor` and the tests about
//! itself: its peers' cards and sites, its lanes and how they came up, its counters.

use proto::{LaneId, Rank};
use transport::Link;

use super::Runtime;
use crate::fabric::tcp::wireup::Attempt;
use crate::fabric::Refusal;
use crate::lanes::PathInfo;
use net::EndpointCard;
use transport::Transport;

impl Runtime {
    /// Wire-up statistics: (connected peers, attempts given up because the peer's
    /// simultaneous connection won).
    pub fn wireup_stats(&self) -> (usize, usize) {
        (self.lanes.peers_connected(), self.passes.yielded)
    }

    /// Addresses `rank` listens on, from its endpoint card.
    pub fn peer_addresses(&self, rank: Rank) -> Vec<std::net::SocketAddr> {
        self.job
            .cards
            .get(rank)
            .map(|c| {
                c.addresses()
                    .filter(|(_, ip)| c.port_for(*ip) != 0)
                    .map(|(_, ip)| std::net::SocketAddr::new(ip, c.port_for(ip)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `rank`'s endpoint card (interfaces, addresses, node, site).
    pub fn card(&self, rank: Rank) -> Option<&EndpointCard> {
        self.job.cards.get(rank)
    }

    /// The node `rank` runs on, from its card's head (not decoding the rest).
    pub fn node(&self, rank: Rank) -> Option<u64> {
        self.job.cards.head(rank).map(|c| c.node)
    }

    /// Whether any rank of the job has a site ([`Runtime::site`]).
    pub fn sited(&self) -> bool {
        self.job.sited
    }

    /// `rank`'s site: the one declared on its card, or else the one the cards show
    /// (`net::sites::infer`: far from the launcher's coordinator, on another network).
    pub fn site(&self, rank: Rank) -> Option<&str> {
        let declared = self.job.cards.head(rank).and_then(|c| c.site.as_deref());
        declared.or_else(|| {
            self.job
                .inferred_sites
                .as_ref()?
                .get(rank as usize)
                .map(String::as_str)
        })
    }

    /// The lane that carries eager messages and control frames to `peer` (once a peer
    /// reached through a relay has a punched lane, that one), once connected.
    pub fn path(&self, peer: Rank) -> Option<PathInfo> {
        let control = self.ep.control_lane(peer).and_then(|id| self.lanes.get(id));
        control
            .map(|l| l.info)
            .or_else(|| self.lanes(peer).first().copied())
    }

    /// Why punching through NATs towards `peer` ended without a lane, if it did.
    pub fn punch_note(&self, peer: Rank) -> Option<&str> {
        self.fabrics.tcp.punching.note(peer)
    }

    /// Every lane to `peer`, in the order they came up: the first connection (shared
    /// memory within a node), then one per further interface pair.
    pub fn lanes(&self, peer: Rank) -> Vec<PathInfo> {
        let info = |id: &LaneId| self.lanes.get(*id).map(|l| l.info);
        self.lanes.of_peer(peer).iter().filter_map(info).collect()
    }

    /// Most payload bytes of unmatched eager messages this rank ever held at once
    /// (bounded by `PONTOON_UNEXPECTED_CAP`).
    pub fn unexpected_peak(&self) -> u64 {
        self.ep.buffered_peak()
    }

    /// How many progress passes looked at the rarely busy sockets (wire-up, the
    /// coordinator, doorbells): on readiness and every few milliseconds, not per pass.
    pub fn housekeeping_passes(&self) -> u64 {
        self.passes.housekeeping_passes
    }

    /// What a lane can do, as last measured (`health.rs`), while it is open.
    pub fn lane_caps(&self, lane: LaneId) -> Option<proto::Caps> {
        self.lanes.get(lane).map(|l| l.link.caps())
    }

    /// What lane `lane` to `peer` carries under the engine's plan, or why nothing.
    pub fn lane_use(&self, peer: Rank, lane: LaneId) -> Option<proto::caps::LaneUse> {
        self.ep.lane_use(peer, lane)
    }

    /// Why each transport that carries no lane to `peer` does not: not allowed, the
    /// ranks' placement, or what its wire-up ran into (a transport that was never
    /// needed, as TCP beside a shared-memory lane, has none).
    pub fn refusals(&self, peer: Rank) -> Vec<Refusal> {
        let laned = |t: Transport| {
            self.lanes
                .of_peer(peer)
                .iter()
                .any(|&l| self.lanes.get(l).is_some_and(|l| l.info.transport == t))
        };
        super::connect::FIRST_LANE_ORDER
            .into_iter()
            .filter(|&t| peer != self.job.id.rank && !laned(t))
            .filter_map(|t| {
                self.dialing
                    .refusals
                    .of(peer, t)
                    .cloned()
                    .or_else(|| self.refusal_before_dial(t, peer))
            })
            .collect()
    }

    /// Every connection attempt this rank made to `peer`, in order.
    pub fn attempts(&self, peer: Rank) -> &[Attempt] {
        self.fabrics.tcp.attempt_log.get(&peer).map_or(&[], Vec::as_slice)
    }
}
