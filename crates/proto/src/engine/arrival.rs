//! Messages that arrived in order meet their receives: handed to matching (unless their
//! sender cancelled them), held back until the messages before them came, and what a
//! match asks of the runtime (a delivery, a rendezvous's CTS or a read in one copy).

use super::failover::Ranges;
use super::{Endpoint, Failure, Held, Incoming, Output, RdvRecv, RecvId, Status};
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

    /// Processes held-back messages that are now next in sequence.
    pub(super) fn drain_held(&mut self, peer: Rank) {
        loop {
            let p = &mut self.peers[peer as usize];
            let next = p.next_recv_seq;
            let Some(held) = p.held.remove(&next) else { return };
            p.next_recv_seq = next.wrapping_add(1);
            match held {
                Held::Match { env, data } => self.arrive(env, Incoming::Eager { data, seq: env.seq }),
                Held::Withdrawn => {}
                Held::Rts { env, send_id, origin } => self.arrive(
                    env,
                    Incoming::Rts {
                        peer,
                        send_id,
                        msg_len: env.msg_len,
                        origin,
                    },
                ),
            }
        }
    }
}

pub(super) fn incoming_len(i: &Incoming) -> u64 {
    match i {
        Incoming::Eager { data, .. } => data.len() as u64,
        Incoming::Rts { msg_len, .. } | Incoming::SelfRdv { msg_len, .. } => *msg_len,
    }
}
