//! The WAN emulator between two namespaces, end to end: frames get through, delay,
//! loss and rate take effect. Needs root (it creates network namespaces); skipped
//! otherwise. Asserts only bounds that hold on a slow or loaded machine.
//!
//! Topology: `a:eth0 <-> emu:wa | emulator | emu:wb <-> b:eth0`, 10.9.0.1 and
//! 10.9.0.2. The emulator and the UDP endpoints run as threads of this test, each moved
//! into its namespace with `setns` (per thread, so the rest of the process is unaffected).

use std::net::UdpSocket;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pontoon_testbed::wan::{run, WanConfig, WanStats};

const ECHO_PORT: u16 = 7007;

/// The three namespaces; deleted when dropped, also when the test fails.
struct Topo {
    prefix: String,
}

impl Topo {
    fn ns(&self, n: &str) -> String {
        format!("{}-{n}", self.prefix)
    }

    fn build() -> Topo {
        let topo = Topo {
            prefix: format!("ptw-{}", std::process::id()),
        };
        let (a, emu, b) = (topo.ns("a"), topo.ns("emu"), topo.ns("b"));
        for n in [&a, &emu, &b] {
            ip(&["netns", "add", n]);
            ip(&["-n", n, "link", "set", "lo", "up"]);
        }
        // Fixed MACs allow static neighbour entries: no ARP to lose under loss.
        let (mac_a, mac_b) = ("02:00:0a:09:00:01", "02:00:0a:09:00:02");
        #[rustfmt::skip]
        ip(&["-n", &emu, "link", "add", "wa", "type", "veth", "peer", "name", "eth0", "netns", &a, "address", mac_a]);
        #[rustfmt::skip]
        ip(&["-n", &emu, "link", "add", "wb", "type", "veth", "peer", "name", "eth0", "netns", &b, "address", mac_b]);
        ip(&["-n", &a, "addr", "add", "10.9.0.1/24", "dev", "eth0"]);
        ip(&["-n", &b, "addr", "add", "10.9.0.2/24", "dev", "eth0"]);
        #[rustfmt::skip]
        ip(&["-n", &a, "neigh", "replace", "10.9.0.2", "lladdr", mac_b, "dev", "eth0", "nud", "permanent"]);
        #[rustfmt::skip]
        ip(&["-n", &b, "neigh", "replace", "10.9.0.1", "lladdr", mac_a, "dev", "eth0", "nud", "permanent"]);
        for (n, dev) in [(&a, "eth0"), (&emu, "wa"), (&emu, "wb"), (&b, "eth0")] {
            ip(&["-n", n, "link", "set", dev, "up"]);
            // Frames must stay within the MTU; without ethtool the small probes of this
            // test still fit.
            let _ = Command::new("ip")
                .args([
                    "netns", "exec", n, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off",
                ])
                .output();
        }
        topo
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for n in ["a", "emu", "b"] {
            let _ = Command::new("ip").args(["netns", "del", &self.ns(n)]).status();
        }
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `f` on a new thread inside namespace `ns`.
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("open netns");
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&file),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .expect("setns");
        f()
    })
}

/// A running emulator; stopped when finished or dropped.
struct Emu {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<std::io::Result<WanStats>>>,
}

impl Emu {
    /// Starts the emulator and waits until a probe crosses it both ways.
    fn start(topo: &Topo, cfg: WanConfig) -> Emu {
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let handle = in_ns(&topo.ns("emu"), move || run(&cfg, &s));
        let emu = Emu {
            stop,
            handle: Some(handle),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while ping(topo, 1, Duration::from_millis(200)).is_empty() {
            assert!(Instant::now() < deadline, "no probe crossed the emulator in 10 s");
            assert!(
                !emu.handle.as_ref().unwrap().is_finished(),
                "emulator stopped early"
            );
        }
        emu
    }

    fn finish(mut self) -> WanStats {
        self.stop.store(true, Relaxed);
        let h = self.handle.take().expect("running");
        h.join().expect("emulator thread").expect("emulator failed")
    }
}

impl Drop for Emu {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

/// UDP echo on 10.9.0.2 until `stop`.
fn echo_server(topo: &Topo, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    let ready = Arc::new(AtomicBool::new(false));
    let r = Arc::clone(&ready);
    let h = in_ns(&topo.ns("b"), move || {
        let sock = UdpSocket::bind(("10.9.0.2", ECHO_PORT)).expect("bind echo");
        sock.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        r.store(true, Relaxed);
        let mut buf = [0u8; 2048];
        while !stop.load(Relaxed) {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                let _ = sock.send_to(&buf[..n], from);
            }
        }
    });
    while !ready.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
    }
    h
}

fn client_socket() -> UdpSocket {
    let sock = UdpSocket::bind("10.9.0.1:0").expect("bind client");
    sock.connect(("10.9.0.2", ECHO_PORT)).unwrap();
    sock
}

