//! Test program: every rank but 0 starts `--count` sends of `--size` bytes to rank 0
//! at once, while rank 0 asks for the last message of the last sender first, so all
//! the others arrive unexpected. Rank 0 checks every byte and reports the most bytes
//! of unmatched eager messages it held (bounded by PONTOON_UNEXPECTED_CAP) and its
//! peak resident memory.

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn fill(src: usize, tag: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i ^ (src * 131) ^ (tag * 7)) as u8).collect()
}

/// Peak resident set (VmHWM) in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() -> Result<(), pontoon::Error> {
    let (count, size) = (arg("--count", 64), arg("--size", 16384));
    let universe = pontoon::init()?;
    let world = universe.world();
    let (rank, ranks) = (world.rank() as usize, world.size() as usize);
    if rank > 0 {
        let reqs = (0..count)
            .map(|tag| world.isend(fill(rank, tag, size), 0, tag as i32))
            .collect::<Result<Vec<_>, _>>()?;
        for (st, _) in pontoon::wait_all(reqs) {
            st?;
        }
    } else {
        let mut buf = vec![0u8; size];
        let mut bad = 0;
        for src in (1..ranks).rev() {
            for tag in (0..count).rev() {
                let st = world.recv(&mut buf, Some(src as u32), tag as i32)?;
                if st.bytes != size as u64 || buf != fill(src, tag, size) {
                    bad += 1;
                }
            }
        }
        println!(
            "flood of {} messages of {size} bytes from {} ranks: {bad} corrupt; held at most {} bytes of \
             unexpected eager messages; peak RSS {} KiB",
            count * (ranks - 1),
            ranks - 1,
            universe.diag().unexpected_peak(),
            peak_rss_kib()
        );
        if bad > 0 {
            std::process::exit(1);
        }
    }
    universe.finalize()
}
