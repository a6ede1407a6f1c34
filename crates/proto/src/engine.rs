//! The protocol endpoint of one rank: eager and rendezvous sends, matching,
//! per-peer ordering, lanes and peer failure. Sans-IO: the runtime feeds it
//! requests and frame headers and carries out the `Output`s it polls.
//!
//! Payload bytes never pass through here on the fast path: a `Transmit` names a
//! slice of a send buffer, and a header's `PayloadDest` names where the runtime
//! must put the bytes that follow it (a receive buffer, or an engine-owned buffer
//! for unexpected and out-of-order messages).

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap as HashMap;

use crate::caps::{Caps, LaneId, LanePlan};

mod arrival;
mod cancel;
mod coalesce;
mod credit;
mod failover;
mod lanes;
mod peer_table;
mod peers;
mod recv_now;
mod send;
mod spare;
use crate::matching::{Matcher, ReqId};
use crate::wire::data::{DataRepr, Envelope, HeaderBytes, PunchMsg};
use crate::{Nanos, Rank, ANY_SOURCE};
use arrival::incoming_len;
pub use cancel::{Sent, CANCELS_AHEAD_MAX};
pub use coalesce::COALESCE_MESSAGE_MAX;
use credit::Credit;
pub use credit::{cost as eager_cost, grant as eager_grant};
pub use failover::LANE_ACK_EVERY;
use failover::{Ranges, Recent};
pub use lanes::LaneLoss;
pub use recv_now::Awaited;
pub use send::Origin;

pub type SendId = ReqId;
pub type RecvId = ReqId;

/// Engine limits (the runtime fills them from `Config`).
#[derive(Debug, Clone, Copy)]
pub struct EngineConfig {
    pub eager_limit: u32,
    /// The eager limit towards a peer whose lane of eager messages is a WAN lane
    /// ([`crate::caps::Caps::is_wan`]): there a rendezvous's extra round trip costs more
    /// than sending a large message at once, whose memory the eager credit still bounds.
    pub wan_eager_limit: u32,
    pub frag_size: u32,
    /// Fragment bytes a lane may have queued in the runtime before it gets more (for
    /// the lane with the most bandwidth; slower lanes get proportionally less).
    pub lane_queue: u64,
    /// Bytes this rank holds at most for eager messages that no receive has matched
    /// yet, shared equally among the peers (flow control: `engine/credit.rs`).
    pub unexpected_cap: u64,
    /// The longest a small message to a WAN peer waits to be coalesced with others
    /// (`engine/coalesce.rs`; also at most a sixteenth of the lane's round trip); 0: never.
    pub coalesce_delay_ns: u64,
    /// A batch of coalesced messages leaves once it holds about this many bytes.
    pub coalesce_bytes: u32,
    /// Which messages a node-local receiver reads in one copy, where its lane can
    /// ([`crate::caps::reads_in_one_copy`]).
    pub single_copy: crate::caps::SingleCopy,
}

impl EngineConfig {
    /// The largest eager message any peer may send (over a LAN lane or a WAN one).
    #[inline]
    pub fn largest_eager(&self) -> u32 {
        self.eager_limit.max(self.wan_eager_limit)
    }
}

/// Completion information of a receive (or of a send, in the runtime: cancelled or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub source: Rank,
    pub tag: i32,
    /// Bytes placed in the receive buffer.
    pub count: u64,
    /// The message was longer than the buffer: only `count` bytes were kept (MPI_ERR_TRUNCATE).
    pub truncated: bool,
    /// A send its cancel withdrew ([`Endpoint::cancel_send`], MPI_Test_cancelled).
    pub cancelled: bool,
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("rank {rank} failed: {cause}")]
    PeerFailed { rank: Rank, cause: String },
    #[error("rank {0} is not part of this job")]
    NoSuchRank(i64),
}

/// Where a slice of a send buffer goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendSlice {
    pub req: SendId,
    pub offset: u64,
    pub len: u64,
}

