//! Collective operations on communicators: blocking ones run their schedule to the
//! end with the caller's memory lent to the engine (no copy of dense data);
//! non-blocking ones own their vectors and advance whenever the job progresses.

pub(crate) mod algos;
mod choose;
mod direct;
pub(crate) mod hier;
mod idup;
mod inter;
#[cfg(test)]
mod inter_tests;
mod node;
mod nonblocking;
mod plans;
pub(crate) mod schedule;
#[cfg(test)]
mod sim_tests;

use std::rc::Rc;

use runtime::{Buffer, Runtime};

use crate::comm::Comm;
use crate::datatype::{Datatype, Equivalence};
use crate::op::Op;
use crate::{Error, Rank, Result};
use algos::Shape;
pub use idup::IdupResult;
pub use inter::InterColl;
pub use nonblocking::CollRequest;
pub(crate) use nonblocking::{background, Active};
pub use plans::{CollPending, Plan};
use schedule::{region, P2p, Running, SchedKey, Schedule, INPUT, OUTPUT};

/// Point-to-point in one collective: communicator ranks, its collective context and tag.
pub(crate) struct RtP2p<'a> {
    pub rt: &'a mut Runtime,
    pub members: &'a [Rank],
    pub ctx: u32,
    pub tag: i32,
}

fn check(c: runtime::Completion) -> Result<()> {
    let st = c?;
    if st.truncated {
        return Err(Error::Arg(format!(
            "a collective message from rank {} was longer than expected: counts or datatypes differ between ranks",
            st.source
        )));
    }
    Ok(())
}

impl P2p for RtP2p<'_> {
    type Req = runtime::ReqId;
    fn isend(&mut self, peer: u32, data: Buffer) -> Result<Self::Req> {
        Ok(self
            .rt
            .isend(data, self.members[peer as usize], self.ctx, self.tag, false))
    }
    fn irecv(&mut self, peer: u32, into: Buffer) -> Result<Self::Req> {
        Ok(self
            .rt
            .irecv(into, self.members[peer as usize] as i32, self.ctx, self.tag))
    }
    fn poll(&mut self, pending: &mut Vec<Self::Req>) -> Result<()> {
        let mut first = Ok(());
        let mut i = 0;
        while i < pending.len() {
            match self.rt.test(pending[i])? {
                Some((c, _)) => {
                    pending.swap_remove(i);
                    if first.is_ok() {
                        first = check(c);
                    }
                }
                None => i += 1,
            }
        }
        first
    }
    fn wait_all(&mut self, pending: &mut Vec<Self::Req>) -> Result<()> {
        let mut first = Ok(());
        for id in pending.drain(..) {
            let r = self.rt.wait(id).map_err(Error::from).and_then(|(c, _)| check(c));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

fn bytes<T: bytemuck::Pod>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}
fn bytes_mut<T: bytemuck::Pod>(v: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(v)
}

pub use crate::comm::not_on_intercomms;

impl Comm<'_> {
    /// The job ranks a schedule's ranks name: this communicator's members, or on an
    /// intercommunicator its own group then the remote group (`across`: the schedule
    /// was built so). A schedule built for the other kind fails here.
    pub(crate) fn sched_members(&self, across: bool) -> Result<Rc<[Rank]>> {
        match (across, &self.d.remote) {
            (false, None) => Ok(self.d.group.shared_members()),
            (true, Some(remote)) => Ok(remote.both.clone()),
            (false, Some(_)) => Err(not_on_intercomms()),
            (true, None) => Err(Error::Arg(
                "a collective planned for an intercommunicator was started on an intracommunicator".into(),
            )),
        }
    }
}

/// Where a collective's input comes from.
#[derive(Clone, Copy)]
pub enum Input<'a, T> {
    Buf(&'a [T]),
    /// MPI_IN_PLACE: the input is in the output buffer.
    InPlace,
}

impl<'a, T: bytemuck::Pod> Input<'a, T> {
    /// The input bytes; `None` in place.
    fn bytes(self) -> Option<&'a [u8]> {
        match self {
            Input::Buf(s) => Some(bytes(s)),
            Input::InPlace => None,
        }
    }
}

