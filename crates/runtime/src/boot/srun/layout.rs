//! Where a task of an srun step without PMI stands: Slurm's variables, read once.

/// What srun sets for every task that a task of several reads (without `PMI_FD`).
pub const ENV_VARS: &[(&str, &str)] = &[
    ("SLURM_PROCID", "the task's rank"),
    ("SLURM_STEP_NUM_TASKS", "number of tasks of the step (ranks)"),
    ("SLURM_LOCALID", "the task's rank on its node"),
    ("SLURM_NODEID", "the index of the task's node in the step"),
    ("SLURM_STEP_TASKS_PER_NODE", "tasks on each node, e.g. 2(x3),1"),
    (
        "SLURM_STEP_NODELIST",
        "the step's nodes; task 0 and its rendezvous run on the first",
    ),
    (
        "SLURM_JOB_ID, SLURM_STEP_ID, SLURM_CLUSTER_NAME",
        "name the job (its id is a hash of the three)",
    ),
];

/// One task of an srun step, as Slurm's variables describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SrunTask {
    pub rank: u32,
    pub size: u32,
    pub local_rank: u32,
    pub local_size: u32,
    /// The index of this task's node among the step's (`SLURM_NODEID`).
    pub node_index: u32,
    /// The same on every task of the step, different for every step of every cluster.
    pub job_id: [u8; 16],
    /// The step's first node, where task 0 runs.
    pub first_node: String,
    /// The step in Slurm's words, for messages.
    pub step: String,
}

impl SrunTask {
    /// `None` unless this process is one of several tasks of an srun step (a single
    /// task is a job of one and needs nobody).
    pub(crate) fn from_env(var: &dyn Fn(&str) -> Option<String>) -> Option<Result<SrunTask, String>> {
        let size: u32 = var("SLURM_STEP_NUM_TASKS")?.trim().parse().ok()?;
        (size > 1).then(|| Self::read(var, size))
    }

    fn read(var: &dyn Fn(&str) -> Option<String>, size: u32) -> Result<SrunTask, String> {
        let get = |name: &str| {
            var(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("srun set SLURM_STEP_NUM_TASKS={size} but not {name}"))
        };
        let num = |name: &str| -> Result<u32, String> {
            let v = get(name)?;
            v.parse().map_err(|_| format!("{name}={v:?} is not a number"))
        };
        let rank = num("SLURM_PROCID")?;
        let node_index = num("SLURM_NODEID")?;
        let local_rank = num("SLURM_LOCALID")?;
        if rank >= size {
            return Err(format!(
                "SLURM_PROCID={rank} is not below SLURM_STEP_NUM_TASKS={size}"
            ));
        }
        let per_node = get("SLURM_STEP_TASKS_PER_NODE")?;
        let local_size = tasks_per_node(&per_node)
            .and_then(|counts| counts.get(node_index as usize).copied())
            .filter(|&n| local_rank < n)
            .ok_or_else(|| {
                format!("SLURM_STEP_TASKS_PER_NODE={per_node:?} has no count for node {node_index} above local task {local_rank}")
            })?;
        let nodes = get("SLURM_STEP_NODELIST")?;
        let first_node =
            first_host(&nodes).ok_or_else(|| format!("SLURM_STEP_NODELIST={nodes:?} is not a host list"))?;
        let (job, step) = (get("SLURM_JOB_ID")?, get("SLURM_STEP_ID")?);
        let cluster = var("SLURM_CLUSTER_NAME").unwrap_or_default();
        let digest = blake3::hash(format!("pontoon-srun-job\0{cluster}\0{job}\0{step}").as_bytes());
        let mut job_id = [0u8; 16];
        job_id.copy_from_slice(&digest.as_bytes()[..16]);
        Ok(SrunTask {
            rank,
            size,
            local_rank,
            local_size,
            node_index,
            job_id,
            first_node,
            step: format!("Slurm job {job} step {step}"),
        })
    }
}

