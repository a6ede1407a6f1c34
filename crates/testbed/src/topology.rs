//! What a testbed is made of, as declared in TOML (see `docs/testbed.md`), and the
//! checks and address arithmetic that turn a declaration into something buildable.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A whole testbed: L2 segments (bridges or emulated WAN wires) and hosts with NICs on them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    #[serde(default, rename = "segment")]
    pub segments: Vec<Segment>,
    #[serde(default, rename = "host")]
    pub hosts: Vec<Host>,
    /// The TCP settings of every host.
    #[serde(default, skip_serializing_if = "HostTcp::is_default")]
    pub tcp: HostTcp,
    /// Run a Slurm cluster per site (`crate::slurm`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub slurm: bool,
}

/// The TCP stack of every host: its congestion control and its socket-buffer limits.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct HostTcp {
    /// The hosts' default congestion control (`cubic`, `bbr`, `reno`); none: the
    /// machine's (a new network namespace inherits it). Building allows it for every
    /// namespace first (`net.ipv4.tcp_allowed_congestion_control`), which the kernel
    /// asks of any but the first namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// Linux's default socket-buffer limits (`tcp_rmem` 6 MiB, `tcp_wmem` 4 MiB) instead
    /// of 64 MiB for both, for long fat WAN pipes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kernel_buffers: bool,
}

impl HostTcp {
    pub fn is_default(&self) -> bool {
        *self == HostTcp::default()
    }
}

/// One L2 segment. Without `wan` it is a switch (a bridge); with `wan` it is a wire between
/// exactly two NICs through the user-space WAN emulator.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<Prefix>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Prefix>,
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// Egress rate limit (tbf) on every NIC of the segment, in Mbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_mbit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wan: Option<WanImpairment>,
}

fn default_mtu() -> u32 {
    1500
}

/// Impairments of an emulated WAN wire, applied in each direction (RTT ≈ 2 × `delay_ms`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct WanImpairment {
    #[serde(default)]
    pub delay_ms: f64,
    #[serde(default)]
    pub jitter_ms: f64,
    #[serde(default)]
    pub loss_pct: f64,
    #[serde(default)]
    pub reorder_pct: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_mbit: Option<u64>,
}

/// One host: its own network, UTS and mount namespaces.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Host {
    pub name: String,
    #[serde(default, rename = "nic")]
    pub nics: Vec<Nic>,
    /// Default routes (IPv4 and IPv6) via this host's address on a shared segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    #[serde(default, rename = "route", skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// Route packets between NICs (IPv4 and IPv6).
    #[serde(default, skip_serializing_if = "is_false")]
    pub forward: bool,
    /// What happens to packets from `source` leaving through `out`: source NAT
    /// (nftables masquerade, port-preserving or fully random) or nothing gets out.
    #[serde(default, rename = "masquerade", skip_serializing_if = "Vec::is_empty")]
    pub masquerades: Vec<Masquerade>,
    /// A docker-style bridge `docker0` with 172.17.0.1/16: the same address on every host.
    #[serde(default, skip_serializing_if = "is_false")]
    pub docker_bridge: bool,
    /// The cluster or site the host belongs to (`pontoon run --testbed --sites` tells its
    /// ranks, as a hostfile's `site=` would).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !b
}

/// A NIC on a segment. `index` picks the host part of the segment's prefixes: 11 gives
/// 10.0.0.11 and 2001:db8:a::11 (the IPv6 host part is the same digits, for readability).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Nic {
    pub segment: String,
    pub index: u16,
    /// Interface name inside the host; `eth0`, `eth1`, … by position when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Destination prefix, e.g. `2001:db8:b::/64`.
    pub to: Prefix,
    /// The host whose address on a shared segment is the next hop.
    pub via: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Masquerade {
    pub source: Prefix,
    /// The segment whose NIC the packets leave through.
    pub out: String,
    #[serde(default, skip_serializing_if = "NatMode::is_default")]
    pub mode: NatMode,
}

/// How a head treats outgoing streams of its private hosts.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum NatMode {
    /// Source NAT that keeps the source port where it can (Linux's masquerade): an "easy"
    /// NAT, where hole punching works.
    #[default]
    Masquerade,
    /// Source NAT with a random port for every connection (`fully-random`): a "hard" NAT,
    /// where hole punching fails and only a relay carries.
    FullyRandom,
    /// Nothing gets out: private hosts reach only their own segments and the head itself
    /// (compute nodes with no outbound NAT).
    Blocked,
}

