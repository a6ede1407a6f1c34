//! Wire-up as the event loop drives it: which transport a first lane to a peer takes
//! (shared memory within a node, else TCP), the fabrics driven on each pass, lanes
//! handed to the engine and watched, and the deadline after which a peer that could
//! not be reached fails (`unreachable.rs` says why; `lane_up.rs` takes the rest of
//! what the fabrics report).

use std::collections::HashSet;
use std::net::TcpStream;
use std::time::Duration;

use proto::{PayloadToken, Rank};
use transport::{AnyLink, Link, Transport};

use super::Runtime;
use super::{Dialing, Lifecycle};
use crate::boot::config::Config;
use crate::boot::Job;
use crate::clock;
use crate::fabric::tcp::progress::{handshaking, Answering};
use crate::fabric::tcp::wireup::Outgoing;
use crate::fabric::tcp::Tcp;
use crate::fabric::{self, tcp, Around, Fabrics, Refusal};
use crate::lanes::Lanes;
use crate::lanes::{Lane, LaneSetup, PathInfo};
use crate::waiter::Waiter;

/// The transports a first lane is tried over, best first: shared memory within a node,
/// else TCP, which reaches every peer some way (direct, relayed, punched); raw Ethernet
/// carries a first lane only where TCP is not allowed (with TCP it joins as a further
/// lane, see [`proto::further`]).
pub(super) const FIRST_LANE_ORDER: [Transport; 3] = [Transport::Shm, Transport::Tcp, Transport::Eth];

impl Runtime {
    pub(super) fn start_connect(&mut self, peer: Rank) {
        let completing = self.fabrics.tcp.answering_first(peer);
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

    /// What the fabrics see of the rank around them, `ready` the handshake sockets that
    /// have had something.
    pub(super) fn around(&self, ready: HashSet<u64>) -> Around<'_> {
        around(
            &self.job,
            &self.cfg,
            &self.lanes,
            &self.dialing,
            &self.fabrics.tcp,
            &self.life,
            ready,
        )
    }

    /// The fabrics and the waiter, to drive, beside [`Runtime::around`] (borrowed apart).
    pub(super) fn fabrics_around(&mut self, ready: HashSet<u64>) -> (&mut Fabrics, &mut Waiter, Around<'_>) {
        let Runtime {
            fabrics,
            job,
            cfg,
            lanes,
            dialing,
            waiter,
            life,
            ..
        } = self;
        let around = around(job, cfg, lanes, dialing, &fabrics.tcp, life, ready);
        (fabrics, waiter, around)
    }

    /// Starts setting up the first lane to `peer` over the first transport, in order of
    /// preference ([`FIRST_LANE_ORDER`]), that takes it; each one passed over says why
    /// (kept for the error if the peer cannot be reached, and for `pontoon doctor`).
    pub(super) fn dial(&mut self, peer: Rank, total: Duration) {
        let mut events = Vec::new();
        let (fabrics, _, around) = self.fabrics_around(HashSet::new());
        let (_, refused) = fabric::dial_first(
            &mut fabrics.in_order(&FIRST_LANE_ORDER),
            peer,
            total,
            &around,
            &mut events,
        );
        for refusal in refused {
            self.dialing.refusals.record(peer, refusal);
        }
        self.take_fabric_events(events);
    }

    /// Why `transport` cannot carry lanes to `peer`, as far as is known before trying.
    pub(super) fn refusal_before_dial(&self, transport: Transport, peer: Rank) -> Option<Refusal> {
        let around = self.around(HashSet::new());
        fabric::refusal_before_dial(transport, self.fabrics.of(transport), peer, &around)
    }

    /// An accepted TCP connection (or a punched one this rank answers) starts its handshake.
    pub(super) fn take_incoming(&mut self, sock: TcpStream) {
        let answering = Answering::of(&self.cfg);
        self.fabrics
            .tcp
            .answer(sock, &mut self.waiter, clock::now(), answering);
    }

