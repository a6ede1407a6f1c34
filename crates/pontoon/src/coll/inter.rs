//! Collectives on intercommunicators as schedules, so that the blocking, non-blocking
//! and persistent forms are one plan each, as on intracommunicators (MPI 4.1 §6.2.2).
//!
//! A rank's schedule names its own group's ranks `0..local` and the remote group's rank
//! `j` as `local + j`; it runs on the intercommunicator's collective context, whose
//! members list is laid out the same way at each side. The groups meet through their
//! leaders (local rank 0) where the data is one block (bcast, reduce, gather, scatter,
//! allgather, allreduce, reduce_scatter), so each crosses between the groups once;
//! the v and all-to-all forms, whose sizes only the receivers know, go straight from
//! every process to every process of the other group.

use super::algos::{self, Shape, Tuning};
use super::hier::embed;
use super::plans::Plan;
use super::schedule::{region, Schedule, INPUT, OUTPUT};
use crate::comm::inter::InterRoot;
use crate::comm::Comm;
use crate::{Datatype, Error, Op, Result};

/// This rank's place in an intercommunicator.
#[derive(Debug, Clone, Copy)]
pub struct Sides {
    /// This rank in its own group.
    pub me: u32,
    /// The size of its own group.
    pub local: u32,
    /// The size of the remote group.
    pub remote: u32,
}

impl Sides {
    /// The schedule's name for the remote group's rank `j`.
    fn remote_rank(&self, j: u32) -> u32 {
        self.local + j
    }
    fn shape(&self) -> Shape {
        Shape {
            rank: self.me,
            size: self.local,
        }
    }
    fn leader(&self) -> bool {
        self.me == 0
    }
    /// Appends `part`, a schedule over this rank's own group, on buffers `bufs`; later
    /// steps wait for it.
    fn within(&self, s: &mut Schedule, part: Schedule, bufs: [u16; 2]) {
        let own: Vec<u32> = (0..self.local).collect();
        embed(s, part, &own, bufs);
        s.sync();
    }
}

/// One collective on an intercommunicator, sizes in packed bytes. Block lists hold one
/// `(offset, length)` per rank of the group they describe.
#[derive(Debug, Clone)]
pub enum InterColl {
    Barrier,
    /// The root's output buffer to every output of the other group.
    Bcast {
        root: InterRoot,
        bytes: usize,
    },
    /// The other group's inputs reduced into the root's output.
    Reduce {
        root: InterRoot,
        bytes: usize,
    },
    /// Each group gets the other's inputs reduced.
    Allreduce {
        bytes: usize,
    },
    /// The other group's `send` bytes each, in rank order, into the root's output of
    /// `recv` bytes per remote rank.
    Gather {
        root: InterRoot,
        send: usize,
        recv: usize,
    },
    /// Block j of `send` bytes of the root's input to rank j of the other group's output
    /// of `recv` bytes.
    Scatter {
        root: InterRoot,
        send: usize,
        recv: usize,
    },
    /// Each process gets every remote process's `send` bytes as blocks of `recv` bytes.
    Allgather {
        send: usize,
        recv: usize,
    },
    /// Each remote rank's `send` bytes into its block (of the remote group) at the root.
    Gatherv {
        root: InterRoot,
        send: usize,
        blocks: Vec<(usize, usize)>,
    },
    /// The root's block j to remote rank j's output of `recv` bytes.
    Scatterv {
        root: InterRoot,
        blocks: Vec<(usize, usize)>,
        recv: usize,
    },
    /// Each process's `send` bytes into its block at every process of the other group.
    Allgatherv {
        send: usize,
        blocks: Vec<(usize, usize)>,
    },
    /// Send block j to remote rank j, whose send block for us lands in receive block j.
    Alltoallv {
        send: Vec<(usize, usize)>,
        recv: Vec<(usize, usize)>,
    },
    /// The other group's inputs of `bytes` reduced and split among this group by
    /// `blocks` (one per local rank).
    ReduceScatter {
        bytes: usize,
        blocks: Vec<(usize, usize)>,
    },
}

