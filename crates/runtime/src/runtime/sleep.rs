//! Where a rank's lanes are watched with epoll, and how it sleeps (see `waiter.rs` for why
//! a socket lane is in one epoll set at most, and a rank's only one in none while it
//! busy-polls). The shared-memory bell is with the rarely busy sockets and rings only
//! while the rank sleeps.

use std::time::{Duration, Instant};

use proto::LaneId;
use transport::Link;

use std::os::fd::AsFd;

use super::Runtime;
use crate::clock;
use crate::fabric::tcp::wireup::Incoming;
use crate::waiter::{Sleeper, Waiter};

/// A sleep the rank is ready for ([`Runtime::ready_to_sleep`]): how long at most, the
/// wait itself, and what to undo after it ([`Runtime::woke`]).
pub struct Asleep {
    max: Duration,
    sleeper: Sleeper,
    /// Every socket lane was watched for this sleep only.
    temporary: bool,
    /// Lanes watched for room to write for this sleep only.
    blocked: Vec<LaneId>,
}

/// Where a blocking call is in its wait: passes that found nothing, and when its
/// busy-polling ends (from the first clock reading: a call that completes within
/// [`Idle::CLOCK_EVERY`] idle passes, the latency-critical case, never reads it).
#[derive(Default)]
pub struct Idle {
    /// The wait's first pass was taken ([`Runtime::wait_pass`]).
    started: bool,
    passes: u32,
    spin_until: Option<Instant>,
    /// For waits on something that peers publish without a fence (the collective
    /// area): the limit of the sleeps that may follow such a publication closely, the
    /// first one and each after a wake-up before its time (see `transport::shm::coll`).
    short_sleep: Option<Duration>,
    long_since_short: bool,
    /// Sleeps after the first pass that found nothing, without busy-polling first.
    at_once: bool,
}

impl Idle {
    /// The clock is read only every this many idle passes: it costs as much as a third
    /// of an idle pass, and every nanosecond of the pass delays noticing a message that
    /// has just arrived.
    const CLOCK_EVERY: u32 = 64;

    /// A wait whose first sleep, and each sleep after an early wake-up, ends after
    /// `max` at the latest.
    pub(super) fn short_sleeps_within(max: Duration) -> Idle {
        Idle {
            short_sleep: Some(max),
            ..Idle::default()
        }
    }

    /// A wait that sleeps as soon as a pass finds nothing: a progress thread's, which
    /// must not take CPU time from the application's computation while nothing moves.
    pub fn sleeping_at_once() -> Idle {
        Idle {
            at_once: true,
            ..Idle::default()
        }
    }

    /// Counts a pass that found nothing; true once busy-polling has lasted `spin`.
    pub(super) fn spun_out(&mut self, spin: Duration) -> bool {
        if self.at_once {
            return true;
        }
        self.passes = self.passes.wrapping_add(1);
        self.passes.is_multiple_of(Idle::CLOCK_EVERY) && {
            let now = Instant::now();
            now >= *self.spin_until.get_or_insert(now + spin)
        }
    }

    /// Whether the wait's first pass is still to come (then marks it taken).
    pub(super) fn first_pass(&mut self) -> bool {
        !std::mem::replace(&mut self.started, true)
    }
}

impl Asleep {
    /// The sleep itself: needs nothing of the runtime, so the thread may let it go first.
    pub fn sleep(&self) {
        self.sleeper.sleep(self.max);
    }
}

impl Runtime {
    /// After a progress pass of a blocking call that found nothing: busy-polls on (yields
    /// the CPU between passes if ranks share CPUs) for `PONTOON_SPIN_US`, then sleeps,
    /// unless `ready` (see [`Runtime::sleep_unless`]); `before_sleep` runs first.
    pub(super) fn idle(
        &mut self,
        idle: &mut Idle,
        before_sleep: impl FnOnce(&Runtime),
        ready: &mut dyn FnMut(&Runtime) -> bool,
    ) {
        if idle.spun_out(self.cfg.spin) {
            before_sleep(self);
            self.idle_sleep(idle, ready);
        } else if self.passes.yield_when_idle {
            std::thread::yield_now();
        }
    }

