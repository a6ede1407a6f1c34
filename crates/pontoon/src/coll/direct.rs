//! Small blocking collectives, run straight from their schedule: every transfer goes
//! out at once without a request ([`Runtime::send_small_now`]), receives land
//! in the caller's memory, temporaries live in one reused scratch vector. The general
//! executor ([`Running`](super::schedule::Running)) lends every region as a reference-
//! counted buffer and keeps a request per transfer; for an 8 B allreduce that machinery
//! was most of the call (`docs/perf.md`).
//!
//! The step semantics are those of the general executor: a step's local work, then its
//! transfers, all of which complete before the next step. Sends go first: they complete
//! locally (eager), so waiting for the step's receives one by one cannot deadlock with a
//! peer that sends to us in the same step.

use std::cell::RefCell;

use runtime::{Rank, ReqId, Runtime};

use super::check;
use super::schedule::{Blocks, BufId, Local, Region, Schedule, Xfer, INPUT, OUTPUT};
use crate::datatype::Datatype;
use crate::op::Op;
use crate::{Error, Result};

/// Largest region (and so message) of a schedule run here (within
/// [`proto::limits::IMMEDIATE_MAX`]).
const MAX_REGION: usize = 192;
/// Most temporary bytes and buffers of a schedule run here.
const MAX_TEMP_BYTES: usize = 16 << 10;
const MAX_TEMPS: usize = 8;

thread_local! {
    /// The temporaries of the last small collective, kept for the next one.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Whether `s` is small enough to run here.
pub(crate) fn fits(s: &Schedule) -> bool {
    let small = |r: &Region| r.len <= MAX_REGION;
    s.temps.len() <= MAX_TEMPS
        && s.temps.iter().sum::<usize>() <= MAX_TEMP_BYTES
        && s.steps.iter().all(|step| {
            step.ahead.is_empty()
                && step.xfers.iter().all(|x| match x {
                    Xfer::Send { from: r, .. } | Xfer::Recv { into: r, .. } => small(r),
                })
                && step.local.iter().all(|l| match l {
                    Local::Copy { from, to } | Local::Blocks(Blocks { from, to, .. }) => {
                        small(from) && small(to)
                    }
                    Local::Reduce { input, inout } => small(input) && small(inout),
                })
        })
}

/// The collective's point-to-point: communicator ranks, context and tag.
pub(crate) struct Peers<'a> {
    pub members: &'a [Rank],
    pub ctx: u32,
    pub tag: i32,
}

/// Runs a schedule that [`fits`] to the end.
pub(crate) fn run(
    rt: &mut Runtime,
    peers: &Peers<'_>,
    sched: &Schedule,
    input: &[u8],
    output: &mut [u8],
    op: Option<&(Op, Datatype)>,
) -> Result<()> {
    SCRATCH.with(|scratch| {
        // A re-entrant call (a user reduction calling MPI) takes a vector of its own.
        let mut own = Vec::new();
        let mut guard = scratch.try_borrow_mut();
        let temps = match guard.as_deref_mut() {
            Ok(v) => v,
            Err(_) => &mut own,
        };
        let mut at = [0usize; MAX_TEMPS + 1];
        for (i, n) in sched.temps.iter().enumerate() {
            at[i + 1] = at[i] + n;
        }
        temps.resize(temps.len().max(at[sched.temps.len()]), 0);
        let mut bufs = Bufs {
            input,
            output,
            temps,
            at: &at,
        };
        let mut sends = Vec::new();
        let r = run_steps(rt, peers, sched, &mut bufs, op, &mut sends);
        // Sends that took the general path own a copy of their bytes; wait them out
        // even after a failure, so that none outlives the call unnoticed.
        let mut first = r;
        for id in sends {
            let w = rt.wait(id).map_err(Error::from).and_then(|(c, _)| check(c));
            if first.is_ok() {
                first = w;
            }
        }
        first
    })
}

