//! The predefined datatypes and reduction operations behind their fixed handles.

use pontoon::{Basic, Datatype, Op, PairValue};

use crate::abi::*;
use crate::process_wide::ProcessWide;

/// (handle, name, basic type on x86-64/aarch64 Linux; `None`: not supported).
pub const PREDEFINED: &[(Handle, &str, Option<Basic>)] = &[
    (0x201, "MPI_AINT", Some(Basic::I64)),
    (0x202, "MPI_COUNT", Some(Basic::I64)),
    (0x203, "MPI_OFFSET", Some(Basic::I64)),
    (0x207, "MPI_PACKED", Some(Basic::Packed)),
    (0x208, "MPI_SHORT", Some(Basic::I16)),
    (0x209, "MPI_INT", Some(Basic::I32)),
    (0x20a, "MPI_LONG", Some(Basic::I64)),
    (0x20b, "MPI_LONG_LONG", Some(Basic::I64)),
    (0x20c, "MPI_UNSIGNED_SHORT", Some(Basic::U16)),
    (0x20d, "MPI_UNSIGNED", Some(Basic::U32)),
    (0x20e, "MPI_UNSIGNED_LONG", Some(Basic::U64)),
    (0x20f, "MPI_UNSIGNED_LONG_LONG", Some(Basic::U64)),
    (0x210, "MPI_FLOAT", Some(Basic::F32)),
    (0x212, "MPI_C_FLOAT_COMPLEX", Some(Basic::ComplexF32)),
    (0x213, "MPI_CXX_FLOAT_COMPLEX", Some(Basic::ComplexF32)),
    (0x214, "MPI_DOUBLE", Some(Basic::F64)),
    (0x216, "MPI_C_DOUBLE_COMPLEX", Some(Basic::ComplexF64)),
    (0x217, "MPI_CXX_DOUBLE_COMPLEX", Some(Basic::ComplexF64)),
    (0x218, "MPI_LOGICAL", Some(Basic::Logical)),
    (0x219, "MPI_INTEGER", Some(Basic::I32)),
    (0x21a, "MPI_REAL", Some(Basic::F32)),
    (0x21b, "MPI_COMPLEX", Some(Basic::ComplexF32)),
    (0x21c, "MPI_DOUBLE_PRECISION", Some(Basic::F64)),
    (0x21d, "MPI_DOUBLE_COMPLEX", Some(Basic::ComplexF64)),
    (0x21e, "MPI_CHARACTER", Some(Basic::Char)),
    (0x220, "MPI_LONG_DOUBLE", Some(Basic::LongDouble)),
    (0x224, "MPI_C_LONG_DOUBLE_COMPLEX", Some(Basic::ComplexLongDouble)),
    (
        0x225,
        "MPI_CXX_LONG_DOUBLE_COMPLEX",
        Some(Basic::ComplexLongDouble),
    ),
    (0x228, "MPI_FLOAT_INT", Some(Basic::Pair(PairValue::F32))),
    (0x229, "MPI_DOUBLE_INT", Some(Basic::Pair(PairValue::F64))),
    (0x22a, "MPI_LONG_INT", Some(Basic::Pair(PairValue::I64))),
    (0x22b, "MPI_2INT", Some(Basic::Pair(PairValue::I32))),
    (0x22c, "MPI_SHORT_INT", Some(Basic::Pair(PairValue::I16))),
    (
        0x22d,
        "MPI_LONG_DOUBLE_INT",
        Some(Basic::Pair(PairValue::LongDouble)),
    ),
    // Fortran pairs of two reals: no pair type of two floats in pontoon yet.
    (0x230, "MPI_2REAL", None),
    (0x231, "MPI_2DOUBLE_PRECISION", None),
    // Two INTEGERs: the layout of MPI_2INT.
    (0x232, "MPI_2INTEGER", Some(Basic::Pair(PairValue::I32))),
    (0x238, "MPI_C_BOOL", Some(Basic::Bool)),
    (0x239, "MPI_CXX_BOOL", Some(Basic::Bool)),
    (0x23c, "MPI_WCHAR", Some(Basic::WChar)),
    (0x240, "MPI_INT8_T", Some(Basic::I8)),
    (0x241, "MPI_UINT8_T", Some(Basic::U8)),
    (0x243, "MPI_CHAR", Some(Basic::Char)),
    (0x244, "MPI_SIGNED_CHAR", Some(Basic::I8)),
    (0x245, "MPI_UNSIGNED_CHAR", Some(Basic::U8)),
    (0x247, "MPI_BYTE", Some(Basic::Byte)),
    (0x248, "MPI_INT16_T", Some(Basic::I16)),
    (0x249, "MPI_UINT16_T", Some(Basic::U16)),
    (0x250, "MPI_INT32_T", Some(Basic::I32)),
    (0x251, "MPI_UINT32_T", Some(Basic::U32)),
    (0x258, "MPI_INT64_T", Some(Basic::I64)),
    (0x259, "MPI_UINT64_T", Some(Basic::U64)),
    (0x2c0, "MPI_LOGICAL1", None),
    (0x2c1, "MPI_INTEGER1", Some(Basic::I8)),
    (0x2c8, "MPI_LOGICAL2", None),
    (0x2c9, "MPI_INTEGER2", Some(Basic::I16)),
    (0x2ca, "MPI_REAL2", None),
    (0x2d0, "MPI_LOGICAL4", Some(Basic::Logical)),
    (0x2d1, "MPI_INTEGER4", Some(Basic::I32)),
    (0x2d2, "MPI_REAL4", Some(Basic::F32)),
    (0x2d3, "MPI_COMPLEX4", None),
    (0x2d8, "MPI_LOGICAL8", None),
    (0x2d9, "MPI_INTEGER8", Some(Basic::I64)),
    (0x2da, "MPI_REAL8", Some(Basic::F64)),
    (0x2db, "MPI_COMPLEX8", Some(Basic::ComplexF32)),
    (0x2e0, "MPI_LOGICAL16", None),
    (0x2e1, "MPI_INTEGER16", None),
    (0x2e2, "MPI_REAL16", None),
    (0x2e3, "MPI_COMPLEX16", Some(Basic::ComplexF64)),
    (0x2eb, "MPI_COMPLEX32", None),
];

