//! Shared memory with the ranks of this node, as the event loop drives it: the node's
//! ranks and its leader (the lowest) from the cards, the leader's segment and the joins
//! it admits, this rank's own join, lanes opened at once to members and announced to
//! them, lanes the others announced taken up, the end of a member's process (seen as its
//! join connection closing), and the fall-back to TCP, with the reason, when shared
//! memory cannot be had (see `transport::shm` and `shm_wireup.rs`).

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

use proto::dial::Deadline;
use proto::{LaneId, Nanos, Rank};
use transport::shm::{shm_caps, shm_link, Bell, Layout, ShmNode};
use transport::{AnyLink, Link, LinkError, Transport};

use super::node_coll::NodeColls;
use super::{nonce, Runtime};
use crate::config::Config;
use crate::lanes::{LaneSetup, Route, Via};
use crate::shm_wireup::{AdmitProgress, JoinProgress, ShmAdmit, ShmJoin};
use crate::waiter::Waiter;

/// Bytes of shared-memory receive rings one rank may hold, over all its node-local peers.
const SHM_BUDGET: usize = 8 << 20;
/// Largest ring of one shared-memory lane (per direction).
const SHM_MAX_RING: usize = 1 << 20;

/// The ring size for a node of `ranks` ranks: the largest power of two below
/// [`SHM_BUDGET`] / (node-local peers), so a node of many ranks gets smaller rings, not
/// more memory (within the budget up to 512 ranks; beyond, `MIN_RING` wins).
fn ring_for(ranks: usize) -> usize {
    let ring = (SHM_BUDGET / (ranks.max(2) - 1)).next_power_of_two() / 2;
    ring.clamp(transport::shm::MIN_RING, SHM_MAX_RING)
}

enum NodeState {
    /// Shared memory is not allowed, or this rank is alone on its node.
    Off,
    Joining(ShmJoin),
    /// A member; the leader also keeps the segment's fd to hand to the others.
    Member {
        node: ShmNode,
        segment: Option<OwnedFd>,
    },
    /// Why this rank has no shared memory (its node-local peers use TCP).
    Failed(String),
}

/// A join connection kept open after the join: it closes when the process at its other
/// end ends (the leader keeps one per member, a member its own to the leader).
struct Kept {
    /// Its key in the rank's waiter.
    key: u64,
    /// The slot of the rank at the other end.
    index: usize,
    sock: UnixStream,
}

/// This rank's part in its node's shared memory.
pub(super) struct Shm {
    /// This node's ranks in ascending order; the first is the leader.
    pub(super) local: Vec<Rank>,
    /// This rank's place in the node's collectives on its collective area.
    pub(super) colls: NodeColls,
    listener: Option<UnixListener>,
    /// This rank's bell until it is a member (then the node holds it).
    bell: Option<Bell>,
    state: NodeState,
    /// Ranks joining, at the leader.
    admits: Vec<ShmAdmit>,
    /// Node-local peers whose first lane waits for a join (theirs or ours), until when.
    waiting: Vec<(Rank, Deadline)>,
    /// Peers that have had a shared-memory lane: a ring's counters cannot start again,
    /// so a lane that closed is never opened again.
    laned: HashSet<Rank>,
    /// Why a shared-memory lane with a peer could not be had (it then uses TCP).
    refusals: HashMap<Rank, String>,
    /// Join connections kept to learn of the other end's process ending.
    kept: Vec<Kept>,
    /// Node-local ranks whose process ended, their lanes closed.
    gone: HashSet<Rank>,
    /// On a signalled node: each slot's lane, read when the slot's bit in this rank's
    /// bitmap of writers is taken.
    lane_at: Vec<Option<LaneId>>,
    /// Slots taken from the bitmap, and the lanes to read this pass (kept for their
    /// allocations: this runs on every pass).
    written: Vec<usize>,
    reading: Vec<LaneId>,
    /// Signalled lanes to read on the next pass whatever the bits say: those opened
    /// since (their first frames may have set their bits before the lanes existed
    /// here), and those a read left bytes in (a read stops at a box's place in the
    /// stream, and at the tail it saw).
    again: Vec<LaneId>,
}

