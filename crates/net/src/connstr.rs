//! The coordinator's connection string (seed 000, §3.1):
//! `tcp6://[2001:db8::1]:52032;tcp://192.0.2.1:57990;tcp://127.0.0.1:57990`.
//!
//! One entry per local address, `tcp` for IPv4 and `tcp6` for IPv6 (each family has a
//! listening socket and port of its own), best class first. A client keeps the entries
//! worth trying from its host and tries them in order ([`client_order`]).

use crate::class::{classify, AddrClass};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Longest connection string accepted; far more than any host's address list.
pub const MAX_LEN: usize = 64 * 1024;

/// One address of the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnEntry {
    pub addr: SocketAddr,
    /// Always `classify(addr.ip())`; kept so sorting and filtering need not recompute it.
    pub class: AddrClass,
}

impl ConnEntry {
    pub fn new(addr: SocketAddr) -> ConnEntry {
        ConnEntry {
            addr,
            class: classify(addr.ip()),
        }
    }
}

impl std::fmt::Display for ConnEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Written from ip and port rather than `SocketAddr`'s Display, which would add
        // an IPv6 scope id that the format does not carry.
        match self.addr.ip() {
            IpAddr::V4(a) => write!(f, "tcp://{a}:{}", self.addr.port()),
            IpAddr::V6(a) => write!(f, "tcp6://[{a}]:{}", self.addr.port()),
        }
    }
}

/// What is wrong with a connection string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("the connection string is empty")]
    Empty,
    #[error("the connection string is {0} bytes long, more than the limit of {MAX_LEN}")]
    TooLong(usize),
    #[error(
        "entry {index} of the connection string ({entry:?}) {why}; expected entries like \
         `tcp://192.0.2.1:57990` or `tcp6://[2001:db8::1]:52032` separated by `;`"
    )]
    Entry {
        index: usize,
        entry: String,
        why: String,
    },
}

/// Formats entries as a connection string, best class first (stable for equal classes).
pub fn format(entries: &[ConnEntry]) -> String {
    let mut v = entries.to_vec();
    v.sort_by_key(|e| e.class);
    v.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(";")
}

fn parse_port(s: &str) -> Result<u16, String> {
    // `u16::from_str` alone would accept "+80"; the format has digits only.
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("has port {s:?}, which is not a number from 1 to 65535"));
    }
    match s.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("has port {s:?}, which is not a number from 1 to 65535")),
        Ok(p) => Ok(p),
    }
}

fn parse_entry(e: &str) -> Result<ConnEntry, String> {
    let (ip, port) = if let Some(rest) = e.strip_prefix("tcp6://") {
        let rest = rest
            .strip_prefix('[')
            .ok_or("has an IPv6 address without `[...]` brackets")?;
        let (ip, port) = rest
            .split_once("]:")
            .ok_or("lacks `]:port` after the IPv6 address")?;
        let ip: Ipv6Addr = ip
            .parse()
            .map_err(|_| format!("has {ip:?}, which is not an IPv6 address (scope ids are not allowed)"))?;
        (IpAddr::V6(ip), port)
    } else if let Some(rest) = e.strip_prefix("tcp://") {
        let (ip, port) = rest.rsplit_once(':').ok_or("lacks `:port`")?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| {
            format!("has {ip:?}, which is not an IPv4 address (IPv6 addresses use `tcp6://[...]`)")
        })?;
        (IpAddr::V4(ip), port)
    } else {
        return Err("does not start with `tcp://` or `tcp6://`".into());
    };
    let port = parse_port(port)?;
    let entry = ConnEntry::new(SocketAddr::new(ip, port));
    if entry.class == AddrClass::Unusable {
        return Err(format!(
            "has {ip}, which is not a unicast address anyone can connect to"
        ));
    }
    Ok(entry)
}

