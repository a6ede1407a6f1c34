//! The raw-Ethernet datagram: what follows the Ethernet header (EtherType 0x88B5, IEEE
//! local experimental) on an `eth` lane. It carries a piece of the lane's byte stream
//! of data frames ([`super::data`]) and the reliability layer's fields
//! ([`crate::reliable`]).
//!
//! ```text
//!  0 [2] magic "Pn"
//!  2 u8  version (1)
//!  3 u8  kind: 1 DATA (stream bytes follow), 2 ACK (no payload), 3 HANDSHAKE (a
//!        handshake frame follows: `super::handshake`, authenticated by its own MAC),
//!        4 PING and 5 PONG (no payload: a round trip measured on request)
//!  4 u32 lane: the receiver's tag of the lane (one socket serves every peer on a NIC);
//!        0 in a HANDSHAKE that opens a lane
//!  8 u32 DATA: sequence number of this datagram; HANDSHAKE: the sender's tag of the
//!        lane; PING: a number, which the PONG answering it carries; ACK: 0
//! 12 u32 ack: every datagram before this one arrived (cumulative)
//! 16 u32 window end: the sender of this datagram takes datagrams before this one
//! 20 u16 payload length
//! 22 u8  SACK blocks that follow the header (0..=3)
//! 23 u8  ack delay: µs between the arrival of the newest datagram acknowledged and
//!        this datagram (255: that or more), which the sender takes off its round trip
//! 24 [8] tag: SipHash-2-4 over bytes 0..24 and 32..end, keyed with 128 bits derived
//!        from the lane's key ([`FrameKey`]); 0 in a HANDSHAKE (there is no lane key yet)
//! 32     SACK blocks, 8 bytes each: start u32, end u32 (datagrams start..end arrived)
//!        then the payload; Ethernet may pad the frame after it
//! ```
//!
//! Why a tag rather than trusting the Ethernet FCS: the FCS covers one wire only. A frame
//! that a switch, a software bridge or a NIC's memory corrupts gets a fresh, valid FCS on
//! the next hop, and any station on the segment can forge a frame from a peer's MAC. The
//! keyed tag catches both: a frame whose tag does not verify is dropped like a lost one,
//! and the reliability layer sends it again.
//!
//! Why SipHash-2-4 rather than BLAKE3, which keys the handshake: the tag is on every
//! datagram's path, sealed by one end and checked by the other. Keyed BLAKE3 took
//! 95–100 ns for a 40-byte datagram and 2.1 µs for a 1500-byte one here; SipHash-2-4,
//! a PRF made for short inputs and a MAC at its 64-bit output, takes 21 ns and 0.42 µs.
//! Its forgery odds per try, 2^-64, are those of the 8-byte tag either way.
//!
//! Sequence numbers travel as 32 bits and are widened against the receiver's position
//! ([`widen`]); windows stay far below 2^31.

use super::{get_u16, get_u32, put_u16, put_u32, WireError};

pub const ETHERTYPE: u16 = 0x88B5;
/// Bytes of the Ethernet header before the datagram (destination, source, EtherType).
pub const ETH_HEADER_LEN: usize = 14;
pub const MAGIC: [u8; 2] = *b"Pn";
/// 2: the tag is SipHash-2-4 (1 was keyed BLAKE3).
pub const VERSION: u8 = 2;
pub const HEADER_LEN: usize = 32;
pub const SACK_LEN: usize = 8;
pub const MAX_SACKS: usize = 3;
/// Header with the most SACK blocks: the payload of a datagram is at most MTU minus this.
pub const MAX_HEADER_LEN: usize = HEADER_LEN + MAX_SACKS * SACK_LEN;
const TAG_LEN: usize = 8;

/// Where each field of the Ethernet header starts.
pub mod ethernet {
    pub const DESTINATION: usize = 0;
    pub const SOURCE: usize = 6;
    pub const ETHERTYPE: usize = 12;
}

