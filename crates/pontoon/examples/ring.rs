//! Passes a token around all ranks: rank 0 starts it, each rank adds its rank.
//! Run with `pontoon run -n 4 target/release/examples/ring`.

fn main() -> Result<(), pontoon::Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;
    let mut token = [0u64];
    if rank == 0 {
        world.send(&[0u64], next, 1)?;
        world.recv(&mut token, Some(prev), 1)?;
        let expected: u64 = (0..size as u64).sum();
        println!(
            "ring of {size} ranks: token came back to rank 0 with value {} (expected {expected})",
            token[0]
        );
        if token[0] != expected {
            std::process::exit(1);
        }
    } else {
        world.recv(&mut token, Some(prev), 1)?;
        println!(
            "rank {rank} got the token with value {} from rank {prev}",
            token[0]
        );
        world.send(&[token[0] + rank as u64], next, 1)?;
    }
    universe.finalize()
}
