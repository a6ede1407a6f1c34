//! Deterministic simulator: N endpoints joined by lanes with seeded latency and
//! jitter, a virtual clock and an MTU (the lanes' largest frame). Frames on one
//! lane keep their order, as on a TCP connection; frames on different lanes of a
//! peer pair overtake each other. The simulator plays the runtime's part: it owns
//! the user buffers, carries out `Output`s and places payloads where
//! `handle_header` says, through the same wire encoding as the real links.

use std::collections::{BTreeMap, HashMap};

use crate::caps::Traffic;
use crate::engine::{Endpoint, EngineConfig, Failure, Origin, Output, PayloadDest, Status};
use crate::punch::{PunchEvent, Puncher};
use crate::wire::data::{DataHeader, DataRepr, HeaderBytes};
use crate::{Caps, LaneId, Nanos, Rank, ReqId, SingleCopy};

/// Small, seedable, dependency-free PRNG (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// Eager messages a simulated raw lane takes (a 1500-byte datagram's worth).
pub const RAW_EAGER: u32 = 1400;

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub ranks: u32,
    /// Lanes per peer pair.
    pub lanes: usize,
    /// Base one-way latency of a lane, drawn per lane from this range.
    pub latency_ns: (u64, u64),
    /// Fixed base latency per lane index, overriding `latency_ns` (to script overtaking).
    pub lane_latency_ns: Option<Vec<u64>>,
    /// Extra delay per frame, drawn from `0..=jitter_ns` (FIFO per lane is kept).
    pub jitter_ns: u64,
    /// Largest frame payload on a lane: rendezvous fragments are cut to it.
    pub mtu: u32,
    /// Sending rate per lane index in bytes per microsecond; a lane's frames queue
    /// behind each other at that rate. Empty: unlimited.
    pub lane_rate: Vec<u64>,
    /// Whether the lane of each index is node-local (shared memory); missing: not.
    pub lane_node_local: Vec<bool>,
    /// Whether the lane of each index passes through a relay; missing: not.
    pub lane_relayed: Vec<bool>,
    /// Whether the lane of each index is raw Ethernet (one datagram's eager messages,
    /// `RAW_EAGER`); missing: not.
    pub lane_raw: Vec<bool>,
    /// The lanes from this index on come up only by hole punching ([`Puncher`]), which
    /// the lower rank of a pair starts once lane 0 is up.
    pub punched_from: Option<usize>,
    /// Punching rounds that fail before one succeeds.
    pub punch_failures: u8,
    pub eager_limit: u32,
    /// The eager limit towards a peer over a WAN lane (latencies of 1 ms and more).
    pub wan_eager_limit: u32,
    /// Each rank's cap on bytes held for unmatched eager messages (flow control).
    pub unexpected_cap: u64,
    /// Coalescing of small messages towards WAN peers: the longest wait (0: off) and
    /// the batch size (`EngineConfig`). Standard-mode sends offer themselves to it.
    pub coalesce_delay_ns: u64,
    pub coalesce_bytes: u32,
    /// Node-local lanes let each end read the other's memory, and which messages go in
    /// one copy ([`Output::Pull`]); `None`: they cannot.
    pub single_copy: Option<SingleCopy>,
    /// Every such read fails: the receiver asks for fragments instead.
    pub pull_fails: bool,
    pub seed: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            ranks: 2,
            lanes: 1,
            latency_ns: (1_000, 1_000),
            lane_latency_ns: None,
            jitter_ns: 0,
            mtu: 1500,
            lane_rate: Vec::new(),
            lane_node_local: Vec::new(),
            lane_relayed: Vec::new(),
            lane_raw: Vec::new(),
            punched_from: None,
            punch_failures: 0,
            eager_limit: 4096,
            wan_eager_limit: 4096,
            unexpected_cap: 1 << 40,
            coalesce_delay_ns: 0,
            coalesce_bytes: 16 << 10,
            single_copy: None,
            pull_fails: false,
            seed: 1,
        }
    }
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    Sent(Result<(), Failure>),
    Received(Result<Status, Failure>),
    /// A send withdrawn by its cancel ([`Sim::cancel_send`]).
    Cancelled,
}

struct Frame {
    from: Rank,
    to: Rank,
    /// Index of the pair's lane that carries it.
    lane: usize,
    header: HeaderBytes,
    payload: Vec<u8>,
}