/// Where each header field of the datagram starts (see the layout above).
pub mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 2;
    pub const KIND: usize = 3;
    pub const LANE: usize = 4;
    pub const SEQ: usize = 8;
    pub const ACK: usize = 12;
    pub const WINDOW_END: usize = 16;
    pub const PAYLOAD_LEN: usize = 20;
    pub const SACK_COUNT: usize = 22;
    pub const ACK_DELAY: usize = 23;
    pub const TAG: usize = 24;
}

wire_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum EthKind refusing(WireError::UnknownKind) {
        Data = 1,
        Ack = 2,
        Handshake = 3,
        Ping = 4,
        Pong = 5,
    }
}

/// Checked zero-copy view of a datagram; the buffer may be longer (Ethernet padding).
#[derive(Debug, Clone, Copy)]
pub struct EthFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthFrame<T> {
    /// Checks magic, version, kind, reserved bits, SACK blocks and lengths. The tag is
    /// checked separately ([`EthFrame::verify`]): it needs the lane's key.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated {
                need: HEADER_LEN,
                have: b.len(),
            });
        }
        if b[at::MAGIC..at::MAGIC + 2] != MAGIC {
            return Err(WireError::BadMagic);
        }
        if b[at::VERSION] != VERSION {
            return Err(WireError::Version(u16::from(b[at::VERSION])));
        }
        let kind = EthKind::from_u8(b[at::KIND])?;
        let sacks = usize::from(b[at::SACK_COUNT]);
        if sacks > MAX_SACKS {
            return Err(WireError::Field("sack count"));
        }
        let payload = usize::from(get_u16(b, at::PAYLOAD_LEN));
        match kind {
            EthKind::Data | EthKind::Handshake if payload == 0 => {
                return Err(WireError::Field("payload length"))
            }
            EthKind::Ack if payload != 0 || get_u32(b, at::SEQ) != 0 => {
                return Err(WireError::Field("ack seq"))
            }
            EthKind::Ping | EthKind::Pong if payload != 0 => return Err(WireError::Field("payload length")),
            _ => {}
        }
        let need = HEADER_LEN + sacks * SACK_LEN + payload;
        if b.len() < need {
            return Err(WireError::Truncated { need, have: b.len() });
        }
        for i in 0..sacks {
            let at = HEADER_LEN + i * SACK_LEN;
            let span = get_u32(b, at + 4).wrapping_sub(get_u32(b, at));
            if span == 0 || span >= 1 << 31 {
                return Err(WireError::Field("sack block"));
            }
        }
        Ok(EthFrame { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn kind(&self) -> EthKind {
        // new_checked refused every other value.
        EthKind::from_u8(self.b()[at::KIND]).unwrap_or(EthKind::Pong)
    }
    pub fn lane(&self) -> u32 {
        get_u32(self.b(), at::LANE)
    }
    fn sack_count(&self) -> usize {
        usize::from(self.b()[at::SACK_COUNT])
    }
    /// Bytes of header and SACK blocks before the payload.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.sack_count() * SACK_LEN
    }
    /// Bytes of the datagram without Ethernet padding.
    pub fn len(&self) -> usize {
        self.header_len() + usize::from(get_u16(self.b(), at::PAYLOAD_LEN))
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..self.len()]
    }
    /// Whether the tag is the one `key` gives (compared in constant time).
    pub fn verify(&self, key: &FrameKey) -> bool {
        let b = &self.b()[..self.len()];
        let want = tag(key, b);
        let diff = want
            .iter()
            .zip(&b[at::TAG..at::TAG + TAG_LEN])
            .fold(0u8, |d, (x, y)| d | (x ^ y));
        diff == 0
    }
}

/// One SACK block: wire sequence numbers `start..end` arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SackBlock {
    pub start: u32,
    pub end: u32,
}

/// Owned form of a datagram header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthRepr {
    pub kind: EthKind,
    pub lane: u32,
    pub seq: u32,
    pub ack: u32,
    pub window_end: u32,
    pub payload_len: u16,
    pub sack_count: u8,
    pub ack_delay_us: u8,
    pub sacks: [SackBlock; MAX_SACKS],
}

