//! Handshake state machines: who is at the other end of a fresh connection?
//!
//! ```text
//! initiator                         acceptor
//!   HELLO(job, me, believed peer, n_i) ->
//!                                  <- ACK(status, job, me, you, n_a, echo n_i)
//!   CONFIRM(echo n_a)              ->   (data may follow CONFIRM directly)
//! ```
//! Every frame is MAC'd with the job secret. The acceptor refuses a wrong job, a
//! wrong secret or a HELLO meant for another rank, so a duplicated private address
//! can never join two wrong processes. The echoed nonces stop replays in both
//! directions: the ACK proves freshness to the initiator, the CONFIRM to the acceptor.

use crate::wire::handshake::{
    mac, mac_eq, HandshakeFrame, HandshakeKind, HandshakeRepr, HandshakeStatus, PathKind, FRAME_LEN, VERSION,
};
use crate::Rank;

/// Identity of this process, shared by every handshake it runs.
#[derive(Clone)]
pub struct Identity {
    pub job_id: [u8; 16],
    pub secret: [u8; 32],
    pub rank: Rank,
    pub size: u32,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        write!(f, "Identity {{ rank: {}, size: {} }}", self.rank, self.size)
    }
}

/// Why a handshake failed, as recorded for `pontoon doctor` and error messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("not a pontoon peer: {0}")]
    Malformed(#[from] crate::wire::WireError),
    #[error("peer speaks protocol version {0}, this build speaks {VERSION}")]
    Version(u16),
    #[error("reached a process of another job")]
    WrongJob,
    #[error("reached rank {reached} instead of rank {wanted}")]
    WrongRank { wanted: Rank, reached: Rank },
    #[error("authentication failed: the peer does not hold this job's secret")]
    BadMac,
    #[error("refused by peer: {0:?}")]
    Refused(HandshakeStatus),
    #[error("unexpected handshake message {0:?}")]
    Unexpected(HandshakeKind),
    #[error("peer rank {0} is out of range")]
    RankRange(Rank),
}

fn check_mac(id: &Identity, f: &HandshakeFrame<&[u8]>) -> bool {
    mac_eq(&f.mac(), &mac(&id.secret, f.transcript()))
}

pub struct Initiator {
    id: Identity,
    target: Rank,
    nonce: [u8; 16],
    sealed: bool,
}

impl Initiator {
    /// Starts a handshake towards `target`; returns the HELLO to send.
    pub fn new(id: Identity, target: Rank, nonce: [u8; 16]) -> (Initiator, [u8; FRAME_LEN]) {
        Self::start(id, target, nonce, false, PathKind::Direct, false)
    }

    /// Starts the handshake of a first lane that reaches `target` by `path` (the peer
    /// then knows, for one, that the connection's address is a relay's, not ours);
    /// `sealed`: its bytes travel encrypted after the handshake ([`Initiator::lane_key`]).
    pub fn by_path(
        id: Identity,
        target: Rank,
        nonce: [u8; 16],
        path: PathKind,
        sealed: bool,
    ) -> (Initiator, [u8; FRAME_LEN]) {
        Self::start(id, target, nonce, false, path, sealed)
    }

    /// Starts the handshake of an additional lane to `target`, already connected, that
    /// reaches it by `path` (one per further NIC pair, or punched through NATs): the
    /// peer accepts it next to the first instead of taking it for a duplicate.
    pub fn extra_lane(
        id: Identity,
        target: Rank,
        nonce: [u8; 16],
        path: PathKind,
        sealed: bool,
    ) -> (Initiator, [u8; FRAME_LEN]) {
        Self::start(id, target, nonce, true, path, sealed)
    }

