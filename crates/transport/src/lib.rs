//! Transports of pontoon: the `Link` trait, one file per transport (`stream.rs` frames
//! the byte-stream ones), the enum the runtime dispatches through, and the buffer type through which user memory reaches a link without copies.
//!
//! This crate and `mpi-abi` are the only places with `unsafe` (syscalls, user memory).

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod copy;
pub mod eth;
pub mod inherited;
pub mod ledger;
pub mod mem;
pub mod packet;
mod packet_ring;
pub mod relay;
pub mod sealed;
pub mod shm;
pub mod stream;
pub mod tcp;

pub use ledger::Ledger;
pub use mem::Buffer;
pub use proto::Caps;

use proto::wire::data::{DataRepr, Envelope, HeaderBytes};

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
    /// The payload of the last header is in place. An error (the payload breaks the
    /// protocol) closes the link.
    fn on_payload(&mut self, token: Self::Token, engine_buf: Option<Vec<u8>>) -> Result<(), String>;
}

/// What [`Link::peek_small`] found at the head of a lane.
pub enum Peeked<'a> {
    /// No whole frame yet.
    Nothing,
    /// A small frame, whole: its header, its payload, and header and payload's length
    /// (for [`Link::take_peeked`]).
    Frame {
        repr: DataRepr,
        payload: &'a [u8],
        total: usize,
    },
    /// A large frame, or one partly read already: for [`Link::recv`].
    Other,
}

/// What [`Link::take_match_now`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakenNow {
    /// No whole frame yet.
    Nothing,
    /// It took the awaited message, whose envelope this is. `more`: bytes read with it
    /// remain, which [`Link::recv`] must hand out before the rank sleeps.
    Taken { env: Envelope, more: bool },
    /// Another frame is at the head of the lane: for [`Link::recv`].
    Other,
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
    #[error("the path is dead: {0}")]
    Stalled(String),
}

