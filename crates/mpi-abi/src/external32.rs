//! `MPI_Pack_external`, `MPI_Unpack_external` and `MPI_Pack_external_size` in the one
//! data representation MPI defines, "external32" (MPI 4.1 §5.2.2 and §14.5.2): every
//! element big-endian at the size the standard's table fixes, whatever the C type's
//! size here (`long` is 4 bytes there, `wchar_t` 2, `long double` 16 bytes of IEEE
//! quadruple precision).
//!
//! The elements come from the datatype's constructor records (`Contents`), which keep
//! the predefined handles: `MPI_LONG` and `MPI_INT64_T` are the same type natively but not
//! in external32. The data is packed natively first (`pontoon`), then converted element
//! by element in type-map order.

use std::ffi::c_char;
use std::os::raw::c_int;

use crate::abi::*;
use crate::boundary::{count, fail, fit, Fail, Res};
use crate::buffers::{RecvBuf, SendBuf};
use crate::cargs::{In, Out};
use crate::mpi_fn_c;
use crate::state::{mpi, Contents, Mpi};
use crate::typeinfo::{put_at, take_at};
use pontoon::Datatype;

/// How a scalar is stored in external32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Signed,
    Unsigned,
    /// IEEE binary32/64: the same bits, big-endian.
    Float,
    /// C `long double` natively, IEEE binary128 in external32.
    Quad,
}

/// One scalar: bytes natively, bytes in external32, kind.
type Scalar = (usize, usize, Kind);

const fn s(native: usize, ext: usize, k: Kind) -> Scalar {
    (native, ext, k)
}
const I1: Scalar = s(1, 1, Kind::Unsigned);
const I2: Scalar = s(2, 2, Kind::Signed);
const I4: Scalar = s(4, 4, Kind::Signed);
const I8: Scalar = s(8, 8, Kind::Signed);
const U2: Scalar = s(2, 2, Kind::Unsigned);
const U4: Scalar = s(4, 4, Kind::Unsigned);
const U8: Scalar = s(8, 8, Kind::Unsigned);
const F4: Scalar = s(4, 4, Kind::Float);
const F8: Scalar = s(8, 8, Kind::Float);
const LD: Scalar = s(16, 16, Kind::Quad);
/// C `long`: 8 bytes here, 4 in external32.
const LONG: Scalar = s(8, 4, Kind::Signed);
const ULONG: Scalar = s(8, 4, Kind::Unsigned);
/// `wchar_t`: 4 bytes on Linux, 2 in external32.
const WCHAR: Scalar = s(4, 2, Kind::Unsigned);

/// The scalars of a predefined datatype, in order (`None`: not one pontoon supports).
fn scalars(h: MPI_Datatype) -> Option<&'static [Scalar]> {
    Some(match h {
        0x207 | 0x21e | 0x238 | 0x239 | 0x240 | 0x241 | 0x243 | 0x244 | 0x245 | 0x247 | 0x2c1 => &[I1],
        0x208 | 0x248 | 0x2c9 => &[I2],
        0x20c | 0x249 => &[U2],
        0x209 | 0x219 | 0x250 | 0x2d1 => &[I4],
        0x20d | 0x251 | 0x218 | 0x2d0 => &[U4],
        0x201..=0x203 | 0x20b | 0x258 | 0x2d9 => &[I8],
        0x20f | 0x259 => &[U8],
        0x20a => &[LONG],
        0x20e => &[ULONG],
        0x23c => &[WCHAR],
        0x210 | 0x21a | 0x2d2 => &[F4],
        0x214 | 0x21c | 0x2da => &[F8],
        0x220 => &[LD],
        0x212 | 0x213 | 0x21b | 0x2db => &[F4, F4],
        0x216 | 0x217 | 0x21d | 0x2e3 => &[F8, F8],
        0x224 | 0x225 => &[LD, LD],
        0x228 => &[F4, I4],
        0x229 => &[F8, I4],
        0x22a => &[LONG, I4],
        0x22b | 0x232 => &[I4, I4],
        0x22c => &[I2, I4],
        0x22d => &[LD, I4],
        _ => return None,
    })
}

