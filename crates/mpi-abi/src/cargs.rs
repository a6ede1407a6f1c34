//! Pointer arguments as a C caller passes them, typed: [`Out`] for what a function
//! writes, [`In`] for what it reads. Each is `#[repr(transparent)]` over the raw pointer,
//! so an exported function's signature takes it where the C prototype has the pointer.
//!
//! The MPI standard's contract is that every pointer argument is null or valid for what
//! the function's signature says, for the length of the call. Only a C caller (or
//! `from_raw`, which is `unsafe` for that reason: `boundary`'s raw-pointer helpers go
//! through it) makes one,
//! so the accessors below are safe: they are the only places where the contract is
//! relied on, and an entry point whose arguments are all typed has a body of safe code
//! (`mpi_fn!`).

use std::ffi::{c_char, CStr};
use std::marker::PhantomData;
use std::os::raw::c_int;

use crate::abi::*;
use crate::fail::{fail, Fail, Res};

/// A pointer the function writes through (an output argument, or an array to fill).
#[repr(transparent)]
pub struct Out<T>(*mut T);

/// A pointer the function reads through (an input argument, an array, a string).
#[repr(transparent)]
pub struct In<T>(*const T, PhantomData<T>);

// A copy is the same argument: it carries the same contract.
impl<T> Clone for Out<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Out<T> {}
impl<T> Clone for In<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for In<T> {}

impl<T> Out<T> {
    /// # Safety
    /// `p` is null or valid for writes of what the caller will ask for, for as long as
    /// the result is used (the contract a C caller has).
    pub unsafe fn from_raw(p: *mut T) -> Out<T> {
        Out(p)
    }

    /// An argument not given (as a C caller passes NULL): every accessor sees it so.
    pub fn absent() -> Out<T> {
        Out(std::ptr::null_mut())
    }

    /// The place the argument names; `what` names it in the error when it is null.
    pub fn place<'a>(&self, what: &str) -> Result<&'a mut T, Fail> {
        // SAFETY: null or valid for writes of a `T` by the caller's contract (see the
        // module doc); null is refused here.
        unsafe { self.0.as_mut() }.ok_or_else(|| Fail::new(MPI_ERR_ARG, format!("`{what}` is NULL")))
    }

    /// The address the caller passed, to compare with the standard's sentinels.
    pub fn addr(&self) -> usize {
        self.0 as usize
    }

    /// The place, if the argument was given (an optional output such as a status).
    pub fn given<'a>(&self) -> Option<&'a mut T> {
        // SAFETY: as in `place`.
        unsafe { self.0.as_mut() }
    }

    /// Element `i` of the array the argument points to (null stays null: an array
    /// that was not given).
    pub fn nth(&self, i: usize) -> Out<T> {
        match self.0.is_null() {
            true => *self,
            // Within the caller's array, by the contract of whoever asks for element `i`.
            false => Out(self.0.wrapping_add(i)),
        }
    }

    /// Writes `v` to the argument (an error naming it when it is null).
    pub fn set(&self, what: &str, v: T) -> Res {
        *self.place(what)? = v;
        Ok(())
    }

    /// Writes `v` if the argument was given (optional outputs such as a length).
    pub fn set_if_given(&self, v: T) {
        // SAFETY: as in `place`.
        if let Some(r) = unsafe { self.0.as_mut() } {
            *r = v;
        }
    }

    /// `n` elements to fill (null allowed when `n` is 0).
    pub fn slice<'a>(&self, n: usize, what: &str) -> Result<&'a mut [T], Fail> {
        if n == 0 {
            return Ok(&mut []);
        }
        if self.0.is_null() {
            return fail(
                MPI_ERR_ARG,
                format!("`{what}` is NULL but {n} elements are needed"),
            );
        }
        // SAFETY: non-null, and valid for the `n` elements the signature gives it by the
        // caller's contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.0, n) })
    }
}

