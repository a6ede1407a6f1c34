//! The transports' wire-up, one folder each: how a lane to a peer is set up over TCP
//! (with relays, hole punching and WAN streams), shared memory and raw Ethernet, and why
//! a transport could not carry a peer's lanes ([`Refusal`]). A fabric never names the
//! event loop: it is a [`Fabric`], asked to dial a peer and to make progress with what
//! it sees of the rank ([`Around`]), and reports lanes that came up and peers it cannot
//! reach as [`FabricEvent`]s. [`Fabrics::get`] is the one place that maps a transport to
//! its fabric.

pub mod eth;
pub mod shm;
pub mod tcp;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use net::{CardTable, PathKind};
use proto::handshake::{Contention, Identity};
use proto::{LaneId, Nanos, PayloadToken, Rank};
use transport::{AnyLink, Transport};

use crate::boot::config::Config;
use crate::lanes::{LaneSetup, Lanes};
use crate::waiter::Waiter;

/// A transport's wire-up, as the event loop drives it.
pub trait Fabric {
    /// Why this fabric cannot carry lanes to `peer`, as far as is known before trying
    /// (beyond what [`refusal_before_dial`] says for every fabric).
    fn refusal_before_dial(&self, peer: Rank, around: &Around<'_>) -> Option<Refusal>;

    /// Starts setting up the first lane to `peer`, to be up within `total`; a lane that
    /// comes up at once goes to `events`.
    fn dial(
        &mut self,
        peer: Rank,
        total: Duration,
        around: &Around<'_>,
        events: &mut Vec<FabricEvent>,
    ) -> Result<(), Refusal>;

    /// One pass over the wire-up, its handshake sockets watched in `waiter`; what came
    /// of it goes to `events`. Returns whether anything happened.
    fn progress(&mut self, around: &Around<'_>, waiter: &mut Waiter, events: &mut Vec<FabricEvent>) -> bool;

    /// Whether this rank is setting up a first lane to `peer` here.
    fn dialling_first(&self, peer: Rank) -> bool;

    /// The first lane to `peer` is up (over this fabric or another): what this fabric
    /// was setting up for it is abandoned.
    fn first_lane_up(&mut self, peer: Rank, now: Nanos);

    /// A lane this fabric reported was taken by the engine as `lane`.
    fn lane_taken(&mut self, _peer: Rank, _lane: LaneId, _link: &AnyLink<PayloadToken>) {}
}

/// What a fabric sees of the rank around it while it dials or makes progress.
pub struct Around<'a> {
    pub id: &'a Identity,
    pub cards: &'a CardTable,
    pub cfg: &'a Config,
    /// The lanes up so far.
    pub lanes: &'a Lanes,
    /// Why transports were passed over for each peer so far.
    pub refusals: &'a Refusals,
    /// The handshake sockets (and listeners) that have had something since the last pass.
    pub ready: HashSet<u64>,
    pub now: Nanos,
    /// The first-lane HELLOs of this rank that are out over TCP, by peer and path kind:
    /// only these can collide with a peer's own HELLO.
    pub handshaking: Vec<(Rank, PathKind)>,
    /// The rank is finalizing: no further lanes are dialled again.
    pub finalizing: bool,
}

impl Around<'_> {
    /// What this rank already has going with each other rank, for judging a peer's HELLO.
    pub fn contention(&self) -> impl Fn(Rank) -> Contention + '_ {
        move |r: Rank| {
            if self.lanes.connected(r) {
                Contention::Connected
            } else if let Some(&(_, kind)) = self.handshaking.iter().find(|(p, _)| *p == r) {
                Contention::Connecting(kind)
            } else {
                Contention::None
            }
        }
    }
}

/// The rank's fabrics, one per transport.
pub struct Fabrics {
    pub tcp: tcp::Tcp,
    pub shm: shm::Shm,
    pub eth: eth::wireup::EthWireup,
}