impl NatMode {
    fn is_default(&self) -> bool {
        *self == NatMode::Masquerade
    }

    pub fn name(self) -> &'static str {
        match self {
            NatMode::Masquerade => "masquerade",
            NatMode::FullyRandom => "fully-random",
            NatMode::Blocked => "blocked",
        }
    }

    pub fn from_name(name: &str) -> Option<NatMode> {
        [NatMode::Masquerade, NatMode::FullyRandom, NatMode::Blocked]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// An IP prefix such as `10.0.0.0/24` or `2001:db8::/64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl Prefix {
    /// `ip` with the host bits cleared.
    fn network_of(&self, ip: IpAddr) -> Option<IpAddr> {
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                Some(IpAddr::V4(Ipv4Addr::from(u32::from(ip) & mask)))
            }
            (IpAddr::V6(_), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.len)).unwrap_or(0);
                Some(IpAddr::V6(Ipv6Addr::from(u128::from(ip) & mask)))
            }
            _ => None,
        }
    }

    /// Whether `ip` lies inside this prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.network_of(ip) == self.network_of(self.addr)
    }

    /// The address with host part `index` (IPv6: the decimal digits read as hex).
    pub fn host(&self, index: u16) -> Result<IpAddr, String> {
        let host_bits = match self.addr {
            IpAddr::V4(_) => 32 - u32::from(self.len),
            IpAddr::V6(_) => 128 - u32::from(self.len),
        };
        let part = match self.addr {
            IpAddr::V4(_) => u128::from(index),
            IpAddr::V6(_) => u128::from_str_radix(&index.to_string(), 16).expect("digits are hex"),
        };
        if host_bits < 128 && part >> host_bits != 0 {
            return Err(format!("index {index} does not fit in {self}"));
        }
        Ok(match self.addr {
            IpAddr::V4(net) => IpAddr::V4(Ipv4Addr::from(u32::from(net) | part as u32)),
            IpAddr::V6(net) => IpAddr::V6(Ipv6Addr::from(u128::from(net) | part)),
        })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for Prefix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, len) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: a prefix is ADDRESS/LENGTH"))?;
        let addr: IpAddr = addr.parse().map_err(|e| format!("{s:?}: {e}"))?;
        let len: u8 = len.parse().map_err(|e| format!("{s:?}: {e}"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(format!("{s:?}: length {len} is more than {max}"));
        }
        let prefix = Prefix { addr, len };
        if prefix.network_of(addr) != Some(addr) {
            return Err(format!("{s:?}: host bits are set"));
        }
        Ok(prefix)
    }
}

impl Serialize for Prefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Prefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The docker-style bridge every host may get: deliberately the same on all of them.
pub const DOCKER_BRIDGE: &str = "docker0";
/// Its address and prefix length: 172.17.0.1/16, docker's default.
pub const DOCKER_BRIDGE_ADDR: (Ipv4Addr, u8) = (Ipv4Addr::new(172, 17, 0, 1), 16);

/// A NIC with everything resolved: its name, segment and addresses.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedNic {
    pub name: String,
    pub segment: String,
    pub addrs: Vec<(IpAddr, u8)>,
}

impl Topology {
    pub fn from_toml(text: &str) -> Result<Topology, String> {
        let topo: Topology = toml::from_str(text).map_err(|e| e.to_string())?;
        topo.validate()?;
        Ok(topo)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a topology always serializes")
    }

    pub fn segment(&self, name: &str) -> Option<&Segment> {
        self.segments.iter().find(|s| s.name == name)
    }

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// The NICs of `host` with names and addresses filled in.
    pub fn nics(&self, host: &Host) -> Vec<ResolvedNic> {
        host.nics
            .iter()
            .enumerate()
            .map(|(i, nic)| {
                let seg = self.segment(&nic.segment).expect("validated");
                let addrs = [seg.ipv4, seg.ipv6]
                    .into_iter()
                    .flatten()
                    .map(|p| (p.host(nic.index).expect("validated"), p.len))
                    .collect();
                ResolvedNic {
                    name: nic.name.clone().unwrap_or_else(|| format!("eth{i}")),
                    segment: nic.segment.clone(),
                    addrs,
                }
            })
            .collect()
    }

