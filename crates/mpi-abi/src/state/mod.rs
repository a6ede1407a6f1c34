//! The library's state between MPI_Init and MPI_Finalize: the running universe and
//! the tables behind handles. Every table borrow is short (copy the entry out, let
//! go), because user callbacks run inside MPI calls may call MPI again.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};

use pontoon::{Comm, Datatype, Group, Keyval, Op, Universe};

use crate::abi::*;
use crate::fail::{fail, Fail};
use crate::handles::{Kind, Slab};
mod generalized;
mod messages;
mod predefined;
mod requests;
mod threads;
mod typeattrs;

pub use generalized::{never_completed, CancelFn, FreeFn, Generalized, QueryFn};
pub use messages::MessageEntry;
pub use predefined::{predefined, predefined_name, predefined_op, PREDEFINED, PREDEFINED_RENAMED};
pub use requests::{Attached, BufferOwner, Buffered, Finish, ReqEntry, Unpack};
use threads::this_thread;
pub use threads::{
    another_thread_inside, gate, set_thread_level, start_locking, start_progress_thread,
    stop_progress_thread, take_turn, thread_level, MOST_THREADS,
};
pub use typeattrs::{TypeAttr, TypeAttrs, TypeKeyval, TYPE_KEYVAL_BASE};

/// Where the library is in its life (any thread may ask: MPI_Initialized/Finalized).
static PHASE: AtomicU8 = AtomicU8::new(BEFORE);
pub const BEFORE: u8 = 0;
pub const RUNNING: u8 = 1;
pub const AFTER: u8 = 2;

pub fn phase() -> u8 {
    PHASE.load(Ordering::Acquire)
}
pub fn set_phase(p: u8) {
    PHASE.store(p, Ordering::Release)
}

/// The state, for the thread that called MPI_Init (`OWNER`, its pthread handle), and
/// from MPI_THREAD_SERIALIZED on for any thread (`threads.rs`). Globals rather than a
/// thread-local: in a shared library each look at a thread-local is a call to
/// `__tls_get_addr`, on the way of every small message. (A thread started after the
/// owner ended could reuse its handle and pass for it: a program that lets its MPI
/// thread end and calls MPI from another is wrong anyway.)
static STATE: AtomicPtr<Mpi> = AtomicPtr::new(std::ptr::null_mut());
static OWNER: AtomicUsize = AtomicUsize::new(0);

/// The state if this thread may use it: the thread that made it, or at
/// MPI_THREAD_SERIALIZED any thread.
#[inline]
fn this_threads_state() -> Option<&'static Mpi> {
    let me = this_thread();
    if OWNER.load(Ordering::Relaxed) != me
        && thread_level() < MPI_THREAD_SERIALIZED
        && !threads::is_progress_thread(me)
    {
        return None;
    }
    // SAFETY: null or the state `Mpi::install` leaked ('static, never freed). It is used
    // by one thread at a time: the one that installed it or the progress thread
    // (checked above; with a progress thread every call holds the library's lock); at
    // MPI_THREAD_SERIALIZED whichever thread calls MPI, which the program makes sure is
    // one at a time and orders with its own synchronization (the standard's contract for
    // that level); at MPI_THREAD_MULTIPLE the thread that holds the library's lock
    // (`threads.rs`: every call takes it, and a blocking call that lets go of it while
    // it waits touches no state until it has it again). So no two threads ever touch it
    // at once.
    unsafe { STATE.load(Ordering::Acquire).as_ref() }
}

pub struct CommEntry {
    pub comm: Comm<'static>,
    pub errhandler: Handle,
}

pub struct TypeEntry {
    pub dt: Datatype,
    pub committed: bool,
    /// How the program made it (MPI_Type_get_envelope/contents).
    pub contents: Rc<Contents>,
    pub name: String,
}

/// The constructor and arguments of a derived datatype, as MPI_Type_get_contents
/// gives them back. The datatypes it was made of are kept here with their own records,
/// so the program may free them and still decode this one.
pub struct Contents {
    pub combiner: std::os::raw::c_int,
    pub ints: Vec<std::os::raw::c_int>,
    pub aints: Vec<MPI_Aint>,
    /// The counts and displacements of an MPI-4 large-count (`_c`) constructor, which
    /// keeps them here instead of in `ints` and `aints`.
    pub counts: Vec<MPI_Count>,
    pub types: Vec<TypeArg>,
}

