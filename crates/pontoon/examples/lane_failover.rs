//! Test program (2 ranks with at least two lanes between them, e.g. on a `multinic`
//! testbed): rank 0 sends 256 MiB to rank 1 and, part-way through, breaks its second
//! lane: it destroys the lane's TCP connection (`ss -K`, which also resets it at rank
//! 1), or with `--down` takes the lane's network interface down (`ip link set … down`:
//! nothing tells either end; the stall detector must notice). The lane of eager
//! messages and control frames (the first) stays; the fragments the broken lane had in
//! flight go again on it, and rank 1 checks every byte.

use std::time::{Duration, Instant};

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 11) as u8
}

fn run(cmd: &str, args: &[&str]) -> std::process::ExitStatus {
    std::process::Command::new(cmd)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{cmd} runs: {e}"))
}

/// The name of the interface that has address `ip` (`ip -o addr show to IP`).
fn interface_of(ip: std::net::IpAddr) -> String {
    let out = std::process::Command::new("ip")
        .args(["-o", "addr", "show", "to", &ip.to_string()])
        .output()
        .expect("ip runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let name = text
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no interface has {ip}"));
    name.split('@').next().unwrap_or(name).to_string()
}

fn main() -> Result<(), pontoon::Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    let len = 256 << 20;
    // Connect (lanes come up with the first message), with both lanes before the transfer.
    let peer = 1 - world.rank().min(1);
    world.sendrecv(&[0u8], peer, 9, &mut [0u8], Some(peer), 9)?;
    universe.settle_wireup(Duration::from_secs(10));
    match world.rank() {
        0 => {
            let lanes = universe.lanes(1);
            let Some(runtime::Route::Ip { local, remote, .. }) = lanes.get(1).map(|l| l.route) else {
                println!("rank 0: only {} lane(s) to rank 1; nothing to break", lanes.len());
                std::process::exit(2);
            };
            let data: Vec<u8> = (0..len).map(pattern).collect();
            let req = world.isend(data, 1, 5)?;
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(20) {
                universe.progress();
            }
            let how = if std::env::args().any(|a| a == "--down") {
                let nic = interface_of(local.ip());
                let status = run("ip", &["link", "set", "dev", &nic, "down"]);
                format!("took {nic} down (the second lane, {local} -> {remote}) during the transfer: ip exit {status}")
            } else {
                let (src, dst) = (local.ip().to_string(), remote.ip().to_string());
                let (sport, dport) = (format!(":{}", local.port()), format!(":{}", remote.port()));
                let args = [
                    "-K", "src", &src, "sport", "=", &sport, "dst", &dst, "dport", "=", &dport,
                ];
                let status = run("ss", &args);
                format!(
                    "destroyed the connection of the second lane ({local} -> {remote}) during the transfer: ss exit \
                     {status}"
                )
            };
            println!("rank 0: {how}");
            let (st, _) = req.wait();
            st?;
            let mut ok = [0u8];
            world.recv(&mut ok, Some(1), 6)?;
            println!(
                "rank 0: sent {len} bytes; receiver says {}; {} lane(s) left to rank 1",
                if ok[0] == 1 { "intact" } else { "CORRUPT" },
                universe.lanes(1).len()
            );
            if ok[0] != 1 {
                std::process::exit(1);
            }
        }
        1 => {
            let mut buf = vec![0u8; len];
            let st = world.recv(&mut buf, Some(0), 5)?;
            let intact = st.bytes == len as u64 && buf.iter().enumerate().all(|(i, b)| *b == pattern(i));
            world.send(&[u8::from(intact)], 0, 6)?;
        }
        _ => {}
    }
    universe.finalize()
}
