//! Small blocking collectives of a communicator whose members are exactly the ranks of
//! one node (MPI_COMM_WORLD on one host, a communicator split by node), run on the
//! node's collective area (`runtime`'s `node_coll.rs`) instead of by messages: each
//! member writes its part once and reads what it needs from the others' parts. A first
//! alltoall of 256 ranks took eight rounds of messages, each to a peer never talked to
//! before; here it is one post, one wait and one read per rank.
//!
//! Each function returns `None` when the collective does not go this way (another
//! kind of communicator, or too much data), the same on every member: the decision
//! depends only on the communicator and on sizes every member passes alike.

use std::rc::Rc;

use runtime::{NodeMembers, NODE_COLL_DATA};

use crate::comm::Comm;
use crate::datatype::Datatype;
use crate::op::Op;
use crate::Result;

/// Most bytes one member reads from the others' parts in one collective: beyond, the
/// members' reads of everybody's part cost more than messages along a tree or ring.
const MAX_READ: usize = 64 << 10;

impl Comm<'_> {
    /// This communicator's members on the node's collective area, if they are exactly
    /// this node's ranks and the area serves them (settled on first use).
    fn on_node(&self) -> Option<Rc<NodeMembers>> {
        self.d
            .node
            .get_or_init(|| {
                if self.d.remote.is_some() {
                    return None;
                }
                let members = self.d.group.shared_members();
                self.u.rt.borrow_mut().node_members(&members).map(Rc::new)
            })
            .clone()
    }

    /// Whether this communicator's small collectives meet on the node's collective area
    /// (its members are exactly this node's ranks, and all joined its shared memory).
    pub fn on_node_area(&self) -> bool {
        self.on_node().is_some()
    }

    /// MPI_Barrier on the node's collective area.
    pub(super) fn node_barrier(&self) -> Option<Result<()>> {
        let m = self.on_node()?;
        let mut rt = self.u.rt.borrow_mut();
        Some(
            rt.node_all(&m, "a barrier", &[], (0, 0), &mut [])
                .map_err(Into::into),
        )
    }

    /// MPI_Bcast of `buf` (`n` bytes at every member) on the node's collective area.
    pub(super) fn node_bcast(&self, buf: &mut [u8], root: u32) -> Option<Result<()>> {
        if buf.len() > NODE_COLL_DATA {
            return None;
        }
        let m = self.on_node()?;
        let mut rt = self.u.rt.borrow_mut();
        Some(
            rt.node_bcast(&m, self.rank() as usize, root as usize, buf)
                .map_err(Into::into),
        )
    }

    /// MPI_Allgather of blocks of `n` bytes; `input` None: in place (this rank's block
    /// is in `out`).
    pub(super) fn node_allgather(
        &self,
        input: Option<&[u8]>,
        out: &mut [u8],
        n: usize,
    ) -> Option<Result<()>> {
        let p = self.size() as usize;
        if n > NODE_COLL_DATA || n * p > MAX_READ || out.len() < n * p {
            return None;
        }
        let m = self.on_node()?;
        let me = self.rank() as usize;
        // In place, this rank's block is copied first: the reads write all of `out`.
        let own;
        let mine = match input {
            Some(i) => i,
            None => {
                own = out[me * n..(me + 1) * n].to_vec();
                &own
            }
        };
        let mut rt = self.u.rt.borrow_mut();
        Some(
            rt.node_all(&m, "an allgather", mine, (0, n), out)
                .map_err(Into::into),
        )
    }

    /// MPI_Alltoall of blocks of `n` bytes; `input` None: in place (the blocks to send
    /// are in `out`).
    pub(super) fn node_alltoall(&self, input: Option<&[u8]>, out: &mut [u8], n: usize) -> Option<Result<()>> {
        let p = self.size() as usize;
        if n * p > NODE_COLL_DATA || out.len() < n * p || input.is_some_and(|i| i.len() < n * p) {
            return None;
        }
        let m = self.on_node()?;
        let me = self.rank() as usize;
        let own;
        let blocks = match input {
            Some(i) => &i[..n * p],
            None => {
                own = out[..n * p].to_vec();
                &own
            }
        };
        let mut rt = self.u.rt.borrow_mut();
        Some(
            rt.node_all(&m, "an alltoall", blocks, (me * n, n), out)
                .map_err(Into::into),
        )
    }

    /// MPI_Allreduce of `out.len()` bytes of packed `dt` elements; `input` None: in
    /// place. Every member reduces all parts in rank order (x₀ ∘ x₁ ∘ … ∘ xₚ₋₁), so
    /// non-commutative operations hold and every member gets the same bits.
    pub(super) fn node_allreduce(
        &self,
        input: Option<&[u8]>,
        out: &mut [u8],
        dt: &Datatype,
        op: &Op,
    ) -> Option<Result<()>> {
        let (p, n) = (self.size() as usize, out.len());
        if n > NODE_COLL_DATA || n * p > MAX_READ || dt.size() == 0 {
            return None;
        }
        let m = self.on_node()?;
        // Small vectors of all members (the usual 8 B allreduce) on the stack.
        let mut small = [0u8; 128];
        let mut large = Vec::new();
        let parts = if n * p <= small.len() {
            &mut small[..n * p]
        } else {
            large.resize(n * p, 0);
            &mut large[..]
        };
        let r = self
            .u
            .rt
            .borrow_mut()
            .node_all(&m, "an allreduce", input.unwrap_or(out), (0, n), parts);
        if let Err(e) = r {
            return Some(Err(e.into()));
        }
        // Outside the runtime's borrow: a user's operation may call MPI.
        let count = n as u64 / dt.size();
        out.copy_from_slice(&parts[(p - 1) * n..]);
        for i in (0..p - 1).rev() {
            if let Err(e) = op.apply(dt, count, &parts[i * n..(i + 1) * n], out) {
                return Some(Err(e));
            }
        }
        Some(Ok(()))
    }
}
