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
