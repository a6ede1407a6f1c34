//! The one interface policy that the launcher, the coordinator and the data path all
//! obey: `PONTOON_IF_INCLUDE` and `PONTOON_IF_EXCLUDE`, each a comma-separated list of
//! interface names (a trailing `*` matches a prefix: `docker*`) or CIDR prefixes
//! (`10.1.0.0/16`, `2001:db8::/32`). An address is used when it passes the include list
//! (empty: everything passes) and matches nothing in the exclude list.

use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Rule {
    /// Interface name; `prefix*` when `glob`.
    Name {
        name: String,
        glob: bool,
    },
    Cidr {
        net: IpAddr,
        len: u8,
    },
}

impl Rule {
    fn parse(word: &str) -> Result<Rule, String> {
        if let Some((addr, len)) = word.split_once('/') {
            let net: IpAddr = addr
                .parse()
                .map_err(|_| format!("{word:?}: {addr:?} is not an IP address"))?;
            let max = if net.is_ipv4() { 32 } else { 128 };
            let len: u8 = len
                .parse()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| format!("{word:?}: the prefix length must be 0 to {max}"))?;
            return Ok(Rule::Cidr { net, len });
        }
        let (name, glob) = match word.strip_suffix('*') {
            Some(prefix) => (prefix, true),
            None => (word, false),
        };
        let plain = name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@:".contains(&b));
        if (name.is_empty() && !glob) || name.len() > 15 || !plain {
            return Err(format!(
                "{word:?} is neither an interface name (up to 15 characters, `*` at the end for a prefix) nor a CIDR prefix"
            ));
        }
        Ok(Rule::Name {
            name: name.to_string(),
            glob,
        })
    }

    fn matches(&self, iface: &str, addr: IpAddr) -> bool {
        match self {
            Rule::Name { name, glob: true } => iface.starts_with(name.as_str()),
            Rule::Name { name, glob: false } => iface == name,
            Rule::Cidr { net, len } => in_prefix(*net, *len, addr),
        }
    }
}

/// Whether `addr` is inside `net/len` (false across families).
pub fn in_prefix(net: IpAddr, len: u8, addr: IpAddr) -> bool {
    match (net, addr) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(n) & mask == u32::from(a) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(n) & mask == u128::from(a) & mask
        }
        _ => false,
    }
}

/// Which interfaces and addresses pontoon may use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IfPolicy {
    include: Vec<Rule>,
    exclude: Vec<Rule>,
}

/// A rule that does not parse, and in which of the two variables.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}: {why}")]
pub struct PolicyError {
    pub var: &'static str,
    pub why: String,
}

fn parse_list(list: &str, var: &'static str) -> Result<Vec<Rule>, PolicyError> {
    list.split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(|w| Rule::parse(w).map_err(|why| PolicyError { var, why }))
        .collect()
}

impl IfPolicy {
    /// From the values of `PONTOON_IF_INCLUDE` and `PONTOON_IF_EXCLUDE` (empty: no rule).
    pub fn parse(include: &str, exclude: &str) -> Result<IfPolicy, PolicyError> {
        Ok(IfPolicy {
            include: parse_list(include, "PONTOON_IF_INCLUDE")?,
            exclude: parse_list(exclude, "PONTOON_IF_EXCLUDE")?,
        })
    }

    /// From this process's environment.
    pub fn from_env() -> Result<IfPolicy, PolicyError> {
        let var = |k: &str| std::env::var(k).unwrap_or_default();
        IfPolicy::parse(&var("PONTOON_IF_INCLUDE"), &var("PONTOON_IF_EXCLUDE"))
    }

    /// Whether `addr` on interface `iface` may be used. Loopback is never excluded by an
    /// include list (it only ever reaches this host), only by an explicit exclude.
    pub fn allows(&self, iface: &str, addr: IpAddr) -> bool {
        let included = self.include.is_empty()
            || addr.is_loopback()
            || self.include.iter().any(|r| r.matches(iface, addr));
        included && !self.exclude.iter().any(|r| r.matches(iface, addr))
    }

    pub fn is_empty(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn names_prefixes_and_cidrs() {
        let p = IfPolicy::parse("eth*, 2001:db8::/32", "eth9,10.9.0.0/16").unwrap();
        assert!(p.allows("eth0", ip("10.0.0.1")));
        assert!(!p.allows("eth9", ip("192.0.2.1")), "excluded by name");
        assert!(!p.allows("eth1", ip("10.9.3.4")), "excluded by CIDR");
        assert!(p.allows("ib0", ip("2001:db8:5::1")), "included by CIDR");
        assert!(!p.allows("ib0", ip("192.0.2.1")));
        assert!(
            p.allows("lo", ip("127.0.0.1")),
            "loopback survives an include list"
        );
        let none = IfPolicy::parse("", "").unwrap();
        assert!(none.is_empty() && none.allows("docker0", ip("172.17.0.1")));
        let docker = IfPolicy::parse("", "docker*").unwrap();
        assert!(!docker.allows("docker0", ip("172.17.0.1")));
    }

    #[test]
    fn bad_rules_name_the_variable() {
        for (inc, exc, var) in [
            ("eth0,10.0.0.0/33", "", "PONTOON_IF_INCLUDE"),
            ("", "x/8", "PONTOON_IF_EXCLUDE"),
            ("", "a name with spaces", "PONTOON_IF_EXCLUDE"),
            ("waytoolonginterfacename", "", "PONTOON_IF_INCLUDE"),
        ] {
            let e = IfPolicy::parse(inc, exc).unwrap_err();
            assert_eq!(e.var, var, "{e}");
        }
    }
}
