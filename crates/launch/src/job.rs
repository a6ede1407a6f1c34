//! The job: one single-threaded event loop over the coordinator's sockets, the
//! ranks' output pipes and the signal pipes, plus the timers that end a job.
//!
//! Ending a job (a rank failed or aborted, `--timeout`, SIGINT/SIGTERM): the ranks are
//! told (`PeerFailed` or `Shutdown`) and get [`GRACE`] to exit on their own, then
//! their process groups get SIGTERM, then after another [`GRACE`] SIGKILL.

use crate::coordinator::{Coordinator, Event};
use crate::forward::LineForwarder;
use crate::hosts;
use crate::poller::{Poller, Token};
use crate::procs::{self, Orphans};
use crate::signals::{SignalPipes, HANDLED};
use crate::spawn::{self, SpawnCommon};
use crate::status::{self, Outcome};
use crate::{LaunchError, LaunchPlan, EXIT_TIMEOUT, GRACE};
use rustix::process::Signal;
use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Longest sleep of the loop: children are also checked on this tick, whatever
/// the signals say.
const TICK: Duration = Duration::from_millis(250);

/// A message of `pontoon run` itself, on stderr.
fn say(msg: &str) {
    let _ = writeln!(io::stderr().lock(), "pontoon run: {msg}");
}

struct Stream {
    file: File,
    fwd: LineForwarder,
}

struct RankProc {
    pid: u32,
    child: Child,
    status: Option<ExitStatus>,
    /// Output pipes, `None` once at end of file.
    out: Option<Stream>,
    err: Option<Stream>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Ranks were told; SIGTERM at `next`.
    Grace,
    /// SIGTERM sent; SIGKILL at `next`.
    Termed,
    /// SIGKILL sent; stop waiting at `next`.
    Killed,
}

pub(crate) struct Job {
    n: u32,
    tag: bool,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    node: String,
    /// The host of every rank (empty: all on `node`).
    placement: Vec<hosts::Host>,
    poller: Poller,
    signals: SignalPipes,
    coord: Coordinator,
    ranks: Vec<RankProc>,
    orphans: Orphans,
    /// Exit status, set by whatever ends the job first.
    outcome: Option<i32>,
    ending: Option<(Stage, Instant)>,
    interrupts: u32,
    output_broken: bool,
    /// SIGCHLD came: reap on the next turn of the loop.
    child_exited: bool,
    /// Relays started for this job; they end with it.
    _relays: Option<crate::relays::JobRelays>,
    /// Slurm allocations made for the job on `slurm` hosts; cancelled with it.
    _allocations: Vec<crate::slurm::Allocation>,
    /// The coordinator's registrations with the job's relays (they live as long).
    _registrations: Vec<transport::relay::Registration>,
}

fn open_stream(fd: impl Into<OwnedFd>, rank: u32, tag: bool) -> io::Result<Stream> {
    let fd: OwnedFd = fd.into();
    rustix::io::ioctl_fionbio(&fd, true)?;
    Ok(Stream {
        file: File::from(fd),
        fwd: LineForwarder::new(rank, tag),
    })
}

