//! Non-blocking collectives: the same schedules as the blocking ones, on vectors the
//! request owns. Every started schedule is registered with the runtime's background
//! task, so it advances whenever the job progresses (inside any blocking call or
//! test), not only when its own request is tested.

use std::cell::RefCell;
use std::rc::{Rc, Weak};

use runtime::{Buffer, Runtime};

use super::schedule::{Running, Schedule, INPUT, OUTPUT};
use super::RtP2p;
use crate::comm::Comm;
use crate::datatype::Equivalence;
use crate::op::Op;
use crate::{Rank, Result, Universe};

pub(crate) struct Started {
    run: Option<Running<runtime::ReqId>>,
    members: Rc<[Rank]>,
    ctx: u32,
    tag: i32,
    result: Option<Result<Buffer>>,
    /// For a chain of schedules (MPI_Comm_idup's rounds): what follows each one.
    then: Option<Then>,
}

/// Decides, from a finished schedule's result, what a chain does next.
pub(crate) type Then = Box<dyn FnMut(Result<Buffer>) -> Next>;

/// One schedule of a chain: on this input and output, with this reduction and tag.
pub(crate) struct Link {
    pub(crate) sched: Schedule,
    pub(crate) input: Buffer,
    pub(crate) output: Buffer,
    pub(crate) op: Option<(Op, crate::Datatype)>,
    pub(crate) tag: i32,
}

/// The next step of a chain.
pub(crate) enum Next {
    Run(Link),
    /// The chain ends with this result.
    Done(Result<Buffer>),
}

impl Started {
    pub(crate) fn finished(&self) -> bool {
        self.run.is_none()
    }

    /// The result and output buffer of a finished schedule, once.
    pub(crate) fn take_result(&mut self) -> Option<Result<Buffer>> {
        self.result.take()
    }

    /// Advances; once finished (a chain: its last schedule), keeps the result and the
    /// output buffer.
    pub(crate) fn advance(&mut self, rt: &mut Runtime, block: bool) -> bool {
        loop {
            let Some(run) = self.run.as_mut() else {
                return false;
            };
            let mut p2p = RtP2p {
                rt,
                members: &self.members,
                ctx: self.ctx,
                tag: self.tag,
            };
            let r = run.advance(&mut p2p, block);
            if matches!(r, Ok(false)) {
                return false;
            }
            let out = self.run.take().expect("checked").finish(&mut p2p);
            let r = r.map(|_| out);
            let Some(then) = self.then.as_mut() else {
                self.result = Some(r);
                return true;
            };
            match then(r) {
                Next::Done(r) => {
                    self.then = None;
                    self.result = Some(r);
                    return true;
                }
                Next::Run(l) => {
                    self.run = Some(Running::new(l.sched, l.input, l.output, l.op));
                    self.tag = l.tag;
                }
            }
        }
    }
}

/// Runs a started schedule to its end (its result then waits in it). With threads
/// sharing the universe, in passes that let them in ([`Universe::wait_until`]).
pub(crate) fn finish(u: &Universe, state: &RefCell<Started>) -> Result<()> {
    if state.borrow().finished() {
        return Ok(());
    }
    if u.threads.gate().is_none() {
        state.borrow_mut().advance(&mut *u.engine()?, true);
        return Ok(());
    }
    u.wait_until(|rt| {
        let mut s = state.borrow_mut();
        s.advance(rt, false);
        s.finished().then_some(())
    })
}

/// The schedules in flight at this process.
pub(crate) type Active = Rc<RefCell<Vec<Weak<RefCell<Started>>>>>;

