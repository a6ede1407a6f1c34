//! Starting local ranks: program lookup, environment, process groups, pipes.

use crate::LaunchError;
use proto::hex::hex;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};

/// Variables `pontoon run` sets for every rank (see `runtime::jobenv::ENV_VARS`).
pub const LAUNCHER_VARS: &[&str] = &[
    "PONTOON_RANK",
    "PONTOON_SIZE",
    "PONTOON_COORD",
    "PONTOON_JOB_ID",
    "PONTOON_JOB_SECRET",
    "PONTOON_LOCAL_RANK",
    "PONTOON_LOCAL_SIZE",
    "PONTOON_NODE",
];

fn is_executable(p: &Path) -> bool {
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Finds `program` like a shell: a name containing `/` is used as it is, anything
/// else is searched in `path` (an empty entry means the current directory).
pub fn find_program(program: &OsStr, path: Option<&OsStr>) -> Result<PathBuf, LaunchError> {
    let shown = program.to_string_lossy();
    if program.is_empty() {
        return Err(LaunchError::Program("no program given".into()));
    }
    if program.as_encoded_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        return if is_executable(&p) {
            Ok(p)
        } else if p.exists() {
            Err(LaunchError::Program(format!("{shown} is not an executable file")))
        } else {
            Err(LaunchError::Program(format!("{shown}: no such file")))
        };
    }
    let path = path.unwrap_or_default();
    for dir in std::env::split_paths(path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    Err(LaunchError::Program(format!(
        "cannot find `{shown}` in PATH ({}); give a path such as ./{shown}",
        path.to_string_lossy()
    )))
}

/// This host's name, for `PONTOON_NODE` and messages.
pub(crate) fn hostname() -> String {
    let u = rustix::system::uname();
    let n = u.nodename().to_string_lossy().into_owned();
    if n.is_empty() {
        "localhost".into()
    } else {
        n
    }
}

/// What every rank of a local job shares.
pub(crate) struct SpawnCommon<'a> {
    pub program: &'a Path,
    pub args: &'a [OsString],
    pub size: u32,
    pub coord: &'a str,
    pub job_id: &'a [u8; 16],
    pub secret: &'a [u8; 32],
    pub node: &'a str,
    pub export: &'a [(String, Option<String>)],
    /// The host of every rank (empty: all on this one).
    pub placement: &'a [crate::hosts::Host],
    /// `PONTOON_LOCAL_RANK`, `PONTOON_LOCAL_SIZE` of every rank.
    pub local: &'a [(u32, u32)],
    /// Starts a command on another host: `AGENT HOST SCRIPT`.
    pub agent: &'a [OsString],
    /// Of every rank on a `slurm` host: the allocation's node it runs on.
    pub slurm: &'a [Option<crate::slurm::Target>],
}

pub(crate) struct Spawned {
    pub child: Child,
    pub stdout: ChildStdout,
    pub stderr: ChildStderr,
}

/// Starts one rank in a process group of its own (so the whole group, including
/// anything it starts, can be signalled at once, and a terminal's Ctrl-C reaches only
/// `pontoon run`, which forwards it). Standard input is closed.
pub(crate) fn spawn_rank(c: &SpawnCommon, rank: u32) -> std::io::Result<Spawned> {
    let placed = c.placement.get(rank as usize);
    // The host the agent reaches; a `slurm` host's ranks run on a node behind it.
    let host = placed.map_or(c.node, |h| h.name.as_str());
    let target = c.slurm.get(rank as usize).and_then(Option::as_ref);
    let node = target.map_or(host, |t| t.node.as_str());
    let site = placed.and_then(|h| h.site.clone());
    let (local_rank, local_size) = c.local.get(rank as usize).copied().unwrap_or((rank, c.size));
    let id = hex(c.job_id);
    // The secret travels only through the environment or a pipe (never argv, which
    // any user can read in /proc); the rank removes it from its environment on start.
    let secret = hex(c.secret);
    let vars: [(&str, String); 7] = [
        ("PONTOON_RANK", rank.to_string()),
        ("PONTOON_SIZE", c.size.to_string()),
        ("PONTOON_COORD", c.coord.to_string()),
        ("PONTOON_JOB_ID", id),
        ("PONTOON_LOCAL_RANK", local_rank.to_string()),
        ("PONTOON_LOCAL_SIZE", local_size.to_string()),
        ("PONTOON_NODE", node.to_string()),
    ];
    let remote = host != c.node || target.is_some();
    let mut cmd = if remote {
        // Another host gets the exported variables and pontoon's own parameters
        // (`PONTOON_*` as set here), with this side's values.
        let mut env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| k.starts_with("PONTOON_") && !LAUNCHER_VARS.contains(&k.as_str()))
            .filter(|(k, _)| !c.export.iter().any(|(e, _)| e == k))
            .collect();
        env.extend(
            c.export
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.clone().or_else(|| std::env::var(k).ok())?))),
        );
        env.extend(vars.iter().map(|(k, v)| (k.to_string(), v.clone())));
        env.extend(site.iter().map(|s| ("PONTOON_SITE".to_string(), s.clone())));
        let cwd = std::env::current_dir()?;
        let mut words = crate::hosts::remote_command(
            c.agent,
            host,
            &cwd.to_string_lossy(),
            &env,
            &c.program.to_string_lossy(),
            c.args,
        );
        if let Some(t) = target {
            let script = words.pop().expect("remote_command ends with the script");
            words.push(t.wrap(&script.to_string_lossy()).into());
        }
        let mut cmd = Command::new(&words[0]);
        cmd.args(&words[1..]).stdin(Stdio::piped());
        cmd
    } else {
        let mut cmd = Command::new(c.program);
        cmd.args(c.args).stdin(Stdio::null());
        for (k, v) in c.export {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        if let Some(site) = &site {
            cmd.env("PONTOON_SITE", site);
        }
        cmd.envs(vars.iter().map(|(k, v)| (k, v)))
            .env("PONTOON_JOB_SECRET", &secret);
        cmd
    };
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = cmd.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        // The remote script's first line reads it; a dead agent shows up as its exit.
        let _ = stdin.write_all(format!("{secret}\n").as_bytes());
    }
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    Ok(Spawned {
        child,
        stdout,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_programs_like_a_shell() {
        let p = find_program(OsStr::new("sh"), Some(OsStr::new("/nonexistent::/usr/bin:/bin"))).unwrap();
        assert!(p.ends_with("sh"), "{p:?}");
        let e = find_program(OsStr::new("no-such-program-xyz"), Some(OsStr::new("/usr/bin"))).unwrap_err();
        assert!(
            e.to_string()
                .contains("cannot find `no-such-program-xyz` in PATH (/usr/bin)"),
            "{e}"
        );
        assert!(find_program(OsStr::new("/bin/sh"), None).is_ok());
        let e = find_program(OsStr::new("/etc/hostname-nope"), None).unwrap_err();
        assert!(e.to_string().contains("no such file"), "{e}");
        let e = find_program(OsStr::new("/etc/passwd"), None).unwrap_err();
        assert!(e.to_string().contains("not an executable"), "{e}");
        // A directory named like the program is not the program.
        assert!(find_program(OsStr::new("tmp"), Some(OsStr::new("/"))).is_err());
    }
}