impl Shm {
    pub(super) fn off() -> Shm {
        Shm {
            local: Vec::new(),
            listener: None,
            bell: None,
            state: NodeState::Off,
            admits: Vec::new(),
            waiting: Vec::new(),
            laned: HashSet::new(),
            refusals: HashMap::new(),
            kept: Vec::new(),
            gone: HashSet::new(),
            lane_at: Vec::new(),
            written: Vec::new(),
            reading: Vec::new(),
            again: Vec::new(),
            colls: NodeColls::default(),
        }
    }

    /// Binds this rank's join socket and bell, before the ranks exchange cards, so that
    /// both exist once any rank of the node looks (`Off` where shared memory is not
    /// allowed or cannot be had here).
    pub(super) fn bind(cfg: &Config, job_id: &[u8; 16], rank: Rank) -> Shm {
        let mut shm = Shm::off();
        if !cfg.transports.contains(&Transport::Shm) {
            return shm;
        }
        let bound = transport::shm::listen(&transport::shm::socket_name(job_id, rank)).and_then(|l| {
            let bell = Bell::bind(&transport::shm::bell_name(job_id, rank))?;
            Ok((l, bell))
        });
        match bound {
            Ok((listener, bell)) => {
                shm.listener = Some(listener);
                shm.bell = Some(bell);
            }
            Err(e) => {
                tracing::warn!("rank {rank}: no shared-memory socket ({e}); ranks of this node will use TCP")
            }
        }
        shm
    }

    /// The segment's layout for this node (the leader's and every joiner's own count).
    fn layout(&self) -> std::io::Result<Layout> {
        Layout::new(self.local.len(), ring_for(self.local.len()))
    }

    pub(super) fn index(&self, rank: Rank) -> Option<usize> {
        self.local.binary_search(&rank).ok()
    }

    /// The pid of the node's rank `rank`, as the node segment records it.
    pub(super) fn pid_of(&self, rank: Rank) -> Option<u32> {
        let index = self.index(rank)?;
        self.node()?.member(index).map(|(_, pid)| pid)
    }

    pub(super) fn node(&self) -> Option<&ShmNode> {
        match &self.state {
            NodeState::Member { node, .. } => Some(node),
            _ => None,
        }
    }

    /// Whether this rank's own join is under way.
    pub(super) fn joining(&self) -> bool {
        matches!(self.state, NodeState::Joining(_))
    }

    /// Whether joins need the event loop's attention on every pass. (Lanes waiting for
    /// a peer's join do not: they are looked at every few milliseconds, and a rank
    /// polling for them on every pass starved the ranks still joining.)
    pub(super) fn busy(&self) -> bool {
        matches!(self.state, NodeState::Joining(_)) || !self.admits.is_empty()
    }

    /// The deadlines of the joins under way (this rank's, or those the leader admits)
    /// and of the lanes waiting for them. Until one passes, a sleeping rank wakes for a
    /// join only when its socket says so: with hundreds of ranks joining at once, each
    /// waking every millisecond to look took the CPU from the leader admitting them and
    /// from the ranks still reading the cards.
    pub(super) fn join_deadlines(&self) -> impl Iterator<Item = Deadline> + '_ {
        let own = match &self.state {
            NodeState::Joining(join) => Some(join.deadline()),
            _ => None,
        };
        let lanes = self.waiting.iter().map(|&(_, deadline)| deadline);
        self.admits.iter().map(ShmAdmit::deadline).chain(own).chain(lanes)
    }

    /// Whether a first lane to `peer` waits for a join.
    pub(super) fn waiting_for(&self, peer: Rank) -> bool {
        self.waiting.iter().any(|&(p, _)| p == peer)
    }

    /// The first lane to `peer` came up some other way.
    pub(super) fn stop_waiting(&mut self, peer: Rank) {
        self.waiting.retain(|&(p, _)| p != peer);
    }

    pub(super) fn refusal(&self, peer: Rank) -> Option<&str> {
        self.refusals.get(&peer).map(String::as_str)
    }

    /// Whether everything of this node's shared memory that start-up waits for is done:
    /// this rank and every other rank of the node joined (or this rank gave up).
    fn settled(&self) -> bool {
        match &self.state {
            NodeState::Joining(_) => false,
            NodeState::Member { node, .. } => (0..self.local.len()).all(|i| node.member(i).is_some()),
            _ => true,
        }
    }
}

