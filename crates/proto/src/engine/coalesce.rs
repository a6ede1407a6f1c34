//! Coalescing of small eager messages towards a WAN peer (seed 004). Over a link of
//! milliseconds a burst of small messages costs a system call, a packet and the WAN
//! emulator's or router's per-packet work each; packed into one BATCH frame they cost
//! one. A message is packed only while the peer's lane is busy — another small message
//! went to it within the delay bound — so a lone message (a ping-pong's) leaves at
//! once. A batch leaves when it is full (`coalesce_bytes`), when its first message has
//! waited the delay bound (a sixteenth of the lane's round trip, at most
//! `coalesce_delay_ns`), or before any other message to the peer, so that the wire
//! keeps the messages' order. The runtime sends every batch when the rank blocks or a
//! blocking send returns ([`Endpoint::flush_batches`]): outside its MPI calls a rank
//! runs no timers, and what it computes next may take seconds. Never on LAN lanes:
//! there a system call costs more than the wait would save.

use super::{Endpoint, Output, PayloadDest, PeerState, ProtocolError};
use crate::caps::Caps;
use crate::wire::data::{DataHeader, DataRepr, HeaderBytes, Kind, MAX_BATCH, MAX_HEADER_LEN};
use crate::{Nanos, Rank};

/// Messages up to this size are coalesced.
pub const COALESCE_MESSAGE_MAX: usize = 1024;
/// The delay bound is at most this fraction of the lane's round trip.
const RTT_DIVISOR: u64 = 16;

/// The small messages waiting for one peer.
#[derive(Debug, Default)]
pub(super) struct Batch {
    /// MATCH frames, header and payload each, back to back.
    frames: Vec<u8>,
    pub(super) messages: u32,
    /// When the batch must leave: its first message's time plus the delay bound.
    due: Nanos,
    /// When a small message last went to the peer, packed or not.
    last: Option<Nanos>,
}

/// How long a small message may wait for others towards a peer whose eager lane has
/// `caps` (`None`: it never waits; `max_delay` 0 turns coalescing off).
pub(super) fn delay_bound(caps: &Caps, max_delay: Nanos) -> Option<Nanos> {
    (max_delay > 0 && caps.is_wan()).then(|| (caps.latency_ns * 2 / RTT_DIVISOR).clamp(1, max_delay))
}

impl Endpoint {
    /// Whether small messages to `dest` may be coalesced (its eager lane is a WAN lane).
    #[inline]
    pub fn coalesces_to(&self, dest: Rank) -> bool {
        self.peers
            .get(dest as usize)
            .is_some_and(|p| p.coalesce_delay.is_some())
    }

    /// Offers a standard-mode send of `data` to `dest`, posted at `now`, for coalescing.
    /// `true`: the engine packed a copy into the peer's batch and the send is complete.
    /// `false`: send it the ordinary way ([`Endpoint::post_send`]); the engine still
    /// notes the time, as a burst's first message.
    pub fn coalesce(&mut self, dest: Rank, ctx: u32, tag: i32, data: &[u8], now: Nanos) -> bool {
        let me = self.me;
        let limit = (self.cfg.coalesce_bytes as usize).min(MAX_BATCH as usize);
        let Some(delay) = self.peers.get(dest as usize).and_then(|p| p.coalesce_delay) else {
            return false;
        };
        let batch = &self.peers[dest as usize].batch;
        if batch.messages > 0 && now >= batch.due {
            // Past its time: a rank that sends on and on, never waiting, would keep
            // it from `handle_timeout` for good.
            self.flush_batch(dest);
        }
        let p = &mut self.peers[dest as usize];
        let len = data.len() as u64;
        if dest == me || data.len() > COALESCE_MESSAGE_MAX || p.state != PeerState::Up {
            return false;
        }
        let busy = p.batch.messages > 0 || p.batch.last.is_some_and(|t| now.saturating_sub(t) < delay);
        p.batch.last = Some(now);
        if !busy || len > u64::from(p.eager_limit) || !p.credit.spend(len) {
            return false;
        }
        let env = p.next_envelope(me, ctx, tag, len);
        if p.batch.messages == 0 {
            p.batch.due = now.saturating_add(delay);
            self.batching.push(dest);
        }
        p.batch
            .frames
            .extend_from_slice(HeaderBytes::new(&DataRepr::Match { env }).as_slice());
        p.batch.frames.extend_from_slice(data);
        p.batch.messages += 1;
        // Full when the largest next message would not fit.
        if p.batch.frames.len() + MAX_HEADER_LEN + COALESCE_MESSAGE_MAX > limit {
            self.flush_batch(dest);
        }
        true
    }