    fn start(
        id: Identity,
        target: Rank,
        nonce: [u8; 16],
        extra_lane: bool,
        path: PathKind,
        sealed: bool,
    ) -> (Initiator, [u8; FRAME_LEN]) {
        let hello = HandshakeRepr {
            version: VERSION,
            kind: HandshakeKind::Hello,
            status: HandshakeStatus::Accepted,
            job_id: id.job_id,
            src: id.rank,
            dst: target,
            nonce,
            peer_nonce: [0; 16],
            extra_lane,
            path,
            sealed,
        }
        .emit(&id.secret);
        (
            Initiator {
                id,
                target,
                nonce,
                sealed,
            },
            hello,
        )
    }

    pub fn target(&self) -> Rank {
        self.target
    }

    /// Whether the lane's bytes travel sealed after the handshake.
    pub fn sealed(&self) -> bool {
        self.sealed
    }

    /// The lane's name at both ends (`Acceptor::lane_tag` is the same).
    pub fn lane_tag(&self) -> u64 {
        lane_tag(&self.nonce)
    }

    /// The key of a lane whose datagrams carry their own tag (raw Ethernet), from the
    /// job secret and both nonces: fresh for every lane, known only to its two ends.
    /// `ack` is the ACK [`Initiator::handle_ack`] accepted.
    pub fn lane_key(&self, ack: &[u8]) -> Option<[u8; 32]> {
        let f = HandshakeFrame::new_checked(ack).ok()?;
        Some(lane_key(
            &self.id.secret,
            &self.nonce,
            &HandshakeRepr::parse(&f).nonce,
        ))
    }

    /// Judges the ACK. On success returns the CONFIRM to send; the connection is then
    /// established towards `target`.
    pub fn handle_ack(&self, bytes: &[u8]) -> Result<[u8; FRAME_LEN], HandshakeError> {
        let f = HandshakeFrame::new_checked(bytes)?;
        let r = HandshakeRepr::parse(&f);
        if r.version != VERSION {
            return Err(HandshakeError::Version(r.version));
        }
        if r.kind != HandshakeKind::Ack {
            return Err(HandshakeError::Unexpected(r.kind));
        }
        if r.job_id != self.id.job_id {
            return Err(HandshakeError::WrongJob);
        }
        if !check_mac(&self.id, &f) {
            return Err(HandshakeError::BadMac);
        }
        if r.status != HandshakeStatus::Accepted {
            return Err(match r.status {
                HandshakeStatus::WrongRank => HandshakeError::WrongRank {
                    wanted: self.target,
                    reached: r.src,
                },
                s => HandshakeError::Refused(s),
            });
        }
        if r.src != self.target {
            return Err(HandshakeError::WrongRank {
                wanted: self.target,
                reached: r.src,
            });
        }
        if r.dst != self.id.rank || r.peer_nonce != self.nonce {
            return Err(HandshakeError::BadMac);
        }
        Ok(HandshakeRepr {
            version: VERSION,
            kind: HandshakeKind::Confirm,
            status: HandshakeStatus::Accepted,
            job_id: self.id.job_id,
            src: self.id.rank,
            dst: self.target,
            nonce: self.nonce,
            peer_nonce: r.nonce,
            extra_lane: false,
            path: PathKind::Direct,
            sealed: false,
        }
        .emit(&self.id.secret))
    }
}

/// What the acceptor concluded from a HELLO.
#[derive(Debug)]
pub struct HelloVerdict {
    /// Always sent back, also on refusal, so that the initiator can record why.
    pub ack: [u8; FRAME_LEN],
    pub result: Result<Acceptor, HandshakeError>,
}

/// An acceptor that has accepted a HELLO and waits for the CONFIRM.
#[derive(Debug)]
pub struct Acceptor {
    peer: Rank,
    secret: [u8; 32],
    job_id: [u8; 16],
    my_rank: Rank,
    nonce: [u8; 16],
    extra_lane: bool,
    path: PathKind,
    sealed: bool,
    tag: u64,
    peer_nonce: [u8; 16],
}

