//! Collective operations as schedules: steps of local work (copies, reductions)
//! and transfers (sends, receives) on numbered buffers.
//!
//! An algorithm is written once as a function that builds a [`Schedule`] for one
//! rank; [`Running`] executes it over anything that implements [`P2p`]: the
//! runtime (blocking and non-blocking collectives) or the protocol simulator
//! (property tests). A step's local work runs first, then its transfers start;
//! the next step begins once all of them completed.

use std::cell::RefCell;
use std::rc::Rc;

use runtime::Buffer;

use crate::datatype::Datatype;
use crate::op::Op;
use crate::{Error, Result};

pub type BufId = u16;
/// The caller's input (send) buffer, packed.
pub const INPUT: BufId = 0;
/// The caller's output (receive) buffer, packed.
pub const OUTPUT: BufId = 1;

/// Bytes `[off, off + len)` of buffer `buf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub buf: BufId,
    pub off: usize,
    pub len: usize,
}

pub fn region(buf: BufId, off: usize, len: usize) -> Region {
    Region { buf, off, len }
}

#[derive(Debug, Clone)]
pub enum Local {
    Copy {
        from: Region,
        to: Region,
    },
    Blocks(Blocks),
    /// `inout = input ∘ inout`: `input` holds lower ranks' data.
    Reduce {
        input: Region,
        inout: Region,
    },
}

/// `count` blocks of `from.len` bytes: block j from `from.off + j·from_step` to
/// `to.off + j·to_step` (steps in bytes; negative goes down). Bruck's rounds move half of
/// the blocks each: as single copies they made p·log p steps.
#[derive(Debug, Clone, Copy)]
pub struct Blocks {
    pub from: Region,
    pub to: Region,
    pub count: usize,
    pub from_step: isize,
    pub to_step: isize,
}

impl Blocks {
    /// Each block's (from, to), in order.
    pub fn pairs(&self) -> impl Iterator<Item = Result<(Region, Region)>> + '_ {
        (0..self.count).map(|j| {
            Ok((
                nth_block(self.from, j, self.from_step)?,
                nth_block(self.to, j, self.to_step)?,
            ))
        })
    }
}

#[derive(Debug, Clone)]
pub enum Xfer {
    Send { peer: u32, from: Region },
    Recv { peer: u32, into: Region },
}

#[derive(Debug, Clone, Default)]
pub struct Step {
    pub local: Vec<Local>,
    pub xfers: Vec<Xfer>,
    /// Transfers posted with this step's but waited for `n` steps later (the step
    /// after which a later one reads what they bring): a pipeline keeps the wire busy
    /// while it passes on what came before.
    pub ahead: Vec<(usize, Xfer)>,
}

#[cfg(test)]
impl Step {
    /// Every transfer the step posts.
    pub fn all_xfers(&self) -> impl Iterator<Item = &Xfer> {
        self.xfers.iter().chain(self.ahead.iter().map(|(_, x)| x))
    }
}

/// Block `j` of [`Blocks`] whose first block is `first`.
fn nth_block(first: Region, j: usize, step: isize) -> Result<Region> {
    let off = (j as isize)
        .checked_mul(step)
        .and_then(|d| (first.off as isize).checked_add(d))
        .filter(|&o| o >= 0)
        .ok_or_else(|| Error::Arg(format!("block {j} of a collective's copy lies before its buffer")))?;
    Ok(Region {
        off: off as usize,
        ..first
    })
}

/// One rank's part of a collective.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    /// Sizes of the temporary buffers `2..`.
    pub temps: Vec<usize>,
    pub steps: Vec<Step>,
}

impl Schedule {
    /// A new temporary buffer of `len` bytes.
    pub fn temp(&mut self, len: usize) -> BufId {
        self.temps.push(len);
        (self.temps.len() + 1) as BufId
    }

