//! `pontoon-cxx`: `pontoon-cc` for C++.
#![forbid(unsafe_code)]

#[path = "../abi_paths.rs"]
mod abi_paths;
#[path = "../cc.rs"]
mod cc;

fn main() -> std::process::ExitCode {
    cc::main(cc::Lang {
        var: "PONTOON_CXX",
        default: "c++",
    })
}