enum Event {
    Frame(Frame),
    /// Lane `lane` of the pair comes up; lanes come up one after another, as
    /// connection racing delivers them, so the best lane changes while traffic flows.
    LaneUp {
        a: Rank,
        b: Rank,
        lane: usize,
    },
    /// A lane of `rank` finished sending a frame: its queue has room again.
    Drained {
        rank: Rank,
    },
    /// The engine of `rank` asked to be woken now ([`Endpoint::poll_timeout`]).
    Timer {
        rank: Rank,
    },
    /// The simultaneous open of a punching round between `a` and `b` ended.
    Punched {
        a: Rank,
        b: Rank,
        round: u8,
        ok: bool,
    },
}

#[derive(Default)]
struct Node {
    send_bufs: HashMap<ReqId, Vec<u8>>,
    recv_bufs: HashMap<ReqId, Vec<u8>>,
    done: HashMap<ReqId, Completion>,
    /// When each request completed, in virtual time.
    done_at: HashMap<ReqId, Nanos>,
    /// The engine's timer as last scheduled.
    timer: Option<Nanos>,
    /// Order in which receives completed, with their source (for fairness checks).
    recv_order: Vec<(ReqId, Rank)>,
    connecting: Vec<bool>,
    dead: bool,
    /// A blocking receive waiting on one lane ([`Sim::recv_now`]).
    waiting_now: Option<RecvNow>,
    /// What each send needs to be cancelled ([`Sim::cancel_send`]).
    sent: HashMap<ReqId, crate::engine::Sent>,
    /// The answers to cancels: withdrawn or not.
    cancel_answers: HashMap<ReqId, bool>,
}

/// A blocking receive on the runtime's latency-critical path: it takes its message
/// straight off the lane the peer's eager frames use, if the engine lets it.
#[derive(Clone, Copy)]
struct RecvNow {
    req: ReqId,
    src: Rank,
    ctx: u32,
    tag: i32,
    capacity: u64,
    lane: LaneId,
}

pub struct Sim {
    pub cfg: SimConfig,
    now: Nanos,
    rng: Rng,
    endpoints: Vec<Endpoint>,
    nodes: Vec<Node>,
    events: BTreeMap<(Nanos, u64), Event>,
    event_seq: u64,
    /// Per (low rank, high rank, lane): base latency.
    lane_base: HashMap<(Rank, Rank, usize), Nanos>,
    /// Per (from, to, lane): time of the last delivery, to keep each lane FIFO.
    lane_last: HashMap<(Rank, Rank, usize), Nanos>,
    /// Per (from, to, lane): when the lane finishes sending what it has queued.
    lane_busy: HashMap<(Rank, Rank, usize), Nanos>,
    /// Frames sent per (from, to, lane), for statistics.
    pub lane_frames: HashMap<(Rank, Rank, usize), u64>,
    /// The peer and lane index of each rank's lane identities.
    lane_ids: HashMap<(Rank, LaneId), (Rank, usize)>,
    next_req: ReqId,
    pairs_up: std::collections::HashSet<(Rank, Rank)>,
    /// Frames delivered, for statistics.
    pub frames: u64,
    /// Rendezvous messages read in one copy.
    pub pulls: u64,
    punchers: Vec<Puncher>,
    /// Dials of each punching round: (low rank, high rank, round) -> dials so far, latest time.
    punch_dials: HashMap<(Rank, Rank, u8), (u8, Nanos)>,
    /// Why punching ended without a lane, per rank.
    pub punch_gave_up: Vec<(Rank, String)>,
}

