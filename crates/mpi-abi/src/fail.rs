//! A failed MPI call as Rust code sees it: the error class, what happened (and what to
//! do), and the communicator whose error handler reports it (`boundary::enter` raises
//! it).

use std::os::raw::c_int;

use crate::abi::*;

/// A failed call: the error class, what happened (and what to do), and optionally the
/// communicator whose error handler reports it.
#[derive(Debug)]
pub struct Fail {
    pub class: c_int,
    pub msg: String,
    pub on: Option<Handle>,
}

pub type Res = Result<(), Fail>;

impl Fail {
    pub fn new(class: c_int, msg: impl Into<String>) -> Fail {
        Fail {
            class,
            msg: msg.into(),
            on: None,
        }
    }

    /// Reports the failure on `comm`'s error handler.
    pub fn on(mut self, comm: Handle) -> Fail {
        self.on = Some(comm);
        self
    }
}

/// A failure with `class` and a message.
pub fn fail<T>(class: c_int, msg: impl Into<String>) -> Result<T, Fail> {
    Err(Fail::new(class, msg))
}

impl From<pontoon::Error> for Fail {
    fn from(e: pontoon::Error) -> Fail {
        let class = match &e {
            pontoon::Error::Truncated { .. } => MPI_ERR_TRUNCATE,
            pontoon::Error::Peer(_) => MPI_ERR_PROC_ABORTED,
            pontoon::Error::Arg(_) => MPI_ERR_ARG,
            pontoon::Error::Runtime(_) | pontoon::Error::Busy => MPI_ERR_OTHER,
            // Its own code, as the program's callback returned it (a class, or a code
            // the program added).
            pontoon::Error::Callback { code, .. } => *code,
        };
        Fail::new(class, e.to_string())
    }
}
