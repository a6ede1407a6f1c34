//! Every collective as a [`Plan`] on packed bytes, for a caller that owns or lends its
//! own buffers (the C ABI): plan, then start it with [`Comm::start_plan`] on an input
//! and an output [`Buffer`] and complete it through [`CollPending`]. The plans are the
//! schedules the blocking and typed non-blocking collectives run.
//!
//! Buffers: the input buffer holds this rank's contribution (unused in place, when the
//! data starts in the output buffer); blocks are `(byte offset, byte length)`.

use std::cell::RefCell;
use std::rc::Rc;

use runtime::Buffer;

use super::algos;
use super::nonblocking::Started;
use super::schedule::{region, Schedule, INPUT, OUTPUT};
use crate::comm::Comm;
use crate::datatype::Datatype;
use crate::op::Op;
use crate::{Error, Rank, Result};

/// A collective planned at this rank: its schedule and, for reductions, the operation.
pub struct Plan {
    pub(crate) sched: Schedule,
    pub(crate) op: Option<(Op, Datatype)>,
    /// Planned for an intercommunicator (its ranks name both groups).
    pub(crate) across: bool,
}

fn plain(sched: Schedule) -> Plan {
    Plan {
        sched,
        op: None,
        across: false,
    }
}

fn reducing(sched: Schedule, op: &Op, dt: &Datatype) -> Result<Plan> {
    op.check(dt)?;
    Ok(Plan {
        sched,
        op: Some((op.clone(), dt.clone())),
        across: false,
    })
}

impl<'u> Comm<'u> {
    pub fn plan_barrier(&self) -> Plan {
        plain(self.barrier_schedule())
    }

    /// `bytes` in the output buffer, from `root`'s.
    pub fn plan_bcast(&self, root: Rank, bytes: usize) -> Result<Plan> {
        self.check_root(root)?;
        Ok(plain(self.bcast_schedule(root, OUTPUT, bytes)))
    }

    /// `bytes` of packed `dt` reduced into `root`'s output; `in_place`: the root's
    /// contribution is in its output buffer.
    pub fn plan_reduce(
        &self,
        root: Rank,
        in_place: bool,
        bytes: usize,
        dt: &Datatype,
        op: &Op,
    ) -> Result<Plan> {
        self.check_root(root)?;
        if in_place && self.rank() != root {
            return Err(Error::Arg("reduce: IN_PLACE is only for the root".into()));
        }
        let src = if in_place { OUTPUT } else { INPUT };
        let s = self.reduce_schedule(root, src, OUTPUT, bytes, op.is_commutative());
        reducing(s, op, dt)
    }

    pub fn plan_allreduce(&self, in_place: bool, bytes: usize, dt: &Datatype, op: &Op) -> Result<Plan> {
        let src = if in_place { OUTPUT } else { INPUT };
        let elem = dt.size() as usize;
        let s = self.allreduce_schedule(src, OUTPUT, bytes, elem, op.is_commutative());
        reducing(s, op, dt)
    }

    /// `block` bytes from every rank, in rank order, into `root`'s output.
    pub fn plan_gather(&self, root: Rank, in_place: bool, block: usize) -> Result<Plan> {
        self.check_root(root)?;
        let src = (!in_place).then_some(INPUT);
        Ok(plain(self.gather_schedule(root, src, block)))
    }

    /// Block i of `block` bytes of `root`'s input to rank i's output (`in_place`: the
    /// root keeps its block where it is).
    pub fn plan_scatter(&self, root: Rank, in_place: bool, block: usize) -> Result<Plan> {
        self.check_root(root)?;
        let dst = (!in_place).then_some(OUTPUT);
        Ok(plain(self.scatter_schedule(root, dst, block)))
    }

    pub fn plan_allgather(&self, in_place: bool, block: usize) -> Plan {
        let src = (!in_place).then_some(INPUT);
        plain(self.allgather_schedule(src, OUTPUT, block))
    }

    pub fn plan_alltoall(&self, in_place: bool, block: usize) -> Plan {
        let src = (!in_place).then_some(INPUT);
        plain(self.alltoall_schedule(src, block))
    }

    /// `send` bytes from every rank into block i of `root`'s output (`None`: in place).
    pub fn plan_gatherv(&self, root: Rank, send: Option<usize>, blocks: &[(usize, usize)]) -> Result<Plan> {
        self.check_root(root)?;
        if self.rank() == root {
            self.check_blocks("gatherv", blocks)?;
        }
        let src = send.map(|n| region(INPUT, 0, n));
        Ok(plain(algos::gatherv(self.shape(), root, src, OUTPUT, blocks)))
    }

    /// Block i of `root`'s input to rank i's output of `recv` bytes (`None`: in place).
    pub fn plan_scatterv(&self, root: Rank, blocks: &[(usize, usize)], recv: Option<usize>) -> Result<Plan> {
        self.check_root(root)?;
        if self.rank() == root {
            self.check_blocks("scatterv", blocks)?;
        }
        let dst = recv.map(|n| region(OUTPUT, 0, n));
        Ok(plain(algos::scatterv(self.shape(), root, INPUT, blocks, dst)))
    }

    pub fn plan_allgatherv(&self, send: Option<usize>, blocks: &[(usize, usize)]) -> Result<Plan> {
        self.check_blocks("allgatherv", blocks)?;
        let src = send.map(|n| region(INPUT, 0, n));
        Ok(plain(self.allgatherv_schedule(src, blocks)))
    }

