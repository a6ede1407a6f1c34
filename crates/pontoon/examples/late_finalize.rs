//! Test program: rank 0 finalizes at once while the others wait a second before they
//! do. Rank 0 prints how many times it looked at its rarely busy sockets (each look
//! follows a wake-up) while it waited in finalize: a rank waiting there must sleep until
//! something wakes it, not poll every millisecond (with hundreds of ranks on a few
//! CPUs, the ranks that finalized first starved the ones still working).

fn main() -> Result<(), pontoon::Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    world.barrier()?;
    if world.rank() != 0 {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    let (start, passes) = (universe.wtime(), universe.diag().housekeeping_passes());
    universe.finalize()?;
    if world.rank() == 0 {
        println!(
            "# finalize: {} looks in {:.0} ms",
            universe.diag().housekeeping_passes() - passes,
            (universe.wtime() - start) * 1e3
        );
    }
    Ok(())
}
