//! Shared memory's wire-up as a [`Fabric`]: the leader makes the node's segment and
//! admits the others, each other rank joins it, a first lane to a member is opened at
//! once (and announced to it) or waits for the joins, lanes the others announced are
//! taken up, and a member whose process ended is reported.

use std::os::fd::AsFd;
use std::time::Duration;

use net::CardTable;
use proto::dial::Deadline;
use proto::handshake::Identity;
use proto::{LaneId, Nanos, PayloadToken, Rank};
use transport::shm::{shm_caps, shm_link, ShmNode};
use transport::{AnyLink, Link, Transport};

use super::join::{accept_all, closed, AdmitProgress, JoinProgress, ShmJoin};
use super::{Kept, NodeState, Shm};
use crate::boot::config::Config;
use crate::fabric::{nonce, Around, Fabric, FabricEvent, Purpose, Refusal};
use crate::lanes::{LaneSetup, Route, Via};
use crate::waiter::Waiter;

/// The deadline of a join to the node's shared memory starting `now` (at either end),
/// or of a lane waiting for one.
fn join_deadline(cfg: &Config, now: Nanos) -> Deadline {
    Deadline::after(now, crate::clock::nanos(cfg.connect_timeout))
}

impl Shm {
    /// After the cards are exchanged: this node's ranks; the leader makes the segment,
    /// the others start joining it.
    pub(crate) fn start(&mut self, id: &Identity, cards: &CardTable, cfg: &Config, waiter: &mut Waiter) {
        if self.listener.is_none() || cards.head(id.rank).is_none() {
            return;
        }
        // In rank order.
        let local: Vec<Rank> = (0..cards.len() as Rank)
            .filter(|&r| cards.same_node(r, id.rank))
            .collect();
        if local.len() < 2 {
            *self = Shm::off();
            return;
        }
        let me = local.binary_search(&id.rank).expect("this rank is of its node");
        self.refuse_collectives = cfg.several_threads;
        let leader = local[0];
        self.local = local;
        let bell = self.bell.take().expect("bound with the listener");
        waiter.watch_readable(bell.fd(), Waiter::BELL);
        if me == 0 {
            let listener = self.listener.as_ref().expect("checked above");
            waiter.watch_as(listener, Waiter::LISTENING);
            let made = self
                .layout()
                .and_then(|layout| ShmNode::create(layout, 0, id.job_id, bell));
            self.state = match made {
                Ok((node, segment)) => {
                    node.admit(0, std::process::id());
                    self.enter(&node, id.rank);
                    NodeState::Member {
                        node,
                        segment: Some(segment),
                    }
                }
                Err(e) => NodeState::Failed(format!("cannot make the node's shared-memory segment: {e}")),
            };
            return;
        }
        self.listener = None;
        self.bell = Some(bell);
        let deadline = join_deadline(cfg, crate::clock::now());
        self.state = match ShmJoin::start(id, leader, nonce(), deadline) {
            Ok(mut join) => {
                join.key = waiter.watch_handshake(join.socket());
                NodeState::Joining(join)
            }
            Err(why) => NodeState::Failed(why),
        };
    }

    /// The lane to the member `peer` (slot `index`), opened; the opener announces it.
    fn open_lane(
        &mut self,
        (me, peer): (Rank, Rank),
        index: usize,
        announce: bool,
        cfg: &Config,
    ) -> Result<FabricEvent, Refusal> {
        let Some(node) = self.node() else {
            return Err(Refusal::new(Transport::Shm, "no lane could be opened"));
        };
        let opened = node
            .pipe(index)
            .and_then(|pipe| announce.then(|| node.announce(index)).transpose().map(|_| pipe));
        let single_copy = cfg.single_copy.is_some() && node.reads_from(index);
        match opened {
            Ok(pipe) => {
                self.laned.insert(peer);
                self.stop_waiting(peer);
                let caps = proto::Caps {
                    single_copy,
                    ..shm_caps()
                };
                // A node-local lane breaks only with its process: it needs no name for a replay.
                let setup = LaneSetup {
                    route: Route::Node,
                    initiated: announce,
                    via: Via::default(),
                    tag: 0,
                    first: true,
                };
                Ok(FabricEvent::LaneUp {
                    peer,
                    link: Box::new(AnyLink::Shm(shm_link(pipe, caps))),
                    setup,
                })
            }
            Err(e) => Err(self.refuse((me, peer), format!("its lane in the node's segment: {e}"))),
        }
    }

    /// No shared memory with `peer`: says why once (TCP is used from now on).
    fn refuse(&mut self, (me, peer): (Rank, Rank), why: String) -> Refusal {
        tracing::warn!("rank {me}: no shared memory with rank {peer}, using TCP: {why}");
        self.stop_waiting(peer);
        Refusal::new(Transport::Shm, why)
    }

