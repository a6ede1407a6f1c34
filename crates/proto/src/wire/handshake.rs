//! The connection handshake frame (one fixed layout for HELLO, ACK and CONFIRM).
//!
//! ```text
//!  0 [4]  magic "PNTN"
//!  4 u16  protocol version
//!  6 u8   kind: 1 HELLO, 2 ACK, 3 CONFIRM
//!  7 u8   ACK: status (0 = accepted, see `HandshakeStatus`); HELLO: bit 0 set if the
//!         connection is an additional lane to a peer already connected, bits 1-2 the
//!         path kind (`PathKind`: 0 direct, 1 nat-proxy, 2 two-proxy, 3 punched), bit 3
//!         set if the lane's bytes travel sealed (encrypted) after the handshake; CONFIRM: 0
//!  8 [16] job id
//! 24 u32  sender's rank
//! 28 u32  rank the sender believes is at the other end
//! 32 [16] sender's fresh nonce
//! 48 [16] the other side's nonce, echoed (zero in HELLO)
//! 64 [32] MAC: blake3 keyed with the job secret over bytes 0..64
//! ```

use super::{get_u16, get_u32, put_u16, put_u32, WireError};

pub const MAGIC: [u8; 4] = *b"PNTN";
pub const VERSION: u16 = 1;
pub const FRAME_LEN: usize = 96;

/// Where each field starts (see the layout above).
mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 4;
    pub const KIND: usize = 6;
    /// ACK: the status; HELLO: the flag bits; CONFIRM: 0.
    pub const FLAGS: usize = 7;
    pub const JOB_ID: usize = 8;
    pub const SRC: usize = 24;
    pub const DST: usize = 28;
    pub const NONCE: usize = 32;
    pub const PEER_NONCE: usize = 48;
    pub const MAC: usize = 64;
}
/// HELLO flag bits: the lane flag, the path kind, sealing.
const EXTRA_LANE: u8 = 1;
const PATH_SHIFT: u8 = 1;
const SEALED: u8 = 1 << 3;
const HELLO_FLAGS: u8 = EXTRA_LANE | (3 << PATH_SHIFT) | SEALED;

/// How a connection reaches its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(u8)]
pub enum PathKind {
    /// Straight to one of the peer's addresses (through any NAT on our side).
    #[default]
    Direct = 0,
    /// Through our NAT to a relay at the peer's site, which forwards the stream to it:
    /// one user-level hop (seed 001).
    NatProxy = 1,
    /// Through our own site's relay to one at the peer's site: two user-level hops
    /// (PACX-MPI's scheme), for hosts with no way out but their relay.
    TwoProxy = 2,
    /// Direct through both NATs, opened by simultaneous connects.
    Punched = 3,
}

impl PathKind {
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Direct => "direct",
            PathKind::NatProxy => "nat-proxy",
            PathKind::TwoProxy => "two-proxy",
            PathKind::Punched => "punched",
        }
    }

    /// Whether the path runs through a relay.
    pub fn relayed(self) -> bool {
        matches!(self, PathKind::NatProxy | PathKind::TwoProxy)
    }

    fn from_bits(v: u8) -> PathKind {
        match v & 3 {
            0 => PathKind::Direct,
            1 => PathKind::NatProxy,
            2 => PathKind::TwoProxy,
            _ => PathKind::Punched,
        }
    }
}

wire_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum HandshakeKind refusing(WireError::UnknownKind) {
        Hello = 1,
        Ack = 2,
        Confirm = 3,
    }
}

wire_enum! {
    /// Verdict of the acceptor, carried in the ACK.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum HandshakeStatus refusing(|_| WireError::Field("status")) {
        Accepted = 0,
        WrongJob = 1,
        WrongRank = 2,
        BadMac = 3,
        /// Both ranks connected at once; the connection started by the lower rank is kept.
        Simultaneous = 4,
        Version = 5,
    }
}

