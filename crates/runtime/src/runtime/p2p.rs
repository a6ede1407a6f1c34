//! Point-to-point calls of the runtime: posting sends and receives, completing them
//! (test, wait, block_until) and probes. The event loop they drive is in `runtime.rs`.

use std::time::Instant;

use proto::limits::IMMEDIATE_MAX;
use proto::{Failure, LaneId, Rank, ReqId, Status};
use transport::{Buffer, Link, LinkError, TakenNow};

use super::sleep::Idle;
use super::{Completion, Error, Runtime};
use crate::clock;
use crate::requests::Req;

/// Looks at the one lane of [`Runtime::recv_small_now`] between full progress passes
/// (other lanes, timers, wire-up): a look is a load or two, a pass about a hundred
/// nanoseconds on a small node.
const RECV_NOW_PASS_EVERY: u32 = 64;
/// Looks between two readings of the clock by [`Runtime::recv_small_now`].
const RECV_NOW_CLOCK_EVERY: u32 = 16 * RECV_NOW_PASS_EVERY;

impl Runtime {
    pub fn isend(&mut self, buf: Buffer, dest: Rank, ctx: u32, tag: i32, sync: bool) -> ReqId {
        let len = buf.len() as u64;
        let packed = !sync && self.coalesce(dest, ctx, tag, buf.slice(0, len));
        let id = self.reqs.insert(Req::new(buf));
        if packed {
            self.finish(id, Ok(self.sent_status()));
        } else {
            // Where the bytes lie, should the peer read them itself (`transport::shm::cma`), and how
            // busy the lane is where that decides it.
            let traffic = self
                .ep
                .traffic_lane(dest, len)
                .and_then(|lane| self.lanes.get_mut(lane))
                .map_or(proto::Traffic::default(), |l| proto::Traffic {
                    backlog: l.link.backlog(),
                    peer_sending: !l.link.quiet(),
                });
            let origin = self.reqs.get(id).map(|r| proto::Origin {
                at: r.buf.slice(0, len).as_ptr() as u64,
                traffic,
            });
            let sent = self.ep.post_send(id, dest, ctx, tag, len, sync, origin);
            if let Some(r) = self.reqs.get_mut(id) {
                r.sent = sent;
            }
        }
        self.drive_outputs();
        id
    }

    /// Sends the small messages waiting for coalescing (`proto`'s `coalesce.rs`).
    fn flush_batches(&mut self) {
        if self.ep.is_coalescing() {
            self.ep.flush_batches();
            self.drive_outputs();
        }
    }

    /// Offers a small message to a WAN peer for coalescing (`proto`'s `coalesce.rs`):
    /// true when it was packed, and its send is complete. Reads the clock only for a
    /// peer that coalesces.
    #[inline]
    fn coalesce(&mut self, dest: Rank, ctx: u32, tag: i32, data: &[u8]) -> bool {
        data.len() <= proto::COALESCE_MESSAGE_MAX
            && self.ep.coalesces_to(dest)
            && self.ep.coalesce(dest, ctx, tag, data, clock::now())
    }

    /// A blocking send of a small message written to the socket at once, without a
    /// request, a buffer handle or the engine's output queue: the latency-critical path.
    /// `None` when the message must take the general path ([`Runtime::isend`]).
    #[inline]
    pub fn send_small_now(
        &mut self,
        data: &[u8],
        dest: Rank,
        ctx: u32,
        tag: i32,
    ) -> Option<Result<(), Error>> {
        if data.len() > IMMEDIATE_MAX {
            return None;
        }
        if self.coalesce(dest, ctx, tag, data) {
            // A blocking send: the application may compute next, and nothing would
            // send the batch until it calls in again.
            self.flush_batches();
            return Some(Ok(()));
        }
        let (lane, header) = self.ep.send_eager_now(dest, ctx, tag, data.len() as u64)?;
        let result = match self.lanes.get_mut(lane) {
            Some(l) => l.link.send_copy(&header, data),
            None => Err(LinkError::Closed),
        };
        Some(result.map_err(|e| self.small_send_failed(lane, dest, e)))
    }

