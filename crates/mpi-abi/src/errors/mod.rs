//! Error codes, classes, strings and handlers.
//!
//! A failure gets an error code of its own that remembers the whole message (which
//! rank, which addresses, what to do), so MPI_Error_string can tell the program what
//! happened, not just the class. The last `DETAILS` messages are kept; an older code
//! still maps to its class.

use std::os::raw::c_int;

use crate::abi::*;
use crate::fail::{fail, Fail};
use crate::process_wide::ProcessWide;
use crate::state::try_mpi;

mod calls;

/// Codes with a message are `DETAIL_BASE + slot * 128 + class`.
const DETAIL_BASE: c_int = 0x1_0000;
const DETAILS: usize = 256;

static DETAIL: ProcessWide<(Vec<String>, usize)> = ProcessWide::new(|| (vec![String::new(); DETAILS], 0));

fn remember(class: c_int, msg: String) -> c_int {
    if !(0..128).contains(&class) {
        return class;
    }
    DETAIL.with(|d| {
        let mut d = d.borrow_mut();
        let slot = d.1 % DETAILS;
        d.0[slot] = msg;
        d.1 += 1;
        DETAIL_BASE + slot as c_int * 128 + class
    })
}

/// Error classes and codes the program added (MPI_Add_error_class/code): classes from
/// `USER_CLASS_BASE` (above MPI_ERR_LASTCODE, as mpi4py expects), codes from
/// `USER_CODE_BASE`, each mapped to its class; strings the program set, by code.
#[derive(Default)]
struct UserErrors {
    classes: Vec<c_int>,
    codes: std::collections::BTreeMap<c_int, c_int>,
    strings: std::collections::HashMap<c_int, String>,
}

const USER_CLASS_BASE: c_int = MPI_ERR_LASTCODE + 1;
const USER_CODE_BASE: c_int = 0x8000;

static USER: ProcessWide<UserErrors> = ProcessWide::new(UserErrors::default);

/// The largest error code or class in use (the MPI_LASTUSEDCODE attribute).
pub fn last_used_code() -> c_int {
    USER.with(|u| {
        let u = u.borrow();
        let class = u.classes.iter().copied().max().unwrap_or(MPI_ERR_LASTCODE);
        u.codes.keys().next_back().copied().unwrap_or(0).max(class)
    })
}

/// The class of an error code (codes below `DETAIL_BASE` are classes).
pub fn class_of(code: c_int) -> c_int {
    if code >= DETAIL_BASE {
        (code - DETAIL_BASE) % 128
    } else if (USER_CODE_BASE..DETAIL_BASE).contains(&code) {
        USER.with(|u| u.borrow().codes.get(&code).copied().unwrap_or(MPI_ERR_UNKNOWN))
    } else {
        code
    }
}

fn class_text(class: c_int) -> &'static str {
    match class {
        MPI_SUCCESS => "no error",
        MPI_ERR_BUFFER => "invalid buffer pointer",
        MPI_ERR_COUNT => "invalid count argument",
        MPI_ERR_TYPE => "invalid datatype",
        MPI_ERR_TAG => "invalid tag",
        MPI_ERR_COMM => "invalid communicator",
        MPI_ERR_RANK => "invalid rank",
        MPI_ERR_REQUEST => "invalid request",
        MPI_ERR_ROOT => "invalid root",
        MPI_ERR_GROUP => "invalid group",
        MPI_ERR_OP => "invalid operation",
        MPI_ERR_TOPOLOGY => "invalid topology",
        MPI_ERR_DIMS => "invalid dimension argument",
        MPI_ERR_ARG => "invalid argument",
        MPI_ERR_UNKNOWN => "unknown error",
        MPI_ERR_TRUNCATE => "message truncated",
        MPI_ERR_OTHER => "other error",
        MPI_ERR_INTERN => "internal error",
        MPI_ERR_IN_STATUS => "error code is in status",
        MPI_ERR_KEYVAL => "invalid keyval",
        MPI_ERR_NO_MEM => "out of memory",
        MPI_ERR_PROC_ABORTED => "a process failed or aborted",
        MPI_ERR_VALUE_TOO_LARGE => "a result too large for the argument of this form (call its _c form)",
        MPI_ERR_ERRHANDLER => "invalid error handler",
        _ => "error",
    }
}

/// The message of an error code: its own if it still has one, else its class's. A class
/// or code the program added has only the string it set: "" until then, as the standard
/// says of MPI_Add_error_string.
pub fn text_of(code: c_int) -> String {
    if let Some(s) = USER.with(|u| u.borrow().strings.get(&code).cloned()) {
        return s;
    }
    let class = class_of(code);
    if class >= USER_CLASS_BASE || (USER_CODE_BASE..DETAIL_BASE).contains(&code) {
        return String::new();
    }
    if code >= DETAIL_BASE {
        let slot = ((code - DETAIL_BASE) / 128) as usize;
        if let Some(m) = DETAIL.with(|d| d.borrow().0.get(slot).cloned()) {
            return m;
        }
    }
    class_text(class).to_string()
}

/// A failure while another thread is inside the library (at MPI_THREAD_SERIALIZED): no
/// error handler can run (it would use the library's state beside that thread), so the
/// code is returned and the first such message goes to stderr.
#[cold]
pub fn report_without_handler(name: &str, class: c_int, why: String) -> c_int {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let text = format!("{name}: {why}");
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!("pontoon: {text} (said once; the calls get the error code)");
    }
    remember(class, text)
}

/// Reports a failure of `MPI_<name>` through `comm`'s error handler; returns the code.
pub fn raise(name: &str, comm: Handle, f: Fail) -> c_int {
    let text = format!("{name}: {}", f.msg);
    let code = remember(f.class, text.clone());
    raise_code(comm, f.class, code, text)
}

/// Runs `comm`'s error handler on `code` (of `class`, described by `text`).
fn raise_code(comm: Handle, class: c_int, code: c_int, text: String) -> c_int {
    let Some(m) = try_mpi() else {
        eprintln!("pontoon: {text}");
        // Before MPI_Init (or after it failed) and after MPI_Finalize, errors go to the
        // initial error handler (MPI-4), MPI_ERRORS_ARE_FATAL as in MPICH and Open MPI:
        // a program that goes on without checking, as most do, would run on without MPI
        // (a rank whose MPI_Init failed looped over failing sends until killed).
        if matches!(crate::state::phase(), crate::state::BEFORE | crate::state::AFTER) {
            std::process::exit(class.clamp(1, 255));
        }
        return code;
    };
    let handler = m
        .comm_errhandler(comm)
        .or_else(|| m.comm_errhandler(MPI_COMM_SELF))
        .unwrap_or(MPI_ERRORS_ARE_FATAL);
    match handler {
        MPI_ERRORS_RETURN => code,
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT => {
            // The launcher prints it, once for the job (the first rank to abort).
            let rank = m.u.world().rank();
            m.u.abort(class.max(1), &format!("rank {rank}: {text}"))
        }
        user => {
            let f = m.errhandlers.borrow().get(user).copied();
            if let Some(f) = f {
                crate::callbacks::run_errhandler(f, comm, code);
            }
            code
        }
    }
}

pub fn errhandler_ok(m: &crate::state::Mpi, h: Handle) -> Result<(), Fail> {
    let predefined = matches!(h, MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT | MPI_ERRORS_RETURN);
    if predefined || m.errhandlers.borrow().get(h).is_some() {
        Ok(())
    } else {
        fail(MPI_ERR_ERRHANDLER, format!("{h:#x} is not an error handler"))
    }
}
