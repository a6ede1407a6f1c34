//! Collectives and communicators in real multi-process jobs on loopback: the
//! `coll_check` and `comm_check` examples compare every result with a reference.

use std::process::Command;

mod common;
use common::{example, pontoon, text};

/// Runs `prog` on `n` ranks; ranks outnumber the 2 cores here, so they sleep
/// instead of spinning while they wait.
fn run_ok(n: u32, prog: &str, args: &[&str]) -> String {
    let out = Command::new(pontoon())
        .args([
            "run",
            "-n",
            &n.to_string(),
            "--timeout",
            "240",
            "-x",
            "PONTOON_SPIN_US",
        ])
        .env("PONTOON_SPIN_US", if n > 2 { "0" } else { "200" })
        .arg(example(prog))
        .args(args)
        .output()
        .expect("pontoon runs");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{prog} on {n} ranks failed\nstdout: {stdout}\nstderr: {}",
        text(&out.stderr)
    );
    stdout
}

#[test]
fn every_collective_matches_the_reference_at_every_size() {
    // One size after another: 16 ranks at once are plenty for two cores.
    for n in [1, 2, 3, 5, 7, 8, 13, 16] {
        let out = run_ok(n, "coll_check", &[]);
        for label in ["world", "split", "dup", "self"] {
            let lines = out
                .lines()
                .filter(|l| l.starts_with(&format!("{label}: ")) && l.ends_with("agrees with the reference"))
                .count();
            assert_eq!(lines, n as usize, "{label} at {n} ranks:\n{out}");
        }
    }
}

#[test]
fn collectives_of_one_nodes_ranks_meet_on_its_collective_area_and_agree() {
    for n in [2, 5, 16] {
        let out = run_ok(n, "node_colls", &[]);
        for r in 0..n {
            for what in [
                // Through the area, the first collectives opened no lane.
                format!("rank {r}: 0 lanes after the first collectives"),
                format!("rank {r}: node collectives agree with the reference"),
            ] {
                assert!(out.contains(&what), "{n} ranks, no {what:?}:\n{out}");
            }
        }
    }
    // Without shared memory the same collectives go by messages over TCP.
    let out = Command::new(pontoon())
        .args([
            "run",
            "-n",
            "3",
            "--timeout",
            "120",
            "-x",
            "PONTOON_TRANSPORTS=tcp",
        ])
        .arg(example("node_colls"))
        .output()
        .expect("pontoon runs");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert_eq!(
        stdout
            .matches("node collectives agree with the reference")
            .count(),
        3,
        "{stdout}"
    );
    assert_eq!(
        stdout.matches(": 2 lanes after the first collectives").count(),
        3,
        "{stdout}"
    );
}

#[test]
fn ten_thousand_communicator_cycles_leak_no_context_and_attributes_behave() {
    for n in [1, 2, 5] {
        let out = run_ok(n, "comm_check", &[]);
        for r in 0..n {
            for what in [
                "10000 dup/split/free cycles, 2 context ids in use before and after".to_string(),
                "communicators, groups and attributes behave".to_string(),
                // Delete callbacks at finalize: COMM_SELF's, then COMM_WORLD's.
                "finalize deleted attribute 7 of MPI_COMM_SELF".to_string(),
                "finalize deleted attribute 42 of MPI_COMM_WORLD".to_string(),
            ] {
                assert!(
                    out.contains(&format!("rank {r}: {what}")),
                    "rank {r} of {n}: {what}\n{out}"
                );
            }
            let self_at = out
                .find(&format!("rank {r}: finalize deleted attribute 7"))
                .expect("checked");
            let world_at = out
                .find(&format!("rank {r}: finalize deleted attribute 42"))
                .expect("checked");
            assert!(self_at < world_at, "COMM_SELF's attributes go first\n{out}");
        }
    }
}

#[test]
fn non_blocking_collectives_overlap_and_advance_in_the_background() {
    for n in [1, 3, 4, 7] {
        let out = run_ok(n, "nbc_check", &[]);
        for r in 0..n {
            assert!(
                out.contains(&format!(
                    "rank {r}: six non-blocking collectives at once agree with the reference"
                )),
                "rank {r} of {n}\n{out}"
            );
            if n >= 4 {
                // Without background progress rank 0 never posts its second round and
                // the job hangs until --timeout.
                assert!(
                    out.contains(&format!(
                        "rank {r}: an ibarrier advanced while its rank was blocked in a receive"
                    )),
                    "rank {r} of {n}\n{out}"
                );
            }
        }
    }
}

/// `prog ARGS` on the testbed hosts `hosts` (one rank each), sites declared or not.
fn on_testbed(
    bed: &common::Bed,
    hosts: &str,
    run_args: &[&str],
    prog: &str,
    args: &[&str],
) -> std::process::Output {
    let n = hosts.split(',').count().to_string();
    let mut cmd = bed.pontoon();
    cmd.args([
        "run",
        "--testbed",
        &bed.name,
        "--host",
        hosts,
        "-n",
        &n,
        "--timeout",
        "240",
    ]);
    cmd.args(run_args)
        .args(["-x", "PONTOON_SPIN_US=0"])
        .arg(prog)
        .args(args)
        .output()
        .expect("pontoon runs")
}

#[test]
fn across_two_sites_the_site_aware_collectives_are_chosen_and_agree_with_the_reference() {
    if !common::is_root() {
        eprintln!("not root: no testbed (network namespaces), skipped");
        return;
    }
    let bed = common::Bed::up(&common::preset(
        "wan",
        testbed::PresetOptions {
            nodes: Some(2),
            ..Default::default()
        },
    ));
    // Five ranks, three at site a and two at b, interleaved.
    let hosts = "a-h1,b-h1,a-h2,a-gw,b-h2";
    let doctor = |run_args: &[&str]| -> serde_json::Value {
        let out = on_testbed(
            &bed,
            hosts,
            run_args,
            &pontoon().to_string_lossy(),
            &["doctor", "--json"],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_str(&text(&out.stdout)).expect("JSON")
    };
    let with = doctor(&["--sites"]);
    let sites: Vec<&str> = with["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["site"].as_str().unwrap())
        .collect();
    assert_eq!(sites, ["a", "b", "a", "a", "b"]);
    assert!(
        with["collectives"]
            .as_str()
            .unwrap()
            .starts_with("site-aware across 2 sites"),
        "{with:#}"
    );
    // Without them, whether the sites are inferred depends on the round trips through the
    // emulator (no delay here), which a loaded host stretches past a WAN lane's 2 ms:
    // `PONTOON_COLL_HIER=0` is the flat switch (`wan.rs` tests the inference, on a delay).
    let without = doctor(&["--sites", "-x", "PONTOON_COLL_HIER=0"]);
    assert!(
        without["collectives"].as_str().unwrap().starts_with("flat"),
        "{without:#}"
    );
    // Every collective on the world (two sites), a split, a dup and COMM_SELF.
    for prog in ["coll_check", "nbc_check"] {
        let out = on_testbed(&bed, hosts, &["--sites"], &example(prog).to_string_lossy(), &[]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{prog}: {stdout}\n{}", text(&out.stderr));
        let agreed = stdout.lines().filter(|l| l.contains("agree")).count();
        let want = if prog == "coll_check" { 4 * 5 } else { 5 };
        assert_eq!(agreed, want, "{prog}:\n{stdout}");
    }
}
