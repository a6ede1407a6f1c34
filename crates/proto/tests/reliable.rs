//! The reliability layer of unreliable lanes in a simulated Ethernet segment: two
//! channels exchange streams of data frames (MATCH headers and payloads, as the engine
//! writes them) both ways at once through a wire that loses, duplicates, reorders and
//! corrupts datagrams, on a virtual clock. Every frame must arrive once, in order,
//! byte for byte; the sender never exceeds the receiver's credits; nothing is
//! acknowledged before the receiver has it; and no run hangs.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use pontoon_proto::reliable::{Channel, ChannelConfig, ChannelError, Received};
use pontoon_proto::sim::Rng;
use pontoon_proto::wire::data::{DataHeader, DataRepr, Envelope};
use pontoon_proto::wire::eth::{seal, EthFrame, EthRepr, FrameKey, MAX_HEADER_LEN};
use pontoon_proto::Nanos;
use proptest::prelude::*;

fn key() -> FrameKey {
    FrameKey::new(&[42; 32])
}

#[derive(Debug, Clone)]
struct Wire {
    mtu: usize,
    /// Per mille of datagrams lost, duplicated, corrupted.
    loss: u64,
    dup: u64,
    corrupt: u64,
    latency: Nanos,
    /// Extra delay drawn per datagram from 0..=jitter: datagrams overtake each other.
    jitter: Nanos,
    /// Nanoseconds per byte on the wire (serialisation).
    ns_per_kib: Nanos,
}

impl Wire {
    fn lan(mtu: usize) -> Wire {
        Wire {
            mtu,
            loss: 0,
            dup: 0,
            corrupt: 0,
            latency: 20_000,
            jitter: 0,
            ns_per_kib: 1_000,
        }
    }
}

/// One side: its channel, the stream it sends, what it received.
struct Side {
    channel: Channel,
    stream: Vec<u8>,
    /// Frames in `stream`; more are queued while the unacknowledged part is small.
    frame_ends: Vec<usize>,
    frames_queued: usize,
    received: Vec<u8>,
    /// Transmission serialises behind the previous datagram.
    wire_free_at: Nanos,
    max_in_flight: u64,
}

const SEND_BUFFER: u64 = 256 * 1024;

impl Side {
    fn new(cfg: ChannelConfig, peer_lane: u32, frames: &[(u32, Vec<u8>)]) -> Side {
        let mut stream = Vec::new();
        let mut frame_ends = Vec::new();
        for (i, (src, payload)) in frames.iter().enumerate() {
            let repr = DataRepr::Match {
                env: Envelope {
                    ctx: 0,
                    src: *src,
                    tag: 7,
                    seq: i as u32,
                    msg_len: payload.len() as u64,
                },
            };
            let mut header = [0u8; 64];
            let n = repr.emit(&mut header);
            stream.extend_from_slice(&header[..n]);
            stream.extend_from_slice(payload);
            frame_ends.push(stream.len());
        }
        Side {
            channel: Channel::new(cfg, peer_lane, 0),
            stream,
            frame_ends,
            frames_queued: 0,
            received: Vec::new(),
            wire_free_at: 0,
            max_in_flight: 0,
        }
    }

    /// Queues frames as the engine would: while the lane's queue has room.
    fn queue_frames(&mut self) {
        while self.frames_queued < self.frame_ends.len() && self.channel.unacked() < SEND_BUFFER {
            let start = self
                .frames_queued
                .checked_sub(1)
                .map_or(0, |i| self.frame_ends[i]);
            self.channel
                .queue((self.frame_ends[self.frames_queued] - start) as u64);
            self.frames_queued += 1;
        }
    }

    fn done(&self, peer: &Side) -> bool {
        self.received.len() == peer.stream.len() && self.channel.acked_offset() == self.stream.len() as u64
    }
}

struct Datagram {
    to: usize,
    bytes: Vec<u8>,
}

