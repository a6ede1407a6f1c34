//! Candidate paths to a peer: which of its addresses to try, in which order.
//!
//! Seed 000's rules, and where pontoon goes beyond them:
//! - Same family only, and only addresses a client can plausibly reach: public IPv4 and
//!   global IPv6 whenever this host has any routable address of that family (NAT'd
//!   private hosts reach public addresses — seed 000 would skip them); private IPv4 and
//!   IPv6 ULA only where this host has that class too and the peer may share the
//!   network (same site, or a site unknown to either side).
//! - Best class first: IPv6 global, IPv4 public, IPv4 private, IPv6 ULA.
//! - Addresses on virtual bridges (docker0 …) last: on most hosts they are the same.
//! - Loopback first between ranks of one node, and never across nodes.
//!
//! - After every direct address, the peer's relays (seed 001's nat-proxy: out through
//!   our own NAT, in through one relay at the peer's site).
//!
//! Whatever the order, the authenticated handshake decides who answered: a duplicated
//! private address that reaches another node is refused and the next candidate is tried;
//! a relay that forwards to the wrong rank is caught the same way.

use crate::card::EndpointCard;
use crate::class::{classify, AddrClass};
pub use proto::PathKind;
use std::net::SocketAddr;

/// One address of a peer worth trying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The peer's address, or for a relayed path the relay's (on a two-proxy path our
    /// own site's).
    pub addr: SocketAddr,
    pub kind: PathKind,
    /// On a two-proxy path, the relay at the peer's site that ours forwards to.
    pub next: Option<SocketAddr>,
    pub class: AddrClass,
    /// The peer's interface index of this address.
    pub remote_iface: u32,
    /// On a virtual bridge: only the handshake can say whose it is.
    pub bridge: bool,
}

/// Whether a host whose address classes are `local` (with their families) should try a
/// peer address of class `class` in family `v4`.
pub fn worth_trying(local: &[(AddrClass, bool)], class: AddrClass, v4: bool) -> bool {
    let has = |c: AddrClass| local.iter().any(|&(lc, lv4)| lc == c && lv4 == v4);
    let routable = local.iter().any(|&(lc, lv4)| {
        lv4 == v4
            && matches!(
                lc,
                AddrClass::Ipv6Global | AddrClass::Ipv4Public | AddrClass::Ipv4Private | AddrClass::Ipv6Ula
            )
    });
    match class {
        AddrClass::Ipv6Global | AddrClass::Ipv4Public => routable,
        AddrClass::Ipv4Private | AddrClass::Ipv6Ula | AddrClass::Loopback => has(class),
        AddrClass::LinkLocal | AddrClass::Unusable => false,
    }
}

/// Candidates for reaching `remote` from `local`, in the order to try them.
pub fn candidates(local: &EndpointCard, remote: &EndpointCard) -> Vec<Candidate> {
    let same_node = local.node == remote.node;
    let may_share_network = match (&local.site, &remote.site) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    let local_classes: Vec<(AddrClass, bool)> = local
        .addresses()
        .map(|(_, a)| (classify(a), a.is_ipv4()))
        .collect();
    let mut out: Vec<Candidate> = Vec::new();
    for (iface, ip) in remote.addresses() {
        let class = classify(ip);
        let port = remote.port_for(ip);
        let allowed = match class {
            AddrClass::Loopback => same_node,
            AddrClass::Ipv4Private | AddrClass::Ipv6Ula => may_share_network || same_node,
            _ => true,
        };
        if port == 0 || !allowed || !worth_trying(&local_classes, class, ip.is_ipv4()) {
            continue;
        }
        let addr = SocketAddr::new(ip, port);
        if out.iter().all(|c| c.addr != addr) {
            out.push(Candidate {
                addr,
                kind: PathKind::Direct,
                next: None,
                class,
                remote_iface: iface.index,
                bridge: iface.bridge,
            });
        }
    }
    // Stable: within a rank of the key, the peer's interface order is kept.
    out.sort_by_key(|c| (!(same_node && c.class == AddrClass::Loopback), c.bridge, c.class));
    if !same_node {
        let nat_proxy = relayed(&local_classes, remote);
        let two_proxy = two_proxy(&local_classes, local, &nat_proxy);
        out.extend(nat_proxy);
        out.extend(two_proxy);
    }
    out
}

