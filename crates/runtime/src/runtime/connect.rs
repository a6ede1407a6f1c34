//! Wire-up as the event loop drives it: which transport a first lane to a peer takes
//! (shared memory within a node, else TCP), the TCP and shared-memory state machines
//! polled, lanes handed to the engine and watched, further lanes per NIC pair, and the
//! deadline after which a peer that could not be reached fails.

use std::collections::HashMap;
use std::net::TcpStream;
use std::time::Duration;

use proto::dial::Deadline;
use proto::further::{after_lane_up, Further, LaneUp};
use proto::handshake::Contention;
use proto::{Nanos, PayloadToken, Rank};
use transport::sealed::LaneKeys;
use transport::tcp::{sealed_tcp_link, tcp_caps, tcp_link};
use transport::{AnyLink, Link, Transport};

use super::Runtime;
use crate::boot::config::Encrypt;
use crate::clock;
use crate::fabric::tcp::wireup::{Incoming, Outgoing, Progress, Seal};
use crate::fabric::{nonce, FabricEvent, Refusal};
use crate::lanes::{Lane, LaneSetup, Lanes, PathInfo, Route, Via};
use crate::waiter::Waiter;
use net::{EndpointCard, PathKind};

/// The transports a first lane is tried over, best first: shared memory within a node,
/// else TCP, which reaches every peer some way (direct, relayed, punched); raw Ethernet
/// carries a first lane only where TCP is not allowed (with TCP it joins as a further
/// lane, see `established`).
pub(super) const FIRST_LANE_ORDER: [Transport; 3] = [Transport::Shm, Transport::Tcp, Transport::Eth];

/// What this rank already has going with each other rank, for judging a HELLO: only a
/// HELLO of ours that is out can collide with the peer's (a connect of ours still racing
/// towards some address may never get anywhere).
pub(super) fn contention<'a>(lanes: &'a Lanes, outgoing: &[Outgoing]) -> impl Fn(Rank) -> Contention + 'a {
    let handshaking: Vec<(Rank, PathKind)> = outgoing
        .iter()
        .filter_map(|o| Some((o.peer, o.in_handshake()?)))
        .collect();
    move |r: Rank| {
        if lanes.connected(r) {
            Contention::Connected
        } else if let Some(&(_, kind)) = handshaking.iter().find(|(p, _)| *p == r) {
            Contention::Connecting(kind)
        } else {
            Contention::None
        }
    }
}

impl Runtime {
    pub(super) fn start_connect(&mut self, peer: Rank) {
        let completing = self.tcp.incoming.iter().any(|c| c.verified_peer() == Some(peer));
        if self.lanes.connected(peer) {
            return;
        }
        let (now, limit) = (clock::now(), clock::nanos(self.cfg.connect_timeout));
        if completing || self.connecting(peer) {
            // The peer's own connection is about to complete; it will carry our messages.
            self.dialing.setups.begin(peer, now, limit, false);
            return;
        }
        self.dialing.setups.begin(peer, now, limit, true);
        self.dial(peer, self.cfg.connect_timeout);
        self.wireup();
    }

    /// Starts setting up the first lane to `peer` over the first transport, in order of
    /// preference ([`FIRST_LANE_ORDER`]), that takes it; each one passed over says why
    /// (kept for the error if the peer cannot be reached, and for `pontoon doctor`).
    pub(super) fn dial(&mut self, peer: Rank, total: Duration) {
        for transport in FIRST_LANE_ORDER {
            let dialled = match self.refusal_before_dial(transport, peer) {
                Some(refusal) => Err(refusal),
                None => match transport {
                    Transport::Shm => self.dial_shm(peer),
                    Transport::Tcp => {
                        self.dial_tcp(peer, total);
                        Ok(())
                    }
                    Transport::Eth => self.dial_eth(peer),
                },
            };
            match dialled {
                Ok(()) => return,
                Err(refusal) => self.dialing.refusals.record(peer, refusal),
            }
        }
    }

