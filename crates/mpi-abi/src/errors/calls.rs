//! The error functions of the C API: classes, codes and strings, error handlers.

use std::ffi::c_char;
use std::os::raw::c_int;

use super::*;
use crate::cargs::{In, Out};
use crate::fail::fail;
use crate::mpi_fn;
use crate::state::{mpi, ErrhandlerFn};

mpi_fn! {
    fn MPI_Error_class(errorcode: c_int, errorclass: Out<c_int>) {
        errorclass.set("errorclass", class_of(errorcode))
    }
}

mpi_fn! {
    fn MPI_Error_string(errorcode: c_int, string: Out<c_char>, resultlen: Out<c_int>) {
        string.put_str(MPI_MAX_ERROR_STRING, &text_of(errorcode), &resultlen)
    }
}

mpi_fn! {
    fn MPI_Comm_set_errhandler(comm: MPI_Comm, errhandler: MPI_Errhandler) on comm {
        let m = mpi()?;
        errhandler_ok(m, errhandler)?;
        m.set_comm_errhandler(comm, errhandler)
    }
}

mpi_fn! {
    fn MPI_Comm_get_errhandler(comm: MPI_Comm, errhandler: Out<MPI_Errhandler>) on comm {
        let m = mpi()?;
        let h = m
            .comm_errhandler(comm)
            .ok_or_else(|| Fail::new(MPI_ERR_COMM, format!("{comm:#x} is not a communicator")))?;
        errhandler.set("errhandler", h)
    }
}

mpi_fn! {
    fn MPI_Comm_create_errhandler(function: Option<ErrhandlerFn>, errhandler: Out<MPI_Errhandler>) {
        let m = mpi()?;
        let Some(f) = function else {
            return fail(MPI_ERR_ARG, "the error handler function is NULL");
        };
        let h = m
            .errhandlers
            .borrow_mut()
            .insert(f)
            .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many error handlers"))?;
        errhandler.set("errhandler", h)
    }
}

