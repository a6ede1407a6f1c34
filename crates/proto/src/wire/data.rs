//! Data frames exchanged on an established lane.
//!
//! ```text
//! prefix (8 bytes, every kind)
//!   0  u8   kind
//!   1  u8   flags (must be 0 in version 1)
//!   2  u16  reserved (0)
//!   4  u32  payload length: bytes that follow the header in this frame
//! body (fixed size per kind)
//!   MATCH 24: ctx u32, src u32, tag i32, seq u32, msg_len u64         payload = whole message
//!   RTS   32: ctx u32, src u32, tag i32, seq u32, msg_len u64, send_id u64   no payload
//!   CTS   24: send_id u64, recv_id u64, accept_len u64                  no payload
//!   FRAG  16: recv_id u64, offset u64                                   payload = a chunk
//!   FIN    8: send_id u64                                               no payload
//!   BYE    0:                                                           no payload
//!   CREDIT 8: returned u64 (running total of eager bytes given back)    no payload
//!   PUNCH 24: step u8 (1 offer, 2 answer, 3 sync), round u8, port u16,  no payload
//!             ip [16] (IPv4 v4-mapped; all zero with port 0: none), reserved u32
//!   LANE_ACK  16: tag u64, frames u64   the sender's frames of lane `tag` processed so far
//!   LANE_LOST 16: tag u64, frames u64   lane `tag` broke; this many of its frames arrived
//!   ABORT  8: code i32, origin u32      rank `origin` called MPI_Abort with `code`  no payload
//!   BATCH  8: messages u32, reserved u32  payload = that many MATCH frames (header and
//!             payload each) back to back, at most MAX_BATCH bytes: small messages
//!             coalesced towards a WAN peer ([`crate::engine`]'s `coalesce.rs`)
//!   ORIGIN 16: send_id u64, at u64    the RTS that follows may be read at `at`
//!   CANCEL 24: ctx u32, tag i32, seq u32, reserved u32, send_id u64   withdraw the
//!             message `seq` of this sender (MATCH or RTS `send_id`) if nothing matched it
//!   CANCELLED 16: send_id u64, withdrawn u8, reserved [7]   the answer to a CANCEL
//! ```
//! PUNCH coordinates a hole punch over a relayed lane ([`crate::punch`]).
//! The stream reader learns the header size from the kind byte, then the payload
//! size from the prefix, so the payload can be read straight into its destination.

use core::net::SocketAddr;

use super::{get_addr, get_u32, get_u64, put_addr, put_u32, put_u64, WireError};

pub const PREFIX_LEN: usize = 8;

/// Where each field starts (see the layout above): the prefix's in the header, each
/// kind's in its body, which follows the prefix.
mod at {
    pub const KIND: usize = 0;
    /// Flags and reserved bytes, all 0.
    pub const FLAGS: usize = 1;
    pub const PAYLOAD_LEN: usize = 4;
    /// A MATCH's or RTS's envelope.
    pub mod env {
        pub const CTX: usize = 0;
        pub const SRC: usize = 4;
        pub const TAG: usize = 8;
        pub const SEQ: usize = 12;
        pub const MSG_LEN: usize = 16;
    }
    pub mod rts {
        pub const SEND_ID: usize = 24;
    }
    pub mod cts {
        pub const SEND_ID: usize = 0;
        pub const RECV_ID: usize = 8;
        pub const ACCEPT_LEN: usize = 16;
    }
    pub mod frag {
        pub const RECV_ID: usize = 0;
        pub const OFFSET: usize = 8;
    }
    /// FIN's send id, CREDIT's total: the one field of their bodies.
    pub const ONLY: usize = 0;
    pub mod punch {
        pub const STEP: usize = 0;
        pub const ROUND: usize = 1;
        pub const PORT: usize = 2;
        pub const IP: usize = 4;
        pub const RESERVED: usize = 20;
        pub const LEN: usize = 24;
    }
    /// LANE_ACK and LANE_LOST.
    pub mod lane {
        pub const TAG: usize = 0;
        pub const FRAMES: usize = 8;
    }
    pub mod abort {
        pub const CODE: usize = 0;
        pub const ORIGIN: usize = 4;
    }
    pub mod batch {
        pub const MESSAGES: usize = 0;
        pub const RESERVED: usize = 4;
    }
    pub mod origin {
        pub const SEND_ID: usize = 0;
        pub const AT: usize = 8;
    }
    pub mod cancel {
        pub const CTX: usize = 0;
        pub const TAG: usize = 4;
        pub const SEQ: usize = 8;
        pub const RESERVED: usize = 12;
        pub const SEND_ID: usize = 16;
    }
    pub mod cancelled {
        pub const SEND_ID: usize = 0;
        pub const WITHDRAWN: usize = 8;
        pub const RESERVED: usize = 9;
        pub const LEN: usize = 16;
    }
}
/// Largest header of any kind; a reader that has this many bytes can always decide.
pub const MAX_HEADER_LEN: usize = PREFIX_LEN + 32;
/// Largest payload a single frame may declare (FRAG chunks and eager messages stay far below).
pub const MAX_FRAME_PAYLOAD: u32 = 1 << 30;
/// Largest payload of a BATCH: what a receiver buffers for one before it looks inside.
pub const MAX_BATCH: u32 = 64 << 10;

