//! Virtual topologies: `MPI_Dims_create`, the balanced factorisation that programs use to
//! lay a grid over the ranks, and Cartesian, graph and distributed-graph communicators
//! (`pontoon::topo`).

use std::os::raw::c_int;
use std::rc::Rc;

use pontoon::{Cart, Topology};

use crate::abi::*;
use crate::boundary::{fail, Fail};
use crate::cargs::{In, Out};
use crate::comms::publish;
use crate::mpi_fn;
use crate::state::mpi;

/// The grid of `comm`, or the error MPI gives a communicator without one.
fn cart_of(comm: MPI_Comm) -> Result<Cart, Fail> {
    mpi()?
        .comm(comm)?
        .cart()
        .ok_or_else(|| Fail::new(MPI_ERR_TOPOLOGY, "the communicator has no Cartesian topology"))
}

/// `ndims` entries of a C array (none for 0 dimensions, where the pointer may be null).
fn dims_arg<'a>(p: In<c_int>, ndims: c_int, what: &str) -> Result<&'a [c_int], Fail> {
    let n =
        usize::try_from(ndims).map_err(|_| Fail::new(MPI_ERR_DIMS, format!("ndims {ndims} is negative")))?;
    p.slice(n, what)
}

/// A grid's `dims` and `periods` arguments.
fn grid_args<'a>(
    ndims: c_int,
    dims: In<c_int>,
    periods: In<c_int>,
) -> Result<(&'a [c_int], Vec<bool>), Fail> {
    let (dims, periods) = (
        dims_arg(dims, ndims, "dims")?,
        dims_arg(periods, ndims, "periods")?,
    );
    Ok((dims, periods.iter().map(|p| *p != 0).collect()))
}

/// MPI_Cart_map's and MPI_Graph_map's answer without reordering: a rank keeps its place
/// if the topology has room for it (`n` places).
fn place(rank: u32, n: u32) -> c_int {
    if rank < n {
        rank as c_int
    } else {
        MPI_UNDEFINED
    }
}

mpi_fn! {
    fn MPI_Cart_create(comm_old: MPI_Comm, ndims: c_int, dims: In<c_int>, periods: In<c_int>, reorder: c_int, comm_cart: Out<MPI_Comm>) on comm_old {
        let _ = reorder; // ranks keep their order: MPI allows it
        let m = mpi()?;
        let newcomm = comm_cart.place("comm_cart")?;
        let (dims, periods) = grid_args(ndims, dims, periods)?;
        let made = m.comm(comm_old)?.cart_create(dims, &periods)?;
        publish(m, comm_old, made, newcomm)
    }
}

