//! Connection set-up: listening sockets (one per address family), endpoint cards,
//! and the non-blocking connect + handshake state machines. Every attempt's outcome
//! is recorded so that a failure can list every address tried and why it failed.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crate::clock;
use crate::lanes::Via;
use net::{AddrClass, Candidate, ConnEntry, PathKind};
use proto::dial::{Deadline, Race, RaceStep, RaceTiming};
use proto::handshake::{accept_hello, Acceptor, Contention, HandshakeError, Identity, Initiator};
use proto::wire::handshake::{FRAME_LEN, MAGIC};
use proto::{Nanos, Rank};
use rustix::event::{PollFd, PollFlags};
use socket2::{Domain, Protocol, Socket, Type};
use transport::relay::{RelayDial, RelayStep};
use transport::sealed::LaneKeys;

/// One connection attempt and how it ended.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The peer's address, or the relay's on a relayed path.
    pub addr: SocketAddr,
    pub kind: PathKind,
    /// On a two-proxy path, the relay at the peer's site (`addr` is our own site's).
    pub next: Option<SocketAddr>,
    pub class: AddrClass,
    /// The address is on the peer's virtual bridge (docker0 …).
    pub bridge: bool,
    pub elapsed: Duration,
    pub result: Result<(), String>,
}

/// Listening sockets of this rank (one per address family) and its endpoint card.
pub struct Listeners {
    pub sockets: Vec<TcpListener>,
    /// Every usable local address with its family's port.
    pub card: Vec<ConnEntry>,
}

impl Listeners {
    /// Accepted sockets inherit the listeners' buffer sizes (`sockbuf`, 0 = autotuning).
    pub fn bind(
        local: &[(std::net::IpAddr, AddrClass, String)],
        sockbuf: usize,
    ) -> Result<Listeners, String> {
        let l = net::listen::listen_all(local, sockbuf)?;
        Ok(Listeners {
            sockets: l.sockets,
            card: l.entries,
        })
    }

    /// The IPv4 and IPv6 listening ports (0: no listener of that family).
    pub fn ports(&self) -> (u16, u16) {
        let port = |v4: bool| {
            self.card
                .iter()
                .find(|e| e.addr.is_ipv4() == v4)
                .map_or(0, |e| e.addr.port())
        };
        (port(true), port(false))
    }

    pub fn accept(&self) -> Vec<TcpStream> {
        let mut out = Vec::new();
        for l in &self.sockets {
            while let Ok((s, _)) = l.accept() {
                if s.set_nonblocking(true).is_ok() {
                    out.push(s);
                }
            }
        }
        out
    }
}

/// Whether `sock` is ready for `flags` right now (a poll with zero timeout).
pub(crate) fn ready(sock: &impl AsFd, flags: PollFlags) -> bool {
    let mut fds = [PollFd::new(sock, flags)];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
}