/// See [`Initiator::lane_key`].
fn lane_key(secret: &[u8; 32], initiator_nonce: &[u8; 16], acceptor_nonce: &[u8; 16]) -> [u8; 32] {
    let mut material = [0u8; 64];
    material[..32].copy_from_slice(secret);
    material[32..48].copy_from_slice(initiator_nonce);
    material[48..].copy_from_slice(acceptor_nonce);
    blake3::derive_key("pontoon lane key v1", &material)
}

/// The name both ends give a lane: from the initiator's nonce, which both hold (random,
/// so two lanes of a pair never share it).
fn lane_tag(initiator_nonce: &[u8; 16]) -> u64 {
    u64::from_le_bytes(initiator_nonce[..8].try_into().expect("8 bytes"))
}

/// What this process already has going with the sender of a HELLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contention {
    /// Nothing: the connection is welcome.
    None,
    /// Our own connection attempt to the sender, by this path kind, is under way (its
    /// HELLO is out): [`keep_incoming`] decides.
    Connecting(PathKind),
    /// A connection with the sender exists or is completing: a second one is refused,
    /// whatever the ranks, so that both sides keep using the same one.
    Connected,
}

/// Judges a HELLO. `contention` tells what this process already has going with the sender.
pub fn accept_hello(
    id: &Identity,
    bytes: &[u8],
    nonce: [u8; 16],
    contention: impl Fn(Rank) -> Contention,
) -> HelloVerdict {
    let refuse = |status: HandshakeStatus, peer_rank: u32, peer_nonce: [u8; 16], err: HandshakeError| {
        let ack = HandshakeRepr {
            version: VERSION,
            kind: HandshakeKind::Ack,
            status,
            job_id: id.job_id,
            src: id.rank,
            dst: peer_rank,
            nonce,
            peer_nonce,
            extra_lane: false,
            path: PathKind::Direct,
            sealed: false,
        }
        .emit(&id.secret);
        HelloVerdict {
            ack,
            result: Err(err),
        }
    };
    let f = match HandshakeFrame::new_checked(bytes) {
        Ok(f) => f,
        Err(e) => return refuse(HandshakeStatus::BadMac, u32::MAX, [0; 16], e.into()),
    };
    let r = HandshakeRepr::parse(&f);
    if r.version != VERSION {
        return refuse(
            HandshakeStatus::Version,
            r.src,
            r.nonce,
            HandshakeError::Version(r.version),
        );
    }
    if r.kind != HandshakeKind::Hello {
        return refuse(
            HandshakeStatus::BadMac,
            r.src,
            r.nonce,
            HandshakeError::Unexpected(r.kind),
        );
    }
    if r.job_id != id.job_id {
        return refuse(
            HandshakeStatus::WrongJob,
            r.src,
            r.nonce,
            HandshakeError::WrongJob,
        );
    }
    if !check_mac(id, &f) {
        return refuse(HandshakeStatus::BadMac, r.src, r.nonce, HandshakeError::BadMac);
    }
    if r.dst != id.rank {
        let err = HandshakeError::WrongRank {
            wanted: r.dst,
            reached: id.rank,
        };
        return refuse(HandshakeStatus::WrongRank, r.src, r.nonce, err);
    }
    if r.src >= id.size || r.src == id.rank {
        return refuse(
            HandshakeStatus::BadMac,
            r.src,
            r.nonce,
            HandshakeError::RankRange(r.src),
        );
    }
    // An additional lane is never a duplicate; the first lane obeys the contention rules.
    let refuse_duplicate = !r.extra_lane
        && match contention(r.src) {
            Contention::None => false,
            Contention::Connecting(ours) => !keep_incoming(id.rank, r.src, ours, r.path),
            Contention::Connected => true,
        };
    if refuse_duplicate {
        let err = HandshakeError::Refused(HandshakeStatus::Simultaneous);
        return refuse(HandshakeStatus::Simultaneous, r.src, r.nonce, err);
    }
    let ack = HandshakeRepr {
        version: VERSION,
        kind: HandshakeKind::Ack,
        status: HandshakeStatus::Accepted,
        job_id: id.job_id,
        src: id.rank,
        dst: r.src,
        nonce,
        peer_nonce: r.nonce,
        extra_lane: false,
        path: PathKind::Direct,
        sealed: false,
    }
    .emit(&id.secret);
    HelloVerdict {
        ack,
        result: Ok(Acceptor {
            extra_lane: r.extra_lane,
            path: r.path,
            sealed: r.sealed,
            peer: r.src,
            secret: id.secret,
            job_id: id.job_id,
            my_rank: id.rank,
            nonce,
            tag: lane_tag(&r.nonce),
            peer_nonce: r.nonce,
        }),
    }
}

