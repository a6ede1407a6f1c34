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

use std::cell::RefCell;

use runtime::{Buffer, Runtime};
pub use runtime::{Failure, Rank, ANY_SOURCE, ANY_TAG};

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
    #[error("{0}")]
    Runtime(String),
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

fn status(c: runtime::Completion) -> Result<Status> {
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
    finalized: std::cell::Cell<bool>,
}

/// Starts pontoon: under `pontoon run`, joins the job; otherwise runs as a single rank.
pub fn init() -> Result<Universe> {
    let rt = Runtime::init()?;
    Ok(Universe {
        rt: RefCell::new(rt),
        finalized: std::cell::Cell::new(false),
    })
}

impl Universe {
    /// All ranks of the job.
    pub fn world(&self) -> Comm<'_> {
        Comm { u: self, ctx: 0 }
    }

    /// Seconds since an arbitrary point in the past (MPI_Wtime).
    pub fn wtime(&self) -> f64 {
        self.rt.borrow().wtime()
    }

    /// (connected peers, connection attempts abandoned to a simultaneous one), for diagnostics.
    pub fn wireup_stats(&self) -> (usize, usize) {
        self.rt.borrow().wireup_stats()
    }

    /// Addresses rank `rank` listens on (its endpoint card), for diagnostics.
    pub fn peer_addresses(&self, rank: Rank) -> Vec<std::net::SocketAddr> {
        self.rt.borrow().peer_addresses(rank)
    }

    /// Rank `rank`'s endpoint card (interfaces, addresses, node, site), for diagnostics.
    pub fn card(&self, rank: Rank) -> Option<runtime::EndpointCard> {
        self.rt.borrow().card(rank).cloned()
    }

    /// The connection carrying traffic with `peer`, once connected, for diagnostics.
    pub fn path(&self, peer: Rank) -> Option<runtime::PathInfo> {
        self.rt.borrow().path(peer).copied()
    }

    /// Progresses until this rank's connection attempts (further lanes included) are over,
    /// or `limit` passes.
    pub fn settle_wireup(&self, limit: std::time::Duration) {
        self.rt.borrow_mut().settle_wireup(limit)
    }

    /// Every lane to `peer` (the first connection, then one per further interface pair).
    pub fn lanes(&self, peer: Rank) -> Vec<runtime::PathInfo> {
        self.rt.borrow().lanes(peer).to_vec()
    }

    /// Every connection attempt this rank made to `peer`, for diagnostics.
    pub fn attempts(&self, peer: Rank) -> Vec<runtime::Attempt> {
        self.rt.borrow().attempts(peer).to_vec()
    }

    /// Every rank publishes `value` under its `key`; returns all ranks' keys once every
    /// rank has (through the launcher, so it works between ranks that cannot reach each
    /// other). Collective; call it when no transfer is pending.
    pub fn exchange(&self, key: &str, value: &[u8]) -> Result<std::collections::HashMap<String, Vec<u8>>> {
        self.rt.borrow_mut().exchange(key, value).map_err(Error::from)
    }

    /// Ends the job for this rank: waits until every rank got here.
    pub fn finalize(self) -> Result<()> {
        self.finalized.set(true);
        self.rt.borrow_mut().finalize().map_err(Error::from)
    }

    /// Ends the whole job with `code` (MPI_Abort).
    pub fn abort(&self, code: i32, message: &str) -> ! {
        self.rt.borrow_mut().abort(code, message)
    }
}

impl Drop for Universe {
    fn drop(&mut self) {
        if !self.finalized.get() {
            let _ = self.rt.borrow_mut().finalize();
        }
    }
}

/// A communicator (for now `COMM_WORLD`).
#[derive(Clone, Copy)]
pub struct Comm<'u> {
    u: &'u Universe,
    ctx: u32,
}

fn src(source: Option<Rank>) -> i32 {
    source.map_or(ANY_SOURCE, |r| r as i32)
}

impl<'u> Comm<'u> {
    pub fn rank(&self) -> Rank {
        self.u.rt.borrow().rank()
    }
    pub fn size(&self) -> u32 {
        self.u.rt.borrow().size()
    }

    fn blocking_send(&self, data: &[u8], dest: Rank, tag: i32, sync: bool) -> Result<()> {
        let mut rt = self.u.rt.borrow_mut();
        runtime::mem::lend(data, |buf| {
            let id = rt.isend(buf.clone(), dest, self.ctx, tag, sync);
            rt.wait(id)
                .map_err(Error::from)
                .and_then(|(c, _)| c.map(|_| ()).map_err(Error::from))
        })
    }

    /// Sends `data` to `dest` (MPI_Send).
    pub fn send<T: Pod>(&self, data: &[T], dest: Rank, tag: i32) -> Result<()> {
        self.blocking_send(bytemuck::cast_slice(data), dest, tag, false)
    }

    /// Sends and returns only once the receiver has matched the message (MPI_Ssend).
    pub fn ssend<T: Pod>(&self, data: &[T], dest: Rank, tag: i32) -> Result<()> {
        self.blocking_send(bytemuck::cast_slice(data), dest, tag, true)
    }

