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
    for r in v["rows"].as_array().unwrap() {
        let cpu = r["cpu_s_per_gb"]["pontoon"]["median"].as_f64();
        assert!(
            cpu.is_some_and(|c| c >= 0.0),
            "bibw measures its CPU per GB: {r:#}"
        );
    }
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
fn roundtrip_pingpong_and_the_collectives_run_with_their_units() {
    let v = json_once(&["roundtrip", "--max", "8", "--iters", "100", "--json"]);
    assert_eq!(
        (v["unit"].as_str(), v["better"].as_str()),
        (Some("round trips/s"), Some("higher"))
    );
    let v = json_once(&["pingpong", "--max", "4096", "--iters", "100", "--json"]);
    assert_eq!(
        (v["unit"].as_str(), v["better"].as_str()),
        (Some("MB/s"), Some("higher"))
    );
    let big = v["rows"].as_array().unwrap().last().unwrap();
    assert_eq!(big["bytes"], 4096);
    assert!(
        big["results"]["pontoon"]["median"].as_f64().unwrap() > 0.0,
        "{v:#}"
    );
    for op in ["bcast", "reduce", "allgather", "alltoall"] {
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
fn application_latency_and_overlap_run_and_a_plot_is_drawn() {
    let v = json_once(&["app-latency", "--max", "1024", "--iters", "100", "--json"]);
    assert_eq!(
        (v["test"].as_str(), v["unit"].as_str()),
        (Some("app-latency"), Some("µs"))
    );
    assert_eq!(
        v["rows"].as_array().unwrap().len(),
        12,
        "0 and 1 B to 1 KiB: {v:#}"
    );
    let dir = std::env::temp_dir().join(format!("pontoon-bench-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("overlap.svg");
    let out = once(&[
        "overlap",
        "--max",
        "65536",
        "--iters",
        "20",
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let v = parsed(out);
    assert_eq!(
        (v["unit"].as_str(), v["better"].as_str()),
        (Some("% hidden"), Some("higher"))
    );
    let sizes: Vec<u64> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [1024, 4096, 16384, 65536], "{v:#}");
    for r in v["rows"].as_array().unwrap() {
        let hidden = r["results"]["pontoon"]["median"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&hidden), "{r:#}");
    }
    let drawn = std::fs::read_to_string(&svg).expect("the plot is written");
    assert!(
        drawn.starts_with("<svg") && drawn.contains("pontoon") && drawn.contains("16K"),
        "{drawn}"
    );
    let out = once(&[
        "latency",
        "--max",
        "8",
        "--iters",
        "10",
        "--plot",
        "/nonexistent-dir/x.png",
    ]);
    assert!(
        !out.status.success(),
        "a plot that cannot be written fails the command"
    );
    assert!(
        text(&out.stderr).contains("plot /nonexistent-dir/x.png"),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
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
    // Chosen hosts, in rank order; a host the testbed lacks is named.
    let chosen = json_once(&[
        "latency",
        "--testbed",
        &bed.name,
        "--hosts",
        "h2,h1",
        "--max",
        "8",
        "--iters",
        "10",
        "--json",
    ]);
    assert_eq!(
        chosen["place"],
        format!("testbed {} (h2, h1)", bed.name),
        "{chosen:#}"
    );
    let out = once(&["latency", "--testbed", &bed.name, "--hosts", "h1,h9"]);
    assert!(
        text(&out.stderr).contains("has no host h9 (it has h1, h2)"),
        "{}",
        text(&out.stderr)
    );
    let out = Command::new(pontoon())
        .args(["run", "--testbed", &bed.name, "--host", "h9", "-n", "1", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("has no host h9"),
        "{}",
        text(&out.stderr)
    );
    for s in systems.split(',') {
        let rows = v["rows"].as_array().unwrap();
        assert!(
            rows.iter()
                .all(|r| r["results"][s]["median"].as_f64().is_some_and(|x| x > 0.0)),
            "{s}: {v:#}"
        );
    }
}

/// Checks what `pontoon bench experiment SEED --quick` wrote into `dir`: the report with
/// a claim table whose every row has pontoon's figure, the CSV, and the plots it links.
fn check_experiment(dir: &std::path::Path, seed: &str, claims: usize) {
    let md = std::fs::read_to_string(dir.join(format!("{seed}.md"))).expect("the report");
    assert!(md.starts_with(&format!("# Seed {seed}: ")), "{md}");
    assert!(
        md.contains(&format!("`pontoon bench experiment {seed} --quick`")),
        "{md}"
    );
    let rows: Vec<&str> = md
        .lines()
        .skip_while(|l| !l.starts_with("| claim | paper | pontoon | pontoon / paper |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert_eq!(rows.len(), claims, "{md}");
    for r in &rows {
        let cells: Vec<&str> = r.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 4, "{r}");
        let ours: f64 = cells[2]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap_or(f64::NAN);
        assert!(ours.is_finite(), "pontoon's figure is a number: {r}");
        assert!(md.contains(&format!("- **{}**: ", cells[0])), "a verdict for {r}");
    }
    let csv = std::fs::read_to_string(dir.join(format!("{seed}.csv"))).expect("the CSV");
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("table,line,bytes,run,value"));
    let mut n = 0;
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), 5, "{l}");
        assert!(f[2].parse::<u64>().is_ok() && f[4].parse::<f64>().is_ok(), "{l}");
        n += 1;
    }
    assert!(n > 0, "{csv}");
    let plots: Vec<&str> = md
        .lines()
        .filter_map(|l| l.strip_prefix("![")?.split_once("](")?.1.strip_suffix(')'))
        .collect();
    assert!(!plots.is_empty(), "{md}");
    for p in plots {
        let svg = std::fs::read_to_string(dir.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{p}"
        );
    }
}

#[test]
fn every_seed_experiment_runs_quick_and_writes_its_report() {
    if !is_root() {
        eprintln!("not root: the experiments build testbeds (network namespaces), skipped");
        return;
    }
    let dir = std::env::temp_dir().join(format!("pontoon-experiments-{}", std::process::id()));
    for (seed, claims) in [("000", 5), ("001", 2), ("002", 5), ("003", 6), ("004", 3)] {
        let out = bench(&["experiment", seed, "--quick", "--out", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{seed}: {}", text(&out.stderr));
        assert!(text(&out.stdout).contains(&format!("wrote {}", dir.join(format!("{seed}.md")).display())));
        check_experiment(&dir, seed, claims);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn runs_started_at_once_share_an_empty_cache_of_programs() {
    // Each builds the program it needs into the same cache: none may read another's half-
    // written source or program.
    let cache = std::env::temp_dir().join(format!("pontoon-bench-race-{}", std::process::id()));
    let runs: Vec<_> = (0..4)
        .map(|_| {
            Command::new(pontoon())
                .args([
                    "bench",
                    "latency",
                    "--systems",
                    "pontoon",
                    "--runs",
                    "1",
                    "--max",
                    "8",
                    "--iters",
                    "10",
                ])
                .env("PONTOON_BENCH_CACHE", &cache)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("pontoon starts")
        })
        .collect();
    for r in runs {
        let out = r.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let _ = std::fs::remove_dir_all(&cache);
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

/// The thread benchmarks: latency-mt at MPI_THREAD_MULTIPLE with its pairs, the
/// communication thread's speed-up, and an MPI_Iallreduce's overlap with pontoon's
/// progress thread.
#[test]
fn the_thread_benchmarks_run_with_their_units() {
    for (args, unit, sizes) in [
        (
            &["latency-mt", "--threads", "3", "--max", "64", "--iters", "200"][..],
            "µs",
            8,
        ),
        (&["comm-thread", "--max", "4096", "--iters", "10"], "×", 2),
        (
            &[
                "overlap-allreduce",
                "-n",
                "2",
                "--progress-thread",
                "--max",
                "4096",
                "--iters",
                "10",
            ],
            "% hidden",
            2,
        ),
    ] {
        let mut args = args.to_vec();
        args.push("--json");
        let v = json_once(&args);
        assert_eq!(v["unit"].as_str(), Some(unit), "{v:#}");
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows.len(), sizes, "{v:#}");
        assert!(
            rows.iter().all(|r| r["results"]["pontoon"]["median"]
                .as_f64()
                .is_some_and(f64::is_finite)),
            "{v:#}"
        );
    }
}
