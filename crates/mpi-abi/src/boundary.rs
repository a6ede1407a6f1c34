//! The one door between C and Rust: every exported function runs its body through
//! [`enter`], which catches panics and turns failures into MPI error codes raised on a
//! communicator's error handler; and the helpers below for the integers C passes.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::abi::*;
use crate::errors;
pub use crate::fail::{fail, Fail, Res};

/// Runs the body of `MPI_<name>`: success is `MPI_SUCCESS`; a failure or a panic goes
/// to the error handler of its communicator (`on` unless the failure names another).
#[inline(always)]
pub fn enter(name: &'static str, on: Handle, body: impl FnOnce() -> Res) -> c_int {
    let _turn = match crate::state::take_turn() {
        Ok(turn) => turn,
        Err(why) => return errors::report_without_handler(name, MPI_ERR_OTHER, why),
    };
    enter_any_thread(name, on, body)
}

/// [`enter`] for a function any thread may call at any time: no turn to take.
#[inline(always)]
pub fn enter_any_thread(name: &'static str, on: Handle, body: impl FnOnce() -> Res) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => MPI_SUCCESS,
        Ok(Err(f)) => failed(name, on, f),
        Err(panic) => failed(name, on, panicked(panic)),
    }
}

#[cold]
#[inline(never)]
fn failed(name: &'static str, on: Handle, failure: Fail) -> c_int {
    if crate::state::another_thread_inside() {
        return errors::report_without_handler(name, failure.class, failure.msg);
    }
    let on = failure.on.unwrap_or(on);
    errors::raise(name, on, failure)
}

#[cold]
#[inline(never)]
fn panicked(panic: Box<dyn std::any::Any + Send>) -> Fail {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    Fail::new(
        MPI_ERR_INTERN,
        format!("internal error in pontoon ({what}); please report it with the program that shows it"),
    )
}

/// An integer argument of either width: `int` in the classic forms, `MPI_Count` or
/// `MPI_Aint` in the large-count `_c` forms.
pub trait Wide: Copy {
    fn wide(self) -> i64;
}
impl Wide for i32 {
    fn wide(self) -> i64 {
        i64::from(self)
    }
}
impl Wide for i64 {
    fn wide(self) -> i64 {
        self
    }
}
impl Wide for isize {
    fn wide(self) -> i64 {
        self as i64
    }
}

/// A size or count given back to C in the width the form has: too large for `int` is an
/// error that names the `_c` form.
pub fn fit<T: TryFrom<u64>>(v: u64, what: &str) -> Result<T, Fail> {
    T::try_from(v).map_err(|_| {
        Fail::new(
            MPI_ERR_VALUE_TOO_LARGE,
            format!("{what} is {v}, more than this form's int holds: call the MPI-4 `_c` form"),
        )
    })
}

/// A signed size (an extent, a bound) given back in the width the form has.
pub fn fit_signed<T: TryFrom<i64>>(v: i64, what: &str) -> Result<T, Fail> {
    T::try_from(v).map_err(|_| {
        Fail::new(
            MPI_ERR_VALUE_TOO_LARGE,
            format!("{what} is {v}, more than this form holds: call the MPI-4 `_c` form"),
        )
    })
}

/// A count argument as a length (negative counts are an error).
pub fn count(n: i64, what: &str) -> Result<u64, Fail> {
    u64::try_from(n).map_err(|_| Fail::new(MPI_ERR_COUNT, format!("`{what}` is negative ({n})")))
}
