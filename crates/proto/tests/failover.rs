//! Lane failover in the simulator: a lane that breaks in the middle of a rendezvous
//! loses its fragments in flight; they go again on the lanes left, and the message
//! arrives whole.

mod common;

use common::bytes;

use pontoon_proto::sim::{Completion, Sim, SimConfig};
use pontoon_proto::Failure;

/// Three lanes: lane 0 is the fastest (eager messages and control frames), all three
/// pull fragments. Lane 2 breaks while fragments are in flight on it both ways.
fn three_lanes(seed: u64) -> Sim {
    Sim::new(SimConfig {
        lanes: 3,
        lane_latency_ns: Some(vec![1_000, 3_000, 5_000]),
        lane_rate: vec![400, 300, 200],
        jitter_ns: 500,
        mtu: 1000,
        seed,
        ..Default::default()
    })
}

#[test]
fn a_lane_lost_in_the_middle_of_a_rendezvous_fails_over_to_the_others() {
    for seed in 0..20 {
        let mut sim = three_lanes(seed);
        let (a, b) = (bytes(seed, 1_000_000), bytes(seed + 100, 700_000));
        // Both directions at once, so each side has fragments in flight on the lane.
        let ra = sim.irecv(1, 0, 0, 1, a.len());
        let rb = sim.irecv(0, 1, 0, 2, b.len());
        let sa = sim.isend(0, 1, 0, 1, a.clone(), false);
        let sb = sim.isend(1, 0, 0, 2, b.clone(), false);
        // Break lane 2 once it has carried part of the transfer (at a seeded point).
        let when = 20 + seed * 8;
        while sim.lane_frames.get(&(0, 1, 2)).copied().unwrap_or(0) < when {
            assert!(sim.step(), "the transfer ended before the lane broke");
        }
        let before = (sim.lane_frames[&(0, 1, 2)], sim.lane_frames[&(1, 0, 2)]);
        sim.break_lane(0, 1, 2);
        sim.run();
        assert_eq!(
            sim.completion(1, ra),
            Some(&Completion::Received(Ok(status(0, 1, a.len()))))
        );
        assert_eq!(
            sim.completion(0, rb),
            Some(&Completion::Received(Ok(status(1, 2, b.len()))))
        );
        assert!(sim.recv_buf(1, ra) == &a[..], "seed {seed}: payload 0->1 intact");
        assert!(sim.recv_buf(0, rb) == &b[..], "seed {seed}: payload 1->0 intact");
        assert_eq!(sim.completion(0, sa), Some(&Completion::Sent(Ok(()))));
        assert_eq!(sim.completion(1, sb), Some(&Completion::Sent(Ok(()))));
        assert_eq!(
            (sim.lane_frames[&(0, 1, 2)], sim.lane_frames[&(1, 0, 2)]),
            before,
            "nothing went on the broken lane"
        );
        // The peers live on: a later message of each kind goes through.
        let r = sim.irecv(1, 0, 0, 3, 300_000);
        let big = bytes(seed + 7, 300_000);
        sim.isend(0, 1, 0, 3, big.clone(), false);
        let r2 = sim.irecv(1, 0, 0, 4, 8);
        sim.isend(0, 1, 0, 4, bytes(1, 8), false);
        sim.run();
        assert!(sim.recv_buf(1, r) == &big[..]);
        assert!(matches!(sim.completion(1, r2), Some(Completion::Received(Ok(_)))));
    }
}

fn status(source: u32, tag: i32, count: usize) -> pontoon_proto::Status {
    pontoon_proto::Status {
        source,
        tag,
        count: count as u64,
        truncated: false,
        cancelled: false,
    }
}

/// Fragments that made it before the break are sent again too (the sender cannot know
/// they arrived); the receiver counts each byte once, also when its receive completed
/// before the copies arrive.
#[test]
fn fragments_sent_twice_are_counted_once() {
    let mut sim = three_lanes(3);
    let data = bytes(5, 200_000);
    let r = sim.irecv(1, 0, 0, 1, data.len());
    sim.isend(0, 1, 0, 1, data.clone(), false);
    // Let nearly everything arrive, then break a lane whose fragments all got through.
    while !matches!(sim.completion(1, r), Some(Completion::Received(_))) {
        assert!(sim.step());
    }
    sim.break_lane(0, 1, 1);
    sim.run();
    assert!(sim.recv_buf(1, r) == &data[..]);
    let r2 = sim.irecv(1, 0, 0, 2, data.len());
    sim.isend(0, 1, 0, 2, data.clone(), false);
    sim.run();
    assert_eq!(
        sim.completion(1, r2),
        Some(&Completion::Received(Ok(status(0, 2, data.len()))))
    );
}

