//! Asking datatypes about themselves (envelope, contents, names) and packing data
//! into a buffer of the program's (MPI_Pack/Unpack).

use std::ffi::c_char;
use std::os::raw::c_int;

use crate::abi::*;
use crate::boundary::{count, fail, fit, fit_signed, Fail, Res, Wide};
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::{In, Out};
use crate::state::mpi;
use crate::{mpi_fn, mpi_fn_c};

/// Where in a buffer of `size` bytes, at `position`, `len` more bytes go.
fn span(position: i64, len: usize, size: i64) -> Result<usize, Fail> {
    let at = usize::try_from(position).map_err(|_| Fail::new(MPI_ERR_ARG, "position is negative"))?;
    let size = count(size, "the buffer size")? as usize;
    if at + len > size {
        return fail(
            MPI_ERR_TRUNCATE,
            format!("{len} bytes at position {at} do not fit in a buffer of {size} bytes"),
        );
    }
    Ok(at)
}

/// MPI_Pack and its kin: `bytes` into the program's buffer of `size` bytes at
/// `*position`, the position moved past them.
pub(crate) fn put_at<P: Wide + TryFrom<i64>>(buf: RecvBuf, size: i64, position: Out<P>, bytes: &[u8]) -> Res {
    let pos = position.place("position")?;
    let at = span(pos.wide(), bytes.len(), size)?;
    // `span` checked that the bytes fit in the buffer's `size`.
    let dst = buf
        .bytes_mut(at + bytes.len())
        .ok_or_else(|| Fail::new(MPI_ERR_ARG, "`outbuf` is NULL"))?;
    dst[at..].copy_from_slice(bytes);
    *pos = fit_signed(pos.wide() + bytes.len() as i64, "the position")?;
    Ok(())
}

/// MPI_Unpack and its kin: the `len` bytes at `*position` of the program's buffer of
/// `size` bytes, the position moved past them.
pub(crate) fn take_at<'a, P: Wide + TryFrom<i64>>(
    buf: SendBuf,
    size: i64,
    position: Out<P>,
    len: usize,
) -> Result<&'a [u8], Fail> {
    let pos = position.place("position")?;
    let at = span(pos.wide(), len, size)?;
    // `span` checked that they are there.
    let bytes = &buf
        .bytes(at + len)
        .ok_or_else(|| Fail::new(MPI_ERR_ARG, "`inbuf` is NULL"))?[at..];
    *pos = fit_signed(pos.wide() + len as i64, "the position")?;
    Ok(bytes)
}

const COMBINER_NAMED: c_int = 101;

fn is_predefined(h: MPI_Datatype) -> bool {
    (DATATYPE_FIRST..DATATYPE_FIRST + DATATYPE_SPAN).contains(&h)
}

/// A derived datatype's constructor record.
fn record_of(m: &crate::state::Mpi, h: MPI_Datatype) -> Result<std::rc::Rc<crate::state::Contents>, Fail> {
    if is_predefined(h) {
        return fail(
            MPI_ERR_TYPE,
            "a predefined datatype has no contents (its combiner is MPI_COMBINER_NAMED)",
        );
    }
    let t = m.types.borrow();
    let e = t
        .get(h)
        .ok_or_else(|| Fail::new(MPI_ERR_TYPE, format!("{h:#x} is not a datatype")))?;
    Ok(e.contents.clone())
}

/// (integers, addresses, large counts, datatypes, combiner) of a datatype. The classic
/// form (`large` false) cannot describe one made by a large-count constructor.
fn envelope(h: MPI_Datatype, large: bool) -> Result<(usize, usize, usize, usize, c_int), Fail> {
    let m = mpi()?;
    m.datatype(h)?;
    if is_predefined(h) {
        return Ok((0, 0, 0, 0, COMBINER_NAMED));
    }
    let c = record_of(m, h)?;
    if !large && !c.counts.is_empty() {
        return fail(
            MPI_ERR_TYPE,
            "made by a large-count constructor: call MPI_Type_get_envelope_c",
        );
    }
    Ok((
        c.ints.len(),
        c.aints.len(),
        c.counts.len(),
        c.types.len(),
        c.combiner,
    ))
}