impl Runtime {
    /// The deadline of a join to the node's shared memory starting now (at either end),
    /// or of a lane waiting for one.
    fn join_deadline(&self) -> Deadline {
        Deadline::after(crate::clock::now(), crate::clock::nanos(self.cfg.connect_timeout))
    }

    /// After the cards are exchanged: this node's ranks; the leader makes the segment,
    /// the others start joining it.
    pub(super) fn start_shm(&mut self) {
        if self.shm.listener.is_none() || self.cards.head(self.id.rank).is_none() {
            return;
        }
        // In rank order.
        let local: Vec<Rank> = (0..self.cards.len() as Rank)
            .filter(|&r| self.cards.same_node(r, self.id.rank))
            .collect();
        if local.len() < 2 {
            self.shm = Shm::off();
            return;
        }
        let me = local
            .binary_search(&self.id.rank)
            .expect("this rank is of its node");
        let leader = local[0];
        self.shm.local = local;
        let bell = self.shm.bell.take().expect("bound with the listener");
        self.waiter.watch_readable(bell.fd(), Waiter::BELL);
        if me == 0 {
            let listener = self.shm.listener.as_ref().expect("checked above");
            self.waiter.watch_as(listener, Waiter::LISTENING);
            let made = self
                .shm
                .layout()
                .and_then(|layout| ShmNode::create(layout, 0, self.id.job_id, bell));
            self.shm.state = match made {
                Ok((node, segment)) => {
                    node.admit(0, std::process::id());
                    node.enter(self.id.rank);
                    NodeState::Member {
                        node,
                        segment: Some(segment),
                    }
                }
                Err(e) => NodeState::Failed(format!("cannot make the node's shared-memory segment: {e}")),
            };
            return;
        }
        self.shm.listener = None;
        self.shm.bell = Some(bell);
        self.shm.state = match ShmJoin::start(&self.id, leader, nonce(), self.join_deadline()) {
            Ok(mut join) => {
                join.key = self.handshake_key();
                self.waiter.watch_as(join.socket(), join.key);
                NodeState::Joining(join)
            }
            Err(why) => NodeState::Failed(why),
        };
    }

    /// Start-up waits (at most `limit`) until every rank of the node joined its segment:
    /// the leader admits the others only while it runs the event loop, so it must not
    /// leave for the application first. The others wait for their own join only: a
    /// lane to a peer that has not joined waits for it, while the ranks already in start
    /// their first collective (at 256 ranks, 5 % sooner to its end). The leader sleeps
    /// until a join's socket or the last to enter rings it (`ShmNode::enter`).
    pub(super) fn settle_shm(&mut self, limit: Duration) {
        let deadline = Deadline::after(crate::clock::now(), crate::clock::nanos(limit));
        let leader = matches!(self.shm.state, NodeState::Member { segment: Some(_), .. });
        let done = |shm: &Shm| {
            if leader {
                shm.settled()
            } else {
                !matches!(shm.state, NodeState::Joining(_))
            }
        };
        while !done(&self.shm) && !deadline.passed(crate::clock::now()) {
            if !self.progress() {
                self.sleep(super::IDLE_SLEEP);
            }
        }
        if leader && !self.shm.settled() {
            if let Some(node) = self.shm.node() {
                // The node's collectives go by messages then: members that joined
                // wait for this verdict (`node_coll.rs`).
                if !node.decide_collectives(false) {
                    node.wake_all();
                }
                let missing: Vec<Rank> = (0..self.shm.local.len())
                    .filter(|&i| node.member(i).is_none())
                    .map(|i| self.shm.local[i])
                    .collect();
                tracing::warn!(
                    "rank {}: ranks {missing:?} of this node have not joined its shared memory \
                     within {} ms; they will be admitted when they do",
                    self.id.rank,
                    limit.as_millis()
                );
            }
        }
    }

