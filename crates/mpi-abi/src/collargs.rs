//! What every form of a collective (blocking, non-blocking, persistent, on an
//! intercommunicator) decodes from its C arguments the same way: the root, MPI_IN_PLACE,
//! which counts are significant, and the per-rank pieces of the `v` and `w` forms.

use std::os::raw::c_int;

use pontoon::{Comm, Datatype, Rank};

use crate::abi::*;
use crate::boundary::{count, fail, Fail, Res, Wide};
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::In;
use crate::state::Mpi;

/// A root argument, checked against the communicator.
pub(crate) fn root_rank(c: &Comm, root: c_int) -> Result<Rank, Fail> {
    if c.is_inter() {
        // A root on an intercommunicator is MPI_ROOT, MPI_PROC_NULL or a remote rank:
        // the collectives that take those go to `intercolls` before this.
        return Err(pontoon::coll::not_on_intercomms().into());
    }
    if root < 0 || root as u32 >= c.size() {
        return fail(
            MPI_ERR_ROOT,
            format!(
                "root {root} is not a rank of this communicator of {} ranks",
                c.size()
            ),
        );
    }
    Ok(root as Rank)
}

/// The send and receive counts, each checked only where the standard makes it
/// significant, which is where its datatype is (`Some`): not a non-root's receive side,
/// not the send side given MPI_IN_PLACE (programs pass -1 there). Insignificant ones are 0.
fn significant_counts(
    send: (i64, &Option<Datatype>),
    recv: (i64, &Option<Datatype>),
) -> Result<(u64, u64), Fail> {
    let one = |(n, dt): (i64, &Option<Datatype>), what| match dt {
        Some(_) => count(n, what),
        None => Ok(0),
    };
    Ok((one(send, "sendcount")?, one(recv, "recvcount")?))
}

/// Which of the collectives with one block size per side.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    Gather,
    Scatter,
    Allgather,
    Alltoall,
}

/// A gather, scatter, allgather or alltoall as it stands at this rank of an
/// intracommunicator, decoded once for the blocking, non-blocking and persistent forms:
/// its root, and each side that is significant here, with its count per block and its
/// datatype. `in_place`: MPI_IN_PLACE stands for the side that is not there (the send
/// side of the gathers and alltoall, the receive side of a scatter).
pub(crate) struct Blocks {
    pub which: Which,
    pub root: Option<Rank>,
    pub in_place: bool,
    pub send: Option<(u64, Datatype)>,
    pub recv: Option<(u64, Datatype)>,
}

/// One side of a collective's C arguments: buffer, count, datatype.
pub(crate) type Side<B> = (B, i64, MPI_Datatype);

impl Blocks {
    pub(crate) fn decode(
        m: &Mpi,
        c: &Comm,
        which: Which,
        (sendbuf, sendcount, sendtype): Side<SendBuf>,
        (recvbuf, recvcount, recvtype): Side<RecvBuf>,
        root: Option<c_int>,
    ) -> Result<Blocks, Fail> {
        let root = root.map(|r| root_rank(c, r)).transpose()?;
        let at_root = root.is_none_or(|r| r == c.rank());
        let (ip, send_here, recv_here) = match which {
            Which::Scatter => {
                let ip = recvbuf.in_place();
                (ip, root == Some(c.rank()), !ip)
            }
            _ => {
                let ip = sendbuf.in_place();
                (ip, !ip, at_root)
            }
        };
        if ip && !at_root {
            return fail(MPI_ERR_BUFFER, "MPI_IN_PLACE is for the root only");
        }
        let rdt = recv_here.then(|| m.committed(recvtype)).transpose()?;
        let sdt = send_here.then(|| m.committed(sendtype)).transpose()?;
        let (sn, rn) = significant_counts((sendcount, &sdt), (recvcount, &rdt))?;
        Ok(Blocks {
            which,
            root,
            in_place: ip,
            send: sdt.map(|t| (sn, t)),
            recv: rdt.map(|t| (rn, t)),
        })
    }

    /// Bytes of one rank's block: what it sends (a scatter: what it receives), else
    /// the other side's.
    pub(crate) fn block_bytes(&self) -> usize {
        let bytes = |s: &Option<(u64, Datatype)>| s.as_ref().map(|(n, t)| (n * t.size()) as usize);
        match self.which {
            Which::Scatter => bytes(&self.recv).or(bytes(&self.send)),
            _ => bytes(&self.send).or(bytes(&self.recv)),
        }
        .unwrap_or(0)
    }

    /// Elements of the send side's datatype this rank sends (`size`: the communicator's).
    pub(crate) fn send_count(&self, size: u64) -> u64 {
        let per_rank = matches!(self.which, Which::Alltoall | Which::Scatter);
        self.send
            .as_ref()
            .map_or(0, |(n, _)| if per_rank { n * size } else { *n })
    }

    /// Elements of the receive side's datatype this rank receives.
    pub(crate) fn recv_count(&self, size: u64) -> u64 {
        let one = matches!(self.which, Which::Scatter);
        self.recv
            .as_ref()
            .map_or(0, |(n, _)| if one { *n } else { n * size })
    }
}

