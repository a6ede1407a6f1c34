//! The one event loop: requests in, protocol engine in the middle, links and the
//! coordinator around it. Blocking calls busy-poll for `PONTOON_SPIN_US`, then
//! sleep in poll(2) on every socket.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use proto::dial::Deadline;
use proto::wire::data::DataRepr;
use proto::{Endpoint, Failure, LaneId, Output, PayloadDest, PayloadToken, Rank, ReqId, Status};
use transport::{Link, Placement, Sink};

use crate::boot::config::Config;
use crate::boot::control::JobEnded;
use crate::boot::rendezvous::{Event, NoFinalize, Rendezvous};
use crate::boot::{Job, Started};
use crate::clock;
use crate::fabric::{Fabrics, Refusals};
use crate::lanes::{Lane, Lanes};
use crate::requests::Requests;
use crate::waiter::{ReadySet, Waiter};

/// How often the rarely busy sockets are looked at though epoll reported nothing: a
/// safety net for an event missed (they are edge-triggered), and the clock of wire-up's
/// and the coordinator's own timeouts when nothing else happens.
const HOUSEKEEPING_EVERY: Duration = Duration::from_millis(5);
/// The longest sleep of a rank with nothing to do: anything that needs it (a frame, a
/// doorbell, the rendezvous, a lane's timer) wakes it before.
const IDLE_SLEEP: Duration = Duration::from_millis(50);

mod abort;
mod connect;
mod eth;
mod health;
mod inspect;
mod lane_up;
mod node_coll;
mod p2p;
pub use p2p::Pass;
pub use sleep::{Asleep, Idle};
mod pulls;
mod punch;
mod replay;
mod shm;
mod sleep;
mod unreachable;
mod wan;
pub use crate::fabric::shm::coll::{NodeMembers, NODE_COLL_DATA};
pub use crate::fabric::tcp::wan::tcp_window_limit;

/// The launcher is ending the job and says why once, for all ranks (a rank's own
/// message would repeat it as many times as there are ranks): exit quietly.
/// Exits with the code the job as a whole ends with: under a process manager that
/// takes the tasks' highest, as srun does, that is the job's code.
fn job_ended_by_launcher(rank: Rank, ended: &JobEnded) -> ! {
    tracing::info!("rank {rank}: the job is ending: {}", ended.reason);
    std::process::exit(if ended.code == 0 { 1 } else { ended.code })
}

/// Errors of runtime operations, each saying what happened and what would help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Failed(#[from] Failure),
    #[error("invalid request id")]
    BadRequest,
    #[error("{0}")]
    Setup(String),
}

/// Completion of a request.
pub type Completion = Result<Status, Error>;

struct LinkSink<'a> {
    peer: Rank,
    ep: &'a mut Endpoint,
    reqs: &'a Requests,
}

impl Sink for LinkSink<'_> {
    type Token = PayloadToken;
    fn on_header(&mut self, repr: &DataRepr) -> Result<(Placement, PayloadToken), String> {
        let (dest, token) = self
            .ep
            .handle_header(self.peer, repr)
            .map_err(|e| e.to_string())?;
        let placement = match dest {
            PayloadDest::None => Placement::None,
            PayloadDest::Engine(v) => Placement::Engine(v),
            PayloadDest::User {
                req,
                offset,
                len,
                skip,
            } => match self.reqs.get(req) {
                Some(r) => Placement::User {
                    buf: r.buf.clone(),
                    offset,
                    len,
                    skip,
                },
                None => return Err(format!("payload for a request that no longer exists ({req})")),
            },
        };
        Ok((placement, token))
    }
    fn on_payload(&mut self, token: PayloadToken, engine_buf: Option<Vec<u8>>) -> Result<(), String> {
        self.ep
            .payload_done(self.peer, token, engine_buf)
            .map_err(|e| e.to_string())
    }
}