#[derive(Debug)]
pub enum Output {
    /// Write `header` then the payload slice on lane `lane` of `peer`. If `completes` is
    /// set, that send request is complete once the frame is handed to the link.
    Transmit {
        peer: Rank,
        lane: LaneId,
        header: HeaderBytes,
        payload: Option<SendSlice>,
        completes: Option<SendId>,
    },
    /// Write `header` then `payload`, which the engine owns (a batch of coalesced
    /// messages, whose sends are complete already), on lane `lane` of `peer`.
    TransmitOwned {
        peer: Rank,
        lane: LaneId,
        header: HeaderBytes,
        payload: Vec<u8>,
    },
    /// Copy the send buffer of `req` (`len` bytes) into a new vector and give it back
    /// with [`Endpoint::handle_copy_out`] (an eager message to self).
    CopyOut { req: SendId, len: u64 },
    /// Copy `len` bytes from a send buffer to a receive buffer (a large message to self).
    LocalCopy { from: SendId, to: RecvId, len: u64 },
    /// Copy buffered bytes into the receive buffer of `req` (an unexpected message matched).
    Deliver { req: RecvId, data: Vec<u8> },
    /// Read `len` bytes at `at` in `peer`'s memory into the receive buffer of `req` (a
    /// rendezvous message offered in one copy, [`DataRepr::Origin`]), then report
    /// whether it worked with [`Endpoint::pulled`].
    Pull {
        peer: Rank,
        req: RecvId,
        at: u64,
        len: u64,
    },
    /// A receive finished.
    RecvDone {
        req: RecvId,
        result: Result<Status, Failure>,
    },
    /// A send finished (rendezvous: the receiver has the data).
    SendDone {
        req: SendId,
        result: Result<(), Failure>,
    },
    /// The answer to [`Endpoint::cancel_send`]: `withdrawn`, the send is over and no
    /// receive will have its message (a rendezvous send gets no `SendDone`); otherwise it
    /// completes as it would have.
    SendCancelled { req: SendId, withdrawn: bool },
    /// Messages wait for a connection to `peer`: establish one and report `handle_lane_up`.
    Connect { peer: Rank },
    /// The rendezvous receive `req` from `peer` has every byte, but another lane of the
    /// peer may be part-way through a fragment sent again: drop the rest of it rather
    /// than write into the buffer (comes before the receive's `RecvDone`).
    Abandon { peer: Rank, req: RecvId },
    /// A hole-punch frame from `peer`: for the runtime's [`crate::punch::Puncher`].
    Punch { peer: Rank, msg: PunchMsg },
    /// `peer` processed `frames` of our frames on the lane both know as `tag`: the link
    /// may forget the copies it keeps of them.
    LaneAck { peer: Rank, tag: u64, frames: u64 },
    /// `peer` says the lane `tag` broke after `frames` of our frames on it arrived: send
    /// the rest again on its lane of control frames (a lane of ours still open with that
    /// tag is closed first).
    LaneLost { peer: Rank, tag: u64, frames: u64 },
    /// Rank `origin` called MPI_Abort with `code` (heard from `peer`): pass it on
    /// ([`Endpoint::abort_job`]) and exit with `code`.
    JobAborted { peer: Rank, origin: Rank, code: i32 },
}

/// Where the payload following a header must be placed.
#[derive(Debug)]
pub enum PayloadDest {
    None,
    /// `len` bytes into the receive buffer of `req` at `offset`, then `skip` bytes dropped (truncation).
    User {
        req: RecvId,
        offset: u64,
        len: u64,
        skip: u64,
    },
    /// Into this engine-owned buffer (its length is the payload length); hand it back.
    Engine(Vec<u8>),
}

/// Ties a payload to its header; hand it back to [`Endpoint::payload_done`].
#[derive(Debug)]
pub struct PayloadToken(TokenKind);

#[derive(Debug)]
enum TokenKind {
    None,
    EagerMatched { req: RecvId, status: Status, seq: u32 },
    EagerBuffered { env: Envelope },
    Frag { req: RecvId, offset: u64, len: u64 },
    Batch { messages: u32 },
}

