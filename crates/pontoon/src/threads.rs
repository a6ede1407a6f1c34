//! Several threads calling into one rank (`MPI_THREAD_MULTIPLE`). The engine has one
//! owner at a time: the library that embeds pontoon holds a lock around every call (its
//! [`Gate`]), and a blocking call waits here without it, so that the other threads call
//! in meanwhile (`docs/architecture.md`, "Threads").
//!
//! A waiting thread busy-polls, letting a thread that waits for the lock in between its
//! passes. Once it has polled for `PONTOON_SPIN_US` it sleeps: the first such thread on
//! the rank's lanes (the *watcher*), every other one in the *room*, a futex that is
//! bumped whenever a thread saw something change (a request finished, a pass moved
//! something) and lets go of the lock. The watcher is woken then too (the runtime's
//! [`runtime::Waker`]), so a request another thread completed ends its wait at once.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use runtime::{Pass, Runtime};

use crate::{Result, Universe};

/// The lock of the library whose threads share a [`Universe`], held by the thread that
/// calls in. Implemented by the C library (`mpi-abi`) at `MPI_THREAD_MULTIPLE`.
pub trait Gate: Sync {
    /// Between the passes of a busy wait: lets a thread that waits for the lock in,
    /// if one does.
    fn let_others_in(&self);
    /// Runs `f` (a sleep) without the lock, then takes it again.
    fn open_while(&self, f: &mut dyn FnMut());
    /// Whether a thread sleeps waiting for the lock now.
    fn others_waiting(&self) -> bool;
}

/// What a waiting thread does with the lock between its passes.
#[derive(Clone, Copy)]
enum Between {
    /// Hands it to a thread that sleeps waiting for it, if one does: a blocking call
    /// passes again at once.
    HandOver,
    /// Lets go of it for a moment: the progress thread, whose passes must not delay the
    /// application's calls.
    Yield,
}

/// How long a thread sleeps in the room at most: a safety net, as the engine's own
/// sleeps have one; an announcement ends it before.
const ROOM_SLEEP: Duration = Duration::from_millis(50);

/// The threads' side of a [`Universe`], used under the gate's lock (the room's sleep
/// without it). Its lock-free core is `pontoon-futex`'s, model-checked there.
#[derive(Default)]
pub(crate) struct Threads {
    gate: Cell<Option<&'static dyn Gate>>,
    waker: RefCell<Option<runtime::Waker>>,
    sleepers: futex::Sleepers,
}

impl Threads {
    /// The gate, once threads share the universe.
    #[inline]
    pub(crate) fn gate(&self) -> Option<&'static dyn Gate> {
        self.gate.get()
    }

    /// The engine's `activity` as the lock's holder leaves it: the sleepers look again
    /// if it moved.
    fn announce(&self, activity: u64) {
        self.sleepers.announce(activity, || self.ring());
    }

    /// Rings the thread that watches the lanes.
    fn ring(&self) {
        if let Some(w) = self.waker.borrow().as_ref() {
            w.wake();
        }
    }
}

impl Universe {
    /// From now on the program's threads share this universe through `gate`: blocking
    /// calls wait without its lock (see the module's documentation).
    pub fn share(&self, gate: &'static dyn Gate) -> Result<()> {
        let waker = self.engine()?.thread_waker().map_err(|e| {
            crate::Error::Runtime(format!(
                "cannot make the eventfd that wakes a thread sleeping on the lanes: {e}"
            ))
        })?;
        *self.threads.waker.borrow_mut() = Some(waker);
        self.threads.gate.set(Some(gate));
        Ok(())
    }

    /// The thread holding the gate's lock leaves the library: if it moved anything,
    /// the sleepers look again.
    pub fn leaving(&self) {
        if let Some(rt) = self.engine_ref() {
            self.threads.announce(rt.activity());
        }
    }

    /// Between the passes of a wait of the C library's own (one that polls requests of
    /// several kinds): lets the other threads in, if they share the universe.
    pub fn let_others_in(&self) {
        if let Some(gate) = self.threads.gate() {
            self.leaving();
            gate.let_others_in();
        }
    }