impl Job {
    /// Binds the coordinator and starts every rank.
    pub(crate) fn start(plan: &LaunchPlan, program: &Path) -> Result<Job, LaunchError> {
        let mut job_id = [0u8; 16];
        let mut secret = [0u8; 32];
        getrandom::fill(&mut job_id)
            .and_then(|_| getrandom::fill(&mut secret))
            .map_err(|e| LaunchError::Io {
                what: "no random numbers for the job secret",
                source: io::Error::other(e.to_string()),
            })?;
        // Installed before the first child exists, so no SIGCHLD or Ctrl-C is missed.
        let signals = SignalPipes::install().map_err(LaunchError::io("cannot handle signals"))?;
        procs::become_subreaper();
        // Per rank: two pipes, a control connection and maybe a pending connection.
        procs::raise_fd_limit(4 * u64::from(plan.n) + 256);
        let orphans = Orphans::snapshot();
        let coord = Coordinator::bind(job_id, secret, plan.n)?;
        let poller = Poller::new().map_err(LaunchError::io("cannot create an epoll instance"))?;
        coord
            .register(&poller)
            .map_err(LaunchError::io("cannot watch the listening sockets"))?;
        for i in 0..HANDLED.len() {
            poller
                .add(signals.fd(i), Token::Signal(i as u32), false)
                .map_err(LaunchError::io("epoll"))?;
        }
        let node = spawn::hostname();
        let conn = coord.conn_string();
        tracing::info!(coordinator = %conn, "coordinator listening");
        // The job's relays: those the user named (standalone daemons, `-x` or the
        // environment), then those started for the job.
        let mut export = plan.export.clone();
        let named = export
            .iter()
            .find(|(k, _)| k == "PONTOON_RELAYS")
            .and_then(|(_, v)| v.clone())
            .or_else(|| std::env::var("PONTOON_RELAYS").ok())
            .filter(|v| !v.trim().is_empty());
        let started = if plan.relays.is_empty() {
            None
        } else {
            Some(crate::relays::start(
                &plan.relays,
                &plan.relay_command,
                &plan.agent,
                &node,
            )?)
        };
        let all = match (&named, &started) {
            (Some(n), Some(r)) => Some(format!("{n};{}", r.value)),
            (None, Some(r)) => Some(r.value.clone()),
            (n, None) => n.clone(),
        };
        let registrations = all.as_deref().map_or_else(Vec::new, |v| {
            crate::relays::register_coordinator(v, &secret, coord.addresses())
        });
        if started.is_some() {
            export.retain(|(k, _)| k != "PONTOON_RELAYS");
            export.push(("PONTOON_RELAYS".into(), all));
        }
        // Ranks on other clusters' login nodes run in allocations made there first.
        let (allocations, slurm) =
            crate::slurm::allocate(&plan.placement, &plan.agent).map_err(LaunchError::Program)?;
        let mut on_nodes = plan.placement.clone();
        for (h, t) in on_nodes.iter_mut().zip(&slurm) {
            if let Some(t) = t {
                h.name.clone_from(&t.node);
            }
        }
        let common = SpawnCommon {
            program,
            args: &plan.args,
            size: plan.n,
            coord: &conn,
            job_id: &job_id,
            secret: &secret,
            node: &node,
            export: &export,
            placement: &plan.placement,
            local: &hosts::local_ranks(&on_nodes),
            agent: &plan.agent,
            slurm: &slurm,
        };
        let mut job = Job {
            n: plan.n,
            tag: plan.tag_output,
            timeout: plan.timeout,
            deadline: None,
            node: node.clone(),
            placement: plan.placement.clone(),
            poller,
            signals,
            coord,
            ranks: Vec::with_capacity(plan.n as usize),
            orphans,
            outcome: None,
            ending: None,
            interrupts: 0,
            output_broken: false,
            child_exited: false,
            _relays: started,
            _allocations: allocations,
            _registrations: registrations,
        };
        for rank in 0..plan.n {
            if let Err(source) = job.spawn(&common, rank) {
                job.kill_everything();
                return Err(LaunchError::Spawn {
                    rank,
                    program: program.display().to_string(),
                    source,
                });
            }
            // The ranks started so far are served while the rest start: their wire-up
            // overlaps the launch instead of queueing behind it (256 ranks take a
            // quarter of a second to start here).
            if let Err(e) = job.dispatch(Duration::ZERO) {
                job.kill_everything();
                return Err(e);
            }
            if job.outcome.is_some() || job.ending.is_some() {
                break;
            }
        }
        job.deadline = plan.timeout.map(|t| Instant::now() + t);
        Ok(job)
    }

    fn spawn(&mut self, common: &SpawnCommon, rank: u32) -> io::Result<()> {
        let s = spawn::spawn_rank(common, rank)?;
        let pid = s.child.id();
        self.ranks.push(RankProc {
            pid,
            child: s.child,
            status: None,
            out: None,
            err: None,
        });
        let r = self.ranks.last_mut().expect("just pushed");
        let out = open_stream(s.stdout, rank, self.tag)?;
        let err = open_stream(s.stderr, rank, self.tag)?;
        self.poller.add(&out.file, Token::Stdout(rank), false)?;
        self.poller.add(&err.file, Token::Stderr(rank), false)?;
        r.out = Some(out);
        r.err = Some(err);
        tracing::debug!(rank, pid, "rank started");
        Ok(())
    }

