//! Sends: eager messages (through the engine's output queue, or written at once by the
//! runtime's latency-critical path) and the start of a rendezvous.

use super::{Endpoint, Failure, Incoming, Output, PeerState, RdvSend, SendId, SendSlice, Sent};
use crate::caps::{reads_in_one_copy, LaneId, Traffic, ONE_COPY_FROM};
use crate::wire::data::{DataRepr, Envelope, HeaderBytes};
use crate::Rank;

/// Where a message lies in the sender's memory, for a peer that can read it there (the
/// runtime's business; the engine only passes the address on in an ORIGIN frame), and
/// how busy the sender's lane of eager messages to that peer is
/// ([`Endpoint::traffic_lane`]; the default when not asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub at: u64,
    pub traffic: Traffic,
}

impl Endpoint {
    /// The lane whose traffic decides how a message of `len` bytes to `dest` goes
    /// ([`Origin::traffic`]), if it matters: the peer's lane of eager messages can read
    /// this rank's memory and the message is one [`reads_in_one_copy`] looks at.
    #[inline]
    pub fn traffic_lane(&self, dest: Rank, len: u64) -> Option<LaneId> {
        if len < ONE_COPY_FROM || len > u64::from(self.cfg.largest_eager()) {
            return None;
        }
        let p = self.peers.get(dest as usize)?;
        let lane = p.lanes.get(p.plan.eager)?;
        (matches!(p.state, PeerState::Up) && lane.caps.single_copy).then_some(lane.id)
    }

    /// Posts a send of `len` bytes. `sync` (MPI_Ssend) completes only once matched.
    /// `origin`: where the message lies in this process, for a peer that may read it.
    /// Returns what [`Endpoint::cancel_send`] needs, for a send that went out.
    #[allow(clippy::too_many_arguments)]
    pub fn post_send(
        &mut self,
        req: SendId,
        dest: Rank,
        ctx: u32,
        tag: i32,
        len: u64,
        sync: bool,
        origin: Option<Origin>,
    ) -> Option<Sent> {
        if dest >= self.size {
            self.outputs.push_back(Output::SendDone {
                req,
                result: Err(Failure::NoSuchRank(dest as i64)),
            });
            return None;
        }
        if dest == self.me {
            let seq = self.self_seq;
            self.self_seq = seq.wrapping_add(1);
            let env = Envelope {
                ctx,
                src: self.me,
                tag,
                seq,
                msg_len: len,
            };
            if !sync && len <= u64::from(self.cfg.eager_limit) {
                self.self_eager.insert(req, env);
                self.outputs.push_back(Output::CopyOut { req, len });
            } else {
                self.arrive(
                    env,
                    Incoming::SelfRdv {
                        send: req,
                        msg_len: len,
                    },
                );
            }
            return Some(Sent { dest, ctx, tag, seq });
        }
        // Messages coalesced before this one leave first: the wire keeps their order.
        self.flush_batch(dest);
        let p = &mut self.peers[dest as usize];
        if let PeerState::Failed(cause) = &p.state {
            let result = Err(Failure::PeerFailed {
                rank: dest,
                cause: cause.clone(),
            });
            self.outputs.push_back(Output::SendDone { req, result });
            return None;
        }
        let env = p.next_envelope(self.me, ctx, tag, len);
        let sent = Sent {
            dest,
            ctx,
            tag,
            seq: env.seq,
        };
        let eager = !sync && len <= u64::from(p.eager_limit);
        // One copy where the lane of control frames lets the receiver read ours.
        let lane = matches!(p.state, PeerState::Up)
            .then(|| p.lanes.get(p.plan.eager).map(|l| l.caps))
            .flatten();
        let (policy, reading) = (self.cfg.single_copy, p.offered_out > 0);
        let one_copy = |as_eager: bool| {
            let (o, caps) = (origin?, lane?);
            reads_in_one_copy(&caps, policy, len, as_eager, o.traffic, reading).then_some(o.at)
        };
        let behind = if eager { one_copy(true) } else { None };
        if eager && behind.is_none() && p.credit.spend(len) {
            let payload = (len > 0).then_some(SendSlice { req, offset: 0, len });
            self.emit(dest, DataRepr::Match { env }, payload, Some(req));
        } else {
            // Behind a backed-up lane, or a rendezvous anyway (too large, synchronous or
            // out of credit).
            let origin = behind.or_else(|| one_copy(false));
            self.rdv_sends.insert(
                req,
                RdvSend {
                    peer: dest,
                    len,
                    cts_seen: false,
                    offered: origin.is_some(),
                    recv_id: 0,
                    handed: Vec::new(),
                    cancel_asked: false,
                },
            );
            if let Some(at) = origin {
                p.offered_out += 1;
                self.emit(dest, DataRepr::Origin { send_id: req, at }, None, None);
            }
            self.emit(dest, DataRepr::Rts { env, send_id: req }, None, None);
        }
        Some(sent)
    }

    /// The bytes of an eager message to self (answer to `CopyOut`).
    pub fn handle_copy_out(&mut self, req: SendId, data: Vec<u8>) {
        let Some(env) = self.self_eager.remove(&req) else {
            return;
        };
        self.outputs.push_back(Output::SendDone { req, result: Ok(()) });
        self.arrive(env, Incoming::Eager { data, seq: env.seq });
    }

    pub(super) fn emit(
        &mut self,
        peer: Rank,
        repr: DataRepr,
        payload: Option<SendSlice>,
        completes: Option<SendId>,
    ) {
        let p = &mut self.peers[peer as usize];
        match p.state {
            PeerState::Up => {
                let lane = p.lanes[p.eager_lane_for(&repr)].id;
                let header = HeaderBytes::new(&repr);
                self.outputs.push_back(Output::Transmit {
                    peer,
                    lane,
                    header,
                    payload,
                    completes,
                });
            }
            PeerState::Idle => {
                p.state = PeerState::Connecting;
                p.backlog.push_back((repr, payload, completes));
                self.outputs.push_back(Output::Connect { peer });
            }
            PeerState::Connecting | PeerState::Finalized => p.backlog.push_back((repr, payload, completes)),
            PeerState::Failed(_) => {}
        }
    }

    /// The header of an eager message to `dest` that may be written at once, without a
    /// request: the latency-critical blocking send of a small message. `None` when the
    /// message must go through [`Endpoint::post_send`] instead (to self, not connected,
    /// above the eager limit, or frames still waiting in the output queue, which must
    /// go first). On `Some` the message is sent as far as the engine is concerned.
    #[inline]
    pub fn send_eager_now(
        &mut self,
        dest: Rank,
        ctx: u32,
        tag: i32,
        len: u64,
    ) -> Option<(LaneId, HeaderBytes)> {
        if dest == self.me || self.has_output() {
            return None;
        }
        let p = self.peers.get_mut(dest as usize)?;
        if p.batch_waiting() {
            self.flush_batch(dest);
            return None;
        }
        if !matches!(p.state, PeerState::Up) || len > u64::from(p.eager_limit) || !p.credit.spend(len) {
            return None;
        }
        let env = p.next_envelope(self.me, ctx, tag, len);
        let lane = p.lanes[p.eager_lane_for(&DataRepr::Match { env })].id;
        Some((lane, HeaderBytes::matched(&env)))
    }
}
