//! `pontoon relay`: the daemon on a cluster's front-end node that forwards incoming
//! streams to the ranks of its cluster (seed 001's stream relay daemon; `docs/relay.md`).
//!
//! Ranks of the cluster register (and stay registered while their connection is open);
//! a requester elsewhere proves membership of the same job and names a rank; the relay
//! connects to that rank and from then on moves bytes both ways in the kernel
//! (`splice(2)` through a pipe), never through a user-space buffer. The job's end-to-end
//! handshake runs through the joined streams. What the relay accepts is decided in
//! `registry.rs`; this file is the I/O around it.
//!
//! Threads: one accepting per listening socket, one per connection in its first exchange
//! (bounded by [`Limits::handshakes`]; more are closed at once), one per registration
//! (it waits for the connection to close), two per forwarded stream (one per direction,
//! blocked in `splice`).
#![forbid(unsafe_code)]

mod pump;
pub mod registry;

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

pub use proto::wire::relay::VERSION as PROTOCOL_VERSION;
use proto::wire::relay::{RelayFrame, RelayRepr, RelayStatus, FRAME_LEN, VERSION};
pub use registry::Limits;
use registry::{Refusal, Registry};

/// Where `pontoon relay` listens unless told otherwise.
pub const DEFAULT_PORT: u16 = 7426;

/// A requester or rank has this long to send its frame after the challenge.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the relay tries to reach a registered rank.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// What a relay did so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Registrations accepted.
    pub registrations: u64,
    /// Streams joined.
    pub streams: u64,
    /// Requests and registrations refused (any verdict but accepted).
    pub refused: u64,
    /// Connections closed without a verdict: garbage, silence, or over the handshake limit.
    pub dropped: u64,
    /// Bytes moved between joined streams, both directions.
    pub bytes: u64,
}

#[derive(Default)]
struct Counters {
    registrations: AtomicU64,
    streams: AtomicU64,
    refused: AtomicU64,
    dropped: AtomicU64,
    bytes: AtomicU64,
}

struct Shared {
    registry: Mutex<Registry>,
    limits: Limits,
    handshakes: AtomicUsize,
    /// Connections in their first exchange per remote address.
    per_host: Mutex<HashMap<IpAddr, usize>>,
    counters: Counters,
    stop: AtomicBool,
}