pub struct Runtime {
    pub cfg: Config,
    /// Who this rank is, every rank's card, and the rendezvous (`boot`).
    job: Job,
    ep: Endpoint,
    reqs: Requests,
    /// Every open lane, by the identity the engine gave it.
    lanes: Lanes,
    /// Each transport's wire-up (`fabric/`): TCP's listeners, connects, relays and hole
    /// punches; shared memory with the ranks of this node; raw-Ethernet ports.
    fabrics: Fabrics,
    /// First-lane set-ups under way and what each attempt came to.
    dialing: Dialing,
    waiter: Waiter,
    /// The event loop's own bookkeeping between passes.
    passes: Passes,
    /// Work of the layers above that must advance whenever the job progresses.
    background: BackgroundWork,
    /// Broken lanes whose frames may have to go again, by peer and lane tag, until the
    /// peer says how many arrived.
    broken: HashMap<(Rank, u64), transport::Ledger>,
    /// Where this rank is in the job's life: running, aborting, finalizing.
    life: Lifecycle,
    /// Whether the node has a CPU to spare for a progress thread.
    spare_cpu: bool,
}

/// First-lane set-ups and their outcomes.
#[derive(Default)]
struct Dialing {
    /// Each peer's deadline, and the retry after this rank gave way to a peer's
    /// simultaneous connection (timers as data, in `proto`).
    setups: proto::dial::Setups,
    /// Why each transport passed over or failed did not carry a first lane, for error
    /// messages and `pontoon doctor`.
    refusals: Refusals,
}

/// What the event loop keeps from one pass to the next.
struct Passes {
    /// Which socket lanes have bytes to read, once there are several (see `progress`).
    ready: ReadySet,
    /// Whether every socket lane is in `ready`: from the second on (see `waiter.rs`).
    links_watched: bool,
    yielded: usize,
    done_tokens: Vec<u64>,
    /// One-copy reads the engine asked for in this pass over its outputs (`pulls.rs`).
    pulls: Vec<pulls::Pull>,
    polls: u32,
    /// When the rarely busy sockets are looked at next even if epoll reported nothing
    /// (see `progress`).
    next_housekeeping: Instant,
    housekeeping_passes: u64,
    /// When the socket lanes are looked at next (`health.rs`).
    next_lane_check: Instant,
    /// Give the CPU away between idle polls (ranks outnumber CPUs).
    yield_when_idle: bool,
    /// Counts passes that moved something and requests that finished: a thread that
    /// waits without the library's lock (`MPI_THREAD_MULTIPLE`) looks again when it
    /// changed.
    activity: u64,
}

/// Work of the layers above that must advance whenever the job progresses
/// (non-blocking collectives), run at the end of every progress pass.
#[derive(Default)]
struct BackgroundWork {
    work: Option<Background>,
    /// Whether `work` has work: idle passes skip the call while it has none.
    armed: bool,
}

struct Lifecycle {
    /// When this process's runtime started (MPI_Wtime's origin).
    start: Instant,
    /// This rank heard of the job's abort or called it (`abort.rs`): lanes that break
    /// from then on are expected.
    aborting: bool,
    /// This rank told the coordinator it finalized. A peer closes its lanes only once
    /// every rank did, so a lane it closes cleanly from then on is a peer that finished
    /// (its goodbye may still be in flight on another lane), not one that died.
    finalizing: bool,
    /// The coordinator said that every rank has finalized.
    finalize_done: bool,
}

/// See [`Runtime::set_background`]; returns whether it did anything.
pub type Background = Box<dyn FnMut(&mut Runtime) -> bool>;

impl Runtime {
    /// Starts the runtime: from the launcher's environment, or as a single rank.
    pub fn init() -> Result<Runtime, Error> {
        Self::init_threaded(false)
    }

    /// [`Runtime::init`] for a program whose threads call in at once (`several`): the
    /// node's collective area, which runs one collective at a time in one order at
    /// every member, is refused for the node (threads may run collectives on several
    /// communicators in different orders at different ranks).
    pub fn init_threaded(several: bool) -> Result<Runtime, Error> {
        let mut started = crate::boot::start().map_err(Error::Setup)?;
        started.cfg.several_threads = several;
        let mut rt = Runtime::assemble(started)?;
        rt.explain_eth();
        rt.start_shm();
        rt.settle_shm(rt.cfg.connect_timeout);
        Ok(rt)
    }

