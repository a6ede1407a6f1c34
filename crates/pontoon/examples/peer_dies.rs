//! Test program: rank 1 kills itself with SIGKILL; rank 0's blocking receive from
//! it must return an error naming rank 1 instead of hanging.

fn main() -> Result<(), pontoon::Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    // The test checks that exactly these processes are gone afterwards.
    println!("rank {} pid {}", world.rank(), std::process::id());
    use std::io::Write;
    std::io::stdout().flush().ok();
    world.sendrecv(&[0u8], (world.rank() + 1) % world.size(), 9, &mut [0u8], None, 9)?;
    match world.rank() {
        1 => {
            let pid = std::process::id().to_string();
            let _ = std::process::Command::new("kill").args(["-9", &pid]).status();
            std::thread::sleep(std::time::Duration::from_secs(30));
        }
        0 => {
            let mut buf = [0u8; 8];
            match world.recv(&mut buf, Some(1), 0) {
                Ok(_) => println!("rank 0: unexpectedly received a message"),
                Err(e) => {
                    println!("rank 0: receive from rank 1 failed: {e}");
                    std::process::exit(3);
                }
            }
        }
        _ => std::thread::sleep(std::time::Duration::from_secs(30)),
    }
    universe.finalize()
}
