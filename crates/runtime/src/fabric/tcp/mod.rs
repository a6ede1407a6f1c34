//! TCP: listening sockets, racing connects with handshakes, relayed paths, hole punching
//! and parallel WAN streams.

pub(crate) mod punch;
pub(crate) mod wan;
pub mod wireup;

use proto::Rank;
use transport::relay::{Reflection, Registration};

use punch::Punching;
use wireup::{Incoming, Listeners, Outgoing};

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
    /// The last key given to a handshake's socket in the waiter.
    pub handshake_keys: u64,
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
            handshake_keys: 0,
        }
    }
}