    fn open_step(&mut self) -> &mut Step {
        if self.steps.is_empty() {
            self.steps.push(Step::default());
        }
        self.steps.last_mut().expect("pushed")
    }

    /// Later transfers wait until the ones added so far completed.
    pub fn sync(&mut self) {
        if self.steps.last().is_some_and(|s| !s.xfers.is_empty()) {
            self.steps.push(Step::default());
        }
    }

    fn local(&mut self, l: Local) {
        self.sync();
        self.open_step().local.push(l);
    }

    /// Starts a new step, even if the last one has no transfers (a pipeline's rounds
    /// are counted in steps).
    pub fn new_step(&mut self) {
        self.steps.push(Step::default());
    }
    /// Posts a send with the current step's transfers; the step `later` steps on
    /// completes only once it did.
    pub fn send_ahead(&mut self, peer: u32, from: Region, later: usize) {
        self.open_step().ahead.push((later, Xfer::Send { peer, from }));
    }
    /// Posts a receive with the current step's transfers; the step `later` steps on
    /// completes only once it did, and the steps after it may read it.
    pub fn recv_ahead(&mut self, peer: u32, into: Region, later: usize) {
        self.open_step().ahead.push((later, Xfer::Recv { peer, into }));
    }
    pub fn send(&mut self, peer: u32, from: Region) {
        self.open_step().xfers.push(Xfer::Send { peer, from });
    }
    pub fn recv(&mut self, peer: u32, into: Region) {
        self.open_step().xfers.push(Xfer::Recv { peer, into });
    }
    /// Copies once the transfers so far completed.
    pub fn copy(&mut self, from: Region, to: Region) {
        if from != to && from.len > 0 {
            self.local(Local::Copy { from, to });
        }
    }
    /// Copies `count` evenly spaced blocks (see [`Blocks`]) once the transfers so
    /// far completed.
    pub fn copy_blocks(&mut self, from: Region, to: Region, count: usize, from_step: isize, to_step: isize) {
        match count {
            0 => {}
            1 => self.copy(from, to),
            _ if from.len > 0 => self.local(Local::Blocks(Blocks {
                from,
                to,
                count,
                from_step,
                to_step,
            })),
            _ => {}
        }
    }
    /// Reduces once the transfers so far completed.
    pub fn reduce(&mut self, input: Region, inout: Region) {
        if input.len > 0 {
            self.local(Local::Reduce { input, inout });
        }
    }
}

/// Point-to-point underneath a running schedule; peers are communicator ranks.
pub trait P2p {
    type Req;
    fn isend(&mut self, peer: u32, data: Buffer) -> Result<Self::Req>;
    fn irecv(&mut self, peer: u32, into: Buffer) -> Result<Self::Req>;
    /// Drops the requests that completed; returns the first failure.
    fn poll(&mut self, pending: &mut Vec<Self::Req>) -> Result<()>;
    /// Blocks until every request completed (even after a failure, so that no
    /// buffer stays lent); returns the first failure.
    fn wait_all(&mut self, pending: &mut Vec<Self::Req>) -> Result<()>;
}

/// A schedule being executed.
pub struct Running<R> {
    sched: Rc<Schedule>,
    bufs: Vec<Buffer>,
    step: usize,
    pending: Vec<R>,
    /// Transfers posted ahead, with the step whose completion waits for them.
    ahead: Vec<(usize, R)>,
    op: Option<(Op, Datatype)>,
}

impl<R> Running<R> {
    /// `input` may be empty when the schedule never reads it (in place).
    pub fn new(
        sched: impl Into<Rc<Schedule>>,
        input: Buffer,
        output: Buffer,
        op: Option<(Op, Datatype)>,
    ) -> Self {
        let sched = sched.into();
        let mut bufs = vec![input, output];
        bufs.extend(sched.temps.iter().map(|n| Buffer::owned(scratch::take(*n))));
        Running {
            sched,
            bufs,
            step: 0,
            pending: Vec::new(),
            ahead: Vec::new(),
            op,
        }
    }

