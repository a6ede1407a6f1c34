//! Reduction operations: the predefined ones for every applicable basic type, and
//! user-defined ones (commutative or not).
//!
//! Every operation computes `inout = input ∘ inout` on packed data, where `input`
//! holds the contributions of lower ranks: that is the order MPI fixes for
//! non-commutative operations, and the order user functions are called in.

use std::rc::Rc;

use crate::datatype::{Basic, Datatype, PairValue};
use crate::{Error, Result};

/// A user function: `(input, inout, origin, count, datatype)`, the buffers laid out as
/// `count` elements of `datatype` with the buffer's origin at byte `origin`.
pub type UserFn = dyn Fn(&[u8], &mut [u8], usize, u64, &Datatype) -> Result<()>;

pub struct UserOp {
    f: Box<UserFn>,
    commutative: bool,
}

/// A reduction operation (MPI_Op).
#[derive(Clone)]
pub enum Op {
    Sum,
    Prod,
    Min,
    Max,
    Land,
    Lor,
    Lxor,
    Band,
    Bor,
    Bxor,
    Minloc,
    Maxloc,
    /// MPI_REPLACE: the result is the input (used by one-sided operations).
    Replace,
    /// MPI_NO_OP: the result is left alone.
    NoOp,
    User(Rc<UserOp>),
}

impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::User(u) => write!(f, "User(commutative: {})", u.commutative),
            other => write!(f, "{}", other.name()),
        }
    }
}

impl Op {
    /// A user operation on raw buffers (what the C ABI wraps).
    pub fn user_raw(commutative: bool, f: Box<UserFn>) -> Op {
        Op::User(Rc::new(UserOp { f, commutative }))
    }

    /// A user operation on slices of a plain type: `f(input, inout)` sets
    /// `inout[i] = input[i] ∘ inout[i]`.
    pub fn user<T: bytemuck::Pod>(commutative: bool, f: impl Fn(&[T], &mut [T]) + 'static) -> Op {
        Op::user_raw(
            commutative,
            Box::new(
                move |input: &[u8], inout: &mut [u8], _origin, _count, _dt: &Datatype| {
                    let a: Vec<T> = bytemuck::pod_collect_to_vec(input);
                    match bytemuck::try_cast_slice_mut::<u8, T>(inout) {
                        Ok(b) => f(&a, b),
                        Err(_) => {
                            let mut b: Vec<T> = bytemuck::pod_collect_to_vec(inout);
                            f(&a, &mut b);
                            inout.copy_from_slice(bytemuck::cast_slice(&b));
                        }
                    }
                    Ok(())
                },
            ),
        )
    }

    pub fn is_commutative(&self) -> bool {
        match self {
            Op::User(u) => u.commutative,
            _ => true,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Op::Sum => "MPI_SUM",
            Op::Prod => "MPI_PROD",
            Op::Min => "MPI_MIN",
            Op::Max => "MPI_MAX",
            Op::Land => "MPI_LAND",
            Op::Lor => "MPI_LOR",
            Op::Lxor => "MPI_LXOR",
            Op::Band => "MPI_BAND",
            Op::Bor => "MPI_BOR",
            Op::Bxor => "MPI_BXOR",
            Op::Minloc => "MPI_MINLOC",
            Op::Maxloc => "MPI_MAXLOC",
            Op::Replace => "MPI_REPLACE",
            Op::NoOp => "MPI_NO_OP",
            Op::User(_) => "user-defined operation",
        }
    }

    /// Checks that the operation applies to every basic type of `dt`, before any
    /// data moves (so every rank fails the same way instead of half a collective).
    pub fn check(&self, dt: &Datatype) -> Result<()> {
        if matches!(self, Op::User(_) | Op::Replace | Op::NoOp) {
            return Ok(());
        }
        for (b, _) in dt.signature() {
            if !applies(self, *b) {
                return Err(Error::Arg(format!(
                    "{} is not defined for {b:?} elements (datatype {:?})",
                    self.name(),
                    dt.name()
                )));
            }
        }
        Ok(())
    }