    /// Starts the first lane to `peer` over shared memory if it is a rank of this node
    /// and that is possible; `false`: use another transport (the reason is recorded).
    pub(super) fn dial_shm(&mut self, peer: Rank) -> bool {
        let Some(index) = self.shm.index(peer) else {
            return false;
        };
        if self.shm.refusals.contains_key(&peer) {
            return false;
        }
        if self.shm.laned.contains(&peer) {
            self.refuse_shm(peer, "its shared-memory lane was closed".into());
            return false;
        }
        match &self.shm.state {
            NodeState::Off => false,
            NodeState::Failed(why) => {
                let why = why.clone();
                self.refuse_shm(peer, why);
                false
            }
            NodeState::Joining(_) => {
                self.shm.waiting.push((peer, self.join_deadline()));
                true
            }
            NodeState::Member { node, .. } if node.member(index).is_none() => {
                self.shm.waiting.push((peer, self.join_deadline()));
                true
            }
            NodeState::Member { .. } => self.open_shm_lane(peer, index, true),
        }
    }

    /// Opens the lane to the member `peer` (slot `index`); the opener announces it.
    fn open_shm_lane(&mut self, peer: Rank, index: usize, announce: bool) -> bool {
        let Some(node) = self.shm.node() else {
            return false;
        };
        let opened = node
            .pipe(index)
            .and_then(|pipe| announce.then(|| node.announce(index)).transpose().map(|_| pipe));
        let single_copy = self.cfg.single_copy.is_some() && node.reads_from(index);
        match opened {
            Ok(pipe) => {
                self.shm.laned.insert(peer);
                self.shm.stop_waiting(peer);
                let caps = proto::Caps {
                    single_copy,
                    ..shm_caps(self.cfg.eager_limit)
                };
                let link = shm_link(pipe, caps);
                let signalled = link.signalled();
                // A node-local lane breaks only with its process: it needs no name for a replay.
                let setup = LaneSetup {
                    route: Route::Node,
                    initiated: announce,
                    via: Via::default(),
                    tag: 0,
                    first: true,
                };
                let added = self.add_lane(peer, AnyLink::Shm(link), setup);
                if let (true, true, Some(&lane)) = (added, signalled, self.lanes.of_peer(peer).last()) {
                    if self.shm.lane_at.len() <= index {
                        self.shm.lane_at.resize(index + 1, None);
                    }
                    self.shm.lane_at[index] = Some(lane);
                    self.shm.again.push(lane);
                }
                true
            }
            Err(e) => {
                self.refuse_shm(peer, format!("its lane in the node's segment: {e}"));
                false
            }
        }
    }

    /// Reads the signalled lanes that were written to (their bits taken from this rank's
    /// bitmap of writers: one load per 64 ranks of the node when none were), and those
    /// to read again. A lane whose own writes left bytes queued has set its bit itself,
    /// and a consumer that made room for them sets it too.
    pub(super) fn service_signalled(&mut self) -> bool {
        let mut lanes = std::mem::take(&mut self.shm.reading);
        lanes.append(&mut self.shm.again);
        let mut slots = std::mem::take(&mut self.shm.written);
        if let Some(node) = self.shm.node().filter(|n| n.layout().signalled()) {
            node.take_written(&mut slots);
        }
        lanes.extend(
            slots
                .drain(..)
                .filter_map(|s| self.shm.lane_at.get(s).copied().flatten()),
        );
        self.shm.written = slots;
        let mut any = false;
        for &lane in &lanes {
            any |= self.service_link(lane, true);
            // Bytes left behind set no bit of their own: look again on the next pass.
            if self.lanes.get_mut(lane).is_some_and(|l| !l.link.arm_wakeup())
                && !self.shm.again.contains(&lane)
            {
                self.shm.again.push(lane);
            }
        }
        lanes.clear();
        self.shm.reading = lanes;
        any
    }

    /// At finalize: the node's members will see this rank's end as no failure.
    pub(super) fn shm_finalized(&self) {
        if let Some(node) = self.shm.node() {
            node.mark_finalized();
        }
    }

    /// Whether a signalled lane is to be read on the next pass (no sleep before).
    pub(super) fn signalled_waiting(&self) -> bool {
        !self.shm.again.is_empty()
    }

    /// Lanes other members opened to this rank: taken up at once (a load per 64 ranks of
    /// the node when there are none, on every progress pass); and lanes to members whose
    /// process ended: closed (one more load).
    pub(super) fn take_shm_announcements(&mut self) -> bool {
        let Some(node) = self.shm.node() else {
            return false;
        };
        let announced = node.take_announced();
        let gone = node.take_gone();
        let mut any = false;
        for index in gone {
            any |= self.close_lane_to_gone(index);
        }
        for index in announced {
            let Some(&peer) = self.shm.local.get(index) else {
                continue;
            };
            if !self.shm.laned.contains(&peer) {
                any |= self.open_shm_lane(peer, index, false);
            }
        }
        any
    }

