//! Flow control of eager messages in the simulator: the memory a rank holds for
//! messages nobody has asked for yet stays under its cap, and everything completes.

mod common;

use common::bytes;

use pontoon_proto::eager_cost;
use pontoon_proto::sim::{Completion, Sim, SimConfig};
use pontoon_proto::wire::data::{DataRepr, Envelope};

/// The envelope of message `seq` from rank 0, context and tag 0.
fn match_envelope(seq: u32, msg_len: u64) -> Envelope {
    Envelope {
        ctx: 0,
        src: 0,
        tag: 0,
        seq,
        msg_len,
    }
}

/// 16 ranks each flood rank 0 with eager-sized messages while it has posted nothing.
/// Without flow control it would buffer all 16 × 40 KiB; with it, the senders switch
/// to rendezvous once their share is spent, and rank 0 never holds more than its cap.
#[test]
fn a_sixteen_to_one_eager_flood_stays_under_the_cap_and_completes() {
    let (senders, per_sender, len) = (16u32, 40usize, 1024usize);
    let cap = 64 * 1024;
    let cfg = SimConfig {
        ranks: senders + 1,
        eager_limit: 4096,
        mtu: 1500,
        unexpected_cap: cap,
        latency_ns: (500, 5_000),
        jitter_ns: 2_000,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    let mut sends = Vec::new();
    for i in 0..per_sender {
        for s in 1..=senders {
            let data = bytes(u64::from(s) * 1000 + i as u64, len);
            let req = sim.isend(s, 0, 0, i as i32, data.clone(), false);
            sends.push((s, i, data, req));
        }
    }
    sim.run();
    let held = sim.endpoint(0).buffered_peak();
    let total = u64::from(senders) * (per_sender * len) as u64;
    assert!(held <= cap, "rank 0 held {held} bytes, over its cap of {cap}");
    assert!(held > 0, "some messages went eagerly");
    assert!(total > 4 * cap, "the flood is well above the cap ({total} bytes)");

    // Now rank 0 receives everything, in an order unlike the arrival order.
    let recvs: Vec<_> = sends
        .iter()
        .rev()
        .map(|(s, i, _, _)| sim.irecv(0, *s as i32, 0, *i as i32, len))
        .collect();
    sim.run();
    for ((s, i, data, send), recv) in sends.iter().rev().zip(&recvs) {
        match sim.completion(0, *recv) {
            Some(Completion::Received(Ok(st))) => assert_eq!(st.count as usize, len),
            other => panic!("message {i} from rank {s}: {other:?}"),
        }
        assert_eq!(sim.recv_buf(0, *recv), &data[..], "message {i} from rank {s}");
        assert_eq!(sim.completion(*s, *send), Some(&Completion::Sent(Ok(()))));
    }
    assert!(sim.endpoint(0).buffered_peak() <= cap);
    // Credit came back: every sender can send eagerly again.
    let grant = cap / u64::from(senders);
    for s in 1..=senders {
        let credit = sim.endpoint(s).eager_credit(0);
        assert!(
            credit >= grant * 3 / 4,
            "rank {s} has {credit} of {grant} bytes of credit"
        );
    }
}

/// Ping-pong of small messages never runs out of credit: it is given back in batches.
#[test]
fn credit_comes_back_while_messages_are_received() {
    let cfg = SimConfig {
        unexpected_cap: 16 * eager_cost(100),
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    for i in 0..1000 {
        let r = sim.irecv(1, 0, 0, 0, 100);
        sim.send_now(0, 1, 0, 0, bytes(i, 100));
        sim.run();
        assert!(matches!(sim.completion(1, r), Some(Completion::Received(Ok(_)))));
    }
    assert!(sim.endpoint(0).eager_credit(1) >= 12 * eager_cost(100));
    // Every one of them went eagerly: the fast path never fell back to a rendezvous.
    assert_eq!(
        sim.frames,
        1000 + 1000 / 4,
        "1000 MATCH frames and a CREDIT per 4 messages"
    );
}

#[test]
fn an_eager_message_beyond_the_credit_is_a_protocol_error() {
    let mut ep = common::engine(1, 2, 2 * eager_cost(4096));
    let env = |seq| match_envelope(seq, 4096);
    assert!(ep.handle_header(0, &DataRepr::Match { env: env(0) }).is_ok());
    assert!(ep.handle_header(0, &DataRepr::Match { env: env(1) }).is_ok());
    let err = ep.handle_header(0, &DataRepr::Match { env: env(2) }).unwrap_err();
    assert!(err.what.contains("beyond its credit"), "{err}");
    // A peer cannot hand itself credit either.
    let err = ep
        .handle_header(0, &DataRepr::Credit { returned: 1 })
        .unwrap_err();
    assert!(err.what.contains("never given"), "{err}");
}

/// An unexpected eager message's buffer, once its payload is delivered and given back,
/// carries the next one: no allocation (and no fresh pages) per message.
#[test]
fn a_delivered_unexpected_message_lends_its_buffer_to_the_next() {
    use pontoon_proto::{Output, PayloadDest};
    let mut ep = common::engine(1, 2, 1 << 20);
    let env = |seq| match_envelope(seq, 4096);
    // The capacity of the buffer each message lands in.
    let arrive = |ep: &mut pontoon_proto::Endpoint, seq| {
        let (dest, token) = ep.handle_header(0, &DataRepr::Match { env: env(seq) }).unwrap();
        let PayloadDest::Engine(buf) = dest else {
            panic!("nothing posted: buffered");
        };
        let capacity = buf.capacity();
        ep.payload_done(0, token, Some(buf)).unwrap();
        capacity
    };
    assert_eq!(arrive(&mut ep, 0), 4096);
    ep.post_recv(7, 0, 0, 0, 4096);
    let mut delivered = std::iter::from_fn(|| ep.poll())
        .find_map(|o| match o {
            Output::Deliver { data, .. } => Some(data),
            _ => None,
        })
        .expect("the buffered message delivered");
    // Marked by its size: a fresh allocation would have 4096 bytes.
    delivered.reserve_exact(3 * 4096);
    let marked = delivered.capacity();
    ep.recycle(delivered);
    assert_eq!(
        arrive(&mut ep, 1),
        marked,
        "the buffer given back carries the next message"
    );
}

/// An ORIGIN on a lane this end cannot read the peer through is ignored: the RTS after
/// it gets its CTS, and nothing is read out of the peer's memory.
#[test]
fn an_origin_where_this_end_cannot_read_the_peer_is_ignored() {
    use pontoon_proto::wire::data::{DataHeader, Kind};
    use pontoon_proto::Output;
    let mut ep = common::engine(1, 2, 1 << 20);
    ep.handle_lane_up(0, common::KERNEL_LANE);
    while ep.poll().is_some() {}
    ep.post_recv(7, 0, 0, 0, 1 << 20);
    let env = match_envelope(0, 1 << 20);
    ep.handle_header(0, &DataRepr::Origin { send_id: 3, at: 4096 })
        .unwrap();
    ep.handle_header(0, &DataRepr::Rts { env, send_id: 3 }).unwrap();
    let outputs: Vec<Output> = std::iter::from_fn(|| ep.poll()).collect();
    assert!(!outputs.iter().any(|o| matches!(o, Output::Pull { .. })));
    assert!(outputs.iter().any(|o| matches!(o, Output::Transmit { header, .. }
        if DataHeader::new_checked(header.as_slice()).is_ok_and(|h| h.kind() == Kind::Cts))));
}

/// A blocking receive waiting on its lane (`await_now`) admits only the message that
/// could be buffered anyway: the next in sequence, of its envelope, within its capacity
/// and the credit the peer has left. Anything else goes the general way, which says what
/// is wrong with it.
#[test]
fn a_receive_waiting_on_its_lane_admits_only_what_the_credit_covers() {
    let mut ep = common::engine(1, 2, 2 * eager_cost(4096));
    ep.handle_lane_up(0, common::KERNEL_LANE).unwrap();
    let awaited = ep
        .await_now(0, 0, 0, 8192)
        .expect("nothing posted, nothing unmatched");
    assert!(awaited.admits(&match_envelope(0, 4096)));
    assert!(!awaited.admits(&match_envelope(1, 4096)), "out of sequence");
    assert!(
        !awaited.admits(&Envelope {
            tag: 7,
            ..match_envelope(0, 8)
        }),
        "another tag"
    );
    let small = ep.await_now(0, 0, 0, 100).unwrap();
    assert!(
        !small.admits(&match_envelope(0, 101)),
        "beyond the receive's capacity"
    );
    // A message that came before its receive waits unmatched: it could be the one.
    let (dest, token) = ep
        .handle_header(
            0,
            &DataRepr::Match {
                env: match_envelope(0, 4096),
            },
        )
        .unwrap();
    let pontoon_proto::PayloadDest::Engine(buf) = dest else {
        panic!("nothing posted: buffered");
    };
    ep.payload_done(0, token, Some(buf)).unwrap();
    assert_eq!(ep.await_now(0, 0, 0, 8192), None, "a message waits unmatched");
    // The credit: a message taken is given back in batches of a quarter of the grant,
    // so a small one stays charged for a while, and what is left of the grant bounds
    // the next message the immediate way.
    let grant = eager_cost(4096);
    let mut ep = common::engine(1, 2, grant);
    ep.handle_lane_up(0, common::KERNEL_LANE).unwrap();
    let first = ep.await_now(0, 0, 0, 8192).unwrap();
    let st = ep.took_now(&first, &match_envelope(0, 100));
    assert_eq!((st.source, st.count), (0, 100));
    let left = grant - eager_cost(100) - eager_cost(0);
    let second = ep.await_now(0, 0, 0, 8192).unwrap();
    assert!(second.admits(&match_envelope(1, left)), "within the credit left");
    assert!(
        !second.admits(&match_envelope(1, left + 1)),
        "beyond the credit left"
    );
}
