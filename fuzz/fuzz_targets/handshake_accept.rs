//! `handshake::accept_hello` on what an acceptor reads from a fresh connection.
//!
//! Half the inputs are raw bytes; the other half are HELLOs built from the input
//! and MAC'd with the job secret (mostly), so that the fuzzer gets past the MAC and
//! exercises every verdict. Whatever arrives:
//! - the ACK is always a well-formed, MAC'd ACK from this rank, and says "accepted"
//!   exactly when the acceptor accepted;
//! - an accepted HELLO really is a HELLO of this job and version, MAC'd with the
//!   secret, meant for this rank, from another rank of the job;
//! - the initiator that sent the HELLO completes the handshake (ACK, then CONFIRM)
//!   exactly when the acceptor accepted;
//! - the rest of the input, taken as a CONFIRM or an ACK, never panics nor passes.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use proto::handshake::{accept_hello, Contention, Identity, Initiator};
use proto::wire::handshake::{
    mac, mac_eq, HandshakeFrame, HandshakeKind, HandshakeRepr, HandshakeStatus, PathKind, FRAME_LEN, VERSION,
};

const JOB: [u8; 16] = [9; 16];
const SECRET: [u8; 32] = [3; 32];

/// A rank: mostly small (so that ranks meet), sometimes anything.
fn rank(u: &mut Unstructured) -> Result<u32> {
    if u.ratio(1, 8)? {
        u.arbitrary()
    } else {
        u.int_in_range(0..=9)
    }
}

/// The sender of a structured HELLO: its identity and the HELLO it put on the wire.
struct Sender {
    id: Identity,
    target: u32,
    nonce: [u8; 16],
    hello: Vec<u8>,
}

fn structured_hello(u: &mut Unstructured) -> Result<Sender> {
    let job_id = if u.ratio(1, 8)? { u.arbitrary()? } else { JOB };
    let secret = if u.ratio(1, 8)? { u.arbitrary()? } else { SECRET };
    let repr = HandshakeRepr {
        version: if u.ratio(1, 8)? { u.arbitrary()? } else { VERSION },
        kind: if u.ratio(1, 4)? {
            *u.choose(&[HandshakeKind::Ack, HandshakeKind::Confirm])?
        } else {
            HandshakeKind::Hello
        },
        status: *u.choose(&[
            HandshakeStatus::Accepted,
            HandshakeStatus::WrongJob,
            HandshakeStatus::WrongRank,
            HandshakeStatus::BadMac,
            HandshakeStatus::Simultaneous,
            HandshakeStatus::Version,
        ])?,
        job_id,
        src: rank(u)?,
        dst: rank(u)?,
        nonce: u.arbitrary()?,
        peer_nonce: u.arbitrary()?,
        extra_lane: u.arbitrary()?,
        path: *u.choose(&[
            PathKind::Direct,
            PathKind::NatProxy,
            PathKind::TwoProxy,
            PathKind::Punched,
        ])?,
        sealed: u.arbitrary()?,
    };
    let mut hello = repr.emit(&secret).to_vec();
    if u.ratio(1, 8)? {
        let at = u.choose_index(hello.len())?;
        hello[at] ^= u.int_in_range(1..=255)?;
    }
    if u.ratio(1, 16)? {
        hello.truncate(u.choose_index(hello.len())?);
    }
    let id = Identity {
        job_id,
        secret,
        rank: repr.src,
        size: 0,
    };
    Ok(Sender {
        id,
        target: repr.dst,
        nonce: repr.nonce,
        hello,
    })
}