wire_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Kind refusing(WireError::UnknownKind) {
        Match = 1,
        Rts = 2,
        Cts = 3,
        Frag = 4,
        Fin = 5,
        Bye = 6,
        Credit = 7,
        Punch = 8,
        LaneAck = 9,
        LaneLost = 10,
        Abort = 11,
        Batch = 12,
        Origin = 13,
        Cancel = 14,
        Cancelled = 15,
    }
}

impl Kind {
    pub const fn body_len(self) -> usize {
        match self {
            Kind::Match => 24,
            Kind::Rts => 32,
            Kind::Cts => 24,
            Kind::Frag => 16,
            Kind::Fin => 8,
            Kind::Bye => 0,
            Kind::Credit => 8,
            Kind::Punch => 24,
            Kind::LaneAck | Kind::LaneLost => 16,
            Kind::Abort => 8,
            Kind::Batch => 8,
            Kind::Origin => 16,
            Kind::Cancel => 24,
            Kind::Cancelled => 16,
        }
    }
    pub const fn header_len(self) -> usize {
        PREFIX_LEN + self.body_len()
    }
    const fn carries_payload(self) -> bool {
        matches!(self, Kind::Match | Kind::Frag | Kind::Batch)
    }
}

/// Checked zero-copy view of a data frame header (prefix + body, without payload).
#[derive(Debug, Clone, Copy)]
pub struct DataHeader<T: AsRef<[u8]>> {
    buffer: T,
    kind: Kind,
}

