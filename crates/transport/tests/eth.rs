//! Raw-Ethernet lanes over a veth pair in a private network namespace (root only; the
//! test skips with a message otherwise): frames of every size arrive once, in order,
//! byte for byte, with and without the testbed-style MTUs, and a datagram from a
//! station without the lane's key is dropped.

use std::process::Command;

use pontoon_transport::eth::{eth_caps, eth_link, EthLink, EthPeer, EthPipe, EthPort};
use pontoon_transport::{Link, Placement, Sink};
use proto::reliable::ChannelConfig;
use proto::wire::data::{DataRepr, Envelope, HeaderBytes};

/// Runs `f` on a thread of its own in a fresh network namespace with a veth pair
/// `pa`/`pb` of the given MTU; `None` when not root.
fn in_namespace<R: Send + 'static>(mtu: u32, f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: raw Ethernet lanes need root (CAP_NET_RAW, a network namespace)");
        return None;
    }
    let t = std::thread::spawn(move || {
        // SAFETY: unshare affects this thread only (a fresh network namespace for it and
        // the processes it starts); no memory is involved.
        assert_eq!(
            unsafe { libc::unshare(libc::CLONE_NEWNET) },
            0,
            "unshare(CLONE_NEWNET)"
        );
        let ip = |args: &str| {
            let ok = Command::new("ip")
                .args(args.split(' '))
                .status()
                .expect("ip(8)")
                .success();
            assert!(ok, "ip {args}");
        };
        ip("link add pa type veth peer name pb");
        ip(&format!("link set pa mtu {mtu} up"));
        ip(&format!("link set pb mtu {mtu} up"));
        f()
    });
    Some(t.join().expect("the namespace thread"))
}

#[derive(Default)]
struct Collect(Vec<(DataRepr, Vec<u8>)>);
impl Sink for Collect {
    type Token = DataRepr;
    fn on_header(&mut self, repr: &DataRepr) -> Result<(Placement, DataRepr), String> {
        Ok((Placement::Engine(vec![0; repr.payload_len() as usize]), *repr))
    }
    fn on_payload(&mut self, token: DataRepr, buf: Option<Vec<u8>>) -> Result<(), String> {
        self.0.push((token, buf.unwrap_or_default()));
        Ok(())
    }
}

fn lanes() -> (EthLink<DataRepr>, EthLink<DataRepr>, EthPort) {
    let (pa, pb) = (EthPort::open("pa", 0).unwrap(), EthPort::open("pb", 1).unwrap());
    let key = proto::wire::eth::FrameKey::new(&[9u8; 32]);
    let (ta, tb) = (pa.new_tag().unwrap(), pb.new_tag().unwrap());
    let a = EthPipe::new(
        pa.clone(),
        ta,
        EthPeer {
            mac: pb.mac(),
            tag: tb,
            key,
        },
        ChannelConfig::default(),
    )
    .unwrap();
    let b = EthPipe::new(
        pb,
        tb,
        EthPeer {
            mac: pa.mac(),
            tag: ta,
            key,
        },
        ChannelConfig::default(),
    )
    .unwrap();
    let caps = eth_caps(1400);
    (eth_link(a, caps), eth_link(b, caps), pa)
}

fn message(i: u32) -> (HeaderBytes, Vec<u8>) {
    let len = [0usize, 1, 8, 100, 1400, 1500, 9000, 70_000][i as usize % 8];
    let payload: Vec<u8> = (0..len).map(|j| (j as u32 ^ i) as u8).collect();
    let repr = DataRepr::Match {
        env: Envelope {
            ctx: 0,
            src: 0,
            tag: 1,
            seq: i,
            msg_len: len as u64,
        },
    };
    (HeaderBytes::new(&repr), payload)
}