impl Sim {
    pub fn new(cfg: SimConfig) -> Sim {
        let ecfg = EngineConfig {
            eager_limit: cfg.eager_limit,
            wan_eager_limit: cfg.wan_eager_limit,
            frag_size: cfg.mtu,
            lane_queue: 2 * u64::from(cfg.mtu),
            unexpected_cap: cfg.unexpected_cap,
            coalesce_delay_ns: cfg.coalesce_delay_ns,
            coalesce_bytes: cfg.coalesce_bytes,
            single_copy: cfg.single_copy.unwrap_or_default(),
        };
        let endpoints = (0..cfg.ranks)
            .map(|r| Endpoint::new(r, cfg.ranks, ecfg))
            .collect();
        let nodes = (0..cfg.ranks)
            .map(|_| Node {
                connecting: vec![false; cfg.ranks as usize],
                ..Node::default()
            })
            .collect();
        let cfg_ranks = cfg.ranks;
        Sim {
            rng: Rng::new(cfg.seed),
            cfg,
            now: 0,
            endpoints,
            nodes,
            events: BTreeMap::new(),
            event_seq: 0,
            lane_base: HashMap::new(),
            lane_last: HashMap::new(),
            lane_busy: HashMap::new(),
            lane_frames: HashMap::new(),
            lane_ids: HashMap::new(),
            next_req: 1,
            pairs_up: Default::default(),
            frames: 0,
            pulls: 0,
            punchers: (0..cfg_ranks).map(Puncher::new).collect(),
            punch_dials: HashMap::new(),
            punch_gave_up: Vec::new(),
        }
    }

    pub fn now(&self) -> Nanos {
        self.now
    }
    pub fn endpoint(&self, rank: Rank) -> &Endpoint {
        &self.endpoints[rank as usize]
    }

    fn req(&mut self) -> ReqId {
        self.next_req += 1;
        self.next_req
    }

    pub fn isend(&mut self, rank: Rank, dest: Rank, ctx: u32, tag: i32, data: Vec<u8>, sync: bool) -> ReqId {
        self.post_recv_now(rank);
        let req = self.req();
        if !sync && self.endpoints[rank as usize].coalesce(dest, ctx, tag, &data, self.now) {
            self.sent_at_once(rank, req);
            self.drain(rank);
            return req;
        }
        let len = data.len() as u64;
        self.nodes[rank as usize].send_bufs.insert(req, data);
        // The request id stands for the buffer's address: `Output::Pull` finds it by that.
        let traffic =
            self.endpoints[rank as usize]
                .traffic_lane(dest, len)
                .map_or(Traffic::default(), |id| {
                    let (peer, lane) = self.lane_ids[&(rank, id)];
                    let queued = |from, to| {
                        lane_queued(&self.lane_busy, &self.cfg.lane_rate, self.now, (from, to, lane))
                    };
                    Traffic {
                        backlog: queued(rank, peer),
                        peer_sending: queued(peer, rank) > 0,
                    }
                });
        let origin = Origin { at: req, traffic };
        let sent = self.endpoints[rank as usize].post_send(req, dest, ctx, tag, len, sync, Some(origin));
        if let Some(sent) = sent {
            self.nodes[rank as usize].sent.insert(req, sent);
        }
        self.drain(rank);
        req
    }

    /// MPI_Cancel of the send `req` of `rank`; the answer shows in [`Sim::cancel_answer`]
    /// (and a withdrawn send's completion is [`Completion::Cancelled`]).
    pub fn cancel_send(&mut self, rank: Rank, req: ReqId) {
        let sent = self.nodes[rank as usize].sent[&req];
        self.endpoints[rank as usize].cancel_send(req, sent);
        self.drain(rank);
    }

    /// Whether the cancel of send `req` of `rank` withdrew it, once answered.
    pub fn cancel_answer(&self, rank: Rank, req: ReqId) -> Option<bool> {
        self.nodes[rank as usize].cancel_answers.get(&req).copied()
    }

    /// A blocking send the way the runtime's fast path makes it
    /// ([`Endpoint::send_eager_now`]): the frame leaves at once, without a request. Falls
    /// back to [`Sim::isend`] when the engine says no. Returns the (completed) request.
    pub fn send_now(&mut self, rank: Rank, dest: Rank, ctx: u32, tag: i32, data: Vec<u8>) -> ReqId {
        self.post_recv_now(rank);
        let len = data.len() as u64;
        if self.endpoints[rank as usize].coalesce(dest, ctx, tag, &data, self.now) {
            let req = self.req();
            self.sent_at_once(rank, req);
            self.drain(rank);
            return req;
        }
        let Some((lane, header)) = self.endpoints[rank as usize].send_eager_now(dest, ctx, tag, len) else {
            return self.isend(rank, dest, ctx, tag, data, false);
        };
        let req = self.req();
        self.sent_at_once(rank, req);
        self.put_on_lane(rank, dest, lane, header, data);
        req
    }

