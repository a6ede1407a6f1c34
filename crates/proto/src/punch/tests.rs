//! Two punchers joined by a relayed lane with given one-way delays, as the runtime
//! drives them: frames delivered after their delay, ports bound at once, dials recorded.

use super::*;
use proptest::prelude::*;

/// A dial handed out: (rank, round, to, at, lead).
type Dialled = (Rank, u8, SocketAddr, Nanos, bool);

struct Pair {
    p: [Puncher; 2],
    /// One-way delay from rank i to the other.
    delay: [Nanos; 2],
    /// Frames in flight: (arrival, to, msg).
    flight: Vec<(Nanos, Rank, PunchMsg)>,
    dials: Vec<Dialled>,
    gave_up: Vec<(Rank, String)>,
    binds: Vec<(Rank, u8)>,
    /// Rank 1 has no address of its own to offer.
    mute: bool,
}

fn addr(rank: Rank, round: u8) -> SocketAddr {
    SocketAddr::from(([198, 51, 100, rank as u8 + 1], 40000 + u16::from(round)))
}

impl Pair {
    fn new(delay: [Nanos; 2]) -> Pair {
        Pair {
            p: [Puncher::new(0), Puncher::new(1)],
            delay,
            flight: Vec::new(),
            dials: Vec::new(),
            gave_up: Vec::new(),
            binds: Vec::new(),
            mute: false,
        }
    }

    /// Handles every event of both punchers at `now`, then delivers frames in time order.
    fn run(&mut self, mut now: Nanos) {
        loop {
            for me in 0..2u32 {
                while let Some(ev) = self.p[me as usize].poll() {
                    match ev {
                        PunchEvent::Send { peer, msg } => {
                            self.flight.push((now + self.delay[me as usize], peer, msg))
                        }
                        PunchEvent::Bind { peer, round, .. } => {
                            self.binds.push((me, round));
                            let mine = if self.mute && me == 1 {
                                Err("no address outside".to_string())
                            } else {
                                Ok(addr(me, round))
                            };
                            self.p[me as usize].address(peer, round, mine, now);
                        }
                        PunchEvent::Dial {
                            round, to, at, lead, ..
                        } => self.dials.push((me, round, to, at, lead)),
                        PunchEvent::GaveUp { why, .. } => self.gave_up.push((me, why)),
                    }
                }
            }
            self.flight.sort_by_key(|f| std::cmp::Reverse(f.0));
            let Some((at, to, msg)) = self.flight.pop() else {
                return;
            };
            now = at;
            self.p[to as usize].handle(1 - to, msg, now);
        }
    }

    /// Both dials of `round` fail.
    fn fail(&mut self, round: u8, now: Nanos) {
        self.p[0].failed(1, round, "connection refused");
        self.p[1].failed(0, round, "connection refused");
        self.run(now);
    }
}

#[test]
fn both_ends_dial_the_other_at_the_same_moment_over_a_symmetric_path() {
    let mut pair = Pair::new([5_000, 5_000]);
    pair.p[0].start(1);
    pair.run(0);
    assert_eq!(
        pair.dials,
        vec![
            (0, 1, addr(1, 1), 15_000, true),
            (1, 1, addr(0, 1), 15_000, false)
        ],
        "offer at 0, answer back at 10 µs, SYNC out then: both dial 5 µs later"
    );
}

proptest! {
    /// Over a path slower one way than the other, the dials are apart by half the
    /// difference: what timing from a round trip can do.
    #[test]
    fn dials_are_apart_by_at_most_half_the_asymmetry(there in 1u64..50_000_000, back in 1u64..50_000_000) {
        let mut pair = Pair::new([there, back]);
        pair.p[0].start(1);
        pair.run(0);
        prop_assert_eq!(pair.dials.len(), 2);
        let gap = pair.dials[0].3.abs_diff(pair.dials[1].3);
        prop_assert!(gap <= there.abs_diff(back) / 2 + 1, "{:?}", pair.dials);
        prop_assert_eq!(pair.dials.iter().filter(|d| d.4).count(), 1, "one side leads");
    }
}