impl InterColl {
    fn name(&self) -> &'static str {
        match self {
            InterColl::Barrier => "barrier",
            InterColl::Bcast { .. } => "bcast",
            InterColl::Reduce { .. } => "reduce",
            InterColl::Allreduce { .. } => "allreduce",
            InterColl::Gather { .. } => "gather",
            InterColl::Scatter { .. } => "scatter",
            InterColl::Allgather { .. } => "allgather",
            InterColl::Gatherv { .. } => "gatherv",
            InterColl::Scatterv { .. } => "scatterv",
            InterColl::Allgatherv { .. } => "allgatherv",
            InterColl::Alltoallv { .. } => "alltoallv",
            InterColl::ReduceScatter { .. } => "reduce_scatter",
        }
    }

    /// Whether this rank combines data (and so needs an operation): a reduce's root
    /// and the rest of its group only receive or wait.
    pub fn combines(&self) -> bool {
        matches!(
            self,
            InterColl::Reduce {
                root: InterRoot::Remote(_),
                ..
            } | InterColl::Allreduce { .. }
                | InterColl::ReduceScatter { .. }
        )
    }

    /// Checks the block lists against the groups' sizes.
    fn check(&self, x: Sides) -> Result<()> {
        let want = |blocks: &[(usize, usize)], n: u32, whose: &str| {
            if blocks.len() == n as usize {
                return Ok(());
            }
            Err(Error::Arg(format!(
                "{}: {} counts given for the {n} ranks of the {whose} group",
                self.name(),
                blocks.len()
            )))
        };
        match self {
            InterColl::Gatherv {
                root: InterRoot::Here,
                blocks,
                ..
            }
            | InterColl::Scatterv {
                root: InterRoot::Here,
                blocks,
                ..
            }
            | InterColl::Allgatherv { blocks, .. } => want(blocks, x.remote, "remote"),
            InterColl::Alltoallv { send, recv } => {
                want(send, x.remote, "remote")?;
                want(recv, x.remote, "remote")
            }
            InterColl::ReduceScatter { blocks, .. } => want(blocks, x.local, "local"),
            _ => Ok(()),
        }
    }
}

/// This rank's schedule of `what`.
pub fn schedule(x: Sides, what: &InterColl, t: &Tuning, commutative: bool) -> Schedule {
    let mut s = Schedule::default();
    let (l, r) = (x.local as usize, x.remote as usize);
    match what {
        InterColl::Barrier => {
            // Everyone of a group entered once its leader leaves the first barrier;
            // the leaders tell each other, then release their groups.
            x.within(&mut s, algos::barrier(x.shape()), [INPUT, OUTPUT]);
            if x.leader() {
                s.send(x.remote_rank(0), region(INPUT, 0, 0));
                s.recv(x.remote_rank(0), region(OUTPUT, 0, 0));
                s.sync();
            }
            x.within(&mut s, algos::barrier(x.shape()), [INPUT, OUTPUT]);
        }
        InterColl::Bcast { root, bytes } => match root {
            InterRoot::Here => s.send(x.remote_rank(0), region(OUTPUT, 0, *bytes)),
            InterRoot::ElsewhereHere => {}
            InterRoot::Remote(j) => {
                if x.leader() {
                    s.recv(x.remote_rank(*j), region(OUTPUT, 0, *bytes));
                    s.sync();
                }
                x.within(
                    &mut s,
                    algos::bcast(x.shape(), 0, OUTPUT, *bytes, t),
                    [INPUT, OUTPUT],
                );
            }
        },
        InterColl::Reduce { root, bytes } => match root {
            InterRoot::Here => s.recv(x.remote_rank(0), region(OUTPUT, 0, *bytes)),
            InterRoot::ElsewhereHere => {}
            InterRoot::Remote(j) => {
                let acc = reduce_at_leader(&mut s, x, *bytes, commutative);
                if x.leader() {
                    s.send(x.remote_rank(*j), region(acc, 0, *bytes));
                }
            }
        },
        InterColl::Allreduce { bytes } => {
            let acc = reduce_at_leader(&mut s, x, *bytes, commutative);
            if x.leader() {
                s.send(x.remote_rank(0), region(acc, 0, *bytes));
                s.recv(x.remote_rank(0), region(OUTPUT, 0, *bytes));
                s.sync();
            }
            x.within(
                &mut s,
                algos::bcast(x.shape(), 0, OUTPUT, *bytes, t),
                [INPUT, OUTPUT],
            );
        }
        InterColl::Gather { root, send, recv } => match root {
            InterRoot::Here => s.recv(x.remote_rank(0), region(OUTPUT, 0, r * recv)),
            InterRoot::ElsewhereHere => {}
            InterRoot::Remote(j) => {
                let all = gather_at_leader(&mut s, x, *send, t);
                if x.leader() {
                    s.send(x.remote_rank(*j), region(all, 0, l * send));
                }
            }
        },
        InterColl::Scatter { root, send, recv } => match root {
            InterRoot::Here => s.send(x.remote_rank(0), region(INPUT, 0, r * send)),
            InterRoot::ElsewhereHere => {}
            InterRoot::Remote(j) => {
                let all = s.temp(l * recv);
                if x.leader() {
                    s.recv(x.remote_rank(*j), region(all, 0, l * recv));
                    s.sync();
                }
                let part = algos::scatter(x.shape(), 0, INPUT, Some(OUTPUT), *recv, t);
                x.within(&mut s, part, [all, OUTPUT]);
            }
        },
        InterColl::Allgather { send, recv } => {
            let all = gather_at_leader(&mut s, x, *send, t);
            if x.leader() {
                s.send(x.remote_rank(0), region(all, 0, l * send));
                s.recv(x.remote_rank(0), region(OUTPUT, 0, r * recv));
                s.sync();
            }
            x.within(
                &mut s,
                algos::bcast(x.shape(), 0, OUTPUT, r * recv, t),
                [INPUT, OUTPUT],
            );
        }
        InterColl::Gatherv { root, send, blocks } => match root {
            InterRoot::Here => {
                for (j, &(off, len)) in blocks.iter().enumerate() {
                    s.recv(x.remote_rank(j as u32), region(OUTPUT, off, len));
                }
            }
            InterRoot::ElsewhereHere => {}
            InterRoot::Remote(j) => s.send(x.remote_rank(*j), region(INPUT, 0, *send)),
        },
        InterColl::Scatterv { root, blocks, recv } => match root {
            InterRoot::Here => {
                for (j, &(off, len)) in blocks.iter().enumerate() {
                    s.send(x.remote_rank(j as u32), region(INPUT, off, len));
                }
            }
            InterRoot::ElsewhereHere => {}
            InterRoot::Remote(j) => s.recv(x.remote_rank(*j), region(OUTPUT, 0, *recv)),
        },
        InterColl::Allgatherv { send, blocks } => {
            for (j, &(off, len)) in blocks.iter().enumerate() {
                s.send(x.remote_rank(j as u32), region(INPUT, 0, *send));
                s.recv(x.remote_rank(j as u32), region(OUTPUT, off, len));
            }
        }
        InterColl::Alltoallv { send, recv } => {
            for (j, (&(so, sl), &(ro, rl))) in send.iter().zip(recv).enumerate() {
                s.send(x.remote_rank(j as u32), region(INPUT, so, sl));
                s.recv(x.remote_rank(j as u32), region(OUTPUT, ro, rl));
            }
        }
        InterColl::ReduceScatter { bytes, blocks } => {
            let acc = reduce_at_leader(&mut s, x, *bytes, commutative);
            let theirs = s.temp(*bytes);
            if x.leader() {
                s.send(x.remote_rank(0), region(acc, 0, *bytes));
                s.recv(x.remote_rank(0), region(theirs, 0, *bytes));
                s.sync();
            }
            let mine = region(OUTPUT, 0, blocks[x.me as usize].1);
            let part = algos::scatterv(x.shape(), 0, INPUT, blocks, Some(mine));
            x.within(&mut s, part, [theirs, OUTPUT]);
        }
    }
    s
}