fn run_steps(
    rt: &mut Runtime,
    peers: &Peers<'_>,
    sched: &Schedule,
    bufs: &mut Bufs<'_>,
    op: Option<&(Op, Datatype)>,
    sends: &mut Vec<ReqId>,
) -> Result<()> {
    let mut stage = [0u8; MAX_REGION];
    for step in &sched.steps {
        for l in &step.local {
            match l {
                Local::Copy { from, to } => {
                    let data = bufs.read(*from, &mut stage)?;
                    bufs.slice_mut(*to)?.copy_from_slice(data);
                }
                Local::Blocks(b) => {
                    for pair in b.pairs() {
                        let (from, to) = pair?;
                        let data = bufs.read(from, &mut stage)?;
                        bufs.slice_mut(to)?.copy_from_slice(data);
                    }
                }
                Local::Reduce { input, inout } => {
                    let (op, dt) = op.ok_or_else(|| Error::Arg("reduction without an operation".into()))?;
                    let data = bufs.read(*input, &mut stage)?;
                    let count = input.len as u64 / dt.size().max(1);
                    op.apply(dt, count, data, bufs.slice_mut(*inout)?)?;
                }
            }
        }
        for x in &step.xfers {
            if let Xfer::Send { peer, from } = x {
                let dest = peers.members[*peer as usize];
                let data = bufs.read(*from, &mut stage)?;
                match rt.send_small_now(data, dest, peers.ctx, peers.tag) {
                    Some(r) => r?,
                    None => sends.push(rt.isend(
                        runtime::Buffer::owned(data.to_vec()),
                        dest,
                        peers.ctx,
                        peers.tag,
                        false,
                    )),
                }
            }
        }
        for x in &step.xfers {
            if let Xfer::Recv { peer, into } = x {
                let src = peers.members[*peer as usize] as i32;
                let dst = bufs.slice_mut(*into)?;
                runtime::mem::lend_mut(dst, |b| {
                    let id = rt.irecv(b.clone(), src, peers.ctx, peers.tag);
                    rt.wait(id).map_err(Error::from).and_then(|(c, _)| check(c))
                })?;
            }
        }
    }
    Ok(())
}

/// The schedule's buffers: the caller's input and output, and the temporaries (buffer
/// `2 + i` at `at[i]..at[i + 1]` of `temps`).
struct Bufs<'a> {
    input: &'a [u8],
    output: &'a mut [u8],
    temps: &'a mut [u8],
    at: &'a [usize; MAX_TEMPS + 1],
}

impl Bufs<'_> {
    fn bounds(&self, r: Region) -> Result<(BufId, usize, usize)> {
        let size = match r.buf {
            INPUT => self.input.len(),
            OUTPUT => self.output.len(),
            t => {
                let i = (t - 2) as usize;
                self.at[i + 1] - self.at[i]
            }
        };
        if r.off + r.len > size {
            return Err(Error::Arg(format!(
                "collective buffer {} is {size} bytes, the algorithm needs {}: counts or datatypes \
                 differ between ranks",
                r.buf,
                r.off + r.len
            )));
        }
        let base = if r.buf > OUTPUT {
            self.at[(r.buf - 2) as usize]
        } else {
            0
        };
        Ok((r.buf, base + r.off, r.len))
    }

    /// Region `r` copied into `stage` (it may be written to while it is read: a copy or
    /// reduction within one buffer).
    fn read<'s>(&self, r: Region, stage: &'s mut [u8; MAX_REGION]) -> Result<&'s [u8]> {
        let (buf, off, len) = self.bounds(r)?;
        let src = match buf {
            INPUT => &self.input[off..off + len],
            OUTPUT => &self.output[off..off + len],
            _ => &self.temps[off..off + len],
        };
        stage[..len].copy_from_slice(src);
        Ok(&stage[..len])
    }

    fn slice_mut(&mut self, r: Region) -> Result<&mut [u8]> {
        let (buf, off, len) = self.bounds(r)?;
        match buf {
            INPUT => Err(Error::Arg("a collective schedule writes its input".into())),
            OUTPUT => Ok(&mut self.output[off..off + len]),
            _ => Ok(&mut self.temps[off..off + len]),
        }
    }
}