#[test]
fn every_round_binds_fresh_ports_and_the_last_failure_ends_it() {
    let mut pair = Pair::new([1_000, 1_000]);
    pair.p[0].start(1);
    pair.run(0);
    for round in 1..MAX_ROUNDS {
        pair.fail(round, 10_000 * u64::from(round));
        assert!(pair.gave_up.is_empty());
    }
    pair.fail(MAX_ROUNDS, 100_000);
    let rounds: Vec<u8> = (1..=MAX_ROUNDS).collect();
    for me in 0..2 {
        let bound: Vec<u8> = pair.binds.iter().filter(|b| b.0 == me).map(|b| b.1).collect();
        assert_eq!(bound, rounds, "rank {me} binds once per round");
    }
    let dialled: Vec<SocketAddr> = pair.dials.iter().filter(|d| d.0 == 0).map(|d| d.2).collect();
    assert_eq!(dialled, rounds.iter().map(|&r| addr(1, r)).collect::<Vec<_>>());
    assert_eq!(pair.gave_up.len(), 1);
    assert!(pair.gave_up[0]
        .1
        .contains("4 rounds failed, the last: connection refused"));
    assert!(!pair.p[0].active(1));
}

#[test]
fn a_peer_with_no_address_ends_the_punch_at_once_with_the_reason() {
    let mut pair = Pair::new([1_000, 1_000]);
    pair.mute = true;
    pair.p[0].start(1);
    pair.run(0);
    assert!(pair.dials.is_empty());
    let why: Vec<&str> = pair.gave_up.iter().map(|g| g.1.as_str()).collect();
    assert_eq!(why.len(), 2, "{why:?}");
    assert!(why.contains(&"no address outside"));
    assert!(why.iter().any(|w| w.contains("rank 1 cannot punch")), "{why:?}");
    assert!(!pair.p[0].active(1) && !pair.p[1].active(0));
}

#[test]
fn a_success_ends_the_punch_on_both_sides() {
    let mut pair = Pair::new([1_000, 1_000]);
    pair.p[0].start(1);
    pair.run(0);
    pair.p[0].succeeded(1);
    pair.p[1].succeeded(0);
    assert!(!pair.p[0].active(1) && !pair.p[1].active(0));
    pair.p[0].start(1);
    assert!(pair.p[0].active(1), "a later punch may start anew");
}

#[test]
fn when_both_start_the_lower_rank_leads() {
    let mut pair = Pair::new([2_000, 3_000]);
    pair.p[0].start(1);
    pair.p[1].start(0);
    pair.run(0);
    let leads: Vec<(Rank, bool)> = pair.dials.iter().map(|d| (d.0, d.4)).collect();
    assert_eq!(leads.len(), 2, "{:?}", pair.dials);
    assert!(leads.contains(&(0, true)) && leads.contains(&(1, false)));
}

#[test]
fn stale_and_out_of_range_frames_change_nothing() {
    let offer = |round| PunchMsg {
        step: PunchStep::Offer,
        round,
        addr: Some(addr(0, round)),
    };
    let mut b = Puncher::new(1);
    b.handle(0, offer(MAX_ROUNDS + 1), 0);
    b.handle(0, offer(0), 0);
    assert!(b.poll().is_none(), "rounds beyond the limit bind nothing");
    b.handle(0, offer(2), 0);
    assert_eq!(
        b.poll(),
        Some(PunchEvent::Bind {
            peer: 0,
            round: 2,
            like: Some(addr(0, 2))
        })
    );
    b.handle(0, offer(2), 0);
    b.handle(0, offer(1), 0);
    assert!(b.poll().is_none(), "rounds only go up");
    let sync = PunchMsg {
        step: PunchStep::Sync,
        round: 2,
        addr: None,
    };
    b.handle(0, sync, 0);
    assert!(b.poll().is_none(), "no SYNC before the answer");
    let mut a = Puncher::new(0);
    a.start(1);
    assert_eq!(
        a.poll(),
        Some(PunchEvent::Bind {
            peer: 1,
            round: 1,
            like: None
        })
    );
    a.address(1, 1, Ok(addr(0, 1)), 0);
    a.poll();
    let answer = |round| PunchMsg {
        step: PunchStep::Answer,
        round,
        addr: Some(addr(1, round)),
    };
    a.handle(1, answer(3), 10);
    assert!(a.poll().is_none(), "an answer to another round");
    a.handle(1, answer(1), 10);
    assert!(matches!(a.poll(), Some(PunchEvent::Send { .. })));
    assert!(matches!(a.poll(), Some(PunchEvent::Dial { at: 15, .. })));
    a.handle(1, answer(1), 20);
    assert!(a.poll().is_none(), "a repeated answer");
}