/// A connected, authenticated lane to one peer.
pub trait Link {
    /// What the runtime's sink ties to each payload (see [`Sink::Token`]).
    type Token;
    /// What this lane can do.
    fn caps(&self) -> Caps;
    /// Writes a frame, or as much of it as the socket takes, queueing the rest. Returns
    /// `true` if the frame was completely handed over now; otherwise `token` is reported
    /// by a later [`Link::flush`], and the link keeps its own reference to `payload`. On
    /// an error the frame stays queued: [`Link::take_queued_tokens`] reports its token.
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
    /// Returns whether the lane took any bytes: a flush that met a full socket or ring
    /// is no progress, and the rank may sleep until there is room.
    fn flush(&mut self, done: &mut Vec<u64>) -> Result<bool, LinkError>;
    /// Bytes (headers and payloads) queued and not yet written to the socket; the
    /// engine keeps this small so that lanes share a transfer by their real speed.
    fn tx_queued(&self) -> u64;
    /// Bytes written to this lane that the peer has not taken yet, as far as this end
    /// can tell now: those queued here, and for a shared-memory ring what the peer has
    /// not read. A message behind a large backlog may go another way
    /// (`proto::caps::reads_in_one_copy`).
    fn backlog(&mut self) -> u64 {
        self.tx_queued()
    }
    /// Reads what has arrived and hands complete headers and payloads to `sink`.
    /// Returns whether anything was read.
    fn recv<S: Sink<Token = Self::Token>>(&mut self, sink: &mut S) -> Result<bool, LinkError>;
    /// The frame at the head of the lane, without taking it (read from the transport
    /// if need be): a blocking receive's latency-critical path looks before it decides.
    /// A frame looked at and left is handed out by the next [`Link::recv`], which the
    /// caller must run before the rank sleeps.
    fn peek_small(&mut self) -> Result<Peeked<'_>, LinkError>;
    /// Takes the frame of `total` bytes that [`Link::peek_small`] returned. `true` when
    /// bytes read with it remain: [`Link::recv`] must hand them out before the rank
    /// sleeps (a socket does not signal them again).
    fn take_peeked(&mut self, total: usize) -> bool;
    /// A blocking receive's latency-critical look: a small MATCH frame whole at the
    /// head of the lane whose envelope `admits` accepts (the engine's
    /// `Awaited::admits`) has its payload copied into `dst` and is taken off the lane.
    /// Anything else stays, as after [`Link::peek_small`].
    #[inline]
    fn take_match_now(
        &mut self,
        admits: impl FnOnce(&Envelope) -> bool,
        dst: &mut [u8],
    ) -> Result<TakenNow, LinkError> {
        let (env, total) = match self.peek_small()? {
            Peeked::Nothing => return Ok(TakenNow::Nothing),
            Peeked::Frame {
                repr: DataRepr::Match { env },
                payload,
                total,
            } if payload.len() <= dst.len() && admits(&env) => {
                copy::copy_into(dst, payload);
                (env, total)
            }
            Peeked::Frame { .. } | Peeked::Other => return Ok(TakenNow::Other),
        };
        let more = self.take_peeked(total);
        Ok(TakenNow::Taken { env, more })
    }
    /// What to wait on in epoll: readable when something arrived (or, for a
    /// [`Link::polled`] link, after [`Link::arm_wakeup`]), or when the link closed.
    fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>>;
    /// Frames arrive without making [`Link::fd`] readable (shared memory): the runtime
    /// looks at the link on every progress pass, and its fd only wakes a sleeping rank.
    fn polled(&self) -> bool;
    /// Certainly nothing arrived since the last look, by a check far cheaper than
    /// [`Link::peek_small`] (a load or two of shared memory): a receiver spinning on one
    /// lane looks here first. `false` when unsure (a socket must be read to know).
    fn quiet(&self) -> bool {
        false
    }
    /// A polled link whose frames say so in the node's bitmap of writers (shared memory
    /// on a node of many ranks, `shm::SIGNAL_FROM`): the runtime reads it when its bit
    /// is taken, not on every pass.
    fn signalled(&self) -> bool {
        false
    }
    /// [`Link::fd`] of a polled link is readable on every frame (a shared raw socket,
    /// not a doorbell): it is watched only while the rank sleeps, since a watched fd
    /// costs every arriving frame an epoll callback on the busy path.
    fn watch_while_sleeping(&self) -> bool {
        false
    }
    /// How long a sleeping rank may leave the link alone: the link has a timer of its
    /// own (a retransmission, an acknowledgement), which no fd announces.
    fn wake_within(&self) -> Option<std::time::Duration> {
        None
    }
    /// Before the rank sleeps on [`Link::fd`]: make the next frame wake it. `false` when
    /// something is already waiting (do not sleep).
    fn arm_wakeup(&mut self) -> bool;
    /// [`Link::fd`] of a polled link was readable: take what woke the rank, and report a
    /// peer that is gone.
    fn service_wakeup(&mut self) -> Result<(), LinkError>;
    /// Asks the kernel how the lane's path is doing (TCP: `TCP_INFO`): an error when it
    /// is dead, i.e. data or window probes have gone unacknowledged for `stall_ms` (a
    /// NIC that went down, a path that vanished), which TCP itself notices only after
    /// many minutes; otherwise what was measured, if the transport measures anything.
    fn check_path(&self, stall_ms: u32) -> Result<Option<PathFigures>, LinkError>;
    /// The receive that owns `buf` completed through another lane: a payload this link
    /// is still placing into `buf` (a fragment sent again after a lane broke) is read
    /// on but dropped, and the link lets go of `buf`.
    fn abandon_payload(&mut self, buf: &Buffer);
    /// The lane's ledger of frames sent and received, and of copies kept for a replay
    /// on another lane if this one breaks.
    fn ledger(&mut self) -> &mut Ledger;
    /// The token of a payload the link was still reading (the lane is being dropped).
    fn take_partial(&mut self) -> Option<Self::Token>;
    /// The lane is being dropped with frames still queued: pushes their tokens, as
    /// [`Link::flush`] would have once they were written (their copies go again on
    /// another lane, so their sends are done with their buffers).
    fn take_queued_tokens(&mut self, done: &mut Vec<u64>);
}

/// A lane's path as measured by the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathFigures {
    /// Smallest round trip seen on the connection, in nanoseconds.
    pub min_rtt_ns: u64,
    /// Recent delivery rate in bytes per second (0 before data has flowed).
    pub delivery_rate: u64,
}

/// The transports a lane can be of (`PONTOON_TRANSPORTS` names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    Tcp,
    Shm,
    /// Raw Ethernet frames (`eth.rs`).
    Eth,
}

