//! MPI datatypes: the basic types, derived constructors, and the pack/unpack engine.
//!
//! A datatype is kept flattened: the byte runs of one element in type-map order
//! (`blocks`, adjacent runs merged, equal runs at a constant stride kept as one
//! [`Run`] with a count, so a vector of 64 M elements is one entry, not 64 M) for moving
//! data, and its type signature as runs
//! of basic types (`signature`) for reductions and `get_elements`. Communication
//! and reductions work on the *packed* form (the runs back to back); a datatype
//! whose one run starts at 0 and fills its extent is `dense`, and then the packed
//! form is the user's memory itself and nothing is copied.

use std::cell::RefCell;
use std::rc::Rc;

use crate::{Error, Result};

/// A basic (predefined) element type: what a reduction computes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Basic {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
    /// C `long double` (x86-64: 80-bit in 16 bytes): moved, not reduced.
    LongDouble,
    /// C `_Bool`.
    Bool,
    /// Fortran `LOGICAL` (4 bytes, non-zero is true).
    Logical,
    /// C `float _Complex`.
    ComplexF32,
    /// C `double _Complex`.
    ComplexF64,
    /// C `long double _Complex`: moved, not reduced.
    ComplexLongDouble,
    /// `MPI_BYTE`: uninterpreted.
    Byte,
    /// `MPI_CHAR` (text, not a number: no arithmetic reductions).
    Char,
    /// `MPI_WCHAR` (4 bytes on Linux).
    WChar,
    /// `MPI_PACKED`.
    Packed,
    /// A (value, `int` index) pair for MINLOC/MAXLOC; packed as value then index.
    Pair(PairValue),
}

/// The value type of a MINLOC/MAXLOC pair type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PairValue {
    /// `MPI_FLOAT_INT`
    F32,
    /// `MPI_DOUBLE_INT`
    F64,
    /// `MPI_LONG_INT`
    I64,
    /// `MPI_2INT`
    I32,
    /// `MPI_SHORT_INT`
    I16,
    /// `MPI_LONG_DOUBLE_INT`
    LongDouble,
}

impl PairValue {
    pub fn value_size(self) -> u64 {
        match self {
            PairValue::F32 | PairValue::I32 => 4,
            PairValue::F64 | PairValue::I64 => 8,
            PairValue::I16 => 2,
            PairValue::LongDouble => 16,
        }
    }
}

impl Basic {
    /// Bytes of one element (packed: pairs without padding).
    pub fn size(self) -> u64 {
        match self {
            Basic::I8 | Basic::U8 | Basic::Bool | Basic::Byte | Basic::Char | Basic::Packed => 1,
            Basic::I16 | Basic::U16 => 2,
            Basic::I32 | Basic::U32 | Basic::F32 | Basic::Logical | Basic::WChar => 4,
            Basic::I64 | Basic::U64 | Basic::F64 | Basic::ComplexF32 => 8,
            Basic::LongDouble | Basic::ComplexF64 => 16,
            Basic::ComplexLongDouble => 32,
            Basic::Pair(v) => v.value_size() + 4,
        }
    }

    /// Natural alignment in memory (what C gives the type).
    fn align(self) -> u64 {
        match self {
            Basic::ComplexF32 => 4,
            Basic::ComplexF64 => 8,
            Basic::LongDouble | Basic::ComplexLongDouble => 16,
            Basic::Pair(v) => v.value_size().max(4),
            other => other.size(),
        }
    }

    /// Basic elements one of these counts as for `get_elements` (a pair is two).
    fn elements(self) -> u64 {
        if matches!(self, Basic::Pair(_)) {
            2
        } else {
            1
        }
    }
}

