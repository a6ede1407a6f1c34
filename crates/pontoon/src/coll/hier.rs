//! Site-aware collectives: for a communicator whose ranks sit at several sites (clusters
//! joined by a WAN), each collective runs in levels — within each site, then among one
//! leader per site, then within each site again — so that it crosses the WAN between
//! two sites as few times as its algorithm allows (MagPIe's rule), where a flat
//! algorithm crosses it at nearly every step of its tree or ring.
//!
//! Every level is one of the flat algorithms of [`algos`], built for the level's ranks
//! and embedded into one schedule ([`embed`]). Non-commutative reductions stay flat:
//! the levels would combine out of rank order.

use super::algos::{self, Shape, Tuning};
use super::schedule::{region, Blocks, BufId, Local, Region, Schedule, Step, Xfer, INPUT, OUTPUT};

/// The site of every rank of a communicator, numbered in order of first appearance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sites {
    of: Vec<u32>,
}

impl Sites {
    /// From each rank's site name; `None` unless every rank has one and there are at
    /// least two sites (with one, the flat algorithms are the hierarchical ones).
    pub fn from_names(names: &[Option<String>]) -> Option<Sites> {
        let mut seen: Vec<&str> = Vec::new();
        let mut of = Vec::with_capacity(names.len());
        for name in names {
            let name = name.as_deref()?;
            let i = seen.iter().position(|s| *s == name).unwrap_or_else(|| {
                seen.push(name);
                seen.len() - 1
            });
            of.push(i as u32);
        }
        (seen.len() >= 2).then_some(Sites { of })
    }

    #[cfg(test)]
    pub fn from_indices(of: Vec<u32>) -> Sites {
        Sites { of }
    }

    pub fn count(&self) -> u32 {
        self.of.iter().max().map_or(0, |m| m + 1)
    }

    /// The ranks of `site`, in rank order.
    fn members(&self, site: u32) -> Vec<u32> {
        (0..self.of.len() as u32)
            .filter(|&r| self.of[r as usize] == site)
            .collect()
    }

    /// One rank per site, in site order: `root` for its own site, the lowest rank for
    /// the others.
    fn leaders(&self, root: u32) -> Vec<u32> {
        (0..self.count())
            .filter_map(|site| {
                if self.of[root as usize] == site {
                    Some(root)
                } else {
                    self.members(site).first().copied()
                }
            })
            .collect()
    }
}

impl Sites {
    /// Each site's blocks of `n` bytes per rank, the sites one after another:
    /// `(offset, len)` per site.
    fn blocks(&self, n: usize) -> Vec<(usize, usize)> {
        let mut at = 0;
        (0..self.count())
            .map(|site| {
                let len = self.members(site).len() * n;
                at += len;
                (at - len, len)
            })
            .collect()
    }

    /// Whether every site is a block of consecutive ranks of one power-of-two size,
    /// starting at a multiple of it.
    pub fn aligned_blocks(&self) -> bool {
        let k = self.members(0).len();
        k.is_power_of_two()
            && self.of.len().is_multiple_of(k)
            && self
                .of
                .iter()
                .enumerate()
                .all(|(r, &site)| site as usize == r / k)
    }

    /// The most bytes two sites' leaders swap in a site-aware alltoall of `n`-byte blocks.
    pub fn largest_exchange(&self, n: usize) -> usize {
        let mut sizes: Vec<usize> = (0..self.count()).map(|x| self.members(x).len()).collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        sizes.iter().take(2).product::<usize>() * n
    }

    /// How many ranks the smallest site has.
    fn smallest(&self) -> usize {
        (0..self.count())
            .map(|x| self.members(x).len())
            .min()
            .unwrap_or(0)
    }

    /// Every rank in site order: rank order within each site, the sites one after another.
    fn in_site_order(&self) -> Vec<u32> {
        (0..self.count()).flat_map(|site| self.members(site)).collect()
    }
}

/// Where one rank stands in the levels of a collective rooted at `root`.
struct Levels {
    /// Its site's ranks, and its own place and its leader's among them.
    site: Vec<u32>,
    in_site: u32,
    leader_in_site: u32,
    /// The leaders, and its own place among them if it is one.
    leaders: Vec<u32>,
    in_leaders: Option<u32>,
    root_in_leaders: u32,
}

