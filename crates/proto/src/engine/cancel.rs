//! Cancelling sends (MPI_Cancel of a send): the sender asks the receiver to withdraw a
//! message no receive has matched yet, and completes the send as cancelled when it
//! was. The receiver finds the message by the sender's sequence number: among its
//! unexpected messages (then it is dropped, and an eager one's credit goes back), among
//! those held back for an earlier one, or, when the CANCEL overtook the message on
//! another lane, when it arrives. A message that matched already is delivered, and the
//! send completes as usual.

use super::{Endpoint, Held, Incoming, Output, PeerState, ProtocolError, SendId};
use crate::wire::data::{DataRepr, Envelope};
use crate::Rank;

/// Messages cancelled before they arrived that a peer may have outstanding: beyond
/// that, CANCEL frames ahead of their messages are a protocol violation (a sender has
/// no more sends in flight than its memory holds; this bounds ours).
pub const CANCELS_AHEAD_MAX: usize = 4096;

/// What a send needs to be cancelled later: where it went and its envelope's keys
/// (from [`Endpoint::post_send`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub dest: Rank,
    pub ctx: u32,
    pub tag: i32,
    pub seq: u32,
}

impl Endpoint {
    /// Asks to cancel the send `req` ([`Sent`] as `post_send` gave it). The answer comes
    /// as [`Output::SendCancelled`]: withdrawn (the send is over, no receive will have
    /// it) or not (it completes as usual). A send matched already is not withdrawn.
    pub fn cancel_send(&mut self, req: SendId, sent: Sent) {
        let Sent { dest, ctx, tag, seq } = sent;
        if dest == self.me {
            let withdrawn = self.self_eager.remove(&req).is_some()
                || self
                    .matcher
                    .withdraw(ctx, dest, tag, |i| match i {
                        Incoming::SelfRdv { send, .. } => *send == req,
                        Incoming::Eager { seq: s, .. } => *s == seq,
                        Incoming::Rts { .. } => false,
                    })
                    .is_some();
            self.outputs.push_back(Output::SendCancelled { req, withdrawn });
            return;
        }
        let failed = matches!(
            self.peers.get(dest as usize).map(|p| &p.state),
            Some(PeerState::Failed(_)) | None
        );
        match self.rdv_sends.get_mut(&req) {
            // Matched (a CTS came), asked already, or the peer is gone: nothing to withdraw.
            Some(s) if s.cts_seen || s.cancel_asked || failed => {
                self.outputs.push_back(Output::SendCancelled {
                    req,
                    withdrawn: false,
                });
                return;
            }
            Some(s) => s.cancel_asked = true,
            None if failed || self.cancelling.contains_key(&req) => {
                self.outputs.push_back(Output::SendCancelled {
                    req,
                    withdrawn: false,
                });
                return;
            }
            None => {
                self.cancelling.insert(req, dest);
            }
        }
        self.flush_batch(dest);
        let cancel = DataRepr::Cancel {
            ctx,
            tag,
            seq,
            send_id: req,
        };
        self.emit(dest, cancel, None, None);
    }

