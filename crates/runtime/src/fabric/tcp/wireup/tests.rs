//! Racing on loopback: a peer that accepts but is the wrong rank, an address that
//! never answers (a listener whose backlog is full drops SYNs), and the deadline.
use super::*;
use std::net::TcpListener;
use std::thread;

fn identity(rank: Rank) -> Identity {
    Identity {
        job_id: [7; 16],
        secret: [9; 32],
        rank,
        size: 4,
    }
}

fn candidate(addr: SocketAddr) -> Candidate {
    Candidate {
        addr,
        kind: PathKind::Direct,
        next: None,
        class: net::classify(addr.ip()),
        remote_iface: 0,
        bridge: false,
    }
}

/// A rank `rank` answering handshakes on a loopback port, until the test ends.
fn acceptor(rank: Rank) -> SocketAddr {
    acceptor_telling(rank).0
}

/// [`acceptor`], also saying how each connection it took reached it.
fn acceptor_telling(rank: Rank) -> (SocketAddr, std::sync::mpsc::Receiver<PathKind>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            sock.set_nonblocking(true).unwrap();
            let mut inc = Incoming::new(sock, Deadline::after(clock::now(), 5_000_000_000));
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                match inc.poll(&identity(rank), clock::now(), [rank as u8; 16], |_| {
                    Contention::None
                }) {
                    Progress::Pending => thread::sleep(Duration::from_millis(1)),
                    Progress::Established { sock, via, .. } => {
                        // Keep it open until the test is over.
                        std::mem::forget(sock);
                        let _ = tx.send(via.kind);
                        break;
                    }
                    _ => break,
                }
            }
        }
    });
    (addr, rx)
}

/// How an outgoing that ended in `p` reached rank 1, if it did.
fn reached_rank_1_by(p: &Progress) -> Option<PathKind> {
    match p {
        Progress::Established { peer: 1, via, .. } => Some(via.kind),
        _ => None,
    }
}

fn relayed(addr: SocketAddr) -> Candidate {
    Candidate {
        kind: PathKind::NatProxy,
        ..candidate(addr)
    }
}

/// A relay that lies: it accepts any request and joins the stream to `to`.
fn lying_relay(to: SocketAddr) -> SocketAddr {
    use proto::wire::relay::{RelayRepr, RelayStatus, VERSION};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for mut sock in listener.incoming().flatten() {
            let challenge = RelayRepr::Challenge {
                version: VERSION,
                nonce: [5; 32],
            };
            sock.write_all(&challenge.emit()).unwrap();
            let mut request = [0u8; proto::wire::relay::FRAME_LEN];
            sock.read_exact(&mut request).unwrap();
            let yes = RelayRepr::Verdict {
                version: VERSION,
                status: RelayStatus::Accepted,
                observed: None,
                reason: String::new(),
            };
            sock.write_all(&yes.emit()).unwrap();
            let inner = TcpStream::connect(to).unwrap();
            let (mut a, mut b) = (sock.try_clone().unwrap(), inner.try_clone().unwrap());
            thread::spawn(move || io::copy(&mut a, &mut b));
            let (mut a, mut b) = (inner, sock);
            thread::spawn(move || io::copy(&mut a, &mut b));
        }
    });
    addr
}

#[test]
fn a_held_outgoing_connects_but_says_no_hello_until_released() {
    let (rank1, how) = acceptor_telling(1);
    let mut out = Outgoing::new(1, vec![candidate(rank1)], 0, TIMING, clock::now());
    for _ in 0..200 {
        assert!(matches!(
            out.poll(&identity(0), clock::now(), || [1; 16], true),
            Progress::Pending
        ));
        thread::sleep(Duration::from_millis(1));
    }
    assert!(out.in_handshake().is_none() && out.racing.iter().all(|r| r.connected));
    assert!(how.try_recv().is_err(), "the peer heard no HELLO");
    let (done, _) = drive(&mut out);
    assert!(
        matches!(done, Progress::Established { peer: 1, .. }),
        "{}",
        out.report()
    );
}

#[test]
fn a_registered_rank_is_reached_through_a_relay_and_knows_it() {
    let relay = pontoon_relay::Relay::bind(
        &["127.0.0.1:0".parse().unwrap()],
        pontoon_relay::Limits::default(),
    )
    .unwrap()
    .spawn();
    let (rank1, how) = acceptor_telling(1);
    let id = identity(1);
    let (_registered, _) =
        transport::relay::register_unchecked(relay.addrs()[0], &id.secret, 1, rank1.port()).unwrap();
    let mut out = Outgoing::new(1, vec![relayed(relay.addrs()[0])], 0, TIMING, clock::now());
    let (done, _) = drive(&mut out);
    assert_eq!(
        reached_rank_1_by(&done),
        Some(PathKind::NatProxy),
        "{}",
        out.report()
    );
    assert_eq!(how.recv_timeout(Duration::from_secs(5)), Ok(PathKind::NatProxy));
    assert!(out.report().contains("relay 127.0.0.1"), "{}", out.report());
}

