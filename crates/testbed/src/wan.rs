//! User-space WAN emulator: a transparent L2 wire between two interfaces of one
//! network namespace that adds delay, jitter, loss, reordering and a rate limit to
//! both directions, like netem (which this kernel lacks).
//!
//! Split in two: [`Impairment`] is the pure, deterministic model (when does a frame
//! leave, or is it dropped), [`run`] is the I/O loop around it. One thread serves both
//! directions, so that on a small box the endpoints keep the other cores.

mod forward;

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use forward::{run, Wan};

use crate::topology::WanImpairment;

/// Impairments of one emulated link; the same ones apply to each direction, so the
/// round-trip time is about `2 × delay`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WanConfig {
    /// Interface on one side (in the emulator's namespace).
    pub a: String,
    /// Interface on the other side.
    pub b: String,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Each frame's delay is `delay` plus a uniform draw from `[-jitter, +jitter]`,
    /// clamped at zero. As with netem, jitter reorders frames closer than the spread.
    pub jitter: Duration,
    /// Probability (0..=1) that a frame is lost.
    pub loss: f64,
    /// Probability (0..=1) that a frame skips the delay and overtakes earlier ones.
    pub reorder: f64,
    /// Link rate in bits per second of Ethernet frame (header included); `None` is
    /// unlimited.
    pub rate_bps: Option<u64>,
    /// Frames held per direction (queued for the rate plus in flight) before tail drop,
    /// like netem's `limit`. Must cover rate × one-way delay (1 Gbit/s × 50 ms is ~4100
    /// full frames) plus the queue wanted on top.
    pub limit_packets: usize,
    /// Seed of the loss, jitter and reorder draws.
    pub seed: u64,
}

impl WanConfig {
    /// A clean wire between `a` and `b` with room for 10 000 frames per direction.
    pub fn new(a: impl Into<String>, b: impl Into<String>) -> Self {
        WanConfig {
            a: a.into(),
            b: b.into(),
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: 0.0,
            reorder: 0.0,
            rate_bps: None,
            limit_packets: 10_000,
            seed: 1,
        }
    }

    /// The wire a topology's WAN segment asks for (milliseconds and percent there).
    pub fn with_impairment(a: impl Into<String>, b: impl Into<String>, wan: &WanImpairment) -> Self {
        let ms = |v: f64| Duration::from_secs_f64(v.max(0.0) / 1000.0);
        WanConfig {
            delay: ms(wan.delay_ms),
            jitter: ms(wan.jitter_ms),
            loss: wan.loss_pct / 100.0,
            reorder: wan.reorder_pct / 100.0,
            rate_bps: wan.rate_mbit.map(|m| m.saturating_mul(1_000_000)),
            ..WanConfig::new(a, b)
        }
    }

    /// Rejects values the model cannot honour.
    pub fn validate(&self) -> io::Result<()> {
        let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        if !(0.0..=1.0).contains(&self.loss) {
            return bad(format!("WAN loss {} must be within 0..=1", self.loss));
        }
        if !(0.0..=1.0).contains(&self.reorder) {
            return bad(format!("WAN reorder {} must be within 0..=1", self.reorder));
        }
        if self.rate_bps == Some(0) {
            return bad("WAN rate must be positive (leave it unset for no limit)".into());
        }
        if self.limit_packets == 0 {
            return bad("WAN limit_packets must be at least 1".into());
        }
        if self.a == self.b {
            return bad(format!(
                "WAN needs two different interfaces, got {} twice",
                self.a
            ));
        }
        if self.delay + self.jitter > Duration::from_secs(3600) {
            return bad("WAN delay + jitter must stay below an hour".into());
        }
        Ok(())
    }
}

/// Why a frame was dropped by the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Random loss.
    Loss,
    /// The direction already holds `limit_packets` frames (tail drop).
    Limit,
}

/// What becomes of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Gone, for this reason.
    Drop(DropReason),
    /// Transmit at this time (same clock as the `now` passed in).
    SendAt(Duration),
}

/// The deterministic model of one direction: loss, then tail drop, then serialization
/// at the link rate (a frame starts when the previous one finished), then the delay
/// with jitter — or none for a frame picked to be reordered.
#[derive(Debug, Clone)]
pub struct Impairment {
    delay_ns: u64,
    jitter_ns: i64,
    loss: f64,
    reorder: f64,
    rate_bps: Option<u64>,
    limit: usize,
    rng: fastrand::Rng,
    /// When the serializer becomes free, in ns.
    busy_until: u64,
    /// Remainder of `bits × 1e9 / rate` carried between frames, so rounding never drifts.
    carry: u128,
}