impl<T: AsRef<[u8]>> DataHeader<T> {
    /// Checks kind, reserved fields, sizes and the payload rules of the kind.
    /// `buffer` may be longer than the header (e.g. a whole receive buffer).
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        if b.len() < PREFIX_LEN {
            return Err(WireError::Truncated {
                need: PREFIX_LEN,
                have: b.len(),
            });
        }
        let kind = Kind::from_u8(b[at::KIND])?;
        if b[at::FLAGS..at::PAYLOAD_LEN] != [0; 3] {
            return Err(WireError::Reserved);
        }
        let need = kind.header_len();
        if b.len() < need {
            return Err(WireError::Truncated { need, have: b.len() });
        }
        let payload = get_u32(b, at::PAYLOAD_LEN);
        if payload > MAX_FRAME_PAYLOAD {
            return Err(WireError::Field("payload_len"));
        }
        if !kind.carries_payload() && payload != 0 {
            return Err(WireError::Field("payload_len"));
        }
        if kind == Kind::Match && u64::from(payload) != get_u64(b, PREFIX_LEN + at::env::MSG_LEN) {
            return Err(WireError::Field("msg_len"));
        }
        if kind == Kind::Batch {
            let body = &b[PREFIX_LEN..need];
            if payload > MAX_BATCH || payload == 0 || get_u32(body, at::batch::MESSAGES) == 0 {
                return Err(WireError::Field("batch length"));
            }
            if body[at::batch::RESERVED..at::batch::RESERVED + 4] != [0; 4] {
                return Err(WireError::Reserved);
            }
        }
        let reserved = PREFIX_LEN + at::cancel::RESERVED;
        if kind == Kind::Cancel && b[reserved..reserved + 4] != [0; 4] {
            return Err(WireError::Reserved);
        }
        if kind == Kind::Cancelled {
            let body = &b[PREFIX_LEN..need];
            if body[at::cancelled::WITHDRAWN] > 1 {
                return Err(WireError::Field("withdrawn"));
            }
            if body[at::cancelled::RESERVED..at::cancelled::LEN] != [0; 7] {
                return Err(WireError::Reserved);
            }
        }
        if kind == Kind::Punch {
            let body = &b[PREFIX_LEN..need];
            PunchStep::from_u8(body[at::punch::STEP]).map_err(|_| WireError::Field("punch step"))?;
            if body[at::punch::RESERVED..at::punch::LEN] != [0; 4] {
                return Err(WireError::Reserved);
            }
        }
        Ok(DataHeader { buffer, kind })
    }
    pub fn kind(&self) -> Kind {
        self.kind
    }
    pub fn header_len(&self) -> usize {
        self.kind.header_len()
    }
    pub fn payload_len(&self) -> u32 {
        get_u32(self.buffer.as_ref(), at::PAYLOAD_LEN)
    }
    fn body_u32(&self, field: usize) -> u32 {
        get_u32(self.buffer.as_ref(), PREFIX_LEN + field)
    }
    fn body_u64(&self, field: usize) -> u64 {
        get_u64(self.buffer.as_ref(), PREFIX_LEN + field)
    }
}

/// Envelope of a MATCH or RTS: what the matching engine looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope {
    pub ctx: u32,
    pub src: u32,
    pub tag: i32,
    pub seq: u32,
    pub msg_len: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataRepr {
    Match {
        env: Envelope,
    },
    Rts {
        env: Envelope,
        send_id: u64,
    },
    Cts {
        send_id: u64,
        recv_id: u64,
        accept_len: u64,
    },
    Frag {
        recv_id: u64,
        offset: u64,
        len: u32,
    },
    Fin {
        send_id: u64,
    },
    Bye,
    /// The receiver has consumed eager messages of this sender: `returned` is the
    /// running total of eager bytes it has given back (a total, so a repeated frame
    /// changes nothing).
    Credit {
        returned: u64,
    },
    /// A step of a hole punch between the two ranks of a relayed lane.
    Punch(PunchMsg),
    /// Of the lane both ends know as `tag` (from its handshake), `frames` frames of the
    /// receiver of this frame have been processed: it may forget them.
    LaneAck {
        tag: u64,
        frames: u64,
    },
    /// The lane `tag` broke; `frames` of the receiver's frames on it had arrived: it sends
    /// the rest again on another lane.
    LaneLost {
        tag: u64,
        frames: u64,
    },
    /// Rank `origin` called MPI_Abort with `code`: every rank that hears of it passes it
    /// on to its own peers and exits with `code`, so that a process manager that reports
    /// its tasks' highest status (srun) reports the abort's code.
    Abort {
        code: i32,
        origin: u32,
    },
    /// `messages` MATCH frames, `len` bytes in all, follow as the payload.
    Batch {
        messages: u32,
        len: u32,
    },
    /// The message of the RTS that follows (`send_id`) lies whole at `at` in the sender's
    /// memory, which the receiver can read (a shared-memory lane whose ends showed at
    /// start-up that they read each other's): it is read in one copy, then the FIN.
    Origin {
        send_id: u64,
        at: u64,
    },
    /// The sender asks to withdraw its message `seq` (in `ctx` with `tag`; a rendezvous
    /// one is `send_id`'s) if no receive has matched it (MPI_Cancel of a send).
    Cancel {
        ctx: u32,
        tag: i32,
        seq: u32,
        send_id: u64,
    },
    /// The answer to a CANCEL of `send_id`: whether the message was withdrawn (then no
    /// receive will ever have it) or had matched already (then it is delivered).
    Cancelled {
        send_id: u64,
        withdrawn: bool,
    },
}