/// Sends `n` numbered probes one at a time; returns the RTTs of those answered.
fn ping(topo: &Topo, n: u64, timeout: Duration) -> Vec<Duration> {
    in_ns(&topo.ns("a"), move || {
        let sock = client_socket();
        sock.set_read_timeout(Some(timeout)).unwrap();
        let mut rtts = Vec::new();
        let mut buf = [0u8; 64];
        for i in 0..n {
            let t = Instant::now();
            sock.send(&i.to_le_bytes()).unwrap();
            while let Ok(len) = sock.recv(&mut buf) {
                if len == 8 && buf[..8] == i.to_le_bytes() {
                    rtts.push(t.elapsed());
                    break;
                }
            }
        }
        rtts
    })
    .join()
    .unwrap()
}

/// Sends `n` probes of `size` bytes `gap` apart; returns how many distinct ones came
/// back and when the last did, counted from the first send.
fn blast(topo: &Topo, n: u64, size: usize, gap: Duration) -> (usize, Duration) {
    in_ns(&topo.ns("a"), move || {
        let sock = client_socket();
        sock.set_nonblocking(true).unwrap();
        let mut seen = vec![false; n as usize];
        let mut buf = vec![0u8; size.max(8)];
        let mut last = Duration::ZERO;
        let start = Instant::now();
        let mut quiet_since = Instant::now();
        let mut sent = 0;
        while sent < n || quiet_since.elapsed() < Duration::from_millis(500) {
            if sent < n && start.elapsed() >= gap * sent as u32 {
                buf[..8].copy_from_slice(&sent.to_le_bytes());
                if sock.send(&buf).is_ok() {
                    sent += 1;
                    quiet_since = Instant::now();
                }
            }
            while let Ok(len) = sock.recv(&mut buf) {
                let id = u64::from_le_bytes(buf[..8].try_into().unwrap()) as usize;
                if len == size.max(8) && id < seen.len() {
                    seen[id] = true;
                    last = start.elapsed();
                    quiet_since = Instant::now();
                }
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        (seen.iter().filter(|s| **s).count(), last)
    })
    .join()
    .unwrap()
}

#[test]
fn emulated_wan_delays_drops_and_limits() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipping emulated_wan_delays_drops_and_limits: needs root (network namespaces)");
        return;
    }
    let topo = Topo::build();
    let stop_echo = Arc::new(AtomicBool::new(false));
    let echo = echo_server(&topo, Arc::clone(&stop_echo));
    let base = WanConfig::new("wa", "wb");

    // Delay: every round trip takes at least twice the one-way delay, and not much more.
    let delay = Duration::from_millis(20);
    let emu = Emu::start(
        &topo,
        WanConfig {
            delay,
            ..base.clone()
        },
    );
    let mut rtts = ping(&topo, 30, Duration::from_secs(2));
    let stats = emu.finish();
    assert_eq!(
        rtts.len(),
        30,
        "all probes come back on a lossless link: {stats:?}"
    );
    rtts.sort();
    assert!(rtts[0] >= 2 * delay, "RTT {:?} below 2 × {delay:?}", rtts[0]);
    assert!(
        rtts[15] < 2 * delay + Duration::from_millis(30),
        "median RTT {:?}",
        rtts[15]
    );
    assert!(
        stats.a_to_b.tx_frames > 30 && stats.b_to_a.tx_frames > 30,
        "{stats:?}"
    );
    assert_eq!(stats.a_to_b.dropped() + stats.b_to_a.dropped(), 0, "{stats:?}");

    // Loss: 20 % each way, so 64 % of round trips succeed.
    let emu = Emu::start(
        &topo,
        WanConfig {
            loss: 0.2,
            seed: 9,
            ..base.clone()
        },
    );
    let (back, _) = blast(&topo, 1000, 64, Duration::from_micros(300));
    let stats = emu.finish();
    let frac = back as f64 / 1000.0;
    assert!(
        (0.54..=0.74).contains(&frac),
        "round-trip success {frac}, expected 0.64: {stats:?}"
    );
    let lost = stats.a_to_b.dropped_loss as f64 / stats.a_to_b.rx_frames as f64;
    assert!((0.15..=0.25).contains(&lost), "a->b loss {lost}: {stats:?}");

    // Rate: 300 frames of 1042 bytes at 10 Mbit/s take at least 250 ms to cross.
    let rate = 10_000_000;
    let emu = Emu::start(
        &topo,
        WanConfig {
            rate_bps: Some(rate),
            ..base.clone()
        },
    );
    let (back, last) = blast(&topo, 300, 1000, Duration::ZERO);
    let stats = emu.finish();
    assert_eq!(back, 300, "no loss below the queue limit: {stats:?}");
    let min = Duration::from_nanos(300 * 1042 * 8 * 1_000_000_000 / rate);
    assert!(
        last >= min,
        "300 frames crossed in {last:?}, faster than {min:?} allows"
    );

    stop_echo.store(true, Relaxed);
    echo.join().unwrap();
}
