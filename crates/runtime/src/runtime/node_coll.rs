//! Collectives of exactly the ranks of this node on the node's collective area
//! (`transport::shm`, `shm_coll.rs`, says how the area works and why every member runs
//! the area's collectives in the same order). Waiting here progresses everything else
//! (a member may need this rank's point-to-point before it gets to the collective) and
//! sleeps like any blocking call; a member whose process ended fails the collective.

use std::time::Instant;

use super::sleep::Idle;

use proto::{Failure, Rank};
use transport::shm::CollCounter;

use super::{Error, Runtime};

pub use transport::shm::COLL_DATA as NODE_COLL_DATA;

/// This rank's place in the node's sequence of collectives.
#[derive(Default)]
pub(super) struct NodeColls {
    /// Collectives run so far.
    seq: u64,
    /// Per parity: collectives run, and those of them that waited for every member.
    ran: [u64; 2],
    synced: [u64; 2],
}

/// A communicator whose members are exactly this node's ranks: each member's slot in
/// the node's segment, in communicator order.
pub struct NodeMembers {
    slots: Vec<usize>,
}

impl NodeMembers {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// What a rank waits for in the area.
#[derive(Clone, Copy)]
enum Await {
    /// Every member departed from the last collective of this parity.
    Departures(usize),
    Arrivals(usize),
    /// The root's post.
    Stamp {
        slot: usize,
        parity: usize,
    },
}

impl Runtime {
    /// `Some` when `members` (job ranks, in communicator order) are exactly this node's
    /// ranks and the node's collective area serves them: every rank of the node joined
    /// the segment. Waits until that is settled (the leader settles it when it stops
    /// waiting for joins at the latest), so every member decides alike.
    pub fn node_members(&mut self, members: &[Rank]) -> Option<NodeMembers> {
        let n = self.shm.local.len();
        if n < 2 || members.len() != n {
            return None;
        }
        // Members of a communicator are distinct: n of this node's ranks are all of them.
        let slots = members
            .iter()
            .map(|&r| self.shm.index(r))
            .collect::<Option<Vec<usize>>>()?;
        // A rank still joining waits for its join (which has its own deadline).
        let give_up = Instant::now() + 2 * self.cfg.connect_timeout;
        loop {
            if !self.shm.joining() {
                let verdict = self.shm.node()?.collectives_verdict();
                if let Some(serves) = verdict {
                    return serves.then_some(NodeMembers { slots });
                }
                if Instant::now() >= give_up {
                    // The leader may be gone: settle it here rather than wait on.
                    let node = self.shm.node()?;
                    let serves = node.decide_collectives(false);
                    node.wake_all();
                    return serves.then_some(NodeMembers { slots });
                }
            }
            if !self.progress() {
                self.sleep(super::IDLE_SLEEP.min(self.cfg.connect_timeout));
            }
        }
    }

    /// A collective that waits for every member: each posts `post` (the pieces one after
    /// the other, at most [`NODE_COLL_DATA`] bytes), and once all have, `take(i, bytes)`
    /// receives, for each communicator rank `i`, the bytes `pick(i)` (offset, length)
    /// of its post. `what` names the collective in errors.
    pub fn node_all(
        &mut self,
        m: &NodeMembers,
        what: &str,
        post: &[&[u8]],
        pick: impl Fn(usize) -> (usize, usize),
        mut take: impl FnMut(usize, &[u8]),
    ) -> Result<(), Error> {
        let parity = self.node_begin(m, what)?;
        let seq = self.shm.colls.seq;
        self.shm.colls.synced[parity] += 1;
        let all = m.len() as u64 * self.shm.colls.synced[parity];
        let node = self.shm.node().ok_or_else(|| lost(what))?;
        node.coll_post(parity, seq, post)
            .map_err(|e| Error::Setup(format!("{what} on the node's shared memory: {e}")))?;
        if node.coll_count_me(CollCounter::Arrived, parity) == all {
            node.wake_all();
        }
        self.node_wait(m, what, Await::Arrivals(parity))?;
        let node = self.shm.node().ok_or_else(|| lost(what))?;
        let mut bytes = Vec::new();
        for (i, &slot) in m.slots.iter().enumerate() {
            let (offset, len) = pick(i);
            bytes.resize(len, 0);
            node.coll_read(slot, parity, offset, &mut bytes)
                .map_err(|e| Error::Setup(format!("{what} on the node's shared memory: {e}")))?;
            take(i, &bytes);
        }
        self.node_depart(m, parity);
        Ok(())
    }