/// A peer broke the protocol: the runtime closes the lane and fails the peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("protocol violation by rank {peer}: {what}")]
pub struct ProtocolError {
    pub peer: Rank,
    pub what: String,
}

enum Incoming {
    Eager {
        data: Vec<u8>,
        /// The sender's sequence number (a CANCEL names the message by it).
        seq: u32,
    },
    Rts {
        peer: Rank,
        send_id: u64,
        msg_len: u64,
        /// Where the message lies in the sender's memory, when it offered one copy.
        origin: Option<u64>,
    },
    /// A large or synchronous message to self, waiting for its receive.
    SelfRdv { send: SendId, msg_len: u64 },
}

/// A MATCH or RTS held back until the messages before it (sequence numbers) arrived.
enum Held {
    Match {
        env: Envelope,
        data: Vec<u8>,
    },
    Rts {
        env: Envelope,
        send_id: u64,
        origin: Option<u64>,
    },
    /// A message its sender cancelled while it was held back: its turn only counts.
    Withdrawn,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PeerState {
    Idle,
    Connecting,
    Up,
    Finalized,
    Failed(String),
}

/// A lane as the engine knows it: its identity and what it can do.
#[derive(Debug, Clone, Copy)]
struct Lane {
    id: LaneId,
    caps: Caps,
}

struct Peer {
    state: PeerState,
    lanes: Vec<Lane>,
    /// Which of `lanes` carry what ([`crate::caps::plan`]); valid while the peer is Up.
    plan: LanePlan,
    /// The lane of eager messages and control frames, once planned.
    control: Option<LaneId>,
    next_send_seq: u32,
    next_recv_seq: u32,
    held: BTreeMap<u32, Held>,
    /// Frames waiting for a lane: header, payload, request completed when written.
    backlog: VecDeque<(DataRepr, Option<SendSlice>, Option<SendId>)>,
    /// Largest eager message towards this peer: the configured limit, capped by its best lane.
    eager_limit: u32,
    /// Largest eager message one datagram of a raw eager lane takes; larger ones go on
    /// `plan.large_eager` (when there is one).
    small_eager: u32,
    /// Rendezvous fragment size towards this peer: the configured size, capped by its lanes.
    frag_size: u32,
    /// Rendezvous payloads being handed out to lanes, oldest first.
    streams: VecDeque<Stream>,
    /// Eager flow control in both directions.
    credit: Credit,
    /// How long small messages to this peer may wait to be coalesced (`None`: its eager
    /// lane is not a WAN lane, they never wait), and those waiting.
    coalesce_delay: Option<Nanos>,
    batch: coalesce::Batch,
    /// The ORIGIN frame just received (send id, address): for the RTS that follows it.
    origin: Option<(u64, u64)>,
    /// This rank's sends to the peer offered in one copy and not finished yet.
    offered_out: u32,
    /// Messages of the peer cancelled before they arrived (sequence number, send id):
    /// dropped when they do (`cancel.rs`).
    cancels_ahead: Vec<(u32, u64)>,
}

impl Peer {
    /// Index of the lane a frame goes on: the eager lane, but an eager message above
    /// what it takes on the lane the plan has for those.
    fn eager_lane_for(&self, repr: &DataRepr) -> usize {
        match (repr, self.plan.large_eager) {
            (DataRepr::Match { env }, Some(large)) if env.msg_len > u64::from(self.small_eager) => large,
            _ => self.plan.eager,
        }
    }

    /// Whether coalesced messages to this peer wait for their batch to leave.
    fn batch_waiting(&self) -> bool {
        self.batch.messages > 0
    }

