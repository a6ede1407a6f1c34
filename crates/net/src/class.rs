//! Address classes: how far an IP address is likely to reach, best first.
//!
//! A connection string lists every address of the coordinator; a client keeps only
//! the classes it has itself and tries them best first (seed 000, §3.1), so a private
//! address is used only when two hosts share no public class — otherwise a
//! duplicated private subnet could connect it to the wrong host.

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Class of an IP address. The derived order is the preference order: a smaller
/// value is better, so sorting ascending puts the best class first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AddrClass {
    /// IPv6 global unicast: globally unique and routable.
    Ipv6Global,
    /// IPv4 public unicast: globally unique and routable.
    Ipv4Public,
    /// IPv4 private (RFC 1918), shared (100.64/10, RFC 6598) and other non-routable
    /// special-purpose ranges: neither unique nor routable.
    Ipv4Private,
    /// IPv6 unique local (fc00::/7) and deprecated site-local (fec0::/10).
    Ipv6Ula,
    /// Link-local (169.254/16, fe80::/10): only valid on one link, needs a scope.
    LinkLocal,
    /// Loopback (127/8, ::1): only reaches the same host.
    Loopback,
    /// Never a unicast destination: unspecified, multicast, broadcast, reserved,
    /// IPv4-mapped/compatible IPv6 (pontoon uses one socket per family instead).
    Unusable,
}

impl AddrClass {
    /// Every class, best first.
    pub const ALL: [AddrClass; 7] = [
        AddrClass::Ipv6Global,
        AddrClass::Ipv4Public,
        AddrClass::Ipv4Private,
        AddrClass::Ipv6Ula,
        AddrClass::LinkLocal,
        AddrClass::Loopback,
        AddrClass::Unusable,
    ];

    /// Short lower-case name for messages and `pontoon doctor`.
    pub fn name(self) -> &'static str {
        match self {
            AddrClass::Ipv6Global => "ipv6-global",
            AddrClass::Ipv4Public => "ipv4-public",
            AddrClass::Ipv4Private => "ipv4-private",
            AddrClass::Ipv6Ula => "ipv6-ula",
            AddrClass::LinkLocal => "link-local",
            AddrClass::Loopback => "loopback",
            AddrClass::Unusable => "unusable",
        }
    }
}

impl std::fmt::Display for AddrClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// IPv4 special-purpose ranges (IANA registry, RFC 6890 and successors). The first
/// matching entry wins, so narrower ranges come before the ranges containing them.
/// Anything not listed is public.
///
/// The documentation ranges TEST-NET-1/2/3 are deliberately *public*: pontoon's
/// testbed uses them as the "public" network between its simulated sites.
pub const V4_TABLE: &[(Ipv4Addr, u8, AddrClass)] = &[
    (Ipv4Addr::new(255, 255, 255, 255), 32, AddrClass::Unusable), // limited broadcast
    (Ipv4Addr::new(0, 0, 0, 0), 8, AddrClass::Unusable),          // "this network"
    (Ipv4Addr::new(10, 0, 0, 0), 8, AddrClass::Ipv4Private),      // RFC 1918
    (Ipv4Addr::new(100, 64, 0, 0), 10, AddrClass::Ipv4Private),   // shared / CGN, RFC 6598
    (Ipv4Addr::new(127, 0, 0, 0), 8, AddrClass::Loopback),
    (Ipv4Addr::new(169, 254, 0, 0), 16, AddrClass::LinkLocal),
    (Ipv4Addr::new(172, 16, 0, 0), 12, AddrClass::Ipv4Private), // RFC 1918
    (Ipv4Addr::new(192, 0, 0, 0), 24, AddrClass::Ipv4Private),  // IETF protocol assignments
    (Ipv4Addr::new(192, 0, 2, 0), 24, AddrClass::Ipv4Public),   // TEST-NET-1: testbed "public"
    (Ipv4Addr::new(192, 168, 0, 0), 16, AddrClass::Ipv4Private), // RFC 1918
    (Ipv4Addr::new(198, 18, 0, 0), 15, AddrClass::Ipv4Private), // benchmarking, RFC 2544
    (Ipv4Addr::new(198, 51, 100, 0), 24, AddrClass::Ipv4Public), // TEST-NET-2: testbed "public"
    (Ipv4Addr::new(203, 0, 113, 0), 24, AddrClass::Ipv4Public), // TEST-NET-3: testbed "public"
    (Ipv4Addr::new(224, 0, 0, 0), 4, AddrClass::Unusable),      // multicast
    (Ipv4Addr::new(240, 0, 0, 0), 4, AddrClass::Unusable),      // reserved
];

