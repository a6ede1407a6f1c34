//! The coordinator: listening sockets, authentication of rank control connections,
//! and the control protocol on top of [`KvState`].
//!
//! Anything that reaches a listening socket is untrusted until it has sent a valid
//! `Hello`: it may send at most [`MAX_HELLO`] bytes, must do so within
//! [`AUTH_TIMEOUT`], and at most [`MAX_PENDING`] plus one per rank such connections
//! are kept (the oldest is dropped for a new one), so a garbage or slow client can never hold up
//! the ranks or grow the launcher's memory.

use crate::kvs::{KvState, ProtocolError};
use crate::poller::{Poller, Token};
use crate::LaunchError;
use net::ConnEntry;
use proto::control::{self as ctl, Decoder, FromCoordinator, ToCoordinator};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Largest first message accepted from an unauthenticated connection (a `Hello` is
/// about 80 bytes).
pub const MAX_HELLO: usize = 256;
/// Time an unauthenticated connection has to send its `Hello`.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(5);
/// Unauthenticated connections kept at once beyond one per rank (every rank may
/// be connecting at the same moment).
pub const MAX_PENDING: usize = 64;

/// What the job loop must know about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Rank authenticated.
    Hello {
        rank: u32,
        pid: u32,
    },
    Abort {
        rank: u32,
        code: i32,
        message: String,
    },
    /// The rank broke the protocol; its connection is closed.
    Protocol(ProtocolError),
    /// An authenticated rank's connection closed.
    Closed {
        rank: u32,
    },
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    rank: Option<u32>,
    /// Bytes of the unauthenticated first message.
    pre: Vec<u8>,
    dec: Decoder,
    out: Vec<u8>,
    out_at: usize,
    writing: bool,
    accepted: Instant,
    dead: bool,
}

pub struct Coordinator {
    job_id: [u8; 16],
    secret: [u8; 32],
    n: u32,
    listeners: Vec<TcpListener>,
    entries: Vec<ConnEntry>,
    conns: HashMap<u64, Conn>,
    next_id: u64,
    by_rank: Vec<Option<u64>>,
    said_hello: Vec<bool>,
    exited: Vec<bool>,
    state: KvState,
    failed: Vec<(u32, String)>,
    /// Why the job is being ended, and its exit code.
    shutdown: Option<(String, i32)>,
    events: Vec<Event>,
}

impl Coordinator {
    /// Binds the listening sockets on every usable local address that the interface
    /// policy (`PONTOON_IF_INCLUDE`/`_EXCLUDE`) allows and builds the connection string.
    /// Works without IPv6 (or without IPv4).
    pub fn bind(job_id: [u8; 16], secret: [u8; 32], n: u32) -> Result<Coordinator, LaunchError> {
        let policy = net::IfPolicy::from_env().map_err(|e| LaunchError::Listen(e.to_string()))?;
        let local = net::iface::allowed_addresses(&net::interfaces(), &policy);
        let net::listen::Listening {
            sockets: listeners,
            entries,
        } = net::listen::listen_all(&local, 0).map_err(LaunchError::Listen)?;
        Ok(Coordinator {
            job_id,
            secret,
            n,
            listeners,
            entries,
            conns: HashMap::new(),
            next_id: 0,
            by_rank: vec![None; n as usize],
            said_hello: vec![false; n as usize],
            exited: vec![false; n as usize],
            state: KvState::new(n),
            failed: Vec::new(),
            shutdown: None,
            events: Vec::new(),
        })
    }

    /// The connection string for `PONTOON_COORD`, best class first.
    pub fn conn_string(&self) -> String {
        net::connstr::format(&self.entries)
    }

    /// The addresses the coordinator listens on, and its IPv4 and IPv6 ports (0: none).
    pub fn addresses(&self) -> (Vec<std::net::IpAddr>, (u16, u16)) {
        let port = |v4: bool| {
            self.entries
                .iter()
                .find(|e| e.addr.is_ipv4() == v4)
                .map_or(0, |e| e.addr.port())
        };
        let ips = self.entries.iter().map(|e| e.addr.ip()).collect();
        (ips, (port(true), port(false)))
    }

    pub(crate) fn register(&self, poller: &Poller) -> io::Result<()> {
        for (i, l) in self.listeners.iter().enumerate() {
            poller.add(l, Token::Listener(i as u32), false)?;
        }
        Ok(())
    }

    pub fn said_hello(&self, rank: u32) -> bool {
        self.said_hello[rank as usize]
    }

    pub fn finalized(&self, rank: u32) -> bool {
        self.state.finalized(rank)
    }

