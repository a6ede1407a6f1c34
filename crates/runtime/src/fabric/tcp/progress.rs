//! One pass over TCP's wire-up: connections accepted, the connects and handshakes this
//! rank races and those it answers driven, and what came of them reported as
//! [`FabricEvent`]s: lanes (their links made here), refusals of first lanes, yields.
//! Further lanes that fail are dialled again here; a punched lane's end is reported so
//! that the hole punch carries on.

use std::collections::HashMap;
use std::net::TcpStream;
use std::time::Duration;

use proto::dial::Deadline;
use proto::handshake::Contention;
use proto::{Nanos, PayloadToken, Rank};
use transport::sealed::LaneKeys;
use transport::tcp::{sealed_tcp_link, tcp_caps, tcp_link};
use transport::{AnyLink, Link, PathFigures, Transport};

use super::wireup::{Incoming, Outgoing, Progress};
use super::{race_timing, Tcp};
use crate::boot::config::Config;
use crate::clock;
use crate::fabric::{nonce, Around, FabricEvent, Purpose, Refusal};
use crate::lanes::{LaneSetup, Route, Via};
use crate::waiter::Waiter;
use net::PathKind;

/// How long an accepted connection has for its handshake, and for its peer's confirmation.
#[derive(Clone, Copy)]
pub struct Answering {
    pub attempt: Duration,
    pub confirm: Duration,
}

impl Answering {
    pub fn of(cfg: &Config) -> Answering {
        Answering {
            attempt: cfg.attempt_timeout,
            confirm: cfg.connect_timeout,
        }
    }
}

/// What this rank already has going with each other rank, for judging a HELLO: only a
/// HELLO of ours that is out can collide with the peer's (a connect of ours still racing
/// towards some address may never get anywhere).
pub(crate) fn handshaking(outgoing: &[Outgoing]) -> Vec<(Rank, PathKind)> {
    outgoing
        .iter()
        .filter_map(|o| Some((o.peer, o.in_handshake()?)))
        .collect()
}

impl Tcp {
    /// Accepts what waits, drives every connect and handshake, and adds what came of
    /// them to `events`. Returns whether anything happened.
    pub(super) fn drive(
        &mut self,
        pass: &Around<'_>,
        waiter: &mut Waiter,
        events: &mut Vec<FabricEvent>,
    ) -> bool {
        let mut busy = false;
        // An `accept()` that finds nobody costs the kernel a socket made and freed: only
        // when a connection waits.
        if pass.ready.contains(&Waiter::LISTENING) {
            for s in self.listeners.as_ref().map(|l| l.accept()).unwrap_or_default() {
                self.answer(s, waiter, pass.now, Answering::of(pass.cfg));
                busy = true;
            }
        }
        // Peers whose first lane came up in this pass (the event loop takes the lanes
        // after it): a HELLO from them finds them connected.
        let mut first_up = Vec::new();
        busy |= self.drive_outgoing(pass, waiter, &mut first_up, events);
        busy |= self.drive_incoming(pass, waiter, &mut first_up, events);
        self.drop_stale_incoming();
        busy
    }

    /// An accepted TCP connection (or a punched one this rank answers) starts its handshake.
    pub fn answer(&mut self, sock: TcpStream, waiter: &mut Waiter, now: Nanos, within: Answering) {
        let limit = clock::nanos(within.attempt);
        let mut c =
            Incoming::new(sock, Deadline::after(now, limit)).confirm_within(clock::nanos(within.confirm));
        if let Some(fd) = c.fd() {
            c.key = waiter.watch_handshake(fd);
        }
        self.incoming.push(c);
    }