impl<'a, T> From<&'a [T]> for Input<'a, T> {
    fn from(v: &'a [T]) -> Self {
        Input::Buf(v)
    }
}
impl<'a, T, const N: usize> From<&'a [T; N]> for Input<'a, T> {
    fn from(v: &'a [T; N]) -> Self {
        Input::Buf(v)
    }
}
impl<'a, T> From<&'a Vec<T>> for Input<'a, T> {
    fn from(v: &'a Vec<T>) -> Self {
        Input::Buf(v)
    }
}

impl<'u> Comm<'u> {
    pub(crate) fn shape(&self) -> Shape {
        Shape {
            rank: self.rank(),
            size: self.size(),
        }
    }

    pub(crate) fn tuning(&self) -> algos::Tuning {
        self.u.tuning
    }

    /// Runs `sched`, built for an intracommunicator, to the end on lent memory.
    pub(crate) fn run_blocking(
        &self,
        sched: impl Into<Rc<Schedule>>,
        input: &[u8],
        output: &mut [u8],
        op: Option<(Op, Datatype)>,
    ) -> Result<()> {
        self.run_sched(sched.into(), false, input, output, op)
    }

    /// Runs `plan` to the end on lent memory.
    pub fn run_plan(&self, plan: Plan, input: &[u8], output: &mut [u8]) -> Result<()> {
        self.run_sched(Rc::new(plan.sched), plan.across, input, output, plan.op)
    }

    fn run_sched(
        &self,
        sched: Rc<Schedule>,
        across: bool,
        input: &[u8],
        output: &mut [u8],
        op: Option<(Op, Datatype)>,
    ) -> Result<()> {
        if self.u.threads.gate().is_some() {
            return self.run_sched_shared(sched, across, input, output, op);
        }
        let members = self.sched_members(across)?;
        let tag = self.next_coll_tag();
        let mut rt = self.u.engine()?;
        if direct::fits(&sched) {
            let peers = direct::Peers {
                members: &members,
                ctx: self.coll_ctx(),
                tag,
            };
            return direct::run(&mut rt, &peers, &sched, input, output, op.as_ref());
        }
        let mut p2p = RtP2p {
            rt: &mut rt,
            members: &members,
            ctx: self.coll_ctx(),
            tag,
        };
        runtime::mem::lend(input, |inb| {
            runtime::mem::lend_mut(output, |outb| {
                let mut run = Running::new(sched, inb.clone(), outb.clone(), op);
                let r = run.advance(&mut p2p, true);
                drop(run.finish(&mut p2p));
                r.map(|_| ())
            })
        })
    }

    /// [`Comm::run_sched`] with threads sharing the universe: as a non-blocking
    /// collective on lent memory, waited for in passes that let the others in (the
    /// blocking form waits inside the engine).
    fn run_sched_shared(
        &self,
        sched: Rc<Schedule>,
        across: bool,
        input: &[u8],
        output: &mut [u8],
        op: Option<(Op, Datatype)>,
    ) -> Result<()> {
        runtime::mem::lend(input, |inb| {
            runtime::mem::lend_mut(output, |outb| {
                let state = self.start_schedule(sched, inb.clone(), outb.clone(), op, across);
                let waited = nonblocking::finish(self.u, &state);
                let result = state.borrow_mut().take_result();
                waited?;
                result.map_or(Ok(()), |r| r.map(drop))
            })
        })
    }

    /// The schedule of the collective `key` describes, built on its first use and kept
    /// with the communicator for the next calls alike (applications call the same few
    /// collectives with the same sizes over and over; building one is as costly as
    /// running a small one).
    fn schedule(&self, key: SchedKey, build: impl FnOnce() -> Schedule) -> Rc<Schedule> {
        const KEEP: usize = 8;
        let mut cache = self.d.schedules.borrow_mut();
        if let Some(i) = cache.iter().position(|(k, _)| *k == key) {
            let hit = cache.remove(i);
            let sched = hit.1.clone();
            cache.push(hit); // the most recently used last
            return sched;
        }
        let sched = Rc::new(build());
        if cache.len() == KEEP {
            cache.remove(0);
        }
        cache.push((key, sched.clone()));
        sched
    }