    /// Sends `peer`'s batch now, if it has one.
    pub(super) fn flush_batch(&mut self, peer: Rank) {
        // Looked at before it is changed: finalize asks about every peer, and changing
        // one makes its state (`engine/peer_table.rs`).
        if self.peers[peer as usize].batch.messages == 0 {
            return;
        }
        let p = &mut self.peers[peer as usize];
        let frames = std::mem::take(&mut p.batch.frames);
        let messages = std::mem::take(&mut p.batch.messages);
        self.batching.retain(|&r| r != peer);
        // Its messages are complete for their senders: on a failed peer they are lost
        // as any message in flight is; a peer that said BYE still reads its lanes.
        if !matches!(p.state, PeerState::Up | PeerState::Finalized) {
            return;
        }
        let Some(lane) = p.lanes.get(p.plan.eager).map(|l| l.id) else {
            return;
        };
        let repr = DataRepr::Batch {
            messages,
            len: frames.len() as u32,
        };
        self.outputs.push_back(Output::TransmitOwned {
            peer,
            lane,
            header: HeaderBytes::new(&repr),
            payload: frames,
        });
    }

    /// Sends every batch now: the rank is about to block, or to return to an
    /// application that may compute for long without calling in again.
    pub fn flush_batches(&mut self) {
        for peer in std::mem::take(&mut self.batching) {
            self.flush_batch(peer);
        }
    }

    /// Whether batches wait for their time ([`Endpoint::poll_timeout`]).
    #[inline]
    pub fn is_coalescing(&self) -> bool {
        !self.batching.is_empty()
    }

    /// When [`Endpoint::handle_timeout`] must run next: the earliest batch's time.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.batching
            .iter()
            .map(|&r| self.peers[r as usize].batch.due)
            .min()
    }

    /// Sends every batch whose time has come.
    pub fn handle_timeout(&mut self, now: Nanos) {
        let due: Vec<Rank> = self
            .batching
            .iter()
            .copied()
            .filter(|&r| self.peers[r as usize].batch.due <= now)
            .collect();
        for peer in due {
            self.flush_batch(peer);
        }
    }

    /// The payload of a BATCH from `peer`: each MATCH in it is received as if it had
    /// come alone. Untrusted bytes: every header is checked, and the batch must hold
    /// exactly the `messages` it announced.
    pub(super) fn unbatch(&mut self, peer: Rank, messages: u32, frames: &[u8]) -> Result<(), ProtocolError> {
        let violation = |what: String| ProtocolError { peer, what };
        let mut rest = frames;
        let mut seen = 0u32;
        while !rest.is_empty() {
            let view = DataHeader::new_checked(rest).map_err(|e| violation(format!("in a batch: {e}")))?;
            if view.kind() != Kind::Match {
                return Err(violation(format!("a batch holds a {:?} frame", view.kind())));
            }
            let repr = DataRepr::parse(&view);
            let (at, len) = (view.header_len(), view.payload_len() as usize);
            let Some(payload) = rest.get(at..at + len) else {
                return Err(violation("a message runs past the end of its batch".into()));
            };
            let (dest, token) = self.handle_header(peer, &repr)?;
            let buf = match dest {
                PayloadDest::None => None,
                PayloadDest::User { req, len, .. } => {
                    if len > 0 {
                        let data = payload[..len as usize].to_vec();
                        self.outputs.push_back(Output::Deliver { req, data });
                    }
                    None
                }
                PayloadDest::Engine(mut v) => {
                    v.copy_from_slice(payload);
                    Some(v)
                }
            };
            self.payload_done(peer, token, buf)?;
            seen += 1;
            rest = &rest[at + len..];
        }
        if seen != messages {
            return Err(violation(format!(
                "a batch announced {messages} messages and held {seen}"
            )));
        }
        Ok(())
    }
}