    /// Progresses until `done` says so. Alone, the engine's own blocking wait; with
    /// threads sharing the universe, passes that let the others in between them and
    /// sleeps without the lock.
    pub(crate) fn wait_until<T>(&self, done: impl FnMut(&mut Runtime) -> Option<T>) -> Result<T> {
        match self.threads.gate() {
            None => Ok(self.engine()?.block_until(done)),
            Some(gate) => self.wait_in_passes(gate, Between::HandOver, runtime::Idle::default(), done),
        }
    }

    /// The body of a progress thread (the C library's `PONTOON_ASYNC_PROGRESS`), which
    /// holds the gate's lock when it calls: progresses until `stop` is set, letting go
    /// of the lock between its passes so that the application's calls come first, and
    /// sleeping on the lanes when there is nothing to do.
    pub fn progress_until(&self, stop: &AtomicBool) -> Result<()> {
        let gate = self.threads.gate().ok_or_else(|| {
            crate::Error::Arg("a progress thread needs the universe shared (Universe::share)".into())
        })?;
        self.wait_in_passes(gate, Between::Yield, runtime::Idle::sleeping_at_once(), |_| {
            stop.load(Ordering::Acquire).then_some(())
        })
    }

    /// Wakes every thread that sleeps in a wait (to see a stop flag just set).
    pub fn wake_sleepers(&self) {
        let threads = &self.threads;
        threads.sleepers.wake_all(|| threads.ring());
    }

    /// Whether this rank wants a progress thread (`PONTOON_ASYNC_PROGRESS`).
    pub fn wants_progress_thread(&self) -> Result<bool> {
        Ok(self.engine()?.wants_progress_thread())
    }

    fn wait_in_passes<T>(
        &self,
        gate: &dyn Gate,
        between: Between,
        mut idle: runtime::Idle,
        mut done: impl FnMut(&mut Runtime) -> Option<T>,
    ) -> Result<T> {
        loop {
            let mut rt = self.engine()?;
            let pass = rt.wait_pass(&mut idle, &mut done);
            let threads = &self.threads;
            threads.announce(rt.activity());
            match pass {
                Pass::Done(v) => return Ok(v),
                Pass::Again => {
                    drop(rt);
                    match between {
                        Between::HandOver => gate.let_others_in(),
                        Between::Yield => gate.open_while(&mut std::thread::yield_now),
                    }
                }
                Pass::Idle if !threads.sleepers.watched() => {
                    let Some(asleep) = rt.ready_for_idle_sleep() else {
                        continue;
                    };
                    threads.sleepers.start_watching();
                    drop(rt);
                    gate.open_while(&mut || asleep.sleep());
                    let woke = self.engine().map(|mut rt| rt.woke(asleep));
                    threads.sleepers.stop_watching();
                    woke?;
                }
                Pass::Idle => {
                    let room = threads.sleepers.room();
                    let seat = room.enter();
                    drop(rt);
                    gate.open_while(&mut || room.sleep(&seat, ROOM_SLEEP));
                    room.leave(seat);
                }
            }
        }
    }
}

impl Universe {
    /// Waits for request `id` and takes its result.
    pub(crate) fn wait(&self, id: runtime::ReqId) -> Result<(runtime::Completion, runtime::Buffer)> {
        Ok(self.wait_until(|rt| rt.finished(id))??)
    }

    /// Waits until one of `ids` finished; its index.
    pub(crate) fn wait_any(&self, ids: &[runtime::ReqId]) -> Result<usize> {
        Ok(self.wait_until(|rt| rt.finished_among(ids))??)
    }
}

impl Universe {
    /// Sends `data` to job rank `to` with its tag and receives into `buf` from `from`
    /// with its tag at once, on context `ctx` (MPI_Sendrecv and the like): the
    /// receive's status, its source a job rank.
    pub(crate) fn swap(
        &self,
        ctx: u32,
        (data, to, send_tag): (&[u8], crate::Rank, i32),
        (buf, from, recv_tag): (&mut [u8], i32, i32),
    ) -> Result<crate::Status> {
        runtime::mem::lend(data, |sb| {
            runtime::mem::lend_mut(buf, |rb| {
                let (r, s) = {
                    let mut rt = self.engine()?;
                    let r = rt.irecv(rb.clone(), from, ctx, recv_tag);
                    (r, rt.isend(sb.clone(), to, ctx, send_tag, false))
                };
                let sent = self.wait(s);
                let got = self.wait(r);
                sent?.0?;
                crate::status(got?.0)
            })
        })
    }
}