impl Shared {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        // A thread that panicked while holding the lock left consistent data (every
        // method completes its change before returning): keep serving.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A relay bound to its listening sockets, not yet serving.
pub struct Relay {
    listeners: Vec<TcpListener>,
    shared: Arc<Shared>,
}

/// A relay serving in the background (tests, the launcher): stops when dropped.
pub struct RelayHandle {
    addrs: Vec<SocketAddr>,
    shared: Arc<Shared>,
}

impl Relay {
    /// Listens on every address in `addrs` (one socket per address family is enough:
    /// `[::]:PORT` with `IPV6_V6ONLY` and `0.0.0.0:PORT`). Port 0 picks a free port, the
    /// same for every address (the launcher starts relays so; one port is simpler to
    /// announce and to open in a firewall).
    pub fn bind(addrs: &[SocketAddr], limits: Limits) -> io::Result<Relay> {
        let mut last = None;
        for _ in 0..16 {
            match Self::bind_once(addrs) {
                Ok(listeners) => {
                    return Ok(Relay {
                        listeners,
                        shared: Arc::new(Shared {
                            registry: Mutex::new(Registry::default()),
                            limits,
                            handshakes: AtomicUsize::new(0),
                            per_host: Mutex::new(HashMap::new()),
                            counters: Counters::default(),
                            stop: AtomicBool::new(false),
                        }),
                    })
                }
                // The port picked for the first address was taken in another family.
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && addrs.iter().all(|a| a.port() == 0) => {
                    last = Some(e)
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free port")))
    }

    fn bind_once(addrs: &[SocketAddr]) -> io::Result<Vec<TcpListener>> {
        let mut listeners: Vec<TcpListener> = Vec::new();
        for a in addrs {
            let mut a = *a;
            if a.port() == 0 {
                if let Some(first) = listeners.first() {
                    a.set_port(first.local_addr()?.port());
                }
            }
            let domain = socket2::Domain::for_address(a);
            let s = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
            s.set_reuse_address(true)?;
            if a.is_ipv6() {
                s.set_only_v6(true)?;
            }
            s.bind(&a.into())
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {a}: {e}")))?;
            s.listen(1024)?;
            listeners.push(TcpListener::from(s));
        }
        Ok(listeners)
    }

    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Where others can reach this relay: a concrete listening address as it is; for a
    /// wildcard one, every usable address of this host's interfaces in its family (no
    /// loopback, no link-local), best class first. What the launcher hands the ranks.
    pub fn reachable_addrs(&self) -> Vec<SocketAddr> {
        let host = net::iface::usable_addresses(&net::interfaces());
        let mut out = Vec::new();
        for l in self.local_addrs() {
            if !l.ip().is_unspecified() {
                out.push(l);
                continue;
            }
            for (ip, class, _) in &host {
                if ip.is_ipv4() == l.is_ipv4() && *class != net::AddrClass::Loopback {
                    out.push(SocketAddr::new(*ip, l.port()));
                }
            }
        }
        out
    }

    /// Serves in background threads.
    pub fn spawn(self) -> RelayHandle {
        let addrs = self.local_addrs();
        let shared = self.shared.clone();
        for l in self.listeners {
            let shared = shared.clone();
            thread::spawn(move || accept_loop(l, shared));
        }
        RelayHandle { addrs, shared }
    }

    /// Serves until the process ends, printing a status line every `status_every`.
    pub fn run(self, status_every: Option<Duration>) -> ! {
        let handle = self.spawn();
        loop {
            thread::sleep(status_every.unwrap_or(Duration::from_secs(3600)));
            if status_every.is_some() {
                let (jobs, ranks, streams) = handle.counts();
                let s = handle.stats();
                eprintln!(
                    "pontoon relay: {jobs} jobs, {ranks} ranks registered, {streams} streams open; \
                     {} streams and {} bytes forwarded, {} refused, {} dropped so far",
                    s.streams, s.bytes, s.refused, s.dropped
                );
            }
        }
    }
}

impl RelayHandle {
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        Stats {
            registrations: c.registrations.load(Ordering::Relaxed),
            streams: c.streams.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
        }
    }

    /// (jobs, registered ranks, open streams).
    pub fn counts(&self) -> (usize, usize, usize) {
        self.shared.registry().counts()
    }
}

impl Drop for RelayHandle {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accepting threads so that they see the flag.
        for a in &self.addrs {
            let _ = TcpStream::connect_timeout(a, Duration::from_millis(200));
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let conn = listener.accept();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let (sock, peer) = match conn {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("relay: accept failed: {e}");
                thread::sleep(Duration::from_millis(10)); // e.g. out of file descriptors
                continue;
            }
        };
        // Bounded: a flood of connections that never speak costs at most this many
        // threads for at most the handshake timeout each, and one host cannot take all
        // of them; the rest are closed at once.
        let Some(pending) = Pending::take(&shared, peer.ip()) else {
            shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let shared = shared.clone();
        thread::spawn(move || {
            if let Err(e) = serve(sock, peer, &shared, pending) {
                shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("relay: connection from {peer} dropped: {e}");
            }
        });
    }
}

/// One connection in its first exchange, counted against [`Limits::handshakes`] and
/// [`Limits::handshakes_per_host`] until it is dropped (when the connection has its
/// verdict, or fails).
struct Pending {
    shared: Arc<Shared>,
    ip: IpAddr,
}

impl Pending {
    fn take(shared: &Arc<Shared>, ip: IpAddr) -> Option<Pending> {
        let mut hosts = shared.per_host.lock().unwrap_or_else(|e| e.into_inner());
        let mine = hosts.entry(ip).or_insert(0);
        if *mine >= shared.limits.handshakes_per_host
            || shared.handshakes.load(Ordering::SeqCst) >= shared.limits.handshakes
        {
            if *mine == 0 {
                hosts.remove(&ip);
            }
            return None;
        }
        *mine += 1;
        shared.handshakes.fetch_add(1, Ordering::SeqCst);
        Some(Pending {
            shared: shared.clone(),
            ip,
        })
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.shared.handshakes.fetch_sub(1, Ordering::SeqCst);
        let mut hosts = self.shared.per_host.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = hosts.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                hosts.remove(&self.ip);
            }
        }
    }
}

fn serve(mut sock: TcpStream, peer: SocketAddr, shared: &Shared, pending: Pending) -> io::Result<()> {
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    sock.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut nonce = [0u8; 32];
    getrandom::fill(&mut nonce).map_err(|e| io::Error::other(format!("no random numbers: {e}")))?;
    sock.write_all(
        &RelayRepr::Challenge {
            version: VERSION,
            nonce,
        }
        .emit(),
    )?;
    let mut buf = [0u8; FRAME_LEN];
    sock.read_exact(&mut buf)?;
    let frame =
        RelayFrame::new_checked(&buf[..]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let limits = &shared.limits;
    match RelayRepr::parse(&frame) {
        RelayRepr::Register { version, .. } | RelayRepr::Connect { version, .. } if version != VERSION => {
            refuse(
                &mut sock,
                peer,
                shared,
                (
                    RelayStatus::Version,
                    format!("this relay speaks version {VERSION}"),
                ),
            )
        }
        RelayRepr::Register {
            job_tag,
            rank,
            port,
            relay_key,
            ..
        } => {
            // Forward only to the host the registration came from: a registration cannot
            // point the relay at anyone else.
            let at = SocketAddr::new(peer.ip(), port);
            let token = match shared.registry().register(job_tag, rank, relay_key, at, limits) {
                Ok(t) => t,
                Err(r) => return refuse(&mut sock, peer, shared, r),
            };
            shared.counters.registrations.fetch_add(1, Ordering::Relaxed);
            let r = accept(&mut sock, peer);
            drop(pending);
            if r.is_ok() {
                // Registered while this connection lives; a rank says nothing more on it.
                if sock.set_read_timeout(None).is_ok() {
                    let _ = sock.read(&mut [0u8; 1]);
                }
            }
            shared.registry().unregister(&job_tag, rank, token);
            r
        }
        RelayRepr::Connect {
            job_tag, rank, proof, ..
        } => {
            let target = match shared
                .registry()
                .open_stream(&job_tag, rank, &nonce, &proof, limits)
            {
                Ok(a) => a,
                Err(r) => return refuse(&mut sock, peer, shared, r),
            };
            let joined = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT);
            let r = match joined {
                Err(e) => refuse(
                    &mut sock,
                    peer,
                    shared,
                    (RelayStatus::Unreachable, format!("rank {rank} at {target}: {e}")),
                ),
                Ok(to) => accept(&mut sock, peer).and_then(|_| {
                    drop(pending);
                    shared.counters.streams.fetch_add(1, Ordering::Relaxed);
                    join(sock, to, &shared.counters.bytes)
                }),
            };
            shared.registry().stream_closed(&job_tag);
            r
        }
        RelayRepr::Forward {
            job_tag,
            rank,
            proof,
            next,
            ..
        } => {
            let key = match shared
                .registry()
                .open_forward(&job_tag, rank, &nonce, &proof, next, limits)
            {
                Ok(k) => k,
                Err(r) => return refuse(&mut sock, peer, shared, r),
            };
            let r = match onward(next, &job_tag, rank, &key) {
                Err(refusal) => refuse(&mut sock, peer, shared, refusal),
                Ok(to) => accept(&mut sock, peer).and_then(|_| {
                    drop(pending);
                    shared.counters.streams.fetch_add(1, Ordering::Relaxed);
                    join(sock, to, &shared.counters.bytes)
                }),
            };
            shared.registry().stream_closed(&job_tag);
            r
        }
        RelayRepr::Challenge { .. } | RelayRepr::Verdict { .. } => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a relay frame only a relay sends",
        )),
    }
}

