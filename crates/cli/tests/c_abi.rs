//! The MPI standard ABI (`libmpi_abi.so.1`, `include/mpi.h`, `pontoon-cc`): C programs
//! under `pontoon run`, a binary built by PyPI mpich's `mpicc_abi` on both MPICH and
//! pontoon, every constant and size of `mpi.h` against the reference header, and the
//! library's exports against the prototypes of `mpi.h`.
//!
//! The reference is PyPI's `mpich` in `$PONTOON_MPICH_ABI` (default
//! `~/.local/share/pontoon/mpich-abi`, where `scripts/install-deps.sh` puts it). Without
//! it the tests that need it skip with a message, except under CI, where they fail.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{is_root, mpich_abi as reference, pontoon, small_two_clusters, text, Bed};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pontoon_cc() -> PathBuf {
    let cc = PathBuf::from(env!("CARGO_BIN_EXE_pontoon-cc"));
    // The library is a workspace member nothing else depends on: build it if missing.
    let dir = cc.parent().expect("target dir");
    if !dir.join("libmpi_abi.so").exists() {
        // target/<dir>: the profile's directory (`debug` is the `dev` profile's).
        let profile = match dir.file_name().and_then(|d| d.to_str()) {
            Some("debug") | None => "dev",
            Some(other) => other,
        };
        let ok = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "pontoon-mpi-abi", "--profile", profile])
            .status()
            .expect("cargo runs");
        assert!(ok.success(), "building libmpi_abi.so failed");
    }
    cc
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pontoon-c-abi-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn compile(cc: &Path, src: &Path, out: &Path, extra: &[&str]) {
    let o = Command::new(cc)
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(out)
        .arg(src)
        .args(extra)
        .output()
        .expect("the compiler runs");
    assert!(
        o.status.success(),
        "{} {} failed:\n{}{}",
        cc.display(),
        src.display(),
        text(&o.stdout),
        text(&o.stderr)
    );
}

fn run_job(n: u32, prog: &Path, args: &[&str]) -> String {
    run_job_with(n, &[], prog, args)
}

/// [`run_job`] with `VAR=VALUE` settings for the ranks (`pontoon run -x`).
fn run_job_with(n: u32, settings: &[&str], prog: &Path, args: &[&str]) -> String {
    let out = Command::new(pontoon())
        .args(["run", "-n", &n.to_string(), "--timeout", "120"])
        .args(settings.iter().flat_map(|s| ["-x", s]))
        .arg(prog)
        .args(args)
        .output()
        .expect("pontoon runs");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{} on {n} ranks failed\nstdout: {stdout}\nstderr: {}",
        prog.display(),
        text(&out.stderr)
    );
    stdout
}