/// A datatype's scalars in type-map order, as a tree of repetitions.
enum Elems {
    Scalars(&'static [Scalar]),
    Repeat(u64, Box<Elems>),
    Seq(Vec<Elems>),
}

const COMBINER_STRUCT: c_int = 110;

impl Elems {
    /// The elements of the datatype `h` (`dt`), which `contents` made if it is derived.
    fn of(h: MPI_Datatype, dt: &Datatype, contents: Option<&Contents>) -> Result<Elems, Fail> {
        let Some(c) = contents else {
            return scalars(h).map(Elems::Scalars).ok_or_else(|| {
                Fail::new(
                    MPI_ERR_TYPE,
                    format!("datatype {h:#x} has no external32 form here"),
                )
            });
        };
        if c.combiner == COMBINER_STRUCT {
            // The count, then one block length per member type: ints, or large counts
            // from MPI_Type_create_struct_c.
            let lens: Vec<i64> = match c.counts.is_empty() {
                true => c.ints[1..].iter().map(|&n| i64::from(n)).collect(),
                false => c.counts[1..].to_vec(),
            };
            let parts = c.types.iter().zip(lens).map(|(t, n)| {
                let inner = Elems::of(t.handle, &t.dt, t.contents.as_deref())?;
                Ok(Elems::Repeat(n.max(0) as u64, Box::new(inner)))
            });
            return Ok(Elems::Seq(parts.collect::<Result<_, Fail>>()?));
        }
        // Every other constructor repeats one type: as many times as its size holds.
        let Some(t) = c.types.first() else {
            return fail(MPI_ERR_INTERN, "a derived datatype without a member type");
        };
        let inner = Elems::of(t.handle, &t.dt, t.contents.as_deref())?;
        let times = dt.size().checked_div(inner.native_size()).unwrap_or(0);
        Ok(Elems::Repeat(times, Box::new(inner)))
    }

    /// The elements of the committed datatype `h`.
    fn of_handle(m: &Mpi, h: MPI_Datatype) -> Result<(Datatype, Elems), Fail> {
        let dt = m.committed(h)?;
        let contents = m.types.borrow().get(h).map(|e| e.contents.clone());
        let elems = Elems::of(h, &dt, contents.as_deref())?;
        Ok((dt, elems))
    }

    fn native_size(&self) -> u64 {
        self.sum(|&(n, _, _)| n)
    }
    fn external_size(&self) -> u64 {
        self.sum(|&(_, e, _)| e)
    }
    fn sum(&self, f: impl Fn(&Scalar) -> usize + Copy) -> u64 {
        match self {
            Elems::Scalars(s) => s.iter().map(f).sum::<usize>() as u64,
            Elems::Repeat(n, e) => n * e.sum(f),
            Elems::Seq(v) => v.iter().map(|e| e.sum(f)).sum(),
        }
    }

    /// Calls `f` on every scalar in order.
    fn each(&self, f: &mut impl FnMut(Scalar) -> Res) -> Res {
        match self {
            Elems::Scalars(s) => s.iter().try_for_each(|&x| f(x)),
            Elems::Repeat(n, e) => (0..*n).try_for_each(|_| e.each(f)),
            Elems::Seq(v) => v.iter().try_for_each(|e| e.each(f)),
        }
    }
}

/// Appends the native little-endian scalar `x` to `out` in external32.
fn to_external(x: &[u8], (_, ext, kind): Scalar, out: &mut Vec<u8>) {
    match kind {
        Kind::Quad => out.extend_from_slice(&quad_of_native(x).to_be_bytes()),
        // Integers narrower there (long, wchar_t) keep their low bytes, as MPICH does.
        _ => out.extend(x[..ext].iter().rev()),
    }
}

/// Writes the external32 scalar `x` into `out` natively (narrower integers widened by
/// their sign).
fn to_native(x: &[u8], (native, ext, kind): Scalar, out: &mut [u8]) {
    match kind {
        Kind::Quad => {
            let q = u128::from_be_bytes(x.try_into().expect("16 bytes"));
            out.copy_from_slice(&native_of_quad(q));
        }
        _ => {
            let negative = kind == Kind::Signed && x[0] & 0x80 != 0;
            out.fill(if negative { 0xff } else { 0 });
            for (o, b) in out[..ext.min(native)].iter_mut().zip(x.iter().rev()) {
                *o = *b;
            }
        }
    }
}

/// IEEE binary128 bits of a native `long double` (16 bytes).
#[cfg(target_arch = "x86_64")]
fn quad_of_native(x: &[u8]) -> u128 {
    // x87 extended: 64-bit significand with an explicit integer bit, then sign and a
    // 15-bit exponent of the same bias as binary128's.
    let significand = u64::from_le_bytes(x[..8].try_into().expect("8 bytes"));
    let sign_exp = u16::from_le_bytes([x[8], x[9]]);
    let fraction = u128::from(significand & !(1 << 63)) << 49;
    (u128::from(sign_exp) << 112) | fraction
}

#[cfg(target_arch = "x86_64")]
fn native_of_quad(q: u128) -> [u8; 16] {
    let sign_exp = (q >> 112) as u16;
    let fraction = ((q >> 49) as u64) & !(1 << 63);
    // The integer bit is set for every number but zero and subnormals (exponent 0).
    let integer = u64::from(sign_exp & 0x7fff != 0) << 63;
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&(integer | fraction).to_le_bytes());
    out[8..10].copy_from_slice(&sign_exp.to_le_bytes());
    out
}

