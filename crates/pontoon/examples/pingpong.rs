//! One-way latency and bandwidth between ranks 0 and 1 for 0 B … 4 MiB, with the
//! method of the OSU micro-benchmarks (osu_latency): warm-up round trips, then
//! timed round trips; latency is half the mean round trip.
//! Run with `pontoon run -n 2 target/release/examples/pingpong [--max BYTES] [--iters N]`.

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), pontoon::Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    if world.size() < 2 {
        eprintln!(
            "pingpong needs 2 ranks: pontoon run -n 2 {}",
            std::env::args().next().unwrap_or_default()
        );
        std::process::exit(2);
    }
    let rank = world.rank();
    let max = arg("--max", 4 << 20);
    let base_iters = arg("--iters", 10_000);
    let mut buf = vec![0u8; max.max(1)];
    if rank == 0 {
        println!(
            "# pontoon pingpong, {} ranks, one-way latency = round trip / 2",
            world.size()
        );
        println!(
            "{:>12} {:>12} {:>16}",
            "size_bytes", "latency_us", "bandwidth_MBps"
        );
    }
    // Looks at the rarely busy sockets (wire-up, the coordinator) from the 1-byte round
    // trips on: by then the connection is up (while it is set up, every pass looks).
    let mut since = (universe.wtime(), 0);
    let mut size = 0usize;
    loop {
        if size == 1 {
            since = (universe.wtime(), universe.diag().housekeeping_passes());
        }
        // Fewer iterations for large messages, as osu_latency does.
        let iters = if size > 64 << 10 {
            (base_iters / 10).max(100)
        } else {
            base_iters
        };
        let warmup = (iters / 10).max(10);
        let mut start = 0.0;
        if rank < 2 {
            for i in 0..warmup + iters {
                if i == warmup {
                    start = universe.wtime();
                }
                if rank == 0 {
                    world.send(&buf[..size], 1, 1)?;
                    world.recv(&mut buf[..size], Some(1), 1)?;
                } else {
                    world.recv(&mut buf[..size], Some(0), 1)?;
                    world.send(&buf[..size], 0, 1)?;
                }
            }
        }
        if rank == 0 {
            let one_way = (universe.wtime() - start) / iters as f64 / 2.0;
            let mbps = if size == 0 {
                0.0
            } else {
                size as f64 / one_way / 1e6
            };
            println!("{:>12} {:>12.2} {:>16.1}", size, one_way * 1e6, mbps);
        }
        if size >= max {
            break;
        }
        size = if size == 0 { 1 } else { size * 2 };
    }
    if rank == 0 {
        let ms = (universe.wtime() - since.0) * 1e3;
        let passes = universe.diag().housekeeping_passes() - since.1;
        println!("# housekeeping: {passes} passes in {ms:.0} ms");
    }
    universe.finalize()
}
