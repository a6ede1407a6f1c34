//! The relay frame: what a rank and a relay (`pontoon relay`, on a cluster's front-end
//! node) say before the relay joins two TCP streams and only moves bytes.
//!
//! ```text
//!  0 [4]  magic "PNRL"
//!  4 u16  protocol version
//!  6 u8   kind: 1 CHALLENGE, 2 REGISTER, 3 CONNECT, 4 VERDICT, 5 FORWARD
//!  7 u8   VERDICT: status (0 = accepted, see `RelayStatus`); else 0
//!  8 [16] job tag (`job_tag`: derived from the job secret); zero in CHALLENGE;
//!         VERDICT: the address the relay saw the connection come from (IPv6, IPv4 as
//!         IPv4-mapped; all zero with a zero port: not given)
//! 24 u32  REGISTER: the registering rank; CONNECT, FORWARD: the rank wanted; VERDICT: the
//!         seen address's port in the first two bytes; else 0
//! 28 u16  REGISTER: the port that rank accepts relayed streams on; else 0
//! 30 u16  reserved, 0
//! 32 [32] CHALLENGE: the relay's fresh nonce; REGISTER: the job's relay key
//!         (`relay_key`); CONNECT, FORWARD: the proof (`connect_proof`); VERDICT: 0
//! 64 [64] VERDICT: why, in words (UTF-8, zero padded); FORWARD: the next relay's
//!         address (16 bytes, IPv4-mapped for IPv4) and port (u16 at 80), then zeros;
//!         else 0
//! ```
//!
//! A relay speaks first (CHALLENGE) on every connection. A rank of the relay's cluster
//! then REGISTERs: the relay will forward to the address the registration came from and
//! the port in it, for as long as that connection stays open. A requester anywhere
//! CONNECTs instead, proving with the challenge that it holds the job's relay key; the
//! relay answers with a VERDICT and, if accepted, from then on moves bytes both ways.
//! A requester with no way out but its own site's relay asks it to FORWARD instead: that
//! relay checks the proof like a CONNECT's, then itself CONNECTs to the next relay (the
//! one at the target's site) with a proof of its own — it holds the job's relay key from
//! the registrations of its cluster — and joins the streams only on that relay's
//! acceptance (two-proxy, PACX-MPI's scheme).
//! Every VERDICT tells the other side where the relay saw it come from, as STUN does: a
//! rank keeps a registration only where the relay sees the rank's own address (nothing
//! translates between them, so the relay can reach it back), and a requester learns the
//! address its NAT gave it.
//!
//! The relay key and the job tag are one-way functions of the job secret: a relay learns
//! neither the secret nor anything that passes the job's end-to-end handshake, which
//! runs through the joined streams as over a direct connection. So a relay that forwards
//! to the wrong rank is caught there, and one that is compromised can at most connect
//! strangers to ranks that will refuse them. A registration carries the relay key in the
//! clear (the relay must learn it from someone); the key proves membership only to
//! relays.

use core::net::SocketAddr;

use super::{get_addr, get_u16, get_u32, put_addr, put_u16, put_u32, WireError};

pub const MAGIC: [u8; 4] = *b"PNRL";

/// Where each field starts (see the layout above).
mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 4;
    pub const KIND: usize = 6;
    pub const STATUS: usize = 7;
    /// The job tag; in a VERDICT the seen address, its port at [`SEEN_PORT`].
    pub const JOB_TAG: usize = 8;
    pub const SEEN: usize = 8;
    pub const RANK: usize = 24;
    pub const SEEN_PORT: usize = 24;
    pub const PORT: usize = 28;
    pub const RESERVED: usize = 30;
    /// The nonce, the relay key or the proof.
    pub const KEY: usize = 32;
    /// A VERDICT's reason; a FORWARD's next relay, its port at [`NEXT_PORT`].
    pub const REASON: usize = 64;
    pub const NEXT: usize = 64;
    pub const NEXT_PORT: usize = 80;
    pub const END: usize = 128;
}
/// 2: VERDICT carries the address the relay saw.
pub const VERSION: u16 = 2;
pub const FRAME_LEN: usize = 128;
/// Bytes of a VERDICT's reason.
pub const REASON_LEN: usize = 64;

