//! Shared by the integration tests of the `pontoon` binary.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

pub fn pontoon() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_pontoon"))
}

/// An example program built next to the `pontoon` binary (`cargo build --examples`).
pub fn example(name: &str) -> PathBuf {
    let p = pontoon()
        .parent()
        .expect("target dir")
        .join("examples")
        .join(name);
    if !p.exists() {
        let profile = if pontoon().to_string_lossy().contains("/release/") {
            vec!["--release"]
        } else {
            vec![]
        };
        let ok = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "pontoon", "--examples"])
            .args(profile)
            .status()
            .expect("cargo runs");
        assert!(ok.success(), "building the examples failed");
    }
    p
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
