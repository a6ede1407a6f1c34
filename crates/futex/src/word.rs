//! A 32-bit word that threads sleep on until it changes: a futex, or under `--cfg loom`
//! a model of one that loom can see (a mutex and a condition variable, taken by both
//! the sleeper's check-and-sleep and the waker, as the kernel makes them one step).

use std::time::Duration;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Spinning and yielding, loom's under the model (its scheduler must see them).
pub(crate) mod pause {
    #[cfg(loom)]
    pub(crate) use loom::{hint::spin_loop, thread::yield_now};
    #[cfg(not(loom))]
    pub(crate) use std::{hint::spin_loop, thread::yield_now};
}

/// How many times a loop that waits for another thread spins or yields before it
/// sleeps: once under the model, where every extra turn multiplies the interleavings.
pub(crate) const fn turns(real: u32) -> u32 {
    if cfg!(loom) {
        1
    } else {
        real
    }
}

/// A `const fn` (for statics) except under loom, whose atomics are not `const`.
macro_rules! const_unless_loom {
    ($(#[$attr:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty $body:block) => {
        #[cfg(not(loom))]
        $(#[$attr])* $vis const fn $name($($arg: $ty),*) -> $ret $body
        #[cfg(loom)]
        $(#[$attr])* $vis fn $name($($arg: $ty),*) -> $ret $body
    };
}
pub(crate) use const_unless_loom;

pub(crate) struct Word {
    value: AtomicU32,
    #[cfg(loom)]
    sleepers: loom::sync::Mutex<()>,
    #[cfg(loom)]
    bell: loom::sync::Condvar,
}

impl std::ops::Deref for Word {
    type Target = AtomicU32;
    fn deref(&self) -> &AtomicU32 {
        &self.value
    }
}

impl Word {
    const_unless_loom! {
        pub(crate) fn new(value: u32) -> Word {
            Word {
                value: AtomicU32::new(value),
                #[cfg(loom)]
                sleepers: loom::sync::Mutex::new(()),
                #[cfg(loom)]
                bell: loom::sync::Condvar::new(),
            }
        }
    }
}

#[cfg(not(loom))]
impl Word {
    /// Sleeps while the word holds `expected`, at most `max` (`None`: until woken); may
    /// return early, as a futex may.
    pub(crate) fn wait(&self, expected: u32, max: Option<Duration>) {
        use rustix::thread::futex;
        let max = max.map(|d| rustix::time::Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: d.subsec_nanos() as i64,
        });
        let _ = futex::wait(&self.value, futex::Flags::PRIVATE, expected, max.as_ref());
    }

    /// Wakes up to `n` threads sleeping on the word.
    pub(crate) fn wake(&self, n: u32) {
        use rustix::thread::futex;
        let _ = futex::wake(&self.value, futex::Flags::PRIVATE, n);
    }
}

#[cfg(loom)]
impl Word {
    /// The model ignores `max`: a sleeper that only a time-out would wake is a lost
    /// wake-up, which loom reports as a deadlock.
    pub(crate) fn wait(&self, expected: u32, _max: Option<Duration>) {
        let asleep = self.sleepers.lock().unwrap();
        if self.value.load(Ordering::SeqCst) == expected {
            drop(self.bell.wait(asleep).unwrap());
        }
    }

    pub(crate) fn wake(&self, n: u32) {
        let _asleep = self.sleepers.lock().unwrap();
        if n == 1 {
            self.bell.notify_one();
        } else {
            self.bell.notify_all();
        }
    }
}