    /// Whether a first connection to `peer` is being set up by us.
    fn connecting(&self, peer: Rank) -> bool {
        Transport::ALL
            .into_iter()
            .any(|t| self.fabrics.of(t).dialling_first(peer))
    }

    /// The first lane to `peer` is up: what we were setting up ourselves is abandoned.
    pub(super) fn first_lane_up(&mut self, peer: Rank) {
        let now = clock::now();
        for t in Transport::ALL {
            self.fabrics.get(t).first_lane_up(peer, now);
        }
        self.dialing.setups.done(peer);
    }

    /// Starts setting up a further lane to `peer`, which is connected already.
    /// If it fails, it is dialled again a few times (`LANE_REDIALS`).
    pub(super) fn dial_lane(&mut self, peer: Rank, plan: net::paths::LanePlan) {
        let timing = tcp::race_timing(&self.cfg, self.cfg.connect_timeout);
        let mut o = Outgoing::lane(peer, plan, self.cfg.sockbuf, timing, clock::now());
        o.seal = tcp::seal(&self.cfg, &self.job.cards, self.job.id.rank, peer);
        self.fabrics.tcp.outgoing.push(o);
    }

    /// Hands a new lane to the engine, which names it, and watches it; its fabric
    /// learns its name. Returns whether the lane was taken.
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
        let transport = link.transport();
        let info = PathInfo {
            lane,
            transport,
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
        // Threads that sleep while others drive the rank: from the first socket lane on,
        // as a lane watched for one sleep only could be taken out again by that sleep's
        // end after another thread had watched it for good.
        let watch_from = if self.cfg.several_threads { 1 } else { 2 };
        if self.lanes.sockets().len() == watch_from && !self.passes.links_watched {
            match self.watch_links() {
                Ok(()) => self.passes.links_watched = true,
                Err(e) => {
                    tracing::warn!("cannot watch links with epoll ({e}); every progress pass reads all")
                }
            }
        }
        if let Some(l) = self.lanes.get(lane) {
            self.fabrics.get(transport).lane_taken(peer, lane, &l.link);
        }
        true
    }

    /// Accepts connections and drives handshakes: each fabric's pass, what it reported
    /// taken before the next (shared memory, then raw Ethernet, then TCP). Returns
    /// whether anything happened.
    pub(super) fn wireup(&mut self) -> bool {
        self.drive_punch_dials();
        // Handshakes are read when their socket has something or their time is up.
        let ready = self.waiter.take_ready();
        let mut any = false;
        for t in [Transport::Shm, Transport::Eth, Transport::Tcp] {
            let mut events = Vec::new();
            let (fabrics, waiter, around) = self.fabrics_around(ready.clone());
            any |= fabrics.get(t).progress(&around, waiter, &mut events);
            any |= self.take_fabric_events(events);
        }
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

    /// A peer we yielded to whose connection did not arrive within an attempt's time
    /// (its handshake failed, or it gave up): try again ourselves, within the deadline.
    fn retry_yielded(&mut self) {
        let mut setups = std::mem::take(&mut self.dialing.setups);
        let due = setups.retries_due(clock::now(), clock::nanos(self.cfg.attempt_timeout), |p| {
            !self.lanes.connected(p) && !self.connecting(p) && !self.fabrics.tcp.answering_first(p)
        });
        self.dialing.setups = setups;
        for (peer, left) in due {
            self.dial(peer, clock::duration(left));
        }
    }
}

/// [`Around`] of the event loop's parts (`tcp`: whose first-lane HELLOs are out).
fn around<'a>(
    job: &'a Job,
    cfg: &'a Config,
    lanes: &'a Lanes,
    dialing: &'a Dialing,
    tcp: &Tcp,
    life: &Lifecycle,
    ready: HashSet<u64>,
) -> Around<'a> {
    Around {
        id: &job.id,
        cards: &job.cards,
        cfg,
        lanes,
        refusals: &dialing.refusals,
        ready,
        now: clock::now(),
        handshaking: handshaking(&tcp.outgoing),
        finalizing: life.finalizing,
    }
}
