//! Sans-IO protocol core of pontoon.
//!
//! No sockets, no threads, no clock: time comes in as an argument, bytes come in
//! through `handle_*` and instructions leave through `poll()`. Everything here is
//! deterministic, which is what lets the simulator (`sim`) test the protocol with
//! seeded loss of ordering, latency and MTU instead of sleeps.
#![forbid(unsafe_code)]

pub mod caps;
pub mod control;
pub mod dial;
pub mod engine;
pub mod further;
pub mod handshake;
pub mod hex;
pub mod limits;
pub mod matching;
pub mod punch;
pub mod reliable;
pub mod sim;
pub mod wire;

pub use caps::{Caps, LaneId, SingleCopy, Traffic};
pub use engine::{
    eager_cost, eager_grant, Awaited, Endpoint, EngineConfig, Failure, LaneLoss, Origin, Output, PayloadDest,
    PayloadToken, SendSlice, Sent, Status, CANCELS_AHEAD_MAX, COALESCE_MESSAGE_MAX, LANE_ACK_EVERY,
};
pub use matching::ReqId;
pub use wire::handshake::PathKind;

/// Rank of a process in the job (`COMM_WORLD` numbering).
pub type Rank = u32;

/// Wildcard source for receives and probes (`MPI_ANY_SOURCE`).
pub const ANY_SOURCE: i32 = -1;
/// Wildcard tag for receives and probes (`MPI_ANY_TAG`).
pub const ANY_TAG: i32 = -1;

/// Virtual or real time in nanoseconds since an arbitrary origin, supplied by the caller.
pub type Nanos = u64;
