//! What the fabrics report, taken: lanes handed to the engine (`connect.rs`), and what a
//! lane over IP leads to ([`proto::further`]: further lanes per NIC pair, WAN streams,
//! punches, raw probes); refusals kept (for errors and `pontoon doctor`); first lanes
//! passed on to the next transport; the lanes of a peer whose process ended closed.

use std::net::IpAddr;

use proto::further::{after_lane_up, Further, LaneUp};
use proto::Rank;
use transport::{Link, LinkError, Transport};

use super::Runtime;
use crate::clock;
use crate::fabric::{FabricEvent, Purpose};
use crate::lanes::Route;

impl Runtime {
    /// What a lane over IP that came up leads to ([`after_lane_up`]), carried out.
    fn further(&mut self, up: &LaneUp, local: IpAddr, remote: IpAddr, latency_ns: u64) {
        let peer = up.peer;
        for next in after_lane_up(up) {
            match next {
                Further::PunchSucceeded => self.punch_handshake_done(peer, Ok(())),
                Further::StartPunch => self.start_punch(peer),
                Further::InterfacePairs => self.open_extra_lanes(peer, local, remote),
                Further::WanStreams => self.open_wan_streams(peer, local, remote, 2 * latency_ns),
                Further::RawProbe => self.probe_eth(peer),
            }
        }
    }

    /// Takes what the fabrics reported: lanes to the engine, refusals kept (for errors
    /// and `pontoon doctor`), yields as set-ups that wait for the peer's lane, first
    /// lanes passed on dialled over the next transport, ended peers' lanes closed.
    /// Returns whether there was anything.
    pub(super) fn take_fabric_events(&mut self, events: Vec<FabricEvent>) -> bool {
        let any = !events.is_empty();
        for e in events {
            match e {
                FabricEvent::LaneUp { peer, link, setup } => {
                    let caps = link.caps();
                    let (route, first, initiated, kind) =
                        (setup.route, setup.first, setup.initiated, setup.via.kind);
                    if self.add_lane(peer, *link, setup) {
                        if let Route::Ip { local, remote, .. } = route {
                            let up = LaneUp {
                                me: self.job.id.rank,
                                peer,
                                first,
                                initiated,
                                kind,
                                wan: caps.is_wan(),
                                raw_possible: self.refusal_before_dial(Transport::Eth, peer).is_none(),
                            };
                            self.further(&up, local.ip(), remote.ip(), caps.latency_ns);
                        }
                    }
                }
                FabricEvent::Refused {
                    peer,
                    refusal,
                    purpose: Purpose::Punch,
                } => self.punch_handshake_done(peer, Err(refusal.why)),
                FabricEvent::Refused {
                    peer,
                    refusal,
                    purpose,
                } => {
                    if purpose == Purpose::FurtherLane {
                        tracing::debug!(peer, "no further lane: {refusal}");
                    }
                    self.dialing.refusals.record(peer, refusal);
                }
                FabricEvent::Yielded { peer } => {
                    self.passes.yielded += 1;
                    self.dialing.setups.yielded(peer, clock::now());
                }
                FabricEvent::PassedOn { peer, refusal } => {
                    self.dialing.refusals.record(peer, refusal);
                    let left = self
                        .dialing
                        .setups
                        .time_left(peer, clock::now())
                        .map_or(self.cfg.connect_timeout, clock::duration);
                    self.dial(peer, left);
                }
                FabricEvent::Ended {
                    peer,
                    transport,
                    finalized,
                } => self.close_lanes_to_ended(peer, transport, finalized),
            }
        }
        any
    }

    /// The process of `peer` ended: its lanes over `transport` fail as a broken TCP
    /// connection does.
    fn close_lanes_to_ended(&mut self, peer: Rank, transport: Transport, finalized: bool) {
        if finalized {
            self.ep.handle_peer_finalized(peer);
        }
        for lane in self.lanes.of_peer_by(peer, &[transport]) {
            // What it wrote before it ended is still delivered.
            self.service_link(lane, true);
            if self.lanes.get(lane).is_some() {
                self.lane_down(lane, LinkError::Closed);
            }
        }
    }

    /// One more lane per further interface pair with `peer` (`net::paths::extra_lanes`).
    fn open_extra_lanes(&mut self, peer: Rank, local: std::net::IpAddr, remote: std::net::IpAddr) {
        let (Some(mine), Some(theirs)) = (self.job.cards.get(self.job.id.rank), self.job.cards.get(peer))
        else {
            return;
        };
        for plan in net::paths::extra_lanes(mine, theirs, local, remote) {
            self.dial_lane(peer, plan);
        }
    }
}
