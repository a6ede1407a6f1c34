//! Point-to-point: sends, receives, probes and statuses.

use std::os::raw::c_int;

use pontoon::lent::Buffer;
use pontoon::{Data, Rank, Status};

use crate::abi::*;
use crate::args::*;
use crate::boundary::{count, Fail, Res};
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::{In, Out};
use crate::immediate;
use crate::requests::start;
use crate::state::mpi;
use crate::state::ReqEntry;
use crate::statuses::*;
use crate::{mpi_fn, mpi_fn_c};

// ---- blocking ------------------------------------------------------------------

fn blocking_send(
    buf: SendBuf,
    n: i64,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    sync: bool,
) -> Res {
    let SendArgs {
        comm: c,
        dt,
        n,
        tag,
        dest,
    } = send_args(n, datatype, dest, tag, comm)?;
    let Some(dest) = dest else {
        return Ok(());
    };
    let d = buf.data(n, &dt)?;
    if sync {
        c.ssend_data(&d, dest, tag)?;
    } else {
        c.send_data(&d, dest, tag)?;
    }
    Ok(())
}

/// `packed` as bytes to `dest` (MPI_Sendrecv_replace's outgoing copy).
fn send_packed(packed: &[u8], dest: c_int, tag: c_int, comm: MPI_Comm) -> Res {
    let a = send_args(packed.len() as i64, MPI_BYTE, dest, tag, comm)?;
    match a.dest {
        Some(dest) => Ok(a.comm.send_data(&Data::new(packed, a.n, &a.dt), dest, a.tag)?),
        None => Ok(()),
    }
}

mpi_fn_c! {
    fn MPI_Send | MPI_Send_c(buf: SendBuf, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) on comm {
        let n = n.wide();
        if let Some(sent) = immediate::send(buf, n, datatype, dest, tag, comm) {
            return sent;
        }
        blocking_send(buf, n, datatype, dest, tag, comm, false)
    }
}

mpi_fn_c! {
    fn MPI_Ssend | MPI_Ssend_c(buf: SendBuf, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) on comm {
        let n = n.wide();
        blocking_send(buf, n, datatype, dest, tag, comm, true)
    }
}

mpi_fn_c! {
    /// Ready mode: the receive is posted already, so a standard send is correct.
    fn MPI_Rsend | MPI_Rsend_c(buf: SendBuf, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) on comm {
        let n = n.wide();
        blocking_send(buf, n, datatype, dest, tag, comm, false)
    }
}

mpi_fn_c! {
    fn MPI_Recv | MPI_Recv_c(buf: RecvBuf, n: Count, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, status: Out<MPI_Status>) on comm {
        let n = n.wide();
        if let Some(got) = immediate::recv(buf, n, datatype, source, tag, comm, status) {
            return got;
        }
        let RecvArgs { comm: c, dt, n, tag, source } = recv_args(n, datatype, source, tag, comm)?;
        let Some(from) = source else {
            put_status(status, proc_null_status());
            return Ok(());
        };
        let mut d = buf.data_mut(n, &dt)?;
        let st = c.recv_data(&mut d, from, tag);
        finish_recv(st, status)
    }
}

mpi_fn_c! {
    fn MPI_Sendrecv | MPI_Sendrecv_c(
        sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, dest: c_int, sendtag: c_int,
        recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, source: c_int, recvtag: c_int,
        comm: MPI_Comm, status: Out<MPI_Status>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        let m = mpi()?;
        m.comm(comm)?;
        // The receive goes first so that two ranks exchanging never both wait on sends.
        let mut recv = MPI_REQUEST_NULL;
        start(m, &mut recv, recv_entry(recvbuf, recvcount, recvtype, source, recvtag, comm)?)?;
        let sent = blocking_send(sendbuf, sendcount, sendtype, dest, sendtag, comm, false);
        let got = crate::requests::wait_one(m, &mut recv, status);
        sent?;
        got
    }
}

mpi_fn_c! {
    fn MPI_Sendrecv_replace | MPI_Sendrecv_replace_c(
        buf: RecvBuf, n: Count, datatype: MPI_Datatype, dest: c_int, sendtag: c_int,
        source: c_int, recvtag: c_int, comm: MPI_Comm, status: Out<MPI_Status>) on comm {
        let n = n.wide();
        let m = mpi()?;
        m.comm(comm)?;
        let dt = m.committed(datatype)?;
        // The outgoing data is packed first; then the buffer is free to receive into.
        let packed = buf.as_send().data(count(n, "count")?, &dt)?.packed()?.into_owned();
        let mut recv = MPI_REQUEST_NULL;
        start(m, &mut recv, recv_entry(buf, n, datatype, source, recvtag, comm)?)?;
        let sent = send_packed(&packed, dest, sendtag, comm);
        let got = crate::requests::wait_one(m, &mut recv, status);
        sent?;
        got
    }
}

