//! Test program: every collective on COMM_WORLD, on a split and on a dup, every
//! root, in place and not, short and long messages, several types and operations
//! (a non-commutative user operation among them), each result checked against the
//! value every rank can compute on its own. Prints one line per communicator.

use pontoon::{Basic, Comm, Data, DataMut, Datatype, Equivalence, Error, Input, Op};

/// What rank `r` contributes at element `i` (small values: sums and products stay exact).
fn val(r: u32, i: usize, salt: u32) -> i64 {
    ((r as i64 * 7 + i as i64 * 3 + salt as i64) % 11) - 5
}

fn vec_of<T: Equivalence>(r: u32, n: usize, salt: u32, conv: impl Fn(i64) -> T) -> Vec<T> {
    (0..n).map(|i| conv(val(r, i, salt))).collect()
}

mod common;
use common::ensure;

/// 2×2 matrices of i64 with `inout = input × inout`; rank order matters.
fn matrix_op() -> Op {
    Op::user(false, |a: &[i64], b: &mut [i64]| {
        for (x, y) in a.chunks_exact(4).zip(b.chunks_exact_mut(4)) {
            let r = [
                x[0] * y[0] + x[1] * y[2],
                x[0] * y[1] + x[1] * y[3],
                x[2] * y[0] + x[3] * y[2],
                x[2] * y[1] + x[3] * y[3],
            ];
            y.copy_from_slice(&r);
        }
    })
}

fn matrix(r: u32, k: usize) -> [i64; 4] {
    // Invertible-ish small matrices that do not commute.
    [1, (r as i64 + k as i64) % 3, (r as i64 * 2 + 1) % 2, 1]
}

fn mat_mul(a: &[i64], b: &[i64]) -> Vec<i64> {
    vec![
        a[0] * b[0] + a[1] * b[2],
        a[0] * b[1] + a[1] * b[3],
        a[2] * b[0] + a[3] * b[2],
        a[2] * b[1] + a[3] * b[3],
    ]
}

