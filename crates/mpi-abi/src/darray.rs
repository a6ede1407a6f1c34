//! `MPI_Type_create_darray` (MPI 4.1 §5.1.4): the part of a global array that one process
//! of a process grid holds under HPF-style block, cyclic or no distribution per
//! dimension. Built like a subarray, a dimension at a time from the fastest-varying one:
//! the blocks this process holds along the dimension, each a run of the type built so
//! far, resized to the dimension's whole extent.

use std::os::raw::c_int;

use pontoon::Datatype;

use crate::abi::*;
use crate::boundary::{count, fail, Fail};
use crate::cargs::{In, Out};
use crate::mpi_fn_c;
use crate::state::mpi;
use crate::types::{contents, contents_with, new_type, wide, ORDER_C, ORDER_FORTRAN};

const DISTRIBUTE_NONE: c_int = 16;
const DISTRIBUTE_BLOCK: c_int = 17;
const DISTRIBUTE_CYCLIC: c_int = 18;
const DISTRIBUTE_DFLT_DARG: c_int = 19;
const COMBINER_DARRAY: c_int = 112;

/// The blocks `(first index, length)` that grid coordinate `coord` of `procs` holds of a
/// dimension of `size` elements.
fn blocks(
    dim: usize,
    size: i64,
    distrib: c_int,
    darg: c_int,
    procs: i64,
    coord: i64,
) -> Result<Vec<(i64, i64)>, Fail> {
    let darg = i64::from(darg);
    match distrib {
        DISTRIBUTE_NONE => {
            if procs != 1 {
                return fail(
                    MPI_ERR_ARG,
                    format!("dimension {dim}: MPI_DISTRIBUTE_NONE needs 1 process there, not {procs}"),
                );
            }
            Ok(vec![(0, size)])
        }
        DISTRIBUTE_BLOCK => {
            let b = if darg == i64::from(DISTRIBUTE_DFLT_DARG) {
                (size + procs - 1) / procs
            } else {
                darg
            };
            if b < 1 || b * procs < size {
                return fail(
                    MPI_ERR_ARG,
                    format!(
                        "dimension {dim}: blocks of {b} on {procs} processes do not cover {size} elements"
                    ),
                );
            }
            let start = coord * b;
            Ok(vec![(start, (size - start).clamp(0, b))])
        }
        DISTRIBUTE_CYCLIC => {
            let b = if darg == i64::from(DISTRIBUTE_DFLT_DARG) {
                1
            } else {
                darg
            };
            if b < 1 {
                return fail(
                    MPI_ERR_ARG,
                    format!("dimension {dim}: cyclic blocks of {b} elements"),
                );
            }
            let starts = (0..).map(|k| (coord + k * procs) * b).take_while(|&s| s < size);
            Ok(starts.map(|s| (s, b.min(size - s))).collect())
        }
        d => fail(
            MPI_ERR_ARG,
            format!("dimension {dim}: distribution {d} is not MPI_DISTRIBUTE_BLOCK, _CYCLIC or _NONE"),
        ),
    }
}

/// The darray type of grid coordinates `coords`, dimensions from `dims` (fastest first).
fn darray(
    gsizes: &[i64],
    per_dim: &[Vec<(i64, i64)>],
    dims: &[usize],
    old: &Datatype,
) -> pontoon::Result<Datatype> {
    let mut t = old.clone();
    let mut stride = old.extent().1;
    for &d in dims {
        let lens: Vec<u64> = per_dim[d].iter().map(|&(_, n)| n as u64).collect();
        let displs: Vec<i64> = per_dim[d].iter().map(|&(s, _)| s * stride).collect();
        stride *= gsizes[d];
        t = t.hindexed(&lens, &displs)?.resized(0, stride);
    }
    Ok(t)
}

mpi_fn_c! {
    fn MPI_Type_create_darray | MPI_Type_create_darray_c(size: c_int, rank: c_int, ndims: c_int, array_of_gsizes: In<Count>, array_of_distribs: In<c_int>, array_of_dargs: In<c_int>, array_of_psizes: In<c_int>, order: c_int, oldtype: MPI_Datatype, newtype: Out<MPI_Datatype>) {
        let old = mpi()?.datatype(oldtype)?;
        let n = count(ndims as i64, "ndims")? as usize;
        let (g, dist, darg, p) = (
            wide(array_of_gsizes.slice(n, "array_of_gsizes")?),
            array_of_distribs.slice(n, "array_of_distribs")?,
            array_of_dargs.slice(n, "array_of_dargs")?,
            array_of_psizes.slice(n, "array_of_psizes")?,
        );
        if g.iter().any(|&x| x < 1) || p.iter().any(|&x| x < 1) {
            return fail(MPI_ERR_ARG, "global sizes and process counts must be positive");
        }
        let procs: i64 = p.iter().map(|&x| i64::from(x)).product();
        if procs != i64::from(size) || rank < 0 || rank >= size {
            return fail(MPI_ERR_ARG, format!("rank {rank} of {size} processes on a grid of {procs}"));
        }
        // The process grid is numbered row-major whatever the array's order.
        let mut coords = vec![0i64; n];
        let mut rest = i64::from(rank);
        for d in (0..n).rev() {
            coords[d] = rest % i64::from(p[d]);
            rest /= i64::from(p[d]);
        }
        let per_dim = (0..n)
            .map(|d| blocks(d, g[d], dist[d], darg[d], i64::from(p[d]), coords[d]))
            .collect::<Result<Vec<_>, Fail>>()?;
        let dims: Vec<usize> = match order {
            ORDER_C => (0..n).rev().collect(),
            ORDER_FORTRAN => (0..n).collect(),
            o => return fail(MPI_ERR_ARG, format!("order {o} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN")),
        };
        let made = darray(&g, &per_dim, &dims, &old);
        // The large form keeps the global sizes as large counts, the rest as ints.
        let how = if LARGE {
            let ints = [&[size, rank, ndims][..], dist, darg, p, &[order]].concat();
            contents_with(COMBINER_DARRAY, ints, vec![], g, &[oldtype])?
        } else {
            let gi: Vec<c_int> = g.iter().map(|&x| x as c_int).collect();
            contents(COMBINER_DARRAY, [&[size, rank, ndims][..], &gi, dist, darg, p, &[order]].concat(), vec![], &[oldtype])?
        };
        new_type(made, how, newtype)
    }
}
