//! The rank side of the control channel to the launcher's coordinator
//! (messages, framing and MACs are in [`proto::control`]).
//!
//! [`ControlClient::connect`] tries the coordinator's addresses best class first,
//! authenticates both ways, and leaves a non-blocking socket the event loop can poll
//! ([`ControlClient::as_fd`], [`ControlClient::poll_event`]). The blocking calls
//! ([`ControlClient::fence`], [`ControlClient::finalize`]) queue every other event
//! that arrives meanwhile, so `poll_event` later returns it in order.

use crate::boot::jobenv::JobEnv;
use crate::clock;
use net::{AddrClass, ConnEntry};
use proto::control::{self as ctl, Decoder, FromCoordinator, ToCoordinator};
use proto::dial::Deadline;
use rustix::event::{PollFd, PollFlags};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

/// How long [`ControlClient::abort`] waits for the coordinator to take note.
const ABORT_WAIT: Duration = Duration::from_secs(2);

/// One failed attempt to reach the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub addr: SocketAddr,
    pub class: AddrClass,
    pub error: String,
}

fn list_attempts(a: &[Attempt]) -> String {
    a.iter()
        .map(|a| format!("\n  {} ({}): {}", a.addr, a.class, a.error))
        .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(
        "none of the launcher's addresses ({coord}) is of an address class this host has ({local}); \
         the launcher's host is not reachable from here"
    )]
    NoCommonAddress { coord: String, local: String },
    #[error(
        "cannot reach the launcher (pontoon run); tried:{}\ncheck that it is still running and that \
         this host can reach one of those addresses",
        list_attempts(.0)
    )]
    Unreachable(Vec<Attempt>),
    #[error("the launcher is gone (its control connection closed): the job is over")]
    LauncherGone,
    #[error("the launcher ended the job: {0}")]
    Shutdown(JobEnded),
    #[error("control connection to the launcher failed: {0}")]
    Io(#[from] io::Error),
    #[error("the launcher sent a malformed control message ({0}); is it the same pontoon version?")]
    Protocol(String),
}

/// The coordinator ended the job: why, and the exit code the ranks end with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnded {
    pub reason: String,
    pub code: i32,
}

impl std::fmt::Display for JobEnded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// An authenticated control connection to the coordinator.
pub struct ControlClient {
    stream: TcpStream,
    peer: SocketAddr,
    /// This end of the connection as the coordinator saw it (behind NAT: the NAT's address).
    seen_from: SocketAddr,
    rank: u32,
    decoder: Decoder,
    /// Events that arrived while a blocking call waited for something else.
    queued: VecDeque<FromCoordinator>,
    eof: bool,
    /// Read buffer, allocated (and zeroed) once: the event loop reads often.
    rx: Vec<u8>,
}

/// Why one attempt at an address failed, and whether another may succeed: an address
/// that never answered is tried again while the wait allows (on a lossy path one lost
/// SYN or Hello is enough for silence), one that refused or answered wrongly is not.
#[derive(Debug)]
struct Miss {
    why: String,
    silent: bool,
}

impl Miss {
    fn silence(timeout: Duration) -> Miss {
        Miss {
            why: format!("no answer within {timeout:?}"),
            silent: true,
        }
    }
}

impl From<String> for Miss {
    fn from(why: String) -> Miss {
        Miss { why, silent: false }
    }
}

impl From<&str> for Miss {
    fn from(why: &str) -> Miss {
        why.to_string().into()
    }
}

fn describe(e: &io::Error, timeout: Duration) -> Miss {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Miss::silence(timeout),
        io::ErrorKind::ConnectionRefused => "connection refused (nothing listens there)".into(),
        _ => e.to_string().into(),
    }
}

const REFUSED: &str = "closed the connection without a Welcome: it refused this rank (wrong job id or \
                       secret, or this rank is already connected)";