    /// The member in slot `index` has ended: its shared-memory lane fails as a broken
    /// TCP connection does (once). Returns whether this is news.
    fn close_lane_to_gone(&mut self, index: usize) -> bool {
        let Some(&peer) = self.shm.local.get(index) else {
            return false;
        };
        if !self.shm.gone.insert(peer) {
            return false;
        }
        if self.shm.node().is_some_and(|node| node.finalized(index)) {
            self.ep.handle_peer_finalized(peer);
        }
        for lane in self.lanes.of_peer_by(peer, &[Transport::Shm]) {
            // What it wrote before it ended is still delivered.
            self.service_link(lane, true);
            if self.lanes.get(lane).is_some() {
                self.lane_down(lane, LinkError::Closed);
            }
        }
        true
    }

    /// Drives the joins (this rank's, or the others' at the leader) and the lanes
    /// waiting for them. Returns whether anything happened.
    pub(super) fn shm_wireup(&mut self, ready: &HashSet<u64>, now_ns: Nanos) -> bool {
        let mut any = self.admit_joins(ready, now_ns);
        any |= self.watch_kept(ready);
        let progress = match &mut self.shm.state {
            NodeState::Joining(join) if ready.contains(&join.key) || join.deadline().passed(now_ns) => {
                join.poll(now_ns)
            }
            _ => JoinProgress::Pending,
        };
        if !matches!(progress, JoinProgress::Pending) {
            any = true;
            let NodeState::Joining(join) = std::mem::replace(&mut self.shm.state, NodeState::Off) else {
                unreachable!("polled above")
            };
            self.shm.state = match progress {
                JoinProgress::Joined(fd) => {
                    let bell = self.shm.bell.take().expect("kept until joined");
                    let me = self.shm.index(self.id.rank).expect("of its node");
                    let joined = self
                        .shm
                        .layout()
                        .and_then(|layout| ShmNode::join(fd, layout, me, self.id.job_id, bell));
                    match joined {
                        Ok(node) => {
                            node.enter(self.id.rank);
                            // Still watched: it closes when the leader's process ends.
                            self.shm.kept.push(Kept {
                                key: join.key,
                                index: 0,
                                sock: join.into_socket(),
                            });
                            NodeState::Member { node, segment: None }
                        }
                        Err(e) => {
                            self.waiter.unwatch(join.socket());
                            NodeState::Failed(format!("the node's shared-memory segment: {e}"))
                        }
                    }
                }
                JoinProgress::Failed(why) => {
                    self.waiter.unwatch(join.socket());
                    NodeState::Failed(why)
                }
                JoinProgress::Pending => unreachable!("checked above"),
            };
        }
        // Lanes waiting for a join: opened once both ends are members; over TCP if
        // this rank could not join, or the peer has not joined in time.
        for (peer, deadline) in std::mem::take(&mut self.shm.waiting) {
            if self.lanes.connected(peer) || self.shm.laned.contains(&peer) {
                continue;
            }
            let index = self.shm.index(peer).expect("a node-local peer");
            let why = match &self.shm.state {
                NodeState::Member { node, .. } if node.member(index).is_some() => {
                    any |= self.open_shm_lane(peer, index, true);
                    continue;
                }
                NodeState::Failed(why) => why.clone(),
                _ if deadline.passed(now_ns) => match self.shm.state {
                    NodeState::Joining(_) => {
                        "this rank has not joined the node's shared memory in time".into()
                    }
                    _ => format!(
                        "rank {peer} has not joined the node's shared memory within {} ms",
                        deadline.limit_ms()
                    ),
                },
                _ => {
                    self.shm.waiting.push((peer, deadline));
                    continue;
                }
            };
            self.refuse_shm(peer, why);
            let left = self
                .setups
                .time_left(peer, crate::clock::now())
                .map_or(self.cfg.connect_timeout, crate::clock::duration);
            self.dial(peer, left);
            any = true;
        }
        any
    }