impl Levels {
    fn new(sh: Shape, sites: &Sites, root: u32) -> Levels {
        let site = sites.members(sites.of[sh.rank as usize]);
        let leaders = sites.leaders(root);
        let place = |v: &[u32], r: u32| v.iter().position(|&x| x == r).map(|i| i as u32);
        let leader = leaders[sites.of[sh.rank as usize] as usize];
        Levels {
            in_site: place(&site, sh.rank).expect("a rank is in its site"),
            leader_in_site: place(&site, leader).expect("a leader is in its site"),
            in_leaders: place(&leaders, sh.rank),
            root_in_leaders: place(&leaders, root).expect("the root leads its site"),
            site,
            leaders,
        }
    }

    fn site_shape(&self) -> Shape {
        Shape {
            rank: self.in_site,
            size: self.site.len() as u32,
        }
    }

    fn leader_shape(&self) -> Option<Shape> {
        self.in_leaders.map(|rank| Shape {
            rank,
            size: self.leaders.len() as u32,
        })
    }
}

/// Appends `part` — a schedule built for the ranks of `group`, its rank i being
/// `group[i]` — to `s`, to run once everything in `s` completed; `part`'s input and
/// output buffers are `bufs`, its temporaries new ones of `s`.
pub(super) fn embed(s: &mut Schedule, part: Schedule, group: &[u32], bufs: [BufId; 2]) {
    let base = s.temps.len() as BufId;
    let buf = |b: BufId| {
        if b == INPUT || b == OUTPUT {
            bufs[b as usize]
        } else {
            b + base
        }
    };
    let reg = |r: Region| Region { buf: buf(r.buf), ..r };
    let peer = |p: u32| group[p as usize];
    s.temps.extend(part.temps);
    for step in part.steps {
        let local = step
            .local
            .into_iter()
            .filter_map(|l| match l {
                Local::Copy { from, to } => {
                    let (from, to) = (reg(from), reg(to));
                    (from != to).then_some(Local::Copy { from, to })
                }
                Local::Blocks(b) => Some(Local::Blocks(Blocks {
                    from: reg(b.from),
                    to: reg(b.to),
                    ..b
                })),
                Local::Reduce { input, inout } => Some(Local::Reduce {
                    input: reg(input),
                    inout: reg(inout),
                }),
            })
            .collect();
        let xfer = |x: Xfer| match x {
            Xfer::Send { peer: p, from } => Xfer::Send {
                peer: peer(p),
                from: reg(from),
            },
            Xfer::Recv { peer: p, into } => Xfer::Recv {
                peer: peer(p),
                into: reg(into),
            },
        };
        let xfers = step.xfers.into_iter().map(xfer).collect();
        let ahead = step.ahead.into_iter().map(|(n, x)| (n, xfer(x))).collect();
        s.steps.push(Step { local, xfers, ahead });
    }
}

/// Gathers each rank's `n` bytes (`src`, or its block of `dst` when in place) at its
/// site's leader, in the site's rank order, into a new temporary, which it returns.
fn gather_at_leader(
    s: &mut Schedule,
    sh: Shape,
    lv: &Levels,
    src: Option<BufId>,
    dst: BufId,
    n: usize,
    t: &Tuning,
) -> BufId {
    let own = s.temp(n);
    let mine = src.map_or(region(dst, sh.rank as usize * n, n), |b| region(b, 0, n));
    s.copy(mine, region(own, 0, n));
    let site_blocks = s.temp(n * lv.site.len());
    let within = algos::gather(lv.site_shape(), lv.leader_in_site, Some(INPUT), OUTPUT, n, t);
    embed(s, within, &lv.site, [own, site_blocks]);
    site_blocks
}

pub fn barrier(sh: Shape, sites: &Sites, t: &Tuning) -> Schedule {
    let lv = Levels::new(sh, sites, 0);
    let mut s = Schedule::default();
    // Everyone of the site arrived; the leaders agree; each releases its site.
    embed(&mut s, algos::barrier(lv.site_shape()), &lv.site, [INPUT, OUTPUT]);
    if let Some(sh) = lv.leader_shape() {
        embed(&mut s, algos::barrier(sh), &lv.leaders, [INPUT, OUTPUT]);
    }
    let release = algos::bcast(lv.site_shape(), lv.leader_in_site, OUTPUT, 0, t);
    embed(&mut s, release, &lv.site, [INPUT, OUTPUT]);
    s
}

