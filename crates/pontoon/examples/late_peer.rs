//! Test program: rank 1 stops making progress (it sleeps) right after init while rank 0
//! sends to it, so rank 0's connection attempts time out and it gives up on rank 1.
//! Rank 1 must learn that when it wakes: its receive from rank 0 fails with the reason
//! instead of waiting for a message that will never come. Run with short timeouts
//! (`PONTOON_ATTEMPT_TIMEOUT_MS`, `PONTOON_CONNECT_TIMEOUT_MS`) and 2 ranks.

fn main() -> Result<(), pontoon::Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    match world.rank() {
        0 => match world.send(&[7u32], 1, 3) {
            Ok(()) => println!("rank 0: send to rank 1 completed"),
            Err(e) => println!("rank 0: send to rank 1 failed: {e}"),
        },
        _ => {
            std::thread::sleep(std::time::Duration::from_secs(3));
            let mut buf = [0u32];
            match world.recv(&mut buf, Some(0), 3) {
                Ok(_) => println!("rank 1: received {}", buf[0]),
                Err(e) => println!("rank 1: receive from rank 0 failed: {e}"),
            }
        }
    }
    universe.finalize()
}
