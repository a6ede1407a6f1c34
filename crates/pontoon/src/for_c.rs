//! What only the C library (`mpi-abi`) needs beside the MPI-shaped API: the immediate
//! paths its `MPI_Send` and `MPI_Recv` try first, without the general argument
//! handling. Not for Rust programs, which get the same through [`Comm::send`] and
//! [`Comm::recv`].

use crate::{Comm, Rank, Result, Status};

/// Largest message of [`send_now`] and [`recv_now`].
pub const NOW_MAX: usize = proto::limits::IMMEDIATE_MAX;

/// A standard send of a small message on the runtime's immediate path (written to the
/// lane at once, no request); `None` when it must take the general path.
#[inline]
pub fn send_now(c: &Comm<'_>, data: &[u8], dest: Rank, tag: i32) -> Option<Result<()>> {
    c.send_now(data, dest, tag)
}

/// A blocking receive of a small message from `source` on the runtime's immediate path
/// (taken straight off its lane); `None` when it must take the general path.
#[inline]
pub fn recv_now(c: &Comm<'_>, buf: &mut [u8], source: Rank, tag: i32) -> Option<Status> {
    c.recv_now(buf, source, tag)
}
