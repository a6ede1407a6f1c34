//! The one event loop: requests in, protocol engine in the middle, links and the
//! coordinator around it. Blocking calls busy-poll for `PONTOON_SPIN_US`, then
//! sleep in poll(2) on every socket.

use std::collections::HashMap;
use std::net::TcpStream;
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use proto::handshake::{Contention, Identity};
use proto::wire::data::DataRepr;
use proto::{
    Endpoint, EngineConfig, Failure, LaneId, Output, PayloadDest, PayloadToken, Rank, ReqId, Status,
};
use transport::shm::{shm_caps, shm_link};
use transport::tcp::{tcp_caps, tcp_link};
use transport::{AnyLink, Link, LinkError, Placement, Sink, Transport};

use crate::config::{Bind, Config, Yield};
use crate::control::ControlClient;
use crate::jobenv::JobEnv;
use crate::lanes::{Lane, Lanes, PathInfo, Route};
use crate::requests::Requests;
use crate::shm_wireup::{ShmAccept, ShmDial, ShmProgress};
use crate::waiter::{ReadySet, Waiter};
use crate::wireup::{Attempt, Incoming, Listeners, Outgoing, Progress, Timing};
use net::EndpointCard;

mod p2p;
mod sleep;

/// Logs to stderr, filtered by `PONTOON_LOG` (a program may have installed its own).
fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .try_init();
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    use rustix::thread::{sched_getaffinity, CpuSet};
    match sched_getaffinity(None) {
        Ok(allowed) => (0..CpuSet::MAX_CPU).filter(|c| allowed.is_set(*c)).collect(),
        Err(_) => Vec::new(),
    }
}

/// Pins this process to one of the CPUs it may use, chosen by its local rank.
fn bind_to_core(index: u32) {
    use rustix::thread::{sched_setaffinity, CpuSet};
    let cpus = allowed_cpus();
    if cpus.is_empty() {
        return;
    }
    let mut one = CpuSet::new();
    one.set(cpus[index as usize % cpus.len()]);
    if let Err(e) = sched_setaffinity(None, &one) {
        tracing::warn!("rank cannot pin itself to a CPU (PONTOON_BIND=core): {e}");
    }
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

fn nonce() -> [u8; 16] {
    let mut n = [0u8; 16];
    getrandom::fill(&mut n).expect("the OS provides randomness");
    n
}

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
    fn on_payload(&mut self, token: PayloadToken, engine_buf: Option<Vec<u8>>) {
        self.ep.payload_done(self.peer, token, engine_buf);
    }
}

pub struct Runtime {
    pub cfg: Config,
    id: Identity,
    ep: Endpoint,
    reqs: Requests,
    /// Every open lane, by the identity the engine gave it.
    lanes: Lanes,
    listeners: Option<Listeners>,
    outgoing: Vec<Outgoing>,
    incoming: Vec<Incoming>,
    /// Where ranks of this node connect shared-memory lanes (`None`: not allowed or
    /// not possible here; they use TCP).
    shm_listener: Option<UnixListener>,
    shm_dials: Vec<ShmDial>,
    shm_accepts: Vec<ShmAccept>,
    /// Why a shared-memory lane with a peer could not be had (it then uses TCP).
    shm_refusals: HashMap<Rank, String>,
    /// Endpoint cards of every rank (this one's too), from the init fence.
    cards: HashMap<Rank, EndpointCard>,
    /// Every connection attempt to each peer, for errors and `pontoon doctor`.
    attempt_log: HashMap<Rank, Vec<Attempt>>,
    /// The last key-value fence entered (init uses 1).
    fence_epoch: u32,
    /// When we last gave way to a peer's simultaneous connection.
    yielded_at: HashMap<Rank, Instant>,
    control: Option<ControlClient>,
    waiter: Waiter,
    /// Which socket lanes have bytes to read, once there are several (see `progress`).
    ready: ReadySet,
    /// Whether every socket lane is in `ready`: from the second on (see `waiter.rs`).
    links_watched: bool,
    yielded: usize,
    done_tokens: Vec<u64>,
    polls: u32,
    start: Instant,
    /// Deadline per peer that we are connecting to, for the error if none appears.
    connect_deadline: HashMap<Rank, Instant>,
    /// Why connecting to a peer failed, kept for error messages.
    connect_reports: HashMap<Rank, String>,
    /// Work of the layers above that must advance whenever the job progresses
    /// (non-blocking collectives), run at the end of every progress pass.
    background: Option<Background>,
    /// Give the CPU away between idle polls (ranks outnumber CPUs).
    yield_when_idle: bool,
    /// Whether `background` has work: idle passes skip the call while it has none.
    background_armed: bool,
}

