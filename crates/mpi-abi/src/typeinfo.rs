//! Asking datatypes about themselves (envelope, contents, names) and packing data
//! into a buffer of the program's (MPI_Pack/Unpack).

use std::ffi::{c_char, c_void};
use std::os::raw::c_int;

use crate::abi::*;
use crate::boundary::{c_str, count, fail, out, slice_mut, Fail};
use crate::mpi_fn;
use crate::p2p::{data, data_mut};
use crate::state::mpi;

const COMBINER_NAMED: c_int = 101;

fn is_predefined(h: MPI_Datatype) -> bool {
    (DATATYPE_FIRST..DATATYPE_FIRST + DATATYPE_SPAN).contains(&h)
}

/// (integers, addresses, datatypes, combiner) of a datatype.
fn envelope(h: MPI_Datatype) -> Result<(usize, usize, usize, c_int), Fail> {
    let m = mpi()?;
    m.datatype(h)?;
    if is_predefined(h) {
        return Ok((0, 0, 0, COMBINER_NAMED));
    }
    let t = m.types.borrow();
    let c = &t
        .get(h)
        .ok_or_else(|| Fail::new(MPI_ERR_TYPE, "not a datatype"))?
        .contents;
    Ok((c.ints.len(), c.aints.len(), c.types.len(), c.combiner))
}

mpi_fn! {
    fn MPI_Type_get_envelope(datatype: MPI_Datatype, num_integers: *mut c_int, num_addresses: *mut c_int, num_datatypes: *mut c_int, combiner: *mut c_int) {
        let (i, a, d, c) = envelope(datatype)?;
        *out(num_integers, "num_integers")? = i as c_int;
        *out(num_addresses, "num_addresses")? = a as c_int;
        *out(num_datatypes, "num_datatypes")? = d as c_int;
        *out(combiner, "combiner")? = c;
        Ok(())
    }
}

mpi_fn! {
    /// Derived datatypes come back as new handles (the program frees them), predefined
    /// ones as themselves.
    fn MPI_Type_get_contents(datatype: MPI_Datatype, max_integers: c_int, max_addresses: c_int, max_datatypes: c_int, integers: *mut c_int, addresses: *mut MPI_Aint, datatypes: *mut MPI_Datatype) {
        let m = mpi()?;
        if is_predefined(datatype) {
            return fail(MPI_ERR_TYPE, "a predefined datatype has no contents (its combiner is MPI_COMBINER_NAMED)");
        }
        let c = {
            let t = m.types.borrow();
            let e = t.get(datatype).ok_or_else(|| Fail::new(MPI_ERR_TYPE, format!("{datatype:#x} is not a datatype")))?;
            e.contents.clone()
        };
        if (max_integers as usize) < c.ints.len() || (max_addresses as usize) < c.aints.len() || (max_datatypes as usize) < c.types.len() {
            return fail(MPI_ERR_ARG, "the arrays are smaller than MPI_Type_get_envelope said");
        }
        slice_mut(integers, c.ints.len(), "array_of_integers")?.copy_from_slice(&c.ints);
        slice_mut(addresses, c.aints.len(), "array_of_addresses")?.copy_from_slice(&c.aints);
        let out_types = slice_mut(datatypes, c.types.len(), "array_of_datatypes")?;
        for (slot, arg) in out_types.iter_mut().zip(&c.types) {
            *slot = match &arg.contents {
                None => arg.handle,
                Some(inner) => m.add_type(arg.dt.dup(), inner.clone())?,
            };
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Type_set_name(datatype: MPI_Datatype, type_name: *const c_char) {
        let m = mpi()?;
        m.datatype(datatype)?;
        let name = c_str(type_name, "type_name")?.to_string();
        match m.types.borrow_mut().get_mut(datatype) {
            Some(e) => {
                e.name = name;
                Ok(())
            }
            None => {
                crate::types::PREDEFINED_RENAMED.with(|r| r.borrow_mut().insert(datatype, name));
                Ok(())
            }
        }
    }
}

mpi_fn! {
    fn MPI_Pack_size(incount: c_int, datatype: MPI_Datatype, comm: MPI_Comm, size: *mut c_int) on comm {
        let m = mpi()?;
        m.comm(comm)?;
        let n = count(incount as i64, "incount")? * m.datatype(datatype)?.size();
        *out(size, "size")? = c_int::try_from(n).map_err(|_| Fail::new(MPI_ERR_COUNT, "the packed size does not fit an int"))?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Pack(inbuf: *const c_void, incount: c_int, datatype: MPI_Datatype, outbuf: *mut c_void, outsize: c_int, position: *mut c_int, comm: MPI_Comm) on comm {
        let m = mpi()?;
        m.comm(comm)?;
        let dt = m.committed(datatype)?;
        let packed = data(inbuf, count(incount as i64, "incount")?, &dt)?.packed()?;
        let pos = out(position, "position")?;
        let at = usize::try_from(*pos).map_err(|_| Fail::new(MPI_ERR_ARG, "position is negative"))?;
        let size = count(outsize as i64, "outsize")? as usize;
        if at + packed.len() > size {
            return fail(MPI_ERR_TRUNCATE, format!("{} bytes do not fit at position {at} of a {size}-byte buffer", packed.len()));
        }
        slice_mut(outbuf as *mut u8, size, "outbuf")?[at..at + packed.len()].copy_from_slice(&packed);
        *pos += packed.len() as c_int;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Unpack(inbuf: *const c_void, insize: c_int, position: *mut c_int, outbuf: *mut c_void, outcount: c_int, datatype: MPI_Datatype, comm: MPI_Comm) on comm {
        let m = mpi()?;
        m.comm(comm)?;
        let dt = m.committed(datatype)?;
        let n = count(outcount as i64, "outcount")?;
        let need = (n * dt.size()) as usize;
        let pos = out(position, "position")?;
        let at = usize::try_from(*pos).map_err(|_| Fail::new(MPI_ERR_ARG, "position is negative"))?;
        let size = count(insize as i64, "insize")? as usize;
        if at + need > size {
            return fail(MPI_ERR_TRUNCATE, format!("{need} bytes are not there at position {at} of a {size}-byte buffer"));
        }
        let src = crate::boundary::slice(inbuf as *const u8, size, "inbuf")?;
        let dst = data_mut(outbuf, n, &dt)?;
        dt.unpack(n, &src[at..at + need], dst.bytes, dst.origin)?;
        *pos += need as c_int;
        Ok(())
    }
}

const TYPECLASS_INTEGER: c_int = 192;
const TYPECLASS_REAL: c_int = 193;
const TYPECLASS_COMPLEX: c_int = 194;

mpi_fn! {
    /// The Fortran-sized predefined type of a class and size (MPI_INTEGERn, MPI_REALn,
    /// MPI_COMPLEXn), for the sizes C has here.
    fn MPI_Type_match_size(typeclass: c_int, size: c_int, datatype: *mut MPI_Datatype) {
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
        *out(datatype, "datatype")? = h;
        Ok(())
    }
}
