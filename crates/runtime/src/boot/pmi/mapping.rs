//! `PMI_process_mapping`: which node each rank runs on, as Slurm and Hydra describe it.
//!
//! `(vector,(start,nodes,per_node),…)`: each block gives `per_node` consecutive ranks to
//! each of `nodes` nodes from node `start` on; the blocks repeat until every rank has a
//! node (Hydra says `(vector,(0,1,1))` for any number of ranks on one host).

/// The blocks of a process mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessMapping(Vec<(u32, u32, u32)>);

impl ProcessMapping {
    /// `None` for anything but a well-formed vector of at least one non-empty block.
    pub fn parse(s: &str) -> Option<ProcessMapping> {
        let inner = s.trim().strip_prefix("(vector,")?.strip_suffix(')')?;
        let mut blocks = Vec::new();
        for block in inner.split("),") {
            let block = block.trim().strip_prefix('(')?.trim_end_matches(')');
            let n: Vec<u32> = block
                .split(',')
                .map(|x| x.trim().parse().ok())
                .collect::<Option<_>>()?;
            match n.as_slice() {
                [start, nodes, per_node] if *nodes > 0 && *per_node > 0 => {
                    blocks.push((*start, *nodes, *per_node))
                }
                _ => return None,
            }
        }
        (!blocks.is_empty()).then_some(ProcessMapping(blocks))
    }

    /// The node of every rank of a job of `size`.
    pub fn nodes(&self, size: u32) -> Vec<u32> {
        let mut out = Vec::with_capacity(size as usize);
        'fill: loop {
            for &(start, nodes, per_node) in &self.0 {
                for node in start..start.saturating_add(nodes) {
                    for _ in 0..per_node {
                        if out.len() == size as usize {
                            break 'fill;
                        }
                        out.push(node);
                    }
                }
            }
        }
        out
    }

    /// This rank's place among the ranks of its node: (local rank, local size).
    pub fn local(&self, rank: u32, size: u32) -> (u32, u32) {
        let nodes = self.nodes(size);
        let mine = nodes[rank as usize];
        let before = nodes[..rank as usize].iter().filter(|&&n| n == mine).count();
        let all = nodes.iter().filter(|&&n| n == mine).count();
        (before as u32, all as u32)
    }
}
