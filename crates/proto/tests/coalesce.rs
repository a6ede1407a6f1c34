//! Coalescing of small messages towards WAN peers (`engine/coalesce.rs`), in the
//! simulator: MPI's order holds whatever mix of coalesced, eager, rendezvous and
//! synchronous messages goes out; no message waits longer than the delay bound; a lone
//! message and every message over a LAN lane leave at once; a rank that never waits
//! (and so runs no timers) still sends a batch once its time passed, and one that is
//! about to block sends it at once; a batch that breaks the protocol is refused.

mod common;

use pontoon_proto::sim::{Completion, Rng, Sim, SimConfig};
use pontoon_proto::wire::data::{DataRepr, Envelope, HeaderBytes};
use pontoon_proto::{Nanos, ANY_TAG};

const MS: Nanos = 1_000_000;
const US: Nanos = 1_000;
/// The configured upper bound of the wait (PONTOON_COALESCE_US).
const BOUND: Nanos = 500 * US;

fn wan(seed: u64, one_way: Nanos) -> Sim {
    Sim::new(SimConfig {
        latency_ns: (one_way, one_way),
        eager_limit: 4096,
        wan_eager_limit: 16 << 10,
        mtu: 8192,
        coalesce_delay_ns: BOUND,
        coalesce_bytes: 16 << 10,
        seed,
        ..SimConfig::default()
    })
}

/// Message `i`: its bytes (`len` of them) name it.
fn message(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|x| (i * 7 + x * 13) as u8).collect()
}

/// A seeded mix: mostly small messages (coalesced while they come close together),
/// some eager ones above the coalescing size, some rendezvous, some synchronous.
fn mix(rng: &mut Rng, n: usize) -> Vec<(usize, bool)> {
    (0..n)
        .map(|_| match rng.range(0, 19) {
            0 => (rng.range(1025, 16 << 10) as usize, false),
            1 => (rng.range(20 << 10, 200 << 10) as usize, false),
            2 => (rng.range(0, 64) as usize, true),
            _ => (rng.range(0, 1024) as usize, false),
        })
        .collect()
}

/// Runs seed `seed`'s mix of 300 messages from rank 0 to rank 1 over a 5 ms WAN lane,
/// coalescing or not, checks every message and its order (and with `early`
/// receives, the delay bound), and returns the frames on the lane and the number of
/// small messages.
fn burst_of_mixed_messages(seed: u64, coalesce: bool) -> (u64, u64) {
    let one_way = 5 * MS;
    let mut rng = Rng::new(seed);
    let mut sim = wan(seed, one_way);
    if !coalesce {
        sim = Sim::new(SimConfig {
            coalesce_delay_ns: 0,
            ..sim.cfg.clone()
        });
    }
    let msgs = mix(&mut rng, 300);
    let early = seed.is_multiple_of(2);
    // Receives with ANY_TAG, posted in order: message i must land in receive i.
    let post_recvs = |sim: &mut Sim| -> Vec<_> {
        (0..msgs.len())
            .map(|_| sim.irecv(1, 0, 0, ANY_TAG, 200 << 10))
            .collect()
    };
    // The connection first, so that the lane is measured as a WAN lane.
    let hello = sim.isend(0, 1, 1, 0, Vec::new(), false);
    let hello_rx = sim.irecv(1, 0, 1, 0, 0);
    sim.run();
    assert!(sim.completion(1, hello_rx).is_some() && sim.completion(0, hello).is_some());
    let recvs = if early { post_recvs(&mut sim) } else { Vec::new() };
    let mut t = sim.now();
    let mut sends = Vec::new();
    for (i, &(len, sync)) in msgs.iter().enumerate() {
        // Bursts: mostly microseconds apart, now and then a pause of milliseconds.
        t += if rng.range(0, 9) == 0 {
            rng.range(1, 3) * MS
        } else {
            rng.range(0, 40) * US
        };
        sim.run_until(t);
        let tag = (i % 5) as i32;
        sends.push((t, sim.isend(0, 1, 0, tag, message(i, len), sync)));
    }
    let recvs = if early { recvs } else { post_recvs(&mut sim) };
    sim.run();
    for (i, (&(len, _), &r)) in msgs.iter().zip(&recvs).enumerate() {
        match sim.completion(1, r) {
            Some(Completion::Received(Ok(st))) => {
                assert_eq!(
                    st.count as usize, len,
                    "seed {seed}: receive {i} got another message"
                );
                assert_eq!(st.tag, (i % 5) as i32, "seed {seed}: receive {i}");
            }
            other => panic!("seed {seed}: receive {i}: {other:?}"),
        }
        assert_eq!(
            sim.recv_buf(1, r)[..len],
            message(i, len)[..],
            "seed {seed}: message {i}"
        );
    }
    for (i, &(_, s)) in sends.iter().enumerate() {
        assert!(
            matches!(sim.completion(0, s), Some(Completion::Sent(Ok(())))),
            "seed {seed}: send {i}"
        );
    }
    if early {
        // A small message arrives one way after it was sent, plus at most the
        // bound (and the transfer of a rendezvous message before it, which it may
        // have to wait behind on the lane: those are left out).
        for (i, ((&(len, sync), &(at, _)), &r)) in msgs.iter().zip(&sends).zip(&recvs).enumerate() {
            let before_large = msgs[..i].iter().any(|&(l, _)| l > 16 << 10);
            if len <= 1024 && !sync && !before_large {
                let got = sim.completed_at(1, r).expect("completed");
                assert!(
                    got <= at + one_way + BOUND,
                    "seed {seed}: message {i} sent at {at} arrived at {got}: waited {} us",
                    (got - at - one_way) / US
                );
            }
        }
    }
    let small = msgs.iter().filter(|&&(len, sync)| len <= 1024 && !sync).count();
    (sim.lane_frames[&(0, 1, 0)], small as u64)
}

