//! TCP: listening sockets, racing connects with handshakes, relayed paths, hole punching
//! and parallel WAN streams.

pub mod progress;
pub(crate) mod punch;
pub(crate) mod wan;
pub mod wireup;

use std::collections::HashMap;
use std::time::Duration;

use proto::dial::RaceTiming;
use proto::{Nanos, Rank};
use transport::relay::{Reflection, Registration};

use super::{Around, Fabric, FabricEvent, Refusal};
use crate::boot::config::{Config, Encrypt};
use crate::clock;
use crate::waiter::Waiter;
use net::CardTable;
use punch::Punching;
use wireup::{Attempt, Incoming, Listeners, Outgoing, Seal};

/// This rank's TCP wire-up: its listeners, the connections it is setting up and
/// accepting, its relay registrations and hole punches.
pub(crate) struct Tcp {
    /// None for a singleton.
    pub listeners: Option<Listeners>,
    pub outgoing: Vec<Outgoing>,
    pub incoming: Vec<Incoming>,
    /// Relays that forward streams to this rank, registered at start-up; held open
    /// (a registration lives as long as its connection).
    pub _registrations: Vec<Registration>,
    /// Hole punches towards peers reached through relays.
    pub punching: Punching,
    /// What each first connection this rank dialled tried, and how it ended (doctor).
    pub attempt_log: HashMap<Rank, Vec<Attempt>>,
}

impl Tcp {
    pub fn new(
        rank: Rank,
        listeners: Option<Listeners>,
        registrations: Vec<Registration>,
        reflections: Vec<Reflection>,
    ) -> Tcp {
        Tcp {
            listeners,
            outgoing: Vec::new(),
            incoming: Vec::new(),
            _registrations: registrations,
            punching: Punching::new(rank, reflections),
            attempt_log: HashMap::new(),
        }
    }
}

impl Fabric for Tcp {
    /// TCP reaches every peer some way (direct, relayed, punched): nothing is known
    /// against it before trying.
    fn refusal_before_dial(&self, _peer: Rank, _around: &Around<'_>) -> Option<Refusal> {
        None
    }

    /// Races connects to `peer`'s addresses (and relays).
    fn dial(
        &mut self,
        peer: Rank,
        total: Duration,
        around: &Around<'_>,
        _events: &mut Vec<FabricEvent>,
    ) -> Result<(), Refusal> {
        let cfg = around.cfg;
        let mut o = Outgoing::new(
            peer,
            candidates(cfg, around.cards, around.id.rank, peer),
            cfg.sockbuf,
            race_timing(cfg, total),
            clock::now(),
        );
        o.seal = seal(cfg, around.cards, around.id.rank, peer);
        self.outgoing.push(o);
        Ok(())
    }

    fn progress(&mut self, around: &Around<'_>, waiter: &mut Waiter, events: &mut Vec<FabricEvent>) -> bool {
        self.drive(around, waiter, events)
    }

    fn dialling_first(&self, peer: Rank) -> bool {
        self.outgoing.iter().any(|o| o.peer == peer && o.first_lane())
    }

    /// The first connection this rank dialled is abandoned (what it tried is kept for
    /// `pontoon doctor`).
    fn first_lane_up(&mut self, peer: Rank, now: Nanos) {
        if let Some(pos) = self
            .outgoing
            .iter()
            .position(|o| o.peer == peer && o.first_lane())
        {
            let mut o = self.outgoing.swap_remove(pos);
            o.abandon("abandoned: the peer's own connection came first", now);
            self.attempt_log.entry(peer).or_default().extend(o.attempts);
        }
    }
}

/// Whether the lanes this rank opens to `peer` are sealed (`PONTOON_ENCRYPT`).
pub fn seal(cfg: &Config, cards: &CardTable, me: Rank, peer: Rank) -> Seal {
    match cfg.encrypt {
        Encrypt::None => Seal::Never,
        Encrypt::All => Seal::Always,
        Encrypt::Wan => {
            let site = |r: Rank| cards.head(r).and_then(|c| c.site.as_deref());
            let far = matches!((site(me), site(peer)), (Some(a), Some(b)) if a != b);
            Seal::OverWan { far }
        }
    }
}

/// How the candidates of one set-up taking at most `total` are raced.
pub fn race_timing(cfg: &Config, total: Duration) -> RaceTiming {
    RaceTiming {
        attempt: clock::nanos(cfg.attempt_timeout),
        stagger: clock::nanos(cfg.stagger),
        total: clock::nanos(total),
    }
}

/// The first lane's candidates, of the path kinds allowed (`PONTOON_PATHS`).
pub fn candidates(cfg: &Config, cards: &CardTable, me: Rank, peer: Rank) -> Vec<net::Candidate> {
    let mut all = match (cards.get(me), cards.get(peer)) {
        (Some(mine), Some(theirs)) => net::candidates(mine, theirs),
        _ => Vec::new(),
    };
    all.retain(|c| cfg.paths.contains(&c.kind));
    all
}
