//! The transports' wire-up, one folder each: how a lane to a peer is set up over TCP
//! (with relays, hole punching and WAN streams), shared memory and raw Ethernet, and why
//! a transport could not carry a peer's lanes ([`Refusal`]). A fabric never names the
//! event loop: it is asked to dial and to make progress, and hands back lanes that came
//! up and refusals.

pub mod eth;
pub mod shm;
pub mod tcp;

/// A fresh random nonce for one handshake.
pub(crate) fn nonce() -> [u8; 16] {
    let mut n = [0u8; 16];
    getrandom::fill(&mut n).expect("the OS provides randomness");
    n
}

use std::collections::HashMap;

use proto::{PayloadToken, Rank};
use transport::{AnyLink, Transport};

use crate::lanes::LaneSetup;

/// What a fabric reports from a pass over its wire-up; the event loop takes each at one
/// place (`Runtime::take_fabric_events`).
pub enum FabricEvent {
    /// A lane to `peer` came up, authenticated: its link and how it was set up.
    LaneUp {
        peer: Rank,
        link: Box<AnyLink<PayloadToken>>,
        setup: LaneSetup,
    },
    /// The fabric could not make a lane to `peer`; `first_lane`: it was to be the
    /// peer's first.
    Refused {
        peer: Rank,
        refusal: Refusal,
        first_lane: bool,
    },
    /// The peer's simultaneous first lane wins: this rank's gave way.
    Yielded { peer: Rank },
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