/// What this rank already has going with each other rank, for judging a HELLO: only a
/// HELLO of ours that is out can collide with the peer's (a connect of ours still racing
/// towards some address may never get anywhere).
fn contention<'a>(
    lanes: &'a Lanes,
    outgoing: &[Outgoing],
    dials: &[ShmDial],
) -> impl Fn(Rank) -> Contention + 'a {
    let handshaking: Vec<Rank> = outgoing
        .iter()
        .filter(|o| o.in_handshake())
        .map(|o| o.peer)
        .chain(dials.iter().filter(|d| d.in_handshake()).map(|d| d.peer))
        .collect();
    move |r: Rank| {
        if lanes.connected(r) {
            Contention::Connected
        } else if handshaking.contains(&r) {
            Contention::Connecting
        } else {
            Contention::None
        }
    }
}

/// Bytes of shared-memory receive rings one rank may hold, over all its node-local peers.
const SHM_BUDGET: usize = 8 << 20;
/// Largest ring of one shared-memory lane (per direction).
const SHM_MAX_RING: usize = 1 << 20;

/// See [`Runtime::set_background`]; returns whether it did anything.
pub type Background = Box<dyn FnMut(&mut Runtime) -> bool>;

impl Runtime {
    /// Starts the runtime: from the launcher's environment, or as a single rank.
    pub fn init() -> Result<Runtime, Error> {
        let cfg = Config::from_env().map_err(|e| Error::Setup(e.to_string()))?;
        init_logging(&cfg.log);
        let env = JobEnv::from_env().map_err(|e| Error::Setup(e.to_string()))?;
        let ecfg = EngineConfig {
            eager_limit: cfg.eager_limit,
            frag_size: cfg.frag_size,
            // Two fragments: one being written while the next waits, so a lane never
            // idles between fills, yet control frames queue behind little.
            lane_queue: 2 * u64::from(cfg.frag_size),
        };
        let Some(env) = env else {
            let id = Identity {
                job_id: [0; 16],
                secret: [0; 32],
                rank: 0,
                size: 1,
            };
            return Runtime::assemble(cfg, id, Endpoint::new(0, 1, ecfg), None, None, HashMap::new());
        };
        // Ranks that outnumber the CPUs give theirs away while they wait (before
        // binding narrows what this process may use).
        let yield_when_idle = match cfg.yield_when_idle {
            Yield::Always => true,
            Yield::Never => false,
            Yield::Auto => env.local_size as usize > allowed_cpus().len().max(1),
        };
        match cfg.bind {
            Bind::None => {}
            Bind::ByLocalRank => bind_to_core(env.local_rank),
            Bind::ByRank => bind_to_core(env.rank),
        }
        let ifaces = net::interfaces();
        let local = net::iface::allowed_addresses(&ifaces, &cfg.policy);
        let mut control = ControlClient::connect_from(&env, &local, cfg.attempt_timeout).map_err(|e| {
            Error::Setup(format!(
                "rank {}: cannot reach the launcher's coordinator: {e}",
                env.rank
            ))
        })?;
        let listeners = Listeners::bind(&local, cfg.sockbuf)
            .map_err(|e| Error::Setup(format!("rank {}: cannot open a listening socket: {e}", env.rank)))?;
        // Bound before the fence, so that it exists once any rank of this node looks.
        let shm_listener = if cfg.transports.contains(&Transport::Shm) {
            transport::shm::listen(&transport::shm::socket_name(&env.job_id, env.rank))
                .map_err(|e| {
                    tracing::warn!(
                        "rank {}: no shared-memory socket ({e}); ranks of this node will use TCP",
                        env.rank
                    )
                })
                .ok()
        } else {
            None
        };
        let mut card = EndpointCard::new(
            &ifaces,
            &cfg.policy,
            net::node_id(),
            cfg.site.clone(),
            listeners.ports(),
        );
        let setup = |e: &dyn std::fmt::Display| {
            Error::Setup(format!(
                "rank {}: wire-up through the launcher failed: {e}",
                env.rank
            ))
        };
        card.seen_from = Some(control.seen_from().ip());
        control
            .put(&format!("card/{}", env.rank), &card.encode())
            .map_err(|e| setup(&e))?;
        let kvs = control.fence(1).map_err(|e| setup(&e))?;
        let mut cards = HashMap::new();
        for r in 0..env.size {
            let v = kvs
                .get(&format!("card/{r}"))
                .ok_or_else(|| setup(&format!("rank {r} published no endpoint card")))?;
            let card = EndpointCard::decode(v).map_err(|e| setup(&format!("rank {r}: {e}")))?;
            cards.insert(r, card);
        }
        let id = Identity {
            job_id: env.job_id,
            secret: env.secret,
            rank: env.rank,
            size: env.size,
        };
        let ep = Endpoint::new(env.rank, env.size, ecfg);
        let mut rt = Runtime::assemble(cfg, id, ep, Some(control), Some(listeners), cards)?;
        rt.yield_when_idle = yield_when_idle;
        if let Some(l) = shm_listener {
            rt.waiter.watch(&l);
            rt.shm_listener = Some(l);
        }
        Ok(rt)
    }

