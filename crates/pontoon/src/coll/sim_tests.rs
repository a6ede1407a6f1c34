//! Every collective algorithm against a sequential reference, in the protocol
//! simulator: communicator sizes 1, 2, 3, 5, 7, 8, 13, 16, every root, in place or
//! not, short and long algorithms, and reductions that are commutative or not
//! (a user-defined 2×2 matrix product, where MPI fixes the rank order).

#![allow(clippy::needless_range_loop)]

use proptest::prelude::*;
use proto::sim::{Completion, Sim, SimConfig};
use runtime::Buffer;

use super::algos::{self, Shape, Tuning};
use super::choose;
use super::hier::{self, Sites};
use super::schedule::{region, P2p, Running, Schedule, Xfer, INPUT, OUTPUT};
use crate::datatype::{Basic, Datatype, PairValue};
use crate::op::Op;
use crate::{Error, Result};

const SIZES: [u32; 8] = [1, 2, 3, 5, 7, 8, 13, 16];
const CTX: u32 = 1;
const TAG: i32 = 5;

type SimReq = (u64, Option<Buffer>);

struct SimRank<'a> {
    sim: &'a mut Sim,
    rank: u32,
    /// The simulator rank of each rank the schedule names.
    members: &'a [u32],
}

impl P2p for SimRank<'_> {
    type Req = SimReq;
    fn isend(&mut self, peer: u32, data: Buffer) -> Result<Self::Req> {
        let v = data.slice(0, data.len() as u64).to_vec();
        let to = self.members[peer as usize];
        Ok((self.sim.isend(self.rank, to, CTX, TAG, v, false), None))
    }
    fn irecv(&mut self, peer: u32, into: Buffer) -> Result<Self::Req> {
        let from = self.members[peer as usize] as i32;
        let id = self.sim.irecv(self.rank, from, CTX, TAG, into.len());
        Ok((id, Some(into)))
    }
    fn poll(&mut self, pending: &mut Vec<Self::Req>) -> Result<()> {
        let mut i = 0;
        while i < pending.len() {
            let (id, buf) = &pending[i];
            match self.sim.completion(self.rank, *id) {
                None => i += 1,
                Some(Completion::Sent(r)) => {
                    r.clone().map_err(Error::Peer)?;
                    pending.swap_remove(i);
                }
                Some(Completion::Cancelled) => {
                    return Err(Error::Arg("a schedule's send was cancelled".into()))
                }
                Some(Completion::Received(r)) => {
                    let st = r.clone().map_err(Error::Peer)?;
                    if st.truncated {
                        return Err(Error::Arg(format!("truncated message from {}", st.source)));
                    }
                    let b = buf.as_ref().expect("a receive has its buffer");
                    assert_eq!(
                        st.count as usize,
                        b.len(),
                        "rank {} got a short message",
                        self.rank
                    );
                    b.write_at(0, self.sim.recv_buf(self.rank, *id));
                    pending.swap_remove(i);
                }
            }
        }
        Ok(())
    }
    fn wait_all(&mut self, pending: &mut Vec<Self::Req>) -> Result<()> {
        // The simulator cannot block: the driver steps it between polls.
        self.poll(pending)
    }
}

/// Runs one schedule per rank to the end; returns every rank's output buffer.
fn run(
    p: u32,
    build: impl Fn(Shape) -> Schedule,
    inputs: &[Vec<u8>],
    outputs: &[Vec<u8>],
    op: Option<(Op, Datatype)>,
    seed: u64,
) -> Vec<Vec<u8>> {
    let all: Vec<u32> = (0..p).collect();
    let build = |r| (build(Shape { rank: r, size: p }), all.clone());
    run_named(p, build, inputs, outputs, op, seed)
}

/// [`run`] where each rank's schedule comes with the simulator ranks it names.
pub(super) fn run_named(
    p: u32,
    build: impl Fn(u32) -> (Schedule, Vec<u32>),
    inputs: &[Vec<u8>],
    outputs: &[Vec<u8>],
    op: Option<(Op, Datatype)>,
    seed: u64,
) -> Vec<Vec<u8>> {
    let mut sim = Sim::new(SimConfig {
        ranks: p,
        lanes: 1 + (seed % 2) as usize,
        latency_ns: (500, 5_000),
        jitter_ns: 2_000,
        mtu: 512,
        eager_limit: 256,
        seed,
        ..SimConfig::default()
    });
    let mut members = Vec::new();
    let mut runs: Vec<Option<Running<SimReq>>> = (0..p)
        .map(|r| {
            let (sched, named) = build(r);
            members.push(named);
            let input = Buffer::owned(inputs[r as usize].clone());
            let output = Buffer::owned(outputs[r as usize].clone());
            Some(Running::new(sched, input, output, op.clone()))
        })
        .collect();
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); p as usize];
    loop {
        for r in 0..p {
            let Some(run) = runs[r as usize].as_mut() else {
                continue;
            };
            let mut me = SimRank {
                sim: &mut sim,
                rank: r,
                members: &members[r as usize],
            };
            if run.advance(&mut me, false).expect("no failure in the simulator") {
                let done = runs[r as usize].take().expect("running");
                out[r as usize] = done.finish(&mut me).into_vec().expect("owned and unshared");
            }
        }
        if runs.iter().all(Option::is_none) {
            return out;
        }
        assert!(sim.step(), "deadlock: ranks still waiting but nothing in flight");
    }
}

