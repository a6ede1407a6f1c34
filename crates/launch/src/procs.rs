//! Signalling and reaping everything a job started, including what the ranks
//! started themselves.
//!
//! Each rank leads a process group, so a signal to the group reaches its children
//! too. A descendant that left the group (setsid, double fork) is reparented to us
//! because we are a child subreaper, and is found among our children in /proc.

use rustix::process::{Pid, Signal, WaitOptions};
use std::collections::HashSet;

/// Makes orphaned descendants of the ranks our children instead of init's, so they
/// can be found and ended. Best effort: without it only the process groups are used.
pub(crate) fn become_subreaper() {
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        tracing::debug!("cannot become a child subreaper: {e}");
    }
}

fn pid(p: u32) -> Option<Pid> {
    i32::try_from(p).ok().and_then(Pid::from_raw)
}

/// Sends `sig` to process group `pgid`; false if the group no longer exists.
pub(crate) fn signal_group(pgid: u32, sig: Signal) -> bool {
    pid(pgid).is_some_and(|p| rustix::process::kill_process_group(p, sig).is_ok())
}

/// Sends `sig` to process `p` and, if it leads a process group of its own (it
/// called setsid or setpgid), to that group too — never to our own group.
pub(crate) fn signal_process(p: u32, sig: Signal) {
    let Some(p) = pid(p) else { return };
    let _ = rustix::process::kill_process(p, sig);
    let own = rustix::process::getpgrp();
    if rustix::process::getpgid(Some(p)).is_ok_and(|g| g == p && g != own) {
        let _ = rustix::process::kill_process_group(p, sig);
    }
}

/// Does process group `pgid` still have members?
pub(crate) fn group_exists(pgid: u32) -> bool {
    pid(pgid).is_some_and(|p| rustix::process::test_kill_process_group(p).is_ok())
}

/// Our current children (every thread's), from /proc; empty where the kernel lacks
/// /proc/…/children.
pub(crate) fn children() -> HashSet<u32> {
    let mut out = HashSet::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(s.split_ascii_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    out
}

/// Children that are neither ranks nor were there before the job: orphaned
/// descendants of the ranks, reparented to us.
pub(crate) struct Orphans {
    before: HashSet<u32>,
}

impl Orphans {
    pub(crate) fn snapshot() -> Orphans {
        Orphans { before: children() }
    }

    pub(crate) fn current(&self, ranks: &HashSet<u32>) -> Vec<u32> {
        children()
            .into_iter()
            .filter(|p| !self.before.contains(p) && !ranks.contains(p))
            .collect()
    }

    /// Reaps orphans that have exited (they would stay zombies otherwise).
    pub(crate) fn reap(&self, ranks: &HashSet<u32>) {
        for p in self.current(ranks) {
            if let Some(p) = pid(p) {
                let _ = rustix::process::waitpid(Some(p), WaitOptions::NOHANG);
            }
        }
    }
}

/// Raises our soft limit of open files towards `need` (at most to the hard limit):
/// the coordinator holds three descriptors per rank. The ranks inherit the limit.
pub(crate) fn raise_fd_limit(need: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let cur = getrlimit(Resource::Nofile);
    let Some(soft) = cur.current else { return };
    if soft >= need {
        return;
    }
    let want = cur.maximum.map_or(need, |hard| need.min(hard));
    if let Err(e) = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(want),
            maximum: cur.maximum,
        },
    ) {
        tracing::debug!("cannot raise the open-file limit to {want}: {e}");
    }
}
