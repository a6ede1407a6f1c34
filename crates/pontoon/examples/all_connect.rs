//! Test program: right after init every rank sends to and receives from every other
//! rank at once, so most pairs connect to each other simultaneously. Each pair must
//! end up with exactly one connection and every message must arrive.

fn main() -> Result<(), pontoon::Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    let recvs: Vec<(u32, pontoon::Request<u32>)> = (0..n)
        .filter(|r| *r != me)
        .map(|r| Ok((r, world.irecv(vec![0u32; 2], Some(r), 7)?)))
        .collect::<Result<_, pontoon::Error>>()?;
    let sends: Vec<pontoon::Request<u32>> = (0..n)
        .filter(|r| *r != me)
        .map(|r| world.isend(vec![me, r], r, 7))
        .collect::<Result<_, _>>()?;
    for s in sends {
        s.wait().0?;
    }
    for (r, req) in recvs {
        let (st, v) = req.wait();
        st?;
        assert_eq!(v, vec![r, me], "message from rank {r}");
    }
    let (links, yielded) = universe.diag().wireup_stats();
    println!("rank {me}: {links} connections, {yielded} simultaneous attempts yielded");
    universe.finalize()
}