    /// After a failed start: SIGKILL what was started and reap it.
    fn kill_everything(&mut self) {
        for r in &mut self.ranks {
            procs::signal_group(r.pid, Signal::KILL);
            let _ = r.child.wait();
        }
    }

    /// Runs the job to its end; returns the exit status of `pontoon run`.
    pub(crate) fn run(mut self) -> Result<i32, LaunchError> {
        let mut last_reap = Instant::now();
        loop {
            let now = Instant::now();
            self.on_timers(now);
            if self.finished(now) {
                break;
            }
            let wake = [
                self.deadline,
                self.ending.map(|e| e.1),
                self.coord.next_deadline(),
            ]
            .into_iter()
            .flatten()
            .map(|t| t.saturating_duration_since(now))
            .fold(TICK, Duration::min);
            self.dispatch(wake)?;
            // Waiting is cheap but not free with many ranks: do it when a child
            // exited, and on the tick in case a signal was coalesced or lost.
            let now = Instant::now();
            if std::mem::take(&mut self.child_exited) || now.duration_since(last_reap) >= TICK {
                self.reap();
                last_reap = now;
            }
        }
        self.cleanup();
        Ok(self.outcome.unwrap_or(0))
    }

    /// Handles what is ready within `wait`: the coordinator's sockets, the ranks'
    /// output, signals (a child's exit is noted in `child_exited`).
    fn dispatch(&mut self, wait: Duration) -> Result<(), LaunchError> {
        let ready = self.poller.wait(wait).map_err(LaunchError::io("epoll_wait"))?;
        let now = Instant::now();
        for r in ready {
            match r.token {
                Token::Listener(i) => self.coord.on_listener(i, &self.poller, now),
                Token::Conn(id) => self.coord.on_conn(id, r.read, r.write, &self.poller),
                Token::Stdout(rank) => self.read_stream(rank, false, usize::MAX),
                Token::Stderr(rank) => self.read_stream(rank, true, usize::MAX),
                Token::Parent => {}
                Token::Signal(i) => {
                    let sig = HANDLED[i as usize];
                    if self.signals.take(i as usize) {
                        if sig == signal_hook::consts::SIGCHLD {
                            self.child_exited = true;
                        } else {
                            self.on_signal(sig);
                        }
                    }
                }
            }
            self.handle_events();
        }
        Ok(())
    }

    fn handle_events(&mut self) {
        for ev in self.coord.take_events() {
            match ev {
                Event::Hello { rank, pid } => tracing::debug!(rank, pid, "rank connected"),
                Event::Closed { rank } => tracing::debug!(rank, "rank's control connection closed"),
                Event::Abort { rank, code, message } => {
                    let what = format!("rank {rank} called abort (code {code}): {message}");
                    if self.outcome.is_none() {
                        say(&what);
                        self.outcome = Some(status::abort_exit_code(code));
                    } else {
                        tracing::info!("{what} (the job is already ending)");
                    }
                    let code = self.outcome.unwrap_or(1);
                    self.coord.shutdown(&what, code, &self.poller);
                    self.begin_ending(Stage::Grace);
                }
                Event::Protocol(e) => {
                    say(&format!("{e}; ending the job"));
                    let code = *self.outcome.get_or_insert(1);
                    self.coord.shutdown(&format!("{e}"), code, &self.poller);
                    self.begin_ending(Stage::Grace);
                }
            }
        }
    }

    fn on_signal(&mut self, sig: i32) {
        self.interrupts += 1;
        let name = status::signal_name(sig);
        if self.interrupts > 1 {
            say(&format!("received {name} again; killing every rank now"));
            self.signal_all(Signal::KILL);
            self.ending = Some((Stage::Killed, Instant::now() + GRACE));
            return;
        }
        say(&format!(
            "received {name}; forwarding it to the ranks and ending the job"
        ));
        let code = *self.outcome.get_or_insert(128 + sig);
        self.coord
            .shutdown(&format!("pontoon run received {name}"), code, &self.poller);
        if let Some(s) = Signal::from_named_raw(sig) {
            self.signal_all(s);
        }
        self.begin_ending(Stage::Grace);
    }

