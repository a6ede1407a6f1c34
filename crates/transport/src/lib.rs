//! Transports of pontoon: the `Link` trait, one file per transport, and the
//! buffer type through which user memory reaches a link without copies.
//!
//! This crate and `mpi-abi` are the only places with `unsafe` (syscalls, user memory).

pub mod mem;
pub mod packet;
pub mod tcp;

pub use mem::Buffer;
pub use proto::Caps;

use proto::wire::data::{DataRepr, HeaderBytes};

/// Where the payload of an arriving frame goes (the runtime decides, from `proto`).
pub enum Placement {
    None,
    /// `len` bytes into `buf` at `offset`, then `skip` bytes dropped.
    User {
        buf: Buffer,
        offset: u64,
        len: u64,
        skip: u64,
    },
    /// Into an engine-owned vector, handed back to [`Sink::on_payload`].
    Engine(Vec<u8>),
}

/// Receives frames from a link as they are parsed.
pub trait Sink {
    type Token;
    /// A header arrived; say where its payload goes. An error closes the link.
    fn on_header(&mut self, repr: &DataRepr) -> Result<(Placement, Self::Token), String>;
    /// The payload of the last header is in place.
    fn on_payload(&mut self, token: Self::Token, engine_buf: Option<Vec<u8>>);
}

/// Why a link stopped working.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("connection closed by peer")]
    Closed,
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed frame: {0}")]
    Wire(#[from] proto::wire::WireError),
    #[error("{0}")]
    Protocol(String),
}

/// A connected, authenticated lane to one peer.
pub trait Link {
    /// What the runtime's sink ties to each payload (see [`Sink::Token`]).
    type Token;
    /// What this lane can do.
    fn caps(&self) -> Caps;
    /// Writes a frame, or as much of it as the socket takes, queueing the rest. Returns
    /// `true` if the frame was completely handed over now; otherwise `token` is reported
    /// by a later [`Link::flush`], and the link keeps its own reference to `payload`.
    fn send(
        &mut self,
        header: &HeaderBytes,
        payload: Option<(&Buffer, u64, u64)>,
        token: u64,
    ) -> Result<bool, LinkError>;
    /// Writes a frame of `payload` now, keeping a copy of whatever the socket does not
    /// take yet: the caller may reuse `payload` at once (a blocking send).
    fn send_copy(&mut self, header: &HeaderBytes, payload: &[u8]) -> Result<(), LinkError>;
    /// Writes queued frames; pushes the tokens of frames now completely written.
    fn flush(&mut self, done: &mut Vec<u64>) -> Result<(), LinkError>;
    /// Bytes (headers and payloads) queued and not yet written to the socket; the
    /// engine keeps this small so that lanes share a transfer by their real speed.
    fn tx_queued(&self) -> u64;
    /// Reads what has arrived and hands complete headers and payloads to `sink`.
    /// Returns whether anything was read.
    fn recv<S: Sink<Token = Self::Token>>(&mut self, sink: &mut S) -> Result<bool, LinkError>;
    /// File descriptor to wait on in epoll.
    fn fd(&self) -> std::os::fd::BorrowedFd<'_>;
}