    /// Events produced since the last call.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Earliest authentication deadline, if a connection is pending.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.conns
            .values()
            .filter(|c| c.rank.is_none())
            .map(|c| c.accepted + AUTH_TIMEOUT)
            .min()
    }

    pub(crate) fn on_listener(&mut self, i: u32, poller: &Poller, now: Instant) {
        if i as usize >= self.listeners.len() {
            return;
        }
        loop {
            let (stream, peer) = match self.listeners[i as usize].accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // WouldBlock ends the batch; EMFILE and the like must not end the job.
                    if e.kind() != io::ErrorKind::WouldBlock {
                        tracing::warn!("accepting a control connection failed: {e}");
                    }
                    return;
                }
            };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let _ = stream.set_nodelay(true);
            self.make_room(poller);
            let id = self.next_id;
            self.next_id += 1;
            if let Err(e) = poller.add(&stream, Token::Conn(id), false) {
                tracing::warn!("cannot watch control connection from {peer}: {e}");
                continue;
            }
            tracing::debug!(%peer, id, "control connection accepted");
            let conn = Conn {
                stream,
                peer,
                rank: None,
                pre: Vec::new(),
                dec: Decoder::default(),
                out: Vec::new(),
                out_at: 0,
                writing: false,
                accepted: now,
                dead: false,
            };
            self.conns.insert(id, conn);
        }
    }

    fn pending(&self) -> Vec<(Instant, u64)> {
        let mut v: Vec<(Instant, u64)> = self
            .conns
            .iter()
            .filter(|(_, c)| c.rank.is_none())
            .map(|(id, c)| (c.accepted, *id))
            .collect();
        v.sort();
        v
    }

    /// Keeps the unauthenticated connections below the limit. Ranks connecting all
    /// at once may have sent their Hello without our having read it yet, so pending
    /// connections are read first; only then is the oldest one dropped.
    fn make_room(&mut self, poller: &Poller) {
        let limit = MAX_PENDING + self.n as usize;
        if self.pending().len() < limit {
            return;
        }
        for (_, id) in self.pending() {
            self.read_conn(id, poller);
        }
        self.sweep(poller);
        let pending = self.pending();
        if pending.len() >= limit {
            self.refuse(
                pending[0].1,
                poller,
                "dropped: too many unauthenticated connections",
                false,
            );
        }
    }

    /// Closes connection `id` and logs why; `reply` sends the reason first (only to a
    /// client that sent a well-formed `Hello`, so garbage gets no answer).
    fn refuse(&mut self, id: u64, poller: &Poller, why: &str, reply: bool) {
        let Some(mut c) = self.conns.remove(&id) else {
            return;
        };
        tracing::warn!("refused a control connection from {}: {why}", c.peer);
        if reply {
            // A fresh socket's buffer always takes this small message.
            let _ = c.stream.write_all(&ctl::encode(&FromCoordinator::Shutdown {
                reason: why.to_string(),
                code: 1,
            }));
        }
        poller.delete(&c.stream);
    }

    pub(crate) fn on_conn(&mut self, id: u64, read: bool, write: bool, poller: &Poller) {
        if write {
            self.flush(id, poller);
        }
        if read {
            self.read_conn(id, poller);
        }
        self.sweep(poller);
    }

    /// Reads what a connection has and handles it (bounded per call, so one busy
    /// connection cannot starve the others; epoll reports it again).
    fn read_conn(&mut self, id: u64, poller: &Poller) {
        let mut buf = [0u8; 64 * 1024];
        for _ in 0..16 {
            let Some(c) = self.conns.get_mut(&id) else { return };
            // Before authentication read only what a Hello may take.
            let cap = if c.rank.is_none() {
                (MAX_HELLO + 1).saturating_sub(c.pre.len()).max(1)
            } else {
                buf.len()
            };
            let n = match c.stream.read(&mut buf[..cap]) {
                Ok(0) => {
                    self.closed(id, poller);
                    return;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.closed(id, poller);
                    return;
                }
            };
            if c.rank.is_none() {
                c.pre.extend_from_slice(&buf[..n]);
                if !self.try_authenticate(id, poller) {
                    return;
                }
            } else {
                c.dec.push(&buf[..n]);
                self.handle_messages(id, poller);
            }
        }
    }

    fn closed(&mut self, id: u64, poller: &Poller) {
        let Some(c) = self.conns.remove(&id) else { return };
        poller.delete(&c.stream);
        match c.rank {
            Some(rank) => {
                tracing::debug!(rank, "control connection closed");
                self.by_rank[rank as usize] = None;
                self.events.push(Event::Closed { rank });
            }
            None => tracing::debug!(peer = %c.peer, "unauthenticated connection closed"),
        }
    }

    /// Checks the first message once it is complete. Returns false when the
    /// connection is gone or still incomplete.
    fn try_authenticate(&mut self, id: u64, poller: &Poller) -> bool {
        let c = self.conns.get_mut(&id).expect("caller checked");
        if c.pre.len() < 4 {
            return false;
        }
        let len = u32::from_le_bytes([c.pre[0], c.pre[1], c.pre[2], c.pre[3]]) as usize;
        if len > MAX_HELLO - 4 {
            self.refuse(
                id,
                poller,
                &format!("first message claims {len} bytes; not a pontoon rank"),
                false,
            );
            return false;
        }
        if c.pre.len() < 4 + len {
            return false;
        }
        let mut d = Decoder::default();
        d.push(&c.pre[..4 + len]);
        let rest = c.pre.split_off(4 + len);
        let (job_id, rank, pid, nonce, mac) = match d.next::<ToCoordinator>() {
            Ok(Some(ToCoordinator::Hello {
                job_id,
                rank,
                pid,
                nonce,
                mac,
            })) => (job_id, rank, pid, nonce, mac),
            Ok(Some(_)) => {
                self.refuse(id, poller, "sent a request before Hello", false);
                return false;
            }
            Ok(None) | Err(_) => {
                self.refuse(id, poller, "sent garbage instead of Hello", false);
                return false;
            }
        };
        let why = if job_id != self.job_id {
            Some("Hello for another job (wrong job id)".to_string())
        } else if !ctl::mac_eq(&mac, &ctl::hello_mac(&self.secret, &job_id, rank, &nonce)) {
            Some(format!(
                "Hello as rank {rank} failed authentication (wrong job secret)"
            ))
        } else if rank >= self.n {
            Some(format!("Hello as rank {rank}, but the job has {} ranks", self.n))
        } else if self.said_hello[rank as usize] {
            Some(format!("Hello as rank {rank}, which is already connected"))
        } else if self.exited[rank as usize] {
            Some(format!("Hello as rank {rank}, which has already exited"))
        } else {
            None
        };
        if let Some(why) = why {
            self.refuse(id, poller, &why, true);
            return false;
        }
        let c = self.conns.get_mut(&id).expect("still there");
        tracing::debug!(rank, pid, peer = %c.peer, "rank authenticated");
        c.rank = Some(rank);
        c.dec.push(&rest);
        c.pre = Vec::new();
        self.by_rank[rank as usize] = Some(id);
        self.said_hello[rank as usize] = true;
        let seen_from = c.peer;
        let mac = ctl::welcome_mac(&self.secret, &job_id, rank, &nonce, &seen_from);
        self.send_conn(id, &FromCoordinator::Welcome { mac, seen_from }, poller);
        // A late rank learns what the others already know.
        for (r, cause) in self.failed.clone() {
            self.send_conn(id, &FromCoordinator::PeerFailed { rank: r, cause }, poller);
        }
        if let Some((reason, code)) = self.shutdown.clone() {
            self.send_conn(id, &FromCoordinator::Shutdown { reason, code }, poller);
        }
        self.events.push(Event::Hello { rank, pid });
        self.handle_messages(id, poller);
        true
    }

    fn handle_messages(&mut self, id: u64, poller: &Poller) {
        loop {
            let Some(c) = self.conns.get_mut(&id) else { return };
            let rank = c.rank.expect("authenticated");
            let msg = match c.dec.next::<ToCoordinator>() {
                Ok(Some(m)) => m,
                Ok(None) => return,
                Err(e) => {
                    return self.protocol_error(
                        id,
                        ProtocolError {
                            rank,
                            why: e.to_string(),
                        },
                        poller,
                    )
                }
            };
            let result = match msg {
                ToCoordinator::Hello { .. } => Err(ProtocolError {
                    rank,
                    why: "sent a second Hello".into(),
                }),
                ToCoordinator::Put { key, value } => self.state.put(rank, key, value),
                ToCoordinator::Fence { epoch } => self.state.fence(rank, epoch).map(|out| {
                    if let Some(m) = out {
                        self.broadcast(&m, poller);
                    }
                }),
                ToCoordinator::Finalize => {
                    if let Some(m) = self.state.finalize(rank) {
                        self.broadcast(&m, poller);
                    }
                    Ok(())
                }
                ToCoordinator::Abort { code, message } => {
                    self.events.push(Event::Abort { rank, code, message });
                    Ok(())
                }
                ToCoordinator::Unreachable { rank: peer, cause } => {
                    let msg = FromCoordinator::PeerFailed {
                        rank,
                        cause: format!("rank {rank} could not reach this rank and gave up: {cause}"),
                    };
                    if let Some(to) = self.by_rank.get(peer as usize).copied().flatten() {
                        self.send_conn(to, &msg, poller);
                    }
                    Ok(())
                }
            };
            if let Err(e) = result {
                return self.protocol_error(id, e, poller);
            }
        }
    }

    fn protocol_error(&mut self, id: u64, e: ProtocolError, poller: &Poller) {
        if let Some(c) = self.conns.remove(&id) {
            poller.delete(&c.stream);
            if let Some(r) = c.rank {
                self.by_rank[r as usize] = None;
            }
        }
        self.events.push(Event::Protocol(e));
    }

    fn send_conn(&mut self, id: u64, msg: &FromCoordinator, poller: &Poller) {
        self.send_encoded(id, &ctl::encode(msg), poller);
    }

    fn send_encoded(&mut self, id: u64, bytes: &[u8], poller: &Poller) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.out.extend_from_slice(bytes);
            self.flush(id, poller);
        }
    }

    /// Sends `msg` to every connected rank, encoded once: a fence's answer holds every
    /// rank's card, so encoding it per rank cost the launcher time in the square of the
    /// ranks.
    fn broadcast(&mut self, msg: &FromCoordinator, poller: &Poller) {
        let bytes = ctl::encode(msg);
        let ids: Vec<u64> = self.by_rank.iter().flatten().copied().collect();
        for id in ids {
            self.send_encoded(id, &bytes, poller);
        }
        self.sweep(poller);
    }

    /// Writes what the socket takes now; watches for writability while output remains.
    fn flush(&mut self, id: u64, poller: &Poller) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        while c.out_at < c.out.len() {
            match c.stream.write(&c.out[c.out_at..]) {
                Ok(0) => break,
                Ok(n) => c.out_at += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    c.dead = true;
                    return;
                }
            }
        }
        if c.out_at == c.out.len() {
            c.out.clear();
            c.out_at = 0;
        }
        let want = !c.out.is_empty();
        if want != c.writing && poller.modify(&c.stream, Token::Conn(id), want).is_ok() {
            c.writing = want;
        }
    }

    fn sweep(&mut self, poller: &Poller) {
        let dead: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.dead)
            .map(|(id, _)| *id)
            .collect();
        for id in dead {
            self.closed(id, poller);
        }
    }

    /// Drops unauthenticated connections past their deadline.
    pub(crate) fn expire(&mut self, now: Instant, poller: &Poller) {
        let late: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.rank.is_none() && now >= c.accepted + AUTH_TIMEOUT)
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            self.refuse(id, poller, &format!("no Hello within {AUTH_TIMEOUT:?}"), false);
        }
    }

    /// Reads whatever `rank` sent before it exited, so an `Abort` or `Finalize`
    /// written just before the exit is seen before the exit is judged.
    pub(crate) fn drain_rank(&mut self, rank: u32, poller: &Poller) {
        if let Some(id) = self.by_rank[rank as usize] {
            self.read_conn(id, poller);
            self.sweep(poller);
        }
    }

    pub(crate) fn rank_exited(&mut self, rank: u32) {
        self.exited[rank as usize] = true;
    }

    /// Tells every other connected rank (and ranks that connect later) that `rank` failed.
    pub(crate) fn peer_failed(&mut self, rank: u32, cause: &str, poller: &Poller) {
        self.failed.push((rank, cause.to_string()));
        let msg = FromCoordinator::PeerFailed {
            rank,
            cause: cause.to_string(),
        };
        let ids: Vec<u64> = self
            .by_rank
            .iter()
            .enumerate()
            .filter(|(r, _)| *r as u32 != rank)
            .filter_map(|(_, id)| *id)
            .collect();
        for id in ids {
            self.send_conn(id, &msg, poller);
        }
        self.sweep(poller);
    }

    /// Tells every connected rank (and later ones) that the job is being ended with `code`.
    pub(crate) fn shutdown(&mut self, reason: &str, code: i32, poller: &Poller) {
        if self.shutdown.is_none() {
            self.shutdown = Some((reason.to_string(), code));
            self.broadcast(
                &FromCoordinator::Shutdown {
                    reason: reason.to_string(),
                    code,
                },
                poller,
            );
        }
    }
}

#[cfg(test)]
#[path = "coordinator_tests.rs"]
mod tests;
