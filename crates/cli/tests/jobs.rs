//! Multi-process jobs on loopback: `pontoon run` with the runtime and the examples.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::{c_program, example, pontoon, refusal, text};

fn run(args: &[&str], prog: &str, prog_args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(pontoon())
        .arg("run")
        .args(args)
        .arg(example(prog))
        .args(prog_args)
        .output()
        .expect("pontoon runs");
    (out, start.elapsed())
}

/// The job's stdout, after checking that it succeeded.
fn succeeded(out: &Output) -> String {
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        text(&out.stderr)
    );
    stdout
}

/// The line of `stdout` that starts with `prefix`, and the two numbers in it.
fn report(stdout: &str, prefix: &str, transport: &str) -> (String, [f64; 2]) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("{transport}: no report: {stdout}"));
    let numbers: Vec<f64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let [a, b] = numbers[..] else {
        panic!("{transport}: {line}")
    };
    (line.to_string(), [a, b])
}

#[test]
fn ring_of_four_passes_the_token() {
    let (out, _) = run(&["-n", "4", "--timeout", "60"], "ring", &[]);
    let stdout = succeeded(&out);
    assert!(
        stdout.contains("ring of 4 ranks: token came back to rank 0 with value 6 (expected 6)"),
        "{stdout}"
    );
    for r in 1..4 {
        assert!(stdout.contains(&format!("rank {r} got the token")), "{stdout}");
    }
}

#[test]
fn pingpong_prints_the_table() {
    let (out, _) = run(
        &["-n", "2", "--timeout", "60"],
        "pingpong",
        &["--max", "1048576", "--iters", "200"],
    );
    let stdout = succeeded(&out);
    assert!(stdout.contains("size_bytes"), "{stdout}");
    for size in ["0", "8", "65536", "1048576"] {
        assert!(
            stdout.lines().any(|l| l.split_whitespace().next() == Some(size)),
            "row {size} missing:\n{stdout}"
        );
    }
}

/// A busy-polling rank looks at its listeners, doorbells and the coordinator when epoll
/// says one is ready or every few milliseconds, not every 1024th pass: each look was
/// several system calls (an `accept()` that finds nobody allocates and frees a socket and
/// a file), a fifth of a rank's time in an 8 B ping-pong over shared memory. Before, 100,000
/// round trips took a look every ~50 µs; now at most one per 5 ms (and one after each sleep).
/// (Counted once the connection is up: while it is set up, every pass looks.)
#[test]
fn a_busy_rank_looks_at_its_rarely_busy_sockets_only_when_they_are_ready() {
    for transport in ["shm", "tcp"] {
        let transports = format!("PONTOON_TRANSPORTS={transport}");
        // Spinning for up to a minute, the ranks never sleep (each wake-up takes a look,
        // and on a loaded machine a waiting rank may run out of a short spin often).
        let (out, _) = run(
            &[
                "-n",
                "2",
                "--timeout",
                "60",
                "-x",
                &transports,
                "-x",
                "PONTOON_SPIN_US=60000000",
            ],
            "pingpong",
            &["--max", "8", "--iters", "20000"],
        );
        let (line, [passes, ms]) = report(&succeeded(&out), "# housekeeping:", transport);
        // Generous: one per 2.5 ms (twice the rate) and 50 after sleeps or connections.
        assert!(passes <= ms / 2.5 + 50.0, "{transport}: {line}");
    }
}

/// A rank waiting in finalize for the others sleeps until the coordinator, a doorbell
/// or a lane's timer wakes it. It woke every millisecond before (a thousand looks in
/// this second of waiting), and 256 ranks on 2 CPUs took 5 s to finalize.
#[test]
fn a_rank_waiting_in_finalize_sleeps_until_woken() {
    for transport in ["shm", "tcp"] {
        let transports = format!("PONTOON_TRANSPORTS={transport}");
        let (out, _) = run(&["-n", "3", "-x", &transports], "late_finalize", &[]);
        let (line, [looks, ms]) = report(&succeeded(&out), "# finalize:", transport);
        assert!(ms >= 900.0, "{transport}: finalize waited for the others: {line}");
        // One look per 50 ms sleep is 20; the others' exits and frames add a few.
        assert!(looks <= 100.0, "{transport}: {line}");
    }
}

