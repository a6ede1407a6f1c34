//! Shared memory as the event loop drives it (the state is `fabric::shm`).

use std::collections::HashSet;
use std::os::fd::AsFd;
use std::time::Duration;

use proto::dial::Deadline;
use proto::{Nanos, Rank};
use transport::shm::{shm_caps, shm_link, ShmNode};
use transport::{AnyLink, Link, LinkError, Transport};

use super::Runtime;
use crate::fabric::nonce;
use crate::fabric::shm::join::{AdmitProgress, JoinProgress, ShmJoin};
use crate::fabric::shm::{Kept, NodeState, Shm};
use crate::fabric::Refusal;
use crate::lanes::{LaneSetup, Route, Via};
use crate::waiter::Waiter;

impl Runtime {
    /// The deadline of a join to the node's shared memory starting now (at either end),
    /// or of a lane waiting for one.
    fn join_deadline(&self) -> Deadline {
        Deadline::after(crate::clock::now(), crate::clock::nanos(self.cfg.connect_timeout))
    }

    /// After the cards are exchanged: this node's ranks; the leader makes the segment,
    /// the others start joining it.
    pub(super) fn start_shm(&mut self) {
        if self.shm.listener.is_none() || self.job.cards.head(self.job.id.rank).is_none() {
            return;
        }
        // In rank order.
        let local: Vec<Rank> = (0..self.job.cards.len() as Rank)
            .filter(|&r| self.job.cards.same_node(r, self.job.id.rank))
            .collect();
        if local.len() < 2 {
            self.shm = Shm::off();
            return;
        }
        let me = local
            .binary_search(&self.job.id.rank)
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
                .and_then(|layout| ShmNode::create(layout, 0, self.job.id.job_id, bell));
            self.shm.state = match made {
                Ok((node, segment)) => {
                    node.admit(0, std::process::id());
                    node.enter(self.job.id.rank);
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
        self.shm.state = match ShmJoin::start(&self.job.id, leader, nonce(), self.join_deadline()) {
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
                    self.job.id.rank,
                    limit.as_millis()
                );
            }
        }
    }

    /// Why shared memory cannot carry a first lane to `peer`, a rank of this node, as
    /// far as is known before trying.
    pub(super) fn shm_refusal_before_dial(&self, peer: Rank) -> Option<Refusal> {
        if let Some(earlier) = self.dialing.refusals.of(peer, Transport::Shm) {
            return Some(earlier.clone());
        }
        if self.shm.laned.contains(&peer) {
            return Some(Refusal::new(Transport::Shm, "its shared-memory lane was closed"));
        }
        match &self.shm.state {
            NodeState::Off => Some(
                Refusal::new(Transport::Shm, "this rank has no shared-memory socket")
                    .helped_by("PONTOON_LOG=warn says why it could not be bound"),
            ),
            NodeState::Failed(why) => Some(Refusal::new(Transport::Shm, why.clone())),
            _ => None,
        }
    }

    /// Starts the first lane to `peer`, a rank of this node, over shared memory: at once
    /// if both are members of the node's segment, else once the joins are done.
    pub(super) fn dial_shm(&mut self, peer: Rank) -> Result<(), Refusal> {
        let Some(index) = self.shm.index(peer) else {
            return Err(Refusal::new(
                Transport::Shm,
                format!("rank {peer} is not in this node's segment"),
            ));
        };
        match &self.shm.state {
            NodeState::Member { node, .. } if node.member(index).is_some() => {
                if self.open_shm_lane(peer, index, true) {
                    Ok(())
                } else {
                    let why = self.dialing.refusals.of(peer, Transport::Shm).cloned();
                    Err(why.unwrap_or_else(|| Refusal::new(Transport::Shm, "no lane could be opened")))
                }
            }
            _ => {
                self.shm.waiting.push((peer, self.join_deadline()));
                Ok(())
            }
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
                    let me = self.shm.index(self.job.id.rank).expect("of its node");
                    let joined = self
                        .shm
                        .layout()
                        .and_then(|layout| ShmNode::join(fd, layout, me, self.job.id.job_id, bell));
                    match joined {
                        Ok(node) => {
                            node.enter(self.job.id.rank);
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
                .dialing
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
            .map(|l| crate::fabric::shm::join::accept_all(l, deadline));
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
            let progress = a.poll(&self.job.id, now, nonce());
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
                                tracing::warn!("rank {}: rank {peer}: {e}", self.job.id.rank);
                                None
                            }
                        }
                    }
                    None => {
                        tracing::warn!(
                            "rank {}: rank {peer} asked to join this node's shared memory, but \
                             its card names another node",
                            self.job.id.rank
                        );
                        None
                    }
                },
                AdmitProgress::Failed(why) => {
                    tracing::warn!("rank {}: {why}", self.job.id.rank);
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
            if !ready.contains(&k.key) || !crate::fabric::shm::join::closed(&k.sock) {
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
            self.job.id.rank
        );
        self.shm.stop_waiting(peer);
        self.dialing
            .refusals
            .record(peer, Refusal::new(Transport::Shm, why));
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
