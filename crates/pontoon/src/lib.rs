//! pontoon: message passing across clusters, as a Rust API.
//!
//! ```no_run
//! let universe = pontoon::init()?;
//! let world = universe.world();
//! let next = (world.rank() + 1) % world.size();
//! world.send(&[world.rank()], next, 0)?;
//! # Ok::<(), pontoon::Error>(())
//! ```
//! Blocking calls borrow their buffers; non-blocking calls take ownership of a
//! `Vec` and give it back when the request completes.

#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::rc::Rc;

use runtime::{Buffer, Runtime};
pub use runtime::{Failure, Rank, ANY_SOURCE, ANY_TAG};

pub mod coll;
mod comm;
pub mod datatype;
mod described;
pub mod diag;
#[doc(hidden)]
pub mod for_c;
pub mod group;
pub mod lent;
pub mod op;
mod threads;

pub use coll::{CollPending, CollRequest, Input, InterColl, Plan};
pub use comm::attr::{CopyFn, DeleteFn, Keyval};
pub use comm::inter::InterRoot;
pub use comm::topo;
pub use comm::{Comm, MAX_CONTEXTS, UNDEFINED};
pub use datatype::{Basic, Datatype, Equivalence, PairValue};
pub use described::{Data, DataMut};
pub use group::{Compare, Group};
pub use op::Op;
pub use threads::Gate;
pub use topo::{Cart, Neighbors, Topology, Weights};