/// With no spin budget every wait sleeps in epoll. A rank's only link joins the epoll
/// set just for its sleeps (a registered socket slows every message): a message must
/// still wake it, or a good part of these 55,000 round trips wait out a sleep of up to
/// 50 ms and the job hits its timeout (it does without the registration; it takes
/// half a second with it).
#[test]
fn a_rank_sleeping_on_its_only_link_wakes_for_each_message() {
    // TCP: the socket joins the ready set for the sleep. Shared memory: the doorbell rings
    // (without it every message would wait for the 50 ms sleep to end: over the timeout).
    for transport in ["tcp", "shm"] {
        let transports = format!("PONTOON_TRANSPORTS={transport}");
        let (out, _) = run(
            &[
                "-n",
                "2",
                "--timeout",
                "60",
                "-x",
                "PONTOON_SPIN_US=0",
                "-x",
                &transports,
            ],
            "pingpong",
            &["--max", "8", "--iters", "10000"],
        );
        let stdout = succeeded(&out);
        assert!(
            stdout.lines().any(|l| l.split_whitespace().next() == Some("8")),
            "{transport}: {stdout}"
        );
    }
}

/// 16 ranks flood rank 0 with 16 MiB of eager-sized messages while it wants the last
/// one first: it holds at most its 4 MiB cap of them (it held all 16 MiB before flow
/// control), over shared memory and over TCP, and every byte arrives.
#[test]
fn a_sixteen_to_one_flood_stays_under_the_unexpected_cap() {
    let cap: u64 = 4 << 20;
    for transport in ["shm", "tcp"] {
        let (cap_var, transports) = (
            format!("PONTOON_UNEXPECTED_CAP={cap}"),
            format!("PONTOON_TRANSPORTS={transport}"),
        );
        let (out, _) = run(
            &["-n", "17", "--timeout", "120", "-x", &cap_var, "-x", &transports],
            "flood",
            &["--count", "64", "--size", "16384"],
        );
        let stdout = succeeded(&out);
        let line = stdout
            .lines()
            .find(|l| l.starts_with("flood of 1024 messages"))
            .unwrap_or_else(|| panic!("{transport}: no report: {stdout}"));
        assert!(line.contains(": 0 corrupt;"), "{transport}: {line}");
        let held: u64 = line
            .split("held at most ")
            .nth(1)
            .and_then(|r| r.split(' ').next()?.parse().ok())
            .expect("held bytes");
        assert!(held <= cap, "{transport}: held {held} > cap {cap}: {line}");
        assert!(held > 0, "{transport}: some went eagerly: {line}");
    }
}

#[test]
fn a_killed_rank_ends_the_job_and_a_receive_or_a_barrier_waiting_for_it_fails() {
    let (out, took) = run(&["-n", "3", "--timeout", "60"], "peer_dies", &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "the job must fail");
    assert!(took < Duration::from_secs(5), "took {took:?}\n{stderr}");
    assert!(
        stderr.contains("rank 1"),
        "the launcher names the dead rank: {stderr}"
    );
    assert!(
        stderr.contains("SIGKILL") || stderr.contains("signal 9"),
        "{stderr}"
    );
    assert!(
        stdout.contains("rank 0: receive from rank 1 failed") && stdout.contains("rank 1 failed"),
        "the blocking receive returned an error naming rank 1:\n{stdout}\n{stderr}"
    );
    let leftover = Command::new("pgrep")
        .args(["-f", "examples/peer_dies"])
        .output()
        .expect("pgrep");
    assert!(
        leftover.stdout.is_empty(),
        "processes left: {}",
        text(&leftover.stdout)
    );
    // Rank 0 waits in a barrier of COMM_WORLD (on one host: the node's collective
    // area, no message) for rank 1, which dies; rank 2 never comes. (Here, not in a
    // test of its own: tests run at once, and the check above for leftover processes
    // would see the other test's.)
    let (out, took) = run(
        &["-n", "3", "--timeout", "60", "-x", "PEER_DIES_IN=barrier"],
        "peer_dies",
        &[],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "the job must fail");
    assert!(took < Duration::from_secs(5), "took {took:?}\n{stderr}");
    assert!(
        stdout.contains("rank 0: barrier failed: rank 1 failed"),
        "the barrier returned an error naming rank 1:\n{stdout}\n{stderr}"
    );
}