    /// At the leader: accepts ranks joining and hands them the segment once their
    /// handshake checks out.
    fn admit_joins(&mut self, ready: &HashSet<u64>, now: Nanos) -> bool {
        let mut any = false;
        let deadline = self.join_deadline();
        let accepted = self
            .shm
            .listener
            .as_ref()
            .filter(|_| ready.contains(&Waiter::LISTENING))
            .map(|l| crate::shm_wireup::accept_all(l, deadline));
        for mut a in accepted.unwrap_or_default() {
            a.key = self.handshake_key();
            self.waiter.watch_as(a.socket(), a.key);
            self.shm.admits.push(a);
            any = true;
        }
        let mut i = 0;
        while i < self.shm.admits.len() {
            let NodeState::Member {
                node,
                segment: Some(segment),
            } = &self.shm.state
            else {
                // No segment to hand out: the joining ranks time out and use TCP.
                self.shm.admits.clear();
                break;
            };
            let a = &mut self.shm.admits[i];
            if !ready.contains(&a.key) && !a.deadline().passed(now) {
                i += 1;
                continue;
            }
            let progress = a.poll(&self.id, now, nonce());
            if matches!(progress, AdmitProgress::Pending) {
                i += 1;
                continue;
            }
            let a = self.shm.admits.swap_remove(i);
            any = true;
            let admitted = match progress {
                // Its pid goes in its slot before it can take the slot.
                AdmitProgress::Admitted { peer, pid } => match self.shm.index(peer) {
                    Some(index) => {
                        node.admit(index, pid);
                        match a.hand_over(segment.as_fd()) {
                            Ok(()) => Some(index),
                            Err(e) => {
                                tracing::warn!("rank {}: rank {peer}: {e}", self.id.rank);
                                None
                            }
                        }
                    }
                    None => {
                        tracing::warn!(
                            "rank {}: rank {peer} asked to join this node's shared memory, but \
                             its card names another node",
                            self.id.rank
                        );
                        None
                    }
                },
                AdmitProgress::Failed(why) => {
                    tracing::warn!("rank {}: {why}", self.id.rank);
                    None
                }
                AdmitProgress::Pending => None,
            };
            match admitted {
                // Still watched: it closes when the member's process ends.
                Some(index) => self.shm.kept.push(Kept {
                    key: a.key,
                    index,
                    sock: a.into_socket(),
                }),
                None => self.waiter.unwatch(a.socket()),
            }
        }
        any
    }

    /// Kept join connections that closed: the rank at the other end has ended. Marks it
    /// gone in the segment, which tells every member (`take_shm_announcements`).
    fn watch_kept(&mut self, ready: &HashSet<u64>) -> bool {
        let mut any = false;
        let mut i = 0;
        while i < self.shm.kept.len() {
            let k = &self.shm.kept[i];
            if !ready.contains(&k.key) || !crate::shm_wireup::closed(&k.sock) {
                i += 1;
                continue;
            }
            let k = self.shm.kept.swap_remove(i);
            self.waiter.unwatch(&k.sock);
            if let Some(node) = self.shm.node() {
                node.mark_gone(k.index);
            }
            any = true;
        }
        any
    }

    /// No shared memory with `peer`: say why once, and use TCP from now on.
    pub(super) fn refuse_shm(&mut self, peer: Rank, why: String) {
        tracing::warn!(
            "rank {}: no shared memory with rank {peer}, using TCP: {why}",
            self.id.rank
        );
        self.shm.stop_waiting(peer);
        self.shm.refusals.insert(peer, why);
    }

    /// Before a sleep: announcements and frames ring this rank's bell from now on.
    /// `false` when an announcement waits already.
    pub(super) fn arm_shm(&self) -> bool {
        self.shm.node().is_none_or(ShmNode::arm)
    }

    /// After a sleep: peers need not ring; and what rang is taken from the bell.
    pub(super) fn disarm_shm(&self) {
        if let Some(node) = self.shm.node() {
            node.disarm();
        }
    }

    /// Empties the bell once it rang (a full queue would refuse the next wake-up).
    pub(super) fn drain_bell(&mut self) {
        if self.waiter.take_key(Waiter::BELL) {
            if let Some(bell) = self.shm.node().map(ShmNode::bell).or(self.shm.bell.as_ref()) {
                bell.drain();
            }
        }
    }
}