    /// `inout = input ∘ inout` for `count` elements of `dt`, both packed.
    pub fn apply(&self, dt: &Datatype, count: u64, input: &[u8], inout: &mut [u8]) -> Result<()> {
        self.check(dt)?;
        self.combine(dt, count, input, inout)
    }

    /// [`Op::apply`] for a collective that ran [`Op::check`] on `dt` before any data
    /// moved: a small allreduce spent a tenth of its instructions checking twice.
    #[inline]
    pub(crate) fn combine(&self, dt: &Datatype, count: u64, input: &[u8], inout: &mut [u8]) -> Result<()> {
        let bytes = (count * dt.size()) as usize;
        if input.len() < bytes || inout.len() < bytes {
            return Err(Error::Arg("reduction buffers shorter than count elements".into()));
        }
        let (input, inout) = (&input[..bytes], &mut inout[..bytes]);
        match self {
            Op::User(u) => apply_user(u, dt, count, input, inout),
            Op::NoOp => Ok(()),
            Op::Replace => {
                inout.copy_from_slice(input);
                Ok(())
            }
            op => {
                if let [(b, _)] = dt.signature() {
                    // One basic type throughout: one pass over everything.
                    return kernel(op, *b, input, inout);
                }
                let mut at = 0;
                for _ in 0..count {
                    for (b, n) in dt.signature() {
                        let len = (b.size() * n) as usize;
                        kernel(op, *b, &input[at..at + len], &mut inout[at..at + len])?;
                        at += len;
                    }
                }
                Ok(())
            }
        }
    }
}

fn apply_user(u: &UserOp, dt: &Datatype, count: u64, input: &[u8], inout: &mut [u8]) -> Result<()> {
    if dt.is_dense() {
        return (u.f)(input, inout, 0, count, dt);
    }
    // The user function sees the datatype's own layout: unpack both, call, pack back.
    let (first, end) = dt.span(count);
    let origin = (-first).max(0) as usize;
    let len = (end - first.min(0)) as usize;
    let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
    dt.unpack(count, input, &mut a, origin)?;
    dt.unpack(count, inout, &mut b, origin)?;
    (u.f)(&a, &mut b, origin, count, dt)?;
    dt.pack(count, &b, origin, inout)
}

fn applies(op: &Op, b: Basic) -> bool {
    use Basic::*;
    let int = matches!(b, I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64);
    let float = matches!(b, F32 | F64);
    let complex = matches!(b, ComplexF32 | ComplexF64);
    match op {
        Op::Sum | Op::Prod => int || float || complex,
        Op::Min | Op::Max => int || float || b == LongDouble,
        Op::Land | Op::Lor | Op::Lxor => int || matches!(b, Bool | Logical),
        Op::Band | Op::Bor | Op::Bxor => int || b == Byte,
        Op::Minloc | Op::Maxloc => matches!(b, Pair(_)),
        Op::Replace | Op::NoOp | Op::User(_) => true,
    }
}

/// `f(input, inout)` over `N`-byte elements.
fn zip<const N: usize>(input: &[u8], inout: &mut [u8], f: impl Fn([u8; N], [u8; N]) -> [u8; N]) {
    for (a, b) in input.chunks_exact(N).zip(inout.chunks_exact_mut(N)) {
        let r = f(
            a.try_into().expect("chunk of N"),
            (&*b).try_into().expect("chunk of N"),
        );
        b.copy_from_slice(&r);
    }
}

macro_rules! num {
    ($t:ty, $input:expr, $inout:expr, |$a:ident, $b:ident| $e:expr) => {{
        let f = |$a: $t, $b: $t| -> $t { $e };
        match (
            bytemuck::try_cast_slice::<u8, $t>($input),
            bytemuck::try_cast_slice_mut::<u8, $t>($inout),
        ) {
            // Aligned (the usual case): a plain loop the compiler vectorizes.
            (Ok(x), Ok(y)) => y.iter_mut().zip(x).for_each(|(b, a)| *b = f(*a, *b)),
            _ => zip::<{ std::mem::size_of::<$t>() }>($input, $inout, |x, y| {
                f(<$t>::from_ne_bytes(x), <$t>::from_ne_bytes(y)).to_ne_bytes()
            }),
        }
    }};
}

