//! Coordinator and spawners behind `pontoon run`.
//!
//! [`run`] starts a job of local ranks: it binds the coordinator (one listening socket
//! per address family, seed 000 §3.1), spawns every rank in a process group of its
//! own with the `PONTOON_*` variables, forwards their output line by line, serves the
//! control protocol ([`proto::control`]: authentication, key-value fence, finalize,
//! abort) and ends the job — and every process of it — when a rank fails, a rank
//! aborts, the timeout passes or `pontoon run` is interrupted.
#![forbid(unsafe_code)]

mod coordinator;
mod forward;
pub mod hosts;
mod job;
mod kvs;
mod poller;
mod procs;
pub mod relays;
mod signals;
pub mod slurm;
pub mod spawn;
pub mod srun;
pub mod status;

pub use spawn::LAUNCHER_VARS;
use std::ffi::OsString;
use std::time::Duration;

/// Exit status of `pontoon run` when `--timeout` ended the job (as `timeout(1)`).
pub const EXIT_TIMEOUT: i32 = 124;

/// Grace period between telling ranks the job ends (or a peer failed) and SIGTERM,
/// and again between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(1);

/// Everything `pontoon run` needs to start a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchPlan {
    /// Number of ranks (at least 1).
    pub n: u32,
    /// Program to run; looked up in `PATH` like a shell does unless it contains a `/`.
    pub program: OsString,
    /// Arguments, passed verbatim.
    pub args: Vec<OsString>,
    /// Prefix every forwarded output line with `[rank] `.
    pub tag_output: bool,
    /// Variables to forward to the ranks (`-x VAR` or `-x VAR=value`). Local ranks
    /// inherit the environment anyway; remote spawners forward this list and every
    /// `PONTOON_*` parameter set here.
    pub export: Vec<(String, Option<String>)>,
    /// End the job after this long (exit status [`EXIT_TIMEOUT`]).
    pub timeout: Option<Duration>,
    /// The host of every rank (see [`hosts::map_ranks`]); empty: all on this host.
    /// Ranks on other hosts are started through `agent`.
    pub placement: Vec<hosts::Host>,
    /// The command that runs a shell command on another host, as `AGENT HOST COMMAND`:
    /// `ssh`, or `pontoon testbed agent`.
    pub agent: Vec<OsString>,
    /// Hosts to run a relay on for the job's lifetime (`pontoon run --relay`).
    pub relays: Vec<String>,
    /// The command that runs a relay: `pontoon relay …`, exiting when its standard input
    /// closes (see [`relays`]).
    pub relay_command: Vec<OsString>,
}

/// Why a job could not be started (failures of a started job are exit statuses).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("-n must be at least 1")]
    NoRanks,
    #[error("{0}")]
    Program(String),
    #[error("-x {0}")]
    Export(String),
    #[error("cannot start rank {rank} ({program}): {source}")]
    Spawn {
        rank: u32,
        program: String,
        source: std::io::Error,
    },
    #[error("the coordinator cannot listen: {0}")]
    Listen(String),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}

impl LaunchError {
    pub(crate) fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> LaunchError {
        move |source| LaunchError::Io { what, source }
    }
}

/// Parses one `-x` argument: `VAR` or `VAR=value`.
pub fn parse_export(arg: &str) -> Result<(String, Option<String>), LaunchError> {
    let (name, value) = match arg.split_once('=') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (arg, None),
    };
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(LaunchError::Export(format!(
            "{arg}: {name:?} is not a variable name (letters, digits and `_`, not starting with a digit)"
        )));
    }
    if spawn::LAUNCHER_VARS.contains(&name) {
        return Err(LaunchError::Export(format!(
            "{arg}: {name} is set by pontoon run for every rank"
        )));
    }
    Ok((name.to_string(), value))
}

/// Runs a job to its end and returns the exit status for `pontoon run`:
/// 0 when every rank exited 0 (having called finalize if it said hello), otherwise
/// the status of whatever ended the job first — an abort's code, the first failed
/// rank's code (128 + signal number when killed; 1 when it exited 0 without calling
/// finalize), [`EXIT_TIMEOUT`], or 128 + signal number when `pontoon run` itself
/// was interrupted.
///
/// Call it from a process that has no other children to look after: it makes the
/// process a child subreaper so that nothing the ranks start can outlive the job.
pub fn run(plan: LaunchPlan) -> Result<i32, LaunchError> {
    if plan.n == 0 {
        return Err(LaunchError::NoRanks);
    }
    if !plan.placement.is_empty() && plan.placement.len() != plan.n as usize {
        return Err(LaunchError::Program(format!(
            "{} hosts given for {} ranks",
            plan.placement.len(),
            plan.n
        )));
    }
    let program = spawn::find_program(&plan.program, std::env::var_os("PATH").as_deref())?;
    for (name, value) in &plan.export {
        if value.is_none() && std::env::var_os(name).is_none() {
            tracing::warn!("-x {name}: {name} is not set here, so there is nothing to forward");
        }
    }
    job::Job::start(&plan, &program)?.run()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_arguments() {
        assert_eq!(
            parse_export("OMP_NUM_THREADS=4").unwrap(),
            ("OMP_NUM_THREADS".into(), Some("4".into()))
        );
        assert_eq!(parse_export("A=b=c").unwrap(), ("A".into(), Some("b=c".into())));
        assert_eq!(parse_export("HOME").unwrap(), ("HOME".into(), None));
        assert_eq!(
            parse_export("EMPTY=").unwrap(),
            ("EMPTY".into(), Some(String::new()))
        );
        for bad in [
            "",
            "=x",
            "1A",
            "A-B",
            "A B=1",
            "PONTOON_RANK=3",
            "PONTOON_JOB_SECRET",
        ] {
            assert!(parse_export(bad).is_err(), "{bad}");
        }
    }
}
