//! `pontoon bench experiment SEED`: a seed's experiment end to end — it builds the testbed
//! the experiment needs, runs `pontoon bench` tests on it round by round (the settings
//! taking turns), tears it down, and writes `SEED.md` beside its plots and raw CSV: a
//! table "paper / pontoon / ratio" per claim of the seed and what matches and differs.

mod lab;
mod seed000;
mod seed001;
mod seed002;
mod seed003;
mod seed004;

use std::path::PathBuf;

use indicatif::ProgressBar;

pub use lab::{Bed, Claim, Lab};

/// The design documents whose experiments pontoon reproduces (`../shared/seeds/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Seed {
    /// IPv6 across clusters (Open MPI's IPv6 extension): IPv4 against IPv6 on one link,
    /// compute node to compute node across two clusters against each link alone
    #[value(name = "000")]
    Ipv6,
    /// NAT and one relay (nat-proxy) against two user-level proxies (two-proxy)
    #[value(name = "001")]
    Relays,
    /// TCP buffer size × MTU on a 1 Gbit/s link, the CPU cost of communication, overlap
    #[value(name = "002")]
    Tuning,
    /// MPBench's bandwidth, roundtrip and application latency over raw Ethernet frames
    /// against TCP on one segment, and with loss and reordering
    #[value(name = "003")]
    RawEthernet,
    /// Streaming bandwidth against the round trip of a WAN link, with loss, under BBR and
    /// CUBIC: one TCP stream against parallel streams, iperf3 beside them
    #[value(name = "004")]
    Wan,
}

impl Seed {
    pub fn number(self) -> &'static str {
        match self {
            Seed::Ipv6 => "000",
            Seed::Relays => "001",
            Seed::Tuning => "002",
            Seed::RawEthernet => "003",
            Seed::Wan => "004",
        }
    }
}

/// Runs the experiment of `o.seed` and writes its report; returns the report's path.
pub fn run(o: &crate::Options, bar: &ProgressBar) -> Result<PathBuf, String> {
    let seed = o
        .seed
        .ok_or("experiment needs a SEED: 000, 001, 002, 003 or 004")?;
    testbed::require_root(&format!("seed {}'s experiment builds testbeds", seed.number()))?;
    let mut lab = Lab::new(seed, o, bar)?;
    match seed {
        Seed::Ipv6 => seed000::run(&mut lab)?,
        Seed::Relays => seed001::run(&mut lab)?,
        Seed::Tuning => seed002::run(&mut lab)?,
        Seed::RawEthernet => seed003::run(&mut lab)?,
        Seed::Wan => seed004::run(&mut lab)?,
    }
    lab.finish()
}
