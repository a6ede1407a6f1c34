//! Loom's check of the locking core: every interleaving of a few threads (up to three
//! preemptions each run) for mutual exclusion under the lock, the hand-over between
//! passes, and no lost wake-up of a thread sleeping in the room or watching the lanes.
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p pontoon-futex --release` (`make
//! race-check`); without the cfg this file is empty.

#![cfg(loom)]

use std::time::Duration;

use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use pontoon_futex::{Lock, Sleepers};

fn check(f: impl Fn() + Sync + Send + 'static) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(f);
}

/// Counts the threads between lock and unlock: never more than one.
#[derive(Default)]
struct Inside(AtomicUsize);

impl Inside {
    fn visit(&self) {
        assert_eq!(
            self.0.fetch_add(1, Ordering::SeqCst),
            0,
            "two threads hold the lock"
        );
        thread::yield_now();
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn three_threads_never_hold_the_lock_together() {
    check(|| {
        let shared = Arc::new((Lock::new(), Inside::default()));
        let others: Vec<_> = (0..2)
            .map(|_| {
                let shared = shared.clone();
                thread::spawn(move || {
                    shared.0.lock();
                    shared.1.visit();
                    shared.0.unlock();
                })
            })
            .collect();
        shared.0.lock();
        shared.1.visit();
        shared.0.unlock();
        for t in others {
            t.join().unwrap();
        }
        assert!(
            !shared.0.wanted(),
            "the lock left marked as wanted with nobody waiting"
        );
    });
}

#[test]
fn a_holder_hands_the_lock_to_a_waiting_thread_and_takes_it_back() {
    check(|| {
        let shared = Arc::new((Lock::new(), Inside::default()));
        let other = {
            let shared = shared.clone();
            thread::spawn(move || {
                shared.0.lock();
                shared.1.visit();
                shared.0.unlock();
            })
        };
        shared.0.lock();
        shared.1.visit();
        shared.0.let_waiting_in();
        shared.1.visit();
        shared.0.unlock();
        other.join().unwrap();
    });
}

/// What the threads of one rank share in these models: the library's lock, the
/// sleepers, the engine's activity counter and a request that finishes (both used
/// under the lock), and the lanes' wake-up (the runtime's eventfd: a counter).
struct Rank {
    lock: Lock,
    sleepers: Sleepers,
    activity: AtomicU64,
    finished: AtomicBool,
    lanes: Mutex<u64>,
    lanes_ready: Condvar,
}

impl Rank {
    fn new() -> Arc<Rank> {
        Arc::new(Rank {
            lock: Lock::new(),
            sleepers: Sleepers::new(),
            activity: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            lanes: Mutex::new(0),
            lanes_ready: Condvar::new(),
        })
    }

    fn ring(&self) {
        *self.lanes.lock().unwrap() += 1;
        self.lanes_ready.notify_all();
    }

    /// A blocking wait as `pontoon::threads` does it: under the lock, done or asleep,
    /// the first sleeper on the lanes (armed before it lets go of the lock) and any
    /// other in the room.
    fn wait_for_the_request(&self) {
        self.lock.lock();
        while !self.finished.load(Ordering::Relaxed) {
            if !self.sleepers.watched() {
                self.sleepers.start_watching();
                let armed = *self.lanes.lock().unwrap();
                self.lock.unlock();
                let mut rang = self.lanes.lock().unwrap();
                while *rang == armed {
                    rang = self.lanes_ready.wait(rang).unwrap();
                }
                drop(rang);
                self.lock.lock();
                self.sleepers.stop_watching();
            } else {
                let seat = self.sleepers.room().enter();
                self.lock.unlock();
                self.sleepers.room().sleep(&seat, Duration::from_millis(50));
                self.sleepers.room().leave(seat);
                self.lock.lock();
            }
        }
        self.lock.unlock();
    }

    /// `n` threads of `rank`, each waiting for the request.
    fn waiting(rank: &Arc<Rank>, n: usize) -> Vec<thread::JoinHandle<()>> {
        (0..n)
            .map(|_| {
                let rank = rank.clone();
                thread::spawn(move || rank.wait_for_the_request())
            })
            .collect()
    }

    /// Another thread's call that finishes the request, then leaves the library.
    fn finish_the_request(&self) {
        self.lock.lock();
        self.finished.store(true, Ordering::Relaxed);
        let moved = self.activity.fetch_add(1, Ordering::Relaxed) + 1;
        self.sleepers.announce(moved, || self.ring());
        self.lock.unlock();
    }
}

#[test]
fn a_thread_asleep_on_the_lanes_wakes_when_another_finishes_its_request() {
    check(|| {
        let rank = Rank::new();
        let waiters = Rank::waiting(&rank, 1);
        rank.finish_the_request();
        waiters.into_iter().for_each(|w| w.join().unwrap());
    });
}

#[test]
fn the_watcher_and_a_thread_in_the_room_both_wake() {
    check(|| {
        let rank = Rank::new();
        let waiters = Rank::waiting(&rank, 2);
        rank.finish_the_request();
        waiters.into_iter().for_each(|w| w.join().unwrap());
    });
}

#[test]
fn an_announcement_with_nothing_new_wakes_nobody_and_loses_nothing() {
    check(|| {
        let rank = Rank::new();
        let waiters = Rank::waiting(&rank, 1);
        // A call that moved nothing: the same activity as announced before.
        rank.lock.lock();
        rank.sleepers.announce(0, || rank.ring());
        rank.lock.unlock();
        rank.finish_the_request();
        waiters.into_iter().for_each(|w| w.join().unwrap());
    });
}