    fn assemble(
        cfg: Config,
        id: Identity,
        ep: Endpoint,
        control: Option<ControlClient>,
        listeners: Option<Listeners>,
        cards: HashMap<Rank, EndpointCard>,
    ) -> Result<Runtime, Error> {
        let size = id.size as usize;
        let epoll_error = |e| Error::Setup(format!("rank {}: epoll: {e}", id.rank));
        let waiter = Waiter::new().map_err(epoll_error)?;
        let ready = ReadySet::new(&waiter).map_err(epoll_error)?;
        for s in listeners.iter().flat_map(|l| l.sockets.iter()) {
            waiter.watch(s);
        }
        if let Some(c) = &control {
            waiter.watch(c.as_fd());
        }
        Ok(Runtime {
            cfg,
            id,
            ep,
            reqs: Requests::default(),
            lanes: Lanes::new(size),
            listeners,
            outgoing: Vec::new(),
            incoming: Vec::new(),
            shm_listener: None,
            shm_dials: Vec::new(),
            shm_accepts: Vec::new(),
            shm_refusals: HashMap::new(),
            cards,
            attempt_log: HashMap::new(),
            fence_epoch: 1,
            yielded_at: HashMap::new(),
            control,
            done_tokens: Vec::new(),
            polls: 0,
            start: Instant::now(),
            connect_deadline: HashMap::new(),
            connect_reports: HashMap::new(),
            waiter,
            ready,
            links_watched: false,
            yielded: 0,
            background: None,
            background_armed: false,
            yield_when_idle: false,
        })
    }

    pub fn rank(&self) -> Rank {
        self.id.rank
    }
    pub fn size(&self) -> u32 {
        self.id.size
    }
    /// Wire-up statistics: (connected peers, attempts given up because the peer's
    /// simultaneous connection won).
    pub fn wireup_stats(&self) -> (usize, usize) {
        (self.lanes.peers_connected(), self.yielded)
    }

