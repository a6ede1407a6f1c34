//! Which threads may use the library's state, and when (`docs/architecture.md`,
//! "Threads"). Below `MPI_THREAD_SERIALIZED` only the thread that called MPI_Init; at
//! SERIALIZED any thread, one at a time (a thread that calls while another is inside is
//! refused); at `MPI_THREAD_MULTIPLE`, or with a progress thread, any thread, any time:
//! each call holds the library's lock, which a blocking call lets go of while it waits
//! (pontoon's [`pontoon::Gate`]).

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};

use crate::abi::*;

/// The thread level MPI_Init_thread gave (MPI_Init's: MPI_THREAD_FUNNELED).
static LEVEL: AtomicI32 = AtomicI32::new(MPI_THREAD_FUNNELED);

/// The most pontoon gives: any thread may call any function at any time.
pub const MOST_THREADS: c_int = MPI_THREAD_MULTIPLE;

/// The thread level the library runs at.
#[inline]
pub fn thread_level() -> c_int {
    LEVEL.load(Ordering::Relaxed)
}

/// Every call takes the library's lock: at MPI_THREAD_MULTIPLE, or when a progress
/// thread shares the library with the program's (whatever level it asked for).
static LOCKING: AtomicBool = AtomicBool::new(false);

#[inline]
fn locking() -> bool {
    LOCKING.load(Ordering::Relaxed)
}

/// From now on every call takes the library's lock (MPI_Init, before the program's
/// threads may call).
pub fn start_locking() {
    LOCKING.store(true, Ordering::Relaxed);
}

/// Sets the thread level (MPI_Init_thread, before the state is installed).
pub fn set_thread_level(level: c_int) {
    LEVEL.store(level, Ordering::Relaxed);
}

/// The calling thread's pthread handle.
#[inline]
pub(super) fn this_thread() -> usize {
    // SAFETY: pthread_self has no preconditions and always succeeds.
    unsafe { libc::pthread_self() as usize }
}

/// The program's thread inside the library at MPI_THREAD_SERIALIZED (0: none): a
/// second one that calls meanwhile is refused (the progress thread is not the
/// program's, and takes no part).
static SERIAL: AtomicUsize = AtomicUsize::new(0);
/// The holder of [`LOCK`] (0: none) while every call takes it.
static HOLDER: AtomicUsize = AtomicUsize::new(0);
/// How many calls deep the holder is (a callback calling MPI); only it touches this.
static DEPTH: AtomicU32 = AtomicU32::new(0);
/// The progress thread's pthread handle (0: none).
static PROGRESS_THREAD: AtomicUsize = AtomicUsize::new(0);

/// Whether `thread` is the library's progress thread.
pub(super) fn is_progress_thread(thread: usize) -> bool {
    PROGRESS_THREAD.load(Ordering::Relaxed) == thread
}

/// A call's turn inside the library; given back when the call ends.
pub struct Turn {
    /// This call took the program's turn at SERIALIZED.
    serial: bool,
    /// This call took the lock (a call inside a call does not).
    locked: bool,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.locked {
            if DEPTH.load(Ordering::Relaxed) > 0 {
                DEPTH.fetch_sub(1, Ordering::Relaxed);
            } else {
                // What this call moved may end another thread's wait.
                if let Some(m) = super::this_threads_state() {
                    m.u.leaving();
                }
                HOLDER.store(0, Ordering::Relaxed);
                LOCK.unlock();
            }
        }
        if self.serial {
            SERIAL.store(0, Ordering::Release);
        }
    }
}

