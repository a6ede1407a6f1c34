//! Interface discovery: what this host's NICs and addresses are.

use crate::class::{classify, AddrClass};
use std::net::IpAddr;

/// One network interface of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Kernel interface index (stable while the interface exists); peers use it to
    /// tell which of our addresses sit on the same NIC.
    pub index: u32,
    pub name: String,
    pub mac: Option<[u8; 6]>,
    pub mtu: Option<u32>,
    /// Administratively up (IFF_UP).
    pub up: bool,
    pub loopback: bool,
    /// Every address, usable or not (tentative or DAD-failed IPv6 addresses excluded).
    pub addrs: Vec<IpAddr>,
}

fn from_netdev(i: netdev::Interface) -> Interface {
    let mut addrs: Vec<IpAddr> = i.ipv4.iter().map(|n| IpAddr::V4(n.addr())).collect();
    for (k, n) in i.ipv6.iter().enumerate() {
        // An address still in duplicate address detection (or that failed it) cannot
        // be bound or reached yet; advertising it would only produce failed attempts.
        let unusable = i
            .ipv6_addr_flags
            .get(k)
            .is_some_and(|f| f.tentative || f.duplicated);
        if !unusable {
            addrs.push(IpAddr::V6(n.addr()));
        }
    }
    let mac = i.mac_addr.map(|m| m.octets()).filter(|m| *m != [0; 6]);
    Interface {
        index: i.index,
        up: i.is_up(),
        loopback: i.is_loopback(),
        name: i.name,
        mac,
        mtu: i.mtu,
        addrs,
    }
}

/// Every interface of this host, in kernel index order: over rtnetlink on Linux
/// (`netlink.rs`: a fifth of the cost), through `netdev` elsewhere or if that fails.
pub fn interfaces() -> Vec<Interface> {
    #[cfg(target_os = "linux")]
    if let Ok(v) = crate::netlink::interfaces() {
        return v;
    }
    interfaces_by_netdev()
}

pub(crate) fn interfaces_by_netdev() -> Vec<Interface> {
    let mut v: Vec<Interface> = netdev::get_interfaces().into_iter().map(from_netdev).collect();
    v.sort_by_key(|i| i.index);
    v
}

/// Usable addresses of the given interfaces: up interfaces only, link-local and
/// unusable classes skipped, loopback kept (it reaches ranks on this host), best
/// class first, then interface index order. An address on two interfaces is listed once.
pub fn usable_addresses(ifaces: &[Interface]) -> Vec<(IpAddr, AddrClass, String)> {
    let mut out: Vec<(IpAddr, AddrClass, String)> = Vec::new();
    for i in ifaces.iter().filter(|i| i.up) {
        for &a in &i.addrs {
            let c = classify(a);
            if matches!(c, AddrClass::LinkLocal | AddrClass::Unusable) || out.iter().any(|o| o.0 == a) {
                continue;
            }
            out.push((a, c, i.name.clone()));
        }
    }
    out.sort_by_key(|o| o.1);
    out
}

/// Usable addresses of this host: `(address, class, interface name)`, best class first.
pub fn local_addresses() -> Vec<(IpAddr, AddrClass, String)> {
    usable_addresses(&interfaces())
}

/// The usable addresses of `ifaces` that `policy` allows.
pub fn allowed_addresses(ifaces: &[Interface], policy: &crate::IfPolicy) -> Vec<(IpAddr, AddrClass, String)> {
    let mut v = usable_addresses(ifaces);
    v.retain(|(addr, _, iface)| policy.allows(iface, *addr));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(index: u32, name: &str, up: bool, addrs: &[&str]) -> Interface {
        Interface {
            index,
            name: name.into(),
            mac: None,
            mtu: Some(1500),
            up,
            loopback: name == "lo",
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn usable_skips_link_local_and_down_interfaces_and_sorts_best_first() {
        let v = usable_addresses(&[
            iface(1, "lo", true, &["127.0.0.1", "::1"]),
            iface(
                2,
                "eth0",
                true,
                &["10.1.2.3", "fe80::1", "2001:db8::5", "169.254.3.4"],
            ),
            iface(3, "eth1", false, &["192.0.2.9"]),
            iface(4, "eth2", true, &["198.51.100.3", "fd00::2", "10.1.2.3"]),
        ]);
        let got: Vec<(String, AddrClass, &str)> = v
            .iter()
            .map(|(a, c, n)| (a.to_string(), *c, n.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("2001:db8::5".into(), AddrClass::Ipv6Global, "eth0"),
                ("198.51.100.3".into(), AddrClass::Ipv4Public, "eth2"),
                ("10.1.2.3".into(), AddrClass::Ipv4Private, "eth0"),
                ("fd00::2".into(), AddrClass::Ipv6Ula, "eth2"),
                ("127.0.0.1".into(), AddrClass::Loopback, "lo"),
                ("::1".into(), AddrClass::Loopback, "lo"),
            ]
        );
    }

    #[test]
    fn this_host_has_a_loopback_interface() {
        // Every Linux host (and network namespace) has `lo`; if it is up its address is usable.
        let all = interfaces();
        let lo = all.iter().find(|i| i.loopback).expect("a loopback interface");
        if lo.up {
            let local = local_addresses();
            assert!(
                local.iter().any(|(_, c, _)| *c == AddrClass::Loopback),
                "{local:?}"
            );
            assert!(local.windows(2).all(|w| w[0].1 <= w[1].1));
        }
    }
}