impl EthRepr {
    pub fn parse<T: AsRef<[u8]>>(f: &EthFrame<T>) -> EthRepr {
        let b = f.b();
        let mut sacks = [SackBlock::default(); MAX_SACKS];
        for (i, s) in sacks.iter_mut().enumerate().take(f.sack_count()) {
            let at = HEADER_LEN + i * SACK_LEN;
            *s = SackBlock {
                start: get_u32(b, at),
                end: get_u32(b, at + 4),
            };
        }
        EthRepr {
            kind: f.kind(),
            lane: f.lane(),
            seq: get_u32(b, at::SEQ),
            ack: get_u32(b, at::ACK),
            window_end: get_u32(b, at::WINDOW_END),
            payload_len: get_u16(b, at::PAYLOAD_LEN),
            sack_count: b[at::SACK_COUNT],
            ack_delay_us: b[at::ACK_DELAY],
            sacks,
        }
    }

    pub fn header_len(&self) -> usize {
        HEADER_LEN + usize::from(self.sack_count) * SACK_LEN
    }

    pub fn sacks(&self) -> &[SackBlock] {
        &self.sacks[..usize::from(self.sack_count)]
    }

    /// Writes the header (tag zero) into `out`, which must hold `header_len()` bytes;
    /// the payload goes right after it, then [`seal`] writes the tag.
    pub fn emit(&self, out: &mut [u8]) -> usize {
        out[at::MAGIC..at::MAGIC + 2].copy_from_slice(&MAGIC);
        out[at::VERSION] = VERSION;
        out[at::KIND] = self.kind as u8;
        put_u32(out, at::LANE, self.lane);
        put_u32(out, at::SEQ, self.seq);
        put_u32(out, at::ACK, self.ack);
        put_u32(out, at::WINDOW_END, self.window_end);
        put_u16(out, at::PAYLOAD_LEN, self.payload_len);
        out[at::SACK_COUNT] = self.sack_count;
        out[at::ACK_DELAY] = self.ack_delay_us;
        out[at::TAG..at::TAG + TAG_LEN].fill(0);
        for (i, s) in self.sacks().iter().enumerate() {
            let at = HEADER_LEN + i * SACK_LEN;
            put_u32(out, at, s.start);
            put_u32(out, at + 4, s.end);
        }
        self.header_len()
    }
}

/// The key of a lane's datagram tags: 128 bits derived from the lane's key, so that the
/// tag and the handshake never share a key.
#[derive(Clone, Copy)]
pub struct FrameKey([u8; 16]);

impl FrameKey {
    pub fn new(lane_key: &[u8; 32]) -> FrameKey {
        let k = blake3::derive_key("pontoon eth datagram tag v2 (SipHash-2-4)", lane_key);
        let mut key = [0u8; 16];
        key.copy_from_slice(&k[..16]);
        FrameKey(key)
    }
}

impl core::fmt::Debug for FrameKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("FrameKey(..)")
    }
}

/// Writes the tag of the datagram `frame` (header and payload, no padding).
pub fn seal(frame: &mut [u8], key: &FrameKey) {
    let t = tag(key, frame);
    frame[at::TAG..at::TAG + TAG_LEN].copy_from_slice(&t);
}

fn tag(key: &FrameKey, frame: &[u8]) -> [u8; TAG_LEN] {
    use core::hash::Hasher;
    let mut h = siphasher::sip::SipHasher24::new_with_key(&key.0);
    h.write(&frame[..at::TAG]);
    h.write(&frame[at::TAG + TAG_LEN..]);
    h.finish().to_le_bytes()
}