    #[cold]
    #[inline(never)]
    fn small_send_failed(&mut self, lane: LaneId, dest: Rank, e: LinkError) -> Error {
        self.lane_down(lane, e);
        let cause = self.ep.peer_failure(dest).unwrap_or("its connection failed");
        Error::Failed(Failure::PeerFailed {
            rank: dest,
            cause: cause.to_string(),
        })
    }

    /// A blocking receive of a small message from `src`, taken straight off the lane
    /// its eager frames come on into `dst`, without a request, a posted receive or the
    /// engine's buffers: the receiving half of the latency-critical path. It waits on
    /// that lane alone, with a full progress pass every [`RECV_NOW_PASS_EVERY`] looks, for
    /// `PONTOON_SPIN_US` at most.
    /// `None` when the receive must take the general path ([`Runtime::irecv`]); nothing
    /// was taken then, and whatever was looked at is handed to the engine. With threads
    /// sharing the rank, it also gives up once `alone` says another thread waits to
    /// call in (asked at each full pass).
    pub fn recv_small_now(
        &mut self,
        dst: &mut [u8],
        src: Rank,
        ctx: u32,
        tag: i32,
        alone: impl Fn() -> bool,
    ) -> Option<Status> {
        // Requests in flight (and non-blocking collectives) want every pass; ranks that
        // share CPUs must yield between passes, or sleep at once (PONTOON_SPIN_US=0),
        // which the general path does.
        if dst.len() > IMMEDIATE_MAX
            || !self.reqs.is_empty()
            || self.background.armed
            || self.passes.yield_when_idle
            || self.cfg.spin.is_zero()
        {
            return None;
        }
        self.flush_batches();
        let (mut looks, mut spin_until) = (0u32, None);
        let capacity = dst.len() as u64;
        let mut awaited = self.ep.await_now(src, ctx, tag, capacity)?;
        loop {
            let lane = awaited.lane;
            let link = &mut self.lanes.get_mut(lane)?.link;
            // Spinning: a look costs a load or two until something comes, so the
            // message is seen within a few nanoseconds of its arrival.
            let taken = if link.quiet() {
                std::hint::spin_loop();
                None
            } else {
                match link.take_match_now(|env| awaited.admits(env), dst) {
                    Ok(TakenNow::Nothing) => None,
                    Ok(TakenNow::Taken { env, more }) => Some((self.ep.took_now(&awaited, &env), more)),
                    Ok(TakenNow::Other) | Err(_) => return self.leave_to_general_path(lane),
                }
            };
            if let Some((status, more)) = taken {
                if more {
                    // Frames read with this one: handed to the engine now, or they would
                    // wait in the lane's staging for a readiness its socket never signals.
                    self.service_link(lane, true);
                } else {
                    self.acknowledge(lane);
                }
                self.drive_outputs();
                return Some(status);
            }
            looks += 1;
            if looks.is_multiple_of(RECV_NOW_PASS_EVERY) {
                // Busy for PONTOON_SPIN_US (the clock first read after a few passes, as
                // a message usually comes sooner), then the general path, which sleeps.
                if looks.is_multiple_of(RECV_NOW_CLOCK_EVERY) {
                    let now = Instant::now();
                    if now >= *spin_until.get_or_insert(now + self.cfg.spin) {
                        return None;
                    }
                }
                self.progress();
                if !alone() {
                    return None;
                }
                awaited = self.ep.await_now(src, ctx, tag, capacity)?;
            }
        }
    }

    /// Hands what the lane has to the engine (a frame looked at and left must not wait
    /// for a readiness its socket will not signal again), for the general path.
    fn leave_to_general_path<T>(&mut self, lane: LaneId) -> Option<T> {
        self.service_link(lane, true);
        None
    }