/// The second hop of a two-proxy path: asks the relay at `next` for `rank`, proving
/// membership of the job with its relay key (held from the job's registrations here).
/// A refusal there is passed back with its status.
fn onward(next: SocketAddr, tag: &[u8; 16], rank: u32, key: &[u8; 32]) -> Result<TcpStream, Refusal> {
    let unreachable = |e: &dyn std::fmt::Display| (RelayStatus::Unreachable, format!("relay {next}: {e}"));
    let mut s = TcpStream::connect_timeout(&next, CONNECT_TIMEOUT).map_err(|e| unreachable(&e))?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .and_then(|_| s.set_write_timeout(Some(HANDSHAKE_TIMEOUT)))
        .map_err(|e| unreachable(&e))?;
    let mut frame = [0u8; FRAME_LEN];
    s.read_exact(&mut frame).map_err(|e| unreachable(&e))?;
    let nonce = proto::wire::relay::challenge_nonce(&frame).map_err(|e| unreachable(&e))?;
    let request = RelayRepr::Connect {
        version: VERSION,
        job_tag: *tag,
        rank,
        proof: proto::wire::relay::connect_proof(key, &nonce, tag, rank),
    };
    s.write_all(&request.emit()).map_err(|e| unreachable(&e))?;
    s.read_exact(&mut frame).map_err(|e| unreachable(&e))?;
    let verdict = RelayFrame::new_checked(&frame[..]).map_err(|e| unreachable(&e))?;
    match RelayRepr::parse(&verdict) {
        RelayRepr::Verdict {
            status: RelayStatus::Accepted,
            ..
        } => Ok(s),
        RelayRepr::Verdict { status, reason, .. } => Err((status, format!("{next}: {reason}"))),
        _ => Err(unreachable(&"not a verdict")),
    }
}

