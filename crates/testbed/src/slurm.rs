//! A real Slurm on the testbed (`up --slurm`): one cluster per site (or one for the
//! whole testbed when hosts have no site), each with its own munge key and daemon,
//! `slurmctld` on the site's head or router (else its first host) and a `slurmd` on
//! every other host, all of them Debian's daemons running in the hosts' namespaces.
//!
//! Each host's UTS namespace gives it its own hostname, so `NodeName` is the host's
//! name. The configuration needs no cgroups (`proctrack/linuxproc`, `task/none`,
//! `jobacct_gather/none`; cgroup/v1 named so that slurmd does not look for a cgroup
//! file system: a host's `/sys` is its own). The cluster's directory is bind-mounted
//! over `/etc/slurm` inside its hosts, so `srun`, `salloc` and `sinfo` there find it
//! as on a real cluster. Spool, pid and log files are per host under the testbed's state
//! directory; `down` kills the daemons with everything else in the hosts' namespaces.

use crate::topology::{Host, Topology};
use crate::{netns, state_dir, Testbed};
use std::fmt::Write;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The Debian packages that provide it.
/// Where munge's clients look for munged's socket (`munge.socket.2` in it).
const MUNGE_RUN_DIR: &str = "/run/munge";
/// munged's socket, relative to the cluster's directory (whose `munge` directory is
/// mounted over [`MUNGE_RUN_DIR`]).
const MUNGE_SOCKET: &str = "munge/munge.socket.2";

pub const PACKAGES: &str = "slurmd slurmctld slurm-client munge";

/// How long the daemons get to register every node.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// One Slurm cluster of the testbed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// The site's name, or `main` when hosts have none.
    pub name: String,
    /// Runs slurmctld; where users call `srun` (the login node).
    pub controller: String,
    /// Run slurmd.
    pub nodes: Vec<String>,
}

/// The clusters of a topology: by site; a site's head or router (a forwarding host)
/// controls it, its other hosts compute.
pub fn clusters(topo: &Topology) -> Vec<Cluster> {
    let mut sites: Vec<String> = Vec::new();
    for h in &topo.hosts {
        let site = h.site.clone().unwrap_or_else(|| "main".into());
        if !sites.contains(&site) {
            sites.push(site);
        }
    }
    sites
        .into_iter()
        .filter_map(|site| {
            let hosts: Vec<&Host> = topo
                .hosts
                .iter()
                .filter(|h| h.site.as_deref().unwrap_or("main") == site)
                .collect();
            let head = hosts.iter().find(|h| h.forward).map(|h| h.name.clone());
            let nodes: Vec<String> = hosts
                .iter()
                .filter(|h| !h.forward)
                .map(|h| h.name.clone())
                .collect();
            let controller = head.or_else(|| nodes.first().cloned())?;
            Some(Cluster {
                name: site,
                controller,
                nodes,
            })
        })
        .filter(|c| !c.nodes.is_empty())
        .collect()
}

/// The cluster's directory: `slurm.conf`, `cgroup.conf`, munge's key and socket, and
/// the daemons' state.
pub fn cluster_dir(testbed: &str, cluster: &str) -> PathBuf {
    state_dir(testbed).join("slurm").join(cluster)
}

/// The cluster `host` belongs to, if the testbed runs Slurm.
pub fn cluster_of(tb: &Testbed, host: &str) -> Option<Cluster> {
    if !tb.topology.slurm {
        return None;
    }
    clusters(&tb.topology)
        .into_iter()
        .find(|c| c.controller == host || c.nodes.iter().any(|n| n == host))
}

fn missing(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    !std::env::split_paths(&path).any(|dir| dir.join(program).is_file())
}

/// Starts every cluster's munged, slurmctld and slurmds, and waits until their nodes
/// are idle.
pub fn start(tb: &Testbed) -> Result<(), String> {
    for program in ["munged", "slurmctld", "slurmd", "sinfo"] {
        if missing(program) {
            return Err(format!(
                "--slurm needs {program}: install Debian's {PACKAGES} (`scripts/install-deps.sh` as root)"
            ));
        }
    }
    if !Path::new("/etc/slurm").is_dir() {
        return Err("--slurm needs the directory /etc/slurm (Debian's slurm-client creates it)".into());
    }
    for cluster in clusters(&tb.topology) {
        start_cluster(tb, &cluster).map_err(|e| format!("Slurm cluster {}: {e}", cluster.name))?;
    }
    Ok(())
}