/// `buf` holds `n` bytes at `root`, and everywhere at the end.
pub fn bcast(sh: Shape, sites: &Sites, root: u32, buf: BufId, n: usize, t: &Tuning) -> Schedule {
    let lv = Levels::new(sh, sites, root);
    let mut s = Schedule::default();
    if let Some(lsh) = lv.leader_shape() {
        let across = algos::bcast(lsh, lv.root_in_leaders, OUTPUT, n, t);
        embed(&mut s, across, &lv.leaders, [INPUT, buf]);
    }
    let within = algos::bcast(lv.site_shape(), lv.leader_in_site, OUTPUT, n, t);
    embed(&mut s, within, &lv.site, [INPUT, buf]);
    s
}

/// Reduces `n` bytes of `src` from every rank into `dst` at `root` (`src == dst` at the
/// root: in place); the operation is commutative.
pub fn reduce(sh: Shape, sites: &Sites, root: u32, src: BufId, dst: BufId, n: usize) -> Schedule {
    let lv = Levels::new(sh, sites, root);
    let mut s = Schedule::default();
    let site_sum = s.temp(n);
    let within = algos::reduce(lv.site_shape(), lv.leader_in_site, INPUT, OUTPUT, n, true);
    embed(&mut s, within, &lv.site, [src, site_sum]);
    if let Some(lsh) = lv.leader_shape() {
        let across = algos::reduce(lsh, lv.root_in_leaders, INPUT, OUTPUT, n, true);
        embed(&mut s, across, &lv.leaders, [site_sum, dst]);
    }
    s
}

/// Every rank ends with the reduction of all `src` in `dst` (`src == dst`: in place);
/// the operation is commutative. Short vectors go through one leader per site; long
/// ones are striped ([`allreduce_striped`]).
pub fn allreduce(
    sh: Shape,
    sites: &Sites,
    src: BufId,
    dst: BufId,
    n: usize,
    elem: usize,
    t: &Tuning,
) -> Schedule {
    let stripes = sites.smallest();
    if n >= t.allreduce_long && stripes >= 2 && n / elem.max(1) >= stripes {
        return allreduce_striped(sh, sites, src, dst, n, elem, stripes, t);
    }
    let lv = Levels::new(sh, sites, 0);
    let mut s = Schedule::default();
    let site_sum = s.temp(n);
    let within = algos::reduce(lv.site_shape(), lv.leader_in_site, INPUT, OUTPUT, n, true);
    embed(&mut s, within, &lv.site, [src, site_sum]);
    if let Some(lsh) = lv.leader_shape() {
        let across = algos::allreduce(lsh, INPUT, OUTPUT, n, elem, true, t);
        embed(&mut s, across, &lv.leaders, [site_sum, dst]);
    }
    let out = algos::bcast(lv.site_shape(), lv.leader_in_site, OUTPUT, n, t);
    embed(&mut s, out, &lv.site, [INPUT, dst]);
    s
}