#[derive(Debug, Default)]
struct Outcome {
    end: Nanos,
    retransmitted: u64,
    sent: u64,
    max_in_flight: u64,
    /// What each side received.
    received: [Vec<u8>; 2],
}

/// Runs both sides until each has the other's whole stream acknowledged, checking the
/// invariants on the way. Fails on a protocol error or when virtual time runs out.
fn run(cfg: ChannelConfig, wire: &Wire, seed: u64, frames: [Vec<(u32, Vec<u8>)>; 2]) -> Outcome {
    let mut rng = Rng::new(seed);
    let mut sides = [Side::new(cfg, 2, &frames[0]), Side::new(cfg, 1, &frames[1])];
    let mut queue: BinaryHeap<Reverse<(Nanos, u64)>> = BinaryHeap::new();
    let mut in_transit: Vec<Option<Datagram>> = Vec::new();
    let mut now: Nanos = 0;
    let limit: Nanos = 120_000_000_000;
    loop {
        for (i, side) in sides.iter_mut().enumerate() {
            side.queue_frames();
            if side.channel.poll_timeout().is_some_and(|t| t <= now) {
                side.channel
                    .handle_timeout(now)
                    .expect("no side is declared dead");
            }
            while let Some(t) = side.channel.poll_transmit(now) {
                side.max_in_flight = side.max_in_flight.max(side.channel.in_flight());
                let mut bytes = vec![0u8; t.header.header_len() + usize::from(t.header.payload_len)];
                assert!(
                    bytes.len() <= wire.mtu,
                    "{} bytes over the MTU {}",
                    bytes.len(),
                    wire.mtu
                );
                let at = t.header.emit(&mut bytes);
                let from = t.offset as usize;
                bytes[at..].copy_from_slice(&side.stream[from..from + usize::from(t.header.payload_len)]);
                seal(&mut bytes, &key());
                side.wire_free_at = side.wire_free_at.max(now) + bytes.len() as u64 * wire.ns_per_kib / 1024;
                let copies = if rng.range(0, 999) < wire.dup { 2 } else { 1 };
                for _ in 0..copies {
                    if rng.range(0, 999) < wire.loss {
                        continue;
                    }
                    let mut bytes = bytes.clone();
                    if rng.range(0, 999) < wire.corrupt {
                        let bit = rng.range(0, bytes.len() as u64 * 8 - 1) as usize;
                        bytes[bit / 8] ^= 1 << (bit % 8);
                    }
                    let arrive = side.wire_free_at + wire.latency + rng.range(0, wire.jitter);
                    queue.push(Reverse((arrive, in_transit.len() as u64)));
                    in_transit.push(Some(Datagram { to: 1 - i, bytes }));
                }
            }
        }
        if sides[0].done(&sides[1]) && sides[1].done(&sides[0]) {
            return Outcome {
                end: now,
                retransmitted: sides.iter().map(|s| s.channel.stats().retransmitted).sum(),
                sent: sides.iter().map(|s| s.channel.stats().sent).sum(),
                max_in_flight: sides.iter().map(|s| s.max_in_flight).max().unwrap_or(0),
                received: sides.map(|s| s.received),
            };
        }
        let next_timer = sides.iter().filter_map(|s| s.channel.poll_timeout()).min();
        let next_arrival = queue.peek().map(|Reverse((t, _))| *t);
        now = match (next_timer, next_arrival) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or_else(|| {
                panic!(
                    "stalled at {now} ns with nothing in transit and no timer: received {} of {} and {} of {} bytes",
                    sides[0].received.len(),
                    sides[1].stream.len(),
                    sides[1].received.len(),
                    sides[0].stream.len()
                )
            }),
        }
        .max(now);
        assert!(now < limit, "not done after {limit} ns of virtual time");
        while let Some(&Reverse((t, id))) = queue.peek() {
            if t > now {
                break;
            }
            queue.pop();
            let d = in_transit[id as usize].take().expect("delivered once");
            deliver(&mut sides, d, now);
        }
    }
}

