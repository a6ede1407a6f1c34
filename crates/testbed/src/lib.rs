//! `pontoon testbed`: multi-cluster topologies built from network namespaces on one
//! Linux host, and the user-space WAN emulator that gives their WAN links delay,
//! jitter, loss, reordering and rate (this kernel has no netem).
//!
//! A testbed is a set of hosts (each its own network, UTS and mount namespace) and one
//! `fabric` namespace with a bridge per segment and an emulator per WAN link. Nothing
//! touches the root namespace, so no testbed packet can leave the machine.
#![forbid(unsafe_code)]

pub mod agent;
mod build;
pub mod netns;
pub mod presets;
pub mod probe;
pub mod slurm;
mod teardown;
pub mod topology;
pub mod wan;

pub use build::{agent_path, up, UpOptions};
pub use presets::{preset, PresetOptions, PRESETS};
pub use teardown::{down, list, Removed};
pub use topology::{NatMode, Topology, WanImpairment};

use std::path::PathBuf;
use std::process::Command;

/// Where testbeds keep their topology, `/etc/hosts` files and emulator logs.
pub const STATE_ROOT: &str = "/run/pontoon-testbed";

pub fn state_dir(testbed: &str) -> PathBuf {
    PathBuf::from(STATE_ROOT).join(testbed)
}

/// Namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
pub fn require_root(doing: &str) -> Result<(), String> {
    if rustix::process::geteuid().is_root() {
        Ok(())
    } else {
        Err(format!(
            "{doing} needs root (it creates network namespaces); run it as root or with sudo"
        ))
    }
}

/// A running testbed: its topology and the holder process of each host.
#[derive(Debug, Clone)]
pub struct Testbed {
    pub name: String,
    pub topology: Topology,
    holders: Vec<netns::Holder>,
}

impl Testbed {
    /// Opens a running testbed by name; with no name, the only one running (or the one
    /// named by `PONTOON_TESTBED`).
    pub fn open(name: Option<&str>) -> Result<Testbed, String> {
        let name = match name
            .map(str::to_string)
            .or_else(|| std::env::var("PONTOON_TESTBED").ok())
        {
            Some(n) => n,
            None => match list().as_slice() {
                [only] => only.clone(),
                [] => return Err("no testbed is running; start one with `pontoon testbed up PRESET`".into()),
                many => {
                    return Err(format!(
                        "several testbeds are running ({}); say which with --testbed NAME",
                        many.join(", ")
                    ))
                }
            },
        };
        topology::check_name("testbed", &name, 24)?;
        let dir = state_dir(&name);
        let text = std::fs::read_to_string(dir.join("topology.toml"))
            .map_err(|_| format!("no testbed {name:?} (running: {})", list().join(", ")))?;
        if !dir.join("ready").exists() {
            return Err(format!(
                "testbed {name:?} is not completely built (did `up` fail or get killed?); \
                 `pontoon testbed down {name}` removes it"
            ));
        }
        let topology = Topology::from_toml(&text)?;
        let holders = netns::holders(Some(&name));
        Ok(Testbed {
            name,
            topology,
            holders,
        })
    }

    /// The PID of the process holding `host`'s namespaces.
    pub fn holder(&self, host: &str) -> Result<u32, String> {
        if self.topology.host(host).is_none() {
            let names: Vec<&str> = self.topology.hosts.iter().map(|h| h.name.as_str()).collect();
            return Err(format!(
                "testbed {:?} has no host {host:?} (hosts: {})",
                self.name,
                names.join(", ")
            ));
        }
        self.holders
            .iter()
            .find(|h| h.host == host)
            .map(|h| h.pid)
            .ok_or_else(|| {
                format!(
                    "host {host:?} of testbed {:?} is gone (its holder process died); \
                     `pontoon testbed down {0}` and `up` again",
                    self.name
                )
            })
    }

    /// `program` to run on `host`: in its network, mount and UTS namespaces.
    /// `PONTOON_TESTBED` tells agents started there which testbed they are in.
    pub fn command(&self, host: &str, program: &str) -> Result<Command, String> {
        let mut cmd = netns::in_host(self.holder(host)?, program);
        cmd.env("PONTOON_TESTBED", &self.name);
        Ok(cmd)
    }

    /// Whether this process runs on `host` (is in its network namespace).
    pub fn is_inside(&self, host: &str) -> Result<bool, String> {
        use std::os::unix::fs::MetadataExt;
        let holder = self.holder(host)?;
        let ns = |p: String| {
            std::fs::metadata(&p)
                .map(|m| (m.dev(), m.ino()))
                .map_err(|e| format!("{p}: {e}"))
        };
        Ok(ns("/proc/self/ns/net".into())? == ns(format!("/proc/{holder}/ns/net"))?)
    }

    /// Host names, in declaration order: the hostfile.
    pub fn host_names(&self) -> Vec<String> {
        self.topology.hosts.iter().map(|h| h.name.clone()).collect()
    }

    /// One line per host: its interfaces and addresses as the host sees them.
    pub fn status(&self) -> Result<String, String> {
        let mut out = String::new();
        for host in self.host_names() {
            let ns = netns::netns_name(&self.name, &host);
            let addrs = netns::run(
                Command::new("ip").args(["-n", &ns, "-brief", "address", "show"]),
                &format!("reading {host}'s addresses"),
            )?;
            out.push_str(&format!("{host} (holder pid {})\n", self.holder(&host)?));
            for line in addrs.lines().filter(|l| !l.starts_with("lo ")) {
                out.push_str(&format!(
                    "  {}\n",
                    line.split_whitespace().collect::<Vec<_>>().join(" ")
                ));
            }
        }
        let fabric = netns::netns_name(&self.name, topology::FABRIC);
        let emulators = netns::pids_in_netns(&PathBuf::from("/run/netns").join(fabric)).len();
        let wans = self.topology.segments.iter().filter(|s| s.wan.is_some()).count();
        // The fabric's holder is one of its processes; the rest are emulators.
        out.push_str(&format!(
            "WAN links: {wans}, emulator processes running: {}\n",
            emulators.saturating_sub(1)
        ));
        Ok(out)
    }
}