    /// Receives into `buf` from `source` (`None`: any source) with `tag` (or `ANY_TAG`).
    pub fn recv<T: Pod>(&self, buf: &mut [T], source: Option<Rank>, tag: i32) -> Result<Status> {
        let mut rt = self.u.rt.borrow_mut();
        runtime::mem::lend_mut(bytemuck::cast_slice_mut(buf), |b| {
            let id = rt.irecv(b.clone(), src(source), self.ctx, tag);
            let (c, _) = rt.wait(id)?;
            status(c)
        })
    }

    /// Sends and receives at once, without deadlock between pairs (MPI_Sendrecv).
    pub fn sendrecv<S: Pod, R: Pod>(
        &self,
        data: &[S],
        dest: Rank,
        send_tag: i32,
        buf: &mut [R],
        source: Option<Rank>,
        recv_tag: i32,
    ) -> Result<Status> {
        let mut rt = self.u.rt.borrow_mut();
        runtime::mem::lend(bytemuck::cast_slice(data), |sb| {
            runtime::mem::lend_mut(bytemuck::cast_slice_mut(buf), |rb| {
                let r = rt.irecv(rb.clone(), src(source), self.ctx, recv_tag);
                let s = rt.isend(sb.clone(), dest, self.ctx, send_tag, false);
                let sent = rt.wait(s);
                let got = rt.wait(r);
                sent?.0?;
                status(got?.0)
            })
        })
    }

    /// Starts a send of `data`; the vector comes back from [`Request::wait`].
    pub fn isend<T: Pod + Send>(&self, data: Vec<T>, dest: Rank, tag: i32) -> Request<'u, T> {
        let id = self
            .u
            .rt
            .borrow_mut()
            .isend(Buffer::owned_pod(data), dest, self.ctx, tag, false);
        Request {
            u: self.u,
            id,
            _t: std::marker::PhantomData,
        }
    }

    /// Starts a receive into `buf`; the filled vector comes back from [`Request::wait`].
    pub fn irecv<T: Pod + Send>(&self, buf: Vec<T>, source: Option<Rank>, tag: i32) -> Request<'u, T> {
        let id = self
            .u
            .rt
            .borrow_mut()
            .irecv(Buffer::owned_pod(buf), src(source), self.ctx, tag);
        Request {
            u: self.u,
            id,
            _t: std::marker::PhantomData,
        }
    }

    /// Waits for a matching message without receiving it (MPI_Probe).
    pub fn probe(&self, source: Option<Rank>, tag: i32) -> Result<Status> {
        let (source, tag, bytes) = self.u.rt.borrow_mut().probe(src(source), self.ctx, tag)?;
        Ok(Status { source, tag, bytes })
    }

    /// Checks for a matching message without receiving it (MPI_Iprobe).
    pub fn iprobe(&self, source: Option<Rank>, tag: i32) -> Option<Status> {
        let (source, tag, bytes) = self.u.rt.borrow_mut().iprobe(src(source), self.ctx, tag)?;
        Some(Status { source, tag, bytes })
    }
}

/// A non-blocking operation in flight. Dropping it waits for it (the engine owns its buffer).
pub struct Request<'u, T: Pod + Send> {
    u: &'u Universe,
    id: runtime::ReqId,
    _t: std::marker::PhantomData<T>,
}

fn take_vec<T: Pod + Send>(b: Buffer) -> Vec<T> {
    b.into_pod_vec().unwrap_or_default()
}

impl<T: Pod + Send> Request<'_, T> {
    /// Waits for completion; returns the status and the buffer.
    pub fn wait(self) -> (Result<Status>, Vec<T>) {
        let me = std::mem::ManuallyDrop::new(self);
        match me.u.rt.borrow_mut().wait(me.id) {
            Ok((c, b)) => (status(c), take_vec(b)),
            Err(e) => (Err(e.into()), Vec::new()),
        }
    }

    /// Completes the request if it is done (MPI_Test); otherwise gives it back.
    pub fn test(self) -> std::result::Result<(Result<Status>, Vec<T>), Self> {
        let done = self.u.rt.borrow_mut().test(self.id);
        match done {
            Ok(Some((c, b))) => {
                std::mem::forget(self);
                Ok((status(c), take_vec(b)))
            }
            Ok(None) => Err(self),
            Err(e) => {
                std::mem::forget(self);
                Ok((Err(e.into()), Vec::new()))
            }
        }
    }
}

impl<T: Pod + Send> Drop for Request<'_, T> {
    fn drop(&mut self) {
        let _ = self.u.rt.borrow_mut().wait(self.id);
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
    let idx = first.u.rt.borrow_mut().wait_any(&ids).unwrap_or(0);
    let r = reqs.remove(idx);
    let (st, v) = r.wait();
    (idx, st, v, reqs)
}

/// Tests whether all requests are done (MPI_Testall) without completing any.
pub fn test_all<T: Pod + Send>(reqs: &[Request<'_, T>]) -> bool {
    reqs.iter().all(|r| {
        let mut rt = r.u.rt.borrow_mut();
        rt.progress();
        rt.is_done(r.id)
    })
}