    /// A frame of `rank` leaves on its lane `lane` to `to`.
    fn put_on_lane(&mut self, rank: Rank, to: Rank, lane: LaneId, header: HeaderBytes, payload: Vec<u8>) {
        let lane = self.lane_ids[&(rank, lane)].1;
        let at = self.lane_delay(rank, to, lane, payload.len() as u64);
        let frame = Frame {
            from: rank,
            to,
            lane,
            header,
            payload,
        };
        self.schedule(at, Event::Frame(frame));
    }

    /// A send that completed as it was made (written at once, or coalesced).
    fn sent_at_once(&mut self, rank: Rank, req: ReqId) {
        let node = &mut self.nodes[rank as usize];
        node.done.insert(req, Completion::Sent(Ok(())));
        node.done_at.insert(req, self.now);
    }

    /// When a request completed, in virtual time.
    pub fn completed_at(&self, rank: Rank, req: ReqId) -> Option<Nanos> {
        self.nodes[rank as usize].done_at.get(&req).copied()
    }

    /// Processes every event up to `t`, then sets the clock to `t` (a rank that posts
    /// its next operation at `t`).
    pub fn run_until(&mut self, t: Nanos) {
        while self.events.keys().next().is_some_and(|&(at, _)| at <= t) {
            self.step();
        }
        self.now = self.now.max(t);
    }

    /// A blocking receive the way the runtime's fast path makes it
    /// ([`Endpoint::await_now`], [`Endpoint::took_now`]): while the engine has
    /// no posted receive and no unmatched message, the rank waits on the lane the
    /// peer's eager frames use and offers each frame arriving there to the engine first.
    /// It falls back to a posted receive (the general path) when the engine says no,
    /// when a frame takes the general path, or when the rank does anything else (a
    /// blocked rank does nothing else; the runtime may fall back at any time).
    pub fn recv_now(&mut self, rank: Rank, src: Rank, ctx: u32, tag: i32, capacity: usize) -> ReqId {
        self.post_recv_now(rank);
        let req = self.req();
        self.nodes[rank as usize].recv_bufs.insert(req, vec![0; capacity]);
        let now = self.endpoints[rank as usize]
            .await_now(src, ctx, tag, capacity as u64)
            .map(|a| RecvNow {
                req,
                src,
                ctx,
                tag,
                capacity: capacity as u64,
                lane: a.lane,
            });
        match now {
            Some(now) => self.nodes[rank as usize].waiting_now = Some(now),
            None => {
                self.endpoints[rank as usize].post_recv(req, src as i32, ctx, tag, capacity as u64);
                self.drain(rank);
            }
        }
        req
    }

    /// The general path for a receive waiting on the fast path, if there is one.
    fn post_recv_now(&mut self, rank: Rank) {
        if let Some(w) = self.nodes[rank as usize].waiting_now.take() {
            self.endpoints[rank as usize].post_recv(w.req, w.src as i32, w.ctx, w.tag, w.capacity);
            self.drain(rank);
        }
    }

    /// A frame arriving on the lane a receive waits on: taken by it if the engine says
    /// so (true).
    fn take_for_recv_now(&mut self, f: &Frame, repr: &DataRepr) -> bool {
        let to = f.to as usize;
        let Some(w) = self.nodes[to].waiting_now else {
            return false;
        };
        if f.from != w.src || self.lane_ids.get(&(f.to, w.lane)) != Some(&(f.from, f.lane)) {
            return false;
        }
        let DataRepr::Match { env } = *repr else {
            return false;
        };
        let ep = &mut self.endpoints[to];
        let Some(awaited) = ep
            .await_now(w.src, w.ctx, w.tag, w.capacity)
            .filter(|a| a.admits(&env))
        else {
            return false;
        };
        let st = ep.took_now(&awaited, &env);
        let node = &mut self.nodes[to];
        node.waiting_now = None;
        node.recv_bufs.get_mut(&w.req).expect("posted")[..f.payload.len()].copy_from_slice(&f.payload);
        node.recv_order.push((w.req, st.source));
        node.done.insert(w.req, Completion::Received(Ok(st)));
        node.done_at.insert(w.req, self.now);
        self.drain(f.to);
        true
    }