wire_enum! {
    /// Where a hole punch stands ([`crate::punch`]): the initiator offers its address, the
    /// peer answers with its own, the initiator says when to dial.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum PunchStep refusing(WireError::UnknownKind) {
        Offer = 1,
        Answer = 2,
        Sync = 3,
    }
}

/// One PUNCH frame: `addr` is the sender's address as its peer will see it (none: it
/// cannot punch); `round` tells the attempts apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PunchMsg {
    pub step: PunchStep,
    pub round: u8,
    pub addr: Option<SocketAddr>,
}

/// Length of a MATCH header: every small eager message starts with one.
pub const MATCH_HEADER_LEN: usize = Kind::Match.header_len();

impl DataRepr {
    /// A MATCH header, checked and parsed as [`DataHeader::new_checked`] and
    /// [`DataRepr::parse`] do, in one pass over a fixed array: the receive of every
    /// small message parses one.
    #[inline]
    pub fn parse_match(h: &[u8; MATCH_HEADER_LEN]) -> Result<DataRepr, WireError> {
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let body_u32 = |field: usize| u32_at(PREFIX_LEN + field);
        if h[at::KIND] != Kind::Match as u8 {
            return Err(Kind::from_u8(h[at::KIND])
                .err()
                .unwrap_or(WireError::Field("kind")));
        }
        if h[at::FLAGS..at::PAYLOAD_LEN] != [0; 3] {
            return Err(WireError::Reserved);
        }
        let payload = u32_at(at::PAYLOAD_LEN);
        let msg_len =
            u64::from(body_u32(at::env::MSG_LEN)) | (u64::from(body_u32(at::env::MSG_LEN + 4)) << 32);
        if payload > MAX_FRAME_PAYLOAD {
            return Err(WireError::Field("payload_len"));
        }
        if u64::from(payload) != msg_len {
            return Err(WireError::Field("msg_len"));
        }
        Ok(DataRepr::Match {
            env: Envelope {
                ctx: body_u32(at::env::CTX),
                src: body_u32(at::env::SRC),
                tag: body_u32(at::env::TAG) as i32,
                seq: body_u32(at::env::SEQ),
                msg_len,
            },
        })
    }

