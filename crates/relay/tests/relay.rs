//! A relay on loopback with real sockets: a rank registers, a requester with the job's
//! proof reaches it through the relay and bytes flow both ways (moved by splice); every
//! other request is refused with its reason; a flood of bogus connections leaves the
//! relay serving the job.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use pontoon_relay::{Limits, Relay, RelayHandle};
use proto::wire::relay::{
    connect_proof, job_tag, relay_key, RelayFrame, RelayRepr, RelayStatus, FRAME_LEN, VERSION,
};

const SECRET: [u8; 32] = [0x42; 32];

fn relay() -> RelayHandle {
    Relay::bind(&["127.0.0.1:0".parse().unwrap()], Limits::default())
        .expect("bind")
        .spawn()
}

fn read_frame(s: &mut TcpStream) -> RelayRepr {
    let mut b = [0u8; FRAME_LEN];
    s.read_exact(&mut b).expect("a frame from the relay");
    RelayRepr::parse(&RelayFrame::new_checked(&b[..]).expect("a well-formed frame"))
}

fn challenge(s: &mut TcpStream) -> [u8; 32] {
    match read_frame(s) {
        RelayRepr::Challenge { nonce, .. } => nonce,
        other => panic!("expected a challenge, got {other:?}"),
    }
}

fn verdict(s: &mut TcpStream) -> (RelayStatus, String) {
    match read_frame(s) {
        RelayRepr::Verdict { status, reason, .. } => (status, reason),
        other => panic!("expected a verdict, got {other:?}"),
    }
}

fn connect_from(relay: SocketAddr, from: [u8; 4]) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from((from, 0)).into()).unwrap();
    s.connect(&relay.into()).unwrap();
    let s = TcpStream::from(s);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Registers `rank` of our job (accepting on `port`); the returned socket keeps it
/// registered.
fn register(relay: SocketAddr, rank: u32, port: u16) -> (TcpStream, RelayStatus) {
    let mut s = register_raw(relay, rank, relay_key(&SECRET), port);
    let (status, _) = verdict(&mut s);
    (s, status)
}

/// Asks for `rank` with a proof made from `secret`.
fn request(
    relay: SocketAddr,
    from: [u8; 4],
    secret: &[u8; 32],
    rank: u32,
) -> (TcpStream, RelayStatus, String) {
    let mut s = connect_from(relay, from);
    let nonce = challenge(&mut s);
    let tag = job_tag(&SECRET); // the job asked for is always ours
    let req = RelayRepr::Connect {
        version: VERSION,
        job_tag: tag,
        rank,
        proof: connect_proof(&relay_key(secret), &nonce, &tag, rank),
    };
    s.write_all(&req.emit()).unwrap();
    let (status, reason) = verdict(&mut s);
    (s, status, reason)
}

#[test]
fn a_registered_rank_is_reached_through_the_relay_and_bytes_flow_both_ways() {
    let relay = relay();
    let at = relay.addrs()[0];
    let rank = TcpListener::bind("127.0.0.1:0").unwrap();
    let (_reg, status) = register(at, 3, rank.local_addr().unwrap().port());
    assert_eq!(status, RelayStatus::Accepted);

    let (mut requester, status, reason) = request(at, [127, 0, 0, 1], &SECRET, 3);
    assert_eq!(status, RelayStatus::Accepted, "{reason}");
    let (mut forwarded, _) = rank.accept().unwrap();
    forwarded.set_read_timeout(Some(Duration::from_secs(10))).unwrap();

    requester.write_all(b"hello rank 3").unwrap();
    let mut got = [0u8; 12];
    forwarded.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hello rank 3");
    let big: Vec<u8> = (0..(4u32 << 20)).map(|i| (i * 31 + 7) as u8).collect();
    let sender = {
        let big = big.clone();
        let mut f = forwarded.try_clone().unwrap();
        thread::spawn(move || f.write_all(&big).unwrap())
    };
    let mut back = vec![0u8; big.len()];
    requester.read_exact(&mut back).unwrap();
    sender.join().unwrap();
    assert!(back == big, "4 MiB came back intact");
    // Each direction ends on its own.
    requester.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(
        forwarded.read(&mut [0u8; 1]).unwrap(),
        0,
        "the end of the stream passes through"
    );
    drop(forwarded);
    assert_eq!(requester.read(&mut [0u8; 1]).unwrap(), 0);
    let stats = relay.stats();
    assert_eq!((stats.registrations, stats.streams), (1, 1));
    assert_eq!(stats.bytes, 12 + (4 << 20));
}

