//! Matched probes (MPI_Mprobe, MPI_Improbe) and the receives of the messages they take
//! (MPI_Mrecv, MPI_Imrecv): no other receive can match a probed message in between,
//! which makes probe-then-receive safe with several threads or wildcard receives.

use std::os::raw::c_int;

use pontoon::lent::Message;
use pontoon::Comm;

use crate::abi::*;
use crate::args::{recv_tag, source_rank};
use crate::boundary::{count, fail, Fail, Res};
use crate::buffers::RecvBuf;
use crate::cargs::Out;
use crate::requests::{start, wait_one};
use crate::state::MessageEntry;
use crate::state::ReqEntry;
use crate::state::{mpi, Mpi};
use crate::statuses::{proc_null_status, put_status, status_of};
use crate::{mpi_fn, mpi_fn_c};

fn publish(m: &Mpi, comm: MPI_Comm, c: Comm<'static>, msg: Message) -> Result<MPI_Message, Fail> {
    m.messages
        .borrow_mut()
        .insert(MessageEntry {
            comm: c,
            handle: comm,
            msg,
        })
        .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many probed messages"))
}

fn probe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: Option<&mut c_int>,
    message: Out<MPI_Message>,
    status: Out<MPI_Status>,
) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let tag = recv_tag(tag)?;
    let message = message.place("message")?;
    let Some(from) = source_rank(&c, source)? else {
        *message = MPI_MESSAGE_NO_PROC;
        if let Some(f) = flag {
            *f = 1;
        }
        put_status(status, proc_null_status());
        return Ok(());
    };
    let hit = match flag {
        None => Some(c.mprobe(from, tag)?),
        Some(f) => {
            let hit = c.improbe(from, tag)?;
            *f = hit.is_some() as c_int;
            hit
        }
    };
    if let Some((st, msg)) = hit {
        put_status(status, status_of(&st));
        *message = publish(m, comm, c, msg)?;
    }
    Ok(())
}

mpi_fn! {
    fn MPI_Mprobe(source: c_int, tag: c_int, comm: MPI_Comm, message: Out<MPI_Message>, status: Out<MPI_Status>) on comm {
        probe(source, tag, comm, None, message, status)
    }
}

mpi_fn! {
    fn MPI_Improbe(source: c_int, tag: c_int, comm: MPI_Comm, flag: Out<c_int>, message: Out<MPI_Message>, status: Out<MPI_Status>) on comm {
        probe(source, tag, comm, Some(flag.place("flag")?), message, status)
    }
}

/// Starts the receive of `*message` and sets it to MPI_MESSAGE_NULL.
fn start_mrecv(
    m: &Mpi,
    buf: RecvBuf,
    n: i64,
    datatype: MPI_Datatype,
    message: Out<MPI_Message>,
    request: &mut MPI_Request,
) -> Res {
    let message = message.place("message")?;
    let dt = m.committed(datatype)?;
    let n = count(n, "count")?;
    if *message == MPI_MESSAGE_NO_PROC {
        *message = MPI_MESSAGE_NULL;
        return start(m, request, ReqEntry::Done(proc_null_status()));
    }
    let Some(e) = m.messages.borrow_mut().remove(*message) else {
        return fail(
            MPI_ERR_REQUEST,
            format!("{:#x} is not a probed message (received already?)", *message),
        );
    };
    *message = MPI_MESSAGE_NULL;
    let (buffer, unpack) = buf.lend(n, &dt, false)?;
    let op = e.comm.irecv_message(buffer, e.msg)?;
    start(
        m,
        request,
        ReqEntry::P2p {
            op,
            comm: e.handle,
            unpack,
        },
    )
}

mpi_fn_c! {
    fn MPI_Mrecv | MPI_Mrecv_c(buf: RecvBuf, n: Count, datatype: MPI_Datatype, message: Out<MPI_Message>, status: Out<MPI_Status>) {
        let n = n.wide();
        let m = mpi()?;
        let mut req = MPI_REQUEST_NULL;
        start_mrecv(m, buf, n, datatype, message, &mut req)?;
        wait_one(m, &mut req, status)
    }
}

mpi_fn_c! {
    fn MPI_Imrecv | MPI_Imrecv_c(buf: RecvBuf, n: Count, datatype: MPI_Datatype, message: Out<MPI_Message>, request: Out<MPI_Request>) {
        let n = n.wide();
        let m = mpi()?;
        start_mrecv(m, buf, n, datatype, message, request.place("request")?)
    }
}