    /// Why `transport` cannot carry lanes to `peer`, as far as is known before trying:
    /// not allowed, the ranks' placement, a card that cannot be read, no ports.
    pub(super) fn refusal_before_dial(&self, transport: Transport, peer: Rank) -> Option<Refusal> {
        if !self.cfg.transports.contains(&transport) {
            return Some(Refusal::not_allowed(transport, &self.cfg.transports));
        }
        let same_node = self.job.cards.same_node(self.job.id.rank, peer);
        if transport != Transport::Shm {
            if let Some(fault) = self.job.cards.fault(peer) {
                return Some(Refusal::new(
                    transport,
                    format!("its endpoint card cannot be read ({fault}): it may run another pontoon version"),
                ));
            }
        }
        match transport {
            Transport::Shm if !same_node => {
                Some(Refusal::new(transport, format!("rank {peer} runs on another node")).expected())
            }
            Transport::Shm => self.shm_refusal_before_dial(peer),
            Transport::Eth if same_node => {
                Some(Refusal::new(transport, format!("rank {peer} runs on this node")).expected())
            }
            Transport::Eth => self.eth_refusal_before_dial(peer),
            Transport::Tcp => None,
        }
    }

    /// Races TCP connects to `peer`'s addresses (and relays).
    fn dial_tcp(&mut self, peer: Rank, total: Duration) {
        let mut o = Outgoing::new(
            peer,
            self.candidates_for(peer),
            self.cfg.sockbuf,
            self.race_timing(total),
            clock::now(),
        );
        o.seal = self.seal_for(peer);
        self.tcp.outgoing.push(o);
    }

    /// Whether the lanes this rank opens to `peer` are sealed (`PONTOON_ENCRYPT`).
    pub(super) fn seal_for(&self, peer: Rank) -> Seal {
        match self.cfg.encrypt {
            Encrypt::None => Seal::Never,
            Encrypt::All => Seal::Always,
            Encrypt::Wan => {
                let site = |r: Rank| self.job.cards.head(r).and_then(|c| c.site.as_deref());
                let far = matches!((site(self.job.id.rank), site(peer)), (Some(a), Some(b)) if a != b);
                Seal::OverWan { far }
            }
        }
    }

    /// An accepted TCP connection (or a punched one this rank answers) starts its handshake.
    pub(super) fn take_incoming(&mut self, sock: TcpStream) {
        let limit = clock::nanos(self.cfg.attempt_timeout);
        let mut c = Incoming::new(sock, Deadline::after(clock::now(), limit))
            .confirm_within(clock::nanos(self.cfg.connect_timeout));
        c.key = self.handshake_key();
        if let Some(fd) = c.fd() {
            self.waiter.watch_as(fd, c.key);
        }
        self.tcp.incoming.push(c);
    }

    /// A fresh name for a handshake's socket in the waiter (never 0: see `Waiter::watch_as`).
    pub(super) fn handshake_key(&mut self) -> u64 {
        self.tcp.handshake_keys += 1;
        self.tcp.handshake_keys
    }

    /// Whether a first connection to `peer` is being set up by us.
    fn connecting(&self, peer: Rank) -> bool {
        self.tcp.outgoing.iter().any(|o| o.peer == peer && o.first_lane())
            || self.shm.waiting_for(peer)
            || self.eth.dialling_first(peer)
    }

    /// The first lane to `peer` is up: what we were setting up ourselves is abandoned.
    fn first_lane_up(&mut self, peer: Rank) {
        if let Some(pos) = self
            .tcp
            .outgoing
            .iter()
            .position(|o| o.peer == peer && o.first_lane())
        {
            let mut o = self.tcp.outgoing.swap_remove(pos);
            o.abandon("abandoned: the peer's own connection came first", clock::now());
            self.dialing
                .attempt_log
                .entry(peer)
                .or_default()
                .extend(o.attempts);
        }
        self.eth.abandon_first(peer);
        self.shm.stop_waiting(peer);
        self.dialing.setups.done(peer);
    }