/// Arithmetic on every integer and float type.
macro_rules! arith {
    ($op:expr, $b:expr, $input:expr, $inout:expr, { $($basic:ident => $t:ty),* }, $int:tt) => {
        match $b {
            $(Basic::$basic => arith!(@one $op, $t, $input, $inout, $int),)*
            _ => unreachable!("checked by applies"),
        }
    };
    (@one $op:expr, $t:ty, $i:expr, $io:expr, int) => {
        match $op {
            Op::Sum => num!($t, $i, $io, |a, b| a.wrapping_add(b)),
            Op::Prod => num!($t, $i, $io, |a, b| a.wrapping_mul(b)),
            Op::Min => num!($t, $i, $io, |a, b| a.min(b)),
            Op::Max => num!($t, $i, $io, |a, b| a.max(b)),
            Op::Land => num!($t, $i, $io, |a, b| ((a != 0) && (b != 0)) as $t),
            Op::Lor => num!($t, $i, $io, |a, b| ((a != 0) || (b != 0)) as $t),
            Op::Lxor => num!($t, $i, $io, |a, b| ((a != 0) != (b != 0)) as $t),
            Op::Band => num!($t, $i, $io, |a, b| a & b),
            Op::Bor => num!($t, $i, $io, |a, b| a | b),
            Op::Bxor => num!($t, $i, $io, |a, b| a ^ b),
            _ => unreachable!("checked by applies"),
        }
    };
    (@one $op:expr, $t:ty, $i:expr, $io:expr, float) => {
        match $op {
            Op::Sum => num!($t, $i, $io, |a, b| a + b),
            Op::Prod => num!($t, $i, $io, |a, b| a * b),
            // MPI leaves NaN handling open; C's fmin/fmax ignore a NaN operand.
            Op::Min => num!($t, $i, $io, |a, b| a.min(b)),
            Op::Max => num!($t, $i, $io, |a, b| a.max(b)),
            _ => unreachable!("checked by applies"),
        }
    };
}

/// Sum or product of C complex numbers (real part, then imaginary part).
macro_rules! complex {
    ($t:ty, $op:expr, $input:expr, $inout:expr) => {{
        const H: usize = std::mem::size_of::<$t>();
        let part = |s: &[u8]| <$t>::from_ne_bytes(s.try_into().expect("one part"));
        for (a, b) in $input.chunks_exact(2 * H).zip($inout.chunks_exact_mut(2 * H)) {
            let (ar, ai, br, bi) = (part(&a[..H]), part(&a[H..]), part(&b[..H]), part(&b[H..]));
            let (r, i) = match $op {
                Op::Sum => (ar + br, ai + bi),
                _ => (ar * br - ai * bi, ar * bi + ai * br),
            };
            b[..H].copy_from_slice(&r.to_ne_bytes());
            b[H..].copy_from_slice(&i.to_ne_bytes());
        }
    }};
}

/// MINLOC/MAXLOC on packed (value of `v` bytes, `int` index) pairs.
fn loc<T: PartialOrd>(op: &Op, input: &[u8], inout: &mut [u8], v: usize, read: impl Fn(&[u8]) -> T) {
    for (a, b) in input.chunks_exact(v + 4).zip(inout.chunks_exact_mut(v + 4)) {
        let index = |s: &[u8]| i32::from_ne_bytes(s[v..].try_into().expect("4 bytes"));
        let ord = read(&a[..v]).partial_cmp(&read(&b[..v]));
        let take_input = match ord {
            Some(std::cmp::Ordering::Equal) => index(a) < index(b),
            Some(o) => (o == std::cmp::Ordering::Less) == matches!(op, Op::Minloc),
            None => false,
        };
        if take_input {
            b.copy_from_slice(a);
        }
    }
}