#[derive(Debug, Clone, Copy)]
pub struct HandshakeFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> HandshakeFrame<T> {
    /// Checks length, magic, kind and status. The version is returned in the repr and
    /// judged by the state machine (an acceptor answers an unknown version with `Version`).
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        if b.len() < FRAME_LEN {
            return Err(WireError::Truncated {
                need: FRAME_LEN,
                have: b.len(),
            });
        }
        if b[at::MAGIC..at::MAGIC + 4] != MAGIC {
            return Err(WireError::BadMagic);
        }
        match b[at::KIND] {
            2 => {
                HandshakeStatus::from_u8(b[at::FLAGS])?;
            }
            1 if b[at::FLAGS] <= HELLO_FLAGS => {}
            3 if b[at::FLAGS] == 0 => {}
            1 | 3 => return Err(WireError::Field("lane flag")),
            kind => return Err(WireError::UnknownKind(kind)),
        }
        Ok(HandshakeFrame { buffer })
    }
    /// The bytes the MAC covers.
    pub fn transcript(&self) -> &[u8] {
        &self.buffer.as_ref()[..at::MAC]
    }
    pub fn mac(&self) -> [u8; 32] {
        let mut m = [0u8; 32];
        m.copy_from_slice(&self.buffer.as_ref()[at::MAC..at::MAC + 32]);
        m
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeRepr {
    pub version: u16,
    pub kind: HandshakeKind,
    pub status: HandshakeStatus,
    pub job_id: [u8; 16],
    pub src: u32,
    pub dst: u32,
    pub nonce: [u8; 16],
    pub peer_nonce: [u8; 16],
    /// HELLO only: this connection is an additional lane, not the first one.
    pub extra_lane: bool,
    /// HELLO only: how the initiator reaches us (through a relay, the address the
    /// connection comes from is the relay's).
    pub path: PathKind,
    /// HELLO only: the lane's bytes travel sealed after the handshake (`PONTOON_ENCRYPT`).
    pub sealed: bool,
}

impl HandshakeRepr {
    pub fn parse<T: AsRef<[u8]>>(f: &HandshakeFrame<T>) -> HandshakeRepr {
        let b = f.buffer.as_ref();
        let arr16 = |from: usize| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[from..from + 16]);
            a
        };
        let (kind, flags) = (b[at::KIND], b[at::FLAGS]);
        HandshakeRepr {
            version: get_u16(b, at::VERSION),
            // new_checked refused every other value.
            kind: HandshakeKind::from_u8(kind).unwrap_or(HandshakeKind::Confirm),
            // Checked by new_checked; the flags byte is the status only in an ACK.
            status: match kind {
                2 => HandshakeStatus::from_u8(flags).unwrap_or(HandshakeStatus::BadMac),
                _ => HandshakeStatus::Accepted,
            },
            extra_lane: kind == 1 && flags & EXTRA_LANE != 0,
            sealed: kind == 1 && flags & SEALED != 0,
            path: if kind == 1 {
                PathKind::from_bits(flags >> PATH_SHIFT)
            } else {
                PathKind::Direct
            },
            job_id: arr16(at::JOB_ID),
            src: get_u32(b, at::SRC),
            dst: get_u32(b, at::DST),
            nonce: arr16(at::NONCE),
            peer_nonce: arr16(at::PEER_NONCE),
        }
    }

    /// Emits the frame, MAC'd with `secret`.
    pub fn emit(&self, secret: &[u8; 32]) -> [u8; FRAME_LEN] {
        let mut b = [0u8; FRAME_LEN];
        b[at::MAGIC..at::MAGIC + 4].copy_from_slice(&MAGIC);
        put_u16(&mut b, at::VERSION, self.version);
        b[at::KIND] = self.kind as u8;
        b[at::FLAGS] = match self.kind {
            HandshakeKind::Ack => self.status as u8,
            HandshakeKind::Hello => {
                (u8::from(self.extra_lane) * EXTRA_LANE)
                    | ((self.path as u8) << PATH_SHIFT)
                    | (u8::from(self.sealed) * SEALED)
            }
            HandshakeKind::Confirm => 0,
        };
        b[at::JOB_ID..at::JOB_ID + 16].copy_from_slice(&self.job_id);
        put_u32(&mut b, at::SRC, self.src);
        put_u32(&mut b, at::DST, self.dst);
        b[at::NONCE..at::NONCE + 16].copy_from_slice(&self.nonce);
        b[at::PEER_NONCE..at::PEER_NONCE + 16].copy_from_slice(&self.peer_nonce);
        let mac = mac(secret, &b[..at::MAC]);
        b[at::MAC..].copy_from_slice(&mac);
        b
    }
}

pub fn mac(secret: &[u8; 32], transcript: &[u8]) -> [u8; 32] {
    *blake3::keyed_hash(secret, transcript).as_bytes()
}

/// Constant-time comparison, so that a forger learns nothing from timing.
pub fn mac_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(src in any::<u32>(), dst in any::<u32>(), nonce in any::<[u8;16]>(), job in any::<[u8;16]>()) {
            let r = HandshakeRepr { version: VERSION, kind: HandshakeKind::Ack, status: HandshakeStatus::WrongRank,
                job_id: job, src, dst, nonce, peer_nonce: [7; 16], extra_lane: false, path: PathKind::Direct, sealed: false };
            let bytes = r.emit(&[1; 32]);
            let f = HandshakeFrame::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(HandshakeRepr::parse(&f), r);
            prop_assert!(mac_eq(&f.mac(), &mac(&[1; 32], f.transcript())));
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            if let Ok(f) = HandshakeFrame::new_checked(&bytes[..]) {
                let _ = HandshakeRepr::parse(&f);
            }
        }
    }

    #[test]
    fn the_lane_flag_travels_in_hello_only() {
        let hello = HandshakeRepr {
            version: VERSION,
            kind: HandshakeKind::Hello,
            status: HandshakeStatus::Accepted,
            job_id: [1; 16],
            src: 1,
            dst: 2,
            nonce: [2; 16],
            peer_nonce: [0; 16],
            extra_lane: true,
            path: PathKind::TwoProxy,
            sealed: true,
        };
        let bytes = hello.emit(&[1; 32]);
        assert_eq!(
            HandshakeRepr::parse(&HandshakeFrame::new_checked(&bytes[..]).unwrap()),
            hello
        );
        let mut bad = bytes;
        bad[at::FLAGS] = 16;
        assert_eq!(
            HandshakeFrame::new_checked(&bad[..]).unwrap_err(),
            WireError::Field("lane flag")
        );
        let confirm = HandshakeRepr {
            kind: HandshakeKind::Confirm,
            extra_lane: false,
            path: PathKind::Direct,
            sealed: false,
            ..hello
        };
        let mut bad = confirm.emit(&[1; 32]);
        bad[at::FLAGS] = 1;
        assert!(HandshakeFrame::new_checked(&bad[..]).is_err());
    }

    #[test]
    fn refuses_foreign_bytes() {
        assert_eq!(
            HandshakeFrame::new_checked(&[0u8; 96][..]).unwrap_err(),
            WireError::BadMagic
        );
        assert!(matches!(
            HandshakeFrame::new_checked(&b"PNTN"[..]),
            Err(WireError::Truncated { .. })
        ));
    }
}