    /// A TCP connection with `peer` passed its handshake: a lane, its bytes sealed with
    /// `sealed` when they travel encrypted.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn established(
        &mut self,
        peer: Rank,
        sock: TcpStream,
        initiated: bool,
        extra_lane: bool,
        via: Via,
        tag: u64,
        sealed: Option<LaneKeys>,
    ) {
        // A second first lane (both ends dialled at once) goes.
        if !extra_lane && self.lanes.has_first_lane(peer) {
            tracing::debug!(peer, "dropping a second connection to a peer already connected");
            return;
        }
        let (Ok(local), Ok(remote)) = (sock.local_addr(), sock.peer_addr()) else {
            return;
        };
        // An accepted socket was watched for its handshake; as a link it is read by
        // polling or through the ready set.
        self.waiter.unwatch(&sock);
        let caps = proto::Caps {
            relayed: via.kind.relayed(),
            ..tcp_caps(self.cfg.eager_limit.max(self.cfg.wan_eager_limit))
        };
        let link = match &sealed {
            Some(keys) => sealed_tcp_link(sock, caps, keys).map(AnyLink::SealedTcp),
            None => tcp_link(sock, caps).map(AnyLink::Tcp),
        };
        let mut link = match link {
            Ok(link) => link,
            Err(e) => {
                tracing::warn!(peer, "cannot configure the connection: {e}");
                return;
            }
        };
        // The kernel measured the handshake's round trips: a WAN lane is one from the start.
        if let Ok(Some(figures)) = link.check_path(u32::MAX) {
            link.set_caps(super::health::measured(caps, figures));
        }
        let caps = link.caps();
        if caps.is_wan() {
            match &link {
                AnyLink::Tcp(l) => crate::fabric::tcp::wan::limit_unsent(l.pipe()),
                AnyLink::SealedTcp(l) => crate::fabric::tcp::wan::limit_unsent(l.pipe().inner()),
                _ => {}
            }
        }
        let route = Route::Ip {
            local,
            remote,
            class: net::classify(remote.ip()),
        };
        let setup = LaneSetup {
            route,
            initiated,
            via,
            tag,
            first: !extra_lane,
        };
        if !self.add_lane(peer, link, setup) {
            return;
        }
        let up = LaneUp {
            me: self.job.id.rank,
            peer,
            first: !extra_lane,
            initiated,
            kind: via.kind,
            wan: caps.is_wan(),
            raw_possible: self.refusal_before_dial(Transport::Eth, peer).is_none(),
        };
        for next in after_lane_up(&up) {
            match next {
                Further::PunchSucceeded => self.punch_handshake_done(peer, Ok(())),
                Further::StartPunch => self.start_punch(peer),
                Further::InterfacePairs => self.open_extra_lanes(peer, local.ip(), remote.ip()),
                Further::WanStreams => {
                    self.open_wan_streams(peer, local.ip(), remote.ip(), 2 * caps.latency_ns)
                }
                Further::RawProbe => {
                    self.start_eth(peer, false);
                }
            }
        }
    }

    /// Takes what the fabrics reported: lanes to the engine, refusals kept (for errors
    /// and `pontoon doctor`), yields as set-ups that wait for the peer's lane. Returns
    /// whether there was anything.
    pub(super) fn take_fabric_events(&mut self, events: Vec<FabricEvent>) -> bool {
        let any = !events.is_empty();
        for e in events {
            match e {
                FabricEvent::LaneUp { peer, link, setup } => {
                    self.add_lane(peer, *link, setup);
                }
                FabricEvent::Refused {
                    peer,
                    refusal,
                    first_lane,
                } => {
                    if !first_lane {
                        tracing::debug!(peer, "no further lane: {refusal}");
                    }
                    self.dialing.refusals.record(peer, refusal);
                }
                FabricEvent::Yielded { peer } => {
                    self.passes.yielded += 1;
                    self.dialing.setups.yielded(peer, clock::now());
                }
            }
        }
        any
    }

    /// Hands a new lane to the engine, which names it, and watches it. Returns whether
    /// the lane was taken.
    pub(super) fn add_lane(&mut self, peer: Rank, link: AnyLink<PayloadToken>, setup: LaneSetup) -> bool {
        let first = !self.lanes.connected(peer);
        let Some(lane) = self.ep.handle_lane_up(peer, link.caps()) else {
            return false; // the peer failed meanwhile
        };
        let watched = match (link.fd(), link.polled()) {
            // A polled lane's fd only wakes a sleeping rank: with the rarely busy sockets
            // (or only during sleeps: see `Link::watch_while_sleeping`).
            (Some(fd), true) => {
                if !link.watch_while_sleeping() {
                    // Reading only: room to write again after a doorbell byte is no news.
                    self.waiter.watch_readable(fd, Waiter::doorbell(lane.0));
                }
                Ok(())
            }
            (Some(fd), false) if self.passes.links_watched => {
                self.passes.ready.watch(fd, u64::from(lane.0), false)
            }
            _ => Ok(()),
        };
        if let Err(e) = watched {
            tracing::warn!(peer, "cannot watch the lane with epoll ({e}); closing it");
            let cause = format!("its lane could not be watched: {e}");
            if self.ep.handle_lane_down(peer, lane, &cause, false) == proto::LaneLoss::PeerFailed {
                self.drop_lanes(peer);
            }
            return false;
        }
        let info = PathInfo {
            lane,
            transport: link.transport(),
            route: setup.route,
            initiated: setup.initiated,
            via: setup.via,
            sealed: link.sealed(),
        };
        tracing::debug!(
            rank = self.job.id.rank,
            peer,
            lane = lane.0,
            "lane up: {:?}",
            info.transport
        );
        self.lanes.insert(Lane {
            peer,
            link,
            info,
            tag: setup.tag,
            acked: 0,
            rest: 0,
            first: setup.first,
        });
        self.keep_for_replay(peer);
        if first {
            self.first_lane_up(peer);
        }
        if self.lanes.sockets().len() == 2 && !self.passes.links_watched {
            match self.watch_links() {
                Ok(()) => self.passes.links_watched = true,
                Err(e) => {
                    tracing::warn!("cannot watch links with epoll ({e}); every progress pass reads all")
                }
            }
        }
        true
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

    /// Starts setting up a further lane to `peer`, which is connected already.
    pub(super) fn dial_lane(&mut self, peer: Rank, plan: net::paths::LanePlan) {
        self.dial_lane_tries(peer, plan, crate::fabric::tcp::wireup::LANE_REDIALS);
    }

    /// [`Runtime::dial_lane`], dialled again at most `redials` times if it fails.
    fn dial_lane_tries(&mut self, peer: Rank, plan: net::paths::LanePlan, redials: u8) {
        let mut o = Outgoing::lane(
            peer,
            plan,
            self.cfg.sockbuf,
            self.race_timing(self.cfg.connect_timeout),
            clock::now(),
        );
        o.seal = self.seal_for(peer);
        o.redials = redials;
        self.tcp.outgoing.push(o);
    }

    /// Accepts connections and drives handshakes. Returns whether anything happened.
    pub(super) fn wireup(&mut self) -> bool {
        let mut any = false;
        self.drive_punch_dials();
        // Handshakes are read when their socket has something or their time is up, and
        // listeners accepted from when a connection waits: an `accept()` that finds
        // nobody costs the kernel a socket made and freed.
        let ready = self.waiter.take_ready();
        if ready.contains(&Waiter::LISTENING) {
            for s in self
                .tcp
                .listeners
                .as_ref()
                .map(|l| l.accept())
                .unwrap_or_default()
            {
                self.take_incoming(s);
                any = true;
            }
        }
        let now_ns = clock::now();
        any |= self.shm_wireup(&ready, now_ns);
        any |= self.eth_wireup();
        // Peers whose own first connection to us is completing: our HELLO waits.
        let completing: Vec<Rank> = self
            .tcp
            .incoming
            .iter()
            .filter(|c| !c.extra_lane())
            .filter_map(Incoming::verified_peer)
            .collect();
        let mut i = 0;
        while i < self.tcp.outgoing.len() {
            let o = &mut self.tcp.outgoing[i];
            let hold = o.first_lane() && completing.contains(&o.peer);
            let progress = o.poll(&self.job.id, now_ns, nonce, hold);
            if matches!(progress, Progress::Pending) {
                i += 1;
                continue;
            }
            let o = self.tcp.outgoing.swap_remove(i);
            self.dialing
                .attempt_log
                .entry(o.peer)
                .or_default()
                .extend(o.attempts.iter().cloned());
            any = true;
            match progress {
                Progress::Pending | Progress::Dropped(_) => unreachable!("not an outgoing outcome"),
                Progress::Established {
                    peer,
                    sock,
                    extra_lane,
                    via,
                    tag,
                    sealed,
                } => self.established(peer, sock, true, extra_lane, via, tag, sealed),
                Progress::Failed(report) if o.punched_lane() => {
                    self.punch_handshake_done(o.peer, Err(report))
                }
                // A further lane that cannot be made leaves the peer on the lanes it has;
                // one whose handshake failed is dialled again a few times (`LANE_REDIALS`).
                Progress::Failed(report) if !o.first_lane() => match o.redial_plan() {
                    Some(plan) if self.lanes.connected(o.peer) && !self.life.finalizing => {
                        tracing::debug!(
                            peer = o.peer,
                            "additional lane failed ({report}): dialling it again"
                        );
                        self.dial_lane_tries(o.peer, plan, o.redials - 1);
                    }
                    _ => tracing::debug!(peer = o.peer, "no additional lane: {report}"),
                },
                Progress::Yielded => {
                    self.passes.yielded += 1;
                    self.dialing.setups.yielded(o.peer, clock::now());
                    let report = Refusal::new(Transport::Tcp, o.report());
                    self.dialing.refusals.record(o.peer, report);
                }
                // Not failed yet: the peer may still reach us (a NAT'd node can connect
                // out but not be connected to). The deadline below decides.
                Progress::Failed(report) => {
                    let report = Refusal::new(Transport::Tcp, report);
                    self.dialing.refusals.record(o.peer, report);
                }
            }
        }
        let mut i = 0;
        while i < self.tcp.incoming.len() {
            let c = &self.tcp.incoming[i];
            if !ready.contains(&c.key) && !c.deadline().passed(now_ns) {
                i += 1;
                continue;
            }
            // Only a HELLO of ours that is out can collide with the peer's; a connect of ours
            // still racing towards some address may never get anywhere.
            let contention = contention(&self.lanes, &self.tcp.outgoing);
            match self.tcp.incoming[i].poll(&self.job.id, now_ns, nonce(), contention) {
                Progress::Pending => i += 1,
                Progress::Established {
                    peer,
                    sock,
                    extra_lane,
                    via,
                    tag,
                    sealed,
                } => {
                    self.tcp.incoming.swap_remove(i);
                    self.established(peer, sock, false, extra_lane, via, tag, sealed);
                    any = true;
                }
                Progress::Failed(why) => {
                    // Strangers, wrong jobs and garbage are refused and logged; the job goes on.
                    tracing::warn!("rank {}: {why}", self.job.id.rank);
                    self.tcp.incoming.swap_remove(i);
                    any = true;
                }
                Progress::Yielded => {
                    self.tcp.incoming.swap_remove(i);
                }
                Progress::Dropped(why) => {
                    tracing::debug!("rank {}: {why}", self.job.id.rank);
                    self.tcp.incoming.swap_remove(i);
                }
            }
        }
        self.drop_stale_incoming();
        self.retry_yielded();
        // A peer we yielded to must show up in time, or operations with it fail.
        let mut setups = std::mem::take(&mut self.dialing.setups);
        let late = setups.overdue(clock::now(), |p| !self.lanes.connected(p) && !self.connecting(p));
        self.dialing.setups = setups;
        for (p, yielded) in late {
            let cause = self.unreachable_cause(p, yielded);
            self.ep.handle_peer_failed(p, &cause);
            self.report_unreachable(p, &cause);
            any = true;
        }
        any
    }

    /// Why `peer` could not be reached: what was tried and how each failed, and, between
    /// nodes, what would help.
    fn unreachable_cause(&mut self, peer: Rank, yielded: bool) -> String {
        let refused: Vec<String> = FIRST_LANE_ORDER
            .into_iter()
            .filter_map(|t| self.dialing.refusals.of(peer, t))
            .filter(|r| !r.expected)
            .map(Refusal::to_string)
            .collect();
        let mut report = refused.join("; ");
        if report.trim().is_empty() {
            report = if yielded {
                "no address of ours was tried: both ranks connected at once and ours gave way, \
                 but the peer's connection never completed"
                    .into()
            } else {
                "no connection attempt of ours finished in time, and none came from the peer".into()
            };
        }
        let timeout = format!(
            "no connection with rank {peer} within {} ms ({})",
            self.cfg.connect_timeout.as_millis(),
            self.cfg.timeout_source("PONTOON_CONNECT_TIMEOUT_MS")
        );
        if self.job.cards.same_node(peer, self.job.id.rank) {
            // Relays and NATs are no answer between two processes of one host.
            return format!(
                "{timeout}: {report}. Rank {peer} runs on this host: it is overloaded or stopped \
                 (PONTOON_LOG=debug on both ranks shows the handshake)"
            );
        }
        let (nat, relay) = (self.nat_note(peer), self.relay_note(peer));
        if self.cfg.transports.contains(&Transport::Tcp) {
            // Doctor lists TCP as refused, with what the notes say would help.
            let mut tcp = self
                .dialing
                .refusals
                .of(peer, Transport::Tcp)
                .cloned()
                .unwrap_or_else(|| Refusal::new(Transport::Tcp, report.clone()));
            let help: Vec<&str> = nat.iter().chain(&relay).map(String::as_str).collect();
            if !help.is_empty() {
                tcp.help = Some(help.join(". "));
            }
            self.dialing.refusals.record(peer, tcp);
        }
        let nat = nat.map(|n| format!("; {n}")).unwrap_or_default();
        let relay = relay.map(|r| format!(". {r}")).unwrap_or_default();
        format!("{timeout}: {report}{nat}{relay}")
    }

    /// Tells the launcher that `peer` could not be reached, so that `peer` learns it too
    /// and its operations with this rank fail instead of waiting for it forever.
    fn report_unreachable(&mut self, peer: Rank, cause: &str) {
        if let Some(rendezvous) = self.job.rendezvous.as_mut() {
            if let Err(e) = rendezvous.unreachable(peer, cause) {
                tracing::warn!(
                    "rank {}: cannot tell the launcher about rank {peer}: {e}",
                    self.job.id.rank
                );
            }
        }
    }

    /// What the coordinator saw of the NATs between it and the two ranks, when they differ:
    /// the likely reason why private addresses led nowhere.
    fn nat_note(&self, peer: Rank) -> Option<String> {
        let nat = |r: Rank| self.job.cards.get(r).and_then(EndpointCard::nat);
        let seen = |n: Option<std::net::IpAddr>| match n {
            Some(ip) => format!("behind NAT {ip}"),
            None => "directly".to_string(),
        };
        let (mine, theirs) = (nat(self.job.id.rank), nat(peer));
        if mine == theirs {
            return None;
        }
        Some(format!(
            "the launcher's coordinator sees this rank {} and rank {peer} {}: probably \
             different private networks",
            seen(mine),
            seen(theirs)
        ))
    }

    /// What relays could do for `peer`, or why they did not.
    fn relay_note(&self, peer: Rank) -> Option<String> {
        let theirs = self.job.cards.get(peer).map_or(0, |c| c.relays.len());
        if theirs > 0 {
            return None; // its relays were tried: the report says how each failed
        }
        let mut note = format!(
            "Rank {peer} is registered with no relay: between different private networks, run \
             `pontoon relay` on the front-end node of its cluster (`pontoon run --relay HOST`, or \
             PONTOON_RELAYS for relays already running), or give both sites IPv6"
        );
        if self.cfg.relays.is_empty() {
            note.push_str(" (this job has no relays)");
        } else {
            note.push_str(&format!(
                " (none of this job's {} relay(s) can reach rank {peer} back; PONTOON_LOG=info \
                 on it says why)",
                self.cfg.relays.len()
            ));
        }
        Some(note)
    }

    /// A rank sends one first-lane HELLO at a time, so of two accepted first connections
    /// from one peer the older is an attempt the peer gave up: keep only the newest.
    fn drop_stale_incoming(&mut self) {
        let first = |c: &Incoming| c.verified_peer().filter(|_| !c.extra_lane());
        // Every accepted connection has the same time limit: the latest deadline is the
        // newest connection.
        let accepted = |c: &Incoming| c.deadline().at();
        let mut newest: HashMap<Rank, Nanos> = HashMap::new();
        for c in &self.tcp.incoming {
            if let Some(r) = first(c) {
                let t = newest.entry(r).or_insert(accepted(c));
                *t = (*t).max(accepted(c));
            }
        }
        self.tcp
            .incoming
            .retain(|c| first(c).is_none_or(|r| newest.get(&r) == Some(&accepted(c))));
    }

    /// A peer we yielded to whose connection did not arrive within an attempt's time
    /// (its handshake failed, or it gave up): try again ourselves, within the deadline.
    fn retry_yielded(&mut self) {
        let mut setups = std::mem::take(&mut self.dialing.setups);
        let due = setups.retries_due(clock::now(), clock::nanos(self.cfg.attempt_timeout), |p| {
            !self.lanes.connected(p)
                && !self.connecting(p)
                && !self.tcp.incoming.iter().any(|c| c.verified_peer() == Some(p))
        });
        self.dialing.setups = setups;
        for (peer, left) in due {
            self.dial(peer, clock::duration(left));
        }
    }

    /// How the candidates of one set-up taking at most `total` are raced.
    pub(super) fn race_timing(&self, total: Duration) -> proto::dial::RaceTiming {
        proto::dial::RaceTiming {
            attempt: clock::nanos(self.cfg.attempt_timeout),
            stagger: clock::nanos(self.cfg.stagger),
            total: clock::nanos(total),
        }
    }

    /// The first lane's candidates, of the path kinds allowed (`PONTOON_PATHS`).
    pub(super) fn candidates_for(&self, peer: Rank) -> Vec<net::Candidate> {
        let mut all = match (self.job.cards.get(self.job.id.rank), self.job.cards.get(peer)) {
            (Some(mine), Some(theirs)) => net::candidates(mine, theirs),
            _ => Vec::new(),
        };
        all.retain(|c| self.cfg.paths.contains(&c.kind));
        all
    }
}
