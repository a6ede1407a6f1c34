//! Joining the node's shared-memory segment (see `transport::shm`): every rank of a node
//! but the lowest (the leader) connects to the leader's Unix socket in the abstract
//! namespace and runs the job's authenticated handshake; once the leader has checked its
//! CONFIRM, the leader sends the segment's fd (`SCM_RIGHTS`). So only a rank that holds
//! the job's secret, and answered this leader's nonce, gets the segment. Non-blocking
//! state machines, driven by the event loop like the TCP ones in `fabric/tcp/wireup.rs`.

use std::io::{self, Read, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};

use proto::dial::Deadline;
use proto::handshake::{accept_hello, Acceptor, Contention, Identity, Initiator};
use proto::wire::handshake::FRAME_LEN;
use proto::{Nanos, Rank};
use transport::shm;

/// What the leader sends with the segment's fd.
const SEGMENT: &[u8; 8] = b"PNTNSEGM";

/// Reads into `buf` until it holds `want` bytes; takes a passed fd along.
/// `Ok(true)` once complete.
fn read_until(
    sock: &UnixStream,
    buf: &mut Vec<u8>,
    want: usize,
    fd: &mut Option<OwnedFd>,
) -> Result<bool, String> {
    let mut tmp = [0u8; FRAME_LEN];
    let missing = want - buf.len();
    match shm::recv_with_fd(sock, &mut tmp[..missing]) {
        Ok((0, _)) => Err("connection closed during the handshake".into()),
        Ok((n, passed)) => {
            if fd.is_none() {
                *fd = passed;
            }
            buf.extend_from_slice(&tmp[..n]);
            Ok(buf.len() == want)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Reads a whole handshake frame (its length is checked by `frame_complete`).
fn read_frame(sock: &UnixStream, buf: &mut Vec<u8>) -> Result<bool, String> {
    read_until(sock, buf, FRAME_LEN, &mut None)?;
    crate::fabric::tcp::wireup::frame_complete(buf)
}

/// Whether the other end of a kept join connection has closed (its process ended): reads
/// what is there (nothing is expected) until the socket would block or says it closed.
pub fn closed(mut sock: &UnixStream) -> bool {
    let mut scrap = [0u8; 64];
    loop {
        match sock.read(&mut scrap) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return true,
        }
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

/// How a join ended, or that it goes on.
pub enum JoinProgress {
    Pending,
    /// The segment, from the leader.
    Joined(OwnedFd),
    /// No shared memory: why (the rank's node-local peers use TCP).
    Failed(String),
}

enum JoinState {
    AwaitAck { ini: Initiator, buf: Vec<u8> },
    AwaitSegment { buf: Vec<u8>, fd: Option<OwnedFd> },
    Done,
}

/// This rank joining its node's segment through the leader.
pub struct ShmJoin {
    pub leader: Rank,
    sock: UnixStream,
    state: JoinState,
    deadline: Deadline,
    /// Its socket's key in the rank's waiter (see `Waiter::watch_as`).
    pub key: u64,
}

impl ShmJoin {
    /// Connects to the leader's socket and sends HELLO; `Err` says why shared memory
    /// cannot be had (no one listens: another network namespace).
    pub fn start(
        id: &Identity,
        leader: Rank,
        nonce: [u8; 16],
        deadline: Deadline,
    ) -> Result<ShmJoin, String> {
        let name = shm::socket_name(&id.job_id, leader);
        let sock = shm::connect(&name).map_err(|e| match e.kind() {
            // Its socket was bound before the ranks exchanged cards: nobody listening
            // means another network namespace, or a rank that has ended already.
            io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound => format!(
                "rank {leader}, this node's first rank, does not listen for shared-memory ranks \
                 here ({e}): it runs in another network namespace (container) of this host, \
                 or it has ended"
            ),
            io::ErrorKind::WouldBlock => format!(
                "rank {leader}'s shared-memory socket has more connections waiting than \
                 net.core.somaxconn allows ({e})"
            ),
            _ => format!("connecting to rank {leader}'s shared-memory socket: {e}"),
        })?;
        let (ini, hello) = Initiator::new(id.clone(), leader, nonce);
        write_frame(&sock, &hello)?;
        Ok(ShmJoin {
            leader,
            sock,
            state: JoinState::AwaitAck {
                ini,
                buf: Vec::with_capacity(FRAME_LEN),
            },
            deadline,
            key: 0,
        })
    }

    pub fn socket(&self) -> &UnixStream {
        &self.sock
    }

    /// The connection to the leader, kept once joined: it closes with the leader's process.
    pub fn into_socket(self) -> UnixStream {
        self.sock
    }

    /// Its time limit: once passed, a poll reports the failure even with nothing to
    /// read; until then its socket wakes the rank.
    pub fn deadline(&self) -> Deadline {
        self.deadline
    }

    pub fn poll(&mut self, now: Nanos) -> JoinProgress {
        if self.deadline.passed(now) {
            return JoinProgress::Failed(format!(
                "rank {} (this node's first rank) did not admit this rank to shared memory \
                 within {} ms",
                self.leader,
                self.deadline.limit_ms()
            ));
        }
        loop {
            match std::mem::replace(&mut self.state, JoinState::Done) {
                JoinState::AwaitAck { ini, mut buf } => {
                    match read_frame(&self.sock, &mut buf) {
                        Ok(false) => {
                            self.state = JoinState::AwaitAck { ini, buf };
                            return JoinProgress::Pending;
                        }
                        Err(e) => return JoinProgress::Failed(e),
                        Ok(true) => {}
                    }
                    let confirm = match ini.handle_ack(&buf) {
                        Ok(confirm) => confirm,
                        Err(e) => return JoinProgress::Failed(e.to_string()),
                    };
                    if let Err(e) = write_frame(&self.sock, &confirm) {
                        return JoinProgress::Failed(e);
                    }
                    self.state = JoinState::AwaitSegment {
                        buf: Vec::with_capacity(SEGMENT.len()),
                        fd: None,
                    };
                }
                JoinState::AwaitSegment { mut buf, mut fd } => {
                    match read_until(&self.sock, &mut buf, SEGMENT.len(), &mut fd) {
                        Ok(false) => {
                            self.state = JoinState::AwaitSegment { buf, fd };
                            return JoinProgress::Pending;
                        }
                        Err(e) => return JoinProgress::Failed(e),
                        Ok(true) => {}
                    }
                    return match fd {
                        Some(fd) if buf == SEGMENT => JoinProgress::Joined(fd),
                        _ => JoinProgress::Failed(format!(
                            "rank {} sent no shared-memory segment",
                            self.leader
                        )),
                    };
                }
                JoinState::Done => return JoinProgress::Failed("join already finished".into()),
            }
        }
    }
}

/// How the leader's side of a join ended, or that it goes on.
pub enum AdmitProgress {
    Pending,
    /// `peer` passed the handshake; `pid` is its process as the leader sees it. Next:
    /// [`ShmAdmit::hand_over`] the segment.
    Admitted {
        peer: Rank,
        pid: u32,
    },
    Failed(String),
}

enum AdmitState {
    AwaitHello { buf: Vec<u8> },
    AwaitConfirm { acc: Acceptor, buf: Vec<u8> },
    Done,
}

/// A rank of this node joining, at the leader.
pub struct ShmAdmit {
    sock: UnixStream,
    state: AdmitState,
    deadline: Deadline,
    /// Its socket's key in the rank's waiter (see `Waiter::watch_as`).
    pub key: u64,
}

/// Accepts every waiting connection on the leader's socket.
pub fn accept_all(listener: &UnixListener, deadline: Deadline) -> Vec<ShmAdmit> {
    let mut out = Vec::new();
    while let Ok((sock, _)) = listener.accept() {
        if sock.set_nonblocking(true).is_ok() {
            out.push(ShmAdmit {
                sock,
                state: AdmitState::AwaitHello { buf: Vec::new() },
                deadline,
                key: 0,
            });
        }
    }
    out
}

impl ShmAdmit {
    /// Sends the segment to the rank admitted.
    pub fn hand_over(&self, segment: BorrowedFd<'_>) -> Result<(), String> {
        match shm::send_with_fd(&self.sock, SEGMENT, segment) {
            Ok(n) if n == SEGMENT.len() => Ok(()),
            Ok(n) => Err(format!("the socket took {n} of {} bytes", SEGMENT.len())),
            Err(e) => Err(format!("passing the segment: {e}")),
        }
    }

    pub fn socket(&self) -> &UnixStream {
        &self.sock
    }

    /// The connection to the member, kept once admitted: it closes with its process.
    pub fn into_socket(self) -> UnixStream {
        self.sock
    }

    /// Its time limit (see [`ShmJoin::deadline`]).
    pub fn deadline(&self) -> Deadline {
        self.deadline
    }

    /// Drives the handshake until the CONFIRM checks out.
    pub fn poll(&mut self, id: &Identity, now: Nanos, nonce: [u8; 16]) -> AdmitProgress {
        if self.deadline.passed(now) {
            return AdmitProgress::Failed(format!(
                "shared-memory handshake did not finish within {} ms",
                self.deadline.limit_ms()
            ));
        }
        loop {
            match std::mem::replace(&mut self.state, AdmitState::Done) {
                AdmitState::AwaitHello { mut buf } => match read_frame(&self.sock, &mut buf) {
                    Ok(false) => {
                        self.state = AdmitState::AwaitHello { buf };
                        return AdmitProgress::Pending;
                    }
                    Err(e) => return AdmitProgress::Failed(format!("shared-memory connection: {e}")),
                    Ok(true) => {
                        // One segment per node: no simultaneous connection to settle.
                        let verdict = accept_hello(id, &buf, nonce, |_| Contention::None);
                        let _ = (&self.sock).write_all(&verdict.ack);
                        match verdict.result {
                            Ok(acc) => self.state = AdmitState::AwaitConfirm { acc, buf: Vec::new() },
                            Err(e) => {
                                return AdmitProgress::Failed(format!(
                                    "refused shared-memory connection: {e}"
                                ))
                            }
                        }
                    }
                },
                AdmitState::AwaitConfirm { acc, mut buf } => {
                    match read_frame(&self.sock, &mut buf) {
                        Ok(false) => {
                            self.state = AdmitState::AwaitConfirm { acc, buf };
                            return AdmitProgress::Pending;
                        }
                        Err(e) => return AdmitProgress::Failed(format!("shared-memory connection: {e}")),
                        Ok(true) => {}
                    }
                    let peer = match acc.handle_confirm(&buf) {
                        Ok(peer) => peer,
                        Err(e) => {
                            return AdmitProgress::Failed(format!("refused shared-memory connection: {e}"))
                        }
                    };
                    return match shm::peer_pid(&self.sock) {
                        Ok(pid) => AdmitProgress::Admitted { peer, pid },
                        Err(e) => AdmitProgress::Failed(format!("rank {peer}'s process id: {e}")),
                    };
                }
                AdmitState::Done => return AdmitProgress::Failed("handshake already finished".into()),
            }
        }
    }
}