/// Two-proxy candidates: through one of our own relays (the first of its addresses we
/// can reach), on to each of the peer's relay addresses (`theirs`, the nat-proxy
/// candidates) that is not that same relay. Last of all: two user-level hops, for hosts
/// whose only way out is their relay.
fn two_proxy(
    local_classes: &[(AddrClass, bool)],
    local: &EndpointCard,
    theirs: &[Candidate],
) -> Vec<Candidate> {
    let mut out = Vec::new();
    for mine in &local.relays {
        let Some(first) = mine.addrs.iter().find(|a| {
            crate::card::globally_unique(a.ip()) && worth_trying(local_classes, classify(a.ip()), a.is_ipv4())
        }) else {
            continue;
        };
        for next in theirs.iter().filter(|c| !mine.addrs.contains(&c.addr)) {
            out.push(Candidate {
                addr: *first,
                kind: PathKind::TwoProxy,
                next: Some(next.addr),
                class: classify(first.ip()),
                remote_iface: 0,
                bridge: false,
            });
        }
    }
    out
}

/// The peer's relays, each address this host can plausibly reach, best class first.
fn relayed(local_classes: &[(AddrClass, bool)], remote: &EndpointCard) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    for addr in remote.relays.iter().flat_map(|r| &r.addrs) {
        let class = classify(addr.ip());
        let unique = crate::card::globally_unique(addr.ip());
        if !unique
            || addr.port() == 0
            || !worth_trying(local_classes, class, addr.is_ipv4())
            || out.iter().any(|c| c.addr == *addr)
        {
            continue;
        }
        out.push(Candidate {
            addr: *addr,
            kind: PathKind::NatProxy,
            next: None,
            class,
            remote_iface: 0,
            bridge: false,
        });
    }
    out.sort_by_key(|c| c.class);
    out
}

/// An additional lane to open: through local interface `device`, to one of `candidates`
/// (all on one remote interface).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanePlan {
    pub device: String,
    pub candidates: Vec<Candidate>,
}