impl Fabrics {
    /// The fabric of `transport`: the one dispatch point.
    pub fn get(&mut self, transport: Transport) -> &mut dyn Fabric {
        match transport {
            Transport::Tcp => &mut self.tcp,
            Transport::Shm => &mut self.shm,
            Transport::Eth => &mut self.eth,
        }
    }

    /// Every fabric, in the order of `order` (those it names).
    pub fn in_order(&mut self, order: &[Transport]) -> Vec<(Transport, &mut dyn Fabric)> {
        let Fabrics { tcp, shm, eth } = self;
        let mut all: Vec<(Transport, &mut dyn Fabric)> = vec![
            (Transport::Tcp, tcp),
            (Transport::Shm, shm),
            (Transport::Eth, eth),
        ];
        all.retain(|(t, _)| order.contains(t));
        all.sort_by_key(|(t, _)| order.iter().position(|o| o == t));
        all
    }

    /// The fabric of `transport`, to look at.
    pub fn of(&self, transport: Transport) -> &dyn Fabric {
        match transport {
            Transport::Tcp => &self.tcp,
            Transport::Shm => &self.shm,
            Transport::Eth => &self.eth,
        }
    }
}

/// Why `fabric` (of `transport`) cannot carry lanes to `peer`, as far as is known
/// before trying: not allowed, a card that cannot be read, the ranks' placement
/// (shared memory only within a node, raw Ethernet only between nodes), then what the
/// fabric itself knows.
pub fn refusal_before_dial(
    transport: Transport,
    fabric: &dyn Fabric,
    peer: Rank,
    around: &Around<'_>,
) -> Option<Refusal> {
    let allowed = &around.cfg.transports;
    if !allowed.contains(&transport) {
        return Some(Refusal::not_allowed(transport, allowed));
    }
    let same_node = around.cards.same_node(around.id.rank, peer);
    if transport != Transport::Shm {
        if let Some(fault) = around.cards.fault(peer) {
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
        Transport::Eth if same_node => {
            Some(Refusal::new(transport, format!("rank {peer} runs on this node")).expected())
        }
        _ => fabric.refusal_before_dial(peer, around),
    }
}

/// Starts the first lane to `peer` over the first of `fabrics` (in order of preference)
/// that takes it; each one passed over says why (for the error if the peer cannot be
/// reached, and for `pontoon doctor`). Returns the transport that took it and the
/// refusals.
pub fn dial_first(
    fabrics: &mut [(Transport, &mut dyn Fabric)],
    peer: Rank,
    total: Duration,
    around: &Around<'_>,
    events: &mut Vec<FabricEvent>,
) -> (Option<Transport>, Vec<Refusal>) {
    let mut refused = Vec::new();
    for (transport, fabric) in fabrics.iter_mut() {
        let (transport, fabric) = (*transport, &mut **fabric);
        let dialled = match refusal_before_dial(transport, fabric, peer, around) {
            Some(refusal) => Err(refusal),
            None => fabric.dial(peer, total, around, events),
        };
        match dialled {
            Ok(()) => return (Some(transport), refused),
            Err(refusal) => refused.push(refusal),
        }
    }
    (None, refused)
}

/// A fresh random nonce for one handshake.
pub(crate) fn nonce() -> [u8; 16] {
    let mut n = [0u8; 16];
    getrandom::fill(&mut n).expect("the OS provides randomness");
    n
}

/// What a fabric reports from a pass over its wire-up; the event loop takes each at one
/// place (`Runtime::take_fabric_events`).
pub enum FabricEvent {
    /// A lane to `peer` came up, authenticated: its link and how it was set up.
    LaneUp {
        peer: Rank,
        link: Box<AnyLink<PayloadToken>>,
        setup: LaneSetup,
    },
    /// The fabric could not make a lane to `peer`, meant for `purpose`.
    Refused {
        peer: Rank,
        refusal: Refusal,
        purpose: Purpose,
    },
    /// The peer's simultaneous first lane wins: this rank's gave way.
    Yielded { peer: Rank },
    /// The fabric will not carry the first lane to `peer` after all (it waited for
    /// something that did not come): the next transport in order is to take it.
    PassedOn { peer: Rank, refusal: Refusal },
    /// The process of `peer` ended (`finalized`: after MPI_Finalize): its lanes over
    /// this fabric are to close, once what it sent is read.
    Ended {
        peer: Rank,
        transport: Transport,
        finalized: bool,
    },
}

/// What a lane that could not be made was meant to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The peer's first lane: without one, the peer is unreachable once the deadline passes.
    FirstLane,
    /// One more lane to a peer that has one.
    FurtherLane,
    /// A hole punch's lane, to leave a relay: the punch carries on without it.
    Punch,
}

