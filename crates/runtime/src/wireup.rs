//! Connection set-up: listening sockets (one per address family), endpoint cards,
//! and the non-blocking connect + handshake state machines. Every attempt's outcome
//! is recorded so that a failure can list every address tried and why it failed.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use net::{AddrClass, ConnEntry};
use proto::handshake::{accept_hello, Acceptor, Contention, HandshakeError, Identity, Initiator};
use proto::wire::handshake::{FRAME_LEN, MAGIC};
use proto::Rank;
use rustix::event::{PollFd, PollFlags};
use socket2::{Domain, Protocol, Socket, Type};

/// One connection attempt and how it ended.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub addr: SocketAddr,
    pub class: AddrClass,
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
fn ready(sock: &TcpStream, flags: PollFlags) -> bool {
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
            // Refuse a stranger as soon as its first bytes show it, not at the timeout.
            let seen = buf.len().min(MAGIC.len());
            if buf[..seen] != MAGIC[..seen] {
                return Err(format!("not a pontoon peer (first bytes {:02x?})", &buf[..seen]));
            }
            Ok(buf.len() == FRAME_LEN)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e.to_string()),
    }
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

enum OutState {
    Idle,
    Connecting {
        sock: TcpStream,
    },
    AwaitAck {
        sock: TcpStream,
        ini: Initiator,
        buf: Vec<u8>,
    },
}

/// Outcome of driving a connection state machine.
pub enum Progress {
    Pending,
    Established {
        peer: Rank,
        sock: TcpStream,
    },
    /// The attempt is over without a connection (`Some(reason)` if the peer is unreachable).
    Failed(String),
    /// The peer is connecting to us at the same moment and its connection wins.
    Yielded,
}

/// Connecting to one peer: candidates tried in order, each with a time limit.
pub struct Outgoing {
    pub peer: Rank,
    candidates: Vec<ConnEntry>,
    next: usize,
    state: OutState,
    attempt_start: Instant,
    pub attempts: Vec<Attempt>,
    pub started: Instant,
    sockbuf: usize,
}

impl Outgoing {
    pub fn new(peer: Rank, candidates: Vec<ConnEntry>, sockbuf: usize) -> Outgoing {
        Outgoing {
            peer,
            candidates,
            next: 0,
            state: OutState::Idle,
            attempt_start: Instant::now(),
            attempts: Vec::new(),
            started: Instant::now(),
            sockbuf,
        }
    }

    fn record(&mut self, result: Result<(), String>) {
        let e = self.candidates[self.next - 1];
        self.attempts.push(Attempt {
            addr: e.addr,
            class: e.class,
            elapsed: self.attempt_start.elapsed(),
            result,
        });
    }