    /// The sleep of a wait that busy-polled long enough ([`Runtime::idle`]).
    pub(super) fn idle_sleep(&mut self, idle: &mut Idle, ready: &mut dyn FnMut(&Runtime) -> bool) {
        let short = idle.short_sleep.filter(|_| !idle.long_since_short);
        let max = short.unwrap_or(super::IDLE_SLEEP);
        let slept = Instant::now();
        self.sleep_unless(max, ready);
        // Woken before its time by something else: the next sleep starts as the
        // first did, perhaps as a peer publishes.
        idle.long_since_short = short.is_some() || slept.elapsed() >= max;
    }

    /// Gets the rank ready for the sleep of a wait that busy-polled long enough, for a
    /// caller that sleeps without the runtime ([`Asleep::sleep`], then
    /// [`Runtime::woke`]); `None`: no sleep to take, pass again.
    pub fn ready_for_idle_sleep(&mut self) -> Option<Asleep> {
        self.ready_to_sleep(super::IDLE_SLEEP, &mut |_| false)
    }

    /// Sleeps until a lane or socket is ready, or `max` passed.
    pub(super) fn sleep(&mut self, max: Duration) {
        self.sleep_unless(max, &mut |_| false);
    }

    /// [`Runtime::sleep`] for a rank waiting on something only shared memory shows (the
    /// node's collective area): `ready` is asked again once peers ring this rank's bell
    /// from now on, so a change made just before is not slept through.
    pub(super) fn sleep_unless(&mut self, max: Duration, ready: &mut dyn FnMut(&Runtime) -> bool) {
        if let Some(asleep) = self.ready_to_sleep(max, ready) {
            asleep.sleep();
            self.woke(asleep);
        }
    }

    /// Gets the rank ready to sleep up to `max` (its bell armed, its lanes watched) and
    /// says how, or returns `None` when there is no sleep to take (something is due, or
    /// ready already: the rank then is as before). The sleep itself needs nothing of the
    /// runtime ([`Asleep::sleeper`]); [`Runtime::woke`] clears up after it.
    pub(super) fn ready_to_sleep(
        &mut self,
        max: Duration,
        ready: &mut dyn FnMut(&Runtime) -> bool,
    ) -> Option<Asleep> {
        // A punching dial must leave at its moment, not after a wake-up.
        if self
            .fabrics
            .tcp
            .punching
            .dial_due_before(std::time::Instant::now() + max.min(Duration::from_millis(2)))
        {
            return None;
        }
        // Outgoing connects are short-lived: wake up often while they run.
        let max = if self.fabrics.tcp.outgoing.is_empty() && !self.fabrics.tcp.punching.dialling() {
            max
        } else {
            Duration::from_millis(1)
        };
        // A lane's own timers (raw Ethernet: retransmissions, acknowledgements) cut
        // the sleep short; no fd would announce them.
        let lane_timer = self
            .lanes
            .polled()
            .iter()
            .filter_map(|&k| self.lanes.get(k)?.link.wake_within())
            .min();
        let max = lane_timer.map_or(max, |t| max.min(t));
        // So do the engine's (a batch of coalesced messages leaves at its time), and the
        // set-ups' (a peer's deadline, or the retry after this rank gave way; one that
        // is due while the peer is still connecting waits for the connect to end, which
        // has timers of its own).
        let now = clock::now();
        let attempt = clock::nanos(self.cfg.attempt_timeout);
        let setup = self.dialing.setups.poll_timeout(attempt).filter(|&due| due > now);
        // Handshakes answered and joins to shared memory wake the rank through their
        // sockets, or when their time is up (the wake-up looks at the wire-up: one
        // already up waits for that, as a set-up's does).
        let handshakes = (self.fabrics.tcp.incoming.iter().map(Incoming::deadline))
            .chain(self.fabrics.shm.join_deadlines())
            .map(|d| d.at().saturating_add(1))
            .filter(|&due| due > now)
            .min();
        let timer = [self.ep.poll_timeout(), setup, handshakes]
            .into_iter()
            .flatten()
            .min()
            .map(|due| clock::duration(due.saturating_sub(now)));
        let max = timer.map_or(max, |t| max.min(t));
        if max.is_zero() {
            return None;
        }
        // Shared-memory lanes ring this rank's bell from now on; a frame or a lane
        // announced already means there is no sleep to take.
        if !self.arm_shm() {
            return None;
        }
        if self.signalled_waiting() || ready(self) {
            self.disarm_shm();
            return None;
        }
        for i in 0..self.lanes.polled().len() {
            let lane = self.lanes.polled()[i];
            if let Some(l) = self.lanes.get_mut(lane) {
                if !l.link.arm_wakeup() {
                    self.disarm_shm();
                    return None;
                }
            }
        }
        // A socket lane blocked on a full send buffer wakes the rank when there is room
        // again (`watch_links` registers those for writing itself).
        let temporary = !self.passes.links_watched;
        let mut blocked = Vec::new();
        let watched = if temporary {
            self.watch_links()
        } else {
            blocked.extend(self.socket_lanes().filter(|&k| self.queued(k)));
            blocked
                .iter()
                .try_for_each(|&k| self.passes.ready.set_writable(self.fd(k), key(k), true))
        };
        // Without every lane in the set, sleep briefly: a message would not wake us.
        let max = if watched.is_ok() {
            max
        } else {
            max.min(Duration::from_millis(1))
        };
        self.watch_raw_sockets(true);
        Some(Asleep {
            max,
            sleeper: self.passes.ready.sleeper(),
            temporary,
            blocked,
        })
    }