    fn assemble(started: Started) -> Result<Runtime, Error> {
        let Started {
            cfg,
            job,
            engine,
            fabrics,
            yield_when_idle,
            spare_cpu,
        } = started;
        let epoll_error = |e| Error::Setup(format!("rank {}: epoll: {e}", job.id.rank));
        let waiter = Waiter::new().map_err(epoll_error)?;
        let ready = ReadySet::new(&waiter).map_err(epoll_error)?;
        for s in fabrics.tcp.listeners.iter().flat_map(|l| l.sockets.iter()) {
            waiter.watch_as(s, Waiter::LISTENING);
        }
        if let Some(fd) = job.rendezvous.as_ref().and_then(Rendezvous::as_fd) {
            waiter.watch(fd);
        }
        let now = Instant::now();
        Ok(Runtime {
            ep: Endpoint::new(job.id.rank, job.id.size, engine),
            reqs: Requests::default(),
            lanes: Lanes::new(job.id.size as usize),
            cfg,
            job,
            fabrics,
            dialing: Dialing::default(),
            waiter,
            passes: Passes {
                ready,
                links_watched: false,
                yielded: 0,
                done_tokens: Vec::new(),
                pulls: Vec::new(),
                polls: 0,
                next_housekeeping: now,
                housekeeping_passes: 0,
                next_lane_check: now + health::CHECK_EVERY,
                yield_when_idle,
                activity: 0,
            },
            background: BackgroundWork::default(),
            broken: HashMap::new(),
            life: Lifecycle {
                start: now,
                aborting: false,
                finalizing: false,
                finalize_done: false,
            },
            spare_cpu,
        })
    }

    pub fn rank(&self) -> Rank {
        self.job.id.rank
    }
    pub fn size(&self) -> u32 {
        self.job.id.size
    }
    /// Progresses until this rank's connection attempts and hole punches are over, or
    /// `limit` passes (further lanes are set up in the background meanwhile).
    pub fn settle_wireup(&mut self, limit: Duration) {
        let deadline = Deadline::after(clock::now(), clock::nanos(limit));
        while (self.setting_up_lanes() || self.fabrics.tcp.punching.busy()) && !deadline.passed(clock::now())
        {
            if !self.progress() {
                self.sleep(Duration::from_millis(1));
            }
        }
    }

    /// Every rank publishes `value` under `topic` at the rendezvous (the launcher's
    /// coordinator or the PMI process manager) and waits until all have (a key-value
    /// fence); returns every rank's value, by rank. It works between ranks that cannot
    /// reach each other, since only the rendezvous carries it. Collective and blocking
    /// (nothing else progresses meanwhile): call it when no transfer with another rank
    /// is pending.
    pub fn exchange(&mut self, topic: &str, value: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
        let Some(rendezvous) = self.job.rendezvous.as_mut() else {
            return Ok(vec![value.to_vec()]);
        };
        rendezvous
            .exchange(self.job.id.rank, self.job.id.size, topic, value)
            .map_err(|e| {
                Error::Setup(format!(
                    "rank {}: key-value exchange ({topic}): {e}",
                    self.job.id.rank
                ))
            })
    }

    /// When this process's runtime started (MPI_Wtime's origin).
    pub fn started(&self) -> Instant {
        self.life.start
    }

    pub fn wtime(&self) -> f64 {
        self.life.start.elapsed().as_secs_f64()
    }

    // ---- progress ----------------------------------------------------------------

