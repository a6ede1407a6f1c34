//! The program's own operation behind a generalized request's handle (its callbacks and
//! their state), kept in the request table.

use std::os::raw::c_int;

use crate::abi::*;
use crate::callbacks;
use crate::fail::{fail, Fail, Res};
use crate::statuses::empty_status;

pub use crate::callbacks::{CancelFn, FreeFn, QueryFn};

/// The program's operation behind a request handle.
#[derive(Clone, Copy)]
pub struct Generalized {
    pub query: Option<QueryFn>,
    pub free: Option<FreeFn>,
    pub cancel: Option<CancelFn>,
    /// The program's `extra_state`, handed back to each callback.
    pub extra_state: usize,
    /// MPI_Grequest_complete was called.
    pub completed: bool,
    /// MPI_Request_free was called before it completed: MPI_Grequest_complete frees it.
    pub freed: bool,
}

impl Generalized {
    /// The status `query_fn` gives, and its error.
    pub fn query(&self) -> (MPI_Status, Res) {
        let mut st = empty_status();
        let Some(query) = self.query else {
            return (st, Ok(()));
        };
        let code = callbacks::run_query(query, self.extra_state, &mut st);
        (st, callback_result(code, "query_fn"))
    }

    /// Completes it (it is complete): its status, then `free_fn`.
    pub fn finish(self) -> (MPI_Status, Res) {
        let (mut st, queried) = self.query();
        let freed = self.free();
        let res = queried.and(freed);
        if let Err(f) = &res {
            st.MPI_ERROR = f.class;
        }
        (st, res)
    }

    /// Runs `free_fn`.
    pub fn free(self) -> Res {
        let Some(free) = self.free else { return Ok(()) };
        callback_result(callbacks::run_free(free, self.extra_state), "free_fn")
    }

    /// MPI_Cancel: the program's `cancel_fn` decides.
    pub fn cancel(&self) -> Res {
        let Some(cancel) = self.cancel else { return Ok(()) };
        callback_result(
            callbacks::run_cancel(cancel, self.extra_state, self.completed),
            "cancel_fn",
        )
    }
}

pub fn callback_result(code: c_int, which: &str) -> Res {
    if code == MPI_SUCCESS {
        return Ok(());
    }
    fail(
        code,
        format!("the generalized request's {which} returned error {code}"),
    )
}

/// Why a wait for `h` fails instead of blocking.
pub fn never_completed(h: MPI_Request) -> Fail {
    Fail::new(
        MPI_ERR_REQUEST,
        format!(
            "waiting for generalized request {h:#x}, which MPI_Grequest_complete has not completed: \
             below MPI_THREAD_MULTIPLE no other thread can complete it meanwhile, so the wait would never end"
        ),
    )
}