/// A datatype argument of a constructor: its handle then, the datatype, and for a
/// derived one its own record.
#[derive(Clone)]
pub struct TypeArg {
    pub handle: MPI_Datatype,
    pub dt: Datatype,
    pub contents: Option<Rc<Contents>>,
}

/// A user error handler: `void f(MPI_Comm *, int *, ...)`.
pub use crate::callbacks::ErrhandlerFn;

pub struct Mpi {
    pub u: &'static Universe,
    /// Slot 0 is COMM_WORLD, slot 1 COMM_SELF (their handles are the fixed values).
    pub comms: RefCell<Slab<CommEntry>>,
    /// Communicator handle by context id (to name the communicator to C callbacks).
    pub comm_by_context: RefCell<HashMap<u32, Handle>>,
    pub groups: RefCell<Slab<Group>>,
    /// Predefined datatypes by `handle - DATATYPE_FIRST` (`None`: not supported here).
    pub predefined_types: Vec<Option<Datatype>>,
    /// The size of each predefined datatype whose elements lie back to back (`None`:
    /// one with gaps, like MPI_DOUBLE_INT, or none): what the immediate paths
    /// (`immediate.rs`) take without looking at the type itself.
    pub dense_sizes: Vec<Option<u64>>,
    pub types: RefCell<Slab<TypeEntry>>,
    /// Datatype handle by the datatype's identity (to name it to C user functions).
    pub type_by_identity: RefCell<HashMap<usize, Handle>>,
    pub ops: RefCell<Slab<Op>>,
    pub reqs: RefCell<Slab<ReqEntry>>,
    /// Requests freed by the program while still running: finished by later calls.
    pub detached: RefCell<Vec<ReqEntry>>,
    pub errhandlers: RefCell<Slab<ErrhandlerFn>>,
    pub keyvals: RefCell<HashMap<i32, Keyval>>,
    /// Keyvals the program freed while values set with them remained: those values may
    /// still be read and deleted through them (MPI-4.1 §7.7.2).
    pub retired_keyvals: RefCell<HashMap<i32, Keyval>>,
    /// Datatype keyvals and attributes (`typeattr`).
    pub type_attrs: RefCell<TypeAttrs>,
    pub messages: RefCell<Slab<MessageEntry>>,
    /// Buffers attached for buffered sends (`bsend.rs`).
    pub bsend_buffers: RefCell<HashMap<BufferOwner, Attached>>,
}

const WORLD_SLOT: usize = 0;
const SELF_SLOT: usize = 1;
/// What `Slab` gives slots 0 and 1 of the communicator table.
const fn created_comm(slot: usize) -> Handle {
    1 << 30 | (Kind::Comm as usize) << 24 | slot
}

