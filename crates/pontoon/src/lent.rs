//! Non-blocking point-to-point on memory lent by a foreign caller (the C ABI): the
//! caller keeps the memory valid and leaves it alone until the operation completes, as
//! MPI requires of it, so nothing is copied. [`Buffer::from_raw`] makes such a buffer.

pub use runtime::Buffer;

use crate::comm::Comm;
use crate::{status, Error, Rank, Result, Status};

/// A send or receive in flight on a [`Buffer`]. Unlike [`crate::Request`] it can be
/// tested and waited for through `&mut`, and dropping it leaves the operation running
/// (MPI_Request_free): the engine keeps its own handle on the buffer.
pub struct Pending<'u> {
    comm: Comm<'u>,
    id: runtime::ReqId,
    state: State,
}

/// A message taken by a matched probe; received once, on the communicator it was
/// probed on.
#[derive(Debug)]
pub struct Message {
    id: u64,
}

enum State {
    Running,
    Done(Result<Status>),
    /// Taken by [`Pending::test`]/[`Pending::wait`].
    Taken,
    Cancelled,
}

impl<'u> Comm<'u> {
    /// Starts a send of `buf` (MPI_Isend; `sync`: MPI_Issend).
    pub fn isend_lent(&self, buf: Buffer, dest: Rank, tag: i32, sync: bool) -> Result<Pending<'u>> {
        let dest = self.world_rank(dest)?;
        let id = self.u.engine()?.isend(buf, dest, self.p2p_ctx(), tag, sync);
        Ok(self.pending(id))
    }

    /// Starts a receive into `buf` (MPI_Irecv); `source` `None`: any source.
    pub fn irecv_lent(&self, buf: Buffer, source: Option<Rank>, tag: i32) -> Result<Pending<'u>> {
        let from = self.world_src(source)?;
        let id = self.u.engine()?.irecv(buf, from, self.p2p_ctx(), tag);
        Ok(self.pending(id))
    }

    /// Matched probe (MPI_Improbe): a fitting message, taken out of matching so that
    /// only [`Comm::irecv_message`] can receive it.
    pub fn improbe(&self, source: Option<Rank>, tag: i32) -> Result<Option<(Status, Message)>> {
        let from = self.world_src(source)?;
        let hit = self.u.engine()?.improbe(from, self.p2p_ctx(), tag);
        Ok(hit.map(|h| self.message(h)))
    }

    /// Blocking matched probe (MPI_Mprobe).
    pub fn mprobe(&self, source: Option<Rank>, tag: i32) -> Result<(Status, Message)> {
        let from = self.world_src(source)?;
        let hit = self.u.wait_until(|rt| rt.mprobed(from, self.p2p_ctx(), tag))??;
        Ok(self.message(hit))
    }

    fn message(&self, (source, tag, bytes, id): (Rank, i32, u64, u64)) -> (Status, Message) {
        (self.local_status(Status { source, tag, bytes }), Message { id })
    }

    /// Receives a message a matched probe took into `buf` (MPI_Imrecv).
    pub fn irecv_message(&self, buf: Buffer, msg: Message) -> Result<Pending<'u>> {
        let id = self.u.engine()?.irecv_claimed(buf, msg.id)?;
        Ok(self.pending(id))
    }

    fn pending(&self, id: runtime::ReqId) -> Pending<'u> {
        Pending {
            comm: self.clone(),
            id,
            state: State::Running,
        }
    }
}

impl Pending<'_> {
    fn settle(&mut self, c: runtime::Completion) {
        if matches!(c, Ok(st) if st.cancelled) {
            self.state = State::Cancelled;
            return;
        }
        let st = status(c).map(|s| self.comm.local_status(s));
        self.state = State::Done(st);
    }

    /// Progresses once and says whether the operation is over (its result not taken yet
    /// by this call).
    pub fn is_done(&mut self) -> bool {
        if let State::Running = self.state {
            let r = match self.comm.u.engine() {
                Ok(mut rt) => rt.test(self.id),
                Err(_) => return false,
            };
            match r {
                Ok(Some((c, _))) => self.settle(c),
                Ok(None) => return false,
                Err(e) => self.state = State::Done(Err(e.into())),
            }
        }
        true
    }

    /// The result if the operation is over (MPI_Test). `Ok(None)` in the status slot
    /// means the receive was cancelled.
    pub fn test(&mut self) -> Option<Result<Option<Status>>> {
        if !self.is_done() {
            return None;
        }
        Some(self.take())
    }

    /// The result if the operation is over, leaving it to be taken later
    /// (MPI_Request_get_status).
    pub fn peek(&mut self) -> Option<Result<Option<Status>>> {
        if !self.is_done() {
            return None;
        }
        Some(match &self.state {
            State::Done(r) => r.clone().map(Some),
            State::Cancelled => Ok(None),
            State::Taken | State::Running => Err(Error::Arg("the request was already completed".into())),
        })
    }

    /// Waits for the result (MPI_Wait); `Ok(None)`: the receive was cancelled.
    pub fn wait(&mut self) -> Result<Option<Status>> {
        if let State::Running = self.state {
            match self.comm.u.wait(self.id) {
                Ok((c, _)) => self.settle(c),
                Err(Error::Busy) => return Err(Error::Busy),
                Err(e) => self.state = State::Done(Err(e)),
            }
        }
        self.take()
    }

    fn take(&mut self) -> Result<Option<Status>> {
        match std::mem::replace(&mut self.state, State::Taken) {
            State::Done(r) => r.map(Some),
            State::Cancelled => Ok(None),
            State::Taken | State::Running => Err(Error::Arg("the request was already completed".into())),
        }
    }

    /// Cancels the operation if nothing matched it yet (MPI_Cancel): a receive at once
    /// (true if it was); a send once its receiver answered, which its completion says
    /// (`Ok(None)` from [`Pending::wait`], as a cancelled receive's).
    pub fn cancel(&mut self) -> bool {
        if !matches!(self.state, State::Running) {
            return false;
        }
        let hit = self.comm.u.engine().is_ok_and(|mut rt| rt.cancel(self.id));
        if hit {
            self.state = State::Cancelled;
        }
        hit
    }

    /// The engine's id, for waiting on several at once.
    fn running_id(&self) -> Option<runtime::ReqId> {
        matches!(self.state, State::Running).then_some(self.id)
    }
}

/// Blocks until one of `ops` is over (MPI_Waitany); returns its index, or `None`
/// when `ops` is empty.
pub fn wait_any_lent(ops: &mut [&mut Pending<'_>]) -> Result<Option<usize>> {
    if let Some(i) = ops.iter().position(|p| p.running_id().is_none()) {
        return Ok(Some(i));
    }
    let Some(first) = ops.first() else {
        return Ok(None);
    };
    let ids: Vec<runtime::ReqId> = ops.iter().filter_map(|p| p.running_id()).collect();
    let i = first.comm.u.wait_any(&ids)?;
    ops[i].is_done();
    Ok(Some(i))
}