    fn drive_outgoing(
        &mut self,
        pass: &Around<'_>,
        waiter: &Waiter,
        first_up: &mut Vec<Rank>,
        events: &mut Vec<FabricEvent>,
    ) -> bool {
        let mut busy = false;
        // Peers whose own first connection to us is completing: our HELLO waits.
        let completing: Vec<Rank> = self
            .incoming
            .iter()
            .filter(|c| !c.extra_lane())
            .filter_map(Incoming::verified_peer)
            .collect();
        let mut i = 0;
        while i < self.outgoing.len() {
            let o = &mut self.outgoing[i];
            let hold = o.first_lane() && completing.contains(&o.peer);
            let progress = o.poll(pass.id, pass.now, nonce, hold);
            if matches!(progress, Progress::Pending) {
                i += 1;
                continue;
            }
            let o = self.outgoing.swap_remove(i);
            self.attempt_log
                .entry(o.peer)
                .or_default()
                .extend(o.attempts.iter().cloned());
            busy = true;
            match progress {
                Progress::Pending | Progress::Dropped(_) => unreachable!("not an outgoing outcome"),
                Progress::Established {
                    peer,
                    sock,
                    extra_lane,
                    via,
                    tag,
                    sealed,
                } => events.extend(lane(
                    pass, waiter, first_up, peer, sock, true, extra_lane, via, tag, sealed,
                )),
                Progress::Failed(report) if o.punched_lane() => events.push(FabricEvent::Refused {
                    peer: o.peer,
                    refusal: Refusal::new(Transport::Tcp, report),
                    purpose: Purpose::Punch,
                }),
                // A further lane that cannot be made leaves the peer on the lanes it has;
                // one whose handshake failed is dialled again a few times (`LANE_REDIALS`).
                Progress::Failed(report) if !o.first_lane() => match o.redial_plan() {
                    Some(plan) if pass.lanes.connected(o.peer) && !pass.finalizing => {
                        tracing::debug!(
                            peer = o.peer,
                            "additional lane failed ({report}): dialling it again"
                        );
                        let timing = race_timing(pass.cfg, pass.cfg.connect_timeout);
                        let mut again = Outgoing::lane(o.peer, plan, pass.cfg.sockbuf, timing, clock::now());
                        again.seal = o.seal;
                        again.redials = o.redials - 1;
                        self.outgoing.push(again);
                    }
                    _ => tracing::debug!(peer = o.peer, "no additional lane: {report}"),
                },
                Progress::Yielded => {
                    events.push(FabricEvent::Yielded { peer: o.peer });
                    events.push(FabricEvent::Refused {
                        peer: o.peer,
                        refusal: Refusal::new(Transport::Tcp, o.report()),
                        purpose: Purpose::FirstLane,
                    });
                }
                // Not failed yet: the peer may still reach us (a NAT'd node can connect
                // out but not be connected to). The event loop's deadline decides.
                Progress::Failed(report) => events.push(FabricEvent::Refused {
                    peer: o.peer,
                    refusal: Refusal::new(Transport::Tcp, report),
                    purpose: Purpose::FirstLane,
                }),
            }
        }
        busy
    }

    fn drive_incoming(
        &mut self,
        pass: &Around<'_>,
        waiter: &Waiter,
        first_up: &mut Vec<Rank>,
        events: &mut Vec<FabricEvent>,
    ) -> bool {
        let mut busy = false;
        let mut i = 0;
        while i < self.incoming.len() {
            let c = &self.incoming[i];
            if !pass.ready.contains(&c.key) && !c.deadline().passed(pass.now) {
                i += 1;
                continue;
            }
            let handshaking = handshaking(&self.outgoing);
            let contention = |r: Rank| {
                if pass.lanes.connected(r) || first_up.contains(&r) {
                    Contention::Connected
                } else if let Some(&(_, kind)) = handshaking.iter().find(|(p, _)| *p == r) {
                    Contention::Connecting(kind)
                } else {
                    Contention::None
                }
            };
            match self.incoming[i].poll(pass.id, pass.now, nonce(), contention) {
                Progress::Pending => i += 1,
                Progress::Established {
                    peer,
                    sock,
                    extra_lane,
                    via,
                    tag,
                    sealed,
                } => {
                    self.incoming.swap_remove(i);
                    busy = true;
                    events.extend(lane(
                        pass, waiter, first_up, peer, sock, false, extra_lane, via, tag, sealed,
                    ));
                }
                Progress::Failed(why) => {
                    // Strangers, wrong jobs and garbage are refused and logged; the job goes on.
                    tracing::warn!("rank {}: {why}", pass.id.rank);
                    self.incoming.swap_remove(i);
                    busy = true;
                }
                Progress::Yielded => {
                    self.incoming.swap_remove(i);
                }
                Progress::Dropped(why) => {
                    tracing::debug!("rank {}: {why}", pass.id.rank);
                    self.incoming.swap_remove(i);
                }
            }
        }
        busy
    }

