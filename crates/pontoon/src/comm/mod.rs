//! Communicators: a group of processes with its own matching contexts.
//!
//! Context id `i` gives a communicator two wire contexts: `2i` for its
//! point-to-point traffic and `2i + 1` for its collectives, so a user's
//! `ANY_TAG` receive never takes a collective's message. Ids are allocated
//! collectively (see [`ContextPool`]): the members agree on the lowest id free at
//! all of them, so communicators created concurrently by disjoint sets of
//! processes never collide at any process.

pub(crate) mod attr;
pub(crate) mod inter;
pub mod topo;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use runtime::Buffer;

use crate::comm::attr::{Attr, Keyval};
use crate::group::{Compare, Group};
use crate::{status, Error, Rank, Request, Result, Status, Universe, ANY_SOURCE};

/// `MPI_UNDEFINED` as a split color: the process joins no new communicator.
pub const UNDEFINED: i32 = -32766;

/// Context ids a process can take part in at once.
pub const MAX_CONTEXTS: usize = 4096;
const WORDS: usize = MAX_CONTEXTS / 64;

/// Which context ids are free at this process.
pub(crate) struct ContextPool {
    free: [u64; WORDS],
}

impl ContextPool {
    pub(crate) fn new() -> ContextPool {
        let mut free = [u64::MAX; WORDS];
        // 0: COMM_WORLD, 1: COMM_SELF.
        free[0] &= !0b11;
        ContextPool { free }
    }
    pub(crate) fn free_mask(&self) -> Vec<u64> {
        self.free.to_vec()
    }
    /// The lowest id set in `agreed` (the AND of every member's mask), now taken here.
    pub(crate) fn take_lowest(&mut self, agreed: &[u64]) -> Option<u32> {
        let (w, word) = agreed.iter().enumerate().find(|(_, w)| **w != 0)?;
        let id = w as u32 * 64 + word.trailing_zeros();
        self.take(id);
        Some(id)
    }
    pub(crate) fn is_free(&self, id: u32) -> bool {
        (id as usize) < MAX_CONTEXTS && self.free[id as usize / 64] & (1 << (id % 64)) != 0
    }
    /// The lowest free id from `start` on; `MAX_CONTEXTS` when there is none.
    pub(crate) fn lowest_free_from(&self, start: u32) -> u32 {
        (start..MAX_CONTEXTS as u32)
            .find(|&id| self.is_free(id))
            .unwrap_or(MAX_CONTEXTS as u32)
    }
    pub(crate) fn take(&mut self, id: u32) {
        self.free[id as usize / 64] &= !(1 << (id % 64));
    }
    pub(crate) fn release(&mut self, id: u32) {
        self.free[id as usize / 64] |= 1 << (id % 64);
    }
    pub(crate) fn in_use(&self) -> usize {
        self.free.iter().map(|w| w.count_zeros() as usize).sum()
    }
}

/// A collective's tag, reserved ahead of its start ([`Comm::reserve_coll_tag`]).
#[derive(Clone, Copy, Debug)]
pub struct CollTag(i32);

pub(crate) struct CommData {
    pub(crate) group: Group,
    /// Communicator rank of each job rank (`u32::MAX`: not a member).
    by_world: Vec<u32>,
    pub(crate) id: u32,
    coll_seq: Cell<u32>,
    /// The tag the next collective takes instead of a fresh one: a persistent
    /// collective's, reserved at its init ([`Comm::with_coll_tag`]).
    preset_tag: Cell<Option<i32>>,
    /// High bits of this communicator's collective tags: 0, except for the stand-in
    /// that MPI_Comm_create_group runs its agreement on (see [`Comm::create_group`]).
    tag_space: u32,
    name: RefCell<String>,
    pub(crate) attrs: RefCell<BTreeMap<u32, Attr>>,
    /// COMM_WORLD and COMM_SELF live as long as the universe.
    predefined: bool,
    /// Schedules of recent blocking collectives, most recently used last.
    pub(crate) schedules: RefCell<
        Vec<(
            crate::coll::schedule::SchedKey,
            Rc<crate::coll::schedule::Schedule>,
        )>,
    >,
    /// The sites of its ranks when it spans two or more (found on first use).
    pub(crate) sites: std::cell::OnceCell<Option<Rc<crate::coll::hier::Sites>>>,
    /// Its members on the node's collective area, when they are exactly one node's
    /// ranks (`coll/node.rs`; found on first use).
    pub(crate) node: std::cell::OnceCell<Option<Rc<runtime::NodeMembers>>>,
    /// Its process topology, if it has one (`topo.rs`).
    pub(crate) topology: RefCell<Option<Rc<crate::comm::topo::Topology>>>,
    /// The other group of an intercommunicator (`inter.rs`).
    pub(crate) remote: Option<Remote>,
}