fn deliver(sides: &mut [Side; 2], d: Datagram, now: Nanos) {
    let Ok(frame) = EthFrame::new_checked(&d.bytes[..]) else {
        return;
    };
    if !frame.verify(&key()) {
        return; // corrupted: as good as lost
    }
    let repr = EthRepr::parse(&frame);
    let side = &mut sides[d.to];
    match side.channel.handle_datagram(now, &repr, frame.payload()) {
        Ok(Received::InOrder) => {
            side.received.extend_from_slice(frame.payload());
            while let Some(p) = side.channel.take_ready() {
                side.received.extend_from_slice(&p);
            }
        }
        Ok(_) => {}
        Err(e) => panic!("side {} refused a datagram: {e}", d.to),
    }
    assert!(side.channel.held() < 256 * 1024, "held beyond any window");
    // Nothing is acknowledged that the receiver has not got.
    let (a, b) = sides.split_at_mut(1);
    for (me, peer) in [(&a[0], &b[0]), (&b[0], &a[0])] {
        assert!(me.channel.acked_offset() <= peer.received.len() as u64);
    }
}

/// The receiver's view: the frames parse in order and carry exactly what was sent.
fn check_frames(received: &[u8], sent: &[(u32, Vec<u8>)]) {
    let mut at = 0;
    for (i, (src, payload)) in sent.iter().enumerate() {
        let h = DataHeader::new_checked(&received[at..]).expect("a frame header");
        let DataRepr::Match { env } = DataRepr::parse(&h) else {
            panic!("a MATCH")
        };
        assert_eq!((env.seq, env.src), (i as u32, *src), "frames in order");
        at += h.header_len();
        assert_eq!(
            &received[at..at + payload.len()],
            &payload[..],
            "payload of frame {i}"
        );
        at += payload.len();
    }
    assert_eq!(at, received.len(), "nothing more");
}

fn frames(seed: u64, count: usize, max_len: u64) -> Vec<(u32, Vec<u8>)> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|i| {
            // Mostly small messages, some large: what MPI traffic looks like.
            let len = if rng.range(0, 3) == 0 {
                rng.range(0, max_len)
            } else {
                rng.range(0, 64)
            };
            (i as u32, (0..len).map(|_| rng.next_u64() as u8).collect())
        })
        .collect()
}

fn cfg_for(mtu: usize, window: u32) -> ChannelConfig {
    ChannelConfig {
        max_payload: (mtu - MAX_HEADER_LEN) as u16,
        window,
        ..ChannelConfig::default()
    }
}

/// Both sides send `count` frames; each receives the other's, verified; the senders
/// never had more datagrams out than the window.
fn exchange(cfg: ChannelConfig, wire: &Wire, seed: u64, count: usize, max_len: u64) -> Outcome {
    let sent = [
        frames(seed, count, max_len),
        frames(seed ^ 0x5555, count, max_len),
    ];
    let outcome = run(cfg, wire, seed, sent.clone());
    check_frames(&outcome.received[0], &sent[1]);
    check_frames(&outcome.received[1], &sent[0]);
    assert!(
        outcome.max_in_flight <= u64::from(cfg.window),
        "{} datagrams in flight with a window of {}",
        outcome.max_in_flight,
        cfg.window
    );
    outcome
}

