//! Test program: non-blocking collectives. Several run at once and are waited for in
//! reverse order; then one must advance in the background while its rank is blocked
//! in an unrelated receive (rank 0 starts an ibarrier and blocks on a message rank 2
//! sends only after its own ibarrier completed, which needs rank 0's second round).

use pontoon::{Error, Op};

mod common;
use common::ensure;

fn main() -> Result<(), Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    let (me, p) = (world.rank(), world.size());
    let pu = p as usize;
    for n in [1usize, 100, 40_000] {
        let root = (n as u32) % p;
        let b = world.ibcast(
            if me == root {
                vec![7u64 + n as u64; n]
            } else {
                vec![0; n]
            },
            root,
        )?;
        let a = world.iallreduce(vec![me as i64 + 1; n], &Op::Sum)?;
        let r = world.ireduce(vec![me as i32; n], &Op::Max, 0)?;
        let g = world.iallgather(vec![me; n]);
        let t = world.ialltoall((0..pu * n).map(|i| (me as usize * 1000 + i / n) as u32).collect());
        let bar = world.ibarrier();
        // Unrelated point-to-point traffic meanwhile.
        if p > 1 {
            world.sendrecv(&[me], (me + 1) % p, 1, &mut [0u32], Some((me + p - 1) % p), 1)?;
        }
        bar.wait().0?;
        let (st, v) = t.wait();
        st?;
        let want: Vec<u32> = (0..pu)
            .flat_map(|r| vec![(r * 1000 + me as usize) as u32; n])
            .collect();
        ensure(v == want, || format!("ialltoall of {n}"))?;
        let (st, v) = g.wait();
        st?;
        ensure(v == (0..p).flat_map(|r| vec![r; n]).collect::<Vec<_>>(), || {
            format!("iallgather of {n}")
        })?;
        let (st, v) = r.wait();
        st?;
        ensure(me != 0 || v == vec![p as i32 - 1; n], || {
            format!("ireduce of {n}")
        })?;
        let (st, v) = a.wait();
        st?;
        ensure(v == vec![(p * (p + 1) / 2) as i64; n], || {
            format!("iallreduce of {n}")
        })?;
        let (st, v) = b.wait();
        st?;
        ensure(v == vec![7 + n as u64; n], || format!("ibcast of {n}"))?;
    }
    println!("rank {me}: six non-blocking collectives at once agree with the reference");

    if p >= 4 {
        // Rank 0 starts first and tells the others to start only then, so none of its
        // later rounds can be posted before it blocks.
        world.barrier()?;
        if me == 0 {
            let bar = world.ibarrier();
            for r in 1..p {
                world.send(&[0u32], r, 8)?;
            }
            let mut got = [0u32];
            world.recv(&mut got, Some(2), 9)?;
            bar.wait().0?;
        } else {
            world.recv(&mut [0u32], Some(0), 8)?;
            let bar = world.ibarrier();
            bar.wait().0?;
            if me == 2 {
                world.send(&[1u32], 0, 9)?;
            }
        }
        println!("rank {me}: an ibarrier advanced while its rank was blocked in a receive");
    }
    universe.finalize()
}