    pub fn irecv(&mut self, rank: Rank, src: i32, ctx: u32, tag: i32, capacity: usize) -> ReqId {
        self.post_recv_now(rank);
        let req = self.req();
        self.nodes[rank as usize].recv_bufs.insert(req, vec![0; capacity]);
        self.endpoints[rank as usize].post_recv(req, src, ctx, tag, capacity as u64);
        self.drain(rank);
        req
    }

    /// A matched probe at `rank` (see [`Endpoint::mprobe`]).
    pub fn mprobe(&mut self, rank: Rank, src: i32, ctx: u32, tag: i32) -> Option<(Rank, i32, u64, u64)> {
        self.endpoints[rank as usize].mprobe(src, ctx, tag)
    }

    /// Receives a message taken by [`Sim::mprobe`]; `None` if there is no such message.
    pub fn irecv_claimed(&mut self, rank: Rank, msg: u64, capacity: usize) -> Option<ReqId> {
        let req = self.req();
        self.nodes[rank as usize].recv_bufs.insert(req, vec![0; capacity]);
        if !self.endpoints[rank as usize].post_recv_claimed(req, msg, capacity as u64) {
            self.nodes[rank as usize].recv_bufs.remove(&req);
            return None;
        }
        self.drain(rank);
        Some(req)
    }

    pub fn completion(&self, rank: Rank, req: ReqId) -> Option<&Completion> {
        self.nodes[rank as usize].done.get(&req)
    }

    /// The receive buffer of a request (whole capacity).
    pub fn recv_buf(&self, rank: Rank, req: ReqId) -> &[u8] {
        &self.nodes[rank as usize].recv_bufs[&req]
    }

    pub fn recv_order(&self, rank: Rank) -> &[(ReqId, Rank)] {
        &self.nodes[rank as usize].recv_order
    }

    /// Kills a rank: it stops processing, and every other rank learns of it (as the
    /// coordinator would tell them).
    pub fn kill(&mut self, rank: Rank) {
        self.nodes[rank as usize].dead = true;
        for r in 0..self.cfg.ranks {
            if r != rank && !self.nodes[r as usize].dead {
                self.endpoints[r as usize].handle_peer_failed(rank, "killed by the simulator");
                self.drain(r);
            }
        }
    }

    /// Breaks lane `lane` between `a` and `b` now: every frame still in flight on it,
    /// in either direction, is lost, and both ranks learn that the lane went down (as a
    /// connection error tells the runtime).
    pub fn break_lane(&mut self, a: Rank, b: Rank, lane: usize) {
        self.events.retain(|_, ev| {
            !matches!(ev, Event::Frame(f) if f.lane == lane && [(a, b), (b, a)].contains(&(f.from, f.to)))
        });
        for (x, y) in [(a, b), (b, a)] {
            let id = self
                .lane_ids
                .iter()
                .find(|(&(r, _), &(peer, idx))| r == x && peer == y && idx == lane)
                .map(|(&(_, id), _)| id);
            if let (Some(id), false) = (id, self.nodes[x as usize].dead) {
                self.endpoints[x as usize].handle_lane_down(
                    y,
                    id,
                    "its lane was broken by the simulator",
                    false,
                );
                self.drain(x);
            }
        }
    }

    fn schedule(&mut self, at: Nanos, ev: Event) {
        self.event_seq += 1;
        self.events.insert((at, self.event_seq), ev);
    }

    /// Base latency of a lane, the same in both directions, drawn once per lane.
    fn base_latency(&mut self, a: Rank, b: Rank, lane: usize) -> Nanos {
        let key = (a.min(b), a.max(b), lane);
        if let Some(b) = self.lane_base.get(&key) {
            return *b;
        }
        let (lo, hi) = self.cfg.latency_ns;
        let base = match &self.cfg.lane_latency_ns {
            Some(v) => v[lane % v.len()],
            None => self.rng.range(lo, hi),
        };
        self.lane_base.insert(key, base);
        base
    }

