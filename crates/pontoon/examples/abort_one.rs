//! Test program: rank 1 aborts while every other rank waits for a message from it. The
//! launcher says once why the job ended; the other ranks exit without repeating it.

fn main() -> Result<(), pontoon::Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    world.barrier()?;
    if world.rank() == 1 {
        universe.abort(5, "rank 1 gives up");
    }
    let mut buf = [0u8];
    world.recv(&mut buf, Some(1), 0)?;
    universe.finalize()
}