/// Kept per datatype; shared between clones of the handle.
#[derive(Debug, Clone)]
struct TypeData {
    size: u64,
    lb: i64,
    ub: i64,
    true_lb: i64,
    true_ub: i64,
    align: u64,
    /// Byte runs of one element, in type-map order.
    blocks: Vec<Run>,
    /// The type signature of one element as runs of basic types.
    signature: Vec<(Basic, u64)>,
    predefined: bool,
    name: String,
}

/// An MPI datatype. Cloning is cheap and shares the description.
#[derive(Debug, Clone)]
pub struct Datatype(Rc<TypeData>);

impl PartialEq for Datatype {
    fn eq(&self, other: &Self) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

fn push_run<T: PartialEq + Copy>(runs: &mut Vec<(T, u64)>, item: T, n: u64) {
    if n == 0 {
        return;
    }
    match runs.last_mut() {
        Some((last, count)) if *last == item => *count += n,
        _ => runs.push((item, n)),
    }
}

/// `count` runs of `len` bytes, the first at `disp`, each `stride` bytes after the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    disp: i64,
    len: u64,
    count: u64,
    stride: i64,
}

impl Run {
    fn one(disp: i64, len: u64) -> Run {
        Run {
            disp,
            len,
            count: 1,
            stride: 0,
        }
    }

    /// Where the copy after the last would start.
    fn next(&self) -> i64 {
        self.disp + self.count as i64 * self.stride
    }

    /// Calls `f(displacement, length)` for each of its runs.
    fn each(&self, mut f: impl FnMut(i64, u64)) {
        for k in 0..self.count as i64 {
            f(self.disp + k * self.stride, self.len);
        }
    }
}

/// Appends `len` bytes at `disp`: joins the last run when adjacent, or its stride when
/// it is one more at the same distance.
fn push_block(blocks: &mut Vec<Run>, disp: i64, len: u64) {
    if len == 0 {
        return;
    }
    match blocks.last_mut() {
        Some(r) if r.count == 1 && r.disp + r.len as i64 == disp => r.len += len,
        Some(r) if r.count == 1 && r.len == len && disp != r.disp => {
            r.stride = disp - r.disp;
            r.count = 2;
        }
        Some(r) if r.count > 1 && r.len == len && disp == r.next() => r.count += 1,
        _ => blocks.push(Run::one(disp, len)),
    }
}

/// Appends a run of copies as it is (after joining its first copy when it can).
fn push_run_group(blocks: &mut Vec<Run>, r: Run) {
    if r.count > 1 && r.stride == r.len as i64 {
        // Copies end to end: one run.
        push_block(blocks, r.disp, r.len * r.count);
    } else if r.count == 1 {
        push_block(blocks, r.disp, r.len);
    } else if r.len > 0 {
        blocks.push(r);
    }
}

/// Largest element count a derived type may describe in one element (keeps the
/// flattened description in memory bounds).
const MAX_BLOCKS: usize = 1 << 26;

impl Datatype {
    /// A predefined basic type.
    pub fn basic(b: Basic) -> Datatype {
        let size = b.size();
        let (blocks, ub) = match b {
            Basic::Pair(v) => {
                // The C struct {value; int}: the index follows the value, padded to the
                // value's alignment.
                let vs = v.value_size();
                let idx_at = vs.max(4);
                let ub = (idx_at + 4).div_ceil(b.align()) * b.align();
                let mut blocks = Vec::new();
                push_block(&mut blocks, 0, vs);
                push_block(&mut blocks, idx_at as i64, 4);
                (blocks, ub as i64)
            }
            _ => (vec![Run::one(0, size)], size as i64),
        };
        Datatype(Rc::new(TypeData {
            size,
            lb: 0,
            ub,
            true_lb: 0,
            true_ub: blocks.last().map_or(0, |r| r.disp + r.len as i64),
            align: b.align(),
            blocks,
            signature: vec![(b, 1)],
            predefined: true,
            name: format!("{b:?}"),
        }))
    }

    /// Identifies this datatype among live ones (clones share it), for a foreign
    /// caller's handle table.
    pub fn identity(&self) -> usize {
        Rc::as_ptr(&self.0) as usize
    }