/// A long allreduce in `stripes` parts (at most the smallest site's size), pipelined in
/// chunks (at most [`MAX_PIECES`], each part of a chunk at least
/// `PONTOON_COLL_SITE_PIECE` bytes). For each chunk in turn a reduce-scatter within each
/// site leaves part q at the site's q-th rank, which at once posts it to the q-th rank
/// of every other site and goes on with the next chunk; then, chunk by chunk as the
/// parts arrive, each q-th rank combines them in site order and an allgather within
/// each site puts the chunk together. Each site's vector crosses once each way, in one
/// WAN latency, over `stripes` connections whose windows add up (one leader's
/// connection would carry it alone), and the work within the sites runs beside the WAN
/// transfers instead of before and after them. Fewer, larger chunks won on the `wan`
/// testbed (docs/wan.md): each costs every rank of a site two rings of steps.
#[allow(clippy::too_many_arguments)]
fn allreduce_striped(
    sh: Shape,
    sites: &Sites,
    src: BufId,
    dst: BufId,
    n: usize,
    elem: usize,
    stripes: usize,
    t: &Tuning,
) -> Schedule {
    let lv = Levels::new(sh, sites, 0);
    let mut s = Schedule::default();
    let count = n / elem;
    let chunks = (n / (stripes * t.site_piece.max(1)))
        .clamp(1, MAX_PIECES)
        .min(count / stripes);
    // Part q of chunk c: its byte offset and length; ranks past the stripes own none.
    let part = |c: usize, q: usize| -> (usize, usize) {
        if q >= stripes {
            return (n, 0);
        }
        let (from, to) = (count * c / chunks, count * (c + 1) / chunks);
        let at = |q: usize| (from + (to - from) * q / stripes) * elem;
        (at(q), at(q + 1) - at(q))
    };
    let (p, q) = (lv.site.len(), lv.in_site as usize);
    let here = sites.of[sh.rank as usize];
    // This rank's part of each chunk, back to back in `acc` (its site's sum), in
    // `reduced` (all sites' sum) and in one block of `remote` per other site.
    let mut mine = Vec::with_capacity(chunks);
    let mut total = 0;
    for c in 0..chunks {
        let len = part(c, q).1;
        mine.push((total, len));
        total += len;
    }
    let largest = mine.iter().map(|m| m.1).max().unwrap_or(0);
    let (acc, reduced, tmp) = (s.temp(total), s.temp(total), s.temp(largest));
    let others: Vec<u32> = (0..sites.count()).filter(|&x| x != here).collect();
    let remote = s.temp(total * others.len());
    let from_site = |x: u32, (off, len): (usize, usize)| match others.iter().position(|&o| o == x) {
        Some(i) => region(remote, i * total + off, len),
        None => region(acc, off, len),
    };
    let owner = q < stripes;
    // The step that posts each chunk's exchange across the WAN.
    let mut posted = Vec::with_capacity(chunks);
    for (c, &m) in mine.iter().enumerate() {
        let block = |j: usize| {
            let (off, len) = part(c, j);
            region(src, off, len)
        };
        let sum = from_site(here, m);
        let into = region(tmp, 0, m.1);
        s.copy(block(q), sum);
        for i in 1..p {
            s.send(lv.site[(q + i) % p], block((q + i) % p));
            s.recv(lv.site[(q + p - i) % p], into);
            s.reduce(into, sum);
        }
        if owner {
            s.sync();
            posted.push(s.steps.len() - 1);
            for &x in &others {
                let peer = sites.members(x)[q];
                // Waited for by the step before the one that combines the chunk (set below).
                s.send_ahead(peer, sum, 0);
                s.recv_ahead(peer, from_site(x, m), 0);
            }
        }
    }
    for (c, &m) in mine.iter().enumerate() {
        if let Some(&at) = posted.get(c) {
            s.new_step();
            let combine = s.steps.len() - 1;
            for posted_ahead in &mut s.steps[at].ahead {
                posted_ahead.0 = combine - 1 - at;
            }
            // The same order at every site: every site's q-th rank gets the same bits.
            let out = region(reduced, m.0, m.1);
            let last = sites.count() - 1;
            s.copy(from_site(last, m), out);
            for x in (0..last).rev() {
                s.reduce(from_site(x, m), out);
            }
        }
        let parts: Vec<(usize, usize)> = (0..p).map(|j| part(c, j)).collect();
        let own = owner.then(|| region(INPUT, m.0, m.1));
        let gather = algos::allgatherv(lv.site_shape(), own, OUTPUT, &parts);
        embed(&mut s, gather, &lv.site, [reduced, dst]);
    }
    s
}