/// Names the program gave predefined datatypes (MPI_Type_set_name allows it).
pub static PREDEFINED_RENAMED: ProcessWide<std::collections::HashMap<Handle, String>> =
    ProcessWide::new(std::collections::HashMap::new);

/// The datatype behind a predefined handle (`None` if unsupported or not one).
pub fn predefined(h: Handle) -> Option<Datatype> {
    let (_, _, b) = PREDEFINED.iter().find(|(v, _, _)| *v == h)?;
    b.map(Datatype::basic)
}

pub fn predefined_name(h: Handle) -> Option<&'static str> {
    PREDEFINED.iter().find(|(v, _, _)| *v == h).map(|(_, n, _)| *n)
}

pub fn predefined_op(h: Handle) -> Option<Op> {
    Some(match h {
        MPI_SUM => Op::Sum,
        MPI_MIN => Op::Min,
        MPI_MAX => Op::Max,
        MPI_PROD => Op::Prod,
        MPI_BAND => Op::Band,
        MPI_BOR => Op::Bor,
        MPI_BXOR => Op::Bxor,
        MPI_LAND => Op::Land,
        MPI_LOR => Op::Lor,
        MPI_LXOR => Op::Lxor,
        MPI_MINLOC => Op::Minloc,
        MPI_MAXLOC => Op::Maxloc,
        MPI_REPLACE => Op::Replace,
        MPI_NO_OP => Op::NoOp,
        _ => return None,
    })
}