    /// One pass over everything; returns whether anything happened.
    pub fn progress(&mut self) -> bool {
        let mut any = self.drive_outputs();
        any |= self.take_shm_announcements();
        any |= self.service_signalled();
        // Polled lanes (shared memory on a small node, raw Ethernet): frames arrive
        // without an fd saying so, so look at each on every pass
        // (a load of the ring's tail; no system call).
        let mut i = 0;
        while let Some(&lane) = self.lanes.polled().get(i) {
            any |= self.service_link(lane, true);
            i += 1;
        }
        // One socket lane: `recv()` on it is the cheapest way to look. Several: one
        // epoll_wait says which to read, instead of a `recv()` per lane that mostly
        // returns EAGAIN (with 7 peers, an idle pass was 7 system calls; ranks sharing
        // CPUs spend their neighbours' time on them).
        let read_all = !self.passes.links_watched;
        let mut rarely_busy_ready = false;
        if !read_all {
            let mut keys = [0u64; 64];
            let n = self.passes.ready.poll(&mut keys);
            for &key in &keys[..n] {
                if key == ReadySet::WAITER {
                    rarely_busy_ready = true;
                } else if key == ReadySet::WAKER {
                    self.passes.ready.drain_waker();
                } else {
                    any |= self.service_link(LaneId(key as u32), true);
                }
            }
        }
        let mut i = 0;
        while let Some(&lane) = self.lanes.sockets().get(i) {
            i += 1;
            let read = read_all && self.socket_lane_due(lane);
            if read || self.lanes.get(lane).is_some_and(|l| l.link.tx_queued() > 0) {
                let progressed = self.service_link(lane, read);
                any |= progressed;
                if read && !progressed {
                    self.rest_side_lane(lane);
                }
            }
        }
        if self.ep.is_streaming() {
            let lanes = &self.lanes;
            self.ep
                .fill_lanes(|lane| lanes.get(lane).map_or(u64::MAX, |l| l.link.tx_queued()));
        }
        if self.ep.is_coalescing() {
            let now = clock::now();
            if self.ep.poll_timeout().is_some_and(|due| due <= now) {
                self.ep.handle_timeout(now);
            }
        }
        // Also completes the sends that the flushes above finished.
        any |= self.drive_outputs();
        self.passes.polls = self.passes.polls.wrapping_add(1);
        if rarely_busy_ready || self.setting_up_lanes() || self.housekeeping_due() {
            self.waiter.drain();
            self.service_wakeups();
            self.check_lanes();
            any |= self.wireup();
            self.poll_control();
            any |= self.drive_outputs();
            self.passes.next_housekeeping = Instant::now() + HOUSEKEEPING_EVERY;
            self.passes.housekeeping_passes += 1;
        }
        // Taken out while it runs: it may call back into the runtime (and so into
        // `progress`) without running itself again.
        if self.background.armed {
            if let Some(mut task) = self.background.work.take() {
                any |= task(self);
                self.background.work.get_or_insert(task);
            }
        }
        self.passes.activity = self.passes.activity.wrapping_add(u64::from(any));
        any
    }

    /// Changes whenever a pass moved something or a request finished (see
    /// [`Runtime::wait_pass`]).
    pub fn activity(&self) -> u64 {
        self.passes.activity
    }

    /// Whether this rank wants a progress thread (`PONTOON_ASYNC_PROGRESS`; `auto`: when
    /// the node has a CPU to spare for it).
    pub fn wants_progress_thread(&self) -> bool {
        match self.cfg.async_progress {
            crate::config::AsyncProgress::On => true,
            crate::config::AsyncProgress::Off => false,
            crate::config::AsyncProgress::Auto => self.spare_cpu,
        }
    }

    /// Wakes, from another thread, a thread sleeping on this rank's lanes.
    pub fn thread_waker(&mut self) -> std::io::Result<crate::waiter::Waker> {
        self.passes.ready.waker()
    }

    /// Whether wire-up and the coordinator need looking at: every pass while a connection
    /// is being set up.
    fn setting_up_lanes(&self) -> bool {
        !self.fabrics.tcp.outgoing.is_empty()
            || !self.fabrics.tcp.incoming.is_empty()
            || self.fabrics.shm.busy()
            || self.fabrics.eth.busy()
            || self.fabrics.tcp.punching.dialling()
    }

    /// Every 1024th pass (well under a millisecond), one `epoll_wait` on the rarely busy
    /// sockets (listeners, the coordinator, doorbells) says whether any is ready, and the
    /// clock whether the periodic checks are due. Looking at them all instead costs a
    /// system call each, and an `accept()` that finds nobody allocates and frees a socket
    /// and a file in the kernel: on a busy-polling rank that was a fifth of its time.
    fn housekeeping_due(&mut self) -> bool {
        self.passes.polls.is_multiple_of(1024)
            && (self.waiter.drain() > 0 || Instant::now() >= self.passes.next_housekeeping)
    }