    /// The one basic type of a predefined datatype.
    pub fn as_basic(&self) -> Option<Basic> {
        match self.0.signature.as_slice() {
            [(b, 1)] if self.0.predefined => Some(*b),
            _ => None,
        }
    }

    pub fn is_predefined(&self) -> bool {
        self.0.predefined
    }

    /// Bytes of data in one element.
    pub fn size(&self) -> u64 {
        self.0.size
    }
    /// (lower bound, extent).
    pub fn extent(&self) -> (i64, i64) {
        (self.0.lb, self.0.ub - self.0.lb)
    }
    /// (true lower bound, true extent): the bytes really touched.
    pub fn true_extent(&self) -> (i64, i64) {
        (self.0.true_lb, self.0.true_ub - self.0.true_lb)
    }
    pub fn name(&self) -> &str {
        &self.0.name
    }
    /// The type signature of one element as runs of basic types.
    pub fn signature(&self) -> &[(Basic, u64)] {
        &self.0.signature
    }
    /// Byte runs of one element, `(displacement, length)`, in type-map order, each
    /// listed (a vector of 64 M elements lists 64 M: for tests and small types).
    pub fn blocks(&self) -> Vec<(i64, u64)> {
        let mut out = Vec::new();
        for r in &self.0.blocks {
            r.each(|d, l| out.push((d, l)));
        }
        out
    }

    /// True when `count` elements are one run of `count * size` bytes starting at the
    /// buffer: the packed form is the memory itself.
    pub fn is_dense(&self) -> bool {
        let d = &*self.0;
        d.size == 0
            || (matches!(d.blocks.as_slice(), [r] if r.count == 1 && r.disp == 0)
                && d.lb == 0
                && d.ub == d.size as i64)
    }

    /// A new derived type with this type map (MPI_Type_dup).
    pub fn dup(&self) -> Datatype {
        self.with_bounds(self.0.lb, self.0.ub)
    }

    /// A new derived type with this type map and the bounds `lb..ub`.
    fn with_bounds(&self, lb: i64, ub: i64) -> Datatype {
        Datatype(Rc::new(TypeData {
            lb,
            ub,
            predefined: false,
            name: String::new(),
            ..(*self.0).clone()
        }))
    }

    /// `count` copies of `blocklens[i]` elements of the types at byte displacements:
    /// the general constructor every other one reduces to (MPI_Type_create_struct).
    pub fn create_struct(blocklens: &[u64], displs: &[i64], types: &[Datatype]) -> Result<Datatype> {
        if blocklens.len() != displs.len() || blocklens.len() != types.len() {
            return Err(Error::Arg(
                "create_struct: block lengths, displacements and types differ in number".into(),
            ));
        }
        let mut b = Builder::default();
        for ((n, d), t) in blocklens.iter().zip(displs).zip(types) {
            b.add(*d, *n, t)?;
        }
        // A struct is padded to the strictest alignment of its parts, as C pads it.
        let align = types.iter().map(|t| t.0.align).max().unwrap_or(1);
        Ok(b.finish(align, true))
    }

    /// `count` copies back to back (MPI_Type_contiguous).
    pub fn contiguous(&self, count: u64) -> Result<Datatype> {
        let mut b = Builder::default();
        b.add(0, count, self)?;
        Ok(b.finish(self.0.align, false))
    }

    /// `count` blocks of `blocklen` elements, `stride` elements apart (MPI_Type_vector).
    pub fn vector(&self, count: u64, blocklen: u64, stride: i64) -> Result<Datatype> {
        self.hvector(count, blocklen, stride * self.extent().1)
    }