#[test]
fn c_programs_pass_under_pontoon_run() {
    let cc = pontoon_cc();
    let dir = scratch("programs");
    for (name, sizes) in [
        ("p2p", &[2, 3, 5][..]),
        ("coll", &[1, 2, 3, 5, 8]),
        ("comm", &[1, 2, 5]),
        ("nbc", &[1, 2, 3, 5]),
        ("nbc_mix", &[1, 4, 5, 10]),
        ("conform", &[1, 2, 3]),
        ("topo", &[1, 2, 4, 6]),
        ("pcoll", &[1, 2, 3, 5]),
        ("types", &[1, 2]),
        ("type_extras", &[1, 2]),
        ("grequest", &[1, 3]),
        ("inter", &[1, 2, 3, 5]),
        ("intercoll", &[1, 2, 3, 4, 5]),
        ("large_count", &[1, 2, 3]),
        ("idup", &[1, 2, 3, 5]),
        ("completion", &[1, 2, 3, 4]),
        ("reenter", &[1, 2, 3]),
        ("cancel", &[1, 2, 3]),
        ("threads_serialized", &[1, 2, 3]),
        ("threads_multiple", &[1, 2, 3, 5]),
    ] {
        let exe = dir.join(name);
        compile(&cc, &repo().join(format!("tests/c/{name}.c")), &exe, &[]);
        for &n in sizes {
            let out = run_job(n, &exe, &[]);
            assert!(
                out.contains(&format!("{name} OK on {n} ranks")),
                "{name} -n {n}: {out}"
            );
        }
    }
    // One message of more than 2^31 elements (the program skips it, saying so, when the
    // machine lacks the memory).
    let out = run_job(2, &dir.join("large_count"), &["huge"]);
    assert!(out.contains("large_count OK on 2 ranks"), "{out}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A progress thread (`PONTOON_ASYNC_PROGRESS=on`) moves a rendezvous while its sender
/// makes no MPI call, over TCP and shared memory; without one the transfer waits for the
/// sender's next call. The C programs pass with it, at every thread level.
#[test]
fn a_progress_thread_moves_transfers_while_the_application_is_away() {
    let cc = pontoon_cc();
    let dir = scratch("progress-thread");
    let exe = dir.join("async_progress");
    compile(&cc, &repo().join("tests/c/async_progress.c"), &exe, &[]);
    let flag = dir.join("received");
    let flag_arg = flag.to_str().expect("a UTF-8 path");
    for transports in ["PONTOON_TRANSPORTS=tcp", "PONTOON_TRANSPORTS=shm,tcp"] {
        for (progress, wait_s, expected) in [("on", "60", "progressed"), ("off", "2", "did not progress")] {
            let _ = std::fs::remove_file(&flag);
            let setting = format!("PONTOON_ASYNC_PROGRESS={progress}");
            let out = run_job_with(2, &[transports, &setting], &exe, &[flag_arg, wait_s]);
            assert!(
                out.lines().any(|l| l == expected) && out.contains("async_progress OK on 2 ranks"),
                "{transports} {setting}: {out}"
            );
        }
    }
    for (name, sizes) in [
        ("p2p", &[2, 3][..]),
        ("nbc", &[2, 3]),
        ("coll", &[1, 3]),
        ("threads_serialized", &[2]),
        ("threads_multiple", &[2, 3]),
    ] {
        let exe = dir.join(name);
        compile(&cc, &repo().join(format!("tests/c/{name}.c")), &exe, &[]);
        for &n in sizes {
            let out = run_job_with(n, &["PONTOON_ASYNC_PROGRESS=on"], &exe, &[]);
            assert!(
                out.contains(&format!("{name} OK on {n} ranks")),
                "{name} -n {n}: {out}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// An MPI call outside MPI_Init..MPI_Finalize goes to the initial error handler,
/// MPI_ERRORS_ARE_FATAL: the process ends, as under MPICH and Open MPI. (It printed the
/// error and went on: a rank whose MPI_Init failed then looped over failing sends.)
#[test]
fn an_mpi_call_outside_init_and_finalize_ends_the_process() {
    let cc = pontoon_cc();
    let dir = scratch("outside");
    let src = dir.join("outside.c");
    std::fs::write(
        &src,
        r#"#include <mpi.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    int rank = -1;
    if (argc > 1 && strcmp(argv[1], "after") == 0) {
        MPI_Init(&argc, &argv);
        MPI_Finalize();
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("went on\n");
    return 0;
}
"#,
    )
    .expect("write the program");
    let exe = dir.join("outside");
    compile(&cc, &src, &exe, &[]);
    for when in ["before", "after"] {
        let out = Command::new(pontoon())
            .args(["run", "-n", "1", "--timeout", "60"])
            .arg(&exe)
            .arg(when)
            .output()
            .expect("pontoon runs");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            !out.status.success(),
            "{when}: the job succeeded\n{stdout}{stderr}"
        );
        assert!(!stdout.contains("went on"), "{when}: {stdout}");
        assert!(stderr.contains("MPI_Comm_rank: MPI "), "{when}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Two ranks on each of two testbed hosts behind NAT: each pair of one host talks over
/// shared memory, pairs across hosts over TCP, and the C programs pass on that mix.
#[test]
fn c_programs_pass_on_two_hosts_with_two_ranks_each() {
    if !is_root() {
        eprintln!("skipped: testbed tests need root (network namespaces)");
        return;
    }
    let cc = pontoon_cc();
    let dir = scratch("two-hosts");
    let bed = Bed::up(&small_two_clusters());
    for name in [
        "p2p",
        "coll",
        "comm",
        "nbc",
        "types",
        "completion",
        "cancel",
        "threads_serialized",
        "threads_multiple",
    ] {
        let exe = dir.join(name);
        compile(&cc, &repo().join(format!("tests/c/{name}.c")), &exe, &[]);
        let out = bed
            .run_inside("a-head", "a-c1 slots=2\nb-c1 slots=2\n")
            .args(["--map-by", "slot", "-n", "4"])
            .arg(&exe)
            .output()
            .expect("pontoon runs");
        let stdout = text(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("{name} OK on 4 ranks")),
            "{name}: {stdout}\n{}",
            text(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The C programs on every host of two NAT'd clusters without IPv6, and of three sites
/// (IPv4-only behind NAT, IPv6-only, dual-stack; `docs/testbed/three-sites.toml`): pairs
/// that cannot reach each other directly go through the relays that `pontoon run
/// --testbed` starts on the heads and gateways.
#[test]
fn c_programs_pass_across_sites_through_relays() {
    if !is_root() {
        return;
    }
    let cc = pontoon_cc();
    let dir = scratch("relayed");
    let names = [
        "p2p",
        "coll",
        "comm",
        "nbc",
        "types",
        "cancel",
        "threads_serialized",
        "threads_multiple",
    ];
    for name in names {
        compile(
            &cc,
            &repo().join(format!("tests/c/{name}.c")),
            &dir.join(name),
            &[],
        );
    }
    let three_sites = repo().join("docs/testbed/three-sites.toml");
    let topologies = [
        common::preset(
            "two-clusters",
            testbed::PresetOptions {
                docker: true,
                no_ipv6: vec!["a".into(), "b".into()],
                ..testbed::PresetOptions::default()
            },
        ),
        testbed::Topology::from_toml(&std::fs::read_to_string(three_sites).unwrap()).unwrap(),
    ];
    for topo in &topologies {
        let bed = Bed::up(topo);
        let n = topo.hosts.len().to_string();
        for name in names {
            let out = bed
                .pontoon()
                .args(["run", "--testbed", &bed.name, "-n", &n, "--timeout", "60"])
                .arg(dir.join(name))
                .output()
                .expect("pontoon runs");
            let stdout = text(&out.stdout);
            assert!(
                out.status.success() && stdout.contains(&format!("{name} OK on {n} ranks")),
                "{name}: {stdout}\n{}",
                text(&out.stderr)
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn pontoon_cc_shows_its_command_and_links_only_when_asked() {
    let cc = pontoon_cc();
    let show = |args: &[&str]| {
        let o = Command::new(&cc).arg("-show").args(args).output().expect("runs");
        assert!(o.status.success());
        text(&o.stdout)
    };
    let link = show(&["x.c", "-o", "x"]);
    assert!(
        link.contains("-lmpi_abi") && link.contains("-Wl,-rpath,") && link.contains("/include"),
        "{link}"
    );
    let compile_only = show(&["-c", "x.c"]);
    assert!(!compile_only.contains("-lmpi_abi"), "{compile_only}");
}

#[test]
fn an_mpicc_abi_binary_runs_unmodified_on_pontoon_and_on_mpich() {
    let Some(mpich) = reference() else { return };
    pontoon_cc();
    let dir = scratch("mpicc-abi");
    let exe = dir.join("pingpong");
    compile(
        &mpich.join("bin/mpicc_abi"),
        &repo().join("bench/c/pingpong.c"),
        &exe,
        &[],
    );
    let on_pontoon = run_job(2, &exe, &["1024", "50"]);
    // cargo test puts target/ on LD_LIBRARY_PATH: without it the binary finds MPICH's
    // library through its run path.
    let on_mpich = Command::new(mpich.join("bin/mpiexec"))
        .env_remove("LD_LIBRARY_PATH")
        .args(["-n", "2"])
        .arg(&exe)
        .args(["1024", "50"])
        .output()
        .expect("mpiexec runs");
    assert!(on_mpich.status.success(), "MPICH: {}", text(&on_mpich.stderr));
    let on_mpich = text(&on_mpich.stdout);
    assert!(on_pontoon.starts_with("# library: pontoon"), "{on_pontoon}");
    assert!(on_mpich.starts_with("# library: MPICH"), "{on_mpich}");
    for out in [on_pontoon, on_mpich] {
        let sizes: Vec<&str> = out
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(sizes.first(), Some(&"0"), "{out}");
        assert_eq!(sizes.last(), Some(&"1024"), "{out}");
        assert_eq!(sizes.len(), 12, "{out}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Names of the constants a header defines: object-like `#define MPI_*` and enum members.
fn constant_names(header: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in header.lines() {
        let t = line.trim_start();
        let name = if let Some(rest) = t.strip_prefix("#define ") {
            let mut words = rest.split_whitespace();
            match (words.next(), words.next()) {
                (Some(n), Some(_)) if !n.contains('(') => n,
                _ => continue,
            }
        } else if t.starts_with("MPI") && t.contains('=') && !t.contains('(') {
            t.split(|c: char| c.is_whitespace() || c == '=')
                .next()
                .unwrap_or("")
        } else {
            continue;
        };
        let public = name.starts_with("MPI_") && !name.starts_with("MPI_ABI_")
            || name == "MPI_ABI_VERSION"
            || name == "MPI_ABI_SUBVERSION";
        if public && !name.starts_with("MPIX") {
            names.insert(name.to_string());
        }
    }
    names
}

/// A C program printing every constant's value and every type's size.
fn table_program(include: &str, names: &BTreeSet<String>) -> String {
    let mut c = format!("#include <stdio.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <{include}>\nint main(void) {{\n");
    for n in names {
        c.push_str(&format!(
            "    printf(\"{n} %lld\\n\", (long long)(intptr_t)({n}));\n"
        ));
    }
    let types = [
        "MPI_Aint",
        "MPI_Offset",
        "MPI_Count",
        "MPI_Status",
        "MPI_Comm",
        "MPI_Datatype",
        "MPI_Op",
        "MPI_Request",
        "MPI_Group",
        "MPI_Errhandler",
        "MPI_Info",
        "MPI_Message",
        "MPI_Win",
        "MPI_File",
        "MPI_Session",
    ];
    for t in types {
        c.push_str(&format!("    printf(\"sizeof({t}) %zu\\n\", sizeof({t}));\n"));
    }
    for f in ["MPI_SOURCE", "MPI_TAG", "MPI_ERROR"] {
        c.push_str(&format!(
            "    printf(\"offsetof({f}) %zu\\n\", offsetof(MPI_Status, {f}));\n"
        ));
    }
    c.push_str("    return 0;\n}\n");
    c
}

#[test]
fn every_constant_and_size_matches_the_reference_header() {
    let Some(mpich) = reference() else { return };
    let reference_h = std::fs::read_to_string(mpich.join("include/mpi_abi.h")).expect("mpi_abi.h");
    let ours_h = std::fs::read_to_string(repo().join("include/mpi.h")).expect("mpi.h");
    let names = constant_names(&reference_h);
    assert!(
        names.len() > 300,
        "only {} constants found in the reference",
        names.len()
    );
    let ours = constant_names(&ours_h);
    let missing: Vec<&String> = names.difference(&ours).collect();
    assert!(missing.is_empty(), "mpi.h lacks {missing:?}");
    let dir = scratch("constants");
    let mut tables = Vec::new();
    for (header, inc) in [
        ("mpi.h", repo().join("include")),
        ("mpi_abi.h", mpich.join("include")),
    ] {
        let src = dir.join(format!("table-{header}.c"));
        std::fs::write(&src, table_program(header, &names)).expect("write");
        let exe = dir.join(format!("table-{header}"));
        compile(Path::new("cc"), &src, &exe, &["-I", inc.to_str().expect("utf-8")]);
        let out = Command::new(&exe).output().expect("the table runs");
        tables.push(text(&out.stdout));
    }
    let diff: Vec<(&str, &str)> = tables[0]
        .lines()
        .zip(tables[1].lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert!(diff.is_empty(), "pontoon vs reference: {diff:#?}");
    assert_eq!(tables[0].lines().count(), names.len() + 18);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_library_exports_only_what_mpi_h_declares_and_in_pairs() {
    let cc = pontoon_cc();
    let lib = cc.parent().expect("target dir").join("libmpi_abi.so");
    let nm = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm runs");
    let exported: BTreeSet<String> = text(&nm.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with("MPI_") || w.starts_with("PMPI_"))
        .map(str::to_string)
        .collect();
    let header = std::fs::read_to_string(repo().join("include/mpi.h")).expect("mpi.h");
    let declared: BTreeSet<String> = header
        .lines()
        .filter(|l| !l.starts_with('#') && l.ends_with(");"))
        .filter_map(|l| l.split('(').next()?.split_whitespace().last().map(str::to_string))
        .filter(|n| n.starts_with("MPI_") || n.starts_with("PMPI_"))
        .collect();
    let undeclared: Vec<_> = exported.difference(&declared).collect();
    assert!(
        undeclared.is_empty(),
        "exported without a prototype in mpi.h: {undeclared:?} (scripts/update-mpi-h.py)"
    );
    assert!(
        declared.len() > 1200,
        "mpi.h declares only {} functions",
        declared.len()
    );
    // Every MPI_X has its profiling twin PMPI_X, and the other way round.
    let unpaired: Vec<_> = exported
        .iter()
        .filter(|n| {
            let twin = n
                .strip_prefix('P')
                .map_or_else(|| format!("P{n}"), str::to_string);
            !exported.contains(&twin)
        })
        .collect();
    assert!(unpaired.is_empty(), "without their MPI_/PMPI_ twin: {unpaired:?}");
    for f in [
        "MPI_Send",
        "PMPI_Send",
        "MPI_Wtime",
        "PMPI_Comm_toint",
        "MPI_Alltoallw",
    ] {
        assert!(exported.contains(f), "{f} missing");
    }
    // Not implemented, so not exported (mpi4py's weak references must see NULL).
    for f in ["MPI_Win_create", "MPI_File_open", "MPI_Comm_spawn"] {
        assert!(
            !exported.contains(f),
            "{f} is exported but pontoon does not implement it"
        );
    }
}
