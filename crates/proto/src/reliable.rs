//! Reliability for lanes whose `Caps` say unreliable (raw Ethernet): one [`Channel`] per
//! lane turns datagrams that may be lost, duplicated, reordered or corrupted into the
//! ordered byte stream of data frames that every other lane carries.
//!
//! - Every datagram has a sequence number; every datagram (data or a bare ACK) carries
//!   the cumulative acknowledgement, up to three SACK blocks and the receiver's window
//!   end: the receiver's credits. A sender never sends a new datagram at or past the
//!   window end, so the receiver always has room for what arrives and never drops for
//!   lack of space; what it holds out of order is bounded by its window.
//! - A datagram is lost when one sent three transmissions after it was acknowledged
//!   (fast retransmission), or when the retransmission timer fires: RFC 6298's estimator
//!   over samples of datagrams sent once (Karn), doubled on each expiry.
//! - Stream bytes are acknowledged only once the peer has them: the owner of the send
//!   buffer lets go of bytes below [`Channel::acked_offset`], never earlier.
//! - Bytes are not kept here: a [`Transmit`] names a range of the stream, which the lane
//!   copies out of its own queue (a retransmission names the same range again). Out of
//!   order datagrams are the exception: their payloads wait here for the gap to fill.
//!
//! Sans-IO like the rest of `proto`: the lane feeds datagrams to
//! [`Channel::handle_datagram`], sends what [`Channel::poll_transmit`] gives, and calls
//! [`Channel::handle_timeout`] when [`Channel::poll_timeout`] says.

use std::collections::{BTreeMap, VecDeque};

use crate::wire::eth::{widen, EthKind, EthRepr, SackBlock, MAX_SACKS};
use crate::Nanos;

/// A datagram sent after the lost one and acknowledged: this many later transmissions
/// make it lost (TCP's three duplicate acknowledgements).
const REORDER_THRESHOLD: u64 = 3;

#[derive(Debug, Clone, Copy)]
pub struct ChannelConfig {
    /// Stream bytes per datagram: the lane's MTU less the datagram header with its SACKs.
    pub max_payload: u16,
    /// Datagrams this side takes beyond its cumulative acknowledgement (its credits).
    pub window: u32,
    /// The retransmission timeout before the first round-trip sample.
    pub initial_rto: Nanos,
    pub min_rto: Nanos,
    pub max_rto: Nanos,
    /// Longest a received datagram waits for an acknowledgement to ride on data.
    pub ack_delay: Nanos,
    /// Datagrams received in order that make an acknowledgement due at once.
    pub ack_every: u32,
    /// Data unacknowledged for this long: the peer is gone.
    pub dead_after: Nanos,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            max_payload: 1500 - crate::wire::eth::MAX_HEADER_LEN as u16,
            window: 256,
            initial_rto: 10_000_000,
            min_rto: 1_000_000,
            max_rto: 1_000_000_000,
            ack_delay: 50_000,
            ack_every: 8,
            dead_after: 10_000_000_000,
        }
    }
}

/// What to send next: a datagram header (its tag left to the lane) and, for DATA, the
/// range of the stream its payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub header: EthRepr,
    /// Stream offset of the payload's first byte (DATA only).
    pub offset: u64,
    pub retransmission: bool,
}

/// What became of an arriving datagram's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// It is the next piece of the stream: consume it now, then [`Channel::take_ready`].
    InOrder,
    /// It came early and is kept here until the gap before it fills.
    Held,
    /// Nothing to consume (an ACK, or a datagram that arrived before).
    Nothing,
}

/// The peer broke the protocol, or is gone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    #[error("datagram {seq} is past the window end {window_end} this side granted")]
    OverCredit { seq: u64, window_end: u64 },
    #[error("acknowledgement of datagram {ack} which was never sent (next is {next})")]
    AckUnsent { ack: u64, next: u64 },
    #[error("a datagram of {len} bytes is over the lane's {max} bytes")]
    TooLong { len: usize, max: u16 },
    #[error("no acknowledgement for {ms} ms with data outstanding")]
    Dead { ms: u64 },
}

/// Counters for doctor and the benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelStats {
    pub sent: u64,
    pub retransmitted: u64,
    pub received: u64,
    pub duplicates: u64,
    pub timeouts: u64,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    offset: u64,
    len: u16,
    /// When it was last sent, and the transmission count at that moment.
    sent_at: Nanos,
    tx: u64,
    retransmitted: bool,
    sacked: bool,
    /// Waits in `lost` to go again.
    lost: bool,
}

