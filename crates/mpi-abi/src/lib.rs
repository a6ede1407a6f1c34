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
//! The library provides up to `MPI_THREAD_SERIALIZED`: MPI is called from the thread
//! that initialized it, or at that level from any thread, one at a time.
#![allow(non_camel_case_types, non_snake_case, clippy::missing_safety_doc)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod abi;
mod args;
mod boundary;
mod bsend;
mod buffers;
mod callbacks;
mod cargs;
mod collargs;
mod colls;
mod comms;
mod darray;
mod env;
mod errors;
mod external32;
mod fail;
mod grequest;
mod handles;
mod immediate;
mod info;
mod intercolls;
mod mprobe;
mod nbcolls;
mod neighbor;
mod p2p;
mod pcolls;
mod persistent;
mod process_wide;
mod requests;
mod started;
mod state;
mod statuses;
mod topo;
mod typeattr;
mod typeinfo;
mod types;
mod vcollargs;
mod vcolls;

/// Defines `MPI_$name` and `PMPI_$name` with one body run inside the boundary, in a
/// module `$name` (whose `f` is the function). `on comm` names the argument whose error
/// handler reports the errors (default: MPI_COMM_SELF's).
///
/// The body is safe code: pointer arguments are typed (`cargs::Out`, `cargs::In`,
/// `buffers::SendBuf`/`RecvBuf`, `callbacks::*`), and their accessors are where the C
/// caller's contract is relied on. The body is also `body`, a Rust function of the typed
/// arguments (the persistent collectives start the non-blocking ones through it).
macro_rules! mpi_fn {
    ($(#[$m:meta])* fn $name:ident ($($arg:ident : $ty:ty),* $(,)?) $(on $on:ident)? $body:block) => {
        $crate::mpi_fn!(@make enter {} $(#[$m])* fn $name ($($arg : $ty),*) $(on $on)? $body);
    };
    // A function the standard lets any thread call at any time (MPI_Initialized, ...):
    // it takes no turn at MPI_THREAD_SERIALIZED, and must not use the library's tables.
    ($(#[$m:meta])* any thread fn $name:ident ($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $crate::mpi_fn!(@make enter_any_thread {} $(#[$m])* fn $name ($($arg : $ty),*) $body);
    };
    // `$enter`: the boundary's door; `$pre`: items the signature and body see (the
    // aliases of `mpi_fn_c!`).
    (@make $enter:ident { $($pre:item)* } $(#[$m:meta])* fn $name:ident ($($arg:ident : $ty:ty),*) $(on $on:ident)? $body:block) => {
        $(#[$m])*
        #[allow(non_snake_case, unused_imports)]
        pub mod $name {
            use super::*;
            $($pre)*
            #[allow(dead_code, unused_variables, clippy::too_many_arguments)]
            #[inline(always)]
            pub fn body($($arg: $ty),*) -> $crate::boundary::Res $body
            #[export_name = concat!("P", stringify!($name))]
            pub extern "C" fn f($($arg: $ty),*) -> ::std::os::raw::c_int {
                #[allow(unused_mut, unused_assignments)]
                let mut on: usize = $crate::abi::MPI_COMM_SELF;
                $(on = $on as usize;)?
                $crate::boundary::$enter(stringify!($name), on, || body($($arg),*))
            }
            #[export_name = stringify!($name)]
            pub extern "C" fn exported($($arg: $ty),*) -> ::std::os::raw::c_int {
                f($($arg),*)
            }
        }
    };
}
pub(crate) use mpi_fn;

/// Defines a function and its MPI-4 large-count twin (`MPI_X | MPI_X_c`) from one body,
/// as [`mpi_fn!`] does each. In the argument types `Count` is `int`
/// in the first and `MPI_Count` in the second, `Displ` is `int` and `MPI_Aint`, and
/// `AintCount` is `MPI_Aint` and `MPI_Count`; `LARGE` says which form runs. Bodies widen
/// with [`boundary::Wide::wide`] and fit results with [`boundary::fit`], so the large
/// forms really carry large counts. `MPI_X | MPI_X_c | MPI_X_x` adds the MPI-3 `_x`
/// form, whose counts are `MPI_Count` as in the large-count one.
macro_rules! mpi_fn_c {
    // With a third name: the MPI-3 `_x` form too, the same as the large-count one.
    ($(#[$m:meta])* fn $name:ident | $cname:ident | $xname:ident ($($arg:ident : $ty:ty),* $(,)?) $(on $on:ident)? $body:block) => {
        $crate::mpi_fn_c!($(#[$m])* fn $name | $cname ($($arg : $ty),*) $(on $on)? $body);
        $crate::mpi_fn_c!(@one [$crate::abi::MPI_Count, $crate::abi::MPI_Aint, $crate::abi::MPI_Count]
            $(#[$m])* fn $xname ($($arg : $ty),*) $(on $on)? $body);
    };
    ($(#[$m:meta])* fn $name:ident | $cname:ident ($($arg:ident : $ty:ty),* $(,)?) $(on $on:ident)? $body:block) => {
        $crate::mpi_fn_c!(@one [::std::os::raw::c_int, ::std::os::raw::c_int, $crate::abi::MPI_Aint]
            $(#[$m])* fn $name ($($arg : $ty),*) $(on $on)? $body);
        $crate::mpi_fn_c!(@one [$crate::abi::MPI_Count, $crate::abi::MPI_Aint, $crate::abi::MPI_Count]
            $(#[$m])* fn $cname ($($arg : $ty),*) $(on $on)? $body);
    };
    (@one [$count:ty, $displ:ty, $aint:ty] $(#[$m:meta])* fn $name:ident ($($arg:ident : $ty:ty),*) $(on $on:ident)? $body:block) => {
        $crate::mpi_fn!(@make enter {
            #[allow(unused_imports)]
            use $crate::boundary::Wide;
            #[allow(dead_code)]
            type Count = $count;
            #[allow(dead_code)]
            type Displ = $displ;
            #[allow(dead_code)]
            type AintCount = $aint;
            #[allow(dead_code)]
            const LARGE: bool = ::std::mem::size_of::<$count>() == 8;
        } $(#[$m])* fn $name ($($arg : $ty),*) $(on $on)? $body);
    };
}
pub(crate) use mpi_fn_c;