    /// As [`Datatype::vector`] with the stride in bytes (MPI_Type_create_hvector).
    pub fn hvector(&self, count: u64, blocklen: u64, stride_bytes: i64) -> Result<Datatype> {
        let mut b = Builder::default();
        if let (Some(block), true) = (self.dense_block(blocklen), count > 1) {
            // Blocks of a dense type: one run of `count` copies, however many.
            b.add_strided(block, count, stride_bytes, blocklen, self)?;
        } else {
            for i in 0..count {
                b.add(i as i64 * stride_bytes, blocklen, self)?;
            }
        }
        Ok(b.finish(self.0.align, false))
    }

    /// The one run `n` back-to-back copies of a dense-in-its-extent type make.
    fn dense_block(&self, n: u64) -> Option<Run> {
        let ext = self.0.ub - self.0.lb;
        match self.0.blocks.as_slice() {
            [r] if r.count == 1 && r.len as i64 == ext && n > 0 => {
                Some(Run::one(r.disp, n.checked_mul(r.len)?))
            }
            _ => None,
        }
    }

    /// Blocks of `blocklens[i]` elements at `displs[i]` elements (MPI_Type_indexed).
    pub fn indexed(&self, blocklens: &[u64], displs: &[i64]) -> Result<Datatype> {
        let ext = self.extent().1;
        self.hindexed(blocklens, &displs.iter().map(|d| d * ext).collect::<Vec<_>>())
    }

    /// As [`Datatype::indexed`] with byte displacements (MPI_Type_create_hindexed).
    pub fn hindexed(&self, blocklens: &[u64], displs: &[i64]) -> Result<Datatype> {
        if blocklens.len() != displs.len() {
            return Err(Error::Arg(
                "indexed: block lengths and displacements differ in number".into(),
            ));
        }
        let mut b = Builder::default();
        for (n, d) in blocklens.iter().zip(displs) {
            b.add(*d, *n, self)?;
        }
        Ok(b.finish(self.0.align, false))
    }

    /// Blocks of one length at element displacements (MPI_Type_create_indexed_block).
    pub fn indexed_block(&self, blocklen: u64, displs: &[i64]) -> Result<Datatype> {
        self.indexed(&vec![blocklen; displs.len()], displs)
    }

    /// Blocks of one length at byte displacements (MPI_Type_create_hindexed_block).
    pub fn hindexed_block(&self, blocklen: u64, displs: &[i64]) -> Result<Datatype> {
        self.hindexed(&vec![blocklen; displs.len()], displs)
    }

    /// The same data with another lower bound and extent (MPI_Type_create_resized).
    pub fn resized(&self, lb: i64, extent: i64) -> Datatype {
        self.with_bounds(lb, lb + extent)
    }

    /// The span of bytes `count` elements touch, relative to the buffer's origin:
    /// `(first, end)`.
    pub fn span(&self, count: u64) -> (i64, i64) {
        if count == 0 || self.0.size == 0 {
            return (0, 0);
        }
        let ext = self.extent().1;
        let last = (count as i64 - 1) * ext;
        let (a, b) = (last.min(0), last.max(0));
        (self.0.true_lb + a, self.0.true_ub + b)
    }

    /// Checks that `count` elements with the origin at `buf[origin]` stay inside `buf`.
    pub fn check_fits(&self, count: u64, buf_len: usize, origin: usize) -> Result<()> {
        let (first, end) = self.span(count);
        if origin as i64 + first < 0 || origin as i64 + end > buf_len as i64 {
            return Err(Error::Arg(format!(
                "buffer of {buf_len} bytes (origin at byte {origin}) is too small for {count} elements \
                 of a datatype spanning bytes {first}..{end} from the origin"
            )));
        }
        Ok(())
    }