    /// When a frame of `bytes` handed to a lane now arrives: after the lane's queue
    /// and its own sending time, plus latency and jitter, never before the lane's
    /// previous frame.
    fn lane_delay(&mut self, from: Rank, to: Rank, lane: usize, bytes: u64) -> Nanos {
        *self.lane_frames.entry((from, to, lane)).or_insert(0) += 1;
        let sent = match self.cfg.lane_rate.get(lane) {
            Some(&rate) => {
                let busy = self.lane_busy.entry((from, to, lane)).or_insert(0);
                *busy = (*busy).max(self.now) + bytes * 1000 / rate.max(1);
                let done = *busy;
                self.schedule(done, Event::Drained { rank: from });
                done
            }
            None => self.now,
        };
        let base = self.base_latency(from, to, lane);
        let jitter = if self.cfg.jitter_ns > 0 {
            self.rng.range(0, self.cfg.jitter_ns)
        } else {
            0
        };
        let last = self.lane_last.entry((from, to, lane)).or_insert(0);
        let at = (sent + base + jitter).max(*last);
        *last = at;
        at
    }

    /// Carries out every output of `rank`'s endpoint, handing fragments to lanes
    /// with room until none is left or every lane is full.
    fn drain(&mut self, rank: Rank) {
        loop {
            self.carry_out(rank);
            if !self.endpoints[rank as usize].is_streaming() {
                break;
            }
            let (busy, rates, now) = (&self.lane_busy, &self.cfg.lane_rate, self.now);
            let ids = &self.lane_ids;
            let queued = |id: LaneId| {
                let (peer, lane) = ids[&(rank, id)];
                lane_queued(busy, rates, now, (rank, peer, lane))
            };
            if !self.endpoints[rank as usize].fill_lanes(queued) {
                break;
            }
        }
        let due = self.endpoints[rank as usize].poll_timeout();
        let node = &mut self.nodes[rank as usize];
        if let Some(at) = due.filter(|&t| Some(t) != node.timer) {
            node.timer = due;
            self.schedule(at.max(self.now), Event::Timer { rank });
        }
    }

    fn carry_out(&mut self, rank: Rank) {
        while let Some(out) = self.endpoints[rank as usize].poll() {
            let node = &mut self.nodes[rank as usize];
            match out {
                Output::Transmit {
                    peer,
                    lane,
                    header,
                    payload,
                    completes,
                } => {
                    let bytes = payload
                        .map(|s| {
                            node.send_bufs[&s.req][s.offset as usize..(s.offset + s.len) as usize].to_vec()
                        })
                        .unwrap_or_default();
                    if let Some(req) = completes {
                        node.done.insert(req, Completion::Sent(Ok(())));
                        node.done_at.insert(req, self.now);
                    }
                    self.put_on_lane(rank, peer, lane, header, bytes);
                }
                Output::TransmitOwned {
                    peer,
                    lane,
                    header,
                    payload,
                } => self.put_on_lane(rank, peer, lane, header, payload),
                Output::CopyOut { req, len } => {
                    let data = node.send_bufs[&req][..len as usize].to_vec();
                    self.endpoints[rank as usize].handle_copy_out(req, data);
                }
                Output::LocalCopy { from, to, len } => {
                    let data = node.send_bufs[&from][..len as usize].to_vec();
                    node.recv_bufs.get_mut(&to).expect("posted")[..len as usize].copy_from_slice(&data);
                }
                Output::Deliver { req, data } => {
                    node.recv_bufs.get_mut(&req).expect("posted")[..data.len()].copy_from_slice(&data);
                }
                Output::Pull { peer, req, at, len } => {
                    let data = self.nodes[peer as usize]
                        .send_bufs
                        .get(&at)
                        .filter(|_| !self.cfg.pull_fails)
                        .and_then(|b| b.get(..len as usize))
                        .map(<[u8]>::to_vec);
                    if let Some(data) = &data {
                        self.nodes[rank as usize].recv_bufs.get_mut(&req).expect("posted")[..data.len()]
                            .copy_from_slice(data);
                        self.pulls += 1;
                    }
                    self.endpoints[rank as usize].pulled(req, data.is_some());
                }
                Output::RecvDone { req, result } => {
                    if let Ok(st) = &result {
                        node.recv_order.push((req, st.source));
                    }
                    node.done.insert(req, Completion::Received(result));
                    node.done_at.insert(req, self.now);
                }
                Output::SendDone { req, result } => {
                    node.done.insert(req, Completion::Sent(result));
                    node.done_at.insert(req, self.now);
                }
                Output::SendCancelled { req, withdrawn } => {
                    node.cancel_answers.insert(req, withdrawn);
                    if withdrawn {
                        node.done.insert(req, Completion::Cancelled);
                        node.done_at.insert(req, self.now);
                    }
                }
                // A frame's payload is placed at once here: never part-way.
                Output::Abandon { .. } => {}
                // The simulator's lanes lose frames only when broken, and replay nothing.
                Output::LaneAck { .. } | Output::LaneLost { .. } | Output::JobAborted { .. } => {}
                Output::Punch { peer, msg } => {
                    self.punchers[rank as usize].handle(peer, msg, self.now);
                    self.drive_puncher(rank);
                }
                Output::Connect { peer } => {
                    if !node.connecting[peer as usize] {
                        node.connecting[peer as usize] = true;
                        let at = self.now + 2 * self.cfg.latency_ns.1;
                        self.schedule(
                            at,
                            Event::LaneUp {
                                a: rank,
                                b: peer,
                                lane: 0,
                            },
                        );
                    }
                }
            }
        }
    }