#[test]
fn every_refusal_says_why_and_a_registration_ends_with_its_connection() {
    let relay = relay();
    let at = relay.addrs()[0];
    let (status, reason) = {
        let (_, s, r) = request(at, [127, 0, 0, 1], &SECRET, 0);
        (s, r)
    };
    assert_eq!(status, RelayStatus::UnknownJob, "{reason}");

    let rank = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = rank.local_addr().unwrap().port();
    let (reg, status) = register(at, 0, port);
    assert_eq!(status, RelayStatus::Accepted);
    // Someone without the secret: refused, and told nothing about the job's ranks.
    let (_, status, reason) = request(at, [127, 0, 0, 1], &[1; 32], 0);
    assert_eq!(status, RelayStatus::BadProof, "{reason}");
    let (_, status, reason) = request(at, [127, 0, 0, 1], &SECRET, 9);
    assert_eq!(status, RelayStatus::UnknownRank);
    assert!(reason.contains("rank 9"), "{reason}");
    // Rank 0 again, from another connection while the first lives; another relay key.
    assert_eq!(register(at, 0, port).1, RelayStatus::Conflict);
    let mut wrong_key = register_raw(at, 1, [9; 32], port);
    assert_eq!(verdict(&mut wrong_key).0, RelayStatus::BadProof);
    // A registered rank that does not accept: the requester hears so.
    drop(rank);
    let (_, status, reason) = request(at, [127, 0, 0, 1], &SECRET, 0);
    assert_eq!(status, RelayStatus::Unreachable, "{reason}");
    // The registration ends with its connection.
    drop(reg);
    let deadline = Instant::now() + Duration::from_secs(5);
    while relay.counts() != (0, 0, 0) {
        assert!(
            Instant::now() < deadline,
            "still registered: {:?}",
            relay.counts()
        );
        thread::sleep(Duration::from_millis(10));
    }
    let (_, status, _) = request(at, [127, 0, 0, 1], &SECRET, 0);
    assert_eq!(status, RelayStatus::UnknownJob);
}

/// A registration of rank `rank` of our job with `key` as the relay key.
fn register_raw(relay: SocketAddr, rank: u32, key: [u8; 32], port: u16) -> TcpStream {
    let mut s = connect_from(relay, [127, 0, 0, 1]);
    challenge(&mut s);
    let reg = RelayRepr::Register {
        version: VERSION,
        job_tag: job_tag(&SECRET),
        rank,
        port,
        relay_key: key,
    };
    s.write_all(&reg.emit()).unwrap();
    s
}

#[test]
fn every_verdict_says_where_the_relay_saw_the_connection_come_from() {
    let relay = relay();
    let at = relay.addrs()[0];
    let mut s = register_raw(at, 2, relay_key(&SECRET), 1);
    let mut b = [0u8; FRAME_LEN];
    s.read_exact(&mut b).unwrap();
    assert_eq!(proto::wire::relay::verdict(&b), Ok(Some(s.local_addr().unwrap())));
    // A refusal says it too (a requester behind NAT learns its mapped address).
    let mut r = connect_from(at, [127, 0, 0, 3]);
    let nonce = challenge(&mut r);
    r.write_all(&proto::wire::relay::connect_request(&SECRET, &nonce, 7))
        .unwrap();
    match read_frame(&mut r) {
        RelayRepr::Verdict { status, observed, .. } => {
            assert_eq!(status, RelayStatus::UnknownRank);
            assert_eq!(observed, Some(r.local_addr().unwrap()));
        }
        other => panic!("expected a verdict, got {other:?}"),
    }
}

#[test]
fn a_forward_goes_only_to_public_addresses_and_only_for_the_job() {
    let relay = relay();
    let at = relay.addrs()[0];
    let rank = TcpListener::bind("127.0.0.1:0").unwrap();
    let (_reg, status) = register(at, 0, rank.local_addr().unwrap().port());
    assert_eq!(status, RelayStatus::Accepted);
    // Our job, the proof made with `secret`'s relay key.
    let forward = |secret: &[u8; 32], next: &str| {
        let mut s = connect_from(at, [127, 0, 0, 1]);
        let nonce = challenge(&mut s);
        let tag = job_tag(&SECRET);
        let request = RelayRepr::Forward {
            version: VERSION,
            job_tag: tag,
            rank: 0,
            proof: connect_proof(&relay_key(secret), &nonce, &tag, 0),
            next: next.parse().unwrap(),
        };
        s.write_all(&request.emit()).unwrap();
        verdict(&mut s)
    };
    // Not into the relay's own networks, not to itself: the relay is no way in for a
    // job member either.
    for inside in ["127.0.0.1:22", "10.0.0.12:7426", "[fd00::1]:7426"] {
        let (status, reason) = forward(&SECRET, inside);
        assert_eq!(status, RelayStatus::Forbidden, "{inside}: {reason}");
    }
    // Without the job's proof nothing is tried at all.
    assert_eq!(forward(&[1; 32], "198.51.100.2:7426").0, RelayStatus::BadProof);
    assert_eq!(relay.stats().streams, 0);
    assert_eq!(relay.counts().2, 0, "refusals hold no stream slot");
}

#[test]
fn a_flood_of_bogus_connections_leaves_the_relay_serving_the_job() {
    let relay = relay();
    let at = relay.addrs()[0];
    let rank = TcpListener::bind("127.0.0.1:0").unwrap();
    let (_reg, status) = register(at, 5, rank.local_addr().unwrap().port());
    assert_eq!(status, RelayStatus::Accepted);
    // 1,000 connections from one host: half send garbage, half say nothing and stay.
    let mut silent = Vec::new();
    for i in 0..1000 {
        let Ok(mut s) = TcpStream::connect(at) else {
            continue;
        };
        if i % 2 == 0 {
            let _ = s.write_all(&[0xAB; FRAME_LEN]);
        } else {
            silent.push(s);
        }
    }
    // The job's requester (another host) is served while the silent ones still hold
    // their connections.
    let (mut requester, status, reason) = request(at, [127, 0, 0, 2], &SECRET, 5);
    assert_eq!(status, RelayStatus::Accepted, "{reason}");
    let (mut forwarded, _) = rank.accept().unwrap();
    requester.write_all(b"ping").unwrap();
    let mut got = [0u8; 4];
    forwarded.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ping");
    let stats = relay.stats();
    assert!(
        stats.dropped >= 900,
        "garbage and the surplus are dropped: {stats:?}"
    );
    assert_eq!(stats.streams, 1);
}