    /// Drives the attempt; `nonce` supplies fresh randomness for a new HELLO.
    pub fn poll(
        &mut self,
        id: &Identity,
        attempt_timeout: Duration,
        nonce: impl Fn() -> [u8; 16],
    ) -> Progress {
        loop {
            match std::mem::replace(&mut self.state, OutState::Idle) {
                OutState::Idle => {
                    let Some(cand) = self.candidates.get(self.next).copied() else {
                        return Progress::Failed(self.report());
                    };
                    self.next += 1;
                    self.attempt_start = Instant::now();
                    match start_connect(cand.addr, self.sockbuf) {
                        Ok(sock) => self.state = OutState::Connecting { sock },
                        Err(e) => self.record(Err(e.to_string())),
                    }
                }
                OutState::Connecting { mut sock } => {
                    if self.attempt_start.elapsed() > attempt_timeout {
                        self.record(Err(format!(
                            "no answer within {} ms",
                            attempt_timeout.as_millis()
                        )));
                        continue;
                    }
                    if !ready(&sock, PollFlags::OUT) {
                        self.state = OutState::Connecting { sock };
                        return Progress::Pending;
                    }
                    match sock.take_error() {
                        Ok(None) => {}
                        Ok(Some(e)) | Err(e) => {
                            self.record(Err(e.to_string()));
                            continue;
                        }
                    }
                    let (ini, hello) = Initiator::new(id.clone(), self.peer, nonce());
                    if let Err(e) = write_frame(&mut sock, &hello) {
                        self.record(Err(e));
                        continue;
                    }
                    self.state = OutState::AwaitAck {
                        sock,
                        ini,
                        buf: Vec::with_capacity(FRAME_LEN),
                    };
                }
                OutState::AwaitAck {
                    mut sock,
                    ini,
                    mut buf,
                } => {
                    if self.attempt_start.elapsed() > attempt_timeout {
                        self.record(Err(format!(
                            "no handshake answer within {} ms",
                            attempt_timeout.as_millis()
                        )));
                        continue;
                    }
                    match read_frame(&mut sock, &mut buf) {
                        Ok(false) => {
                            self.state = OutState::AwaitAck { sock, ini, buf };
                            return Progress::Pending;
                        }
                        Err(e) => {
                            self.record(Err(e));
                            continue;
                        }
                        Ok(true) => {}
                    }
                    match ini.handle_ack(&buf) {
                        Ok(confirm) => {
                            if let Err(e) = write_frame(&mut sock, &confirm) {
                                self.record(Err(e));
                                continue;
                            }
                            self.record(Ok(()));
                            return Progress::Established {
                                peer: self.peer,
                                sock,
                            };
                        }
                        Err(HandshakeError::Refused(proto::wire::HandshakeStatus::Simultaneous)) => {
                            self.record(Err(
                                "the peer is connecting to us at the same time; its connection is kept"
                                    .into(),
                            ));
                            return Progress::Yielded;
                        }
                        Err(e) => {
                            self.record(Err(e.to_string()));
                            continue;
                        }
                    }
                }
            }
        }
    }

    /// Every address tried and why each failed.
    pub fn report(&self) -> String {
        if self.attempts.is_empty() {
            return "no address of the peer is reachable from here: its endpoint card lists no address of a \
                    class this host has"
                .into();
        }
        let tried: Vec<String> = self
            .attempts
            .iter()
            .map(|a| match &a.result {
                Ok(()) => format!("{} ({}): connected", a.addr, a.class),
                Err(e) => format!(
                    "{} ({}): {} after {:.1} ms",
                    a.addr,
                    a.class,
                    e,
                    a.elapsed.as_secs_f64() * 1e3
                ),
            })
            .collect();
        format!("tried {}", tried.join("; "))
    }
}

fn start_connect(addr: SocketAddr, sockbuf: usize) -> io::Result<TcpStream> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
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
    started: Instant,
}

impl Incoming {
    pub fn new(sock: TcpStream) -> Incoming {
        Incoming {
            sock: Some(sock),
            state: InState::AwaitHello { buf: Vec::new() },
            started: Instant::now(),
        }
    }

    /// `contention(r)`: what this rank already has going with `r`.
    pub fn poll(
        &mut self,
        id: &Identity,
        timeout: Duration,
        nonce: [u8; 16],
        contention: impl Fn(Rank) -> Contention,
    ) -> Progress {
        let peer_addr = self.sock.as_ref().and_then(|s| s.peer_addr().ok());
        let who = peer_addr.map_or_else(|| "unknown address".to_string(), |a| a.to_string());
        if self.started.elapsed() > timeout {
            return Progress::Failed(format!(
                "handshake from {who} did not finish within {} ms",
                timeout.as_millis()
            ));
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
                    Err(e) => return Progress::Failed(format!("connection from {who}: {e}")),
                    Ok(true) => {
                        let verdict = accept_hello(id, &buf, nonce, &contention);
                        let _ = write_frame(sock, &verdict.ack);
                        match verdict.result {
                            Ok(acc) => self.state = InState::AwaitConfirm { acc, buf: Vec::new() },
                            // The peer's duplicate of a connection we keep: routine, not worth a warning.
                            Err(HandshakeError::Refused(proto::wire::HandshakeStatus::Simultaneous)) => {
                                return Progress::Yielded
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
                            },
                            Err(e) => Progress::Failed(format!("refused connection from {who}: {e}")),
                        };
                    }
                },
                InState::Done => return Progress::Failed("handshake already finished".into()),
            }
        }
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
