//! Pontoon and Slurm on the testbed's own Slurm clusters (root only; skipped otherwise):
//! ranks started by `srun --mpi=pmi2`, `pontoon run` inside `salloc`, and one job across
//! two clusters each started by its own Slurm; and ranks started by Hydra's `mpiexec`
//! (PyPI mpich's). PMI over both wire protocols.

mod common;

use common::{c_program, example, is_root, mpich_abi, preset, text, Bed};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use testbed::PresetOptions;

/// A testbed of `hosts` hosts on one LAN, running one Slurm cluster (slurmctld on h1).
fn slurm_lan(hosts: u16) -> Bed {
    let mut topo = preset(
        "lan",
        PresetOptions {
            nodes: Some(hosts),
            ..PresetOptions::default()
        },
    );
    topo.slurm = true;
    Bed::up(&topo)
}

/// `args` run on `host` of the bed (srun there finds the cluster in /etc/slurm).
fn on(bed: &Bed, host: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = bed.open().command(host, args[0]).expect("the host exists");
    cmd.args(&args[1..]).envs(env.iter().copied());
    cmd.output().expect("the command runs")
}

/// `srun --mpi=MPI ARGS PROGRAM` on h1; without PMI, task 0 starts this build's pontoon.
fn srun(bed: &Bed, mpi: &str, args: &[&str], program: &std::path::Path, env: &[(&str, &str)]) -> Output {
    let mpi = format!("--mpi={mpi}");
    let exe = common::pontoon();
    let mut env = env.to_vec();
    env.push(("PONTOON_BIN", exe.to_str().expect("UTF-8 path")));
    let mut all = vec!["srun", &mpi];
    all.extend_from_slice(args);
    let program = program.to_str().expect("UTF-8 path");
    all.push(program);
    on(bed, "h1", &all, &env)
}

/// `job` fails within `seconds`, saying `why` on its standard error.
fn ends_within(seconds: u64, why: &str, job: impl FnOnce() -> Output) {
    let start = Instant::now();
    let out = job();
    let took = start.elapsed();
    assert!(!out.status.success(), "{}", text(&out.stderr));
    assert!(
        took < Duration::from_secs(seconds),
        "the job took {took:?} to end"
    );
    assert!(text(&out.stderr).contains(why), "{}", text(&out.stderr));
}

