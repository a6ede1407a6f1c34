//! Event loop, connection set-up and progress engine of pontoon.
//!
//! `boot` takes a rank from its environment to a job; `fabric` holds each transport's
//! wire-up; `runtime` is the event loop that drives them and the protocol engine.

#![forbid(unsafe_code)]

pub mod boot;
mod clock;
mod fabric;
mod lanes;
mod requests;
pub mod runtime;
mod waiter;

pub use boot::{config, control, jobenv, pmi, srun};
pub use config::Config;
pub use fabric::tcp::wireup::Attempt;
pub use fabric::Refusal;
pub use lanes::{PathInfo, Route, Via};
pub use net::{EndpointCard, PathKind};
pub use proto::{Caps, Failure, LaneId, Rank, ReqId, Status, ANY_SOURCE, ANY_TAG};
pub use runtime::{
    tcp_window_limit, Asleep, Background, Completion, Error, Idle, NodeMembers, Pass, Runtime, NODE_COLL_DATA,
};
pub use transport::eth::mac_text;
pub use transport::Transport;
pub use transport::{mem, Buffer};
pub use waiter::Waker;