    /// Packs `count` elements from `src` (origin at `src[origin]`) into `out`, whose
    /// length must be `count * size`.
    pub fn pack(&self, count: u64, src: &[u8], origin: usize, out: &mut [u8]) -> Result<()> {
        self.check_fits(count, src.len(), origin)?;
        if out.len() as u64 != count * self.0.size {
            return Err(Error::Arg("pack: output length is not count * size".into()));
        }
        let mut at = 0;
        self.walk(count, out.len() as u64, |pos, len| {
            let p = (origin as i64 + pos) as usize;
            out[at..at + len].copy_from_slice(&src[p..p + len]);
            at += len;
        });
        Ok(())
    }

    /// Unpacks the first `packed.len()` bytes of `count` elements into `dst`
    /// (origin at `dst[origin]`): a short message fills a prefix of the elements.
    pub fn unpack(&self, count: u64, packed: &[u8], dst: &mut [u8], origin: usize) -> Result<()> {
        self.check_fits(count, dst.len(), origin)?;
        let mut at = 0;
        self.walk(count, packed.len() as u64, |pos, len| {
            let p = (origin as i64 + pos) as usize;
            dst[p..p + len].copy_from_slice(&packed[at..at + len]);
            at += len;
        });
        Ok(())
    }

    /// Calls `f(displacement, length)` for the byte runs of `count` elements in
    /// type-map order, stopping after `limit` bytes.
    fn walk(&self, count: u64, limit: u64, mut f: impl FnMut(i64, usize)) {
        let ext = self.extent().1;
        let mut left = limit;
        for i in 0..count {
            for r in &self.0.blocks {
                for k in 0..r.count as i64 {
                    if left == 0 {
                        return;
                    }
                    let n = r.len.min(left);
                    f(i as i64 * ext + r.disp + k * r.stride, n as usize);
                    left -= n;
                }
            }
        }
    }

    /// Bytes of packed data that `elements` basic elements fill, element by element
    /// through the type signature (MPI_Status_set_elements): the inverse of
    /// [`Datatype::elements_in`].
    pub fn bytes_of_elements(&self, elements: u64) -> u64 {
        let per: u64 = self.0.signature.iter().map(|(b, n)| b.elements() * n).sum();
        if per == 0 {
            return 0;
        }
        let mut bytes = elements / per * self.0.size;
        let mut rest = elements % per;
        for (b, n) in &self.0.signature {
            let run = (rest / b.elements()).min(*n);
            bytes += run * b.size();
            rest -= run * b.elements();
            if run < *n {
                break;
            }
        }
        bytes
    }

    /// Number of basic elements in `bytes` of packed data (MPI_Get_elements).
    pub fn elements_in(&self, bytes: u64) -> u64 {
        if self.0.size == 0 {
            return 0;
        }
        let per: u64 = self.0.signature.iter().map(|(b, n)| b.elements() * n).sum();
        let mut total = bytes / self.0.size * per;
        let mut rest = bytes % self.0.size;
        for (b, n) in &self.0.signature {
            let whole = (rest / b.size()).min(*n);
            total += whole * b.elements();
            rest -= whole * b.size();
            if whole < *n {
                break;
            }
        }
        total
    }
}

/// Accumulates the type map of a derived type.
#[derive(Default)]
struct Builder {
    blocks: Vec<Run>,
    signature: Vec<(Basic, u64)>,
    size: u64,
    bounds: Option<(i64, i64)>,
    true_bounds: Option<(i64, i64)>,
}

fn widen(b: &mut Option<(i64, i64)>, lo: i64, hi: i64) {
    *b = Some(match *b {
        None => (lo, hi),
        Some((a, c)) => (a.min(lo), c.max(hi)),
    });
}