/// `long double` is binary128 already on the other 64-bit Linux targets.
#[cfg(not(target_arch = "x86_64"))]
fn quad_of_native(x: &[u8]) -> u128 {
    u128::from_le_bytes(x.try_into().expect("16 bytes"))
}

#[cfg(not(target_arch = "x86_64"))]
fn native_of_quad(q: u128) -> [u8; 16] {
    q.to_le_bytes()
}

fn check_datarep(datarep: In<c_char>) -> Res {
    let rep = datarep.str("datarep")?;
    if rep != "external32" {
        return fail(
            MPI_ERR_ARG,
            format!("data representation \"{rep}\": only \"external32\" is defined"),
        );
    }
    Ok(())
}

/// The external32 form of `n` elements (`elems` each) packed natively in `native`.
fn externalize(native: &[u8], n: u64, elems: &Elems) -> Result<Vec<u8>, Fail> {
    let mut out = Vec::with_capacity((n * elems.external_size()) as usize);
    let mut at = 0;
    for _ in 0..n {
        elems.each(&mut |sc| {
            to_external(&native[at..at + sc.0], sc, &mut out);
            at += sc.0;
            Ok(())
        })?;
    }
    Ok(out)
}

/// The native packed form of `n` elements from their external32 form.
fn internalize(ext: &[u8], n: u64, elems: &Elems) -> Result<Vec<u8>, Fail> {
    let mut out = vec![0u8; (n * elems.native_size()) as usize];
    let (mut at, mut to) = (0, 0);
    for _ in 0..n {
        elems.each(&mut |sc| {
            to_native(&ext[at..at + sc.1], sc, &mut out[to..to + sc.0]);
            at += sc.1;
            to += sc.0;
            Ok(())
        })?;
    }
    Ok(out)
}

mpi_fn_c! {
    fn MPI_Pack_external_size | MPI_Pack_external_size_c(datarep: In<c_char>, incount: Count, datatype: MPI_Datatype, size: Out<AintCount>) {
        let incount = incount.wide();
        check_datarep(datarep)?;
        let (_, elems) = Elems::of_handle(mpi()?, datatype)?;
        *size.place("size")? = fit(count(incount, "incount")? * elems.external_size(), "the packed size")?;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Pack_external | MPI_Pack_external_c(datarep: In<c_char>, inbuf: SendBuf, incount: Count, datatype: MPI_Datatype, outbuf: RecvBuf, outsize: AintCount, position: Out<AintCount>) {
        let incount = incount.wide();
        let outsize = outsize.wide();
        check_datarep(datarep)?;
        let (dt, elems) = Elems::of_handle(mpi()?, datatype)?;
        let n = count(incount, "incount")?;
        let ext = externalize(&inbuf.data(n, &dt)?.packed()?, n, &elems)?;
        put_at(outbuf, outsize, position, &ext)
    }
}

mpi_fn_c! {
    fn MPI_Unpack_external | MPI_Unpack_external_c(datarep: In<c_char>, inbuf: SendBuf, insize: AintCount, position: Out<AintCount>, outbuf: RecvBuf, outcount: Count, datatype: MPI_Datatype) {
        let insize = insize.wide();
        let outcount = outcount.wide();
        check_datarep(datarep)?;
        let (dt, elems) = Elems::of_handle(mpi()?, datatype)?;
        let n = count(outcount, "outcount")?;
        let src = take_at(inbuf, insize, position, (n * elems.external_size()) as usize)?;
        let native = internalize(src, n, &elems)?;
        let dst = outbuf.data_mut(n, &dt)?;
        dt.unpack(n, &native, dst.bytes, dst.origin)?;
        Ok(())
    }
}
