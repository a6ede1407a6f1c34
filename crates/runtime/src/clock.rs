//! The runtime's clock, which drives proto's timers (`proto::dial`, `proto::reliable`):
//! nanoseconds since the process first read it.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use proto::Nanos;

pub fn now() -> Nanos {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as Nanos
}

pub fn nanos(d: Duration) -> Nanos {
    d.as_nanos().min(u128::from(Nanos::MAX)) as Nanos
}

pub fn duration(n: Nanos) -> Duration {
    Duration::from_nanos(n)
}
