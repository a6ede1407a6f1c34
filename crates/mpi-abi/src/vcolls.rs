//! Collectives with a count and displacement per rank (the `v` and `w` forms), and
//! the reductions that scatter or scan. Each side's pieces are packed into one
//! contiguous buffer, moved by the Rust collective on byte blocks, and unpacked.

use std::os::raw::c_int;

use pontoon::{Comm, Datatype, Input};

use crate::abi::*;
use crate::boundary::Wide;
use crate::boundary::{Fail, Res};
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::In;
use crate::collargs::Reduction;
use crate::intercolls;
use crate::mpi_fn_c;
use crate::requests::blocking;
use crate::state::mpi;
use crate::vcollargs::{alltoallv_sides, alltoallw_sides, Exchange, ReduceScatter, ScatterCounts, Varying};

/// The packed form of the one block a `v` collective sends, if it sends one.
fn packed_block(buf: SendBuf, block: &Option<(u64, Datatype)>) -> Result<Option<Vec<u8>>, Fail> {
    block
        .as_ref()
        .map(|(n, dt)| Ok(buf.data(*n, dt)?.packed()?.into_owned()))
        .transpose()
}

mpi_fn_c! {
    fn MPI_Gatherv | MPI_Gatherv_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, displs: In<Displ>, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return blocking(|r| intercolls::gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, r));
        }
        let v = Varying::gathering(m, &c, (sendbuf, sendcount, sendtype), (recvbuf, recvcounts, displs, recvtype), Some(root))?;
        let root = v.root.unwrap_or_default();
        let send = packed_block(sendbuf, &v.block)?;
        let input = send.as_deref().map_or(Input::InPlace, Input::Buf);
        let Some(pieces) = v.pieces else {
            c.gatherv(input, &mut [], &[], &[], root)?;
            return Ok(());
        };
        let mut out = if v.in_place { pieces.pack()? } else { vec![0; pieces.total()] };
        c.gatherv(input, &mut out, &pieces.counts(), &pieces.offsets(), root)?;
        pieces.unpack(&out)
    }
}

mpi_fn_c! {
    fn MPI_Scatterv | MPI_Scatterv_c(sendbuf: SendBuf, sendcounts: In<Count>, displs: In<Displ>, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) on comm {
        let recvcount = recvcount.wide();
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return blocking(|r| intercolls::scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, r));
        }
        let v = Varying::scattering(m, &c, (sendbuf, sendcounts, displs, sendtype), (recvbuf, recvcount, recvtype), root)?;
        let root = v.root.unwrap_or_default();
        let (packed, counts, offsets) = match &v.pieces {
            Some(pieces) => (pieces.pack()?, pieces.counts(), pieces.offsets()),
            None => (Vec::new(), Vec::new(), Vec::new()),
        };
        let Some((n, rt)) = &v.block else {
            c.scatterv(&packed, &counts, &offsets, None, root)?;
            return Ok(());
        };
        let mut got = vec![0u8; (n * rt.size()) as usize];
        c.scatterv(&packed, &counts, &offsets, Some(&mut got), root)?;
        let dst = recvbuf.data_mut(*n, rt)?;
        rt.unpack(*n, &got, dst.bytes, dst.origin)?;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Allgatherv | MPI_Allgatherv_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, displs: In<Displ>, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return blocking(|r| intercolls::allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, r));
        }
        let mut v = Varying::gathering(m, &c, (sendbuf, sendcount, sendtype), (recvbuf, recvcounts, displs, recvtype), None)?;
        let send = packed_block(sendbuf, &v.block)?;
        let pieces = v.every_rank_pieces()?;
        let mut out = if v.in_place { pieces.pack()? } else { vec![0; pieces.total()] };
        let input = send.as_deref().map_or(Input::InPlace, Input::Buf);
        c.allgatherv(input, &mut out, &pieces.counts(), &pieces.offsets())?;
        pieces.unpack(&out)
    }
}