impl Acceptor {
    pub fn peer(&self) -> Rank {
        self.peer
    }

    /// The peer opens this connection as an additional lane.
    pub fn extra_lane(&self) -> bool {
        self.extra_lane
    }

    /// How the peer reaches us.
    pub fn path(&self) -> PathKind {
        self.path
    }

    /// Whether the peer seals the lane's bytes after the handshake (its HELLO says so,
    /// under the job's MAC: nobody else can strip the flag).
    pub fn sealed(&self) -> bool {
        self.sealed
    }

    /// The lane's name at both ends (`Initiator::lane_tag` is the same).
    pub fn lane_tag(&self) -> u64 {
        self.tag
    }

    /// See [`Initiator::lane_key`]: both ends derive the same.
    pub fn lane_key(&self) -> [u8; 32] {
        lane_key(&self.secret, &self.peer_nonce, &self.nonce)
    }

    /// Judges the CONFIRM; on success the connection is established with `peer()`.
    pub fn handle_confirm(&self, bytes: &[u8]) -> Result<Rank, HandshakeError> {
        let f = HandshakeFrame::new_checked(bytes)?;
        let r = HandshakeRepr::parse(&f);
        if r.kind != HandshakeKind::Confirm {
            return Err(HandshakeError::Unexpected(r.kind));
        }
        if r.job_id != self.job_id {
            return Err(HandshakeError::WrongJob);
        }
        if !mac_eq(&f.mac(), &mac(&self.secret, f.transcript())) {
            return Err(HandshakeError::BadMac);
        }
        if r.src != self.peer || r.dst != self.my_rank || r.peer_nonce != self.nonce {
            return Err(HandshakeError::BadMac);
        }
        Ok(self.peer)
    }
}