    /// Installs work that runs at the end of every progress pass, so that operations
    /// of the layers above (non-blocking collectives) advance while the caller waits
    /// for something else.
    pub fn set_background(&mut self, task: Option<Background>) {
        self.background.work = task;
    }

    /// Tells the runtime that the background task has work (an operation started); it
    /// runs on every progress pass until it calls [`Runtime::disarm_background`].
    pub fn arm_background(&mut self) {
        self.background.armed = true;
    }

    /// Called by the background task when it has nothing left to advance.
    pub fn disarm_background(&mut self) {
        self.background.armed = false;
    }

    fn complete_tokens(&mut self) -> bool {
        if self.passes.done_tokens.is_empty() {
            return false;
        }
        // Taken and put back, so the vector keeps its capacity: no allocation per message.
        let mut tokens = std::mem::take(&mut self.passes.done_tokens);
        for t in tokens.drain(..) {
            if t != 0 {
                self.finish(t, Ok(self.sent_status()));
            }
        }
        self.passes.done_tokens = tokens;
        true
    }

    /// `lane`, or if it broke since a frame was queued for it, the lane of control
    /// frames `peer` has now.
    fn live_lane(&self, peer: Rank, lane: LaneId) -> Option<LaneId> {
        match self.lanes.get(lane) {
            Some(_) => Some(lane),
            None => self.ep.control_lane(peer),
        }
    }

    /// The status of a completed send.
    fn sent_status(&self) -> Status {
        Status {
            source: self.job.id.rank,
            tag: 0,
            count: 0,
            truncated: false,
            cancelled: false,
        }
    }

    fn finish(&mut self, id: ReqId, result: Result<Status, Failure>) {
        self.passes.activity = self.passes.activity.wrapping_add(1);
        if let Some(r) = self.reqs.get_mut(id) {
            // A send its cancel withdrew stays cancelled.
            if !matches!(r.result, Some(Ok(st)) if st.cancelled) {
                r.result = Some(result);
            }
        }
    }

    /// Whether socket lane `lane` is read on this pass (it is not resting).
    fn socket_lane_due(&mut self, lane: LaneId) -> bool {
        match self.lanes.get_mut(lane) {
            Some(l) if l.rest > 0 => {
                l.rest -= 1;
                false
            }
            _ => true,
        }
    }

    /// Socket lane `lane` was read and had nothing. If it carries no eager messages of
    /// its peer (a TCP lane beside a raw-Ethernet one takes bulk and large eager
    /// messages only), it rests a few passes: a `recv()` on it on every pass would
    /// double the system calls of the pass that watches the raw lane for small
    /// messages, and with them the time to notice one (about a fifth of a small
    /// message's round trip). Bulk waits in the kernel meanwhile, and a lane with
    /// data is read on every pass.
    fn rest_side_lane(&mut self, lane: LaneId) {
        const SIDE_LANE_EVERY: u8 = 4;
        if self.lanes.polled().is_empty() {
            return;
        }
        let Some(peer) = self.lanes.get(lane).map(|l| l.peer) else {
            return;
        };
        if self.ep.control_lane(peer) == Some(lane) {
            return;
        }
        if let Some(l) = self.lanes.get_mut(lane) {
            l.rest = SIDE_LANE_EVERY - 1;
        }
    }

    /// Reads a link (with `read`) and writes what it has queued. A failed link goes
    /// down ([`Runtime::lane_down`]). Returns whether anything happened.
    #[inline]
    fn service_link(&mut self, lane: LaneId, read: bool) -> bool {
        let Some(Lane { peer, link, .. }) = self.lanes.get_mut(lane) else {
            return false; // closed since epoll reported it
        };
        let peer = *peer;
        let mut res = Ok(false);
        if read {
            let mut sink = LinkSink {
                peer,
                ep: &mut self.ep,
                reqs: &self.reqs,
            };
            res = link.recv(&mut sink);
        }
        if let (Ok(read_some), true) = (&res, link.tx_queued() > 0) {
            let read_some = *read_some;
            res = link
                .flush(&mut self.passes.done_tokens)
                .map(|wrote| read_some || wrote);
        }
        match res {
            Ok(p) => {
                if p && read {
                    self.acknowledge(lane);
                }
                p
            }
            Err(e) => {
                self.lane_down(lane, e);
                true
            }
        }
    }

