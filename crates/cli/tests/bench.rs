//! `pontoon bench`: short runs of every test on local ranks, each output well formed. The
//! figures are not judged (a test cannot time a shared machine); MPICH and Open MPI join
//! where installed (`scripts/install-deps.sh --anchors`).

use serde_json::Value;
use std::process::{Command, Output};

mod common;
use common::{is_root, pontoon, preset, text, Bed};

/// `pontoon bench ARGS` with its own cache of compiled programs.
fn bench(args: &[&str]) -> Output {
    let cache = std::env::temp_dir().join(format!("pontoon-bench-test-{}", std::process::id()));
    Command::new(pontoon())
        .arg("bench")
        .args(args)
        .env("PONTOON_BENCH_CACHE", &cache)
        .output()
        .expect("pontoon runs")
}

fn json(args: &[&str]) -> Value {
    parsed(bench(args))
}

fn parsed(out: Output) -> Value {
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_str(&text(&out.stdout)).expect("JSON")
}

/// `pontoon bench ARGS` with one run of pontoon alone.
fn once(args: &[&str]) -> Output {
    bench(&[args, &["--systems", "pontoon", "--runs", "1"]].concat())
}

fn json_once(args: &[&str]) -> Value {
    parsed(once(args))
}

fn installed(system: &str) -> bool {
    let tools: &[&str] = match system {
        "mpich" => &["mpicc.mpich", "mpiexec.mpich"],
        _ => &["mpicc.openmpi", "mpirun.openmpi"],
    };
    tools.iter().all(|t| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn latency_on_pontoon_gives_every_size_and_every_run() {
    let v = json(&[
        "latency",
        "--systems",
        "pontoon",
        "--runs",
        "2",
        "--max",
        "64",
        "--iters",
        "200",
        "--json",
    ]);
    assert_eq!(v["test"], "latency");
    assert_eq!(v["unit"], "µs");
    assert!(
        v["systems"][0]["library"]
            .as_str()
            .unwrap()
            .starts_with("pontoon"),
        "{v:#}"
    );
    let sizes: Vec<u64> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [0, 1, 2, 4, 8, 16, 32, 64]);
    for r in v["rows"].as_array().unwrap() {
        let p = &r["results"]["pontoon"];
        assert_eq!(p["runs"].as_array().unwrap().len(), 2, "{r:#}");
        let (lo, med, hi) = (
            p["min"].as_f64().unwrap(),
            p["median"].as_f64().unwrap(),
            p["max"].as_f64().unwrap(),
        );
        assert!(0.0 < lo && lo <= med && med <= hi, "{r:#}");
    }
    assert_eq!(v["anchor"], Value::Null, "no anchor among the systems run");
}

#[test]
fn bandwidth_patterns_bibw_and_allreduce_run_and_print_their_formats() {
    let out = once(&["bw", "--max", "16384", "--pattern", "2:1", "--csv"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let csv = text(&out.stdout);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "test,figure,system,bytes,run,value");
    assert_eq!(
        lines.len(),
        1 + 2 * 5,
        "1, 2, 4, 8 and 16 KiB, bandwidth and CPU: {csv}"
    );
    for figure in ["MB/s", "cpu_s_per_GB"] {
        let prefix = format!("bw,{figure},pontoon,");
        let rows: Vec<&str> = lines.iter().copied().filter(|l| l.starts_with(&prefix)).collect();
        assert_eq!(rows.len(), 5, "{csv}");
        for r in rows {
            let v: f64 = r.rsplit(',').next().unwrap().parse().unwrap();
            assert!(v > 0.0, "{r}");
        }
    }
    let v = json_once(&["bibw", "--max", "4096", "--iters", "10", "--json"]);
    assert_eq!(
        (v["unit"].as_str(), v["better"].as_str()),
        (Some("MB/s"), Some("higher"))
    );
    assert!(!v["rows"].as_array().unwrap().is_empty());
    let v = json_once(&["allreduce", "-n", "3", "--max", "64", "--iters", "50", "--json"]);
    assert_eq!(v["ranks"], 3);
    assert_eq!(v["rows"].as_array().unwrap().len(), 4, "8 to 64 bytes: {v:#}");
    let out = once(&["latency", "--max", "8", "--iters", "50"]);
    let table = text(&out.stdout);
    assert!(table.starts_with("pontoon bench latency:"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.trim_start().starts_with("bytes") && l.ends_with("pontoon")),
        "{table}"
    );
}

#[test]
fn roundtrip_and_the_collectives_run_with_their_units() {
    let v = json_once(&["roundtrip", "--max", "8", "--iters", "100", "--json"]);
    assert_eq!(
        (v["unit"].as_str(), v["better"].as_str()),
        (Some("round trips/s"), Some("higher"))
    );
    for op in ["bcast", "reduce", "alltoall"] {
        let v = json_once(&[op, "-n", "3", "--max", "64", "--iters", "20", "--json"]);
        assert_eq!(v["test"], op);
        assert_eq!(v["ranks"], 3);
        let sizes: Vec<u64> = v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["bytes"].as_u64().unwrap())
            .collect();
        let from = if op == "reduce" { 8 } else { 1 };
        let want: Vec<u64> = std::iter::successors(Some(from), |s| Some(s * 2))
            .take_while(|s| *s <= 64)
            .collect();
        assert_eq!(sizes, want, "{op}: {v:#}");
    }
}

#[test]
fn anchors_run_beside_pontoon_with_a_ratio_column() {
    for anchor in ["mpich", "openmpi"] {
        if !installed(anchor) {
            eprintln!("{anchor} is not installed: skipped (scripts/install-deps.sh --anchors)");
            continue;
        }
        let systems = format!("pontoon,{anchor}");
        let v = json(&[
            "latency",
            "--systems",
            &systems,
            "--anchor",
            anchor,
            "--runs",
            "1",
            "--max",
            "8",
            "--iters",
            "100",
            "--json",
        ]);
        assert_eq!(v["anchor"], anchor);
        for r in v["rows"].as_array().unwrap() {
            let ratio = r["ratio"].as_f64().unwrap_or_else(|| panic!("{r:#}"));
            let p = r["results"]["pontoon"]["median"].as_f64().unwrap();
            let a = r["results"][anchor]["median"].as_f64().unwrap();
            assert!((ratio - p / a).abs() < 1e-9, "{r:#}");
        }
    }
}

#[test]
fn on_a_testbed_every_system_runs_one_rank_per_host() {
    if !is_root() {
        eprintln!("not root: no testbed (network namespaces), skipped");
        return;
    }
    let bed = Bed::up(&preset(
        "lan",
        testbed::PresetOptions {
            nodes: Some(2),
            ..Default::default()
        },
    ));
    let mut systems = vec!["pontoon"];
    systems.extend(["mpich", "openmpi"].into_iter().filter(|s| installed(s)));
    let systems = systems.join(",");
    let v = json(&[
        "latency",
        "--testbed",
        &bed.name,
        "--systems",
        &systems,
        "--runs",
        "1",
        "--max",
        "8",
        "--iters",
        "100",
        "--json",
    ]);
    assert_eq!(v["place"], format!("testbed {} (h1, h2)", bed.name), "{v:#}");
    for s in systems.split(',') {
        let rows = v["rows"].as_array().unwrap();
        assert!(
            rows.iter()
                .all(|r| r["results"][s]["median"].as_f64().is_some_and(|x| x > 0.0)),
            "{s}: {v:#}"
        );
    }
}

#[test]
fn a_system_asked_for_but_missing_is_an_error_that_says_why() {
    let out = Command::new(pontoon())
        .args(["bench", "latency", "--systems", "mpich", "--runs", "1"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("mpich: mpicc.mpich is not installed (scripts/install-deps.sh --anchors)"),
        "{err}"
    );
}
