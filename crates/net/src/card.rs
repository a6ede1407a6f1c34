//! Endpoint cards: what a rank tells every other rank about how to reach it — per
//! interface its kernel index, name, MAC, MTU and addresses, plus its node and site —
//! exchanged through the coordinator's key-value fence in postcard form.
//!
//! Classes are not sent: the receiver classifies every address itself, so a peer
//! cannot talk it into trusting an address.

use crate::class::{classify, AddrClass};
use crate::iface::Interface;
use crate::policy::IfPolicy;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

/// Limits checked on decoding: far above any real host, small enough that a hostile
/// card cannot make a rank allocate much.
pub const MAX_IFACES: usize = 256;
pub const MAX_ADDRS_PER_IFACE: usize = 64;
pub const MAX_NAME: usize = 64;
pub const MAX_RELAYS: usize = 16;

/// A relay that forwards streams to this rank (`pontoon relay` on its cluster's
/// front-end node; `docs/relay.md`): where others reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardRelay {
    /// The relay's globally unique addresses (IPv4 public, IPv6 global): a private
    /// address of a relay could name another host at the requester's site.
    pub addrs: Vec<SocketAddr>,
}

/// Parses a list of relays as `PONTOON_RELAYS` gives it (and `pontoon run` writes it):
/// relays separated by `;`, each a comma list of its `ADDR:PORT`. Bounded like a card.
pub fn parse_relays(value: &str) -> Result<Vec<Vec<SocketAddr>>, String> {
    let mut out = Vec::new();
    for relay in value.split(';').map(str::trim).filter(|r| !r.is_empty()) {
        let addrs = relay
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|a| {
                a.parse::<SocketAddr>()
                    .map_err(|e| format!("`{a}` is not ADDR:PORT ({e}); IPv6 as [ADDR]:PORT"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if addrs.len() > MAX_ADDRS_PER_IFACE {
            return Err(format!("a relay with more than {MAX_ADDRS_PER_IFACE} addresses"));
        }
        out.push(addrs);
    }
    if out.len() > MAX_RELAYS {
        return Err(format!("more than {MAX_RELAYS} relays"));
    }
    Ok(out)
}

/// Whether a relay address is worth putting on a card: one that names the same host
/// wherever the requester is.
pub fn globally_unique(addr: IpAddr) -> bool {
    matches!(classify(addr), AddrClass::Ipv4Public | AddrClass::Ipv6Global)
}

/// One interface on a card.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardIface {
    pub index: u32,
    pub name: String,
    pub mac: Option<[u8; 6]>,
    pub mtu: u32,
    /// A virtual bridge (docker0, virbr0, cni0, …): the same address often exists on
    /// every host, so its addresses are tried last and never trusted without the handshake.
    pub bridge: bool,
    pub loopback: bool,
    pub addrs: Vec<IpAddr>,
    /// The rank takes raw-Ethernet lanes on this interface (it holds `CAP_NET_RAW` and
    /// opened a socket there): peers on its L2 segment may probe it.
    pub raw_eth: bool,
}

/// How to reach one rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointCard {
    /// Same value on ranks of the same host (kernel boot id and hostname).
    pub node: u64,
    /// The launcher's host group (`PONTOON_SITE`), if it gave one. Private addresses of a
    /// peer are tried only where it may share the network: same site, or unknown.
    pub site: Option<String>,
    /// The address the launcher's coordinator saw this rank's control connection come
    /// from; not one of the card's addresses when a NAT lies in between (see
    /// [`EndpointCard::nat`]).
    pub seen_from: Option<IpAddr>,
    /// This rank's round trip to the coordinator (its control connection, as its kernel
    /// measured it), in µs; `None` without one (ranks started through PMI). Far ranks are
    /// at another site ([`crate::sites::infer`]).
    pub control_rtt_us: Option<u32>,
    /// Listening ports (0: no listener of that family).
    pub port4: u16,
    pub port6: u16,
    pub ifaces: Vec<CardIface>,
    /// Relays this rank is registered with: a requester that cannot reach it directly
    /// asks one of them to forward a stream.
    pub relays: Vec<CardRelay>,
}

/// Names of the virtual bridges that container and VM managers create on every host.
const BRIDGE_PREFIXES: &[&str] = &[
    "docker", "br-", "virbr", "cni", "flannel", "cali", "weave", "lxcbr", "lxdbr", "podman", "kube-",
    "vboxnet", "vmnet", "nerdctl",
];

/// Whether an interface name is a container or VM manager's virtual bridge.
pub fn is_virtual_bridge(name: &str) -> bool {
    BRIDGE_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Addresses worth advertising: not link-local (needs a scope) and not unusable.
fn advertised(addr: IpAddr) -> bool {
    !matches!(classify(addr), AddrClass::LinkLocal | AddrClass::Unusable)
}

impl EndpointCard {
    /// The card of this rank: interfaces that are up, addresses the policy allows.
    pub fn new(
        ifaces: &[Interface],
        policy: &IfPolicy,
        node: u64,
        site: Option<String>,
        ports: (u16, u16),
    ) -> EndpointCard {
        let ifaces = ifaces
            .iter()
            .filter(|i| i.up)
            .filter_map(|i| {
                let addrs: Vec<IpAddr> = i
                    .addrs
                    .iter()
                    .copied()
                    .filter(|a| advertised(*a) && policy.allows(&i.name, *a))
                    .collect();
                (!addrs.is_empty()).then(|| CardIface {
                    index: i.index,
                    name: i.name.clone(),
                    mac: i.mac,
                    mtu: i.mtu.unwrap_or(0),
                    bridge: is_virtual_bridge(&i.name),
                    loopback: i.loopback,
                    addrs,
                    raw_eth: false,
                })
            })
            .collect();
        EndpointCard {
            node,
            site,
            seen_from: None,
            control_rtt_us: None,
            port4: ports.0,
            port6: ports.1,
            ifaces,
            relays: Vec::new(),
        }
    }

    /// The NAT this rank sits behind, as far as the coordinator can tell: the address its
    /// control connection came from when that is none of the rank's own (a rank of the
    /// coordinator's own host, loopback, is behind none). Ranks behind one NAT share a
    /// private network; ranks behind different NATs probably do not — but one network can
    /// leave through several NAT addresses (one gateway per zone in a cloud VPC), so this
    /// orders candidates and explains failures; only a declared site excludes addresses.
    pub fn nat(&self) -> Option<IpAddr> {
        let seen = self.seen_from?;
        let own = seen.is_loopback() || self.addresses().any(|(_, a)| a == seen);
        (!own).then_some(seen)
    }

    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("a card always serializes")
    }

    /// Decodes a peer's card; never panics, whatever the bytes.
    pub fn decode(bytes: &[u8]) -> Result<EndpointCard, String> {
        let card: EndpointCard =
            postcard::from_bytes(bytes).map_err(|e| format!("malformed endpoint card: {e}"))?;
        if card.ifaces.len() > MAX_IFACES {
            return Err(format!(
                "endpoint card lists {} interfaces (limit {MAX_IFACES})",
                card.ifaces.len()
            ));
        }
        for i in &card.ifaces {
            if i.addrs.len() > MAX_ADDRS_PER_IFACE || i.name.len() > MAX_NAME {
                return Err(format!(
                    "endpoint card: interface {:?} is implausibly large",
                    i.name
                ));
            }
        }
        if card.relays.len() > MAX_RELAYS || card.relays.iter().any(|r| r.addrs.len() > MAX_ADDRS_PER_IFACE) {
            return Err("endpoint card: too many relays or relay addresses".into());
        }
        check_site(card.site.as_deref())?;
        Ok(card)
    }

    /// The listening port for `addr`'s family (0: none).
    pub fn port_for(&self, addr: IpAddr) -> u16 {
        if addr.is_ipv4() {
            self.port4
        } else {
            self.port6
        }
    }

    /// Every (interface, address) pair.
    pub fn addresses(&self) -> impl Iterator<Item = (&CardIface, IpAddr)> {
        self.ifaces
            .iter()
            .flat_map(|i| i.addrs.iter().map(move |a| (i, *a)))
    }
}

/// A card's site, as decoding bounds it (the whole card, or its head alone).
pub(crate) fn check_site(site: Option<&str>) -> Result<(), String> {
    match site {
        Some(s) if s.len() > MAX_NAME => Err("endpoint card: site name too long".into()),
        _ => Ok(()),
    }
}

/// FNV-1a: a stable 64-bit hash (std's hasher may differ between builds).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// This host's node id: the kernel's boot id with the hostname (testbed hosts have a
/// boot id each; containers that share a kernel usually differ in hostname) and the
/// network namespace: ranks of one node meet in the abstract socket namespace to share
/// memory, so containers that share a kernel and a hostname but not a network namespace
/// are different nodes.
pub fn node_id() -> u64 {
    use std::os::unix::fs::MetadataExt;
    let boot = std::fs::read("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let host = std::fs::read("/proc/sys/kernel/hostname").unwrap_or_default();
    let netns = std::fs::metadata("/proc/self/ns/net")
        .map(|m| [m.dev().to_le_bytes(), m.ino().to_le_bytes()].concat())
        .unwrap_or_default();
    fnv1a(&[boot.trim_ascii(), host.trim_ascii(), &netns])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(index: u32, name: &str, addrs: &[&str]) -> Interface {
        Interface {
            index,
            name: name.into(),
            mac: Some([2, 0, 0, 0, 0, index as u8]),
            mtu: Some(1500),
            up: true,
            loopback: name == "lo",
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn cards_keep_usable_allowed_addresses_and_flag_bridges() {
        let ifaces = [
            iface(1, "lo", &["127.0.0.1", "::1"]),
            iface(2, "eth0", &["10.0.0.11", "2001:db8:a::11", "fe80::1"]),
            iface(3, "docker0", &["172.17.0.1"]),
            iface(4, "eth1", &["fe80::2"]),
        ];
        let card = EndpointCard::new(&ifaces, &IfPolicy::default(), 7, None, (1000, 1001));
        let names: Vec<&str> = card.ifaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            ["lo", "eth0", "docker0"],
            "eth1 has only a link-local address"
        );
        assert_eq!(card.ifaces[1].addrs.len(), 2);
        assert!(card.ifaces[2].bridge && !card.ifaces[1].bridge);
        let policy = IfPolicy::parse("", "docker*").unwrap();
        let card2 = EndpointCard::new(&ifaces, &policy, 7, None, (1000, 1001));
        assert!(card2.ifaces.iter().all(|i| i.name != "docker0"));
        assert_eq!(EndpointCard::decode(&card.encode()).unwrap(), card);
    }

    #[test]
    fn a_nat_is_a_seen_address_that_is_not_our_own() {
        let ifaces = [iface(1, "lo", &["127.0.0.1"]), iface(2, "eth0", &["10.0.0.11"])];
        let mut card = EndpointCard::new(&ifaces, &IfPolicy::default(), 7, None, (1, 1));
        assert_eq!(card.nat(), None, "nothing seen, nothing known");
        for own in ["10.0.0.11", "127.0.0.1", "::1"] {
            card.seen_from = Some(own.parse().unwrap());
            assert_eq!(card.nat(), None, "{own} is this host's");
        }
        card.seen_from = Some("198.51.100.2".parse().unwrap());
        assert_eq!(card.nat(), Some("198.51.100.2".parse().unwrap()));
        let back = EndpointCard::decode(&card.encode()).unwrap();
        assert_eq!(back.nat(), card.nat(), "travels in the card");
    }

    #[test]
    fn decoding_rejects_garbage_and_oversized_cards() {
        assert!(EndpointCard::decode(&[0xff; 7]).is_err());
        let mut card = EndpointCard::new(&[], &IfPolicy::default(), 1, None, (1, 1));
        card.ifaces = vec![
            CardIface {
                index: 1,
                name: "x".into(),
                mac: None,
                mtu: 0,
                bridge: false,
                loopback: false,
                addrs: vec![],
                raw_eth: false,
            };
            MAX_IFACES + 1
        ];
        assert!(EndpointCard::decode(&card.encode())
            .unwrap_err()
            .contains("interfaces"));
        card.ifaces.clear();
        let relay = CardRelay {
            addrs: vec!["198.51.100.1:7426".parse().unwrap()],
        };
        card.relays = vec![relay; MAX_RELAYS];
        assert_eq!(EndpointCard::decode(&card.encode()).unwrap(), card);
        card.relays.push(card.relays[0].clone());
        assert!(EndpointCard::decode(&card.encode())
            .unwrap_err()
            .contains("relays"));
    }

    #[test]
    fn node_ids_are_stable() {
        assert_eq!(node_id(), node_id());
        assert_ne!(fnv1a(&[b"a", b"bc"]), fnv1a(&[b"ab", b"c"]));
    }
}
