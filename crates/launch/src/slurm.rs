//! `pontoon run` and Slurm.
//!
//! Inside an allocation (`salloc`, `sbatch`) the allocated nodes are the hosts, and `srun`
//! starts each rank on its node, in place of ssh. A hostfile's `slurm` host is another
//! cluster's login node: `pontoon run` makes an allocation there through the agent
//! (`salloc --no-shell`), starts each of that cluster's ranks with `srun --jobid` on one
//! of its nodes, and cancels the allocation when the job ends. One job then spans the
//! clusters, one rank numbering and one coordinator over their separate Slurms.

use crate::hosts::{self, Host};
use std::ffi::OsString;
use std::process::{Command, Stdio};

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
                slurm: false,
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

/// srun's options that start one rank on `node`: one task of a step of its own that may
/// share the allocation's CPUs with the job's other steps (`--overlap`). No PMI: the
/// rank finds pontoon's coordinator. srun forwards its standard input (the job secret)
/// to the task, and ends the step when it gets SIGTERM.
fn srun_options(node: &str) -> Vec<String> {
    [
        "--mpi=none",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        "--quiet",
        "--input=all",
    ]
    .into_iter()
    .map(str::to_string)
    .chain([format!("--nodelist={node}")])
    .collect()
}

/// `srun` running `script` with `sh` on `node` of the allocation this process is in.
pub fn srun_command(node: &str, script: &str) -> Command {
    let mut cmd = Command::new("srun");
    cmd.args(srun_options(node)).args(["sh", "-c", script]);
    cmd
}

/// Where one rank of a `slurm` host runs: a node of the allocation made there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub job: String,
    pub node: String,
}

impl Target {
    /// The shell command, run on the login node, that starts `script` on the target.
    pub fn wrap(&self, script: &str) -> String {
        let mut cmd = format!("srun --jobid={}", self.job);
        for o in srun_options(&self.node) {
            cmd.push(' ');
            cmd.push_str(&o);
        }
        cmd.push_str(" sh -c ");
        cmd.push_str(&hosts::shell_quote(script));
        cmd
    }
}

/// An allocation `pontoon run` made on a cluster's login node; cancelled when dropped.
pub struct Allocation {
    agent: Vec<OsString>,
    pub login: String,
    pub job: String,
    pub nodes: Vec<String>,
}

/// Asks for the allocation and prints its id, then its nodes one per line; salloc's own
/// words when it fails.
const ALLOCATE: &str = r#"out=$(salloc --no-shell --immediate=60 --job-name=pontoon --ntasks="$1" 2>&1)
j=$(printf '%s\n' "$out" | sed -n 's/.*Granted job allocation \([0-9][0-9]*\).*/\1/p')
if [ -z "$j" ]; then printf '%s\n' "$out" >&2; exit 3; fi
echo "$j"
scontrol show hostnames "$(squeue -h -j "$j" -o %N)""#;

impl Allocation {
    /// An allocation of `tasks` tasks on the cluster whose login node `login` is,
    /// reached through `agent` (`AGENT HOST SCRIPT`, as for ranks).
    pub fn request(agent: &[OsString], login: &str, tasks: u32) -> Result<Allocation, String> {
        let script: Vec<OsString> = ["sh", "-c", ALLOCATE, "allocate", &tasks.to_string()]
            .into_iter()
            .map(OsString::from)
            .collect();
        let out = hosts::remote_exec(agent, login, &script)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run the agent {:?} for {login}: {e}", agent[0]))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.split_whitespace().map(str::to_string);
        let job = lines.next();
        let nodes: Vec<String> = lines.collect();
        let why = || {
            format!(
                "({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )
        };
        let Some(job) = job else {
            return Err(format!(
                "no Slurm allocation of {tasks} tasks on {login} {}",
                why()
            ));
        };
        // Made but unusable: cancelled when dropped.
        let allocation = Allocation {
            agent: agent.to_vec(),
            login: login.to_string(),
            job,
            nodes,
        };
        if !out.status.success() || allocation.nodes.is_empty() {
            return Err(format!(
                "Slurm allocation {} on {login} has no nodes {}",
                allocation.job,
                why()
            ));
        }
        tracing::info!(
            login,
            job = allocation.job,
            nodes = allocation.nodes.join(","),
            "Slurm allocation made"
        );
        Ok(allocation)
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        let _ = hosts::remote_exec(
            &self.agent,
            &self.login,
            &["scancel".into(), self.job.clone().into()],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    }
}

/// For every `slurm` host of `placement`, an allocation of its ranks there, and for
/// every rank its target (`None`: not on a `slurm` host). A host's ranks go round the
/// allocation's nodes in rank order.
pub fn allocate(
    placement: &[Host],
    agent: &[OsString],
) -> Result<(Vec<Allocation>, Vec<Option<Target>>), String> {
    let mut allocations: Vec<Allocation> = Vec::new();
    // Of each allocation: how many of its ranks have a node so far.
    let mut placed: Vec<usize> = Vec::new();
    let mut targets = vec![None; placement.len()];
    for (rank, host) in placement.iter().enumerate().filter(|(_, h)| h.slurm) {
        let i = match allocations.iter().position(|a| a.login == host.name) {
            Some(i) => i,
            None => {
                let tasks = placement
                    .iter()
                    .filter(|h| h.slurm && h.name == host.name)
                    .count();
                allocations.push(Allocation::request(agent, &host.name, tasks as u32)?);
                placed.push(0);
                allocations.len() - 1
            }
        };
        let a = &allocations[i];
        targets[rank] = Some(Target {
            job: a.job.clone(),
            node: a.nodes[placed[i] % a.nodes.len()].clone(),
        });
        placed[i] += 1;
    }
    Ok((allocations, targets))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_on_a_login_node_runs_in_its_allocation_on_one_node() {
        let t = Target {
            job: "12".into(),
            node: "a-c2".into(),
        };
        assert_eq!(
            t.wrap("read -r S && exec env 'A=b c' ./ring"),
            "srun --jobid=12 --mpi=none --overlap --nodes=1 --ntasks=1 --quiet --input=all \
             --nodelist=a-c2 sh -c 'read -r S && exec env '\\''A=b c'\\'' ./ring'"
        );
    }

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
