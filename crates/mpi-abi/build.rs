// The soname the standard ABI fixes: programs built against any standard-ABI MPI
// record `libmpi_abi.so.1` and find ours at run time.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi_abi.so.1");
}
