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
    fn on_node(&self) -> Option<&NodeMembers> {
        self.d
            .node
            .get_or_init(|| {
                if self.d.remote.is_some() {
                    return None;
                }
                let members = self.d.group.shared_members();
                self.u.engine().ok()?.node_members(&members).map(Rc::new)
            })
            .as_deref()
    }

    /// Whether this communicator's small collectives meet on the node's collective area
    /// (its members are exactly this node's ranks, and all joined its shared memory).
    pub fn on_node_area(&self) -> bool {
        self.on_node().is_some()
    }

    /// MPI_Barrier on the node's collective area.
    pub(super) fn node_barrier(&self) -> Option<Result<()>> {
        let m = self.on_node()?;
        let mut rt = self.u.engine().ok()?;
        Some(
            rt.node_all(m, "a barrier", &[], (0, 0), &mut [])
                .map_err(Into::into),
        )
    }

    /// MPI_Bcast of `buf` (`n` bytes at every member) on the node's collective area.
    pub(super) fn node_bcast(&self, buf: &mut [u8], root: u32) -> Option<Result<()>> {
        let n = buf.len();
        if n > NODE_COLL_DATA {
            return None;
        }
        let m = self.on_node()?;
        let (me, root) = (self.rank() as usize, root as usize);
        let mut rt = self.u.engine().ok()?;
        let r = if me == root {
            rt.node_from_root(m, "a broadcast", me, root, (buf, n), 0, &mut [])
        } else {
            rt.node_from_root(m, "a broadcast", me, root, (&[], n), 0, buf)
        };
        Some(r.map_err(Into::into))
    }

    /// MPI_Scatter of blocks of `n` bytes from `send` at the root; `recv` None: in place
    /// at the root (its block stays in `send`).
    pub(super) fn node_scatter(
        &self,
        send: &[u8],
        recv: Option<&mut [u8]>,
        n: usize,
        root: u32,
    ) -> Option<Result<()>> {
        let p = self.size() as usize;
        let (me, root) = (self.rank() as usize, root as usize);
        if n * p > NODE_COLL_DATA {
            return None;
        }
        let m = self.on_node()?;
        if me == root && send.len() < n * p {
            return Some(Err(short("scatter", "send", n * p)));
        }
        let mut rt = self.u.engine().ok()?;
        let r = if me == root {
            if let Some(r) = recv {
                r[..n].copy_from_slice(&send[me * n..(me + 1) * n]);
            }
            rt.node_from_root(m, "a scatter", me, root, (&send[..n * p], n * p), 0, &mut [])
        } else {
            let Some(r) = recv else {
                return Some(Err(crate::Error::Arg(
                    "scatter: IN_PLACE is only for the root".into(),
                )));
            };
            rt.node_from_root(m, "a scatter", me, root, (&[], n * p), me * n, &mut r[..n])
        };
        Some(r.map_err(Into::into))
    }

    /// MPI_Gather of blocks of `n` bytes to `out` at the root; `input` None: in place
    /// at the root (its block is in `out`).
    pub(super) fn node_gather(
        &self,
        input: Option<&[u8]>,
        out: &mut [u8],
        n: usize,
        root: u32,
    ) -> Option<Result<()>> {
        let p = self.size() as usize;
        let (me, root) = (self.rank() as usize, root as usize);
        if n > NODE_COLL_DATA || n * p > MAX_READ {
            return None;
        }
        let m = self.on_node()?;
        if me == root && out.len() < n * p {
            return Some(Err(short("gather", "receive", n * p)));
        }
        let own;
        let mine = match input {
            Some(i) => &i[..n.min(i.len())],
            None if me == root => {
                own = out[me * n..(me + 1) * n].to_vec();
                &own
            }
            None => {
                return Some(Err(crate::Error::Arg(
                    "gather: IN_PLACE is only for the root".into(),
                )))
            }
        };
        let dest = if me == root {
            &mut out[..n * p]
        } else {
            &mut [][..]
        };
        let mut rt = self.u.engine().ok()?;
        Some(
            rt.node_to_root(m, "a gather", me, root, mine, (0, n), dest)
                .map_err(Into::into),
        )
    }

    /// MPI_Reduce of `n` bytes of packed `dt` elements to `out` at the root; `input`
    /// None: in place at the root. The root reduces in rank order, as allreduce does.
    pub(super) fn node_reduce(
        &self,
        input: Option<&[u8]>,
        out: &mut [u8],
        n: usize,
        (dt, op): (&Datatype, &Op),
        root: u32,
    ) -> Option<Result<()>> {
        let p = self.size() as usize;
        let (me, root) = (self.rank() as usize, root as usize);
        if n > NODE_COLL_DATA || n * p > MAX_READ || dt.size() == 0 {
            return None;
        }
        let m = self.on_node()?;
        if me == root && out.len() < n {
            return Some(Err(short("reduce", "receive", n)));
        }
        let mine = match input {
            Some(i) => &i[..n.min(i.len())],
            None if me == root => &out[..n],
            None => {
                return Some(Err(crate::Error::Arg(
                    "reduce: IN_PLACE is only for the root".into(),
                )))
            }
        };
        let mut parts = Parts::new(if me == root { n * p } else { 0 });
        let r = self
            .u
            .engine()
            .ok()?
            .node_to_root(m, "a reduce", me, root, mine, (0, n), parts.bytes());
        if let Err(e) = r {
            return Some(Err(e.into()));
        }
        if me != root {
            return Some(Ok(()));
        }
        Some(reduce_in_rank_order(parts.bytes(), p, &mut out[..n], dt, op))
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
        if n > NODE_COLL_DATA || n * p > MAX_READ {
            return None;
        }
        let m = self.on_node()?;
        if out.len() < n * p {
            return Some(Err(short("allgather", "receive", n * p)));
        }
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
        let mut rt = self.u.engine().ok()?;
        Some(
            rt.node_all(m, "an allgather", mine, (0, n), out)
                .map_err(Into::into),
        )
    }

    /// MPI_Alltoall of blocks of `n` bytes; `input` None: in place (the blocks to send
    /// are in `out`).
    pub(super) fn node_alltoall(&self, input: Option<&[u8]>, out: &mut [u8], n: usize) -> Option<Result<()>> {
        let p = self.size() as usize;
        if n * p > NODE_COLL_DATA {
            return None;
        }
        let m = self.on_node()?;
        if out.len() < n * p || input.is_some_and(|i| i.len() < n * p) {
            return Some(Err(short("alltoall", "send or receive", n * p)));
        }
        let me = self.rank() as usize;
        let own;
        let blocks = match input {
            Some(i) => &i[..n * p],
            None => {
                own = out[..n * p].to_vec();
                &own
            }
        };
        let mut rt = self.u.engine().ok()?;
        Some(
            rt.node_all(m, "an alltoall", blocks, (me * n, n), out)
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
        let mut parts = Parts::new(n * p);
        let r =
            self.u
                .engine()
                .ok()?
                .node_all(m, "an allreduce", input.unwrap_or(out), (0, n), parts.bytes());
        if let Err(e) = r {
            return Some(Err(e.into()));
        }
        Some(reduce_in_rank_order(parts.bytes(), p, out, dt, op))
    }
}

