//! What the forms of a `v` or `w` collective and of a reduce_scatter decode from their C
//! arguments, once for the blocking and non-blocking forms (the persistent ones start
//! the non-blocking ones): the root, MPI_IN_PLACE, the one block a rank sends or
//! receives, the per-rank pieces on the other side, and a reduce_scatter's blocks.

use std::os::raw::c_int;

use pontoon::{Comm, Datatype, Rank};

use crate::abi::*;
use crate::boundary::{count, fail, Fail, Wide};
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::In;
use crate::collargs::{root_rank, Pieces, Side};
use crate::state::Mpi;

/// A gatherv, allgatherv or scatterv at this rank of an intracommunicator: its root (none
/// for allgatherv), MPI_IN_PLACE, the one block this rank sends (the gathers) or
/// receives (scatterv) with its count and datatype (none in place), and the per-rank
/// pieces where they are significant: what the root gathers into (every rank for
/// allgatherv) or scatters from.
pub(crate) struct Varying<B> {
    pub root: Option<Rank>,
    pub in_place: bool,
    pub block: Option<(u64, Datatype)>,
    pub pieces: Option<Pieces<B>>,
}

/// A side given as per-rank counts and displacements of one datatype.
pub(crate) type VSide<B, C, D> = (B, In<C>, In<D>, MPI_Datatype);

impl<B> Varying<B> {
    /// Bytes of the one block, if this rank has it.
    pub(crate) fn block_bytes(&self) -> Option<usize> {
        self.block.as_ref().map(|(n, t)| (n * t.size()) as usize)
    }
}

impl Varying<RecvBuf> {
    /// Allgatherv's pieces, which every rank has.
    pub(crate) fn every_rank_pieces(&mut self) -> Result<Pieces<RecvBuf>, Fail> {
        self.pieces
            .take()
            .ok_or_else(|| Fail::new(MPI_ERR_INTERN, "allgatherv decoded without its pieces"))
    }

    /// Gatherv (`root` given) and allgatherv.
    pub(crate) fn gathering<C: Wide, D: Wide>(
        m: &Mpi,
        c: &Comm,
        (sendbuf, sendcount, sendtype): Side<SendBuf>,
        (recvbuf, recvcounts, displs, recvtype): VSide<RecvBuf, C, D>,
        root: Option<c_int>,
    ) -> Result<Varying<RecvBuf>, Fail> {
        let root = root.map(|r| root_rank(c, r)).transpose()?;
        let at_root = root.is_none_or(|r| r == c.rank());
        let in_place = sendbuf.in_place();
        if in_place && !at_root {
            return fail(MPI_ERR_BUFFER, "MPI_IN_PLACE is for the root only");
        }
        let block = match in_place {
            true => None,
            false => Some((count(sendcount, "sendcount")?, m.committed(sendtype)?)),
        };
        let size = c.size() as usize;
        let pieces = at_root
            .then(|| Pieces::uniform(m, recvbuf, size, recvcounts, displs, recvtype))
            .transpose()?;
        Ok(Varying {
            root,
            in_place,
            block,
            pieces,
        })
    }
}

impl Varying<SendBuf> {
    pub(crate) fn scattering<C: Wide, D: Wide>(
        m: &Mpi,
        c: &Comm,
        (sendbuf, sendcounts, displs, sendtype): VSide<SendBuf, C, D>,
        (recvbuf, recvcount, recvtype): Side<RecvBuf>,
        root: c_int,
    ) -> Result<Varying<SendBuf>, Fail> {
        let root = root_rank(c, root)?;
        let at_root = root == c.rank();
        let size = c.size() as usize;
        let pieces = at_root
            .then(|| Pieces::uniform(m, sendbuf, size, sendcounts, displs, sendtype))
            .transpose()?;
        let in_place = recvbuf.in_place();
        if in_place && !at_root {
            return fail(MPI_ERR_BUFFER, "MPI_IN_PLACE is for the root only");
        }
        let block = match in_place {
            true => None,
            false => Some((count(recvcount, "recvcount")?, m.committed(recvtype)?)),
        };
        Ok(Varying {
            root: Some(root),
            in_place,
            block,
            pieces,
        })
    }
}