#[test]
fn a_clean_wire_needs_no_retransmission_and_fills_the_window() {
    let outcome = exchange(cfg_for(1500, 16), &Wire::lan(1500), 1, 200, 100_000);
    assert_eq!(outcome.retransmitted, 0, "{outcome:?}");
    assert_eq!(outcome.max_in_flight, 16, "bulk data keeps the whole window busy");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn every_frame_arrives_once_in_order_under_loss_duplication_reordering_and_corruption(
        seed in any::<u64>(),
        loss in 0u64..=100,
        dup in 0u64..=100,
        corrupt in 0u64..=100,
        jitter in prop_oneof![Just(0u64), 1_000u64..100_000],
        mtu in prop_oneof![Just(256usize), Just(1500), Just(9000)],
        window in prop_oneof![Just(1u32), 2u32..64, Just(256)],
        count in 1usize..80,
    ) {
        let wire = Wire { loss, dup, corrupt, jitter, ..Wire::lan(mtu) };
        exchange(cfg_for(mtu, window), &wire, seed, count, 20_000);
    }
}

/// Goodput of both directions over a wire of `loss` per mille, in bytes per µs of
/// virtual time.
fn goodput(loss: u64, window: u32) -> (f64, Outcome) {
    let wire = Wire {
        loss,
        jitter: 2_000,
        ..Wire::lan(9000)
    };
    let outcome = exchange(cfg_for(9000, window), &wire, 7, 300, 200_000);
    let bytes: usize = outcome.received.iter().map(Vec::len).sum();
    (bytes as f64 * 1000.0 / outcome.end as f64, outcome)
}

#[test]
fn loss_costs_throughput_in_proportion_not_a_collapse() {
    let (clean, _) = goodput(0, 64);
    for loss in [10, 50] {
        let (lossy, outcome) = goodput(loss, 64);
        eprintln!(
            "{}% loss: {lossy:.0} B/µs against {clean:.0} clean; {} of {} datagrams sent again",
            loss / 10,
            outcome.retransmitted,
            outcome.sent
        );
        assert!(
            lossy > clean * 0.3,
            "{}% loss: {lossy:.0} B/µs against {clean:.0} clean",
            loss / 10
        );
    }
}

/// Sends what `from` has for `to` and hands it over at once; returns datagrams moved.
fn hand_over(from: &mut Channel, to: &mut Channel, now: Nanos, stream: &[u8]) -> usize {
    let mut moved = 0;
    while let Some(t) = from.poll_transmit(now) {
        let payload = &stream[t.offset as usize..][..usize::from(t.header.payload_len)];
        to.handle_datagram(
            now,
            &t.header,
            if t.header.payload_len == 0 { &[] } else { payload },
        )
        .expect("accepted");
        while to.take_ready().is_some() {}
        moved += 1;
    }
    moved
}

#[test]
fn a_silent_peer_is_declared_dead_after_the_stated_time_with_backoff_between() {
    let cfg = ChannelConfig {
        dead_after: 2_000_000_000,
        ..ChannelConfig::default()
    };
    let mut a = Channel::new(cfg, 1, 0);
    a.queue(100);
    assert!(a.poll_transmit(0).is_some());
    let mut now;
    let mut retransmissions = 0;
    let err = loop {
        now = a
            .poll_timeout()
            .expect("a timer runs while data is unacknowledged");
        match a.handle_timeout(now) {
            Ok(()) => {}
            Err(e) => break e,
        }
        while a.poll_transmit(now).is_some() {
            retransmissions += 1;
        }
    };
    assert!(matches!(err, ChannelError::Dead { ms } if ms >= 2_000), "{err}");
    let (waited, expiries) = a.stalled(now).expect("data outstanding");
    assert!(
        waited >= 2_000_000_000 && expiries >= 7,
        "{waited} ns, {expiries} expiries"
    );
    assert!(
        now <= cfg.dead_after + cfg.max_rto,
        "declared dead only at {now} ns"
    );
    // 10 ms doubling up to 2 s: 10, 20, ... 1280 ms, then the next expiry is past 2 s.
    assert!(
        (7..=9).contains(&retransmissions),
        "{retransmissions} retransmissions"
    );
}

