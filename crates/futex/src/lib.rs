//! Where a rank's threads wait for each other at `MPI_THREAD_MULTIPLE`
//! (`docs/architecture.md`, "Threads"): the library's [`Lock`], and the [`Sleepers`] of
//! blocking calls that wait without it — one watching the rank's lanes, the others in a
//! [`Room`]. Futexes underneath; under `--cfg loom` loom's atomics and a model of the
//! futex, so that `tests/model.rs` checks every interleaving of a few threads for
//! mutual exclusion and for lost wake-ups (`make race-check`).

#![forbid(unsafe_code)]

mod lock;
mod room;
mod word;

pub use lock::Lock;
pub use room::{Room, Seat, Sleepers};
