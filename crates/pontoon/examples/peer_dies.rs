//! Test program: rank 1 kills itself with SIGKILL; rank 0's blocking receive from
//! it must return an error naming rank 1 instead of hanging (`PEER_DIES=victim,waiter`
//! picks other ranks). `PEER_DIES_IN=barrier`: the waiter waits in a barrier of
//! COMM_WORLD instead (on one host, on the node's collective area).

fn main() -> Result<(), pontoon::Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    // The test checks that exactly these processes are gone afterwards.
    println!("rank {} pid {}", world.rank(), std::process::id());
    use std::io::Write;
    std::io::stdout().flush().ok();
    world.sendrecv(&[0u8], (world.rank() + 1) % world.size(), 9, &mut [0u8], None, 9)?;
    // Which rank dies and which one waits for it: `PEER_DIES=victim,waiter` (1,0 by default).
    let roles = std::env::var("PEER_DIES").unwrap_or_else(|_| "1,0".into());
    let (victim, waiter) = roles
        .split_once(',')
        .and_then(|(v, w)| Some((v.parse::<u32>().ok()?, w.parse::<u32>().ok()?)))
        .expect("PEER_DIES=victim,waiter");
    let rank = world.rank();
    if rank == victim {
        let pid = std::process::id().to_string();
        let _ = std::process::Command::new("kill").args(["-9", &pid]).status();
        std::thread::sleep(std::time::Duration::from_secs(30));
    } else if rank == waiter && std::env::var("PEER_DIES_IN").as_deref() == Ok("barrier") {
        if let Err(e) = world.barrier() {
            println!("rank {rank}: barrier failed: {e}");
            std::process::exit(3);
        }
        println!("rank {rank}: unexpectedly left the barrier");
    } else if rank == waiter {
        let mut buf = [0u8; 8];
        match world.recv(&mut buf, Some(victim), 0) {
            Ok(_) => println!("rank {rank}: unexpectedly received a message"),
            Err(e) => {
                println!("rank {rank}: receive from rank {victim} failed: {e}");
                std::process::exit(3);
            }
        }
    } else {
        std::thread::sleep(std::time::Duration::from_secs(30));
    }
    universe.finalize()
}