    /// Lanes other members opened to this rank, taken up (a load per 64 ranks of the
    /// node when there are none: this runs on every progress pass), and members whose
    /// process ended (one more load). Returns whether there was anything.
    pub(crate) fn take_announcements(
        &mut self,
        me: Rank,
        cfg: &Config,
        events: &mut Vec<FabricEvent>,
    ) -> bool {
        let Some(node) = self.node() else {
            return false;
        };
        let announced = node.take_announced();
        let gone = node.take_gone();
        let mut any = false;
        for index in gone {
            let Some(&peer) = self.local.get(index) else {
                continue;
            };
            if self.gone.insert(peer) {
                let finalized = self.node().is_some_and(|node| node.finalized(index));
                events.push(FabricEvent::Ended {
                    peer,
                    transport: Transport::Shm,
                    finalized,
                });
                any = true;
            }
        }
        for index in announced {
            let Some(&peer) = self.local.get(index) else {
                continue;
            };
            if self.laned.contains(&peer) {
                continue;
            }
            events.push(match self.open_lane((me, peer), index, false, cfg) {
                Ok(lane) => lane,
                Err(refusal) => FabricEvent::Refused {
                    peer,
                    refusal,
                    purpose: Purpose::FirstLane,
                },
            });
            any = true;
        }
        any
    }

    /// Takes this rank's slot in the node's segment, refusing the collective area
    /// first if it must.
    fn enter(&self, node: &ShmNode, rank: Rank) {
        if self.refuse_collectives {
            node.decide_collectives(false);
        }
        node.enter(rank);
    }

    /// Drives this rank's join to the node's segment.
    fn drive_join(&mut self, around: &Around<'_>, waiter: &mut Waiter) -> bool {
        let progress = match &mut self.state {
            NodeState::Joining(join)
                if around.ready.contains(&join.key) || join.deadline().passed(around.now) =>
            {
                join.poll(around.now)
            }
            _ => JoinProgress::Pending,
        };
        if matches!(progress, JoinProgress::Pending) {
            return false;
        }
        let NodeState::Joining(join) = std::mem::replace(&mut self.state, NodeState::Off) else {
            unreachable!("polled above")
        };
        self.state = match progress {
            JoinProgress::Joined(fd) => {
                let bell = self.bell.take().expect("kept until joined");
                let me = self.index(around.id.rank).expect("of its node");
                let joined = self
                    .layout()
                    .and_then(|layout| ShmNode::join(fd, layout, me, around.id.job_id, bell));
                match joined {
                    Ok(node) => {
                        self.enter(&node, around.id.rank);
                        // Still watched: it closes when the leader's process ends.
                        self.kept.push(Kept {
                            key: join.key,
                            index: 0,
                            sock: join.into_socket(),
                        });
                        NodeState::Member { node, segment: None }
                    }
                    Err(e) => {
                        waiter.unwatch(join.socket());
                        NodeState::Failed(format!("the node's shared-memory segment: {e}"))
                    }
                }
            }
            JoinProgress::Failed(why) => {
                waiter.unwatch(join.socket());
                NodeState::Failed(why)
            }
            JoinProgress::Pending => unreachable!("checked above"),
        };
        true
    }

    /// Lanes waiting for a join: opened once both ends are members; passed on to the
    /// next transport if this rank could not join, or the peer has not joined in time.
    fn open_waiting(&mut self, around: &Around<'_>, events: &mut Vec<FabricEvent>) -> bool {
        let mut any = false;
        for (peer, deadline) in std::mem::take(&mut self.waiting) {
            if around.lanes.connected(peer) || self.laned.contains(&peer) {
                continue;
            }
            let index = self.index(peer).expect("a node-local peer");
            let why = match &self.state {
                NodeState::Member { node, .. } if node.member(index).is_some() => {
                    match self.open_lane((around.id.rank, peer), index, true, around.cfg) {
                        Ok(lane) => events.push(lane),
                        Err(refusal) => events.push(FabricEvent::Refused {
                            peer,
                            refusal,
                            purpose: Purpose::FirstLane,
                        }),
                    }
                    any = true;
                    continue;
                }
                NodeState::Failed(why) => why.clone(),
                _ if deadline.passed(around.now) => match self.state {
                    NodeState::Joining(_) => {
                        "this rank has not joined the node's shared memory in time".into()
                    }
                    _ => format!(
                        "rank {peer} has not joined the node's shared memory within {} ms",
                        deadline.limit_ms()
                    ),
                },
                _ => {
                    self.waiting.push((peer, deadline));
                    continue;
                }
            };
            let refusal = self.refuse((around.id.rank, peer), why);
            events.push(FabricEvent::PassedOn { peer, refusal });
            any = true;
        }
        any
    }

