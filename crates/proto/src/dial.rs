//! Wire-up's timers, as data: when to start the next connect to a peer's candidate
//! addresses, when one attempt or the whole set-up has run out of time, and when an
//! unanswered handshake datagram goes again. The runtime does the I/O and says what
//! happened; time comes in as an argument (the caller's clock, or the simulator's), as
//! in [`crate::reliable`].

use crate::{Nanos, Rank};

/// At most this many connects to one peer are in flight at once.
pub const MAX_RACING: usize = 3;

/// How long attempts may take and how they are spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaceTiming {
    /// One connect, and then one handshake.
    pub attempt: Nanos,
    /// A new connect starts this long after the last while none has succeeded.
    pub stagger: Nanos,
    /// The whole set-up to one peer.
    pub total: Nanos,
}

/// Where an attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Its connect (or its exchange with a relay) is under way.
    Connecting,
    /// Connected, waiting for its turn at the handshake (one at a time, in candidate
    /// order): no time limit of its own.
    Connected,
    /// Its HELLO is out.
    Handshake,
}

/// What the caller does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaceStep {
    /// Start connecting to candidate `cand`.
    Start(usize),
    /// The attempt at `cand` ran out of time in `stage` (it is no longer running).
    TimedOut { cand: usize, stage: Stage },
    /// The whole set-up ran out of time: end every attempt.
    GiveUp,
}

#[derive(Debug, Clone, Copy)]
struct Running {
    cand: usize,
    stage: Stage,
    /// When its current stage began.
    since: Nanos,
}

/// Connecting to one peer: candidates (in order of preference) raced with staggered
/// starts — a new connect every `stagger` while none has succeeded, at most
/// [`MAX_RACING`] at once —, each connect and each handshake with its own time limit,
/// the whole within `total`.
#[derive(Debug, Clone)]
pub struct Race {
    timing: RaceTiming,
    candidates: usize,
    next: usize,
    deadline: Nanos,
    last_start: Option<Nanos>,
    running: Vec<Running>,
    given_up: bool,
}

impl Race {
    pub fn new(candidates: usize, timing: RaceTiming, now: Nanos) -> Race {
        Race {
            timing,
            candidates,
            next: 0,
            deadline: now.saturating_add(timing.total),
            last_start: None,
            running: Vec::new(),
            given_up: false,
        }
    }

    /// A race whose first candidate is already connected (a punched connection).
    pub fn connected_at_start(timing: RaceTiming, now: Nanos) -> Race {
        let mut r = Race::new(1, timing, now);
        r.next = 1;
        r.running.push(Running {
            cand: 0,
            stage: Stage::Connected,
            since: now,
        });
        r
    }

    /// The next thing to do at `now`, if any; call until `None`.
    pub fn poll(&mut self, now: Nanos) -> Option<RaceStep> {
        if self.given_up {
            return None;
        }
        if now > self.deadline {
            self.given_up = true;
            self.running.clear();
            return Some(RaceStep::GiveUp);
        }
        if let Some(i) = self
            .running
            .iter()
            .position(|r| self.expiry(r).is_some_and(|t| now > t))
        {
            let r = self.running.remove(i);
            return Some(RaceStep::TimedOut {
                cand: r.cand,
                stage: r.stage,
            });
        }
        let busy = self.running.len();
        let stagger_over = self
            .last_start
            .is_none_or(|t| now.saturating_sub(t) >= self.timing.stagger);
        if self.next < self.candidates && (busy == 0 || (stagger_over && busy < MAX_RACING)) {
            let cand = self.next;
            self.next += 1;
            self.last_start = Some(now);
            self.running.push(Running {
                cand,
                stage: Stage::Connecting,
                since: now,
            });
            return Some(RaceStep::Start(cand));
        }
        None
    }

    pub fn timing(&self) -> RaceTiming {
        self.timing
    }

