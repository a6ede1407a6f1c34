//! Namespaces and the processes that hold them.
//!
//! Every host is held by one long-lived process (`sleep`, renamed
//! `pontoon-testbed-hold TESTBED HOST`) started in fresh network, UTS and mount
//! namespaces; its network namespace is also named `ptb.TESTBED.HOST` in `/run/netns`
//! so that `ip -n` works. The renamed holder is what lets `down` find everything again
//! after a crash: kill every process in each holder's network namespace, then drop the
//! names. Nothing is created in the root namespace.

use std::ffi::OsStr;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const HOLDER_MARK: &str = "pontoon-testbed-hold";
const NETNS_DIR: &str = "/run/netns";

/// Name of a host's network namespace in `/run/netns`.
pub fn netns_name(testbed: &str, host: &str) -> String {
    format!("ptb.{testbed}.{host}")
}

/// Runs a command and returns its stdout, or an error carrying its stderr.
pub fn run(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot run {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{what}: {:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a command with `input` on its stdin.
pub fn run_with_input(cmd: &mut Command, input: &str, what: &str) -> Result<(), String> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: cannot run {:?}: {e}", cmd.get_program()))?;
    let mut stdin = child.stdin.take().expect("piped");
    let written = stdin.write_all(input.as_bytes());
    drop(stdin);
    let out = child.wait_with_output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() || written.is_err() {
        return Err(format!(
            "{what}: {:?} failed ({}): {}\ninput was:\n{input}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// A command run inside the network namespace `ns` (by name).
pub fn in_netns(ns: &str, program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net={NETNS_DIR}/{ns}")).arg("--").arg(program);
    cmd
}

/// A command run inside all namespaces of the host held by `holder` (network, mount,
/// UTS), in the caller's working directory.
pub fn in_host(holder: u32, program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--target={holder}"))
        .args(["--net", "--mount", "--uts", "--ipc"]);
    if let Ok(cwd) = std::env::current_dir() {
        cmd.arg(format!("--wd={}", cwd.display()));
    }
    cmd.arg("--").arg(program);
    cmd
}

/// Starts a holder: new namespaces, hostname, private `/dev/shm` and `/sys`, the given
/// `/etc/hosts`; names its network namespace. Returns its PID.
pub fn start_holder(testbed: &str, host: &str, etc_hosts: &Path) -> Result<u32, String> {
    let script = r#"set -e
hostname "$1"
mount -t tmpfs -o mode=1777,size=64m tmpfs /dev/shm
mount --bind "$2" /etc/hosts
mount -t sysfs sysfs /sys
# Its own boot id: shared-memory transports (UCX) take one boot id for one machine.
cat /proc/sys/kernel/random/uuid > "$2.boot_id"
mount --bind "$2.boot_id" /proc/sys/kernel/random/boot_id
echo ready
exec -a "$3 $4 $1" sleep infinity"#;
    let mut child = Command::new("unshare")
        .args([
            "--net",
            "--uts",
            "--ipc",
            "--mount",
            "--propagation",
            "private",
            "--",
        ])
        .args(["bash", "-c", script, "bash", host])
        .arg(etc_hosts)
        .args([HOLDER_MARK, testbed])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: Ctrl-C on `testbed up` must not take the host down.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("host {host}: cannot run unshare (util-linux): {e}"))?;
    let pid = child.id();
    let mut line = String::new();
    let _ = BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line);
    if line.trim() != "ready" {
        let _ = child.kill();
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        return Err(format!(
            "host {host}: could not set up its namespaces: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    // The holder lives on after we return (dropping `child` neither kills nor waits).
    drop(child);
    let ns = netns_name(testbed, host);
    run(
        Command::new("ip").args(["netns", "attach", &ns, &pid.to_string()]),
        &format!("host {host}: naming its network namespace"),
    )?;
    Ok(pid)
}

/// A live holder found in `/proc`.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub testbed: String,
    pub host: String,
    pub pid: u32,
}

/// Every holder of every testbed (or of one), found by its process name.
pub fn holders(testbed: Option<&str>) -> Vec<Holder> {
    let mut found = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
        let argv0 = String::from_utf8_lossy(argv0);
        let mut words = argv0.split(' ');
        if words.next() != Some(HOLDER_MARK) {
            continue;
        }
        let (Some(tb), Some(host)) = (words.next(), words.next()) else {
            continue;
        };
        if testbed.is_none() || testbed == Some(tb) {
            found.push(Holder {
                testbed: tb.to_string(),
                host: host.to_string(),
                pid,
            });
        }
    }
    found.sort_by(|a, b| (&a.testbed, &a.host).cmp(&(&b.testbed, &b.host)));
    found
}

/// Names in `/run/netns` that belong to testbeds (all, or one).
pub fn named_netns(testbed: Option<&str>) -> Vec<String> {
    let prefix = match testbed {
        Some(t) => format!("ptb.{t}."),
        None => "ptb.".to_string(),
    };
    let mut names: Vec<String> = fs::read_dir(NETNS_DIR)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// PIDs of the processes whose network namespace is the one at `ns_path`.
pub fn pids_in_netns(ns_path: &Path) -> Vec<u32> {
    let Ok(target) = fs::metadata(ns_path) else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(m) = fs::metadata(format!("/proc/{pid}/ns/net")) {
            if m.ino() == target.ino() && m.dev() == target.dev() {
                pids.push(pid);
            }
        }
    }
    pids
}

/// Kills every process in the network namespace at `ns_path` and waits (up to 5 s) until
/// none is left. Returns the PIDs that would not die.
pub fn kill_netns_processes(ns_path: &Path) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids: Vec<u32> = pids_in_netns(ns_path)
            .into_iter()
            .filter(|&p| !is_zombie(p))
            .collect();
        if pids.is_empty() || Instant::now() > deadline {
            return pids;
        }
        for pid in pids {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A dead process waiting for its parent to reap it; it no longer holds anything.
fn is_zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// Drops a name from `/run/netns` (the namespace goes when its last process does).
pub fn delete_netns_name(ns: &str) -> Result<(), String> {
    run(
        Command::new("ip").args(["netns", "delete", ns]),
        &format!("removing network namespace {ns}"),
    )
    .map(|_| ())
}
