//! `libmpi_abi.so.1`: the MPI-5.0 standard ABI over pontoon, so C programs (and
//! mpi4py) built against any standard-ABI `mpi.h` run on pontoon unmodified.
//!
//! Every `MPI_X` function is defined by [`mpi_fn!`], which exports it under both
//! `MPI_X` and `PMPI_X` (the profiling interface: a tool may define `MPI_X` and call
//! `PMPI_X`) and runs its body inside [`boundary::enter`]: panics are caught, errors
//! become MPI error codes and go through the communicator's error handler. A function
//! that is not defined here is not exported, so a program (or mpi4py's configure step)
//! sees it is missing instead of calling a stub.
//!
//! Handles are integers (the ABI's pointers to incomplete structs): predefined ones
//! have the standard's fixed values, created ones are table slots (`handles.rs`).
//! The library provides `MPI_THREAD_FUNNELED`: MPI is called from the thread that
//! initialized it.
#![allow(non_camel_case_types, non_snake_case, clippy::missing_safety_doc)]

pub mod abi;
mod boundary;
mod bsend;
mod colls;
mod comms;
mod darray;
mod env;
mod errors;
mod external32;
mod grequest;
mod handles;
mod info;
mod intercolls;
mod mprobe;
mod nbcolls;
mod neighbor;
mod p2p;
mod pcolls;
mod persistent;
mod requests;
mod state;
mod topo;
mod typeattr;
mod typeinfo;
mod types;
mod vcolls;

/// Defines `MPI_$name` and `PMPI_$name` with one body run inside the boundary.
/// `on comm` names the argument whose error handler reports the errors (default:
/// MPI_COMM_SELF's).
macro_rules! mpi_fn {
    ($(#[$m:meta])* fn $name:ident ($($arg:ident : $ty:ty),* $(,)?) $(on $on:ident)? $body:block) => {
        $(#[$m])*
        #[allow(non_snake_case, unused_imports)]
        pub mod $name {
            use super::*;
            #[export_name = concat!("P", stringify!($name))]
            pub unsafe extern "C" fn f($($arg: $ty),*) -> ::std::os::raw::c_int {
                #[allow(unused_mut, unused_assignments)]
                let mut on: usize = $crate::abi::MPI_COMM_SELF;
                $(on = $on as usize;)?
                $crate::boundary::enter(stringify!($name), on, || {
                    // SAFETY: the arguments come from a C caller, who must pass valid
                    // pointers as the MPI standard requires; every pointer is checked
                    // for null before use (boundary.rs helpers).
                    #[allow(unused_unsafe)]
                    unsafe { $body }
                })
            }
        }
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> ::std::os::raw::c_int {
            // SAFETY: the same contract as the function it forwards to.
            unsafe { $name::f($($arg),*) }
        }
    };
}
pub(crate) use mpi_fn;