/// Smoothed round trip (RFC 6298).
#[derive(Debug, Clone, Copy)]
struct Rtt {
    srtt: Nanos,
    rttvar: Nanos,
    sampled: bool,
}

pub struct Channel {
    cfg: ChannelConfig,
    /// The peer's tag of this lane, written into every datagram.
    peer_lane: u32,
    // Sending.
    queued_end: u64,
    next_offset: u64,
    next_seq: u64,
    /// Datagrams from `first_unacked` on, by sequence number.
    in_flight: VecDeque<InFlight>,
    first_unacked: u64,
    lost: VecDeque<u64>,
    peer_window_end: u64,
    transmissions: u64,
    largest_acked_tx: u64,
    rtt: Rtt,
    rto: Nanos,
    rto_deadline: Option<Nanos>,
    last_progress: Nanos,
    /// Retransmission timer expiries since the last acknowledgement of anything.
    expiries_in_a_row: u32,
    // Receiving.
    recv_next: u64,
    held: BTreeMap<u64, Vec<u8>>,
    /// The newest datagram that arrived, for the first SACK block, and when.
    last_arrival: u64,
    last_arrival_at: Option<Nanos>,
    unacked_arrivals: u32,
    ack_now: bool,
    ack_deadline: Option<Nanos>,
    /// A PING to send (its number), the one out (number and when), a PONG owed.
    pings: u32,
    ping_due: Option<u32>,
    ping_out: Option<(u32, Nanos)>,
    pong_due: Option<u32>,
    /// Smallest round trip a PING measured.
    min_ping_rtt: Option<Nanos>,
    /// Smallest round trip of any sample (PINGs and acknowledged data).
    min_rtt: Option<Nanos>,
    stats: ChannelStats,
}

impl Channel {
    pub fn new(cfg: ChannelConfig, peer_lane: u32, now: Nanos) -> Channel {
        assert!(cfg.window > 0 && cfg.window < 1 << 30 && cfg.max_payload > 0);
        Channel {
            cfg,
            peer_lane,
            queued_end: 0,
            next_offset: 0,
            next_seq: 0,
            in_flight: VecDeque::new(),
            first_unacked: 0,
            lost: VecDeque::new(),
            // Both sides start with the same configuration's window.
            peer_window_end: u64::from(cfg.window),
            transmissions: 0,
            largest_acked_tx: 0,
            rtt: Rtt {
                srtt: 0,
                rttvar: 0,
                sampled: false,
            },
            rto: cfg.initial_rto,
            rto_deadline: None,
            last_progress: now,
            expiries_in_a_row: 0,
            recv_next: 0,
            held: BTreeMap::new(),
            last_arrival: 0,
            last_arrival_at: None,
            unacked_arrivals: 0,
            ack_now: false,
            ack_deadline: None,
            pings: 0,
            ping_due: None,
            ping_out: None,
            pong_due: None,
            min_ping_rtt: None,
            min_rtt: None,
            stats: ChannelStats::default(),
        }
    }

    /// `len` more bytes were appended to the stream.
    pub fn queue(&mut self, len: u64) {
        self.queued_end += len;
    }

    /// Stream bytes the peer has: the sender may let go of them.
    pub fn acked_offset(&self) -> u64 {
        self.in_flight.front().map_or(self.next_offset, |d| d.offset)
    }

    /// Stream bytes queued and not yet acknowledged.
    pub fn unacked(&self) -> u64 {
        self.queued_end - self.acked_offset()
    }

    /// Datagrams sent and not yet acknowledged.
    pub fn in_flight(&self) -> u64 {
        self.next_seq - self.first_unacked
    }

    /// Datagrams held here out of order (at most the window).
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The end of the window this side grants (what its next datagram will say).
    pub fn window_end(&self) -> u64 {
        self.recv_next + u64::from(self.cfg.window)
    }

    pub fn stats(&self) -> ChannelStats {
        self.stats
    }

    /// The current retransmission timeout.
    pub fn rto(&self) -> Nanos {
        self.rto
    }

    /// Measures a round trip with a PING, which the peer answers at once (the lane's
    /// latency before data has flowed, and refreshed while it is idle).
    pub fn ping(&mut self) {
        self.pings = self.pings.wrapping_add(1);
        self.ping_due = Some(self.pings);
    }