/// A reduction as every form takes it (reduce, allreduce, scan, exscan; blocking,
/// non-blocking, persistent) on an intracommunicator: the datatype, the operation, the
/// count, MPI_IN_PLACE, and a reduce's root (`Some`), where MPI_IN_PLACE is for the root
/// only.
pub(crate) struct Reduction {
    pub dt: Datatype,
    pub op: pontoon::Op,
    pub n: u64,
    pub in_place: bool,
    pub root: Option<Rank>,
}

impl Reduction {
    pub(crate) fn decode(
        m: &Mpi,
        c: &Comm,
        sendbuf: SendBuf,
        n: i64,
        (datatype, op): (MPI_Datatype, MPI_Op),
        root: Option<c_int>,
    ) -> Result<Reduction, Fail> {
        let (dt, op) = (m.committed(datatype)?, m.op(op)?);
        let root = root.map(|r| root_rank(c, r)).transpose()?;
        let n = count(n, "count")?;
        let in_place = sendbuf.in_place();
        if in_place && root.is_some_and(|r| r != c.rank()) {
            return fail(MPI_ERR_BUFFER, "MPI_IN_PLACE is for the root only");
        }
        Ok(Reduction {
            dt,
            op,
            n,
            in_place,
            root,
        })
    }

    /// The bytes of one rank's contribution.
    pub(crate) fn bytes(&self) -> usize {
        (self.n * self.dt.size()) as usize
    }

    /// Whether the result lands at this rank (`me`): everywhere but at a reduce's
    /// other ranks.
    pub(crate) fn lands_at(&self, me: Rank) -> bool {
        self.root.is_none_or(|r| r == me)
    }
}

/// A buffer argument pieces are read from (a receive buffer is written to as well).
pub(crate) trait PieceBase: Copy {
    fn read(&self) -> SendBuf;
}

impl PieceBase for SendBuf {
    fn read(&self) -> SendBuf {
        *self
    }
}

impl PieceBase for RecvBuf {
    fn read(&self) -> SendBuf {
        self.as_send()
    }
}

/// Pieces of a C buffer, one per rank: `(count, byte displacement, datatype)`.
pub(crate) struct Pieces<B> {
    base: B,
    list: Vec<(u64, i64, Datatype)>,
}

impl<B: PieceBase> Pieces<B> {
    /// `counts[i]` elements of `dt` at element displacement `displs[i]` (in extents).
    pub(crate) fn uniform<C: Wide, D: Wide>(
        m: &Mpi,
        base: B,
        n: usize,
        counts: In<C>,
        displs: In<D>,
        dt: MPI_Datatype,
    ) -> Result<Pieces<B>, Fail> {
        let dt = m.committed(dt)?;
        let ext = dt.extent().1;
        let (c, d) = (counts.slice(n, "counts")?, displs.slice(n, "displs")?);
        let list = c
            .iter()
            .zip(d)
            .map(|(c, d)| Ok((count(c.wide(), "count")?, d.wide() * ext, dt.clone())))
            .collect::<Result<_, Fail>>()?;
        Ok(Pieces { base, list })
    }

    /// Alltoallw's form: a datatype per piece, displacements in bytes (`int`, or
    /// `MPI_Aint` for the neighbourhood form).
    pub(crate) fn typed<C: Wide, D: Wide>(
        m: &Mpi,
        base: B,
        n: usize,
        counts: In<C>,
        displs: In<D>,
        types: In<MPI_Datatype>,
    ) -> Result<Pieces<B>, Fail> {
        let (c, d, t) = (
            counts.slice(n, "counts")?,
            displs.slice(n, "displs")?,
            types.slice(n, "types")?,
        );
        let mut list = Vec::with_capacity(n);
        for i in 0..n {
            list.push((count(c[i].wide(), "count")?, d[i].wide(), m.committed(t[i])?));
        }
        Ok(Pieces { base, list })
    }

    pub(crate) fn counts(&self) -> Vec<usize> {
        self.list
            .iter()
            .map(|(c, _, t)| (*c * t.size()) as usize)
            .collect()
    }

    /// Where each piece sits in the packed buffer, back to back.
    pub(crate) fn offsets(&self) -> Vec<usize> {
        let mut at = 0;
        self.counts()
            .iter()
            .map(|n| {
                let o = at;
                at += n;
                o
            })
            .collect()
    }

    pub(crate) fn total(&self) -> usize {
        self.counts().iter().sum()
    }

    /// The pieces, packed back to back.
    pub(crate) fn pack(&self) -> Result<Vec<u8>, Fail> {
        let mut out = Vec::with_capacity(self.total());
        for (c, d, t) in &self.list {
            out.extend_from_slice(&self.base.read().offset(*d).data(*c, t)?.packed()?);
        }
        Ok(out)
    }
}

impl Pieces<RecvBuf> {
    /// Unpacks `packed` (the pieces back to back) into them.
    pub(crate) fn unpack(&self, packed: &[u8]) -> Res {
        for ((c, d, t), off) in self.list.iter().zip(self.offsets()) {
            let dst = self.base.offset(*d).data_mut(*c, t)?;
            let n = (*c * t.size()) as usize;
            t.unpack(*c, &packed[off..off + n], dst.bytes, dst.origin)?;
        }
        Ok(())
    }
}