    fn reduction<T: Equivalence>(&self, op: &Op) -> Result<Option<(Op, Datatype)>> {
        let dt = T::datatype();
        op.check(&dt)?;
        Ok(Some((op.clone(), dt)))
    }

    /// Waits until every member got here (MPI_Barrier).
    pub fn barrier(&self) -> Result<()> {
        if let Some(done) = self.node_barrier() {
            return done;
        }
        let s = self.schedule(SchedKey::new("barrier", [0; 4]), || self.barrier_schedule());
        self.run_blocking(s, &[], &mut [], None)
    }

    /// Copies `buf` at `root` to every member's `buf` (MPI_Bcast).
    pub fn bcast<T: bytemuck::Pod>(&self, buf: &mut [T], root: Rank) -> Result<()> {
        self.check_root(root)?;
        if let Some(done) = self.node_bcast(bytes_mut(buf), root) {
            return done;
        }
        let n = std::mem::size_of_val(buf);
        let key = SchedKey::new("bcast", [root as usize, n, 0, 0]);
        let s = self.schedule(key, || self.bcast_schedule(root, OUTPUT, n));
        self.run_blocking(s, &[], bytes_mut(buf), None)
    }

    fn check_root(&self, root: Rank) -> Result<()> {
        if root >= self.size() {
            return Err(Error::Arg(format!(
                "root {root} is not a rank of this communicator of {}",
                self.size()
            )));
        }
        Ok(())
    }

    /// MPI_Reduce on packed elements of `dt`; `input` None: in place at the root.
    pub(crate) fn reduce_bytes(
        &self,
        input: Option<&[u8]>,
        out: &mut [u8],
        dt: &Datatype,
        op: &Op,
        root: Rank,
    ) -> Result<()> {
        self.check_root(root)?;
        op.check(dt)?;
        let (src, n) = match input {
            Some(i) => (INPUT, i.len()),
            None if self.rank() == root => (OUTPUT, out.len()),
            None => return Err(Error::Arg("reduce: IN_PLACE is only for the root".into())),
        };
        if let Some(done) = self.node_reduce(input, out, n, (dt, op), root) {
            return done;
        }
        let commutative = op.is_commutative();
        let key = SchedKey::new("reduce", [root as usize, src as usize, n, commutative as usize]);
        let s = self.schedule(key, || self.reduce_schedule(root, src, OUTPUT, n, commutative));
        self.run_blocking(s, input.unwrap_or(&[]), out, Some((op.clone(), dt.clone())))
    }