#[test]
fn a_datagram_past_the_granted_window_or_an_ack_of_nothing_sent_is_refused() {
    let cfg = ChannelConfig {
        window: 4,
        ..ChannelConfig::default()
    };
    let stream = vec![1u8; 10_000];
    let mut a = Channel::new(ChannelConfig { window: 64, ..cfg }, 1, 0);
    let mut b = Channel::new(cfg, 2, 0);
    a.queue(stream.len() as u64);
    // `a` believes it may send 64 datagrams, `b` granted 4; the first is lost, so
    // `b`'s window does not move.
    let mut refused = None;
    a.poll_transmit(0).expect("datagram 0");
    while let Some(t) = a.poll_transmit(0) {
        let payload = &stream[t.offset as usize..][..usize::from(t.header.payload_len)];
        if let Err(e) = b.handle_datagram(0, &t.header, payload) {
            refused = Some(e);
            break;
        }
    }
    assert_eq!(
        refused,
        Some(ChannelError::OverCredit {
            seq: 4,
            window_end: 4
        })
    );

    let mut c = Channel::new(cfg, 3, 0);
    let mut ack = b.poll_transmit(0).expect("b owes an acknowledgement").header;
    ack.ack = 3;
    assert_eq!(
        c.handle_datagram(0, &ack, &[]),
        Err(ChannelError::AckUnsent { ack: 3, next: 0 })
    );
}

#[test]
fn the_round_trip_is_measured_without_the_ack_delay_after_which_a_lone_datagram_is_acknowledged() {
    let cfg = ChannelConfig::default();
    let stream = vec![5u8; 100];
    let (mut a, mut b) = (Channel::new(cfg, 2, 0), Channel::new(cfg, 1, 0));
    a.queue(100);
    let t = a.poll_transmit(0).unwrap();
    assert_eq!(
        b.handle_datagram(30_000, &t.header, &stream),
        Ok(Received::InOrder)
    );
    assert!(
        b.poll_transmit(30_000).is_none(),
        "the acknowledgement waits to ride on data"
    );
    let due = b.poll_timeout().expect("an acknowledgement timer");
    assert_eq!(due, 30_000 + cfg.ack_delay);
    b.handle_timeout(due).unwrap();
    let ack = b
        .poll_transmit(due)
        .expect("a bare acknowledgement once the delay is over");
    a.handle_datagram(due + 30_000, &ack.header, &[]).unwrap();
    assert_eq!(ack.header.ack_delay_us, (cfg.ack_delay / 1000) as u8);
    assert_eq!(
        a.srtt(),
        Some(60_000),
        "the time the acknowledgement was held is not path"
    );
    assert_eq!(a.acked_offset(), 100);
    assert_eq!(a.poll_timeout(), None, "no timer once everything is acknowledged");
    assert_eq!(a.rto(), cfg.min_rto, "a LAN round trip gives the floor");
}

#[test]
fn an_answer_carries_the_acknowledgement_without_a_bare_ack() {
    let cfg = ChannelConfig::default();
    let stream = vec![5u8; 100];
    let (mut a, mut b) = (Channel::new(cfg, 2, 0), Channel::new(cfg, 1, 0));
    a.queue(8);
    assert_eq!(hand_over(&mut a, &mut b, 0, &stream), 1);
    b.queue(8);
    assert_eq!(
        hand_over(&mut b, &mut a, 10, &stream),
        1,
        "one datagram: the answer with the ack"
    );
    assert_eq!(a.acked_offset(), 8);
    assert_eq!(a.stats().sent + b.stats().sent, 2);
}

#[test]
fn a_ping_measures_the_round_trip_and_is_answered_at_once() {
    let cfg = ChannelConfig::default();
    let (mut a, mut b) = (Channel::new(cfg, 2, 0), Channel::new(cfg, 1, 0));
    a.ping();
    let ping = a.poll_transmit(1_000).expect("the PING");
    assert_eq!(
        b.handle_datagram(21_000, &ping.header, &[]),
        Ok(Received::Nothing)
    );
    let pong = b
        .poll_transmit(22_000)
        .expect("the PONG, without waiting for an ack delay");
    a.handle_datagram(43_000, &pong.header, &[]).unwrap();
    assert_eq!(a.ping_rtt(), Some(42_000));
    // A PONG that comes again measures nothing.
    a.handle_datagram(99_000, &pong.header, &[]).unwrap();
    assert_eq!(a.ping_rtt(), Some(42_000));
    assert_eq!(a.poll_timeout(), None, "a ping holds no timer");
}

