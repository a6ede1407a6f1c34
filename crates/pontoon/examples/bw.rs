//! Streaming bandwidth from rank 0 to rank 1 with the method of osu_bw: a window of
//! non-blocking sends is matched by a window of receives, then a short
//! acknowledgement; bandwidth = bytes / time. Comparable with `iperf3` (one stream).
//! Run with `pontoon run -n 2 target/release/examples/bw [--size BYTES] [--window W] [--iters N]`.

use pontoon::{wait_all, Error};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    if world.size() < 2 {
        eprintln!("bw needs 2 ranks");
        std::process::exit(2);
    }
    let (size, window, iters) = (arg("--size", 4 << 20), arg("--window", 16), arg("--iters", 20));
    let warmup = 2;
    let mut bufs: Vec<Vec<u8>> = (0..window).map(|_| vec![0u8; size]).collect();
    let mut start = 0.0;
    for i in 0..warmup + iters {
        if i == warmup {
            start = universe.wtime();
        }
        match world.rank() {
            0 => {
                let reqs = bufs
                    .drain(..)
                    .map(|b| world.isend(b, 1, 1))
                    .collect::<Result<_, _>>()?;
                for (st, b) in wait_all(reqs) {
                    st?;
                    bufs.push(b);
                }
                world.recv(&mut [0u8; 1], Some(1), 2)?;
            }
            1 => {
                let reqs = bufs
                    .drain(..)
                    .map(|b| world.irecv(b, Some(0), 1))
                    .collect::<Result<_, _>>()?;
                for (st, b) in wait_all(reqs) {
                    st?;
                    bufs.push(b);
                }
                world.send(&[0u8; 1], 0, 2)?;
            }
            _ => break,
        }
    }
    if world.rank() == 0 {
        let secs = universe.wtime() - start;
        let bytes = (size * window * iters) as f64;
        println!(
            "{:>12} {:>16.1} {:>12.2}",
            size,
            bytes / secs / 1e6,
            bytes * 8.0 / secs / 1e9
        );
    }
    universe.finalize()
}
