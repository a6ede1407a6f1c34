//! Event loop, connection set-up and progress engine of pontoon.

#![forbid(unsafe_code)]

mod clock;
pub mod config;
pub mod control;
mod eth_wireup;
pub mod jobenv;
mod lanes;
pub mod pmi;
mod rendezvous;
mod requests;
pub mod runtime;
mod shm_wireup;
pub mod srun;
mod waiter;
pub mod wireup;

pub use config::Config;
pub use eth_wireup::mac_text;
pub use lanes::{PathInfo, Route, Via};
pub use net::{EndpointCard, PathKind};
pub use proto::{Caps, Failure, LaneId, Rank, ReqId, Status, ANY_SOURCE, ANY_TAG};
pub use runtime::{tcp_window_limit, Background, Completion, Error, NodeMembers, Runtime, NODE_COLL_DATA};
pub use transport::Transport;
pub use transport::{mem, Buffer};
pub use wireup::Attempt;