// ---- non-blocking --------------------------------------------------------------

/// A send of the caller's memory (dense) or of a packed copy, as a request entry.
pub fn send_entry(
    buf: SendBuf,
    n: i64,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    sync: bool,
) -> Result<ReqEntry, Fail> {
    let args = send_args(n, datatype, dest, tag, comm)?;
    send_entry_with(buf, &args, comm, sync)
}

/// [`send_entry`] with its arguments resolved already: a persistent request keeps its
/// own references to the communicator and the datatype, which the program may free
/// before it starts the request again (MPI counts the request as a user of both).
pub fn send_entry_with(buf: SendBuf, a: &SendArgs, comm: MPI_Comm, sync: bool) -> Result<ReqEntry, Fail> {
    let SendArgs {
        comm: c,
        dt,
        n,
        tag,
        dest,
    } = a;
    let (n, tag) = (*n, *tag);
    let Some(dest) = *dest else {
        return Ok(ReqEntry::Done(empty_status()));
    };
    let op = c.isend_lent(buf.lend(n, dt)?, dest, tag, sync)?;
    Ok(ReqEntry::P2p {
        op,
        comm,
        unpack: None,
    })
}

#[allow(clippy::too_many_arguments)]
fn start_send(
    buf: SendBuf,
    n: i64,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    sync: bool,
    request: Out<MPI_Request>,
) -> Res {
    let request = request.place("request")?;
    let entry = send_entry(buf, n, datatype, dest, tag, comm, sync)?;
    start(mpi()?, request, entry)
}