    /// At the leader: accepts ranks joining and hands them the segment once their
    /// handshake checks out.
    fn admit_joins(&mut self, around: &Around<'_>, waiter: &mut Waiter) -> bool {
        let mut any = false;
        let deadline = join_deadline(around.cfg, crate::clock::now());
        let accepted = self
            .listener
            .as_ref()
            .filter(|_| around.ready.contains(&Waiter::LISTENING))
            .map(|l| accept_all(l, deadline));
        for mut a in accepted.unwrap_or_default() {
            a.key = waiter.watch_handshake(a.socket());
            self.admits.push(a);
            any = true;
        }
        let mut i = 0;
        while i < self.admits.len() {
            let NodeState::Member {
                node,
                segment: Some(segment),
            } = &self.state
            else {
                // No segment to hand out: the joining ranks time out and use TCP.
                self.admits.clear();
                break;
            };
            let a = &mut self.admits[i];
            if !around.ready.contains(&a.key) && !a.deadline().passed(around.now) {
                i += 1;
                continue;
            }
            let progress = a.poll(around.id, around.now, nonce());
            if matches!(progress, AdmitProgress::Pending) {
                i += 1;
                continue;
            }
            let a = self.admits.swap_remove(i);
            any = true;
            let rank = around.id.rank;
            let admitted = match progress {
                // Its pid goes in its slot before it can take the slot.
                AdmitProgress::Admitted { peer, pid } => match self.local.binary_search(&peer).ok() {
                    Some(index) => {
                        node.admit(index, pid);
                        match a.hand_over(segment.as_fd()) {
                            Ok(()) => Some(index),
                            Err(e) => {
                                tracing::warn!("rank {rank}: rank {peer}: {e}");
                                None
                            }
                        }
                    }
                    None => {
                        tracing::warn!(
                            "rank {rank}: rank {peer} asked to join this node's shared memory, but \
                             its card names another node"
                        );
                        None
                    }
                },
                AdmitProgress::Failed(why) => {
                    tracing::warn!("rank {rank}: {why}");
                    None
                }
                AdmitProgress::Pending => None,
            };
            match admitted {
                // Still watched: it closes when the member's process ends.
                Some(index) => self.kept.push(Kept {
                    key: a.key,
                    index,
                    sock: a.into_socket(),
                }),
                None => waiter.unwatch(a.socket()),
            }
        }
        any
    }

    /// Kept join connections that closed: the rank at the other end has ended. Marks it
    /// gone in the segment, which tells every member (`take_announcements`).
    fn watch_kept(&mut self, around: &Around<'_>, waiter: &mut Waiter) -> bool {
        let mut any = false;
        let mut i = 0;
        while i < self.kept.len() {
            let k = &self.kept[i];
            if !around.ready.contains(&k.key) || !closed(&k.sock) {
                i += 1;
                continue;
            }
            let k = self.kept.swap_remove(i);
            waiter.unwatch(&k.sock);
            if let Some(node) = self.node() {
                node.mark_gone(k.index);
            }
            any = true;
        }
        any
    }
}

impl Fabric for Shm {
    fn refusal_before_dial(&self, peer: Rank, around: &Around<'_>) -> Option<Refusal> {
        if let Some(earlier) = around.refusals.of(peer, Transport::Shm) {
            return Some(earlier.clone());
        }
        if self.laned.contains(&peer) {
            return Some(Refusal::new(Transport::Shm, "its shared-memory lane was closed"));
        }
        match &self.state {
            NodeState::Off => Some(
                Refusal::new(Transport::Shm, "this rank has no shared-memory socket")
                    .helped_by("PONTOON_LOG=warn says why it could not be bound"),
            ),
            NodeState::Failed(why) => Some(Refusal::new(Transport::Shm, why.clone())),
            _ => None,
        }
    }

    /// Opens the lane at once if both are members of the node's segment, else once the
    /// joins are done.
    fn dial(
        &mut self,
        peer: Rank,
        _total: Duration,
        around: &Around<'_>,
        events: &mut Vec<FabricEvent>,
    ) -> Result<(), Refusal> {
        let Some(index) = self.index(peer) else {
            return Err(Refusal::new(
                Transport::Shm,
                format!("rank {peer} is not in this node's segment"),
            ));
        };
        match &self.state {
            NodeState::Member { node, .. } if node.member(index).is_some() => {
                events.push(self.open_lane((around.id.rank, peer), index, true, around.cfg)?);
            }
            _ => self
                .waiting
                .push((peer, join_deadline(around.cfg, crate::clock::now()))),
        }
        Ok(())
    }

    /// Drives the joins (this rank's, or the others' at the leader) and the lanes
    /// waiting for them.
    fn progress(&mut self, around: &Around<'_>, waiter: &mut Waiter, events: &mut Vec<FabricEvent>) -> bool {
        let mut any = self.admit_joins(around, waiter);
        any |= self.watch_kept(around, waiter);
        any |= self.drive_join(around, waiter);
        any |= self.open_waiting(around, events);
        any
    }

    fn dialling_first(&self, peer: Rank) -> bool {
        self.waiting_for(peer)
    }

    fn first_lane_up(&mut self, peer: Rank, _now: Nanos) {
        self.stop_waiting(peer);
    }

    /// A signalled lane is read when its slot's bit is set: its slot is noted, and it
    /// is read on the next pass (its first frames may have set the bit before the lane
    /// existed here).
    fn lane_taken(&mut self, peer: Rank, lane: LaneId, link: &AnyLink<PayloadToken>) {
        let (AnyLink::Shm(link), Some(index)) = (link, self.index(peer)) else {
            return;
        };
        if link.signalled() {
            if self.lane_at.len() <= index {
                self.lane_at.resize(index + 1, None);
            }
            self.lane_at[index] = Some(lane);
            self.again.push(lane);
        }
    }
}