fn kernel(op: &Op, b: Basic, input: &[u8], inout: &mut [u8]) -> Result<()> {
    match b {
        Basic::I8
        | Basic::I16
        | Basic::I32
        | Basic::I64
        | Basic::U8
        | Basic::U16
        | Basic::U32
        | Basic::U64 => {
            arith!(op, b, input, inout, { I8 => i8, I16 => i16, I32 => i32, I64 => i64,
                U8 => u8, U16 => u16, U32 => u32, U64 => u64 }, int)
        }
        Basic::F32 | Basic::F64 => arith!(op, b, input, inout, { F32 => f32, F64 => f64 }, float),
        Basic::Bool => num!(u8, input, inout, |a, c| logical(op, a != 0, c != 0) as u8),
        Basic::Logical => num!(i32, input, inout, |a, c| logical(op, a != 0, c != 0) as i32),
        Basic::Byte => match op {
            Op::Band => num!(u8, input, inout, |a, c| a & c),
            Op::Bor => num!(u8, input, inout, |a, c| a | c),
            _ => num!(u8, input, inout, |a, c| a ^ c),
        },
        Basic::ComplexF32 => complex!(f32, op, input, inout),
        Basic::ComplexF64 => complex!(f64, op, input, inout),
        Basic::Pair(v) => {
            let vs = v.value_size() as usize;
            macro_rules! read {
                ($t:ty) => {
                    |s: &[u8]| <$t>::from_ne_bytes(s.try_into().expect("value bytes"))
                };
            }
            match v {
                PairValue::F32 => loc(op, input, inout, vs, read!(f32)),
                PairValue::F64 => loc(op, input, inout, vs, read!(f64)),
                PairValue::I64 => loc(op, input, inout, vs, read!(i64)),
                PairValue::I32 => loc(op, input, inout, vs, read!(i32)),
                PairValue::I16 => loc(op, input, inout, vs, read!(i16)),
                PairValue::LongDouble => loc(op, input, inout, vs, CLongDouble::read),
            }
        }
        // Compared exactly, never converted: MIN and MAX pick one of the operands.
        Basic::LongDouble => {
            for (a, b) in input.chunks_exact(16).zip(inout.chunks_exact_mut(16)) {
                let (x, y) = (CLongDouble::read(a), CLongDouble::read(b));
                // As C's fminl/fmaxl: a NaN operand gives way to the other.
                let take_input = match x.partial_cmp(&y) {
                    Some(o) => {
                        o == std::cmp::Ordering::Less && matches!(op, Op::Min)
                            || o == std::cmp::Ordering::Greater && matches!(op, Op::Max)
                    }
                    None => y.is_nan() && !x.is_nan(),
                };
                if take_input {
                    b.copy_from_slice(a);
                }
            }
        }
        _ => unreachable!("checked by applies"),
    }
    Ok(())
}

/// A C `long double` as stored (16 bytes, native byte order), ordered without arithmetic:
/// x86-64's 80-bit extended format (64-bit significand with its integer bit, then sign
/// and 15-bit exponent, then padding), elsewhere IEEE binary128 (112-bit fraction, then
/// sign and exponent). Both are sign and magnitude with the exponent above the
/// significand, so magnitudes order as (exponent, significand).
#[derive(Clone, Copy)]
struct CLongDouble {
    negative: bool,
    exponent: u16,
    significand: u128,
}

