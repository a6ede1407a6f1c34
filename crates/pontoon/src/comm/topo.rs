//! Process topologies (MPI 4.1 §8): a Cartesian grid of `dims` over the ranks of a
//! communicator, row-major (the last dimension varies fastest), each dimension periodic
//! or not; a graph given whole (every rank the same `index` and `edges`); a distributed
//! graph, where each rank knows its own sources and destinations. Ranks keep their order
//! (no reordering: MPI allows it, and pontoon knows no placement a topology would improve
//! yet). A topology names the neighbours of the neighbourhood collectives.

use std::rc::Rc;

use crate::comm::{Comm, UNDEFINED};
use crate::{Error, Rank, Result};

/// A rank's neighbours in its topology: what its neighbourhood collectives receive from
/// (`sources`) and send to (`destinations`); `None` off the edge of a grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbors {
    pub sources: Vec<Option<Rank>>,
    pub destinations: Vec<Option<Rank>>,
}

impl Neighbors {
    fn both_ways(around: Vec<Option<Rank>>) -> Neighbors {
        Neighbors {
            sources: around.clone(),
            destinations: around,
        }
    }
}

/// A distributed graph's edge weights, `(of the sources, of the destinations)`; `None`:
/// unweighted.
pub type Weights = Option<(Vec<i32>, Vec<i32>)>;

/// The topology a communicator carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    Cart(Cart),
    /// Rank i's neighbours are `edges[index[i-1]..index[i]]` (`index[-1]` = 0).
    Graph {
        index: Vec<u32>,
        edges: Vec<u32>,
    },
    /// This rank's own in- and out-neighbours, with their weights if given.
    DistGraph {
        sources: Vec<Rank>,
        destinations: Vec<Rank>,
        weights: Weights,
    },
}

impl Topology {
    /// A graph of `index.len()` nodes: `index` cumulative degrees, `edges` neighbours.
    pub fn graph(index: &[i32], edges: &[i32]) -> Result<Topology> {
        let bad = |what: String| Error::Arg(format!("graph: {what}"));
        let mut last = 0;
        for &i in index {
            if i < last {
                return Err(bad(format!("index {index:?} decreases")));
            }
            last = i;
        }
        if last as usize != edges.len() {
            return Err(bad(format!(
                "index ends at {last} but there are {} edges",
                edges.len()
            )));
        }
        let n = index.len() as i32;
        if let Some(e) = edges.iter().find(|e| !(0..n).contains(*e)) {
            return Err(bad(format!("edge to {e} outside the {n} nodes")));
        }
        Ok(Topology::Graph {
            index: index.iter().map(|&i| i as u32).collect(),
            edges: edges.iter().map(|&e| e as u32).collect(),
        })
    }

    /// The neighbours of graph node `rank`.
    pub fn graph_neighbors(index: &[u32], edges: &[u32], rank: Rank) -> Result<Vec<Rank>> {
        let r = rank as usize;
        if r >= index.len() {
            return Err(Error::Arg(format!(
                "rank {rank} is not a node of the graph of {}",
                index.len()
            )));
        }
        let from = if r == 0 { 0 } else { index[r - 1] as usize };
        Ok(edges[from..index[r] as usize].to_vec())
    }
}

/// The grid a Cartesian communicator carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cart {
    dims: Vec<u32>,
    periods: Vec<bool>,
}

impl Cart {
    /// A grid of `dims` (each at least 1; none for a 0-dimensional grid of one rank).
    pub fn new(dims: &[i32], periods: &[bool]) -> Result<Cart> {
        if dims.len() != periods.len() {
            return Err(Error::Arg(format!(
                "{} dimensions but {} periodicity flags",
                dims.len(),
                periods.len()
            )));
        }
        let dims = dims
            .iter()
            .map(|&d| {
                u32::try_from(d)
                    .ok()
                    .filter(|d| *d > 0)
                    .ok_or_else(|| Error::Arg(format!("grid dimension {d} is not positive")))
            })
            .collect::<Result<Vec<u32>>>()?;
        let cart = Cart {
            dims,
            periods: periods.to_vec(),
        };
        cart.checked_size()?;
        Ok(cart)
    }

    fn checked_size(&self) -> Result<u64> {
        self.dims
            .iter()
            .try_fold(1u64, |n, &d| {
                n.checked_mul(u64::from(d)).filter(|n| *n <= u64::from(u32::MAX))
            })
            .ok_or_else(|| Error::Arg(format!("a grid of {:?} is larger than any job", self.dims)))
    }

