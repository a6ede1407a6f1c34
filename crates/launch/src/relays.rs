//! Relays the launcher starts for a job (`pontoon run --relay HOST`, or every forwarding
//! host of a testbed): `pontoon relay` on each such host, through the agent like a rank,
//! for as long as the job lives. Each relay announces where it can be reached; the
//! ranks get every relay's addresses in `PONTOON_RELAYS` and register with the relays
//! that can reach them back (`docs/relay.md`).

use crate::LaunchError;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a relay may take to announce its addresses.
const ANNOUNCE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a relay prints first: `… reachable at ADDR ADDR …`.
pub const ANNOUNCE_MARK: &str = "reachable at ";

/// The relays of one job: ended (their standard input closed, then killed) when dropped.
pub(crate) struct JobRelays {
    procs: Vec<Child>,
    /// `PONTOON_RELAYS`: relays separated by `;`, each one's addresses by `,`.
    pub value: String,
}

/// How long the coordinator's registration with one relay may take.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(2);

/// The coordinator's registrations with the job's relays (`value`: as `PONTOON_RELAYS`),
/// so that ranks with no way out but their own site's relay reach it through that relay.
/// Registered where a relay sees one of `own` (the coordinator's addresses); the rest is
/// logged.
pub(crate) fn register_coordinator(
    value: &str,
    secret: &[u8; 32],
    (own, ports): (Vec<std::net::IpAddr>, (u16, u16)),
) -> Vec<transport::relay::Registration> {
    let relays = match net::card::parse_relays(value) {
        Ok(r) => r,
        Err(why) => {
            // The ranks refuse the same value with the same words; nothing to register.
            tracing::warn!("PONTOON_RELAYS={value:?}: {why}");
            return Vec::new();
        }
    };
    let r = transport::relay::register_all(
        &relays,
        secret,
        transport::relay::COORDINATOR,
        ports,
        &own,
        REGISTER_TIMEOUT,
    );
    for why in r.refused {
        tracing::info!("coordinator not registered with {why}");
    }
    r.registrations
}

/// The addresses a relay's first line announces.
pub fn parse_announcement(line: &str) -> Result<Vec<std::net::SocketAddr>, String> {
    let rest = line
        .split_once(ANNOUNCE_MARK)
        .map(|(_, r)| r)
        .ok_or_else(|| format!("expected `{ANNOUNCE_MARK}ADDR…`, got {line:?}"))?;
    let addrs = rest
        .split_whitespace()
        .map(|w| w.parse().map_err(|e| format!("{w:?}: {e}")))
        .collect::<Result<Vec<std::net::SocketAddr>, String>>()?;
    if addrs.is_empty() {
        return Err("the relay has no address others can reach".into());
    }
    Ok(addrs)
}

/// Starts `relay` (the words of `pontoon relay …`, which exits when its standard input
/// closes) on every host in `hosts`: here when the host is `this_host`, else through
/// `agent`. Waits for every announcement.
pub(crate) fn start(
    hosts: &[String],
    relay: &[OsString],
    agent: &[OsString],
    this_host: &str,
) -> Result<JobRelays, LaunchError> {
    let mut job = JobRelays {
        procs: Vec::new(),
        value: String::new(),
    };
    let mut waiting = Vec::new();
    for host in hosts {
        let mut cmd = if host == this_host {
            let mut c = Command::new(&relay[0]);
            c.args(&relay[1..]);
            c
        } else {
            crate::hosts::remote_exec(agent, host, relay)
        };
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().map_err(|e| {
            LaunchError::Program(format!(
                "cannot start the relay on {host} ({}): {e}",
                relay[0].to_string_lossy()
            ))
        })?;
        let stdout = child.stdout.take().expect("piped");
        job.procs.push(child);
        // Read in a thread each, so that one silent host costs one timeout, not one each.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut out = BufReader::new(stdout);
            let mut line = String::new();
            let got = out.read_line(&mut line).map(|_| line);
            let _ = tx.send(got);
            // The relay prints nothing more that matters; keep its pipe drained.
            let _ = std::io::copy(&mut out.take(u64::MAX), &mut std::io::sink());
        });
        waiting.push((host.clone(), rx));
    }
    let mut relays = Vec::new();
    for (host, rx) in waiting {
        let line = match rx.recv_timeout(ANNOUNCE_TIMEOUT) {
            Ok(Ok(line)) if !line.is_empty() => line,
            Ok(Ok(_)) => Err(format!(
                "the relay on {host} exited without a word (see its error above)"
            ))
            .map_err(LaunchError::Program)?,
            Ok(Err(e)) => Err(LaunchError::Program(format!("the relay on {host}: {e}")))?,
            Err(_) => Err(LaunchError::Program(format!(
                "the relay on {host} did not announce its addresses within {} s",
                ANNOUNCE_TIMEOUT.as_secs()
            )))?,
        };
        let addrs = parse_announcement(line.trim())
            .map_err(|e| LaunchError::Program(format!("the relay on {host}: {e}")))?;
        tracing::info!(%host, ?addrs, "relay started");
        let words: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
        relays.push(words.join(","));
    }
    job.value = relays.join(";");
    Ok(job)
}

impl Drop for JobRelays {
    fn drop(&mut self) {
        for p in &mut self.procs {
            // Closing standard input ends the relay (through an agent too); the kill is
            // for one that does not notice.
            drop(p.stdin.take());
        }
        for p in &mut self.procs {
            for _ in 0..20 {
                if matches!(p.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if matches!(p.try_wait(), Ok(None)) {
                let _ = p.kill();
                let _ = p.wait();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_are_read_strictly() {
        let a = parse_announcement(
            "pontoon relay: listening on 0.0.0.0:4000, [::]:4000; reachable at 198.51.100.1:4000 [2001:db8::1]:4000",
        )
        .unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].to_string(), "[2001:db8::1]:4000");
        assert!(parse_announcement("pontoon relay: listening on 0.0.0.0:4000").is_err());
        assert!(parse_announcement("reachable at ").is_err());
        assert!(parse_announcement("reachable at host:1").is_err());
    }
}