impl CLongDouble {
    #[cfg(target_arch = "x86_64")]
    fn read(s: &[u8]) -> CLongDouble {
        let top = u16::from_le_bytes([s[8], s[9]]);
        CLongDouble {
            negative: top & 0x8000 != 0,
            exponent: top & 0x7fff,
            significand: u128::from(u64::from_le_bytes(s[..8].try_into().expect("8 bytes"))),
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn read(s: &[u8]) -> CLongDouble {
        let all = u128::from_le_bytes(s[..16].try_into().expect("16 bytes"));
        let top = (all >> 112) as u16;
        CLongDouble {
            negative: top & 0x8000 != 0,
            exponent: top & 0x7fff,
            significand: all & ((1u128 << 112) - 1),
        }
    }

    fn is_nan(&self) -> bool {
        // The maximal exponent holds the infinities (fraction 0) and the NaNs; x86's
        // significand carries an explicit integer bit, which is not part of the fraction.
        let fraction = if cfg!(target_arch = "x86_64") {
            self.significand & ((1u128 << 63) - 1)
        } else {
            self.significand
        };
        self.exponent == 0x7fff && fraction != 0
    }

    fn is_zero(&self) -> bool {
        self.exponent == 0 && self.significand == 0
    }
}

impl PartialEq for CLongDouble {
    fn eq(&self, other: &Self) -> bool {
        self.partial_cmp(other) == Some(std::cmp::Ordering::Equal)
    }
}

impl PartialOrd for CLongDouble {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        use std::cmp::Ordering;
        if self.is_nan() || other.is_nan() {
            return None;
        }
        if self.is_zero() && other.is_zero() {
            return Some(Ordering::Equal); // +0 == -0
        }
        let magnitude = (self.exponent, self.significand).cmp(&(other.exponent, other.significand));
        Some(match (self.negative, other.negative) {
            (false, false) => magnitude,
            (true, true) => magnitude.reverse(),
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
        })
    }
}

fn logical(op: &Op, a: bool, b: bool) -> bool {
    match op {
        Op::Land => a && b,
        Op::Lor => a || b,
        _ => a != b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::Equivalence;

    fn run<T: bytemuck::Pod + crate::Equivalence>(op: Op, a: &[T], b: &[T]) -> Vec<T> {
        let mut out = b.to_vec();
        op.apply(
            &T::datatype(),
            a.len() as u64,
            bytemuck::cast_slice(a),
            bytemuck::cast_slice_mut(&mut out),
        )
        .unwrap();
        out
    }

    #[test]
    fn predefined_ops_compute_elementwise() {
        assert_eq!(run(Op::Sum, &[1i32, -2], &[10, 20]), [11, 18]);
        assert_eq!(run(Op::Prod, &[3u16, 4], &[5, 6]), [15, 24]);
        assert_eq!(run(Op::Min, &[1.5f64, 9.0], &[2.0, -1.0]), [1.5, -1.0]);
        assert_eq!(run(Op::Max, &[i64::MIN, 7], &[0, 3]), [0, 7]);
        assert_eq!(run(Op::Land, &[0u8, 2, 2], &[1, 0, 5]), [0, 0, 1]);
        assert_eq!(run(Op::Lxor, &[1i32, 1], &[1, 0]), [0, 1]);
        assert_eq!(run(Op::Bxor, &[0b1100u32], &[0b1010]), [0b0110]);
        assert!(
            Op::Band.check(&f64::datatype()).is_err(),
            "no bitwise ops on floats"
        );
        assert!(
            Op::Sum.check(&Datatype::basic(Basic::Char)).is_err(),
            "MPI_CHAR is text"
        );
        assert!(Op::Minloc.check(&i32::datatype()).is_err());
        // `apply` checks on its own (only `combine`, for checked collectives, does not).
        let mut inout = [0u8; 8];
        assert!(Op::Band.apply(&f64::datatype(), 1, &[0; 8], &mut inout).is_err());
    }

    /// `v` as x86-64 stores a C `long double` (exact for normal doubles), NaN for NaN.
    #[cfg(target_arch = "x86_64")]
    fn x87(v: f64) -> [u8; 16] {
        let bits = v.to_bits();
        let (sign, exp, frac) = (
            (bits >> 63) as u16,
            ((bits >> 52) & 0x7ff) as u16,
            bits & ((1 << 52) - 1),
        );
        let (e, m) = match exp {
            0 if frac == 0 => (0, 0),
            0x7ff => (0x7fff, (1u64 << 63) | (frac << 11)),
            _ => (exp + (16383 - 1023), (1u64 << 63) | (frac << 11)),
        };
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&m.to_le_bytes());
        out[8..10].copy_from_slice(&((sign << 15) | e).to_le_bytes());
        out
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn min_max_and_minloc_on_long_double_pick_an_operand_exactly() {
        let ld = Datatype::basic(Basic::LongDouble);
        let bytes = |v: &[f64]| -> Vec<u8> { v.iter().flat_map(|&x| x87(x)).collect() };
        let a = bytes(&[1.5, -2.0, 3.0, 0.0, -1e300]);
        let b = bytes(&[2.0, -3.0, f64::NAN, -0.0, 1e-300]);
        let mut min = b.clone();
        Op::Min.apply(&ld, 5, &a, &mut min).unwrap();
        assert_eq!(min[..48], bytes(&[1.5, -3.0, 3.0])[..], "NaN gives way");
        assert_eq!(min[64..], bytes(&[-1e300])[..]);
        let mut max = b.clone();
        Op::Max.apply(&ld, 5, &a, &mut max).unwrap();
        assert_eq!(max[..48], bytes(&[2.0, -2.0, 3.0])[..]);
        assert_eq!(max[64..], bytes(&[1e-300])[..]);
        assert!(Op::Sum.check(&ld).is_err(), "no arithmetic on long double yet");
        // MPI_LONG_DOUBLE_INT, packed as value then index.
        let pair = Datatype::basic(Basic::Pair(PairValue::LongDouble));
        let pairs = |v: &[(f64, i32)]| -> Vec<u8> {
            v.iter()
                .flat_map(|&(x, i)| x87(x).into_iter().chain(i.to_ne_bytes()))
                .collect()
        };
        let mut loc = pairs(&[(5.0, 1), (7.0, 4)]);
        Op::Minloc
            .apply(&pair, 2, &pairs(&[(-5.0, 0), (7.0, 2)]), &mut loc)
            .unwrap();
        assert_eq!(
            loc,
            pairs(&[(-5.0, 0), (7.0, 2)]),
            "equal values: the lower index"
        );
        Op::Maxloc
            .apply(&pair, 2, &pairs(&[(9.0, 3), (1.0, 9)]), &mut loc)
            .unwrap();
        assert_eq!(loc, pairs(&[(9.0, 3), (7.0, 2)]));
    }

    #[test]
    fn complex_product_and_minloc_pairs() {
        let c = Datatype::basic(Basic::ComplexF64);
        let a: Vec<u8> = [1.0f64, 2.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut b: Vec<u8> = [3.0f64, 4.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
        Op::Prod.apply(&c, 1, &a, &mut b).unwrap();
        let r: Vec<f64> = bytemuck::pod_collect_to_vec(&b);
        assert_eq!(r, [-5.0, 10.0]);

        let pair = |v: f64, i: i32| [v.to_ne_bytes().to_vec(), i.to_ne_bytes().to_vec()].concat();
        let di = Datatype::basic(Basic::Pair(PairValue::F64));
        let input = [pair(1.0, 7), pair(5.0, 2), pair(3.0, 9)].concat();
        let mut inout = [pair(2.0, 1), pair(5.0, 4), pair(3.0, 3)].concat();
        Op::Minloc.apply(&di, 3, &input, &mut inout).unwrap();
        assert_eq!(
            inout,
            [pair(1.0, 7), pair(5.0, 2), pair(3.0, 3)].concat(),
            "ties take the smaller index"
        );
        let mut inout = [pair(2.0, 1), pair(5.0, 4), pair(3.0, 3)].concat();
        Op::Maxloc.apply(&di, 3, &input, &mut inout).unwrap();
        assert_eq!(inout, [pair(2.0, 1), pair(5.0, 2), pair(3.0, 3)].concat());
    }

    #[test]
    fn user_ops_see_lower_ranks_first_and_their_own_layout() {
        // Non-commutative: inout = input ∘ inout with ∘ = "keep the left one".
        let left = Op::user(false, |a: &[i32], b: &mut [i32]| b.copy_from_slice(a));
        assert!(!left.is_commutative());
        assert_eq!(run(left, &[1, 2], &[3, 4]), [1, 2]);
        // A strided type: the function gets the gaps back, then only data is packed.
        let v = i32::datatype().vector(2, 1, 2).unwrap();
        let seen = std::rc::Rc::new(std::cell::Cell::new(0));
        let s = seen.clone();
        let op = Op::user_raw(
            true,
            Box::new(move |a, b, origin, count, dt| {
                s.set(b.len());
                assert_eq!((origin, count, dt.size()), (0, 1, 8));
                for i in [0, 8] {
                    b[i] += a[i];
                }
                Ok(())
            }),
        );
        let mut inout = [1u8, 0, 0, 0, 2, 0, 0, 0];
        op.apply(&v, 1, &[10, 0, 0, 0, 20, 0, 0, 0], &mut inout).unwrap();
        assert_eq!(inout, [11, 0, 0, 0, 22, 0, 0, 0]);
        assert_eq!(seen.get(), 12, "unpacked to the vector's own span");
    }
}