impl Out<c_char> {
    /// Copies `s` into the caller's `cap`-byte string (truncated, NUL-terminated) and
    /// its length into `len` if given.
    pub fn put_str(&self, cap: usize, s: &str, len: &Out<c_int>) -> Res {
        let n = s.len().min(cap.saturating_sub(1));
        let d = self.slice(n + 1, "string buffer")?;
        for (to, from) in d.iter_mut().zip(&s.as_bytes()[..n]) {
            *to = *from as c_char;
        }
        d[n] = 0;
        len.set_if_given(n as c_int);
        Ok(())
    }
}

impl<T> In<T> {
    /// # Safety
    /// As [`Out::from_raw`], for reads.
    pub unsafe fn from_raw(p: *const T) -> In<T> {
        In(p, PhantomData)
    }

    /// The address the caller passed, to compare with the standard's sentinels
    /// (MPI_UNWEIGHTED, MPI_IN_PLACE, ...).
    pub fn addr(&self) -> usize {
        self.0 as usize
    }

    /// What the argument points to, if it was given.
    pub fn given<'a>(&self) -> Option<&'a T> {
        // SAFETY: null or valid for reads of a `T` by the caller's contract.
        unsafe { self.0.as_ref() }
    }

    /// `n` elements (null allowed when `n` is 0).
    pub fn slice<'a>(&self, n: usize, what: &str) -> Result<&'a [T], Fail> {
        if n == 0 {
            return Ok(&[]);
        }
        if self.0.is_null() {
            return fail(
                MPI_ERR_ARG,
                format!("`{what}` is NULL but {n} elements are needed"),
            );
        }
        // SAFETY: non-null and valid for the `n` elements the signature gives it by the
        // caller's contract.
        Ok(unsafe { std::slice::from_raw_parts(self.0, n) })
    }
}

impl In<c_char> {
    /// The NUL-terminated string the argument points to, as UTF-8.
    pub fn str<'a>(&self, what: &str) -> Result<&'a str, Fail> {
        if self.0.is_null() {
            return fail(MPI_ERR_ARG, format!("`{what}` is NULL"));
        }
        // SAFETY: non-null and NUL-terminated by the caller's contract.
        unsafe { CStr::from_ptr(self.0) }
            .to_str()
            .map_err(|_| Fail::new(MPI_ERR_ARG, format!("`{what}` is not UTF-8")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_arguments_are_errors_that_name_them_and_given_ones_are_written() {
        let mut x = 0;
        // SAFETY: a valid place, as a C caller would pass.
        let out = unsafe { Out::from_raw(&mut x as *mut c_int) };
        out.set("flag", 7).unwrap();
        assert_eq!(x, 7);
        // SAFETY: null is allowed.
        let null: Out<c_int> = unsafe { Out::from_raw(std::ptr::null_mut()) };
        let e = null.set("flag", 1).unwrap_err();
        assert_eq!((e.class, e.msg.as_str()), (MPI_ERR_ARG, "`flag` is NULL"));
        null.set_if_given(3);
        assert!(null.slice(0, "array").unwrap().is_empty());
        assert!(null.slice(2, "array").unwrap_err().msg.contains("2 elements"));

        let mut buf = [1 as c_char; 8];
        let mut len = -1;
        // SAFETY: valid places.
        let (s, l) = unsafe {
            (
                Out::from_raw(buf.as_mut_ptr()),
                Out::from_raw(&mut len as *mut c_int),
            )
        };
        s.put_str(4, "hello", &l).unwrap();
        assert_eq!(len, 3);
        assert_eq!(&buf[..4], &[b'h' as c_char, b'e' as c_char, b'l' as c_char, 0]);

        let text = c"name";
        // SAFETY: a NUL-terminated string.
        let name = unsafe { In::from_raw(text.as_ptr()) };
        assert_eq!(name.str("name").unwrap(), "name");
        // SAFETY: null is allowed.
        let none: In<c_char> = unsafe { In::from_raw(std::ptr::null()) };
        assert_eq!(none.str("name").unwrap_err().msg, "`name` is NULL");
    }
}