    /// Ranks in the grid.
    pub fn size(&self) -> u32 {
        self.dims.iter().product()
    }

    pub fn dims(&self) -> &[u32] {
        &self.dims
    }

    pub fn periods(&self) -> &[bool] {
        &self.periods
    }

    /// The coordinates of `rank` (row-major).
    pub fn coords(&self, rank: Rank) -> Result<Vec<u32>> {
        if rank >= self.size() {
            return Err(Error::Arg(format!(
                "rank {rank} is outside the grid of {} ranks",
                self.size()
            )));
        }
        let mut left = rank;
        let mut out = vec![0; self.dims.len()];
        for (c, d) in out.iter_mut().zip(&self.dims).rev() {
            *c = left % d;
            left /= d;
        }
        Ok(out)
    }

    /// The rank at `coords`; a periodic dimension wraps around, a coordinate outside a
    /// non-periodic one is an error.
    pub fn rank(&self, coords: &[i32]) -> Result<Rank> {
        if coords.len() != self.dims.len() {
            return Err(Error::Arg(format!(
                "{} coordinates for a grid of {} dimensions",
                coords.len(),
                self.dims.len()
            )));
        }
        let mut rank = 0u32;
        for (i, (&c, &d)) in coords.iter().zip(&self.dims).enumerate() {
            let c = self.wrap(i, i64::from(c)).ok_or_else(|| {
                Error::Arg(format!(
                    "coordinate {c} of dimension {i} is outside 0..{d}, which is not periodic"
                ))
            })?;
            rank = rank * d + c;
        }
        Ok(rank)
    }

    /// Coordinate `c` in dimension `dim`, wrapped if periodic; `None` if off the grid.
    fn wrap(&self, dim: usize, c: i64) -> Option<u32> {
        let d = i64::from(self.dims[dim]);
        if self.periods[dim] {
            Some(c.rem_euclid(d) as u32)
        } else {
            (0..d).contains(&c).then_some(c as u32)
        }
    }

    /// The ranks `disp` steps before and after `rank` along `dim` (MPI_Cart_shift):
    /// `(source, dest)`, `None` off the edge of a non-periodic dimension.
    pub fn shift(&self, rank: Rank, dim: usize, disp: i32) -> Result<(Option<Rank>, Option<Rank>)> {
        if dim >= self.dims.len() {
            return Err(Error::Arg(format!(
                "direction {dim} of a grid of {} dimensions",
                self.dims.len()
            )));
        }
        let here = self.coords(rank)?;
        let at = |step: i64| {
            let c = self.wrap(dim, i64::from(here[dim]) + step)?;
            let mut to = here.clone();
            to[dim] = c;
            Some(to.iter().zip(&self.dims).fold(0, |r, (c, d)| r * d + c))
        };
        Ok((at(-i64::from(disp)), at(i64::from(disp))))
    }

    /// The grid of the dimensions `keep` marks (MPI_Cart_sub); with none kept, a
    /// 0-dimensional grid of one rank.
    pub fn sub(&self, keep: &[bool]) -> Result<Cart> {
        if keep.len() != self.dims.len() {
            return Err(Error::Arg(format!(
                "{} flags for a grid of {} dimensions",
                keep.len(),
                self.dims.len()
            )));
        }
        let pick =
            |v: &[u32]| -> Vec<u32> { v.iter().zip(keep).filter(|(_, k)| **k).map(|(x, _)| *x).collect() };
        Ok(Cart {
            dims: pick(&self.dims),
            periods: self
                .periods
                .iter()
                .zip(keep)
                .filter(|(_, k)| **k)
                .map(|(p, _)| *p)
                .collect(),
        })
    }

    /// Which of the ranks `sub(keep)` groups `rank` with: the coordinates it drops.
    fn sub_color(&self, rank: Rank, keep: &[bool]) -> Result<i32> {
        let coords = self.coords(rank)?;
        let color = coords
            .iter()
            .zip(&self.dims)
            .zip(keep)
            .filter(|(_, k)| !**k)
            .fold(0u64, |n, ((c, d), _)| n * u64::from(*d) + u64::from(*c));
        Ok(color as i32)
    }
}

