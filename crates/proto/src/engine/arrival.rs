//! Messages that arrived in order meet their receives: handed to matching (unless their
//! sender cancelled them), held back until the messages before them came, and what a
//! match asks of the runtime (a delivery, a rendezvous's CTS or a read in one copy).

use super::failover::Ranges;
use super::{Endpoint, Failure, Held, Incoming, Output, RdvRecv, RdvSend, RecvId, SendId, Status};
use crate::wire::data::{DataRepr, Envelope};
use crate::Rank;

impl Endpoint {
    pub(super) fn matched(&mut self, req: RecvId, capacity: u64, src: Rank, tag: i32, incoming: Incoming) {
        let msg_len = incoming_len(&incoming);
        let count = msg_len.min(capacity);
        let status = Status {
            source: src,
            tag,
            count,
            truncated: msg_len > capacity,
            cancelled: false,
        };
        match incoming {
            Incoming::Eager { mut data, .. } => {
                if src != self.me {
                    self.buffered -= msg_len;
                    self.consumed(src, msg_len);
                }
                data.truncate(count as usize);
                if count > 0 {
                    self.outputs.push_back(Output::Deliver { req, data });
                }
                self.outputs.push_back(Output::RecvDone {
                    req,
                    result: Ok(status),
                });
            }
            Incoming::Rts {
                peer,
                send_id,
                origin,
                ..
            } => {
                if let Some(cause) = self.peer_failure(peer) {
                    let result = Err(Failure::PeerFailed {
                        rank: peer,
                        cause: cause.to_string(),
                    });
                    self.outputs.push_back(Output::RecvDone { req, result });
                    return;
                }
                if count == 0 {
                    self.outputs.push_back(Output::RecvDone {
                        req,
                        result: Ok(status),
                    });
                } else {
                    self.rdv_recvs.insert(
                        req,
                        RdvRecv {
                            peer,
                            send_id,
                            expected: count,
                            received: Ranges::default(),
                            status,
                        },
                    );
                    if let Some(at) = origin {
                        self.outputs.push_back(Output::Pull {
                            peer,
                            req,
                            at,
                            len: count,
                        });
                        return;
                    }
                }
                self.emit(
                    peer,
                    DataRepr::Cts {
                        send_id,
                        recv_id: req,
                        accept_len: count,
                    },
                    None,
                    None,
                );
                if count == 0 {
                    self.emit(peer, DataRepr::Fin { send_id }, None, None);
                }
            }
            Incoming::SelfRdv { send, .. } => {
                if count > 0 {
                    self.outputs.push_back(Output::LocalCopy {
                        from: send,
                        to: req,
                        len: count,
                    });
                }
                self.outputs.push_back(Output::SendDone {
                    req: send,
                    result: Ok(()),
                });
                self.outputs.push_back(Output::RecvDone {
                    req,
                    result: Ok(status),
                });
            }
        }
    }

    /// Hands a message, in sequence order, to the matcher.
    pub(super) fn arrive(&mut self, env: Envelope, incoming: Incoming) {
        let Some(incoming) = self.cancelled_ahead(&env, incoming) else {
            return;
        };
        if let Some((req, capacity, incoming)) = self.matcher.arrive(env.ctx, env.src, env.tag, incoming) {
            self.matched(req, capacity, env.src, env.tag, incoming);
        }
    }

    /// A whole MATCH or an RTS from `peer`: matched now if it is next in sequence (then
    /// those held back behind it too), else held back until the ones before it came.
    pub(super) fn in_sequence(&mut self, peer: Rank, msg: Held) {
        let Some(seq) = msg.seq() else { return };
        let p = &mut self.peers[peer as usize];
        if seq == p.next_recv_seq {
            p.next_recv_seq = seq.wrapping_add(1);
            self.arrive_held(peer, msg);
            self.drain_held(peer);
        } else {
            p.held.insert(seq, msg);
            self.held_max = self.held_max.max(p.held.len());
        }
    }

    /// Processes held-back messages that are now next in sequence.
    pub(super) fn drain_held(&mut self, peer: Rank) {
        loop {
            let p = &mut self.peers[peer as usize];
            let next = p.next_recv_seq;
            let Some(held) = p.held.remove(&next) else { return };
            p.next_recv_seq = next.wrapping_add(1);
            self.arrive_held(peer, held);
        }
    }

    /// Hands a message whose turn came to the matcher (a withdrawn one only counted).
    fn arrive_held(&mut self, peer: Rank, held: Held) {
        match held {
            Held::Match { env, data } => self.arrive(env, Incoming::Eager { data, seq: env.seq }),
            Held::Rts { env, send_id, origin } => {
                let rts = Incoming::Rts {
                    peer,
                    send_id,
                    msg_len: env.msg_len,
                    origin,
                };
                self.arrive(env, rts);
            }
            Held::Withdrawn => {}
        }
    }

    /// The rendezvous send `send_id` is over (its FIN came, or its receiver withdrew
    /// it): no longer counted among the sends offered in one copy.
    pub(super) fn rdv_send_over(&mut self, send_id: SendId) -> Option<RdvSend> {
        let s = self.rdv_sends.remove(&send_id)?;
        if s.offered {
            let p = &mut self.peers[s.peer as usize];
            p.offered_out = p.offered_out.saturating_sub(1);
        }
        Some(s)
    }
}

impl Held {
    /// The sender's sequence number (none for a withdrawn one, which only holds a place).
    fn seq(&self) -> Option<u32> {
        match self {
            Held::Match { env, .. } | Held::Rts { env, .. } => Some(env.seq),
            Held::Withdrawn => None,
        }
    }
}

pub(super) fn incoming_len(i: &Incoming) -> u64 {
    match i {
        Incoming::Eager { data, .. } => data.len() as u64,
        Incoming::Rts { msg_len, .. } | Incoming::SelfRdv { msg_len, .. } => *msg_len,
    }
}