/// Tasks on each node of a step, from Slurm's compressed form: `2(x3),1` is 2, 2, 2, 1.
fn tasks_per_node(s: &str) -> Option<Vec<u32>> {
    let mut counts = Vec::new();
    for part in s.split(',') {
        let (n, times) = match part.split_once("(x") {
            Some((n, rest)) => (n, rest.strip_suffix(')')?.parse::<usize>().ok()?),
            None => (part, 1),
        };
        let n: u32 = n.parse().ok()?;
        if counts.len() + times > 1 << 20 {
            return None;
        }
        counts.extend(std::iter::repeat_n(n, times));
    }
    Some(counts)
}

/// The first host of a Slurm host list: `node[01-04,9],gpu1` gives `node01`, and
/// `rack[1-2]-n[3-4]` gives `rack1-n3`.
fn first_host(list: &str) -> Option<String> {
    let mut host = String::new();
    let mut chars = list.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => break,
            '[' => {
                let inside: String = chars.by_ref().take_while(|&c| c != ']').collect();
                let first = inside.split([',', '-']).next()?;
                if first.is_empty() || !first.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                host.push_str(first);
            }
            ']' => return None,
            c => host.push(c),
        }
    }
    (!host.is_empty()).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_give_their_first_host() {
        for (list, first) in [
            ("h1", "h1"),
            ("h[1-2]", "h1"),
            ("node[001-004,010],gpu1", "node001"),
            ("a-c[7,1-2]", "a-c7"),
            ("rack[1-2]-n[3-4]", "rack1-n3"),
            ("b1,b2", "b1"),
        ] {
            assert_eq!(first_host(list).as_deref(), Some(first), "{list}");
        }
        for bad in ["", "h[", "h[x-y]", "h]1", "[]"] {
            assert_eq!(first_host(bad), None, "{bad}");
        }
    }

    #[test]
    fn tasks_per_node_expands_repeats() {
        assert_eq!(tasks_per_node("2(x3),1"), Some(vec![2, 2, 2, 1]));
        assert_eq!(tasks_per_node("4"), Some(vec![4]));
        assert_eq!(tasks_per_node("2(x"), None);
        assert_eq!(tasks_per_node("1(x99999999)"), None);
    }

    fn slurm<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn a_task_reads_its_place_from_slurms_variables() {
        let mut vars = vec![
            ("SLURM_STEP_NUM_TASKS", "3"),
            ("SLURM_PROCID", "2"),
            ("SLURM_NODEID", "1"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_STEP_TASKS_PER_NODE", "2,1"),
            ("SLURM_STEP_NODELIST", "h[1-2]"),
            ("SLURM_JOB_ID", "12"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_CLUSTER_NAME", "main"),
        ];
        let t = SrunTask::from_env(&slurm(&vars)).unwrap().unwrap();
        assert_eq!(
            (
                t.rank,
                t.size,
                t.local_rank,
                t.local_size,
                t.node_index,
                t.first_node.as_str()
            ),
            (2, 3, 0, 1, 1, "h1")
        );
        // Another step of the same job is another job.
        vars[7].1 = "1";
        let other = SrunTask::from_env(&slurm(&vars)).unwrap().unwrap();
        assert_ne!(t.job_id, other.job_id);
        // One task alone is a singleton; a variable missing is an error that names it.
        vars[0].1 = "1";
        assert!(SrunTask::from_env(&slurm(&vars)).is_none());
        vars[0].1 = "3";
        vars[1].1 = "3";
        assert!(SrunTask::from_env(&slurm(&vars)).unwrap().is_err());
        vars[1].1 = "2";
        vars.retain(|(k, _)| *k != "SLURM_STEP_NODELIST");
        let e = SrunTask::from_env(&slurm(&vars)).unwrap().unwrap_err();
        assert!(e.contains("SLURM_STEP_NODELIST"), "{e}");
        assert!(SrunTask::from_env(&|_| None).is_none());
    }
}