/// Parses a connection string. Strict: no empty entries, no whitespace, no scope ids,
/// ports 1–65535, unicast addresses only. Never panics, whatever the input.
pub fn parse(s: &str) -> Result<Vec<ConnEntry>, ParseError> {
    if s.len() > MAX_LEN {
        return Err(ParseError::TooLong(s.len()));
    }
    if s.is_empty() {
        return Err(ParseError::Empty);
    }
    s.split(';')
        .enumerate()
        .map(|(index, entry)| {
            if entry.is_empty() {
                return Err(ParseError::Entry {
                    index,
                    entry: entry.into(),
                    why: "is empty".into(),
                });
            }
            parse_entry(entry).map_err(|why| ParseError::Entry {
                index,
                entry: entry.into(),
                why,
            })
        })
        .collect()
}

/// The entries a client on this host should try, in order: those worth trying from
/// here ([`crate::paths::worth_trying`]: public and global addresses of a family this
/// host routes, other classes only if present locally), best class first, loopback
/// last, duplicates removed. A private or loopback entry may reach the wrong host; the
/// authenticated handshake catches that and the next entry is tried.
pub fn client_order(entries: &[ConnEntry], local: &[(IpAddr, AddrClass, String)]) -> Vec<ConnEntry> {
    let classes: Vec<(AddrClass, bool)> = local.iter().map(|(a, c, _)| (*c, a.is_ipv4())).collect();
    let have = |e: &ConnEntry| crate::paths::worth_trying(&classes, e.class, e.addr.is_ipv4());
    let mut out: Vec<ConnEntry> = Vec::new();
    for e in entries.iter().filter(|e| have(e)) {
        if !out.contains(e) {
            out.push(*e);
        }
    }
    // Loopback is already last among usable classes; the stable sort keeps the
    // coordinator's order within a class.
    out.sort_by_key(|e| e.class);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SEED: &str = "tcp6://[2001:db8::1]:52032;tcp://192.0.2.1:57990;tcp://127.0.0.1:57990";

    fn local(addrs: &[&str]) -> Vec<(IpAddr, AddrClass, String)> {
        addrs
            .iter()
            .map(|a| {
                let ip: IpAddr = a.parse().unwrap();
                (ip, classify(ip), "eth0".to_string())
            })
            .collect()
    }

    #[test]
    fn parses_the_seed_example() {
        let v = parse(SEED).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].addr, "[2001:db8::1]:52032".parse().unwrap());
        assert_eq!(v[0].class, AddrClass::Ipv6Global);
        assert_eq!(v[1].class, AddrClass::Ipv4Public);
        assert_eq!(v[2].class, AddrClass::Loopback);
        assert_eq!(format(&v), SEED);
    }

    #[test]
    fn format_sorts_best_class_first() {
        let v: Vec<ConnEntry> = [
            "127.0.0.1:5",
            "10.0.0.1:5",
            "[fd00::1]:6",
            "192.0.2.1:5",
            "[2001:db8::2]:6",
        ]
        .iter()
        .map(|a| ConnEntry::new(a.parse().unwrap()))
        .collect();
        assert_eq!(
            format(&v),
            "tcp6://[2001:db8::2]:6;tcp://192.0.2.1:5;tcp://10.0.0.1:5;tcp6://[fd00::1]:6;tcp://127.0.0.1:5"
        );
    }

    #[test]
    fn rejects_malformed_entries_with_a_reason() {
        let bad = [
            "",
            ";",
            "tcp://192.0.2.1:57990;",
            " tcp://192.0.2.1:1",
            "udp://192.0.2.1:1",
            "tcp://192.0.2.1",
            "tcp://192.0.2.1:",
            "tcp://192.0.2.1:0",
            "tcp://192.0.2.1:65536",
            "tcp://192.0.2.1:+80",
            "tcp://192.0.2.1:080000",
            "tcp://192.0.2.01:80",
            "tcp://2001:db8::1:80",
            "tcp6://2001:db8::1:80",
            "tcp6://[2001:db8::1]80",
            "tcp6://[192.0.2.1]:80",
            "tcp6://[fe80::1%eth0]:80",
            "tcp://224.0.0.1:80",
            "tcp://0.0.0.0:80",
            "tcp6://[::]:80",
            "tcp6://[::ffff:192.0.2.1]:80",
            "TCP://192.0.2.1:80",
        ];
        for b in bad {
            let e = parse(b).expect_err(b);
            assert!(!e.to_string().is_empty());
        }
        let e = parse("tcp://192.0.2.1:1;tcp://nope:2").unwrap_err();
        assert!(matches!(e, ParseError::Entry { index: 1, .. }), "{e}");
        assert!(e.to_string().contains("\"nope\""), "{e}");
        assert_eq!(
            parse(&"x".repeat(MAX_LEN + 1)),
            Err(ParseError::TooLong(MAX_LEN + 1))
        );
    }

    #[test]
    fn client_keeps_reachable_classes_and_local_families_best_first() {
        let coord = parse(
            "tcp6://[2001:db8::1]:2;tcp://192.0.2.1:1;tcp://10.0.0.1:1;tcp6://[fd00::1]:2;\
             tcp://127.0.0.1:1;tcp6://[::1]:2",
        )
        .unwrap();
        // IPv4-only private node: public (through NAT), private, then loopback.
        let v = client_order(&coord, &local(&["10.9.9.9", "127.0.0.1"]));
        assert_eq!(format(&v), "tcp://192.0.2.1:1;tcp://10.0.0.1:1;tcp://127.0.0.1:1");
        // A public node with IPv6 loopback only: no IPv4 loopback entry.
        let v = client_order(&coord, &local(&["2001:db8::7", "198.51.100.1", "::1"]));
        assert_eq!(
            format(&v),
            "tcp6://[2001:db8::1]:2;tcp://192.0.2.1:1;tcp6://[::1]:2"
        );
        // Nothing in common.
        assert!(client_order(&coord, &local(&["fe80::1"])).is_empty());
    }

    #[test]
    fn client_order_is_sorted_and_deduplicated_even_if_the_input_is_not() {
        let coord: Vec<ConnEntry> = ["127.0.0.1:1", "10.0.0.1:1", "10.0.0.1:1", "10.0.0.2:1"]
            .iter()
            .map(|a| ConnEntry::new(a.parse().unwrap()))
            .collect();
        let v = client_order(&coord, &local(&["10.0.0.5", "127.0.0.1"]));
        assert_eq!(format(&v), "tcp://10.0.0.1:1;tcp://10.0.0.2:1;tcp://127.0.0.1:1");
    }

    fn arb_entry() -> impl Strategy<Value = ConnEntry> {
        prop_oneof![
            (any::<u32>(), 1u16..).prop_map(|(a, p)| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(a)), p)),
            (any::<u128>(), 1u16..).prop_map(|(a, p)| SocketAddr::new(IpAddr::V6(Ipv6Addr::from(a)), p)),
        ]
        .prop_map(ConnEntry::new)
        .prop_filter("unicast", |e| e.class != AddrClass::Unusable)
    }

    proptest! {
        #[test]
        fn arbitrary_strings_never_panic(s in "\\PC{0,200}") {
            let _ = parse(&s);
        }

        #[test]
        fn near_miss_strings_never_panic(s in "(tcp6?://)?\\[?[0-9a-f:.%\\[\\]]{0,40}\\]?(:[0-9+-]{0,7})?(;.{0,20})?") {
            let _ = parse(&s);
        }

        #[test]
        fn round_trip(entries in proptest::collection::vec(arb_entry(), 1..8)) {
            let s = format(&entries);
            let back = parse(&s).unwrap();
            let mut sorted = entries.clone();
            sorted.sort_by_key(|e| e.class);
            prop_assert_eq!(&back, &sorted);
            prop_assert_eq!(format(&back), s);
        }
    }
}