/// Why a transport does not carry lanes to a peer: which, why, and what would help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub transport: Transport,
    /// What stands in the way.
    pub why: String,
    /// A flag, a daemon or a capability that would help, where one would.
    pub help: Option<String>,
    /// It follows from where the two ranks run (shared memory between nodes, raw
    /// Ethernet within one): nothing to fix.
    pub expected: bool,
}

impl Refusal {
    pub fn new(transport: Transport, why: impl Into<String>) -> Refusal {
        Refusal {
            transport,
            why: why.into(),
            help: None,
            expected: false,
        }
    }

    pub fn helped_by(mut self, help: impl Into<String>) -> Refusal {
        self.help = Some(help.into());
        self
    }

    /// A refusal that the placement of the ranks explains.
    pub fn expected(mut self) -> Refusal {
        self.expected = true;
        self
    }

    pub fn not_allowed(transport: Transport, allowed: &[Transport]) -> Refusal {
        Refusal::new(
            transport,
            format!("not in PONTOON_TRANSPORTS={}", Transport::list(allowed)),
        )
        .helped_by(format!("add `{}` to PONTOON_TRANSPORTS", transport.name()))
    }
}

/// How a transport is named in messages.
pub fn label(t: Transport) -> &'static str {
    match t {
        Transport::Tcp => "TCP",
        Transport::Shm => "shared memory",
        Transport::Eth => "raw Ethernet",
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", label(self.transport), self.why)?;
        match &self.help {
            Some(help) => write!(f, " ({help})"),
            None => Ok(()),
        }
    }
}

/// The refusals recorded while dialling, at most one per peer and transport (the
/// latest).
#[derive(Default)]
pub struct Refusals(HashMap<Rank, Vec<Refusal>>);

impl Refusals {
    pub fn record(&mut self, peer: Rank, refusal: Refusal) {
        let of_peer = self.0.entry(peer).or_default();
        of_peer.retain(|r| r.transport != refusal.transport);
        of_peer.push(refusal);
    }

    pub fn of(&self, peer: Rank, transport: Transport) -> Option<&Refusal> {
        self.0.get(&peer)?.iter().find(|r| r.transport == transport)
    }
}

#[cfg(test)]
mod toy_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_says_which_transport_why_and_what_would_help() {
        let r = Refusal::not_allowed(Transport::Eth, &[Transport::Tcp, Transport::Shm]);
        assert_eq!(
            r.to_string(),
            "raw Ethernet: not in PONTOON_TRANSPORTS=tcp,shm (add `eth` to PONTOON_TRANSPORTS)"
        );
        let mut all = Refusals::default();
        all.record(3, Refusal::new(Transport::Tcp, "first"));
        all.record(3, Refusal::new(Transport::Tcp, "second"));
        all.record(3, r.clone());
        assert_eq!(all.of(3, Transport::Tcp).map(|r| r.why.as_str()), Some("second"));
        assert_eq!(all.of(3, Transport::Eth), Some(&r));
        assert_eq!(all.of(4, Transport::Eth), None);
    }
}