fn run(mut u: Unstructured) -> Result<()> {
    let u = &mut u;
    let me = Identity {
        job_id: JOB,
        secret: SECRET,
        rank: rank(u)?,
        size: rank(u)?,
    };
    let contention = match u.int_in_range(0..=5u8)? {
        0 => Contention::None,
        1 => Contention::Connecting(PathKind::Direct),
        2 => Contention::Connecting(PathKind::NatProxy),
        3 => Contention::Connecting(PathKind::TwoProxy),
        4 => Contention::Connecting(PathKind::Punched),
        _ => Contention::Connected,
    };
    let my_nonce: [u8; 16] = u.arbitrary()?;
    let sender = if u.arbitrary()? {
        Some(structured_hello(u)?)
    } else {
        None
    };
    let rest = std::mem::replace(u, Unstructured::new(&[])).take_rest();
    let hello: &[u8] = match &sender {
        Some(s) => &s.hello,
        None => rest,
    };

    let v = accept_hello(&me, hello, my_nonce, |_| contention);

    // The ACK: well-formed, from this rank, MAC'd, and "accepted" exactly on acceptance.
    let f = HandshakeFrame::new_checked(&v.ack[..]).expect("the ACK is well-formed");
    let ack = HandshakeRepr::parse(&f);
    assert!(mac_eq(&f.mac(), &mac(&SECRET, f.transcript())));
    assert_eq!((ack.version, ack.kind), (VERSION, HandshakeKind::Ack));
    assert_eq!((ack.job_id, ack.src, ack.nonce), (JOB, me.rank, my_nonce));
    assert_eq!(
        ack.status == HandshakeStatus::Accepted,
        v.result.is_ok(),
        "{:?} vs {:?}",
        ack.status,
        v.result
    );

    if let Ok(acceptor) = &v.result {
        let f = HandshakeFrame::new_checked(hello).expect("an accepted HELLO is well-formed");
        let h = HandshakeRepr::parse(&f);
        assert!(
            mac_eq(&f.mac(), &mac(&SECRET, f.transcript())),
            "accepted a HELLO with a bad MAC"
        );
        assert_eq!(
            (h.version, h.kind, h.job_id, h.dst),
            (VERSION, HandshakeKind::Hello, JOB, me.rank)
        );
        assert!(h.src < me.size && h.src != me.rank);
        assert_eq!(acceptor.peer(), h.src);
        assert_eq!((ack.dst, ack.peer_nonce), (h.src, h.nonce));
        assert_eq!(acceptor.extra_lane(), h.extra_lane);
        match contention {
            // An additional lane is accepted whatever the first lane is doing.
            _ if h.extra_lane => {}
            Contention::None => {}
            // A connection that needs no relay beats one that does; else the lower rank's.
            Contention::Connecting(ours) if ours.relayed() != acceptor.path().relayed() => assert!(
                ours.relayed(),
                "kept a relayed connection over our direct one on a simultaneous connect"
            ),
            Contention::Connecting(_) => assert!(
                h.src < me.rank,
                "kept the higher rank's connection on a simultaneous connect"
            ),
            Contention::Connected => panic!("accepted a second connection from a connected rank"),
        }
    }

    if let Some(s) = &sender {
        let (initiator, _) = Initiator::new(s.id.clone(), s.target, s.nonce);
        match (&v.result, initiator.handle_ack(&v.ack)) {
            (Ok(acceptor), Ok(confirm)) => {
                assert_eq!(acceptor.handle_confirm(&confirm), Ok(s.id.rank));
            }
            (Ok(_), Err(e)) => panic!("the acceptor accepted but its ACK failed the initiator: {e}"),
            (Err(e), Ok(_)) => panic!("the acceptor refused ({e}) but the initiator completed"),
            (Err(_), Err(_)) => {}
        }
        if rest.len() >= FRAME_LEN {
            assert!(initiator.handle_ack(rest).is_err(), "a forged ACK passed");
        }
    }
    if let Ok(acceptor) = &v.result {
        // Forging needs the secret: arbitrary bytes never make a valid CONFIRM.
        assert!(acceptor.handle_confirm(rest).is_err(), "a forged CONFIRM passed");
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(Unstructured::new(data));
});
