//! Cartesian process topologies (MPI 4.1 §8.5): a grid of `dims` over the ranks of a
//! communicator, row-major (the last dimension varies fastest), each dimension
//! periodic or not. Ranks keep their order (no reordering: MPI allows it, and pontoon
//! knows no placement that a grid would improve yet).

use std::rc::Rc;

use crate::comm::{Comm, UNDEFINED};
use crate::{Error, Rank, Result};

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
        if cart.size() > self.size() {
            return Err(Error::Arg(format!(
                "a grid of {} ranks on a communicator of {}",
                cart.size(),
                self.size()
            )));
        }
        let inside = self.rank() < cart.size();
        let c = self.split(if inside { 0 } else { UNDEFINED }, self.rank() as i32)?;
        if let Some(c) = &c {
            c.set_cart(Some(Rc::new(cart)));
        }
        Ok(c)
    }

    /// This rank's neighbours in its topology, in the order MPI gives them (a Cartesian
    /// grid: for each dimension, the one before, then the one after; `None` off the
    /// edge): the ranks its neighbourhood collectives send to and receive from.
    pub fn neighbor_ranks(&self) -> Result<Vec<Option<Rank>>> {
        let cart = self
            .cart()
            .ok_or_else(|| Error::Arg("the communicator has no topology to take neighbours from".into()))?;
        let mut out = Vec::with_capacity(2 * cart.dims().len());
        for dim in 0..cart.dims().len() {
            let (before, after) = cart.shift(self.rank(), dim, 1)?;
            out.extend([before, after]);
        }
        Ok(out)
    }

    /// The Cartesian grid of this communicator, if it has one.
    pub fn cart(&self) -> Option<Rc<Cart>> {
        self.d.cart.borrow().clone()
    }

    pub(crate) fn set_cart(&self, cart: Option<Rc<Cart>>) {
        *self.d.cart.borrow_mut() = cart;
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
        c.set_cart(Some(Rc::new(sub)));
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