/// Block r of `dst` (`n` bytes each) gets rank r's `src` everywhere (`src` None: in
/// place, rank r's block already at r in `dst`). Long ones are pipelined
/// ([`allgather_pipelined`]).
pub fn allgather(sh: Shape, sites: &Sites, src: Option<BufId>, dst: BufId, n: usize, t: &Tuning) -> Schedule {
    if sites.of.len() * n >= t.allgather_long {
        return allgather_pipelined(sh, sites, src, dst, n, t);
    }
    let lv = Levels::new(sh, sites, 0);
    let mut s = Schedule::default();
    let p = sites.of.len();
    let site_blocks = gather_at_leader(&mut s, sh, &lv, src, dst, n, t);
    if let Some(lsh) = lv.leader_shape() {
        // The leaders swap their sites' blocks, site after site, then put them in rank order.
        let blocks = sites.blocks(n);
        let by_site = s.temp(p * n);
        let mine = Some(region(INPUT, 0, blocks[lsh.rank as usize].1));
        let across = algos::allgatherv(lsh, mine, OUTPUT, &blocks);
        embed(&mut s, across, &lv.leaders, [site_blocks, by_site]);
        for (i, r) in sites.in_site_order().into_iter().enumerate() {
            s.copy(region(by_site, i * n, n), region(dst, r as usize * n, n));
        }
    }
    let out = algos::bcast(lv.site_shape(), lv.leader_in_site, OUTPUT, p * n, t);
    embed(&mut s, out, &lv.site, [INPUT, dst]);
    s
}

/// Most pieces a long site-aware allgather sends across the WAN in.
const MAX_PIECES: usize = 8;

/// `len` bytes of `buf` from `off` in pieces of at least `PONTOON_COLL_SITE_PIECE`
/// bytes (at most [`MAX_PIECES`]), the same at every rank. Fewer, larger pieces won on
/// the `wan` testbed (8 ranks, two sites, 20 ms): an allgather's 2 MiB per site in 1,
/// 2, 4, 8 and 16 pieces took 42, 41, 42–51, 48 and 59 ms; each piece costs every rank
/// of a chain a step.
fn pieces(buf: BufId, off: usize, len: usize, t: &Tuning) -> Vec<Region> {
    let k = (len / t.site_piece.max(1)).clamp(1, MAX_PIECES);
    (0..k)
        .map(|i| region(buf, off + len * i / k, len * (i + 1) / k - len * i / k))
        .collect()
}

/// A pipeline down a chain through this rank's site (its leader, then the others in
/// rank order): in round i the leader sends the regions `down(i)` names (after
/// `first`, its transfers of round 0: what it posts ahead across the WAN); every other
/// rank receives them from the one before it in round i and passes them on in round
/// i + 1. One step per round, so that a region that arrives by round i's end (posted
/// ahead, waited for `i` steps on) may be named by `down(i + 1)`.
fn chain_rounds(
    s: &mut Schedule,
    sh: Shape,
    lv: &Levels,
    rounds: usize,
    down: impl Fn(usize) -> Vec<Region>,
    first: impl FnOnce(&mut Schedule),
) {
    let head = lv.site[lv.leader_in_site as usize];
    let chain: Vec<u32> = std::iter::once(head)
        .chain(lv.site.iter().copied().filter(|&r| r != head))
        .collect();
    let at = chain
        .iter()
        .position(|&r| r == sh.rank)
        .expect("a rank is in its site's chain");
    let next = chain.get(at + 1).copied();
    let mut first = Some(first);
    if at == 0 {
        for i in 0..=rounds {
            s.new_step();
            if let Some(first) = first.take() {
                first(s);
            }
            if let Some(next) = next {
                for piece in down(i) {
                    s.send(next, piece);
                }
            }
        }
        return;
    }
    let prev = chain[at - 1];
    for i in 0..=rounds + 1 {
        s.new_step();
        if i <= rounds {
            for piece in down(i) {
                s.recv(prev, piece);
            }
        }
        if let Some(next) = next.filter(|_| i >= 1) {
            for piece in down(i - 1) {
                s.send(next, piece);
            }
        }
    }
}

