//! Where the C library (`libmpi_abi.so.1`) and `mpi.h` are, for `pontoon-cc` and for
//! `pontoon run` (which puts the library first on the ranks' `LD_LIBRARY_PATH`, so a
//! binary built by any standard-ABI toolchain loads pontoon's).
//!
//! Looked up, in order: `$PONTOON_PREFIX/{include,lib}`; an installed prefix around the
//! executable (`bin/../include`, `bin/../lib`); a cargo build of the repository
//! (`target/<profile>/` holds the library, the repository's `include/` the header).

use std::path::{Path, PathBuf};

pub const SONAME: &str = "libmpi_abi.so.1";
const LINK_NAME: &str = "libmpi_abi.so";

/// The include and library directories.
pub struct AbiPaths {
    pub include: PathBuf,
    pub lib: PathBuf,
}

fn has_lib(dir: &Path) -> bool {
    dir.join(SONAME).exists() || dir.join(LINK_NAME).exists()
}

fn candidates() -> Vec<(PathBuf, PathBuf)> {
    let mut c = Vec::new();
    if let Some(p) = std::env::var_os("PONTOON_PREFIX") {
        let p = PathBuf::from(p);
        c.push((p.join("include"), p.join("lib")));
    }
    if let Some(bin) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        c.push((bin.join("../include"), bin.join("../lib")));
        // target/<profile>/pontoon → the repository root is two levels up.
        c.push((bin.join("../../include"), bin.clone()));
        // target/<profile>/deps/… (test binaries).
        if let Some(profile) = bin.parent() {
            c.push((bin.join("../../../include"), profile.to_path_buf()));
        }
    }
    c
}

impl AbiPaths {
    /// Finds the header and the library, making sure the library answers to its
    /// soname (a cargo build makes only `libmpi_abi.so`).
    pub fn find() -> Result<AbiPaths, String> {
        let tried = candidates();
        for (include, lib) in &tried {
            if include.join("mpi.h").exists() && has_lib(lib) {
                let (include, lib) = (canonical(include), canonical(lib));
                ensure_soname(&lib)?;
                return Ok(AbiPaths { include, lib });
            }
        }
        let list: Vec<String> = tried
            .iter()
            .map(|(i, l)| format!("{}/mpi.h with {}/{SONAME}", i.display(), l.display()))
            .collect();
        Err(format!(
            "cannot find pontoon's mpi.h and {SONAME} (looked for {}); build them with \
             `cargo build --release --workspace` or set PONTOON_PREFIX to an install prefix",
            list.join(", ")
        ))
    }
}

fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

fn ensure_soname(lib: &Path) -> Result<(), String> {
    let so = lib.join(SONAME);
    if so.exists() {
        return Ok(());
    }
    // A concurrent caller may have made it meanwhile; that is fine too.
    match std::os::unix::fs::symlink(LINK_NAME, &so) {
        Ok(()) => Ok(()),
        Err(_) if so.exists() => Ok(()),
        Err(e) => Err(format!("cannot create {} -> {LINK_NAME}: {e}", so.display())),
    }
}