    fn view(&self, r: Region) -> Result<Buffer> {
        self.check(r)?;
        Ok(self.bufs[r.buf as usize].view(r.off as u64, r.len as u64))
    }

    /// Copies `from` to `to` without making views (two allocations each).
    fn copy(&self, from: Region, to: Region) -> Result<()> {
        let src_buf = &self.bufs[from.buf as usize];
        let dst_buf = &self.bufs[to.buf as usize];
        for r in [from, to] {
            self.check(r)?;
        }
        // As a view of `to` would, never past `to`.
        let src = src_buf.slice(from.off as u64, from.len.min(to.len) as u64);
        let overlap = from.buf == to.buf && from.off < to.off + to.len && to.off < from.off + from.len;
        if overlap {
            // Not needless: `src` lies in the memory written.
            #[allow(clippy::unnecessary_to_owned)]
            dst_buf.write_at(to.off as u64, &src.to_vec());
        } else {
            dst_buf.write_at(to.off as u64, src);
        }
        Ok(())
    }

    fn check(&self, r: Region) -> Result<()> {
        let b = &self.bufs[r.buf as usize];
        if r.off + r.len > b.len() {
            return Err(Error::Arg(format!(
                "collective buffer {} is {} bytes, the algorithm needs {}: counts or datatypes differ \
                 between ranks",
                r.buf,
                b.len(),
                r.off + r.len
            )));
        }
        Ok(())
    }

    fn run_local(&self, l: &Local) -> Result<()> {
        match l {
            Local::Copy { from, to } => self.copy(*from, *to)?,
            Local::Blocks(b) => {
                for pair in b.pairs() {
                    let (from, to) = pair?;
                    self.copy(from, to)?;
                }
            }
            Local::Reduce { input, inout } => {
                let (op, dt) = self
                    .op
                    .as_ref()
                    .ok_or_else(|| Error::Arg("reduction without an operation".into()))?;
                let src = self.view(*input)?;
                let dst = self.view(*inout)?;
                let count = input.len as u64 / dt.size().max(1);
                let mut res = Ok(());
                dst.combine(0, &src, 0, input.len as u64, |a, b| {
                    res = op.apply(dt, count, a, b)
                });
                res?;
            }
        }
        Ok(())
    }

    /// Runs as far as it can; with `block`, to the end. Returns whether it finished.
    pub fn advance<P: P2p<Req = R>>(&mut self, p: &mut P, block: bool) -> Result<bool> {
        loop {
            if block {
                p.wait_all(&mut self.pending)?;
            } else {
                p.poll(&mut self.pending)?;
                if !self.pending.is_empty() {
                    return Ok(false);
                }
            }
            let sched = Rc::clone(&self.sched);
            let Some(step) = sched.steps.get(self.step) else {
                if self.ahead.is_empty() {
                    return Ok(true);
                }
                // Waited for by no step (past the last): the end waits for them.
                self.pending.extend(self.ahead.drain(..).map(|(_, r)| r));
                continue;
            };
            for l in &step.local {
                self.run_local(l)?;
            }
            let now = self.step;
            let xfers = step.xfers.iter().map(|x| (0, x));
            for (later, x) in xfers.chain(step.ahead.iter().map(|(n, x)| (*n, x))) {
                let req = match x {
                    Xfer::Send { peer, from } => self.view(*from).and_then(|b| p.isend(*peer, b)),
                    Xfer::Recv { peer, into } => self.view(*into).and_then(|b| p.irecv(*peer, b)),
                };
                match req {
                    Ok(r) if later == 0 => self.pending.push(r),
                    Ok(r) => self.ahead.push((now + later, r)),
                    Err(e) => {
                        self.wait_out(p);
                        return Err(e);
                    }
                }
            }
            // Posted by earlier steps for this one: it completes once they did.
            let (due, later): (Vec<_>, Vec<_>) = self.ahead.drain(..).partition(|(at, _)| *at == now);
            self.ahead = later;
            self.pending.extend(due.into_iter().map(|(_, r)| r));
            self.step += 1;
        }
    }