    /// The smallest round trip a PING measured: the path and both ends' receive paths,
    /// without data's acknowledgement delays.
    pub fn ping_rtt(&self) -> Option<Nanos> {
        self.min_ping_rtt
    }

    /// The next datagram to send, if any: a PONG owed, a retransmission, a PING, new
    /// stream bytes within the peer's credits, then a bare acknowledgement once due.
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if let Some(number) = self.pong_due.take() {
            return Some(self.probe(now, EthKind::Pong, number));
        }
        while let Some(seq) = self.lost.pop_front() {
            let Some(i) = seq.checked_sub(self.first_unacked) else {
                continue;
            };
            let Some(d) = self.in_flight.get_mut(i as usize) else {
                continue;
            };
            if !d.lost {
                continue;
            }
            self.transmissions += 1;
            *d = InFlight {
                sent_at: now,
                tx: self.transmissions,
                retransmitted: true,
                lost: false,
                ..*d
            };
            let (offset, len) = (d.offset, d.len);
            self.stats.retransmitted += 1;
            return Some(self.data(now, seq, offset, len, true));
        }
        // Before new data: a PING that waited behind a stream measured nothing, and the
        // lane's latency (the engine's plan) came from data round trips under load.
        if let Some(number) = self.ping_due.take() {
            self.ping_out = Some((number, now));
            return Some(self.probe(now, EthKind::Ping, number));
        }
        if self.next_offset < self.queued_end && self.next_seq < self.peer_window_end {
            let len = (self.queued_end - self.next_offset).min(u64::from(self.cfg.max_payload)) as u16;
            let (seq, offset) = (self.next_seq, self.next_offset);
            if self.in_flight.is_empty() {
                self.last_progress = now;
            }
            self.transmissions += 1;
            self.in_flight.push_back(InFlight {
                offset,
                len,
                sent_at: now,
                tx: self.transmissions,
                retransmitted: false,
                sacked: false,
                lost: false,
            });
            self.next_seq += 1;
            self.next_offset += u64::from(len);
            return Some(self.data(now, seq, offset, len, false));
        }
        if self.ack_now || self.ack_deadline.is_some_and(|t| t <= now) {
            let header = self.header(now, EthKind::Ack, 0, 0);
            return Some(Transmit {
                header,
                offset: 0,
                retransmission: false,
            });
        }
        None
    }

    fn probe(&mut self, now: Nanos, kind: EthKind, number: u32) -> Transmit {
        Transmit {
            header: self.header(now, kind, number, 0),
            offset: 0,
            retransmission: false,
        }
    }

    fn data(&mut self, now: Nanos, seq: u64, offset: u64, len: u16, retransmission: bool) -> Transmit {
        self.stats.sent += 1;
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rto);
        }
        Transmit {
            header: self.header(now, EthKind::Data, seq as u32, len),
            offset,
            retransmission,
        }
    }

    /// A header with this side's acknowledgement, which it now has sent.
    fn header(&mut self, now: Nanos, kind: EthKind, seq: u32, payload_len: u16) -> EthRepr {
        self.ack_now = false;
        self.ack_deadline = None;
        self.unacked_arrivals = 0;
        let mut sacks = [SackBlock::default(); MAX_SACKS];
        let n = self.sack_blocks(&mut sacks);
        EthRepr {
            kind,
            lane: self.peer_lane,
            seq,
            ack: self.recv_next as u32,
            window_end: self.window_end() as u32,
            payload_len,
            sack_count: n as u8,
            ack_delay_us: self
                .last_arrival_at
                .map_or(0, |t| (now.saturating_sub(t) / 1000).min(255) as u8),
            sacks,
        }
    }

    /// The runs of held datagrams: first the one with the newest arrival (it tells the
    /// sender most about what is lost), then the lowest others.
    fn sack_blocks(&self, out: &mut [SackBlock; MAX_SACKS]) -> usize {
        if self.held.is_empty() {
            return 0;
        }
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &seq in self.held.keys() {
            match runs.last_mut() {
                Some((_, end)) if *end == seq => *end += 1,
                _ => runs.push((seq, seq + 1)),
            }
        }
        let newest = runs
            .iter()
            .position(|&(s, e)| (s..e).contains(&self.last_arrival));
        let order = newest
            .into_iter()
            .chain((0..runs.len()).filter(|&i| Some(i) != newest));
        let mut n = 0;
        for i in order.take(MAX_SACKS) {
            out[n] = SackBlock {
                start: runs[i].0 as u32,
                end: runs[i].1 as u32,
            };
            n += 1;
        }
        n
    }

    /// A datagram of this lane arrived (its tag verified by the lane). On
    /// [`Received::InOrder`] the caller consumes `payload` itself, then takes what it
    /// released with [`Channel::take_ready`].
    pub fn handle_datagram(
        &mut self,
        now: Nanos,
        repr: &EthRepr,
        payload: &[u8],
    ) -> Result<Received, ChannelError> {
        self.handle_ack(now, repr)?;
        match repr.kind {
            EthKind::Ack | EthKind::Handshake => return Ok(Received::Nothing),
            EthKind::Ping => {
                self.pong_due = Some(repr.seq);
                return Ok(Received::Nothing);
            }
            EthKind::Pong => {
                if let Some((_, sent)) = self.ping_out.take_if(|(n, _)| *n == repr.seq) {
                    let rtt = now.saturating_sub(sent);
                    self.min_ping_rtt = Some(self.min_ping_rtt.map_or(rtt, |m| m.min(rtt)));
                    self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
                }
                return Ok(Received::Nothing);
            }
            EthKind::Data => {}
        }
        if payload.len() > usize::from(self.cfg.max_payload) {
            return Err(ChannelError::TooLong {
                len: payload.len(),
                max: self.cfg.max_payload,
            });
        }
        let seq = widen(repr.seq, self.recv_next);
        if seq >= self.window_end() {
            return Err(ChannelError::OverCredit {
                seq,
                window_end: self.window_end(),
            });
        }
        self.stats.received += 1;
        self.last_arrival = seq;
        self.last_arrival_at = Some(now);
        if seq < self.recv_next || self.held.contains_key(&seq) {
            // Our acknowledgement was lost or late: say again at once what arrived.
            self.stats.duplicates += 1;
            self.ack_now = true;
            return Ok(Received::Nothing);
        }
        if seq > self.recv_next {
            self.held.insert(seq, payload.to_vec());
            self.ack_now = true;
            return Ok(Received::Held);
        }
        self.recv_next += 1;
        self.unacked_arrivals += 1;
        if !self.held.is_empty() || self.unacked_arrivals >= self.cfg.ack_every {
            self.ack_now = true;
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + self.cfg.ack_delay);
        }
        Ok(Received::InOrder)
    }

    /// Payloads held out of order that the last in-order datagram released, in order.
    pub fn take_ready(&mut self) -> Option<Vec<u8>> {
        let payload = self.held.remove(&self.recv_next)?;
        self.recv_next += 1;
        Some(payload)
    }

    fn handle_ack(&mut self, now: Nanos, repr: &EthRepr) -> Result<(), ChannelError> {
        let ack = widen(repr.ack, self.first_unacked);
        if ack > self.next_seq {
            return Err(ChannelError::AckUnsent {
                ack,
                next: self.next_seq,
            });
        }
        let window_end = widen(repr.window_end, self.peer_window_end);
        self.peer_window_end = self.peer_window_end.max(window_end);
        let mut progress = false;
        let mut newest_sample: Option<&InFlight> = None;
        let acked = ack.saturating_sub(self.first_unacked) as usize;
        for d in self.in_flight.iter().take(acked) {
            if !d.sacked {
                progress = true;
                self.largest_acked_tx = self.largest_acked_tx.max(d.tx);
                if !d.retransmitted && newest_sample.is_none_or(|s| s.tx < d.tx) {
                    newest_sample = Some(d);
                }
            }
        }
        let sample_from_acked = newest_sample.map(|d| now.saturating_sub(d.sent_at));
        self.in_flight.drain(..acked.min(self.in_flight.len()));
        self.first_unacked = self.first_unacked.max(ack);
        let mut sample = sample_from_acked;
        for block in repr.sacks() {
            let start = widen(block.start, self.first_unacked).max(self.first_unacked);
            let end = widen(block.end, self.first_unacked).min(self.next_seq);
            for seq in start..end {
                let d = &mut self.in_flight[(seq - self.first_unacked) as usize];
                if d.sacked {
                    continue;
                }
                d.sacked = true;
                d.lost = false;
                progress = true;
                self.largest_acked_tx = self.largest_acked_tx.max(d.tx);
                if !d.retransmitted {
                    let rtt = now.saturating_sub(d.sent_at);
                    sample = Some(sample.map_or(rtt, |s| s.min(rtt)));
                }
            }
        }
        // The time the peer held its acknowledgement is not path: taken off, and a
        // sample whose delay is unknown (255 µs or more) is not taken.
        if let Some(rtt) = sample.filter(|_| repr.ack_delay_us < u8::MAX) {
            let held = u64::from(repr.ack_delay_us) * 1000;
            self.sample_rtt(rtt.saturating_sub(held).max(rtt / 8));
        }
        if progress {
            self.last_progress = now;
            self.expiries_in_a_row = 0;
            self.rto_deadline = (!self.in_flight.is_empty()).then(|| now + self.rto);
            self.detect_losses();
        }
        Ok(())
    }

    /// Marks as lost every unacknowledged datagram sent `REORDER_THRESHOLD`
    /// transmissions before one that was acknowledged.
    fn detect_losses(&mut self) {
        // One sent too recently is not judged (a retransmission among older ones still is).
        let judged_below = self.largest_acked_tx.saturating_sub(REORDER_THRESHOLD - 1);
        self.mark_lost(|d| d.tx < judged_below);
    }

    /// Queues for sending again every unacknowledged datagram that `lost` says is lost.
    fn mark_lost(&mut self, lost: impl Fn(&InFlight) -> bool) {
        for (i, d) in self.in_flight.iter_mut().enumerate() {
            if !d.sacked && !d.lost && lost(d) {
                d.lost = true;
                self.lost.push_back(self.first_unacked + i as u64);
            }
        }
    }

    fn sample_rtt(&mut self, rtt: Nanos) {
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        let r = &mut self.rtt;
        if r.sampled {
            let delta = r.srtt.abs_diff(rtt);
            r.rttvar = (3 * r.rttvar + delta) / 4;
            r.srtt = (7 * r.srtt + rtt) / 8;
        } else {
            *r = Rtt {
                srtt: rtt,
                rttvar: rtt / 2,
                sampled: true,
            };
        }
        self.rto = (r.srtt + 4 * r.rttvar).clamp(self.cfg.min_rto, self.cfg.max_rto);
    }

    /// The smallest round trip measured, by a PING or by data and its acknowledgement
    /// (less the delay the peer reported): the lane's latency for the engine's plan. Any
    /// single sample may include the peer's waking up or a queue; the smallest one of
    /// many does not.
    pub fn min_rtt(&self) -> Option<Nanos> {
        self.min_rtt
    }

    /// The smoothed round trip, once measured.
    pub fn srtt(&self) -> Option<Nanos> {
        self.rtt.sampled.then_some(self.rtt.srtt)
    }

    /// How long data has been waiting for any acknowledgement at `now`, and how many
    /// times the retransmission timer expired meanwhile (none while nothing is
    /// outstanding): for the runtime's stall detector, which holds every lane to the
    /// same limit (`PONTOON_LANE_TIMEOUT_MS`), well before [`ChannelError::Dead`].
    pub fn stalled(&self, now: Nanos) -> Option<(Nanos, u32)> {
        (!self.in_flight.is_empty()).then(|| (now.saturating_sub(self.last_progress), self.expiries_in_a_row))
    }

    /// When [`Channel::handle_timeout`] must run next.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        match (self.rto_deadline, self.ack_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fires the timers that are due: an expired retransmission timer makes every
    /// unacknowledged datagram lost and doubles the timeout; an expired acknowledgement
    /// timer makes [`Channel::poll_transmit`] give a bare ACK.
    pub fn handle_timeout(&mut self, now: Nanos) -> Result<(), ChannelError> {
        if self.ack_deadline.is_some_and(|t| t <= now) {
            self.ack_now = true;
        }
        let Some(deadline) = self.rto_deadline else {
            return Ok(());
        };
        if deadline > now {
            return Ok(());
        }
        if self.in_flight.is_empty() {
            self.rto_deadline = None;
            return Ok(());
        }
        if now.saturating_sub(self.last_progress) >= self.cfg.dead_after {
            return Err(ChannelError::Dead {
                ms: (now - self.last_progress) / 1_000_000,
            });
        }
        self.stats.timeouts += 1;
        self.expiries_in_a_row += 1;
        self.mark_lost(|_| true);
        self.rto = (self.rto * 2).min(self.cfg.max_rto);
        self.rto_deadline = Some(now + self.rto);
        Ok(())
    }
}