    /// Addresses `rank` listens on, from its endpoint card.
    pub fn peer_addresses(&self, rank: Rank) -> Vec<std::net::SocketAddr> {
        self.cards
            .get(&rank)
            .map(|c| {
                c.addresses()
                    .filter(|(_, ip)| c.port_for(*ip) != 0)
                    .map(|(_, ip)| std::net::SocketAddr::new(ip, c.port_for(ip)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `rank`'s endpoint card (interfaces, addresses, node, site).
    pub fn card(&self, rank: Rank) -> Option<&EndpointCard> {
        self.cards.get(&rank)
    }

    /// The first lane with `peer`, once connected.
    pub fn path(&self, peer: Rank) -> Option<PathInfo> {
        self.lanes(peer).first().copied()
    }

    /// Every lane to `peer`, in the order they came up: the first connection (shared
    /// memory within a node), then one per further interface pair.
    pub fn lanes(&self, peer: Rank) -> Vec<PathInfo> {
        let info = |id: &LaneId| self.lanes.get(*id).map(|l| l.info);
        self.lanes.of_peer(peer).iter().filter_map(info).collect()
    }

    /// Why a shared-memory lane with `peer`, a rank of this node, could not be had.
    pub fn shm_refusal(&self, peer: Rank) -> Option<&str> {
        self.shm_refusals.get(&peer).map(String::as_str)
    }

    /// Progresses until this rank's connection attempts are over (further lanes are set
    /// up in the background once a peer is connected), or `limit` passes.
    pub fn settle_wireup(&mut self, limit: Duration) {
        let end = Instant::now() + limit;
        while !(self.outgoing.is_empty() && self.incoming.is_empty() && self.shm_dials.is_empty())
            && Instant::now() < end
        {
            if !self.progress() {
                self.sleep(Duration::from_millis(1));
            }
        }
    }

    /// Publishes `value` under `key` at the launcher's coordinator and waits until every
    /// rank has done the same (a key-value fence); returns every rank's keys. It works
    /// between ranks that cannot reach each other, since only the coordinator carries it.
    /// Collective and blocking (nothing else progresses meanwhile): call it when no
    /// transfer with another rank is pending.
    pub fn exchange(&mut self, key: &str, value: &[u8]) -> Result<HashMap<String, Vec<u8>>, Error> {
        let Some(control) = self.control.as_mut() else {
            return Ok(HashMap::from([(key.to_string(), value.to_vec())]));
        };
        self.fence_epoch += 1;
        let failed = |e: &dyn std::fmt::Display| {
            Error::Setup(format!("rank {}: key-value exchange: {e}", self.id.rank))
        };
        control.put(key, value).map_err(|e| failed(&e))?;
        control.fence(self.fence_epoch).map_err(|e| failed(&e))
    }

    /// Every connection attempt this rank made to `peer`, in order.
    pub fn attempts(&self, peer: Rank) -> &[Attempt] {
        self.attempt_log.get(&peer).map_or(&[], Vec::as_slice)
    }

    pub fn wtime(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    // ---- progress ----------------------------------------------------------------

    /// One pass over everything; returns whether anything happened.
    pub fn progress(&mut self) -> bool {
        let mut any = self.drive_outputs();
        // Shared-memory lanes: frames arrive in memory, so look at each on every pass
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
        let read_all = !self.links_watched;
        let mut rarely_busy_ready = false;
        if !read_all {
            let mut keys = [0u64; 64];
            let n = self.ready.poll(&mut keys);
            for &key in &keys[..n] {
                if key == ReadySet::WAITER {
                    rarely_busy_ready = true;
                } else {
                    any |= self.service_link(LaneId(key as u32), true);
                }
            }
        }
        if self.lanes.sockets() > 0 {
            for id in 0..self.lanes.slots() {
                let lane = LaneId(id as u32);
                let Some(l) = self.lanes.get(lane) else { continue };
                if !l.link.polled() && (read_all || l.link.tx_queued() > 0) {
                    any |= self.service_link(lane, read_all);
                }
            }
        }
        if self.ep.is_streaming() {
            let lanes = &self.lanes;
            self.ep
                .fill_lanes(|lane| lanes.get(lane).map_or(u64::MAX, |l| l.link.tx_queued()));
        }
        // Also completes the sends that the flushes above finished.
        any |= self.drive_outputs();
        self.polls = self.polls.wrapping_add(1);
        // Wire-up and the coordinator are rarely busy: look at them every 1024th pass
        // (well under a millisecond), or every pass while a connection is being set up.
        if rarely_busy_ready
            || self.polls.is_multiple_of(1024)
            || !self.outgoing.is_empty()
            || !self.incoming.is_empty()
            || !self.shm_dials.is_empty()
            || !self.shm_accepts.is_empty()
        {
            self.waiter.drain();
            self.service_wakeups();
            any |= self.wireup();
            self.poll_control();
            any |= self.drive_outputs();
        }
        // Taken out while it runs: it may call back into the runtime (and so into
        // `progress`) without running itself again.
        if self.background_armed {
            if let Some(mut task) = self.background.take() {
                any |= task(self);
                self.background.get_or_insert(task);
            }
        }
        any
    }

    /// Installs work that runs at the end of every progress pass, so that operations
    /// of the layers above (non-blocking collectives) advance while the caller waits
    /// for something else.
    pub fn set_background(&mut self, task: Option<Background>) {
        self.background = task;
    }

    /// Tells the runtime that the background task has work (an operation started); it
    /// runs on every progress pass until it calls [`Runtime::disarm_background`].
    pub fn arm_background(&mut self) {
        self.background_armed = true;
    }

    /// Called by the background task when it has nothing left to advance.
    pub fn disarm_background(&mut self) {
        self.background_armed = false;
    }

    fn complete_tokens(&mut self) -> bool {
        if self.done_tokens.is_empty() {
            return false;
        }
        // Taken and put back, so the vector keeps its capacity: no allocation per message.
        let mut tokens = std::mem::take(&mut self.done_tokens);
        for t in tokens.drain(..) {
            if t != 0 {
                self.finish(t, Ok(self.sent_status()));
            }
        }
        self.done_tokens = tokens;
        true
    }

    /// The status of a completed send.
    fn sent_status(&self) -> Status {
        Status {
            source: self.id.rank,
            tag: 0,
            count: 0,
            truncated: false,
        }
    }

    fn finish(&mut self, id: ReqId, result: Result<Status, Failure>) {
        if let Some(r) = self.reqs.get_mut(id) {
            r.result = Some(result);
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
        if res.is_ok() && link.tx_queued() > 0 {
            res = link.flush(&mut self.done_tokens).map(|_| true);
        }
        match res {
            Ok(p) => p,
            Err(e) => {
                self.lane_down(lane, e);
                true
            }
        }
    }

    /// Takes what woke the rank on the polled lanes' fds (doorbells), and notices a
    /// peer whose end closed (its process ended).
    fn service_wakeups(&mut self) {
        let mut i = 0;
        while let Some(&lane) = self.lanes.polled().get(i) {
            i += 1;
            let Some(l) = self.lanes.get_mut(lane) else {
                continue;
            };
            if let Err(e) = l.link.service_wakeup() {
                self.lane_down(lane, e);
                i = 0; // the list changed
            }
        }
    }

    /// Closes one lane; frames queued on it are dropped.
    fn close_lane(&mut self, lane: LaneId) {
        if let Some(l) = self.lanes.remove(lane) {
            if let Some(fd) = l.link.fd() {
                if l.link.polled() {
                    self.waiter.unwatch(fd);
                } else if self.links_watched {
                    self.ready.unwatch(fd);
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

    /// A lane broke. It lost what it had in flight, so the engine fails the peer, and
    /// with it go its other lanes.
    fn lane_down(&mut self, lane: LaneId, e: LinkError) {
        let Some(peer) = self.lanes.get(lane).map(|l| l.peer) else {
            return;
        };
        self.close_lane(lane);
        let cause = match e {
            LinkError::Closed => "its connection closed unexpectedly (the process probably died)".to_string(),
            other => format!("its connection failed: {other}"),
        };
        self.ep.handle_lane_down(peer, lane, &cause);
        if self.ep.peer_failure(peer).is_some() {
            self.drop_lanes(peer);
        }
    }

    /// Carries out the engine's instructions. Returns whether there were any.
    #[inline]
    fn drive_outputs(&mut self) -> bool {
        // Checked inline: an idle progress pass runs this three times, and every
        // nanosecond of an idle pass delays noticing a message that has just arrived.
        if !self.ep.has_output() && self.done_tokens.is_empty() {
            return false;
        }
        self.carry_out_outputs()
    }

    #[inline(never)]
    fn carry_out_outputs(&mut self) -> bool {
        let mut any = false;
        while let Some(out) = self.ep.poll() {
            any = true;
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
                }
                Output::RecvDone { req, result } => self.finish(req, result),
                Output::SendDone { req, result } => self.finish(req, result.map(|()| self.sent_status())),
                Output::Connect { peer } => self.start_connect(peer),
            }
        }
        self.complete_tokens() || any
    }

    fn start_connect(&mut self, peer: Rank) {
        let completing = self.incoming.iter().any(|c| c.verified_peer() == Some(peer))
            || self.shm_accepts.iter().any(|c| c.verified_peer() == Some(peer));
        self.connect_deadline
            .entry(peer)
            .or_insert_with(|| Instant::now() + self.cfg.connect_timeout);
        if completing || self.connecting(peer) || self.lanes.connected(peer) {
            // The peer's own connection is about to complete; it will carry our messages.
            return;
        }
        self.connect_deadline
            .insert(peer, Instant::now() + self.cfg.connect_timeout);
        self.dial(peer, self.cfg.connect_timeout);
        self.wireup();
    }

    /// Starts setting up the first lane to `peer`: shared memory with a rank of this
    /// node (where allowed and possible), else TCP to the best of its addresses.
    fn dial(&mut self, peer: Rank, total: Duration) {
        if let Some(ring) = self.shm_ring_for(peer) {
            match ShmDial::start(&self.id, peer, ring, nonce()) {
                Ok(d) => {
                    self.shm_dials.push(d);
                    return;
                }
                Err(why) => self.refuse_shm(peer, why),
            }
        }
        if !self.cfg.transports.contains(&Transport::Tcp) {
            let why = format!(
                "rank {peer} cannot be reached by the transports allowed (PONTOON_TRANSPORTS={}){}",
                Transport::list(&self.cfg.transports),
                self.shm_refusal(peer)
                    .map(|w| format!("; shared memory: {w}"))
                    .unwrap_or_default()
            );
            self.connect_reports.insert(peer, why);
            return;
        }
        self.outgoing.push(Outgoing::new(
            peer,
            self.candidates_for(peer),
            self.cfg.sockbuf,
            total,
        ));
    }

    /// The ring size of a shared-memory lane to `peer`, if it is a rank of this node
    /// and shared memory may be tried. Each rank's receive rings together stay within
    /// [`SHM_BUDGET`]: a node of many ranks gets smaller rings, not more memory.
    fn shm_ring_for(&self, peer: Rank) -> Option<usize> {
        self.shm_listener.as_ref()?;
        if self.shm_refusals.contains_key(&peer) {
            return None;
        }
        let node = self.cards.get(&self.id.rank)?.node;
        if self.cards.get(&peer)?.node != node {
            return None;
        }
        let local_peers = self.cards.values().filter(|c| c.node == node).count().max(2) - 1;
        let ring = (SHM_BUDGET / local_peers).next_power_of_two() / 2;
        Some(ring.clamp(transport::shm::MIN_RING, SHM_MAX_RING))
    }

    /// No shared memory with `peer`: say why once, and use TCP from now on.
    fn refuse_shm(&mut self, peer: Rank, why: String) {
        tracing::warn!(
            "rank {}: no shared memory with rank {peer}, using TCP: {why}",
            self.id.rank
        );
        self.shm_refusals.insert(peer, why);
    }

    /// Whether a first connection to `peer` is being set up by us.
    fn connecting(&self, peer: Rank) -> bool {
        self.outgoing.iter().any(|o| o.peer == peer && o.first_lane())
            || self.shm_dials.iter().any(|d| d.peer == peer)
    }

    /// The first lane to `peer` is up: what we were setting up ourselves is abandoned.
    fn first_lane_up(&mut self, peer: Rank) {
        if let Some(pos) = self
            .outgoing
            .iter()
            .position(|o| o.peer == peer && o.first_lane())
        {
            let mut o = self.outgoing.swap_remove(pos);
            o.abandon("abandoned: the peer's own connection came first");
            self.attempt_log.entry(peer).or_default().extend(o.attempts);
        }
        self.shm_dials.retain(|d| d.peer != peer);
        self.yielded_at.remove(&peer);
        self.connect_deadline.remove(&peer);
    }

    /// A TCP connection with `peer` passed its handshake: a lane.
    fn established(&mut self, peer: Rank, sock: TcpStream, initiated: bool, extra_lane: bool) {
        if !extra_lane && self.lanes.connected(peer) {
            tracing::debug!(peer, "dropping a second connection to a peer already connected");
            return;
        }
        let (Ok(local), Ok(remote)) = (sock.local_addr(), sock.peer_addr()) else {
            return;
        };
        // An accepted socket was watched for its handshake; as a link it is read by
        // polling or through the ready set.
        self.waiter.unwatch(&sock);
        let link = match tcp_link(sock, tcp_caps(self.cfg.eager_limit)) {
            Ok(link) => link,
            Err(e) => {
                tracing::warn!(peer, "cannot configure the connection: {e}");
                return;
            }
        };
        let route = Route::Ip {
            local,
            remote,
            class: net::classify(remote.ip()),
        };
        if !self.add_lane(peer, AnyLink::Tcp(link), route, initiated) {
            return;
        }
        // The lower rank of a pair opens the further lanes, so that there is one set.
        if !extra_lane && self.id.rank < peer {
            self.open_extra_lanes(peer, local.ip(), remote.ip());
        }
    }

    /// A shared-memory lane with `peer` is set up.
    fn shm_established(&mut self, peer: Rank, pipe: transport::shm::ShmPipe, initiated: bool) {
        if self.lanes.connected(peer) {
            tracing::debug!(peer, "dropping a second connection to a peer already connected");
            return;
        }
        let link = shm_link(pipe, shm_caps(self.cfg.eager_limit));
        self.add_lane(peer, AnyLink::Shm(link), Route::Node, initiated);
    }

    /// Hands a new lane to the engine, which names it, and watches it. Returns whether
    /// the lane was taken.
    fn add_lane(&mut self, peer: Rank, link: AnyLink<PayloadToken>, route: Route, initiated: bool) -> bool {
        let first = !self.lanes.connected(peer);
        let Some(lane) = self.ep.handle_lane_up(peer, link.caps()) else {
            return false; // the peer failed meanwhile
        };
        let watched = match (link.fd(), link.polled()) {
            // A polled lane's fd only wakes a sleeping rank: with the rarely busy sockets.
            (Some(fd), true) => {
                self.waiter.watch(fd);
                Ok(())
            }
            (Some(fd), false) if self.links_watched => self.ready.watch(fd, u64::from(lane.0), false),
            _ => Ok(()),
        };
        if let Err(e) = watched {
            tracing::warn!(peer, "cannot watch the lane with epoll ({e}); closing it");
            self.ep
                .handle_lane_down(peer, lane, &format!("its lane could not be watched: {e}"));
            return false;
        }
        let info = PathInfo {
            lane,
            transport: link.transport(),
            route,
            initiated,
        };
        self.lanes.insert(Lane { peer, link, info });
        if first {
            self.first_lane_up(peer);
        }
        if self.lanes.sockets() == 2 && !self.links_watched {
            match self.watch_links() {
                Ok(()) => self.links_watched = true,
                Err(e) => {
                    tracing::warn!("cannot watch links with epoll ({e}); every progress pass reads all")
                }
            }
        }
        true
    }

    /// One more lane per further interface pair with `peer` (`net::paths::extra_lanes`).
    fn open_extra_lanes(&mut self, peer: Rank, local: std::net::IpAddr, remote: std::net::IpAddr) {
        let (Some(mine), Some(theirs)) = (self.cards.get(&self.id.rank), self.cards.get(&peer)) else {
            return;
        };
        for plan in net::paths::extra_lanes(mine, theirs, local, remote) {
            self.outgoing.push(Outgoing::lane(
                peer,
                plan,
                self.cfg.sockbuf,
                self.cfg.connect_timeout,
            ));
        }
    }

    /// Accepts connections and drives handshakes. Returns whether anything happened.
    fn wireup(&mut self) -> bool {
        let mut any = false;
        if let Some(l) = &self.listeners {
            for s in l.accept() {
                self.waiter.watch(&s);
                self.incoming.push(Incoming::new(s));
                any = true;
            }
        }
        any |= self.shm_wireup();
        let timeout = self.cfg.attempt_timeout;
        let timing = Timing {
            attempt: timeout,
            stagger: self.cfg.stagger,
            total: self.cfg.connect_timeout,
        };
        let mut i = 0;
        while i < self.outgoing.len() {
            let progress = self.outgoing[i].poll(&self.id, timing, nonce);
            if matches!(progress, Progress::Pending) {
                i += 1;
                continue;
            }
            let o = self.outgoing.swap_remove(i);
            self.attempt_log
                .entry(o.peer)
                .or_default()
                .extend(o.attempts.iter().cloned());
            any = true;
            match progress {
                Progress::Pending | Progress::Dropped(_) => unreachable!("not an outgoing outcome"),
                Progress::Established {
                    peer,
                    sock,
                    extra_lane,
                } => self.established(peer, sock, true, extra_lane),
                // A further lane that cannot be made leaves the peer on the lanes it has.
                Progress::Failed(report) if !o.first_lane() => {
                    tracing::debug!(peer = o.peer, "no additional lane: {report}");
                }
                Progress::Yielded => {
                    self.yielded += 1;
                    self.yielded_at.insert(o.peer, Instant::now());
                    self.connect_reports.insert(o.peer, o.report());
                }
                // Not failed yet: the peer may still reach us (a NAT'd node can connect
                // out but not be connected to). The deadline below decides.
                Progress::Failed(report) => {
                    self.connect_reports.insert(o.peer, report);
                }
            }
        }
        let mut i = 0;
        while i < self.incoming.len() {
            // Only a HELLO of ours that is out can collide with the peer's; a connect of ours
            // still racing towards some address may never get anywhere.
            let contention = contention(&self.lanes, &self.outgoing, &self.shm_dials);
            match self.incoming[i].poll(&self.id, timeout, nonce(), contention) {
                Progress::Pending => i += 1,
                Progress::Established {
                    peer,
                    sock,
                    extra_lane,
                } => {
                    self.incoming.swap_remove(i);
                    self.established(peer, sock, false, extra_lane);
                    any = true;
                }
                Progress::Failed(why) => {
                    // Strangers, wrong jobs and garbage are refused and logged; the job goes on.
                    tracing::warn!("rank {}: {why}", self.id.rank);
                    self.incoming.swap_remove(i);
                    any = true;
                }
                Progress::Yielded => {
                    self.incoming.swap_remove(i);
                }
                Progress::Dropped(why) => {
                    tracing::debug!("rank {}: {why}", self.id.rank);
                    self.incoming.swap_remove(i);
                }
            }
        }
        self.drop_stale_incoming();
        self.retry_yielded();
        // A peer we yielded to must show up in time, or operations with it fail.
        let now = Instant::now();
        let late: Vec<Rank> = self
            .connect_deadline
            .iter()
            .filter(|(p, d)| now > **d && !self.lanes.connected(**p) && !self.connecting(**p))
            .map(|(p, _)| *p)
            .collect();
        for p in late {
            self.connect_deadline.remove(&p);
            let report = self.connect_reports.remove(&p).unwrap_or_default();
            let cause = format!(
                "no connection with rank {p} within {} ms (PONTOON_CONNECT_TIMEOUT_MS): {report}{}. \
                 Between different private networks, IPv6 on both sites would help (a relay on a head \
                 node will, once pontoon has one)",
                self.cfg.connect_timeout.as_millis(),
                self.nat_note(p)
            );
            self.ep.handle_peer_failed(p, &cause);
            any = true;
        }
        any
    }

    /// Accepts shared-memory connections and drives their handshakes and ours. A
    /// shared-memory set-up that fails falls back to TCP. Returns whether anything happened.
    fn shm_wireup(&mut self) -> bool {
        let mut any = false;
        if let Some(l) = &self.shm_listener {
            for a in crate::shm_wireup::accept_all(l) {
                self.waiter.watch(a.socket());
                self.shm_accepts.push(a);
                any = true;
            }
        }
        let timeout = self.cfg.attempt_timeout;
        let mut i = 0;
        while i < self.shm_dials.len() {
            let progress = self.shm_dials[i].poll(timeout);
            if matches!(progress, ShmProgress::Pending) {
                i += 1;
                continue;
            }
            let peer = self.shm_dials.swap_remove(i).peer;
            any = true;
            match progress {
                ShmProgress::Pending => unreachable!("handled above"),
                ShmProgress::Established { peer, pipe } => self.shm_established(peer, pipe, true),
                ShmProgress::Yielded => {
                    self.yielded += 1;
                    self.yielded_at.insert(peer, Instant::now());
                }
                ShmProgress::Failed(why) => {
                    self.refuse_shm(peer, why);
                    let left = self
                        .connect_deadline
                        .get(&peer)
                        .map_or(self.cfg.connect_timeout, |d| {
                            d.saturating_duration_since(Instant::now())
                        });
                    self.dial(peer, left);
                }
            }
        }
        let mut i = 0;
        while i < self.shm_accepts.len() {
            let contention = contention(&self.lanes, &self.outgoing, &self.shm_dials);
            let progress = self.shm_accepts[i].poll(&self.id, timeout, nonce(), contention);
            if matches!(progress, ShmProgress::Pending) {
                i += 1;
                continue;
            }
            let a = self.shm_accepts.swap_remove(i);
            self.waiter.unwatch(a.socket());
            any = true;
            match progress {
                ShmProgress::Established { peer, pipe } => self.shm_established(peer, pipe, false),
                ShmProgress::Failed(why) => tracing::warn!("rank {}: {why}", self.id.rank),
                ShmProgress::Pending | ShmProgress::Yielded => {}
            }
        }
        any
    }

    /// What the coordinator saw of the NATs between it and the two ranks, when they differ:
    /// the likely reason why private addresses led nowhere.
    fn nat_note(&self, peer: Rank) -> String {
        let nat = |r: Rank| self.cards.get(&r).and_then(EndpointCard::nat);
        let seen = |n: Option<std::net::IpAddr>| match n {
            Some(ip) => format!("behind NAT {ip}"),
            None => "directly".to_string(),
        };
        let (mine, theirs) = (nat(self.id.rank), nat(peer));
        if mine == theirs {
            return String::new();
        }
        format!(
            "; the launcher's coordinator sees this rank {} and rank {peer} {}: probably \
             different private networks",
            seen(mine),
            seen(theirs)
        )
    }

    /// A rank sends one first-lane HELLO at a time, so of two accepted first connections
    /// from one peer the older is an attempt the peer gave up: keep only the newest.
    fn drop_stale_incoming(&mut self) {
        let first = |c: &Incoming| c.verified_peer().filter(|_| !c.extra_lane());
        let mut newest: HashMap<Rank, Instant> = HashMap::new();
        for c in &self.incoming {
            if let Some(r) = first(c) {
                let t = newest.entry(r).or_insert(c.started());
                *t = (*t).max(c.started());
            }
        }
        self.incoming
            .retain(|c| first(c).is_none_or(|r| newest.get(&r) == Some(&c.started())));
    }

    /// A peer we yielded to whose connection did not arrive within an attempt's time
    /// (its handshake failed, or it gave up): try again ourselves, within the deadline.
    fn retry_yielded(&mut self) {
        let now = Instant::now();
        let due: Vec<Rank> = self
            .yielded_at
            .iter()
            .filter(|(p, t)| {
                now.duration_since(**t) > self.cfg.attempt_timeout
                    && !self.lanes.connected(**p)
                    && !self.connecting(**p)
                    && !self.incoming.iter().any(|c| c.verified_peer() == Some(**p))
            })
            .map(|(p, _)| *p)
            .collect();
        for peer in due {
            self.yielded_at.remove(&peer);
            let Some(deadline) = self.connect_deadline.get(&peer).copied().filter(|d| *d > now) else {
                continue;
            };
            self.dial(peer, deadline - now);
        }
    }

    fn candidates_for(&self, peer: Rank) -> Vec<net::Candidate> {
        match (self.cards.get(&self.id.rank), self.cards.get(&peer)) {
            (Some(mine), Some(theirs)) => net::candidates(mine, theirs),
            _ => Vec::new(),
        }
    }

    fn poll_control(&mut self) {
        loop {
            let Some(ctl) = self.control.as_mut() else { return };
            match ctl.poll_event() {
                Ok(None) => return,
                Ok(Some(proto::control::FromCoordinator::PeerFailed { rank, cause })) => {
                    // Frames queued for the dead rank are dropped with its lanes.
                    self.drop_lanes(rank);
                    self.ep.handle_peer_failed(rank, &cause);
                }
                Ok(Some(proto::control::FromCoordinator::Shutdown { reason })) => {
                    eprintln!("pontoon: rank {}: the job is ending: {reason}", self.id.rank);
                    std::process::exit(1);
                }
                Ok(Some(other)) => tracing::debug!("ignoring control message {other:?}"),
                Err(e) => {
                    eprintln!("pontoon: rank {}: lost the launcher ({e}); exiting", self.id.rank);
                    std::process::exit(1);
                }
            }
        }
    }

    // ---- end of job --------------------------------------------------------------

    /// Finalize: tell peers, drain every link, then wait for all ranks at the coordinator.
    pub fn finalize(&mut self) -> Result<(), Error> {
        self.ep.finalize();
        self.drive_outputs();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.lanes.any_queued() && Instant::now() < deadline {
            if !self.progress() {
                self.sleep(Duration::from_millis(1));
            }
        }
        if let Some(mut ctl) = self.control.take() {
            ctl.finalize()
                .map_err(|e| Error::Setup(format!("finalize: {e}")))?;
        }
        self.lanes.clear();
        Ok(())
    }

    /// MPI_Abort: asks the launcher to end the job with `code`, then exits.
    pub fn abort(&mut self, code: i32, message: &str) -> ! {
        if let Some(ctl) = self.control.as_mut() {
            let _ = ctl.abort(code, message);
        } else {
            eprintln!("pontoon: abort (code {code}): {message}");
        }
        std::process::exit(code)
    }
}
