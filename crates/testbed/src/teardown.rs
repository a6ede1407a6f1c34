//! `down`, `list`: finding testbeds from what is running (not only from what was
//! written down), so that a testbed whose `up` crashed half-way is still found and removed.

use crate::netns::{self, holders, named_netns};
use crate::state_dir;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// What `down` removed.
#[derive(Debug, Default)]
pub struct Removed {
    pub namespaces: usize,
    pub processes: usize,
}

/// Removes testbed `name`: kills every process in its namespaces (holders, emulators,
/// jobs), drops the namespace names (their links, bridges, qdiscs and nftables tables go
/// with them) and its state directory. Idempotent. Checks that nothing is left.
pub fn down(name: &str) -> Result<Removed, String> {
    // The name becomes part of paths that are removed: never `/`, `..` or empty.
    crate::topology::check_name("testbed", name, 24)?;
    crate::require_root("removing a testbed")?;
    let mut removed = Removed::default();
    let mut stubborn = Vec::new();
    let ns_paths = holders(Some(name))
        .into_iter()
        .map(|h| PathBuf::from(format!("/proc/{}/ns/net", h.pid)))
        .chain(
            named_netns(Some(name))
                .into_iter()
                .map(|n| Path::new("/run/netns").join(n)),
        );
    // Open each namespace once by path; the set avoids counting one twice.
    let mut seen = BTreeSet::new();
    for path in ns_paths {
        let Ok(meta) = fs::metadata(&path) else {
            continue;
        };
        if !seen.insert(std::os::unix::fs::MetadataExt::ino(&meta)) {
            continue;
        }
        removed.namespaces += 1;
        removed.processes += netns::pids_in_netns(&path).len();
        stubborn.extend(netns::kill_netns_processes(&path));
    }
    for ns in named_netns(Some(name)) {
        netns::delete_netns_name(&ns)?;
    }
    let dir = state_dir(name);
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(|e| format!("removing {}: {e}", dir.display()))?;
    }
    let left_holders = holders(Some(name));
    let left_ns = named_netns(Some(name));
    if !stubborn.is_empty() || !left_holders.is_empty() || !left_ns.is_empty() {
        return Err(format!(
            "testbed {name:?} is not completely gone: processes {stubborn:?}, holders {left_holders:?}, namespaces {left_ns:?}"
        ));
    }
    Ok(removed)
}

/// Names of every testbed on this machine: running ones and half-built or crashed ones.
pub fn list() -> Vec<String> {
    let mut names: BTreeSet<String> = holders(None).into_iter().map(|h| h.testbed).collect();
    for ns in named_netns(None) {
        if let Some(tb) = ns.strip_prefix("ptb.").and_then(|r| r.split('.').next()) {
            names.insert(tb.to_string());
        }
    }
    if let Ok(dir) = fs::read_dir(crate::STATE_ROOT) {
        names.extend(dir.flatten().filter_map(|e| e.file_name().into_string().ok()));
    }
    names.retain(|n| crate::topology::check_name("testbed", n, 24).is_ok());
    names.into_iter().collect()
}