    /// `send` None: in place (the send blocks are the receive blocks).
    pub fn plan_alltoallv(&self, send: Option<&[(usize, usize)]>, recv: &[(usize, usize)]) -> Result<Plan> {
        self.check_blocks("alltoallv", recv)?;
        if let Some(s) = send {
            self.check_blocks("alltoallv", s)?;
        }
        let (src, sblocks) = match send {
            Some(s) => (Some(INPUT), s),
            None => (None, recv),
        };
        Ok(plain(self.alltoallv_schedule(src, sblocks, recv)))
    }

    /// Block i (`byte_counts[i]`) of the reduced vector to rank i's output.
    pub fn plan_reduce_scatter(
        &self,
        in_place: bool,
        byte_counts: &[usize],
        dt: &Datatype,
        op: &Op,
    ) -> Result<Plan> {
        if byte_counts.len() != self.size() as usize {
            return Err(Error::Arg(
                "reduce_scatter: counts need one entry per rank".into(),
            ));
        }
        let src = if in_place { OUTPUT } else { INPUT };
        let s = algos::reduce_scatter(self.shape(), src, OUTPUT, byte_counts, op.is_commutative());
        reducing(s, op, dt)
    }

    /// Scan (`exclusive`: exscan) of `bytes` of packed `dt`.
    pub fn plan_scan(
        &self,
        in_place: bool,
        bytes: usize,
        dt: &Datatype,
        op: &Op,
        exclusive: bool,
    ) -> Result<Plan> {
        let src = if in_place { OUTPUT } else { INPUT };
        let s = algos::scan(self.shape(), src, OUTPUT, bytes, op.is_commutative(), exclusive);
        reducing(s, op, dt)
    }

    fn check_blocks(&self, what: &str, blocks: &[(usize, usize)]) -> Result<()> {
        if blocks.len() != self.size() as usize {
            return Err(Error::Arg(format!(
                "{what}: counts and displacements need one entry per rank ({})",
                self.size()
            )));
        }
        Ok(())
    }

    /// A neighbourhood alltoallv (MPI_Neighbor_alltoallv): block i of the input to
    /// destination i of [`Comm::neighbors`], block i of the output from source i; blocks
    /// of neighbours off a grid are left alone. One step, every transfer at once.
    pub fn plan_neighbor_alltoallv(&self, send: &[(usize, usize)], recv: &[(usize, usize)]) -> Result<Plan> {
        let crate::comm::topo::Neighbors {
            sources,
            destinations,
        } = self.neighbors()?;
        if send.len() != destinations.len() || recv.len() != sources.len() {
            return Err(Error::Arg(format!(
                "neighbourhood collective: {} send and {} receive blocks for {} destinations and {} sources",
                send.len(),
                recv.len(),
                destinations.len(),
                sources.len()
            )));
        }
        let mut s = Schedule::default();
        for (i, peer) in destinations.iter().enumerate() {
            if let Some(p) = peer {
                s.send(*p, region(INPUT, send[i].0, send[i].1));
            }
        }
        // Messages between two ranks match in the order posted. Where one rank is the
        // neighbour on both sides of a grid's dimension (periodic, of 1 or 2), what it
        // sends towards "before" arrives from "after": receive each dimension's pair in
        // the opposite order to the sends. A graph's edges match in their order.
        let grid = matches!(
            self.topology().as_deref(),
            Some(crate::comm::topo::Topology::Cart(_))
        );
        let order: Vec<usize> = if grid {
            (0..sources.len()).map(|i| i ^ 1).collect()
        } else {
            (0..sources.len()).collect()
        };
        for i in order {
            if let Some(p) = sources[i] {
                s.recv(p, region(OUTPUT, recv[i].0, recv[i].1));
            }
        }
        Ok(plain(s))
    }

    /// Starts `plan` on `input` and `output`; it advances whenever the job progresses.
    pub fn start_plan(&self, plan: Plan, input: Buffer, output: Buffer) -> CollPending<'u> {
        CollPending {
            comm: self.clone(),
            state: self.start_schedule(plan.sched, input, output, plan.op, plan.across),
        }
    }
}

/// A collective started from a [`Plan`]. The background task advances it only while
/// this handle lives: keep it until it is done (a freed C request is kept aside).
pub struct CollPending<'u> {
    comm: Comm<'u>,
    state: Rc<RefCell<Started>>,
}

impl<'u> CollPending<'u> {
    pub(crate) fn of(comm: Comm<'u>, state: Rc<RefCell<Started>>) -> CollPending<'u> {
        CollPending { comm, state }
    }

    /// Progresses once; true when finished (the result still to be taken).
    pub fn is_done(&mut self) -> bool {
        if !self.state.borrow().finished() {
            let Ok(mut rt) = self.comm.u.engine() else {
                return false;
            };
            rt.progress();
            self.state.borrow_mut().advance(&mut rt, false);
        }
        self.state.borrow().finished()
    }

    /// Waits for the end; gives the output buffer back.
    pub fn wait(&mut self) -> Result<Buffer> {
        super::nonblocking::finish(self.comm.u, &self.state)?;
        self.state
            .borrow_mut()
            .take_result()
            .unwrap_or_else(|| Err(Error::Arg("the collective was completed already".into())))
    }
}