impl Builder {
    /// `count` blocks of `blocklen` copies of the dense type `t` (`block`: the bytes of
    /// one such block), `stride` bytes apart: one run, and the signature of them all.
    fn add_strided(
        &mut self,
        block: Run,
        count: u64,
        stride: i64,
        blocklen: u64,
        t: &Datatype,
    ) -> Result<()> {
        let d = &*t.0;
        let total = count
            .checked_mul(blocklen)
            .ok_or_else(|| Error::Arg(format!("{count} blocks of {blocklen} elements overflow")))?;
        let ext = d.ub - d.lb;
        let (first, last) = (0i64, (count as i64 - 1) * stride);
        let block_end = (blocklen as i64 - 1) * ext;
        widen(
            &mut self.bounds,
            first.min(last) + d.lb,
            first.max(last) + block_end + d.ub,
        );
        if d.size > 0 {
            widen(
                &mut self.true_bounds,
                first.min(last) + d.true_lb,
                first.max(last) + block_end + d.true_ub,
            );
        }
        push_run_group(
            &mut self.blocks,
            Run {
                count,
                stride,
                ..block
            },
        );
        self.repeat_signature(&d.signature, total);
        self.size += total * d.size;
        Ok(())
    }

    /// `n` copies of `t` back to back from byte `disp`.
    fn add(&mut self, disp: i64, n: u64, t: &Datatype) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let d = &*t.0;
        let ext = d.ub - d.lb;
        // A dense child (one run of bytes as long as its extent) repeats as one longer
        // run: MPI_Type_contiguous(INT_MAX, MPI_BYTE) is one run, not 2^31.
        let dense = matches!(d.blocks.as_slice(), [r] if r.count == 1 && r.len as i64 == ext);
        let runs = if dense {
            1
        } else {
            n.saturating_mul(d.blocks.len() as u64)
        };
        if self.blocks.len() as u64 + runs > MAX_BLOCKS as u64 {
            return Err(Error::Arg(format!(
                "datatype too fragmented: more than {MAX_BLOCKS} separate byte runs in one element"
            )));
        }
        let last = disp + (n as i64 - 1) * ext;
        widen(&mut self.bounds, disp.min(last) + d.lb, disp.max(last) + d.ub);
        if d.size > 0 {
            widen(
                &mut self.true_bounds,
                disp.min(last) + d.true_lb,
                disp.max(last) + d.true_ub,
            );
        }
        if dense {
            let len = n.checked_mul(ext as u64).ok_or_else(|| {
                Error::Arg(format!(
                    "{n} copies of a {ext}-byte type overflow the address space"
                ))
            })?;
            push_block(&mut self.blocks, disp + d.blocks[0].disp, len);
        } else {
            for i in 0..n as i64 {
                for r in &d.blocks {
                    push_run_group(
                        &mut self.blocks,
                        Run {
                            disp: disp + i * ext + r.disp,
                            ..*r
                        },
                    );
                }
            }
        }
        self.repeat_signature(&d.signature, n);
        self.size += n * d.size;
        Ok(())
    }

    /// Appends `n` copies of the signature `sig`; a single-run one grows by all of them at
    /// once (a vector of 64 M ints is one run of 64 M).
    fn repeat_signature(&mut self, sig: &[(Basic, u64)], n: u64) {
        if let [(b, c)] = sig {
            push_run(&mut self.signature, *b, c * n);
            return;
        }
        for _ in 0..n {
            for (b, c) in sig {
                push_run(&mut self.signature, *b, *c);
            }
        }
    }

    fn finish(self, align: u64, pad_to_align: bool) -> Datatype {
        let (lb, mut ub) = self.bounds.unwrap_or((0, 0));
        if pad_to_align && align > 1 {
            let ext = ub - lb;
            ub = lb + (ext + align as i64 - 1) / align as i64 * align as i64;
        }
        let (true_lb, true_ub) = self.true_bounds.unwrap_or((0, 0));
        Datatype(Rc::new(TypeData {
            size: self.size,
            lb,
            ub,
            true_lb,
            true_ub,
            align,
            blocks: self.blocks,
            signature: self.signature,
            predefined: false,
            name: String::new(),
        }))
    }
}

