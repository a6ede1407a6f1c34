//! Library state that every thread sees alike and that lives before MPI_Init and after
//! MPI_Finalize (error codes with their messages, user error classes, names given to
//! predefined datatypes). It was thread-local while one thread called MPI; at
//! MPI_THREAD_SERIALIZED an error raised on one thread is looked up on another. Behind a
//! lock that only the calls touching it take; `with` reads as a thread-local's did.

use std::cell::RefCell;
use std::sync::{Mutex, OnceLock, PoisonError};

pub struct ProcessWide<T> {
    cell: OnceLock<Mutex<RefCell<T>>>,
    init: fn() -> T,
}

impl<T> ProcessWide<T> {
    /// State made by `init` the first time it is used.
    pub const fn new(init: fn() -> T) -> ProcessWide<T> {
        ProcessWide {
            cell: OnceLock::new(),
            init,
        }
    }

    /// Runs `f` on the state, which no other thread uses meanwhile. `f` must not use the
    /// same state again (it would wait for itself).
    pub fn with<R>(&self, f: impl FnOnce(&RefCell<T>) -> R) -> R {
        let lock = self.cell.get_or_init(|| Mutex::new(RefCell::new((self.init)())));
        let state = lock.lock().unwrap_or_else(PoisonError::into_inner);
        f(&state)
    }
}
