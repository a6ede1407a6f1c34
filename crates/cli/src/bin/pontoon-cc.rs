//! `pontoon-cc`: compiles and links C programs against pontoon's standard-ABI MPI,
//! like `mpicc`. `pontoon-cxx` is the same for C++.
#![forbid(unsafe_code)]

#[path = "../abi_paths.rs"]
mod abi_paths;
#[path = "../cc.rs"]
mod cc;

fn main() -> std::process::ExitCode {
    cc::main(cc::Lang {
        var: "PONTOON_CC",
        default: "cc",
    })
}