    pub fn irecv(&mut self, buf: Buffer, src: i32, ctx: u32, tag: i32) -> ReqId {
        let cap = buf.len() as u64;
        let id = self.reqs.insert(Req::new(buf));
        self.ep.post_recv(id, src, ctx, tag, cap);
        self.drive_outputs();
        id
    }

    /// Takes the result of a finished request (its buffer is released).
    pub fn test(&mut self, id: ReqId) -> Result<Option<(Completion, Buffer)>, Error> {
        if self.reqs.get(id).is_none() {
            return Err(Error::BadRequest);
        }
        if !self.is_done(id) {
            self.progress();
        }
        if !self.is_done(id) {
            return Ok(None);
        }
        Ok(Some(self.take_finished(id)))
    }

    /// Removes a request that `is_done` and returns its result and buffer.
    fn take_finished(&mut self, id: ReqId) -> (Completion, Buffer) {
        let r = self.reqs.remove(id).expect("a finished request is in the table");
        let c = r
            .result
            .expect("a finished request has its result")
            .map_err(Error::Failed);
        (c, r.buf)
    }

    pub fn is_done(&self, id: ReqId) -> bool {
        self.reqs
            .get(id)
            .is_some_and(|r| r.result.is_some() && !r.cancelling)
    }

    /// Blocks until one of `ids` finished; returns its index.
    pub fn wait_any(&mut self, ids: &[ReqId]) -> Result<usize, Error> {
        self.block_until(|rt| rt.finished_among(ids))
    }

    /// What [`Runtime::wait_any`] waits for: the index of a finished request of `ids`
    /// (or that one is no request); `None`: none finished yet.
    pub fn finished_among(&self, ids: &[ReqId]) -> Option<Result<usize, Error>> {
        if ids.iter().any(|id| self.reqs.get(*id).is_none()) {
            return Some(Err(Error::BadRequest));
        }
        ids.iter().position(|id| self.is_done(*id)).map(Ok)
    }

    pub fn wait(&mut self, id: ReqId) -> Result<(Completion, Buffer), Error> {
        self.block_until(|rt| rt.finished(id))
    }

    /// What [`Runtime::wait`] waits for: the result of request `id`, taken (or that it
    /// is no request); `None`: it has not finished yet.
    pub fn finished(&mut self, id: ReqId) -> Option<Result<(Completion, Buffer), Error>> {
        if self.reqs.get(id).is_none() {
            return Some(Err(Error::BadRequest));
        }
        self.is_done(id).then(|| Ok(self.take_finished(id)))
    }

    /// Cancels a receive that has not matched yet: true if it was (then it is gone).
    /// A send asks its receiver to withdraw the message: the request completes once
    /// the answer came, its status saying whether it was cancelled (false here).
    pub fn cancel(&mut self, id: ReqId) -> bool {
        let Some(r) = self.reqs.get_mut(id) else {
            return false;
        };
        if let Some(sent) = r.sent.take() {
            r.cancelling = true;
            self.ep.cancel_send(id, sent);
            self.drive_outputs();
            return false;
        }
        let hit = self.ep.cancel_recv(id);
        if hit {
            self.reqs.remove(id);
        }
        hit
    }

    /// Non-blocking probe: (source, tag, bytes) of a matching message that arrived.
    pub fn iprobe(&mut self, src: i32, ctx: u32, tag: i32) -> Option<(Rank, i32, u64)> {
        self.progress();
        self.ep.probe(src, ctx, tag)
    }

    /// Blocking probe (MPI_Probe).
    pub fn probe(&mut self, src: i32, ctx: u32, tag: i32) -> Result<(Rank, i32, u64), Error> {
        self.block_until(|rt| rt.probed(src, ctx, tag))
    }