    /// When [`Race::poll`] may have something to do next without a report coming in.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        if self.given_up {
            return None;
        }
        let expiries = self.running.iter().filter_map(|r| self.expiry(r));
        let next_start = match self.running.len() {
            _ if self.next >= self.candidates => None,
            0 => Some(0), // at once
            n if n < MAX_RACING => Some(
                self.last_start
                    .map_or(0, |t| t.saturating_add(self.timing.stagger)),
            ),
            _ => None,
        };
        // Strictly after a limit is "over": the deadlines fire a nanosecond late.
        expiries
            .map(|t| t + 1)
            .chain(next_start)
            .chain([self.deadline + 1])
            .min()
    }

    fn expiry(&self, r: &Running) -> Option<Nanos> {
        (r.stage != Stage::Connected).then(|| r.since.saturating_add(self.timing.attempt))
    }

    /// `cand`'s connect succeeded: it waits for its turn at the handshake.
    pub fn connected(&mut self, cand: usize, now: Nanos) {
        self.set(cand, Stage::Connected, now);
    }

    /// `cand`'s HELLO went out.
    pub fn handshake_began(&mut self, cand: usize, now: Nanos) {
        self.set(cand, Stage::Handshake, now);
    }

    fn set(&mut self, cand: usize, stage: Stage, now: Nanos) {
        if let Some(r) = self.running.iter_mut().find(|r| r.cand == cand) {
            *r = Running {
                cand,
                stage,
                since: now,
            };
        }
    }

    /// The attempt at `cand` ended (failed, or won).
    pub fn ended(&mut self, cand: usize) {
        self.running.retain(|r| r.cand != cand);
    }

    /// The attempts running, with their stage.
    pub fn running(&self) -> impl Iterator<Item = (usize, Stage)> + '_ {
        self.running.iter().map(|r| (r.cand, r.stage))
    }

    /// Whether every candidate was tried and none is running.
    pub fn exhausted(&self) -> bool {
        self.running.is_empty() && self.next >= self.candidates
    }

    /// Candidates not started (yet), in order.
    pub fn untried(&self) -> std::ops::Range<usize> {
        self.next..self.candidates
    }
}

/// A datagram handshake: its first message goes again every `every` until answered,
/// and the attempt ends after `limit` (datagrams may be lost; the other end answers a
/// repeat with the same answer).
#[derive(Debug, Clone, Copy)]
pub struct Resend {
    every: Nanos,
    sent: Nanos,
    deadline: Nanos,
}

/// What a [`Resend`] wants at some moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResendStep {
    Wait,
    /// Send the message again.
    Send,
    /// Out of time.
    Expired,
}

impl Resend {
    /// The first message went out at `now`.
    pub fn new(every: Nanos, limit: Nanos, now: Nanos) -> Resend {
        Resend {
            every,
            sent: now,
            deadline: now.saturating_add(limit),
        }
    }

    pub fn poll(&mut self, now: Nanos) -> ResendStep {
        if now > self.deadline {
            ResendStep::Expired
        } else if now.saturating_sub(self.sent) >= self.every {
            self.sent = now;
            ResendStep::Send
        } else {
            ResendStep::Wait
        }
    }

    pub fn poll_timeout(&self) -> Nanos {
        self.sent.saturating_add(self.every).min(self.deadline + 1)
    }
}

/// The time limit of one handshake this rank answers or joins, as data: an accepted
/// connection's, a join to the node's shared memory (either end), the wait for the node's
/// members to join, or an exchange with the launcher's coordinator. Until it passes, the
/// handshake's socket wakes the rank; [`Deadline::at`] is when the rank must wake up
/// without it, [`Deadline::remaining`] how long a blocking call may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    at: Nanos,
    limit: Nanos,
}

impl Deadline {
    /// A handshake that started at `now` and must end within `limit`.
    pub fn after(now: Nanos, limit: Nanos) -> Deadline {
        Deadline {
            at: now.saturating_add(limit),
            limit,
        }
    }

    /// Whether its time is up at `now`.
    pub fn passed(&self, now: Nanos) -> bool {
        now > self.at
    }

    /// When it passes (just after this).
    pub fn at(&self) -> Nanos {
        self.at
    }

