//! Tasks that `srun` started without a PMI (`srun --mpi=none`, and plain `srun` where
//! Slurm's `MpiDefault` is `none`, its default). How they find each other:
//! - rank, size and the node layout come from Slurm's variables (`SLURM_PROCID`,
//!   `SLURM_STEP_NUM_TASKS`, `SLURM_LOCALID`, `SLURM_NODEID`, `SLURM_STEP_TASKS_PER_NODE`);
//! - task 0 starts pontoon's own rendezvous, `pontoon srun-rendezvous` (the coordinator of
//!   `pontoon run`, without processes to start), on its node: the step's first
//!   (`SLURM_STEP_NODELIST`), where block, cyclic and plane distributions all put it;
//! - the rendezvous hands out the key on the first free one of 8 ports that the job's
//!   id picks in `PONTOON_SRUN_PORTS`; the other tasks try those ports in the same order
//!   on the first node's addresses until it answers;
//! - the job secret and the coordinator's addresses come back in a munge credential
//!   restricted to the job's user, made for the asking task's nonce: only that user can
//!   decode it, and the task checks that its own user made it. That is Slurm's own
//!   trust (it authenticates with munge too); no file and no variable holds the secret.
//!
//! From there every task connects to the coordinator as under `pontoon run`.

use crate::boot::config::Config;
use crate::boot::jobenv::JobEnv;
use proto::wire::srun_key::{KeyAnswer, KeyGrant, KeyRequest, RendezvousOrder, MAX_LINE};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod layout;
pub(crate) use layout::SrunTask;
pub use layout::ENV_VARS;

/// Ports of the range tried, in order.
const CANDIDATES: usize = 8;
/// Longest wait for an answer once connected (the rendezvous answers in milliseconds;
/// only a stranger on the port says nothing).
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// Task 0's rendezvous process; it ends when this process does (its standard input
/// closes) once every task has finalized.
pub(crate) struct HostedRendezvous {
    _child: Child,
}