#[test]
fn coalesced_messages_keep_mpi_order_and_arrive_within_the_delay_bound() {
    for seed in 0..24 {
        let (packed, small) = burst_of_mixed_messages(seed, true);
        let (plain, _) = burst_of_mixed_messages(seed, false);
        // Bursts of messages tens of us apart, against a bound of 500 us: most small
        // messages share a frame.
        assert!(
            plain - packed >= small / 2,
            "seed {seed}: {packed} frames coalescing, {plain} not, {small} small messages"
        );
    }
}

#[test]
fn a_lone_message_leaves_at_once_and_lan_lanes_never_coalesce() {
    // WAN: messages a round trip apart (a ping-pong's) are never held.
    let one_way = 10 * MS;
    let mut sim = wan(3, one_way);
    let warm = sim.isend(0, 1, 0, 0, vec![1], false);
    let warm_rx = sim.irecv(1, 0, 0, 0, 8);
    sim.run();
    assert!(sim.completion(0, warm).is_some() && sim.completion(1, warm_rx).is_some());
    for i in 0..5 {
        let t = sim.now() + 2 * one_way;
        sim.run_until(t);
        let r = sim.irecv(1, 0, 0, 0, 8);
        sim.send_now(0, 1, 0, 0, vec![i; 8]);
        sim.run();
        assert_eq!(sim.completed_at(1, r), Some(t + one_way), "message {i} waited");
    }
    // LAN: a burst goes frame by frame.
    let mut lan = Sim::new(SimConfig {
        latency_ns: (20 * US, 20 * US),
        coalesce_delay_ns: BOUND,
        ..SimConfig::default()
    });
    let recvs: Vec<_> = (0..100).map(|_| lan.irecv(1, 0, 0, 0, 64)).collect();
    for i in 0..100 {
        lan.send_now(0, 1, 0, 0, vec![i as u8; 16]);
    }
    lan.run();
    assert!(recvs.iter().all(|&r| lan.completion(1, r).is_some()));
    assert_eq!(lan.lane_frames[&(0, 1, 0)], 100);
}

#[test]
fn a_batch_is_never_larger_than_its_bound() {
    // 2000 messages of 1 KiB at once: batches of at most 16 KiB, so at least 125 frames.
    let mut sim = wan(5, 2 * MS);
    let warm = sim.isend(0, 1, 0, 0, vec![1], false);
    let warm_rx = sim.irecv(1, 0, 0, 0, 8);
    sim.run();
    assert!(sim.completion(0, warm).is_some() && sim.completion(1, warm_rx).is_some());
    let recvs: Vec<_> = (0..2000).map(|_| sim.irecv(1, 0, 0, 0, 1024)).collect();
    for i in 0..2000 {
        sim.isend(0, 1, 0, 0, message(i, 1024), false);
    }
    sim.run();
    for (i, &r) in recvs.iter().enumerate() {
        assert_eq!(sim.recv_buf(1, r), &message(i, 1024)[..]);
    }
    let frames = sim.lane_frames[&(0, 1, 0)] - 1;
    assert!((125..2000 / 8).contains(&frames), "{frames} frames");
}

fn frame(env: Envelope, data: &[u8]) -> Vec<u8> {
    let mut v = HeaderBytes::new(&DataRepr::Match { env }).as_slice().to_vec();
    v.extend_from_slice(data);
    v
}