/// An authenticated control connection: the stream, the decoder (which may already hold
/// messages sent right after `Welcome`), and the address the coordinator saw it come from.
type Authenticated = (TcpStream, Decoder, SocketAddr);

/// Connects to `addr` and authenticates.
fn attempt(env: &JobEnv, addr: SocketAddr, timeout: Duration) -> Result<Authenticated, Miss> {
    let deadline = Deadline::after(clock::now(), clock::nanos(timeout));
    let s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| describe(&e, timeout))?;
    authenticate(env, s, deadline, timeout)
}

/// Reaches the coordinator through the relay at `relay` (it registered there, as
/// [`transport::relay::COORDINATOR`]) and authenticates: for ranks with no way out but
/// their site's relay.
fn attempt_via_relay(env: &JobEnv, relay: SocketAddr, timeout: Duration) -> Result<Authenticated, String> {
    let deadline = Deadline::after(clock::now(), clock::nanos(timeout));
    let s = transport::relay::dial(relay, None, &env.secret, transport::relay::COORDINATOR, timeout)
        .map_err(|e| format!("through this relay: {e}"))?;
    authenticate(env, s, deadline, timeout).map_err(|m| m.why)
}

/// Says Hello on `s` and waits for the coordinator's Welcome until `deadline`.
fn authenticate(
    env: &JobEnv,
    mut s: TcpStream,
    deadline: Deadline,
    timeout: Duration,
) -> Result<Authenticated, Miss> {
    let remaining = || {
        deadline
            .remaining(clock::now())
            .map(clock::duration)
            .ok_or_else(|| Miss::silence(timeout))
    };
    let _ = s.set_nodelay(true);
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(|e| format!("no random numbers for the nonce: {e}"))?;
    let hello = ToCoordinator::Hello {
        job_id: env.job_id,
        rank: env.rank,
        pid: std::process::id(),
        nonce,
        mac: ctl::hello_mac(&env.secret, &env.job_id, env.rank, &nonce),
    };
    s.set_write_timeout(Some(remaining()?))
        .map_err(|e| e.to_string())?;
    s.write_all(&ctl::encode(&hello))
        .map_err(|e| describe(&e, timeout))?;
    let mut decoder = Decoder::default();
    let mut buf = [0u8; 4096];
    loop {
        match decoder.next::<FromCoordinator>() {
            Err(e) => return Err(format!("answered with garbage ({e}): not a pontoon coordinator").into()),
            Ok(Some(FromCoordinator::Welcome { mac, seen_from })) => {
                let want = ctl::welcome_mac(&env.secret, &env.job_id, env.rank, &nonce, &seen_from);
                if !ctl::mac_eq(&mac, &want) {
                    return Err("answered with a wrong MAC: the coordinator of another job".into());
                }
                return Ok((s, decoder, seen_from));
            }
            Ok(Some(FromCoordinator::Shutdown { reason, .. })) => {
                return Err(format!("refused this rank: {reason}").into())
            }
            Ok(Some(other)) => return Err(format!("answered {other:?} instead of Welcome").into()),
            Ok(None) => {}
        }
        s.set_read_timeout(Some(remaining()?))
            .map_err(|e| e.to_string())?;
        match s.read(&mut buf) {
            // A close before our Hello was read arrives as a reset: the same refusal.
            Ok(0) => return Err(REFUSED.into()),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Err(REFUSED.into()),
            Ok(n) => decoder.push(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(describe(&e, timeout)),
        }
    }
}

impl ControlClient {
    /// Connects to the coordinator named in `env`, trying its addresses worth trying from
    /// this host (`net::paths::worth_trying`), best first, each for at most
    /// `attempt_timeout` (TCP connect plus authentication), once. The error lists every
    /// address tried and why it failed.
    pub fn connect(env: &JobEnv, attempt_timeout: Duration) -> Result<ControlClient, ControlError> {
        Self::connect_from(
            env,
            &net::local_addresses(),
            &[],
            attempt_timeout,
            attempt_timeout,
        )
    }

    /// As [`ControlClient::connect`], with this host's addresses already discovered
    /// (a rank discovers them once and uses them for its listeners too).
    /// Addresses that stay silent are tried again until `patience` is over
    /// ([`ControlClient::connect_to`]). When no address of the coordinator answers, it is
    /// tried through each of `relays` (`PONTOON_RELAYS`), where the launcher registered it.
    pub fn connect_from(
        env: &JobEnv,
        local: &[(std::net::IpAddr, AddrClass, String)],
        relays: &[Vec<SocketAddr>],
        attempt_timeout: Duration,
        patience: Duration,
    ) -> Result<ControlClient, ControlError> {
        let mut order = net::client_order(&env.coord, local);
        if order.is_empty() {
            if !local.is_empty() {
                let classes: Vec<String> = local.iter().map(|(a, c, i)| format!("{a} {c} on {i}")).collect();
                return Err(ControlError::NoCommonAddress {
                    coord: net::connstr::format(&env.coord),
                    local: classes.join(", "),
                });
            }
            // Interface discovery found nothing (a restricted sandbox?): try everything.
            order = env.coord.clone();
        }
        match Self::connect_to(env, &order, attempt_timeout, patience) {
            Err(ControlError::Unreachable(mut failed)) if !relays.is_empty() => {
                Self::connect_through_relays(env, relays, attempt_timeout, &mut failed)
                    .unwrap_or(Err(ControlError::Unreachable(failed)))
            }
            other => other,
        }
    }

    /// Tries the coordinator through every relay's globally unique addresses; `None`
    /// when none led there (each failure is added to `failed`).
    fn connect_through_relays(
        env: &JobEnv,
        relays: &[Vec<SocketAddr>],
        attempt_timeout: Duration,
        failed: &mut Vec<Attempt>,
    ) -> Option<Result<ControlClient, ControlError>> {
        let addrs = relays
            .iter()
            .flatten()
            .filter(|a| net::card::globally_unique(a.ip()));
        for &relay in addrs {
            match attempt_via_relay(env, relay, attempt_timeout) {
                Ok(auth) => {
                    tracing::debug!(rank = env.rank, %relay, "control connection up through a relay");
                    return Some(Self::established(env, relay, auth).map_err(ControlError::from));
                }
                Err(error) => failed.push(Attempt {
                    addr: relay,
                    class: net::classify(relay.ip()),
                    error,
                }),
            }
        }
        None
    }

    fn established(
        env: &JobEnv,
        peer: SocketAddr,
        (stream, decoder, seen_from): Authenticated,
    ) -> io::Result<ControlClient> {
        stream.set_read_timeout(None)?;
        stream.set_write_timeout(None)?;
        stream.set_nonblocking(true)?;
        Ok(ControlClient {
            stream,
            peer,
            seen_from,
            rank: env.rank,
            decoder,
            queued: VecDeque::new(),
            eof: false,
            rx: vec![0; 64 * 1024],
        })
    }

    /// Like [`ControlClient::connect`], but tries exactly `order`, in rounds: an
    /// address that stayed silent is tried again until `patience` is over, one that
    /// refused or answered wrongly is not. The error gives each address's last failure.
    pub fn connect_to(
        env: &JobEnv,
        order: &[ConnEntry],
        attempt_timeout: Duration,
        patience: Duration,
    ) -> Result<ControlClient, ControlError> {
        let deadline = Deadline::after(clock::now(), clock::nanos(patience));
        let mut last: Vec<Option<(Miss, u32)>> = order.iter().map(|_| None).collect();
        let mut round: Vec<usize> = (0..order.len()).collect();
        while !round.is_empty() {
            for &i in &round {
                let e = &order[i];
                match attempt(env, e.addr, attempt_timeout) {
                    Ok(auth) => {
                        tracing::debug!(rank = env.rank, coordinator = %e.addr, "control connection up");
                        return Ok(Self::established(env, e.addr, auth)?);
                    }
                    Err(miss) => {
                        tracing::debug!(rank = env.rank, addr = %e.addr, error = %miss.why, "coordinator attempt failed");
                        let tries = last[i].as_ref().map_or(0, |l| l.1) + 1;
                        last[i] = Some((miss, tries));
                    }
                }
            }
            if deadline.remaining(clock::now()).is_none() {
                break;
            }
            round.retain(|&i| last[i].as_ref().is_some_and(|(m, _)| m.silent));
        }
        let failed = order
            .iter()
            .zip(last)
            .filter_map(|(e, l)| {
                let (miss, tries) = l?;
                Some(Attempt {
                    addr: e.addr,
                    class: e.class,
                    error: match tries {
                        1 => miss.why,
                        n => format!("{} ({n} tries)", miss.why),
                    },
                })
            })
            .collect();
        Err(ControlError::Unreachable(failed))
    }

    /// The coordinator address that answered.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Where the coordinator saw this rank's connection come from.
    pub fn seen_from(&self) -> SocketAddr {
        self.seen_from
    }

    /// The connection's least round trip as the kernel measured it (its handshake and
    /// the coordinator's welcome give samples): how far the coordinator is.
    pub fn round_trip(&self) -> Option<Duration> {
        transport::tcp::min_round_trip(&self.stream)
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The socket, for the event loop's epoll (readable = call [`Self::poll_event`]).
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    /// Sends one message, waiting until the socket takes all of it.
    pub fn send(&mut self, msg: &ToCoordinator) -> io::Result<()> {
        let bytes = ctl::encode(msg);
        let mut at = 0;
        while at < bytes.len() {
            match self.stream.write(&bytes[at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(PollFlags::OUT, None)?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Next event, without blocking: queued events first, then what the socket has.
    /// `Err(LauncherGone)` once the coordinator closed the connection and every
    /// message it sent before has been returned.
    pub fn poll_event(&mut self) -> Result<Option<FromCoordinator>, ControlError> {
        if let Some(m) = self.queued.pop_front() {
            return Ok(Some(m));
        }
        if let Some(m) = self.decode()? {
            return Ok(Some(m));
        }
        if !self.eof {
            self.read_available()?;
            if let Some(m) = self.decode()? {
                return Ok(Some(m));
            }
        }
        if self.eof {
            return Err(ControlError::LauncherGone);
        }
        Ok(None)
    }

    /// Publishes `key` for the next fence.
    pub fn put(&mut self, key: &str, value: &[u8]) -> io::Result<()> {
        self.send(&ToCoordinator::Put {
            key: key.to_string(),
            value: value.to_vec(),
        })
    }

    /// Blocks until every rank reached fence `epoch`; returns every key put before it.
    pub fn fence(&mut self, epoch: u32) -> Result<HashMap<String, Vec<u8>>, ControlError> {
        Ok(self.fence_entries(epoch)?.into_iter().collect())
    }

    /// [`fence`](Self::fence), the keys and values as they came.
    pub fn fence_entries(&mut self, epoch: u32) -> Result<Vec<(String, Vec<u8>)>, ControlError> {
        self.send(&ToCoordinator::Fence { epoch })?;
        match self.wait_for(|m| matches!(m, FromCoordinator::FenceDone { epoch: e, .. } if *e == epoch))? {
            FromCoordinator::FenceDone { kvs, .. } => Ok(kvs),
            _ => unreachable!("wait_for returns only what the predicate accepted"),
        }
    }

    /// Says that this rank gave up on reaching `rank` (see `ToCoordinator::Unreachable`).
    pub fn unreachable(&mut self, rank: u32, cause: &str) -> io::Result<()> {
        self.send(&ToCoordinator::Unreachable {
            rank,
            cause: cause.to_string(),
        })
    }

    /// Tells the coordinator this rank finalizes and blocks until every rank has.
    /// Tells the coordinator that this rank finalizes, without waiting for the others
    /// (the caller watches for `FinalizeDone` with [`ControlClient::poll_event`]).
    pub fn start_finalize(&mut self) -> Result<(), ControlError> {
        Ok(self.send(&ToCoordinator::Finalize)?)
    }

    pub fn finalize(&mut self) -> Result<(), ControlError> {
        self.send(&ToCoordinator::Finalize)?;
        self.wait_for(|m| matches!(m, FromCoordinator::FinalizeDone))
            .map(|_| ())
    }

    /// Asks the coordinator to end the job with `code`, then waits (at most 2 s) until
    /// it has taken note, so the caller can exit right after without the launcher
    /// mistaking the exit for a crash.
    pub fn abort(&mut self, code: i32, message: &str) -> io::Result<()> {
        self.send(&ToCoordinator::Abort {
            code,
            message: message.to_string(),
        })?;
        let _ = self.stream.shutdown(Shutdown::Write);
        let deadline = Deadline::after(clock::now(), clock::nanos(ABORT_WAIT));
        while !self.eof {
            let Some(left) = deadline.remaining(clock::now()) else {
                break;
            };
            self.wait(PollFlags::IN, Some(clock::duration(left)))?;
            self.read_available()
                .map_err(|e| io::Error::other(e.to_string()))?;
            // Drain what arrived so the coordinator's Shutdown is not waited for again.
            while let Ok(Some(m)) = self.decode() {
                let done = matches!(m, FromCoordinator::Shutdown { .. });
                self.queued.push_back(m);
                if done {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn decode(&mut self) -> Result<Option<FromCoordinator>, ControlError> {
        self.decoder
            .next()
            .map_err(|e| ControlError::Protocol(e.to_string()))
    }

    /// Reads everything the socket has now; sets `eof` when the coordinator closed.
    fn read_available(&mut self) -> Result<(), ControlError> {
        loop {
            match self.stream.read(&mut self.rx) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => self.decoder.push(&self.rx[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    self.eof = true;
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits until the socket is ready for `flags` or `timeout` passes.
    fn wait(&self, flags: PollFlags, timeout: Option<Duration>) -> io::Result<()> {
        let ts = timeout.map(|d| {
            rustix::event::Timespec::try_from(d).unwrap_or(rustix::event::Timespec {
                tv_sec: i64::MAX,
                tv_nsec: 0,
            })
        });
        let mut fds = [PollFd::new(&self.stream, flags)];
        loop {
            match rustix::event::poll(&mut fds, ts.as_ref()) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Blocks until a message accepted by `want` arrives; queues every other one.
    /// A `Shutdown` (queued too) or the connection closing ends the wait with an error.
    fn wait_for(&mut self, want: impl Fn(&FromCoordinator) -> bool) -> Result<FromCoordinator, ControlError> {
        if let Some(i) = self.queued.iter().position(&want) {
            return Ok(self.queued.remove(i).expect("index from position"));
        }
        if let Some(FromCoordinator::Shutdown { reason, code }) = self
            .queued
            .iter()
            .find(|m| matches!(m, FromCoordinator::Shutdown { .. }))
        {
            return Err(ControlError::Shutdown(JobEnded {
                reason: reason.clone(),
                code: *code,
            }));
        }
        loop {
            while let Some(m) = self.decode()? {
                if want(&m) {
                    return Ok(m);
                }
                let shutdown = match &m {
                    FromCoordinator::Shutdown { reason, code } => Some(JobEnded {
                        reason: reason.clone(),
                        code: *code,
                    }),
                    _ => None,
                };
                self.queued.push_back(m);
                if let Some(ended) = shutdown {
                    return Err(ControlError::Shutdown(ended));
                }
            }
            if self.eof {
                return Err(ControlError::LauncherGone);
            }
            self.wait(PollFlags::IN, None)?;
            self.read_available()?;
        }
    }
}

impl AsFd for ControlClient {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;
    use std::time::Instant;

    fn env(ports: &[u16], secret: [u8; 32]) -> JobEnv {
        JobEnv {
            rank: 1,
            size: 2,
            job_id: [7; 16],
            secret,
            coord: ports
                .iter()
                .map(|p| ConnEntry::new(SocketAddr::from(([127, 0, 0, 1], *p))))
                .collect(),
            local_rank: 1,
            local_size: 2,
            node: "here".into(),
        }
    }

    /// A one-connection coordinator: authenticates the Hello with `secret`, then runs `script`.
    fn coordinator(
        secret: [u8; 32],
        script: impl FnOnce(&mut TcpStream, &mut Decoder) + Send + 'static,
    ) -> (u16, thread::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let h = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut d = Decoder::default();
            welcome(&mut s, &mut d, secret);
            script(&mut s, &mut d);
        });
        (port, h)
    }

    /// Reads the Hello on `s` and answers it with a Welcome authenticated with `secret`.
    fn welcome(s: &mut TcpStream, d: &mut Decoder, secret: [u8; 32]) {
        let Some(ToCoordinator::Hello {
            job_id, rank, nonce, ..
        }) = recv(s, d)
        else {
            panic!("no hello")
        };
        let seen_from = s.peer_addr().unwrap();
        let mac = ctl::welcome_mac(&secret, &job_id, rank, &nonce, &seen_from);
        s.write_all(&ctl::encode(&FromCoordinator::Welcome { mac, seen_from }))
            .unwrap();
    }

    fn recv(s: &mut TcpStream, d: &mut Decoder) -> Option<ToCoordinator> {
        let mut buf = [0u8; 1024];
        loop {
            if let Some(m) = d.next().unwrap() {
                return Some(m);
            }
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                return None;
            }
            d.push(&buf[..n]);
        }
    }

    fn send(s: &mut TcpStream, m: &FromCoordinator) {
        s.write_all(&ctl::encode(m)).unwrap();
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn fence_queues_other_events_and_eof_means_launcher_gone() {
        let (port, h) = coordinator([9; 32], |s, d| {
            assert_eq!(
                recv(s, d),
                Some(ToCoordinator::Put {
                    key: "k".into(),
                    value: vec![1]
                })
            );
            assert_eq!(recv(s, d), Some(ToCoordinator::Fence { epoch: 1 }));
            send(
                s,
                &FromCoordinator::PeerFailed {
                    rank: 0,
                    cause: "exited with code 3".into(),
                },
            );
            send(
                s,
                &FromCoordinator::FenceDone {
                    epoch: 1,
                    kvs: vec![("k".into(), vec![1])],
                },
            );
            assert_eq!(recv(s, d), Some(ToCoordinator::Finalize));
            send(s, &FromCoordinator::FinalizeDone);
        });
        let mut c = ControlClient::connect(&env(&[port], [9; 32]), T).unwrap();
        c.put("k", &[1]).unwrap();
        let kvs = c.fence(1).unwrap();
        assert_eq!(kvs.get("k"), Some(&vec![1]));
        c.finalize().unwrap();
        h.join().unwrap();
        assert!(matches!(
            c.poll_event(),
            Ok(Some(FromCoordinator::PeerFailed { rank: 0, .. }))
        ));
        // The coordinator thread closed the socket: wait for the EOF to arrive.
        let deadline = Instant::now() + T;
        loop {
            match c.poll_event() {
                Err(ControlError::LauncherGone) => break,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
                other => panic!("{other:?}"),
            }
        }
        assert!(ControlError::LauncherGone
            .to_string()
            .contains("the launcher is gone"));
    }

    #[test]
    fn shutdown_ends_a_blocking_fence() {
        let (port, h) = coordinator([9; 32], |s, d| {
            assert_eq!(recv(s, d), Some(ToCoordinator::Fence { epoch: 1 }));
            send(
                s,
                &FromCoordinator::Shutdown {
                    reason: "rank 0 called abort".into(),
                    code: 3,
                },
            );
            let _ = recv(s, d);
        });
        let mut c = ControlClient::connect(&env(&[port], [9; 32]), T).unwrap();
        let e = c.fence(1).unwrap_err();
        assert!(e.to_string().contains("rank 0 called abort"), "{e}");
        assert!(
            matches!(e, ControlError::Shutdown(JobEnded { code: 3, .. })),
            "{e:?}"
        );
        // Still reported to the event loop, and a later blocking call does not hang.
        assert!(c.finalize().is_err());
        assert!(matches!(
            c.poll_event(),
            Ok(Some(FromCoordinator::Shutdown { .. }))
        ));
        drop(c);
        h.join().unwrap();
    }

    #[test]
    fn wrong_secret_and_dead_addresses_are_all_reported() {
        // A port with nothing listening: bind, learn the port, close.
        let dead = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (port, h) = coordinator([1; 32], |_, _| {});
        let e = ControlClient::connect(&env(&[dead, port], [2; 32]), T)
            .err()
            .unwrap();
        h.join().unwrap();
        let msg = e.to_string();
        assert!(
            matches!(&e, ControlError::Unreachable(a) if a.len() == 2),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("127.0.0.1:{dead} (loopback): connection refused")),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("127.0.0.1:{port} (loopback): answered with a wrong MAC")),
            "{msg}"
        );
    }

    #[test]
    fn refusal_and_silence_are_explained() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let refusing = l.local_addr().unwrap().port();
        let h = thread::spawn(move || drop(l.accept().unwrap()));
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let quiet = silent.local_addr().unwrap().port();
        let t = Duration::from_millis(300);
        let e = ControlClient::connect(&env(&[refusing, quiet], [2; 32]), t)
            .err()
            .unwrap();
        h.join().unwrap();
        let msg = e.to_string();
        assert!(msg.contains("refused this rank"), "{msg}");
        assert!(msg.contains("no answer within 300ms"), "{msg}");
    }

    #[test]
    fn a_coordinator_that_stayed_silent_is_tried_again_until_it_answers() {
        // The first connection's Hello goes unanswered (as if the Welcome were lost on a
        // lossy path); the second one is welcomed.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let h = thread::spawn(move || {
            let (first, _) = l.accept().unwrap();
            let (mut s, _) = l.accept().unwrap();
            drop(first);
            welcome(&mut s, &mut Decoder::default(), [9; 32]);
        });
        let e = env(&[port], [9; 32]);
        let attempt = Duration::from_millis(200);
        let c = ControlClient::connect_to(&e, &e.coord, attempt, 20 * attempt);
        h.join().unwrap();
        assert!(c.is_ok(), "{:?}", c.err());
        // A coordinator that never answers: the error says how often it was tried.
        let quiet = TcpListener::bind("127.0.0.1:0").unwrap();
        let e = env(&[quiet.local_addr().unwrap().port()], [9; 32]);
        let msg = ControlClient::connect_to(&e, &e.coord, attempt, 3 * attempt)
            .err()
            .unwrap()
            .to_string();
        assert!(msg.contains("no answer within 200ms ("), "{msg}");
        assert!(msg.contains(" tries)"), "{msg}");
    }

    #[test]
    fn garbage_from_the_coordinator_is_an_error_not_a_panic() {
        let (port, h) = coordinator([9; 32], |s, _| {
            s.write_all(&[3, 0, 0, 0, 0xff, 0xff, 0xff]).unwrap();
        });
        let mut c = ControlClient::connect(&env(&[port], [9; 32]), T).unwrap();
        h.join().unwrap();
        let e = c.fence(1).unwrap_err();
        assert!(matches!(e, ControlError::Protocol(_)), "{e}");
    }
}