impl<'u> Comm<'u> {
    /// A communicator of the first `dims`-product ranks with a Cartesian grid on them
    /// (MPI_Cart_create); `None` on the ranks left out. Collective.
    pub fn cart_create(&self, dims: &[i32], periods: &[bool]) -> Result<Option<Comm<'u>>> {
        let cart = Cart::new(dims, periods)?;
        self.first_ranks_with(cart.size(), Topology::Cart(cart))
    }

    /// A communicator of the first `index.len()` ranks with a graph on them
    /// (MPI_Graph_create); `None` on the ranks left out. Collective.
    pub fn graph_create(&self, index: &[i32], edges: &[i32]) -> Result<Option<Comm<'u>>> {
        let g = Topology::graph(index, edges)?;
        self.first_ranks_with(index.len() as u32, g)
    }

    /// A duplicate carrying this rank's part of a distributed graph
    /// (MPI_Dist_graph_create_adjacent). Collective.
    pub fn dist_graph_create_adjacent(
        &self,
        sources: &[Rank],
        destinations: &[Rank],
        weights: Weights,
    ) -> Result<Comm<'u>> {
        if let Some(r) = sources.iter().chain(destinations).find(|r| **r >= self.size()) {
            return Err(Error::Arg(format!(
                "distributed graph: neighbour {r} outside a communicator of {}",
                self.size()
            )));
        }
        let c = self.dup()?;
        c.set_topology(Some(Rc::new(Topology::DistGraph {
            sources: sources.to_vec(),
            destinations: destinations.to_vec(),
            weights,
        })));
        Ok(c)
    }

    /// A duplicate carrying a distributed graph whose edges `(source, destination,
    /// weight)` any rank may give (MPI_Dist_graph_create): every rank learns its own in-
    /// and out-edges, in the order of the giving ranks, then of their lists. Collective.
    pub fn dist_graph_create(&self, edges: &[(Rank, Rank, i32)], weighted: bool) -> Result<Comm<'u>> {
        let flat: Vec<i32> = edges
            .iter()
            .flat_map(|&(s, d, w)| [s as i32, d as i32, w])
            .collect();
        let mut lens = vec![0i32; self.size() as usize];
        self.allgather(&[flat.len() as i32], &mut lens)?;
        let counts: Vec<usize> = lens.iter().map(|&l| l as usize).collect();
        let displs: Vec<usize> = counts
            .iter()
            .scan(0, |at, n| {
                let d = *at;
                *at += n;
                Some(d)
            })
            .collect();
        let mut all = vec![0i32; counts.iter().sum()];
        self.allgatherv(&flat[..], &mut all, &counts, &displs)?;
        let me = self.rank();
        let (mut sources, mut destinations, mut sw, mut dw) = (vec![], vec![], vec![], vec![]);
        for e in all.chunks_exact(3) {
            let (s, d, w) = (e[0] as Rank, e[1] as Rank, e[2]);
            if s >= self.size() || d >= self.size() {
                return Err(Error::Arg(format!(
                    "distributed graph: edge {s} -> {d} outside the communicator"
                )));
            }
            if d == me {
                sources.push(s);
                sw.push(w);
            }
            if s == me {
                destinations.push(d);
                dw.push(w);
            }
        }
        let weights = weighted.then_some((sw, dw));
        self.dist_graph_create_adjacent(&sources, &destinations, weights)
    }

    /// The first `n` ranks (in their order) as a communicator with `topo`; `None` on the others.
    fn first_ranks_with(&self, n: u32, topo: Topology) -> Result<Option<Comm<'u>>> {
        if n > self.size() {
            return Err(Error::Arg(format!(
                "a topology of {n} ranks on a communicator of {}",
                self.size()
            )));
        }
        let inside = self.rank() < n;
        let c = self.split(if inside { 0 } else { UNDEFINED }, self.rank() as i32)?;
        if let Some(c) = &c {
            c.set_topology(Some(Rc::new(topo)));
        }
        Ok(c)
    }

    /// The topology of this communicator, if it has one.
    pub fn topology(&self) -> Option<Rc<Topology>> {
        self.d.topology.borrow().clone()
    }

    /// Its Cartesian grid, if it has one.
    pub fn cart(&self) -> Option<Cart> {
        match self.topology().as_deref() {
            Some(Topology::Cart(c)) => Some(c.clone()),
            _ => None,
        }
    }

    pub(crate) fn set_topology(&self, topo: Option<Rc<Topology>>) {
        *self.d.topology.borrow_mut() = topo;
    }

    /// This rank's neighbours in its topology, in the order MPI gives them. A Cartesian
    /// grid: for each dimension, the one before, then the one after, both ways.
    pub fn neighbors(&self) -> Result<Neighbors> {
        let topo = self
            .topology()
            .ok_or_else(|| Error::Arg("the communicator has no topology to take neighbours from".into()))?;
        Ok(match &*topo {
            Topology::Cart(cart) => {
                let mut around = Vec::with_capacity(2 * cart.dims().len());
                for dim in 0..cart.dims().len() {
                    let (before, after) = cart.shift(self.rank(), dim, 1)?;
                    around.extend([before, after]);
                }
                Neighbors::both_ways(around)
            }
            Topology::Graph { index, edges } => {
                let n: Vec<Option<Rank>> = Topology::graph_neighbors(index, edges, self.rank())?
                    .into_iter()
                    .map(Some)
                    .collect();
                Neighbors::both_ways(n)
            }
            Topology::DistGraph {
                sources,
                destinations,
                ..
            } => Neighbors {
                sources: sources.iter().copied().map(Some).collect(),
                destinations: destinations.iter().copied().map(Some).collect(),
            },
        })
    }

    /// The sub-grids of the dimensions `keep` marks, one communicator each
    /// (MPI_Cart_sub). Collective.
    pub fn cart_sub(&self, keep: &[bool]) -> Result<Comm<'u>> {
        let cart = self
            .cart()
            .ok_or_else(|| Error::Arg("the communicator has no Cartesian topology".into()))?;
        let sub = cart.sub(keep)?;
        let color = cart.sub_color(self.rank(), keep)?;
        let c = self
            .split(color, self.rank() as i32)?
            .ok_or_else(|| Error::Runtime("cart_sub: a rank was left out of its sub-grid".into()))?;
        c.set_topology(Some(Rc::new(Topology::Cart(sub))));
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinates_are_row_major_and_ranks_round_trip() {
        let g = Cart::new(&[2, 3, 4], &[false, true, false]).unwrap();
        assert_eq!(g.size(), 24);
        assert_eq!(g.coords(0).unwrap(), [0, 0, 0]);
        assert_eq!(g.coords(5).unwrap(), [0, 1, 1]);
        assert_eq!(g.coords(23).unwrap(), [1, 2, 3]);
        for r in 0..24 {
            let c: Vec<i32> = g.coords(r).unwrap().iter().map(|&x| x as i32).collect();
            assert_eq!(g.rank(&c).unwrap(), r);
        }
        assert_eq!(
            g.rank(&[1, -1, 0]).unwrap(),
            g.rank(&[1, 2, 0]).unwrap(),
            "periodic wraps"
        );
        assert!(g.rank(&[2, 0, 0]).is_err(), "not periodic");
        assert!(g.coords(24).is_err());
        assert!(Cart::new(&[2, 0], &[false, false]).is_err());
    }

    #[test]
    fn shifts_wrap_where_periodic_and_fall_off_where_not() {
        let g = Cart::new(&[3, 4], &[false, true]).unwrap();
        // Rank 4 is (1, 0).
        assert_eq!(g.shift(4, 0, 1).unwrap(), (Some(0), Some(8)));
        assert_eq!(g.shift(0, 0, 1).unwrap(), (None, Some(4)), "top edge");
        assert_eq!(g.shift(8, 0, 1).unwrap(), (Some(4), None), "bottom edge");
        assert_eq!(g.shift(4, 1, 1).unwrap(), (Some(7), Some(5)), "wraps around");
        assert_eq!(g.shift(4, 1, -2).unwrap(), (Some(6), Some(6)));
        assert!(g.shift(4, 2, 1).is_err());
    }

    #[test]
    fn a_sub_grid_keeps_the_marked_dimensions() {
        let g = Cart::new(&[2, 3, 4], &[true, false, true]).unwrap();
        let rows = g.sub(&[false, false, true]).unwrap();
        assert_eq!((rows.dims(), rows.periods()), (&[4][..], &[true][..]));
        // Ranks that share the dropped coordinates share a colour.
        assert_eq!(
            g.sub_color(5, &[false, false, true]).unwrap(),
            g.sub_color(6, &[false, false, true]).unwrap()
        );
        assert_ne!(
            g.sub_color(5, &[false, false, true]).unwrap(),
            g.sub_color(9, &[false, false, true]).unwrap()
        );
        let point = g.sub(&[false, false, false]).unwrap();
        assert_eq!(point.size(), 1);
    }
}