/// A long allgather whose levels overlap: each site's blocks gather at its leader;
/// the leaders swap them in pieces ([`pieces`]) posted at once; and down a chain
/// through each site go the site's own pieces at once and each remote piece as soon
/// as it arrived, every rank passing on one round's pieces while it takes the next.
/// The WAN carries each site's blocks to each other site once, as before, but the
/// site's broadcast of the other sites' blocks runs beside their transfer instead of
/// after it.
fn allgather_pipelined(
    sh: Shape,
    sites: &Sites,
    src: Option<BufId>,
    dst: BufId,
    n: usize,
    t: &Tuning,
) -> Schedule {
    let lv = Levels::new(sh, sites, 0);
    let mut s = Schedule::default();
    let blocks = sites.blocks(n);
    let here = sites.of[sh.rank as usize] as usize;
    // Every rank's copy of all blocks in site order (each site's blocks back to back).
    let by_site = s.temp(sites.of.len() * n);
    let site_blocks = gather_at_leader(&mut s, sh, &lv, src, dst, n, t);
    if lv.in_leaders.is_some() {
        s.copy(
            region(site_blocks, 0, blocks[here].1),
            region(by_site, blocks[here].0, blocks[here].1),
        );
    }
    // Site x's blocks in pieces: piece i is `parts[x][i]`, a region of `by_site`.
    let parts: Vec<Vec<Region>> = blocks
        .iter()
        .map(|&(off, len)| pieces(by_site, off, len, t))
        .collect();
    let rounds = parts.iter().map(Vec::len).max().unwrap_or(0);
    // What goes down the chain in round i: the site's own piece i, and the other
    // sites' pieces i - 1 (the leader has them from the round before).
    let down = |i: usize| -> Vec<Region> {
        let own = parts[here].get(i).copied();
        let remote = (0..parts.len())
            .filter(|&x| x != here && i >= 1)
            .filter_map(|x| parts[x].get(i - 1).copied());
        own.into_iter().chain(remote).filter(|r| r.len > 0).collect()
    };
    let first = |s: &mut Schedule| {
        if lv.in_leaders.is_none() {
            return;
        }
        for (x, &other) in lv.leaders.iter().enumerate().filter(|&(x, _)| x != here) {
            for &mine in parts[here].iter().filter(|r| r.len > 0) {
                s.send_ahead(other, mine, rounds);
            }
            for (j, &theirs) in parts[x].iter().enumerate().filter(|(_, r)| r.len > 0) {
                s.recv_ahead(other, theirs, j);
            }
        }
    };
    chain_rounds(&mut s, sh, &lv, rounds, down, first);
    for (i, r) in sites.in_site_order().into_iter().enumerate() {
        s.copy(region(by_site, i * n, n), region(dst, r as usize * n, n));
    }
    s
}

/// Gathers `n` bytes from each rank's `src` into `dst` at `root`, in rank order (`src`
/// None: in place, the root's block already in `dst`): each site's blocks at its leader,
/// then one message per site to the root.
pub fn gather(
    sh: Shape,
    sites: &Sites,
    root: u32,
    src: Option<BufId>,
    dst: BufId,
    n: usize,
    t: &Tuning,
) -> Schedule {
    let lv = Levels::new(sh, sites, root);
    let mut s = Schedule::default();
    let site_blocks = gather_at_leader(&mut s, sh, &lv, src, dst, n, t);
    if let Some(lsh) = lv.leader_shape() {
        let blocks = sites.blocks(n);
        let at_root = sh.rank == root;
        let by_site = s.temp(if at_root { sites.of.len() * n } else { 0 });
        let mine = Some(region(INPUT, 0, blocks[lsh.rank as usize].1));
        let across = algos::gatherv(lsh, lv.root_in_leaders, mine, OUTPUT, &blocks);
        embed(&mut s, across, &lv.leaders, [site_blocks, by_site]);
        if at_root {
            for (i, r) in sites.in_site_order().into_iter().enumerate() {
                s.copy(region(by_site, i * n, n), region(dst, r as usize * n, n));
            }
        }
    }
    s
}