/// Reads into `buf` up to `FRAME_LEN` bytes; `Ok(true)` once complete.
fn read_frame(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Result<bool, String> {
    let mut tmp = [0u8; FRAME_LEN];
    let want = FRAME_LEN - buf.len();
    match sock.read(&mut tmp[..want]) {
        Ok(0) => Err("connection closed during the handshake".into()),
        Ok(n) => {
            buf.extend_from_slice(&tmp[..n]);
            frame_complete(buf)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether `buf`, the bytes of a handshake frame read so far, holds all of it. A stranger
/// is refused as soon as its first bytes show it, not at the timeout.
pub(crate) fn frame_complete(buf: &[u8]) -> Result<bool, String> {
    let seen = buf.len().min(MAGIC.len());
    if buf[..seen] != MAGIC[..seen] {
        return Err(format!("not a pontoon peer (first bytes {:02x?})", &buf[..seen]));
    }
    Ok(buf.len() == FRAME_LEN)
}

fn write_frame(sock: &mut TcpStream, frame: &[u8]) -> Result<(), String> {
    // A fresh socket's send buffer always takes 96 bytes; loop for the rare short write.
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(1);
    while sent < frame.len() {
        match sock.write(&frame[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::yield_now()
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// Outcome of driving a connection state machine.
pub enum Progress {
    Pending,
    Established {
        peer: Rank,
        sock: TcpStream,
        /// An additional lane to a peer already connected (not its first connection).
        extra_lane: bool,
        /// How it reached the peer (for an accepted one, as its HELLO says).
        via: Via,
        /// The lane's name at both ends (from the handshake).
        tag: u64,
        /// The keys of its sealed bytes, when they travel encrypted.
        sealed: Option<LaneKeys>,
    },
    /// The attempt is over without a connection (`Some(reason)` if the peer is unreachable).
    Failed(String),
    /// The peer is connecting to us at the same moment and its connection wins.
    Yielded,
    /// A routine end of an accepted connection, not worth a warning: a racing connect
    /// the other side abandoned, or a HELLO meant for a rank with our address elsewhere.
    Dropped(String),
}

/// A connect in flight (or finished, waiting for its turn at the handshake).
struct Racer {
    cand: usize,
    sock: TcpStream,
    /// When its connect began (for the record).
    started: Nanos,
    /// Connected (and, through a relay, joined to the peer): ready for the handshake.
    connected: bool,
    /// The exchange with a relay, once the TCP connect to it completed.
    relay: Option<RelayDial>,
}

/// The one handshake in progress: a peer sees HELLOs one at a time, so a won race
/// can never leave it with two connections from us.
struct Handshake {
    cand: usize,
    sock: TcpStream,
    ini: Initiator,
    buf: Vec<u8>,
    /// When the TCP connect of this candidate began.
    connect_started: Nanos,
}

/// Connecting to one peer: its candidates raced as [`Race`] schedules them (staggered
/// starts, a time limit per connect and per handshake, one for the whole); the identity
/// handshake decides, one at a time, in candidate order among the connected ones. Every
/// outcome is recorded.
pub struct Outgoing {
    pub peer: Rank,
    candidates: Vec<Candidate>,
    race: Race,
    racing: Vec<Racer>,
    handshake: Option<Handshake>,
    pub attempts: Vec<Attempt>,
    sockbuf: usize,
    /// An additional lane to a peer already connected (not its first connection).
    extra: bool,
    /// An additional lane bound to this local interface.
    lane_device: Option<String>,
    /// Whether the lane's bytes are to travel sealed.
    pub seal: Seal,
    /// How many more times an additional lane is dialled if its handshake fails.
    pub redials: u8,
}

/// How many times an additional lane is dialled again after its handshake failed. A
/// rank that computes between MPI calls sends no HELLO meanwhile, and the peer drops
/// the silent connection after `PONTOON_ATTEMPT_TIMEOUT_MS`: that says nothing about
/// the path, and the next try, from within an MPI call, usually completes.
pub const LANE_REDIALS: u8 = 3;

/// Whether a connection's bytes travel sealed after its handshake (`PONTOON_ENCRYPT`),
/// as the rank that opens it decides; its HELLO tells the other end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Seal {
    #[default]
    Never,
    Always,
    /// Over a WAN: through a relay or punched through NATs, to a rank of another declared
    /// site (`far`), or over a path whose round trip at connect is a WAN lane's (2 ms).
    OverWan {
        far: bool,
    },
}

impl Seal {
    fn decide(self, kind: PathKind, sock: &TcpStream) -> bool {
        match self {
            Seal::Never => false,
            Seal::Always => true,
            Seal::OverWan { far } => {
                far || kind != PathKind::Direct
                    || transport::tcp::round_trip(sock)
                        .is_some_and(|rtt| clock::nanos(rtt) >= proto::caps::WAN_RTT_NS)
            }
        }
    }
}

impl Outgoing {
    pub fn new(
        peer: Rank,
        candidates: Vec<Candidate>,
        sockbuf: usize,
        timing: RaceTiming,
        now: Nanos,
    ) -> Outgoing {
        Outgoing {
            peer,
            race: Race::new(candidates.len(), timing, now),
            candidates,
            racing: Vec::new(),
            handshake: None,
            attempts: Vec::new(),
            sockbuf,
            extra: false,
            lane_device: None,
            seal: Seal::Never,
            redials: 0,
        }
    }

    /// An additional lane to a connected peer, through the plan's local interface.
    pub fn lane(
        peer: Rank,
        plan: net::paths::LanePlan,
        sockbuf: usize,
        timing: RaceTiming,
        now: Nanos,
    ) -> Outgoing {
        let mut o = Outgoing::new(peer, plan.candidates, sockbuf, timing, now);
        o.lane_device = Some(plan.device);
        o.extra = true;
        o.redials = LANE_REDIALS;
        o
    }

    /// The plan of an additional lane ([`Outgoing::lane`]) to dial again after its
    /// handshake failed, while tries remain.
    pub fn redial_plan(&self) -> Option<net::paths::LanePlan> {
        let device = self
            .lane_device
            .clone()
            .filter(|_| self.extra && self.redials > 0)?;
        Some(net::paths::LanePlan {
            device,
            candidates: self.candidates.clone(),
        })
    }

    /// An additional lane to a connected peer over `sock`, which a hole punch connected
    /// to the peer's address `to` (both ends dialled; this one speaks first).
    pub fn punched(peer: Rank, sock: TcpStream, to: SocketAddr, timing: RaceTiming, now: Nanos) -> Outgoing {
        let cand = Candidate {
            addr: to,
            kind: PathKind::Punched,
            next: None,
            class: net::classify(to.ip()),
            remote_iface: 0,
            bridge: false,
        };
        let mut o = Outgoing::new(peer, vec![cand], 0, timing, now);
        o.race = Race::connected_at_start(timing, now);
        o.extra = true;
        o.racing.push(Racer {
            cand: 0,
            sock,
            started: now,
            connected: true,
            relay: None,
        });
        o
    }

    /// Whether this sets up the first connection to the peer (not an additional lane).
    pub fn first_lane(&self) -> bool {
        !self.extra
    }

    /// Whether this is the handshake on a punched connection.
    pub fn punched_lane(&self) -> bool {
        self.candidates
            .first()
            .is_some_and(|c| c.kind == PathKind::Punched)
    }

    /// A HELLO of ours is out and unanswered (the peer may be completing this
    /// connection): by which path kind.
    pub fn in_handshake(&self) -> Option<PathKind> {
        self.handshake.as_ref().map(|h| self.candidates[h.cand].kind)
    }

    /// Ends every attempt still running, recording `why` for each.
    pub fn abandon(&mut self, why: &str, now: Nanos) {
        if let Some(h) = self.handshake.take() {
            self.race.ended(h.cand);
            self.record(h.cand, h.connect_started, now, Err(why.to_string()));
        }
        for r in std::mem::take(&mut self.racing) {
            self.race.ended(r.cand);
            self.record(r.cand, r.started, now, Err(why.to_string()));
        }
    }

    fn record(&mut self, cand: usize, since: Nanos, now: Nanos, result: Result<(), String>) {
        let c = self.candidates[cand];
        self.attempts.push(Attempt {
            addr: c.addr,
            kind: c.kind,
            next: c.next,
            class: c.class,
            bridge: c.bridge,
            elapsed: clock::duration(now.saturating_sub(since)),
            result,
        });
    }

    /// An attempt at `cand` failed: recorded, and out of the race.
    fn failed(&mut self, cand: usize, since: Nanos, now: Nanos, why: String) {
        self.race.ended(cand);
        self.record(cand, since, now, Err(why));
    }

    fn start(&mut self, cand: usize, now: Nanos) {
        match start_connect(
            self.candidates[cand].addr,
            self.sockbuf,
            self.lane_device.as_deref(),
        ) {
            Ok(sock) => self.racing.push(Racer {
                cand,
                sock,
                started: now,
                connected: false,
                relay: None,
            }),
            Err(e) => self.failed(cand, now, now, e.to_string()),
        }
    }

    /// Carries out what the race's timers say at `now`. Returns whether it gave up.
    fn run_timers(&mut self, now: Nanos) -> bool {
        let timing = self.race.timing();
        let limit = timing.attempt / 1_000_000;
        while let Some(step) = self.race.poll(now) {
            match step {
                RaceStep::Start(cand) => self.start(cand, now),
                RaceStep::GiveUp => {
                    let ms = timing.total / 1_000_000;
                    self.abandon(&format!("given up after {ms} ms in all"), now);
                    return true;
                }
                RaceStep::TimedOut { cand, stage } => {
                    if let Some(h) = self.handshake.take_if(|h| h.cand == cand) {
                        let why = format!("no handshake answer within {limit} ms");
                        self.record(cand, h.connect_started, now, Err(why));
                    } else if let Some(i) = self.racing.iter().position(|r| r.cand == cand) {
                        let r = self.racing.remove(i);
                        let why = match (stage, r.relay) {
                            (_, Some(_)) => format!("the relay did not answer within {limit} ms"),
                            _ => format!("no answer within {limit} ms"),
                        };
                        self.record(cand, r.started, now, Err(why));
                    }
                }
            }
        }
        false
    }

    /// Drives the attempts at `now`; `nonce` supplies fresh randomness for a new HELLO.
    /// `hold`: send no HELLO now — the peer's own connection to us passed its HELLO and
    /// is completing. A HELLO of ours sent then would reach a peer that has its
    /// connection established from its side, while we might complete ours first: each
    /// side would keep a different connection and drop the other's, losing both. Relays
    /// widen that window (the exchange with a relay delays our HELLO).
    pub fn poll(&mut self, id: &Identity, now: Nanos, nonce: impl Fn() -> [u8; 16], hold: bool) -> Progress {
        if self.run_timers(now) {
            return Progress::Failed(self.report());
        }
        self.poll_connects(id, now);
        if self.handshake.is_none() && !hold {
            self.begin_handshake(id, &nonce, now);
        }
        if let Some(done) = self.poll_handshake(now) {
            return done;
        }
        // Attempts that ended leave room for the next candidate at once.
        if self.run_timers(now) {
            return Progress::Failed(self.report());
        }
        if self.race.exhausted() {
            return Progress::Failed(self.report());
        }
        Progress::Pending
    }

    /// Drives the TCP connects, and the relay exchange of those that reached a relay.
    fn poll_connects(&mut self, id: &Identity, now: Nanos) {
        let mut i = 0;
        while i < self.racing.len() {
            let cand = self.candidates[self.racing[i].cand];
            let r = &mut self.racing[i];
            if r.connected {
                i += 1;
                continue;
            }
            let outcome = if let Some(dial) = r.relay.as_mut() {
                match dial.poll(&mut r.sock, &id.secret, self.peer) {
                    RelayStep::Pending => None,
                    RelayStep::Joined => {
                        r.connected = true;
                        self.race.connected(r.cand, now);
                        None
                    }
                    RelayStep::Failed(why) => Some(format!("relay: {why}")),
                }
            } else if ready(&r.sock, PollFlags::OUT) {
                match r.sock.take_error() {
                    Ok(None) if cand.kind.relayed() => {
                        // The relay speaks first; its challenge may be here already.
                        r.relay = Some(RelayDial::new(cand.next));
                        continue;
                    }
                    Ok(None) => {
                        r.connected = true;
                        self.race.connected(r.cand, now);
                        None
                    }
                    Ok(Some(e)) | Err(e) => Some(e.to_string()),
                }
            } else {
                None
            };
            match outcome {
                Some(why) => {
                    let r = self.racing.remove(i);
                    self.failed(r.cand, r.started, now, why);
                }
                None => i += 1,
            }
        }
    }

    /// Sends HELLO on the best connected racer.
    fn begin_handshake(&mut self, id: &Identity, nonce: &impl Fn() -> [u8; 16], now: Nanos) {
        while let Some(pos) = self
            .racing
            .iter()
            .enumerate()
            .filter(|(_, r)| r.connected)
            .min_by_key(|(_, r)| r.cand)
            .map(|(i, _)| i)
        {
            let mut r = self.racing.remove(pos);
            let kind = self.candidates[r.cand].kind;
            let sealed = self.seal.decide(kind, &r.sock);
            let (ini, hello) = if self.extra {
                Initiator::extra_lane(id.clone(), self.peer, nonce(), kind, sealed)
            } else {
                Initiator::by_path(id.clone(), self.peer, nonce(), kind, sealed)
            };
            match write_frame(&mut r.sock, &hello) {
                Ok(()) => {
                    self.race.handshake_began(r.cand, now);
                    self.handshake = Some(Handshake {
                        cand: r.cand,
                        sock: r.sock,
                        ini,
                        buf: Vec::with_capacity(FRAME_LEN),
                        connect_started: r.started,
                    });
                    return;
                }
                Err(e) => self.failed(r.cand, r.started, now, e),
            }
        }
    }

    fn poll_handshake(&mut self, now: Nanos) -> Option<Progress> {
        let mut h = self.handshake.take()?;
        match read_frame(&mut h.sock, &mut h.buf) {
            Ok(false) => {
                self.handshake = Some(h);
                return None;
            }
            Err(e) => {
                self.failed(h.cand, h.connect_started, now, e);
                return None;
            }
            Ok(true) => {}
        }
        match h.ini.handle_ack(&h.buf) {
            Ok(confirm) => {
                if let Err(e) = write_frame(&mut h.sock, &confirm) {
                    self.failed(h.cand, h.connect_started, now, e);
                    return None;
                }
                self.race.ended(h.cand);
                self.record(h.cand, h.connect_started, now, Ok(()));
                for r in std::mem::take(&mut self.racing) {
                    self.failed(
                        r.cand,
                        r.started,
                        now,
                        "abandoned: an earlier candidate connected".into(),
                    );
                }
                Some(Progress::Established {
                    peer: self.peer,
                    sock: h.sock,
                    extra_lane: !self.first_lane(),
                    via: Via {
                        kind: self.candidates[h.cand].kind,
                        next: self.candidates[h.cand].next,
                    },
                    tag: h.ini.lane_tag(),
                    sealed: h
                        .ini
                        .sealed()
                        .then(|| h.ini.lane_key(&h.buf))
                        .flatten()
                        .map(|key| LaneKeys::new(&key, true)),
                })
            }
            Err(HandshakeError::Refused(proto::wire::HandshakeStatus::Simultaneous)) => {
                self.failed(
                    h.cand,
                    h.connect_started,
                    now,
                    "the peer is connecting to us at the same time; its connection is kept".into(),
                );
                self.abandon("abandoned: the peer's own connection is kept", now);
                Some(Progress::Yielded)
            }
            Err(e) => {
                self.failed(h.cand, h.connect_started, now, e.to_string());
                None
            }
        }
    }

    /// Every address tried and why each failed.
    pub fn report(&self) -> String {
        if self.attempts.is_empty() {
            return "no address of the peer is worth trying from here: its endpoint card lists no address \
                    this host can reach (different address families, only private addresses of another site \
                    (PONTOON_SITE), or addresses excluded by PONTOON_IF_INCLUDE/PONTOON_IF_EXCLUDE) and no \
                    relay of a path kind PONTOON_PATHS allows"
                .into();
        }
        let tried: Vec<String> = self.attempts.iter().map(Attempt::to_string).collect();
        let untried: Vec<String> = self.candidates[self.race.untried()]
            .iter()
            .map(|c| c.addr.to_string())
            .collect();
        if untried.is_empty() {
            format!("tried {}", tried.join("; "))
        } else {
            format!(
                "tried {}; not tried in time: {}",
                tried.join("; "),
                untried.join(", ")
            )
        }
    }
}

impl std::fmt::Display for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bridge = if self.bridge { ", virtual bridge" } else { "" };
        let at = match (self.kind, self.next) {
            (PathKind::NatProxy, _) => format!("relay {}", self.addr),
            (PathKind::TwoProxy, Some(next)) => format!("relays {} then {next}", self.addr),
            (PathKind::Punched, _) => format!("punched {}", self.addr),
            _ => self.addr.to_string(),
        };
        match &self.result {
            Ok(()) => write!(f, "{at} ({}{bridge}): connected", self.class),
            Err(e) => write!(
                f,
                "{at} ({}{bridge}): {e} after {:.1} ms",
                self.class,
                self.elapsed.as_secs_f64() * 1e3
            ),
        }
    }
}

fn start_connect(addr: SocketAddr, sockbuf: usize, device: Option<&str>) -> io::Result<TcpStream> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if let Some(device) = device {
        // Out through this interface or not at all: a lane must use its own NIC.
        s.bind_device(Some(device.as_bytes()))?;
    }
    net::listen::set_buffers(&s, sockbuf)?;
    s.set_nonblocking(true)?;
    s.set_tcp_nodelay(true)?;
    match s.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {}
        Err(e) => return Err(e),
    }
    Ok(s.into())
}

enum InState {
    AwaitHello { buf: Vec<u8> },
    AwaitConfirm { acc: Acceptor, buf: Vec<u8> },
    Done,
}

/// An accepted connection going through the handshake.
pub struct Incoming {
    sock: Option<TcpStream>,
    state: InState,
    deadline: Deadline,
    /// How long a peer whose HELLO passed has to confirm ([`Incoming::confirm_within`]).
    confirm_limit: Nanos,
    /// Its socket's key in the rank's waiter (see `Waiter::watch_as`).
    pub key: u64,
}

impl Incoming {
    pub fn new(sock: TcpStream, deadline: Deadline) -> Incoming {
        Incoming {
            sock: Some(sock),
            state: InState::AwaitHello { buf: Vec::new() },
            confirm_limit: deadline.limit(),
            deadline,
            key: 0,
        }
    }

    /// Gives a peer whose HELLO passed `limit` from then to confirm. The dialler counts
    /// the lane up once it sent its CONFIRM: dropped here meanwhile (it computed between
    /// MPI calls, reading our answer late), the lane would break at its end at once, a
    /// lane "failed" that this end never had. Its HELLO proved it holds the job's
    /// secret, and a dialler that gives up closes the connection, which ends this one.
    pub fn confirm_within(mut self, limit: Nanos) -> Incoming {
        self.confirm_limit = limit;
        self
    }

    /// Its time limit: once passed, a poll reports the failure even with nothing to read.
    pub fn deadline(&self) -> Deadline {
        self.deadline
    }

    /// `contention(r)`: what this rank already has going with `r`.
    pub fn poll(
        &mut self,
        id: &Identity,
        now: Nanos,
        nonce: [u8; 16],
        contention: impl Fn(Rank) -> Contention,
    ) -> Progress {
        let peer_addr = self.sock.as_ref().and_then(|s| s.peer_addr().ok());
        let who = peer_addr.map_or_else(|| "unknown address".to_string(), |a| a.to_string());
        if self.deadline.passed(now) {
            let limit = self.deadline.limit_ms();
            // A rank that dialled and then computed outside MPI calls has sent nothing:
            // no fault of anyone's, and it dials again (`LANE_REDIALS`).
            if matches!(&self.state, InState::AwaitHello { buf } if buf.is_empty()) {
                return Progress::Dropped(format!("connection from {who} sent no HELLO within {limit} ms"));
            }
            return Progress::Failed(format!("handshake from {who} did not finish within {limit} ms"));
        }
        let Some(sock) = self.sock.as_mut() else {
            return Progress::Failed("closed".into());
        };
        loop {
            match std::mem::replace(&mut self.state, InState::Done) {
                InState::AwaitHello { mut buf } => match read_frame(sock, &mut buf) {
                    Ok(false) => {
                        self.state = InState::AwaitHello { buf };
                        return Progress::Pending;
                    }
                    Err(e) if buf.is_empty() => {
                        return Progress::Dropped(format!("connection from {who}: {e}"))
                    }
                    Err(e) => return Progress::Failed(format!("connection from {who}: {e}")),
                    Ok(true) => {
                        let verdict = accept_hello(id, &buf, nonce, &contention);
                        let _ = write_frame(sock, &verdict.ack);
                        match verdict.result {
                            Ok(acc) => {
                                self.state = InState::AwaitConfirm { acc, buf: Vec::new() };
                                self.deadline = Deadline::after(now, self.confirm_limit);
                            }
                            // The peer's duplicate of a connection we keep: routine, not worth a warning.
                            Err(HandshakeError::Refused(proto::wire::HandshakeStatus::Simultaneous)) => {
                                return Progress::Yielded
                            }
                            Err(e @ HandshakeError::WrongRank { .. }) => {
                                return Progress::Dropped(format!("refused connection from {who}: {e}"))
                            }
                            Err(e) => return Progress::Failed(format!("refused connection from {who}: {e}")),
                        }
                    }
                },
                InState::AwaitConfirm { acc, mut buf } => match read_frame(sock, &mut buf) {
                    Ok(false) => {
                        self.state = InState::AwaitConfirm { acc, buf };
                        return Progress::Pending;
                    }
                    Err(e) => return Progress::Failed(format!("connection from {who}: {e}")),
                    Ok(true) => {
                        return match acc.handle_confirm(&buf) {
                            Ok(peer) => Progress::Established {
                                peer,
                                sock: self.sock.take().expect("present"),
                                extra_lane: acc.extra_lane(),
                                via: Via {
                                    kind: acc.path(),
                                    next: None,
                                },
                                tag: acc.lane_tag(),
                                sealed: acc.sealed().then(|| LaneKeys::new(&acc.lane_key(), false)),
                            },
                            Err(e) => Progress::Failed(format!("refused connection from {who}: {e}")),
                        };
                    }
                },
                InState::Done => return Progress::Failed("handshake already finished".into()),
            }
        }
    }

    /// The peer opens this connection as an additional lane (known once its HELLO passed).
    pub fn extra_lane(&self) -> bool {
        matches!(&self.state, InState::AwaitConfirm { acc, .. } if acc.extra_lane())
    }

    /// The rank at the other end once its HELLO was accepted (the connection is completing).
    pub fn verified_peer(&self) -> Option<Rank> {
        match &self.state {
            InState::AwaitConfirm { acc, .. } => Some(acc.peer()),
            _ => None,
        }
    }

    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.sock.as_ref().map(|s| s.as_fd())
    }
}

#[cfg(test)]
mod tests;
