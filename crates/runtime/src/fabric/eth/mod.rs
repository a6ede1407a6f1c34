//! Raw Ethernet between ranks of one LAN segment: ports, handshakes and the probe.

pub(crate) mod wireup;

use std::time::Duration;

use proto::handshake::{Contention, Identity};
use proto::Rank;
use transport::eth::{eth_caps, eth_link};
use transport::{AnyLink, Transport};

use super::{FabricEvent, Refusal};
use crate::lanes::{LaneSetup, Route, Via};
use wireup::{EthProgress, EthWireup};

impl EthWireup {
    /// Drives the handshakes and reports what came of them: lanes (one per peer: a peer
    /// that has one already, `laned`, gets no second), refusals and yields.
    pub fn progress(
        &mut self,
        id: &Identity,
        timeout: Duration,
        eager_limit: u32,
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
                    let caps = eth_caps(eager_limit, pipe.one_datagram());
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
                    first_lane,
                },
                EthProgress::Yielded { peer } => FabricEvent::Yielded { peer },
            });
        }
        out
    }
}