fn start_cluster(tb: &Testbed, c: &Cluster) -> Result<(), String> {
    let dir = cluster_dir(&tb.name, &c.name);
    let io = |what: &str, e: std::io::Error| format!("{what} in {}: {e}", dir.display());
    let munge = dir.join("munge");
    fs::create_dir_all(&munge).map_err(|e| io("creating munge's directory", e))?;
    fs::create_dir_all(dir.join("ctld")).map_err(|e| io("creating slurmctld's directory", e))?;
    for node in &c.nodes {
        fs::create_dir_all(dir.join("d").join(node)).map_err(|e| io("creating a spool directory", e))?;
    }
    // munged insists that only its owner may write its key and socket directory.
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&munge, fs::Permissions::from_mode(0o755)).map_err(|e| io("munge's directory", e))?;
    let mut key = [0u8; 1024];
    getrandom::fill(&mut key).map_err(|e| format!("no random numbers for munge's key: {e}"))?;
    let key_file = munge.join("key");
    fs::write(&key_file, key).map_err(|e| io("writing munge's key", e))?;
    fs::set_permissions(&key_file, fs::Permissions::from_mode(0o600)).map_err(|e| io("munge's key", e))?;
    fs::write(dir.join("slurm.conf"), slurm_conf(&c.name, &dir, c))
        .map_err(|e| io("writing slurm.conf", e))?;
    fs::write(
        dir.join("cgroup.conf"),
        "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n",
    )
    .map_err(|e| io("writing cgroup.conf", e))?;

    for host in std::iter::once(&c.controller).chain(&c.nodes) {
        bind_over(tb, host, &dir, "/etc/slurm")?;
        // munge's own programs (and pontoon's ranks under `srun --mpi=none`) look for the
        // socket where munged puts it on a real cluster.
        bind_over(tb, host, &munge, MUNGE_RUN_DIR)?;
    }
    let path = |p: &str| dir.join(p).display().to_string();
    daemon(
        tb,
        &c.controller,
        "munged",
        &[
            "--force",
            &format!("--socket={}", path(MUNGE_SOCKET)),
            &format!("--key-file={}", path("munge/key")),
            &format!("--log-file={}", path("munge/log")),
            &format!("--pid-file={}", path("munge/pid")),
            &format!("--seed-file={}", path("munge/seed")),
        ],
    )?;
    daemon(tb, &c.controller, "slurmctld", &["-i"])?;
    for node in &c.nodes {
        daemon(tb, node, "slurmd", &[])?;
    }
    wait_idle(tb, c, &dir)
}

/// The cluster's configuration: no cgroups, no accounting, root runs everything.
fn slurm_conf(name: &str, dir: &Path, c: &Cluster) -> String {
    let d = dir.display();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut conf = format!(
        "# Written by `pontoon testbed up --slurm`.\n\
         ClusterName={name}\n\
         SlurmctldHost={controller}\n\
         AuthType=auth/munge\n\
         AuthInfo=socket={d}/{MUNGE_SOCKET}\n\
         CredType=cred/munge\n\
         SlurmUser=root\n\
         SlurmdUser=root\n\
         StateSaveLocation={d}/ctld\n\
         SlurmctldPidFile={d}/ctld/pid\n\
         SlurmctldLogFile={d}/ctld/log\n\
         SlurmdSpoolDir={d}/d/%n\n\
         SlurmdPidFile={d}/d/%n/pid\n\
         SlurmdLogFile={d}/d/%n/log\n\
         ProctrackType=proctrack/linuxproc\n\
         TaskPlugin=task/none\n\
         JobAcctGatherType=jobacct_gather/none\n\
         SwitchType=switch/none\n\
         MpiDefault=none\n\
         SchedulerType=sched/builtin\n\
         SelectType=select/cons_tres\n\
         SelectTypeParameters=CR_CPU\n\
         ReturnToService=2\n\
         SlurmdParameters=config_overrides\n\
         SlurmctldTimeout=30\n\
         SlurmdTimeout=30\n\
         InactiveLimit=0\n\
         KillWait=2\n\
         MinJobAge=30\n",
        controller = c.controller,
    );
    for node in &c.nodes {
        let _ = writeln!(conf, "NodeName={node} CPUs={cpus} State=UNKNOWN");
    }
    let _ = writeln!(
        conf,
        "PartitionName={name} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE"
    );
    conf
}

/// Makes `dir` the host's `target` (in its own mount namespace only).
fn bind_over(tb: &Testbed, host: &str, dir: &Path, target: &str) -> Result<(), String> {
    fs::create_dir_all(target).map_err(|e| format!("creating {target}: {e}"))?;
    let mut cmd = tb.command(host, "mount")?;
    cmd.arg("--bind").arg(dir).arg(target);
    netns::run(
        &mut cmd,
        &format!("host {host}: mounting {} over {target}", dir.display()),
    )
    .map(drop)
}

/// Starts a daemon on `host`; it forks into the background itself.
fn daemon(tb: &Testbed, host: &str, program: &str, args: &[&str]) -> Result<(), String> {
    let mut cmd = tb.command(host, program)?;
    cmd.args(args);
    netns::run(&mut cmd, &format!("host {host}: starting {program}")).map(drop)
}

/// Waits until every node of the cluster is idle; the error names the nodes that are
/// not and where their logs are.
fn wait_idle(tb: &Testbed, c: &Cluster, dir: &Path) -> Result<(), String> {
    let deadline = Instant::now() + READY_WITHIN;
    let mut last = String::new();
    while Instant::now() < deadline {
        let mut cmd = tb.command(&c.controller, "sinfo")?;
        cmd.args(["-h", "-N", "-o", "%N %T"]);
        if let Ok(out) = netns::run(&mut cmd, "sinfo") {
            last = out.clone();
            let idle = out.lines().filter(|l| l.ends_with(" idle")).count();
            if idle == c.nodes.len() {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!(
        "its nodes are not all idle after {READY_WITHIN:?} (sinfo: {:?}); logs: {}/ctld/log, {}/d/NODE/log",
        last.trim(),
        dir.display(),
        dir.display()
    ))
}