impl Transport {
    pub const ALL: [Transport; 3] = [Transport::Tcp, Transport::Shm, Transport::Eth];
    /// What a job uses unless told otherwise: every transport, each where it can be
    /// (shared memory within a node, raw Ethernet where the ranks have CAP_NET_RAW and
    /// share a segment, TCP everywhere).
    pub const DEFAULT: [Transport; 3] = Transport::ALL;

    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Shm => "shm",
            Transport::Eth => "eth",
        }
    }

    pub fn from_name(name: &str) -> Option<Transport> {
        Transport::ALL.into_iter().find(|t| t.name() == name)
    }

    /// `tcp,shm`: the names, comma-separated, as `PONTOON_TRANSPORTS` takes them.
    pub fn list(transports: &[Transport]) -> String {
        let names: Vec<&str> = transports.iter().map(|t| t.name()).collect();
        names.join(",")
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A lane of any transport: the one dispatch point of the runtime (a `match`, inlined,
/// so a message pays no indirect call).
// The eth variant is the largest (its channel's state inline): a lane is one of a few
// per peer, and boxing it would put a pointer chase on every message of the fast path.
#[allow(clippy::large_enum_variant)]
pub enum AnyLink<T> {
    Tcp(tcp::TcpLink<T>),
    /// A TCP lane whose bytes travel encrypted (`sealed.rs`).
    SealedTcp(tcp::SealedTcpLink<T>),
    Shm(shm::ShmLink<T>),
    Eth(eth::EthLink<T>),
}

macro_rules! each {
    ($self:expr, $l:ident => $e:expr) => {
        match $self {
            AnyLink::Tcp($l) => $e,
            AnyLink::SealedTcp($l) => $e,
            AnyLink::Shm($l) => $e,
            AnyLink::Eth($l) => $e,
        }
    };
}

impl<T> AnyLink<T> {
    pub fn transport(&self) -> Transport {
        match self {
            AnyLink::Tcp(_) | AnyLink::SealedTcp(_) => Transport::Tcp,
            AnyLink::Shm(_) => Transport::Shm,
            AnyLink::Eth(_) => Transport::Eth,
        }
    }

    pub fn set_caps(&mut self, caps: Caps) {
        each!(self, l => l.set_caps(caps))
    }

    /// Whether the lane's bytes travel encrypted.
    pub fn sealed(&self) -> bool {
        matches!(self, AnyLink::SealedTcp(_))
    }
}

impl<T> Link for AnyLink<T> {
    type Token = T;
    #[inline]
    fn caps(&self) -> Caps {
        each!(self, l => l.caps())
    }
    #[inline]
    fn send(
        &mut self,
        header: &HeaderBytes,
        payload: Option<(&Buffer, u64, u64)>,
        token: u64,
    ) -> Result<bool, LinkError> {
        each!(self, l => l.send(header, payload, token))
    }
    #[inline]
    fn send_copy(&mut self, header: &HeaderBytes, payload: &[u8]) -> Result<(), LinkError> {
        each!(self, l => l.send_copy(header, payload))
    }
    #[inline]
    fn flush(&mut self, done: &mut Vec<u64>) -> Result<bool, LinkError> {
        each!(self, l => l.flush(done))
    }
    #[inline]
    fn tx_queued(&self) -> u64 {
        each!(self, l => l.tx_queued())
    }
    #[inline]
    fn backlog(&mut self) -> u64 {
        each!(self, l => l.backlog())
    }
    #[inline]
    fn recv<S: Sink<Token = T>>(&mut self, sink: &mut S) -> Result<bool, LinkError> {
        each!(self, l => l.recv(sink))
    }
    #[inline]
    fn peek_small(&mut self) -> Result<Peeked<'_>, LinkError> {
        each!(self, l => l.peek_small())
    }
    #[inline]
    fn take_peeked(&mut self, total: usize) -> bool {
        each!(self, l => l.take_peeked(total))
    }
    #[inline]
    fn take_match_now(
        &mut self,
        admits: impl FnOnce(&Envelope) -> bool,
        dst: &mut [u8],
    ) -> Result<TakenNow, LinkError> {
        each!(self, l => l.take_match_now(admits, dst))
    }
    fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        each!(self, l => l.fd())
    }
    #[inline]
    fn polled(&self) -> bool {
        each!(self, l => l.polled())
    }
    #[inline]
    fn quiet(&self) -> bool {
        each!(self, l => l.quiet())
    }
    fn signalled(&self) -> bool {
        each!(self, l => l.signalled())
    }
    fn watch_while_sleeping(&self) -> bool {
        each!(self, l => l.watch_while_sleeping())
    }
    fn wake_within(&self) -> Option<std::time::Duration> {
        each!(self, l => l.wake_within())
    }
    fn arm_wakeup(&mut self) -> bool {
        each!(self, l => l.arm_wakeup())
    }
    fn service_wakeup(&mut self) -> Result<(), LinkError> {
        each!(self, l => l.service_wakeup())
    }
    fn check_path(&self, stall_ms: u32) -> Result<Option<PathFigures>, LinkError> {
        each!(self, l => l.check_path(stall_ms))
    }
    fn abandon_payload(&mut self, buf: &Buffer) {
        each!(self, l => l.abandon_payload(buf))
    }
    fn ledger(&mut self) -> &mut Ledger {
        each!(self, l => l.ledger())
    }
    fn take_partial(&mut self) -> Option<T> {
        each!(self, l => l.take_partial())
    }
    fn take_queued_tokens(&mut self, done: &mut Vec<u64>) {
        each!(self, l => l.take_queued_tokens(done))
    }
}