    pub fn parse<T: AsRef<[u8]>>(h: &DataHeader<T>) -> DataRepr {
        let env = || Envelope {
            ctx: h.body_u32(at::env::CTX),
            src: h.body_u32(at::env::SRC),
            tag: h.body_u32(at::env::TAG) as i32,
            seq: h.body_u32(at::env::SEQ),
            msg_len: h.body_u64(at::env::MSG_LEN),
        };
        match h.kind {
            Kind::Match => DataRepr::Match { env: env() },
            Kind::Rts => DataRepr::Rts {
                env: env(),
                send_id: h.body_u64(at::rts::SEND_ID),
            },
            Kind::Cts => DataRepr::Cts {
                send_id: h.body_u64(at::cts::SEND_ID),
                recv_id: h.body_u64(at::cts::RECV_ID),
                accept_len: h.body_u64(at::cts::ACCEPT_LEN),
            },
            Kind::Frag => DataRepr::Frag {
                recv_id: h.body_u64(at::frag::RECV_ID),
                offset: h.body_u64(at::frag::OFFSET),
                len: h.payload_len(),
            },
            Kind::Fin => DataRepr::Fin {
                send_id: h.body_u64(at::ONLY),
            },
            Kind::Bye => DataRepr::Bye,
            Kind::Credit => DataRepr::Credit {
                returned: h.body_u64(at::ONLY),
            },
            Kind::Punch => {
                let b = &h.buffer.as_ref()[PREFIX_LEN..];
                DataRepr::Punch(PunchMsg {
                    // new_checked refused every other value.
                    step: PunchStep::from_u8(b[at::punch::STEP]).unwrap_or(PunchStep::Sync),
                    round: b[at::punch::ROUND],
                    addr: (b[at::punch::PORT..at::punch::RESERVED] != [0; 18])
                        .then(|| get_addr(b, at::punch::IP, at::punch::PORT)),
                })
            }
            Kind::LaneAck => DataRepr::LaneAck {
                tag: h.body_u64(at::lane::TAG),
                frames: h.body_u64(at::lane::FRAMES),
            },
            Kind::LaneLost => DataRepr::LaneLost {
                tag: h.body_u64(at::lane::TAG),
                frames: h.body_u64(at::lane::FRAMES),
            },
            Kind::Abort => DataRepr::Abort {
                code: h.body_u32(at::abort::CODE) as i32,
                origin: h.body_u32(at::abort::ORIGIN),
            },
            Kind::Batch => DataRepr::Batch {
                messages: h.body_u32(at::batch::MESSAGES),
                len: h.payload_len(),
            },
            Kind::Origin => DataRepr::Origin {
                send_id: h.body_u64(at::origin::SEND_ID),
                at: h.body_u64(at::origin::AT),
            },
            Kind::Cancel => DataRepr::Cancel {
                ctx: h.body_u32(at::cancel::CTX),
                tag: h.body_u32(at::cancel::TAG) as i32,
                seq: h.body_u32(at::cancel::SEQ),
                send_id: h.body_u64(at::cancel::SEND_ID),
            },
            Kind::Cancelled => DataRepr::Cancelled {
                send_id: h.body_u64(at::cancelled::SEND_ID),
                withdrawn: h.buffer.as_ref()[PREFIX_LEN + at::cancelled::WITHDRAWN] == 1,
            },
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            DataRepr::Match { .. } => Kind::Match,
            DataRepr::Rts { .. } => Kind::Rts,
            DataRepr::Cts { .. } => Kind::Cts,
            DataRepr::Frag { .. } => Kind::Frag,
            DataRepr::Fin { .. } => Kind::Fin,
            DataRepr::Bye => Kind::Bye,
            DataRepr::Credit { .. } => Kind::Credit,
            DataRepr::Punch(_) => Kind::Punch,
            DataRepr::LaneAck { .. } => Kind::LaneAck,
            DataRepr::LaneLost { .. } => Kind::LaneLost,
            DataRepr::Abort { .. } => Kind::Abort,
            DataRepr::Batch { .. } => Kind::Batch,
            DataRepr::Origin { .. } => Kind::Origin,
            DataRepr::Cancel { .. } => Kind::Cancel,
            DataRepr::Cancelled { .. } => Kind::Cancelled,
        }
    }

    pub fn header_len(&self) -> usize {
        self.kind().header_len()
    }

    /// Payload bytes that follow this header.
    pub fn payload_len(&self) -> u32 {
        match self {
            // An eager message's length always fits: the engine only sends eager below the lane limit.
            DataRepr::Match { env } => env.msg_len as u32,
            DataRepr::Frag { len, .. } | DataRepr::Batch { len, .. } => *len,
            _ => 0,
        }
    }

