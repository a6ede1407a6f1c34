//! Hole punching as the event loop carries it out (the protocol is `proto::punch`): a
//! fresh port bound per round, its address outside the NAT predicted from what relays
//! saw at registration, the simultaneous connect at the agreed moment, and the
//! connection handed to the handshake: the side that leads speaks first, the other
//! answers, as if it had accepted the connection.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Instant;

use proto::punch::Puncher;
use proto::Rank;
use socket2::{Domain, Protocol, Socket, Type};
use transport::relay::Reflection;

use crate::fabric::tcp::wireup::ready;

/// A port bound for one round of punching, and its dial once the round says when.
pub(crate) struct PunchDial {
    pub(crate) peer: Rank,
    pub(crate) round: u8,
    pub(crate) sock: Socket,
    /// Set by the round's SYNC: where, when, and whether this side speaks first.
    pub(crate) plan: Option<(SocketAddr, Instant, bool)>,
    /// When the connect began.
    pub(crate) connecting: Option<Instant>,
}

/// The hole punches of this rank.
pub(crate) struct Punching {
    pub(crate) puncher: Puncher,
    /// Where relays outside this rank's NAT saw it come from.
    pub(crate) reflections: Vec<Reflection>,
    pub(crate) dials: Vec<PunchDial>,
    /// The peers whose punched connection is in its handshake: the round, and since when.
    pub(crate) handshaking: HashMap<Rank, (u8, Instant)>,
    /// Why punching a peer ended without a lane.
    pub(crate) notes: HashMap<Rank, String>,
}

impl Punching {
    pub fn new(me: Rank, reflections: Vec<Reflection>) -> Punching {
        Punching {
            puncher: Puncher::new(me),
            reflections,
            dials: Vec::new(),
            handshaking: HashMap::new(),
            notes: HashMap::new(),
        }
    }

    /// Whether a port waits for its moment to dial, or is dialling.
    pub fn dialling(&self) -> bool {
        self.dials.iter().any(|d| d.plan.is_some())
    }

    /// Whether a dial is due before `t`: the rank must not sleep past it.
    pub fn dial_due_before(&self, t: Instant) -> bool {
        self.dials
            .iter()
            .any(|d| d.connecting.is_none() && d.plan.is_some_and(|(_, at, _)| at < t))
    }

    /// Whether anything of a punch is under way (but a follower waiting for a round).
    pub fn busy(&self) -> bool {
        !self.dials.is_empty() || !self.handshaking.is_empty() || self.puncher.busy()
    }

    /// This rank's address outside its NAT, as relays saw it: a new local port keeps
    /// its number outside only behind a NAT that keeps ports, which this checks.
    pub(crate) fn outside_ip(&self, v4: bool) -> Result<IpAddr, String> {
        let family: Vec<&Reflection> = self
            .reflections
            .iter()
            .filter(|r| r.seen.is_ipv4() == v4)
            .collect();
        let Some(first) = family.first() else {
            return Err(format!(
                "no relay outside this rank's network saw it over IPv{}: its address outside is unknown",
                if v4 { 4 } else { 6 }
            ));
        };
        if let Some(r) = family.iter().find(|r| r.seen.port() != r.local.port()) {
            return Err(format!(
                "this rank's NAT does not keep ports (relay {} saw local port {} as {}): the port a new \
                 connection gets cannot be predicted",
                r.relay,
                r.local.port(),
                r.seen
            ));
        }
        Ok(first.seen.ip())
    }

    /// Binds a fresh port for `round` in the family of `like` (the initiator: IPv4 if
    /// it can, NATs being an IPv4 matter); returns its address outside.
    pub(crate) fn bind(
        &mut self,
        peer: Rank,
        round: u8,
        like: Option<SocketAddr>,
    ) -> Result<SocketAddr, String> {
        let v4 = like.map_or_else(
            || self.reflections.iter().any(|r| r.seen.is_ipv4()),
            |a| a.is_ipv4(),
        );
        let ip = self.outside_ip(v4)?;
        let sock = bound_port(v4).map_err(|e| format!("cannot bind a port to punch from: {e}"))?;
        let port = sock
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map_or(0, |a| a.port());
        // A peer's earlier rounds are over.
        self.dials.retain(|d| d.peer != peer);
        self.dials.push(PunchDial {
            peer,
            round,
            sock,
            plan: None,
            connecting: None,
        });
        Ok(SocketAddr::new(ip, port))
    }

    /// Why punching `peer` ended without a lane, if it did.
    pub fn note(&self, peer: Rank) -> Option<&str> {
        self.notes.get(&peer).map(String::as_str)
    }
}

/// A TCP socket on a fresh port of every local address, ready to connect from it.
/// `SO_REUSEADDR` and `SO_REUSEPORT` let a connection from the port come back soon
/// after an earlier one on it.
pub(crate) fn bound_port(v4: bool) -> io::Result<Socket> {
    let (domain, any) = if v4 {
        (Domain::IPV4, IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    } else {
        (Domain::IPV6, IpAddr::V6(Ipv6Addr::UNSPECIFIED))
    };
    let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.set_tcp_nodelay(true)?;
    s.bind(&SocketAddr::new(any, 0).into())?;
    Ok(s)
}

/// Where a non-blocking connect stands.
pub(crate) enum Connect {
    Pending,
    Done,
    Failed(String),
}

/// Why a punching connect failed, in words that say what it means.
pub(crate) fn failure(e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::ConnectionRefused {
        return "refused: the far NAT answered our SYN itself, as it came before the far side's own SYN \
                had opened it (too little delay between the sites to time the crossing, or a NAT that \
                forwards nothing)"
            .into();
    }
    e.to_string()
}

pub(crate) fn poll_connect(sock: &Socket) -> Connect {
    if !ready(sock, rustix::event::PollFlags::OUT) {
        return Connect::Pending;
    }
    match sock.take_error() {
        Ok(None) => Connect::Done,
        Ok(Some(e)) | Err(e) => Connect::Failed(failure(&e)),
    }
}