fn check_reductions(c: &Comm, n: usize) -> Result<(), Error> {
    let (me, p) = (c.rank(), c.size());
    // Sum of i32, max of f64, bxor of u8: commutative.
    let mine: Vec<i32> = vec_of(me, n, 1, |v| v as i32);
    let want: Vec<i32> = (0..n)
        .map(|i| (0..p).map(|r| val(r, i, 1) as i32).sum())
        .collect();
    let mut got = vec![0i32; n];
    c.allreduce(&mine, &mut got, &Op::Sum)?;
    ensure(got == want, || {
        format!("allreduce sum of {n} ints: {got:?} != {want:?}")
    })?;
    let mut inplace = mine.clone();
    c.allreduce(Input::InPlace, &mut inplace, &Op::Sum)?;
    ensure(inplace == want, || format!("allreduce in place of {n} ints"))?;
    let fmine: Vec<f64> = vec_of(me, n, 2, |v| v as f64 * 0.5);
    let fwant: Vec<f64> = (0..n)
        .map(|i| (0..p).map(|r| val(r, i, 2) as f64 * 0.5).fold(f64::MIN, f64::max))
        .collect();
    let mut fgot = vec![0.0; n];
    c.allreduce(&fmine, &mut fgot, &Op::Max)?;
    ensure(fgot == fwant, || format!("allreduce max of {n} doubles"))?;
    let bmine: Vec<u8> = vec_of(me, n, 3, |v| (v * 37) as u8);
    let bwant: Vec<u8> = (0..n)
        .map(|i| (0..p).fold(0u8, |a, r| a ^ (val(r, i, 3) * 37) as u8))
        .collect();
    // Non-commutative: the product of every rank's matrices in rank order.
    let m: Vec<i64> = (0..n).flat_map(|k| matrix(me, k)).collect();
    let mwant: Vec<i64> = (0..n)
        .flat_map(|k| (1..p).fold(matrix(0, k).to_vec(), |acc, r| mat_mul(&acc, &matrix(r, k))))
        .collect();
    let mop = matrix_op();
    let mut mgot = vec![0i64; 4 * n];
    c.allreduce(&m, &mut mgot, &mop)?;
    ensure(mgot == mwant, || {
        format!("allreduce of non-commutative matrices ({n})")
    })?;
    for root in 0..p {
        let mut bgot = vec![0u8; n];
        c.reduce(&bmine, &mut bgot, &Op::Bxor, root)?;
        ensure(me != root || bgot == bwant, || format!("reduce bxor to {root}"))?;
        let mut mgot = if me == root { m.clone() } else { Vec::new() };
        if me == root {
            c.reduce(Input::InPlace, &mut mgot, &mop, root)?;
        } else {
            c.reduce(&m, &mut mgot, &mop, root)?;
        }
        ensure(me != root || mgot == mwant, || {
            format!("reduce of matrices in place at {root}")
        })?;
    }
    // Prefix reductions.
    let mut s = vec![0i64; 4 * n];
    c.scan(&m, &mut s, &mop)?;
    let upto = |k: u32| -> Vec<i64> {
        (0..n)
            .flat_map(|j| (1..k).fold(matrix(0, j).to_vec(), |acc, r| mat_mul(&acc, &matrix(r, j))))
            .collect()
    };
    ensure(s == upto(me + 1), || format!("scan at {me}"))?;
    let mut e = vec![0i64; 4 * n];
    c.exscan(&m, &mut e, &mop)?;
    ensure(me == 0 || e == upto(me), || format!("exscan at {me}"))?;
    // reduce_scatter with block i of i+1 elements (sum of i32)
    let counts: Vec<usize> = (0..p as usize).map(|i| (i + n) % 4).collect();
    let total: usize = counts.iter().sum();
    let vmine: Vec<i32> = vec_of(me, total, 4, |v| v as i32);
    let vwant: Vec<i32> = (0..total)
        .map(|i| (0..p).map(|r| val(r, i, 4) as i32).sum())
        .collect();
    let mut block = vec![0i32; counts[me as usize]];
    c.reduce_scatter(&vmine, &mut block, &counts, &Op::Sum)?;
    let off: usize = counts[..me as usize].iter().sum();
    ensure(block == vwant[off..off + counts[me as usize]], || {
        format!("reduce_scatter block {me}")
    })?;
    let mut whole = vmine.clone();
    c.reduce_scatter(Input::InPlace, &mut whole, &counts, &Op::Sum)?;
    ensure(
        whole[..counts[me as usize]] == vwant[off..off + counts[me as usize]],
        || "reduce_scatter in place".into(),
    )?;
    let mut blk = vec![0i32; n];
    let all: Vec<i32> = vec_of(me, n * p as usize, 5, |v| v as i32);
    c.reduce_scatter_block(&all, &mut blk, n, &Op::Sum)?;
    let w: Vec<i32> = (0..n)
        .map(|i| (0..p).map(|r| val(r, me as usize * n + i, 5) as i32).sum())
        .collect();
    ensure(blk == w, || "reduce_scatter_block".into())?;
    let mut bxor = vec![0u8; n];
    c.allreduce(&bmine, &mut bxor, &Op::Bxor)?;
    ensure(bxor == bwant, || "allreduce bxor".into())
}

