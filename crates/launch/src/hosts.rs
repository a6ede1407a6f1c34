//! Where ranks run: hostfiles, `--host` lists and the mapping of ranks onto hosts, and
//! the shell command that starts a rank on another host through an agent (ssh, or
//! `pontoon testbed agent`).

use crate::LaunchError;
use std::ffi::OsString;

/// A host, how many ranks it takes before `--map-by slot` moves on, and its site
/// (ranks get it as `PONTOON_SITE`: private addresses are tried only within a site).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    /// 0 only on a relay host that takes no ranks.
    pub slots: u32,
    pub site: Option<String>,
    /// The job runs a relay here (`relay` in a hostfile): a cluster's front-end node.
    pub relay: bool,
    /// A Slurm cluster's login node (`slurm` in a hostfile): its ranks run in an
    /// allocation made there and are started by srun on its nodes (`crate::slurm`).
    pub slurm: bool,
}

/// How ranks are laid onto hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MapBy {
    /// One rank per host in turn (round-robin).
    #[default]
    Node,
    /// Fill each host's slots, then the next host.
    Slot,
}

/// Parses hostfile text: one host per line, optionally `slots=N` (Open MPI) or `:N`
/// (MPICH), `site=NAME`, `relay` (the job runs a relay there; with `slots=0`, a
/// front-end node that runs only the relay) and `slurm` (a cluster's login node: its
/// slots are ranks in a Slurm allocation made there); `#` starts a comment.
pub fn parse_hostfile(text: &str) -> Result<Vec<Host>, LaunchError> {
    let mut hosts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |why: &str| LaunchError::Program(format!("hostfile line {}: {line:?}: {why}", i + 1));
        let mut words = line.split_whitespace();
        let first = words.next().expect("not empty");
        let mut site = None;
        let mut relay = false;
        let mut slurm = false;
        // `[2001:db8::1]:4` or a bare IPv6 literal (more than one `:`) is a host too.
        let (first, bracketed) = match first.strip_prefix('[').and_then(|r| r.split_once(']')) {
            Some((v6, rest)) => (rest, Some(v6)),
            None if first.matches(':').count() > 1 => ("", Some(first)),
            None => (first, None),
        };
        let (name, mut slots) = match first.split_once(':') {
            Some((n, s)) => (
                n,
                Some(
                    s.parse::<u32>()
                        .map_err(|_| bad("slots after ':' must be a number"))?,
                ),
            ),
            None => (first, None),
        };
        for w in words {
            if let Some(s) = w.strip_prefix("slots=") {
                slots = Some(s.parse().map_err(|_| bad("slots=N needs a number"))?);
            } else if let Some(s) = w.strip_prefix("site=") {
                if s.len() > 64 {
                    return Err(bad("a site name is at most 64 bytes"));
                }
                site = Some(s.to_string()).filter(|s| !s.is_empty());
            } else if w == "relay" {
                relay = true;
            } else if w == "slurm" {
                slurm = true;
            } else if !w.starts_with("max_slots=") {
                return Err(bad(
                    "expected HOST [slots=N] [site=NAME] [relay] [slurm] or HOST:N",
                ));
            }
        }
        if slots == Some(0) && !relay {
            return Err(bad("a host needs at least one slot (slots=0 only with `relay`)"));
        }
        let name = bracketed.unwrap_or(name);
        if name.is_empty() {
            return Err(bad("no host name"));
        }
        hosts.push(Host {
            name: name.to_string(),
            slots: slots.unwrap_or(1),
            site,
            relay,
            slurm,
        });
    }
    if hosts.iter().all(|h| h.slots == 0) {
        return Err(LaunchError::Program(
            "the hostfile lists no hosts that take ranks".into(),
        ));
    }
    Ok(hosts)
}

/// The host of every rank. With more ranks than slots, the mapping wraps around
/// (oversubscribing) rather than failing, as `mpiexec` does.
pub fn map_ranks(hosts: &[Host], n: u32, by: MapBy) -> Vec<Host> {
    let mut placed = Vec::with_capacity(n as usize);
    // Relay-only hosts take no ranks.
    let hosts: Vec<&Host> = hosts.iter().filter(|h| h.slots > 0).collect();
    if hosts.is_empty() {
        return placed;
    }
    match by {
        MapBy::Node => {
            for r in 0..n as usize {
                placed.push(hosts[r % hosts.len()].clone());
            }
        }
        MapBy::Slot => 'fill: loop {
            for h in &hosts {
                for _ in 0..h.slots {
                    if placed.len() == n as usize {
                        break 'fill;
                    }
                    placed.push((*h).clone());
                }
            }
        },
    }
    placed
}

/// `PONTOON_LOCAL_RANK` and `PONTOON_LOCAL_SIZE` of every rank, from the hosts they are on.
pub fn local_ranks(placement: &[Host]) -> Vec<(u32, u32)> {
    let mut count = std::collections::HashMap::<&str, u32>::new();
    let local: Vec<u32> = placement
        .iter()
        .map(|h| {
            let c = count.entry(&h.name).or_default();
            *c += 1;
            *c - 1
        })
        .collect();
    placement
        .iter()
        .zip(local)
        .map(|(h, l)| (l, count[h.name.as_str()]))
        .collect()
}