/// Rust element types with a matching predefined datatype.
pub trait Equivalence: bytemuck::Pod {
    fn basic() -> Basic;
    /// The predefined datatype of `Self`: made once per thread, then shared. Every
    /// typed call names it, and making one costs three allocations (an 8 B allreduce
    /// spent a tenth of its time on them).
    fn datatype() -> Datatype {
        thread_local! {
            static MADE: RefCell<Vec<Datatype>> = const { RefCell::new(Vec::new()) };
        }
        let b = Self::basic();
        MADE.with(|made| {
            if let Some(d) = made.borrow().iter().find(|d| d.as_basic() == Some(b)) {
                return d.clone();
            }
            let d = Datatype::basic(b);
            made.borrow_mut().push(d.clone());
            d
        })
    }
}

macro_rules! equivalence {
    ($($t:ty => $b:ident),*) => {$(
        impl Equivalence for $t {
            fn basic() -> Basic { Basic::$b }
        }
    )*};
}
equivalence!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32,
    u64 => U64, f32 => F32, f64 => F64);

#[cfg(test)]
mod tests {
    use super::*;

    fn i32t() -> Datatype {
        Datatype::basic(Basic::I32)
    }

    #[test]
    fn a_vector_packs_every_other_int_and_unpacks_back() {
        let v = i32t().vector(3, 1, 2).unwrap();
        assert_eq!(v.size(), 12);
        assert_eq!(v.extent(), (0, 20));
        assert!(!v.is_dense());
        let src: Vec<u8> = (0..24).collect();
        let mut out = vec![0; 12];
        v.pack(1, &src, 0, &mut out).unwrap();
        assert_eq!(out, [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19]);
        let mut back = vec![0xff; 20];
        v.unpack(1, &out, &mut back, 0).unwrap();
        assert_eq!(&back[8..12], &[8, 9, 10, 11]);
        assert_eq!(&back[4..8], &[0xff; 4], "gaps are left alone");
        assert!(
            v.pack(2, &src, 0, &mut [0; 24]).is_err(),
            "two vectors need 40 bytes"
        );
    }

    /// MPI_Status_set_elements counts basic elements through the signature (a struct of a
    /// char, an int, a double and a short: 4 elements, 15 bytes; it took 4 whole structs).
    #[test]
    fn elements_and_their_bytes_are_inverse_through_a_mixed_signature() {
        let parts = [Basic::Char, Basic::I32, Basic::F64, Basic::I16].map(Datatype::basic);
        let s = Datatype::create_struct(&[1; 4], &[0, 8, 16, 24], &parts).unwrap();
        let bytes: Vec<u64> = (0..=9).map(|n| s.bytes_of_elements(n)).collect();
        assert_eq!(bytes, [0, 1, 5, 13, 15, 16, 20, 28, 30, 31]);
        for n in 0..=9 {
            assert_eq!(s.elements_in(s.bytes_of_elements(n)), n);
        }
        let pair = Datatype::basic(Basic::Pair(PairValue::I32));
        assert_eq!(pair.bytes_of_elements(4), 16, "a pair is two elements");
    }

    #[test]
    fn copies_of_a_dense_type_are_one_run_however_many() {
        let huge = Datatype::basic(Basic::U8).contiguous(i32::MAX as u64).unwrap();
        assert_eq!(huge.size(), i32::MAX as u64);
        assert!(huge.is_dense());
        // Of a vector of it, each copy is one run.
        let rows = huge.vector(3, 1, 2).unwrap();
        assert_eq!(rows.size(), 3 * i32::MAX as u64);
        assert!(!rows.is_dense());
    }

