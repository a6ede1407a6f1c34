//! Every intercommunicator collective against a sequential reference in the protocol
//! simulator: groups of 1 to 5 ranks on each side, every root in either group,
//! different block sizes at the two sides, and a reduction that is not commutative.

#![allow(clippy::needless_range_loop)]

use proptest::prelude::*;

use super::algos::Tuning;
use super::inter::{schedule, InterColl, Sides};
use super::schedule::Schedule;
use super::sim_tests::{data, fold, reduction, run_named, tuning};
use crate::comm::inter::InterRoot;

/// Group A is simulator ranks `0..a`, group B `a..a + b`.
#[derive(Clone, Copy, Debug)]
struct Groups {
    a: u32,
    b: u32,
}

impl Groups {
    fn total(&self) -> u32 {
        self.a + self.b
    }
    fn in_a(&self, w: u32) -> bool {
        w < self.a
    }
    /// Simulator rank `w`'s place, and the simulator ranks its schedule names.
    fn sides(&self, w: u32) -> (Sides, Vec<u32>) {
        let (a, b) = (0..self.a, self.a..self.total());
        if self.in_a(w) {
            let x = Sides {
                me: w,
                local: self.a,
                remote: self.b,
            };
            (x, a.chain(b).collect())
        } else {
            let x = Sides {
                me: w - self.a,
                local: self.b,
                remote: self.a,
            };
            (x, b.chain(a).collect())
        }
    }
    /// The simulator ranks of `w`'s own group and of the other group.
    fn split(&self, w: u32) -> (Vec<u32>, Vec<u32>) {
        let (a, b): (Vec<u32>, Vec<u32>) = ((0..self.a).collect(), (self.a..self.total()).collect());
        if self.in_a(w) {
            (a, b)
        } else {
            (b, a)
        }
    }
    /// How each rank sees a root at simulator rank `root`.
    fn root(&self, root: u32, w: u32) -> InterRoot {
        if w == root {
            InterRoot::Here
        } else if self.in_a(w) == self.in_a(root) {
            InterRoot::ElsewhereHere
        } else {
            InterRoot::Remote(if self.in_a(root) { root } else { root - self.a })
        }
    }
}

fn run(
    g: Groups,
    what: impl Fn(u32, Sides) -> InterColl,
    t: &Tuning,
    ins: &[Vec<u8>],
    outs: &[Vec<u8>],
    op: Option<(crate::Op, crate::Datatype)>,
    seed: u64,
) -> Vec<Vec<u8>> {
    let commutative = op.as_ref().is_none_or(|(o, _)| o.is_commutative());
    let build = |w: u32| -> (Schedule, Vec<u32>) {
        let (x, named) = g.sides(w);
        (schedule(x, &what(w, x), t, commutative), named)
    };
    run_named(g.total(), build, ins, outs, op, seed)
}

fn case() -> impl Strategy<Value = (Groups, u32, usize, u8, bool, u64)> {
    (
        1u32..6,
        1u32..5,
        any::<u32>(),
        0usize..12,
        0u8..6,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(a, b, root, count, kind, long, seed)| {
            let g = Groups { a, b };
            (g, root % g.total(), count, kind, long, seed)
        })
}