    /// Combines every member's `send` with `op` into `recv` at `root`; `recv` is
    /// ignored elsewhere (MPI_Reduce).
    pub fn reduce<'a, T: Equivalence>(
        &self,
        send: impl Into<Input<'a, T>>,
        recv: &mut [T],
        op: &Op,
        root: Rank,
    ) -> Result<()> {
        self.reduce_bytes(send.into().bytes(), bytes_mut(recv), &T::datatype(), op, root)
    }

    /// MPI_Allreduce on packed elements of `dt`; `input` None: in place.
    pub fn allreduce_bytes(
        &self,
        input: Option<&[u8]>,
        out: &mut [u8],
        dt: &Datatype,
        op: &Op,
    ) -> Result<()> {
        op.check(dt)?;
        let n = out.len();
        if input.is_some_and(|i| i.len() != n) {
            return Err(Error::Arg(
                "allreduce: send and receive buffers differ in length".into(),
            ));
        }
        if let Some(done) = self.node_allreduce(input, out, dt, op) {
            return done;
        }
        let src = if input.is_some() { INPUT } else { OUTPUT };
        let (elem, commutative) = (dt.size() as usize, op.is_commutative());
        let key = SchedKey::new("allreduce", [src as usize, n, elem, commutative as usize]);
        let s = self.schedule(key, || self.allreduce_schedule(src, OUTPUT, n, elem, commutative));
        self.run_blocking(s, input.unwrap_or(&[]), out, Some((op.clone(), dt.clone())))
    }

    /// Every member gets `op` over all `send` in `recv` (MPI_Allreduce).
    pub fn allreduce<'a, T: Equivalence>(
        &self,
        send: impl Into<Input<'a, T>>,
        recv: &mut [T],
        op: &Op,
    ) -> Result<()> {
        self.allreduce_bytes(send.into().bytes(), bytes_mut(recv), &T::datatype(), op)
    }

    /// Root gets every member's `send` in rank order in `recv` (MPI_Gather).
    pub fn gather<'a, T: bytemuck::Pod>(
        &self,
        send: impl Into<Input<'a, T>>,
        recv: &mut [T],
        root: Rank,
    ) -> Result<()> {
        self.check_root(root)?;
        let p = self.size() as usize;
        let (input, src, n) = match send.into() {
            Input::Buf(s) => (bytes(s), Some(INPUT), std::mem::size_of_val(s)),
            Input::InPlace => (&[][..], None, std::mem::size_of_val(recv) / p),
        };
        if let Some(done) = self.node_gather(src.map(|_| input), bytes_mut(recv), n, root) {
            return done;
        }
        let s = self.gather_schedule(root, src, n);
        self.run_blocking(s, input, bytes_mut(recv), None)
    }

    /// Root sends block i of `send` to rank i's `recv` (MPI_Scatter); `recv` None:
    /// in place at the root.
    pub fn scatter<T: bytemuck::Pod>(&self, send: &[T], recv: Option<&mut [T]>, root: Rank) -> Result<()> {
        self.check_root(root)?;
        let p = self.size() as usize;
        let (n, dst, out) = match recv {
            Some(r) => (std::mem::size_of_val(r), Some(OUTPUT), bytes_mut(r)),
            None => (std::mem::size_of_val(send) / p, None, &mut [][..]),
        };
        let recv = dst.map(|_| &mut *out);
        if let Some(done) = self.node_scatter(bytes(send), recv, n, root) {
            return done;
        }
        let s = self.scatter_schedule(root, dst, n);
        self.run_blocking(s, bytes(send), out, None)
    }

    /// Every member gets every member's `send` in rank order (MPI_Allgather).
    pub fn allgather<'a, T: bytemuck::Pod>(
        &self,
        send: impl Into<Input<'a, T>>,
        recv: &mut [T],
    ) -> Result<()> {
        let p = self.size() as usize;
        let (input, src, n) = match send.into() {
            Input::Buf(s) => (bytes(s), Some(INPUT), std::mem::size_of_val(s)),
            Input::InPlace => (&[][..], None, std::mem::size_of_val(recv) / p),
        };
        if let Some(done) = self.node_allgather(src.map(|_| input), bytes_mut(recv), n) {
            return done;
        }
        let s = self.allgather_schedule(src, OUTPUT, n);
        self.run_blocking(s, input, bytes_mut(recv), None)
    }

    /// Block j of `send` goes to rank j, which puts it in block i (the sender's rank)
    /// of its `recv` (MPI_Alltoall).
    pub fn alltoall<'a, T: bytemuck::Pod>(
        &self,
        send: impl Into<Input<'a, T>>,
        recv: &mut [T],
    ) -> Result<()> {
        let n = std::mem::size_of_val(recv) / self.size() as usize;
        let (input, src) = match send.into() {
            Input::Buf(s) => (bytes(s), Some(INPUT)),
            Input::InPlace => (&[][..], None),
        };
        if let Some(done) = self.node_alltoall(src.map(|_| input), bytes_mut(recv), n) {
            return done;
        }
        let s = self.alltoall_schedule(src, n);
        self.run_blocking(s, input, bytes_mut(recv), None)
    }

    /// Element blocks `(displacement, count)` to byte blocks.
    fn byte_blocks<T>(counts: &[usize], displs: &[usize]) -> Vec<(usize, usize)> {
        let sz = std::mem::size_of::<T>();
        counts.iter().zip(displs).map(|(c, d)| (d * sz, c * sz)).collect()
    }

    fn check_per_rank(&self, what: &str, counts: &[usize], displs: &[usize]) -> Result<()> {
        let p = self.size() as usize;
        if counts.len() != p || displs.len() != p {
            return Err(Error::Arg(format!(
                "{what}: counts and displacements need one entry per rank ({p})"
            )));
        }
        Ok(())
    }

    /// Root gets rank i's `send` at element `displs[i]` of `recv` (`counts[i]` elements)
    /// (MPI_Gatherv). `counts`/`displs` matter at the root only.
    pub fn gatherv<'a, T: bytemuck::Pod>(
        &self,
        send: impl Into<Input<'a, T>>,
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
        root: Rank,
    ) -> Result<()> {
        self.check_root(root)?;
        let blocks = if self.rank() == root {
            self.check_per_rank("gatherv", counts, displs)?;
            Self::byte_blocks::<T>(counts, displs)
        } else {
            Vec::new()
        };
        let (input, src) = match send.into() {
            Input::Buf(s) => (bytes(s), Some(region(INPUT, 0, std::mem::size_of_val(s)))),
            Input::InPlace => (&[][..], None),
        };
        let s = algos::gatherv(self.shape(), root, src, OUTPUT, &blocks);
        self.run_blocking(s, input, bytes_mut(recv), None)
    }

    /// Root sends `counts[i]` elements at `displs[i]` of `send` to rank i (MPI_Scatterv).
    pub fn scatterv<T: bytemuck::Pod>(
        &self,
        send: &[T],
        counts: &[usize],
        displs: &[usize],
        recv: Option<&mut [T]>,
        root: Rank,
    ) -> Result<()> {
        self.check_root(root)?;
        let blocks = if self.rank() == root {
            self.check_per_rank("scatterv", counts, displs)?;
            Self::byte_blocks::<T>(counts, displs)
        } else {
            Vec::new()
        };
        let (dst, out) = match recv {
            Some(r) => (Some(region(OUTPUT, 0, std::mem::size_of_val(r))), bytes_mut(r)),
            None => (None, &mut [][..]),
        };
        let s = algos::scatterv(self.shape(), root, INPUT, &blocks, dst);
        self.run_blocking(s, bytes(send), out, None)
    }

    /// Every member gets rank i's `send` at `displs[i]` (`counts[i]` elements) (MPI_Allgatherv).
    pub fn allgatherv<'a, T: bytemuck::Pod>(
        &self,
        send: impl Into<Input<'a, T>>,
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        self.check_per_rank("allgatherv", counts, displs)?;
        let blocks = Self::byte_blocks::<T>(counts, displs);
        let (input, src) = match send.into() {
            Input::Buf(s) => (bytes(s), Some(region(INPUT, 0, std::mem::size_of_val(s)))),
            Input::InPlace => (&[][..], None),
        };
        let s = self.allgatherv_schedule(src, &blocks);
        self.run_blocking(s, input, bytes_mut(recv), None)
    }

    /// Alltoall with per-peer counts and displacements on each side (MPI_Alltoallv).
    #[allow(clippy::too_many_arguments)]
    pub fn alltoallv<'a, T: bytemuck::Pod>(
        &self,
        send: impl Into<Input<'a, T>>,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        self.check_per_rank("alltoallv", recv_counts, recv_displs)?;
        let rblocks = Self::byte_blocks::<T>(recv_counts, recv_displs);
        let (input, src, sblocks) = match send.into() {
            Input::Buf(s) => {
                self.check_per_rank("alltoallv", send_counts, send_displs)?;
                (
                    bytes(s),
                    Some(INPUT),
                    Self::byte_blocks::<T>(send_counts, send_displs),
                )
            }
            Input::InPlace => (&[][..], None, rblocks.clone()),
        };
        let s = self.alltoallv_schedule(src, &sblocks, &rblocks);
        self.run_blocking(s, input, bytes_mut(recv), None)
    }

    /// MPI_Reduce_scatter on packed elements of `dt`: block i (`byte_counts[i]` bytes)
    /// of the reduced vector goes to rank i's `out`; `input` None: the vector is in `out`.
    pub(crate) fn reduce_scatter_bytes(
        &self,
        input: Option<&[u8]>,
        out: &mut [u8],
        byte_counts: &[usize],
        dt: &Datatype,
        op: &Op,
    ) -> Result<()> {
        op.check(dt)?;
        if byte_counts.len() != self.size() as usize {
            return Err(Error::Arg(
                "reduce_scatter: counts need one entry per rank".into(),
            ));
        }
        let src = if input.is_some() { INPUT } else { OUTPUT };
        let s = algos::reduce_scatter(self.shape(), src, OUTPUT, byte_counts, op.is_commutative());
        self.run_blocking(s, input.unwrap_or(&[]), out, Some((op.clone(), dt.clone())))
    }

    /// Reduces the vector of blocks of `counts[i]` elements, leaving block i in rank
    /// i's `recv` (MPI_Reduce_scatter). In place: the vector is in `recv`.
    pub fn reduce_scatter<'a, T: Equivalence>(
        &self,
        send: impl Into<Input<'a, T>>,
        recv: &mut [T],
        counts: &[usize],
        op: &Op,
    ) -> Result<()> {
        let sz = std::mem::size_of::<T>();
        let byte_counts: Vec<usize> = counts.iter().map(|c| c * sz).collect();
        let input = send.into().bytes();
        self.reduce_scatter_bytes(input, bytes_mut(recv), &byte_counts, &T::datatype(), op)
    }

    /// [`Comm::reduce_scatter`] with `count` elements per rank (MPI_Reduce_scatter_block).
    pub fn reduce_scatter_block<'a, T: Equivalence>(
        &self,
        send: impl Into<Input<'a, T>>,
        recv: &mut [T],
        count: usize,
        op: &Op,
    ) -> Result<()> {
        self.reduce_scatter(send, recv, &vec![count; self.size() as usize], op)
    }

    /// MPI_Scan (`exclusive`: MPI_Exscan) on packed elements of `dt`; `input` None: in place.
    pub(crate) fn prefix_bytes(
        &self,
        input: Option<&[u8]>,
        out: &mut [u8],
        dt: &Datatype,
        op: &Op,
        exclusive: bool,
    ) -> Result<()> {
        op.check(dt)?;
        let src = if input.is_some() { INPUT } else { OUTPUT };
        let s = algos::scan(
            self.shape(),
            src,
            OUTPUT,
            out.len(),
            op.is_commutative(),
            exclusive,
        );
        self.run_blocking(s, input.unwrap_or(&[]), out, Some((op.clone(), dt.clone())))
    }

    fn prefix<'a, T: Equivalence>(
        &self,
        send: impl Into<Input<'a, T>>,
        recv: &mut [T],
        op: &Op,
        exclusive: bool,
    ) -> Result<()> {
        self.prefix_bytes(
            send.into().bytes(),
            bytes_mut(recv),
            &T::datatype(),
            op,
            exclusive,
        )
    }

    /// Rank i gets `op` over the `send` of ranks 0..=i (MPI_Scan).
    pub fn scan<'a, T: Equivalence>(
        &self,
        send: impl Into<Input<'a, T>>,
        recv: &mut [T],
        op: &Op,
    ) -> Result<()> {
        self.prefix(send, recv, op, false)
    }

    /// Rank i gets `op` over the `send` of ranks 0..i; rank 0's `recv` is left alone (MPI_Exscan).
    pub fn exscan<'a, T: Equivalence>(
        &self,
        send: impl Into<Input<'a, T>>,
        recv: &mut [T],
        op: &Op,
    ) -> Result<()> {
        self.prefix(send, recv, op, true)
    }
}
