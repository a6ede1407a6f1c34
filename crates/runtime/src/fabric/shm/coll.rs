//! Collectives of exactly the ranks of this node on the node's collective area
//! (`transport::shm::coll` says how the area works and why every member runs
//! the area's collectives in the same order). Waiting here progresses everything else
//! (a member may need this rank's point-to-point before it gets to the collective) and
//! sleeps like any blocking call; a member whose process ended fails the collective.

use transport::shm::{COLL_COUNT_FROM, COLL_PHASES};

pub use transport::shm::COLL_DATA as NODE_COLL_DATA;

/// This rank's place in the node's sequence of collectives.
#[derive(Default)]
pub(crate) struct NodeColls {
    /// Collectives run so far.
    pub(crate) seq: u64,
    /// Per phase, on a node that counts arrivals: the collectives that waited for
    /// every member.
    pub(crate) synced: [u64; COLL_PHASES],
    /// Every member was done with this collective when this rank last looked.
    pub(crate) all_done: u64,
}

/// A communicator whose members are exactly this node's ranks: each member's slot in
/// the node's segment, in communicator order.
pub struct NodeMembers {
    pub(crate) slots: Vec<usize>,
}

impl NodeMembers {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether arrivals are counted (a large node) rather than read from the stamps.
    pub(crate) fn counted(&self) -> bool {
        self.slots.len() >= COLL_COUNT_FROM
    }
}

/// What a rank waits for in the area.
#[derive(Clone, Copy)]
pub(crate) enum Await {
    /// Every member done with collective `seq`.
    Done(u64),
    /// Every member posted to the current collective.
    Arrivals(usize),
    /// The root's post to the current collective.
    Stamp { slot: usize, phase: usize },
}
