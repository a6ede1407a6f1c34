//! `pontoon run` inside a Slurm allocation (`salloc`, `sbatch`): the allocated nodes
//! are the hosts, and `srun` starts each rank on its node, in place of ssh.

use crate::hosts::Host;
use std::ffi::OsString;
use std::process::Command;

/// The allocation this process runs in: its nodes, each with its CPUs as slots.
/// `Ok(None)` outside of one (no `SLURM_JOB_ID` or `SLURM_JOB_NODELIST`).
pub fn allocation() -> Result<Option<Vec<Host>>, String> {
    let (Ok(job), Ok(nodelist)) = (std::env::var("SLURM_JOB_ID"), std::env::var("SLURM_JOB_NODELIST")) else {
        return Ok(None);
    };
    let out = Command::new("scontrol")
        .args(["show", "hostnames", &nodelist])
        .output()
        .map_err(|e| {
            format!("Slurm job {job}: cannot run scontrol to expand SLURM_JOB_NODELIST={nodelist}: {e}")
        })?;
    if !out.status.success() {
        return Err(format!(
            "Slurm job {job}: `scontrol show hostnames {nodelist}` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let cpus = std::env::var("SLURM_JOB_CPUS_PER_NODE").unwrap_or_default();
    let slots = cpus_per_node(&cpus, names.len()).ok_or_else(|| {
        format!(
            "Slurm job {job}: SLURM_JOB_CPUS_PER_NODE={cpus:?} does not fit its {} nodes",
            names.len()
        )
    })?;
    Ok(Some(
        names
            .into_iter()
            .zip(slots)
            .map(|(name, slots)| Host {
                name,
                slots,
                site: None,
                relay: false,
            })
            .collect(),
    ))
}

/// Slurm's compressed list of CPUs per node (`2(x3),4`) for `nodes` nodes; an empty one
/// gives every node 1.
pub fn cpus_per_node(s: &str, nodes: usize) -> Option<Vec<u32>> {
    if s.trim().is_empty() {
        return Some(vec![1; nodes]);
    }
    let mut out = Vec::new();
    for part in s.split(',') {
        let (count, times) = match part.split_once("(x") {
            Some((c, t)) => (c, t.strip_suffix(')')?.parse::<usize>().ok()?),
            None => (part, 1),
        };
        let count: u32 = count.trim().parse().ok()?;
        out.extend(std::iter::repeat_n(count.max(1), times));
    }
    (out.len() == nodes).then_some(out)
}

/// The agent that starts a rank's script on an allocated node: `pontoon slurm-agent`,
/// which runs [`srun_command`].
pub fn agent(pontoon: OsString) -> Vec<OsString> {
    vec![pontoon, "slurm-agent".into()]
}

/// `srun` running `script` with `sh` on `host`, as one task of a step of its own that
/// may share the allocation's CPUs with the job's other steps (`--overlap`). No PMI:
/// the rank finds pontoon's coordinator. srun forwards its standard input (the job
/// secret) to the task, and ends the step when it gets SIGTERM.
pub fn srun_command(host: &str, script: &str) -> Command {
    let mut cmd = Command::new("srun");
    cmd.args([
        "--mpi=none",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        "--quiet",
        "--input=all",
    ])
    .arg(format!("--nodelist={host}"))
    .args(["sh", "-c", script]);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_cpu_counts_expand_to_one_per_node() {
        assert_eq!(cpus_per_node("2(x4)", 4), Some(vec![2, 2, 2, 2]));
        assert_eq!(cpus_per_node("4,2(x2),1", 4), Some(vec![4, 2, 2, 1]));
        assert_eq!(cpus_per_node("", 3), Some(vec![1, 1, 1]));
        assert_eq!(cpus_per_node("2(x3)", 4), None);
        assert_eq!(cpus_per_node("2(x", 1), None);
        assert_eq!(cpus_per_node("two", 1), None);
    }
}
