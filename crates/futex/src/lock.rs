//! The library's lock at `MPI_THREAD_MULTIPLE`.

use crate::word::{const_unless_loom, pause, turns, Ordering, Word};

/// A futex lock: 0 free, 1 held, 2 held while threads sleep waiting for it. An
/// uncontended call pays one compare-and-swap to take it and one swap to give it back.
pub struct Lock {
    word: Word,
}

const FREE: u32 = 0;
const HELD: u32 = 1;
const HELD_AND_WANTED: u32 = 2;

impl Lock {
    const_unless_loom! {
        pub fn new() -> Lock {
            Lock { word: Word::new(FREE) }
        }
    }

    #[inline]
    pub fn lock(&self) {
        if self
            .word
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
    }

    #[cold]
    fn lock_contended(&self) {
        // A call is short: spin a little before sleeping.
        for _ in 0..turns(100) {
            if self.word.load(Ordering::Relaxed) == FREE
                && self
                    .word
                    .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            pause::spin_loop();
        }
        // Marked wanted even if it was free: the next unlock wakes one more sleeper than
        // needed, never one too few.
        while self.word.swap(HELD_AND_WANTED, Ordering::Acquire) != FREE {
            self.word.wait(HELD_AND_WANTED, None);
        }
    }

    #[inline]
    pub fn unlock(&self) {
        if self.word.swap(FREE, Ordering::Release) == HELD_AND_WANTED {
            self.word.wake(1);
        }
    }

    /// Whether a thread sleeps waiting for the lock now.
    pub fn wanted(&self) -> bool {
        self.word.load(Ordering::Relaxed) == HELD_AND_WANTED
    }

    /// Held by the caller: hands the lock to a thread sleeping for it, if one does, and
    /// queues up for it again.
    pub fn let_waiting_in(&self) {
        if !self.wanted() {
            return;
        }
        self.unlock();
        // Until the woken thread took it (it may have to be scheduled first): taken back
        // at once, the lock would go to this thread again and again.
        for _ in 0..turns(64) {
            if self.word.load(Ordering::Relaxed) != FREE {
                break;
            }
            pause::yield_now();
        }
        self.lock();
    }
}

impl Default for Lock {
    fn default() -> Lock {
        Lock::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn threads_take_turns_and_every_increment_counts() {
        static LOCK: Lock = Lock::new();
        static INSIDE: AtomicUsize = AtomicUsize::new(0);
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..20_000 {
                        LOCK.lock();
                        assert_eq!(INSIDE.fetch_add(1, Ordering::Relaxed), 0, "two threads inside");
                        // A plain read-modify-write: only the lock keeps it whole.
                        let seen = COUNT.load(Ordering::Relaxed);
                        COUNT.store(seen + 1, Ordering::Relaxed);
                        INSIDE.fetch_sub(1, Ordering::Relaxed);
                        if (i + t) % 7 == 0 {
                            LOCK.let_waiting_in();
                        }
                        LOCK.unlock();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(COUNT.load(Ordering::Relaxed), 80_000);
        assert!(!LOCK.wanted());
    }
}