/// A receive into the caller's memory, as a request entry; a non-dense datatype
/// receives into a packed copy that is unpacked at completion.
pub fn recv_entry(
    buf: RecvBuf,
    n: i64,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> Result<ReqEntry, Fail> {
    let args = recv_args(n, datatype, source, tag, comm)?;
    recv_entry_with(buf, &args, comm)
}

/// [`recv_entry`] with its arguments resolved already (see [`send_entry_with`]).
pub fn recv_entry_with(buf: RecvBuf, a: &RecvArgs, comm: MPI_Comm) -> Result<ReqEntry, Fail> {
    let Some(from) = a.source else {
        return Ok(ReqEntry::Done(proc_null_status()));
    };
    let (buffer, unpack) = buf.lend(a.n, &a.dt, false)?;
    let op = a.comm.irecv_lent(buffer, from, a.tag)?;
    Ok(ReqEntry::P2p { op, comm, unpack })
}

mpi_fn_c! {
    fn MPI_Isend | MPI_Isend_c(buf: SendBuf, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        start_send(buf, n, datatype, dest, tag, comm, false, request)
    }
}

mpi_fn_c! {
    fn MPI_Issend | MPI_Issend_c(buf: SendBuf, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        start_send(buf, n, datatype, dest, tag, comm, true, request)
    }
}

mpi_fn_c! {
    fn MPI_Irsend | MPI_Irsend_c(buf: SendBuf, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        start_send(buf, n, datatype, dest, tag, comm, false, request)
    }
}

mpi_fn_c! {
    fn MPI_Irecv | MPI_Irecv_c(buf: RecvBuf, n: Count, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        let request = request.place("request")?;
        let entry = recv_entry(buf, n, datatype, source, tag, comm)?;
        start(mpi()?, request, entry)
    }
}

// ---- probes and statuses -------------------------------------------------------

mpi_fn! {
    fn MPI_Probe(source: c_int, tag: c_int, comm: MPI_Comm, status: Out<MPI_Status>) on comm {
        let m = mpi()?;
        let c = m.comm(comm)?;
        let tag = recv_tag(tag)?;
        let Some(from) = source_rank(&c, source)? else {
            put_status(status, proc_null_status());
            return Ok(());
        };
        let st = c.probe(from, tag)?;
        put_status(status, status_of(&st));
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Iprobe(source: c_int, tag: c_int, comm: MPI_Comm, flag: Out<c_int>, status: Out<MPI_Status>) on comm {
        let m = mpi()?;
        let c = m.comm(comm)?;
        let tag = recv_tag(tag)?;
        let flag = flag.place("flag")?;
        let Some(from) = source_rank(&c, source)? else {
            *flag = 1;
            put_status(status, proc_null_status());
            return Ok(());
        };
        match c.iprobe(from, tag)? {
            Some(st) => {
                *flag = 1;
                put_status(status, status_of(&st));
            }
            None => *flag = 0,
        }
        Ok(())
    }
}

fn received(status: &MPI_Status) -> Status {
    Status {
        source: status.MPI_SOURCE as Rank,
        tag: status.MPI_TAG,
        bytes: bytes_of(status),
    }
}

mpi_fn_c! {
    fn MPI_Get_count | MPI_Get_count_c(status: In<MPI_Status>, datatype: MPI_Datatype, n: Out<Count>) {
        let dt = mpi()?.datatype(datatype)?;
        let st = received(status_arg(status)?);
        // MPI_UNDEFINED also when the count does not fit this form's width.
        *n.place("count")? = st.count_of(&dt).and_then(|k| Count::try_from(k).ok()).unwrap_or(Count::from(MPI_UNDEFINED));
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Get_elements | MPI_Get_elements_c | MPI_Get_elements_x(status: In<MPI_Status>, datatype: MPI_Datatype, n: Out<Count>) {
        let dt = mpi()?.datatype(datatype)?;
        let st = received(status_arg(status)?);
        *n.place("count")? = Count::try_from(st.elements_of(&dt)).unwrap_or(Count::from(MPI_UNDEFINED));
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Status_set_elements | MPI_Status_set_elements_c | MPI_Status_set_elements_x(status: Out<MPI_Status>, datatype: MPI_Datatype, n: Count) {
        let n = n.wide();
        let dt = mpi()?.datatype(datatype)?;
        set_bytes(status.place("status")?, dt.bytes_of_elements(count(n, "count")?));
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_set_cancelled(status: Out<MPI_Status>, flag: c_int) {
        set_cancelled(status.place("status")?, flag != 0);
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Test_cancelled(status: In<MPI_Status>, flag: Out<c_int>) {
        let st = status_arg(status)?;
        *flag.place("flag")? = (st.internal[2] != 0) as c_int;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_get_source(status: In<MPI_Status>, source: Out<c_int>) {
        *source.place("source")? = status_arg(status)?.MPI_SOURCE;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_get_tag(status: In<MPI_Status>, tag: Out<c_int>) {
        *tag.place("tag")? = status_arg(status)?.MPI_TAG;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_get_error(status: In<MPI_Status>, error: Out<c_int>) {
        *error.place("error")? = status_arg(status)?.MPI_ERROR;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_set_source(status: Out<MPI_Status>, source: c_int) {
        status.place("status")?.MPI_SOURCE = source;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_set_tag(status: Out<MPI_Status>, tag: c_int) {
        status.place("status")?.MPI_TAG = tag;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_set_error(status: Out<MPI_Status>, error: c_int) {
        status.place("status")?.MPI_ERROR = error;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Isendrecv | MPI_Isendrecv_c(
        sendbuf: SendBuf, sendcount: Count, sendtype: MPI_Datatype, dest: c_int, sendtag: c_int,
        recvbuf: RecvBuf, recvcount: Count, recvtype: MPI_Datatype, source: c_int, recvtag: c_int,
        comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        let m = mpi()?;
        let request = request.place("request")?;
        let recv = recv_entry(recvbuf, recvcount, recvtype, source, recvtag, comm)?;
        let send = send_entry(sendbuf, sendcount, sendtype, dest, sendtag, comm, false)?;
        start(m, request, ReqEntry::Pair { recv: Box::new(recv), send: Box::new(send) })
    }
}

mpi_fn_c! {
    /// The outgoing data is packed into memory of its own first; then the buffer is
    /// free to receive into.
    fn MPI_Isendrecv_replace | MPI_Isendrecv_replace_c(
        buf: RecvBuf, n: Count, datatype: MPI_Datatype, dest: c_int, sendtag: c_int,
        source: c_int, recvtag: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        let m = mpi()?;
        let request = request.place("request")?;
        let a = send_args(n, datatype, dest, sendtag, comm)?;
        let packed = buf.as_send().data(a.n, &a.dt)?.packed()?.into_owned();
        let send = match a.dest {
            None => ReqEntry::Done(empty_status()),
            Some(d) => ReqEntry::P2p { op: a.comm.isend_lent(Buffer::owned(packed), d, a.tag, false)?, comm, unpack: None },
        };
        let recv = recv_entry(buf, n, datatype, source, recvtag, comm)?;
        start(m, request, ReqEntry::Pair { recv: Box::new(recv), send: Box::new(send) })
    }
}