    /// The envelope of the next message to this peer; takes its sequence number.
    fn next_envelope(&mut self, me: Rank, ctx: u32, tag: i32, len: u64) -> Envelope {
        let seq = self.next_send_seq;
        self.next_send_seq = seq.wrapping_add(1);
        Envelope {
            ctx,
            src: me,
            tag,
            seq,
            msg_len: len,
        }
    }
}

/// The fragments of a rendezvous send not yet given to a lane. Lanes pull fragments
/// as their queues drain ([`Endpoint::fill_lanes`]), so a transfer is split by the
/// speed the lanes really have, and control frames never wait behind a long queue.
struct Stream {
    send_id: SendId,
    recv_id: RecvId,
    next: u64,
    end: u64,
}

struct RdvSend {
    peer: Rank,
    len: u64,
    cts_seen: bool,
    /// An ORIGIN went before the RTS: the receiver may read the message and send FIN
    /// without a CTS.
    offered: bool,
    /// The receive named by the CTS.
    recv_id: RecvId,
    /// Fragments handed to lanes (lane, offset, length): those of a lane that breaks go again.
    handed: Vec<(LaneId, u64, u64)>,
    /// A CANCEL went to the receiver (`cancel.rs`).
    cancel_asked: bool,
}

struct RdvRecv {
    peer: Rank,
    send_id: u64,
    expected: u64,
    /// What has arrived (a fragment sent again after a lane broke counts once).
    received: Ranges,
    status: Status,
}

pub struct Endpoint {
    me: Rank,
    size: u32,
    cfg: EngineConfig,
    peers: peer_table::Peers,
    matcher: Matcher<Incoming>,
    rdv_sends: HashMap<SendId, RdvSend>,
    rdv_recvs: HashMap<RecvId, RdvRecv>,
    /// Eager sends to self waiting for their bytes (`CopyOut`).
    self_eager: HashMap<SendId, Envelope>,
    outputs: VecDeque<Output>,
    held_max: usize,
    /// Peers with fragments waiting for a lane.
    streaming: Vec<Rank>,
    /// Messages taken by a matched probe (mprobe), waiting for their receive, by id.
    claimed: HashMap<u64, (Rank, i32, Incoming)>,
    next_claim: u64,
    /// The identity of the next lane to come up.
    next_lane: u32,
    /// Rendezvous receives completed lately (fragments sent again may still come).
    recent_recvs: Recent,
    /// Eager messages matched whose payload a broken lane cut off: the receive waits
    /// for the message sent again (by peer and sequence number).
    resume: HashMap<(Rank, u32), (RecvId, Status)>,
    /// Each peer's share of `unexpected_cap`.
    grant: u64,
    /// Payload bytes of eager messages from peers held in engine buffers, and the most ever.
    buffered: u64,
    buffered_peak: u64,
    /// Peers with a batch of coalesced messages waiting.
    batching: Vec<Rank>,
    /// Payload buffers of delivered eager messages, for the next ones.
    spare: spare::SpareBuffers,
    /// Eager sends whose CANCEL awaits its answer, and the peer asked.
    cancelling: HashMap<SendId, Rank>,
    /// The sequence number of the next message to self (a cancel names it by that).
    self_seq: u32,
}

fn seq_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl Endpoint {
    pub fn new(me: Rank, size: u32, cfg: EngineConfig) -> Endpoint {
        let grant = credit::grant(cfg.unexpected_cap, size);
        let peers = peer_table::Peers::new(size, cfg.eager_limit, cfg.frag_size, grant);
        Endpoint {
            me,
            size,
            cfg,
            peers,
            matcher: Matcher::default(),
            claimed: HashMap::default(),
            next_claim: 0,
            rdv_sends: HashMap::default(),
            rdv_recvs: HashMap::default(),
            self_eager: HashMap::default(),
            outputs: VecDeque::new(),
            held_max: 0,
            streaming: Vec::new(),
            next_lane: 0,
            recent_recvs: Recent::default(),
            resume: HashMap::default(),
            grant,
            buffered: 0,
            buffered_peak: 0,
            batching: Vec::new(),
            spare: spare::SpareBuffers::default(),
            cancelling: HashMap::default(),
            self_seq: 0,
        }
    }

    /// The runtime read (`ok`) the message of the rendezvous receive `req` from the
    /// sender's memory ([`Output::Pull`]): the sender hears FIN and the receive is done.
    /// If it could not, the sender is asked for fragments (CTS), as without an origin.
    pub fn pulled(&mut self, req: RecvId, ok: bool) {
        let Some(r) = self.rdv_recvs.get(&req) else {
            return;
        };
        let (peer, send_id, expected, status) = (r.peer, r.send_id, r.expected, r.status);
        if ok {
            self.rdv_recvs.remove(&req);
            self.emit(peer, DataRepr::Fin { send_id }, None, None);
            self.outputs.push_back(Output::RecvDone {
                req,
                result: Ok(status),
            });
        } else {
            let cts = DataRepr::Cts {
                send_id,
                recv_id: req,
                accept_len: expected,
            };
            self.emit(peer, cts, None, None);
        }
    }

    /// The runtime copied a delivered payload (`Output::Deliver`) out of `buf`: it may
    /// carry the next unexpected message.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.spare.give(buf);
    }