/// IPv6 special-purpose ranges; first match wins; anything not listed is global.
/// 2001:db8::/32 (documentation) is global for the same testbed reason as above.
pub const V6_TABLE: &[(Ipv6Addr, u8, AddrClass)] = &[
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1), 128, AddrClass::Loopback),
    (
        Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0),
        96,
        AddrClass::Unusable,
    ), // IPv4-mapped
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96, AddrClass::Unusable), // unspecified + IPv4-compatible
    (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64, AddrClass::Unusable), // discard-only, RFC 6666
    (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        AddrClass::Ipv6Global,
    ), // documentation: testbed
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7, AddrClass::Ipv6Ula),
    (
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
        10,
        AddrClass::LinkLocal,
    ),
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, AddrClass::Ipv6Ula), // site-local (deprecated)
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, AddrClass::Unusable), // multicast
];

fn in_prefix(addr: u128, net: u128, len: u8, bits: u32) -> bool {
    if len == 0 {
        return true;
    }
    let shift = bits - u32::from(len);
    (addr >> shift) == (net >> shift)
}

/// Class of an IPv4 address.
pub fn classify_v4(a: Ipv4Addr) -> AddrClass {
    let x = u128::from(u32::from(a));
    V4_TABLE
        .iter()
        .find(|(net, len, _)| in_prefix(x, u128::from(u32::from(*net)), *len, 32))
        .map_or(AddrClass::Ipv4Public, |e| e.2)
}

/// Class of an IPv6 address.
pub fn classify_v6(a: Ipv6Addr) -> AddrClass {
    let x = u128::from(a);
    V6_TABLE
        .iter()
        .find(|(net, len, _)| in_prefix(x, u128::from(*net), *len, 128))
        .map_or(AddrClass::Ipv6Global, |e| e.2)
}