/// Reduces this group's inputs (in rank order) into a new temporary at its leader.
fn reduce_at_leader(s: &mut Schedule, x: Sides, n: usize, commutative: bool) -> u16 {
    let acc = s.temp(n);
    x.within(
        s,
        algos::reduce(x.shape(), 0, INPUT, OUTPUT, n, commutative),
        [INPUT, acc],
    );
    acc
}

/// Gathers this group's inputs of `n` bytes (in rank order) into a new temporary at its
/// leader.
fn gather_at_leader(s: &mut Schedule, x: Sides, n: usize, t: &Tuning) -> u16 {
    let all = s.temp(x.local as usize * n);
    x.within(
        s,
        algos::gather(x.shape(), 0, Some(INPUT), OUTPUT, n, t),
        [INPUT, all],
    );
    all
}

impl Comm<'_> {
    /// This rank's place in this intercommunicator.
    fn sides(&self) -> Result<Sides> {
        Ok(Sides {
            me: self.rank(),
            local: self.size(),
            remote: self.remote_size()?,
        })
    }

    /// Plans `what` on this intercommunicator; `reduction` for the reducing ones.
    pub fn plan_inter(&self, what: &InterColl, reduction: Option<(&Op, &Datatype)>) -> Result<Plan> {
        let x = self.sides()?;
        what.check(x)?;
        let (op, commutative) = match (what.combines(), reduction) {
            (false, _) => (None, true),
            (true, Some((op, dt))) => {
                op.check(dt)?;
                (Some((op.clone(), dt.clone())), op.is_commutative())
            }
            (true, None) => {
                return Err(Error::Arg(format!("{}: no operation given", what.name())));
            }
        };
        Ok(Plan {
            sched: schedule(x, what, &self.tuning(), commutative),
            op,
            across: true,
        })
    }
}