#[test]
fn a_batch_that_breaks_the_protocol_is_refused() {
    let env = |seq: u32, len: u64| Envelope {
        ctx: 0,
        src: 0,
        tag: 4,
        seq,
        msg_len: len,
    };
    let good = [frame(env(0, 3), b"abc"), frame(env(1, 0), b"")].concat();
    let cases: Vec<(&str, u32, Vec<u8>)> = vec![
        ("fewer messages than announced", 3, good.clone()),
        ("more messages than announced", 1, good.clone()),
        ("a message cut short", 1, frame(env(0, 9), b"abc")),
        (
            "a frame that is not a MATCH",
            1,
            HeaderBytes::new(&DataRepr::Fin { send_id: 1 })
                .as_slice()
                .to_vec(),
        ),
        ("bytes that are no frame", 1, vec![0xff; 40]),
        (
            "a message from another rank",
            1,
            frame(Envelope { src: 2, ..env(0, 1) }, b"x"),
        ),
    ];
    for (what, messages, bytes) in cases {
        let mut ep = common::engine(1, 3, 1 << 20);
        ep.handle_lane_up(0, common::KERNEL_LANE);
        let repr = DataRepr::Batch {
            messages,
            len: bytes.len() as u32,
        };
        let (_, token) = ep.handle_header(0, &repr).expect("the header is fine");
        assert!(ep.payload_done(0, token, Some(bytes)).is_err(), "{what}");
    }
    // The good one delivers both messages, in order.
    let mut ep = common::engine(1, 3, 1 << 20);
    ep.handle_lane_up(0, common::KERNEL_LANE);
    ep.post_recv(7, 0, 0, 4, 16);
    let repr = DataRepr::Batch {
        messages: 2,
        len: good.len() as u32,
    };
    let (_, token) = ep.handle_header(0, &repr).unwrap();
    ep.payload_done(0, token, Some(good)).unwrap();
    ep.post_recv(8, 0, 0, 4, 16);
    let mut done = Vec::new();
    while let Some(out) = ep.poll() {
        match out {
            pontoon_proto::Output::Deliver { req, data } => done.push(format!("{req}:{data:?}")),
            pontoon_proto::Output::RecvDone { req, result } => {
                done.push(format!("{req}:{}", result.expect("received").count))
            }
            _ => {}
        }
    }
    assert_eq!(done, ["7:[97, 98, 99]", "7:3", "8:0"]);
    // A batch larger than the bound is refused from its header on.
    let big = DataRepr::Batch {
        messages: 1,
        len: pontoon_proto::wire::data::MAX_BATCH + 1,
    };
    assert!(common::engine(1, 3, 1 << 20).handle_header(0, &big).is_err());
}

/// The frames an engine hands out: (messages in it, 1 for a lone MATCH).
fn sent(ep: &mut pontoon_proto::Endpoint) -> Vec<u32> {
    let mut out = Vec::new();
    while let Some(o) = ep.poll() {
        match o {
            pontoon_proto::Output::TransmitOwned { header, .. } => {
                let view = pontoon_proto::wire::data::DataHeader::new_checked(header.as_slice()).unwrap();
                match DataRepr::parse(&view) {
                    DataRepr::Batch { messages, .. } => out.push(messages),
                    other => panic!("{other:?}"),
                }
            }
            pontoon_proto::Output::Transmit { .. } => out.push(1),
            _ => {}
        }
    }
    out
}

#[test]
fn a_batch_leaves_by_its_time_though_no_timer_runs_and_at_once_before_the_rank_blocks() {
    // Rank 0 towards rank 1 over a 20 ms round trip: the bound is 20 ms / 16.
    let mut ep = pontoon_proto::Endpoint::new(
        0,
        2,
        pontoon_proto::EngineConfig {
            eager_limit: 4096,
            wan_eager_limit: 16 << 10,
            frag_size: 1 << 16,
            lane_queue: 1 << 17,
            unexpected_cap: 1 << 20,
            coalesce_delay_ns: 5 * MS,
            coalesce_bytes: 16 << 10,
            single_copy: Default::default(),
        },
    );
    let wan = pontoon_proto::Caps {
        latency_ns: 10 * MS,
        ..common::KERNEL_LANE
    };
    ep.handle_lane_up(1, wan);
    let bound = 20 * MS / 16;
    let t0 = 100 * MS;
    // The first of a burst leaves at once; the next ones are packed.
    assert!(!ep.coalesce(1, 0, 0, b"a", t0));
    ep.post_send(1, 1, 0, 0, 1, false, None); // the ordinary way
    assert_eq!(sent(&mut ep), [1]);
    let msg = |ep: &mut pontoon_proto::Endpoint, at: Nanos| ep.coalesce(1, 0, 0, b"b", at);
    assert!(msg(&mut ep, t0), "a message right after another is packed");
    assert!(msg(&mut ep, t0 + bound / 2));
    assert_eq!(
        sent(&mut ep),
        Vec::<u32>::new(),
        "within its time the batch waits"
    );
    // No timer ran (a rank sending on and on): the next message finds the batch past
    // its time and sends it first, then starts another.
    assert!(msg(&mut ep, t0 + bound + 1));
    assert_eq!(
        sent(&mut ep),
        [2],
        "the batch past its time leaves before the next"
    );
    assert!(ep.is_coalescing(), "the next one starts a batch of its own");
    // About to block: whatever waits goes at once.
    ep.flush_batches();
    assert_eq!(sent(&mut ep), [1]);
    assert!(!ep.is_coalescing());
}