fn assert_ok(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn srun_and_salloc_start_ranks_that_wire_up_run_the_c_tests_and_the_doctor() {
    if !is_root() {
        return;
    }
    let bed = slurm_lan(4);
    let nodes = on(&bed, "h1", &["sinfo", "-h", "-o", "%D %T"], &[]);
    assert_eq!(text(&nodes.stdout).trim(), "4 idle", "{}", text(&nodes.stderr));

    // Both wire protocols of Slurm's pmi2 plugin.
    for wire in ["2", "1"] {
        let out = srun(
            &bed,
            "pmi2",
            &["-N", "4", "-n", "8"],
            &example("ring"),
            &[("PONTOON_PMI", wire)],
        );
        assert_ok(&format!("ring over PMI-{wire}"), &out);
        assert!(
            text(&out.stdout)
                .contains("ring of 8 ranks: token came back to rank 0 with value 28 (expected 28)"),
            "{}",
            text(&out.stdout)
        );
    }
    for name in ["p2p", "coll", "types"] {
        let out = srun(&bed, "pmi2", &["-N", "4", "-n", "8"], &c_program(name), &[]);
        assert_ok(name, &out);
        assert!(
            text(&out.stdout).contains(&format!("{name} OK on 8 ranks")),
            "{}",
            text(&out.stdout)
        );
    }

    // `pontoon run` inside an allocation places ranks on its nodes and starts them there
    // through srun.
    let exe = common::pontoon();
    let pontoon = exe.to_str().unwrap();
    let salloc_run = |program: &[&str]| {
        let mut args = vec!["salloc", "-N", "4", pontoon, "run", "-n", "8"];
        args.extend_from_slice(program);
        let out = on(&bed, "h1", &args, &[]);
        assert_ok(&args.join(" "), &out);
        out
    };
    let ring = example("ring");
    let out = salloc_run(&[ring.to_str().unwrap()]);
    assert!(
        text(&out.stdout).contains("ring of 8 ranks"),
        "{}",
        text(&out.stdout)
    );
    let out = salloc_run(&["--tag-output", "hostname"]);
    let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(
        lines,
        ["[0] h1", "[1] h2", "[2] h3", "[3] h4", "[4] h1", "[5] h2", "[6] h3", "[7] h4"]
    );

    // The doctor sees the job as srun placed it: one rank per node, lanes between all.
    let mut args = vec!["srun", "--mpi=pmi2", "-N", "4", "-n", "4", pontoon];
    args.extend(["doctor", "--json"]);
    let out = on(&bed, "h1", &args, &[]);
    assert_ok("doctor", &out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor's JSON");
    let ranks = report["ranks"].as_array().expect("ranks");
    let hosts: Vec<&str> = ranks.iter().map(|r| r["host"].as_str().unwrap_or("?")).collect();
    assert_eq!(hosts, ["h1", "h2", "h3", "h4"], "{report}");
    for r in ranks {
        assert_eq!(r["peers"].as_array().map(Vec::len), Some(3), "{r}");
    }
}

#[test]
fn a_rank_killed_or_gone_under_srun_ends_the_job_with_an_error_at_once() {
    if !is_root() {
        return;
    }
    let bed = slurm_lan(2);
    // Rank 1 kills itself; ranks 2 and 3 would sleep 30 s and rank 0 waits for rank 1.
    let four = ["-N", "2", "-n", "4"];
    ends_within(5, "rank 1 is gone: its connection closed unexpectedly", || {
        srun(&bed, "pmi2", &four, &example("peer_dies"), &[])
    });
    // The node's first rank dies (ranks 0 and 1 share h1 and its shared memory): rank 1
    // learns it from its own join connection to rank 0.
    ends_within(5, "rank 0 is gone", || {
        let out = srun(
            &bed,
            "pmi2",
            &four,
            &example("peer_dies"),
            &[("PEER_DIES", "0,1")],
        );
        assert!(
            text(&out.stdout).contains("rank 1: receive from rank 0 failed"),
            "{}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        out
    });

    // MPI_Abort on one rank ends every rank, each with the abort's code (passed on over
    // the lanes), so srun reports that code rather than the 137 of killed tasks.
    ends_within(5, "rank 1 gives up", || {
        let out = srun(&bed, "pmi2", &four, &example("abort_one"), &[]);
        assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
        out
    });

    // A task that exits before it initializes: the others end the job at their fence's
    // time limit instead of waiting for it for ever.
    let script = format!(
        "if [ $SLURM_PROCID = 1 ]; then exit 3; fi; exec {}",
        example("ring").display()
    );
    ends_within(10, "not every rank reached the PMI fence within 2s", || {
        on(
            &bed,
            "h1",
            &["srun", "--mpi=pmi2", "-N", "2", "-n", "4", "sh", "-c", &script],
            &[("PONTOON_PMI_FENCE_TIMEOUT_S", "2")],
        )
    });
}

#[test]
fn srun_without_pmi_finds_task_0s_rendezvous_and_ends_the_job_as_pontoon_run_does() {
    if !is_root() {
        return;
    }
    let bed = slurm_lan(3);
    let ring_of = |n: u32| {
        format!(
            "ring of {n} ranks: token came back to rank 0 with value {}",
            n * (n - 1) / 2
        )
    };
    // Plain srun (the cluster's MpiDefault is none) and --mpi=none: the tasks find task 0's
    // rendezvous, get the job's key through munge and wire up.
    let out = srun(&bed, "none", &["-N", "3", "-n", "6"], &example("ring"), &[]);
    assert_ok("ring under srun --mpi=none", &out);
    assert!(text(&out.stdout).contains(&ring_of(6)), "{}", text(&out.stdout));
    let exe = common::pontoon();
    let bin = [("PONTOON_BIN", exe.to_str().unwrap())];
    let out = on(
        &bed,
        "h1",
        &["srun", "-N", "2", "-n", "4", example("ring").to_str().unwrap()],
        &bin,
    );
    assert_ok("ring under plain srun", &out);
    assert!(text(&out.stdout).contains(&ring_of(4)), "{}", text(&out.stdout));
    for name in ["p2p", "coll"] {
        let out = srun(&bed, "none", &["-N", "3", "-n", "6"], &c_program(name), &[]);
        assert_ok(name, &out);
        assert!(
            text(&out.stdout).contains(&format!("{name} OK on 6 ranks")),
            "{}",
            text(&out.stdout)
        );
    }
    let out = on(
        &bed,
        "h1",
        &[
            "srun",
            "-N",
            "3",
            "-n",
            "3",
            exe.to_str().unwrap(),
            "doctor",
            "--json",
        ],
        &bin,
    );
    assert_ok("pontoon doctor under plain srun", &out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor's JSON");
    let hosts: Vec<&str> = report["ranks"]
        .as_array()
        .expect("ranks")
        .iter()
        .map(|r| r["host"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(hosts, ["h1", "h2", "h3"], "{report}");

    // A stranger on a port of the range: the tasks skip it. With both ports taken, task 0
    // says which and why.
    let stranger = |port: u16| {
        let script = format!(
            "import socket\ns=socket.socket(socket.AF_INET6)\ns.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n\
             s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('::', {port}))\ns.listen()\n\
             print('listening', flush=True)\nwhile True:\n  c,_=s.accept()\n  c.sendall(b'SSH-2.0-OpenSSH\\n')\n  c.close()\n"
        );
        let mut cmd = bed.open().command("h1", "python3").expect("h1");
        let mut child = cmd
            .args(["-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).expect("python3 says");
        assert_eq!(
            line.trim(),
            "listening",
            "the stranger on port {port} could not listen"
        );
        child
    };
    let mut first = stranger(20000);
    let ports = [("PONTOON_SRUN_PORTS", "20000-20001")];
    let out = srun(&bed, "none", &["-N", "3", "-n", "3"], &example("ring"), &ports);
    assert_ok("ring with a stranger on one port of the range", &out);
    let mut second = stranger(20001);
    ends_within(
        15,
        "no port for the key of the job is free (PONTOON_SRUN_PORTS)",
        || {
            let quick = [ports[0], ("PONTOON_PMI_FENCE_TIMEOUT_S", "3")];
            srun(&bed, "none", &["-N", "3", "-n", "3"], &example("ring"), &quick)
        },
    );
    let _ = (first.kill(), second.kill(), first.wait(), second.wait());

    // MPI_Abort: every task exits with the abort's code, so srun does too, as pontoon run.
    let four = ["-N", "2", "-n", "4"];
    let start = Instant::now();
    let out = srun(&bed, "none", &four, &example("abort_one"), &[]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(
        text(&out.stderr).contains("rank 1 called abort (code 5): rank 1 gives up"),
        "{}",
        text(&out.stderr)
    );
    // A killed rank ends the job, the ranks that sleep through it included.
    ends_within(5, "1 ended before finalizing: exited or killed", || {
        srun(&bed, "none", &four, &example("peer_dies"), &[])
    });
    // A task that never starts pontoon: the others give up at the start-up time limit.
    let script = format!(
        "if [ $SLURM_PROCID = 2 ]; then exit 3; fi; exec {}",
        example("ring").display()
    );
    ends_within(10, "rank(s) 2 did not reach the job's rendezvous", || {
        on(
            &bed,
            "h1",
            &["srun", "--mpi=none", "-N", "2", "-n", "4", "sh", "-c", &script],
            &[("PONTOON_PMI_FENCE_TIMEOUT_S", "2"), bin[0]],
        )
    });
}

#[test]
fn hydra_mpiexec_starts_ranks_over_both_pmi_wire_protocols() {
    let Some(mpich) = mpich_abi() else { return };
    for wire in ["2", "1"] {
        let out = Command::new(mpich.join("bin/mpiexec"))
            .args(["-n", "3"])
            .arg(example("ring"))
            .env("PONTOON_PMI", wire)
            .output()
            .expect("mpiexec runs");
        assert_ok(&format!("ring under Hydra over PMI-{wire}"), &out);
        assert!(
            text(&out.stdout)
                .contains("ring of 3 ranks: token came back to rank 0 with value 3 (expected 3)"),
            "{}",
            text(&out.stdout)
        );
    }
}

#[test]
fn one_job_spans_two_clusters_each_started_by_its_own_slurm() {
    if !is_root() {
        return;
    }
    let mut topo = preset(
        "two-clusters",
        PresetOptions {
            nodes: Some(2),
            ..PresetOptions::default()
        },
    );
    topo.slurm = true;
    let bed = Bed::up(&topo);
    // One command: pontoon run on a-head asks each cluster's login node for an allocation
    // and starts that cluster's ranks with srun on its nodes.
    let run = |program: &[&std::ffi::OsStr]| {
        let out = bed
            .pontoon()
            .args([
                "run",
                "--testbed",
                &bed.name,
                "--timeout",
                "60",
                "-n",
                "8",
                "--tag-output",
            ])
            .args(["--host", "a-head slots=4 slurm,b-head slots=4 slurm"])
            .args(program)
            .output()
            .expect("pontoon runs");
        assert_ok("pontoon run across two Slurm clusters", &out);
        text(&out.stdout)
    };
    let ring = example("ring");
    let out = run(&[ring.as_os_str()]);
    assert!(
        out.contains("ring of 8 ranks: token came back to rank 0 with value 28"),
        "{out}"
    );
    let out = run(&["hostname".as_ref()]);
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    // Ranks alternate between the clusters (--map-by node), and each cluster's go round
    // the nodes of its allocation.
    assert_eq!(
        lines,
        ["[0] a-c1", "[1] b-c1", "[2] a-c2", "[3] b-c2", "[4] a-c1", "[5] b-c1", "[6] a-c2", "[7] b-c2"]
    );
    // The allocations end with the job.
    for head in ["a-head", "b-head"] {
        let q = on(&bed, head, &["squeue", "-h"], &[]);
        assert_eq!(text(&q.stdout).trim(), "", "{head} still has jobs");
    }
}
