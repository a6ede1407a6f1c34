//! `pontoon srun-rendezvous`: the job's rendezvous when `srun` started the ranks without
//! a PMI. Task 0 starts it on its node and gives it the job's id and secret on its
//! standard input (`runtime::srun` says how the tasks find it). It is the coordinator of
//! `pontoon run` without processes of its own: the ranks' control connections say when
//! one ends, and srun starts, signals and reaps them.
//!
//! It hands the key out on the first free of the ports the order names, one munge
//! credential per request, restricted to this user; and it ends the job the way
//! `pontoon run` does: a rank that aborts or whose connection closes before it finalized
//! is announced to the others at once, [`GRACE`] later every rank is told to exit with
//! the job's code, and [`GRACE`] after that the step is cancelled with `scancel`.

use crate::coordinator::{Coordinator, Event};
use crate::poller::{Poller, Token};
use crate::{LaunchError, GRACE};
use proto::wire::srun_key::{KeyAnswer, KeyGrant, KeyRequest, RendezvousOrder, MAX_LINE};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Key requests answered at once; more wait in the listen backlog.
const KEY_WORKERS: usize = 8;
/// Time a key request has to arrive once connected.
const REQUEST_WITHIN: Duration = Duration::from_secs(5);
/// Ranks whose connections close within this long of each other are named together.
const SAME_FAILURE: Duration = Duration::from_millis(100);
/// Lifetime of a key credential: it is decoded at once.
const CREDENTIAL_TTL_S: &str = "60";

fn say(msg: &str) {
    let _ = writeln!(io::stderr().lock(), "pontoon: {msg}");
}

/// Serves one job; returns the exit status it ended with (the ranks end with the same).
pub fn serve() -> Result<i32, LaunchError> {
    let mut line = Vec::new();
    BufReader::new(io::stdin().lock().take(MAX_LINE as u64))
        .read_until(b'\n', &mut line)
        .map_err(LaunchError::io("reading the order from task 0"))?;
    let order = RendezvousOrder::parse(&line).map_err(|e| LaunchError::Program(e.to_string()))?;
    let coord = Coordinator::bind(order.job, order.secret, order.size)?;
    let (port, keys) = bind_key_port(&order.ports)?;
    // Each answer carries the asking task's nonce in place of this one.
    let grant = KeyGrant {
        job: order.job,
        nonce: [0; 16],
        secret: order.secret,
        coord: coord.conn_string(),
    };
    for listener in keys {
        let grant = grant.clone();
        std::thread::spawn(move || serve_keys(&listener, &grant));
    }
    tracing::info!(port, coordinator = %coord.conn_string(), "srun rendezvous listening");
    let mut out = io::stdout().lock();
    writeln!(out, "ready {}", coord.conn_string())
        .and_then(|()| out.flush())
        .map_err(LaunchError::io("answering task 0"))?;
    let hello_within = Duration::from_secs(u64::from(order.wait_s));
    Rendezvous::new(coord, order.size, hello_within)?.run()
}

/// Listeners on the first of `ports` that is free in every address family this host has.
fn bind_key_port(ports: &[u16]) -> Result<(u16, Vec<TcpListener>), LaunchError> {
    let policy = net::IfPolicy::from_env().map_err(|e| LaunchError::Listen(e.to_string()))?;
    let local = net::iface::allowed_addresses(&net::interfaces(), &policy);
    let v6 = local.iter().any(|(ip, _, _)| ip.is_ipv6());
    let mut taken = Vec::new();
    for &port in ports {
        let mut any = vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED)];
        if v6 {
            any.push(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        }
        let bound: io::Result<Vec<TcpListener>> = any
            .into_iter()
            .map(|ip| {
                let l = net::listen::listen_at(SocketAddr::new(ip, port), 0)?;
                l.set_nonblocking(false)?;
                Ok(l)
            })
            .collect();
        match bound {
            Ok(listeners) => return Ok((port, listeners)),
            Err(e) => taken.push(format!("{port}: {e}")),
        }
    }
    Err(LaunchError::Listen(format!(
        "no port for the key of the job is free (PONTOON_SRUN_PORTS): {}",
        taken.join("; ")
    )))
}