    fn caps(&self) -> Caps {
        Caps {
            latency_ns: self.cfg.latency_ns.0,
            bandwidth: 1 << 30,
            max_frame: self.cfg.mtu,
            reliable: true,
            ordered: true,
            node_local: false,
            relayed: false,
            raw: false,
            datagram: 0,
            single_copy: false,
        }
    }

    /// Carries out what `rank`'s puncher asks: frames go through its engine, ports are
    /// bound at once, and a round's outcome is scheduled once both ends dialled.
    fn drive_puncher(&mut self, rank: Rank) {
        while let Some(ev) = self.punchers[rank as usize].poll() {
            match ev {
                PunchEvent::Send { peer, msg } => self.endpoints[rank as usize].send_punch(peer, msg),
                PunchEvent::Bind { peer, round, .. } => {
                    let mine =
                        core::net::SocketAddr::from(([192, 0, 2, rank as u8], 40_000 + u16::from(round)));
                    self.punchers[rank as usize].address(peer, round, Ok(mine), self.now);
                }
                PunchEvent::Dial { peer, round, at, .. } => {
                    let (a, b) = (rank.min(peer), rank.max(peer));
                    let d = self.punch_dials.entry((a, b, round)).or_insert((0, 0));
                    d.0 += 1;
                    d.1 = d.1.max(at);
                    if d.0 == 2 {
                        let at = d.1 + self.base_latency(a, b, self.cfg.punched_from.unwrap_or(0));
                        let ok = round > self.cfg.punch_failures;
                        self.schedule(at, Event::Punched { a, b, round, ok });
                    }
                }
                PunchEvent::GaveUp { why, .. } => self.punch_gave_up.push((rank, why)),
            }
        }
    }

    /// Lane `lane` of the pair is up at both ends.
    fn lane_up(&mut self, a: Rank, b: Rank, lane: usize) {
        let node_local = self.cfg.lane_node_local.get(lane).copied().unwrap_or(false);
        let caps = Caps {
            latency_ns: self.base_latency(a, b, lane),
            node_local,
            single_copy: node_local && self.cfg.single_copy.is_some(),
            relayed: self.cfg.lane_relayed.get(lane).copied().unwrap_or(false),
            ..self.caps()
        };
        let caps = if self.cfg.lane_raw.get(lane).copied().unwrap_or(false) {
            Caps {
                raw: true,
                datagram: RAW_EAGER,
                ..caps
            }
        } else {
            caps
        };
        for (x, y) in [(a, b), (b, a)] {
            if !self.nodes[x as usize].dead {
                if let Some(id) = self.endpoints[x as usize].handle_lane_up(y, caps) {
                    self.lane_ids.insert((x, id), (y, lane));
                }
                self.drain(x);
            }
        }
    }

