//! The ssh-like agent: `pontoon testbed agent [SSH-OPTIONS] HOST COMMAND…` runs COMMAND
//! on a testbed host the way `ssh HOST COMMAND…` would on a real one — the words joined
//! by spaces and given to a shell — so that it can stand in for ssh as Open MPI's
//! `plm_rsh_agent`, Hydra's `-launcher-exec` and pontoon's own remote launcher.

use crate::Testbed;
use std::process::Command;

/// ssh options that take a value (`ssh -o X host …`): skipped with their value.
const SSH_OPTIONS_WITH_VALUE: &str = "BbcDEeFIiJLlmOopQRSWw";

/// The host and command words of an ssh-style argument list.
pub fn parse(args: &[String]) -> Result<(String, Vec<String>), String> {
    let mut i = 0;
    while i < args.len() && args[i].starts_with('-') && args[i] != "--" {
        let opt = &args[i];
        let takes_value =
            opt.len() == 2 && SSH_OPTIONS_WITH_VALUE.contains(opt.chars().nth(1).expect("two chars"));
        i += if takes_value { 2 } else { 1 };
    }
    if args.get(i).map(String::as_str) == Some("--") {
        i += 1;
    }
    let host = args
        .get(i)
        .ok_or("usage: pontoon testbed agent [SSH-OPTIONS] HOST [COMMAND…]")?;
    // `user@host` as ssh takes it; the user part means nothing here (all runs as root).
    let host = host.rsplit('@').next().unwrap_or(host).to_string();
    Ok((host, args[i + 1..].to_vec()))
}

/// The command that runs `words` on `host` (an interactive shell when there are none).
pub fn command(testbed: &Testbed, host: &str, words: &[String]) -> Result<Command, String> {
    let mut cmd = testbed.command(host, "sh")?;
    if !words.is_empty() {
        cmd.arg("-c").arg(words.join(" "));
    }
    Ok(cmd)
}

/// Finds the testbed that has `host` when none is named: the only one with such a host.
pub fn testbed_of(host: &str) -> Result<Testbed, String> {
    if std::env::var_os("PONTOON_TESTBED").is_some() {
        return Testbed::open(None);
    }
    let mut having: Vec<Testbed> = crate::list()
        .iter()
        .filter_map(|name| Testbed::open(Some(name)).ok())
        .filter(|tb| tb.topology.host(host).is_some())
        .collect();
    match having.len() {
        1 => Ok(having.remove(0)),
        0 => Err(format!(
            "no running testbed has a host {host:?} (running: {})",
            crate::list().join(", ")
        )),
        _ => Err(format!(
            "several testbeds have a host {host:?}; set PONTOON_TESTBED=NAME to choose"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn ssh_style_arguments_are_understood() {
        let (host, cmd) = parse(&words("-x a-c1 orted -mca ess env")).unwrap();
        assert_eq!(host, "a-c1");
        assert_eq!(cmd, words("orted -mca ess env"));
        let (host, cmd) = parse(&words("-o StrictHostKeyChecking=no -p 22 root@b-head hostname")).unwrap();
        assert_eq!((host.as_str(), cmd), ("b-head", words("hostname")));
        let (host, cmd) = parse(&words("h1")).unwrap();
        assert_eq!((host.as_str(), cmd.len()), ("h1", 0));
        assert!(parse(&words("-x")).is_err());
    }
}
