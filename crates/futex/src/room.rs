//! Where the threads of a blocking call sleep without the library's lock: the first on
//! the rank's lanes (the watcher, woken by the lanes or by a bell the caller rings),
//! every other one in the room, woken when a thread holding the lock saw the engine move.

use std::time::Duration;

use crate::word::{const_unless_loom, AtomicBool, AtomicU32, AtomicU64, Ordering, Word};

/// Threads sleeping until the next announcement. Every method may be called without
/// the library's lock; [`Room::enter`] must come before the lock is let go of, so that
/// an announcement made after it is never missed.
pub struct Room {
    /// Bumped by each announcement: the word the sleepers wait on.
    announcements: Word,
    sleepers: AtomicU32,
}

/// A place in the [`Room`]: the announcements its thread has seen.
#[must_use = "a seat is given back with Room::leave"]
pub struct Seat {
    seen: u32,
}

impl Room {
    /// Takes a seat: the thread sleeps next, until an announcement made after this.
    pub fn enter(&self) -> Seat {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        Seat {
            seen: self.announcements.load(Ordering::SeqCst),
        }
    }

    /// Sleeps until an announcement after [`Room::enter`], or `max` at most (a safety
    /// net: nothing should need it).
    pub fn sleep(&self, seat: &Seat, max: Duration) {
        self.announcements.wait(seat.seen, Some(max));
    }

    pub fn leave(&self, _seat: Seat) {
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes up to `n` of the sleepers (none if the room is empty: the fast path).
    pub fn wake(&self, n: u32) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.announcements.fetch_add(1, Ordering::SeqCst);
            self.announcements.wake(n);
        }
    }
}

/// The threads of one rank that sleep in blocking calls: at most one watches the lanes,
/// the others sit in the room. Called holding the library's lock, except the room's
/// sleep.
pub struct Sleepers {
    watching: AtomicBool,
    /// The engine's activity when last announced.
    announced: AtomicU64,
    room: Room,
}

impl Sleepers {
    const_unless_loom! {
        pub fn new() -> Sleepers {
            Sleepers {
                watching: AtomicBool::new(false),
                announced: AtomicU64::new(0),
                room: Room {
                    announcements: Word::new(0),
                    sleepers: AtomicU32::new(0),
                },
            }
        }
    }

    /// Whether a thread watches the lanes now.
    pub fn watched(&self) -> bool {
        self.watching.load(Ordering::Relaxed)
    }

    /// The calling thread watches the lanes from now on (none did).
    pub fn start_watching(&self) {
        debug_assert!(!self.watched(), "two threads watching the lanes");
        self.watching.store(true, Ordering::Relaxed);
    }

    /// The watcher woke: another sleeper watches the lanes next, if this thread is done.
    pub fn stop_watching(&self) {
        self.watching.store(false, Ordering::Relaxed);
        self.room.wake(1);
    }

    pub fn room(&self) -> &Room {
        &self.room
    }

    /// The engine's `activity` counter as the lock's holder leaves it: if it moved since
    /// the last announcement, the room wakes and `ring` wakes the watcher.
    pub fn announce(&self, activity: u64, ring: impl FnOnce()) {
        if activity == self.announced.swap(activity, Ordering::Relaxed) {
            return;
        }
        self.wake_all(ring);
    }

    /// Wakes every sleeper (to see a stop flag just set).
    pub fn wake_all(&self, ring: impl FnOnce()) {
        self.room.wake(u32::MAX);
        if self.watched() {
            ring();
        }
    }
}

impl Default for Sleepers {
    fn default() -> Sleepers {
        Sleepers::new()
    }
}