mpi_fn! {
    fn MPI_Errhandler_free(errhandler: Out<MPI_Errhandler>) {
        let m = mpi()?;
        let h = errhandler.place("errhandler")?;
        errhandler_ok(m, *h)?;
        // A handler still set on a communicator keeps working: entries are only
        // dropped for created handlers nobody can name any more; keeping it is simplest.
        *h = MPI_ERRHANDLER_NULL;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Comm_call_errhandler(comm: MPI_Comm, errorcode: c_int) on comm {
        let m = mpi()?;
        m.comm(comm)?;
        // The handler runs on the program's own code; the call itself succeeds (unless
        // the handler aborts).
        let text = format!("MPI_Comm_call_errhandler: {}", text_of(errorcode));
        raise_code(comm, class_of(errorcode), errorcode, text);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_keep_their_message_and_class() {
        let code = remember(
            MPI_ERR_RANK,
            "MPI_Send: rank 9 is not in this communicator".into(),
        );
        assert_eq!(class_of(code), MPI_ERR_RANK);
        assert!(text_of(code).contains("rank 9"));
        assert_eq!(class_of(MPI_ERR_TAG), MPI_ERR_TAG);
        assert_eq!(text_of(MPI_ERR_TRUNCATE), "message truncated");
        for _ in 0..DETAILS {
            remember(MPI_ERR_OTHER, "later".into());
        }
        assert_eq!(
            class_of(code),
            MPI_ERR_RANK,
            "an overwritten code keeps its class"
        );
    }

    #[test]
    fn an_added_code_has_no_string_until_it_gets_one() {
        let (class, code) = USER.with(|u| {
            let mut u = u.borrow_mut();
            u.classes.push(USER_CLASS_BASE);
            u.codes.insert(USER_CODE_BASE, USER_CLASS_BASE);
            u.codes.insert(USER_CODE_BASE + 1, MPI_ERR_OTHER);
            u.strings.insert(USER_CLASS_BASE, "the class".into());
            (USER_CLASS_BASE, USER_CODE_BASE)
        });
        assert_eq!(text_of(class), "the class");
        assert_eq!(text_of(code), "", "not its class's string");
        assert_eq!(text_of(code + 1), "", "not a predefined class's text either");
        USER.with(|u| u.borrow_mut().strings.insert(code, "the code".into()));
        assert_eq!(text_of(code), "the code");
    }
}

mpi_fn! {
    fn MPI_Add_error_class(errorclass: Out<c_int>) {
        mpi()?;
        let out_class = errorclass.place("errorclass")?;
        let class = USER.with(|u| {
            let mut u = u.borrow_mut();
            let next = u.classes.iter().copied().max().map_or(USER_CLASS_BASE, |c| c + 1);
            if next >= USER_CODE_BASE {
                return fail(MPI_ERR_OTHER, "no error classes left");
            }
            u.classes.push(next);
            Ok(next)
        })?;
        *out_class = class;
        Ok(())
    }
}

fn class_known(class: c_int) -> bool {
    (0..=MPI_ERR_LASTCLASS).contains(&class) || USER.with(|u| u.borrow().classes.contains(&class))
}

mpi_fn! {
    fn MPI_Add_error_code(errorclass: c_int, errorcode: Out<c_int>) {
        mpi()?;
        if !class_known(errorclass) {
            return fail(MPI_ERR_ARG, format!("{errorclass} is not an error class"));
        }
        let out_code = errorcode.place("errorcode")?;
        let code = USER.with(|u| {
            let mut u = u.borrow_mut();
            let code = u.codes.keys().next_back().map_or(USER_CODE_BASE, |c| c + 1);
            u.codes.insert(code, errorclass);
            code
        });
        *out_code = code;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Add_error_string(errorcode: c_int, string: In<c_char>) {
        mpi()?;
        let text = string.str("string")?;
        let user_made = USER.with(|u| {
            let u = u.borrow();
            u.classes.contains(&errorcode) || u.codes.contains_key(&errorcode)
        });
        if !user_made {
            return fail(MPI_ERR_ARG, format!("{errorcode} is not an error class or code the program added"));
        }
        USER.with(|u| u.borrow_mut().strings.insert(errorcode, text.to_string()));
        Ok(())
    }
}

mpi_fn! {
    /// MPI-4.1: only a class the program added, once its codes and string are removed.
    fn MPI_Remove_error_class(errorclass: c_int) {
        mpi()?;
        USER.with(|u| {
            let mut u = u.borrow_mut();
            let Some(at) = u.classes.iter().position(|c| *c == errorclass) else {
                return fail(MPI_ERR_ARG, format!("{errorclass} is not an error class the program added"));
            };
            let codes = u.codes.iter().filter(|(_, class)| **class == errorclass).count();
            if codes > 0 {
                return fail(MPI_ERR_ARG, format!("error class {errorclass} still has {codes} codes: remove them first"));
            }
            if u.strings.contains_key(&errorclass) {
                return fail(MPI_ERR_ARG, format!("error class {errorclass} still has a string: remove it first"));
            }
            u.classes.remove(at);
            Ok(())
        })
    }
}

mpi_fn! {
    /// MPI-4.1: only a code the program added, once its string is removed.
    fn MPI_Remove_error_code(errorcode: c_int) {
        mpi()?;
        USER.with(|u| {
            let mut u = u.borrow_mut();
            if !u.codes.contains_key(&errorcode) {
                return fail(MPI_ERR_ARG, format!("{errorcode} is not an error code the program added"));
            }
            if u.strings.contains_key(&errorcode) {
                return fail(MPI_ERR_ARG, format!("error code {errorcode} still has a string: remove it first"));
            }
            u.codes.remove(&errorcode);
            Ok(())
        })
    }
}

mpi_fn! {
    /// MPI-4.1: the string of a class or code the program added.
    fn MPI_Remove_error_string(errorcode: c_int) {
        mpi()?;
        USER.with(|u| {
            let mut u = u.borrow_mut();
            if !u.classes.contains(&errorcode) && !u.codes.contains_key(&errorcode) {
                return fail(MPI_ERR_ARG, format!("{errorcode} is not an error class or code the program added"));
            }
            u.strings.remove(&errorcode);
            Ok(())
        })
    }
}
