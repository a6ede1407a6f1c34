//! Datatypes and reduction operations: the predefined handles and the `MPI_Type_*` /
//! `MPI_Op_*` functions.

use std::ffi::c_char;
use std::os::raw::c_int;

use pontoon::{Datatype, Op};

use crate::abi::*;
use crate::boundary::{count, fail, fit_signed, Fail, Res, Wide};
use crate::buffers::SendBuf;
use crate::callbacks::UserOp;
use crate::cargs::{In, Out};
use crate::state::{mpi, Contents, TypeArg};
use crate::state::{predefined_name, predefined_op, PREDEFINED, PREDEFINED_RENAMED};
use crate::{mpi_fn, mpi_fn_c};
use std::rc::Rc;

const COMBINER_DUP: c_int = 102;
const COMBINER_CONTIGUOUS: c_int = 103;
const COMBINER_VECTOR: c_int = 104;
const COMBINER_HVECTOR: c_int = 105;
const COMBINER_INDEXED: c_int = 106;
const COMBINER_HINDEXED: c_int = 107;
const COMBINER_INDEXED_BLOCK: c_int = 108;
const COMBINER_HINDEXED_BLOCK: c_int = 109;
const COMBINER_STRUCT: c_int = 110;
const COMBINER_RESIZED: c_int = 116;

/// The contents record of a constructor call: `types` are the handles passed.
pub(crate) fn contents(
    combiner: c_int,
    ints: Vec<c_int>,
    aints: Vec<MPI_Aint>,
    types: &[MPI_Datatype],
) -> Result<Rc<Contents>, Fail> {
    contents_with(combiner, ints, aints, vec![], types)
}

/// The record of a constructor of counts (`ints`) and displacements (`aints`), listed as
/// its classic form takes them: in its large-count form (`large`) they are all large
/// counts, in that order (MPI 4.1 §5.1.13).
fn record(
    large: bool,
    combiner: c_int,
    ints: &[i64],
    aints: &[i64],
    types: &[MPI_Datatype],
) -> Result<Rc<Contents>, Fail> {
    if large {
        return contents_with(combiner, vec![], vec![], [ints, aints].concat(), types);
    }
    // The classic form's arguments came as int and MPI_Aint: these casts give them back.
    let ints = ints.iter().map(|&v| v as c_int).collect();
    let aints = aints.iter().map(|&v| v as MPI_Aint).collect();
    contents_with(combiner, ints, aints, vec![], types)
}

pub(crate) fn contents_with(
    combiner: c_int,
    ints: Vec<c_int>,
    aints: Vec<MPI_Aint>,
    counts: Vec<MPI_Count>,
    types: &[MPI_Datatype],
) -> Result<Rc<Contents>, Fail> {
    let m = mpi()?;
    let types = types
        .iter()
        .map(|h| {
            let dt = m.datatype(*h)?;
            let contents = m.types.borrow().get(*h).map(|e| e.contents.clone());
            Ok(TypeArg {
                handle: *h,
                dt,
                contents,
            })
        })
        .collect::<Result<_, Fail>>()?;
    Ok(Rc::new(Contents {
        combiner,
        ints,
        aints,
        counts,
        types,
    }))
}

pub(crate) fn new_type(
    made: pontoon::Result<Datatype>,
    how: Rc<Contents>,
    newtype: Out<MPI_Datatype>,
) -> Res {
    let dt = made.map_err(|e| Fail::new(MPI_ERR_TYPE, e.to_string()))?;
    let h = mpi()?.add_type(dt, how)?;
    newtype.set("newtype", h)
}

fn counts<N: Wide>(v: &[N], what: &str) -> Result<Vec<u64>, Fail> {
    v.iter().map(|n| count(n.wide(), what)).collect()
}

pub(crate) fn wide<N: Wide>(v: &[N]) -> Vec<i64> {
    v.iter().map(|n| n.wide()).collect()
}