impl Mpi {
    pub fn install(u: &'static Universe) -> &'static Mpi {
        let mut comms = Slab::new(Kind::Comm);
        for c in [u.world(), u.self_comm()] {
            comms.insert(CommEntry {
                comm: c,
                errhandler: MPI_ERRORS_ARE_FATAL,
            });
        }
        let comm_by_context = HashMap::from([(0, MPI_COMM_WORLD), (1, MPI_COMM_SELF)]);
        let predefined_types: Vec<Option<Datatype>> = (0..DATATYPE_SPAN)
            .map(|i| predefined(DATATYPE_FIRST + i))
            .collect();
        let dense_sizes = predefined_types
            .iter()
            .map(|t| t.as_ref().filter(|t| t.is_dense()).map(Datatype::size))
            .collect();
        let type_by_identity = predefined_types
            .iter()
            .enumerate()
            .filter_map(|(i, t)| Some((t.as_ref()?.identity(), DATATYPE_FIRST + i)))
            .collect();
        let mpi: &'static Mpi = Box::leak(Box::new(Mpi {
            u,
            comms: RefCell::new(comms),
            comm_by_context: RefCell::new(comm_by_context),
            groups: RefCell::new(Slab::new(Kind::Group)),
            predefined_types,
            dense_sizes,
            types: RefCell::new(Slab::new(Kind::Datatype)),
            type_by_identity: RefCell::new(type_by_identity),
            ops: RefCell::new(Slab::new(Kind::Op)),
            reqs: RefCell::new(Slab::new(Kind::Request)),
            detached: RefCell::new(Vec::new()),
            errhandlers: RefCell::new(Slab::new(Kind::Errhandler)),
            keyvals: RefCell::new(HashMap::new()),
            retired_keyvals: RefCell::new(HashMap::new()),
            type_attrs: RefCell::default(),
            messages: RefCell::new(Slab::new(Kind::Message)),
            bsend_buffers: RefCell::new(HashMap::new()),
        }));
        OWNER.store(this_thread(), Ordering::Relaxed);
        STATE.store(std::ptr::from_ref(mpi).cast_mut(), Ordering::Release);
        mpi
    }

    /// The table key of a communicator handle. The raw keys of COMM_WORLD and
    /// COMM_SELF are not handles (so a forged one cannot free them).
    #[inline]
    pub(crate) fn comm_key(h: Handle) -> Handle {
        match h {
            MPI_COMM_WORLD => created_comm(WORLD_SLOT),
            MPI_COMM_SELF => created_comm(SELF_SLOT),
            k if k == created_comm(WORLD_SLOT) || k == created_comm(SELF_SLOT) => MPI_COMM_NULL,
            other => other,
        }
    }

    /// The handle C sees for a table key.
    fn comm_handle(key: Handle) -> Handle {
        match key {
            k if k == created_comm(WORLD_SLOT) => MPI_COMM_WORLD,
            k if k == created_comm(SELF_SLOT) => MPI_COMM_SELF,
            other => other,
        }
    }

    pub fn comm(&self, h: MPI_Comm) -> Result<Comm<'static>, Fail> {
        match self.comms.borrow().get(Self::comm_key(h)) {
            Some(e) => Ok(e.comm.clone()),
            None if h == MPI_COMM_NULL => fail(MPI_ERR_COMM, "the communicator is MPI_COMM_NULL"),
            None => fail(
                MPI_ERR_COMM,
                format!("{h:#x} is not a communicator (freed already?)"),
            ),
        }
    }

    pub fn comm_errhandler(&self, h: MPI_Comm) -> Option<Handle> {
        self.comms.borrow().get(Self::comm_key(h)).map(|e| e.errhandler)
    }

    pub fn set_comm_errhandler(&self, h: MPI_Comm, errh: Handle) -> Result<(), Fail> {
        match self.comms.borrow_mut().get_mut(Self::comm_key(h)) {
            Some(e) => {
                e.errhandler = errh;
                Ok(())
            }
            None => fail(MPI_ERR_COMM, format!("{h:#x} is not a communicator")),
        }
    }

    /// Gives `comm` a handle, inheriting `errhandler`.
    pub fn add_comm(&self, comm: Comm<'static>, errhandler: Handle) -> Result<MPI_Comm, Fail> {
        let ctx = comm.context_id();
        let key = self
            .comms
            .borrow_mut()
            .insert(CommEntry { comm, errhandler })
            .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many communicators"))?;
        let h = Self::comm_handle(key);
        self.comm_by_context.borrow_mut().insert(ctx, h);
        Ok(h)
    }

    /// Takes a created communicator out of the table (MPI_Comm_free).
    pub fn remove_comm(&self, h: MPI_Comm) -> Result<Comm<'static>, Fail> {
        if h == MPI_COMM_WORLD || h == MPI_COMM_SELF {
            return fail(MPI_ERR_COMM, "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed");
        }
        let e = self.comms.borrow_mut().remove(h);
        let e = e.ok_or_else(|| Fail::new(MPI_ERR_COMM, format!("{h:#x} is not a communicator")))?;
        self.comm_by_context.borrow_mut().remove(&e.comm.context_id());
        Ok(e.comm)
    }

    /// The handle of a communicator the library knows, by its context id.
    pub fn handle_of_comm(&self, c: &Comm<'_>) -> MPI_Comm {
        self.comm_by_context
            .borrow()
            .get(&c.context_id())
            .copied()
            .unwrap_or(MPI_COMM_NULL)
    }

    /// Any datatype, committed or not (queries, constructors).
    pub fn datatype(&self, h: MPI_Datatype) -> Result<Datatype, Fail> {
        self.type_entry(h, false)
    }

    /// A datatype fit for communication: committed.
    pub fn committed(&self, h: MPI_Datatype) -> Result<Datatype, Fail> {
        self.type_entry(h, true)
    }

    fn type_entry(&self, h: MPI_Datatype, must_be_committed: bool) -> Result<Datatype, Fail> {
        if let Some(i) = h.checked_sub(DATATYPE_FIRST).filter(|i| *i < DATATYPE_SPAN) {
            return match &self.predefined_types[i] {
                Some(t) => Ok(t.clone()),
                None if h == MPI_DATATYPE_NULL => fail(MPI_ERR_TYPE, "the datatype is MPI_DATATYPE_NULL"),
                None => fail(
                    MPI_ERR_TYPE,
                    format!(
                        "datatype {} is not supported by pontoon (no such C type on this platform)",
                        predefined_name(h).unwrap_or("?")
                    ),
                ),
            };
        }
        match self.types.borrow().get(h) {
            Some(e) if must_be_committed && !e.committed => fail(
                MPI_ERR_TYPE,
                "the datatype is not committed: call MPI_Type_commit before communicating with it",
            ),
            Some(e) => Ok(e.dt.clone()),
            None => fail(MPI_ERR_TYPE, format!("{h:#x} is not a datatype (freed already?)")),
        }
    }

    /// Gives a created datatype a handle.
    pub fn add_type(&self, dt: Datatype, contents: Rc<Contents>) -> Result<MPI_Datatype, Fail> {
        let id = dt.identity();
        let h = self
            .types
            .borrow_mut()
            .insert(TypeEntry {
                dt,
                committed: false,
                contents,
                name: String::new(),
            })
            .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many datatypes"))?;
        self.type_by_identity.borrow_mut().insert(id, h);
        Ok(h)
    }

    pub fn handle_of_type(&self, dt: &Datatype) -> MPI_Datatype {
        self.type_by_identity
            .borrow()
            .get(&dt.identity())
            .copied()
            .unwrap_or(MPI_DATATYPE_NULL)
    }

    pub fn op(&self, h: MPI_Op) -> Result<Op, Fail> {
        if let Some(op) = predefined_op(h) {
            return Ok(op);
        }
        match self.ops.borrow().get(h) {
            Some(op) => Ok(op.clone()),
            None if h == MPI_OP_NULL => fail(MPI_ERR_OP, "the operation is MPI_OP_NULL"),
            None => fail(MPI_ERR_OP, format!("{h:#x} is not an operation (freed already?)")),
        }
    }

    pub fn group(&self, h: MPI_Group) -> Result<Group, Fail> {
        if h == MPI_GROUP_EMPTY {
            return Ok(Group::new(Vec::new(), self.u.world().rank()));
        }
        match self.groups.borrow().get(h) {
            Some(g) => Ok(g.clone()),
            None if h == MPI_GROUP_NULL => fail(MPI_ERR_GROUP, "the group is MPI_GROUP_NULL"),
            None => fail(MPI_ERR_GROUP, format!("{h:#x} is not a group (freed already?)")),
        }
    }

    pub fn add_group(&self, g: Group) -> Result<MPI_Group, Fail> {
        self.groups
            .borrow_mut()
            .insert(g)
            .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many groups"))
    }
}

/// The library state, for a call made on the thread that initialized MPI.
pub fn mpi() -> Result<&'static Mpi, Fail> {
    if let Some(m) = this_threads_state() {
        if phase() == RUNNING {
            return Ok(m);
        }
    }
    match phase() {
        BEFORE => fail(MPI_ERR_OTHER, "MPI is not initialized: call MPI_Init first"),
        AFTER => fail(MPI_ERR_OTHER, "MPI was finalized already"),
        _ => fail(
            MPI_ERR_OTHER,
            "MPI called from a thread other than the one that initialized it, at \
             MPI_THREAD_FUNNELED: ask MPI_Init_thread for MPI_THREAD_SERIALIZED to call MPI \
             from any thread (one at a time)",
        ),
    }
}

/// The state if MPI is running on this thread (error reporting must not fail).
#[inline]
pub fn try_mpi() -> Option<&'static Mpi> {
    this_threads_state().filter(|_| phase() == RUNNING)
}