/// Alltoallv's and alltoallw's two sides: pieces of one entry per peer (the remote
/// group's ranks on an intercommunicator); the send side none for MPI_IN_PLACE.
pub(crate) type Exchange = (Option<Pieces<SendBuf>>, Pieces<RecvBuf>);

/// Alltoallv's sides: counts and displacements of one datatype each.
pub(crate) fn alltoallv_sides<C: Wide, D: Wide>(
    m: &Mpi,
    c: &Comm,
    (sendbuf, sendcounts, sdispls, sendtype): VSide<SendBuf, C, D>,
    (recvbuf, recvcounts, rdispls, recvtype): VSide<RecvBuf, C, D>,
) -> Result<Exchange, Fail> {
    let p = c.peer_size() as usize;
    let send = match sendbuf.in_place() {
        true => None,
        false => Some(Pieces::uniform(m, sendbuf, p, sendcounts, sdispls, sendtype)?),
    };
    Ok((
        send,
        Pieces::uniform(m, recvbuf, p, recvcounts, rdispls, recvtype)?,
    ))
}

/// A side of alltoallw: counts, byte displacements and a datatype per peer.
pub(crate) type WSide<B, C, D> = (B, In<C>, In<D>, In<MPI_Datatype>);

/// Alltoallw's sides.
pub(crate) fn alltoallw_sides<C: Wide, D: Wide>(
    m: &Mpi,
    c: &Comm,
    (sendbuf, sendcounts, sdispls, sendtypes): WSide<SendBuf, C, D>,
    (recvbuf, recvcounts, rdispls, recvtypes): WSide<RecvBuf, C, D>,
) -> Result<Exchange, Fail> {
    let p = c.peer_size() as usize;
    let send = match sendbuf.in_place() {
        true => None,
        false => Some(Pieces::typed(m, sendbuf, p, sendcounts, sdispls, sendtypes)?),
    };
    Ok((
        send,
        Pieces::typed(m, recvbuf, p, recvcounts, rdispls, recvtypes)?,
    ))
}

/// How many elements each rank's block of a reduce_scatter holds.
pub(crate) enum ScatterCounts<C> {
    /// The same for every rank (MPI_Reduce_scatter_block).
    Each(i64),
    /// One per rank (MPI_Reduce_scatter's `recvcounts`).
    PerRank(In<C>),
}

/// A reduce_scatter (block or not) at this rank, on an intra- or intercommunicator: its
/// datatype, operation, each rank's count, and MPI_IN_PLACE.
pub(crate) struct ReduceScatter {
    pub dt: Datatype,
    pub op: pontoon::Op,
    pub counts: Vec<u64>,
    pub in_place: bool,
}

impl ReduceScatter {
    pub(crate) fn decode<C: Wide>(
        m: &Mpi,
        c: &Comm,
        sendbuf: SendBuf,
        counts: ScatterCounts<C>,
        (datatype, op): (MPI_Datatype, MPI_Op),
    ) -> Result<ReduceScatter, Fail> {
        let p = c.size() as usize;
        let counts = match counts {
            ScatterCounts::Each(n) => vec![count(n, "recvcount")?; p],
            ScatterCounts::PerRank(counts) => counts
                .slice(p, "recvcounts")?
                .iter()
                .map(|n| count(n.wide(), "recvcounts"))
                .collect::<Result<_, Fail>>()?,
        };
        Ok(ReduceScatter {
            dt: m.committed(datatype)?,
            op: m.op(op)?,
            counts,
            in_place: sendbuf.in_place(),
        })
    }

    /// The elements of every block: what each rank contributes.
    pub(crate) fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The elements of rank `me`'s block.
    pub(crate) fn mine(&self, me: Rank) -> u64 {
        self.counts.get(me as usize).copied().unwrap_or(0)
    }

    /// Each block's length in bytes.
    pub(crate) fn byte_counts(&self) -> Vec<usize> {
        let size = self.dt.size();
        self.counts.iter().map(|n| (n * size) as usize).collect()
    }
}