wire_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RelayKind refusing(WireError::UnknownKind) {
        Challenge = 1,
        Register = 2,
        Connect = 3,
        Verdict = 4,
        Forward = 5,
    }
}

wire_enum! {
    /// A relay's verdict on a registration or a connection request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RelayStatus refusing(|_| WireError::Field("relay status")) {
        Accepted = 0,
        /// No rank of this job registered here.
        UnknownJob = 1,
        /// The job is known, the rank is not registered here.
        UnknownRank = 2,
        /// The proof (CONNECT) or the relay key (REGISTER) does not match the job's.
        BadProof = 3,
        /// A limit of the relay (jobs, registrations or connections per job) is reached.
        Busy = 4,
        /// The registered rank did not accept the forwarded stream.
        Unreachable = 5,
        /// The relay does not speak this protocol version.
        Version = 6,
        /// The rank is registered already, over another live connection.
        Conflict = 7,
        /// A FORWARD to where this relay does not forward (a private or local address).
        Forbidden = 8,
    }
}

/// A checked view of one relay frame.
#[derive(Debug, Clone, Copy)]
pub struct RelayFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RelayFrame<T> {
    /// Checks length, magic, kind, status and the fields each kind must leave zero.
    /// The version is returned in the repr and judged by the relay (it answers an unknown
    /// one with `Version`).
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
        let kind = RelayKind::from_u8(b[at::KIND])?;
        let zero = |r: std::ops::Range<usize>| b[r].iter().all(|&x| x == 0);
        match kind {
            RelayKind::Verdict => {
                RelayStatus::from_u8(b[at::STATUS])?;
            }
            _ if b[at::STATUS] != 0 => return Err(WireError::Reserved),
            _ => {}
        }
        let fields_ok = match kind {
            RelayKind::Challenge => zero(at::JOB_TAG..at::KEY) && zero(at::REASON..at::END),
            RelayKind::Register => zero(at::RESERVED..at::KEY) && zero(at::REASON..at::END),
            RelayKind::Connect => zero(at::PORT..at::KEY) && zero(at::REASON..at::END),
            RelayKind::Forward => zero(at::PORT..at::KEY) && zero(at::NEXT_PORT + 2..at::END),
            RelayKind::Verdict => zero(at::SEEN_PORT + 2..at::REASON),
        };
        if !fields_ok {
            return Err(WireError::Reserved);
        }
        if kind == RelayKind::Verdict {
            // One way to write a reason: UTF-8 up to the first zero, zeros after it.
            let text = &b[at::REASON..at::REASON + REASON_LEN];
            let end = text.iter().position(|&c| c == 0).unwrap_or(REASON_LEN);
            if std::str::from_utf8(&text[..end]).is_err() || !zero(at::REASON + end..at::END) {
                return Err(WireError::Field("relay reason"));
            }
        }
        Ok(RelayFrame { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// One relay frame, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayRepr {
    Challenge {
        version: u16,
        nonce: [u8; 32],
    },
    Register {
        version: u16,
        job_tag: [u8; 16],
        rank: u32,
        port: u16,
        relay_key: [u8; 32],
    },
    Connect {
        version: u16,
        job_tag: [u8; 16],
        rank: u32,
        proof: [u8; 32],
    },
    Forward {
        version: u16,
        job_tag: [u8; 16],
        rank: u32,
        proof: [u8; 32],
        /// The relay at the target's site.
        next: SocketAddr,
    },
    Verdict {
        version: u16,
        status: RelayStatus,
        /// Where the relay saw this connection come from.
        observed: Option<SocketAddr>,
        /// At most [`REASON_LEN`] bytes; a reason cut inside a character loses that character.
        reason: String,
    },
}

/// A VERDICT's seen address: all zero with a zero port is none.
fn get_observed(b: &[u8]) -> Option<SocketAddr> {
    let seen = at::SEEN..at::SEEN_PORT + 2;
    (b[seen] != [0; 18]).then(|| get_addr(b, at::SEEN, at::SEEN_PORT))
}

impl RelayRepr {
    pub fn parse<T: AsRef<[u8]>>(f: &RelayFrame<T>) -> RelayRepr {
        let b = f.b();
        let version = get_u16(b, at::VERSION);
        let key = || -> [u8; 32] { b[at::KEY..at::KEY + 32].try_into().expect("32 bytes") };
        let tag = || -> [u8; 16] { b[at::JOB_TAG..at::JOB_TAG + 16].try_into().expect("16 bytes") };
        let rank = get_u32(b, at::RANK);
        match RelayKind::from_u8(b[at::KIND]).expect("checked") {
            RelayKind::Challenge => RelayRepr::Challenge {
                version,
                nonce: key(),
            },
            RelayKind::Register => RelayRepr::Register {
                version,
                job_tag: tag(),
                rank,
                port: get_u16(b, at::PORT),
                relay_key: key(),
            },
            RelayKind::Connect => RelayRepr::Connect {
                version,
                job_tag: tag(),
                rank,
                proof: key(),
            },
            RelayKind::Forward => RelayRepr::Forward {
                version,
                job_tag: tag(),
                rank,
                proof: key(),
                next: get_addr(b, at::NEXT, at::NEXT_PORT),
            },
            RelayKind::Verdict => {
                let text = &b[at::REASON..at::REASON + REASON_LEN];
                let end = text.iter().position(|&c| c == 0).unwrap_or(REASON_LEN);
                RelayRepr::Verdict {
                    version,
                    status: RelayStatus::from_u8(b[at::STATUS]).expect("checked"),
                    observed: get_observed(b),
                    reason: std::str::from_utf8(&text[..end]).expect("checked").to_string(),
                }
            }
        }
    }

    pub fn emit(&self) -> [u8; FRAME_LEN] {
        let mut b = [0u8; FRAME_LEN];
        b[at::MAGIC..at::MAGIC + 4].copy_from_slice(&MAGIC);
        let (version, kind) = match self {
            RelayRepr::Challenge { version, nonce } => {
                b[at::KEY..at::KEY + 32].copy_from_slice(nonce);
                (*version, RelayKind::Challenge)
            }
            RelayRepr::Register {
                version,
                job_tag,
                rank,
                port,
                relay_key,
            } => {
                b[at::JOB_TAG..at::JOB_TAG + 16].copy_from_slice(job_tag);
                put_u32(&mut b, at::RANK, *rank);
                put_u16(&mut b, at::PORT, *port);
                b[at::KEY..at::KEY + 32].copy_from_slice(relay_key);
                (*version, RelayKind::Register)
            }
            RelayRepr::Connect {
                version,
                job_tag,
                rank,
                proof,
            } => {
                b[at::JOB_TAG..at::JOB_TAG + 16].copy_from_slice(job_tag);
                put_u32(&mut b, at::RANK, *rank);
                b[at::KEY..at::KEY + 32].copy_from_slice(proof);
                (*version, RelayKind::Connect)
            }
            RelayRepr::Forward {
                version,
                job_tag,
                rank,
                proof,
                next,
            } => {
                b[at::JOB_TAG..at::JOB_TAG + 16].copy_from_slice(job_tag);
                put_u32(&mut b, at::RANK, *rank);
                b[at::KEY..at::KEY + 32].copy_from_slice(proof);
                put_addr(&mut b, at::NEXT, at::NEXT_PORT, *next);
                (*version, RelayKind::Forward)
            }
            RelayRepr::Verdict {
                version,
                status,
                observed,
                reason,
            } => {
                b[at::STATUS] = *status as u8;
                if let Some(seen) = observed {
                    put_addr(&mut b, at::SEEN, at::SEEN_PORT, *seen);
                }
                let text = reason.as_bytes();
                // Whole characters only, and no NUL (it ends the text).
                let mut n = text.len().min(REASON_LEN);
                while !reason.is_char_boundary(n) {
                    n -= 1;
                }
                let text = &text[..n];
                let n = text.iter().position(|&c| c == 0).unwrap_or(n);
                b[at::REASON..at::REASON + n].copy_from_slice(&text[..n]);
                (*version, RelayKind::Verdict)
            }
        };
        put_u16(&mut b, at::VERSION, version);
        b[at::KIND] = kind as u8;
        b
    }
}

/// The job's tag at relays: names the job without revealing its id or secret.
pub fn job_tag(secret: &[u8; 32]) -> [u8; 16] {
    let k = blake3::derive_key("pontoon relay job tag v1", secret);
    k[..16].try_into().expect("16 bytes")
}

/// The key a relay checks connection requests of the job with.
pub fn relay_key(secret: &[u8; 32]) -> [u8; 32] {
    blake3::derive_key("pontoon relay key v1", secret)
}

/// A requester's proof that it may reach `rank` of the job through a relay that sent
/// `nonce`: bound to this challenge, this job and this rank, so it cannot be replayed
/// on another connection or turned to another rank.
pub fn connect_proof(relay_key: &[u8; 32], nonce: &[u8; 32], job_tag: &[u8; 16], rank: u32) -> [u8; 32] {
    let mut h = blake3::Hasher::new_keyed(relay_key);
    h.update(b"pontoon relay connect v1");
    h.update(nonce);
    h.update(job_tag);
    h.update(&rank.to_le_bytes());
    *h.finalize().as_bytes()
}

/// The nonce of a relay's CHALLENGE, checked (what a rank reads first from a relay).
pub fn challenge_nonce(frame: &[u8]) -> Result<[u8; 32], String> {
    let f = RelayFrame::new_checked(frame).map_err(|e| format!("not a pontoon relay: {e}"))?;
    match RelayRepr::parse(&f) {
        RelayRepr::Challenge { version, nonce } if version == VERSION => Ok(nonce),
        RelayRepr::Challenge { version, .. } => Err(format!(
            "the relay speaks protocol version {version}, this rank {VERSION}"
        )),
        _ => Err("the relay did not begin with a challenge".into()),
    }
}

/// A requester's CONNECT for `rank` of the job with `secret`, answering `nonce`.
pub fn connect_request(secret: &[u8; 32], nonce: &[u8; 32], rank: u32) -> [u8; FRAME_LEN] {
    let tag = job_tag(secret);
    RelayRepr::Connect {
        version: VERSION,
        job_tag: tag,
        rank,
        proof: connect_proof(&relay_key(secret), nonce, &tag, rank),
    }
    .emit()
}

/// A requester's FORWARD: its own site's relay is to reach `rank` of the job through
/// the relay at `next`, answering `nonce` (that of the first relay).
pub fn forward_request(secret: &[u8; 32], nonce: &[u8; 32], rank: u32, next: SocketAddr) -> [u8; FRAME_LEN] {
    let tag = job_tag(secret);
    RelayRepr::Forward {
        version: VERSION,
        job_tag: tag,
        rank,
        proof: connect_proof(&relay_key(secret), nonce, &tag, rank),
        next,
    }
    .emit()
}

/// The rank the launcher's coordinator registers as with relays, so that ranks with no
/// way out but their relay reach it.
pub const COORDINATOR: u32 = u32::MAX;

/// A rank's REGISTER: relayed streams for `rank` of the job with `secret` go to `port`.
pub fn register_request(secret: &[u8; 32], rank: u32, port: u16) -> [u8; FRAME_LEN] {
    RelayRepr::Register {
        version: VERSION,
        job_tag: job_tag(secret),
        rank,
        port,
        relay_key: relay_key(secret),
    }
    .emit()
}

/// A relay's VERDICT: accepted, with where the relay saw us come from; or why not.
pub fn verdict(frame: &[u8]) -> Result<Option<SocketAddr>, String> {
    let f = RelayFrame::new_checked(frame).map_err(|e| format!("not a pontoon relay: {e}"))?;
    match RelayRepr::parse(&f) {
        RelayRepr::Verdict {
            status: RelayStatus::Accepted,
            observed,
            ..
        } => Ok(observed),
        RelayRepr::Verdict { status, reason, .. } => Err(format!("refused ({status:?}): {reason}")),
        _ => Err("the relay sent something other than a verdict".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::handshake::mac_eq;
    use proptest::prelude::*;

    fn round_trip(r: &RelayRepr) -> RelayRepr {
        let bytes = r.emit();
        RelayRepr::parse(&RelayFrame::new_checked(&bytes[..]).expect("an emitted frame is accepted"))
    }

    #[test]
    fn every_kind_round_trips() {
        let frames = [
            RelayRepr::Challenge {
                version: VERSION,
                nonce: [7; 32],
            },
            RelayRepr::Register {
                version: VERSION,
                job_tag: [1; 16],
                rank: 12,
                port: 40123,
                relay_key: [2; 32],
            },
            RelayRepr::Connect {
                version: VERSION,
                job_tag: [1; 16],
                rank: 3,
                proof: [9; 32],
            },
            RelayRepr::Forward {
                version: VERSION,
                job_tag: [1; 16],
                rank: 3,
                proof: [9; 32],
                next: "[2001:db8::2]:7426".parse().unwrap(),
            },
            RelayRepr::Forward {
                version: VERSION,
                job_tag: [1; 16],
                rank: COORDINATOR,
                proof: [9; 32],
                next: "198.51.100.2:7426".parse().unwrap(),
            },
            RelayRepr::Verdict {
                version: VERSION,
                status: RelayStatus::UnknownRank,
                observed: Some("198.51.100.1:40000".parse().unwrap()),
                reason: "rank 3 of this job is not registered here".into(),
            },
            RelayRepr::Verdict {
                version: VERSION,
                status: RelayStatus::Accepted,
                observed: Some("[2001:db8::1]:7".parse().unwrap()),
                reason: String::new(),
            },
            RelayRepr::Verdict {
                version: VERSION,
                status: RelayStatus::Accepted,
                observed: None,
                reason: String::new(),
            },
        ];
        for f in &frames {
            assert_eq!(&round_trip(f), f);
        }
    }

    #[test]
    fn a_long_reason_is_cut_at_a_character_boundary() {
        let reason = "é".repeat(40); // 80 bytes
        let RelayRepr::Verdict { reason: got, .. } = round_trip(&RelayRepr::Verdict {
            version: VERSION,
            status: RelayStatus::Busy,
            observed: None,
            reason,
        }) else {
            panic!("a verdict")
        };
        assert_eq!(got, "é".repeat(32));
    }

    #[test]
    fn bad_frames_are_refused() {
        let good = RelayRepr::Connect {
            version: VERSION,
            job_tag: [1; 16],
            rank: 3,
            proof: [9; 32],
        }
        .emit();
        assert!(matches!(
            RelayFrame::new_checked(&good[..FRAME_LEN - 1]),
            Err(WireError::Truncated { need: 128, have: 127 })
        ));
        let mut b = good;
        b[at::MAGIC] = b'X';
        assert_eq!(RelayFrame::new_checked(&b[..]).err(), Some(WireError::BadMagic));
        let mut b = good;
        b[at::KIND] = 9;
        assert_eq!(
            RelayFrame::new_checked(&b[..]).err(),
            Some(WireError::UnknownKind(9))
        );
        let mut b = good;
        b[at::REASON + 36] = 1; // text in a CONNECT
        assert_eq!(RelayFrame::new_checked(&b[..]).err(), Some(WireError::Reserved));
        let mut b = RelayRepr::Verdict {
            version: VERSION,
            status: RelayStatus::Accepted,
            observed: None,
            reason: String::new(),
        }
        .emit();
        b[at::STATUS] = 200;
        assert_eq!(
            RelayFrame::new_checked(&b[..]).err(),
            Some(WireError::Field("relay status"))
        );
    }

    #[test]
    fn a_proof_binds_nonce_job_and_rank() {
        let secret = [5u8; 32];
        let (key, tag) = (relay_key(&secret), job_tag(&secret));
        assert_ne!(&key[..16], &tag[..], "independent derivations");
        assert_ne!(key, secret);
        let p = connect_proof(&key, &[1; 32], &tag, 4);
        assert!(mac_eq(&p, &connect_proof(&key, &[1; 32], &tag, 4)));
        assert_ne!(p, connect_proof(&key, &[2; 32], &tag, 4), "another challenge");
        assert_ne!(p, connect_proof(&key, &[1; 32], &tag, 5), "another rank");
        assert_ne!(p, connect_proof(&key, &[1; 32], &[0; 16], 4), "another job");
        assert_ne!(
            p,
            connect_proof(&relay_key(&[6; 32]), &[1; 32], &tag, 4),
            "another secret"
        );
    }

    #[test]
    fn the_client_side_checks_what_the_relay_says() {
        let secret = [8u8; 32];
        let challenge = RelayRepr::Challenge {
            version: VERSION,
            nonce: [4; 32],
        }
        .emit();
        let nonce = challenge_nonce(&challenge).unwrap();
        let RelayRepr::Connect {
            rank,
            proof,
            job_tag: tag,
            ..
        } = RelayRepr::parse(&RelayFrame::new_checked(&connect_request(&secret, &nonce, 6)[..]).unwrap())
        else {
            panic!("a connect")
        };
        assert_eq!(rank, 6);
        assert!(mac_eq(
            &proof,
            &connect_proof(&relay_key(&secret), &[4; 32], &tag, 6)
        ));
        let old = RelayRepr::Challenge {
            version: 1,
            nonce: [4; 32],
        }
        .emit();
        assert!(challenge_nonce(&old).unwrap_err().contains("version 1"));
        assert!(challenge_nonce(&register_request(&secret, 1, 2)).is_err());
        assert!(challenge_nonce(b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n").is_err());
        let seen: SocketAddr = "198.51.100.1:4000".parse().unwrap();
        let yes = RelayRepr::Verdict {
            version: VERSION,
            status: RelayStatus::Accepted,
            observed: Some(seen),
            reason: String::new(),
        };
        assert_eq!(verdict(&yes.emit()), Ok(Some(seen)));
        let no = RelayRepr::Verdict {
            version: VERSION,
            status: RelayStatus::UnknownRank,
            observed: Some(seen),
            reason: "rank 6 is not registered here".into(),
        };
        let why = verdict(&no.emit()).unwrap_err();
        assert!(why.contains("UnknownRank") && why.contains("rank 6"), "{why}");
    }

    /// Frames with the magic and a known kind, the rest arbitrary (random bytes would
    /// almost never get past the magic).
    fn framed() -> impl Strategy<Value = Vec<u8>> {
        (
            1u8..=5,
            0u8..=9,
            proptest::collection::vec(any::<u8>(), FRAME_LEN),
            any::<u64>(),
        )
            .prop_map(|(kind, status, mut b, zeros)| {
                b[at::MAGIC..at::MAGIC + 4].copy_from_slice(&MAGIC);
                b[at::KIND] = kind;
                b[at::STATUS] = if kind == 4 { status } else { 0 };
                // Clear most reserved bytes so that many frames pass the checks.
                for (i, byte) in b.iter_mut().enumerate().skip(8) {
                    if zeros >> (i % 64) & 1 == 1 || i >= 64 {
                        *byte = if i >= 64 && kind == 4 && i < 70 { b'a' } else { 0 };
                    }
                }
                b
            })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..160)) {
            if let Ok(f) = RelayFrame::new_checked(&bytes[..]) {
                let _ = RelayRepr::parse(&f);
            }
        }

        #[test]
        fn accepted_frames_re_emit_exactly(bytes in framed()) {
            if let Ok(f) = RelayFrame::new_checked(&bytes[..]) {
                let repr = RelayRepr::parse(&f);
                prop_assert_eq!(&repr.emit()[..], &bytes[..]);
            }
        }

        #[test]
        fn every_verdict_reason_round_trips_cut_to_whole_characters(reason in "\\PC{0,40}") {
            let r = RelayRepr::Verdict { version: VERSION, status: RelayStatus::Busy, observed: None, reason: reason.clone() };
            let RelayRepr::Verdict { reason: got, .. } = round_trip(&r) else { panic!("a verdict") };
            prop_assert!(reason.starts_with(&got));
            if reason.len() <= REASON_LEN {
                prop_assert_eq!(got, reason);
            } else {
                prop_assert!(got.len() <= REASON_LEN && got.len() > REASON_LEN - 4);
            }
        }
    }
}
