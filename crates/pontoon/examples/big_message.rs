//! Test program: rank 0 sends one message of 2 GiB + 4 KiB (larger than any 32-bit
//! length) to rank 1, which checks every byte and answers with a checksum.

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

fn main() -> Result<(), pontoon::Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    let len = (2usize << 30) + 4096;
    match world.rank() {
        0 => {
            let data: Vec<u8> = (0..len).map(pattern).collect();
            let t = universe.wtime();
            world.send(&data, 1, 3)?;
            let mut ok = [0u8];
            world.recv(&mut ok, Some(1), 4)?;
            let secs = universe.wtime() - t;
            println!(
                "sent {len} bytes in {secs:.2} s; receiver says {}",
                if ok[0] == 1 { "intact" } else { "CORRUPT" }
            );
            if ok[0] != 1 {
                std::process::exit(1);
            }
        }
        1 => {
            let mut buf = vec![0u8; len];
            let st = world.recv(&mut buf, Some(0), 3)?;
            let intact = st.bytes == len as u64 && buf.iter().enumerate().all(|(i, b)| *b == pattern(i));
            world.send(&[intact as u8], 0, 4)?;
        }
        _ => {}
    }
    universe.finalize()
}
