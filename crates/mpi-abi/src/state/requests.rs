//! What a request handle stands for, as the request table keeps it.

use pontoon::lent::Pending;
use pontoon::Datatype;

use crate::abi::*;
use crate::fail::{Fail, Res};

/// What a request handle stands for.
pub enum ReqEntry {
    /// Finished when started (MPI_PROC_NULL).
    Done(MPI_Status),
    /// Completed where it stands by a status query (MPI_Request_get_status): its data is
    /// in place and its last step ran; Wait, Test or free takes it.
    Ended { status: MPI_Status, result: Res },
    P2p {
        op: Pending<'static>,
        comm: MPI_Comm,
        /// For a receive with a non-dense datatype: where the packed bytes go at the end.
        unpack: Option<Unpack>,
    },
    Coll {
        op: pontoon::CollPending<'static>,
        comm: MPI_Comm,
        finish: Option<Finish>,
    },
    /// MPI_Isendrecv: a receive and a send completing as one; the status is the receive's.
    Pair {
        recv: Box<ReqEntry>,
        send: Box<ReqEntry>,
    },
    /// MPI_Buffer_iflush / MPI_Comm_iflush_buffer: the buffered sends it waits for.
    Flush(Vec<Buffered>),
    /// MPI_Ibsend: complete at once, unless the program cancels it; then it completes
    /// with the send's answer.
    Bsend { send: Buffered, cancelled: bool },
    /// MPI_Send_init / MPI_Recv_init: `restart` makes the operation MPI_Start runs;
    /// `active` is the one in flight.
    Persistent {
        restart: Box<dyn Fn() -> Result<ReqEntry, Fail>>,
        active: Option<Box<ReqEntry>>,
    },
    /// MPI_Grequest_start: the program's own operation.
    Generalized(super::generalized::Generalized),
}

/// The last step of a collective whose results went to a packed copy: unpacking it.
pub type Finish = Box<dyn FnOnce() -> Res>;

/// A receive into a packed copy, to be unpacked into the program's memory.
pub struct Unpack {
    pub tmp: Vec<u8>,
    pub buf: crate::buffers::RecvBuf,
    pub count: u64,
    pub dt: Datatype,
}

/// A buffered send in flight: its buffer's accounting and, for MPI_Ibsend, its request
/// share it (each only looks at the result, so either may come first).
pub type Buffered = std::rc::Rc<std::cell::RefCell<Pending<'static>>>;

/// Whose buffer a buffered send counts against: the process's, or a communicator's.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum BufferOwner {
    Process,
    Comm(MPI_Comm),
}

/// A buffer attached for buffered sends (`bsend.rs`).
#[derive(Default)]
pub struct Attached {
    /// The address of the program's buffer and its size; `None`: nothing attached. The
    /// messages are packed into memory of the library's own: the buffer is only counted.
    pub buffer: Option<(usize, usize)>,
    /// Sends in flight with the bytes each holds of the buffer.
    pub in_flight: Vec<(Buffered, usize)>,
}