/// Alltoallv and alltoallw once both sides are pieces (`send` None: in place).
fn alltoall_pieces(c: &Comm, comm: MPI_Comm, (send, recv): Exchange) -> Res {
    if c.is_inter() {
        return blocking(move |r| intercolls::alltoall_pieces(comm, send, recv, r));
    }
    let mut out = if send.is_none() {
        recv.pack()?
    } else {
        vec![0; recv.total()]
    };
    let sent = send.as_ref().map(|s| s.pack()).transpose()?;
    let (scounts, soffsets) = send
        .as_ref()
        .map_or((Vec::new(), Vec::new()), |s| (s.counts(), s.offsets()));
    let input = sent.as_deref().map_or(Input::InPlace, Input::Buf);
    c.alltoallv(
        input,
        &scounts,
        &soffsets,
        &mut out,
        &recv.counts(),
        &recv.offsets(),
    )?;
    recv.unpack(&out)
}

mpi_fn_c! {
    fn MPI_Alltoallv | MPI_Alltoallv_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<Displ>, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<Displ>, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        let m = mpi()?;
        let c = m.comm(comm)?;
        let sides = alltoallv_sides(m, &c, (sendbuf, sendcounts, sdispls, sendtype), (recvbuf, recvcounts, rdispls, recvtype))?;
        alltoall_pieces(&c, comm, sides)
    }
}

mpi_fn_c! {
    fn MPI_Alltoallw | MPI_Alltoallw_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<Displ>, sendtypes: In<MPI_Datatype>, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<Displ>, recvtypes: In<MPI_Datatype>, comm: MPI_Comm) on comm {
        let m = mpi()?;
        let c = m.comm(comm)?;
        let sides = alltoallw_sides(m, &c, (sendbuf, sendcounts, sdispls, sendtypes), (recvbuf, recvcounts, rdispls, recvtypes))?;
        alltoall_pieces(&c, comm, sides)
    }
}

/// Reduce_scatter and reduce_scatter_block.
fn reduce_scatter<C: Wide>(
    sendbuf: SendBuf,
    recvbuf: RecvBuf,
    counts: ScatterCounts<C>,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    if c.is_inter() {
        return blocking(move |r| {
            intercolls::reduce_scatter(sendbuf, recvbuf, counts, datatype, op, comm, r)
        });
    }
    let rs = ReduceScatter::decode(m, &c, sendbuf, counts, (datatype, op))?;
    let send = if rs.in_place {
        None
    } else {
        Some(sendbuf.data(rs.total(), &rs.dt)?)
    };
    let mut recv = recvbuf.data_mut(
        if rs.in_place {
            rs.total()
        } else {
            rs.mine(c.rank())
        },
        &rs.dt,
    )?;
    c.reduce_scatter_data(send.as_ref(), &mut recv, &rs.counts, &rs.op)?;
    Ok(())
}

mpi_fn_c! {
    fn MPI_Reduce_scatter_block | MPI_Reduce_scatter_block_c(sendbuf: SendBuf, recvbuf: RecvBuf, recvcount: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) on comm {
        reduce_scatter::<Count>(sendbuf, recvbuf, ScatterCounts::Each(recvcount.wide()), datatype, op, comm)
    }
}

mpi_fn_c! {
    fn MPI_Reduce_scatter | MPI_Reduce_scatter_c(sendbuf: SendBuf, recvbuf: RecvBuf, recvcounts: In<Count>, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) on comm {
        reduce_scatter(sendbuf, recvbuf, ScatterCounts::PerRank(recvcounts), datatype, op, comm)
    }
}

fn prefix(
    sendbuf: SendBuf,
    recvbuf: RecvBuf,
    n: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    exclusive: bool,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let r = Reduction::decode(m, &c, sendbuf, n, (datatype, op), None)?;
    let send = if r.in_place {
        None
    } else {
        Some(sendbuf.data(r.n, &r.dt)?)
    };
    let mut recv = recvbuf.data_mut(r.n, &r.dt)?;
    if exclusive {
        c.exscan_data(send.as_ref(), &mut recv, &r.op)?;
    } else {
        c.scan_data(send.as_ref(), &mut recv, &r.op)?;
    }
    Ok(())
}

mpi_fn_c! {
    fn MPI_Scan | MPI_Scan_c(sendbuf: SendBuf, recvbuf: RecvBuf, n: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) on comm {
        let n = n.wide();
        prefix(sendbuf, recvbuf, n, datatype, op, comm, false)
    }
}

mpi_fn_c! {
    fn MPI_Exscan | MPI_Exscan_c(sendbuf: SendBuf, recvbuf: RecvBuf, n: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) on comm {
        let n = n.wide();
        prefix(sendbuf, recvbuf, n, datatype, op, comm, true)
    }
}