/// The ports of `range` that the job `job_id` tries, in order: the same on every task.
pub(crate) fn candidate_ports(job_id: &[u8; 16], range: &std::ops::RangeInclusive<u16>) -> Vec<u16> {
    let width = u32::from(*range.end() - *range.start()) + 1;
    let digest = blake3::hash(job_id);
    let mut ports = Vec::with_capacity(CANDIDATES);
    for chunk in digest.as_bytes().chunks(4) {
        let pick = u32::from_le_bytes(chunk.try_into().expect("32 bytes in chunks of 4")) % width;
        let port = *range.start() + pick as u16;
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

/// The job as this task sees it, its secret and coordinator included, and for task 0
/// the rendezvous it started.
pub(crate) fn join(task: &SrunTask, cfg: &Config) -> Result<(JobEnv, Option<HostedRendezvous>), String> {
    let ports = candidate_ports(&task.job_id, &cfg.srun_ports);
    let mut env = JobEnv {
        rank: task.rank,
        size: task.size,
        job_id: task.job_id,
        secret: [0; 32],
        coord: Vec::new(),
        local_rank: task.local_rank,
        local_size: task.local_size,
        node: rustix::system::uname().nodename().to_string_lossy().into_owned(),
    };
    let prefix = |e: String| {
        format!(
            "task {} of {} ({}), srun without PMI: {e}",
            task.rank, task.size, task.step
        )
    };
    let (secret, coord, hosted) = if task.rank == 0 {
        let (secret, coord, hosted) = host(task, cfg, &ports).map_err(prefix)?;
        (secret, coord, Some(hosted))
    } else {
        let grant = fetch_key(task, cfg, &ports).map_err(prefix)?;
        (grant.secret, grant.coord, None)
    };
    env.secret = secret;
    env.coord = net::connstr::parse(&coord).map_err(|e| {
        prefix(format!(
            "the rendezvous named a bad coordinator address {coord:?}: {e}"
        ))
    })?;
    Ok((env, hosted))
}

/// Task 0: starts the rendezvous with a fresh secret; returns what the others fetch.
fn host(
    task: &SrunTask,
    cfg: &Config,
    ports: &[u16],
) -> Result<([u8; 32], String, HostedRendezvous), String> {
    if task.node_index != 0 {
        return Err(format!(
            "task 0 runs on the step's node {} ({}), not on its first ({}), where the other tasks \
             look for it; use the default distribution, or srun --mpi=pmi2",
            task.node_index,
            rustix::system::uname().nodename().to_string_lossy(),
            task.first_node
        ));
    }
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| format!("no random numbers for the job secret: {e}"))?;
    let bin = &cfg.pontoon_bin;
    let mut child = Command::new(bin)
        .arg("srun-rendezvous")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start `{bin} srun-rendezvous` ({e}): under srun without PMI, task 0 starts \
                 pontoon's rendezvous, so `pontoon` must be on PATH or named by PONTOON_BIN; or use \
                 srun --mpi=pmi2"
            )
        })?;
    let order = RendezvousOrder {
        job: task.job_id,
        secret,
        size: task.size,
        wait_s: u32::try_from(cfg.pmi_fence_timeout.as_secs()).unwrap_or(u32::MAX),
        ports: ports.to_vec(),
    }
    .encode();
    let stdin = child.stdin.as_mut().expect("piped");
    stdin
        .write_all(order.as_bytes())
        .and_then(|()| stdin.flush())
        .map_err(|e| format!("cannot talk to `{bin} srun-rendezvous`: {e}"))?;
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped");
    BufReader::new(stdout.take(MAX_LINE as u64))
        .read_line(&mut line)
        .map_err(|e| format!("cannot hear from `{bin} srun-rendezvous`: {e}"))?;
    match line.trim_end().split_once(' ') {
        Some(("ready", coord)) => {
            tracing::info!("task 0: the job's rendezvous listens; coordinator at {coord}");
            Ok((secret, coord.to_string(), HostedRendezvous { _child: child }))
        }
        _ => {
            let status = child.try_wait().ok().flatten();
            Err(format!(
                "`{bin} srun-rendezvous` did not start ({}); is it the same version as this program?",
                status.map_or_else(|| format!("it said {:?}", line.trim_end()), |s| s.to_string())
            ))
        }
    }
}