/// Simultaneous connects: when both ranks connect to each other at once, one that needs
/// no relay is kept over one that does (a relay costs a hop and a front end's CPU: a
/// node behind NAT reaches a public one directly while the public one comes through
/// the node's relay); between equals, the lower rank's. Both sides see both path kinds
/// (their own, and the HELLO's), so both keep the same connection. Returns whether an
/// incoming connection from `peer` by `theirs` is kept while our own attempt towards it
/// by `ours` is pending.
pub fn keep_incoming(my_rank: Rank, peer: Rank, ours: PathKind, theirs: PathKind) -> bool {
    match (ours.relayed(), theirs.relayed()) {
        (true, false) => true,
        (false, true) => false,
        _ => peer < my_rank,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(rank: Rank) -> Identity {
        Identity {
            job_id: [9; 16],
            secret: [3; 32],
            rank,
            size: 4,
        }
    }

    #[test]
    fn full_handshake_establishes_both_ends() {
        let (ini, hello) = Initiator::new(id(1), 2, [1; 16]);
        let v = accept_hello(&id(2), &hello, [2; 16], |_| Contention::None);
        let acc = v.result.unwrap();
        assert_eq!(acc.peer(), 1);
        let confirm = ini.handle_ack(&v.ack).unwrap();
        assert_eq!(acc.handle_confirm(&confirm).unwrap(), 1);
    }

    #[test]
    fn wrong_secret_is_refused_both_ways() {
        let mut bad = id(1);
        bad.secret = [4; 32];
        let (ini, hello) = Initiator::new(bad, 2, [1; 16]);
        let v = accept_hello(&id(2), &hello, [2; 16], |_| Contention::None);
        assert_eq!(v.result.unwrap_err(), HandshakeError::BadMac);
        // The refusal is MAC'd with the real secret, which the impostor cannot check.
        assert_eq!(ini.handle_ack(&v.ack).unwrap_err(), HandshakeError::BadMac);
    }

    #[test]
    fn wrong_job_and_wrong_rank_are_named() {
        let mut other = id(1);
        other.job_id = [8; 16];
        let (_, hello) = Initiator::new(other, 2, [1; 16]);
        assert_eq!(
            accept_hello(&id(2), &hello, [2; 16], |_| Contention::None)
                .result
                .unwrap_err(),
            HandshakeError::WrongJob
        );

        // Rank 1 believes it reached rank 3, but the address belongs to rank 2.
        let (ini, hello) = Initiator::new(id(1), 3, [1; 16]);
        let v = accept_hello(&id(2), &hello, [2; 16], |_| Contention::None);
        assert!(v.result.is_err());
        assert_eq!(
            ini.handle_ack(&v.ack).unwrap_err(),
            HandshakeError::WrongRank {
                wanted: 3,
                reached: 2
            }
        );
    }

    #[test]
    fn replayed_confirm_is_refused() {
        let (ini, hello) = Initiator::new(id(1), 2, [1; 16]);
        let v1 = accept_hello(&id(2), &hello, [2; 16], |_| Contention::None);
        let confirm = ini.handle_ack(&v1.ack).unwrap();
        // A second acceptance of the same HELLO uses a fresh nonce: the old CONFIRM does not fit.
        let v2 = accept_hello(&id(2), &hello, [5; 16], |_| Contention::None);
        assert_eq!(
            v2.result.unwrap().handle_confirm(&confirm).unwrap_err(),
            HandshakeError::BadMac
        );
    }

    #[test]
    fn simultaneous_connect_keeps_the_lower_ranks_connection() {
        // 1 -> 2 and 2 -> 1 at once: rank 2 keeps the incoming one from 1, rank 1 refuses 2's.
        let (_, hello_from_1) = Initiator::new(id(1), 2, [1; 16]);
        assert!(
            accept_hello(&id(2), &hello_from_1, [2; 16], |_| Contention::Connecting(
                PathKind::Direct
            ))
            .result
            .is_ok()
        );
        let (ini2, hello_from_2) = Initiator::new(id(2), 1, [3; 16]);
        let v = accept_hello(&id(1), &hello_from_2, [4; 16], |_| {
            Contention::Connecting(PathKind::Direct)
        });
        assert_eq!(
            v.result.unwrap_err(),
            HandshakeError::Refused(HandshakeStatus::Simultaneous)
        );
        assert_eq!(
            ini2.handle_ack(&v.ack).unwrap_err(),
            HandshakeError::Refused(HandshakeStatus::Simultaneous)
        );
    }

    #[test]
    fn simultaneous_connect_keeps_the_one_that_needs_no_relay() {
        // Rank 1 (public) comes through rank 2's relay while 2 (behind NAT) connects to 1
        // directly: both keep 2's direct connection, though 1 is the lower rank.
        let (_, direct_from_2) = Initiator::new(id(2), 1, [1; 16]);
        let v = accept_hello(&id(1), &direct_from_2, [2; 16], |_| {
            Contention::Connecting(PathKind::NatProxy)
        });
        assert!(v.result.is_ok());
        let (_, relayed_from_1) = Initiator::by_path(id(1), 2, [3; 16], PathKind::NatProxy, false);
        let v = accept_hello(&id(2), &relayed_from_1, [4; 16], |_| {
            Contention::Connecting(PathKind::Direct)
        });
        assert_eq!(
            v.result.unwrap_err(),
            HandshakeError::Refused(HandshakeStatus::Simultaneous)
        );
        assert!(
            keep_incoming(2, 1, PathKind::TwoProxy, PathKind::NatProxy),
            "relayed both: ranks"
        );
        assert!(!keep_incoming(1, 2, PathKind::Direct, PathKind::Direct));
    }

    #[test]
    fn the_sealing_flag_reaches_the_acceptor_under_the_mac_and_both_ends_derive_one_key() {
        for sealed in [false, true] {
            let (ini, hello) = Initiator::by_path(id(1), 2, [1; 16], PathKind::Direct, sealed);
            assert_eq!(ini.sealed(), sealed);
            let v = accept_hello(&id(2), &hello, [2; 16], |_| Contention::None);
            let acc = v.result.expect("accepted");
            assert_eq!(acc.sealed(), sealed);
            ini.handle_ack(&v.ack).expect("the ACK");
            assert_eq!(ini.lane_key(&v.ack), Some(acc.lane_key()));
            // Nobody without the secret can strip or set the flag.
            let mut forged = hello;
            forged[7] ^= 1 << 3;
            let v = accept_hello(&id(2), &forged, [2; 16], |_| Contention::None);
            assert_eq!(v.result.unwrap_err(), HandshakeError::BadMac);
        }
    }

    #[test]
    fn an_additional_lane_is_accepted_next_to_the_first() {
        let (ini, hello) = Initiator::extra_lane(id(1), 2, [1; 16], PathKind::Punched, false);
        for contention in [
            Contention::Connected,
            Contention::Connecting(PathKind::Direct),
            Contention::None,
        ] {
            let v = accept_hello(&id(2), &hello, [2; 16], |_| contention);
            let acc = v.result.expect("an additional lane is not a duplicate");
            assert!(acc.extra_lane());
            assert_eq!(acc.path(), PathKind::Punched, "a punched lane says so");
            assert_eq!(acc.lane_tag(), ini.lane_tag(), "both ends name the lane alike");
            assert_eq!(
                Some(acc.lane_key()),
                ini.lane_key(&v.ack),
                "both ends key the lane alike"
            );
            assert_ne!(
                Some(acc.lane_key()),
                Initiator::new(id(1), 2, [5; 16]).0.lane_key(&v.ack),
                "another nonce, another key"
            );
            let confirm = ini.handle_ack(&v.ack).unwrap();
            assert_eq!(acc.handle_confirm(&confirm), Ok(1));
        }
        let (_, first) = Initiator::new(id(1), 2, [1; 16]);
        let v = accept_hello(&id(2), &first, [2; 16], |_| Contention::None);
        assert!(!v.result.unwrap().extra_lane());
    }

    #[test]
    fn an_existing_connection_refuses_a_second_whatever_the_ranks() {
        // Rank 2 is already connected to rank 1; even though 1 < 2 wins a race, a second
        // connection would leave the two ranks on different sockets.
        let (ini, hello_from_1) = Initiator::new(id(1), 2, [1; 16]);
        let v = accept_hello(&id(2), &hello_from_1, [2; 16], |_| Contention::Connected);
        assert_eq!(
            v.result.unwrap_err(),
            HandshakeError::Refused(HandshakeStatus::Simultaneous)
        );
        assert_eq!(
            ini.handle_ack(&v.ack).unwrap_err(),
            HandshakeError::Refused(HandshakeStatus::Simultaneous)
        );
    }

    #[test]
    fn garbage_hello_is_refused_without_panic() {
        for len in [0, 4, 95, 96, 200] {
            let v = accept_hello(&id(0), &vec![0xAB; len], [0; 16], |_| Contention::None);
            assert!(v.result.is_err());
        }
    }
}