/// Plain-old-data element types that can be sent as bytes.
pub use bytemuck::Pod;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A peer failed or could not be reached (the message says which and why).
    #[error(transparent)]
    Peer(#[from] Failure),
    /// The message was longer than the receive buffer; the first `count` bytes were kept.
    #[error("message truncated: the message from rank {source_rank} (tag {tag}) is longer than the receive buffer of {count} bytes; post a larger buffer, or probe first")]
    Truncated { source_rank: Rank, tag: i32, count: u64 },
    /// A bad argument: the message says which and why.
    #[error("{0}")]
    Arg(String),
    #[error("{0}")]
    Runtime(String),
    /// A callback of the program (an attribute's copy or delete function) returned the
    /// error `code`; the call that ran it fails with that code.
    #[error("the program's {what} callback returned error {code}")]
    Callback { what: &'static str, code: i32 },
    /// A call that needs the engine, made from a callback the engine is running (a
    /// user-defined reduction): it would re-enter the engine, so it is refused.
    #[error("this call needs pontoon's engine, which is busy running the callback that made it (a user-defined reduction, or another function pontoon calls while it progresses); make the call outside the callback")]
    Busy,
}

impl From<runtime::Error> for Error {
    fn from(e: runtime::Error) -> Self {
        match e {
            runtime::Error::Failed(f) => Error::Peer(f),
            other => Error::Runtime(other.to_string()),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// What a receive got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub source: Rank,
    pub tag: i32,
    /// Bytes received.
    pub bytes: u64,
}

impl Status {
    /// Number of whole elements of `T` received.
    pub fn count<T>(&self) -> u64 {
        self.bytes / std::mem::size_of::<T>().max(1) as u64
    }
}

pub(crate) fn status(c: runtime::Completion) -> Result<Status> {
    let st = c?;
    if st.truncated {
        return Err(Error::Truncated {
            source_rank: st.source,
            tag: st.tag,
            count: st.count,
        });
    }
    Ok(Status {
        source: st.source,
        tag: st.tag,
        bytes: st.count,
    })
}

/// The running job. Finalizes when dropped if [`Universe::finalize`] was not called.
pub struct Universe {
    rt: RefCell<Runtime>,
    /// This process's rank in the job, and when the job started here (MPI_Wtime's
    /// origin): answered without the engine, which a callback may find busy.
    rank: Rank,
    started: std::time::Instant,
    finalized: std::cell::Cell<bool>,
    /// Shared with the rounds of MPI_Comm_idup, which the background task runs.
    contexts: Rc<RefCell<comm::ContextPool>>,
    tuning: coll::algos::Tuning,
    world: Rc<comm::CommData>,
    me: Rc<comm::CommData>,
    /// Non-blocking collectives in flight (advanced by the runtime's background task).
    active: coll::Active,
    /// The program's threads, when several share the universe (`threads.rs`).
    threads: threads::Threads,
}

/// Starts pontoon: under `pontoon run`, joins the job; otherwise runs as a single rank.
pub fn init() -> Result<Universe> {
    init_threaded(false)
}

/// [`init`] for a universe that several threads will share at once through a
/// [`Gate`] ([`Universe::share`]): the node's collective area is refused, as its
/// collectives run in one order at every member.
pub fn init_threaded(several_threads: bool) -> Result<Universe> {
    let mut rt = Runtime::init_threaded(several_threads)?;
    let active = coll::Active::default();
    rt.set_background(Some(coll::background(active.clone())));
    let (rank, size) = (rt.rank(), rt.size());
    let tuning = coll::algos::Tuning::from_config(&rt.cfg);
    let world = comm::new_comm_data(
        Group::new((0..size).collect(), rank),
        0,
        size,
        "MPI_COMM_WORLD",
        true,
    );
    let me = comm::new_comm_data(Group::new(vec![rank], rank), 1, size, "MPI_COMM_SELF", true);
    Ok(Universe {
        started: rt.started(),
        rank,
        rt: RefCell::new(rt),
        finalized: std::cell::Cell::new(false),
        contexts: Rc::new(RefCell::new(comm::ContextPool::new())),
        tuning,
        world: Rc::new(world),
        me: Rc::new(me),
        active,
        threads: threads::Threads::default(),
    })
}

impl Universe {
    /// All ranks of the job (MPI_COMM_WORLD).
    pub fn world(&self) -> Comm<'_> {
        Comm {
            u: self,
            d: self.world.clone(),
        }
    }

    /// This process alone (MPI_COMM_SELF).
    pub fn self_comm(&self) -> Comm<'_> {
        Comm {
            u: self,
            d: self.me.clone(),
        }
    }

    pub(crate) fn world_size(&self) -> u32 {
        self.world.group.size()
    }

    /// Context ids in use at this process (COMM_WORLD and COMM_SELF included).
    pub fn contexts_in_use(&self) -> usize {
        self.contexts.borrow().in_use()
    }

    /// Seconds since an arbitrary point in the past (MPI_Wtime).
    pub fn wtime(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// This process's rank in the job (in MPI_COMM_WORLD).
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// The engine, for a call that needs it; [`Error::Busy`] when it is running already
    /// (an MPI call from a callback it runs must not re-enter it).
    #[inline]
    pub(crate) fn engine(&self) -> Result<std::cell::RefMut<'_, Runtime>> {
        self.rt.try_borrow_mut().map_err(|_| Error::Busy)
    }

    /// The engine to look at (diagnostics); `None` while it is busy as for [`Self::engine`].
    pub(crate) fn engine_ref(&self) -> Option<std::cell::Ref<'_, Runtime>> {
        self.rt.try_borrow().ok()
    }

    /// What wire-up did and what each lane is: diagnostics, not MPI.
    pub fn diag(&self) -> diag::Diag<'_> {
        diag::Diag { universe: self }
    }

    /// Moves whatever can move without blocking (a C caller's MPI_Test* with nothing
    /// finished yet).
    pub fn progress(&self) {
        if let Ok(mut rt) = self.engine() {
            rt.progress();
        }
    }

    /// The node rank `rank` runs on (ranks of one node share memory), from its card.
    pub fn node(&self, rank: Rank) -> Option<u64> {
        self.engine_ref()?.node(rank)
    }

    /// Whether any rank has a site: without, no communicator spans sites.
    pub(crate) fn sited(&self) -> bool {
        self.engine_ref().is_some_and(|rt| rt.sited())
    }

    /// Rank `rank`'s site: declared (`PONTOON_SITE`, a hostfile's `site=`), or inferred
    /// from the endpoint cards (`net::sites`); `None`: the job is one site.
    pub fn site(&self, rank: Rank) -> Option<String> {
        self.engine_ref()?.site(rank).map(str::to_string)
    }

    /// Every rank publishes `value` under `topic`; returns all ranks' values, by rank,
    /// once every rank has (through the launcher's coordinator or the PMI process
    /// manager, so it works between ranks that cannot reach each other). Collective;
    /// call it when no transfer is pending.
    pub fn exchange(&self, topic: &str, value: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.engine()?.exchange(topic, value).map_err(Error::from)
    }

    /// Ends the job for this rank: deletes the attributes of COMM_SELF, then of
    /// COMM_WORLD (their delete callbacks run), and waits until every rank got here.
    /// Later calls do nothing.
    pub fn finalize(&self) -> Result<()> {
        if self.finalized.get() {
            return Ok(());
        }
        drop(self.engine()?);
        self.finalized.set(true);
        let attrs = comm::attr::delete_all(&self.self_comm()).and(comm::attr::delete_all(&self.world()));
        self.engine()?.finalize().map_err(Error::from)?;
        attrs
    }

    /// Ends the whole job with `code` (MPI_Abort).
    /// From a callback the engine runs, the engine cannot tell the peers: the process
    /// ends with `code`, and the launcher ends the job when it sees a rank die.
    pub fn abort(&self, code: i32, message: &str) -> ! {
        match self.engine() {
            Ok(mut rt) => rt.abort(code, message),
            Err(_) => {
                eprintln!(
                    "pontoon: rank {}: abort (code {code}) inside a callback: {message}",
                    self.rank
                );
                std::process::exit(code)
            }
        }
    }
}