/// Block i of `src` at `root` (`n` bytes each) to rank i's `dst` (`dst` None: in place
/// at the root, its block stays in `src`): one message per site from the root to the
/// site's leader, which scatters it within its site.
pub fn scatter(
    sh: Shape,
    sites: &Sites,
    root: u32,
    src: BufId,
    dst: Option<BufId>,
    n: usize,
    t: &Tuning,
) -> Schedule {
    let lv = Levels::new(sh, sites, root);
    let mut s = Schedule::default();
    let site_blocks = s.temp(n * lv.site.len());
    if let Some(lsh) = lv.leader_shape() {
        let blocks = sites.blocks(n);
        let at_root = sh.rank == root;
        let by_site = s.temp(if at_root { sites.of.len() * n } else { 0 });
        if at_root {
            for (i, r) in sites.in_site_order().into_iter().enumerate() {
                s.copy(region(src, r as usize * n, n), region(by_site, i * n, n));
            }
        }
        let mine = Some(region(OUTPUT, 0, blocks[lsh.rank as usize].1));
        let across = algos::scatterv(lsh, lv.root_in_leaders, INPUT, &blocks, mine);
        embed(&mut s, across, &lv.leaders, [by_site, site_blocks]);
    }
    let own = s.temp(n);
    let within = algos::scatter(lv.site_shape(), lv.leader_in_site, INPUT, Some(OUTPUT), n, t);
    embed(&mut s, within, &lv.site, [site_blocks, own]);
    if let Some(d) = dst {
        s.copy(region(own, 0, n), region(d, 0, n));
    }
    s
}

/// Block r of `dst` (`blocks[r]`, known at every rank) gets rank r's `src` everywhere
/// (`src` None: in place, rank r's block already in `dst`). The blocks gather at their
/// site's leader in site order, the leaders swap their sites' blocks, and each leader
/// broadcasts them all within its site: each site's blocks cross to each other site
/// once, where a flat ring carries every block across at nearly every step.
pub fn allgatherv(
    sh: Shape,
    sites: &Sites,
    src: Option<Region>,
    dst: BufId,
    blocks: &[(usize, usize)],
    t: &Tuning,
) -> Schedule {
    let lv = Levels::new(sh, sites, 0);
    let mut s = Schedule::default();
    // Every rank's block in site order, packed: where each rank's lies, and each site's run.
    let mut packed_at = vec![0; blocks.len()];
    let mut runs = Vec::new();
    let mut total = 0;
    for site in 0..sites.count() {
        let start = total;
        for r in sites.members(site) {
            packed_at[r as usize] = total;
            total += blocks[r as usize].1;
        }
        runs.push((start, total - start));
    }
    let packed = s.temp(total);
    let r = sh.rank as usize;
    let own = src.unwrap_or_else(|| region(dst, blocks[r].0, blocks[r].1));
    let site_blocks: Vec<(usize, usize)> = lv
        .site
        .iter()
        .map(|&m| (packed_at[m as usize], blocks[m as usize].1))
        .collect();
    let mine = Some(region(INPUT, own.off, own.len));
    let within = algos::gatherv(lv.site_shape(), lv.leader_in_site, mine, OUTPUT, &site_blocks);
    embed(&mut s, within, &lv.site, [own.buf, packed]);
    if let Some(lsh) = lv.leader_shape() {
        let across = algos::allgatherv(lsh, None, OUTPUT, &runs);
        embed(&mut s, across, &lv.leaders, [INPUT, packed]);
    }
    let out = algos::bcast(lv.site_shape(), lv.leader_in_site, OUTPUT, total, t);
    embed(&mut s, out, &lv.site, [INPUT, packed]);
    for (m, &(off, len)) in blocks.iter().enumerate() {
        s.copy(region(packed, packed_at[m], len), region(dst, off, len));
    }
    s
}

/// The most a site-aware alltoall has two leaders swap: beyond it their one CPU and one
/// stream of eager messages carry more than the ranks of a flat exchange together
/// (8 ranks over two sites 20 ms apart: 512 KiB blocks, 8 MiB between the leaders, ran
/// 1.2x flat's time, 64 KiB blocks 0.35-0.44x).
pub const LEADER_EXCHANGE_MAX: usize = 4 << 20;

