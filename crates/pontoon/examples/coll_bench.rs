//! Collective latency, the same method and output as `bench/c/coll.c`: allreduce
//! (f64, SUM) and bcast (bytes, root 0) at 8 B, 64 KiB and 4 MiB; warm-up, timed
//! iterations, the slowest rank's average per call in microseconds.
//!
//!     pontoon run -n 4 target/release/examples/coll_bench [ITERS]

use pontoon::{Comm, Error, Op};

fn run(u: &pontoon::Universe, w: &Comm, allreduce: bool, bytes: usize, iters: usize) -> Result<f64, Error> {
    let warmup = iters / 5 + 1;
    let a = vec![1.0f64; bytes / 8];
    let mut b = vec![0.0f64; bytes / 8];
    let mut raw = vec![1u8; bytes];
    let mut t0 = 0.0;
    w.barrier()?;
    for i in 0..warmup + iters {
        if i == warmup {
            w.barrier()?;
            t0 = u.wtime();
        }
        if allreduce {
            w.allreduce(&a, &mut b, &Op::Sum)?;
        } else {
            w.bcast(&mut raw, 0)?;
        }
    }
    let mine = [(u.wtime() - t0) * 1e6 / iters as f64];
    let mut slowest = [0.0];
    w.reduce(&mine, &mut slowest, &Op::Max, 0)?;
    Ok(slowest[0])
}

fn main() -> Result<(), Error> {
    let u = pontoon::init()?;
    let w = u.world();
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    for (name, allreduce) in [("allreduce", true), ("bcast", false)] {
        for bytes in [8usize, 65536, 4194304] {
            // osu_allreduce / osu_bcast: a tenth of the iterations for large messages.
            let n = if bytes >= 65536 {
                (iters / 10).max(10)
            } else {
                iters
            };
            let us = run(&u, &w, allreduce, bytes, n)?;
            if w.rank() == 0 {
                println!("{name} {bytes} {us:.3}");
            }
        }
    }
    drop(w);
    u.finalize()
}