    /// How long is left at `now`; `None` once nothing is (a blocking call given no
    /// time would wait for ever).
    pub fn remaining(&self, now: Nanos) -> Option<Nanos> {
        Some(self.at.saturating_sub(now)).filter(|&left| left > 0)
    }

    /// The limit it was given.
    pub fn limit(&self) -> Nanos {
        self.limit
    }

    /// The limit it was given, in milliseconds (for the report of a failure).
    pub fn limit_ms(&self) -> u64 {
        self.limit / 1_000_000
    }
}

/// The timers of setting up first lanes, per peer: by when a peer must be reached (or
/// its operations fail), and when a peer this rank yielded to (its HELLO crossed ours
/// and won) is dialled again because its connection never came.
#[derive(Debug, Clone, Default)]
pub struct Setups {
    /// Per peer: the deadline, and when this rank yielded to it, if it did.
    peers: std::collections::BTreeMap<Rank, Setup>,
}

#[derive(Debug, Clone, Copy)]
struct Setup {
    deadline: Nanos,
    /// When this rank last yielded, until the retry that follows is due.
    yielded_at: Option<Nanos>,
    /// Whether it ever yielded during this set-up (for the report of a failure).
    yielded: bool,
}

impl Setups {
    /// A first lane to `peer` is wanted from `now`: it must be up within `limit`. Keeps
    /// an earlier deadline (the peer's own connection may be on its way); `restart`
    /// gives a fresh one.
    pub fn begin(&mut self, peer: Rank, now: Nanos, limit: Nanos, restart: bool) {
        let deadline = now.saturating_add(limit);
        let s = self.peers.entry(peer).or_insert(Setup {
            deadline,
            yielded_at: None,
            yielded: false,
        });
        if restart {
            s.deadline = deadline;
        }
    }

    /// This rank yielded to `peer` at `now`: its connection is expected. (Without a
    /// set-up under way there is no deadline to retry within: nothing to do.)
    pub fn yielded(&mut self, peer: Rank, now: Nanos) {
        if let Some(s) = self.peers.get_mut(&peer) {
            s.yielded_at = Some(now);
            s.yielded = true;
        }
    }

    /// Whether a set-up to `peer` is under way.
    pub fn pending(&self, peer: Rank) -> bool {
        self.peers.contains_key(&peer)
    }

    /// The time left before `peer`'s deadline (0 once it passed; none without a set-up).
    pub fn time_left(&self, peer: Rank, now: Nanos) -> Option<Nanos> {
        Some(self.peers.get(&peer)?.deadline.saturating_sub(now))
    }

    /// The first lane to `peer` is up: its timers are done.
    pub fn done(&mut self, peer: Rank) {
        self.peers.remove(&peer);
    }

    /// Peers yielded to more than `attempt` before `now` whose connection has not come
    /// (`waiting` says which are still neither connected nor connecting), with the time
    /// left before their deadline: dial them again within it. A peer whose deadline has
    /// passed is left to [`Setups::overdue`].
    pub fn retries_due(
        &mut self,
        now: Nanos,
        attempt: Nanos,
        waiting: impl Fn(Rank) -> bool,
    ) -> Vec<(Rank, Nanos)> {
        let mut due = Vec::new();
        for (&peer, s) in &mut self.peers {
            let Some(at) = s.yielded_at else { continue };
            if now.saturating_sub(at) > attempt && waiting(peer) {
                s.yielded_at = None;
                if s.deadline > now {
                    due.push((peer, s.deadline - now));
                }
            }
        }
        due
    }

    /// Peers past their deadline that `waiting` says are still neither connected nor
    /// connecting, with whether this rank had yielded to them: they have failed, and
    /// their timers are removed.
    pub fn overdue(&mut self, now: Nanos, waiting: impl Fn(Rank) -> bool) -> Vec<(Rank, bool)> {
        let late: Vec<(Rank, bool)> = self
            .peers
            .iter()
            .filter(|(&p, s)| now > s.deadline && waiting(p))
            .map(|(&p, s)| (p, s.yielded))
            .collect();
        for (p, _) in &late {
            self.peers.remove(p);
        }
        late
    }