    #[test]
    fn a_vector_of_sixty_four_million_blocks_is_one_run_and_packs_right() {
        // An external suite's MPI_Type_vector(64 M, ...) was "too fragmented".
        let big = i32t().vector(1 << 26, 1, 2).unwrap();
        assert_eq!(big.size(), 4 << 26);
        assert_eq!(big.extent(), (0, (8 << 26) - 4));
        assert_eq!(big.0.blocks.len(), 1);
        assert_eq!(big.signature(), &[(Basic::I32, 1 << 26)]);
        // A smaller one of the same shape moves the same bytes as the listed runs say.
        let v = Datatype::basic(Basic::U8).vector(1 << 16, 3, 5).unwrap();
        assert_eq!(v.0.blocks.len(), 1);
        let src: Vec<u8> = (0..(5u32 << 16)).map(|i| (i % 251) as u8).collect();
        let mut out = vec![0; 3 << 16];
        v.pack(1, &src, 0, &mut out).unwrap();
        let expect: Vec<u8> = (0..1u32 << 16)
            .flat_map(|b| (0..3).map(move |k| ((5 * b + k) % 251) as u8))
            .collect();
        assert_eq!(out, expect);
        // Negative strides and a vector of vectors keep type-map order.
        let back = i32t().vector(3, 1, -2).unwrap();
        assert_eq!(back.blocks(), [(0, 4), (-8, 4), (-16, 4)]);
        let nested = i32t().vector(2, 1, 2).unwrap().contiguous(2).unwrap();
        assert_eq!(nested.blocks(), [(0, 4), (8, 4), (12, 4), (20, 4)]);
        // Blocks end to end are one run: a dense type.
        assert!(i32t().vector(4, 2, 2).unwrap().is_dense());
    }

    #[test]
    fn a_struct_is_padded_like_c_and_pairs_match_their_c_struct() {
        let s = Datatype::create_struct(
            &[1, 1],
            &[0, 8],
            &[Datatype::basic(Basic::F64), Datatype::basic(Basic::I8)],
        )
        .unwrap();
        assert_eq!((s.size(), s.extent()), (9, (0, 16)));
        let di = Datatype::basic(Basic::Pair(PairValue::F64));
        assert_eq!((di.size(), di.extent()), (12, (0, 16)));
        let si = Datatype::basic(Basic::Pair(PairValue::I16));
        assert_eq!(
            (si.size(), si.extent(), si.blocks()),
            (6, (0, 8), vec![(0, 2), (4, 4)])
        );
        assert_eq!(di.elements_in(24), 4);
    }

    #[test]
    fn resized_types_tile_with_their_new_extent() {
        let r = i32t().resized(-4, 12);
        assert_eq!(r.extent(), (-4, 12));
        assert_eq!(r.true_extent(), (0, 4));
        assert_eq!(r.span(3), (0, 28));
        let c = r.contiguous(2).unwrap();
        assert_eq!(c.blocks(), [(0, 4), (12, 4)]);
        assert_eq!(c.extent(), (-4, 24));
        let neg = i32t().hvector(2, 1, -8).unwrap();
        assert_eq!(neg.true_extent(), (-8, 12));
        assert!(neg.check_fits(1, 12, 0).is_err());
        neg.check_fits(1, 12, 8).unwrap();
    }

    #[test]
    fn signatures_merge_runs_and_count_partial_elements() {
        let t = Datatype::create_struct(&[2, 1], &[0, 8], &[i32t(), Datatype::basic(Basic::F64)]).unwrap();
        assert_eq!(t.signature(), &[(Basic::I32, 2), (Basic::F64, 1)]);
        let c = t.contiguous(1000).unwrap();
        assert_eq!(c.signature().len(), 2000);
        assert_eq!(
            i32t().contiguous(1000).unwrap().signature(),
            &[(Basic::I32, 1000)]
        );
        assert_eq!(
            t.elements_in(16 + 8),
            3 + 2,
            "one whole element and two ints of the next"
        );
        assert!(i32t().contiguous(7).unwrap().is_dense());
        let ix = i32t().indexed(&[2, 1], &[3, 0]).unwrap();
        assert_eq!(
            ix.blocks(),
            [(12, 8), (0, 4)],
            "type-map order, not address order"
        );
        assert_eq!(ix.extent(), (0, 20));
    }
}