    /// Writes the header into `out` (at least `header_len()` bytes) and returns its length.
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let n = self.header_len();
        let out = &mut out[..n];
        out[at::KIND] = self.kind() as u8;
        out[at::FLAGS..at::PAYLOAD_LEN].fill(0);
        put_u32(out, at::PAYLOAD_LEN, self.payload_len());
        let body = &mut out[PREFIX_LEN..];
        match self {
            DataRepr::Match { env } => put_envelope(body, env),
            DataRepr::Rts { env, send_id } => {
                put_envelope(body, env);
                put_u64(body, at::rts::SEND_ID, *send_id);
            }
            DataRepr::Cts {
                send_id,
                recv_id,
                accept_len,
            } => {
                put_u64(body, at::cts::SEND_ID, *send_id);
                put_u64(body, at::cts::RECV_ID, *recv_id);
                put_u64(body, at::cts::ACCEPT_LEN, *accept_len);
            }
            DataRepr::Frag { recv_id, offset, .. } => {
                put_u64(body, at::frag::RECV_ID, *recv_id);
                put_u64(body, at::frag::OFFSET, *offset);
            }
            DataRepr::Fin { send_id } => put_u64(body, at::ONLY, *send_id),
            DataRepr::Bye => {}
            DataRepr::Credit { returned } => put_u64(body, at::ONLY, *returned),
            DataRepr::Punch(m) => {
                body[..at::punch::LEN].fill(0);
                body[at::punch::STEP] = m.step as u8;
                body[at::punch::ROUND] = m.round;
                if let Some(addr) = m.addr {
                    put_addr(body, at::punch::IP, at::punch::PORT, addr);
                }
            }
            DataRepr::LaneAck { tag, frames } | DataRepr::LaneLost { tag, frames } => {
                put_u64(body, at::lane::TAG, *tag);
                put_u64(body, at::lane::FRAMES, *frames);
            }
            DataRepr::Abort { code, origin } => {
                put_u32(body, at::abort::CODE, *code as u32);
                put_u32(body, at::abort::ORIGIN, *origin);
            }
            DataRepr::Batch { messages, .. } => {
                put_u32(body, at::batch::MESSAGES, *messages);
                put_u32(body, at::batch::RESERVED, 0);
            }
            DataRepr::Origin { send_id, at: where_ } => {
                put_u64(body, at::origin::SEND_ID, *send_id);
                put_u64(body, at::origin::AT, *where_);
            }
            DataRepr::Cancel {
                ctx,
                tag,
                seq,
                send_id,
            } => {
                put_u32(body, at::cancel::CTX, *ctx);
                put_u32(body, at::cancel::TAG, *tag as u32);
                put_u32(body, at::cancel::SEQ, *seq);
                put_u32(body, at::cancel::RESERVED, 0);
                put_u64(body, at::cancel::SEND_ID, *send_id);
            }
            DataRepr::Cancelled { send_id, withdrawn } => {
                put_u64(body, at::cancelled::SEND_ID, *send_id);
                body[at::cancelled::WITHDRAWN..at::cancelled::LEN].fill(0);
                body[at::cancelled::WITHDRAWN] = u8::from(*withdrawn);
            }
        }
        n
    }
}

/// Writes a MATCH's or RTS's envelope at the start of its `body`.
#[inline]
fn put_envelope(body: &mut [u8], env: &Envelope) {
    put_u32(body, at::env::CTX, env.ctx);
    put_u32(body, at::env::SRC, env.src);
    put_u32(body, at::env::TAG, env.tag as u32);
    put_u32(body, at::env::SEQ, env.seq);
    put_u64(body, at::env::MSG_LEN, env.msg_len);
}

/// A header ready to be written, stored inline so that queuing it never allocates.
#[derive(Clone, Copy)]
pub struct HeaderBytes {
    bytes: [u8; MAX_HEADER_LEN],
    len: u8,
}

impl HeaderBytes {
    pub fn new(repr: &DataRepr) -> HeaderBytes {
        let mut bytes = [0u8; MAX_HEADER_LEN];
        let len = repr.emit(&mut bytes) as u8;
        HeaderBytes { bytes, len }
    }
    /// The header of a MATCH frame of `env`'s message, as `new` makes it, without the
    /// match over kinds: every small message's send builds one.
    #[inline]
    pub fn matched(env: &Envelope) -> HeaderBytes {
        let mut bytes = [0u8; MAX_HEADER_LEN];
        bytes[at::KIND] = Kind::Match as u8;
        put_u32(&mut bytes, at::PAYLOAD_LEN, env.msg_len as u32);
        put_envelope(&mut bytes[PREFIX_LEN..MATCH_HEADER_LEN], env);
        HeaderBytes {
            bytes,
            len: MATCH_HEADER_LEN as u8,
        }
    }

    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The frame's kind (the header was emitted from a repr: always a known one).
    pub fn kind(&self) -> Kind {
        Kind::from_u8(self.bytes[at::KIND]).expect("emitted from a repr")
    }
}