fn accept(sock: &mut TcpStream, peer: SocketAddr) -> io::Result<()> {
    let verdict = RelayRepr::Verdict {
        version: VERSION,
        status: RelayStatus::Accepted,
        observed: Some(peer),
        reason: String::new(),
    };
    sock.write_all(&verdict.emit())
}

fn refuse(
    sock: &mut TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    (status, reason): Refusal,
) -> io::Result<()> {
    shared.counters.refused.fetch_add(1, Ordering::Relaxed);
    let verdict = RelayRepr::Verdict {
        version: VERSION,
        status,
        observed: Some(peer),
        reason,
    };
    sock.write_all(&verdict.emit())?;
    let _ = sock.shutdown(Shutdown::Write);
    Ok(())
}

/// Moves bytes both ways until both directions ended.
fn join(a: TcpStream, b: TcpStream, bytes: &AtomicU64) -> io::Result<()> {
    for s in [&a, &b] {
        s.set_read_timeout(None)?;
        s.set_write_timeout(None)?;
        s.set_nodelay(true)?;
        // A peer that vanishes without a FIN is noticed eventually.
        let _ = socket2::SockRef::from(s).set_keepalive(true);
    }
    let (a2, b2) = (a.try_clone()?, b.try_clone()?);
    let back = thread::scope(|scope| {
        let other = scope.spawn(|| pump::pump(&b2, &a2, bytes));
        let here = pump::pump(&a, &b, bytes);
        let there = other
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("pump panicked")));
        here.and(there)
    });
    back
}