    /// Starts the escalation unless it already runs. `Grace` waits before SIGTERM;
    /// `Termed` sends SIGTERM now.
    fn begin_ending(&mut self, stage: Stage) {
        if self.ending.is_some() {
            return;
        }
        if stage == Stage::Termed {
            self.signal_all(Signal::TERM);
        }
        self.ending = Some((stage, Instant::now() + GRACE));
    }

    fn on_timers(&mut self, now: Instant) {
        self.coord.expire(now, &self.poller);
        if self.deadline.is_some_and(|d| now >= d) {
            self.deadline = None;
            if self.outcome.is_none() {
                let t = self.timeout.unwrap_or_default();
                say(&format!(
                    "the job did not finish within --timeout {t:?}; ending it"
                ));
                self.outcome = Some(EXIT_TIMEOUT);
                self.coord.shutdown(
                    &format!("the job exceeded --timeout {t:?}"),
                    EXIT_TIMEOUT,
                    &self.poller,
                );
                self.begin_ending(Stage::Termed);
            }
        }
        if let Some((stage, at)) = self.ending {
            if now >= at {
                match stage {
                    Stage::Grace => {
                        tracing::info!("grace period over: SIGTERM to every rank");
                        self.signal_all(Signal::TERM);
                        self.ending = Some((Stage::Termed, now + GRACE));
                    }
                    Stage::Termed => {
                        tracing::info!("SIGKILL to every rank");
                        self.signal_all(Signal::KILL);
                        self.ending = Some((Stage::Killed, now + GRACE));
                    }
                    Stage::Killed => {}
                }
            }
        }
        if matches!(self.ending, Some((Stage::Killed, _))) {
            // Descendants orphaned since the SIGKILL (children of a killed orphan).
            for p in self.orphans.current(&self.rank_pids()) {
                procs::signal_process(p, Signal::KILL);
            }
        }
    }

    fn rank_pids(&self) -> HashSet<u32> {
        self.ranks.iter().map(|r| r.pid).collect()
    }

    /// Signals every rank's process group and every orphaned descendant.
    fn signal_all(&mut self, sig: Signal) {
        for r in &self.ranks {
            procs::signal_group(r.pid, sig);
        }
        for p in self.orphans.current(&self.rank_pids()) {
            procs::signal_process(p, sig);
        }
    }

    /// Is anything of the job still running besides unreaped ranks?
    fn leftovers(&self) -> bool {
        self.ranks.iter().any(|r| procs::group_exists(r.pid))
            || !self.orphans.current(&self.rank_pids()).is_empty()
    }

    fn finished(&mut self, now: Instant) -> bool {
        let given_up = matches!(self.ending, Some((Stage::Killed, at)) if now >= at);
        if self.ranks.iter().any(|r| r.status.is_none()) {
            // Only a process stuck in the kernel survives SIGKILL; do not wait forever.
            return given_up;
        }
        let open = self.ranks.iter().any(|r| r.out.is_some() || r.err.is_some());
        let leftovers = self.leftovers();
        if !open && !leftovers {
            return true;
        }
        if self.ending.is_none() {
            if leftovers {
                // Every rank exited, but something they started lives on: it must
                // not outlive the job.
                tracing::info!("ranks are done; ending what they left running");
                self.begin_ending(Stage::Termed);
            } else {
                // Only the output is still open (normally its end of file is just
                // not read yet); whoever else holds it gets no more than GRACE.
                self.ending = Some((Stage::Killed, now + GRACE));
            }
        }
        given_up
    }

    /// Ranks that exited since the last look, with their status.
    fn newly_exited(&mut self, seen: &[(u32, ExitStatus)]) -> Vec<(u32, ExitStatus)> {
        let mut exited = Vec::new();
        for rank in 0..self.n {
            let r = &mut self.ranks[rank as usize];
            if r.status.is_some() || seen.iter().any(|(s, _)| *s == rank) {
                continue;
            }
            match r.child.try_wait() {
                Ok(Some(st)) => exited.push((rank, st)),
                Ok(None) => {}
                Err(e) => tracing::warn!(rank, "cannot wait for rank: {e}"),
            }
        }
        exited
    }

