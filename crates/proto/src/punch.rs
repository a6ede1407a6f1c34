//! Hole punching as a state machine: two ranks joined through a relay agree, over that
//! relayed lane, on a TCP simultaneous open straight through both NATs, and the direct
//! lane then takes the traffic (the relayed one stays open).
//!
//! The scheme is libp2p's DCUtR. The initiator (the side that set the relayed lane up)
//! offers its address as the peer will see it and times the peer's answer, which carries
//! the peer's address: a round trip through the relay. It then sends SYNC and dials half
//! a round trip later, as the SYNC reaches the peer, who dials at once. Both SYNs cross
//! the NATs at about the same moment, each opening its own NAT for the other's.
//!
//! Every round starts from fresh local ports ([`PunchEvent::Bind`]): a SYN that reaches a
//! NAT before that NAT's own side has dialled out is answered with a reset, and the NAT
//! keeps a closed entry for that pair of addresses for a while (Linux: 10 s), which
//! makes it translate the next SYN from the same port to another port. At most
//! [`MAX_ROUNDS`] rounds; then the relayed lane simply carries on.

use core::net::SocketAddr;
use std::collections::{HashMap, VecDeque};

use crate::wire::data::{PunchMsg, PunchStep};
use crate::{Nanos, Rank};

/// Rounds of punching per peer before the relayed lane is left to carry on alone.
pub const MAX_ROUNDS: u8 = 4;

