//! The collective algorithms, each building one rank's [`Schedule`].
//!
//! Sizes are in bytes of packed data; `elem` is the packed size of one element
//! where an algorithm splits a vector between ranks. The choice between
//! algorithms follows MPICH's (thresholds in [`Tuning`], from `PONTOON_COLL_*`):
//! binomial trees and recursive doubling for short messages, scatter + ring
//! allgather (bcast), Rabenseifner's reduce-scatter + allgather (allreduce),
//! rings (allgather) and pairwise exchange (alltoall) for long ones.
//! Non-commutative reductions always combine in rank order.

use super::schedule::{region, BufId, Region, Schedule, OUTPUT};

/// Algorithm switch points, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// bcast: binomial tree below, scatter + ring allgather from here (with ≥ 3 ranks).
    pub bcast_long: usize,
    /// allreduce: recursive doubling below, Rabenseifner from here.
    pub allreduce_long: usize,
    /// allgather: Bruck below this total, ring from here.
    pub allgather_long: usize,
    /// alltoall: Bruck's algorithm up to this per-peer size (with [`BRUCK_MIN_RANKS`] or
    /// more), everything at once above it.
    pub alltoall_short: usize,
    /// alltoall: everything at once below this per-peer size, pairwise exchange from here.
    pub alltoall_long: usize,
    /// gather/scatter: binomial tree below this per-rank size, direct from here.
    pub gather_long: usize,
    /// Long site-aware allgather: the least bytes a piece crosses in.
    pub site_piece: usize,
    /// Across sites, the site-aware algorithms of [`super::hier`] (`PONTOON_COLL_HIER`).
    pub site_aware: bool,
}

impl Tuning {
    /// The switch points of the configuration (`PONTOON_COLL_*`).
    pub fn from_config(c: &runtime::Config) -> Tuning {
        Tuning {
            bcast_long: c.coll_bcast_long,
            allreduce_long: c.coll_allreduce_long,
            allgather_long: c.coll_allgather_long,
            alltoall_short: c.coll_alltoall_short,
            alltoall_long: c.coll_alltoall_long,
            gather_long: c.coll_gather_long,
            site_piece: c.coll_site_piece,
            site_aware: c.coll_hier,
        }
    }
}

impl Default for Tuning {
    /// The documented defaults (`pontoon info`).
    fn default() -> Self {
        Tuning::from_config(&runtime::Config::from_lookup(&|_| None).expect("the defaults parse"))
    }
}

/// Who is running the schedule.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub rank: u32,
    pub size: u32,
}

impl Shape {
    fn rel(&self, root: u32) -> u32 {
        (self.rank + self.size - root) % self.size
    }
    fn abs(&self, vr: u32, root: u32) -> u32 {
        (vr + root) % self.size
    }
}

fn pof2_below(p: u32) -> u32 {
    1 << (31 - p.leading_zeros())
}

/// `(offset, len)` of `p` blocks of `n` bytes back to back.
pub(super) fn equal_blocks(p: u32, n: usize) -> Vec<(usize, usize)> {
    (0..p as usize).map(|i| (i * n, n)).collect()
}

/// Copies block i of `from` (`p` blocks of `n` bytes) to block (i + shift) mod p of `to`:
/// between relative-rank order and rank order.
fn rotate(s: &mut Schedule, from: BufId, to: BufId, shift: u32, p: u32, n: usize) {
    let (head, shifted) = ((p - shift) as usize * n, shift as usize * n);
    s.copy(region(from, 0, head), region(to, shifted, head));
    s.copy(region(from, head, shifted), region(to, 0, shifted));
}

/// Blocks a binomial subtree rooted at relative rank `vr` holds.
fn subtree(vr: u32, p: u32) -> u32 {
    if vr == 0 {
        p
    } else {
        (1 << vr.trailing_zeros()).min(p - vr)
    }
}