/// Answers key requests on `listener`, at most [`KEY_WORKERS`] at once: each costs a
/// munge process, whoever connects.
fn serve_keys(listener: &TcpListener, grant: &KeyGrant) {
    let busy = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        while busy.load(Ordering::Acquire) >= KEY_WORKERS {
            std::thread::sleep(Duration::from_millis(2));
        }
        busy.fetch_add(1, Ordering::AcqRel);
        let (busy, grant) = (busy.clone(), grant.clone());
        std::thread::spawn(move || {
            answer_one(stream, grant);
            busy.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// Reads one request and answers it.
fn answer_one(mut stream: TcpStream, mut grant: KeyGrant) {
    let peer = stream.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
    let _ = stream.set_read_timeout(Some(REQUEST_WITHIN));
    let mut line = Vec::new();
    if let Err(e) = BufReader::new((&stream).take(MAX_LINE as u64 + 1)).read_until(b'\n', &mut line) {
        tracing::debug!(%peer, "key request not read: {e}");
        return;
    }
    let answer = match KeyRequest::parse(&line) {
        Err(e) => KeyAnswer::Refused(e.to_string()),
        Ok(req) if req.job != grant.job => KeyAnswer::OtherJob,
        Ok(req) => {
            grant.nonce = req.nonce;
            match munge(&grant.encode()) {
                Ok(cred) => KeyAnswer::Credential(cred),
                Err(why) => {
                    say(&format!("cannot make the job's key credential for {peer}: {why}"));
                    KeyAnswer::Refused(why)
                }
            }
        }
    };
    let _ = stream.write_all(answer.encode().as_bytes());
}

/// A munge credential of `payload` that only this process's user can decode. The
/// payload goes through a pipe: a command line is readable by every user.
fn munge(payload: &str) -> Result<String, String> {
    let uid = rustix::process::getuid().as_raw().to_string();
    let mut child = Command::new("munge")
        .args(["--restrict-uid", &uid, "--ttl", CREDENTIAL_TTL_S])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run munge ({e}): srun without PMI needs munge's programs"))?;
    let mut stdin = child.stdin.take().expect("piped");
    stdin
        .write_all(payload.as_bytes())
        .map_err(|e| format!("munge: {e}"))?;
    drop(stdin);
    let out = child.wait_with_output().map_err(|e| format!("munge: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "munge failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let cred = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if cred.is_empty() || cred.contains(char::is_whitespace) {
        return Err("munge printed no credential".into());
    }
    Ok(cred)
}

/// The coordinator's loop for ranks that srun started.
struct Rendezvous {
    coord: Coordinator,
    poller: Poller,
    /// Ranks whose control connection has closed.
    gone: Vec<bool>,
    /// Every rank must have connected by then.
    hello_by: Option<Instant>,
    /// The job's exit code, once something ended it.
    outcome: Option<i32>,
    /// When the ranks are told to exit, then when the step is cancelled.
    shutdown_at: Option<Instant>,
    cancel_at: Option<Instant>,
    /// Ranks whose connection closed before they finalized, and when to say so.
    failing: Vec<u32>,
    judge_at: Option<Instant>,
}

impl Rendezvous {
    fn new(coord: Coordinator, size: u32, hello_within: Duration) -> Result<Rendezvous, LaunchError> {
        let poller = Poller::new().map_err(LaunchError::io("cannot create an epoll instance"))?;
        coord
            .register(&poller)
            .map_err(LaunchError::io("cannot watch the listening sockets"))?;
        poller
            .add(io::stdin(), Token::Parent, false)
            .map_err(LaunchError::io("cannot watch standard input"))?;
        Ok(Rendezvous {
            coord,
            poller,
            gone: vec![false; size as usize],
            hello_by: Some(Instant::now() + hello_within),
            outcome: None,
            shutdown_at: None,
            cancel_at: None,
            failing: Vec::new(),
            judge_at: None,
        })
    }

    fn run(mut self) -> Result<i32, LaunchError> {
        loop {
            let now = Instant::now();
            self.coord.expire(now, &self.poller);
            if self.on_timers(now) || (self.gone.iter().all(|&g| g) && self.judge_at.is_none()) {
                return Ok(self.outcome.unwrap_or(0));
            }
            let wake = [
                self.coord.next_deadline(),
                self.hello_by,
                self.judge_at,
                self.shutdown_at,
                self.cancel_at,
            ]
            .into_iter()
            .flatten()
            .map(|t| t.saturating_duration_since(now))
            .fold(Duration::from_millis(250), Duration::min);
            for r in self.poller.wait(wake).map_err(LaunchError::io("epoll_wait"))? {
                match r.token {
                    Token::Listener(i) => self.coord.on_listener(i, &self.poller, Instant::now()),
                    Token::Conn(id) => self.coord.on_conn(id, r.read, r.write, &self.poller),
                    // Task 0 writes nothing after its order: readable means it is gone. Its
                    // control connection says whether it finalized first.
                    Token::Parent => self.poller.delete(io::stdin()),
                    _ => {}
                }
                self.handle_events();
            }
        }
    }

    fn handle_events(&mut self) {
        for ev in self.coord.take_events() {
            match ev {
                Event::Hello { rank, pid } => tracing::debug!(rank, pid, "rank connected"),
                Event::Abort { rank, code, message } => {
                    let what = format!("rank {rank} called abort (code {code}): {message}");
                    self.end(&what, code);
                    // As under `pontoon run`: the others exit with the abort's code at once.
                    self.coord.shutdown(&what, code, &self.poller);
                }
                Event::Protocol(e) => {
                    self.end(&format!("{e}"), 1);
                    self.coord.shutdown(&format!("{e}"), 1, &self.poller);
                }
                Event::Closed { rank } => {
                    self.gone[rank as usize] = true;
                    self.coord.rank_exited(rank);
                    if !self.coord.finalized(rank) && self.outcome.is_none() {
                        // Its peers may see it go and exit as fast: which went first is not
                        // known here, so those that go within a moment are named together.
                        self.failing.push(rank);
                        self.judge_at.get_or_insert(Instant::now() + SAME_FAILURE);
                    }
                }
            }
        }
    }

    /// Ranks gone before they finalized, once the moment they may share has passed.
    fn judge_failures(&mut self) {
        self.judge_at = None;
        let mut failing = std::mem::take(&mut self.failing);
        failing.sort_unstable();
        let ranks: Vec<String> = failing.iter().map(u32::to_string).collect();
        self.end(
            &format!(
                "rank(s) {} ended before finalizing: exited or killed (connection to the job's rendezvous \
                 closed)",
                ranks.join(", ")
            ),
            1,
        );
        let cause = "ended before finalizing: it exited or was killed";
        for rank in failing {
            self.coord.peer_failed(rank, cause, &self.poller);
        }
    }

    /// The first thing that ends the job sets its code and starts the countdown.
    fn end(&mut self, what: &str, code: i32) {
        if self.outcome.is_some() {
            tracing::info!("{what} (the job is already ending)");
            return;
        }
        say(&format!("{what}; ending the job"));
        self.outcome = Some(code);
        self.shutdown_at = Some(Instant::now() + GRACE);
    }

    /// Returns whether the job is over.
    fn on_timers(&mut self, now: Instant) -> bool {
        if self.judge_at.is_some_and(|t| now >= t) {
            self.judge_failures();
        }
        if self.hello_by.is_some_and(|t| now >= t) {
            self.hello_by = None;
            let missing: Vec<String> = (0..self.gone.len() as u32)
                .filter(|&r| !self.coord.said_hello(r) && !self.gone[r as usize])
                .map(|r| r.to_string())
                .collect();
            if !missing.is_empty() {
                let what = format!(
                    "rank(s) {} did not reach the job's rendezvous within the start-up time \
                     (PONTOON_PMI_FENCE_TIMEOUT_S)",
                    missing.join(", ")
                );
                self.end(&what, 1);
            }
        }
        if self.shutdown_at.is_some_and(|t| now >= t) {
            self.shutdown_at = None;
            self.coord
                .shutdown("a rank failed", self.outcome.unwrap_or(1), &self.poller);
            self.cancel_at = Some(now + GRACE);
        }
        if self.cancel_at.is_some_and(|t| now >= t) {
            cancel_step();
            return true;
        }
        false
    }
}

/// Ranks that neither exit on their own nor listen (a rank computing without calling
/// MPI): srun's step is cancelled, as `pontoon run` would end them with signals.
fn cancel_step() {
    let (Ok(job), Ok(step)) = (std::env::var("SLURM_JOB_ID"), std::env::var("SLURM_STEP_ID")) else {
        return;
    };
    say(&format!("ranks still running; cancelling step {job}.{step}"));
    if let Err(e) = Command::new("scancel").arg(format!("{job}.{step}")).status() {
        say(&format!("cannot run scancel: {e}"));
    }
}
