//! Protocol behaviour in the deterministic simulator.

mod common;

use common::{bytes, received};

use pontoon_proto::sim::{Completion, Sim, SimConfig};
use pontoon_proto::{Failure, SingleCopy, ANY_SOURCE, ANY_TAG};
use proptest::prelude::*;

#[test]
fn messages_keep_order_across_lanes_with_different_latency() {
    // Three lanes whose latencies differ by 50x, plus jitter: frames overtake each
    // other between lanes, yet messages must match in send order.
    // Lanes come up slowest first, so each new lane lets later messages overtake.
    let cfg = SimConfig {
        lanes: 3,
        lane_latency_ns: Some(vec![80_000, 30_000, 2_000]),
        jitter_ns: 20_000,
        mtu: 1000,
        eager_limit: 512,
        seed: 7,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    let sizes: Vec<usize> = (0..300).map(|i| [0, 8, 511, 512, 513, 4000][i % 6]).collect();
    for (i, &n) in sizes.iter().enumerate() {
        sim.isend(0, 1, 0, 9, bytes(i as u64, n), false);
        // Keep sending while lanes come up one by one and the best lane changes.
        sim.step();
    }
    sim.run();
    assert!(
        sim.endpoint(1).held_max() > 0,
        "the test must exercise overtaking"
    );
    let recvs: Vec<u64> = sizes.iter().map(|_| sim.irecv(1, 0, 0, 9, 4000)).collect();
    sim.run();
    for (i, (&n, &r)) in sizes.iter().zip(&recvs).enumerate() {
        let st = received(&sim, 1, r);
        assert_eq!(st.count as usize, n, "message {i}");
        assert_eq!(
            &sim.recv_buf(1, r)[..n],
            &bytes(i as u64, n)[..],
            "message {i} data"
        );
    }
}

#[test]
fn large_messages_are_striped_by_the_speed_lanes_really_have() {
    // Both lanes announce the same bandwidth, but one really sends three times
    // faster: lanes pull fragments as they drain, so it carries about three quarters.
    let cfg = SimConfig {
        lanes: 2,
        lane_rate: vec![100, 300],
        mtu: 1000,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    let data = bytes(3, 1 << 20);
    let r = sim.irecv(1, 0, 0, 1, data.len());
    let s = sim.isend(0, 1, 0, 1, data.clone(), false);
    sim.run();
    assert_eq!(sim.completion(0, s), Some(&Completion::Sent(Ok(()))));
    assert_eq!(received(&sim, 1, r).count, data.len() as u64);
    assert!(sim.recv_buf(1, r) == &data[..], "payload intact");
    let slow = sim.lane_frames[&(0, 1, 0)] as f64;
    let fast = sim.lane_frames[&(0, 1, 1)] as f64;
    let ratio = fast / slow;
    assert!(
        (2.7..3.3).contains(&ratio),
        "fast/slow lane fragments {fast}/{slow} = {ratio:.2}"
    );
}

#[test]
fn wan_streams_share_a_transfer_by_speed_while_small_messages_pass_on_their_own() {
    // Four streams of one 25 ms path, one twice as fast as the others. The first carries
    // eager messages and control frames only; the others pull the fragments as they
    // drain. A 64 KiB message sent mid-transfer goes eagerly (the WAN eager limit) on
    // its own stream: one way, not behind 32 MiB, not after a rendezvous's round trip.
    const ONE_WAY: u64 = 25_000_000;
    let cfg = SimConfig {
        lanes: 4,
        latency_ns: (ONE_WAY, ONE_WAY),
        lane_rate: vec![100, 100, 100, 200],
        mtu: 64 << 10,
        eager_limit: 4096,
        wan_eager_limit: 1 << 20,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    let warm = sim.irecv(1, 0, 0, 0, 0);
    sim.isend(0, 1, 0, 0, Vec::new(), false);
    sim.run();
    received(&sim, 1, warm);
    let data = bytes(5, 32 << 20);
    let r = sim.irecv(1, 0, 0, 1, data.len());
    let s = sim.isend(0, 1, 0, 1, data.clone(), false);
    let start = sim.now();
    while sim.now() < start + 3 * ONE_WAY {
        assert!(sim.step());
    }
    let small = bytes(6, 64 << 10);
    let rs = sim.irecv(1, 0, 0, 2, small.len());
    let sent_at = sim.now();
    sim.isend(0, 1, 0, 2, small.clone(), false);
    while sim.completion(1, rs).is_none() {
        assert!(sim.step());
    }
    let took = sim.now() - sent_at;
    assert!(
        took < ONE_WAY + ONE_WAY / 10,
        "the small message took {took} ns: behind the transfer, or a rendezvous"
    );
    assert!(sim.completion(1, r).is_none(), "the transfer was still running");
    assert_eq!(sim.recv_buf(1, rs), &small[..]);
    sim.run();
    assert_eq!(sim.completion(0, s), Some(&Completion::Sent(Ok(()))));
    assert!(sim.recv_buf(1, r) == &data[..], "payload intact");
    let frames = |lane| sim.lane_frames.get(&(0, 1, lane)).copied().unwrap_or(0) as f64;
    assert!(frames(0) < 5.0, "the control stream carried {} frames", frames(0));
    let ratio = frames(3) / ((frames(1) + frames(2)) / 2.0);
    assert!(
        (1.7..2.3).contains(&ratio),
        "fast/slow stream fragments {} / {} {} = {ratio:.2}",
        frames(3),
        frames(1),
        frames(2)
    );
}

#[test]
fn a_peer_with_a_shared_memory_lane_and_a_network_lane_uses_each_for_its_part() {
    // Lane 0: network, 20 µs. Lane 1: node-local, 0.3 µs, comes up second. Once both are
    // up, small messages take the node-local lane and no fragment of a large transfer
    // goes over the network lane (striping the two would tie the fast lane to the slow).
    let cfg = SimConfig {
        lanes: 2,
        lane_latency_ns: Some(vec![20_000, 300]),
        lane_node_local: vec![false, true],
        lane_rate: vec![100, 3000],
        mtu: 1000,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    // Bring both lanes up with a first exchange.
    let r = sim.irecv(1, 0, 0, 0, 8);
    sim.isend(0, 1, 0, 0, bytes(9, 8), false);
    sim.run();
    assert_eq!(received(&sim, 1, r).count, 8);
    let network_before = sim.lane_frames.get(&(0, 1, 0)).copied().unwrap_or(0);
    let data = bytes(4, 256 << 10);
    let r = sim.irecv(1, 0, 0, 1, data.len());
    let small = sim.irecv(1, 0, 0, 2, 8);
    sim.isend(0, 1, 0, 1, data.clone(), false);
    sim.isend(0, 1, 0, 2, bytes(5, 8), false);
    sim.run();
    assert!(sim.recv_buf(1, r) == &data[..], "payload intact");
    assert_eq!(received(&sim, 1, small).count, 8);
    assert_eq!(
        sim.lane_frames.get(&(0, 1, 0)).copied().unwrap_or(0),
        network_before,
        "nothing more went over the network lane"
    );
    assert!(sim.lane_frames[&(0, 1, 1)] > 256, "the fragments went node-local");
}

#[test]
fn a_raw_lane_carries_small_messages_and_the_kernel_lane_the_rest_in_mpi_order() {
    use pontoon_proto::sim::RAW_EAGER;
    // Lane 0: TCP, 10 µs. Lane 1: raw Ethernet, 8 µs. Messages of every size in one
    // stream: those of a datagram go raw, larger eager ones and all fragments by TCP,
    // and the receiver still matches them in the order they were sent.
    let cfg = SimConfig {
        lanes: 2,
        lane_latency_ns: Some(vec![10_000, 8_000]),
        lane_raw: vec![false, true],
        eager_limit: 16 << 10,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    let r = sim.irecv(1, 0, 0, 0, 8);
    sim.isend(0, 1, 0, 0, bytes(1, 8), false);
    sim.run();
    assert_eq!(received(&sim, 1, r).count, 8);
    let before = |sim: &Sim, lane| sim.lane_frames.get(&(0, 1, lane)).copied().unwrap_or(0);
    let (tcp0, raw0) = (before(&sim, 0), before(&sim, 1));
    let sizes = [8usize, 100_000, 1024, 1025, 1400, 12_000, 0, 64, 3000, 8];
    // All posted with one tag: the receives must complete in the order of the sends.
    let recvs: Vec<_> = sizes.iter().map(|&n| sim.irecv(1, 0, 0, 1, n)).collect();
    for (i, &n) in sizes.iter().enumerate() {
        sim.isend(0, 1, 0, 1, bytes(100 + i as u64, n), false);
    }
    sim.run();
    for (i, (&n, &r)) in sizes.iter().zip(&recvs).enumerate() {
        assert!(
            sim.recv_buf(1, r) == &bytes(100 + i as u64, n)[..],
            "message {i} of {n} B"
        );
    }
    let raw_max = RAW_EAGER.min(pontoon_proto::caps::RAW_SMALL_MAX);
    let small = sizes.iter().filter(|&&n| n as u32 <= raw_max).count() as u64;
    assert_eq!(
        before(&sim, 1) - raw0,
        small + 1,
        "the small ones and the large one's RTS went raw"
    );
    assert!(
        before(&sim, 0) - tcp0 >= 4,
        "the larger eager ones and the fragments by TCP"
    );
}

#[test]
fn a_raw_lane_alone_carries_eager_messages_above_a_datagram_eagerly() {
    // With no kernel lane beside it, a message of several datagrams within the eager
    // limit is one MATCH frame (the channel cuts it into datagrams), not a rendezvous
    // with its extra round trip.
    let cfg = SimConfig {
        lanes: 1,
        lane_raw: vec![true],
        eager_limit: 16 << 10,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    let r = sim.irecv(1, 0, 0, 0, 12_000);
    sim.isend(0, 1, 0, 0, bytes(7, 12_000), false);
    sim.run();
    assert!(sim.recv_buf(1, r) == &bytes(7, 12_000)[..]);
    assert_eq!(sim.lane_frames[&(0, 1, 0)], 1, "one eager frame, no RTS and data");
    assert_eq!(sim.lane_frames.get(&(1, 0, 0)), None, "and no CTS");
}

#[test]
fn an_eager_message_above_the_receivers_limit_is_a_protocol_error() {
    use pontoon_proto::wire::data::{DataRepr, Envelope};
    let mut ep = pontoon_proto::Endpoint::new(
        1,
        2,
        pontoon_proto::EngineConfig {
            eager_limit: 4096,
            wan_eager_limit: 4096,
            frag_size: 1 << 16,
            lane_queue: 1 << 17,
            unexpected_cap: 1 << 30,
            coalesce_delay_ns: 0,
            coalesce_bytes: 16 << 10,
            single_copy: Default::default(),
        },
    );
    let env = Envelope {
        ctx: 0,
        src: 0,
        tag: 0,
        seq: 0,
        msg_len: 1 << 30,
    };
    // A peer that claims a 1 GiB eager message is refused before anything is allocated.
    let err = ep.handle_header(0, &DataRepr::Match { env }).unwrap_err();
    assert!(err.what.contains("eager limit"), "{err}");
    let ok = Envelope { msg_len: 4096, ..env };
    assert!(ep.handle_header(0, &DataRepr::Match { env: ok }).is_ok());
}

#[test]
fn a_small_message_overtakes_a_long_transfer_on_the_same_lane() {
    // One slow lane (1 MB takes 10 ms): fragments are handed to it only as it drains,
    // so a small message sent mid-transfer waits behind two fragments, not all of them.
    let cfg = SimConfig {
        lane_rate: vec![100],
        mtu: 1000,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    let big = sim.irecv(1, 0, 0, 1, 1_000_000);
    let small = sim.irecv(1, 0, 0, 2, 8);
    sim.isend(0, 1, 0, 1, bytes(1, 1_000_000), false);
    while sim.lane_frames.get(&(0, 1, 0)).copied().unwrap_or(0) < 100 {
        assert!(sim.step(), "the transfer must be under way");
    }
    sim.isend(0, 1, 0, 2, bytes(2, 8), false);
    while sim.completion(1, small).is_none() {
        assert!(sim.step(), "the small message must arrive");
    }
    assert!(
        sim.completion(1, big).is_none(),
        "the small message arrived only after the transfer"
    );
    sim.run();
    assert_eq!(received(&sim, 1, big).count, 1_000_000);
}

#[test]
fn any_source_matches_in_arrival_order_and_serves_every_sender() {
    let cfg = SimConfig {
        ranks: 5,
        latency_ns: (1_000, 3_000),
        jitter_ns: 500,
        seed: 3,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    let recvs: Vec<u64> = (0..200).map(|_| sim.irecv(0, ANY_SOURCE, 0, 1, 64)).collect();
    for k in 0..50u64 {
        for src in 1..5 {
            let mut payload = k.to_le_bytes().to_vec();
            payload.push(src as u8);
            sim.isend(src, 0, 0, 1, payload, false);
        }
        // Senders keep sending while earlier messages are in flight.
        for _ in 0..3 {
            sim.step();
        }
    }
    sim.run();
    let mut next = [0u64; 5];
    let mut seen_in_first_half = [0; 5];
    for (i, r) in recvs.iter().enumerate() {
        let st = received(&sim, 0, *r);
        let buf = sim.recv_buf(0, *r);
        let k = u64::from_le_bytes(buf[..8].try_into().unwrap());
        assert_eq!(buf[8] as u32, st.source);
        // Non-overtaking per sender.
        assert_eq!(k, next[st.source as usize]);
        next[st.source as usize] += 1;
        if i < 100 {
            seen_in_first_half[st.source as usize] += 1;
        }
    }
    // Fairness: senders with similar latency all progress in the first half.
    assert!(
        seen_in_first_half[1..].iter().all(|&n| n >= 10),
        "{seen_in_first_half:?}"
    );
    // Completions follow posting order for wildcard receives of one tag.
    let order: Vec<u64> = sim.recv_order(0).iter().map(|(r, _)| *r).collect();
    assert_eq!(order, recvs);
}

#[test]
fn unexpected_rendezvous_buffers_no_payload_until_matched() {
    let cfg = SimConfig {
        eager_limit: 1024,
        mtu: 4096,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    let data = bytes(1, 1 << 20);
    let s = sim.isend(0, 1, 0, 3, data.clone(), false);
    sim.run();
    assert!(
        sim.completion(0, s).is_none(),
        "a rendezvous send waits for the receiver"
    );
    assert_eq!(sim.endpoint(1).unexpected_len(), 1);
    let frames_before = sim.frames;
    assert_eq!(frames_before, 1, "only the RTS travelled");
    let r = sim.irecv(1, 0, 0, 3, 1 << 20);
    sim.run();
    assert_eq!(received(&sim, 1, r).count, 1 << 20);
    assert_eq!(sim.recv_buf(1, r), &data[..]);
    assert_eq!(sim.completion(0, s), Some(&Completion::Sent(Ok(()))));
    assert_eq!(sim.endpoint(0).pending() + sim.endpoint(1).pending(), 0);
}

#[test]
fn a_matched_probe_takes_the_message_from_every_other_receive() {
    // Eager and rendezvous alike: after mprobe, a wildcard receive gets the next
    // message, and the claimed one arrives only through its own receive.
    let mut sim = Sim::new(SimConfig {
        eager_limit: 256,
        mtu: 700,
        seed: 3,
        ..Default::default()
    });
    for (i, n) in [100usize, 5000].into_iter().enumerate() {
        let tag = 40 + i as i32;
        let first = bytes(1 + i as u64, n);
        let second = bytes(2 + i as u64, n);
        sim.isend(0, 1, 0, tag, first.clone(), false);
        sim.isend(0, 1, 0, tag, second.clone(), false);
        sim.run();
        let (src, got_tag, len, msg) = sim
            .mprobe(1, ANY_SOURCE, 0, ANY_TAG)
            .expect("a message is waiting");
        assert_eq!((src, got_tag, len), (0, tag, n as u64));
        let other = sim.irecv(1, ANY_SOURCE, 0, ANY_TAG, n);
        sim.run();
        assert_eq!(received(&sim, 1, other).count, n as u64);
        assert_eq!(
            &sim.recv_buf(1, other)[..n],
            &second[..],
            "the wildcard receive got the second message"
        );
        let claimed = sim.irecv_claimed(1, msg, n).expect("claimed message");
        sim.run();
        assert_eq!(received(&sim, 1, claimed).tag, tag);
        assert_eq!(&sim.recv_buf(1, claimed)[..n], &first[..]);
        assert!(
            sim.irecv_claimed(1, msg, n).is_none(),
            "a message is received once"
        );
        assert!(sim.mprobe(1, ANY_SOURCE, 0, ANY_TAG).is_none());
    }
}

#[test]
fn ten_thousand_outstanding_requests() {
    let cfg = SimConfig {
        eager_limit: 64,
        mtu: 256,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    let n = 10_000;
    let recvs: Vec<u64> = (0..n).map(|t| sim.irecv(1, 0, 0, t, 128)).collect();
    // Sent in reverse tag order, each size alternating eager and rendezvous.
    let sends: Vec<u64> = (0..n)
        .rev()
        .map(|t| sim.isend(0, 1, 0, t, bytes(t as u64, 32 + (t as usize % 2) * 96), false))
        .collect();
    assert_eq!(sim.endpoint(1).pending(), n as usize);
    sim.run();
    for (t, r) in recvs.iter().enumerate() {
        let st = received(&sim, 1, *r);
        assert_eq!(st.tag, t as i32);
        let len = 32 + (t % 2) * 96;
        assert_eq!(&sim.recv_buf(1, *r)[..len], &bytes(t as u64, len)[..]);
    }
    assert!(sends
        .iter()
        .all(|s| sim.completion(0, *s) == Some(&Completion::Sent(Ok(())))));
    assert_eq!(sim.endpoint(0).pending() + sim.endpoint(1).pending(), 0);
}

#[test]
fn truncation_is_reported_for_eager_and_rendezvous() {
    let cfg = SimConfig {
        eager_limit: 100,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    let r1 = sim.irecv(1, 0, 0, 1, 10);
    let r2 = sim.irecv(1, 0, 0, 2, 10);
    sim.isend(0, 1, 0, 1, bytes(1, 50), false);
    let s2 = sim.isend(0, 1, 0, 2, bytes(2, 5000), false);
    sim.run();
    for (r, seed) in [(r1, 1), (r2, 2)] {
        let st = received(&sim, 1, r);
        assert!(st.truncated);
        assert_eq!(st.count, 10);
        assert_eq!(sim.recv_buf(1, r), &bytes(seed, 10)[..]);
    }
    assert_eq!(sim.completion(0, s2), Some(&Completion::Sent(Ok(()))));
}

#[test]
fn zero_length_self_and_synchronous_messages() {
    let mut sim = Sim::new(SimConfig {
        ranks: 2,
        eager_limit: 100,
        ..Default::default()
    });
    let s0 = sim.isend(0, 1, 0, 1, vec![], false);
    let r0 = sim.irecv(1, 0, 0, 1, 0);
    // To self: eager is buffered, large waits for its receive.
    let small = sim.isend(0, 0, 0, 2, bytes(3, 40), false);
    assert_eq!(sim.completion(0, small), Some(&Completion::Sent(Ok(()))));
    let big = sim.isend(0, 0, 0, 3, bytes(4, 400), false);
    assert!(sim.completion(0, big).is_none());
    let rb = sim.irecv(0, 0, 0, 3, 400);
    let rs = sim.irecv(0, ANY_SOURCE, 0, ANY_TAG, 100);
    // A synchronous send completes only after it is matched.
    let ss = sim.isend(0, 1, 0, 4, bytes(5, 8), true);
    sim.run();
    assert!(sim.completion(0, ss).is_none());
    let rss = sim.irecv(1, 0, 0, 4, 8);
    sim.run();
    assert_eq!(sim.completion(0, ss), Some(&Completion::Sent(Ok(()))));
    assert_eq!(received(&sim, 1, rss).count, 8);
    assert_eq!(received(&sim, 1, r0).count, 0);
    assert_eq!(sim.completion(0, s0), Some(&Completion::Sent(Ok(()))));
    assert_eq!(sim.recv_buf(0, rb), &bytes(4, 400)[..]);
    assert_eq!(received(&sim, 0, rs).tag, 2);
    assert_eq!(&sim.recv_buf(0, rs)[..40], &bytes(3, 40)[..]);
}

#[test]
fn a_dead_peer_fails_pending_operations_instead_of_hanging() {
    let mut sim = Sim::new(SimConfig {
        ranks: 3,
        eager_limit: 100,
        ..Default::default()
    });
    let from_dead = sim.irecv(0, 2, 0, 1, 10);
    let any = sim.irecv(0, ANY_SOURCE, 0, 1, 10);
    let big = sim.isend(0, 2, 0, 5, bytes(1, 1000), false);
    sim.run();
    sim.kill(2);
    sim.run();
    assert!(matches!(
        sim.completion(0, from_dead),
        Some(Completion::Received(Err(Failure::PeerFailed { rank: 2, .. })))
    ));
    assert!(matches!(
        sim.completion(0, big),
        Some(Completion::Sent(Err(Failure::PeerFailed { rank: 2, .. })))
    ));
    // Rank 1 is alive, so an any-source receive stays pending...
    assert!(sim.completion(0, any).is_none());
    // ...and a new operation with the dead rank fails at once.
    let later = sim.irecv(0, 2, 0, 1, 10);
    assert!(matches!(
        sim.completion(0, later),
        Some(Completion::Received(Err(_)))
    ));
    sim.kill(1);
    assert!(matches!(
        sim.completion(0, any),
        Some(Completion::Received(Err(_)))
    ));
}

/// One operation of a random program.
#[derive(Debug, Clone)]
enum Op {
    Send {
        src: u32,
        dst: u32,
        tag: i32,
        len: usize,
        sync: bool,
    },
    Recv {
        rank: u32,
        src: u32,
        tag: Option<i32>,
        cap: usize,
    },
    Run {
        events: usize,
    },
}

fn arb_op(ranks: u32) -> impl Strategy<Value = Op> {
    // The last: messages large enough to be read in one copy (proto::caps::ONE_COPY_FROM).
    let len = prop_oneof![
        Just(0usize),
        1usize..64,
        60usize..70,
        64usize..3000,
        16_384usize..16_500
    ];
    prop_oneof![
        (
            0..ranks,
            0..ranks,
            0..3i32,
            len.clone(),
            prop::bool::weighted(0.1)
        )
            .prop_map(|(src, dst, tag, len, sync)| Op::Send {
                src,
                dst,
                tag,
                len,
                sync
            }),
        (
            0..ranks,
            0..ranks,
            prop::option::weighted(0.7, 0..3i32),
            prop_oneof![Just(3000usize), Just(16_500), 0usize..100]
        )
            .prop_map(|(rank, src, tag, cap)| Op::Recv { rank, src, tag, cap }),
        (0usize..20).prop_map(|events| Op::Run { events }),
    ]
}

/// Runs `ops` in a simulator of `cfg` (every pair's lanes up first if `connected`) and
/// checks every receive against a sequential reference model of MPI matching. Every
/// other standard send takes the runtime's immediate path (`send_eager_now`) and every
/// other receive is a blocking one on its immediate path (`await_now`, `took_now`), so both
/// kinds interleave on the same pairs.
fn run_against_reference(ops: &[Op], cfg: SimConfig, connected: bool) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(cfg);
    if connected {
        connect_every_pair(&mut sim);
    }
    // Reference: per (dst, src) the messages in send order, and per rank the
    // receives in post order; each receive takes the earliest fitting message.
    let mut sent: Vec<(u32, u32, i32, Vec<u8>, u64)> = Vec::new();
    let mut posted: Vec<(u32, u32, Option<i32>, usize, u64)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Send {
                src,
                dst,
                tag,
                len,
                sync,
            } => {
                let data = bytes(i as u64, len);
                // Every other standard send tries the runtime's immediate path, so
                // the two kinds interleave on the same pairs.
                let req = if !sync && i % 2 == 0 {
                    sim.send_now(src, dst, 0, tag, data.clone())
                } else {
                    sim.isend(src, dst, 0, tag, data.clone(), sync)
                };
                sent.push((src, dst, tag, data, req));
            }
            Op::Recv { rank, src, tag, cap } => {
                // Every other receive is a blocking one on the runtime's immediate
                // path, which falls back to a posted receive whenever it must.
                let any = tag.unwrap_or(ANY_TAG);
                let req = if i % 2 == 1 {
                    sim.recv_now(rank, src, 0, any, cap)
                } else {
                    sim.irecv(rank, src as i32, 0, any, cap)
                };
                posted.push((rank, src, tag, cap, req));
            }
            Op::Run { events } => {
                for _ in 0..events {
                    sim.step();
                }
            }
        }
    }
    sim.run();
    let mut taken = vec![false; sent.len()];
    for (rank, src, tag, cap, req) in &posted {
        let hit = sent.iter().enumerate().position(|(i, (s, d, t, _, _))| {
            !taken[i] && s == src && d == rank && tag.is_none_or(|tag| tag == *t)
        });
        match hit {
            Some(i) => {
                taken[i] = true;
                let (_, _, t, data, _) = &sent[i];
                let st = received(&sim, *rank, *req);
                let n = data.len().min(*cap);
                prop_assert_eq!(st.tag, *t);
                prop_assert_eq!(st.count as usize, n);
                prop_assert_eq!(st.truncated, data.len() > *cap);
                prop_assert_eq!(&sim.recv_buf(*rank, *req)[..n], &data[..n]);
            }
            None => prop_assert!(
                sim.completion(*rank, *req).is_none(),
                "receive {} should wait",
                req
            ),
        }
    }
    // Every matched or eager send completed; unmatched rendezvous sends wait.
    for (i, (_, _, _, _, req)) in sent.iter().enumerate() {
        let c = sim.completion(sent[i].0, *req);
        if taken[i] {
            prop_assert_eq!(c, Some(&Completion::Sent(Ok(()))));
        }
    }
    Ok(())
}

/// Brings every pair's lanes up with one message each way on context 1 (the programs
/// use context 0), received: nothing is left posted or unmatched.
fn connect_every_pair(sim: &mut Sim) {
    let ranks = sim.cfg.ranks;
    for a in 0..ranks {
        for b in (0..ranks).filter(|&b| b != a) {
            sim.irecv(b, a as i32, 1, 0, 0);
            sim.isend(a, b, 1, 0, Vec::new(), false);
        }
    }
    sim.run();
}

/// A program of messages each received once, by a receive posted before or after its
/// send, with the right tag or a wildcard, into a buffer that may be too small.
fn arb_matched_program(ranks: u32) -> impl Strategy<Value = Vec<Op>> {
    // The last: messages large enough to be read in one copy (proto::caps::ONE_COPY_FROM).
    let len = prop_oneof![
        Just(0usize),
        1usize..64,
        60usize..70,
        64usize..3000,
        16_384usize..16_500
    ];
    let message = (
        0..ranks,
        0..ranks,
        0..3i32,
        len,
        prop::option::weighted(0.7, Just(())),
        prop_oneof![Just(3000usize), 0usize..100],
        any::<bool>(),
        0usize..4,
    );
    proptest::collection::vec(message, 1..60).prop_map(|messages| {
        let mut ops = Vec::new();
        for (src, dst, tag, len, exact, cap, recv_first, events) in messages {
            let send = Op::Send {
                src,
                dst,
                tag,
                len,
                sync: false,
            };
            let recv = Op::Recv {
                rank: dst,
                src,
                tag: exact.map(|_| tag),
                cap,
            };
            if recv_first {
                ops.extend([recv, Op::Run { events }, send]);
            } else {
                ops.extend([send, Op::Run { events }, recv]);
            }
        }
        ops
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Random mixes of sizes (zero, eager, boundary, rendezvous), tags, wildcards,
    /// synchronous sends, immediate sends (`send_eager_now`) and receives
    /// (`await_now`, `took_now`), and truncation, with posts interleaved at random with the
    /// network, checked against a sequential reference model of MPI matching.
    #[test]
    fn random_programs_match_the_reference_model(
        ops in proptest::collection::vec(arb_op(3), 1..120),
        seed in any::<u64>(),
        lanes in 1usize..4,
        rated in any::<bool>(),
        capped in any::<bool>(),
        one_copy in 0u8..5,
    ) {
        // Rated lanes queue frames behind each other, so fragments are pulled by speed.
        let lane_rate = if rated { vec![50, 400, 3] } else { Vec::new() };
        // A tight cap sends most messages as rendezvous once a few eager ones are out.
        let unexpected_cap = if capped { 600 } else { 1 << 40 };
        // Node-local lanes whose messages of 16 KiB and more are read in one copy: every
        // one (`on`: 1, 2), or the rendezvous ones and those behind a backed-up lane
        // (`auto`: 3, 4); in 2 and 4 every read fails and falls back to fragments.
        let (lane_node_local, single_copy, pull_fails) = match one_copy {
            0 => (Vec::new(), None, false),
            n => {
                let policy = if n <= 2 { SingleCopy::Always } else { SingleCopy::Auto };
                (vec![true; lanes], Some(policy), n % 2 == 0)
            }
        };
        let cfg = SimConfig { ranks: 3, lanes, latency_ns: (500, 20_000), jitter_ns: 5_000, mtu: 700, eager_limit: 64, lane_rate, unexpected_cap, lane_node_local, single_copy, pull_fails, seed, ..Default::default() };
        run_against_reference(&ops, cfg, false)?;
    }

    /// Programs where most receives meet no unmatched message and no other posted
    /// receive, on lanes that are up: the blocking receives' immediate path takes most
    /// messages, and falls back where another envelope, a wildcard's order, a message
    /// out of order or a short buffer says so.
    #[test]
    fn blocking_receives_on_the_immediate_path_match_the_reference_model(
        ops in arb_matched_program(3),
        seed in any::<u64>(),
        lanes in 1usize..4,
    ) {
        let cfg = SimConfig { ranks: 3, lanes, latency_ns: (500, 20_000), jitter_ns: 5_000, mtu: 700, eager_limit: 64, seed, ..Default::default() };
        run_against_reference(&ops, cfg, true)?;
    }
}

/// Between ranks that can read each other's memory, a rendezvous message is read by its
/// receiver in one copy, by default as with `on`: an ORIGIN and the RTS, then a FIN,
/// and no fragment; matched before or after it arrives, truncated or not. A read that
/// fails asks for fragments.
#[test]
fn a_rendezvous_message_is_read_in_one_copy_where_the_receiver_can_read_the_sender() {
    for (pull_fails, policy) in [
        (false, SingleCopy::Auto),
        (false, SingleCopy::Always),
        (true, SingleCopy::Auto),
    ] {
        let cfg = SimConfig {
            lane_node_local: vec![true],
            single_copy: Some(policy),
            pull_fails,
            mtu: 1000,
            eager_limit: 512,
            ..Default::default()
        };
        let mut sim = Sim::new(cfg);
        // The lane is up first: an RTS written before the peer was connected (its lane
        // unknown yet) goes without an origin.
        sim.isend(0, 1, 0, 0, vec![1], false);
        sim.irecv(1, 0, 0, 0, 1);
        sim.run();
        let data = bytes(5, 100_000);
        // Posted first, then a message that comes before its receive, then a short one.
        let first = sim.irecv(1, 0, 0, 1, 100_000);
        let before = sim.frames;
        sim.isend(0, 1, 0, 1, data.clone(), false);
        sim.run();
        let frames_one = sim.frames - before;
        sim.isend(0, 1, 0, 2, data.clone(), true);
        sim.run();
        let second = sim.irecv(1, 0, 0, 2, 100_000);
        sim.isend(0, 1, 0, 3, data.clone(), false);
        let short = sim.irecv(1, 0, 0, 3, 600);
        sim.run();
        for (req, len) in [(first, 100_000), (second, 100_000), (short, 600)] {
            let st = received(&sim, 1, req);
            assert_eq!(st.count, len as u64);
            assert_eq!(
                &sim.recv_buf(1, req)[..len],
                &data[..len],
                "pull_fails {pull_fails}"
            );
        }
        assert!(received(&sim, 1, short).truncated);
        if pull_fails {
            assert_eq!(sim.pulls, 0);
            assert!(frames_one > 100, "fragments of 1000 bytes: {frames_one} frames");
        } else {
            assert_eq!(sim.pulls, 3);
            assert_eq!(frames_one, 3, "ORIGIN, RTS and FIN");
        }
    }
}

/// By default (`auto`) an eager-sized message goes through the lane, one at a time or in
/// a stream one way (a broadcast: sender and receiver then copy at once); when both
/// ranks send windows to each other (bibw), one that would wait behind a lane already
/// holding a message's worth is read in one copy, and those behind it follow. Small
/// messages go eagerly whatever the traffic; without the policy, or where the lanes
/// cannot read each other, nothing is read in one copy.
#[test]
fn an_eager_message_behind_a_lane_busy_both_ways_is_read_in_one_copy() {
    const LEN: usize = 32 << 10;
    for single_copy in [Some(SingleCopy::Auto), None] {
        let cfg = SimConfig {
            lane_node_local: vec![true],
            single_copy,
            // 64 KiB eager limit; 1 GB/s: a 32 KiB message keeps the lane busy 33 µs.
            eager_limit: 64 << 10,
            mtu: 8192,
            lane_rate: vec![1000],
            ..Default::default()
        };
        let mut sim = Sim::new(cfg);
        sim.isend(0, 1, 0, 0, vec![1], false);
        sim.irecv(1, 0, 0, 0, 1);
        sim.run();
        let data = bytes(3, LEN);
        // One at a time, then a window one way: through the lane.
        for tag in 1..=3 {
            let r = sim.irecv(1, 0, 0, tag, LEN);
            sim.isend(0, 1, 0, tag, data.clone(), false);
            sim.run();
            assert_eq!(sim.recv_buf(1, r), &data[..]);
        }
        let one_way: Vec<_> = (4..8).map(|tag| sim.irecv(1, 0, 0, tag, LEN)).collect();
        for tag in 4..8 {
            sim.isend(0, 1, 0, tag, data.clone(), false);
        }
        sim.run();
        for r in one_way {
            assert_eq!(sim.recv_buf(1, r), &data[..]);
        }
        assert_eq!(sim.pulls, 0, "{single_copy:?}: one at a time and one way");
        // Windows both ways: rank 1's goes first (its lane to rank 0 is busy when rank
        // 0 sends), then rank 0's, then small ones behind them.
        let to_0: Vec<_> = (10..14).map(|tag| sim.irecv(0, 1, 0, tag, LEN)).collect();
        let to_1: Vec<_> = (10..14).map(|tag| sim.irecv(1, 0, 0, tag, LEN)).collect();
        for tag in 10..14 {
            sim.isend(1, 0, 0, tag, data.clone(), false);
        }
        for tag in 10..14 {
            sim.isend(0, 1, 0, tag, data.clone(), false);
        }
        let small: Vec<_> = (20..24).map(|tag| sim.irecv(1, 0, 0, tag, 1000)).collect();
        for tag in 20..24 {
            sim.isend(0, 1, 0, tag, bytes(tag as u64, 1000), false);
        }
        sim.run();
        for (rank, r) in to_0
            .into_iter()
            .map(|r| (0, r))
            .chain(to_1.into_iter().map(|r| (1, r)))
        {
            assert_eq!(sim.recv_buf(rank, r), &data[..]);
        }
        for (r, tag) in small.into_iter().zip(20..24) {
            assert_eq!(sim.recv_buf(1, r), &bytes(tag, 1000)[..]);
        }
        let expected = if single_copy.is_some() { 3 } else { 0 };
        assert_eq!(
            sim.pulls, expected,
            "{single_copy:?}: rank 0's three behind its first"
        );
    }
}

/// With `on`, an eager-sized message of 16 KiB or more is read in one copy even one at a
/// time on an idle lane (its sender done when the receiver read it); a smaller one goes
/// through the lane, and by default (`auto`) so does the larger one.
#[test]
fn with_single_copy_on_an_eager_message_from_16_kib_is_read_in_one_copy() {
    for (policy, pulls) in [(SingleCopy::Always, 1), (SingleCopy::Auto, 0)] {
        let cfg = SimConfig {
            lane_node_local: vec![true],
            single_copy: Some(policy),
            eager_limit: 64 << 10,
            mtu: 8192,
            ..Default::default()
        };
        let mut sim = Sim::new(cfg);
        connect_every_pair(&mut sim);
        let (large, small) = (bytes(4, 16 << 10), bytes(5, (16 << 10) - 1));
        let r_large = sim.irecv(1, 0, 0, 1, large.len());
        let r_small = sim.irecv(1, 0, 0, 2, small.len());
        sim.isend(0, 1, 0, 1, large.clone(), false);
        sim.isend(0, 1, 0, 2, small.clone(), false);
        sim.run();
        assert_eq!(sim.recv_buf(1, r_large), &large[..]);
        assert_eq!(sim.recv_buf(1, r_small), &small[..]);
        assert_eq!(sim.pulls, pulls, "{policy:?}");
    }
}

/// A lane that is not node-local, or a sim whose lanes cannot read each other, sends
/// no ORIGIN: fragments as always.
#[test]
fn a_network_lane_moves_rendezvous_messages_in_fragments() {
    let cfg = SimConfig {
        single_copy: Some(SingleCopy::Always),
        mtu: 1000,
        eager_limit: 512,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    let r = sim.irecv(1, 0, 0, 1, 20_000);
    sim.isend(0, 1, 0, 1, bytes(9, 20_000), false);
    sim.run();
    assert_eq!(received(&sim, 1, r).count, 20_000);
    assert_eq!(sim.pulls, 0);
}
