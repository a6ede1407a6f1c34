//! Shared by the integration tests of the `pontoon` binary.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use testbed::{PresetOptions, Testbed, Topology};

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

/// What `pontoon doctor --json` says of `transport` for one pair (its `refused` entry).
pub fn refusal<'a>(pair: &'a serde_json::Value, transport: &str) -> Option<&'a serde_json::Value> {
    pair["refused"]
        .as_array()
        .expect("every pair has a refused list")
        .iter()
        .find(|r| r["transport"] == transport)
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn is_root() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    eprintln!("skipped: testbed tests need root (network namespaces); run `make test` as root");
    false
}

/// A testbed that is always removed, however the test ends.
pub struct Bed {
    pub name: String,
}

impl Bed {
    pub fn unique_name() -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        format!("t{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
    }

    pub fn up(topo: &Topology) -> Bed {
        let bed = Bed {
            name: Self::unique_name(),
        };
        let opts = testbed::UpOptions::of_pontoon(&pontoon());
        testbed::up(&bed.name, topo, &opts).expect("testbed builds");
        bed
    }

    pub fn open(&self) -> Testbed {
        Testbed::open(Some(&self.name)).expect("testbed opens")
    }

    /// `pontoon run` launched on `host` inside the testbed, ranks placed from `hostfile`
    /// (written to the testbed's state directory, which `down` removes) and started
    /// through the testbed's agent; the caller adds `-n`, options and the program.
    pub fn run_inside(&self, host: &str, hostfile: &str) -> Command {
        let path = testbed::state_dir(&self.name).join("test-hostfile");
        std::fs::write(&path, hostfile).expect("hostfile written");
        let mut cmd = self.pontoon();
        cmd.args(["testbed", "exec", host, "--"])
            .arg(pontoon())
            .args(["run", "--timeout", "60", "--hostfile"])
            .arg(&path)
            .arg("--agent")
            .arg(testbed::agent_path(&self.name));
        cmd
    }

    pub fn pontoon(&self) -> Command {
        let mut cmd = Command::new(pontoon());
        cmd.env("PONTOON_TESTBED", &self.name);
        cmd
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Err(e) = testbed::down(&self.name) {
            eprintln!("tearing down {}: {e}", self.name);
        }
    }
}

pub fn preset(name: &str, opts: PresetOptions) -> Topology {
    testbed::preset(name, &opts).expect("preset")
}

/// `two-clusters` with one compute node per cluster: four hosts.
pub fn small_two_clusters() -> Topology {
    let opts = PresetOptions {
        nodes: Some(1),
        ..PresetOptions::default()
    };
    preset("two-clusters", opts)
}

/// `tests/c/NAME.c` built with `pontoon-cc` into a directory of this test process.
pub fn c_program(name: &str) -> std::path::PathBuf {
    // Tests of one binary run in parallel threads of one process and share this directory:
    // compile each program once, under a lock, and rename it into place, so that no test
    // executes a file the linker is still writing (execve fails "Permission denied").
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!("pontoon-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    if built.iter().any(|b| b == name) {
        return exe;
    }
    let partial = dir.join(format!("{name}.partial"));
    let cc = pontoon().with_file_name("pontoon-cc");
    let ok = std::process::Command::new(cc)
        .arg("-O2")
        .arg("-o")
        .arg(&partial)
        .arg(root.join(format!("tests/c/{name}.c")))
        .status()
        .expect("pontoon-cc runs")
        .success();
    assert!(ok, "{name} compiles");
    std::fs::rename(&partial, &exe).unwrap();
    built.push(name.to_string());
    exe
}

/// PyPI mpich's prefix, or `None` (with a message) when it is not installed.
pub fn mpich_abi() -> Option<PathBuf> {
    let dir = std::env::var_os("PONTOON_MPICH_ABI")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".local/share/pontoon/mpich-abi")
        });
    if dir.join("include/mpi_abi.h").exists() && dir.join("bin/mpicc_abi").exists() {
        return Some(dir);
    }
    let why = format!(
        "PyPI mpich is not installed in {} (scripts/install-deps.sh installs it)",
        dir.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{why}");
    eprintln!("skipped: {why}");
    None
}
