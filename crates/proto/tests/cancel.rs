//! Cancelling sends (MPI_Cancel): a message no receive has matched is withdrawn, eager
//! or rendezvous, unexpected, held back or not yet arrived; one that matched is
//! delivered and its send completes as usual; a withdrawn eager message gives its
//! memory and credit back.

mod common;

use common::{bytes, received};

use pontoon_proto::sim::{Completion, Sim, SimConfig};
use pontoon_proto::wire::data::{DataHeader, DataRepr, Envelope, Kind};
use pontoon_proto::{eager_cost, Output, PayloadDest};

/// Sends of every kind no receive has matched (eager, synchronous, rendezvous, to a peer
/// and to self) are withdrawn: each completes as cancelled, a receive posted afterwards
/// gets the message sent after them, and the eager credit is whole again.
#[test]
fn sends_no_receive_matched_are_withdrawn() {
    let cfg = SimConfig {
        eager_limit: 4096,
        unexpected_cap: 64 * eager_cost(4096),
        seed: 3,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    // Bring the lane up, so that the eager credit is known.
    let first = sim.isend(0, 1, 0, 1, bytes(0, 8), false);
    let r = sim.irecv(1, 0, 0, 1, 8);
    sim.run();
    assert_eq!(sim.completion(0, first), Some(&Completion::Sent(Ok(()))));
    received(&sim, 1, r);
    for (dest, tag) in [(1, 5), (0, 6)] {
        let kinds = [
            (100, false),
            (1, true),
            (0, false),
            (20_000, false),
            (300_000, true),
        ];
        let sends: Vec<u64> = kinds
            .iter()
            .map(|&(len, sync)| sim.isend(0, dest, 0, tag, bytes(len as u64, len), sync))
            .collect();
        sim.run();
        assert!(dest == 0 || sim.endpoint(1).unexpected_len() == sends.len());
        for &s in &sends {
            sim.cancel_send(0, s);
        }
        sim.run();
        for (&s, kind) in sends.iter().zip(kinds) {
            assert_eq!(sim.cancel_answer(0, s), Some(true), "{kind:?} to {dest}");
            assert_eq!(
                sim.completion(0, s),
                Some(&Completion::Cancelled),
                "{kind:?} to {dest}"
            );
        }
        let last = bytes(9, 64);
        sim.isend(0, dest, 0, tag, last.clone(), false);
        let r = sim.irecv(dest, 0, 0, tag, 1 << 20);
        sim.run();
        assert_eq!(
            received(&sim, dest, r).count,
            64,
            "the message after the cancelled ones"
        );
        assert_eq!(&sim.recv_buf(dest, r)[..64], &last[..]);
    }
    assert_eq!(sim.endpoint(1).unexpected_len(), 0);
    assert_eq!(sim.endpoint(0).unexpected_len(), 0);
    assert_eq!(
        sim.endpoint(1).buffered(),
        0,
        "the withdrawn messages' memory is free"
    );
    assert_eq!(sim.endpoint(0).pending(), 0);
}

/// A withdrawn eager message gives its credit back: the sender may send as much eagerly
/// again as before it.
#[test]
fn a_withdrawn_eager_message_gives_its_credit_back() {
    let cfg = SimConfig {
        eager_limit: 4096,
        // A return is due with every message of 4 KiB.
        unexpected_cap: 4 * eager_cost(4096),
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    let r = sim.irecv(1, 0, 0, 1, 8);
    sim.isend(0, 1, 0, 1, bytes(0, 8), false);
    sim.run();
    received(&sim, 1, r);
    let full = sim.endpoint(0).eager_credit(1);
    let sends: Vec<u64> = (0..3)
        .map(|i| sim.isend(0, 1, 0, 2, bytes(i, 4096), false))
        .collect();
    sim.run();
    assert!(
        sim.endpoint(0).eager_credit(1) < full - 2 * eager_cost(4096),
        "spent"
    );
    for &s in &sends {
        sim.cancel_send(0, s);
    }
    sim.run();
    assert!(sends
        .iter()
        .all(|&s| sim.completion(0, s) == Some(&Completion::Cancelled)));
    assert_eq!(
        sim.endpoint(0).eager_credit(1),
        4 * eager_cost(4096),
        "the credit came back whole (the first message's too, with the first return)"
    );
}

/// A send a receive matched is not withdrawn: the message arrives whole, and the send
/// completes as it would have (a rendezvous one after its data went).
#[test]
fn a_matched_send_is_delivered_and_not_withdrawn() {
    let cfg = SimConfig {
        eager_limit: 4096,
        mtu: 1000,
        latency_ns: (50_000, 50_000),
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    for len in [100usize, 200_000] {
        let data = bytes(len as u64, len);
        let r = sim.irecv(1, 0, 0, 3, len);
        let s = sim.isend(0, 1, 0, 3, data.clone(), false);
        // Until the receive matched (the RTS is there and the CTS on its way back).
        sim.run_until(sim.now() + 60_000);
        sim.cancel_send(0, s);
        sim.run();
        assert_eq!(sim.cancel_answer(0, s), Some(false), "{len}");
        assert_eq!(sim.completion(0, s), Some(&Completion::Sent(Ok(()))), "{len}");
        assert_eq!(received(&sim, 1, r).count, len as u64);
        assert!(sim.recv_buf(1, r) == &data[..], "{len}: data intact");
    }
}

/// The envelope of message `seq` from rank 0 in context 2 with tag 7.
fn env(seq: u32, msg_len: u64) -> Envelope {
    Envelope {
        ctx: 2,
        src: 0,
        tag: 7,
        seq,
        msg_len,
    }
}

/// The CANCELLED answers among the engine's outputs: (send id, withdrawn).
fn answers(ep: &mut pontoon_proto::Endpoint) -> Vec<(u64, bool)> {
    std::iter::from_fn(|| ep.poll())
        .filter_map(|o| match o {
            Output::Transmit { header, .. } => {
                let h = DataHeader::new_checked(header.as_slice()).ok()?;
                (h.kind() == Kind::Cancelled).then(|| match DataRepr::parse(&h) {
                    DataRepr::Cancelled { send_id, withdrawn } => (send_id, withdrawn),
                    _ => unreachable!(),
                })
            }
            _ => None,
        })
        .collect()
}

/// A message that arrives, is buffered and completes.
fn arrive(ep: &mut pontoon_proto::Endpoint, seq: u32, len: u64) {
    let (dest, token) = ep
        .handle_header(0, &DataRepr::Match { env: env(seq, len) })
        .unwrap();
    let buf = match dest {
        PayloadDest::Engine(mut v) => {
            v.fill(seq as u8);
            Some(v)
        }
        _ => None,
    };
    ep.payload_done(0, token, buf).unwrap();
}

/// A CANCEL that overtakes its message (on another lane), or finds it held back behind
/// an earlier one, withdraws it all the same: dropped when its turn comes, its credit
/// back, and the messages around it delivered in order.
#[test]
fn a_message_cancelled_before_its_turn_is_dropped_when_it_comes() {
    let mut ep = common::engine(1, 2, 1 << 20);
    ep.handle_lane_up(0, common::KERNEL_LANE);
    while ep.poll().is_some() {}
    let cancel = |seq, send_id| DataRepr::Cancel {
        ctx: 2,
        tag: 7,
        seq,
        send_id,
    };
    // Message 2 arrives before 0 and 1 (held back), message 1 not at all yet.
    arrive(&mut ep, 2, 30);
    ep.handle_header(0, &cancel(2, 502)).unwrap();
    ep.handle_header(0, &cancel(1, 501)).unwrap();
    assert_eq!(
        answers(&mut ep),
        vec![(502, true)],
        "held back: withdrawn at once"
    );
    arrive(&mut ep, 0, 10);
    assert!(answers(&mut ep).is_empty());
    arrive(&mut ep, 1, 20);
    assert_eq!(answers(&mut ep), vec![(501, true)], "withdrawn on arrival");
    arrive(&mut ep, 3, 40);
    assert_eq!(ep.unexpected_len(), 2, "messages 0 and 3 remain");
    ep.post_recv(70, 0, 2, 7, 100);
    ep.post_recv(71, 0, 2, 7, 100);
    let counts: Vec<u64> = std::iter::from_fn(|| ep.poll())
        .filter_map(|o| match o {
            Output::RecvDone { result, .. } => Some(result.unwrap().count),
            _ => None,
        })
        .collect();
    assert_eq!(counts, vec![10, 40]);
    // Matched already: not withdrawn.
    ep.handle_header(0, &cancel(3, 503)).unwrap();
    assert_eq!(answers(&mut ep), vec![(503, false)]);
    // A peer cannot pile up cancels of messages it never sends.
    let mut refused = None;
    for seq in 100..100 + pontoon_proto::CANCELS_AHEAD_MAX as u32 + 1 {
        if let Err(e) = ep.handle_header(0, &cancel(seq, u64::from(seq))) {
            refused = Some(e);
            break;
        }
    }
    assert!(refused.is_some_and(|e| e.what.contains("cancels ahead")));
}

/// An answer that withdraws a send nobody asked to cancel is a protocol violation.
#[test]
fn an_answer_to_no_cancel_is_refused() {
    let mut ep = common::engine(1, 2, 1 << 20);
    ep.handle_lane_up(0, common::KERNEL_LANE);
    let bogus = DataRepr::Cancelled {
        send_id: 42,
        withdrawn: true,
    };
    let err = ep.handle_header(0, &bogus).unwrap_err();
    assert!(err.what.contains("no cancel was asked"), "{err}");
    // "Not withdrawn" for a send that finished meanwhile is fine.
    let late = DataRepr::Cancelled {
        send_id: 42,
        withdrawn: false,
    };
    assert!(ep.handle_header(0, &late).is_ok());
}

/// A rendezvous send read in one copy completes with FIN and no CTS: its cancel, which
/// the receiver answers "matched" perhaps only after that FIN, ends there too (it hung).
/// Unmatched, the same send is withdrawn.
#[test]
fn a_send_read_in_one_copy_answers_its_cancel_by_its_fin() {
    let cfg = SimConfig {
        lane_node_local: vec![true],
        single_copy: Some(pontoon_proto::SingleCopy::Always),
        mtu: 1000,
        eager_limit: 512,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg);
    sim.isend(0, 1, 0, 0, vec![1], false);
    sim.irecv(1, 0, 0, 0, 1);
    sim.run();
    let data = bytes(5, 100_000);
    let r = sim.irecv(1, 0, 0, 1, 100_000);
    let s = sim.isend(0, 1, 0, 1, data.clone(), false);
    sim.cancel_send(0, s);
    sim.run();
    assert!(sim.pulls > 0, "read in one copy");
    assert_eq!(sim.cancel_answer(0, s), Some(false));
    assert_eq!(sim.completion(0, s), Some(&Completion::Sent(Ok(()))));
    assert!(sim.recv_buf(1, r) == &data[..]);
    let s = sim.isend(0, 1, 0, 2, data, false);
    sim.run();
    sim.cancel_send(0, s);
    sim.run();
    assert_eq!(sim.completion(0, s), Some(&Completion::Cancelled));
    assert_eq!(sim.endpoint(0).pending(), 0);
    assert_eq!(sim.endpoint(1).unexpected_len(), 0);
}