    /// Waits for every transfer in flight, those posted ahead too (so that no buffer
    /// stays lent).
    fn wait_out<P: P2p<Req = R>>(&mut self, p: &mut P) {
        self.pending.extend(self.ahead.drain(..).map(|(_, r)| r));
        let _ = p.wait_all(&mut self.pending);
    }

    /// Waits out whatever is still in flight (after a failure) and gives the
    /// output buffer back.
    pub fn finish<P: P2p<Req = R>>(mut self, p: &mut P) -> Buffer {
        self.wait_out(p);
        for temp in self.bufs.drain(OUTPUT as usize + 1..) {
            if let Some(v) = temp.into_vec() {
                scratch::give_back(v);
            }
        }
        self.bufs.swap_remove(OUTPUT as usize)
    }
}

/// Temporary buffers of finished schedules, kept for the next ones: a large
/// collective would otherwise allocate and zero megabytes on every call (a tenth of
/// a 4 MiB allreduce's time on 8 ranks).
mod scratch {
    use super::RefCell;

    /// Buffers kept, and the sizes kept: enough for the temporaries of any one
    /// schedule here, without holding on to a huge one; small ones cost little to
    /// allocate.
    const KEEP: usize = 4;
    const KEEP_BYTES: std::ops::RangeInclusive<usize> = (64 << 10)..=(64 << 20);

    thread_local! {
        static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    }

    /// A buffer of at least `n` bytes. A reused one holds old data, which no
    /// schedule reads before it wrote it (debug builds fill it with garbage so that
    /// the tests would notice).
    pub fn take(n: usize) -> Vec<u8> {
        if n < *KEEP_BYTES.start() {
            return vec![0; n];
        }
        let reused = POOL.with(|p| {
            let mut p = p.borrow_mut();
            let (i, _) = p
                .iter()
                .enumerate()
                .filter(|(_, v)| v.len() >= n)
                .min_by_key(|(_, v)| v.len())?;
            Some(p.swap_remove(i))
        });
        match reused {
            Some(mut v) => {
                if cfg!(debug_assertions) {
                    v.fill(0xa5);
                }
                v
            }
            None => vec![0; n],
        }
    }

    pub fn give_back(v: Vec<u8>) {
        if !KEEP_BYTES.contains(&v.len()) {
            return;
        }
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            p.push(v);
            if p.len() > KEEP {
                // Drop the smallest.
                let (i, _) = p
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, v)| v.len())
                    .expect("not empty");
                p.swap_remove(i);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::scratch;

    #[test]
    fn scratch_buffers_are_reused_smallest_fitting_first() {
        let (big, mid) = (vec![0u8; 4 << 20], vec![0u8; 1 << 20]);
        let (big_at, mid_at) = (big.as_ptr(), mid.as_ptr());
        scratch::give_back(big);
        scratch::give_back(mid);
        let got = scratch::take(512 << 10);
        assert_eq!(got.as_ptr(), mid_at, "the smallest buffer that fits");
        if cfg!(debug_assertions) {
            assert!(got.iter().all(|&b| b == 0xa5), "debug builds hand out garbage");
        }
        let second = scratch::take(2 << 20);
        assert_eq!(second.as_ptr(), big_at);
        let third = scratch::take(2 << 20);
        assert_ne!(third.as_ptr(), big_at, "the pool is empty: a new buffer");
    }
}

/// What a cached schedule was built for: the collective and its arguments that shape
/// it (the communicator's shape and tuning are fixed).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct SchedKey {
    what: &'static str,
    args: [usize; 4],
}

impl SchedKey {
    pub(crate) fn new(what: &'static str, args: [usize; 4]) -> SchedKey {
        SchedKey { what, args }
    }
}