    /// `via`'s addresses on a segment it shares with `from` (the next hop of a route).
    pub fn next_hops(&self, from: &Host, via: &str) -> Vec<IpAddr> {
        let Some(via) = self.host(via) else {
            return Vec::new();
        };
        let mine: BTreeSet<String> = from.nics.iter().map(|n| n.segment.clone()).collect();
        self.nics(via)
            .into_iter()
            .filter(|n| mine.contains(&n.segment))
            .flat_map(|n| n.addrs.into_iter().map(|(a, _)| a))
            .collect()
    }

    /// Every address of the testbed with the hosts that have it. Docker bridges count.
    pub fn address_owners(&self) -> BTreeMap<IpAddr, Vec<String>> {
        let mut owners: BTreeMap<IpAddr, Vec<String>> = BTreeMap::new();
        for host in &self.hosts {
            for nic in self.nics(host) {
                for (addr, _) in nic.addrs {
                    owners.entry(addr).or_default().push(host.name.clone());
                }
            }
            if host.docker_bridge {
                let addr = IpAddr::V4(DOCKER_BRIDGE_ADDR.0);
                owners.entry(addr).or_default().push(host.name.clone());
            }
        }
        owners
    }

    /// `/etc/hosts` for `host`: itself, and every other host under the addresses `host`
    /// can use for it — those on a shared segment, else those no other host has (so
    /// never a duplicated private address that would reach the wrong node). IPv4 first,
    /// as resolvers that only know IPv4 (`gethostbyname`) take the first line.
    pub fn etc_hosts(&self, host: &Host) -> String {
        let owners = self.address_owners();
        let mine: BTreeSet<&str> = host.nics.iter().map(|n| n.segment.as_str()).collect();
        let mut out = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
        for other in &self.hosts {
            let nics = self.nics(other);
            let on_shared = |n: &&ResolvedNic| other.name == host.name || mine.contains(n.segment.as_str());
            let addrs_of = |n: &ResolvedNic| n.addrs.iter().map(|(a, _)| *a).collect::<Vec<_>>();
            let mut chosen: Vec<IpAddr> = nics.iter().filter(on_shared).flat_map(addrs_of).collect();
            if chosen.is_empty() {
                chosen = nics
                    .iter()
                    .flat_map(addrs_of)
                    .filter(|a| owners.get(a).is_some_and(|o| o.len() == 1))
                    .collect();
            }
            chosen.sort_by_key(|a| a.is_ipv6());
            for addr in chosen {
                out.push_str(&format!("{addr}\t{}\n", other.name));
            }
        }
        out
    }

    /// Checks everything the builder relies on, so that building never fails half-way
    /// for a reason that could have been seen in the file.
    pub fn validate(&self) -> Result<(), String> {
        if self.hosts.is_empty() {
            return Err("a topology needs at least one [[host]]".into());
        }
        let mut seen = BTreeSet::new();
        for name in self.segments.iter().map(|s| &s.name) {
            check_name("segment", name, 12)?;
            if !seen.insert(name.clone()) {
                return Err(format!("segment {name:?} is declared twice"));
            }
        }
        let mut seen = BTreeSet::new();
        for name in self.hosts.iter().map(|h| &h.name) {
            check_name("host", name, 20)?;
            if name == FABRIC {
                return Err(format!("{FABRIC:?} is reserved for the testbed's switches"));
            }
            if !seen.insert(name.clone()) {
                return Err(format!("host {name:?} is declared twice"));
            }
        }
        for seg in &self.segments {
            for p in [seg.ipv4, seg.ipv6].into_iter().flatten() {
                let right_family = if seg.ipv4 == Some(p) {
                    p.addr.is_ipv4()
                } else {
                    p.addr.is_ipv6()
                };
                if !right_family {
                    return Err(format!("segment {:?}: {p} is in the wrong family", seg.name));
                }
            }
            let rates = [seg.rate_mbit, seg.wan.as_ref().and_then(|w| w.rate_mbit)];
            if rates.into_iter().flatten().any(|r| !(1..=1_000_000).contains(&r)) {
                return Err(format!("segment {:?}: a rate is 1 to 1000000 Mbit/s", seg.name));
            }
            if !(576..=9000).contains(&seg.mtu) {
                return Err(format!(
                    "segment {:?}: mtu {} is not in 576..=9000",
                    seg.name, seg.mtu
                ));
            }
            let attached = self
                .hosts
                .iter()
                .flat_map(|h| &h.nics)
                .filter(|n| n.segment == seg.name)
                .count();
            if let Some(wan) = &seg.wan {
                if attached != 2 {
                    return Err(format!(
                        "WAN segment {:?} joins exactly two NICs, not {attached}",
                        seg.name
                    ));
                }
                let pcts = [wan.loss_pct, wan.reorder_pct];
                if pcts.iter().any(|p| !(0.0..=100.0).contains(p))
                    || wan.delay_ms < 0.0
                    || wan.jitter_ms < 0.0
                    || !wan.delay_ms.is_finite()
                    || !wan.jitter_ms.is_finite()
                {
                    return Err(format!(
                        "WAN segment {:?}: delay and jitter must be ≥ 0, loss and reorder in 0..=100",
                        seg.name
                    ));
                }
            }
        }
        for host in &self.hosts {
            self.validate_host(host)?;
        }
        Ok(())
    }

