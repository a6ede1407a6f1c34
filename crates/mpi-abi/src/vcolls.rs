//! Collectives with a count and displacement per rank (the `v` and `w` forms), and
//! the reductions that scatter or scan. Each side's pieces are packed into one
//! contiguous buffer, moved by the Rust collective on byte blocks, and unpacked.

use std::os::raw::c_int;

use pontoon::{Comm, Input};

use crate::abi::*;
use crate::boundary::{count, fail, Fail, Res};
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::In;
use crate::collargs::{rank_counts, root_rank, Pieces, Reduction};
use crate::intercolls;
use crate::mpi_fn_c;
use crate::requests::blocking;
use crate::state::{mpi, Mpi};

/// The packed form of `count` elements of `datatype` at `buf`.
fn packed_send(m: &Mpi, buf: SendBuf, n: i64, datatype: MPI_Datatype) -> Result<Vec<u8>, Fail> {
    let dt = m.committed(datatype)?;
    Ok(buf.data(count(n, "sendcount")?, &dt)?.packed()?.into_owned())
}

mpi_fn_c! {
    fn MPI_Gatherv | MPI_Gatherv_c(sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, displs: In<Displ>, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) on comm {
        let sendcount = sendcount.wide();
        let m = mpi()?;
        let c = m.comm(comm)?;
        if c.is_inter() {
            return blocking(|r| intercolls::gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, r));
        }
        let root = root_rank(&c, root)?;
        let send = if sendbuf.in_place() { None } else { Some(packed_send(m, sendbuf, sendcount, sendtype)?) };
        let input = send.as_deref().map_or(Input::InPlace, Input::Buf);
        if c.rank() != root {
            c.gatherv(input, &mut [], &[], &[], root)?;
            return Ok(());
        }
        let pieces = Pieces::uniform(m, recvbuf, c.size() as usize, recvcounts, displs, recvtype)?;
        let mut out = if send.is_none() { pieces.pack()? } else { vec![0; pieces.total()] };
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
        let root = root_rank(&c, root)?;
        let at_root = c.rank() == root;
        let (packed, counts, offsets) = if at_root {
            let pieces = Pieces::uniform(m, sendbuf, c.size() as usize, sendcounts, displs, sendtype)?;
            (pieces.pack()?, pieces.counts(), pieces.offsets())
        } else {
            (Vec::new(), Vec::new(), Vec::new())
        };
        if recvbuf.in_place() {
            if !at_root {
                return fail(MPI_ERR_BUFFER, "MPI_IN_PLACE is for the root only");
            }
            c.scatterv(&packed, &counts, &offsets, None, root)?;
            return Ok(());
        }
        let rt = m.committed(recvtype)?;
        let n = count(recvcount, "recvcount")?;
        let mut got = vec![0u8; (n * rt.size()) as usize];
        c.scatterv(&packed, &counts, &offsets, Some(&mut got), root)?;
        let dst = recvbuf.data_mut(n, &rt)?;
        rt.unpack(n, &got, dst.bytes, dst.origin)?;
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
        let send = if sendbuf.in_place() { None } else { Some(packed_send(m, sendbuf, sendcount, sendtype)?) };
        let pieces = Pieces::uniform(m, recvbuf, c.size() as usize, recvcounts, displs, recvtype)?;
        let mut out = if send.is_none() { pieces.pack()? } else { vec![0; pieces.total()] };
        let input = send.as_deref().map_or(Input::InPlace, Input::Buf);
        c.allgatherv(input, &mut out, &pieces.counts(), &pieces.offsets())?;
        pieces.unpack(&out)
    }
}

/// Alltoallv and alltoallw once both sides are pieces (`send` None: in place).
fn alltoall_pieces(c: &Comm, comm: MPI_Comm, send: Option<Pieces<SendBuf>>, recv: Pieces<RecvBuf>) -> Res {
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
    {
        recv.unpack(&out)
    }
}

mpi_fn_c! {
    fn MPI_Alltoallv | MPI_Alltoallv_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<Displ>, sendtype: MPI_Datatype, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<Displ>, recvtype: MPI_Datatype, comm: MPI_Comm) on comm {
        let m = mpi()?;
        let c = m.comm(comm)?;
        let p = c.peer_size() as usize;
        let send = if sendbuf.in_place() { None } else { Some(Pieces::uniform(m, sendbuf, p, sendcounts, sdispls, sendtype)?) };
        let recv = Pieces::uniform(m, recvbuf, p, recvcounts, rdispls, recvtype)?;
        alltoall_pieces(&c, comm, send, recv)
    }
}

mpi_fn_c! {
    fn MPI_Alltoallw | MPI_Alltoallw_c(sendbuf: SendBuf, sendcounts: In<Count>, sdispls: In<Displ>, sendtypes: In<MPI_Datatype>, recvbuf: RecvBuf, recvcounts: In<Count>, rdispls: In<Displ>, recvtypes: In<MPI_Datatype>, comm: MPI_Comm) on comm {
        let m = mpi()?;
        let c = m.comm(comm)?;
        let p = c.peer_size() as usize;
        let send = if sendbuf.in_place() { None } else { Some(Pieces::typed(m, sendbuf, p, sendcounts, sdispls, sendtypes)?) };
        let recv = Pieces::typed(m, recvbuf, p, recvcounts, rdispls, recvtypes)?;
        alltoall_pieces(&c, comm, send, recv)
    }
}

/// Reduce_scatter with `counts` elements per rank.
fn reduce_scatter(
    sendbuf: SendBuf,
    recvbuf: RecvBuf,
    counts: Vec<u64>,
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
    let dt = m.committed(datatype)?;
    let op = m.op(op)?;
    let total: u64 = counts.iter().sum();
    let mine = counts.get(c.rank() as usize).copied().unwrap_or(0);
    let send = if sendbuf.in_place() {
        None
    } else {
        Some(sendbuf.data(total, &dt)?)
    };
    let mut recv = { recvbuf.data_mut(if send.is_some() { mine } else { total }, &dt)? };
    c.reduce_scatter_data(send.as_ref(), &mut recv, &counts, &op)?;
    Ok(())
}

mpi_fn_c! {
    fn MPI_Reduce_scatter_block | MPI_Reduce_scatter_block_c(sendbuf: SendBuf, recvbuf: RecvBuf, recvcount: Count, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) on comm {
        let recvcount = recvcount.wide();
        let p = mpi()?.comm(comm)?.size() as usize;
        reduce_scatter(sendbuf, recvbuf, vec![count(recvcount, "recvcount")?; p], datatype, op, comm)
    }
}

mpi_fn_c! {
    fn MPI_Reduce_scatter | MPI_Reduce_scatter_c(sendbuf: SendBuf, recvbuf: RecvBuf, recvcounts: In<Count>, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) on comm {
        let counts = rank_counts(comm, recvcounts)?;
        reduce_scatter(sendbuf, recvbuf, counts, datatype, op, comm)
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
