//! Sites inferred from the endpoint cards, for a job whose launcher declared none: the
//! site-aware collectives then need no hand configuration.
//!
//! Two signals, both on every card, so every rank infers the same sites:
//! - how far each rank is from the launcher's coordinator (its control connection's round
//!   trip, as its kernel measured it): a job whose ranks are all within a LAN's round trip
//!   of it is one site, whatever its subnets;
//! - which network a far rank is on: the NAT it sits behind (its control connection came
//!   from another address than its own), or else the subnets of its addresses (/24, /64).
//!
//! The ranks near the coordinator are one site; the far ones are grouped by shared NAT or
//! subnet. A wrong guess costs speed, never correctness (any split is a valid input of the
//! site-aware algorithms): one network leaving through several NATs counts as several
//! sites, and two far sites are told apart only by their networks, not by their distance
//! from each other. A declared site (`PONTOON_SITE`, a hostfile's `site=`) always wins.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::card::EndpointCard;
use crate::card_table::CardTable;
use crate::class::{classify, AddrClass};

/// A rank this far from the coordinator (round trip, µs) is at another site: the round
/// trip from which a lane is a WAN lane.
pub const FAR_RTT_US: u32 = (proto::caps::WAN_RTT_NS / 1000) as u32;

/// The sites of the ranks of `cards` when the cards show two or more; `None` when they
/// show one, declare sites themselves, or lack a round trip (ranks started through PMI
/// have no control connection to measure). Reads the whole cards only when some are far.
pub fn infer(cards: &CardTable) -> Option<Vec<String>> {
    let heads = cards.heads();
    if heads.iter().any(|c| c.site.is_some()) {
        return None;
    }
    let rtts: Vec<u32> = heads.iter().map(|c| c.control_rtt_us).collect::<Option<_>>()?;
    // A node is as far as its nearest rank says: a sample that a busy host delayed must
    // not split a node; ranks on the coordinator's own host are near by definition.
    let mut node_rtt: BTreeMap<u64, u32> = BTreeMap::new();
    for (c, &rtt) in heads.iter().zip(&rtts) {
        let rtt = if c.seen_from.is_some_and(|a| a.is_loopback()) {
            0
        } else {
            rtt
        };
        node_rtt
            .entry(c.node)
            .and_modify(|r| *r = (*r).min(rtt))
            .or_insert(rtt);
    }
    if node_rtt.values().all(|&r| r < FAR_RTT_US) {
        return None;
    }
    let keys: Vec<BTreeSet<String>> = (0..heads.len() as u32)
        .map(|r| cards.get(r).map(network_keys).unwrap_or_default())
        .collect();
    let far = |i: usize| node_rtt[&heads[i].node] >= FAR_RTT_US;
    // Union-find over the ranks: the near ones together, far ones sharing a network.
    let mut parent: Vec<usize> = (0..cards.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for i in 0..heads.len() {
        for j in 0..i {
            let together = match (far(i), far(j)) {
                (false, false) => true,
                (true, true) => heads[i].node == heads[j].node || !keys[i].is_disjoint(&keys[j]),
                _ => false,
            };
            if together {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let roots: Vec<usize> = (0..heads.len()).map(|i| root(&mut parent, i)).collect();
    if roots.iter().all(|&r| r == roots[0]) {
        return None;
    }
    // A site's name: its first network's (far sites share none, so names are unique;
    // the launcher's site says it is, in case a far one has the same network).
    Some(
        roots
            .iter()
            .map(|&r| {
                let net = keys[r].iter().next().map_or("no address", String::as_str);
                let whose = if far(r) { "" } else { ", the launcher's" };
                format!("{net} (inferred{whose})")
            })
            .collect(),
    )
}

/// The networks a card's rank is on: the NAT it sits behind, or else the /24 (IPv4) and
/// /64 (IPv6) subnets of its addresses that could be shared with another host (not
/// loopback, link-local or a container bridge's, which exist alike on every host) and
/// the networks behind those addresses, should the host be its cluster's NAT.
fn network_keys(card: &EndpointCard) -> BTreeSet<String> {
    if let Some(nat) = card.nat() {
        return BTreeSet::from([behind(nat)]);
    }
    card.ifaces
        .iter()
        .filter(|i| !i.loopback && !i.bridge)
        .flat_map(|i| i.addrs.iter().copied())
        .filter(|&a| {
            !matches!(
                classify(a),
                AddrClass::Loopback | AddrClass::LinkLocal | AddrClass::Unusable
            )
        })
        .flat_map(|a| [subnet(a), behind(a)])
        .collect()
}

fn behind(nat: IpAddr) -> String {
    format!("behind NAT {nat}")
}

fn subnet(addr: IpAddr) -> String {
    match addr {
        IpAddr::V4(a) => {
            let [x, y, z, _] = a.octets();
            format!("{x}.{y}.{z}.0/24")
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::card::CardIface;

    /// A host's card: `node`, its address on eth0, where the coordinator saw it come from
    /// (`None`: from its own address), its round trip to the coordinator in µs.
    fn card(node: u64, addr: &str, seen: Option<&str>, rtt_us: u32) -> EndpointCard {
        let addr: IpAddr = addr.parse().unwrap();
        EndpointCard {
            node,
            site: None,
            seen_from: Some(seen.map_or(addr, |s| s.parse().unwrap())),
            control_rtt_us: Some(rtt_us),
            port4: 1,
            port6: 0,
            ifaces: vec![
                CardIface {
                    index: 1,
                    name: "eth0".into(),
                    mac: None,
                    mtu: 1500,
                    bridge: false,
                    loopback: false,
                    addrs: vec![addr],
                    raw_eth: false,
                },
                // Every host has the same docker bridge: it joins nothing.
                CardIface {
                    index: 2,
                    name: "docker0".into(),
                    mac: None,
                    mtu: 1500,
                    bridge: true,
                    loopback: false,
                    addrs: vec!["172.17.0.1".parse().unwrap()],
                    raw_eth: false,
                },
            ],
            relays: Vec::new(),
        }
    }

    fn table(cards: &[EndpointCard]) -> CardTable {
        CardTable::from_encoded(cards.iter().map(EndpointCard::encode).collect()).unwrap()
    }

    /// Which ranks share a site, as a partition by the first rank of each.
    fn partition(sites: &[String]) -> Vec<usize> {
        sites
            .iter()
            .map(|s| sites.iter().position(|t| t == s).unwrap())
            .collect()
    }

    #[test]
    fn two_routed_clusters_far_apart_are_two_sites_and_their_ranks_on_one_node_one() {
        // The testbed's `wan`: the coordinator on a-h1; b's hosts 20 ms away. The fifth
        // rank's sample was delayed on a busy host: its node's other rank says better.
        let cards = [
            card(1, "10.1.0.11", None, 30),
            card(2, "10.2.0.11", None, 20_000),
            card(3, "10.1.0.12", None, 60),
            card(4, "10.2.0.12", None, 20_300),
            card(1, "10.1.0.11", None, 9_000),
        ];
        let sites = infer(&table(&cards)).expect("two sites");
        assert_eq!(partition(&sites), [0, 1, 0, 1, 0]);
        assert!(sites[1].contains("10.2.0.0/24"), "{sites:?}");
        assert_eq!(sites[0], "10.1.0.0/24 (inferred, the launcher's)");
        assert_eq!(sites[1], "10.2.0.0/24 (inferred)");
    }

    #[test]
    fn clusters_behind_nats_with_identical_subnets_are_told_apart_by_their_nat() {
        let cards = [
            card(1, "192.168.1.10", None, 40),
            card(2, "192.168.1.10", Some("198.51.100.7"), 31_000),
            card(3, "192.168.1.11", Some("198.51.100.7"), 30_000),
            card(4, "192.168.1.10", Some("203.0.113.9"), 45_000),
        ];
        let sites = infer(&table(&cards)).expect("three sites");
        assert_eq!(partition(&sites), [0, 1, 1, 3]);
        assert!(sites[3].contains("behind NAT 203.0.113.9"), "{sites:?}");
        // A cluster's head is its compute nodes' NAT, with the same private subnet as the
        // launcher's cluster: it is at its nodes' site.
        let mut head = card(5, "192.168.1.1", None, 30_000);
        head.ifaces[0].addrs.push("198.51.100.7".parse().unwrap());
        let cards = [cards[0].clone(), cards[1].clone(), head];
        assert_eq!(partition(&infer(&table(&cards)).unwrap()), [0, 1, 1]);
    }

    #[test]
    fn one_lan_is_one_site_whatever_its_subnets() {
        let cards = [
            card(1, "10.0.0.1", None, 50),
            card(2, "10.0.7.1", None, 120),
            card(3, "fd00:1::5", None, 80),
        ];
        assert_eq!(infer(&table(&cards)), None);
        // 128 ranks on one overloaded host, some samples slow: one node, one site.
        let cards: Vec<_> = (0..128)
            .map(|i| card(9, "10.0.0.1", None, 100 + 50 * i))
            .collect();
        assert_eq!(infer(&table(&cards)), None);
    }

    #[test]
    fn declared_sites_or_a_missing_round_trip_leave_it_to_the_declaration() {
        let mut cards = vec![card(1, "10.1.0.11", None, 30), card(2, "10.2.0.11", None, 20_000)];
        assert!(infer(&table(&cards)).is_some());
        cards[0].site = Some("a".into());
        assert_eq!(infer(&table(&cards)), None);
        cards[0].site = None;
        cards[1].control_rtt_us = None; // started through PMI
        assert_eq!(infer(&table(&cards)), None);
    }

    #[test]
    fn a_far_host_on_two_networks_joins_the_sites_of_both() {
        let mut bridge = card(3, "10.2.0.13", None, 20_000);
        bridge.ifaces[0].addrs.push("10.3.0.13".parse().unwrap());
        let cards = [
            card(1, "10.1.0.11", None, 30),
            card(2, "10.2.0.11", None, 20_000),
            bridge,
            card(4, "10.3.0.14", None, 20_000),
        ];
        assert_eq!(partition(&infer(&table(&cards)).unwrap()), [0, 1, 1, 1]);
    }
}