    /// Takes what woke the rank on the polled lanes' fds whose doorbell rang, and
    /// notices a peer whose end closed (its process ended).
    fn service_wakeups(&mut self) {
        self.drain_bell();
        for lane in self.waiter.take_doorbells() {
            let lane = LaneId(lane);
            let Some(l) = self.lanes.get_mut(lane) else {
                continue;
            };
            if let Err(e) = l.link.service_wakeup() {
                self.lane_down(lane, e);
            }
        }
    }

    /// Closes one lane; frames queued on it are dropped.
    fn close_lane(&mut self, lane: LaneId) {
        if let Some(l) = self.lanes.remove(lane) {
            if let Some(fd) = l.link.fd() {
                if l.link.polled() {
                    self.waiter.unwatch(fd);
                } else if self.passes.links_watched {
                    self.passes.ready.unwatch(fd);
                }
            }
        }
    }

    /// Closes every lane to `peer`; frames queued on them are dropped.
    fn drop_lanes(&mut self, peer: Rank) {
        for lane in self.lanes.of_peer(peer).to_vec() {
            self.close_lane(lane);
        }
    }

    /// Carries out the engine's instructions. Returns whether there were any.
    #[inline]
    fn drive_outputs(&mut self) -> bool {
        // Checked inline: an idle progress pass runs this three times, and every
        // nanosecond of an idle pass delays noticing a message that has just arrived.
        if !self.ep.has_output() && self.passes.done_tokens.is_empty() {
            return false;
        }
        self.carry_out_outputs()
    }

    #[inline(never)]
    fn carry_out_outputs(&mut self) -> bool {
        let mut any = false;
        loop {
            self.carry_out_pass(&mut any);
            if self.passes.pulls.is_empty() {
                break;
            }
            // Reported after the pass: its reads go in one system call (`pulls.rs`).
            self.read_pulls();
        }
        self.complete_tokens() || any
    }

    /// Carries out the engine's outputs until there are none, gathering its pulls.
    fn carry_out_pass(&mut self, any: &mut bool) {
        while let Some(out) = self.ep.poll() {
            *any = true;
            match out {
                Output::Transmit {
                    peer,
                    lane,
                    header,
                    payload,
                    completes,
                } => {
                    let payload = match payload {
                        Some(s) => match self.reqs.get(s.req) {
                            Some(r) => Some((&r.buf, s.offset, s.len)),
                            None => continue,
                        },
                        None => None,
                    };
                    // Queued for a lane that broke since: a fragment goes again by the engine.
                    if header.kind() == proto::wire::Kind::Frag && self.lanes.get(lane).is_none() {
                        continue;
                    }
                    let Some(lane) = self.live_lane(peer, lane) else {
                        continue;
                    };
                    let Some(l) = self.lanes.get_mut(lane) else {
                        continue;
                    };
                    debug_assert_eq!(l.peer, peer);
                    let token = completes.unwrap_or(0);
                    match l.link.send(&header, payload, token) {
                        Ok(true) if token != 0 => self.finish(token, Ok(self.sent_status())),
                        Ok(_) => {}
                        Err(e) => self.lane_down(lane, e),
                    }
                }
                Output::TransmitOwned {
                    peer,
                    lane,
                    header,
                    payload,
                } => {
                    // Coalesced messages: their sends completed when they were packed.
                    let Some(lane) = self.live_lane(peer, lane) else {
                        continue;
                    };
                    let Some(l) = self.lanes.get_mut(lane) else {
                        continue;
                    };
                    let len = payload.len() as u64;
                    if let Err(e) =
                        l.link
                            .send(&header, Some((&transport::Buffer::owned(payload), 0, len)), 0)
                    {
                        self.lane_down(lane, e);
                    }
                }
                Output::CopyOut { req, len } => {
                    let data = self
                        .reqs
                        .get(req)
                        .map(|r| r.buf.slice(0, len).to_vec())
                        .unwrap_or_default();
                    self.ep.handle_copy_out(req, data);
                }
                Output::LocalCopy { from, to, len } => {
                    if let (Some(a), Some(b)) = (self.reqs.get(from), self.reqs.get(to)) {
                        b.buf.write_at(0, a.buf.slice(0, len));
                    }
                }
                Output::Deliver { req, data } => {
                    if let Some(r) = self.reqs.get(req) {
                        r.buf.write_at(0, &data);
                    }
                    self.ep.recycle(data);
                }
                Output::Pull { peer, req, at, len } => self.passes.pulls.push((peer, req, at, len)),
                Output::RecvDone { req, result } => self.finish(req, result),
                Output::SendDone { req, result } => self.finish(req, result.map(|()| self.sent_status())),
                Output::SendCancelled { req, withdrawn } => {
                    let cancelled = Status {
                        cancelled: true,
                        ..self.sent_status()
                    };
                    if let Some(r) = self.reqs.get_mut(req) {
                        r.cancelling = false;
                        if withdrawn {
                            r.result = Some(Ok(cancelled));
                        }
                    }
                }
                Output::Connect { peer } => self.start_connect(peer),
                Output::Punch { peer, msg } => self.punch_frame(peer, msg),
                Output::LaneAck { peer, tag, frames } => self.lane_acked(peer, tag, frames),
                Output::LaneLost { peer, tag, frames } => self.lane_lost(peer, tag, frames),
                Output::JobAborted { peer, origin, code } => self.heard_abort(peer, origin, code),
                Output::Abandon { peer, req } => {
                    if let Some(r) = self.reqs.get(req) {
                        for i in 0..self.lanes.of_peer(peer).len() {
                            let lane = self.lanes.of_peer(peer)[i];
                            if let Some(l) = self.lanes.get_mut(lane) {
                                l.link.abandon_payload(&r.buf);
                            }
                        }
                    }
                }
            }
        }
    }

