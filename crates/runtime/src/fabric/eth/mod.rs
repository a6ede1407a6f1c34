//! Raw Ethernet between ranks of one LAN segment: ports, handshakes and the probe.

pub(crate) mod wireup;

use std::time::Duration;

use net::PathKind;
use proto::handshake::{Contention, Identity};
use proto::{Nanos, Rank};
use transport::eth::{eth_caps, eth_link};
use transport::{AnyLink, Transport};

use super::{Around, Fabric, FabricEvent, Purpose, Refusal};
use crate::lanes::{LaneSetup, Route, Via};
use crate::waiter::Waiter;
use wireup::{EthProgress, EthWireup};

/// What raw-Ethernet lanes need, for the warning and the refusal alike.
pub(crate) const NEEDS_CAP_NET_RAW: &str =
    "raw-Ethernet lanes need CAP_NET_RAW: run as root, or `setcap cap_net_raw+ep` on the program";

impl EthWireup {
    /// Probes `peer` for a raw-Ethernet lane (a first one or a further one). Returns
    /// whether any probe went out.
    pub fn probe(&mut self, peer: Rank, first_lane: bool, around: &Around<'_>) -> bool {
        let Some(theirs) = around.cards.get(peer) else {
            return false;
        };
        self.start(around.id, peer, theirs, first_lane, around.cfg.attempt_timeout) > 0
    }
}

impl Fabric for EthWireup {
    /// Raw Ethernet to a rank of another node needs ports here and an offer on its card.
    fn refusal_before_dial(&self, peer: Rank, around: &Around<'_>) -> Option<Refusal> {
        if !self.has_ports() {
            let why = self
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
        if !around.cards.get(peer).is_some_and(EthWireup::offers) {
            return Some(Refusal::new(
                Transport::Eth,
                format!("rank {peer} takes no raw-Ethernet lanes (its own report says why)"),
            ));
        }
        None
    }

    fn dial(
        &mut self,
        peer: Rank,
        _total: Duration,
        around: &Around<'_>,
        _events: &mut Vec<FabricEvent>,
    ) -> Result<(), Refusal> {
        match self.probe(peer, true, around) {
            true => Ok(()),
            false => Err(Refusal::new(Transport::Eth, "no probe could be sent")),
        }
    }

    fn progress(&mut self, around: &Around<'_>, _waiter: &mut Waiter, events: &mut Vec<FabricEvent>) -> bool {
        if !self.has_ports() {
            return false;
        }
        let before = events.len();
        let first: Vec<Rank> = (0..around.id.size).filter(|&r| self.dialling_first(r)).collect();
        let contention = {
            let tcp_or_shm = around.contention();
            move |r: Rank| match tcp_or_shm(r) {
                Contention::None if first.contains(&r) => Contention::Connecting(PathKind::Direct),
                c => c,
            }
        };
        let lanes = around.lanes;
        let has_eth = |peer: Rank| {
            lanes
                .of_peer(peer)
                .iter()
                .any(|&l| lanes.get(l).is_some_and(|l| l.info.transport == Transport::Eth))
        };
        let timeout = around.cfg.attempt_timeout;
        events.extend(self.lanes_from_handshakes(around.id, timeout, contention, has_eth));
        events.len() > before
    }

    fn dialling_first(&self, peer: Rank) -> bool {
        self.dials_first(peer)
    }

    fn first_lane_up(&mut self, peer: Rank, _now: Nanos) {
        self.abandon_first(peer);
    }
}

impl EthWireup {
    /// Drives the handshakes and reports what came of them: lanes (one per peer: a peer
    /// that has one already, `laned`, gets no second), refusals and yields.
    fn lanes_from_handshakes(
        &mut self,
        id: &Identity,
        timeout: Duration,
        contention: impl Fn(Rank) -> Contention,
        laned: impl Fn(Rank) -> bool,
    ) -> Vec<FabricEvent> {
        let mut out = Vec::new();
        for e in self.poll(id, timeout, contention) {
            out.push(match e {
                EthProgress::Established { peer, .. } if laned(peer) => continue,
                EthProgress::Established {
                    peer,
                    pipe,
                    initiated,
                    lane_tag,
                    ifindex,
                    remote,
                } => {
                    let route = Route::Eth {
                        ifindex,
                        local: pipe.local_mac(),
                        remote,
                    };
                    let caps = eth_caps(pipe.one_datagram());
                    let setup = LaneSetup {
                        route,
                        initiated,
                        via: Via::default(),
                        tag: lane_tag,
                        // Not counted as a first lane even when it is one: a TCP first
                        // lane that comes up beside it is kept.
                        first: false,
                    };
                    FabricEvent::LaneUp {
                        peer,
                        link: Box::new(AnyLink::Eth(eth_link(*pipe, caps))),
                        setup,
                    }
                }
                EthProgress::Failed {
                    peer,
                    first_lane,
                    why,
                } => FabricEvent::Refused {
                    peer,
                    refusal: Refusal::new(Transport::Eth, why),
                    purpose: if first_lane {
                        Purpose::FirstLane
                    } else {
                        Purpose::FurtherLane
                    },
                },
                EthProgress::Yielded { peer } => FabricEvent::Yielded { peer },
            });
        }
        out
    }
}