/// Quotes a word for a POSIX shell so that the remote shell sees exactly that word.
pub fn shell_quote(word: &str) -> String {
    // A leading `=` means something to zsh, a possible login shell on the remote side.
    let plain = !word.is_empty()
        && !word.starts_with('=')
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The words `AGENT HOST SCRIPT` that start a rank remotely. The script reads the job
/// secret from standard input (so it is never in any process's arguments), changes to
/// the launcher's directory and replaces itself with the program, so that the agent's
/// exit status is the rank's.
pub fn remote_command(
    agent: &[OsString],
    host: &str,
    cwd: &str,
    env: &[(String, String)],
    program: &str,
    args: &[OsString],
) -> Vec<OsString> {
    let mut script = String::from("read -r PONTOON_JOB_SECRET && export PONTOON_JOB_SECRET && cd ");
    script.push_str(&shell_quote(cwd));
    script.push_str(" && exec env");
    for (k, v) in env {
        script.push(' ');
        script.push_str(&shell_quote(&format!("{k}={v}")));
    }
    script.push(' ');
    script.push_str(&shell_quote(program));
    for a in args {
        script.push(' ');
        script.push_str(&shell_quote(&a.to_string_lossy()));
    }
    let mut words = agent.to_vec();
    words.push(host.into());
    words.push(script.into());
    words
}

/// `AGENT HOST SCRIPT` that runs `command` on `host` as it is (no secret, no
/// environment): how the launcher starts a relay and asks a login node for a Slurm
/// allocation.
pub fn remote_exec(agent: &[OsString], host: &str, command: &[OsString]) -> std::process::Command {
    let mut script = String::from("exec");
    for w in command {
        script.push(' ');
        script.push_str(&shell_quote(&w.to_string_lossy()));
    }
    let mut cmd = std::process::Command::new(&agent[0]);
    cmd.args(&agent[1..]).arg(host).arg(script);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hs(name: &str, slots: u32) -> Host {
        Host {
            name: name.into(),
            slots,
            site: None,
            relay: false,
            slurm: false,
        }
    }

    #[test]
    fn relay_hosts_in_a_hostfile() {
        let hosts = parse_hostfile("a-head slots=0 relay\na-c1\nb-head relay site=b\n").unwrap();
        let relays: Vec<&str> = hosts
            .iter()
            .filter(|h| h.relay)
            .map(|h| h.name.as_str())
            .collect();
        assert_eq!(relays, ["a-head", "b-head"]);
        // A relay-only front end takes no ranks, whatever the mapping.
        for by in [MapBy::Node, MapBy::Slot] {
            let placed = map_ranks(&hosts, 4, by);
            assert_eq!(placed.len(), 4);
            assert!(placed.iter().all(|h| h.name != "a-head"), "{by:?}: {placed:?}");
        }
        assert!(parse_hostfile("a-c1 slots=0\n").is_err(), "slots=0 needs `relay`");
        assert!(
            parse_hostfile("a-head slots=0 relay\n").is_err(),
            "nobody to run ranks"
        );
    }

    #[test]
    fn slurm_login_nodes_in_a_hostfile() {
        let hosts = parse_hostfile("a-head slots=4 slurm relay site=a\nb-head:2 slurm\nc1\n").unwrap();
        let slurm: Vec<(&str, u32)> = hosts
            .iter()
            .filter(|h| h.slurm)
            .map(|h| (h.name.as_str(), h.slots))
            .collect();
        assert_eq!(slurm, [("a-head", 4), ("b-head", 2)]);
        assert!(hosts[0].relay && !hosts[2].slurm);
    }

    fn names(hosts: &[Host]) -> Vec<&str> {
        hosts.iter().map(|h| h.name.as_str()).collect()
    }

    #[test]
    fn hostfiles_in_both_dialects() {
        let text = "# cluster a\na-head slots=2\na-c1:3\n\nb-c1 max_slots=4 site=b # trailing\n";
        let mut b_c1 = hs("b-c1", 1);
        b_c1.site = Some("b".into());
        assert_eq!(
            parse_hostfile(text).unwrap(),
            vec![hs("a-head", 2), hs("a-c1", 3), b_c1]
        );
        let v6 = parse_hostfile("[2001:db8::1]:2\nfd00::5 slots=3\n").unwrap();
        assert_eq!(v6, vec![hs("2001:db8::1", 2), hs("fd00::5", 3)]);
        let long_site = format!("h site={}", "s".repeat(65));
        assert!(parse_hostfile(&long_site).is_err());
        for bad in ["h slots=x", "h:0", "h cores=2", "", "# only a comment", ":3"] {
            assert!(parse_hostfile(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn mapping_by_node_and_by_slot() {
        let hosts = [hs("a", 2), hs("b", 1)];
        assert_eq!(
            names(&map_ranks(&hosts, 5, MapBy::Node)),
            ["a", "b", "a", "b", "a"]
        );
        assert_eq!(
            names(&map_ranks(&hosts, 5, MapBy::Slot)),
            ["a", "a", "b", "a", "a"]
        );
        let placement = map_ranks(&hosts, 5, MapBy::Node);
        assert_eq!(local_ranks(&placement), [(0, 3), (0, 2), (1, 3), (1, 2), (2, 3)]);
    }

    #[test]
    fn remote_commands_survive_a_shell() {
        let words = remote_command(
            &["agent".into()],
            "h1",
            "/tmp",
            &[("A".into(), "x y".into()), ("B".into(), "it's".into())],
            "/bin/sh",
            &["-c".into(), "echo \"$A|$B|$PONTOON_JOB_SECRET|$(pwd)\"".into()],
        );
        assert_eq!(words[..2], ["agent", "h1"].map(OsString::from));
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(&words[2])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"s3cret\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "x y|it's|s3cret|/tmp\n");
    }
}
