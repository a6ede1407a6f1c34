//! The coordinator against real sockets on loopback: clients run in threads, the
//! test thread pumps the coordinator's events.

use super::*;
use std::net::{IpAddr, Ipv4Addr};
use std::thread;

const JOB: [u8; 16] = [1; 16];
const SECRET: [u8; 32] = [2; 32];

struct Harness {
    c: Coordinator,
    p: Poller,
    events: Vec<Event>,
}

impl Harness {
    fn new(n: u32) -> Harness {
        let c = Coordinator::bind(JOB, SECRET, n).unwrap();
        let p = Poller::new().unwrap();
        c.register(&p).unwrap();
        Harness {
            c,
            p,
            events: Vec::new(),
        }
    }

    fn addr(&self) -> SocketAddr {
        self.c
            .entries
            .iter()
            .find(|e| e.addr.ip() == IpAddr::V4(Ipv4Addr::LOCALHOST))
            .expect("IPv4 loopback")
            .addr
    }

    /// Serves until `done` says so (at most 10 s).
    fn pump_until(&mut self, done: impl Fn(&Harness) -> bool) {
        let end = Instant::now() + Duration::from_secs(10);
        while !done(self) {
            assert!(
                Instant::now() < end,
                "timed out; events so far: {:?}",
                self.events
            );
            for r in self.p.wait(Duration::from_millis(10)).unwrap() {
                match r.token {
                    Token::Listener(i) => self.c.on_listener(i, &self.p, Instant::now()),
                    Token::Conn(id) => self.c.on_conn(id, r.read, r.write, &self.p),
                    t => panic!("unexpected {t:?}"),
                }
            }
            self.events.extend(self.c.take_events());
        }
    }