mpi_fn! {
    fn MPI_Cartdim_get(comm: MPI_Comm, ndims: Out<c_int>) on comm {
        ndims.set("ndims", cart_of(comm)?.dims().len() as c_int)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Cart_get(comm: MPI_Comm, maxdims: c_int, dims: Out<c_int>, periods: Out<c_int>, coords: Out<c_int>) on comm {
        let g = cart_of(comm)?;
        let n = g.dims().len().min(usize::try_from(maxdims).unwrap_or(0));
        let here = g.coords(mpi()?.comm(comm)?.rank())?;
        for (i, d) in dims.slice(n, "dims")?.iter_mut().enumerate() {
            *d = g.dims()[i] as c_int;
        }
        for (i, p) in periods.slice(n, "periods")?.iter_mut().enumerate() {
            *p = g.periods()[i] as c_int;
        }
        for (i, c) in coords.slice(n, "coords")?.iter_mut().enumerate() {
            *c = here[i] as c_int;
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Cart_rank(comm: MPI_Comm, coords: In<c_int>, rank: Out<c_int>) on comm {
        let g = cart_of(comm)?;
        let coords = coords.slice(g.dims().len(), "coords")?;
        *rank.place("rank")? = g.rank(coords).map_err(|e| Fail::new(MPI_ERR_ARG, e.to_string()))? as c_int;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Cart_coords(comm: MPI_Comm, rank: c_int, maxdims: c_int, coords: Out<c_int>) on comm {
        let g = cart_of(comm)?;
        let r = u32::try_from(rank).map_err(|_| Fail::new(MPI_ERR_RANK, format!("rank {rank} is negative")))?;
        let here = g.coords(r).map_err(|e| Fail::new(MPI_ERR_RANK, e.to_string()))?;
        if usize::try_from(maxdims).unwrap_or(0) < here.len() {
            return fail(MPI_ERR_ARG, format!("maxdims {maxdims} is below the grid's {} dimensions", here.len()));
        }
        for (c, v) in coords.slice(here.len(), "coords")?.iter_mut().zip(here) {
            *c = v as c_int;
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Cart_shift(comm: MPI_Comm, direction: c_int, disp: c_int, rank_source: Out<c_int>, rank_dest: Out<c_int>) on comm {
        let m = mpi()?;
        let g = cart_of(comm)?;
        let dim = usize::try_from(direction).map_err(|_| Fail::new(MPI_ERR_ARG, format!("direction {direction} is negative")))?;
        let (from, to) = g.shift(m.comm(comm)?.rank(), dim, disp).map_err(|e| Fail::new(MPI_ERR_ARG, e.to_string()))?;
        let rank = |r: Option<u32>| r.map_or(MPI_PROC_NULL, |r| r as c_int);
        rank_source.set("rank_source", rank(from))?;
        rank_dest.set("rank_dest", rank(to))?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Cart_sub(comm: MPI_Comm, remain_dims: In<c_int>, newcomm: Out<MPI_Comm>) on comm {
        let m = mpi()?;
        let g = cart_of(comm)?;
        let newcomm = newcomm.place("newcomm")?;
        let keep: Vec<bool> = remain_dims.slice(g.dims().len(), "remain_dims")?.iter().map(|k| *k != 0).collect();
        let made = m.comm(comm)?.cart_sub(&keep)?;
        publish(m, comm, Some(made), newcomm)
    }
}

mpi_fn! {
    /// Without reordering, a rank's place in the grid is its rank; ranks beyond the
    /// grid get MPI_UNDEFINED.
    fn MPI_Cart_map(comm: MPI_Comm, ndims: c_int, dims: In<c_int>, periods: In<c_int>, newrank: Out<c_int>) on comm {
        let c = mpi()?.comm(comm)?;
        let (dims, periods) = grid_args(ndims, dims, periods)?;
        *newrank.place("newrank")? = place(c.rank(), Cart::new(dims, &periods)?.size());
        Ok(())
    }
}

/// Fills the zero entries of `dims` so that the product of all entries is `nnodes`, the
/// filled ones as close to each other as possible and in non-increasing order.
fn dims_create(nnodes: c_int, dims: &mut [c_int]) -> Result<(), Fail> {
    if nnodes < 1 {
        return fail(MPI_ERR_ARG, format!("nnodes must be positive, not {nnodes}"));
    }
    if let Some(d) = dims.iter().find(|d| **d < 0) {
        return fail(MPI_ERR_DIMS, format!("dimension {d} is negative"));
    }
    let fixed: i64 = dims.iter().filter(|d| **d > 0).map(|d| i64::from(*d)).product();
    let free = dims.iter().filter(|d| **d == 0).count();
    if fixed == 0 || i64::from(nnodes) % fixed != 0 {
        return fail(
            MPI_ERR_DIMS,
            format!(
                "{nnodes} processes cannot be split over the fixed dimensions (their product is {fixed})"
            ),
        );
    }
    let left = i64::from(nnodes) / fixed;
    if free == 0 {
        return match left {
            1 => Ok(()),
            _ => fail(
                MPI_ERR_DIMS,
                format!("the dimensions multiply to {fixed}, not {nnodes}"),
            ),
        };
    }
    // As close to each other as possible (MPI 4.1 §8.5.2): the split with the smallest
    // spread between its largest and smallest dimension; greedy factor placement is not
    // (72 over two: 12 × 6 where 9 × 8 exists).
    let mut free_dims = most_balanced(left, free);
    free_dims.sort_unstable_by(|a, b| b.cmp(a));
    for (slot, d) in dims.iter_mut().filter(|d| **d == 0).zip(free_dims) {
        *slot = d as c_int;
    }
    Ok(())
}

/// `n` as the product of `k` non-increasing factors with the smallest spread between the
/// largest and the smallest (then the smallest largest factor); `k` ≥ 1.
fn most_balanced(n: i64, k: usize) -> Vec<i64> {
    let mut divisors: Vec<i64> = (1..)
        .take_while(|d| d * d <= n)
        .filter(|d| n % d == 0)
        .flat_map(|d| [d, n / d])
        .collect();
    divisors.sort_unstable();
    divisors.dedup();
    let mut best: Option<Vec<i64>> = None;
    // The largest factor is at least the k-th root of n; the larger it is, the smaller the
    // smallest must be, so the spread only grows from some point on.
    for &d in divisors.iter().filter(|&&d| at_least_root(d, k, n)) {
        let spread_at_least = d - root(n / d, k - 1);
        if best.as_ref().is_some_and(|b| spread_at_least >= b[0] - b[k - 1]) {
            break;
        }
        if let Some(rest) = largest_smallest(n / d, k - 1, d, &divisors) {
            let v: Vec<i64> = std::iter::once(d).chain(rest).collect();
            if best.as_ref().is_none_or(|b| v[0] - v[k - 1] < b[0] - b[k - 1]) {
                best = Some(v);
            }
        }
    }
    best.expect("n × 1 × … × 1 is a split")
}

/// `n` as `k` non-increasing factors of at most `cap` (from `divisors`, ascending) whose
/// smallest is as large as possible; `None` if there is none.
fn largest_smallest(n: i64, k: usize, cap: i64, divisors: &[i64]) -> Option<Vec<i64>> {
    if k <= 1 {
        return (n <= cap && (k == 1 || n == 1)).then(|| vec![n; k]);
    }
    let mut best: Option<Vec<i64>> = None;
    let candidates = divisors
        .iter()
        .copied()
        .filter(|&d| d <= cap && n % d == 0 && at_least_root(d, k, n));
    for d in candidates {
        // No factor of the rest can be smaller than its smallest, nor larger than its root.
        if best.as_ref().is_some_and(|b| root(n / d, k - 1) <= b[k - 1]) {
            break;
        }
        if let Some(rest) = largest_smallest(n / d, k - 1, d, divisors) {
            if best.as_ref().is_none_or(|b| rest[k - 2] > b[k - 1]) {
                best = Some(std::iter::once(d).chain(rest).collect());
            }
        }
    }
    best
}

/// Whether `d` to the `k` is at least `n`.
fn at_least_root(d: i64, k: usize, n: i64) -> bool {
    d.checked_pow(k as u32).is_none_or(|p| p >= n)
}

/// The largest r with r to the `k` at most `n` (`k` ≥ 1, `n` ≥ 1).
fn root(n: i64, k: usize) -> i64 {
    if k == 0 {
        return 1;
    }
    let mut r = (n as f64).powf(1.0 / k as f64).round() as i64;
    while r > 1 && r.checked_pow(k as u32).is_none_or(|p| p > n) {
        r -= 1;
    }
    while (r + 1).checked_pow(k as u32).is_some_and(|p| p <= n) {
        r += 1;
    }
    r.max(1)
}

mpi_fn! {
    fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: Out<c_int>) {
        if ndims < 0 {
            return fail(MPI_ERR_DIMS, format!("ndims {ndims} is negative"));
        }
        dims_create(nnodes, dims.slice(ndims as usize, "dims")?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(nnodes: c_int, mut dims: Vec<c_int>) -> Vec<c_int> {
        dims_create(nnodes, &mut dims).unwrap();
        dims
    }

    #[test]
    fn dimensions_are_balanced_and_non_increasing() {
        assert_eq!(filled(6, vec![0, 0]), [3, 2]);
        assert_eq!(filled(12, vec![0, 0, 0]), [3, 2, 2]);
        assert_eq!(filled(16, vec![0, 0]), [4, 4]);
        assert_eq!(filled(7, vec![0, 0]), [7, 1]);
        assert_eq!(filled(1, vec![0, 0, 0]), [1, 1, 1]);
        assert_eq!(filled(24, vec![0, 3, 0]), [4, 3, 2]);
        assert_eq!(filled(1, vec![]), Vec::<c_int>::new());
        // Balanced, not greedy: 72 = 9 × 8 (a greedy split gives 12 × 6).
        assert_eq!(filled(72, vec![0, 0]), [9, 8]);
        assert_eq!(filled(72, vec![0, 0, 0]), [6, 4, 3]);
        assert_eq!(filled(1 << 20, vec![0; 10]), [4, 4, 4, 4, 4, 4, 4, 4, 4, 4]);
        assert_eq!(filled(2 * 3 * 5 * 7 * 11 * 13, vec![0, 0, 0]), [35, 33, 26]);
        // A number with 1,344 divisors over 8 dimensions, and a large prime: quick.
        let d = filled(735_134_400, vec![0; 8]);
        assert_eq!(d.iter().map(|&x| i64::from(x)).product::<i64>(), 735_134_400);
        assert_eq!(filled(2_147_483_647, vec![0, 0]), [2_147_483_647, 1]);
    }

    /// Every non-increasing split of `n` into `k` factors of at most `cap`.
    fn all_splits(n: i64, k: usize, cap: i64) -> Vec<Vec<i64>> {
        if k == 0 {
            return if n == 1 { vec![vec![]] } else { vec![] };
        }
        (1..=cap.min(n))
            .filter(|d| n % d == 0)
            .flat_map(|d| {
                all_splits(n / d, k - 1, d).into_iter().map(move |rest| {
                    let mut v = vec![d];
                    v.extend(rest);
                    v
                })
            })
            .collect()
    }

    #[test]
    fn the_search_finds_what_trying_every_split_finds() {
        for n in 1..=300 {
            for k in 1..=4 {
                let got = most_balanced(n, k);
                assert_eq!(got.iter().product::<i64>(), n);
                assert!(got.windows(2).all(|w| w[0] >= w[1]), "{n} over {k}: {got:?}");
                let best = all_splits(n, k, n)
                    .into_iter()
                    .min_by_key(|v| (v[0] - v[k - 1], v[0]))
                    .unwrap();
                assert_eq!(
                    (got[0] - got[k - 1], got[0]),
                    (best[0] - best[k - 1], best[0]),
                    "{n} over {k}"
                );
            }
        }
    }

    #[test]
    fn impossible_requests_are_errors() {
        assert_eq!(dims_create(10, &mut [3, 0]).unwrap_err().class, MPI_ERR_DIMS);
        assert_eq!(dims_create(6, &mut [2, 2]).unwrap_err().class, MPI_ERR_DIMS);
        assert_eq!(dims_create(6, &mut [-1, 0]).unwrap_err().class, MPI_ERR_DIMS);
    }
}

/// The topology of `comm`, or the error MPI gives a communicator without one.
fn topology_of(comm: MPI_Comm) -> Result<Rc<Topology>, Fail> {
    mpi()?
        .comm(comm)?
        .topology()
        .ok_or_else(|| Fail::new(MPI_ERR_TOPOLOGY, "the communicator has no topology"))
}

/// A graph's `index` and `edges` arrays (`nnodes` entries, then as many as the last index).
fn graph_args<'a>(
    nnodes: c_int,
    index: In<c_int>,
    edges: In<c_int>,
) -> Result<(&'a [c_int], &'a [c_int]), Fail> {
    let index = dims_arg(index, nnodes, "index")?;
    let nedges = index.last().copied().unwrap_or(0).max(0) as usize;
    Ok((index, edges.slice(nedges, "edges")?))
}

/// `f` of the `index` and `edges` of a graph communicator.
fn with_graph<R>(comm: MPI_Comm, f: impl FnOnce(&[u32], &[u32]) -> R) -> Result<R, Fail> {
    match &*topology_of(comm)? {
        Topology::Graph { index, edges } => Ok(f(index, edges)),
        _ => fail(MPI_ERR_TOPOLOGY, "the communicator has no graph topology"),
    }
}

/// The neighbours of node `rank` of a graph communicator.
fn graph_neighbors(comm: MPI_Comm, rank: c_int) -> Result<Vec<u32>, Fail> {
    let r = u32::try_from(rank).map_err(|_| Fail::new(MPI_ERR_RANK, format!("rank {rank} is negative")))?;
    with_graph(comm, |index, edges| Topology::graph_neighbors(index, edges, r))?
        .map_err(|e| Fail::new(MPI_ERR_RANK, e.to_string()))
}

mpi_fn! {
    fn MPI_Graph_create(comm_old: MPI_Comm, nnodes: c_int, index: In<c_int>, edges: In<c_int>, reorder: c_int, comm_graph: Out<MPI_Comm>) on comm_old {
        let _ = reorder;
        let m = mpi()?;
        let newcomm = comm_graph.place("comm_graph")?;
        let (index, edges) = graph_args(nnodes, index, edges)?;
        let made = m.comm(comm_old)?.graph_create(index, edges)?;
        publish(m, comm_old, made, newcomm)
    }
}

mpi_fn! {
    fn MPI_Graphdims_get(comm: MPI_Comm, nnodes: Out<c_int>, nedges: Out<c_int>) on comm {
        let (n, e) = with_graph(comm, |index, edges| (index.len(), edges.len()))?;
        nnodes.set("nnodes", n as c_int)?;
        nedges.set("nedges", e as c_int)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Graph_get(comm: MPI_Comm, maxindex: c_int, maxedges: c_int, index: Out<c_int>, edges: Out<c_int>) on comm {
        with_graph(comm, |gi, ge| {
            let ni = gi.len().min(usize::try_from(maxindex).unwrap_or(0));
            let ne = ge.len().min(usize::try_from(maxedges).unwrap_or(0));
            for (d, v) in index.slice(ni, "index")?.iter_mut().zip(gi) {
                *d = *v as c_int;
            }
            for (d, v) in edges.slice(ne, "edges")?.iter_mut().zip(ge) {
                *d = *v as c_int;
            }
            Ok(())
        })?
    }
}

mpi_fn! {
    fn MPI_Graph_neighbors_count(comm: MPI_Comm, rank: c_int, nneighbors: Out<c_int>) on comm {
        nneighbors.set("nneighbors", graph_neighbors(comm, rank)?.len() as c_int)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Graph_neighbors(comm: MPI_Comm, rank: c_int, maxneighbors: c_int, neighbors: Out<c_int>) on comm {
        let n = graph_neighbors(comm, rank)?;
        let k = n.len().min(usize::try_from(maxneighbors).unwrap_or(0));
        for (d, v) in neighbors.slice(k, "neighbors")?.iter_mut().zip(n) {
            *d = v as c_int;
        }
        Ok(())
    }
}

mpi_fn! {
    /// Without reordering, a rank's place in the graph is its rank; ranks beyond it get
    /// MPI_UNDEFINED.
    fn MPI_Graph_map(comm: MPI_Comm, nnodes: c_int, index: In<c_int>, edges: In<c_int>, newrank: Out<c_int>) on comm {
        let c = mpi()?.comm(comm)?;
        let (index, edges) = graph_args(nnodes, index, edges)?;
        Topology::graph(index, edges)?;
        *newrank.place("newrank")? = place(c.rank(), index.len() as u32);
        Ok(())
    }
}

/// Neighbour ranks from C (each within the communicator; checked by the library).
fn ranks(v: &[c_int]) -> Result<Vec<u32>, Fail> {
    v.iter()
        .map(|&r| {
            u32::try_from(r).map_err(|_| Fail::new(MPI_ERR_RANK, format!("neighbour {r} is not a rank")))
        })
        .collect()
}

/// Edge weights: `None` for MPI_UNWEIGHTED; MPI_WEIGHTS_EMPTY (or no edges) is none.
fn weights(p: In<c_int>, n: usize) -> Result<Option<Vec<i32>>, Fail> {
    if p.addr() == MPI_UNWEIGHTED {
        return Ok(None);
    }
    if p.addr() == MPI_WEIGHTS_EMPTY || n == 0 {
        return Ok(Some(Vec::new()));
    }
    Ok(Some(p.slice(n, "weights")?.to_vec()))
}

mpi_fn! {
    fn MPI_Dist_graph_create_adjacent(comm_old: MPI_Comm, indegree: c_int, sources: In<c_int>, sourceweights: In<c_int>, outdegree: c_int, destinations: In<c_int>, destweights: In<c_int>, info: MPI_Info, reorder: c_int, comm_dist_graph: Out<MPI_Comm>) on comm_old {
        let _ = reorder;
        let m = mpi()?;
        crate::info::accepted(info)?;
        let newcomm = comm_dist_graph.place("comm_dist_graph")?;
        let src = ranks(dims_arg(sources, indegree, "sources")?)?;
        let dst = ranks(dims_arg(destinations, outdegree, "destinations")?)?;
        let w = match (weights(sourceweights, src.len())?, weights(destweights, dst.len())?) {
            (Some(a), Some(b)) => Some((a, b)),
            _ => None,
        };
        let made = m.comm(comm_old)?.dist_graph_create_adjacent(&src, &dst, w)?;
        publish(m, comm_old, Some(made), newcomm)
    }
}

mpi_fn! {
    fn MPI_Dist_graph_create(comm_old: MPI_Comm, n: c_int, sources: In<c_int>, degrees: In<c_int>, destinations: In<c_int>, weights_: In<c_int>, info: MPI_Info, reorder: c_int, comm_dist_graph: Out<MPI_Comm>) on comm_old {
        let _ = reorder;
        let m = mpi()?;
        crate::info::accepted(info)?;
        let newcomm = comm_dist_graph.place("comm_dist_graph")?;
        let src = ranks(dims_arg(sources, n, "sources")?)?;
        let deg = dims_arg(degrees, n, "degrees")?;
        let total: usize = deg.iter().map(|d| (*d).max(0) as usize).sum();
        let dst = ranks(destinations.slice(total, "destinations")?)?;
        let w = weights(weights_, total)?;
        let mut edges = Vec::with_capacity(total);
        let mut at = 0;
        for (s, d) in src.iter().zip(deg) {
            for _ in 0..(*d).max(0) {
                let weight = w.as_ref().and_then(|w| w.get(at)).copied().unwrap_or(1);
                edges.push((*s, dst[at], weight));
                at += 1;
            }
        }
        let made = m.comm(comm_old)?.dist_graph_create(&edges, w.is_some())?;
        publish(m, comm_old, Some(made), newcomm)
    }
}

/// This rank's in- and out-neighbours and weights in any topology (a Cartesian grid's and
/// a graph's are their neighbours both ways; off-grid neighbours are MPI_PROC_NULL).
fn dist_neighbors(comm: MPI_Comm) -> Result<(Vec<c_int>, Vec<c_int>, pontoon::Weights), Fail> {
    let c = mpi()?.comm(comm)?;
    let pontoon::Neighbors {
        sources,
        destinations,
    } = c.neighbors()?;
    let as_c = |v: Vec<Option<u32>>| -> Vec<c_int> {
        v.into_iter()
            .map(|r| r.map_or(MPI_PROC_NULL, |r| r as c_int))
            .collect()
    };
    let w = match c.topology().as_deref() {
        Some(Topology::DistGraph { weights, .. }) => weights.clone(),
        _ => None,
    };
    Ok((as_c(sources), as_c(destinations), w))
}

mpi_fn! {
    fn MPI_Dist_graph_neighbors_count(comm: MPI_Comm, indegree: Out<c_int>, outdegree: Out<c_int>, weighted: Out<c_int>) on comm {
        let (s, d, w) = dist_neighbors(comm)?;
        indegree.set("indegree", s.len() as c_int)?;
        outdegree.set("outdegree", d.len() as c_int)?;
        weighted.set("weighted", w.is_some() as c_int)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Dist_graph_neighbors(comm: MPI_Comm, maxindegree: c_int, sources: Out<c_int>, sourceweights: Out<c_int>, maxoutdegree: c_int, destinations: Out<c_int>, destweights: Out<c_int>) on comm {
        let (s, d, w) = dist_neighbors(comm)?;
        let ni = s.len().min(usize::try_from(maxindegree).unwrap_or(0));
        let no = d.len().min(usize::try_from(maxoutdegree).unwrap_or(0));
        sources.slice(ni, "sources")?.copy_from_slice(&s[..ni]);
        destinations.slice(no, "destinations")?.copy_from_slice(&d[..no]);
        if let Some((sw, dw)) = w {
            let real = |p: Out<c_int>| ![0, MPI_UNWEIGHTED, MPI_WEIGHTS_EMPTY].contains(&p.addr());
            if real(sourceweights) {
                sourceweights.slice(ni, "sourceweights")?.copy_from_slice(&sw[..ni]);
            }
            if real(destweights) {
                destweights.slice(no, "destweights")?.copy_from_slice(&dw[..no]);
            }
        }
        Ok(())
    }
}