impl Impairment {
    /// The model of one direction; give each direction its own `stream` so their
    /// random draws differ.
    pub fn new(cfg: &WanConfig, stream: u64) -> Self {
        Impairment {
            delay_ns: cfg.delay.as_nanos().min(u64::MAX as u128) as u64,
            jitter_ns: cfg.jitter.as_nanos().min(i64::MAX as u128) as i64,
            loss: cfg.loss,
            reorder: cfg.reorder,
            rate_bps: cfg.rate_bps.filter(|r| *r > 0),
            limit: cfg.limit_packets,
            rng: fastrand::Rng::with_seed(cfg.seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            busy_until: 0,
            carry: 0,
        }
    }

    /// The earliest time at which a frame arriving at `now` or later can be due: the
    /// forwarder need not look at arrivals before then, which lets it sleep through
    /// them and take them in batches (their kernel timestamps keep the delay exact).
    pub fn earliest_departure(&self, now: Duration) -> Duration {
        let now = now.as_nanos().min(u64::MAX as u128) as u64;
        let mut at = now;
        if self.rate_bps.is_some() {
            at = at.max(self.busy_until);
        }
        if self.reorder == 0.0 {
            at += (self.delay_ns as i64 - self.jitter_ns).max(0) as u64;
        }
        Duration::from_nanos(at)
    }

    /// Decides the fate of a frame of `len` bytes arriving at `now` while `held` frames
    /// of this direction are still waiting to leave.
    pub fn on_frame(&mut self, now: Duration, len: usize, held: usize) -> Verdict {
        if self.loss > 0.0 && self.rng.f64() < self.loss {
            return Verdict::Drop(DropReason::Loss);
        }
        if held >= self.limit {
            return Verdict::Drop(DropReason::Limit);
        }
        let now = now.as_nanos().min(u64::MAX as u128) as u64;
        let mut at = now;
        if let Some(rate) = self.rate_bps {
            let num = (len as u128) * 8 * 1_000_000_000 + self.carry;
            let ser = (num / rate as u128) as u64;
            self.carry = num % rate as u128;
            self.busy_until = self.busy_until.max(now) + ser;
            at = self.busy_until;
        }
        let skip = self.reorder > 0.0 && self.rng.f64() < self.reorder;
        if !skip {
            let mut d = self.delay_ns as i64;
            if self.jitter_ns > 0 {
                d += self.rng.i64(-self.jitter_ns..=self.jitter_ns);
            }
            at += d.max(0) as u64;
        }
        Verdict::SendAt(Duration::from_nanos(at))
    }
}

/// Counters of one direction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirStats {
    /// Frames and bytes read from the ingress interface.
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Frames and bytes written to the egress interface.
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub dropped_loss: u64,
    pub dropped_limit: u64,
    /// Larger than the interfaces' MTU (offloads left on?).
    pub dropped_oversize: u64,
    /// Refused by the egress interface (EMSGSIZE, ENOBUFS, link down).
    pub dropped_send: u64,
    /// Dropped by the kernel before the emulator read them: its receive buffer was full
    /// (the emulator is short of CPU).
    pub dropped_rcvbuf: u64,
}

impl DirStats {
    pub fn dropped(&self) -> u64 {
        self.dropped_loss
            + self.dropped_limit
            + self.dropped_oversize
            + self.dropped_send
            + self.dropped_rcvbuf
    }
}

/// What [`run`] did: per-direction counters, and where the loop spent its time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WanStats {
    pub a_to_b: DirStats,
    pub b_to_a: DirStats,
    pub recv_calls: u64,
    pub send_calls: u64,
    /// Sleeps in poll().
    pub polls: u64,
    /// Time spent spinning for precise departures, in ns.
    pub spin_ns: u64,
    /// Frames sent more than 100 µs after their due time (CPU starved or budget spent).
    pub late_frames: u64,
    /// Worst lateness of a departure, in ns.
    pub max_late_ns: u64,
}

