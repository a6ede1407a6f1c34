//! Reading one parameter: its value or its default, as a number, a word or a list, and
//! the error that names it.

use super::PARAMS;

#[derive(Debug, thiserror::Error)]
#[error("{name}={value:?} is not valid: {why} (see `pontoon info`)")]
pub struct ConfigError {
    pub name: &'static str,
    pub value: String,
    pub why: String,
}

pub(super) fn get(env: &dyn Fn(&str) -> Option<String>, name: &'static str) -> String {
    env(name).unwrap_or_else(|| {
        PARAMS
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.default.to_string())
            .expect("parameter is listed")
    })
}

pub(super) fn num<T: std::str::FromStr>(
    env: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    let v = get(env, name);
    v.trim().parse::<T>().map_err(|e| ConfigError {
        name,
        value: v.clone(),
        why: e.to_string(),
    })
}

/// Most relays one job may name: a card lists a rank's relays, and cards are bounded.
pub const MAX_RELAYS: usize = net::card::MAX_RELAYS;

/// Parses `PONTOON_RELAYS` (`net::card::parse_relays`).
pub(super) fn relays(value: &str) -> Result<Vec<Vec<std::net::SocketAddr>>, ConfigError> {
    net::card::parse_relays(value).map_err(|why| ConfigError {
        name: "PONTOON_RELAYS",
        value: value.to_string(),
        why,
    })
}

/// Parses `PONTOON_PATHS`.
pub(super) fn paths(value: &str) -> Result<Vec<net::PathKind>, ConfigError> {
    use net::PathKind;
    const KINDS: [PathKind; 4] = [
        PathKind::Direct,
        PathKind::NatProxy,
        PathKind::TwoProxy,
        PathKind::Punched,
    ];
    let value = value.trim();
    if value.is_empty() || value == "all" {
        return Ok(KINDS.to_vec());
    }
    let mut out = Vec::new();
    for name in value.split(',').map(str::trim) {
        match KINDS.iter().find(|k| k.name() == name) {
            Some(k) if !out.contains(k) => out.push(*k),
            Some(_) => {}
            None => {
                return Err(ConfigError {
                    name: "PONTOON_PATHS",
                    value: value.to_string(),
                    why: format!(
                        "`{name}` is not a path kind; known: direct, nat-proxy, two-proxy, punched (or `all`)"
                    ),
                })
            }
        }
    }
    Ok(out)
}

/// Parses `PONTOON_TRANSPORTS`.
pub(super) fn transports(value: &str) -> Result<Vec<transport::Transport>, ConfigError> {
    use transport::Transport;
    let value = value.trim();
    if value.is_empty() {
        return Ok(Transport::DEFAULT.to_vec());
    }
    if value == "all" {
        return Ok(Transport::ALL.to_vec());
    }
    let mut out = Vec::new();
    for name in value.split(',').map(str::trim) {
        match Transport::from_name(name) {
            Some(t) if !out.contains(&t) => out.push(t),
            Some(_) => {}
            None => {
                return Err(ConfigError {
                    name: "PONTOON_TRANSPORTS",
                    value: value.to_string(),
                    why: format!(
                        "`{name}` is not a transport; known: {} (or `all`)",
                        Transport::list(&Transport::ALL)
                    ),
                })
            }
        }
    }
    Ok(out)
}

/// The value of `name`, one of the words of `choices` (`""`: set but empty).
pub(super) fn choice<T: Copy>(
    env: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    choices: &[(&str, T)],
) -> Result<T, ConfigError> {
    let value = get(env, name);
    let word = value.trim();
    if let Some(&(_, v)) = choices.iter().find(|(w, _)| *w == word) {
        return Ok(v);
    }
    let words: Vec<String> = choices
        .iter()
        .filter(|(w, _)| !w.is_empty())
        .map(|(w, _)| format!("`{w}`"))
        .collect();
    let (last, rest) = words.split_last().expect("a parameter has choices");
    let why = match rest {
        [] => format!("must be {last}"),
        _ => format!("must be {} or {last}", rest.join(", ")),
    };
    Err(ConfigError {
        name,
        value: word.to_string(),
        why,
    })
}

/// The number `name`, within `range`.
pub(super) fn within<T>(
    env: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, ConfigError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
    T::Err: std::fmt::Display,
{
    let v: T = num(env, name)?;
    if range.contains(&v) {
        return Ok(v);
    }
    Err(ConfigError {
        name,
        value: v.to_string(),
        why: format!("must be between {} and {}", range.start(), range.end()),
    })
}

/// Parses `PONTOON_SRUN_PORTS`: `LOW-HIGH`.
pub(super) fn srun_ports(value: &str) -> Result<std::ops::RangeInclusive<u16>, ConfigError> {
    value
        .trim()
        .split_once('-')
        .and_then(|(lo, hi)| Some(lo.trim().parse::<u16>().ok()?..=hi.trim().parse::<u16>().ok()?))
        .filter(|r| *r.start() >= 1024 && r.start() <= r.end())
        .ok_or_else(|| ConfigError {
            name: "PONTOON_SRUN_PORTS",
            value: value.to_string(),
            why: "must be LOW-HIGH, two ports from 1024 to 65535, LOW not above HIGH".into(),
        })
}

/// Parses `PONTOON_SITE`: a name that fits a card, or none.
pub(super) fn site(value: &str) -> Result<Option<String>, ConfigError> {
    match value.trim() {
        "" => Ok(None),
        s if s.len() > net::card::MAX_NAME => Err(ConfigError {
            name: "PONTOON_SITE",
            value: s.to_string(),
            why: format!("longer than {} bytes", net::card::MAX_NAME),
        }),
        s => Ok(Some(s.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_or_number_out_of_bounds_says_what_is_allowed() {
        let env = |v: &'static str| {
            move |k: &str| (k == "PONTOON_PMI" || k == "PONTOON_COALESCE_BYTES").then(|| v.to_string())
        };
        let e = choice(&env("3"), "PONTOON_PMI", &[("1", true), ("2", false)]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "PONTOON_PMI=\"3\" is not valid: must be `1` or `2` (see `pontoon info`)"
        );
        let e = choice(&env("x"), "PONTOON_PMI", &[("a", 1), ("", 1), ("b", 2), ("c", 3)]).unwrap_err();
        assert_eq!(e.why, "must be `a`, `b` or `c`");
        assert!(!choice(&env(" 2 "), "PONTOON_PMI", &[("1", true), ("2", false)]).unwrap());
        let e = within(&env("100"), "PONTOON_COALESCE_BYTES", 4096..=65536u32).unwrap_err();
        assert_eq!(e.why, "must be between 4096 and 65536");
        assert_eq!(
            within(&env("8192"), "PONTOON_COALESCE_BYTES", 4096..=65536u32).unwrap(),
            8192
        );
    }
}
