//! Shared memory as the event loop drives it (the state is `fabric::shm`).

use std::time::Duration;

use proto::dial::Deadline;
use proto::Rank;
use transport::shm::ShmNode;
use transport::Link;

use super::Runtime;
use crate::fabric::shm::{NodeState, Shm};
use crate::waiter::Waiter;

impl Runtime {
    /// After the cards are exchanged: this node's ranks; the leader makes the segment,
    /// the others start joining it.
    pub(super) fn start_shm(&mut self) {
        self.fabrics
            .shm
            .start(&self.job.id, &self.job.cards, &self.cfg, &mut self.waiter);
    }

    /// Start-up waits (at most `limit`) until every rank of the node joined its segment:
    /// the leader admits the others only while it runs the event loop, so it must not
    /// leave for the application first. The others wait for their own join only: a
    /// lane to a peer that has not joined waits for it, while the ranks already in start
    /// their first collective (at 256 ranks, 5 % sooner to its end). The leader sleeps
    /// until a join's socket or the last to enter rings it (`ShmNode::enter`).
    pub(super) fn settle_shm(&mut self, limit: Duration) {
        let deadline = Deadline::after(crate::clock::now(), crate::clock::nanos(limit));
        let leader = matches!(self.fabrics.shm.state, NodeState::Member { segment: Some(_), .. });
        let done = |shm: &Shm| {
            if leader {
                shm.settled()
            } else {
                !matches!(shm.state, NodeState::Joining(_))
            }
        };
        while !done(&self.fabrics.shm) && !deadline.passed(crate::clock::now()) {
            if !self.progress() {
                self.sleep(super::IDLE_SLEEP);
            }
        }
        if leader && !self.fabrics.shm.settled() {
            if let Some(node) = self.fabrics.shm.node() {
                // The node's collectives go by messages then: members that joined
                // wait for this verdict (`node_coll.rs`).
                if !node.decide_collectives(false) {
                    node.wake_all();
                }
                let missing: Vec<Rank> = (0..self.fabrics.shm.local.len())
                    .filter(|&i| node.member(i).is_none())
                    .map(|i| self.fabrics.shm.local[i])
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

    /// Reads the signalled lanes that were written to (their bits taken from this rank's
    /// bitmap of writers: one load per 64 ranks of the node when none were), and those
    /// to read again. A lane whose own writes left bytes queued has set its bit itself,
    /// and a consumer that made room for them sets it too.
    pub(super) fn service_signalled(&mut self) -> bool {
        let mut lanes = std::mem::take(&mut self.fabrics.shm.reading);
        lanes.append(&mut self.fabrics.shm.again);
        let mut slots = std::mem::take(&mut self.fabrics.shm.written);
        if let Some(node) = self.fabrics.shm.node().filter(|n| n.layout().signalled()) {
            node.take_written(&mut slots);
        }
        lanes.extend(
            slots
                .drain(..)
                .filter_map(|s| self.fabrics.shm.lane_at.get(s).copied().flatten()),
        );
        self.fabrics.shm.written = slots;
        let mut any = false;
        for &lane in &lanes {
            any |= self.service_link(lane, true);
            // Bytes left behind set no bit of their own: look again on the next pass.
            if self.lanes.get_mut(lane).is_some_and(|l| !l.link.arm_wakeup())
                && !self.fabrics.shm.again.contains(&lane)
            {
                self.fabrics.shm.again.push(lane);
            }
        }
        lanes.clear();
        self.fabrics.shm.reading = lanes;
        any
    }

    /// At finalize: the node's members will see this rank's end as no failure.
    pub(super) fn shm_finalized(&self) {
        if let Some(node) = self.fabrics.shm.node() {
            node.mark_finalized();
        }
    }

    /// Whether a signalled lane is to be read on the next pass (no sleep before).
    pub(super) fn signalled_waiting(&self) -> bool {
        !self.fabrics.shm.again.is_empty()
    }

    /// Lanes other members opened to this rank: taken up at once (a load per 64 ranks of
    /// the node when there are none, on every progress pass); and lanes to members whose
    /// process ended: closed (one more load).
    pub(super) fn take_shm_announcements(&mut self) -> bool {
        let mut events = Vec::new();
        let any = self
            .fabrics
            .shm
            .take_announcements(self.job.id.rank, &self.cfg, &mut events);
        self.take_fabric_events(events);
        any
    }

    /// Before a sleep: announcements and frames ring this rank's bell from now on.
    /// `false` when an announcement waits already.
    pub(super) fn arm_shm(&self) -> bool {
        self.fabrics.shm.node().is_none_or(ShmNode::arm)
    }

    /// After a sleep: peers need not ring; and what rang is taken from the bell.
    pub(super) fn disarm_shm(&self) {
        if let Some(node) = self.fabrics.shm.node() {
            node.disarm();
        }
    }

    /// Empties the bell once it rang (a full queue would refuse the next wake-up).
    pub(super) fn drain_bell(&mut self) {
        if self.waiter.take_key(Waiter::BELL) {
            if let Some(bell) = self
                .fabrics
                .shm
                .node()
                .map(ShmNode::bell)
                .or(self.fabrics.shm.bell.as_ref())
            {
                bell.drain();
            }
        }
    }
}
