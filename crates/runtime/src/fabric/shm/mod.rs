//! Shared memory with the ranks of this node, as the event loop drives it: the node's
//! ranks and its leader (the lowest) from the cards, the leader's segment and the joins
//! it admits, this rank's own join, lanes opened at once to members and announced to
//! them, lanes the others announced taken up, the end of a member's process (seen as its
//! join connection closing), and the fall-back to TCP, with the reason, when shared
//! memory cannot be had (see `transport::shm` and `join.rs`).

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};

use proto::dial::Deadline;
use proto::{LaneId, Rank};
use transport::shm::{Bell, Layout, ShmNode};

pub(crate) mod coll;
pub(crate) mod join;
pub(crate) mod wireup;

use crate::fabric::shm::join::{ShmAdmit, ShmJoin};
use coll::NodeColls;

/// Bytes of shared-memory receive rings one rank may hold, over all its node-local peers.
pub(crate) const SHM_BUDGET: usize = 8 << 20;
/// Largest ring of one shared-memory lane (per direction).
pub(crate) const SHM_MAX_RING: usize = 1 << 20;

/// The ring size for a node of `ranks` ranks: the largest power of two below
/// [`SHM_BUDGET`] / (node-local peers), so a node of many ranks gets smaller rings, not
/// more memory (within the budget up to 512 ranks; beyond, `MIN_RING` wins).
pub(crate) fn ring_for(ranks: usize) -> usize {
    let ring = (SHM_BUDGET / (ranks.max(2) - 1)).next_power_of_two() / 2;
    ring.clamp(transport::shm::MIN_RING, SHM_MAX_RING)
}

pub(crate) enum NodeState {
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
pub(crate) struct Kept {
    /// Its key in the rank's waiter.
    pub(crate) key: u64,
    /// The slot of the rank at the other end.
    pub(crate) index: usize,
    pub(crate) sock: UnixStream,
}

/// This rank's part in its node's shared memory.
pub(crate) struct Shm {
    /// This node's ranks in ascending order; the first is the leader.
    pub(crate) local: Vec<Rank>,
    /// This rank's place in the node's collectives on its collective area.
    pub(crate) colls: NodeColls,
    pub(crate) listener: Option<UnixListener>,
    /// This rank's bell until it is a member (then the node holds it).
    pub(crate) bell: Option<Bell>,
    pub(crate) state: NodeState,
    /// Ranks joining, at the leader.
    pub(crate) admits: Vec<ShmAdmit>,
    /// Node-local peers whose first lane waits for a join (theirs or ours), until when.
    pub(crate) waiting: Vec<(Rank, Deadline)>,
    /// Peers that have had a shared-memory lane: a ring's counters cannot start again,
    /// so a lane that closed is never opened again.
    pub(crate) laned: HashSet<Rank>,
    /// Join connections kept to learn of the other end's process ending.
    pub(crate) kept: Vec<Kept>,
    /// Node-local ranks whose process ended, their lanes closed.
    pub(crate) gone: HashSet<Rank>,
    /// On a signalled node: each slot's lane, read when the slot's bit in this rank's
    /// bitmap of writers is taken.
    pub(crate) lane_at: Vec<Option<LaneId>>,
    /// Slots taken from the bitmap, and the lanes to read this pass (kept for their
    /// allocations: this runs on every pass).
    pub(crate) written: Vec<usize>,
    pub(crate) reading: Vec<LaneId>,
    /// Signalled lanes to read on the next pass whatever the bits say: those opened
    /// since (their first frames may have set their bits before the lanes existed
    /// here), and those a read left bytes in (a read stops at a box's place in the
    /// stream, and at the tail it saw).
    pub(crate) again: Vec<LaneId>,
    /// This rank refuses the node's collective area (`Config::several_threads`): it
    /// says so before it enters, so the node decides alike for every member.
    pub(crate) refuse_collectives: bool,
}

impl Shm {
    pub(crate) fn off() -> Shm {
        Shm {
            local: Vec::new(),
            listener: None,
            bell: None,
            state: NodeState::Off,
            admits: Vec::new(),
            waiting: Vec::new(),
            laned: HashSet::new(),
            kept: Vec::new(),
            gone: HashSet::new(),
            lane_at: Vec::new(),
            written: Vec::new(),
            reading: Vec::new(),
            again: Vec::new(),
            colls: NodeColls::default(),
            refuse_collectives: false,
        }
    }

    /// Binds this rank's join socket and bell, before the ranks exchange cards, so that
    /// both exist once any rank of the node looks (`Off` where shared memory is not
    /// allowed or cannot be had here).
    pub(crate) fn bind(allowed: bool, job_id: &[u8; 16], rank: Rank) -> Shm {
        let mut shm = Shm::off();
        if !allowed {
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
    pub(crate) fn layout(&self) -> std::io::Result<Layout> {
        Layout::new(self.local.len(), ring_for(self.local.len()))
    }

    pub(crate) fn index(&self, rank: Rank) -> Option<usize> {
        self.local.binary_search(&rank).ok()
    }

    /// The pid of the node's rank `rank`, as the node segment records it.
    pub(crate) fn pid_of(&self, rank: Rank) -> Option<u32> {
        let index = self.index(rank)?;
        self.node()?.member(index).map(|(_, pid)| pid)
    }

    pub(crate) fn node(&self) -> Option<&ShmNode> {
        match &self.state {
            NodeState::Member { node, .. } => Some(node),
            _ => None,
        }
    }

    /// Whether this rank's own join is under way.
    pub(crate) fn joining(&self) -> bool {
        matches!(self.state, NodeState::Joining(_))
    }

    /// Whether joins need the event loop's attention on every pass. (Lanes waiting for
    /// a peer's join do not: they are looked at every few milliseconds, and a rank
    /// polling for them on every pass starved the ranks still joining.)
    pub(crate) fn busy(&self) -> bool {
        matches!(self.state, NodeState::Joining(_)) || !self.admits.is_empty()
    }

    /// The deadlines of the joins under way (this rank's, or those the leader admits)
    /// and of the lanes waiting for them. Until one passes, a sleeping rank wakes for a
    /// join only when its socket says so: with hundreds of ranks joining at once, each
    /// waking every millisecond to look took the CPU from the leader admitting them and
    /// from the ranks still reading the cards.
    pub(crate) fn join_deadlines(&self) -> impl Iterator<Item = Deadline> + '_ {
        let own = match &self.state {
            NodeState::Joining(join) => Some(join.deadline()),
            _ => None,
        };
        let lanes = self.waiting.iter().map(|&(_, deadline)| deadline);
        self.admits.iter().map(ShmAdmit::deadline).chain(own).chain(lanes)
    }

    /// Whether a first lane to `peer` waits for a join.
    pub(crate) fn waiting_for(&self, peer: Rank) -> bool {
        self.waiting.iter().any(|&(p, _)| p == peer)
    }

    /// The first lane to `peer` came up some other way.
    pub(crate) fn stop_waiting(&mut self, peer: Rank) {
        self.waiting.retain(|&(p, _)| p != peer);
    }

    /// Whether everything of this node's shared memory that start-up waits for is done:
    /// this rank and every other rank of the node joined (or this rank gave up).
    pub(crate) fn settled(&self) -> bool {
        match &self.state {
            NodeState::Joining(_) => false,
            NodeState::Member { node, .. } => (0..self.local.len()).all(|i| node.member(i).is_some()),
            _ => true,
        }
    }
}