/// The reductions under test: (op, datatype, element size, commutative).
pub(super) fn reduction(kind: u8) -> (Op, Datatype) {
    match kind % 6 {
        0 => (Op::Sum, Datatype::basic(Basic::I32)),
        1 => (Op::Max, Datatype::basic(Basic::F64)),
        2 => (Op::Bxor, Datatype::basic(Basic::U8)),
        3 => (Op::Minloc, Datatype::basic(Basic::Pair(PairValue::F64))),
        4 => (
            matrix_product(),
            Datatype::basic(Basic::I32).contiguous(4).expect("small"),
        ),
        _ => (Op::Prod, Datatype::basic(Basic::I64)),
    }
}

/// 2×2 integer matrices, `inout = input × inout`: not commutative.
fn matrix_product() -> Op {
    Op::user(false, |a: &[i32], b: &mut [i32]| {
        for (x, y) in a.chunks_exact(4).zip(b.chunks_exact_mut(4)) {
            let r = [
                x[0].wrapping_mul(y[0]).wrapping_add(x[1].wrapping_mul(y[2])),
                x[0].wrapping_mul(y[1]).wrapping_add(x[1].wrapping_mul(y[3])),
                x[2].wrapping_mul(y[0]).wrapping_add(x[3].wrapping_mul(y[2])),
                x[2].wrapping_mul(y[1]).wrapping_add(x[3].wrapping_mul(y[3])),
            ];
            y.copy_from_slice(&r);
        }
    })
}

/// `count` random elements of the datatype of reduction `kind` (no NaNs; small
/// values so MINLOC sees ties).
pub(super) fn data(kind: u8, count: usize, rng: &mut proto::sim::Rng) -> Vec<u8> {
    let mut v = Vec::new();
    for _ in 0..count {
        match kind % 6 {
            1 => v.extend_from_slice(&(rng.range(0, 1000) as f64 - 500.0).to_ne_bytes()),
            3 => {
                v.extend_from_slice(&(rng.range(0, 4) as f64).to_ne_bytes());
                v.extend_from_slice(&(rng.range(0, 100) as i32).to_ne_bytes());
            }
            4 => (0..4).for_each(|_| v.extend_from_slice(&(rng.range(0, 7) as i32 - 3).to_ne_bytes())),
            _ => {
                let size = reduction(kind).1.size();
                (0..size).for_each(|_| v.push(rng.range(0, 256) as u8));
            }
        }
    }
    v
}

/// Sequential reference: contributions combined in rank order.
pub(super) fn fold(op: &Op, dt: &Datatype, parts: &[&[u8]]) -> Vec<u8> {
    let count = parts[0].len() as u64 / dt.size();
    let mut acc = parts[0].to_vec();
    for x in &parts[1..] {
        let mut next = x.to_vec();
        op.apply(dt, count, &acc, &mut next).expect("valid reduction");
        acc = next;
    }
    acc
}

pub(super) fn tuning(long: bool) -> Tuning {
    if long {
        // Tiny switch points: the long-message algorithms on small data.
        Tuning {
            bcast_long: 1,
            allreduce_long: 1,
            allgather_long: 1,
            alltoall_short: 0,
            alltoall_long: 1,
            gather_long: 1,
            site_piece: 1,
            site_aware: true,
        }
    } else {
        Tuning::default()
    }
}

fn setup(p: u32, count: usize, kind: u8, seed: u64) -> (Vec<Vec<u8>>, (Op, Datatype)) {
    let mut rng = proto::sim::Rng::new(seed);
    let inputs = (0..p).map(|_| data(kind, count, &mut rng)).collect();
    (inputs, reduction(kind))
}