/// The other side of an intercommunicator.
pub(crate) struct Remote {
    pub(crate) group: Group,
    /// Remote rank of each job rank (`u32::MAX`: not in the remote group).
    pub(crate) by_world: Vec<u32>,
    /// This side's own members as an intracommunicator.
    pub(crate) local: Rc<CommData>,
    /// The job ranks of this group then of the remote group: whom the collectives'
    /// schedules name.
    pub(crate) both: Rc<[Rank]>,
}

/// A communicator. Cloning gives another handle to the same communicator; it is
/// freed (attribute delete callbacks run, its context id returns to the pool) by
/// [`Comm::free`] or when the last handle is dropped.
#[derive(Clone)]
pub struct Comm<'u> {
    pub(crate) u: &'u Universe,
    pub(crate) d: Rc<CommData>,
}

/// Every context id is taken at some member.
pub(crate) fn no_context_left() -> Error {
    Error::Arg(format!(
        "no communicator context left: {MAX_CONTEXTS} exist at once on some member; free \
         communicators that are no longer used"
    ))
}

/// The rank in `group` of each job rank (`u32::MAX`: not a member).
pub(crate) fn ranks_by_world(group: &Group, world_size: u32) -> Vec<u32> {
    let mut by_world = vec![u32::MAX; world_size as usize];
    for (i, w) in group.members().iter().enumerate() {
        by_world[*w as usize] = i as u32;
    }
    by_world
}

pub(crate) fn new_comm_data(
    group: Group,
    id: u32,
    world_size: u32,
    name: &str,
    predefined: bool,
) -> CommData {
    CommData {
        by_world: ranks_by_world(&group, world_size),
        group,
        id,
        coll_seq: Cell::new(0),
        preset_tag: Cell::new(None),
        tag_space: 0,
        name: RefCell::new(name.to_string()),
        attrs: RefCell::new(BTreeMap::new()),
        predefined,
        schedules: RefCell::new(Vec::new()),
        sites: std::cell::OnceCell::new(),
        node: std::cell::OnceCell::new(),
        topology: RefCell::new(None),
        remote: None,
    }
}

fn src(source: Option<Rank>) -> i32 {
    source.map_or(ANY_SOURCE, |r| r as i32)
}