/// Frames lost with the lane of eager messages and control frames are not sent again
/// yet: losing it fails the peer, and every operation with it ends with that error
/// instead of hanging.
#[test]
fn losing_the_control_lane_fails_the_peer_instead_of_hanging() {
    let mut sim = three_lanes(1);
    let data = bytes(9, 500_000);
    let r = sim.irecv(1, 0, 0, 1, data.len());
    let s = sim.isend(0, 1, 0, 1, data, false);
    while sim.lane_frames.get(&(0, 1, 1)).copied().unwrap_or(0) < 20 {
        assert!(sim.step());
    }
    sim.break_lane(0, 1, 0);
    sim.run();
    let failed = |c: Option<&Completion>| match c {
        Some(Completion::Received(Err(Failure::PeerFailed { cause, .. })))
        | Some(Completion::Sent(Err(Failure::PeerFailed { cause, .. }))) => cause.contains("broken"),
        _ => false,
    };
    assert!(failed(sim.completion(1, r)), "{:?}", sim.completion(1, r));
    assert!(failed(sim.completion(0, s)), "{:?}", sim.completion(0, s));
}

mod replay {
    //! The engine's side of a control lane's replay: a MATCH whose payload a broken lane
    //! cut off, sent again from the sender's copy.
    use super::common::{engine, KERNEL_LANE};
    use pontoon_proto::wire::data::{DataRepr, Envelope};
    use pontoon_proto::{Caps, Endpoint, LaneLoss, Output, PayloadDest};

    fn endpoint() -> Endpoint {
        let mut ep = engine(1, 2, 1 << 20);
        ep.handle_lane_up(0, KERNEL_LANE).unwrap();
        ep.handle_lane_up(0, KERNEL_LANE).unwrap();
        ep
    }

    fn matched(seq: u32, len: u64) -> DataRepr {
        DataRepr::Match {
            env: Envelope {
                ctx: 0,
                src: 0,
                tag: 3,
                seq,
                msg_len: len,
            },
        }
    }

    fn completed(ep: &mut Endpoint, req: u64) -> bool {
        std::iter::from_fn(|| ep.poll())
            .any(|o| matches!(o, Output::RecvDone { req: r, result: Ok(_) } if r == req))
    }

    #[test]
    fn a_matched_message_cut_off_is_completed_by_its_copy() {
        let mut ep = endpoint();
        ep.post_recv(7, 0, 0, 3, 100);
        let (dest, token) = ep.handle_header(0, &matched(0, 100)).unwrap();
        assert!(matches!(dest, PayloadDest::User { req: 7, .. }));
        // The lane breaks with the payload part-way: the copy comes on the other lane.
        ep.payload_abandoned(0, token);
        let lane = ep.control_lane(0).unwrap();
        assert_eq!(ep.handle_lane_down(0, lane, "reset", true), LaneLoss::FailedOver);
        assert!(!completed(&mut ep, 7));
        let (dest, token) = ep
            .handle_header(0, &matched(0, 100))
            .expect("the copy is welcome");
        assert!(matches!(dest, PayloadDest::User { req: 7, len: 100, .. }));
        ep.payload_done(0, token, None).unwrap();
        assert!(completed(&mut ep, 7));
        // A third copy is a duplicate: refused as before.
        assert!(ep.handle_header(0, &matched(0, 100)).is_err());
    }

    #[test]
    fn an_unexpected_message_cut_off_gives_back_its_credit_and_arrives_once() {
        let mut ep = endpoint();
        let (_, token) = ep.handle_header(0, &matched(0, 4000)).unwrap();
        ep.payload_abandoned(0, token);
        // Sent again, it is charged anew: without the credit given back, 260 such copies
        // would exceed the peer's share of the cap (1 MiB).
        for _ in 0..260 {
            let (_, token) = ep.handle_header(0, &matched(0, 4000)).unwrap();
            ep.payload_abandoned(0, token);
        }
        let (_, token) = ep.handle_header(0, &matched(0, 4000)).unwrap();
        ep.payload_done(0, token, Some(vec![5; 4000])).unwrap();
        ep.post_recv(9, 0, 0, 3, 4000);
        assert!(completed(&mut ep, 9));
    }

    #[test]
    fn without_copies_losing_the_control_lane_fails_the_peer() {
        let mut ep = endpoint();
        let lane = ep.control_lane(0).unwrap();
        assert_eq!(ep.handle_lane_down(0, lane, "reset", false), LaneLoss::PeerFailed);
    }

    #[test]
    fn without_copies_losing_the_kernel_lane_beside_a_raw_one_fails_the_peer() {
        // The raw lane carries control frames and small eager messages, the TCP lane the
        // eager messages above a datagram: losing it loses those, unless it kept copies.
        let raw = Caps {
            latency_ns: 500,
            bandwidth: 1 << 28,
            raw: true,
            datagram: 1400,
            single_copy: false,
            ..KERNEL_LANE
        };
        for (replayable, loss) in [(false, LaneLoss::PeerFailed), (true, LaneLoss::FailedOver)] {
            let mut ep = endpoint();
            let tcp = ep.control_lane(0).unwrap();
            let raw = ep.handle_lane_up(0, raw).unwrap();
            assert_eq!(ep.control_lane(0), Some(raw), "the raw lane takes control frames");
            assert_eq!(ep.handle_lane_down(0, tcp, "reset", replayable), loss);
        }
    }
}
