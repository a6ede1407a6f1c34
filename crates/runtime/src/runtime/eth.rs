//! Raw-Ethernet lanes as the event loop drives them (`fabric/eth` has the
//! handshakes): when a peer is probed, what becomes of each probe, and the lanes that
//! come out of them.

use proto::handshake::Contention;
use proto::Rank;
use transport::Transport;

use super::Runtime;
use crate::fabric::eth::wireup::EthWireup;
use crate::fabric::Refusal;
use net::PathKind;

/// What raw-Ethernet lanes need, for the warning and the refusal alike.
const NEEDS_CAP_NET_RAW: &str =
    "raw-Ethernet lanes need CAP_NET_RAW: run as root, or `setcap cap_net_raw+ep` on the program";

impl Runtime {
    /// Says, once, why there are no raw-Ethernet ports where a peer on another node
    /// could have used them.
    pub(super) fn explain_eth(&self) {
        if let Some(why) = &self.eth.refusal {
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
        self.eth.refusal.as_deref()
    }

    /// The interfaces this rank takes raw-Ethernet lanes on.
    pub fn eth_interfaces(&self) -> Vec<String> {
        self.eth.port_names()
    }

    /// Why raw Ethernet cannot carry lanes to `peer`, a rank of another node, as far as
    /// is known before probing it.
    pub(super) fn eth_refusal_before_dial(&self, peer: Rank) -> Option<Refusal> {
        if !self.eth.has_ports() {
            let why = self
                .eth
                .refusal
                .as_deref()
                .unwrap_or("no peer of another node when it started");
            return Some(
                Refusal::new(
                    Transport::Eth,
                    format!("this rank has no raw-Ethernet port: {why}"),
                )
                .helped_by(NEEDS_CAP_NET_RAW),
            );
        }
        if !self.job.cards.get(peer).is_some_and(EthWireup::offers) {
            return Some(Refusal::new(
                Transport::Eth,
                format!("rank {peer} takes no raw-Ethernet lanes (its own report says why)"),
            ));
        }
        None
    }

    /// Probes `peer` for a first lane over raw Ethernet.
    pub(super) fn dial_eth(&mut self, peer: Rank) -> Result<(), Refusal> {
        match self.start_eth(peer, true) {
            true => Ok(()),
            false => Err(Refusal::new(Transport::Eth, "no probe could be sent")),
        }
    }

    /// Probes `peer` for a raw-Ethernet lane. Returns whether any probe went out.
    pub(super) fn start_eth(&mut self, peer: Rank, first_lane: bool) -> bool {
        let Some(theirs) = self.job.cards.get(peer) else {
            return false;
        };
        self.eth
            .start(&self.job.id, peer, theirs, first_lane, self.cfg.attempt_timeout)
            > 0
    }

    /// Drives the raw-Ethernet handshakes. Returns whether anything happened.
    pub(super) fn eth_wireup(&mut self) -> bool {
        if !self.eth.has_ports() {
            return false;
        }
        let first: Vec<Rank> = (0..self.job.id.size)
            .filter(|&r| self.eth.dialling_first(r))
            .collect();
        let events = {
            let tcp_or_shm = super::connect::contention(&self.lanes, &self.tcp.outgoing);
            let contention = |r: Rank| match tcp_or_shm(r) {
                Contention::None if first.contains(&r) => Contention::Connecting(PathKind::Direct),
                c => c,
            };
            let has_eth = |peer: Rank| {
                self.lanes.of_peer(peer).iter().any(|&l| {
                    self.lanes
                        .get(l)
                        .is_some_and(|l| l.info.transport == Transport::Eth)
                })
            };
            let timeout = self.cfg.attempt_timeout;
            self.eth
                .progress(&self.job.id, timeout, self.cfg.eager_limit, contention, has_eth)
        };
        self.take_fabric_events(events)
    }
}
