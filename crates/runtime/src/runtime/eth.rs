//! Raw-Ethernet lanes as the event loop drives them (`fabric/eth` has the
//! handshakes): when a peer is probed, what becomes of each probe, and the lanes that
//! come out of them.

use std::collections::HashSet;

use proto::Rank;
use transport::Transport;

use super::Runtime;
use crate::fabric::eth::wireup::EthWireup;
use crate::fabric::eth::NEEDS_CAP_NET_RAW;

impl Runtime {
    /// Says, once, why there are no raw-Ethernet ports where a peer on another node
    /// could have used them.
    pub(super) fn explain_eth(&self) {
        if let Some(why) = &self.fabrics.eth.refusal {
            let wanted = self.cfg.transports.contains(&Transport::Eth)
                && (0..self.job.id.size).any(|r| {
                    !self.job.cards.same_node(r, self.job.id.rank)
                        && self.job.cards.get(r).is_some_and(EthWireup::offers)
                });
            if wanted {
                tracing::warn!(
                    "rank {}: no raw Ethernet, TCP carries everything: {why} ({NEEDS_CAP_NET_RAW})",
                    self.job.id.rank
                );
            } else {
                tracing::info!("rank {}: no raw Ethernet: {why}", self.job.id.rank);
            }
        }
    }

    /// Why this rank has no raw-Ethernet lanes, if it has none (doctor).
    pub fn eth_refusal(&self) -> Option<&str> {
        self.fabrics.eth.refusal.as_deref()
    }

    /// The interfaces this rank takes raw-Ethernet lanes on.
    pub fn eth_interfaces(&self) -> Vec<String> {
        self.fabrics.eth.port_names()
    }

    /// Probes `peer` for a further raw-Ethernet lane.
    pub(super) fn probe_eth(&mut self, peer: Rank) {
        let (fabrics, _, around) = self.fabrics_around(HashSet::new());
        fabrics.eth.probe(peer, false, &around);
    }
}