    fn reap(&mut self) {
        use std::os::unix::process::ExitStatusExt;
        let mut exited = self.newly_exited(&[]);
        // A rank that exits with an error because its peer was killed can be found before
        // the killed one (its sockets close before it is reapable): give the job's first
        // failure a moment to show a signal death, which is the likelier cause to report.
        let first_failure = self.outcome.is_none() && exited.iter().any(|(_, st)| !st.success());
        if first_failure && exited.iter().all(|(_, st)| st.signal().is_none()) {
            let until = Instant::now() + Duration::from_millis(100);
            while Instant::now() < until && exited.iter().all(|(_, st)| st.signal().is_none()) {
                std::thread::sleep(Duration::from_millis(5));
                let more = self.newly_exited(&exited);
                exited.extend(more);
            }
        }
        exited.sort_by_key(|(_, st)| st.signal().is_none());
        for (rank, st) in exited {
            self.on_rank_exit(rank, st);
        }
        self.orphans.reap(&self.rank_pids());
    }

    fn on_rank_exit(&mut self, rank: u32, st: ExitStatus) {
        // What the rank wrote or sent before it exited comes first.
        self.read_stream(rank, false, 64);
        self.read_stream(rank, true, 64);
        self.coord.drain_rank(rank, &self.poller);
        self.handle_events();
        self.coord.rank_exited(rank);
        let pid = self.ranks[rank as usize].pid;
        self.ranks[rank as usize].status = Some(st);
        match status::outcome(st, self.coord.said_hello(rank), self.coord.finalized(rank)) {
            Outcome::Success => tracing::debug!(rank, "rank exited normally"),
            Outcome::Failure { cause, code } => {
                if self.outcome.is_none() {
                    let host = self.placement.get(rank as usize).map_or(&self.node, |h| &h.name);
                    say(&format!("rank {rank} (pid {pid} on {host}) {cause}"));
                    self.outcome = Some(code);
                } else {
                    tracing::info!("rank {rank} (pid {pid}) {cause} while the job was ending");
                }
                self.coord.peer_failed(rank, &cause, &self.poller);
                self.begin_ending(Stage::Grace);
            }
        }
    }

    /// Forwards what a rank's stdout (`err` false) or stderr has, at most `reads`
    /// reads (the loop comes back for more).
    fn read_stream(&mut self, rank: u32, err: bool, reads: usize) {
        let Some(r) = self.ranks.get_mut(rank as usize) else {
            return;
        };
        let slot = if err { &mut r.err } else { &mut r.out };
        let mut buf = [0u8; 64 * 1024];
        for _ in 0..reads.min(16) {
            let Some(s) = slot.as_mut() else { return };
            let n = match s.file.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => 0,
            };
            let res = if err {
                let mut o = io::stderr().lock();
                if n == 0 {
                    s.fwd.finish(&mut o)
                } else {
                    s.fwd.push(&buf[..n], &mut o)
                }
            } else {
                let mut o = io::stdout().lock();
                if n == 0 {
                    s.fwd.finish(&mut o)
                } else {
                    s.fwd.push(&buf[..n], &mut o)
                }
            };
            if let Err(e) = res {
                // Keep draining the rank (so it never blocks on a full pipe), but say it once.
                if !self.output_broken {
                    self.output_broken = true;
                    tracing::warn!("cannot forward rank output: {e}");
                }
            }
            if n == 0 {
                if let Some(s) = slot.take() {
                    self.poller.delete(&s.file);
                }
                return;
            }
        }
    }

    /// The job is over: forward the last output and make sure nothing survives.
    fn cleanup(&mut self) {
        for rank in 0..self.n {
            self.read_stream(rank, false, 16);
            self.read_stream(rank, true, 16);
            let r = &mut self.ranks[rank as usize];
            if let Some(s) = r.out.as_mut() {
                let _ = s.fwd.finish(&mut io::stdout().lock());
            }
            if let Some(s) = r.err.as_mut() {
                let _ = s.fwd.finish(&mut io::stderr().lock());
            }
        }
        if self.leftovers() {
            self.signal_all(Signal::KILL);
            // Let the kernel finish them, so they are reaped here rather than left to init.
            std::thread::sleep(Duration::from_millis(50));
        }
        for r in &mut self.ranks {
            if r.status.is_none() {
                tracing::warn!(pid = r.pid, "a rank survived SIGKILL (stuck in the kernel?)");
            }
        }
        self.orphans.reap(&self.rank_pids());
    }
}