    /// What a blocking probe waits for: (source, tag, bytes) of a matching message that
    /// arrived, or the failure of the rank it names; `None`: neither yet.
    pub fn probed(&self, src: i32, ctx: u32, tag: i32) -> Option<Result<(Rank, i32, u64), Error>> {
        if let Some(hit) = self.ep.probe(src, ctx, tag) {
            return Some(Ok(hit));
        }
        let cause = (src >= 0).then(|| self.ep.peer_failure(src as Rank)).flatten()?;
        Some(Err(Error::Failed(Failure::PeerFailed {
            rank: src as Rank,
            cause: cause.to_string(),
        })))
    }

    /// Non-blocking matched probe (MPI_Improbe): (source, tag, bytes, message id) of a
    /// message taken out of matching for [`Runtime::irecv_claimed`].
    pub fn improbe(&mut self, src: i32, ctx: u32, tag: i32) -> Option<(Rank, i32, u64, u64)> {
        self.progress();
        self.ep.mprobe(src, ctx, tag)
    }

    /// Blocking matched probe (MPI_Mprobe).
    pub fn mprobe(&mut self, src: i32, ctx: u32, tag: i32) -> Result<(Rank, i32, u64, u64), Error> {
        self.block_until(|rt| rt.mprobed(src, ctx, tag))
    }

    /// What a blocking matched probe waits for, as [`Runtime::probed`]: a matching
    /// message is taken out of matching (its id last).
    pub fn mprobed(&mut self, src: i32, ctx: u32, tag: i32) -> Option<Result<(Rank, i32, u64, u64), Error>> {
        match self.probed(src, ctx, tag)? {
            Ok(_) => Some(Ok(self.ep.mprobe(src, ctx, tag).expect("probed just now"))),
            Err(e) => Some(Err(e)),
        }
    }

    /// Receives a message taken by a matched probe into `buf` (MPI_Imrecv).
    pub fn irecv_claimed(&mut self, buf: Buffer, msg: u64) -> Result<ReqId, Error> {
        let cap = buf.len() as u64;
        let id = self.reqs.insert(Req::new(buf));
        if !self.ep.post_recv_claimed(id, msg, cap) {
            self.reqs.remove(id);
            return Err(Error::BadRequest);
        }
        self.drive_outputs();
        Ok(id)
    }

    /// Busy-polls, then sleeps, until `done` says so.
    pub fn block_until<T>(&mut self, mut done: impl FnMut(&mut Runtime) -> Option<T>) -> T {
        let mut idle = Idle::default();
        loop {
            match self.wait_pass(&mut idle, &mut done) {
                Pass::Done(v) => return v,
                Pass::Again => {}
                Pass::Idle => self.idle_sleep(&mut idle, &mut |_| false),
            }
        }
    }

    /// One pass of a blocking wait until `done` says so, for a caller that lets go of
    /// the runtime between passes (a thread of several, under `MPI_THREAD_MULTIPLE`):
    /// what [`Runtime::block_until`] does, but the sleep is the caller's.
    #[inline]
    pub fn wait_pass<T>(
        &mut self,
        idle: &mut Idle,
        done: &mut impl FnMut(&mut Runtime) -> Option<T>,
    ) -> Pass<T> {
        if idle.first_pass() {
            // Nothing more comes from this rank until the wait ends: its batches go now.
            self.flush_batches();
            if let Some(v) = done(self) {
                return Pass::Done(v);
            }
        }
        let progressed = self.progress();
        if let Some(v) = done(self) {
            return Pass::Done(v);
        }
        if progressed {
            return Pass::Again;
        }
        if idle.spun_out(self.cfg.spin) {
            return Pass::Idle;
        }
        if self.passes.yield_when_idle {
            std::thread::yield_now();
        }
        Pass::Again
    }
}

/// How a pass of a blocking wait ended ([`Runtime::wait_pass`]).
pub enum Pass<T> {
    Done(T),
    /// Nothing yet: pass again.
    Again,
    /// Nothing for the busy-polling time (`PONTOON_SPIN_US`): time to sleep
    /// ([`Runtime::ready_for_idle_sleep`]).
    Idle,
}