    /// Clears up after a sleep that [`Runtime::ready_to_sleep`] got the rank ready for.
    pub fn woke(&mut self, asleep: Asleep) {
        self.passes.ready.drain_waker();
        self.disarm_shm();
        self.watch_raw_sockets(false);
        // (Unless another thread watched them for good meanwhile: `add_lane`.)
        if asleep.temporary && !self.passes.links_watched {
            self.socket_lanes()
                .for_each(|k| self.passes.ready.unwatch(self.fd(k)));
        } else {
            // Those still open: another thread may have closed one during the sleep.
            for &k in &asleep.blocked {
                if let Some(fd) = self.lanes.get(k).and_then(|l| l.link.fd()) {
                    let _ = self.passes.ready.set_writable(fd, key(k), false);
                }
            }
        }
        // Look at wire-up, doorbells and the coordinator on the next pass.
        self.passes.polls = 1023;
        self.passes.next_housekeeping = std::time::Instant::now();
    }

    /// Raw sockets that are readable on every frame (eth ports and lanes) wake the rank
    /// only while it sleeps: watched, every arriving frame would cost an epoll callback
    /// on the busy path. A frame that came before the registration still wakes it (a
    /// fresh registration reports a socket already readable).
    fn watch_raw_sockets(&self, watch: bool) {
        let lanes = self.lanes.polled().iter().filter_map(|&k| self.lanes.get(k));
        let fds = lanes
            .filter(|l| l.link.watch_while_sleeping())
            .filter_map(|l| l.link.fd())
            .map(|fd| (fd, 0))
            .chain(
                self.fabrics
                    .eth
                    .wake
                    .iter()
                    .map(|fd| (fd.as_fd(), Waiter::LISTENING)),
            );
        for (fd, key) in fds {
            if watch {
                self.waiter.watch_readable(fd, key);
            } else {
                self.waiter.unwatch(fd);
            }
        }
    }

    /// Adds every socket lane to the ready set (all or none; blocked ones also for writing).
    pub(super) fn watch_links(&self) -> std::io::Result<()> {
        let lanes: Vec<LaneId> = self.socket_lanes().collect();
        for (i, &k) in lanes.iter().enumerate() {
            if let Err(e) = self.passes.ready.watch(self.fd(k), key(k), self.queued(k)) {
                lanes[..i]
                    .iter()
                    .for_each(|&k| self.passes.ready.unwatch(self.fd(k)));
                return Err(e);
            }
        }
        Ok(())
    }

    /// The lanes that say with their fd when to read them (sockets).
    fn socket_lanes(&self) -> impl Iterator<Item = LaneId> + '_ {
        self.lanes.sockets().iter().copied()
    }

    fn fd(&self, lane: LaneId) -> std::os::fd::BorrowedFd<'_> {
        self.lanes
            .get(lane)
            .and_then(|l| l.link.fd())
            .expect("a socket lane has an fd")
    }

    fn queued(&self, lane: LaneId) -> bool {
        self.lanes.get(lane).is_some_and(|l| l.link.tx_queued() > 0)
    }
}

/// A lane's name in the ready set.
fn key(lane: LaneId) -> u64 {
    u64::from(lane.0)
}
