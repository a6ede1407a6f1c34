//! Event loop, connection set-up and progress engine of pontoon.

pub mod config;
pub mod control;
pub mod jobenv;

pub use config::Config;