/// Additional lanes to a peer already connected by a first lane between the local
/// address `first_local` and the peer's `first_remote`: one per further pair of
/// interfaces, at most min(#local, #remote) lanes in all, never two lanes from one local
/// interface or onto one remote interface (so IPv4 and IPv6 are never striped over one
/// NIC). Loopback and virtual bridges never carry lanes; neither do ranks of one node.
/// The remote interface for a local one is the first, in candidate order, that has an
/// address of a class and family the local interface has too; the connect is bound to
/// the local interface, so a pair with no route between them simply fails.
pub fn extra_lanes(
    local: &EndpointCard,
    remote: &EndpointCard,
    first_local: std::net::IpAddr,
    first_remote: std::net::IpAddr,
) -> Vec<LanePlan> {
    if local.node == remote.node {
        return Vec::new();
    }
    let usable = |i: &&crate::card::CardIface| !i.loopback && !i.bridge && !i.addrs.is_empty();
    let mine: Vec<_> = local.ifaces.iter().filter(usable).collect();
    let theirs: Vec<_> = remote.ifaces.iter().filter(usable).collect();
    let most = mine.len().min(theirs.len());
    let owner = |ifaces: &[&crate::card::CardIface], ip| {
        ifaces.iter().find(|i| i.addrs.contains(&ip)).map(|i| i.index)
    };
    let mut used_local: Vec<u32> = owner(&mine, first_local).into_iter().collect();
    let mut used_remote: Vec<u32> = owner(&theirs, first_remote).into_iter().collect();
    let all = candidates(local, remote);
    let mut plans = Vec::new();
    for l in &mine {
        if plans.len() + 1 >= most {
            break;
        }
        if used_local.contains(&l.index) {
            continue;
        }
        let classes: Vec<(AddrClass, bool)> = l.addrs.iter().map(|a| (classify(*a), a.is_ipv4())).collect();
        let fits = |c: &&Candidate| {
            c.kind == PathKind::Direct
                && !c.bridge
                && !used_remote.contains(&c.remote_iface)
                && classes.contains(&(c.class, c.addr.is_ipv4()))
        };
        let Some(target) = all.iter().find(fits).map(|c| c.remote_iface) else {
            continue;
        };
        let candidates: Vec<Candidate> = all
            .iter()
            .filter(fits)
            .filter(|c| c.remote_iface == target)
            .copied()
            .collect();
        used_local.push(l.index);
        used_remote.push(target);
        plans.push(LanePlan {
            device: l.name.clone(),
            candidates,
        });
    }
    plans
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::card::CardIface;

    fn card(node: u64, site: Option<&str>, ifaces: &[(&str, &[&str])]) -> EndpointCard {
        EndpointCard {
            node,
            site: site.map(str::to_string),
            seen_from: None,
            control_rtt_us: None,
            port4: 4000,
            port6: 6000,
            relays: Vec::new(),
            ifaces: ifaces
                .iter()
                .enumerate()
                .map(|(i, (name, addrs))| CardIface {
                    index: i as u32 + 1,
                    name: name.to_string(),
                    mac: None,
                    mtu: 1500,
                    bridge: crate::card::is_virtual_bridge(name),
                    loopback: *name == "lo",
                    addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
                    raw_eth: false,
                })
                .collect(),
        }
    }

    fn order(c: &[Candidate]) -> Vec<String> {
        c.iter().map(|c| c.addr.to_string()).collect()
    }

    const A_C1: &[(&str, &[&str])] = &[
        ("lo", &["127.0.0.1", "::1"]),
        ("eth0", &["10.0.0.11", "2001:db8:a::11"]),
        ("docker0", &["172.17.0.1"]),
    ];
    const B_C1: &[(&str, &[&str])] = &[
        ("lo", &["127.0.0.1", "::1"]),
        ("eth0", &["10.0.0.11", "2001:db8:b::11"]),
        ("docker0", &["172.17.0.1"]),
    ];

    #[test]
    fn across_clusters_global_first_private_and_bridges_last_never_loopback() {
        let v = candidates(&card(1, None, A_C1), &card(2, None, B_C1));
        assert_eq!(
            order(&v),
            ["[2001:db8:b::11]:6000", "10.0.0.11:4000", "172.17.0.1:4000"]
        );
        assert!(v[2].bridge);
        // Known to be in different sites: no private address (bridges included) is even tried.
        let v = candidates(&card(1, Some("a"), A_C1), &card(2, Some("b"), B_C1));
        assert_eq!(order(&v), ["[2001:db8:b::11]:6000"]);
    }

    #[test]
    fn same_node_uses_loopback_first() {
        let v = candidates(&card(1, None, A_C1), &card(1, None, A_C1));
        assert_eq!(&order(&v)[..2], ["127.0.0.1:4000", "[::1]:6000"]);
    }

    #[test]
    fn nat_d_private_hosts_try_public_addresses_but_no_foreign_family() {
        let private_v4_only: &[(&str, &[&str])] = &[("eth0", &["10.0.0.11"])];
        let head: &[(&str, &[&str])] = &[
            ("eth0", &["10.0.0.1"]),
            ("eth1", &["198.51.100.2", "2001:db8::2"]),
        ];
        let v = candidates(&card(1, None, private_v4_only), &card(2, None, head));
        assert_eq!(order(&v), ["198.51.100.2:4000", "10.0.0.1:4000"]);
    }

    const MULTINIC_1: &[(&str, &[&str])] = &[
        ("lo", &["127.0.0.1"]),
        ("eth0", &["10.0.0.1", "fd00:0:0:1::1"]),
        ("eth1", &["10.0.1.1", "fd00:0:0:2::1"]),
        ("docker0", &["172.17.0.1"]),
    ];
    const MULTINIC_2: &[(&str, &[&str])] = &[
        ("lo", &["127.0.0.1"]),
        ("eth0", &["10.0.0.2", "fd00:0:0:1::2"]),
        ("eth1", &["10.0.1.2", "fd00:0:0:2::2"]),
        ("docker0", &["172.17.0.1"]),
    ];

    #[test]
    fn one_more_lane_per_further_interface_pair() {
        let (a, b) = (card(1, None, MULTINIC_1), card(2, None, MULTINIC_2));
        let first = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let plans = extra_lanes(&a, &b, first.0, first.1);
        assert_eq!(plans.len(), 1, "{plans:?}");
        assert_eq!(plans[0].device, "eth1");
        assert_eq!(
            order(&plans[0].candidates),
            ["10.0.1.2:4000", "[fd00:0:0:2::2]:6000"]
        );
        // The first lane over IPv6 on eth0 leaves eth0 alone all the same.
        let v6 = extra_lanes(
            &a,
            &b,
            "fd00:0:0:1::1".parse().unwrap(),
            "fd00:0:0:1::2".parse().unwrap(),
        );
        assert_eq!(v6[0].device, "eth1");
        // One NIC on either side (bridges and loopback do not count): no more lanes.
        let one: &[(&str, &[&str])] = &[
            ("eth0", &["10.0.0.3", "fd00:0:0:1::3"]),
            ("docker0", &["172.17.0.1"]),
        ];
        assert!(extra_lanes(&a, &card(3, None, one), first.0, "10.0.0.3".parse().unwrap()).is_empty());
        assert!(
            extra_lanes(&a, &card(1, None, MULTINIC_1), first.0, first.0).is_empty(),
            "same node"
        );
    }

    #[test]
    fn relays_come_after_every_direct_address_and_only_their_unique_addresses() {
        let private_v4_only: &[(&str, &[&str])] = &[("eth0", &["10.0.0.11"])];
        let mut target = card(2, None, private_v4_only);
        target.relays = vec![crate::card::CardRelay {
            addrs: [
                "10.0.0.1:7426",
                "198.51.100.2:7426",
                "[2001:db8::2]:7426",
                "198.51.100.2:7426",
            ]
            .map(|a| a.parse().unwrap())
            .to_vec(),
        }];
        let v = candidates(&card(1, None, private_v4_only), &target);
        assert_eq!(order(&v), ["10.0.0.11:4000", "198.51.100.2:7426"]);
        assert_eq!(v[1].kind, PathKind::NatProxy);
        // Another site: no private address of the peer, but its relay all the same.
        let v = candidates(&card(1, Some("a"), private_v4_only), &{
            let mut t = target.clone();
            t.site = Some("b".into());
            t
        });
        assert_eq!(order(&v), ["198.51.100.2:7426"]);
        // A dual-stack requester may reach the relay over either family, IPv6 first.
        let dual: &[(&str, &[&str])] = &[("eth0", &["10.0.0.11", "2001:db8:c::11"])];
        let v = candidates(&card(1, Some("a"), dual), &{
            let mut t = target.clone();
            t.site = Some("b".into());
            t
        });
        assert_eq!(order(&v), ["[2001:db8::2]:7426", "198.51.100.2:7426"]);
        // Ranks of one node never go through a relay; further lanes never do either.
        assert!(candidates(&target, &target)
            .iter()
            .all(|c| c.kind == PathKind::Direct));
    }

    #[test]
    fn two_proxy_goes_through_our_relay_to_each_other_relay_of_the_peer_last() {
        let relay = |addrs: &[&str]| crate::card::CardRelay {
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
        };
        let (ours, theirs) = (
            relay(&["10.0.0.1:7426", "198.51.100.1:7426"]),
            relay(&["198.51.100.2:7426", "[2001:db8::2]:7426"]),
        );
        let private_v4_only: &[(&str, &[&str])] = &[("eth0", &["10.0.0.11"])];
        let mut me = card(1, Some("a"), private_v4_only);
        me.relays = vec![ours.clone()];
        let mut peer = card(2, Some("b"), private_v4_only);
        peer.relays = vec![theirs, ours];
        let v = candidates(&me, &peer);
        let kinds: Vec<(PathKind, String, Option<String>)> = v
            .iter()
            .map(|c| (c.kind, c.addr.to_string(), c.next.map(|n| n.to_string())))
            .collect();
        assert_eq!(
            kinds,
            [
                (PathKind::NatProxy, "198.51.100.2:7426".into(), None),
                (PathKind::NatProxy, "198.51.100.1:7426".into(), None),
                // Never on to our own relay again.
                (
                    PathKind::TwoProxy,
                    "198.51.100.1:7426".into(),
                    Some("198.51.100.2:7426".into())
                ),
            ]
        );
    }

    #[test]
    fn the_rules_for_each_class() {
        let local = [(AddrClass::Ipv4Private, true), (AddrClass::Ipv6Ula, false)];
        assert!(worth_trying(&local, AddrClass::Ipv4Public, true));
        assert!(worth_trying(&local, AddrClass::Ipv6Global, false));
        assert!(worth_trying(&local, AddrClass::Ipv6Ula, false));
        assert!(!worth_trying(&local, AddrClass::Ipv4Private, false));
        assert!(!worth_trying(&local, AddrClass::Loopback, true));
        assert!(!worth_trying(&local, AddrClass::LinkLocal, true));
        assert!(!worth_trying(
            &[(AddrClass::Loopback, true)],
            AddrClass::Ipv4Public,
            true
        ));
    }
}
