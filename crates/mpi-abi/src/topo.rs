//! Virtual topologies: only `MPI_Dims_create` so far, the balanced factorisation that
//! programs (and mpi4py's darray test) use to lay a grid over the ranks. Cartesian and
//! graph communicators are not exported.

use std::os::raw::c_int;

use crate::abi::*;
use crate::boundary::{fail, slice_mut, Fail};
use crate::mpi_fn;

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
    let mut left = i64::from(nnodes) / fixed;
    if free == 0 {
        return match left {
            1 => Ok(()),
            _ => fail(
                MPI_ERR_DIMS,
                format!("the dimensions multiply to {fixed}, not {nnodes}"),
            ),
        };
    }
    let mut factors = Vec::new();
    let mut p = 2;
    while p * p <= left {
        while left % p == 0 {
            factors.push(p);
            left /= p;
        }
        p += 1;
    }
    if left > 1 {
        factors.push(left);
    }
    // Largest factors first, each to the currently smallest dimension.
    let mut free_dims = vec![1i64; free];
    for f in factors.into_iter().rev() {
        let smallest = free_dims.iter_mut().min().expect("at least one free dimension");
        *smallest *= f;
    }
    free_dims.sort_unstable_by(|a, b| b.cmp(a));
    for (slot, d) in dims.iter_mut().filter(|d| **d == 0).zip(free_dims) {
        *slot = d as c_int;
    }
    Ok(())
}

mpi_fn! {
    fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) {
        if ndims < 0 {
            return fail(MPI_ERR_DIMS, format!("ndims {ndims} is negative"));
        }
        dims_create(nnodes, slice_mut(dims, ndims as usize, "dims")?)
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
    }

    #[test]
    fn impossible_requests_are_errors() {
        assert_eq!(dims_create(10, &mut [3, 0]).unwrap_err().class, MPI_ERR_DIMS);
        assert_eq!(dims_create(6, &mut [2, 2]).unwrap_err().class, MPI_ERR_DIMS);
        assert_eq!(dims_create(6, &mut [-1, 0]).unwrap_err().class, MPI_ERR_DIMS);
    }
}