mpi_fn_c! {
    fn MPI_Type_size | MPI_Type_size_c | MPI_Type_size_x(datatype: MPI_Datatype, size: Out<Count>) {
        let dt = mpi()?.datatype(datatype)?;
        *size.place("size")? = Count::try_from(dt.size()).unwrap_or(Count::from(MPI_UNDEFINED));
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Type_get_extent | MPI_Type_get_extent_c | MPI_Type_get_extent_x(datatype: MPI_Datatype, lb: Out<AintCount>, extent: Out<AintCount>) {
        let (l, e) = mpi()?.datatype(datatype)?.extent();
        *lb.place("lb")? = fit_signed(l, "lb")?;
        *extent.place("extent")? = fit_signed(e, "extent")?;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Type_get_true_extent | MPI_Type_get_true_extent_c | MPI_Type_get_true_extent_x(datatype: MPI_Datatype, true_lb: Out<AintCount>, true_extent: Out<AintCount>) {
        let (l, e) = mpi()?.datatype(datatype)?.true_extent();
        *true_lb.place("true_lb")? = fit_signed(l, "true_lb")?;
        *true_extent.place("true_extent")? = fit_signed(e, "true_extent")?;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Type_contiguous | MPI_Type_contiguous_c(n: Count, oldtype: MPI_Datatype, newtype: Out<MPI_Datatype>) {
        let n = n.wide();
        let old = mpi()?.datatype(oldtype)?;
        let how = record(LARGE, COMBINER_CONTIGUOUS, &[n], &[], &[oldtype])?;
        new_type(old.contiguous(count(n, "count")?), how, newtype)
    }
}

mpi_fn_c! {
    fn MPI_Type_vector | MPI_Type_vector_c(n: Count, blocklength: Count, stride: Count, oldtype: MPI_Datatype, newtype: Out<MPI_Datatype>) {
        let (n, blocklength, stride) = (n.wide(), blocklength.wide(), stride.wide());
        let old = mpi()?.datatype(oldtype)?;
        let made = old.vector(count(n, "count")?, count(blocklength, "blocklength")?, stride);
        new_type(made, record(LARGE, COMBINER_VECTOR, &[n, blocklength, stride], &[], &[oldtype])?, newtype)
    }
}

mpi_fn_c! {
    fn MPI_Type_create_hvector | MPI_Type_create_hvector_c(n: Count, blocklength: Count, stride: AintCount, oldtype: MPI_Datatype, newtype: Out<MPI_Datatype>) {
        let (n, blocklength, stride) = (n.wide(), blocklength.wide(), stride.wide());
        let old = mpi()?.datatype(oldtype)?;
        let made = old.hvector(count(n, "count")?, count(blocklength, "blocklength")?, stride);
        new_type(made, record(LARGE, COMBINER_HVECTOR, &[n, blocklength], &[stride], &[oldtype])?, newtype)
    }
}

mpi_fn_c! {
    fn MPI_Type_indexed | MPI_Type_indexed_c(n: Count, blocklengths: In<Count>, displacements: In<Count>, oldtype: MPI_Datatype, newtype: Out<MPI_Datatype>) {
        let n = n.wide();
        let old = mpi()?.datatype(oldtype)?;
        let k = count(n, "count")? as usize;
        let (bl, ds) = (blocklengths.slice(k, "array_of_blocklengths")?, displacements.slice(k, "array_of_displacements")?);
        let (lens, displs) = (counts(bl, "blocklength")?, wide(ds));
        let how = record(LARGE, COMBINER_INDEXED, &[&[n][..], &wide(bl), &displs].concat(), &[], &[oldtype])?;
        new_type(old.indexed(&lens, &displs), how, newtype)
    }
}

mpi_fn_c! {
    fn MPI_Type_create_hindexed | MPI_Type_create_hindexed_c(n: Count, blocklengths: In<Count>, displacements: In<AintCount>, oldtype: MPI_Datatype, newtype: Out<MPI_Datatype>) {
        let n = n.wide();
        let old = mpi()?.datatype(oldtype)?;
        let k = count(n, "count")? as usize;
        let (bl, ds) = (blocklengths.slice(k, "array_of_blocklengths")?, displacements.slice(k, "array_of_displacements")?);
        let (lens, displs) = (counts(bl, "blocklength")?, wide(ds));
        let how = record(LARGE, COMBINER_HINDEXED, &[&[n][..], &wide(bl)].concat(), &displs, &[oldtype])?;
        new_type(old.hindexed(&lens, &displs), how, newtype)
    }
}

mpi_fn_c! {
    fn MPI_Type_create_indexed_block | MPI_Type_create_indexed_block_c(n: Count, blocklength: Count, displacements: In<Count>, oldtype: MPI_Datatype, newtype: Out<MPI_Datatype>) {
        let (n, blocklength) = (n.wide(), blocklength.wide());
        let old = mpi()?.datatype(oldtype)?;
        let k = count(n, "count")? as usize;
        let displs = wide(displacements.slice(k, "array_of_displacements")?);
        let how = record(LARGE, COMBINER_INDEXED_BLOCK, &[&[n, blocklength][..], &displs].concat(), &[], &[oldtype])?;
        new_type(old.indexed_block(count(blocklength, "blocklength")?, &displs), how, newtype)
    }
}

mpi_fn_c! {
    fn MPI_Type_create_hindexed_block | MPI_Type_create_hindexed_block_c(n: Count, blocklength: Count, displacements: In<AintCount>, oldtype: MPI_Datatype, newtype: Out<MPI_Datatype>) {
        let (n, blocklength) = (n.wide(), blocklength.wide());
        let old = mpi()?.datatype(oldtype)?;
        let k = count(n, "count")? as usize;
        let displs = wide(displacements.slice(k, "array_of_displacements")?);
        let how = record(LARGE, COMBINER_HINDEXED_BLOCK, &[n, blocklength], &displs, &[oldtype])?;
        new_type(old.hindexed_block(count(blocklength, "blocklength")?, &displs), how, newtype)
    }
}

mpi_fn_c! {
    fn MPI_Type_create_struct | MPI_Type_create_struct_c(n: Count, blocklengths: In<Count>, displacements: In<AintCount>, types: In<MPI_Datatype>, newtype: Out<MPI_Datatype>) {
        let n = n.wide();
        let m = mpi()?;
        let k = count(n, "count")? as usize;
        let (bl, ds, th) = (
            blocklengths.slice(k, "array_of_blocklengths")?,
            displacements.slice(k, "array_of_displacements")?,
            types.slice(k, "array_of_types")?,
        );
        let (lens, displs) = (counts(bl, "blocklength")?, wide(ds));
        let types = th.iter().map(|t| m.datatype(*t)).collect::<Result<Vec<_>, _>>()?;
        let how = record(LARGE, COMBINER_STRUCT, &[&[n][..], &wide(bl)].concat(), &displs, th)?;
        new_type(Datatype::create_struct(&lens, &displs, &types), how, newtype)
    }
}

mpi_fn_c! {
    fn MPI_Type_create_resized | MPI_Type_create_resized_c(oldtype: MPI_Datatype, lb: AintCount, extent: AintCount, newtype: Out<MPI_Datatype>) {
        let (lb, extent) = (lb.wide(), extent.wide());
        let old = mpi()?.datatype(oldtype)?;
        let how = record(LARGE, COMBINER_RESIZED, &[], &[lb, extent], &[oldtype])?;
        new_type(Ok(old.resized(lb, extent)), how, newtype)
    }
}

mpi_fn! {
    fn MPI_Type_dup(oldtype: MPI_Datatype, newtype: Out<MPI_Datatype>) {
        let m = mpi()?;
        let old = m.datatype(oldtype)?;
        new_type(Ok(old.dup()), contents(COMBINER_DUP, vec![], vec![], &[oldtype])?, newtype)?;
        let newtype = newtype.place("newtype")?;
        // A duplicate of a committed type is committed.
        let committed = oldtype < DATATYPE_FIRST + DATATYPE_SPAN
            || m.types.borrow().get(oldtype).is_some_and(|e| e.committed);
        if let Some(e) = m.types.borrow_mut().get_mut(*newtype) {
            e.committed = committed;
        }
        crate::typeattr::copy_all(m, oldtype, *newtype).inspect_err(|_| {
            m.types.borrow_mut().remove(*newtype);
            *newtype = MPI_DATATYPE_NULL;
        })
    }
}

mpi_fn! {
    fn MPI_Type_commit(datatype: Out<MPI_Datatype>) {
        let m = mpi()?;
        let h = *datatype.place("datatype")?;
        m.datatype(h)?;
        if let Some(e) = m.types.borrow_mut().get_mut(h) {
            e.committed = true;
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Type_free(datatype: Out<MPI_Datatype>) {
        let m = mpi()?;
        let h = datatype.place("datatype")?;
        if *h < DATATYPE_FIRST + DATATYPE_SPAN {
            return fail(MPI_ERR_TYPE, "predefined datatypes cannot be freed");
        }
        let e = m.types.borrow_mut().remove(*h);
        let e = e.ok_or_else(|| Fail::new(MPI_ERR_TYPE, format!("{:#x} is not a datatype", *h)))?;
        // Operations in flight keep their own handle on the description.
        m.type_by_identity.borrow_mut().remove(&e.dt.identity());
        // Its attributes go with it; a failing delete callback is this call's error.
        let deleted = crate::typeattr::delete_all(m, *h);
        *h = MPI_DATATYPE_NULL;
        deleted
    }
}

mpi_fn! {
    fn MPI_Type_get_name(datatype: MPI_Datatype, type_name: Out<c_char>, resultlen: Out<c_int>) {
        let m = mpi()?;
        if datatype == MPI_DATATYPE_NULL {
            return type_name.put_str(MPI_MAX_OBJECT_NAME, "MPI_DATATYPE_NULL", &resultlen);
        }
        m.datatype(datatype)?;
        let renamed = PREDEFINED_RENAMED.with(|r| r.borrow().get(&datatype).cloned());
        let name = match (renamed, predefined_name(datatype)) {
            (Some(n), _) => n,
            (None, Some(n)) => n.to_string(),
            (None, None) => m.types.borrow().get(datatype).map(|e| e.name.clone()).unwrap_or_default(),
        };
        type_name.put_str(MPI_MAX_OBJECT_NAME, &name, &resultlen)
    }
}

mpi_fn! {
    fn MPI_Get_address(location: SendBuf, address: Out<MPI_Aint>) {
        address.set("address", location.addr() as MPI_Aint)?;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Op_create | MPI_Op_create_c(user_fn: UserOp<Count>, commute: c_int, op: Out<MPI_Op>) {
        let m = mpi()?;
        if !user_fn.is_given() {
            return fail(MPI_ERR_ARG, "the user function is NULL");
        }
        let call = move |input: &[u8], inout: &mut [u8], origin: usize, n: u64, dt: &Datatype| {
            let mut len = Count::try_from(n)
                .map_err(|_| pontoon::Error::Arg(format!("{n} elements do not fit the int of MPI_User_function: create the operation with MPI_Op_create_c")))?;
            let mut h = mpi().map(|m| m.handle_of_type(dt)).unwrap_or(MPI_DATATYPE_NULL);
            user_fn.apply(input, inout, origin, &mut len, &mut h);
            Ok(())
        };
        let h = m
            .ops
            .borrow_mut()
            .insert(Op::user_raw(commute != 0, Box::new(call)))
            .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many operations"))?;
        op.set("op", h)
    }
}

mpi_fn! {
    fn MPI_Op_free(op: Out<MPI_Op>) {
        let m = mpi()?;
        let h = op.place("op")?;
        if predefined_op(*h).is_some() {
            return fail(MPI_ERR_OP, "predefined operations cannot be freed");
        }
        if m.ops.borrow_mut().remove(*h).is_none() {
            return fail(MPI_ERR_OP, format!("{:#x} is not an operation", *h));
        }
        *h = MPI_OP_NULL;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Op_commutative(op: MPI_Op, commute: Out<c_int>) {
        commute.set("commute", mpi()?.op(op)?.is_commutative() as c_int)?;
        Ok(())
    }
}

const COMBINER_SUBARRAY: c_int = 111;
pub(crate) const ORDER_C: c_int = 12;
pub(crate) const ORDER_FORTRAN: c_int = 15;

/// A subarray as nested strided vectors at the right offset, resized to the extent of
/// the whole array (what MPI_Type_create_subarray describes).
fn subarray(
    sizes: &[i64],
    subsizes: &[i64],
    starts: &[i64],
    c_order: bool,
    old: &Datatype,
) -> pontoon::Result<Datatype> {
    let n = sizes.len();
    // Dimensions from the fastest-varying one outwards.
    let dims: Vec<usize> = if c_order {
        (0..n).rev().collect()
    } else {
        (0..n).collect()
    };
    let ext = old.extent().1;
    let mut stride = ext;
    let mut offset = 0i64;
    let mut t = old.clone();
    for (k, &d) in dims.iter().enumerate() {
        t = if k == 0 {
            t.contiguous(subsizes[d] as u64)?
        } else {
            t.hvector(subsizes[d] as u64, 1, stride)?
        };
        offset += starts[d] * stride;
        stride *= sizes[d];
    }
    let placed = t.hindexed(&[1], &[offset])?;
    Ok(placed.resized(0, stride))
}

mpi_fn_c! {
    fn MPI_Type_create_subarray | MPI_Type_create_subarray_c(ndims: c_int, sizes: In<Count>, subsizes: In<Count>, starts: In<Count>, order: c_int, oldtype: MPI_Datatype, newtype: Out<MPI_Datatype>) {
        let old = mpi()?.datatype(oldtype)?;
        let n = count(ndims as i64, "ndims")? as usize;
        if n == 0 {
            return fail(MPI_ERR_DIMS, "ndims must be at least 1");
        }
        let (sz, sub, st) = (wide(sizes.slice(n, "sizes")?), wide(subsizes.slice(n, "subsizes")?), wide(starts.slice(n, "starts")?));
        for i in 0..n {
            if sz[i] < 1 || sub[i] < 1 || sub[i] > sz[i] || st[i] < 0 || st[i] > sz[i] - sub[i] {
                return fail(MPI_ERR_ARG, format!("dimension {i}: size {}, subsize {}, start {} do not describe a subarray", sz[i], sub[i], st[i]));
            }
        }
        let c_order = match order {
            ORDER_C => true,
            ORDER_FORTRAN => false,
            o => return fail(MPI_ERR_ARG, format!("order {o} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN")),
        };
        let made = subarray(&sz, &sub, &st, c_order, &old);
        // The large form keeps ndims and order as ints and the rest as large counts.
        let how = if LARGE {
            contents_with(COMBINER_SUBARRAY, vec![ndims, order], vec![], [sz, sub, st].concat(), &[oldtype])?
        } else {
            let ints = [&[i64::from(ndims)][..], &sz, &sub, &st, &[i64::from(order)]].concat();
            record(false, COMBINER_SUBARRAY, &ints, &[], &[oldtype])?
        };
        new_type(made, how, newtype)
    }
}

/// MPI_Type_create_f90_*: the smallest of `kinds` (digits, decimal range, predefined
/// type) with at least `p` digits and range `r` (`MPI_UNDEFINED`: any), as a committed
/// type of its own whose envelope says how it was asked for (MPI 4.1 §19.1.9).
fn f90_type(
    combiner: c_int,
    ints: Vec<c_int>,
    (p, r): (c_int, c_int),
    kinds: &[(c_int, c_int, &str)],
    newtype: Out<MPI_Datatype>,
) -> Res {
    let wanted = |have: c_int, want: c_int| want == MPI_UNDEFINED || (0..=have).contains(&want);
    if p == MPI_UNDEFINED && r == MPI_UNDEFINED {
        return fail(MPI_ERR_ARG, "p and r cannot both be MPI_UNDEFINED");
    }
    let Some(&(_, _, name)) = kinds.iter().find(|(dp, dr, _)| wanted(*dp, p) && wanted(*dr, r)) else {
        return fail(
            MPI_ERR_ARG,
            format!("no predefined type has precision {p} and range {r} (MPI_UNDEFINED: any)"),
        );
    };
    let m = mpi()?;
    let h = PREDEFINED
        .iter()
        .find(|e| e.1 == name)
        .map_or(MPI_DATATYPE_NULL, |e| e.0);
    let made = m.add_type(m.datatype(h)?.dup(), contents(combiner, ints, vec![], &[])?)?;
    if let Some(e) = m.types.borrow_mut().get_mut(made) {
        e.committed = true;
    }
    newtype.set("newtype", made)
}

const COMBINER_F90_REAL: c_int = 113;
const COMBINER_F90_COMPLEX: c_int = 114;
const COMBINER_F90_INTEGER: c_int = 115;

mpi_fn! {
    fn MPI_Type_create_f90_real(p: c_int, r: c_int, newtype: Out<MPI_Datatype>) {
        f90_type(COMBINER_F90_REAL, vec![p, r], (p, r), &[(6, 37, "MPI_REAL4"), (15, 307, "MPI_REAL8")], newtype)
    }
}

mpi_fn! {
    fn MPI_Type_create_f90_complex(p: c_int, r: c_int, newtype: Out<MPI_Datatype>) {
        f90_type(COMBINER_F90_COMPLEX, vec![p, r], (p, r), &[(6, 37, "MPI_COMPLEX8"), (15, 307, "MPI_COMPLEX16")], newtype)
    }
}

mpi_fn! {
    fn MPI_Type_create_f90_integer(r: c_int, newtype: Out<MPI_Datatype>) {
        let kinds = [(2, 0, "MPI_INTEGER1"), (4, 0, "MPI_INTEGER2"), (9, 0, "MPI_INTEGER4"), (18, 0, "MPI_INTEGER8")];
        f90_type(COMBINER_F90_INTEGER, vec![r], (r, MPI_UNDEFINED), &kinds, newtype)
    }
}
