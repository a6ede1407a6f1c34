//! Generalized requests (MPI_Grequest_start, MPI_Grequest_complete): an operation the
//! program carries out itself, finished through MPI's request functions. The program
//! says when it is complete; a wait or test then asks its `query_fn` for the status and
//! frees it with `free_fn`.
//!
//! pontoon gives up to MPI_THREAD_SERIALIZED, so no other thread can call
//! MPI_Grequest_complete while one waits: waiting for a generalized request that is not
//! complete would wait for ever, and fails at once instead, saying so.

use crate::abi::*;
use crate::boundary::fail;
use crate::callbacks::Opaque;
use crate::cargs::Out;
use crate::mpi_fn;
use crate::state::mpi;
use crate::state::ReqEntry;
use crate::state::{CancelFn, FreeFn, Generalized, QueryFn};

mpi_fn! {
    fn MPI_Grequest_start(query_fn: Option<QueryFn>, free_fn: Option<FreeFn>, cancel_fn: Option<CancelFn>, extra_state: Opaque, request: Out<MPI_Request>) {
        let m = mpi()?;
        let request = request.place("request")?;
        let entry = ReqEntry::Generalized(Generalized {
            query: query_fn,
            free: free_fn,
            cancel: cancel_fn,
            extra_state: extra_state.bits(),
            completed: false,
            freed: false,
        });
        crate::requests::start(m, request, entry)
    }
}

mpi_fn! {
    fn MPI_Grequest_complete(request: MPI_Request) {
        let m = mpi()?;
        let mut reqs = m.reqs.borrow_mut();
        match reqs.get_mut(request) {
            // Freed already: free_fn runs in whichever of the two calls comes last,
            // outside the table's borrow (it may call MPI).
            Some(ReqEntry::Generalized(g)) if g.freed => {
                let g = *g;
                reqs.remove(request);
                drop(reqs);
                g.free()
            }
            Some(ReqEntry::Generalized(g)) => {
                g.completed = true;
                Ok(())
            }
            Some(_) => fail(MPI_ERR_REQUEST, format!("{request:#x} is not a generalized request")),
            None => fail(MPI_ERR_REQUEST, format!("{request:#x} is not a request (completed or freed already?)")),
        }
    }
}