/// What the runtime is to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PunchEvent {
    /// Send `msg` to `peer` (a PUNCH frame on its lane of control frames).
    Send { peer: Rank, msg: PunchMsg },
    /// Bind a fresh local port for `round` and tell [`Puncher::address`] its address as
    /// the peer will see it, or why there is none; `like`: the peer's address, whose
    /// family it must have (none: the initiator's choice).
    Bind {
        peer: Rank,
        round: u8,
        like: Option<SocketAddr>,
    },
    /// Dial `to` from the port bound for `round`, at `at`. Both ends dial; `lead` says
    /// which of them speaks first on the connection (the tie-break: one connection, one
    /// handshake).
    Dial {
        peer: Rank,
        round: u8,
        to: SocketAddr,
        at: Nanos,
        lead: bool,
    },
    /// Punching `peer` ended without a direct lane, for this reason.
    GaveUp { peer: Rank, why: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Waiting for [`Puncher::address`] (the follower knows the peer's address already).
    Binding { theirs: Option<SocketAddr> },
    /// The initiator's OFFER is out since `at`.
    Offered { at: Nanos },
    /// The follower answered; the SYNC says when to dial `theirs`.
    Answered { theirs: SocketAddr },
    /// A dial was handed out; its result is awaited.
    Dialing,
    /// The follower waits for the initiator's next round.
    Waiting,
}

#[derive(Debug)]
struct PeerPunch {
    lead: bool,
    round: u8,
    stage: Stage,
}

/// The hole punches of one rank, one per peer at most.
#[derive(Debug)]
pub struct Puncher {
    me: Rank,
    peers: HashMap<Rank, PeerPunch>,
    events: VecDeque<PunchEvent>,
}

impl Puncher {
    pub fn new(me: Rank) -> Puncher {
        Puncher {
            me,
            peers: HashMap::new(),
            events: VecDeque::new(),
        }
    }

    /// Starts punching towards `peer` (reached through a relay), unless already under way.
    pub fn start(&mut self, peer: Rank) {
        if self.peers.contains_key(&peer) {
            return;
        }
        self.peers.insert(
            peer,
            PeerPunch {
                lead: true,
                round: 1,
                stage: Stage::Binding { theirs: None },
            },
        );
        self.events.push_back(PunchEvent::Bind {
            peer,
            round: 1,
            like: None,
        });
    }

    /// Whether a punch with `peer` is under way.
    pub fn active(&self, peer: Rank) -> bool {
        self.peers.contains_key(&peer)
    }

    /// Whether any punch waits for something other than the initiator's next round.
    pub fn busy(&self) -> bool {
        self.peers.values().any(|p| p.stage != Stage::Waiting)
    }

    /// The port for `round` is bound: `mine` is its address as the peer will see it.
    pub fn address(&mut self, peer: Rank, round: u8, mine: Result<SocketAddr, String>, now: Nanos) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        let Stage::Binding { theirs } = p.stage else {
            return;
        };
        if p.round != round {
            return;
        }
        let send = |addr| PunchMsg {
            step: if p.lead {
                PunchStep::Offer
            } else {
                PunchStep::Answer
            },
            round,
            addr,
        };
        match mine {
            Ok(addr) => {
                self.events.push_back(PunchEvent::Send {
                    peer,
                    msg: send(Some(addr)),
                });
                p.stage = match theirs {
                    Some(theirs) => Stage::Answered { theirs },
                    None => Stage::Offered { at: now },
                };
            }
            Err(why) => {
                if !p.lead {
                    self.events.push_back(PunchEvent::Send {
                        peer,
                        msg: send(None),
                    });
                }
                self.give_up(peer, why);
            }
        }
    }

    /// A PUNCH frame from `peer` arrived at `now`.
    pub fn handle(&mut self, peer: Rank, msg: PunchMsg, now: Nanos) {
        match msg.step {
            PunchStep::Offer => self.offered(peer, msg, now),
            PunchStep::Answer => {
                let Some(p) = self.peers.get_mut(&peer) else {
                    return;
                };
                let Stage::Offered { at } = p.stage else { return };
                if !p.lead || p.round != msg.round {
                    return;
                }
                let Some(theirs) = msg.addr else {
                    let why = format!(
                        "rank {peer} cannot punch (it knows no address of its own outside its NAT, \
                         or its NAT does not keep ports)"
                    );
                    return self.give_up(peer, why);
                };
                let rtt = now.saturating_sub(at);
                p.stage = Stage::Dialing;
                let round = p.round;
                self.events.push_back(PunchEvent::Send {
                    peer,
                    msg: PunchMsg {
                        step: PunchStep::Sync,
                        round,
                        addr: None,
                    },
                });
                self.events.push_back(PunchEvent::Dial {
                    peer,
                    round,
                    to: theirs,
                    at: now + rtt / 2,
                    lead: true,
                });
            }
            PunchStep::Sync => {
                let Some(p) = self.peers.get_mut(&peer) else {
                    return;
                };
                let Stage::Answered { theirs } = p.stage else {
                    return;
                };
                if p.lead || p.round != msg.round {
                    return;
                }
                p.stage = Stage::Dialing;
                self.events.push_back(PunchEvent::Dial {
                    peer,
                    round: msg.round,
                    to: theirs,
                    at: now,
                    lead: false,
                });
            }
        }
    }

    /// An OFFER: a new round from the initiator. Rounds only go up, and not beyond
    /// [`MAX_ROUNDS`], so a peer cannot make this rank bind ports without end.
    fn offered(&mut self, peer: Rank, msg: PunchMsg, _now: Nanos) {
        let Some(theirs) = msg.addr else { return };
        if msg.round == 0 || msg.round > MAX_ROUNDS {
            return;
        }
        if let Some(p) = self.peers.get(&peer) {
            // Both sides started: the lower rank leads.
            if p.lead && self.me < peer {
                return;
            }
            if !p.lead && msg.round <= p.round {
                return;
            }
        }
        self.peers.insert(
            peer,
            PeerPunch {
                lead: false,
                round: msg.round,
                stage: Stage::Binding { theirs: Some(theirs) },
            },
        );
        self.events.push_back(PunchEvent::Bind {
            peer,
            round: msg.round,
            like: Some(theirs),
        });
    }

    /// The dial of `round` failed (`why`). The initiator starts the next round, if any
    /// is left; the follower waits for it.
    pub fn failed(&mut self, peer: Rank, round: u8, why: &str) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        if p.round != round || p.stage != Stage::Dialing {
            return;
        }
        if !p.lead {
            p.stage = Stage::Waiting;
            return;
        }
        if round >= MAX_ROUNDS {
            return self.give_up(peer, format!("{round} rounds failed, the last: {why}"));
        }
        p.round = round + 1;
        p.stage = Stage::Binding { theirs: None };
        self.events.push_back(PunchEvent::Bind {
            peer,
            round: round + 1,
            like: None,
        });
    }

    /// A punched lane with `peer` is up: done with it.
    pub fn succeeded(&mut self, peer: Rank) {
        self.peers.remove(&peer);
    }

    fn give_up(&mut self, peer: Rank, why: String) {
        self.peers.remove(&peer);
        self.events.push_back(PunchEvent::GaveUp { peer, why });
    }

    pub fn poll(&mut self) -> Option<PunchEvent> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod tests;