/// The runtime's background task: advances every schedule in flight that no one
/// is advancing right now.
pub(crate) fn background(active: Active) -> runtime::Background {
    Box::new(move |rt: &mut Runtime| {
        if active.borrow().is_empty() {
            rt.disarm_background();
            return false;
        }
        let mut any = false;
        // By index, without holding the list's borrow while a schedule runs, and without
        // copying the list on every progress pass.
        let mut i = 0;
        loop {
            // (A `let ... else` drops the borrow at once; a `while let` would keep it.)
            let Some(weak) = active.borrow().get(i).cloned() else {
                break;
            };
            i += 1;
            if let Some(s) = weak.upgrade() {
                if let Ok(mut s) = s.try_borrow_mut() {
                    any |= s.advance(rt, false);
                }
            }
        }
        let mut active = active.borrow_mut();
        active.retain(|w| {
            w.upgrade()
                .is_some_and(|s| s.try_borrow().map_or(true, |s| s.run.is_some()))
        });
        if active.is_empty() {
            rt.disarm_background();
        }
        any
    })
}

/// A non-blocking collective in flight; `wait` gives the result vector back.
/// Dropping it waits for it.
pub struct CollRequest<'u, T: bytemuck::Pod + Send> {
    comm: Comm<'u>,
    state: Rc<RefCell<Started>>,
    done: bool,
    _t: std::marker::PhantomData<T>,
}

impl<'u, T: bytemuck::Pod + Send> CollRequest<'u, T> {
    fn take(&mut self) -> (Result<()>, Vec<T>) {
        self.done = true;
        match self.state.borrow_mut().result.take().expect("finished") {
            Ok(out) => (Ok(()), out.into_pod_vec().unwrap_or_default()),
            Err(e) => (Err(e), Vec::new()),
        }
    }

    /// Waits for completion (MPI_Wait); returns the result vector.
    pub fn wait(mut self) -> (Result<()>, Vec<T>) {
        if let Err(e) = finish(self.comm.u, &self.state) {
            return (Err(e), Vec::new());
        }
        self.take()
    }

    /// Completes the request if it is done (MPI_Test); otherwise gives it back.
    pub fn test(mut self) -> std::result::Result<(Result<()>, Vec<T>), Self> {
        if self.state.borrow().result.is_none() {
            let Ok(mut rt) = self.comm.u.engine() else {
                return Err(self);
            };
            rt.progress();
            self.state.borrow_mut().advance(&mut rt, false);
        }
        if self.state.borrow().result.is_some() {
            Ok(self.take())
        } else {
            Err(self)
        }
    }
}

impl<T: bytemuck::Pod + Send> Drop for CollRequest<'_, T> {
    fn drop(&mut self) {
        if !self.done {
            let _ = finish(self.comm.u, &self.state);
        }
    }
}

impl<'u> Comm<'u> {
    /// Starts `sched` on `input` and `output` and registers it with the background task.
    pub(crate) fn start_schedule(
        &self,
        sched: impl Into<Rc<Schedule>>,
        input: Buffer,
        output: Buffer,
        op: Option<(Op, crate::Datatype)>,
        across: bool,
    ) -> Rc<RefCell<Started>> {
        // Planned for the other kind of communicator: the request fails at once.
        let (run, result, members) = match self.sched_members(across) {
            Ok(m) => (Some(Running::new(sched, input, output, op)), None, m),
            Err(e) => (None, Some(Err(e)), self.d.group.shared_members()),
        };
        let tag = self.next_coll_tag();
        self.launch(Started {
            run,
            members,
            ctx: self.coll_ctx(),
            tag,
            result,
            then: None,
        })
    }

    /// Starts a chain: `first` with `tag`, then whatever `then` says (MPI_Comm_idup), on
    /// this communicator's collective context among `members` (job ranks).
    pub(crate) fn start_chain(&self, first: Link, then: Then, members: Rc<[Rank]>) -> Rc<RefCell<Started>> {
        self.launch(Started {
            run: Some(Running::new(first.sched, first.input, first.output, first.op)),
            members,
            ctx: self.coll_ctx(),
            tag: first.tag,
            result: None,
            then: Some(then),
        })
    }

