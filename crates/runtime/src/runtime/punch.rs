//! Hole punching as the event loop carries it out (the protocol is `proto::punch`): a
//! fresh port bound per round, its address outside the NAT predicted from what relays
//! saw at registration, the simultaneous connect at the agreed moment, and the
//! connection handed to the handshake: the side that leads speaks first, the other
//! answers, as if it had accepted the connection.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use proto::punch::{PunchEvent, Puncher};
use proto::{Nanos, PathKind, Rank};
use socket2::{Domain, Protocol, Socket, Type};
use transport::relay::Reflection;

use super::Runtime;
use crate::wireup::{ready, Outgoing};

/// A port bound for one round of punching, and its dial once the round says when.
struct PunchDial {
    peer: Rank,
    round: u8,
    sock: Socket,
    /// Set by the round's SYNC: where, when, and whether this side speaks first.
    plan: Option<(SocketAddr, Instant, bool)>,
    /// When the connect began.
    connecting: Option<Instant>,
}

/// The hole punches of this rank.
pub(crate) struct Punching {
    puncher: Puncher,
    /// Where relays outside this rank's NAT saw it come from.
    reflections: Vec<Reflection>,
    dials: Vec<PunchDial>,
    /// The peers whose punched connection is in its handshake: the round, and since when.
    handshaking: HashMap<Rank, (u8, Instant)>,
    /// Why punching a peer ended without a lane.
    notes: HashMap<Rank, String>,
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
    fn outside_ip(&self, v4: bool) -> Result<IpAddr, String> {
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
    fn bind(&mut self, peer: Rank, round: u8, like: Option<SocketAddr>) -> Result<SocketAddr, String> {
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
fn bound_port(v4: bool) -> io::Result<Socket> {
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
enum Connect {
    Pending,
    Done,
    Failed(String),
}

/// Why a punching connect failed, in words that say what it means.
fn failure(e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::ConnectionRefused {
        return "refused: the far NAT answered our SYN itself, as it came before the far side's own SYN \
                had opened it (too little delay between the sites to time the crossing, or a NAT that \
                forwards nothing)"
            .into();
    }
    e.to_string()
}

fn poll_connect(sock: &Socket) -> Connect {
    if !ready(sock, rustix::event::PollFlags::OUT) {
        return Connect::Pending;
    }
    match sock.take_error() {
        Ok(None) => Connect::Done,
        Ok(Some(e)) | Err(e) => Connect::Failed(failure(&e)),
    }
}

impl Runtime {
    fn punch_clock(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    /// A relayed lane that this rank set up with `peer` is up: try for a direct one.
    pub(super) fn start_punch(&mut self, peer: Rank) {
        if self.cfg.paths.contains(&PathKind::Punched) {
            self.punching.puncher.start(peer);
            self.drive_puncher();
        }
    }

    /// A PUNCH frame from `peer`.
    pub(super) fn punch_frame(&mut self, peer: Rank, msg: proto::wire::PunchMsg) {
        let now = self.punch_clock();
        self.punching.puncher.handle(peer, msg, now);
        self.drive_puncher();
    }

    /// Carries out what the puncher asks.
    fn drive_puncher(&mut self) {
        while let Some(ev) = self.punching.puncher.poll() {
            match ev {
                PunchEvent::Send { peer, msg } => self.ep.send_punch(peer, msg),
                PunchEvent::Bind { peer, round, like } => {
                    let mine = self.punching.bind(peer, round, like);
                    let now = self.punch_clock();
                    self.punching.puncher.address(peer, round, mine, now);
                }
                PunchEvent::Dial {
                    peer,
                    round,
                    to,
                    at,
                    lead,
                } => {
                    let when = self.start + Duration::from_nanos(at);
                    if let Some(d) = self
                        .punching
                        .dials
                        .iter_mut()
                        .find(|d| d.peer == peer && d.round == round)
                    {
                        d.plan = Some((to, when, lead));
                    }
                    // The follower dials now: any delay is a gap the SYNs must cross in.
                    self.drive_punch_dials();
                }
                PunchEvent::GaveUp { peer, why } => {
                    tracing::info!(
                        "rank {}: no punched lane with rank {peer}, the relay carries on: {why}",
                        self.id.rank
                    );
                    self.punching.dials.retain(|d| d.peer != peer);
                    self.punching.notes.insert(peer, why);
                }
            }
        }
    }

    /// Starts the dials that are due and hands connected ones to the handshake.
    pub(super) fn drive_punch_dials(&mut self) {
        let now = Instant::now();
        let limit = self.cfg.attempt_timeout;
        // An accepted side's handshake that failed does not say with whom: its round ends
        // here once a handshake would have finished.
        let stale: Vec<Rank> = self
            .punching
            .handshaking
            .iter()
            .filter(|(_, (_, since))| now.duration_since(*since) > 2 * limit)
            .map(|(p, _)| *p)
            .collect();
        for peer in stale {
            self.punch_handshake_done(peer, Err("the handshake did not finish".into()));
        }
        let mut i = 0;
        while i < self.punching.dials.len() {
            let d = &mut self.punching.dials[i];
            let Some((to, when, lead)) = d.plan else {
                i += 1;
                continue;
            };
            let outcome = match d.connecting {
                None if now < when => Connect::Pending,
                None => {
                    d.connecting = Some(now);
                    match d.sock.connect(&to.into()) {
                        Ok(()) => Connect::Done,
                        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {
                            Connect::Pending
                        }
                        Err(e) => Connect::Failed(failure(&e)),
                    }
                }
                // A NAT that drops an early SYN (rather than answer it) is passed by the
                // kernel's second SYN, a second later: by then the far side has opened it.
                Some(since) if now.duration_since(since) > 3 * limit => {
                    Connect::Failed(format!("no answer within {} ms", 3 * limit.as_millis()))
                }
                Some(_) => poll_connect(&d.sock),
            };
            let (peer, round) = (d.peer, d.round);
            match outcome {
                Connect::Pending => i += 1,
                Connect::Failed(why) => {
                    self.punching.dials.swap_remove(i);
                    tracing::debug!(
                        "rank {}: punching rank {peer}, round {round}: {to}: {why}",
                        self.id.rank
                    );
                    self.punching.puncher.failed(peer, round, &format!("{to}: {why}"));
                    self.drive_puncher();
                }
                Connect::Done => {
                    let d = self.punching.dials.swap_remove(i);
                    let sock: TcpStream = d.sock.into();
                    self.punching.handshaking.insert(peer, (round, now));
                    if lead {
                        let timing = self.race_timing(self.cfg.attempt_timeout);
                        let at = crate::clock::now();
                        let mut o = Outgoing::punched(peer, sock, to, timing, at);
                        o.seal = self.seal_for(peer);
                        self.outgoing.push(o);
                    } else {
                        self.take_incoming(sock);
                    }
                }
            }
        }
    }

    /// The handshake on a punched connection with `peer` ended.
    pub(super) fn punch_handshake_done(&mut self, peer: Rank, result: Result<(), String>) {
        let Some((round, _)) = self.punching.handshaking.remove(&peer) else {
            return;
        };
        match result {
            Ok(()) => {
                self.punching.notes.remove(&peer);
                self.punching.puncher.succeeded(peer);
            }
            Err(why) => self.punching.puncher.failed(peer, round, &why),
        }
        self.drive_puncher();
    }
}