/// Alltoall of long blocks (`n` bytes each; `src` None: in place) across sites: each
/// rank's blocks for other sites gather at its site's leader, which sends each other
/// site's leader one message holding all the blocks between the two sites and scatters
/// what it gets to its site's ranks; blocks within a site go straight to their ranks. The
/// WAN carries one exchange per pair of sites, on the leaders' lanes, which every
/// collective keeps busy (their congestion windows stay open), where the flat pairwise
/// exchange waits a WAN round trip at every other step, and an exchange between every
/// pair of ranks at once (or through one courier per remote rank, tried) opens windows
/// that have gone cold since their last use.
pub fn alltoall(sh: Shape, sites: &Sites, src: Option<BufId>, dst: BufId, n: usize, t: &Tuning) -> Schedule {
    let lv = Levels::new(sh, sites, 0);
    let mut s = Schedule::default();
    let p = sites.of.len();
    let src = src.unwrap_or_else(|| {
        let copy = s.temp(p * n);
        s.copy(region(dst, 0, p * n), region(copy, 0, p * n));
        copy
    });
    let here = sites.of[sh.rank as usize];
    // The ranks of the other sites, in site order: the order of every packed buffer.
    let far: Vec<u32> = sites
        .in_site_order()
        .into_iter()
        .filter(|&r| sites.of[r as usize] != here)
        .collect();
    let (k, chunk) = (lv.site.len(), far.len() * n);
    let mine = s.temp(chunk);
    for (i, &f) in far.iter().enumerate() {
        s.copy(region(src, f as usize * n, n), region(mine, i * n, n));
    }
    let leader = lv.in_leaders.is_some();
    let gathered = s.temp(if leader { k * chunk } else { 0 });
    let gather = algos::gather(lv.site_shape(), lv.leader_in_site, Some(INPUT), OUTPUT, chunk, t);
    embed(&mut s, gather, &lv.site, [mine, gathered]);
    let back = s.temp(if leader { k * chunk } else { 0 });
    if leader {
        // Each other site's blocks from this site's ranks, and theirs for ours.
        let mut exchanges = Vec::new();
        let mut at = 0;
        for y in (0..sites.count()).filter(|&y| y != here) {
            let theirs = sites.members(y).len();
            let (to, from) = (s.temp(k * theirs * n), s.temp(theirs * k * n));
            for a in 0..k {
                let part = region(gathered, (a * far.len() + at) * n, theirs * n);
                s.copy(part, region(to, a * theirs * n, theirs * n));
            }
            exchanges.push((lv.leaders[y as usize], to, from, theirs, at));
            at += theirs;
        }
        for &(peer, to, from, theirs, _) in &exchanges {
            s.recv(peer, region(from, 0, theirs * k * n));
            s.send(peer, region(to, 0, k * theirs * n));
        }
        // Block (b of site y -> a of ours) to member a's part, in the order of `far`.
        for &(_, _, from, theirs, at) in &exchanges {
            for b in 0..theirs {
                for a in 0..k {
                    let block = region(from, (b * k + a) * n, n);
                    s.copy(block, region(back, a * chunk + (at + b) * n, n));
                }
            }
        }
    }
    // Within the site, straight (its leader joins once the WAN exchange is out of the way).
    let blocks: Vec<(usize, usize)> = lv.site.iter().map(|&m| (m as usize * n, n)).collect();
    let within = algos::alltoallv(lv.site_shape(), Some(INPUT), &blocks, OUTPUT, &blocks, false);
    embed(&mut s, within, &lv.site, [src, dst]);
    let got = s.temp(chunk);
    let scatter = algos::scatter(lv.site_shape(), lv.leader_in_site, INPUT, Some(OUTPUT), chunk, t);
    embed(&mut s, scatter, &lv.site, [back, got]);
    for (i, &f) in far.iter().enumerate() {
        s.copy(region(got, i * n, n), region(dst, f as usize * n, n));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::Sites;

    #[test]
    fn aligned_blocks_and_the_largest_leader_exchange() {
        let sites = |of: &[u32]| Sites::from_indices(of.to_vec());
        assert!(sites(&[0, 0, 0, 0, 1, 1, 1, 1]).aligned_blocks());
        assert!(sites(&[0, 0, 1, 1, 2, 2]).aligned_blocks());
        assert!(!sites(&[0, 1, 0, 1, 0, 1, 0, 1]).aligned_blocks(), "interleaved");
        assert!(
            !sites(&[0, 0, 0, 1, 1, 1]).aligned_blocks(),
            "3 is no power of two"
        );
        assert!(!sites(&[0, 0, 0, 0, 1, 1]).aligned_blocks(), "uneven");
        assert_eq!(sites(&[0, 1, 0, 1, 0, 1, 0, 1]).largest_exchange(10), 160);
        assert_eq!(sites(&[0, 0, 1, 1, 2, 0, 1, 0]).largest_exchange(1), 12);
    }
}