    fn serve_while<T>(&mut self, client: thread::JoinHandle<T>) -> T {
        self.pump_until(|_| client.is_finished());
        client.join().unwrap()
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn hello_with(s: &mut TcpStream, job: [u8; 16], secret: [u8; 32], rank: u32) -> [u8; 16] {
    let nonce = [rank as u8 + 10; 16];
    let mac = ctl::hello_mac(&secret, &job, rank, &nonce);
    s.write_all(&ctl::encode(&ToCoordinator::Hello {
        job_id: job,
        rank,
        pid: 1,
        nonce,
        mac,
    }))
    .unwrap();
    nonce
}

/// Next message, or `None` at end of stream.
fn recv(s: &mut TcpStream, d: &mut Decoder) -> Option<FromCoordinator> {
    let mut buf = [0u8; 4096];
    loop {
        if let Some(m) = d.next().unwrap() {
            return Some(m);
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => d.push(&buf[..n]),
        }
    }
}

/// Says hello as `rank` and checks the Welcome.
fn join(addr: SocketAddr, rank: u32) -> (TcpStream, Decoder) {
    let mut s = connect(addr);
    let nonce = hello_with(&mut s, JOB, SECRET, rank);
    let mut d = Decoder::default();
    // The coordinator reports where the connection came from, under the MAC.
    let seen_from = s.local_addr().unwrap();
    let mac = ctl::welcome_mac(&SECRET, &JOB, rank, &nonce, &seen_from);
    assert_eq!(
        recv(&mut s, &mut d),
        Some(FromCoordinator::Welcome { mac, seen_from })
    );
    (s, d)
}

/// Expects a refusal: a Shutdown whose reason contains `why` (or nothing, for
/// garbage), then the end of the stream.
fn refused(mut s: TcpStream, why: Option<&str>) {
    let mut d = Decoder::default();
    match (recv(&mut s, &mut d), why) {
        (None, None) => {}
        (Some(FromCoordinator::Shutdown { reason, .. }), Some(w)) => {
            assert!(reason.contains(w), "{reason}");
            assert_eq!(recv(&mut s, &mut d), None);
        }
        (got, _) => panic!("expected refusal {why:?}, got {got:?}"),
    }
}

#[test]
fn intruders_are_refused_and_the_rank_gets_in() {
    let mut h = Harness::new(2);
    let addr = h.addr();
    let client = thread::spawn(move || {
        let mut g = connect(addr);
        g.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        refused(g, None);
        let mut g = connect(addr);
        g.write_all(&[8, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff])
            .unwrap();
        refused(g, None);
        let mut w = connect(addr);
        hello_with(&mut w, JOB, [3; 32], 0);
        refused(w, Some("wrong job secret"));
        let mut w = connect(addr);
        hello_with(&mut w, [9; 16], SECRET, 0);
        refused(w, Some("wrong job id"));
        let mut w = connect(addr);
        hello_with(&mut w, JOB, SECRET, 7);
        refused(w, Some("the job has 2 ranks"));
        let mut w = connect(addr);
        w.write_all(&ctl::encode(&ToCoordinator::Fence { epoch: 1 }))
            .unwrap();
        refused(w, None);
        let good = join(addr, 0);
        let mut dup = connect(addr);
        hello_with(&mut dup, JOB, SECRET, 0);
        refused(dup, Some("already connected"));
        good
    });
    let _good = h.serve_while(client);
    assert_eq!(h.events, vec![Event::Hello { rank: 0, pid: 1 }]);
    assert!(h.c.said_hello(0) && !h.c.said_hello(1));
}

#[test]
fn fence_and_finalize_across_ranks() {
    let mut h = Harness::new(3);
    let addr = h.addr();
    let clients: Vec<_> = (0..3)
        .map(|rank| {
            thread::spawn(move || {
                let (mut s, mut d) = join(addr, rank);
                let put = ToCoordinator::Put {
                    key: format!("card/{rank}"),
                    value: vec![rank as u8],
                };
                s.write_all(&ctl::encode(&put)).unwrap();
                s.write_all(&ctl::encode(&ToCoordinator::Fence { epoch: 1 }))
                    .unwrap();
                let Some(FromCoordinator::FenceDone { epoch: 1, kvs }) = recv(&mut s, &mut d) else {
                    panic!("no FenceDone")
                };
                s.write_all(&ctl::encode(&ToCoordinator::Finalize)).unwrap();
                assert_eq!(recv(&mut s, &mut d), Some(FromCoordinator::FinalizeDone));
                kvs
            })
        })
        .collect();
    h.pump_until(|_| clients.iter().all(|c| c.is_finished()));
    for c in clients {
        let kvs = c.join().unwrap();
        assert_eq!(
            kvs,
            (0..3)
                .map(|r| (format!("card/{r}"), vec![r as u8]))
                .collect::<Vec<_>>()
        );
    }
    assert!((0..3).all(|r| h.c.finalized(r)));
}

#[test]
fn silent_clients_are_dropped_and_never_crowd_out_ranks() {
    let mut h = Harness::new(1);
    let addr = h.addr();
    let limit = MAX_PENDING + 1;
    let silent: Vec<TcpStream> = (0..limit + 1).map(|_| connect(addr)).collect();
    h.pump_until(|h| h.c.conns.len() == limit);
    // The oldest was dropped for the newest; a rank still gets in.
    let client = thread::spawn(move || join(addr, 0));
    let _rank = h.serve_while(client);
    assert_eq!(h.c.next_deadline().map(|d| d > Instant::now()), Some(true));
    h.c.expire(Instant::now() + AUTH_TIMEOUT, &h.p);
    assert_eq!(h.c.conns.len(), 1, "only the rank is left");
    let closed = silent
        .into_iter()
        .filter(|s| {
            let mut s = s.try_clone().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            matches!(s.read(&mut [0u8; 8]), Ok(0) | Err(_))
        })
        .count();
    assert_eq!(closed, limit + 1);
}

#[test]
fn a_burst_of_ranks_all_get_in() {
    // Every rank connects and says hello before the coordinator accepts any: more
    // pending connections than MAX_PENDING, none of which may be dropped.
    let n = 2 * MAX_PENDING as u32;
    let mut h = Harness::new(n);
    let addr = h.addr();
    let mut clients: Vec<(TcpStream, [u8; 16])> = (0..n)
        .map(|rank| {
            let mut s = connect(addr);
            let nonce = hello_with(&mut s, JOB, SECRET, rank);
            (s, nonce)
        })
        .collect();
    h.pump_until(|h| (0..n).all(|r| h.c.said_hello(r)));
    for (rank, (s, nonce)) in clients.iter_mut().enumerate() {
        let seen_from = s.local_addr().unwrap();
        let mac = ctl::welcome_mac(&SECRET, &JOB, rank as u32, nonce, &seen_from);
        assert_eq!(
            recv(s, &mut Decoder::default()),
            Some(FromCoordinator::Welcome { mac, seen_from })
        );
    }
}

#[test]
fn abort_protocol_errors_and_late_joiners() {
    let mut h = Harness::new(3);
    let addr = h.addr();
    let c0 = thread::spawn(move || {
        let (mut s, _) = join(addr, 0);
        let abort = ToCoordinator::Abort {
            code: 3,
            message: "bad input".into(),
        };
        s.write_all(&ctl::encode(&abort)).unwrap();
        s.write_all(&ctl::encode(&ToCoordinator::Fence { epoch: 0 }))
            .unwrap();
        s
    });
    let _s0 = h.serve_while(c0);
    h.pump_until(|h| h.events.len() >= 3);
    assert_eq!(
        h.events[1],
        Event::Abort {
            rank: 0,
            code: 3,
            message: "bad input".into()
        }
    );
    assert!(matches!(&h.events[2], Event::Protocol(e) if e.rank == 0 && e.why.contains("already done")));
    // A rank that connects after a failure and a shutdown hears about both.
    h.c.peer_failed(2, "was killed by signal 9 (SIGKILL)", &h.p);
    h.c.shutdown("rank 0 called abort", 3, &h.p);
    let c1 = thread::spawn(move || {
        let (mut s, mut d) = join(addr, 1);
        (recv(&mut s, &mut d), recv(&mut s, &mut d))
    });
    let (a, b) = h.serve_while(c1);
    assert_eq!(
        a,
        Some(FromCoordinator::PeerFailed {
            rank: 2,
            cause: "was killed by signal 9 (SIGKILL)".into()
        })
    );
    assert_eq!(
        b,
        Some(FromCoordinator::Shutdown {
            reason: "rank 0 called abort".into(),
            code: 3
        })
    );
}

#[test]
fn connection_string_has_one_port_per_family() {
    let h = Harness::new(1);
    let s = h.c.conn_string();
    let entries = net::connstr::parse(&s).unwrap();
    assert!(!entries.is_empty());
    for fam in [true, false] {
        let ports: HashSet<u16> = entries
            .iter()
            .filter(|e| e.addr.is_ipv4() == fam)
            .map(|e| e.addr.port())
            .collect();
        assert!(ports.len() <= 1, "{s}");
    }
    assert!(entries.windows(2).all(|w| w[0].class <= w[1].class), "{s}");
}

use std::collections::HashSet;

#[test]
fn a_peer_given_up_on_hears_it_and_nobody_else_does() {
    let mut h = Harness::new(3);
    let addr = h.addr();
    let joined: Vec<_> = (0..3).map(|r| thread::spawn(move || join(addr, r))).collect();
    let mut conns: Vec<_> = joined.into_iter().map(|c| h.serve_while(c)).collect();
    let report = ToCoordinator::Unreachable {
        rank: 2,
        cause: "no handshake answer".into(),
    };
    conns[0].0.write_all(&ctl::encode(&report)).unwrap();
    // A fence after it: whatever rank 1 hears first is the fence, not a failure.
    for (s, _) in &mut conns {
        s.write_all(&ctl::encode(&ToCoordinator::Fence { epoch: 1 }))
            .unwrap();
    }
    let (mut s2, mut d2) = conns.pop().unwrap();
    let (mut s1, mut d1) = conns.pop().unwrap();
    let c = thread::spawn(move || (recv(&mut s2, &mut d2), recv(&mut s1, &mut d1)));
    let (to_2, to_1) = h.serve_while(c);
    assert_eq!(
        to_2,
        Some(FromCoordinator::PeerFailed {
            rank: 0,
            cause: "rank 0 could not reach this rank and gave up: no handshake answer".into()
        })
    );
    assert!(
        matches!(to_1, Some(FromCoordinator::FenceDone { epoch: 1, .. })),
        "{to_1:?}"
    );
}