mpi_fn! {
    fn MPI_Type_get_envelope(datatype: MPI_Datatype, num_integers: Out<c_int>, num_addresses: Out<c_int>, num_datatypes: Out<c_int>, combiner: Out<c_int>) {
        let (i, a, _, d, c) = envelope(datatype, false)?;
        num_integers.set("num_integers", i as c_int)?;
        num_addresses.set("num_addresses", a as c_int)?;
        num_datatypes.set("num_datatypes", d as c_int)?;
        combiner.set("combiner", c)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Type_get_envelope_c(datatype: MPI_Datatype, num_integers: Out<MPI_Count>, num_addresses: Out<MPI_Count>, num_large_counts: Out<MPI_Count>, num_datatypes: Out<MPI_Count>, combiner: Out<c_int>) {
        let (i, a, l, d, c) = envelope(datatype, true)?;
        num_integers.set("num_integers", i as MPI_Count)?;
        num_addresses.set("num_addresses", a as MPI_Count)?;
        num_large_counts.set("num_large_counts", l as MPI_Count)?;
        num_datatypes.set("num_datatypes", d as MPI_Count)?;
        combiner.set("combiner", c)?;
        Ok(())
    }
}

/// Fills the program's arrays with a datatype's record (`large_counts` None: the classic
/// form). Derived datatypes come back as new handles (the program frees them),
/// predefined ones as themselves.
#[allow(clippy::too_many_arguments)]
fn contents(
    datatype: MPI_Datatype,
    max: [i64; 4],
    integers: Out<c_int>,
    addresses: Out<MPI_Aint>,
    large_counts: Option<Out<MPI_Count>>,
    datatypes: Out<MPI_Datatype>,
) -> Res {
    let m = mpi()?;
    let c = record_of(m, datatype)?;
    if large_counts.is_none() && !c.counts.is_empty() {
        return fail(
            MPI_ERR_TYPE,
            "made by a large-count constructor: call MPI_Type_get_contents_c",
        );
    }
    let need = [c.ints.len(), c.aints.len(), c.counts.len(), c.types.len()];
    if max.iter().zip(need).any(|(&m, n)| m < n as i64) {
        return fail(
            MPI_ERR_ARG,
            "the arrays are smaller than MPI_Type_get_envelope said",
        );
    }
    integers
        .slice(c.ints.len(), "array_of_integers")?
        .copy_from_slice(&c.ints);
    addresses
        .slice(c.aints.len(), "array_of_addresses")?
        .copy_from_slice(&c.aints);
    if let Some(p) = large_counts {
        p.slice(c.counts.len(), "array_of_large_counts")?
            .copy_from_slice(&c.counts);
    }
    let out_types = datatypes.slice(c.types.len(), "array_of_datatypes")?;
    for (slot, arg) in out_types.iter_mut().zip(&c.types) {
        *slot = match &arg.contents {
            None => arg.handle,
            Some(inner) => m.add_type(arg.dt.dup(), inner.clone())?,
        };
    }
    Ok(())
}

mpi_fn! {
    fn MPI_Type_get_contents(datatype: MPI_Datatype, max_integers: c_int, max_addresses: c_int, max_datatypes: c_int, integers: Out<c_int>, addresses: Out<MPI_Aint>, datatypes: Out<MPI_Datatype>) {
        let max = [max_integers.into(), max_addresses.into(), 0, max_datatypes.into()];
        contents(datatype, max, integers, addresses, None, datatypes)
    }
}

mpi_fn! {
    fn MPI_Type_get_contents_c(datatype: MPI_Datatype, max_integers: MPI_Count, max_addresses: MPI_Count, max_large_counts: MPI_Count, max_datatypes: MPI_Count, integers: Out<c_int>, addresses: Out<MPI_Aint>, large_counts: Out<MPI_Count>, datatypes: Out<MPI_Datatype>) {
        let max = [max_integers, max_addresses, max_large_counts, max_datatypes];
        contents(datatype, max, integers, addresses, Some(large_counts), datatypes)
    }
}

mpi_fn! {
    fn MPI_Type_set_name(datatype: MPI_Datatype, type_name: In<c_char>) {
        let m = mpi()?;
        m.datatype(datatype)?;
        let name = type_name.str("type_name")?.to_string();
        match m.types.borrow_mut().get_mut(datatype) {
            Some(e) => {
                e.name = name;
                Ok(())
            }
            None => {
                crate::state::PREDEFINED_RENAMED.with(|r| r.borrow_mut().insert(datatype, name));
                Ok(())
            }
        }
    }
}

mpi_fn_c! {
    fn MPI_Pack_size | MPI_Pack_size_c(incount: Count, datatype: MPI_Datatype, comm: MPI_Comm, size: Out<Count>) on comm {
        let incount = incount.wide();
        let m = mpi()?;
        m.comm(comm)?;
        let n = count(incount, "incount")? * m.datatype(datatype)?.size();
        *size.place("size")? = fit(n, "the packed size")?;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Pack | MPI_Pack_c(inbuf: SendBuf, incount: Count, datatype: MPI_Datatype, outbuf: RecvBuf, outsize: Count, position: Out<Count>, comm: MPI_Comm) on comm {
        let incount = incount.wide();
        let outsize = outsize.wide();
        let m = mpi()?;
        m.comm(comm)?;
        let dt = m.committed(datatype)?;
        let packed = inbuf.data(count(incount, "incount")?, &dt)?.packed()?;
        put_at(outbuf, outsize, position, &packed)
    }
}

mpi_fn_c! {
    fn MPI_Unpack | MPI_Unpack_c(inbuf: SendBuf, insize: Count, position: Out<Count>, outbuf: RecvBuf, outcount: Count, datatype: MPI_Datatype, comm: MPI_Comm) on comm {
        let insize = insize.wide();
        let outcount = outcount.wide();
        let m = mpi()?;
        m.comm(comm)?;
        let dt = m.committed(datatype)?;
        let n = count(outcount, "outcount")?;
        let src = take_at(inbuf, insize, position, (n * dt.size()) as usize)?;
        let dst = outbuf.data_mut(n, &dt)?;
        dt.unpack(n, src, dst.bytes, dst.origin)?;
        Ok(())
    }
}

const TYPECLASS_INTEGER: c_int = 192;
const TYPECLASS_REAL: c_int = 193;
const TYPECLASS_COMPLEX: c_int = 194;

mpi_fn! {
    /// The Fortran-sized predefined type of a class and size (MPI_INTEGERn, MPI_REALn,
    /// MPI_COMPLEXn), for the sizes C has here.
    fn MPI_Type_match_size(typeclass: c_int, size: c_int, datatype: Out<MPI_Datatype>) {
        mpi()?;
        let h: Handle = match (typeclass, size) {
            (TYPECLASS_INTEGER, 1) => 0x2c1,
            (TYPECLASS_INTEGER, 2) => 0x2c9,
            (TYPECLASS_INTEGER, 4) => 0x2d1,
            (TYPECLASS_INTEGER, 8) => 0x2d9,
            (TYPECLASS_REAL, 4) => 0x2d2,
            (TYPECLASS_REAL, 8) => 0x2da,
            (TYPECLASS_COMPLEX, 8) => 0x2db,
            (TYPECLASS_COMPLEX, 16) => 0x2e3,
            // Fortran's REAL16 is IEEE quad precision, which C compilers here do not
            // have; the C type of 16 bytes is long double (x87 extended on x86-64).
            (TYPECLASS_REAL, 16) => 0x220,
            (TYPECLASS_COMPLEX, 32) => 0x224,
            _ => return fail(MPI_ERR_ARG, format!("no predefined type of class {typeclass} and size {size} here")),
        };
        datatype.set("datatype", h)?;
        Ok(())
    }
}