    /// Processes one event; false when none is left.
    pub fn step(&mut self) -> bool {
        let Some((&key, _)) = self.events.iter().next() else {
            return false;
        };
        let ev = self.events.remove(&key).expect("present");
        self.now = key.0;
        match ev {
            Event::LaneUp { a, b, lane } => {
                // A pair's lanes exist once, whichever side asked first.
                if lane > 0 || self.pairs_up.insert((a.min(b), a.max(b))) {
                    self.lane_up(a, b, lane);
                    let next = lane + 1;
                    if Some(next) == self.cfg.punched_from {
                        let low = a.min(b);
                        self.punchers[low as usize].start(a.max(b));
                        self.drive_puncher(low);
                    } else if next < self.cfg.lanes {
                        let at = self.now + self.cfg.latency_ns.1;
                        self.schedule(at, Event::LaneUp { a, b, lane: next });
                    }
                }
            }
            Event::Punched { a, b, round, ok } => {
                for (x, y) in [(a, b), (b, a)] {
                    if ok {
                        self.punchers[x as usize].succeeded(y);
                    } else {
                        self.punchers[x as usize].failed(y, round, "connection refused");
                    }
                    self.drive_puncher(x);
                }
                if ok {
                    let lane = self.cfg.punched_from.expect("punching");
                    self.lane_up(a, b, lane);
                    if lane + 1 < self.cfg.lanes {
                        let at = self.now + self.cfg.latency_ns.1;
                        self.schedule(at, Event::LaneUp { a, b, lane: lane + 1 });
                    }
                }
            }
            Event::Drained { rank } => {
                if !self.nodes[rank as usize].dead {
                    self.drain(rank);
                }
            }
            Event::Timer { rank } => {
                let node = &mut self.nodes[rank as usize];
                if !node.dead && node.timer.is_some_and(|t| t <= self.now) {
                    node.timer = None;
                    self.endpoints[rank as usize].handle_timeout(self.now);
                    self.drain(rank);
                }
            }
            Event::Frame(f) => {
                self.frames += 1;
                // A rank drops every frame from a peer it holds failed (the runtime closes its lanes).
                if self.nodes[f.to as usize].dead
                    || self.endpoints[f.to as usize].peer_failure(f.from).is_some()
                {
                    return true;
                }
                self.deliver(f);
            }
        }
        true
    }

    fn deliver(&mut self, f: Frame) {
        let to = f.to as usize;
        let view = DataHeader::new_checked(f.header.as_slice()).expect("the engine emits valid headers");
        let repr = DataRepr::parse(&view);
        assert_eq!(
            view.payload_len() as usize,
            f.payload.len(),
            "payload length on the wire"
        );
        if self.take_for_recv_now(&f, &repr) {
            return;
        }
        let (dest, token) = self.endpoints[to]
            .handle_header(f.from, &repr)
            .expect("no protocol violation");
        let buf = match dest {
            PayloadDest::None => None,
            PayloadDest::User {
                req,
                offset,
                len,
                skip,
            } => {
                assert_eq!(len + skip, f.payload.len() as u64);
                let rb = self.nodes[to].recv_bufs.get_mut(&req).expect("posted");
                rb[offset as usize..(offset + len) as usize].copy_from_slice(&f.payload[..len as usize]);
                None
            }
            PayloadDest::Engine(mut v) => {
                v.copy_from_slice(&f.payload);
                Some(v)
            }
        };
        self.endpoints[to]
            .payload_done(f.from, token, buf)
            .expect("no protocol violation");
        self.drain(f.to);
        // A frame on the general path may have left a message unmatched (or taken the
        // lane): the waiting receive cannot stay on the fast path then.
        if let Some(w) = self.nodes[to].waiting_now {
            let awaited = self.endpoints[to].await_now(w.src, w.ctx, w.tag, w.capacity);
            if awaited.map(|a| a.lane) != Some(w.lane) {
                self.post_recv_now(f.to);
            }
        }
    }

    /// Runs until no event is left; returns the number of events processed.
    pub fn run(&mut self) -> u64 {
        let mut n = 0;
        while self.step() {
            n += 1;
        }
        n
    }
}

/// Bytes lane `lane` from `from` to `to` still has to send at its rate (none for a lane
/// without one): what a runtime's link would have queued or in its ring.
fn lane_queued(
    busy: &HashMap<(Rank, Rank, usize), Nanos>,
    rates: &[u64],
    now: Nanos,
    (from, to, lane): (Rank, Rank, usize),
) -> u64 {
    match rates.get(lane) {
        Some(&rate) => {
            let until = busy.get(&(from, to, lane)).copied().unwrap_or(0);
            until.saturating_sub(now) * rate / 1000
        }
        None => 0,
    }
}