    fn validate_host(&self, host: &Host) -> Result<(), String> {
        let h = &host.name;
        let mut names = BTreeSet::new();
        for (i, nic) in host.nics.iter().enumerate() {
            let seg = self
                .segment(&nic.segment)
                .ok_or_else(|| format!("host {h:?}: no segment {:?}", nic.segment))?;
            for p in [seg.ipv4, seg.ipv6].into_iter().flatten() {
                p.host(nic.index).map_err(|e| format!("host {h:?}: {e}"))?;
            }
            let name = nic.name.clone().unwrap_or_else(|| format!("eth{i}"));
            check_name("interface", &name, 15)?;
            if name == DOCKER_BRIDGE || !names.insert(name.clone()) {
                return Err(format!("host {h:?}: interface name {name:?} is used twice"));
            }
        }
        let hop_names = host.gateway.iter().chain(host.routes.iter().map(|r| &r.via));
        for via in hop_names {
            if self.next_hops(host, via).is_empty() {
                return Err(format!(
                    "host {h:?}: {via:?} is not a host on a segment {h:?} is attached to"
                ));
            }
        }
        for m in &host.masquerades {
            if !host.nics.iter().any(|n| n.segment == m.out) {
                return Err(format!(
                    "host {h:?}: masquerade out {:?} is not one of its segments",
                    m.out
                ));
            }
        }
        Ok(())
    }
}

/// The name of the namespace that holds a testbed's switches and WAN emulators.
pub const FABRIC: &str = "fabric";

/// Names become parts of namespace and interface names: keep them short and plain.
pub fn check_name(what: &str, name: &str, max: usize) -> Result<(), String> {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if name.is_empty() || name.len() > max || !plain || name.starts_with('-') {
        return Err(format!(
            "{what} name {name:?}: use 1 to {max} characters from a-z, 0-9 and '-', not starting with '-'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_place_hosts() {
        let v4: Prefix = "10.0.0.0/24".parse().unwrap();
        assert_eq!(v4.host(11).unwrap().to_string(), "10.0.0.11");
        assert!(v4.host(256).is_err());
        assert!(v4.contains("10.0.0.200".parse().unwrap()));
        assert!(!v4.contains("10.0.1.1".parse().unwrap()));
        let v6: Prefix = "2001:db8:a::/64".parse().unwrap();
        assert_eq!(v6.host(11).unwrap().to_string(), "2001:db8:a::11");
        assert!("10.0.0.1/24".parse::<Prefix>().is_err());
        assert!("10.0.0.0/33".parse::<Prefix>().is_err());
        assert!("0.0.0.0/0"
            .parse::<Prefix>()
            .unwrap()
            .contains("1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn validation_names_the_problem() {
        let bad = r#"
            [[segment]]
            name = "w"
            wan = { delay_ms = 5 }
            [[host]]
            name = "a"
            nic = [{ segment = "w", index = 1 }]
        "#;
        let err = Topology::from_toml(bad).unwrap_err();
        assert!(err.contains("exactly two"), "{err}");
        let bad = "[[host]]\nname = \"A\"\n";
        assert!(Topology::from_toml(bad).unwrap_err().contains("a-z"));
        let bad = "[[host]]\nname = \"a\"\ngateway = \"b\"\n[[host]]\nname = \"b\"\n";
        assert!(Topology::from_toml(bad)
            .unwrap_err()
            .contains("not a host on a segment"));
        let bad = "[[host]]\nname = \"a\"\ncolour = 1\n";
        assert!(Topology::from_toml(bad).unwrap_err().contains("colour"));
    }
}