#[test]
fn a_relay_that_joins_the_wrong_rank_is_caught_and_the_next_path_taken() {
    let (wrong, right) = (acceptor(2), acceptor(1));
    let liar = lying_relay(wrong);
    let mut out = Outgoing::new(1, vec![relayed(liar), candidate(right)], 0, TIMING, clock::now());
    let (done, _) = drive(&mut out);
    assert_eq!(
        reached_rank_1_by(&done),
        Some(PathKind::Direct),
        "{}",
        out.report()
    );
    let caught = &out.attempts[0];
    assert_eq!((caught.addr, caught.kind), (liar, PathKind::NatProxy));
    let why = caught.result.as_ref().unwrap_err();
    assert!(why.contains("rank 2"), "{why}");
}

/// An address whose SYNs go unanswered: a listener that never accepts, its backlog full.
fn black_hole() -> (SocketAddr, Vec<Socket>) {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    s.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    s.listen(0).unwrap();
    let addr = s.local_addr().unwrap().as_socket().unwrap();
    let mut keep = vec![s];
    for _ in 0..4 {
        let c = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        c.set_nonblocking(true).unwrap();
        let _ = c.connect(&addr.into());
        keep.push(c);
    }
    thread::sleep(Duration::from_millis(50));
    (addr, keep)
}

fn drive(out: &mut Outgoing) -> (Progress, Duration) {
    let start = Instant::now();
    loop {
        match out.poll(&identity(0), clock::now(), || [1; 16], false) {
            Progress::Pending => thread::sleep(Duration::from_millis(1)),
            done => return (done, start.elapsed()),
        }
    }
}

const MS: u64 = 1_000_000;
const TIMING: RaceTiming = RaceTiming {
    attempt: 1500 * MS,
    stagger: 100 * MS,
    total: 4000 * MS,
};

#[test]
fn the_wrong_rank_is_refused_and_the_next_candidate_connects() {
    let (wrong, right) = (acceptor(2), acceptor(1));
    let mut out = Outgoing::new(
        1,
        vec![candidate(wrong), candidate(right)],
        0,
        TIMING,
        clock::now(),
    );
    let (done, _) = drive(&mut out);
    assert!(
        matches!(done, Progress::Established { peer: 1, .. }),
        "{}",
        out.report()
    );
    assert_eq!(out.attempts.len(), 2, "{}", out.report());
    let refused = out.attempts[0].result.as_ref().unwrap_err();
    assert!(
        refused.contains("rank 2") || refused.contains("refused"),
        "{refused}"
    );
    assert_eq!(out.attempts[1].addr, right);
    assert!(out.attempts[1].result.is_ok());
}

#[test]
fn a_silent_address_does_not_hold_up_the_next_one() {
    let (silent, _keep) = black_hole();
    let right = acceptor(1);
    let mut out = Outgoing::new(
        1,
        vec![candidate(silent), candidate(right)],
        0,
        TIMING,
        clock::now(),
    );
    let (done, took) = drive(&mut out);
    assert!(
        matches!(done, Progress::Established { peer: 1, .. }),
        "{}",
        out.report()
    );
    // Raced after one stagger, not after the silent attempt's time limit.
    assert!(
        took < clock::duration(TIMING.attempt),
        "took {took:?}: {}",
        out.report()
    );
    let silent_attempts: Vec<&Attempt> = out.attempts.iter().filter(|a| a.addr == silent).collect();
    assert_eq!(silent_attempts.len(), 1, "recorded once: {}", out.report());
    assert!(silent_attempts[0]
        .result
        .as_ref()
        .unwrap_err()
        .contains("abandoned"));
}

#[test]
fn silence_everywhere_fails_at_the_deadline_with_every_address() {
    let holes: Vec<(SocketAddr, Vec<Socket>)> = (0..5).map(|_| black_hole()).collect();
    let timing = RaceTiming {
        attempt: 10_000 * MS,
        stagger: 50 * MS,
        total: 800 * MS,
    };
    let mut out = Outgoing::new(
        1,
        holes.iter().map(|h| candidate(h.0)).collect(),
        0,
        timing,
        clock::now(),
    );
    let mut most_in_flight = 0;
    let start = Instant::now();
    let done = loop {
        match out.poll(&identity(0), clock::now(), || [1; 16], false) {
            Progress::Pending => {
                most_in_flight = most_in_flight.max(out.racing.len());
                thread::sleep(Duration::from_millis(1));
            }
            done => break done,
        }
    };
    let took = start.elapsed();
    let Progress::Failed(report) = done else {
        panic!("expected a failure: {}", out.report())
    };
    assert!(
        took >= clock::duration(timing.total)
            && took < clock::duration(timing.total) + Duration::from_millis(300),
        "{took:?}"
    );
    assert_eq!(most_in_flight, proto::dial::MAX_RACING);
    assert!(
        report.contains("given up after 800 ms") && report.contains("not tried in time"),
        "{report}"
    );
}
