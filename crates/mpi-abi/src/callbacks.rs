//! What a program hands MPI to keep or to call back, as typed arguments: values MPI
//! carries without reading them ([`Opaque`]: attribute values, callbacks' extra state),
//! attribute copy and delete functions, user-defined reduction functions, error
//! handlers and generalized requests' functions. Calling one of the program's functions
//! is the only `unsafe` they need, and it is here: the C caller's contract is that a
//! function it registers has the type the standard gives it and may be called as the
//! standard says.

use std::ffi::c_void;
use std::os::raw::c_int;

use crate::abi::*;

/// A pointer-sized value the program passes through MPI that MPI never dereferences
/// (`void *attribute_val` of a set, `void *extra_state`).
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct Opaque(*mut c_void);

impl Opaque {
    pub fn bits(self) -> usize {
        self.0 as usize
    }
}

/// `MPI_Comm_copy_attr_function` and `MPI_Type_copy_attr_function` (the handle is a
/// communicator or a datatype).
pub type CopyAttrFn =
    unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Comm_delete_attr_function` and `MPI_Type_delete_attr_function`.
pub type DeleteAttrFn = unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void) -> c_int;

/// An attribute copy function as a keyval's creator passes it: `MPI_*_NULL_COPY_FN`
/// (0), `MPI_*_DUP_FN` (1) or the program's own.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct CopyAttr(usize);

impl CopyAttr {
    /// The value a duplicate of object `h` gets for `value` (of keyval `keyval`, created
    /// with `extra`): none when it is not copied; the program's error code when its
    /// function failed.
    pub fn copy(self, h: Handle, keyval: c_int, extra: usize, value: usize) -> Result<Option<usize>, c_int> {
        match self.0 {
            0 => Ok(None),
            1 => Ok(Some(value)),
            f => {
                // SAFETY: any other value is the program's copy function (the contract
                // of MPI_Comm_create_keyval and MPI_Type_create_keyval).
                let f = unsafe { std::mem::transmute::<usize, CopyAttrFn>(f) };
                let (mut copied, mut flag): (usize, c_int) = (0, 0);
                // SAFETY: called as the standard says, with places for the copy (a
                // pointer-sized value) and its flag that live across the call.
                let rc = unsafe {
                    f(
                        h,
                        keyval,
                        extra as *mut c_void,
                        value as *mut c_void,
                        (&mut copied as *mut usize).cast(),
                        &mut flag,
                    )
                };
                match rc {
                    MPI_SUCCESS => Ok((flag != 0).then_some(copied)),
                    code => Err(code),
                }
            }
        }
    }
}

/// An attribute delete function (or `MPI_*_NULL_DELETE_FN`, NULL).
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct DeleteAttr(Option<DeleteAttrFn>);

impl DeleteAttr {
    /// Runs it for `value` of keyval `keyval` on object `h`: the program's return code.
    pub fn delete(self, h: Handle, keyval: c_int, value: usize, extra: usize) -> c_int {
        match self.0 {
            // SAFETY: the program's delete function, called as the standard says.
            Some(f) => unsafe { f(h, keyval, value as *mut c_void, extra as *mut c_void) },
            None => MPI_SUCCESS,
        }
    }
}

/// `void f(void *invec, void *inoutvec, N *len, MPI_Datatype *datatype)`:
/// `MPI_User_function` (`N`: `int`) and `MPI_User_function_c` (`MPI_Count`).
pub type UserFunction<N> = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut N, *mut MPI_Datatype);

/// The reduction function of `MPI_Op_create(_c)`.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct UserOp<N>(Option<UserFunction<N>>);

impl<N> UserOp<N> {
    pub fn is_given(&self) -> bool {
        self.0.is_some()
    }

    /// `inout[i] = input[i] op inout[i]` for the `len` elements of datatype `dt` laid
    /// out from byte `origin` of both (as pontoon hands a raw user operation its
    /// operands: `pontoon::Op::user_raw`). Nothing when no function was given.
    pub fn apply(self, input: &[u8], inout: &mut [u8], origin: usize, len: &mut N, dt: &mut MPI_Datatype) {
        let Some(f) = self.0 else { return };
        let (a, b) = (
            input.as_ptr().wrapping_add(origin),
            inout.as_mut_ptr().wrapping_add(origin),
        );
        // SAFETY: the function the program registered, called as the standard says with
        // `len` elements of its datatype laid out from the two origins, which the two
        // slices hold (pontoon's contract for a raw user operation).
        unsafe { f(a as *mut c_void, b as *mut c_void, len, dt) };
    }
}

/// `MPI_Comm_errhandler_function`.
pub type ErrhandlerFn = unsafe extern "C" fn(*mut MPI_Comm, *mut c_int);

/// Runs the error handler function the program registered, for `code` on `comm`.
pub fn run_errhandler(f: ErrhandlerFn, comm: MPI_Comm, code: c_int) {
    let (mut comm, mut code) = (comm, code);
    // SAFETY: a function the program registered with MPI_Comm_create_errhandler, called
    // as the standard says, with places that live across the call.
    unsafe { f(&mut comm, &mut code) };
}

/// A generalized request's `MPI_Grequest_query_function`.
pub type QueryFn = unsafe extern "C" fn(extra_state: *mut c_void, status: *mut MPI_Status) -> c_int;
/// A generalized request's `MPI_Grequest_free_function`.
pub type FreeFn = unsafe extern "C" fn(extra_state: *mut c_void) -> c_int;
/// A generalized request's `MPI_Grequest_cancel_function`.
pub type CancelFn = unsafe extern "C" fn(extra_state: *mut c_void, complete: c_int) -> c_int;

/// Runs a generalized request's query function: its return code.
pub fn run_query(f: QueryFn, extra: usize, status: &mut MPI_Status) -> c_int {
    // SAFETY: the program's callback with its own state and a status to fill, as
    // MPI_Grequest_start promised.
    unsafe { f(extra as *mut c_void, status) }
}

/// Runs a generalized request's free function: its return code.
pub fn run_free(f: FreeFn, extra: usize) -> c_int {
    // SAFETY: the program's callback with its own state.
    unsafe { f(extra as *mut c_void) }
}

/// Runs a generalized request's cancel function: its return code.
pub fn run_cancel(f: CancelFn, extra: usize, complete: bool) -> c_int {
    // SAFETY: the program's callback with its own state.
    unsafe { f(extra as *mut c_void, c_int::from(complete)) }
}