/// The 64-bit sequence number nearest to `reference` whose low 32 bits are `wire`.
pub fn widen(wire: u32, reference: u64) -> u64 {
    let candidate = (reference & !0xFFFF_FFFF) | u64::from(wire);
    let half = 1u64 << 31;
    if candidate + half <= reference {
        candidate + (1 << 32)
    } else if candidate > reference + half && candidate >= 1 << 32 {
        candidate - (1 << 32)
    } else {
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> FrameKey {
        FrameKey::new(&[7; 32])
    }

    fn frame(repr: &EthRepr, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; repr.header_len() + payload.len()];
        let at = repr.emit(&mut out);
        out[at..].copy_from_slice(payload);
        seal(&mut out, &key());
        out
    }

    fn data(seq: u32, payload_len: u16) -> EthRepr {
        EthRepr {
            kind: EthKind::Data,
            lane: 9,
            seq,
            ack: 3,
            window_end: 70,
            payload_len,
            sack_count: 1,
            ack_delay_us: 12,
            sacks: [
                SackBlock { start: 5, end: 7 },
                SackBlock::default(),
                SackBlock::default(),
            ],
        }
    }

    #[test]
    fn a_sealed_datagram_parses_back_and_verifies_also_when_padded() {
        let repr = data(4, 3);
        let mut bytes = frame(&repr, b"abc");
        bytes.extend_from_slice(&[0; 20]);
        let f = EthFrame::new_checked(&bytes[..]).unwrap();
        assert_eq!(EthRepr::parse(&f), repr);
        assert_eq!(f.payload(), b"abc");
        assert!(f.verify(&key()));
        assert!(!f.verify(&FrameKey::new(&[8; 32])), "another key does not verify");
    }

    #[test]
    fn every_flipped_bit_is_refused_or_fails_the_tag() {
        let bytes = frame(&data(4, 3), b"abc");
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            if let Ok(f) = EthFrame::new_checked(&b[..]) {
                assert!(!f.verify(&key()), "bit {bit} flipped went unnoticed");
            }
        }
    }

    #[test]
    fn bad_fields_are_refused() {
        let good = frame(&data(4, 3), b"abc");
        let refuse = |at: usize, v: u8| {
            let mut b = good.clone();
            b[at] = v;
            EthFrame::new_checked(&b[..]).unwrap_err()
        };
        assert_eq!(refuse(0, b'x'), WireError::BadMagic);
        assert_eq!(
            refuse(2, 1),
            WireError::Version(1),
            "a version-1 (BLAKE3-tagged) datagram"
        );
        assert_eq!(refuse(3, 9), WireError::UnknownKind(9));
        assert_eq!(refuse(22, 4), WireError::Field("sack count"));
        assert!(matches!(refuse(20, 200), WireError::Truncated { .. }));
        assert_eq!(refuse(HEADER_LEN + 4, 5), WireError::Field("sack block"));
        let mut ack = data(0, 0);
        ack.kind = EthKind::Ack;
        let mut b = frame(&ack, b"");
        assert!(EthFrame::new_checked(&b[..]).is_ok());
        b[8] = 1;
        assert_eq!(
            EthFrame::new_checked(&b[..]).unwrap_err(),
            WireError::Field("ack seq")
        );
        let empty = frame(&data(1, 0), b"");
        assert_eq!(
            EthFrame::new_checked(&empty[..]).unwrap_err(),
            WireError::Field("payload length")
        );
    }

    #[test]
    fn widening_picks_the_nearest_sequence_number() {
        assert_eq!(widen(5, 3), 5);
        assert_eq!(widen(1, 3), 1);
        assert_eq!(widen(0xFFFF_FFFF, 1 << 32), 0xFFFF_FFFF);
        assert_eq!(widen(2, 0xFFFF_FFF0), (1 << 32) + 2);
        assert_eq!(widen(0xFFFF_FFFF, 0), 0xFFFF_FFFF, "no number below zero");
    }

    proptest! {
        #[test]
        fn widen_inverts_truncation_near_the_reference(reference in 0u64..1 << 40, delta in -(1i64 << 30)..(1i64 << 30)) {
            let value = reference as i64 + delta;
            prop_assume!(value >= 0);
            prop_assert_eq!(widen(value as u32, reference), value as u64);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(f) = EthFrame::new_checked(&bytes[..]) {
                let repr = EthRepr::parse(&f);
                let mut out = vec![0u8; repr.header_len()];
                repr.emit(&mut out);
                prop_assert_eq!(&out[..24], &bytes[..24]);
                prop_assert_eq!(&out[32..], &bytes[32..repr.header_len()]);
                let _ = f.verify(&key());
            }
        }
    }
}