fn check_movement(c: &Comm, n: usize) -> Result<(), Error> {
    let (me, p) = (c.rank(), c.size());
    let pu = p as usize;
    let block = |r: u32, j: usize| -> Vec<u32> {
        (0..n)
            .map(|i| r * 1_000_000 + j as u32 * 1000 + i as u32)
            .collect()
    };
    for root in 0..p {
        let mut b = if me == root { block(root, 9) } else { vec![0; n] };
        c.bcast(&mut b, root)?;
        ensure(b == block(root, 9), || format!("bcast of {n} from {root}"))?;
        // gather / scatter, in place at the root every other time
        let all: Vec<u32> = (0..p).flat_map(|r| block(r, 0)).collect();
        let mut g = vec![0u32; if me == root { n * pu } else { 0 }];
        if me == root && root % 2 == 1 {
            g[root as usize * n..][..n].copy_from_slice(&block(me, 0));
            c.gather(Input::InPlace, &mut g, root)?;
        } else {
            c.gather(&block(me, 0), &mut g, root)?;
        }
        ensure(me != root || g == all, || format!("gather to {root}"))?;
        let mut s = vec![0u32; n];
        let src = if me == root { all.clone() } else { Vec::new() };
        c.scatter(&src, Some(&mut s), root)?;
        ensure(s == block(me, 0), || format!("scatter from {root}"))?;
        // v-variants: rank r contributes r % 3 + n elements, placed in reverse order.
        let lens: Vec<usize> = (0..pu).map(|r| r % 3 + n).collect();
        let mut displs = vec![0; pu];
        let mut at = 1;
        for r in (0..pu).rev() {
            displs[r] = at;
            at += lens[r] + 1;
        }
        let mine: Vec<u32> = block(me, 1).into_iter().chain(0..(me % 3)).collect();
        let mut want = vec![0u32; at];
        for r in 0..pu {
            let d: Vec<u32> = block(r as u32, 1).into_iter().chain(0..(r as u32 % 3)).collect();
            want[displs[r]..][..lens[r]].copy_from_slice(&d);
        }
        let mut gv = vec![0u32; at];
        c.gatherv(&mine, &mut gv, &lens, &displs, root)?;
        ensure(me != root || gv == want, || format!("gatherv to {root}"))?;
        let mut sv = vec![0u32; lens[me as usize]];
        c.scatterv(&want, &lens, &displs, Some(&mut sv), root)?;
        ensure(sv == mine, || format!("scatterv from {root}"))?;
        if root == 0 {
            let mut agv = vec![0u32; at];
            c.allgatherv(&mine, &mut agv, &lens, &displs)?;
            ensure(agv == want, || "allgatherv".into())?;
        }
    }
    let all: Vec<u32> = (0..p).flat_map(|r| block(r, 0)).collect();
    let mut ag = vec![0u32; n * pu];
    c.allgather(&block(me, 0), &mut ag)?;
    ensure(ag == all, || format!("allgather of {n}"))?;
    let mut agi = vec![0u32; n * pu];
    agi[me as usize * n..][..n].copy_from_slice(&block(me, 0));
    c.allgather(Input::InPlace, &mut agi)?;
    ensure(agi == all, || "allgather in place".into())?;
    // alltoall: block j of rank r lands in block r of rank j
    let send: Vec<u32> = (0..pu).flat_map(|j| block(me, j)).collect();
    let want: Vec<u32> = (0..p).flat_map(|r| block(r, me as usize)).collect();
    let mut got = vec![0u32; n * pu];
    c.alltoall(&send, &mut got)?;
    ensure(got == want, || format!("alltoall of {n}"))?;
    let mut inplace = send.clone();
    c.alltoall(Input::InPlace, &mut inplace)?;
    ensure(inplace == want, || "alltoall in place".into())?;
    // alltoallv: rank r sends j + 1 elements to rank j
    let scounts: Vec<usize> = (0..pu).map(|j| j % 4 + 1).collect();
    let sdispls: Vec<usize> = scounts
        .iter()
        .scan(0, |a, c| {
            let d = *a;
            *a += c;
            Some(d)
        })
        .collect();
    let sendv: Vec<u32> = (0..pu)
        .flat_map(|j| (0..scounts[j] as u32).map(move |i| me * 100 + j as u32 * 10 + i))
        .collect();
    let rcounts = vec![me as usize % 4 + 1; pu];
    let rdispls: Vec<usize> = (0..pu).map(|r| r * rcounts[0]).collect();
    let mut gotv = vec![0u32; rcounts[0] * pu];
    c.alltoallv(&sendv, &scounts, &sdispls, &mut gotv, &rcounts, &rdispls)?;
    let wantv: Vec<u32> = (0..p)
        .flat_map(|r| (0..rcounts[0] as u32).map(move |i| r * 100 + me * 10 + i))
        .collect();
    ensure(gotv == wantv, || "alltoallv".into())?;
    c.barrier()
}