    pub fn rank(&self) -> Rank {
        self.me
    }
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Next instruction for the runtime.
    pub fn poll(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// Whether [`Endpoint::poll`] has something (a cheap check for idle loops).
    pub fn has_output(&self) -> bool {
        !self.outputs.is_empty()
    }

    /// Operations in flight inside the engine (for leak checks and finalize).
    pub fn pending(&self) -> usize {
        self.matcher.posted_len() + self.rdv_sends.len() + self.rdv_recvs.len() + self.self_eager.len()
    }
    /// Most messages ever held back for one peer waiting for earlier sequence numbers.
    pub fn held_max(&self) -> usize {
        self.held_max
    }
    pub fn unexpected_len(&self) -> usize {
        self.matcher.unexpected_len()
    }
    /// Most payload bytes of eager messages from peers ever held at once in engine
    /// buffers (unexpected or early): never above `unexpected_cap`.
    pub fn buffered_peak(&self) -> u64 {
        self.buffered_peak
    }
    /// Payload bytes of eager messages from peers held in engine buffers now.
    pub fn buffered(&self) -> u64 {
        self.buffered
    }
    /// Credit left for eager messages to `peer` (flow control).
    pub fn eager_credit(&self, peer: Rank) -> u64 {
        self.peers.get(peer as usize).map_or(0, |p| p.credit.available())
    }

    // ---- receives ----------------------------------------------------------------

    /// Posts a receive into a buffer of `capacity` bytes. `src` is a rank or `ANY_SOURCE`.
    pub fn post_recv(&mut self, req: RecvId, src: i32, ctx: u32, tag: i32, capacity: u64) {
        if src != ANY_SOURCE && (src < 0 || src as u32 >= self.size) {
            self.outputs.push_back(Output::RecvDone {
                req,
                result: Err(Failure::NoSuchRank(src as i64)),
            });
            return;
        }
        match self.matcher.post(ctx, src, tag, req, capacity) {
            Some((info, incoming)) => self.matched(req, capacity, info.src, info.tag, incoming),
            None => {
                if let Some(f) = self.source_failure(src) {
                    self.matcher.cancel(req);
                    self.outputs.push_back(Output::RecvDone { req, result: Err(f) });
                }
            }
        }
    }

    /// Why a receive from `src` can never be satisfied, if it cannot.
    fn source_failure(&self, src: i32) -> Option<Failure> {
        if src == ANY_SOURCE {
            let others = (0..self.size).filter(|r| *r != self.me);
            let mut failed = others
                .clone()
                .filter_map(|r| match &self.peers[r as usize].state {
                    PeerState::Failed(c) => Some((r, c.clone())),
                    _ => None,
                });
            let first = failed.next()?;
            return (failed.count() + 1 == others.count()).then_some(Failure::PeerFailed {
                rank: first.0,
                cause: first.1,
            });
        }
        match &self.peers[src as usize].state {
            PeerState::Failed(cause) => Some(Failure::PeerFailed {
                rank: src as Rank,
                cause: cause.clone(),
            }),
            _ => None,
        }
    }

    /// Non-destructive probe of the unexpected queue: (source, tag, message length).
    pub fn probe(&self, src: i32, ctx: u32, tag: i32) -> Option<(Rank, i32, u64)> {
        self.matcher
            .peek(ctx, src, tag)
            .map(|(info, inc)| (info.src, info.tag, incoming_len(inc)))
    }

    /// Matched probe (MPI_Improbe): takes the earliest fitting unexpected message out of
    /// matching, so no other receive can have it; (source, tag, length, message id).
    /// [`Endpoint::post_recv_claimed`] receives it.
    pub fn mprobe(&mut self, src: i32, ctx: u32, tag: i32) -> Option<(Rank, i32, u64, u64)> {
        let (info, incoming) = self.matcher.take(ctx, src, tag)?;
        let len = incoming_len(&incoming);
        self.next_claim += 1;
        self.claimed
            .insert(self.next_claim, (info.src, info.tag, incoming));
        Some((info.src, info.tag, len, self.next_claim))
    }

    /// Receives a message taken by [`Endpoint::mprobe`] (MPI_Mrecv); false if `msg` is
    /// no such message.
    pub fn post_recv_claimed(&mut self, req: RecvId, msg: u64, capacity: u64) -> bool {
        let Some((src, tag, incoming)) = self.claimed.remove(&msg) else {
            return false;
        };
        self.matched(req, capacity, src, tag, incoming);
        true
    }

    /// Cancels a posted receive; true if it had not matched yet (then it never will).
    pub fn cancel_recv(&mut self, req: RecvId) -> bool {
        self.matcher.cancel(req)
    }

    // ---- frames from peers -------------------------------------------------------

    /// A data header arrived from `peer`. Returns where its payload goes and a token
    /// for [`Endpoint::payload_done`], which must be called once the payload is placed
    /// (also for `PayloadDest::None`).
    pub fn handle_header(
        &mut self,
        peer: Rank,
        repr: &DataRepr,
    ) -> Result<(PayloadDest, PayloadToken), ProtocolError> {
        let violation = |what: String| ProtocolError { peer, what };
        if peer >= self.size || peer == self.me {
            return Err(violation(format!("frame from impossible rank {peer}")));
        }
        let none = (PayloadDest::None, PayloadToken(TokenKind::None));
        match *repr {
            DataRepr::Match { env } | DataRepr::Rts { env, .. } if env.src != peer => {
                Err(violation(format!("message claims to come from rank {}", env.src)))
            }
            DataRepr::Match { env } if env.msg_len > u64::from(self.cfg.largest_eager()) => {
                Err(violation(format!(
                "eager message of {} bytes, above this rank's eager limit of {} (PONTOON_EAGER_LIMIT and \
                 PONTOON_WAN_EAGER_LIMIT must be the same on every rank)",
                env.msg_len,
                self.cfg.largest_eager()
            )))
            }
            DataRepr::Match { env } => {
                let grant = self.grant;
                let p = &mut self.peers[peer as usize];
                let next = p.next_recv_seq;
                if seq_before(env.seq, next) {
                    // Sent again after a lane broke while its payload was on the way?
                    return self
                        .resumed(peer, env)
                        .ok_or_else(|| violation(format!("sequence {} already received", env.seq)));
                }
                let len = env.msg_len;
                p.credit.charge(len, grant).map_err(violation)?;
                if env.seq == next && p.cancels_ahead.is_empty() {
                    if let Some((req, capacity)) = self.matcher.match_posted(env.ctx, env.src, env.tag) {
                        // Fast path: in order and expected, the payload goes straight to the user.
                        self.peers[peer as usize].next_recv_seq = next.wrapping_add(1);
                        self.consumed(peer, len);
                        let count = len.min(capacity);
                        let status = Status {
                            source: peer,
                            tag: env.tag,
                            count,
                            truncated: len > capacity,
                            cancelled: false,
                        };
                        self.drain_held(peer);
                        let dest = PayloadDest::User {
                            req,
                            offset: 0,
                            len: count,
                            skip: len - count,
                        };
                        let token = TokenKind::EagerMatched {
                            req,
                            status,
                            seq: env.seq,
                        };
                        return Ok((dest, PayloadToken(token)));
                    }
                }
                // Unexpected or early: buffered; its sequence number advances once it is complete.
                self.buffered += len;
                self.buffered_peak = self.buffered_peak.max(self.buffered);
                Ok((
                    PayloadDest::Engine(self.spare.take(len as usize)),
                    PayloadToken(TokenKind::EagerBuffered { env }),
                ))
            }
            DataRepr::Rts { env, send_id } => {
                let p = &mut self.peers[peer as usize];
                let origin = p.origin.take().filter(|(id, _)| *id == send_id).map(|(_, at)| at);
                if seq_before(env.seq, p.next_recv_seq) {
                    return Err(violation(format!("sequence {} already received", env.seq)));
                }
                self.in_sequence(peer, Held::Rts { env, send_id, origin });
                Ok(none)
            }
            DataRepr::Cts {
                send_id,
                recv_id,
                accept_len,
            } => {
                let ok = matches!(self.rdv_sends.get(&send_id),
                    Some(s) if s.peer == peer && !s.cts_seen && accept_len <= s.len);
                if !ok {
                    return Err(violation(format!("CTS for unknown or finished send {send_id}")));
                }
                if let Some(s) = self.rdv_sends.get_mut(&send_id) {
                    s.cts_seen = true;
                    s.recv_id = recv_id;
                }
                self.queue_fragments(peer, send_id, recv_id, accept_len);
                Ok(none)
            }
            DataRepr::Frag { recv_id, offset, len } => {
                let ok = matches!(self.rdv_recvs.get(&recv_id),
                    Some(r) if r.peer == peer && offset.checked_add(u64::from(len)).is_some_and(|end| end <= r.expected));
                if !ok && len <= self.cfg.frag_size && self.recent_recvs.contains(peer, recv_id) {
                    // Sent again after a lane broke, but the first copy made it: dropped
                    // (no larger than a fragment, so a peer cannot make this allocate much).
                    return Ok((
                        PayloadDest::Engine(self.spare.take(len as usize)),
                        PayloadToken(TokenKind::None),
                    ));
                }
                if !ok {
                    return Err(violation(format!(
                        "fragment [{offset}, +{len}) for unknown receive {recv_id}"
                    )));
                }
                let len = u64::from(len);
                let dest = PayloadDest::User {
                    req: recv_id,
                    offset,
                    len,
                    skip: 0,
                };
                Ok((
                    dest,
                    PayloadToken(TokenKind::Frag {
                        req: recv_id,
                        offset,
                        len,
                    }),
                ))
            }
            DataRepr::Origin { send_id, at } => {
                // Only where this end reads the peer's memory (its own lanes say so, by
                // its own start-up read and settings): elsewhere the RTS gets its CTS.
                let p = &mut self.peers[peer as usize];
                if p.lanes.iter().any(|l| l.caps.single_copy) {
                    p.origin = Some((send_id, at));
                }
                Ok(none)
            }
            DataRepr::Fin { send_id } => {
                match self.rdv_sends.get(&send_id) {
                    Some(s) if s.peer == peer && (s.cts_seen || s.offered) => {}
                    _ => return Err(violation(format!("FIN for unknown send {send_id}"))),
                }
                if self.rdv_send_over(send_id).is_some_and(|s| s.cancel_asked) {
                    // Received, so not withdrawn, whenever the receiver's answer comes.
                    self.outputs.push_back(Output::SendCancelled {
                        req: send_id,
                        withdrawn: false,
                    });
                }
                self.outputs.push_back(Output::SendDone {
                    req: send_id,
                    result: Ok(()),
                });
                Ok(none)
            }
            DataRepr::Bye => {
                self.handle_peer_finalized(peer);
                Ok(none)
            }
            DataRepr::Punch(msg) => {
                self.outputs.push_back(Output::Punch { peer, msg });
                Ok(none)
            }
            DataRepr::LaneAck { tag, frames } => {
                self.outputs.push_back(Output::LaneAck { peer, tag, frames });
                Ok(none)
            }
            DataRepr::LaneLost { tag, frames } => {
                self.outputs.push_back(Output::LaneLost { peer, tag, frames });
                Ok(none)
            }
            DataRepr::Abort { origin, .. } if origin >= self.size => {
                Err(violation(format!("abort from impossible rank {origin}")))
            }
            DataRepr::Abort { code, origin } => {
                self.outputs.push_back(Output::JobAborted { peer, origin, code });
                Ok(none)
            }
            DataRepr::Cancel {
                ctx,
                tag,
                seq,
                send_id,
            } => self.handle_cancel(peer, ctx, tag, seq, send_id).map(|()| none),
            DataRepr::Cancelled { send_id, withdrawn } => {
                self.handle_cancelled(peer, send_id, withdrawn).map(|()| none)
            }
            DataRepr::Credit { returned } => {
                let grant = self.grant;
                self.peers[peer as usize]
                    .credit
                    .handle_returned(returned, grant)
                    .map_err(violation)?;
                Ok(none)
            }
            DataRepr::Batch { len, .. } if len > crate::wire::data::MAX_BATCH => {
                Err(violation(format!("a batch of {len} bytes")))
            }
            DataRepr::Batch { messages, len } => Ok((
                PayloadDest::Engine(self.spare.take(len as usize)),
                PayloadToken(TokenKind::Batch { messages }),
            )),
        }
    }

    /// The payload announced by a header is in place. `buf` is the engine buffer of a
    /// `PayloadDest::Engine`, filled. Fails when the payload breaks the protocol (a
    /// batch of coalesced messages is looked into only now).
    pub fn payload_done(
        &mut self,
        peer: Rank,
        token: PayloadToken,
        buf: Option<Vec<u8>>,
    ) -> Result<(), ProtocolError> {
        match token.0 {
            TokenKind::None => {}
            TokenKind::EagerMatched { req, status, .. } => {
                self.outputs.push_back(Output::RecvDone {
                    req,
                    result: Ok(status),
                });
            }
            TokenKind::EagerBuffered { env } => {
                let data = buf.unwrap_or_default();
                self.in_sequence(peer, Held::Match { env, data });
            }
            TokenKind::Frag { req, offset, len } => {
                let Some(r) = self.rdv_recvs.get_mut(&req) else {
                    return Ok(());
                };
                r.received.insert(offset, offset + len);
                if r.received.covered() >= r.expected {
                    let r = self.rdv_recvs.remove(&req).expect("present");
                    self.recent_recvs.push(peer, req);
                    if self.peers[peer as usize].lanes.len() > 1 {
                        self.outputs.push_back(Output::Abandon { peer, req });
                    }
                    self.emit(r.peer, DataRepr::Fin { send_id: r.send_id }, None, None);
                    self.outputs.push_back(Output::RecvDone {
                        req,
                        result: Ok(r.status),
                    });
                }
            }
            TokenKind::Batch { messages } => {
                let frames = buf.unwrap_or_default();
                let unpacked = self.unbatch(peer, messages, &frames);
                self.spare.give(frames);
                return unpacked;
            }
        }
        Ok(())
    }

    /// An eager message of `len` bytes from `peer` left this rank's buffers: its credit
    /// goes back to the sender once a batch is due.
    #[inline]
    fn consumed(&mut self, peer: Rank, len: u64) {
        let grant = self.grant;
        if let Some(returned) = self.peers[peer as usize].credit.consumed(len, grant) {
            self.return_credit(peer, returned);
        }
    }

    #[inline(never)]
    fn return_credit(&mut self, peer: Rank, returned: u64) {
        self.emit(peer, DataRepr::Credit { returned }, None, None);
    }
}