#[test]
fn intruders_are_refused_and_the_job_goes_on() {
    let (out, _) = run(&["-n", "2", "--timeout", "60"], "intruders", &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.contains("rank 1: exchange after intruders ok: 43"),
        "{stdout}"
    );
    // The forged HELLO gets a refusal (an ACK it cannot verify), the garbage a closed connection.
    assert!(stdout.contains("wrong job/secret: answered 96 bytes"), "{stdout}");
    assert!(stdout.contains("garbage: "), "{stdout}");
    // Rank 0 logged both refusals (PONTOON_LOG defaults to warn).
    assert!(
        stderr.contains("rank 0: refused connection from") && stderr.contains("another job"),
        "{stderr}"
    );
    assert!(stderr.contains("not a pontoon peer"), "{stderr}");
}

#[test]
fn a_single_rank_runs_without_the_launcher() {
    let out = Command::new(example("ring")).output().expect("runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("ring of 1 ranks"));
}

#[test]
fn simultaneous_connects_leave_one_connection_per_pair() {
    // The race is timing-dependent: several jobs make it all but certain to occur (before
    // the fix for connections completing in both directions, most runs hung).
    let n = 6;
    for _ in 0..5 {
        let (out, _) = run(&["-n", &n.to_string(), "--timeout", "20"], "all_connect", &[]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
        for r in 0..n {
            let want = format!("rank {r}: {} connections", n - 1);
            assert!(stdout.contains(&want), "{want:?} missing:\n{stdout}");
        }
        assert!(
            !stderr.contains("WARN"),
            "a routine race is not worth a warning: {stderr}"
        );
    }
}

#[test]
fn every_pair_of_256_ranks_on_one_host_connects() {
    // 128 or 256 ranks on a machine of a few CPUs: each runs every hundredth turn, so a
    // handshake takes seconds. Fixed 1 s handshake deadlines failed such jobs, and the
    // failures then hung them; all pairs connecting at once overflowed the sockets'
    // backlogs; and preparing every pair's shared memory cleared gigabytes of pages.
    for n in [128, 256] {
        let (out, took) = run(&["-n", &n.to_string(), "--timeout", "240"], "all_connect", &[]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{n} ranks, {took:?}\nstderr: {stderr}");
        for r in 0..n {
            let want = format!("rank {r}: {} connections", n - 1);
            assert!(stdout.contains(&want), "{want:?} missing");
        }
        assert!(!stderr.contains("WARN"), "{n} ranks: {stderr}");
        eprintln!("{n} ranks connected every pair in {took:?}");
    }
}

#[test]
fn a_rank_that_gives_up_on_a_peer_tells_it() {
    // Rank 1 makes no progress for 3 s; rank 0 gives up on it after 0.6 s. Rank 1 must
    // then fail its receive from rank 0 with rank 0's reason, not wait for ever. Over TCP:
    // a node-local peer that joined the node's shared memory at start-up is reached
    // without its help (the ring takes the message).
    let start = Instant::now();
    let out = Command::new(pontoon())
        .args([
            "run",
            "-n",
            "2",
            "--timeout",
            "30",
            "-x",
            "PONTOON_TRANSPORTS=tcp",
        ])
        .arg(example("late_peer"))
        .env("PONTOON_ATTEMPT_TIMEOUT_MS", "200")
        .env("PONTOON_CONNECT_TIMEOUT_MS", "600")
        .output()
        .expect("pontoon runs");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{:?}\n{stdout}\n{stderr}", start.elapsed());
    assert!(
        stdout.contains(
            "rank 0: send to rank 1 failed: rank 1 failed: no connection with rank 1 within 600 ms"
        ),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("rank 1: receive from rank 0 failed: rank 0 failed: rank 0 could not reach this rank"),
        "{stdout}"
    );
    // One host: neither NATs nor relays are the answer.
    assert!(stdout.contains("runs on this host"), "{stdout}");
    assert!(
        !stdout.contains("relay") && !stdout.contains("private network"),
        "{stdout}"
    );
}

#[test]
fn a_job_wide_failure_is_printed_once_by_the_launcher() {
    let (out, took) = run(&["-n", "4", "--timeout", "30"], "abort_one", &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(
        stderr.matches("rank 1 gives up").count(),
        1,
        "the launcher says it; the waiting ranks do not repeat it:\n{stderr}"
    );
    assert!(
        stderr.contains("pontoon run: rank 1 called abort (code 5)"),
        "{stderr}"
    );
}

#[test]
fn a_message_larger_than_two_gib_arrives_intact() {
    let (out, _) = run(&["-n", "2", "--timeout", "120"], "big_message", &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.contains("sent 2147487744 bytes") && stdout.contains("intact"),
        "{stdout}"
    );
}

#[test]
fn bind_to_core_pins_each_rank_to_one_cpu() {
    let (out, _) = run(
        &["-n", "2", "--bind-to", "core", "--timeout", "30"],
        "show_binding",
        &[],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for r in 0..2 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("rank {r} cpus ")))
            .expect("rank reported");
        let cpus = line.rsplit(' ').next().unwrap_or_default();
        assert!(
            cpus.parse::<usize>().is_ok(),
            "rank {r} is pinned to one CPU: {line}"
        );
        assert_eq!(cpus.parse::<usize>().unwrap(), r % ncpus, "{line}");
    }
    // Without the flag, the kernel places ranks: the list keeps every CPU (e.g. "0-1").
    let (out, _) = run(&["-n", "1", "--timeout", "30"], "show_binding", &[]);
    let unpinned = text(&out.stdout);
    assert!(
        ncpus == 1 || unpinned.contains('-') || unpinned.contains(','),
        "{unpinned}"
    );
}

/// A TCP lane's caps are measured (TCP_INFO), not the transport's starting figures:
/// doctor reports half the smallest round trip and the delivery rate.
#[test]
fn doctor_reports_measured_latency_and_bandwidth_of_tcp_lanes() {
    let out = Command::new(pontoon())
        .args(["run", "-n", "2", "--timeout", "60", "-x", "PONTOON_TRANSPORTS"])
        .env("PONTOON_TRANSPORTS", "tcp")
        .arg(pontoon())
        .args(["doctor", "--json"])
        .output()
        .expect("pontoon runs");
    let stdout = succeeded(&out);
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("doctor --json");
    // `transport::tcp::tcp_caps` before any measurement (measured figures are rounded
    // to 1/16 of a power of two, which this is not).
    let starting = 10_000;
    for r in report["ranks"].as_array().unwrap() {
        for p in r["peers"].as_array().unwrap() {
            let lane = &p["lanes"][0];
            assert_eq!(lane["transport"], "tcp", "{lane}");
            let latency = lane["latency_ns"].as_u64().unwrap();
            assert!(latency > 0 && latency != starting, "not measured: {lane}");
            assert!(latency < 1_000_000, "a loopback round trip of over 2 ms: {lane}");
            // PONTOON_ENCRYPT=wan (the default) leaves a LAN's lanes as they are.
            assert_eq!(lane["sealed"], false, "{lane}");
        }
    }
}

/// `pontoon doctor --json` lists, for each pair, every transport that carries no lane
/// and why: those PONTOON_TRANSPORTS leaves out (and what to set), and those the ranks'
/// placement rules out (raw Ethernet between ranks of one host), marked expected.
#[test]
fn doctor_lists_every_refused_transport_per_pair_and_why() {
    let doctor = |transports: &str| {
        let out = Command::new(pontoon())
            .args(["run", "-n", "2", "--timeout", "60", "-x", "PONTOON_TRANSPORTS"])
            .env("PONTOON_TRANSPORTS", transports)
            .arg(pontoon())
            .args(["doctor", "--json"])
            .output()
            .expect("pontoon runs");
        let report: serde_json::Value = serde_json::from_str(&succeeded(&out)).expect("doctor --json");
        let peers: Vec<serde_json::Value> = report["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["peers"].as_array().unwrap().clone())
            .collect();
        assert_eq!(peers.len(), 2, "{report:#}");
        peers
    };
    for p in doctor("tcp") {
        assert_eq!(p["path"]["transport"], "tcp", "{p:#}");
        assert_eq!(refusal(&p, "tcp"), None, "TCP carries the lane: {p:#}");
        for other in ["shm", "eth"] {
            let r = refusal(&p, other).unwrap_or_else(|| panic!("{other} is not listed: {p:#}"));
            assert_eq!(r["why"], "not in PONTOON_TRANSPORTS=tcp", "{r}");
            assert_eq!(r["help"], format!("add `{other}` to PONTOON_TRANSPORTS"), "{r}");
            assert_eq!(r["expected"], false, "{r}");
        }
    }
    for p in doctor("shm,tcp,eth") {
        assert_eq!(p["path"]["transport"], "shm", "{p:#}");
        // The one lane carries everything (`proto::caps::plan`).
        assert_eq!(p["path"]["carries"], "eager + bulk", "{p:#}");
        assert_eq!(
            p["refused"].as_array().unwrap().len(),
            1,
            "only raw Ethernet: {p:#}"
        );
        let eth = refusal(&p, "eth").expect("raw Ethernet is listed");
        assert!(
            eth["why"].as_str().unwrap().contains("runs on this node"),
            "{eth}"
        );
        assert_eq!(eth["expected"], true, "{eth}");
    }
}

/// Three ranks with the variables `settings` (`-x NAME=VALUE`): `pontoon doctor --json`,
/// whose every peer of every rank goes to `check`, then the C point-to-point programs.
fn doctor_then_p2p(settings: &[String], mut check: impl FnMut(&serde_json::Value)) {
    let run = |program: &[&std::ffi::OsStr]| {
        let mut cmd = Command::new(pontoon());
        cmd.args(["run", "-n", "3", "--timeout", "60"]);
        for s in settings {
            cmd.args(["-x", s]);
        }
        succeeded(&cmd.args(program).output().expect("pontoon runs"))
    };
    let pontoon = pontoon();
    let doctor = run(&[pontoon.as_os_str(), "doctor".as_ref(), "--json".as_ref()]);
    let report: serde_json::Value = serde_json::from_str(&doctor).expect("doctor --json");
    for r in report["ranks"].as_array().unwrap() {
        for p in r["peers"].as_array().unwrap() {
            check(p);
        }
    }
    run(&[c_program("p2p").as_os_str()]);
}

#[test]
fn every_tcp_lane_is_sealed_with_encrypt_all_and_the_programs_pass() {
    for (encrypt, sealed) in [("all", true), ("none", false)] {
        let settings = [
            "PONTOON_TRANSPORTS=tcp".to_string(),
            format!("PONTOON_ENCRYPT={encrypt}"),
        ];
        doctor_then_p2p(&settings, |p| {
            for lane in p["lanes"].as_array().unwrap() {
                assert_eq!(lane["sealed"], sealed, "PONTOON_ENCRYPT={encrypt}: {lane}");
            }
        });
    }
}

/// Ranks of one node read each other's messages in one copy where the kernel lets them
/// (as root it does): by default (`auto`) those behind a backed-up ring, with `on` every
/// rendezvous message too; doctor says so for each shared-memory lane, and not with
/// `off`. The C point-to-point programs, with their 8 MiB message and a window of
/// 32 KiB ones, pass every way.
#[test]
fn shared_memory_lanes_read_large_messages_in_one_copy_and_the_programs_pass() {
    let root = rustix::process::geteuid().is_root();
    for single_copy in ["auto", "on", "off"] {
        doctor_then_p2p(&[format!("PONTOON_SINGLE_COPY={single_copy}")], |p| {
            let lane = &p["lanes"][0];
            assert_eq!(lane["transport"], "shm", "{lane}");
            if single_copy == "off" {
                assert_eq!(lane["single_copy"], false, "{lane}");
            } else if root {
                assert_eq!(lane["single_copy"], true, "{lane}");
            } else {
                eprintln!(
                    "not root: one copy is as ptrace allows here ({})",
                    lane["single_copy"]
                );
            }
        });
    }
}