pub fn barrier(sh: Shape) -> Schedule {
    let mut s = Schedule::default();
    let none = region(OUTPUT, 0, 0);
    let mut k = 1;
    while k < sh.size {
        s.send((sh.rank + k) % sh.size, none);
        s.recv((sh.rank + sh.size - k) % sh.size, none);
        s.sync();
        k *= 2;
    }
    s
}

/// Binomial-tree bcast: a rank receives the whole message from its parent, then
/// sends it to each of its children.
fn binomial_bcast(s: &mut Schedule, sh: Shape, root: u32, buf: BufId, n: usize) {
    let p = sh.size;
    let vr = sh.rel(root);
    let mut parent = None;
    let mut mask = 1;
    while mask < p {
        if vr & mask != 0 {
            parent = Some(sh.abs(vr - mask, root));
            break;
        }
        mask <<= 1;
    }
    let mut children = Vec::new();
    mask >>= 1;
    while mask > 0 {
        if vr + mask < p {
            children.push(sh.abs(vr + mask, root));
        }
        mask >>= 1;
    }
    if let Some(from) = parent {
        s.recv(from, region(buf, 0, n));
        s.sync();
    }
    for c in children {
        s.send(c, region(buf, 0, n));
    }
}

/// `buf` holds `n` bytes at the root, and everywhere at the end.
pub fn bcast(sh: Shape, root: u32, buf: BufId, n: usize, t: &Tuning) -> Schedule {
    let mut s = Schedule::default();
    let p = sh.size;
    let vr = sh.rel(root);
    // Scatter + allgather sends every byte twice but spends the bandwidth of every
    // rank: it wins once the time to move the message dominates the per-message
    // latency of its log p + p - 1 steps. On TCP that is somewhere between 64 KiB
    // (measured: faster down the tree) and 4 MiB (measured: faster scattered); the
    // switch sits at 512 KiB, where MPICH's is. With 2 ranks it never wins.
    if n < t.bcast_long || p < 3 {
        binomial_bcast(&mut s, sh, root, buf, n);
        return s;
    }
    // Scatter chunk i to relative rank i down a binomial tree, then a ring allgather.
    let chunk = n.div_ceil(p as usize);
    let piece = |first: u32, count: u32| {
        let a = (first as usize * chunk).min(n);
        let b = ((first + count) as usize * chunk).min(n);
        region(buf, a, b - a)
    };
    let mut mask = 1;
    while mask < p {
        if vr & mask != 0 {
            s.recv(sh.abs(vr - mask, root), piece(vr, mask.min(p - vr)));
            s.sync();
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if vr + mask < p {
            s.send(sh.abs(vr + mask, root), piece(vr + mask, mask.min(p - vr - mask)));
        }
        mask >>= 1;
    }
    s.sync();
    let (left, right) = (sh.abs(vr + p - 1, root), sh.abs(vr + 1, root));
    for i in 0..p - 1 {
        s.send(right, piece((vr + p - i) % p, 1));
        s.recv(left, piece((vr + p - i - 1) % p, 1));
        s.sync();
    }
    s
}

/// Reduces `n` bytes of `src` from every rank into `dst` at `root` (`src == dst`
/// at the root means in place).
pub fn reduce(sh: Shape, root: u32, src: BufId, dst: BufId, n: usize, commutative: bool) -> Schedule {
    let mut s = Schedule::default();
    reduce_into(&mut s, sh, root, src, dst, n, commutative);
    s
}

fn reduce_into(s: &mut Schedule, sh: Shape, root: u32, src: BufId, dst: BufId, n: usize, commutative: bool) {
    let p = sh.size;
    // A non-commutative operation combines in rank order: reduce to rank 0 first.
    let target = if commutative { root } else { 0 };
    let vr = sh.rel(target);
    let acc = if sh.rank == root && target == root {
        dst
    } else {
        s.temp(n)
    };
    s.copy(region(src, 0, n), region(acc, 0, n));
    let tmp = s.temp(n);
    let (acc_r, tmp_r) = (region(acc, 0, n), region(tmp, 0, n));
    let mut mask = 1;
    while mask < p {
        if vr & mask == 0 {
            let child = vr | mask;
            if child < p {
                s.recv(sh.abs(child, target), tmp_r);
                combine_after(s, acc_r, tmp_r, commutative);
            }
        } else {
            s.send(sh.abs(vr - mask, target), acc_r);
            s.sync();
            break;
        }
        mask <<= 1;
    }
    if target != root {
        if sh.rank == target {
            s.send(root, acc_r);
            s.sync();
        } else if sh.rank == root {
            s.recv(target, region(dst, 0, n));
            s.sync();
        }
    }
}

/// `acc = acc ∘ higher` where `higher` holds the contributions of higher ranks.
fn combine_after(s: &mut Schedule, acc: Region, higher: Region, commutative: bool) {
    if commutative {
        s.reduce(higher, acc);
    } else {
        s.reduce(acc, higher);
        s.copy(higher, acc);
    }
}

/// Every rank ends with the reduction of all `src` in `dst` (`src == dst`: in place).
pub fn allreduce(
    sh: Shape,
    src: BufId,
    dst: BufId,
    n: usize,
    elem: usize,
    commutative: bool,
    t: &Tuning,
) -> Schedule {
    let mut s = Schedule::default();
    let p = sh.size;
    let acc = region(dst, 0, n);
    let tmp = s.temp(n);
    let pof2 = pof2_below(p);
    let rem = p - pof2;
    let r = sh.rank;
    let count = n / elem.max(1);
    let long = n >= t.allreduce_long && commutative && count >= pof2 as usize && pof2 > 1;
    // Rabenseifner's first exchange can read the input where it is and receive into
    // the output: no copy of the whole vector, for the ranks that do not fold.
    let first_from = (long && src != dst && r >= 2 * rem).then_some(src);
    if first_from.is_none() {
        s.copy(region(src, 0, n), acc);
    }
    // Fold: of each pair (2i, 2i+1) below 2 * rem, the odd rank goes on with both.
    let newrank = if r < 2 * rem {
        if r.is_multiple_of(2) {
            s.send(r + 1, acc);
            s.sync();
            None
        } else {
            s.recv(r - 1, region(tmp, 0, n));
            s.reduce(region(tmp, 0, n), acc);
            Some(r / 2)
        }
    } else {
        Some(r - rem)
    };
    let real = |nr: u32| if nr < rem { nr * 2 + 1 } else { nr + rem };
    if let Some(nr) = newrank {
        if long {
            rabenseifner(&mut s, nr, pof2, real, acc, first_from, tmp, count, elem);
        } else {
            let mut mask = 1;
            while mask < pof2 {
                let dst_rank = real(nr ^ mask);
                s.send(dst_rank, acc);
                s.recv(dst_rank, region(tmp, 0, n));
                if dst_rank < r {
                    s.reduce(region(tmp, 0, n), acc);
                } else {
                    combine_after(&mut s, acc, region(tmp, 0, n), commutative);
                }
                mask <<= 1;
            }
        }
    }
    if r < 2 * rem {
        s.sync();
        if r % 2 == 1 {
            s.send(r - 1, acc);
        } else {
            s.recv(r + 1, acc);
        }
    }
    s
}

/// Reduce-scatter by recursive halving, then allgather by recursive doubling,
/// among `pof2` ranks; `real` maps their numbering to communicator ranks. With
/// `first_from`, `acc` does not hold this rank's data yet: the first exchange
/// reads it from there (the operation is commutative).
#[allow(clippy::too_many_arguments)]
fn rabenseifner(
    s: &mut Schedule,
    nr: u32,
    pof2: u32,
    real: impl Fn(u32) -> u32,
    acc: Region,
    first_from: Option<BufId>,
    tmp: BufId,
    count: usize,
    elem: usize,
) {
    // Block i covers elements [disp[i], disp[i + 1]).
    let mut disp = vec![0usize; pof2 as usize + 1];
    for i in 0..pof2 as usize {
        disp[i + 1] = disp[i] + count / pof2 as usize + usize::from(i < count % pof2 as usize);
    }
    let blocks = |buf: BufId, (a, b): (u32, u32)| {
        let (x, y) = (disp[a as usize] * elem, disp[b as usize] * elem);
        region(buf, x, y - x)
    };
    let mut levels = Vec::new();
    let (mut lo, mut hi) = (0u32, pof2);
    let mut mask = 1;
    while mask < pof2 {
        let partner = real(nr ^ mask);
        let mid = lo + (hi - lo) / 2;
        let (keep, give) = if nr & mask == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        match first_from {
            Some(src) if mask == 1 => {
                s.send(partner, blocks(src, give));
                s.recv(partner, blocks(acc.buf, keep));
                s.reduce(blocks(src, keep), blocks(acc.buf, keep));
            }
            _ => {
                s.send(partner, blocks(acc.buf, give));
                s.recv(partner, blocks(tmp, keep));
                s.reduce(blocks(tmp, keep), blocks(acc.buf, keep));
            }
        }
        levels.push((partner, keep, give));
        (lo, hi) = keep;
        mask <<= 1;
    }
    for (partner, keep, give) in levels.into_iter().rev() {
        s.sync();
        s.send(partner, blocks(acc.buf, keep));
        s.recv(partner, blocks(acc.buf, give));
    }
}

/// Gathers `n` bytes from each rank's `src` (None: in place, already in `dst` at the
/// root) into `dst` at `root`, in rank order.
pub fn gather(sh: Shape, root: u32, src: Option<BufId>, dst: BufId, n: usize, t: &Tuning) -> Schedule {
    let mut s = Schedule::default();
    let p = sh.size;
    let own = src.map(|b| region(b, 0, n));
    if n >= t.gather_long || p <= 2 {
        return gatherv(sh, root, own, dst, &equal_blocks(p, n));
    }
    let vr = sh.rel(root);
    let mine = subtree(vr, p) as usize;
    // Relative rank i's block sits at i * n of `acc` (the root's own order when root is 0).
    let acc = if vr == 0 && root == 0 {
        dst
    } else {
        s.temp(mine * n)
    };
    match own {
        Some(o) => s.copy(o, region(acc, 0, n)),
        None => s.copy(region(dst, root as usize * n, n), region(acc, 0, n)),
    }
    let mut mask = 1;
    while mask < p {
        if vr & mask == 0 {
            let child = vr | mask;
            if child < p {
                let blocks = mask.min(p - child) as usize;
                s.recv(sh.abs(child, root), region(acc, mask as usize * n, blocks * n));
            }
        } else {
            s.sync();
            s.send(sh.abs(vr - mask, root), region(acc, 0, mine * n));
            break;
        }
        mask <<= 1;
    }
    if vr == 0 && root != 0 {
        rotate(&mut s, acc, dst, root, p, n);
    }
    s
}

/// Scatters block i of `src` at `root` (`n` bytes each) to rank i's `dst`
/// (`None` at the root: in place, its block stays in `src`).
pub fn scatter(sh: Shape, root: u32, src: BufId, dst: Option<BufId>, n: usize, t: &Tuning) -> Schedule {
    let mut s = Schedule::default();
    let p = sh.size;
    if n >= t.gather_long || p <= 2 {
        return scatterv(sh, root, src, &equal_blocks(p, n), dst.map(|d| region(d, 0, n)));
    }
    let vr = sh.rel(root);
    let mine = subtree(vr, p) as usize;
    let acc = if vr == 0 && root == 0 {
        src
    } else {
        s.temp(mine * n)
    };
    let mut mask;
    if vr == 0 {
        if root != 0 {
            rotate(&mut s, src, acc, p - root, p, n);
        }
        mask = pof2_below(p.max(1));
        if mask < p {
            mask <<= 1;
        }
    } else {
        mask = 1 << vr.trailing_zeros();
        s.recv(sh.abs(vr - mask, root), region(acc, 0, mine * n));
        s.sync();
    }
    mask >>= 1;
    while mask > 0 {
        let child = vr + mask;
        if child < p {
            let blocks = mask.min(p - child) as usize;
            s.send(sh.abs(child, root), region(acc, mask as usize * n, blocks * n));
        }
        mask >>= 1;
    }
    if let Some(d) = dst {
        s.copy(region(acc, 0, n), region(d, 0, n));
    }
    s
}

/// Variable blocks `(offset, len)` per rank: root receives each rank's `src` into
/// its block of `dst` (gatherv).
pub fn gatherv(sh: Shape, root: u32, src: Option<Region>, dst: BufId, blocks: &[(usize, usize)]) -> Schedule {
    let mut s = Schedule::default();
    if sh.rank == root {
        for i in (0..sh.size).filter(|i| *i != root) {
            let (o, l) = blocks[i as usize];
            s.recv(i, region(dst, o, l));
        }
        if let Some(own) = src {
            let (o, l) = blocks[root as usize];
            s.copy(own, region(dst, o, l));
        }
    } else if let Some(own) = src {
        s.send(root, own);
    }
    s
}

/// Root sends block i of `src` to rank i's `dst` (scatterv).
pub fn scatterv(
    sh: Shape,
    root: u32,
    src: BufId,
    blocks: &[(usize, usize)],
    dst: Option<Region>,
) -> Schedule {
    let mut s = Schedule::default();
    scatterv_into(&mut s, sh, root, src, blocks, dst);
    s
}

fn scatterv_into(
    s: &mut Schedule,
    sh: Shape,
    root: u32,
    src: BufId,
    blocks: &[(usize, usize)],
    dst: Option<Region>,
) {
    if sh.rank == root {
        for i in (0..sh.size).filter(|i| *i != root) {
            let (o, l) = blocks[i as usize];
            s.send(i, region(src, o, l));
        }
        if let Some(own) = dst {
            let (o, l) = blocks[root as usize];
            s.copy(region(src, o, l), own);
        }
    } else if let Some(own) = dst {
        s.recv(root, own);
    }
}

/// Every rank gets every rank's `n` bytes in rank order in `dst` (`src` None: in
/// place, own block already in `dst`).
pub fn allgather(sh: Shape, src: Option<BufId>, dst: BufId, n: usize, t: &Tuning) -> Schedule {
    let p = sh.size;
    if n * p as usize >= t.allgather_long {
        return allgatherv(sh, src.map(|b| region(b, 0, n)), dst, &equal_blocks(p, n));
    }
    // Bruck: block i of `acc` is rank (rank + i)'s data.
    let mut s = Schedule::default();
    let r = sh.rank;
    let acc = if r == 0 { dst } else { s.temp(p as usize * n) };
    match src {
        Some(b) => s.copy(region(b, 0, n), region(acc, 0, n)),
        None => s.copy(region(dst, r as usize * n, n), region(acc, 0, n)),
    }
    let mut have = 1;
    while have < p {
        let take = have.min(p - have);
        s.send((r + p - have) % p, region(acc, 0, take as usize * n));
        s.recv((r + have) % p, region(acc, have as usize * n, take as usize * n));
        s.sync();
        have += take;
    }
    if r != 0 {
        rotate(&mut s, acc, dst, r, p, n);
    }
    s
}

/// Ring allgather of variable blocks `(offset, len)` of `dst`.
pub fn allgatherv(sh: Shape, src: Option<Region>, dst: BufId, blocks: &[(usize, usize)]) -> Schedule {
    let mut s = Schedule::default();
    let (p, r) = (sh.size, sh.rank);
    let block = |i: u32| region(dst, blocks[i as usize].0, blocks[i as usize].1);
    if let Some(own) = src {
        s.copy(own, block(r));
    }
    for i in 0..p - 1 {
        s.send((r + 1) % p, block((r + p - i) % p));
        s.recv((r + p - 1) % p, block((r + 2 * p - i - 1) % p));
        s.sync();
    }
    s
}

/// Block j of rank i's `src` goes to block i of rank j's `dst`; `(offset, len)`
/// per peer on each side. `src` None: in place (the blocks are read from `dst`).
pub fn alltoallv(
    sh: Shape,
    src: Option<BufId>,
    send: &[(usize, usize)],
    dst: BufId,
    recv: &[(usize, usize)],
    pairwise: bool,
) -> Schedule {
    let mut s = Schedule::default();
    let (p, r) = (sh.size, sh.rank);
    let src = src.unwrap_or_else(|| {
        let len = recv.iter().map(|(o, l)| o + l).max().unwrap_or(0);
        let copy = s.temp(len);
        s.copy(region(dst, 0, len), region(copy, 0, len));
        copy
    });
    let out = |i: u32| region(src, send[i as usize].0, send[i as usize].1);
    let inn = |i: u32| region(dst, recv[i as usize].0, recv[i as usize].1);
    s.copy(out(r), inn(r));
    for i in 1..p {
        let (to, from) = ((r + i) % p, (r + p - i) % p);
        s.recv(from, inn(from));
        s.send(to, out(to));
        if pairwise {
            s.sync();
        }
    }
    s
}

/// The fewest ranks for which a short alltoall goes by Bruck's algorithm: below, its
/// ⌈log₂ p⌉ rounds in sequence cost as much as p − 1 messages in parallel or more
/// (`bench/c/collective.c alltoall` on 2 CPUs: at 8 and 16 ranks the flat one is as fast
/// or faster up to 64 B per peer; from 32 ranks Bruck's is up to 3× faster). MPICH
/// switches at 8 ranks, Open MPI above 12.
pub const BRUCK_MIN_RANKS: u32 = 32;

/// Alltoall with `n` bytes per peer.
pub fn alltoall(sh: Shape, src: Option<BufId>, dst: BufId, n: usize, t: &Tuning) -> Schedule {
    if n <= t.alltoall_short && n < t.alltoall_long && sh.size >= BRUCK_MIN_RANKS {
        return alltoall_bruck(sh, src, dst, n);
    }
    let blocks = equal_blocks(sh.size, n);
    alltoallv(sh, src, &blocks, dst, &blocks, n >= t.alltoall_long)
}

/// Bruck's alltoall: ⌈log₂ p⌉ rounds, each one message to one peer carrying about
/// half of the blocks, instead of p − 1 messages. A rank talks to log₂ p peers, not to
/// every other, which is what keeps a short alltoall of hundreds of ranks (and the
/// wire-up it causes) from growing with the square of the ranks.
pub fn alltoall_bruck(sh: Shape, src: Option<BufId>, dst: BufId, n: usize) -> Schedule {
    let mut s = Schedule::default();
    let (p, r) = (sh.size, sh.rank);
    // Block i of `acc` is first the block for rank (r + i) mod p; after the rounds, the
    // block from rank (r − i) mod p.
    let acc = s.temp(p as usize * n);
    rotate(&mut s, src.unwrap_or(dst), acc, (p - r) % p, p, n);
    // Round k moves the blocks whose index has bit k set: runs of k blocks every 2k
    // from block k, the last one cut short by p. Each way, the whole runs are one
    // strided copy and the cut one another.
    let packed = (p as usize / 2) * n;
    let (out, inn) = (s.temp(packed), s.temp(packed));
    let mut k = 1;
    while k < p {
        let (ku, stride) = (k as usize, 2 * k as usize);
        let whole = (p as usize - ku) / stride + usize::from((p as usize - ku) % stride >= ku);
        let cut = (ku + whole * stride < p as usize)
            .then(|| (ku + whole * stride, p as usize - ku - whole * stride));
        let run = ku * n;
        let (acc_step, out_step) = ((stride * n) as isize, run as isize);
        s.copy_blocks(
            region(acc, run, run),
            region(out, 0, run),
            whole,
            acc_step,
            out_step,
        );
        let mut at = whole * run;
        if let Some((i, len)) = cut {
            s.copy(region(acc, i * n, len * n), region(out, at, len * n));
            at += len * n;
        }
        s.send((r + k) % p, region(out, 0, at));
        s.recv((r + p - k) % p, region(inn, 0, at));
        s.sync();
        s.copy_blocks(
            region(inn, 0, run),
            region(acc, run, run),
            whole,
            out_step,
            acc_step,
        );
        if let Some((i, len)) = cut {
            s.copy(region(inn, whole * run, len * n), region(acc, i * n, len * n));
        }
        k *= 2;
    }
    // Block i of `acc` came from rank (r − i) mod p: blocks 0..=r go to r down to 0,
    // the others to p − 1 down to r + 1.
    let (ru, pu, back) = (r as usize, p as usize, -(n as isize));
    s.copy_blocks(
        region(acc, 0, n),
        region(dst, ru * n, n),
        ru + 1,
        n as isize,
        back,
    );
    s.copy_blocks(
        region(acc, (ru + 1) * n, n),
        region(dst, (pu - 1) * n, n),
        pu - ru - 1,
        n as isize,
        back,
    );
    s
}

/// Reduces the whole vector `src` (blocks of `counts[i]` bytes back to back) and
/// leaves block i in rank i's `dst`.
pub fn reduce_scatter(sh: Shape, src: BufId, dst: BufId, counts: &[usize], commutative: bool) -> Schedule {
    let mut s = Schedule::default();
    let (p, r) = (sh.size, sh.rank);
    let mut offs = vec![0usize; p as usize + 1];
    for i in 0..p as usize {
        offs[i + 1] = offs[i] + counts[i];
    }
    let total = offs[p as usize];
    // In place (`src == dst`): the blocks are read from a copy.
    let src = if src == dst {
        let copy = s.temp(total);
        s.copy(region(dst, 0, total), region(copy, 0, total));
        copy
    } else {
        src
    };
    let block = |i: u32| region(src, offs[i as usize], counts[i as usize]);
    if !commutative {
        let whole = s.temp(total);
        reduce_into(&mut s, sh, 0, src, whole, total, false);
        s.sync();
        let blocks: Vec<(usize, usize)> = (0..p as usize).map(|i| (offs[i], counts[i])).collect();
        scatterv_into(
            &mut s,
            sh,
            0,
            whole,
            &blocks,
            Some(region(dst, 0, counts[r as usize])),
        );
        return s;
    }
    // Pairwise: in step i, send rank (r + i)'s block and add in rank (r - i)'s
    // contribution to ours.
    let acc = region(dst, 0, counts[r as usize]);
    s.copy(block(r), acc);
    let tmp = region(s.temp(counts[r as usize]), 0, counts[r as usize]);
    for i in 1..p {
        s.send((r + i) % p, block((r + i) % p));
        s.recv((r + p - i) % p, tmp);
        s.reduce(tmp, acc);
    }
    s
}

/// Inclusive (`exclusive == false`) or exclusive prefix reduction by recursive doubling.
pub fn scan(sh: Shape, src: BufId, dst: BufId, n: usize, commutative: bool, exclusive: bool) -> Schedule {
    let mut s = Schedule::default();
    let (p, r) = (sh.size, sh.rank);
    let acc = region(dst, 0, n);
    let partial = region(s.temp(n), 0, n);
    let tmp = region(s.temp(n), 0, n);
    s.copy(region(src, 0, n), partial);
    if !exclusive {
        s.copy(region(src, 0, n), acc);
    }
    let mut have_acc = !exclusive;
    let mut mask = 1;
    while mask < p {
        let peer = r ^ mask;
        if peer < p {
            s.send(peer, partial);
            s.recv(peer, tmp);
            if peer < r {
                if have_acc {
                    s.reduce(tmp, acc);
                } else {
                    s.copy(tmp, acc);
                    have_acc = true;
                }
                s.reduce(tmp, partial);
            } else {
                combine_after(&mut s, partial, tmp, commutative);
            }
        }
        mask <<= 1;
    }
    s
}
