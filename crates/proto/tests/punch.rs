//! Hole punching in the deterministic simulator: a pair starts on a relayed lane,
//! punches a direct one while messages flow, and moves its traffic to it without
//! losing MPI's order; when every round fails, the relayed lane carries on alone.

mod common;

use common::bytes;

use pontoon_proto::punch::MAX_ROUNDS;
use pontoon_proto::sim::{Completion, Sim, SimConfig};

/// Lane 0 through a relay, lane 1 punched: faster, though not twice as fast, so only
/// the scoring of relayed lanes moves the traffic; frames sent on it overtake those
/// still on their way through the relay.
fn relayed_then_punched(failures: u8, seed: u64) -> Sim {
    Sim::new(SimConfig {
        lanes: 2,
        lane_latency_ns: Some(vec![60_000, 35_000]),
        lane_relayed: vec![true, false],
        punched_from: Some(1),
        punch_failures: failures,
        jitter_ns: 5_000,
        mtu: 1000,
        eager_limit: 512,
        seed,
        ..Default::default()
    })
}

/// Sends 300 messages of mixed sizes from 0 to 1 while the lanes change, then checks
/// that each arrived whole and in order.
fn stream_and_check(sim: &mut Sim) {
    let sizes: Vec<usize> = (0..300).map(|i| [0, 8, 511, 512, 513, 3000][i % 6]).collect();
    for (i, &n) in sizes.iter().enumerate() {
        sim.isend(0, 1, 0, 4, bytes(i as u64, n), false);
        sim.step();
    }
    sim.run();
    let recvs: Vec<u64> = sizes.iter().map(|_| sim.irecv(1, 0, 0, 4, 3000)).collect();
    sim.run();
    for (i, (&n, &r)) in sizes.iter().zip(&recvs).enumerate() {
        match sim.completion(1, r) {
            Some(Completion::Received(Ok(st))) => assert_eq!(st.count as usize, n, "message {i}"),
            other => panic!("message {i}: {other:?}"),
        }
        assert_eq!(
            &sim.recv_buf(1, r)[..n],
            &bytes(i as u64, n)[..],
            "message {i} data"
        );
    }
}

fn frames_on(sim: &Sim, lane: usize) -> u64 {
    sim.lane_frames.get(&(0, 1, lane)).copied().unwrap_or(0)
}

#[test]
fn traffic_moves_to_the_punched_lane_in_order_after_failed_rounds() {
    for seed in 1..=8 {
        let mut sim = relayed_then_punched(2, seed);
        stream_and_check(&mut sim);
        assert!(
            sim.endpoint(1).held_max() > 0,
            "the switch must let messages overtake each other (seed {seed})"
        );
        assert!(sim.punch_gave_up.is_empty(), "{:?}", sim.punch_gave_up);
        assert!(frames_on(&sim, 0) > 0, "the relayed lane carried the start");
        assert!(
            frames_on(&sim, 1) > 0,
            "the punched lane came up and carried the rest"
        );
        let relayed_before = frames_on(&sim, 0);
        stream_and_check(&mut sim);
        assert_eq!(
            frames_on(&sim, 0),
            relayed_before,
            "nothing more through the relay"
        );
    }
}

#[test]
fn when_every_round_fails_the_relayed_lane_carries_on() {
    let mut sim = relayed_then_punched(MAX_ROUNDS, 3);
    stream_and_check(&mut sim);
    assert_eq!(frames_on(&sim, 1), 0);
    let why: Vec<&str> = sim.punch_gave_up.iter().map(|g| g.1.as_str()).collect();
    assert_eq!(why, vec!["4 rounds failed, the last: connection refused"]);
}