    /// Registers a started schedule with the background task and takes its first step.
    /// Started from a callback the engine runs, it fails at once ([`Error::Busy`]).
    fn launch(&self, mut started: Started) -> Rc<RefCell<Started>> {
        let mut rt = match self.u.engine() {
            Ok(rt) => rt,
            Err(e) => {
                started.run = None;
                started.result = Some(Err(e));
                return Rc::new(RefCell::new(started));
            }
        };
        let state = Rc::new(RefCell::new(started));
        // Start the first step now; the rest advances with the job.
        state.borrow_mut().advance(&mut rt, false);
        self.u.active.borrow_mut().push(Rc::downgrade(&state));
        rt.arm_background();
        state
    }

    fn start<T: bytemuck::Pod + Send>(
        &self,
        sched: Schedule,
        input: Vec<T>,
        output: Vec<T>,
        op: Option<(Op, crate::Datatype)>,
    ) -> CollRequest<'u, T> {
        let state = self.start_schedule(
            sched,
            Buffer::owned_pod(input),
            Buffer::owned_pod(output),
            op,
            false,
        );
        CollRequest {
            comm: self.clone(),
            state,
            done: false,
            _t: std::marker::PhantomData,
        }
    }

    /// Starts a barrier (MPI_Ibarrier).
    pub fn ibarrier(&self) -> CollRequest<'u, u8> {
        self.start(self.barrier_schedule(), Vec::new(), Vec::new(), None)
    }

    /// Starts a broadcast of `buf` from `root` (MPI_Ibcast); every rank passes a
    /// vector of the same length and gets the root's back.
    pub fn ibcast<T: bytemuck::Pod + Send>(&self, buf: Vec<T>, root: Rank) -> Result<CollRequest<'u, T>> {
        self.check_root(root)?;
        let n = std::mem::size_of_val(buf.as_slice());
        Ok(self.start(self.bcast_schedule(root, OUTPUT, n), Vec::new(), buf, None))
    }

    /// Starts an allreduce of `send` (MPI_Iallreduce); the result has its length.
    pub fn iallreduce<T: Equivalence + Send>(&self, send: Vec<T>, op: &Op) -> Result<CollRequest<'u, T>> {
        let opdt = self.reduction::<T>(op)?;
        let n = std::mem::size_of_val(send.as_slice());
        let elem = std::mem::size_of::<T>();
        let s = self.allreduce_schedule(OUTPUT, OUTPUT, n, elem, op.is_commutative());
        Ok(self.start(s, Vec::new(), send, opdt))
    }

    /// Starts a reduce to `root` (MPI_Ireduce); the result is empty except at the root.
    pub fn ireduce<T: Equivalence + Send>(
        &self,
        send: Vec<T>,
        op: &Op,
        root: Rank,
    ) -> Result<CollRequest<'u, T>> {
        self.check_root(root)?;
        let opdt = self.reduction::<T>(op)?;
        let n = std::mem::size_of_val(send.as_slice());
        let (input, output, src) = if self.rank() == root {
            (Vec::new(), send, OUTPUT)
        } else {
            (send, Vec::new(), INPUT)
        };
        let s = self.reduce_schedule(root, src, OUTPUT, n, op.is_commutative());
        Ok(self.start(s, input, output, opdt))
    }

    /// Starts an allgather (MPI_Iallgather): every rank's `send` in rank order.
    pub fn iallgather<T: bytemuck::Pod + Send>(&self, send: Vec<T>) -> CollRequest<'u, T> {
        let n = std::mem::size_of_val(send.as_slice());
        let out = vec![T::zeroed(); send.len() * self.size() as usize];
        self.start(self.allgather_schedule(Some(INPUT), OUTPUT, n), send, out, None)
    }

    /// Starts an alltoall (MPI_Ialltoall): block j of `send` goes to rank j.
    pub fn ialltoall<T: bytemuck::Pod + Send>(&self, send: Vec<T>) -> CollRequest<'u, T> {
        let n = std::mem::size_of_val(send.as_slice()) / self.size() as usize;
        let out = vec![T::zeroed(); send.len()];
        self.start(self.alltoall_schedule(Some(INPUT), n), send, out, None)
    }
}