/// `n` bytes that name their rank, block and place.
fn block(w: u32, j: usize, n: usize) -> Vec<u8> {
    (0..n).map(|i| (w as usize * 31 + j * 7 + i) as u8).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn rooted_collectives_reach_the_other_group((g, root, count, kind, long, seed) in case()) {
        let t = tuning(long);
        let p = g.total() as usize;
        let (own, other) = g.split(root);
        let none = vec![Vec::new(); p];
        // bcast: the root's output to every output of the other group
        let n = count * 5;
        let want = block(root, 0, n);
        let outs: Vec<Vec<u8>> = (0..p as u32).map(|w| if w == root { want.clone() } else { vec![0; n] }).collect();
        let got = run(g, |w, _| InterColl::Bcast { root: g.root(root, w), bytes: n }, &t, &none, &outs, None, seed);
        for &w in &other {
            prop_assert_eq!(&got[w as usize], &want, "bcast to {}", w);
        }
        // reduce: the other group's inputs in rank order
        let mut rng = proto::sim::Rng::new(seed);
        let (op, dt) = reduction(kind);
        let ins: Vec<Vec<u8>> = (0..p).map(|_| data(kind, count + 1, &mut rng)).collect();
        let bytes = ins[0].len();
        let outs: Vec<Vec<u8>> = (0..p as u32).map(|w| if w == root { vec![0; bytes] } else { Vec::new() }).collect();
        let got = run(g, |w, _| InterColl::Reduce { root: g.root(root, w), bytes }, &t, &ins, &outs, Some((op.clone(), dt.clone())), seed);
        let parts: Vec<&[u8]> = other.iter().map(|&w| ins[w as usize].as_slice()).collect();
        prop_assert_eq!(&got[root as usize], &fold(&op, &dt, &parts), "reduce");
        // gather and scatter: blocks of different sizes at the two sides
        let (send, recv) = (count + 1, count + 1);
        let ins: Vec<Vec<u8>> = (0..p as u32).map(|w| block(w, 0, send)).collect();
        let outs: Vec<Vec<u8>> = (0..p as u32).map(|w| if w == root { vec![0; other.len() * recv] } else { Vec::new() }).collect();
        let got = run(g, |w, _| InterColl::Gather { root: g.root(root, w), send, recv }, &t, &ins, &outs, None, seed);
        let all: Vec<u8> = other.iter().flat_map(|&w| ins[w as usize].clone()).collect();
        prop_assert_eq!(&got[root as usize], &all, "gather");
        let ins: Vec<Vec<u8>> = (0..p as u32).map(|w| if w == root { (0..other.len()).flat_map(|j| block(root, j, send)).collect() } else { Vec::new() }).collect();
        let outs: Vec<Vec<u8>> = (0..p as u32).map(|w| if own.contains(&w) { Vec::new() } else { vec![0; recv] }).collect();
        let got = run(g, |w, _| InterColl::Scatter { root: g.root(root, w), send, recv }, &t, &ins, &outs, None, seed);
        for (j, &w) in other.iter().enumerate() {
            prop_assert_eq!(&got[w as usize], &block(root, j, send), "scatter to {}", w);
        }
        // gatherv and scatterv: blocks out of order, with gaps, some empty
        let lens: Vec<usize> = other.iter().map(|&w| (w as usize * 3 + count) % 7).collect();
        let mut blocks = vec![(0, 0); other.len()];
        let mut at = 2;
        for j in (0..other.len()).rev() {
            blocks[j] = (at, lens[j]);
            at += lens[j] + 1;
        }
        let sent = |w: u32| block(w, 1, lens[other.iter().position(|&o| o == w).unwrap_or(0)]);
        let ins: Vec<Vec<u8>> = (0..p as u32).map(|w| if own.contains(&w) { Vec::new() } else { sent(w) }).collect();
        let outs: Vec<Vec<u8>> = (0..p as u32).map(|w| if w == root { vec![0xee; at] } else { Vec::new() }).collect();
        let got = run(g, |w, _| {
            let r = g.root(root, w);
            let send = ins[w as usize].len();
            InterColl::Gatherv { root: r, send, blocks: if r == InterRoot::Here { blocks.clone() } else { Vec::new() } }
        }, &t, &ins, &outs, None, seed);
        for (j, &w) in other.iter().enumerate() {
            let (off, len) = blocks[j];
            prop_assert_eq!(got[root as usize][off..off + len].to_vec(), sent(w), "gatherv from {}", w);
        }
        let mut packed = vec![0xee; at];
        for (j, &w) in other.iter().enumerate() {
            let (off, len) = blocks[j];
            packed[off..off + len].copy_from_slice(&sent(w));
        }
        let ins: Vec<Vec<u8>> = (0..p as u32).map(|w| if w == root { packed.clone() } else { Vec::new() }).collect();
        let outs: Vec<Vec<u8>> = (0..p as u32).map(|w| if own.contains(&w) { Vec::new() } else { vec![0; sent(w).len()] }).collect();
        let got = run(g, |w, _| {
            let r = g.root(root, w);
            InterColl::Scatterv { root: r, blocks: if r == InterRoot::Here { blocks.clone() } else { Vec::new() }, recv: outs[w as usize].len() }
        }, &t, &ins, &outs, None, seed);
        for &w in &other {
            prop_assert_eq!(&got[w as usize], &sent(w), "scatterv to {}", w);
        }
    }

    #[test]
    fn all_to_all_collectives_swap_the_groups_data((g, _root, count, kind, long, seed) in case()) {
        let t = tuning(long);
        let p = g.total() as usize;
        let none = vec![Vec::new(); p];
        // barrier: completes
        run(g, |_, _| InterColl::Barrier, &t, &none, &none, None, seed);
        // allreduce: each group gets the other's reduction
        let mut rng = proto::sim::Rng::new(seed);
        let (op, dt) = reduction(kind);
        let ins: Vec<Vec<u8>> = (0..p).map(|_| data(kind, count + 1, &mut rng)).collect();
        let bytes = ins[0].len();
        let outs = vec![vec![0xa5; bytes]; p];
        let got = run(g, |_, _| InterColl::Allreduce { bytes }, &t, &ins, &outs, Some((op.clone(), dt.clone())), seed);
        for w in 0..p as u32 {
            let parts: Vec<&[u8]> = g.split(w).1.iter().map(|&o| ins[o as usize].as_slice()).collect();
            prop_assert_eq!(&got[w as usize], &fold(&op, &dt, &parts), "allreduce at {}", w);
        }
        // reduce_scatter: the other group's reduction, split by this group's counts
        let elem = dt.size() as usize;
        let elems = bytes / elem;
        let split = |n: u32, salt: usize| -> Vec<(usize, usize)> {
            let mut cuts: Vec<usize> = (1..n as usize).map(|i| (i * 5 + salt) % (elems + 1)).collect();
            cuts.sort();
            let mut edges = vec![0];
            edges.extend(cuts);
            edges.push(elems);
            edges.windows(2).map(|e| (e[0] * elem, (e[1] - e[0]) * elem)).collect()
        };
        let (ba, bb) = (split(g.a, 1), split(g.b, 3));
        let mine = |w: u32| if g.in_a(w) { ba[w as usize] } else { bb[(w - g.a) as usize] };
        let outs: Vec<Vec<u8>> = (0..p as u32).map(|w| vec![0; mine(w).1]).collect();
        let got = run(g, |w, _| InterColl::ReduceScatter { bytes, blocks: if g.in_a(w) { ba.clone() } else { bb.clone() } }, &t, &ins, &outs, Some((op.clone(), dt.clone())), seed);
        for w in 0..p as u32 {
            let parts: Vec<&[u8]> = g.split(w).1.iter().map(|&o| ins[o as usize].as_slice()).collect();
            let (off, len) = mine(w);
            prop_assert_eq!(&got[w as usize][..], &fold(&op, &dt, &parts)[off..off + len], "reduce_scatter at {}", w);
        }
        // allgather: group A sends `count + 1` bytes each, group B `count + 2`
        let size = |w: u32| if g.in_a(w) { count + 1 } else { count + 2 };
        let ins: Vec<Vec<u8>> = (0..p as u32).map(|w| block(w, 0, size(w))).collect();
        let outs: Vec<Vec<u8>> = (0..p as u32).map(|w| { let o = g.split(w).1; vec![0; o.len() * size(o[0])] }).collect();
        let got = run(g, |w, _| { let o = g.split(w).1[0]; InterColl::Allgather { send: size(w), recv: size(o) } }, &t, &ins, &outs, None, seed);
        for w in 0..p as u32 {
            let want: Vec<u8> = g.split(w).1.iter().flat_map(|&o| ins[o as usize].clone()).collect();
            prop_assert_eq!(&got[w as usize], &want, "allgather at {}", w);
        }
        // allgatherv: each rank's own size, placed backwards with gaps
        let vsize = |w: u32| (w as usize * 5 + count) % 6;
        let placed = |others: &[u32]| -> (Vec<(usize, usize)>, usize) {
            let mut b = vec![(0, 0); others.len()];
            let mut at = 1;
            for j in (0..others.len()).rev() {
                b[j] = (at, vsize(others[j]));
                at += b[j].1 + 3;
            }
            (b, at)
        };
        let ins: Vec<Vec<u8>> = (0..p as u32).map(|w| block(w, 2, vsize(w))).collect();
        let outs: Vec<Vec<u8>> = (0..p as u32).map(|w| vec![0; placed(&g.split(w).1).1]).collect();
        let got = run(g, |w, _| InterColl::Allgatherv { send: vsize(w), blocks: placed(&g.split(w).1).0 }, &t, &ins, &outs, None, seed);
        for w in 0..p as u32 {
            let others = g.split(w).1;
            let (b, _) = placed(&others);
            for (j, &o) in others.iter().enumerate() {
                prop_assert_eq!(&got[w as usize][b[j].0..b[j].0 + b[j].1], ins[o as usize].as_slice(), "allgatherv {} at {}", o, w);
            }
        }
        // alltoallv: what w sends o has its own size, o's block j is w's
        let pair = |from: u32, to: u32| (from as usize * 3 + to as usize * 5 + count) % 5;
        let lay = |sizes: Vec<usize>| -> (Vec<(usize, usize)>, usize) {
            let mut at = 0;
            let b = sizes.iter().map(|&n| { let x = (at, n); at += n + 1; x }).collect();
            (b, at)
        };
        let sends = |w: u32| lay(g.split(w).1.iter().map(|&o| pair(w, o)).collect());
        let recvs = |w: u32| lay(g.split(w).1.iter().map(|&o| pair(o, w)).collect());
        let ins: Vec<Vec<u8>> = (0..p as u32).map(|w| {
            let (b, len) = sends(w);
            let mut v = vec![0xcc; len];
            for (j, &o) in g.split(w).1.iter().enumerate() {
                v[b[j].0..b[j].0 + b[j].1].copy_from_slice(&block(w, o as usize, b[j].1));
            }
            v
        }).collect();
        let outs: Vec<Vec<u8>> = (0..p as u32).map(|w| vec![0; recvs(w).1]).collect();
        let got = run(g, |w, _| InterColl::Alltoallv { send: sends(w).0, recv: recvs(w).0 }, &t, &ins, &outs, None, seed);
        for w in 0..p as u32 {
            let (b, _) = recvs(w);
            for (j, &o) in g.split(w).1.iter().enumerate() {
                prop_assert_eq!(got[w as usize][b[j].0..b[j].0 + b[j].1].to_vec(), block(o, w as usize, pair(o, w)), "alltoallv {} to {}", o, w);
            }
        }
    }
}