/// Class of an address. Pure: depends on the address alone.
pub fn classify(addr: IpAddr) -> AddrClass {
    match addr {
        IpAddr::V4(a) => classify_v4(a),
        IpAddr::V6(a) => classify_v6(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AddrClass::*;

    fn v4(s: &str) -> AddrClass {
        classify(s.parse().unwrap())
    }

    fn last_v4(net: Ipv4Addr, len: u8) -> Ipv4Addr {
        let host = if len == 32 { 0 } else { u32::MAX >> len };
        Ipv4Addr::from(u32::from(net) | host)
    }

    fn last_v6(net: Ipv6Addr, len: u8) -> Ipv6Addr {
        let host = if len == 128 { 0 } else { u128::MAX >> len };
        Ipv6Addr::from(u128::from(net) | host)
    }

    #[test]
    fn every_v4_range_holds_from_first_to_last_address() {
        for &(net, len, class) in V4_TABLE {
            assert_eq!(classify_v4(net), class, "first of {net}/{len}");
            assert_eq!(classify_v4(last_v4(net, len)), class, "last of {net}/{len}");
        }
    }

    #[test]
    fn every_v6_range_holds_from_first_to_last_address() {
        for &(net, len, class) in V6_TABLE {
            assert_eq!(classify_v6(net), class, "first of {net}/{len}");
            assert_eq!(classify_v6(last_v6(net, len)), class, "last of {net}/{len}");
        }
    }

    #[test]
    fn v4_boundaries_just_outside_each_range() {
        let cases = [
            ("0.255.255.255", Unusable),
            ("1.0.0.0", Ipv4Public),
            ("9.255.255.255", Ipv4Public),
            ("10.0.0.0", Ipv4Private),
            ("10.255.255.255", Ipv4Private),
            ("11.0.0.0", Ipv4Public),
            ("100.63.255.255", Ipv4Public),
            ("100.64.0.0", Ipv4Private),
            ("100.127.255.255", Ipv4Private),
            ("100.128.0.0", Ipv4Public),
            ("126.255.255.255", Ipv4Public),
            ("127.0.0.1", Loopback),
            ("128.0.0.0", Ipv4Public),
            ("169.253.255.255", Ipv4Public),
            ("169.254.0.0", LinkLocal),
            ("169.255.0.0", Ipv4Public),
            ("172.15.255.255", Ipv4Public),
            ("172.16.0.0", Ipv4Private),
            ("172.31.255.255", Ipv4Private),
            ("172.32.0.0", Ipv4Public),
            ("191.255.255.255", Ipv4Public),
            ("192.0.0.0", Ipv4Private),
            ("192.0.0.255", Ipv4Private),
            ("192.0.1.255", Ipv4Public),
            ("192.0.2.0", Ipv4Public),
            ("192.0.2.1", Ipv4Public),
            ("192.0.3.0", Ipv4Public),
            ("192.167.255.255", Ipv4Public),
            ("192.168.0.0", Ipv4Private),
            ("192.168.255.255", Ipv4Private),
            ("192.169.0.0", Ipv4Public),
            ("198.17.255.255", Ipv4Public),
            ("198.18.0.0", Ipv4Private),
            ("198.19.255.255", Ipv4Private),
            ("198.20.0.0", Ipv4Public),
            ("198.51.99.255", Ipv4Public),
            ("198.51.100.7", Ipv4Public),
            ("203.0.113.9", Ipv4Public),
            ("223.255.255.255", Ipv4Public),
            ("224.0.0.0", Unusable),
            ("239.255.255.255", Unusable),
            ("240.0.0.0", Unusable),
            ("255.255.255.254", Unusable),
            ("255.255.255.255", Unusable),
            ("8.8.8.8", Ipv4Public),
            ("141.35.14.189", Ipv4Public),
        ];
        for (a, c) in cases {
            assert_eq!(v4(a), c, "{a}");
        }
    }

    #[test]
    fn v6_boundaries_just_outside_each_range() {
        let cases = [
            ("::", Unusable),
            ("::1", Loopback),
            ("::2", Unusable),
            ("::ffff:ffff", Unusable),
            ("::1:0:0", Ipv6Global),
            ("::fffe:ffff:ffff", Ipv6Global),
            ("::ffff:0.0.0.0", Unusable),
            ("::ffff:192.0.2.1", Unusable),
            ("::1:0:0:0", Ipv6Global),
            ("ff::ffff", Ipv6Global),
            ("100::", Unusable),
            ("100::ffff:ffff:ffff:ffff", Unusable),
            ("100:0:0:1::", Ipv6Global),
            ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", Ipv6Global),
            ("2001:db8::", Ipv6Global),
            ("2001:db8::1", Ipv6Global),
            ("2001:db9::", Ipv6Global),
            ("2001:638:906:1::1", Ipv6Global),
            ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Ipv6Global),
            ("fc00::", Ipv6Ula),
            ("fd00::2", Ipv6Ula),
            ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Ipv6Ula),
            ("fe00::", Ipv6Global),
            ("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Ipv6Global),
            ("fe80::", LinkLocal),
            ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", LinkLocal),
            ("fec0::", Ipv6Ula),
            ("feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Ipv6Ula),
            ("ff00::", Unusable),
            ("ff02::1", Unusable),
            ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Unusable),
        ];
        for (a, c) in cases {
            assert_eq!(classify(a.parse().unwrap()), c, "{a}");
        }
    }

    #[test]
    fn order_is_best_first() {
        let mut v = AddrClass::ALL.to_vec();
        v.reverse();
        v.sort();
        assert_eq!(v, AddrClass::ALL);
        assert!(Ipv6Global < Ipv4Public && Ipv4Private < Ipv6Ula && LinkLocal < Loopback);
    }
}
