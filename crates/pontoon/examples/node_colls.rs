//! Test program for the collectives of a communicator whose members are exactly one
//! node's ranks (run it on one host): prints how many lanes the first collectives of
//! COMM_WORLD opened (alltoall, barrier, bcast, allgather, allreduce, reduce, gather,
//! scatter: none when they went through the node's collective area), then
//! checks against the reference many rounds of mixed collectives and sizes (on both
//! sides of the area's limits, on COMM_WORLD and a dup, between point-to-point), and
//! broadcasts back to back from a root that runs ahead of members that come late (it
//! must not write over what they still read).

use pontoon::{Comm, Error, Op};

mod common;
use common::ensure;

fn check_round(c: &Comm, round: usize, len: usize) -> Result<(), Error> {
    let (me, p) = (c.rank() as usize, c.size() as usize);
    let val = |r: usize, i: usize| ((r * 131 + i * 7 + round * 3) % 251) as u8;
    match round % 8 {
        0 => {
            let root = round % p;
            let mut buf: Vec<u8> = if me == root {
                (0..len).map(|i| val(root, i)).collect()
            } else {
                vec![0; len]
            };
            c.bcast(&mut buf, root as u32)?;
            ensure(buf.iter().enumerate().all(|(i, &b)| b == val(root, i)), || {
                format!("round {round}: bcast of {len} bytes from {root} differs")
            })
        }
        1 => {
            let mine: Vec<u8> = (0..len).map(|i| val(me, i)).collect();
            let mut all = vec![0u8; len * p];
            c.allgather(&mine, &mut all)?;
            ensure(
                (0..p).all(|r| (0..len).all(|i| all[r * len + i] == val(r, i))),
                || format!("round {round}: allgather of {len} bytes differs"),
            )
        }
        2 => {
            let block = len.div_ceil(p).max(1);
            let send: Vec<u8> = (0..block * p).map(|i| val(me, i)).collect();
            let mut recv = vec![0u8; block * p];
            c.alltoall(&send, &mut recv)?;
            ensure(
                (0..p).all(|r| (0..block).all(|i| recv[r * block + i] == val(r, me * block + i))),
                || format!("round {round}: alltoall of {block}-byte blocks differs"),
            )
        }
        3 => {
            let n = len.div_ceil(8).max(1);
            let mine: Vec<i64> = (0..n).map(|i| val(me, i) as i64 - 100).collect();
            let mut sum = vec![0i64; n];
            c.allreduce(&mine, &mut sum, &Op::Sum)?;
            let want: Vec<i64> = (0..n)
                .map(|i| (0..p).map(|r| val(r, i) as i64 - 100).sum())
                .collect();
            ensure(sum == want, || {
                format!("round {round}: allreduce of {n} longs differs")
            })?;
            // Rank order matters: the composition of affine maps x -> a·x + b.
            let affine = Op::user(false, |a: &[i64], b: &mut [i64]| {
                for (x, y) in a.chunks_exact(2).zip(b.chunks_exact_mut(2)) {
                    let r = [(x[0] * y[0]) % 1_000_003, (x[0] * y[1] + x[1]) % 1_000_003];
                    y.copy_from_slice(&r);
                }
            });
            let mine = [(me as i64 % 3) + 1, me as i64 + round as i64];
            let mut got = [0i64; 2];
            c.allreduce(&mine, &mut got, &affine)?;
            let mut want = [1i64, 0];
            for r in (0..p).rev() {
                let x = [(r as i64 % 3) + 1, r as i64 + round as i64];
                want = [(x[0] * want[0]) % 1_000_003, (x[0] * want[1] + x[1]) % 1_000_003];
            }
            ensure(got == want, || {
                format!("round {round}: ordered allreduce {got:?} != {want:?}")
            })
        }
        4 => {
            let root = (round / 8) % p;
            let n = len.div_ceil(8).max(1);
            let mine: Vec<i64> = (0..n).map(|i| val(me, i) as i64).collect();
            let mut got = vec![0i64; if me == root { n } else { 0 }];
            c.reduce(&mine, &mut got, &Op::Max, root as u32)?;
            let want: Vec<i64> = (0..n)
                .map(|i| (0..p).map(|r| val(r, i) as i64).max().unwrap())
                .collect();
            ensure(me != root || got == want, || {
                format!("round {round}: reduce of {n} longs to {root} differs")
            })
        }
        5 => {
            let root = (round / 8 + 1) % p;
            let mine: Vec<u8> = (0..len).map(|i| val(me, i)).collect();
            let mut all = vec![0u8; if me == root { len * p } else { 0 }];
            c.gather(&mine, &mut all, root as u32)?;
            ensure(
                me != root || (0..p).all(|r| (0..len).all(|i| all[r * len + i] == val(r, i))),
                || format!("round {round}: gather of {len} bytes to {root} differs"),
            )
        }
        6 => {
            let root = (round / 8 + 2) % p;
            let block = len.div_ceil(p).max(1);
            let send: Vec<u8> = if me == root {
                (0..block * p).map(|i| val(root, i)).collect()
            } else {
                Vec::new()
            };
            let mut recv = vec![0u8; block];
            c.scatter(&send, Some(&mut recv), root as u32)?;
            ensure((0..block).all(|i| recv[i] == val(root, me * block + i)), || {
                format!("round {round}: scatter of {block}-byte blocks from {root} differs")
            })
        }
        _ => {
            c.barrier()?;
            // Point-to-point between collectives: a ring shift.
            let (to, from) = ((me + 1) % p, (me + p - 1) % p);
            let mut got = [0u8; 3];
            c.sendrecv(&[val(me, 0); 3], to as u32, 5, &mut got, Some(from as u32), 5)?;
            ensure(got == [val(from, 0); 3], || {
                format!("round {round}: ring shift differs")
            })
        }
    }
}

fn main() -> Result<(), Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    let (me, p) = (world.rank(), world.size());

    let send: Vec<u32> = (0..p).map(|j| me * 1000 + j).collect();
    let mut recv = vec![0u32; p as usize];
    world.alltoall(&send, &mut recv)?;
    ensure((0..p).all(|j| recv[j as usize] == j * 1000 + me), || {
        format!("first alltoall: {recv:?}")
    })?;
    world.barrier()?;
    // One of each other kind the area runs, before the lanes are counted.
    for kind in [0, 1, 3, 4, 5, 6] {
        check_round(&world, kind, 8)?;
    }
    let lanes: usize = (0..p)
        .filter(|&r| r != me)
        .map(|r| universe.diag().lanes(r).len())
        .sum();
    println!("rank {me}: {lanes} lanes after the first collectives");

    // Back to back from root 0, the others late: the root's ninth broadcast reuses
    // the first one's buffer and must wait until every member read it.
    for k in 0..40u64 {
        if me != 0 && k % 10 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut v = [if me == 0 { k * 17 + 1 } else { 0 }; 5];
        world.bcast(&mut v, 0)?;
        ensure(v == [k * 17 + 1; 5], || format!("broadcast {k}: {v:?}"))?;
    }

    let dup = world.dup()?;
    let sizes = [1usize, 8, 24, 25, 1000, 4096, 4097, 20000];
    for round in 0..256 {
        let c = if round % 2 == 0 { &world } else { &dup };
        check_round(c, round, sizes[(round / 2) % sizes.len()])?;
    }
    println!("rank {me}: node collectives agree with the reference");
    universe.finalize()
}