#[test]
fn a_ping_goes_before_a_stream_of_data() {
    // Behind a stream it would wait for a lull, and the lane's latency would come from
    // data round trips under load (which once moved small messages off a raw lane).
    let cfg = ChannelConfig::default();
    let mut a = Channel::new(cfg, 2, 0);
    a.queue(1 << 20);
    a.ping();
    let first = a.poll_transmit(1_000).expect("something to send");
    assert_eq!(first.header.kind, pontoon_proto::wire::eth::EthKind::Ping);
    let next = a.poll_transmit(1_000).expect("the stream");
    assert_eq!(next.header.kind, pontoon_proto::wire::eth::EthKind::Data);
}

#[test]
fn the_smallest_round_trip_counts_data_samples_and_pings() {
    let cfg = ChannelConfig::default();
    let stream = vec![5u8; 100];
    let (mut a, mut b) = (Channel::new(cfg, 2, 0), Channel::new(cfg, 1, 0));
    assert_eq!(a.min_rtt(), None);
    // Data out at 0, the answer (carrying the ack, held 2 µs) back at 12 µs.
    a.queue(8);
    assert_eq!(hand_over(&mut a, &mut b, 0, &stream), 1);
    b.queue(8);
    let answer = b.poll_transmit(8_000).expect("the answer");
    a.handle_datagram(12_000, &answer.header, &stream[..8]).unwrap();
    let sample = a.min_rtt().expect("a data sample");
    assert!((4_000..=12_000).contains(&sample), "{sample}");
    // A slow PING does not raise it; a faster one lowers it.
    a.ping();
    let ping = a.poll_transmit(100_000).unwrap();
    b.handle_datagram(150_000, &ping.header, &[]).unwrap();
    let pong = b.poll_transmit(150_000).unwrap();
    a.handle_datagram(200_000, &pong.header, &[]).unwrap();
    assert_eq!(a.min_rtt(), Some(sample));
    a.ping();
    let ping = a.poll_transmit(300_000).unwrap();
    b.handle_datagram(301_000, &ping.header, &[]).unwrap();
    let pong = b.poll_transmit(301_000).unwrap();
    a.handle_datagram(302_000, &pong.header, &[]).unwrap();
    assert_eq!(a.min_rtt(), Some(2_000));
}

#[test]
fn a_stall_is_reported_while_data_waits_and_ends_with_any_acknowledgement() {
    let mut a = Channel::new(ChannelConfig::default(), 1, 0);
    let mut b = Channel::new(ChannelConfig::default(), 2, 0);
    assert_eq!(a.stalled(5), None, "nothing outstanding");
    let stream = [7u8; 3000];
    a.queue(3000);
    while a.poll_transmit(0).is_some() {} // all lost
    let t1 = a.poll_timeout().expect("retransmission timer");
    a.handle_timeout(t1).expect("not dead yet");
    while a.poll_transmit(t1).is_some() {} // lost again
    assert_eq!(a.stalled(t1 + 1), Some((t1 + 1, 1)));
    // The peer hears the next copies: its acknowledgement ends the stall.
    let t2 = a.poll_timeout().expect("timer");
    a.handle_timeout(t2).expect("not dead yet");
    hand_over(&mut a, &mut b, t2, &stream);
    b.handle_timeout(t2 + 1_000_000).expect("ack timer");
    hand_over(&mut b, &mut a, t2 + 1_000_000, &[]);
    assert_eq!(a.stalled(t2 + 2_000_000), None, "all acknowledged");
}