/// Takes this call's turn: at MPI_THREAD_SERIALIZED `Err` with the message when another
/// of the program's threads is inside now; then, while every call takes the lock, waits
/// for it. A thread already inside (a callback calling MPI) goes on in its turn.
#[inline]
pub fn take_turn() -> Result<Turn, String> {
    let mut turn = Turn {
        serial: false,
        locked: false,
    };
    let (locking, level) = (locking(), thread_level());
    if !locking && level < MPI_THREAD_SERIALIZED {
        return Ok(turn);
    }
    let me = this_thread();
    if level == MPI_THREAD_SERIALIZED && !is_progress_thread(me) {
        match SERIAL.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => turn.serial = true,
            Err(inside) if inside == me => {}
            Err(_) => {
                return Err(
                    "another thread is inside MPI at the same time: at MPI_THREAD_SERIALIZED the \
                     program must call MPI from one thread at a time (ask for MPI_THREAD_MULTIPLE \
                     in MPI_Init_thread to call from several at once)"
                        .to_string(),
                )
            }
        }
    }
    if locking {
        if HOLDER.load(Ordering::Relaxed) == me {
            DEPTH.fetch_add(1, Ordering::Relaxed);
        } else {
            LOCK.lock();
            HOLDER.store(me, Ordering::Relaxed);
        }
        turn.locked = true;
    }
    Ok(turn)
}

/// Whether another thread is inside the library now: this one must not use the state,
/// not even to find an error handler (it was refused, or takes no turn).
pub fn another_thread_inside() -> bool {
    let me = this_thread();
    let other = |inside: usize| inside != 0 && inside != me;
    other(SERIAL.load(Ordering::Acquire)) || other(HOLDER.load(Ordering::Acquire))
}

/// The library's lock at MULTIPLE (`pontoon-futex`, model-checked there).
static LOCK: futex::Lock = futex::Lock::new();

/// The lock as pontoon's waits see it.
struct LibraryGate;

static GATE: LibraryGate = LibraryGate;

impl pontoon::Gate for LibraryGate {
    fn let_others_in(&self) {
        if DEPTH.load(Ordering::Relaxed) == 0 {
            let me = HOLDER.swap(0, Ordering::Relaxed);
            LOCK.let_waiting_in();
            HOLDER.store(me, Ordering::Relaxed);
        }
    }

    fn others_waiting(&self) -> bool {
        LOCK.wanted()
    }

    fn open_while(&self, f: &mut dyn FnMut()) {
        // A wait inside a callback keeps the lock: the call around it holds state
        // that the others must not see half-changed.
        if DEPTH.load(Ordering::Relaxed) > 0 {
            return f();
        }
        let me = HOLDER.swap(0, Ordering::Relaxed);
        LOCK.unlock();
        f();
        LOCK.lock();
        HOLDER.store(me, Ordering::Relaxed);
    }
}

/// The gate pontoon's blocking waits open at MULTIPLE.
pub fn gate() -> &'static dyn pontoon::Gate {
    &GATE
}

/// The progress thread, while it runs, and what tells it to stop.
static PROGRESS: std::sync::Mutex<Option<std::thread::JoinHandle<()>>> = std::sync::Mutex::new(None);
static STOP_PROGRESS: AtomicBool = AtomicBool::new(false);

/// Starts the progress thread (`PONTOON_ASYNC_PROGRESS`): it calls into the library as
/// the program's threads do, holding the lock while it progresses.
pub fn start_progress_thread() -> Result<(), String> {
    let spawned = std::thread::Builder::new()
        .name("pontoon-progress".into())
        .spawn(|| {
            PROGRESS_THREAD.store(this_thread(), Ordering::Relaxed);
            let _turn = take_turn();
            if let Some(m) = super::this_threads_state() {
                if let Err(e) = m.u.progress_until(&STOP_PROGRESS) {
                    eprintln!("pontoon: the progress thread stopped: {e}");
                }
            }
        })
        .map_err(|e| format!("cannot start the progress thread (PONTOON_ASYNC_PROGRESS): {e}"))?;
    *PROGRESS.lock().unwrap_or_else(|e| e.into_inner()) = Some(spawned);
    Ok(())
}

/// Stops the progress thread, if one runs, and waits for it to end (MPI_Finalize: the
/// calling thread holds the lock, which it lets go of meanwhile).
pub fn stop_progress_thread(u: &pontoon::Universe) {
    let Some(thread) = PROGRESS.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    STOP_PROGRESS.store(true, Ordering::Release);
    u.wake_sleepers();
    let mut thread = Some(thread);
    gate().open_while(&mut || {
        if let Some(t) = thread.take() {
            let _ = t.join();
        }
    });
}