/// A frame waiting in the delay line; buffers are recycled, never freed per frame.
struct Held {
    at: u64,
    seq: u64,
    buf: Box<[u8]>,
    len: usize,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Time-ordered queue: frames whose time is not before the last one go to a FIFO
/// (all of them when the delay is constant), the others to a heap. O(1) per frame
/// without jitter, O(log n) with it.
#[derive(Default)]
struct DelayLine {
    fifo: VecDeque<Held>,
    heap: BinaryHeap<Reverse<Held>>,
    seq: u64,
}

impl DelayLine {
    fn len(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }
    fn push(&mut self, at: u64, buf: Box<[u8]>, len: usize) {
        self.seq += 1;
        let h = Held {
            at,
            seq: self.seq,
            buf,
            len,
        };
        match self.fifo.back() {
            Some(b) if b.at > at => self.heap.push(Reverse(h)),
            _ => self.fifo.push_back(h),
        }
    }
    fn next_at(&self) -> Option<u64> {
        match (self.fifo.front(), self.heap.peek()) {
            (Some(f), Some(Reverse(h))) => Some(f.at.min(h.at)),
            (Some(f), None) => Some(f.at),
            (None, Some(Reverse(h))) => Some(h.at),
            (None, None) => None,
        }
    }
    fn pop_due(&mut self, now: u64) -> Option<Held> {
        let from_heap = match (self.fifo.front(), self.heap.peek()) {
            (Some(f), Some(Reverse(h))) => h < f,
            (None, Some(_)) => true,
            _ => false,
        };
        if from_heap {
            (self.heap.peek()?.0.at <= now).then(|| self.heap.pop().map(|r| r.0))?
        } else {
            (self.fifo.front()?.at <= now).then(|| self.fifo.pop_front())?
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> WanConfig {
        WanConfig::new("x", "y")
    }

    fn at(v: Verdict) -> u64 {
        match v {
            Verdict::SendAt(t) => t.as_nanos() as u64,
            Verdict::Drop(r) => panic!("dropped: {r:?}"),
        }
    }

    #[test]
    fn clean_wire_sends_at_once() {
        let mut m = Impairment::new(&cfg(), 0);
        for i in 0..100 {
            assert_eq!(at(m.on_frame(Duration::from_micros(i), 1514, 0)), i * 1000);
        }
    }

    #[test]
    fn loss_fraction_matches() {
        let c = WanConfig { loss: 0.05, ..cfg() };
        let mut m = Impairment::new(&c, 0);
        let n = 200_000;
        let lost = (0..n)
            .filter(|_| m.on_frame(Duration::ZERO, 100, 0) == Verdict::Drop(DropReason::Loss))
            .count();
        let frac = lost as f64 / n as f64;
        assert!((frac - 0.05).abs() < 0.002, "loss fraction {frac}");
    }

    #[test]
    fn delay_and_jitter_are_uniform_and_clamped() {
        let c = WanConfig {
            delay: Duration::from_millis(10),
            jitter: Duration::from_millis(2),
            ..cfg()
        };
        let mut m = Impairment::new(&c, 0);
        let n = 100_000;
        let ds: Vec<u64> = (0..n)
            .map(|_| at(m.on_frame(Duration::from_secs(1), 100, 0)) - 1_000_000_000)
            .collect();
        assert!(ds.iter().all(|&d| (8_000_000..=12_000_000).contains(&d)));
        let mean = ds.iter().sum::<u64>() as f64 / n as f64;
        assert!((mean - 10e6).abs() < 20e3, "mean delay {mean}");
        let below = ds.iter().filter(|&&d| d < 9_000_000).count() as f64 / n as f64;
        assert!((below - 0.25).abs() < 0.01, "quarter below 9 ms, got {below}");

        let c = WanConfig {
            delay: Duration::from_millis(1),
            jitter: Duration::from_millis(3),
            ..cfg()
        };
        let mut m = Impairment::new(&c, 0);
        let zero = (0..n)
            .filter(|_| at(m.on_frame(Duration::ZERO, 100, 0)) == 0)
            .count() as f64
            / n as f64;
        // P(delay + u <= 0) for u uniform in [-3, 3] ms is 2/6.
        assert!((zero - 1.0 / 3.0).abs() < 0.01, "clamped fraction {zero}");
    }

    #[test]
    fn rate_serializes_frames() {
        let c = WanConfig {
            rate_bps: Some(1_000_000_000),
            delay: Duration::from_millis(5),
            ..cfg()
        };
        let mut m = Impairment::new(&c, 0);
        // A burst of 1000 frames at t=0 leaves 12.112 µs apart, then 5 ms later.
        let times: Vec<u64> = (0..1000)
            .map(|_| at(m.on_frame(Duration::ZERO, 1514, 0)))
            .collect();
        assert_eq!(times[0], 5_000_000 + 12_112);
        assert_eq!(times[999], 5_000_000 + 1000 * 12_112);
        // An idle link starts afresh.
        assert_eq!(
            at(m.on_frame(Duration::from_secs(1), 125, 0)),
            1_000_000_000 + 5_000_000 + 1000
        );
        // Odd rates do not drift: 3 bit/s for 3 × 1 byte is exactly 8 s.
        let c = WanConfig {
            rate_bps: Some(3),
            ..cfg()
        };
        let mut m = Impairment::new(&c, 0);
        let last = (0..3).map(|_| at(m.on_frame(Duration::ZERO, 1, 0))).last();
        assert_eq!(last, Some(8_000_000_000));
    }

    #[test]
    fn earliest_departure_bounds_every_verdict() {
        let c = WanConfig {
            delay: Duration::from_millis(5),
            jitter: Duration::from_millis(2),
            rate_bps: Some(100_000_000),
            ..cfg()
        };
        let mut m = Impairment::new(&c, 0);
        for i in 0..10_000u64 {
            let now = Duration::from_micros(i * 50);
            let bound = m.earliest_departure(now);
            assert!(at(m.on_frame(now, 1514, 0)) >= bound.as_nanos() as u64);
        }
        // A backlog on the serializer pushes the bound out.
        assert!(m.earliest_departure(Duration::ZERO) > Duration::from_millis(3));
        let c = WanConfig {
            delay: Duration::from_millis(5),
            reorder: 0.1,
            ..cfg()
        };
        assert_eq!(
            Impairment::new(&c, 0).earliest_departure(Duration::from_secs(1)),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn tail_drop_at_limit() {
        let c = WanConfig {
            limit_packets: 3,
            ..cfg()
        };
        let mut m = Impairment::new(&c, 0);
        assert!(matches!(m.on_frame(Duration::ZERO, 60, 2), Verdict::SendAt(_)));
        assert_eq!(
            m.on_frame(Duration::ZERO, 60, 3),
            Verdict::Drop(DropReason::Limit)
        );
        // A dropped frame does not occupy the serializer.
        let c = WanConfig {
            limit_packets: 1,
            rate_bps: Some(8_000),
            ..cfg()
        };
        let mut m = Impairment::new(&c, 0);
        assert_eq!(at(m.on_frame(Duration::ZERO, 1, 0)), 1_000_000);
        assert_eq!(m.on_frame(Duration::ZERO, 1, 1), Verdict::Drop(DropReason::Limit));
        assert_eq!(at(m.on_frame(Duration::ZERO, 1, 0)), 2_000_000);
    }

    #[test]
    fn reorder_skips_the_delay() {
        let c = WanConfig {
            delay: Duration::from_millis(10),
            reorder: 0.25,
            ..cfg()
        };
        let mut m = Impairment::new(&c, 0);
        let n = 100_000;
        let fast = (0..n)
            .filter(|_| at(m.on_frame(Duration::ZERO, 100, 0)) == 0)
            .count() as f64
            / n as f64;
        assert!((fast - 0.25).abs() < 0.01, "reordered fraction {fast}");
    }

    #[test]
    fn same_seed_same_verdicts() {
        let c = WanConfig {
            loss: 0.1,
            jitter: Duration::from_millis(1),
            reorder: 0.1,
            seed: 7,
            ..cfg()
        };
        let run = |s| {
            let mut m = Impairment::new(&c, s);
            (0..1000)
                .map(|i| m.on_frame(Duration::from_micros(i), 1500, 0))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(0), run(0));
        assert_ne!(run(0), run(1));
    }

    #[test]
    fn delay_line_orders_by_time_then_arrival() {
        let mut q = DelayLine::default();
        for (i, t) in [5u64, 7, 3, 7, 1, 9, 3].into_iter().enumerate() {
            q.push(t, Box::new([]), i);
        }
        assert_eq!(q.next_at(), Some(1));
        assert!(q.pop_due(0).is_none());
        let order: Vec<usize> = std::iter::from_fn(|| q.pop_due(8)).map(|h| h.len).collect();
        assert_eq!(order, [4, 2, 6, 0, 1, 3]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.next_at(), Some(9));
    }

    #[test]
    fn bad_configs_are_rejected() {
        for c in [
            WanConfig { loss: 1.5, ..cfg() },
            WanConfig {
                loss: f64::NAN,
                ..cfg()
            },
            WanConfig {
                reorder: -0.1,
                ..cfg()
            },
            WanConfig {
                rate_bps: Some(0),
                ..cfg()
            },
            WanConfig {
                limit_packets: 0,
                ..cfg()
            },
            WanConfig::new("x", "x"),
        ] {
            assert!(c.validate().is_err(), "{c:?}");
        }
        assert!(cfg().validate().is_ok());
        let stop = std::sync::atomic::AtomicBool::new(true);
        let err = run(&WanConfig::new("pt-nope-a", "pt-nope-b"), &stop).unwrap_err();
        assert!(err.to_string().contains("pt-nope-a"), "{err}");
    }
}