impl std::fmt::Debug for HeaderBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match DataHeader::new_checked(self.as_slice()) {
            Ok(h) => write!(f, "{:?}", DataRepr::parse(&h)),
            Err(e) => write!(f, "<bad header: {e}>"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_env() -> impl Strategy<Value = Envelope> {
        (
            any::<u32>(),
            any::<u32>(),
            any::<i32>(),
            any::<u32>(),
            0u64..(1 << 20),
        )
            .prop_map(|(ctx, src, tag, seq, msg_len)| Envelope {
                ctx,
                src,
                tag,
                seq,
                msg_len,
            })
    }

    fn arb_repr() -> impl Strategy<Value = DataRepr> {
        prop_oneof![
            arb_env().prop_map(|env| DataRepr::Match { env }),
            (arb_env(), any::<u64>()).prop_map(|(env, send_id)| DataRepr::Rts { env, send_id }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(send_id, recv_id, accept_len)| {
                DataRepr::Cts {
                    send_id,
                    recv_id,
                    accept_len,
                }
            }),
            (any::<u64>(), any::<u64>(), 0..MAX_FRAME_PAYLOAD)
                .prop_map(|(recv_id, offset, len)| DataRepr::Frag { recv_id, offset, len }),
            any::<u64>().prop_map(|send_id| DataRepr::Fin { send_id }),
            Just(DataRepr::Bye),
            any::<u64>().prop_map(|returned| DataRepr::Credit { returned }),
            (
                prop_oneof![
                    Just(PunchStep::Offer),
                    Just(PunchStep::Answer),
                    Just(PunchStep::Sync)
                ],
                any::<u8>(),
                proptest::option::of((any::<[u8; 16]>(), 1..=u16::MAX)),
            )
                .prop_map(|(step, round, addr)| {
                    let addr = addr.map(|(ip, port)| {
                        let ip = core::net::Ipv6Addr::from(ip);
                        let ip = ip.to_ipv4_mapped().map_or(core::net::IpAddr::V6(ip), Into::into);
                        SocketAddr::new(ip, port)
                    });
                    DataRepr::Punch(PunchMsg { step, round, addr })
                }),
            (any::<u64>(), any::<u64>()).prop_map(|(tag, frames)| DataRepr::LaneAck { tag, frames }),
            (any::<u64>(), any::<u64>()).prop_map(|(tag, frames)| DataRepr::LaneLost { tag, frames }),
            (any::<i32>(), any::<u32>()).prop_map(|(code, origin)| DataRepr::Abort { code, origin }),
            (1..=u32::MAX, 1..=MAX_BATCH).prop_map(|(messages, len)| DataRepr::Batch { messages, len }),
            (any::<u64>(), any::<u64>()).prop_map(|(send_id, at)| DataRepr::Origin { send_id, at }),
            (any::<u32>(), any::<i32>(), any::<u32>(), any::<u64>()).prop_map(|(ctx, tag, seq, send_id)| {
                DataRepr::Cancel {
                    ctx,
                    tag,
                    seq,
                    send_id,
                }
            }),
            (any::<u64>(), any::<bool>())
                .prop_map(|(send_id, withdrawn)| DataRepr::Cancelled { send_id, withdrawn }),
        ]
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(repr in arb_repr()) {
            let h = HeaderBytes::new(&repr);
            let view = DataHeader::new_checked(h.as_slice()).unwrap();
            prop_assert_eq!(view.header_len(), repr.header_len());
            prop_assert_eq!(view.payload_len(), repr.payload_len());
            prop_assert_eq!(DataRepr::parse(&view), repr);
        }

        #[test]
        fn a_match_header_made_directly_is_the_one_emitted(env in arb_env()) {
            let general = HeaderBytes::new(&DataRepr::Match { env });
            let direct = HeaderBytes::matched(&env);
            prop_assert_eq!(direct.as_slice(), general.as_slice());
        }

        #[test]
        fn the_match_parser_agrees_with_the_general_one(
            mut bytes in proptest::array::uniform32(any::<u8>()),
            kind in prop_oneof![Just(Kind::Match as u8), any::<u8>()],
            reserved_clear in any::<bool>(),
            consistent_len in any::<bool>(),
        ) {
            bytes[0] = kind;
            if reserved_clear {
                bytes[1..4].fill(0);
            }
            if consistent_len {
                let len = bytes[8] & 0x7f;
                bytes[4..8].copy_from_slice(&u32::from(len).to_le_bytes());
                bytes[24..32].copy_from_slice(&u64::from(len).to_le_bytes());
            }
            let general = DataHeader::new_checked(&bytes[..]).map(|h| DataRepr::parse(&h));
            match DataRepr::parse_match(&bytes) {
                Ok(repr) => prop_assert_eq!(general, Ok(repr)),
                // Another kind is the general parser's to take; a MATCH both refuse.
                Err(_) if kind != Kind::Match as u8 => {}
                Err(e) => prop_assert_eq!(general.map(|_| ()), Err(e)),
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(h) = DataHeader::new_checked(&bytes[..]) {
                let _ = DataRepr::parse(&h);
            }
        }
    }

    #[test]
    fn refuses_truncated_unknown_and_reserved() {
        let h = HeaderBytes::new(&DataRepr::Fin { send_id: 7 });
        let b = h.as_slice();
        assert!(matches!(
            DataHeader::new_checked(&b[..b.len() - 1]),
            Err(WireError::Truncated { .. })
        ));
        let mut bad = b.to_vec();
        bad[0] = 99;
        assert_eq!(
            DataHeader::new_checked(&bad[..]).unwrap_err(),
            WireError::UnknownKind(99)
        );
        let mut bad = b.to_vec();
        bad[1] = 1;
        assert_eq!(
            DataHeader::new_checked(&bad[..]).unwrap_err(),
            WireError::Reserved
        );
        let mut bad = b.to_vec();
        bad[4] = 1; // a FIN must not carry payload
        assert_eq!(
            DataHeader::new_checked(&bad[..]).unwrap_err(),
            WireError::Field("payload_len")
        );
    }

    #[test]
    fn cancel_frames_refuse_set_reserved_bytes_and_a_withdrawn_byte_above_one() {
        let cancel = HeaderBytes::new(&DataRepr::Cancel {
            ctx: 1,
            tag: -4,
            seq: 9,
            send_id: 77,
        });
        let mut bad = cancel.as_slice().to_vec();
        bad[PREFIX_LEN + 13] = 1;
        assert_eq!(
            DataHeader::new_checked(&bad[..]).unwrap_err(),
            WireError::Reserved
        );
        let answer = HeaderBytes::new(&DataRepr::Cancelled {
            send_id: 77,
            withdrawn: true,
        });
        let mut bad = answer.as_slice().to_vec();
        bad[PREFIX_LEN + 8] = 2;
        assert_eq!(
            DataHeader::new_checked(&bad[..]).unwrap_err(),
            WireError::Field("withdrawn")
        );
        let mut bad = answer.as_slice().to_vec();
        bad[PREFIX_LEN + 15] = 1;
        assert_eq!(
            DataHeader::new_checked(&bad[..]).unwrap_err(),
            WireError::Reserved
        );
    }

    #[test]
    fn match_payload_must_equal_message_length() {
        let env = Envelope {
            ctx: 0,
            src: 1,
            tag: 2,
            seq: 3,
            msg_len: 8,
        };
        let mut b = HeaderBytes::new(&DataRepr::Match { env }).as_slice().to_vec();
        b[4] = 9;
        assert_eq!(
            DataHeader::new_checked(&b[..]).unwrap_err(),
            WireError::Field("msg_len")
        );
    }
}