impl Drop for Universe {
    fn drop(&mut self) {
        if !self.finalized.get() {
            let _ = comm::attr::delete_all(&self.self_comm());
            let _ = comm::attr::delete_all(&self.world());
            if let Ok(mut rt) = self.engine() {
                let _ = rt.finalize();
            }
        }
    }
}

/// A non-blocking operation in flight. Dropping it waits for it (the engine owns its buffer).
pub struct Request<'u, T: Pod + Send> {
    comm: Comm<'u>,
    id: runtime::ReqId,
    done: bool,
    _t: std::marker::PhantomData<T>,
}

fn take_vec<T: Pod + Send>(b: Buffer) -> Vec<T> {
    b.into_pod_vec().unwrap_or_default()
}

impl<'u, T: Pod + Send> Request<'u, T> {
    pub(crate) fn new(c: &Comm<'u>, id: runtime::ReqId) -> Self {
        Request {
            comm: c.clone(),
            id,
            done: false,
            _t: std::marker::PhantomData,
        }
    }

    fn finish(&mut self, c: runtime::Completion, b: Buffer) -> (Result<Status>, Vec<T>) {
        self.done = true;
        let st = status(c).map(|mut s| {
            s.source = self.comm.comm_rank_of(s.source);
            s
        });
        (st, take_vec(b))
    }

    /// Waits for completion; returns the status and the buffer.
    pub fn wait(mut self) -> (Result<Status>, Vec<T>) {
        match self.comm.u.wait(self.id) {
            Ok((c, b)) => self.finish(c, b),
            Err(Error::Busy) => (Err(Error::Busy), Vec::new()),
            Err(e) => {
                self.done = true;
                (Err(e), Vec::new())
            }
        }
    }

    /// Completes the request if it is done (MPI_Test); otherwise gives it back.
    pub fn test(mut self) -> std::result::Result<(Result<Status>, Vec<T>), Self> {
        let r = match self.comm.u.engine() {
            Ok(mut rt) => rt.test(self.id),
            Err(_) => return Err(self),
        };
        match r {
            Ok(Some((c, b))) => Ok(self.finish(c, b)),
            Ok(None) => Err(self),
            Err(e) => {
                self.done = true;
                Ok((Err(e.into()), Vec::new()))
            }
        }
    }
}

impl<T: Pod + Send> Drop for Request<'_, T> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.comm.u.wait(self.id);
        }
    }
}

/// Waits for all requests (MPI_Waitall), in order.
pub fn wait_all<T: Pod + Send>(reqs: Vec<Request<'_, T>>) -> Vec<(Result<Status>, Vec<T>)> {
    reqs.into_iter().map(Request::wait).collect()
}

/// Waits until one request completes (MPI_Waitany): its index, status and buffer;
/// the others are returned still pending.
pub fn wait_any<'u, T: Pod + Send>(
    mut reqs: Vec<Request<'u, T>>,
) -> (usize, Result<Status>, Vec<T>, Vec<Request<'u, T>>) {
    let Some(first) = reqs.first() else {
        return (0, Err(Error::Runtime("no request".into())), Vec::new(), reqs);
    };
    let ids: Vec<runtime::ReqId> = reqs.iter().map(|r| r.id).collect();
    let idx = match first.comm.u.wait_any(&ids) {
        Ok(i) => i,
        Err(Error::Busy) => return (0, Err(Error::Busy), Vec::new(), reqs),
        Err(_) => 0,
    };
    let r = reqs.remove(idx);
    let (st, v) = r.wait();
    (idx, st, v, reqs)
}

/// Tests whether all requests are done (MPI_Testall) without completing any.
pub fn test_all<T: Pod + Send>(reqs: &[Request<'_, T>]) -> bool {
    reqs.iter().all(|r| {
        r.comm.u.engine().is_ok_and(|mut rt| {
            rt.progress();
            rt.is_done(r.id)
        })
    })
}