fn case() -> impl Strategy<Value = (u32, u32, usize, u8, bool, bool, u64)> {
    (
        0..SIZES.len(),
        any::<u32>(),
        0usize..24,
        0u8..6,
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(i, root, count, kind, in_place, long, seed)| {
            let p = SIZES[i];
            (p, root % p, count, kind, in_place, long, seed)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn allreduce_matches_the_reference((p, _root, count, kind, in_place, long, seed) in case()) {
        let (inputs, (op, dt)) = setup(p, count + 1, kind, seed);
        let n = inputs[0].len();
        let commutative = op.is_commutative();
        let t = tuning(long);
        let (src, ins, outs) = if in_place {
            (OUTPUT, vec![Vec::new(); p as usize], inputs.clone())
        } else {
            // Garbage where the result goes: nothing may read it before writing it.
            (INPUT, inputs.clone(), vec![vec![0xa5; n]; p as usize])
        };
        let elem = dt.size() as usize;
        let got = run(p, |sh| algos::allreduce(sh, src, OUTPUT, n, elem, commutative, &t), &ins, &outs, Some((op.clone(), dt.clone())), seed);
        let parts: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        let want = fold(&op, &dt, &parts);
        for (r, g) in got.iter().enumerate() {
            prop_assert_eq!(g, &want, "rank {} of {}", r, p);
        }
    }

    #[test]
    fn reduce_matches_the_reference((p, root, count, kind, in_place, _long, seed) in case()) {
        let (inputs, (op, dt)) = setup(p, count, kind, seed);
        let n = inputs[0].len();
        let commutative = op.is_commutative();
        let mut ins = inputs.clone();
        let mut outs = vec![Vec::new(); p as usize];
        outs[root as usize] = vec![0; n];
        let src_at = |r: u32| if in_place && r == root { OUTPUT } else { INPUT };
        if in_place {
            outs[root as usize] = std::mem::take(&mut ins[root as usize]);
        }
        let got = run(p, |sh| algos::reduce(sh, root, src_at(sh.rank), OUTPUT, n, commutative), &ins, &outs, Some((op.clone(), dt.clone())), seed);
        let parts: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        prop_assert_eq!(&got[root as usize], &fold(&op, &dt, &parts));
    }

    #[test]
    fn bcast_copies_the_roots_buffer((p, root, count, _kind, _in_place, long, seed) in case()) {
        let n = count * 37;
        let t = tuning(long);
        let mut outs = vec![vec![0u8; n]; p as usize];
        let want: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
        outs[root as usize] = want.clone();
        let got = run(p, |sh| algos::bcast(sh, root, OUTPUT, n, &t), &vec![Vec::new(); p as usize], &outs, None, seed);
        for g in &got {
            prop_assert_eq!(g, &want);
        }
    }

    #[test]
    fn gather_scatter_allgather_alltoall_move_every_block((p, root, count, _kind, in_place, long, seed) in case()) {
        let n = count * 3;
        let t = tuning(long);
        let pu = p as usize;
        let block = |r: usize, j: usize| -> Vec<u8> { (0..n).map(|i| (r * 31 + j * 7 + i) as u8).collect() };
        let empty = vec![Vec::new(); pu];
        // gather
        let ins: Vec<Vec<u8>> = (0..pu).map(|r| block(r, 0)).collect();
        let all: Vec<u8> = ins.concat();
        let mut outs = vec![Vec::new(); pu];
        outs[root as usize] = if in_place { let mut o = vec![0; n * pu]; o[root as usize * n..][..n].copy_from_slice(&ins[root as usize]); o } else { vec![0; n * pu] };
        let got = run(p, |sh| algos::gather(sh, root, (!(in_place && sh.rank == root)).then_some(INPUT), OUTPUT, n, &t), &ins, &outs, None, seed);
        prop_assert_eq!(&got[root as usize], &all, "gather");
        // scatter
        let mut sins = empty.clone();
        sins[root as usize] = all.clone();
        let souts: Vec<Vec<u8>> = (0..pu).map(|r| if in_place && r == root as usize { Vec::new() } else { vec![0; n] }).collect();
        let got = run(p, |sh| algos::scatter(sh, root, INPUT, (!(in_place && sh.rank == root)).then_some(OUTPUT), n, &t), &sins, &souts, None, seed);
        for r in 0..pu {
            if !(in_place && r == root as usize) {
                prop_assert_eq!(&got[r], &ins[r], "scatter to {}", r);
            }
        }
        // allgather
        let aouts: Vec<Vec<u8>> = (0..pu).map(|r| if in_place { let mut o = vec![0; n * pu]; o[r * n..][..n].copy_from_slice(&ins[r]); o } else { vec![0; n * pu] }).collect();
        let got = run(p, |sh| algos::allgather(sh, (!in_place).then_some(INPUT), OUTPUT, n, &t), &ins, &aouts, None, seed);
        for g in &got {
            prop_assert_eq!(g, &all, "allgather");
        }
        // alltoall: block j of rank r goes to block r of rank j
        let tins: Vec<Vec<u8>> = (0..pu).map(|r| (0..pu).flat_map(|j| block(r, j)).collect()).collect();
        let touts: Vec<Vec<u8>> = if in_place { tins.clone() } else { vec![vec![0; n * pu]; pu] };
        let got = run(p, |sh| algos::alltoall(sh, (!in_place).then_some(INPUT), OUTPUT, n, &t), &tins, &touts, None, seed);
        for (j, g) in got.iter().enumerate() {
            let want: Vec<u8> = (0..pu).flat_map(|r| block(r, j)).collect();
            prop_assert_eq!(g, &want, "alltoall at {}", j);
        }
        // Bruck's alltoall at every size (by default only from 8 ranks on)
        let got = run(p, |sh| algos::alltoall_bruck(sh, (!in_place).then_some(INPUT), OUTPUT, n), &tins, &touts, None, seed);
        for (j, g) in got.iter().enumerate() {
            let want: Vec<u8> = (0..pu).flat_map(|r| block(r, j)).collect();
            prop_assert_eq!(g, &want, "Bruck's alltoall at {}", j);
        }
    }

    #[test]
    fn v_variants_move_blocks_of_different_sizes((p, root, count, _kind, _in_place, _long, seed) in case()) {
        let pu = p as usize;
        let mut rng = proto::sim::Rng::new(seed);
        let lens: Vec<usize> = (0..pu).map(|_| rng.range(0, count as u64 + 1) as usize).collect();
        // Blocks placed out of order with gaps: displacements from the end backwards.
        let mut blocks = vec![(0, 0); pu];
        let mut at = 3;
        for r in (0..pu).rev() {
            blocks[r] = (at, lens[r]);
            at += lens[r] + 2;
        }
        let total = at;
        let data = |r: usize| -> Vec<u8> { (0..lens[r]).map(|i| (r * 13 + i + 1) as u8).collect() };
        let mut want = vec![0u8; total];
        for r in 0..pu {
            want[blocks[r].0..][..lens[r]].copy_from_slice(&data(r));
        }
        let ins: Vec<Vec<u8>> = (0..pu).map(data).collect();
        let mut outs = vec![Vec::new(); pu];
        outs[root as usize] = vec![0; total];
        let got = run(p, |sh| algos::gatherv(sh, root, Some(region(INPUT, 0, lens[sh.rank as usize])), OUTPUT, &blocks), &ins, &outs, None, seed);
        prop_assert_eq!(&got[root as usize], &want, "gatherv");
        let mut sins = vec![Vec::new(); pu];
        sins[root as usize] = want.clone();
        let souts: Vec<Vec<u8>> = (0..pu).map(|r| vec![0; lens[r]]).collect();
        let got = run(p, |sh| algos::scatterv(sh, root, INPUT, &blocks, Some(region(OUTPUT, 0, lens[sh.rank as usize]))), &sins, &souts, None, seed);
        for r in 0..pu {
            prop_assert_eq!(&got[r], &data(r), "scatterv to {}", r);
        }
        let got = run(p, |sh| algos::allgatherv(sh, Some(region(INPUT, 0, lens[sh.rank as usize])), OUTPUT, &blocks), &ins, &vec![vec![0; total]; pu], None, seed);
        for g in &got {
            prop_assert_eq!(g, &want, "allgatherv");
        }
    }

    #[test]
    fn reduce_scatter_and_scans_match_the_reference((p, _root, count, kind, in_place, _long, seed) in case()) {
        let pu = p as usize;
        let (_, (op, dt)) = setup(p, 1, kind, seed);
        let es = dt.size() as usize;
        let mut rng = proto::sim::Rng::new(seed ^ 1);
        let counts: Vec<usize> = (0..pu).map(|_| rng.range(0, count as u64 + 1) as usize).collect();
        let total: usize = counts.iter().sum();
        let inputs: Vec<Vec<u8>> = (0..pu).map(|_| data(kind, total, &mut rng)).collect();
        let parts: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        let whole = if total > 0 { fold(&op, &dt, &parts) } else { Vec::new() };
        let byte_counts: Vec<usize> = counts.iter().map(|c| c * es).collect();
        let (src, ins, outs) = if in_place {
            (OUTPUT, vec![Vec::new(); pu], inputs.clone())
        } else {
            (INPUT, inputs.clone(), byte_counts.iter().map(|c| vec![0; *c]).collect())
        };
        let commutative = op.is_commutative();
        let got = run(p, |sh| algos::reduce_scatter(sh, src, OUTPUT, &byte_counts, commutative), &ins, &outs, Some((op.clone(), dt.clone())), seed);
        let mut at = 0;
        for r in 0..pu {
            prop_assert_eq!(&got[r][..byte_counts[r]], &whole[at..at + byte_counts[r]], "reduce_scatter block {}", r);
            at += byte_counts[r];
        }
        // scan and exscan on vectors of `count + 1` elements
        let inputs: Vec<Vec<u8>> = (0..pu).map(|_| data(kind, count + 1, &mut rng)).collect();
        let n = inputs[0].len();
        for exclusive in [false, true] {
            let (src, ins, outs) = if in_place {
                (OUTPUT, vec![Vec::new(); pu], inputs.clone())
            } else {
                (INPUT, inputs.clone(), vec![vec![0; n]; pu])
            };
            let got = run(p, |sh| algos::scan(sh, src, OUTPUT, n, commutative, exclusive), &ins, &outs, Some((op.clone(), dt.clone())), seed);
            for r in 0..pu {
                let upto = if exclusive { r } else { r + 1 };
                if upto == 0 {
                    continue;
                }
                let parts: Vec<&[u8]> = inputs[..upto].iter().map(Vec::as_slice).collect();
                prop_assert_eq!(&got[r], &fold(&op, &dt, &parts), "{} at rank {}", if exclusive { "exscan" } else { "scan" }, r);
            }
        }
    }
}

#[test]
fn barrier_holds_every_rank_until_the_last_arrives() {
    for p in SIZES {
        // The dissemination barrier: every rank hears (transitively) from every other.
        let got = run(
            p,
            algos::barrier,
            &vec![Vec::new(); p as usize],
            &vec![Vec::new(); p as usize],
            None,
            3,
        );
        assert_eq!(got.len(), p as usize);
        for r in 0..p {
            let s = algos::barrier(Shape { rank: r, size: p });
            let rounds = s.steps.iter().filter(|st| !st.xfers.is_empty()).count();
            assert_eq!(rounds, (p as f64).log2().ceil() as usize, "rounds at {p} ranks");
        }
    }
}

/// `p` ranks spread over `k` sites (all used when `k <= p`), unevenly and interleaved.
fn sites_for(p: u32, k: u32, seed: u64) -> Sites {
    let k = k.min(p).max(1);
    let mut rng = proto::sim::Rng::new(seed ^ 0x517e);
    let mut of: Vec<u32> = (0..p)
        .map(|r| {
            if r < k {
                r
            } else {
                rng.range(0, k as u64 - 1) as u32
            }
        })
        .collect();
    for i in (1..of.len()).rev() {
        of.swap(i, rng.range(0, i as u64) as usize);
    }
    Sites::from_indices(of)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn site_aware_collectives_match_the_reference((p, root, count, kind, in_place, long, seed) in case(), k in 1u32..4) {
        let sites = sites_for(p, k, seed);
        let t = tuning(long);
        let pu = p as usize;
        // bcast from every root
        let n = count * 37;
        let want: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
        let mut outs = vec![vec![0u8; n]; pu];
        outs[root as usize] = want.clone();
        let got = run(p, |sh| hier::bcast(sh, &sites, root, OUTPUT, n, &t), &vec![Vec::new(); pu], &outs, None, seed);
        for g in &got {
            prop_assert_eq!(g, &want, "bcast from {} over {:?}", root, sites);
        }
        // reduce and allreduce, commutative operations only (the others stay flat)
        let kind = if kind == 4 { 0 } else { kind };
        let (inputs, (op, dt)) = setup(p, count + 1, kind, seed);
        let parts: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        let want = fold(&op, &dt, &parts);
        let n = inputs[0].len();
        let (src, ins, outs) = if in_place {
            (OUTPUT, vec![Vec::new(); pu], inputs.clone())
        } else {
            (INPUT, inputs.clone(), vec![vec![0xa5; n]; pu])
        };
        let elem = dt.size() as usize;
        let got = run(p, |sh| hier::allreduce(sh, &sites, src, OUTPUT, n, elem, &t), &ins, &outs, Some((op.clone(), dt.clone())), seed);
        for (r, g) in got.iter().enumerate() {
            prop_assert_eq!(g, &want, "allreduce at {} over {:?}", r, sites);
        }
        let src_at = |r: u32| if in_place && r == root { OUTPUT } else { INPUT };
        let mut rins = inputs.clone();
        let mut routs = vec![Vec::new(); pu];
        routs[root as usize] = vec![0; n];
        if in_place {
            routs[root as usize] = std::mem::take(&mut rins[root as usize]);
        }
        let got = run(p, |sh| hier::reduce(sh, &sites, root, src_at(sh.rank), OUTPUT, n), &rins, &routs, Some((op.clone(), dt.clone())), seed);
        prop_assert_eq!(&got[root as usize], &want, "reduce to {} over {:?}", root, sites);
        // allgather
        let n = count * 3;
        let block = |r: usize| -> Vec<u8> { (0..n).map(|i| (r * 31 + i) as u8).collect() };
        let ins: Vec<Vec<u8>> = (0..pu).map(block).collect();
        let all: Vec<u8> = ins.concat();
        let outs: Vec<Vec<u8>> = (0..pu).map(|r| if in_place { let mut o = vec![0; n * pu]; o[r * n..][..n].copy_from_slice(&ins[r]); o } else { vec![0; n * pu] }).collect();
        let got = run(p, |sh| hier::allgather(sh, &sites, (!in_place).then_some(INPUT), OUTPUT, n, &t), &ins, &outs, None, seed);
        for g in &got {
            prop_assert_eq!(g, &all, "allgather over {:?}", sites);
        }
        // gather to and scatter from every root, in place at the root or not
        let at_root = |r: u32| in_place && r == root;
        let mut gouts = vec![Vec::new(); pu];
        gouts[root as usize] = outs[root as usize].clone();
        let got = run(p, |sh| hier::gather(sh, &sites, root, (!at_root(sh.rank)).then_some(INPUT), OUTPUT, n, &t), &ins, &gouts, None, seed);
        prop_assert_eq!(&got[root as usize], &all, "gather to {} over {:?}", root, sites);
        let mut sins = vec![Vec::new(); pu];
        sins[root as usize] = all.clone();
        let souts: Vec<Vec<u8>> = (0..p).map(|r| if at_root(r) { Vec::new() } else { vec![0; n] }).collect();
        let got = run(p, |sh| hier::scatter(sh, &sites, root, INPUT, (!at_root(sh.rank)).then_some(OUTPUT), n, &t), &sins, &souts, None, seed);
        for r in (0..p).filter(|&r| !at_root(r)) {
            prop_assert_eq!(&got[r as usize], &ins[r as usize], "scatter from {} to {} over {:?}", root, r, sites);
        }
        // barrier: every rank gets through
        let got = run(p, |sh| hier::barrier(sh, &sites, &t), &vec![Vec::new(); pu], &vec![Vec::new(); pu], None, seed);
        prop_assert_eq!(got.len(), pu);
    }

    #[test]
    fn site_aware_v_collectives_and_alltoall_match_the_reference((p, _root, count, _kind, in_place, _long, seed) in case(), k in 1u32..4) {
        let sites = sites_for(p, k, seed);
        let t = Tuning::default();
        let pu = p as usize;
        let mut rng = proto::sim::Rng::new(seed);
        // allgatherv: blocks of different sizes, out of order, with gaps
        let lens: Vec<usize> = (0..pu).map(|_| rng.range(0, count as u64 + 1) as usize).collect();
        let mut blocks = vec![(0, 0); pu];
        let mut at = 5;
        for r in (0..pu).rev() {
            blocks[r] = (at, lens[r]);
            at += lens[r] + 3;
        }
        let data = |r: usize| -> Vec<u8> { (0..lens[r]).map(|i| (r * 29 + i + 7) as u8).collect() };
        let mut want = vec![0u8; at];
        for r in 0..pu {
            want[blocks[r].0..][..lens[r]].copy_from_slice(&data(r));
        }
        let (ins, outs): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (0..pu)
            .map(|r| {
                let mut o = vec![0u8; at];
                if in_place {
                    o[blocks[r].0..][..lens[r]].copy_from_slice(&data(r));
                    (Vec::new(), o)
                } else {
                    (data(r), o)
                }
            })
            .unzip();
        let src = |r: u32| (!in_place).then(|| region(INPUT, 0, lens[r as usize]));
        let got = run(p, |sh| hier::allgatherv(sh, &sites, src(sh.rank), OUTPUT, &blocks, &t), &ins, &outs, None, seed);
        for (r, g) in got.iter().enumerate() {
            prop_assert_eq!(g, &want, "allgatherv at {} over {:?}", r, sites);
        }
        // alltoall of blocks of `count` bytes: block (i -> j) names both
        let n = count;
        let block = |i: usize, j: usize| -> Vec<u8> { (0..n).map(|x| (i * 41 + j * 7 + x) as u8).collect() };
        let sent = |i: usize| -> Vec<u8> { (0..pu).flat_map(|j| block(i, j)).collect() };
        let (ins, outs): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (0..pu)
            .map(|i| if in_place { (Vec::new(), sent(i)) } else { (sent(i), vec![0u8; pu * n]) })
            .unzip();
        let got = run(p, |sh| hier::alltoall(sh, &sites, (!in_place).then_some(INPUT), OUTPUT, n, &t), &ins, &outs, None, seed);
        for (j, g) in got.iter().enumerate() {
            let want: Vec<u8> = (0..pu).flat_map(|i| block(i, j)).collect();
            prop_assert_eq!(g, &want, "alltoall at {} over {:?}", j, sites);
        }
    }
}

/// Messages and bytes that cross between sites, summed over every rank's schedule.
fn crossings(p: u32, sites: &[u32], build: impl Fn(Shape) -> Schedule) -> (usize, usize) {
    (0..p)
        .flat_map(|r| {
            let s = build(Shape { rank: r, size: p });
            s.steps
                .into_iter()
                .flat_map(|st| st.all_xfers().cloned().collect::<Vec<_>>())
                .filter_map(|x| match x {
                    Xfer::Send { peer, from } if sites[peer as usize] != sites[r as usize] => Some(from.len),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .fold((0, 0), |(m, b), len| (m + 1, b + len))
}

#[test]
fn site_aware_collectives_cross_between_two_sites_as_little_as_their_algorithms_allow() {
    // 8 ranks interleaved over two sites (rank i at site i mod 2), as the issue measures.
    let of: Vec<u32> = (0..8).map(|r| r % 2).collect();
    let sites = Sites::from_indices(of.clone());
    let t = Tuning::default();
    let n = 4 << 20;
    let bytes = |c: (usize, usize)| c.1;
    let hier = [
        bytes(crossings(8, &of, |sh| hier::bcast(sh, &sites, 3, OUTPUT, n, &t))),
        bytes(crossings(8, &of, |sh| {
            hier::reduce(sh, &sites, 3, INPUT, OUTPUT, n)
        })),
        bytes(crossings(8, &of, |sh| {
            hier::allreduce(sh, &sites, INPUT, OUTPUT, n, 8, &t)
        })),
        bytes(crossings(8, &of, |sh| {
            hier::allgather(sh, &sites, Some(INPUT), OUTPUT, n / 8, &t)
        })),
    ];
    // The message once one way (bcast, reduce), once each way (allreduce), each site's
    // half once to the other (allgather).
    assert_eq!(hier, [n, n, 2 * n, n], "bcast, reduce, allreduce, allgather");
    assert_eq!(
        crossings(8, &of, |sh| hier::barrier(sh, &sites, &t)),
        (2, 0),
        "barrier: one message each way"
    );
    let flat = [
        bytes(crossings(8, &of, |sh| algos::bcast(sh, 3, OUTPUT, n, &t))),
        bytes(crossings(8, &of, |sh| {
            algos::reduce(sh, 3, INPUT, OUTPUT, n, true)
        })),
        bytes(crossings(8, &of, |sh| {
            algos::allreduce(sh, INPUT, OUTPUT, n, 8, true, &t)
        })),
        bytes(crossings(8, &of, |sh| {
            algos::allgather(sh, Some(INPUT), OUTPUT, n / 8, &t)
        })),
    ];
    for (f, h) in flat.iter().zip(hier) {
        assert!(*f >= 2 * h, "flat {flat:?} against site-aware {hier:?}");
    }
    // A long allreduce striped over the four ranks of each site, the same bytes across.
    let striped = Tuning {
        allreduce_long: 1,
        ..t
    };
    assert_eq!(
        bytes(crossings(8, &of, |sh| hier::allreduce(
            sh, &sites, INPUT, OUTPUT, n, 8, &striped
        ))),
        2 * n,
        "striped allreduce"
    );
    // A long alltoall: one message each way between the sites' leaders and one WAN wait,
    // where the flat pairwise exchange sends a message per pair of ranks and waits at
    // every other step; the bytes across are the same.
    let blocks = algos::equal_blocks(8, n / 8);
    let waits = |build: &dyn Fn(Shape) -> Schedule| {
        (0..8)
            .map(|r| {
                let s = build(Shape { rank: r, size: 8 });
                let far = |x: &Xfer| match x {
                    Xfer::Send { peer, .. } | Xfer::Recv { peer, .. } => of[*peer as usize] != of[r as usize],
                };
                s.steps.iter().filter(|st| st.all_xfers().any(far)).count()
            })
            .max()
            .unwrap_or(0)
    };
    let site_aware = |sh: Shape| hier::alltoall(sh, &sites, Some(INPUT), OUTPUT, n / 8, &t);
    let flat = |sh: Shape| algos::alltoall(sh, Some(INPUT), OUTPUT, n / 8, &t);
    assert_eq!((waits(&site_aware), waits(&flat)), (1, 4), "WAN waits");
    assert_eq!(crossings(8, &of, site_aware), (2, 2 * 16 * (n / 8)));
    assert_eq!(crossings(8, &of, flat), (32, 2 * 16 * (n / 8)));
    // A short alltoall of 32 ranks: within one site Bruck's 5 rounds (5 peers per rank);
    // across two sites of ranks 0-15 and 16-31 (where each of Bruck's rounds would
    // cross) every transfer at once, one WAN wait.
    let p = algos::BRUCK_MIN_RANKS;
    let within = choose::alltoall(Shape { rank: 0, size: p }, None, Some(INPUT), 4, &t);
    let sends = within
        .steps
        .iter()
        .flat_map(|st| st.all_xfers())
        .filter(|x| matches!(x, Xfer::Send { .. }));
    assert_eq!(sends.count(), p.ilog2() as usize, "Bruck within a site");
    // Its local work is a few strided copies per round, not one copy per block: at 256
    // ranks 2,560 copies made the schedule and its running cost more than the messages.
    for size in [256, 255, 100] {
        let s = algos::alltoall_bruck(Shape { rank: 7, size }, Some(INPUT), OUTPUT, 4);
        let local: usize = s.steps.iter().map(|st| st.local.len()).sum();
        assert!(
            local <= 4 * size.ilog2() as usize + 4,
            "{local} local steps at {size} ranks"
        );
    }
    let half = p / 2;
    let halves = Sites::from_indices((0..p).map(|r| r / half).collect());
    let across = |r: u32| {
        let s = choose::alltoall(Shape { rank: r, size: p }, Some(&halves), Some(INPUT), 4, &t);
        let far = |x: &Xfer| match x {
            Xfer::Send { peer, .. } | Xfer::Recv { peer, .. } => peer / half != r / half,
        };
        s.steps.iter().filter(|st| st.all_xfers().any(far)).count()
    };
    assert_eq!((0..p).map(across).max(), Some(1), "short alltoall across sites");
    // Allgatherv: each site's blocks cross once, where the ring carries them across at
    // every step.
    let v = |sh: Shape| hier::allgatherv(sh, &sites, Some(region(INPUT, 0, n / 8)), OUTPUT, &blocks, &t);
    assert_eq!(bytes(crossings(8, &of, v)), n);
    let ring = |sh: Shape| algos::allgatherv(sh, Some(region(INPUT, 0, n / 8)), OUTPUT, &blocks);
    assert!(bytes(crossings(8, &of, ring)) >= 2 * n);
    // Gather and scatter of short blocks (binomial trees when flat): the other site's
    // blocks cross once, in one message, where the flat tree sends several.
    let n = 64;
    let site_aware = [
        crossings(8, &of, |sh| {
            hier::gather(sh, &sites, 3, Some(INPUT), OUTPUT, n, &t)
        }),
        crossings(8, &of, |sh| {
            hier::scatter(sh, &sites, 3, INPUT, Some(OUTPUT), n, &t)
        }),
    ];
    assert_eq!(site_aware, [(1, 4 * n), (1, 4 * n)], "gather, scatter");
    let flat = [
        crossings(8, &of, |sh| algos::gather(sh, 3, Some(INPUT), OUTPUT, n, &t)),
        crossings(8, &of, |sh| algos::scatter(sh, 3, INPUT, Some(OUTPUT), n, &t)),
    ];
    for (f, h) in flat.iter().zip(site_aware) {
        assert!(
            f.0 >= 3 * h.0 && f.1 >= h.1,
            "flat {flat:?} against site-aware {site_aware:?}"
        );
    }
}

#[test]
fn a_long_site_aware_allreduce_crosses_in_one_wan_latency_and_pipelines_long_vectors() {
    // 8 ranks interleaved over two sites: four stripes, each site's q-th rank swaps
    // part q with the other site's.
    let of: Vec<u32> = (0..8).map(|r| r % 2).collect();
    let sites = Sites::from_indices(of.clone());
    let t = Tuning {
        allreduce_long: 1,
        ..Tuning::default()
    };
    let far = |r: u32, x: &Xfer| match x {
        Xfer::Send { peer, .. } | Xfer::Recv { peer, .. } => of[*peer as usize] != of[r as usize],
    };
    // Per rank 0's schedule: the steps that post transfers across, the steps that wait
    // for them, and the steps with transfers within the site.
    let shape = |n: usize| {
        let s = hier::allreduce(Shape { rank: 0, size: 8 }, &sites, INPUT, OUTPUT, n, 8, &t);
        assert!(
            s.steps.iter().all(|st| !st.xfers.iter().any(|x| far(0, x))),
            "posted ahead"
        );
        let mut posts = Vec::new();
        let mut waits = Vec::new();
        for (i, st) in s.steps.iter().enumerate() {
            let across: Vec<usize> = st.ahead.iter().filter(|(_, x)| far(0, x)).map(|a| a.0).collect();
            if !across.is_empty() {
                posts.push(i);
                waits.push(i + across[0]);
            }
        }
        let near: Vec<usize> = (0..s.steps.len())
            .filter(|&i| s.steps[i].xfers.iter().any(|x| !far(0, x)))
            .collect();
        (posts, waits, near)
    };
    // 4 MiB (1 MiB per stripe): one exchange, where the two sites' allreduce by halving
    // and doubling crossed twice.
    let (posts, _, _) = shape(4 << 20);
    assert_eq!(posts.len(), 1, "one WAN latency at 4 MiB");
    // 16 MiB: four chunks. The site reduce-scatters later chunks while the first crosses,
    // and gathers the first while later ones cross.
    let (posts, waits, near) = shape(16 << 20);
    assert_eq!(posts.len(), 4, "a chunk per 1 MiB of each stripe");
    let between = |a: usize, b: usize| near.iter().any(|&i| a < i && i < b);
    assert!(
        between(posts[0], posts[3]),
        "reduce-scatter beside the WAN: {posts:?} {near:?}"
    );
    assert!(
        between(waits[0], waits[3]),
        "allgather beside the WAN: {waits:?} {near:?}"
    );
    let n = 16 << 20;
    let bytes = crossings(8, &of, |sh| hier::allreduce(sh, &sites, INPUT, OUTPUT, n, 8, &t)).1;
    assert_eq!(bytes, 2 * n, "each site's vector across once each way");
}