    fn poll_control(&mut self) {
        loop {
            let Some(rendezvous) = self.job.rendezvous.as_mut().filter(|_| !self.life.finalize_done) else {
                return;
            };
            match rendezvous.poll_event() {
                Ok(Some(Event::FinalizeDone)) => {
                    // Nothing more comes: the rendezvous may close the connection now.
                    self.life.finalize_done = true;
                    return;
                }
                Ok(None) => return,
                Ok(Some(Event::PeerFailed { rank, cause })) => {
                    // Frames queued for the dead rank are dropped with its lanes.
                    self.drop_lanes(rank);
                    self.ep.handle_peer_failed(rank, &cause);
                }
                Ok(Some(Event::Shutdown(ended))) => job_ended_by_launcher(self.job.id.rank, &ended),
                Err(e) => {
                    eprintln!("pontoon: rank {}: {e}; exiting", self.job.id.rank);
                    std::process::exit(1);
                }
            }
        }
    }

    // ---- end of job --------------------------------------------------------------

    /// Finalize: tell peers, drain every link, then wait for all ranks at the coordinator.
    pub fn finalize(&mut self) -> Result<(), Error> {
        self.shm_finalized();
        self.ep.finalize();
        self.drive_outputs();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.lanes.any_queued() && Instant::now() < deadline {
            if !self.progress() {
                self.sleep(Duration::from_millis(1));
            }
        }
        if let Some(rendezvous) = self.job.rendezvous.as_mut() {
            match rendezvous.start_finalize() {
                Ok(()) => self.life.finalizing = true,
                Err(NoFinalize::Shutdown(ended)) => job_ended_by_launcher(self.job.id.rank, &ended),
                Err(NoFinalize::Lost(e)) => return Err(Error::Setup(format!("finalize: {e}"))),
            }
            // The lanes are served until every rank has finalized: a peer may still
            // need an acknowledgement from this rank, or a frame of ours sent again
            // (raw-Ethernet lanes, whose reliability is ours, not the kernel's).
            // The rendezvous' socket, doorbells and lane timers wake the sleep: a
            // short one would have every finalized rank poll a thousand times a
            // second and starve the ranks still working (256 ranks on 2 CPUs took
            // 5 s to finalize).
            while !self.life.finalize_done {
                self.poll_control();
                if !self.life.finalize_done && !self.progress() {
                    self.sleep(IDLE_SLEEP);
                }
            }
            self.job.rendezvous = None;
        }
        self.lanes.clear();
        Ok(())
    }
}