impl<'u> Comm<'u> {
    pub fn rank(&self) -> Rank {
        self.d
            .group
            .rank()
            .expect("a communicator's handle is only given to members")
    }
    pub fn size(&self) -> u32 {
        self.d.group.size()
    }
    pub fn group(&self) -> Group {
        self.d.group.clone()
    }
    #[inline]
    pub(crate) fn p2p_ctx(&self) -> u32 {
        self.d.id * 2
    }
    pub(crate) fn coll_ctx(&self) -> u32 {
        self.d.id * 2 + 1
    }
    /// A fresh tag for the next collective (all members call collectives in the same order).
    pub(crate) fn next_coll_tag(&self) -> i32 {
        if let Some(t) = self.d.preset_tag.take() {
            return t;
        }
        let t = self.d.coll_seq.get();
        self.d.coll_seq.set(t.wrapping_add(1));
        ((t & 0x3fff_ffff) | self.d.tag_space) as i32
    }
    /// Reserves the tag of a persistent collective at its init (collective, like the
    /// init call): MPI-4 matches persistent collectives in the order of their init
    /// calls, whatever order the members start them in.
    pub fn reserve_coll_tag(&self) -> CollTag {
        CollTag(self.next_coll_tag())
    }
    /// Runs `start`, whose collective (the first it starts) takes `tag` (every start of a
    /// persistent collective: each round's messages come after the last round's, in order).
    pub fn with_coll_tag<R>(&self, tag: CollTag, start: impl FnOnce() -> R) -> R {
        self.d.preset_tag.set(Some(tag.0));
        let r = start();
        self.d.preset_tag.set(None);
        r
    }
    /// The job rank of `r`, a rank that point-to-point calls name: of the remote group
    /// on an intercommunicator.
    #[inline]
    pub(crate) fn world_rank(&self, r: Rank) -> Result<Rank> {
        self.world_rank_now(r).ok_or_else(|| {
            let which = match &self.d.remote {
                Some(_) => "the remote group of this intercommunicator",
                None => "this communicator",
            };
            Error::Arg(format!(
                "rank {r} is not in {which} of {} ranks",
                self.peer_group().size()
            ))
        })
    }
    /// The group point-to-point calls name ranks of: the remote one of an
    /// intercommunicator.
    #[inline]
    pub(crate) fn peer_group(&self) -> &Group {
        self.d
            .remote
            .as_ref()
            .map_or(&self.d.group, |remote| &remote.group)
    }
    /// [`Comm::world_rank`] without the error: the immediate paths take the general
    /// one, which says what is wrong, when `r` is no rank of the communicator.
    #[inline]
    fn world_rank_now(&self, r: Rank) -> Option<Rank> {
        self.peer_group().members().get(r as usize).copied()
    }
    pub(crate) fn world_src(&self, source: Option<Rank>) -> Result<i32> {
        source.map(|r| self.world_rank(r)).transpose().map(src)
    }
    /// The rank by which point-to-point calls name job rank `world` (`u32::MAX`: none).
    pub(crate) fn comm_rank_of(&self, world: Rank) -> Rank {
        let by_world = self.d.remote.as_ref().map_or(&self.d.by_world, |r| &r.by_world);
        by_world.get(world as usize).copied().unwrap_or(u32::MAX)
    }
    #[inline]
    pub(crate) fn local_status(&self, mut st: Status) -> Status {
        st.source = self.comm_rank_of(st.source);
        st
    }
    /// The context id (diagnostics and tests of the allocator).
    pub fn context_id(&self) -> u32 {
        self.d.id
    }
    pub fn universe(&self) -> &'u Universe {
        self.u
    }

    // ---- point to point ------------------------------------------------------

    /// A standard send of a small message on the runtime's immediate path (written to
    /// the lane at once, no request); `None` when it must take the general path
    /// ([`Comm::send`] does both).
    #[inline]
    pub(crate) fn send_now(&self, data: &[u8], dest: Rank, tag: i32) -> Option<Result<()>> {
        let dest = self.world_rank_now(dest)?;
        let done = self
            .u
            .engine()
            .ok()?
            .send_small_now(data, dest, self.p2p_ctx(), tag)?;
        Some(done.map_err(Error::from))
    }

    /// A blocking receive of a small message from `source` on the runtime's immediate
    /// path (taken straight off its lane); `None` when it must take the general path
    /// ([`Comm::recv`] does both).
    #[inline]
    pub(crate) fn recv_now(&self, buf: &mut [u8], source: Rank, tag: i32) -> Option<Status> {
        let from = self.world_rank_now(source)?;
        // Threads sharing the universe: it spins holding the lock, so it gives way to
        // one that waits for it.
        let gate = self.u.threads.gate();
        let alone = || gate.is_none_or(|g| !g.others_waiting());
        let st = self
            .u
            .engine()
            .ok()?
            .recv_small_now(buf, from, self.p2p_ctx(), tag, alone)?;
        // Never truncated: the immediate path takes only a message that fits.
        Some(Status {
            source: self.comm_rank_of(st.source),
            tag: st.tag,
            bytes: st.count,
        })
    }

    fn blocking_send(&self, data: &[u8], dest: Rank, tag: i32, sync: bool) -> Result<()> {
        if !sync {
            if let Some(done) = self.send_now(data, dest, tag) {
                return done;
            }
        }
        let dest = self.world_rank(dest)?;
        runtime::mem::lend(data, |buf| {
            let id = self
                .u
                .engine()?
                .isend(buf.clone(), dest, self.p2p_ctx(), tag, sync);
            let (c, _) = self.u.wait(id)?;
            c.map(|_| ()).map_err(Error::from)
        })
    }

    /// Sends `data` to `dest` (MPI_Send).
    pub fn send<T: bytemuck::Pod>(&self, data: &[T], dest: Rank, tag: i32) -> Result<()> {
        self.blocking_send(bytemuck::cast_slice(data), dest, tag, false)
    }

    /// Sends and returns only once the receiver has matched the message (MPI_Ssend).
    pub fn ssend<T: bytemuck::Pod>(&self, data: &[T], dest: Rank, tag: i32) -> Result<()> {
        self.blocking_send(bytemuck::cast_slice(data), dest, tag, true)
    }

    /// Receives into `buf` from `source` (`None`: any source) with `tag` (or `ANY_TAG`).
    pub fn recv<T: bytemuck::Pod>(&self, buf: &mut [T], source: Option<Rank>, tag: i32) -> Result<Status> {
        if let Some(source) = source {
            if let Some(got) = self.recv_now(bytemuck::cast_slice_mut(buf), source, tag) {
                return Ok(got);
            }
        }
        let from = self.world_src(source)?;
        runtime::mem::lend_mut(bytemuck::cast_slice_mut(buf), |b| {
            let id = self.u.engine()?.irecv(b.clone(), from, self.p2p_ctx(), tag);
            let (c, _) = self.u.wait(id)?;
            status(c).map(|s| self.local_status(s))
        })
    }

    /// Sends and receives at once, without deadlock between pairs (MPI_Sendrecv).
    pub fn sendrecv<S: bytemuck::Pod, R: bytemuck::Pod>(
        &self,
        data: &[S],
        dest: Rank,
        send_tag: i32,
        buf: &mut [R],
        source: Option<Rank>,
        recv_tag: i32,
    ) -> Result<Status> {
        let (to, from) = (self.world_rank(dest)?, self.world_src(source)?);
        let (send, recv) = (bytemuck::cast_slice(data), bytemuck::cast_slice_mut(buf));
        let got = self
            .u
            .swap(self.p2p_ctx(), (send, to, send_tag), (recv, from, recv_tag))?;
        Ok(self.local_status(got))
    }

    /// Starts a send of `data`; the vector comes back from [`Request::wait`].
    pub fn isend<T: bytemuck::Pod + Send>(
        &self,
        data: Vec<T>,
        dest: Rank,
        tag: i32,
    ) -> Result<Request<'u, T>> {
        let dest = self.world_rank(dest)?;
        let id = self
            .u
            .engine()?
            .isend(Buffer::owned_pod(data), dest, self.p2p_ctx(), tag, false);
        Ok(Request::new(self, id))
    }

    /// Starts a receive into `buf`; the filled vector comes back from [`Request::wait`].
    pub fn irecv<T: bytemuck::Pod + Send>(
        &self,
        buf: Vec<T>,
        source: Option<Rank>,
        tag: i32,
    ) -> Result<Request<'u, T>> {
        let from = self.world_src(source)?;
        let id = self
            .u
            .engine()?
            .irecv(Buffer::owned_pod(buf), from, self.p2p_ctx(), tag);
        Ok(Request::new(self, id))
    }

    /// Waits for a matching message without receiving it (MPI_Probe).
    pub fn probe(&self, source: Option<Rank>, tag: i32) -> Result<Status> {
        let from = self.world_src(source)?;
        let (source, tag, bytes) = self.u.wait_until(|rt| rt.probed(from, self.p2p_ctx(), tag))??;
        Ok(self.local_status(Status { source, tag, bytes }))
    }

    /// Checks for a matching message without receiving it (MPI_Iprobe).
    pub fn iprobe(&self, source: Option<Rank>, tag: i32) -> Result<Option<Status>> {
        let from = self.world_src(source)?;
        let hit = self.u.engine()?.iprobe(from, self.p2p_ctx(), tag);
        Ok(hit.map(|(source, tag, bytes)| self.local_status(Status { source, tag, bytes })))
    }

    // ---- creating and freeing ------------------------------------------------

    /// The context ids free at every member (collective).
    pub(crate) fn free_everywhere(&self) -> Result<Vec<u64>> {
        let mine = self.u.contexts.borrow().free_mask();
        let mut agreed = vec![0u64; mine.len()];
        self.allreduce(&mine, &mut agreed, &crate::Op::Band)?;
        Ok(agreed)
    }

    /// `wanted` context ids free at every member of this communicator and of the
    /// group on the other side of `swap` (which gives, at every member here, what that
    /// group sent for `ours`; collective over both).
    pub(crate) fn ids_across(
        &self,
        wanted: usize,
        mut swap: impl FnMut(&[u64]) -> Result<Vec<u64>>,
    ) -> Result<Vec<u32>> {
        if self.u.threads.gate().is_some() {
            return self.agree_in_rounds(wanted, |mine| {
                let mut ours = [0u32; 2];
                self.allreduce(&mine, &mut ours, &crate::Op::Max)?;
                let theirs = swap(&ours.map(u64::from))?;
                Ok([0, 1].map(|i| ours[i].max(theirs[i] as u32)))
            });
        }
        let mask = self.free_everywhere()?;
        let theirs = swap(&mask)?;
        let mut free: Vec<u64> = mask.iter().zip(&theirs).map(|(a, b)| a & b).collect();
        let mut pool = self.u.contexts.borrow_mut();
        let mut ids = Vec::with_capacity(wanted);
        while ids.len() < wanted {
            let Some(id) = pool.take_lowest(&free) else {
                ids.iter().for_each(|&id| pool.release(id));
                return Err(no_context_left());
            };
            free[id as usize / 64] &= !(1 << (id % 64));
            ids.push(id);
        }
        Ok(ids)
    }

    /// Agrees with every member on a context id free at all of them (collective).
    fn agree_on_context(&self) -> Result<u32> {
        if self.u.threads.gate().is_some() {
            let ids = self.agree_in_rounds(1, |mine| {
                let mut max = [0u32; 2];
                self.allreduce(&mine, &mut max, &crate::Op::Max)?;
                Ok(max)
            })?;
            return Ok(ids[0]);
        }
        let agreed = self.free_everywhere()?;
        self.u
            .contexts
            .borrow_mut()
            .take_lowest(&agreed)
            .ok_or_else(no_context_left)
    }

    pub(crate) fn with_members(&self, members: Vec<Rank>, id: u32) -> Comm<'u> {
        let me = self.u.rank();
        let d = new_comm_data(Group::new(members, me), id, self.u.world_size(), "", false);
        Comm {
            u: self.u,
            d: Rc::new(d),
        }
    }

    /// A new communicator with the same members and copied attributes (MPI_Comm_dup).
    pub fn dup(&self) -> Result<Comm<'u>> {
        if self.is_inter() {
            return self.inter_dup();
        }
        let id = self.agree_on_context()?;
        let c = self.with_members(self.d.group.members().to_vec(), id);
        crate::comm::attr::copy_all(self, &c)?;
        // A duplicate keeps the topology (MPI 4.1 §7.4.2).
        c.set_topology(self.topology());
        Ok(c)
    }

    /// Splits by `color` (`UNDEFINED`: join none), ordering each part by `key`, then
    /// by rank here (MPI_Comm_split).
    pub fn split(&self, color: i32, key: i32) -> Result<Option<Comm<'u>>> {
        if color < 0 && color != UNDEFINED {
            return Err(Error::Arg(format!(
                "split color {color} is negative (use UNDEFINED to opt out)"
            )));
        }
        if self.is_inter() {
            return self.inter_split(color, key);
        }
        let mut all = vec![0i32; 2 * self.size() as usize];
        self.allgather(&[color, key], &mut all)?;
        let id = self.agree_on_context()?;
        if color == UNDEFINED {
            self.u.contexts.borrow_mut().release(id);
            return Ok(None);
        }
        let mut part: Vec<(i32, u32)> = (0..self.size())
            .filter(|r| all[2 * *r as usize] == color)
            .map(|r| (all[2 * r as usize + 1], r))
            .collect();
        part.sort();
        let members = part
            .iter()
            .map(|(_, r)| self.d.group.members()[*r as usize])
            .collect();
        Ok(Some(self.with_members(members, id)))
    }

    /// The members that share this process's node, ordered by `key` (then rank): the
    /// node identity on the endpoint cards, the one by which ranks talk over shared
    /// memory (MPI_COMM_TYPE_SHARED). Collective; every member gets its node's part.
    pub fn split_by_node(&self, key: i32) -> Result<Option<Comm<'u>>> {
        // The node's lowest job rank: the same color in both groups of an intercommunicator.
        let node = |r: Rank| self.u.node(r);
        let mine = node(self.u.rank());
        let color = (0..self.u.world_size()).find(|&w| node(w) == mine).unwrap_or(0);
        self.split(color as i32, key)
    }

    /// A communicator of `group`'s members, a subset of this one's; collective over
    /// this communicator; `None` where not a member (MPI_Comm_create).
    pub fn create(&self, group: &Group) -> Result<Option<Comm<'u>>> {
        if self.is_inter() {
            return self.inter_create(group);
        }
        if let Some(outsider) = group
            .members()
            .iter()
            .find(|w| self.comm_rank_of(**w) == u32::MAX)
        {
            return Err(Error::Arg(format!(
                "create: job rank {outsider} of the group is not in this communicator"
            )));
        }
        let id = self.agree_on_context()?;
        if group.rank().is_none() {
            self.u.contexts.borrow_mut().release(id);
            return Ok(None);
        }
        Ok(Some(self.with_members(group.members().to_vec(), id)))
    }

    /// A communicator of `group`'s members, collective over those members only
    /// (MPI_Comm_create_group); `tag` tells apart creations that run at once over
    /// overlapping groups. The members agree on a context id with a collective on this
    /// communicator's collective context, in a tag space ordinary collectives never use.
    /// A process outside `group` gets `None` at once (a local call).
    pub fn create_group(&self, group: &Group, tag: i32) -> Result<Option<Comm<'u>>> {
        if self.is_inter() {
            return Err(not_on_intercomms());
        }
        if let Some(outsider) = group
            .members()
            .iter()
            .find(|w| self.comm_rank_of(**w) == u32::MAX)
        {
            return Err(Error::Arg(format!(
                "create_group: job rank {outsider} of the group is not in this communicator"
            )));
        }
        if group.rank().is_none() {
            return Ok(None);
        }
        let mut stand_in = new_comm_data(group.clone(), self.d.id, self.u.world_size(), "", true);
        stand_in.coll_seq = Cell::new(tag as u32 & 0x3fff_ffff);
        stand_in.tag_space = 1 << 30;
        let stand_in = Comm {
            u: self.u,
            d: Rc::new(stand_in),
        };
        let id = stand_in.agree_on_context()?;
        Ok(Some(self.with_members(group.members().to_vec(), id)))
    }

    /// Frees this handle's communicator now: attribute delete callbacks run and, once
    /// no other handle exists, its context id is free again (MPI_Comm_free).
    pub fn free(self) -> Result<()> {
        if self.d.predefined {
            return Err(Error::Arg("COMM_WORLD and COMM_SELF cannot be freed".into()));
        }
        crate::comm::attr::delete_all(&self)
    }

    /// MPI_Comm_compare.
    pub fn compare(&self, other: &Comm<'_>) -> Compare {
        if Rc::ptr_eq(&self.d, &other.d) {
            return Compare::Ident;
        }
        match self.d.group.compare(&other.d.group) {
            Compare::Ident => Compare::Congruent,
            c => c,
        }
    }

    pub fn name(&self) -> String {
        self.d.name.borrow().clone()
    }
    pub fn set_name(&self, name: &str) {
        *self.d.name.borrow_mut() = name.to_string();
    }

    /// Sets attribute `kv` (its delete callback runs on a value it replaces).
    pub fn set_attr(&self, kv: &Keyval, value: usize) -> Result<()> {
        crate::comm::attr::set(self, kv, value)
    }
    pub fn get_attr(&self, kv: &Keyval) -> Option<usize> {
        crate::comm::attr::get(self, kv)
    }
    pub fn delete_attr(&self, kv: &Keyval) -> Result<()> {
        crate::comm::attr::delete(self, kv)
    }
    /// Largest usable tag (the predefined attribute `TAG_UB`).
    pub fn tag_ub(&self) -> i32 {
        i32::MAX
    }
}

impl Drop for Comm<'_> {
    fn drop(&mut self) {
        // The last handle of a communicator: free it.
        if Rc::strong_count(&self.d) == 1 && !self.d.predefined {
            let _ = crate::comm::attr::delete_all(self);
            self.u.contexts.borrow_mut().release(self.d.id);
            if let Some(r) = &self.d.remote {
                self.u.contexts.borrow_mut().release(r.local.id);
            }
        }
    }
}

/// What a collective that intercommunicators do not have says.
pub fn not_on_intercomms() -> Error {
    Error::Arg(
        "this collective is not defined on intercommunicators (MPI 4.1 §6.2.2: scans and \
         neighbourhood collectives are not); merge the intercommunicator (MPI_Intercomm_merge) \
         and use it there"
            .into(),
    )
}