    /// The earliest deadline or retry moment (`attempt` after a yield).
    pub fn poll_timeout(&self, attempt: Nanos) -> Option<Nanos> {
        self.peers
            .values()
            .map(|s| {
                let retry = s.yielded_at.map_or(Nanos::MAX, |t| t.saturating_add(attempt) + 1);
                retry.min(s.deadline + 1)
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;
    const TIMING: RaceTiming = RaceTiming {
        attempt: 1500 * MS,
        stagger: 100 * MS,
        total: 4000 * MS,
    };

    fn drain(r: &mut Race, now: Nanos) -> Vec<RaceStep> {
        std::iter::from_fn(|| r.poll(now)).collect()
    }

    #[test]
    fn a_handshake_deadline_passes_only_after_its_limit() {
        let d = Deadline::after(5 * MS, 1000 * MS);
        assert_eq!(d.at(), 1005 * MS);
        assert!(!d.passed(1005 * MS), "a handshake ending at its limit is in time");
        assert!(d.passed(1005 * MS + 1));
        assert_eq!(d.limit_ms(), 1000);
        assert_eq!(d.remaining(5 * MS), Some(1000 * MS));
        assert_eq!(d.remaining(1004 * MS), Some(MS));
        assert_eq!(d.remaining(1005 * MS), None, "no zero timeout: it would block");
        assert_eq!(d.remaining(2000 * MS), None);
        assert_eq!(
            Deadline::after(Nanos::MAX - 1, MS).at(),
            Nanos::MAX,
            "no overflow"
        );
    }

    #[test]
    fn connects_start_staggered_at_most_three_at_once() {
        let mut r = Race::new(5, TIMING, 0);
        assert_eq!(drain(&mut r, 0), [RaceStep::Start(0)]);
        assert_eq!(r.poll_timeout(), Some(100 * MS));
        assert_eq!(drain(&mut r, 99 * MS), []);
        assert_eq!(drain(&mut r, 100 * MS), [RaceStep::Start(1)]);
        assert_eq!(drain(&mut r, 200 * MS), [RaceStep::Start(2)]);
        assert_eq!(drain(&mut r, 300 * MS), [], "three are racing");
        // One fails: the next starts at once, the stagger being over.
        r.ended(1);
        assert_eq!(drain(&mut r, 300 * MS), [RaceStep::Start(3)]);
        assert_eq!(r.untried(), 4..5);
    }

    #[test]
    fn a_failed_only_attempt_is_followed_at_once() {
        let mut r = Race::new(2, TIMING, 0);
        assert_eq!(drain(&mut r, 0), [RaceStep::Start(0)]);
        r.ended(0);
        assert_eq!(
            drain(&mut r, MS),
            [RaceStep::Start(1)],
            "no stagger with nothing running"
        );
        r.ended(1);
        assert!(r.exhausted());
    }

    #[test]
    fn each_stage_has_its_limit_and_waiting_for_the_handshake_none() {
        let mut r = Race::new(2, TIMING, 0);
        drain(&mut r, 0);
        r.connected(0, 10 * MS);
        assert_eq!(drain(&mut r, 100 * MS), [RaceStep::Start(1)]);
        assert_eq!(
            r.poll_timeout(),
            Some(1600 * MS + 1),
            "only the connect of 1 is timed"
        );
        assert_eq!(
            drain(&mut r, 1600 * MS + 1),
            [RaceStep::TimedOut {
                cand: 1,
                stage: Stage::Connecting
            }]
        );
        r.handshake_began(0, 2000 * MS);
        assert_eq!(
            drain(&mut r, 3500 * MS + 1),
            [RaceStep::TimedOut {
                cand: 0,
                stage: Stage::Handshake
            }]
        );
        assert!(r.exhausted());
    }

    #[test]
    fn the_whole_set_up_gives_up_at_its_deadline_once() {
        let mut r = Race::new(100, TIMING, 5);
        let mut now = 5;
        let mut started = 0;
        loop {
            let steps = drain(&mut r, now);
            started += steps.iter().filter(|s| matches!(s, RaceStep::Start(_))).count();
            if steps.contains(&RaceStep::GiveUp) {
                break;
            }
            now = r.poll_timeout().expect("a race has a deadline");
        }
        assert_eq!(now, 4000 * MS + 6);
        assert!((3..100).contains(&started), "{started}");
        assert_eq!(r.poll(now + MS), None);
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn a_punched_connection_goes_straight_to_its_handshake() {
        let mut r = Race::connected_at_start(TIMING, 0);
        assert_eq!(drain(&mut r, 0), []);
        assert_eq!(r.running().collect::<Vec<_>>(), [(0, Stage::Connected)]);
        assert!(!r.exhausted());
    }

    #[test]
    fn a_datagram_handshake_goes_again_until_its_limit() {
        let mut h = Resend::new(25 * MS, 100 * MS, 0);
        assert_eq!(h.poll(24 * MS), ResendStep::Wait);
        assert_eq!(h.poll_timeout(), 25 * MS);
        assert_eq!(h.poll(25 * MS), ResendStep::Send);
        assert_eq!(h.poll(26 * MS), ResendStep::Wait);
        assert_eq!(h.poll(100 * MS), ResendStep::Send);
        assert_eq!(h.poll_timeout(), 100 * MS + 1);
        assert_eq!(h.poll(100 * MS + 1), ResendStep::Expired);
    }

    #[test]
    fn a_peer_not_reached_by_its_deadline_fails_once_and_a_connecting_one_waits() {
        let mut s = Setups::default();
        s.begin(1, 0, 1000 * MS, false);
        s.begin(2, 0, 1000 * MS, false);
        // A second wish for peer 1 keeps its deadline; a restart moves it.
        s.begin(1, 500 * MS, 1000 * MS, false);
        s.begin(2, 500 * MS, 1000 * MS, true);
        assert_eq!(s.poll_timeout(1500 * MS), Some(1000 * MS + 1));
        assert_eq!(s.time_left(2, 600 * MS), Some(900 * MS));
        assert_eq!(s.time_left(2, 2000 * MS), Some(0));
        assert_eq!(s.time_left(9, 0), None);
        assert_eq!(s.overdue(1000 * MS, |_| true), vec![], "not before the deadline");
        assert_eq!(s.overdue(1000 * MS + 1, |p| p != 1), vec![], "1 is connecting");
        assert_eq!(s.overdue(1001 * MS, |_| true), vec![(1, false)]);
        assert_eq!(s.overdue(1001 * MS, |_| true), vec![], "failed once");
        assert!(!s.pending(1));
        s.done(2);
        assert_eq!(s.overdue(10_000 * MS, |_| true), vec![], "2 got its lane");
        assert_eq!(s.poll_timeout(1500 * MS), None);
    }

    #[test]
    fn a_yielded_peer_whose_connection_never_comes_is_dialled_again_within_its_deadline() {
        let attempt = 1500 * MS;
        let mut s = Setups::default();
        s.begin(3, 0, 4000 * MS, true);
        s.yielded(3, 100 * MS);
        assert_eq!(s.poll_timeout(attempt), Some(1600 * MS + 1));
        assert_eq!(s.retries_due(1600 * MS, attempt, |_| true), vec![]);
        assert_eq!(
            s.retries_due(1700 * MS, attempt, |_| false),
            vec![],
            "its connection is in"
        );
        assert_eq!(s.retries_due(1700 * MS, attempt, |_| true), vec![(3, 2300 * MS)]);
        assert_eq!(
            s.retries_due(1800 * MS, attempt, |_| true),
            vec![],
            "retried once"
        );
        // Yielded again too late for a retry: the deadline decides.
        s.yielded(3, 3000 * MS);
        assert_eq!(s.retries_due(4600 * MS, attempt, |_| true), vec![]);
        assert_eq!(
            s.overdue(4600 * MS, |_| true),
            vec![(3, true)],
            "the report says it yielded"
        );
    }
}