/// Every other task: asks task 0's rendezvous for the key until it answers or the time
/// given (`PONTOON_PMI_FENCE_TIMEOUT_S`) runs out.
fn fetch_key(task: &SrunTask, cfg: &Config, ports: &[u16]) -> Result<KeyGrant, String> {
    let ips = resolve(&task.first_node)?;
    let start = Instant::now();
    let mut tried: Vec<(SocketAddr, String)> = Vec::new();
    let mut pause = Duration::from_millis(20);
    loop {
        for &port in ports {
            for &ip in &ips {
                let addr = SocketAddr::new(ip, port);
                match ask(addr, task, cfg.attempt_timeout.max(Duration::from_secs(1))) {
                    Ok(grant) => return Ok(grant),
                    Err(why) => match tried.iter_mut().find(|(a, _)| *a == addr) {
                        Some(t) => t.1 = why,
                        None => tried.push((addr, why)),
                    },
                }
            }
        }
        if start.elapsed() >= cfg.pmi_fence_timeout {
            let list: String = tried.iter().map(|(a, why)| format!("\n  {a}: {why}")).collect();
            return Err(format!(
                "task 0's rendezvous on {} did not answer within {:?} (PONTOON_PMI_FENCE_TIMEOUT_S); \
                 tried:{list}\ncheck that task 0 started (its error comes first), that this node \
                 reaches {} on those ports (PONTOON_SRUN_PORTS picks the range), or use srun --mpi=pmi2",
                task.first_node, cfg.pmi_fence_timeout, task.first_node
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

fn resolve(host: &str) -> Result<Vec<IpAddr>, String> {
    let mut ips: Vec<IpAddr> = (host, 0)
        .to_socket_addrs()
        .map_err(|e| {
            format!("cannot resolve the step's first node {host:?}, where task 0's rendezvous runs: {e}")
        })?
        .map(|a| a.ip())
        .collect();
    ips.dedup();
    Ok(ips)
}

/// One try at one address: the grant, or why not.
fn ask(addr: SocketAddr, task: &SrunTask, connect_within: Duration) -> Result<KeyGrant, String> {
    let mut s = TcpStream::connect_timeout(&addr, connect_within).map_err(|e| e.to_string())?;
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(|e| format!("no random numbers: {e}"))?;
    let request = KeyRequest {
        job: task.job_id,
        nonce,
    };
    s.set_read_timeout(Some(ANSWER_WITHIN))
        .map_err(|e| e.to_string())?;
    s.write_all(request.encode().as_bytes())
        .map_err(|e| e.to_string())?;
    let mut line = Vec::new();
    BufReader::new(s.take(MAX_LINE as u64 + 1))
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("no answer: {e}"))?;
    match KeyAnswer::parse(&line).map_err(|e| format!("not pontoon's rendezvous ({e})"))? {
        KeyAnswer::OtherJob => Err("the rendezvous of another job".into()),
        KeyAnswer::Refused(why) => Err(format!("refused: {why}")),
        KeyAnswer::Credential(cred) => {
            let grant = unmunge(&cred)?;
            if grant.job != task.job_id || grant.nonce != nonce {
                return Err("a credential made for another request".into());
            }
            Ok(grant)
        }
    }
}

/// Decodes a munge credential that must come from this process's own user.
fn unmunge(cred: &str) -> Result<KeyGrant, String> {
    let mut child = Command::new("unmunge")
        .args(["--numeric", "--keys=UID"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run unmunge ({e}): srun without PMI needs munge's programs"))?;
    let mut stdin = child.stdin.take().expect("piped");
    stdin
        .write_all(cred.as_bytes())
        .map_err(|e| format!("unmunge: {e}"))?;
    drop(stdin);
    let out = child.wait_with_output().map_err(|e| format!("unmunge: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "munge refused the credential: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let (uid, payload) = munged_uid_and_payload(&out.stdout)
        .ok_or("unmunge printed no UID and payload: an unknown munge version?")?;
    let mine = rustix::process::getuid().as_raw();
    if uid != mine {
        return Err(format!(
            "the credential was made by user {uid}, not by this job's user {mine}: not this job's rendezvous"
        ));
    }
    KeyGrant::parse(payload).map_err(|e| e.to_string())
}

/// `unmunge --numeric --keys=UID` prints `UID: N`, a blank line, then the payload.
fn munged_uid_and_payload(out: &[u8]) -> Option<(u32, &[u8])> {
    let split = out.windows(2).position(|w| w == b"\n\n")?;
    let meta = std::str::from_utf8(&out[..split]).ok()?;
    let uid = meta
        .lines()
        .find_map(|l| l.strip_prefix("UID:"))?
        .trim()
        .parse()
        .ok()?;
    Some((uid, &out[split + 2..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_ports_are_distinct_in_range_and_the_same_for_every_task() {
        let range = 20000..=31999;
        let a = candidate_ports(&[7; 16], &range);
        assert_eq!(a, candidate_ports(&[7; 16], &range));
        assert!(a.len() >= 6 && a.iter().all(|p| range.contains(p)), "{a:?}");
        assert_ne!(a, candidate_ports(&[8; 16], &range));
        assert_eq!(candidate_ports(&[7; 16], &(40000..=40000)), [40000]);
    }

    #[test]
    fn unmunge_output_gives_the_uid_and_the_payload() {
        let out = b"UID:              1000\n\npontoon-srun-grant 1 x";
        assert_eq!(
            munged_uid_and_payload(out),
            Some((1000, &b"pontoon-srun-grant 1 x"[..]))
        );
        assert_eq!(munged_uid_and_payload(b"STATUS: 0\n\npayload"), None);
        assert_eq!(munged_uid_and_payload(b"UID: 0"), None);
    }
}