    /// A CANCEL from `peer`: withdraws the message if nothing took it, or marks it to be
    /// dropped on arrival; answers at once unless it is still to come.
    pub(super) fn handle_cancel(
        &mut self,
        peer: Rank,
        ctx: u32,
        tag: i32,
        seq: u32,
        send_id: u64,
    ) -> Result<(), ProtocolError> {
        let p = &mut self.peers[peer as usize];
        let withdrawn = if super::seq_before(seq, p.next_recv_seq) {
            // Handed to matching already: withdrawn if still unexpected.
            let which = |i: &Incoming| match i {
                Incoming::Eager { seq: s, .. } => *s == seq,
                Incoming::Rts { send_id: id, .. } => *id == send_id,
                Incoming::SelfRdv { .. } => false,
            };
            match self.matcher.withdraw(ctx, peer, tag, which) {
                Some(incoming) => {
                    self.dropped(peer, incoming);
                    true
                }
                None => false,
            }
        } else if let Some(held) = p.held.get_mut(&seq) {
            // Held back behind an earlier message: it stays as a gap that only counts.
            if let Held::Match { data, .. } = std::mem::replace(held, Held::Withdrawn) {
                self.dropped(peer, Incoming::Eager { data, seq });
            }
            true
        } else {
            // Not here yet (it travels on another lane): dropped when it arrives.
            if p.cancels_ahead.len() >= CANCELS_AHEAD_MAX {
                return Err(ProtocolError {
                    peer,
                    what: format!("more than {CANCELS_AHEAD_MAX} cancels ahead of their messages"),
                });
            }
            p.cancels_ahead.push((seq, send_id));
            return Ok(());
        };
        self.emit(peer, DataRepr::Cancelled { send_id, withdrawn }, None, None);
        Ok(())
    }

    /// Whether the message `env` from a peer, about to be matched, was cancelled before
    /// it arrived: then it is dropped and the sender told.
    #[inline]
    pub(super) fn cancelled_ahead(&mut self, env: &Envelope, incoming: Incoming) -> Option<Incoming> {
        let p = self.peers.get_mut(env.src as usize)?;
        if p.cancels_ahead.is_empty() || env.src == self.me {
            return Some(incoming);
        }
        let Some(i) = p.cancels_ahead.iter().position(|(s, _)| *s == env.seq) else {
            return Some(incoming);
        };
        let (_, send_id) = p.cancels_ahead.swap_remove(i);
        self.dropped(env.src, incoming);
        let answer = DataRepr::Cancelled {
            send_id,
            withdrawn: true,
        };
        self.emit(env.src, answer, None, None);
        None
    }

    /// A withdrawn message from `peer` is gone: an eager one's memory and credit back.
    fn dropped(&mut self, peer: Rank, incoming: Incoming) {
        if let Incoming::Eager { data, .. } = incoming {
            let len = data.len() as u64;
            self.buffered -= len;
            self.consumed(peer, len);
            self.spare.give(data);
        }
    }

    /// The answer to our CANCEL of `send_id`.
    pub(super) fn handle_cancelled(
        &mut self,
        peer: Rank,
        send_id: u64,
        withdrawn: bool,
    ) -> Result<(), ProtocolError> {
        let rdv = matches!(self.rdv_sends.get(&send_id), Some(s) if s.peer == peer && s.cancel_asked);
        if rdv {
            if withdrawn {
                self.rdv_send_over(send_id);
            } else if let Some(s) = self.rdv_sends.get_mut(&send_id) {
                s.cancel_asked = false;
            }
        } else if self.cancelling.get(&send_id) == Some(&peer) {
            self.cancelling.remove(&send_id);
        } else if withdrawn {
            return Err(ProtocolError {
                peer,
                what: format!("send {send_id} withdrawn, but no cancel was asked"),
            });
        } else {
            // A rendezvous that matched and finished while the answer was on its way.
            return Ok(());
        }
        self.outputs.push_back(Output::SendCancelled {
            req: send_id,
            withdrawn,
        });
        Ok(())
    }

    /// `peer` failed: the cancels waiting for its answer end, not withdrawn (its
    /// rendezvous sends fail after this).
    pub(super) fn cancels_of_failed_peer(&mut self, peer: Rank) {
        let mut reqs: Vec<SendId> = self
            .cancelling
            .iter()
            .filter(|(_, p)| **p == peer)
            .map(|(r, _)| *r)
            .collect();
        self.cancelling.retain(|_, p| *p != peer);
        let asked = self
            .rdv_sends
            .iter()
            .filter(|(_, s)| s.peer == peer && s.cancel_asked);
        reqs.extend(asked.map(|(r, _)| *r));
        for req in reqs {
            self.outputs.push_back(Output::SendCancelled {
                req,
                withdrawn: false,
            });
        }
    }
}
