//! The standard ABI's types and fixed values, as the Rust side needs them (the C side
//! is `include/mpi.h`; `tests/c/constants` checks the two against the reference).

use std::os::raw::c_int;

pub type MPI_Aint = isize;
pub type MPI_Count = i64;
pub type MPI_Offset = i64;
/// Every handle type is a pointer-sized integer here: predefined values are fixed by
/// the standard, created ones are table slots (`handles.rs`).
pub type Handle = usize;
pub type MPI_Comm = Handle;
pub type MPI_Group = Handle;
pub type MPI_Datatype = Handle;
pub type MPI_Op = Handle;
pub type MPI_Request = Handle;
pub type MPI_Errhandler = Handle;
pub type MPI_Info = Handle;
pub type MPI_Message = Handle;

/// `MPI_Status`: 32 bytes. `internal[0..2]` hold the byte count, `internal[2]` the
/// cancelled flag.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MPI_Status {
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
    pub internal: [c_int; 5],
}

pub const MPI_OP_NULL: Handle = 0x20;
pub const MPI_SUM: Handle = 0x21;
pub const MPI_MIN: Handle = 0x22;
pub const MPI_MAX: Handle = 0x23;
pub const MPI_PROD: Handle = 0x24;
pub const MPI_BAND: Handle = 0x28;
pub const MPI_BOR: Handle = 0x29;
pub const MPI_BXOR: Handle = 0x2a;
pub const MPI_LAND: Handle = 0x30;
pub const MPI_LOR: Handle = 0x31;
pub const MPI_LXOR: Handle = 0x32;
pub const MPI_MINLOC: Handle = 0x38;
pub const MPI_MAXLOC: Handle = 0x39;
pub const MPI_REPLACE: Handle = 0x3c;
pub const MPI_NO_OP: Handle = 0x3d;

pub const MPI_COMM_NULL: Handle = 0x100;
pub const MPI_COMM_WORLD: Handle = 0x101;
pub const MPI_COMM_SELF: Handle = 0x102;
pub const MPI_GROUP_NULL: Handle = 0x108;
pub const MPI_GROUP_EMPTY: Handle = 0x109;
pub const MPI_MESSAGE_NULL: Handle = 0x128;
pub const MPI_MESSAGE_NO_PROC: Handle = 0x129;
pub const MPI_INFO_NULL: Handle = 0x130;
pub const MPI_INFO_ENV: Handle = 0x131;
pub const MPI_ERRHANDLER_NULL: Handle = 0x140;
pub const MPI_ERRORS_ARE_FATAL: Handle = 0x141;
pub const MPI_ERRORS_ABORT: Handle = 0x142;
pub const MPI_ERRORS_RETURN: Handle = 0x143;
pub const MPI_REQUEST_NULL: Handle = 0x180;
pub const MPI_DATATYPE_NULL: Handle = 0x200;
pub const MPI_BYTE: Handle = 0x247;

/// The predefined datatype handles lie in `[DATATYPE_FIRST, DATATYPE_FIRST + DATATYPE_SPAN)`.
pub const DATATYPE_FIRST: Handle = 0x200;
pub const DATATYPE_SPAN: usize = 0x100;

pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_BUFFER: c_int = 1;
pub const MPI_ERR_COUNT: c_int = 2;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_TAG: c_int = 4;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_RANK: c_int = 6;
pub const MPI_ERR_REQUEST: c_int = 7;
pub const MPI_ERR_ROOT: c_int = 8;
pub const MPI_ERR_GROUP: c_int = 9;
pub const MPI_ERR_OP: c_int = 10;
pub const MPI_ERR_TOPOLOGY: c_int = 11;
pub const MPI_ERR_DIMS: c_int = 12;
pub const MPI_ERR_ARG: c_int = 13;
pub const MPI_ERR_UNKNOWN: c_int = 14;
pub const MPI_ERR_TRUNCATE: c_int = 15;
pub const MPI_ERR_OTHER: c_int = 16;
pub const MPI_ERR_INTERN: c_int = 17;
pub const MPI_ERR_IN_STATUS: c_int = 19;
pub const MPI_ERR_INFO_KEY: c_int = 31;
pub const MPI_ERR_INFO_NOKEY: c_int = 32;
pub const MPI_ERR_INFO: c_int = 34;
pub const MPI_ERR_KEYVAL: c_int = 36;
pub const MPI_ERR_NO_MEM: c_int = 39;
pub const MPI_ERR_BASE: c_int = 24;
pub const MPI_ERR_PROC_ABORTED: c_int = 58;
/// MPI-4: a result too large for the output argument of the form called.
pub const MPI_ERR_VALUE_TOO_LARGE: c_int = 59;
pub const MPI_ERR_ERRHANDLER: c_int = 61;
/// The last predefined error class.
pub const MPI_ERR_LASTCLASS: c_int = 62;
pub const MPI_ERR_LASTCODE: c_int = 0x3fff;

pub const MPI_ANY_SOURCE: c_int = -1;
pub const MPI_ANY_TAG: c_int = -2;
pub const MPI_PROC_NULL: c_int = -3;
pub const MPI_ROOT: c_int = -4;
pub const MPI_UNDEFINED: c_int = -32766;

pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1024;
pub const MPI_THREAD_SERIALIZED: c_int = 2048;
pub const MPI_THREAD_MULTIPLE: c_int = 4096;

/// MPI_Topo_test's answers.
pub const MPI_CART: c_int = 211;
pub const MPI_GRAPH: c_int = 212;
pub const MPI_DIST_GRAPH: c_int = 213;
/// The weights arguments' special values (addresses no array has).
pub const MPI_UNWEIGHTED: usize = 10;
pub const MPI_WEIGHTS_EMPTY: usize = 11;

pub const MPI_COMM_TYPE_SHARED: c_int = 221;
pub const MPI_COMM_TYPE_HW_UNGUIDED: c_int = 222;
pub const MPI_COMM_TYPE_HW_GUIDED: c_int = 223;
pub const MPI_COMM_TYPE_RESOURCE_GUIDED: c_int = 224;

pub const MPI_IDENT: c_int = 201;
pub const MPI_CONGRUENT: c_int = 202;
pub const MPI_SIMILAR: c_int = 203;
pub const MPI_UNEQUAL: c_int = 204;

pub const MPI_KEYVAL_INVALID: c_int = 0;
pub const MPI_TAG_UB: c_int = 501;
pub const MPI_HOST: c_int = 503;
pub const MPI_IO: c_int = 502;
pub const MPI_WTIME_IS_GLOBAL: c_int = 504;
pub const MPI_APPNUM: c_int = 505;
pub const MPI_LASTUSEDCODE: c_int = 506;
pub const MPI_UNIVERSE_SIZE: c_int = 507;

pub const MPI_MAX_ERROR_STRING: usize = 512;
pub const MPI_MAX_LIBRARY_VERSION_STRING: usize = 8192;
pub const MPI_MAX_OBJECT_NAME: usize = 128;
pub const MPI_MAX_PROCESSOR_NAME: usize = 256;

/// `MPI_IN_PLACE` and `MPI_BOTTOM` as addresses.
pub const MPI_IN_PLACE: usize = 1;
pub const MPI_BOTTOM: usize = 0;

pub const MPI_VERSION: c_int = 5;
pub const MPI_SUBVERSION: c_int = 0;
pub const MPI_ABI_VERSION: c_int = 1;
pub const MPI_ABI_SUBVERSION: c_int = 0;
