//! Persistent point-to-point requests (MPI_Send_init and friends): the arguments are
//! checked when the request is made, and each MPI_Start starts the same operation.

use std::os::raw::c_int;

use crate::abi::*;
use crate::args::{recv_args, send_args};
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::Out;
use crate::mpi_fn_c;
use crate::p2p::{recv_entry_with, send_entry_with};
use crate::requests::persistent;

#[allow(clippy::too_many_arguments)]
fn send_init(
    buf: SendBuf,
    n: i64,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    sync: bool,
    request: Out<MPI_Request>,
) -> crate::boundary::Res {
    // Checked and resolved now: errors come from the init call, and the request keeps
    // the datatype and communicator even if the program frees its handles.
    let args = send_args(n, datatype, dest, tag, comm)?;
    // The program keeps the buffer valid while the request exists and leaves it alone
    // while it is active (MPI's rule for persistent requests).
    persistent(request, Box::new(move || send_entry_with(buf, &args, comm, sync)))
}

mpi_fn_c! {
    fn MPI_Send_init | MPI_Send_init_c(buf: SendBuf, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        send_init(buf, n, datatype, dest, tag, comm, false, request)
    }
}

mpi_fn_c! {
    fn MPI_Ssend_init | MPI_Ssend_init_c(buf: SendBuf, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        send_init(buf, n, datatype, dest, tag, comm, true, request)
    }
}

mpi_fn_c! {
    fn MPI_Rsend_init | MPI_Rsend_init_c(buf: SendBuf, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        send_init(buf, n, datatype, dest, tag, comm, false, request)
    }
}

mpi_fn_c! {
    fn MPI_Recv_init | MPI_Recv_init_c(buf: RecvBuf, n: Count, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, request: Out<MPI_Request>) on comm {
        let n = n.wide();
        let args = recv_args(n, datatype, source, tag, comm)?;
        // As for the sends: the buffer is the program's until the request is freed.
        persistent(request, Box::new(move || recv_entry_with(buf, &args, comm)))
    }
}
