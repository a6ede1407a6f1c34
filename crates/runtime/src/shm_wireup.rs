//! Setting up shared-memory lanes with ranks of the same node: the job's authenticated
//! handshake over a Unix socket in the abstract namespace, then the connecting rank's
//! segment handed over with its CONFIRM (see `transport::shm`). Non-blocking state
//! machines, driven by the event loop like the TCP ones in `wireup.rs`.

use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use proto::handshake::{accept_hello, Acceptor, Contention, HandshakeError, Identity, Initiator};
use proto::wire::handshake::FRAME_LEN;
use proto::wire::HandshakeStatus;
use proto::Rank;
use transport::shm::{self, ShmPipe};

/// How a shared-memory set-up ended, or that it goes on.
pub enum ShmProgress {
    Pending,
    Established {
        peer: Rank,
        pipe: ShmPipe,
    },
    /// No shared-memory lane: why (the caller falls back to TCP).
    Failed(String),
    /// The peer is connecting to us at the same moment and its connection wins.
    Yielded,
}

/// Reads into `buf` until it holds a whole handshake frame; takes a passed fd along.
/// `Ok(true)` once complete.
fn read_frame(sock: &UnixStream, buf: &mut Vec<u8>, fd: &mut Option<OwnedFd>) -> Result<bool, String> {
    let mut tmp = [0u8; FRAME_LEN];
    let want = FRAME_LEN - buf.len();
    match shm::recv_with_fd(sock, &mut tmp[..want]) {
        Ok((0, _)) => Err("connection closed during the handshake".into()),
        Ok((n, passed)) => {
            if fd.is_none() {
                *fd = passed;
            }
            buf.extend_from_slice(&tmp[..n]);
            crate::wireup::frame_complete(buf)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// A fresh Unix socket takes a 96-byte frame whole; anything else is a failure.
fn write_frame(mut sock: &UnixStream, frame: &[u8]) -> Result<(), String> {
    match sock.write(frame) {
        Ok(n) if n == frame.len() => Ok(()),
        Ok(n) => Err(format!("the socket took {n} of {} handshake bytes", frame.len())),
        Err(e) => Err(e.to_string()),
    }
}

enum DialState {
    AwaitAck { ini: Initiator, buf: Vec<u8> },
    Done,
}

/// This rank connecting a shared-memory lane to `peer`.
pub struct ShmDial {
    pub peer: Rank,
    sock: UnixStream,
    state: DialState,
    started: Instant,
    ring: usize,
    /// Its socket's key in the rank's waiter (see `Waiter::watch_as`).
    pub key: u64,
}

impl ShmDial {
    /// Connects to the peer's socket and sends HELLO; `Err` says why shared memory
    /// cannot be had with this peer (no one listens: another network namespace).
    pub fn start(id: &Identity, peer: Rank, ring: usize, nonce: [u8; 16]) -> Result<ShmDial, String> {
        let name = shm::socket_name(&id.job_id, peer);
        let sock = shm::connect(&name).map_err(|e| match e.kind() {
            // Its socket was bound before the ranks exchanged cards: nobody listening
            // means another network namespace, or a rank that has ended already.
            io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound => format!(
                "rank {peer} does not listen for shared-memory lanes here ({e}): it runs in \
                 another network namespace (container) of this host, or it has ended"
            ),
            io::ErrorKind::WouldBlock => format!(
                "rank {peer}'s shared-memory socket has more connections waiting than \
                 net.core.somaxconn allows ({e})"
            ),
            _ => format!("connecting to rank {peer}'s shared-memory socket: {e}"),
        })?;
        let (ini, hello) = Initiator::new(id.clone(), peer, nonce);
        write_frame(&sock, &hello)?;
        Ok(ShmDial {
            peer,
            sock,
            state: DialState::AwaitAck {
                ini,
                buf: Vec::with_capacity(FRAME_LEN),
            },
            started: Instant::now(),
            ring,
            key: 0,
        })
    }

    pub fn socket(&self) -> &UnixStream {
        &self.sock
    }

    /// Whether its time is up: then a poll reports the failure even with nothing to read.
    pub fn overdue(&self, now: Instant, timeout: Duration) -> bool {
        now.saturating_duration_since(self.started) > timeout
    }

    /// A HELLO of ours is out: the peer may be completing this connection.
    pub fn in_handshake(&self) -> bool {
        matches!(self.state, DialState::AwaitAck { .. })
    }

    pub fn poll(&mut self, timeout: Duration) -> ShmProgress {
        if self.started.elapsed() > timeout {
            return ShmProgress::Failed(format!(
                "no shared-memory handshake answer within {} ms",
                timeout.as_millis()
            ));
        }
        let DialState::AwaitAck { ini, mut buf } = std::mem::replace(&mut self.state, DialState::Done) else {
            return ShmProgress::Failed("handshake already finished".into());
        };
        match read_frame(&self.sock, &mut buf, &mut None) {
            Ok(false) => {
                self.state = DialState::AwaitAck { ini, buf };
                return ShmProgress::Pending;
            }
            Err(e) => return ShmProgress::Failed(e),
            Ok(true) => {}
        }
        let confirm = match ini.handle_ack(&buf) {
            Ok(confirm) => confirm,
            Err(HandshakeError::Refused(HandshakeStatus::Simultaneous)) => return ShmProgress::Yielded,
            Err(e) => return ShmProgress::Failed(e.to_string()),
        };
        let sock = match self.sock.try_clone() {
            Ok(s) => s,
            Err(e) => return ShmProgress::Failed(e.to_string()),
        };
        let (pipe, fd) = match ShmPipe::create(sock, self.ring) {
            Ok(p) => p,
            Err(e) => {
                return ShmProgress::Failed(format!(
                    "cannot make a shared-memory segment of {} KiB: {e}",
                    2 * self.ring / 1024
                ))
            }
        };
        match shm::send_with_fd(&self.sock, &confirm, std::os::fd::AsFd::as_fd(&fd)) {
            Ok(n) if n == confirm.len() => ShmProgress::Established {
                peer: self.peer,
                pipe,
            },
            Ok(n) => ShmProgress::Failed(format!("the socket took {n} of {} CONFIRM bytes", confirm.len())),
            Err(e) => ShmProgress::Failed(format!("passing the segment: {e}")),
        }
    }
}

enum AcceptState {
    AwaitHello {
        buf: Vec<u8>,
    },
    AwaitConfirm {
        acc: Acceptor,
        buf: Vec<u8>,
        fd: Option<OwnedFd>,
    },
    Done,
}

/// A shared-memory connection from a rank of this node, going through the handshake.
pub struct ShmAccept {
    sock: UnixStream,
    state: AcceptState,
    started: Instant,
    /// Its socket's key in the rank's waiter (see `Waiter::watch_as`).
    pub key: u64,
}

/// Accepts every waiting connection on the shared-memory socket.
pub fn accept_all(listener: &UnixListener) -> Vec<ShmAccept> {
    let mut out = Vec::new();
    while let Ok((sock, _)) = listener.accept() {
        if sock.set_nonblocking(true).is_ok() {
            out.push(ShmAccept {
                sock,
                state: AcceptState::AwaitHello { buf: Vec::new() },
                started: Instant::now(),
                key: 0,
            });
        }
    }
    out
}

impl ShmAccept {
    /// The rank at the other end once its HELLO was accepted.
    pub fn verified_peer(&self) -> Option<Rank> {
        match &self.state {
            AcceptState::AwaitConfirm { acc, .. } => Some(acc.peer()),
            _ => None,
        }
    }

    pub fn socket(&self) -> &UnixStream {
        &self.sock
    }

    /// Whether its time is up (see [`ShmDial::overdue`]).
    pub fn overdue(&self, now: Instant, timeout: Duration) -> bool {
        now.saturating_duration_since(self.started) > timeout
    }

    pub fn poll(
        &mut self,
        id: &Identity,
        timeout: Duration,
        nonce: [u8; 16],
        contention: impl Fn(Rank) -> Contention,
    ) -> ShmProgress {
        if self.started.elapsed() > timeout {
            return ShmProgress::Failed(format!(
                "shared-memory handshake did not finish within {} ms",
                timeout.as_millis()
            ));
        }
        loop {
            match std::mem::replace(&mut self.state, AcceptState::Done) {
                AcceptState::AwaitHello { mut buf } => match read_frame(&self.sock, &mut buf, &mut None) {
                    Ok(false) => {
                        self.state = AcceptState::AwaitHello { buf };
                        return ShmProgress::Pending;
                    }
                    Err(e) => return ShmProgress::Failed(format!("shared-memory connection: {e}")),
                    Ok(true) => {
                        let verdict = accept_hello(id, &buf, nonce, &contention);
                        let _ = (&self.sock).write_all(&verdict.ack);
                        match verdict.result {
                            Ok(acc) => {
                                self.state = AcceptState::AwaitConfirm {
                                    acc,
                                    buf: Vec::new(),
                                    fd: None,
                                }
                            }
                            Err(HandshakeError::Refused(HandshakeStatus::Simultaneous)) => {
                                return ShmProgress::Yielded
                            }
                            Err(e) => {
                                return ShmProgress::Failed(format!("refused shared-memory connection: {e}"))
                            }
                        }
                    }
                },
                AcceptState::AwaitConfirm { acc, mut buf, mut fd } => {
                    match read_frame(&self.sock, &mut buf, &mut fd) {
                        Ok(false) => {
                            self.state = AcceptState::AwaitConfirm { acc, buf, fd };
                            return ShmProgress::Pending;
                        }
                        Err(e) => return ShmProgress::Failed(format!("shared-memory connection: {e}")),
                        Ok(true) => {}
                    }
                    let peer = match acc.handle_confirm(&buf) {
                        Ok(peer) => peer,
                        Err(e) => {
                            return ShmProgress::Failed(format!("refused shared-memory connection: {e}"))
                        }
                    };
                    let Some(fd) = fd else {
                        return ShmProgress::Failed(format!("rank {peer} sent no shared-memory segment"));
                    };
                    let sock = match self.sock.try_clone() {
                        Ok(s) => s,
                        Err(e) => return ShmProgress::Failed(e.to_string()),
                    };
                    return match ShmPipe::open(sock, fd) {
                        Ok(pipe) => ShmProgress::Established { peer, pipe },
                        Err(e) => ShmProgress::Failed(format!("rank {peer}'s shared-memory segment: {e}")),
                    };
                }
                AcceptState::Done => return ShmProgress::Failed("handshake already finished".into()),
            }
        }
    }
}