/// Derived datatypes through point-to-point and collectives: packed on the way out,
/// unpacked on the way in, gaps untouched.
fn check_datatypes(c: &Comm) -> Result<(), Error> {
    let (me, p) = (c.rank(), c.size());
    let int = Datatype::basic(Basic::I32);
    // Every other int of 2 * n: a vector with gaps that must stay untouched.
    let n = 5u64;
    let every_other = int.vector(n, 1, 2)?;
    let ints = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_ne_bytes()).collect() };
    let back = |b: &[u8]| -> Vec<i32> {
        b.chunks_exact(4)
            .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    };
    let mine: Vec<i32> = (0..2 * n as i32)
        .map(|i| if i % 2 == 0 { me as i32 + i } else { -1 })
        .collect();
    let mut out = ints(&vec![-7; 2 * n as usize]);
    c.allreduce_data(
        Some(&Data::new(&ints(&mine), 1, &every_other)),
        &mut DataMut::new(&mut out, 1, &every_other),
        &Op::Sum,
    )?;
    let got = back(&out);
    for i in 0..2 * n as usize {
        let want = if i % 2 == 0 {
            (0..p as i32).map(|r| r + i as i32).sum()
        } else {
            -7
        };
        ensure(got[i] == want, || format!("allreduce on a vector type: {got:?}"))?;
    }
    // A struct {int; double} with padding, broadcast from the last rank.
    let st = Datatype::create_struct(&[1, 1], &[0, 8], &[int.clone(), Datatype::basic(Basic::F64)])?;
    let root = p - 1;
    let mut buf = vec![0xAAu8; 16 * 3];
    if me == root {
        for k in 0..3 {
            buf[k * 16..k * 16 + 4].copy_from_slice(&(k as i32 + 40).to_ne_bytes());
            buf[k * 16 + 8..k * 16 + 16].copy_from_slice(&(k as f64 * 1.5).to_ne_bytes());
        }
    }
    c.bcast_data(&mut DataMut::new(&mut buf, 3, &st), root)?;
    for k in 0..3 {
        let i = i32::from_ne_bytes(buf[k * 16..k * 16 + 4].try_into().unwrap());
        let d = f64::from_ne_bytes(buf[k * 16 + 8..k * 16 + 16].try_into().unwrap());
        ensure(i == k as i32 + 40 && d == k as f64 * 1.5, || {
            format!("bcast of a struct, element {k}")
        })?;
        ensure(buf[k * 16 + 4..k * 16 + 8] == [0xAA; 4], || {
            "the padding is not data".into()
        })?;
    }
    // Point to point: indexed blocks out, a short message into a vector type in.
    if p > 1 {
        let to = (me + 1) % p;
        let from = (me + p - 1) % p;
        let idx = int.indexed(&[2, 1], &[3, 0])?; // ints 3, 4, then 0
        let src = ints(&(0..6).map(|i| me as i32 * 10 + i).collect::<Vec<_>>());
        c.send_data(&Data::new(&src, 1, &idx), to, 4)?;
        let mut dst = ints(&[0; 10]);
        let st = c.recv_data(&mut DataMut::new(&mut dst, 1, &every_other), Some(from), 4)?;
        let got = back(&dst);
        let f = from as i32 * 10;
        ensure(got == [f + 3, 0, f + 4, 0, f, 0, 0, 0, 0, 0], || {
            format!("indexed into vector: {got:?}")
        })?;
        ensure(
            st.count_of(&every_other).is_none() && st.count_of(&int) == Some(3),
            || "get_count".into(),
        )?;
        ensure(st.elements_of(&every_other) == 3, || "get_elements".into())?;
    }
    // Gather of resized ints (one int every 8 bytes) into plain ints at the root.
    let spaced = int.resized(0, 8);
    let two = ints(&[me as i32, 0, me as i32 + 100, 0]);
    let mut all = vec![0u8; 8 * p as usize];
    c.gather_data(
        Some(&Data::new(&two, 2, &spaced)),
        &mut DataMut::new(&mut all, 2 * p as u64, &int),
        0,
    )?;
    let want: Vec<i32> = (0..p as i32).flat_map(|r| [r, r + 100]).collect();
    ensure(me != 0 || back(&all) == want, || {
        format!("gather of resized ints: {:?}", back(&all))
    })?;
    Ok(())
}

fn check(c: &Comm, label: &str) -> Result<(), Error> {
    check_datatypes(c)?;
    // Short messages, then long enough for the long algorithms and rendezvous.
    for n in [0, 1, 3, 40, 5000, 70000] {
        check_movement(c, n)?;
        if n < 70000 {
            check_reductions(c, n)?;
        }
    }
    println!(
        "{label}: rank {} of {}: every collective agrees with the reference",
        c.rank(),
        c.size()
    );
    Ok(())
}

fn main() -> Result<(), Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    check(&world, "world")?;
    // Odd and even ranks, ordered backwards.
    let half = world
        .split((world.rank() % 2) as i32, -(world.rank() as i32))?
        .expect("every rank has a color");
    check(&half, "split")?;
    let dup = world.dup()?;
    check(&dup, "dup")?;
    check(&universe.self_comm(), "self")?;
    drop((half, dup));
    universe.finalize()
}