/// A buffer shorter than the collective's arguments say (checked after the way is
/// chosen, which must not depend on one member's buffers).
fn short(what: &str, which: &str, need: usize) -> crate::Error {
    crate::Error::Arg(format!(
        "{what}: the {which} buffer holds fewer than the {need} bytes the counts describe"
    ))
}

/// The members' parts of a reduction: small ones (the usual 8 B allreduce) on the stack.
enum Parts {
    Small([u8; 128], usize),
    Large(Vec<u8>),
}

impl Parts {
    fn new(len: usize) -> Parts {
        if len <= 128 {
            Parts::Small([0; 128], len)
        } else {
            Parts::Large(vec![0; len])
        }
    }

    fn bytes(&mut self) -> &mut [u8] {
        match self {
            Parts::Small(b, len) => &mut b[..*len],
            Parts::Large(v) => v,
        }
    }
}

/// `out` = parts₀ ∘ parts₁ ∘ … ∘ partsₚ₋₁, each of the `p` parts `out.len()` bytes
/// (outside the runtime's borrow: a user's operation may call MPI).
fn reduce_in_rank_order(parts: &[u8], p: usize, out: &mut [u8], dt: &Datatype, op: &Op) -> Result<()> {
    let n = out.len();
    if n == 0 || p == 0 {
        return Ok(());
    }
    let count = n as u64 / dt.size();
    out.copy_from_slice(&parts[(p - 1) * n..p * n]);
    for i in (0..p - 1).rev() {
        // The caller checked `op` against `dt` before the collective began.
        op.combine(dt, count, &parts[i * n..(i + 1) * n], out)?;
    }
    Ok(())
}