/// Sends `count` messages from a to b, interleaving sending and receiving as the
/// runtime does, until b has all of them; returns what b got.
fn exchange(a: &mut EthLink<DataRepr>, b: &mut EthLink<DataRepr>, count: u32) -> Vec<(DataRepr, Vec<u8>)> {
    let mut got = Collect::default();
    let mut done = Vec::new();
    let start = std::time::Instant::now();
    for i in 0..count {
        let (h, p) = message(i);
        a.send_copy(&h, &p).unwrap();
        a.recv(&mut Collect::default()).unwrap();
        b.recv(&mut got).unwrap();
    }
    while got.0.len() < count as usize || a.tx_queued() > 0 {
        a.flush(&mut done).unwrap();
        a.recv(&mut Collect::default()).unwrap();
        b.recv(&mut got).unwrap();
        assert!(
            start.elapsed().as_secs() < 20,
            "{} of {count} arrived",
            got.0.len()
        );
    }
    got.0
}

fn check(got: &[(DataRepr, Vec<u8>)]) {
    for (i, (repr, payload)) in got.iter().enumerate() {
        let (h, p) = message(i as u32);
        assert_eq!(HeaderBytes::new(repr).as_slice(), h.as_slice(), "header {i}");
        assert!(payload == &p, "payload {i}");
    }
}

#[test]
fn frames_of_every_size_arrive_once_in_order_at_mtu_1500_and_9000() {
    for mtu in [1500, 9000] {
        let Some(got) = in_namespace(mtu, || {
            let (mut a, mut b, _) = lanes();
            exchange(&mut a, &mut b, 400)
        }) else {
            return;
        };
        assert_eq!(got.len(), 400, "MTU {mtu}");
        check(&got);
    }
}

#[test]
fn a_datagram_without_the_lanes_key_is_dropped() {
    let Some((got, clean)) = in_namespace(1500, || {
        let (mut a, mut b, pa) = lanes();
        // A forger on the segment knows the MACs and the lane number, not the key.
        let forged = proto::wire::eth::EthRepr {
            kind: proto::wire::eth::EthKind::Data,
            lane: (1 << 12) | 1,
            seq: 0,
            ack: 0,
            window_end: 100,
            payload_len: 48,
            sack_count: 0,
            ack_delay_us: 0,
            sacks: Default::default(),
        };
        let (h, p) = message(1);
        let mut bytes = h.as_slice().to_vec();
        bytes.extend_from_slice(&p);
        bytes.resize(48, 0);
        let pb_mac = EthPort::open("pb", 1).unwrap().mac();
        pa.send_one(
            pb_mac,
            &forged,
            &bytes,
            Some(&proto::wire::eth::FrameKey::new(&[1; 32])),
        )
        .unwrap();
        let got = exchange(&mut a, &mut b, 3);
        (got, b.recv(&mut Collect::default()).unwrap())
    }) else {
        return;
    };
    assert_eq!(got.len(), 3, "only the real frames");
    check(&got);
    assert!(!clean, "nothing more arrives");
}

#[test]
fn each_rank_of_a_host_reads_only_its_own_datagrams_and_every_opening_handshake() {
    let Some((dropped_by_1, verified_by_2, handshakes)) = in_namespace(1500, || {
        let pa = EthPort::open("pa", 0).unwrap();
        let (p1, p2) = (EthPort::open("pb", 1).unwrap(), EthPort::open("pb", 2).unwrap());
        let t2 = p2.new_tag().unwrap();
        let key = proto::wire::eth::FrameKey::new(&[3u8; 32]);
        let repr = |kind, lane, len| proto::wire::eth::EthRepr {
            kind,
            lane,
            seq: 0,
            ack: 0,
            window_end: 10,
            payload_len: len,
            sack_count: 0,
            ack_delay_us: 0,
            sacks: Default::default(),
        };
        use proto::wire::eth::EthKind;
        pa.send_one(p1.mac(), &repr(EthKind::Data, t2, 4), b"data", Some(&key))
            .unwrap();
        pa.send_one(p1.mac(), &repr(EthKind::Handshake, 0, 4), b"helo", None)
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let h1 = p1.take_handshakes().len();
        let h2 = p2.take_handshakes().len();
        (p1.dropped(), p2.inbox_verifies(t2, pa.mac(), &key), (h1, h2))
    }) else {
        return;
    };
    assert_eq!(
        dropped_by_1, 0,
        "rank 1's socket never saw rank 2's datagram (the kernel filtered it)"
    );
    assert!(verified_by_2, "rank 2 got it");
    assert_eq!(
        handshakes,
        (1, 1),
        "an opening handshake reaches every rank of the host"
    );
}