    /// A rank sends one first-lane HELLO at a time, so of two accepted first connections
    /// from one peer the older is an attempt the peer gave up: keep only the newest.
    fn drop_stale_incoming(&mut self) {
        let first = |c: &Incoming| c.verified_peer().filter(|_| !c.extra_lane());
        // Every accepted connection has the same time limit: the latest deadline is the
        // newest connection.
        let accepted = |c: &Incoming| c.deadline().at();
        let mut newest: HashMap<Rank, Nanos> = HashMap::new();
        for c in &self.incoming {
            if let Some(r) = first(c) {
                let t = newest.entry(r).or_insert(accepted(c));
                *t = (*t).max(accepted(c));
            }
        }
        self.incoming
            .retain(|c| first(c).is_none_or(|r| newest.get(&r) == Some(&accepted(c))));
    }

    /// Whether the first connection `peer` made to this rank passed its HELLO.
    pub fn answering_first(&self, peer: Rank) -> bool {
        self.incoming.iter().any(|c| c.verified_peer() == Some(peer))
    }
}

/// A TCP connection with `peer` passed its handshake: its lane, its bytes sealed with
/// `sealed` when they travel encrypted. None when it is a second first lane (both ends
/// dialled at once) or the socket cannot be configured.
#[allow(clippy::too_many_arguments)]
fn lane(
    pass: &Around<'_>,
    waiter: &Waiter,
    first_up: &mut Vec<Rank>,
    peer: Rank,
    sock: TcpStream,
    initiated: bool,
    extra_lane: bool,
    via: Via,
    tag: u64,
    sealed: Option<LaneKeys>,
) -> Option<FabricEvent> {
    if !extra_lane && (pass.lanes.has_first_lane(peer) || first_up.contains(&peer)) {
        tracing::debug!(peer, "dropping a second connection to a peer already connected");
        return None;
    }
    let (Ok(local), Ok(remote)) = (sock.local_addr(), sock.peer_addr()) else {
        return None;
    };
    // An accepted socket was watched for its handshake; as a link it is read by polling
    // or through the ready set.
    waiter.unwatch(&sock);
    let caps = proto::Caps {
        relayed: via.kind.relayed(),
        ..tcp_caps()
    };
    let link = match &sealed {
        Some(keys) => sealed_tcp_link(sock, caps, keys).map(AnyLink::SealedTcp),
        None => tcp_link(sock, caps).map(AnyLink::Tcp),
    };
    let mut link: AnyLink<PayloadToken> = match link {
        Ok(link) => link,
        Err(e) => {
            tracing::warn!(peer, "cannot configure the connection: {e}");
            return None;
        }
    };
    // The kernel measured the handshake's round trips: a WAN lane is one from the start.
    if let Ok(Some(figures)) = link.check_path(u32::MAX) {
        link.set_caps(measured(caps, figures));
    }
    if link.caps().is_wan() {
        match &link {
            AnyLink::Tcp(l) => super::wan::limit_unsent(l.pipe()),
            AnyLink::SealedTcp(l) => super::wan::limit_unsent(l.pipe().inner()),
            _ => {}
        }
    }
    let route = Route::Ip {
        local,
        remote,
        class: net::classify(remote.ip()),
    };
    if !extra_lane {
        first_up.push(peer);
    }
    let setup = LaneSetup {
        route,
        initiated,
        via,
        tag,
        first: !extra_lane,
    };
    Some(FabricEvent::LaneUp {
        peer,
        link: Box::new(link),
        setup,
    })
}

/// `caps` with what the kernel measured: one-way latency is half the smallest round
/// trip, bandwidth the delivery rate once data has flowed (rounded to 1/16 of a power
/// of two, so that small wobbles do not re-plan the lanes).
pub(crate) fn measured(caps: proto::Caps, f: PathFigures) -> proto::Caps {
    let mut c = caps;
    if f.min_rtt_ns > 0 {
        c.latency_ns = coarse(f.min_rtt_ns / 2);
    }
    if f.delivery_rate > 0 {
        c.bandwidth = coarse(f.delivery_rate);
    }
    c
}

fn coarse(v: u64) -> u64 {
    let shift = (63 - v.max(1).leading_zeros()).saturating_sub(4);
    (v >> shift) << shift
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_rounded_so_wobbles_do_not_replan() {
        assert_eq!(coarse(1000), coarse(1010));
        assert_eq!(coarse(17), 17);
        assert_ne!(coarse(1000), coarse(1200));
        let caps = transport::tcp::tcp_caps();
        let f = PathFigures {
            min_rtt_ns: 40_000,
            delivery_rate: 0,
        };
        let m = measured(caps, f);
        assert_eq!((m.latency_ns, m.bandwidth), (coarse(20_000), caps.bandwidth));
    }
}