    /// The root's `data` (communicator rank `root`) lands in every member's `data` (at
    /// most [`NODE_COLL_DATA`] bytes).
    pub fn node_bcast(
        &mut self,
        m: &NodeMembers,
        me: usize,
        root: usize,
        data: &mut [u8],
    ) -> Result<(), Error> {
        let what = "a broadcast";
        let Some(&root_slot) = m.slots.get(root) else {
            return Err(Error::Setup(format!(
                "{what}: no root {root} among {} members",
                m.len()
            )));
        };
        if me == root {
            let parity = self.node_begin(m, what)?;
            let seq = self.shm.colls.seq;
            let node = self.shm.node().ok_or_else(|| lost(what))?;
            node.coll_post(parity, seq, &[data])
                .map_err(|e| Error::Setup(format!("{what} on the node's shared memory: {e}")))?;
            node.wake_all();
            self.node_depart(m, parity);
            return Ok(());
        }
        let parity = self.node_next();
        self.node_wait(
            m,
            what,
            Await::Stamp {
                slot: root_slot,
                parity,
            },
        )?;
        let node = self.shm.node().ok_or_else(|| lost(what))?;
        node.coll_read(root_slot, parity, 0, data)
            .map_err(|e| Error::Setup(format!("{what} on the node's shared memory: {e}")))?;
        self.node_depart(m, parity);
        Ok(())
    }

    /// Numbers the next collective; returns its parity.
    fn node_next(&mut self) -> usize {
        self.shm.colls.seq += 1;
        (self.shm.colls.seq % 2) as usize
    }

    /// Numbers the next collective, for a rank that posts to it: returns its parity
    /// once every member departed from the last collective that used this buffer.
    fn node_begin(&mut self, m: &NodeMembers, what: &str) -> Result<usize, Error> {
        let parity = self.node_next();
        self.node_wait(m, what, Await::Departures(parity))?;
        Ok(parity)
    }

    /// This rank is done with the current collective of `parity`.
    fn node_depart(&mut self, m: &NodeMembers, parity: usize) {
        self.shm.colls.ran[parity] += 1;
        let all = m.len() as u64 * self.shm.colls.ran[parity];
        if let Some(node) = self.shm.node() {
            if node.coll_count_me(CollCounter::Departed, parity) == all
                && node.coll_take_departure_waiters(parity)
            {
                node.wake_all();
            }
        }
    }

    /// Whether `what` holds in the area.
    fn node_ready(&self, m: &NodeMembers, what: Await) -> bool {
        let Some(node) = self.shm.node() else {
            return true; // the caller finds the node gone
        };
        let c = &self.shm.colls;
        let n = m.len() as u64;
        match what {
            Await::Departures(p) => node.coll_count(CollCounter::Departed, p) >= n * c.ran[p],
            Await::Arrivals(p) => node.coll_count(CollCounter::Arrived, p) >= n * c.synced[p],
            Await::Stamp { slot, parity } => node.coll_stamp(slot, parity) >= c.seq,
        }
    }

    /// Progresses, then sleeps, until `what` holds; fails once a member's process ended
    /// without finalizing.
    fn node_wait(&mut self, m: &NodeMembers, op: &str, what: Await) -> Result<(), Error> {
        let mut idle = Idle::default();
        loop {
            if self.node_ready(m, what) {
                return self.shm.node().map(|_| ()).ok_or_else(|| lost(op));
            }
            self.node_check_members(m, op)?;
            if self.progress() {
                continue;
            }
            let say_so = |rt: &Runtime| {
                if let (Await::Departures(p), Some(node)) = (what, rt.shm.node()) {
                    node.coll_want_departures(p);
                }
            };
            self.idle(&mut idle, say_so, &mut |rt| rt.node_ready(m, what));
        }
    }

    /// Fails when a member's process ended without finalizing: it will never post.
    fn node_check_members(&self, m: &NodeMembers, op: &str) -> Result<(), Error> {
        let Some(node) = self.shm.node() else {
            return Err(lost(op));
        };
        if node.gone_count() == 0 {
            return Ok(());
        }
        match m.slots.iter().find(|&&slot| node.failed(slot)) {
            Some(&slot) => Err(Error::Failed(Failure::PeerFailed {
                rank: self.shm.local[slot],
                cause: format!(
                    "its process ended while rank {} waited for it in {op} on the node's shared memory",
                    self.id.rank
                ),
            })),
            None => Ok(()),
        }
    }
}

fn lost(what: &str) -> Error {
    Error::Setup(format!("{what}: this rank lost the node's shared memory"))
}
