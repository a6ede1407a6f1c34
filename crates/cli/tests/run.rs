//! `pontoon run` end to end: the real binary, shell-script ranks and the `ctlrank`
//! example (a rank that speaks the control protocol through `runtime::control`).

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Upper bound for any job here; the ones that must end fast assert tighter bounds.
const WATCHDOG: Duration = Duration::from_secs(30);

fn pontoon() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pontoon"));
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("PONTOON_LOG", "warn");
    c
}

/// The `ctlrank` example, which `cargo test` builds next to the test binaries.
fn ctlrank() -> String {
    let exe = std::env::current_exe().unwrap();
    let p: PathBuf = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join("ctlrank");
    assert!(
        p.exists(),
        "{} is missing: run `cargo test -p pontoon-cli` (it builds the examples)",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

struct Done {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

fn reader(mut r: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Waits for `child` (killing it after the watchdog) and collects its output.
fn finish(mut child: Child, started: Instant, out: thread::JoinHandle<String>) -> Done {
    let err = reader(child.stderr.take().unwrap());
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if started.elapsed() > WATCHDOG {
            let _ = child.kill();
            panic!("pontoon run did not end within {WATCHDOG:?}");
        }
        thread::sleep(Duration::from_millis(10));
    };
    let elapsed = started.elapsed();
    Done {
        code: status.code(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        elapsed,
    }
}

fn run(args: &[&str]) -> Done {
    let started = Instant::now();
    let mut child = pontoon().args(args).spawn().unwrap();
    let out = reader(child.stdout.take().unwrap());
    finish(child, started, out)
}

fn sorted_lines(s: &str) -> Vec<&str> {
    let mut v: Vec<&str> = s.lines().collect();
    v.sort();
    v
}

/// Numbers printed after `word ` on any line (the scripts print `pid $$`, `child $!`).
fn numbers_after(s: &str, word: &str) -> Vec<u32> {
    s.lines()
        .filter_map(|l| l.split(&format!("{word} ")).nth(1))
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

/// State letter and process group of `pid` from /proc, if it exists.
fn stat(pid: u32) -> Option<(char, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid pgrp ...": comm may contain anything, so cut at the last ')'.
    let mut f = s[s.rfind(')')? + 1..].split_whitespace();
    let state = f.next()?.chars().next()?;
    let pgrp = f.nth(1)?.parse().ok()?;
    Some((state, pgrp))
}

/// Every living (not zombie) process on the host whose process group is in `groups`.
fn members_of(groups: &[u32]) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| stat(p).is_some_and(|(st, g)| st != 'Z' && groups.contains(&g)))
        .collect()
}

/// Asserts that no process of the job is left: neither the given processes nor
/// anything in the ranks' process groups.
fn assert_all_gone(pids: &[u32], groups: &[u32]) {
    assert!(!pids.is_empty() && !groups.is_empty(), "the job printed no pids");
    let end = Instant::now() + Duration::from_secs(1);
    loop {
        let alive: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|&p| stat(p).is_some_and(|(st, _)| st != 'Z'))
            .collect();
        let members = members_of(groups);
        if alive.is_empty() && members.is_empty() {
            return;
        }
        assert!(
            Instant::now() < end,
            "left behind: processes {alive:?}, group members {members:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn output_is_forwarded_line_by_line_and_tagged() {
    let script = "echo out $PONTOON_RANK; echo err $PONTOON_RANK >&2; printf 'part %s' $PONTOON_RANK";
    let d = run(&["run", "-n", "2", "--tag-output", "sh", "-c", script]);
    assert_eq!(d.code, Some(0), "{}", d.stderr);
    assert_eq!(
        sorted_lines(&d.stdout),
        ["[0] out 0", "[0] part 0", "[1] out 1", "[1] part 1"]
    );
    assert_eq!(sorted_lines(&d.stderr), ["[0] err 0", "[1] err 1"]);

    let d = run(&["run", "-n", "1", "sh", "-c", "printf 'a\\nb'; printf 'e' >&2"]);
    assert_eq!(
        (d.code, d.stdout.as_str(), d.stderr.as_str()),
        (Some(0), "a\nb", "e")
    );
}

#[test]
fn program_arguments_are_passed_verbatim() {
    let d = run(&["run", "-n", "1", "echo", "-n", "-x", "--timeout", "x y"]);
    assert_eq!(d.code, Some(0), "{}", d.stderr);
    assert_eq!(d.stdout, "-x --timeout x y");
    let d = run(&[
        "run",
        "-n",
        "1",
        "-x",
        "PT_SET=v=1",
        "-x",
        "HOME",
        "sh",
        "-c",
        "echo $PT_SET",
    ]);
    assert_eq!(d.stdout, "v=1\n", "{}", d.stderr);
}

#[test]
fn exit_status_is_the_first_failing_ranks() {
    let d = run(&[
        "run",
        "-n",
        "3",
        "sh",
        "-c",
        "[ $PONTOON_RANK = 1 ] && exit 7; sleep 0.2",
    ]);
    assert_eq!(d.code, Some(7), "{}", d.stderr);
    assert!(d.stderr.contains("pontoon run: rank 1 (pid "), "{}", d.stderr);
    assert!(d.stderr.contains(") exited with code 7"), "{}", d.stderr);
    let d = run(&["run", "-n", "3", "true"]);
    assert_eq!((d.code, d.stderr.as_str()), (Some(0), ""));
}

#[test]
fn a_rank_killed_by_sigkill_ends_the_job_and_leaves_nothing_behind() {
    let script = "echo pid $$; sleep 987 & echo child $!; \
                  if [ $PONTOON_RANK = 1 ]; then sleep 0.3; kill -9 $$; fi; wait";
    let d = run(&["run", "-n", "3", "--tag-output", "sh", "-c", script]);
    assert_eq!(d.code, Some(128 + 9), "{}", d.stderr);
    assert!(d.elapsed < Duration::from_secs(5), "took {:?}", d.elapsed);
    assert!(d.stderr.contains("pontoon run: rank 1 (pid "), "{}", d.stderr);
    assert!(
        d.stderr.contains("was killed by signal 9 (SIGKILL)"),
        "{}",
        d.stderr
    );
    let ranks = numbers_after(&d.stdout, "pid");
    let mut all = numbers_after(&d.stdout, "child");
    assert_eq!((ranks.len(), all.len()), (3, 3), "{}", d.stdout);
    all.extend(&ranks);
    assert_all_gone(&all, &ranks);
}

#[test]
fn ranks_hear_that_a_peer_failed() {
    let d = run(&["run", "-n", "3", "--tag-output", &ctlrank(), "die"]);
    assert_eq!(d.code, Some(137), "{}\n{}", d.stdout, d.stderr);
    assert!(d.elapsed < Duration::from_secs(5), "took {:?}", d.elapsed);
    for r in [0, 2] {
        let want = format!("[{r}] rank {r}: peer 1 failed: was killed by signal 9 (SIGKILL)");
        assert!(d.stdout.contains(&want), "{}", d.stdout);
    }
}

#[test]
fn exiting_without_finalize_is_a_failure() {
    let d = run(&["run", "-n", "2", &ctlrank(), "nofinalize"]);
    assert_eq!(d.code, Some(1), "{}", d.stderr);
    assert!(
        d.stderr.contains("exited without calling finalize"),
        "{}",
        d.stderr
    );
}

#[test]
fn abort_ends_the_job_with_its_code() {
    let d = run(&["run", "-n", "3", &ctlrank(), "abort"]);
    assert_eq!(d.code, Some(7), "{}\n{}", d.stdout, d.stderr);
    assert!(
        d.stderr
            .contains("pontoon run: rank 1 called abort (code 7): giving up"),
        "{}",
        d.stderr
    );
    assert!(d.elapsed < Duration::from_secs(5), "took {:?}", d.elapsed);
}

#[test]
fn key_value_fence_across_four_ranks() {
    let d = run(&["run", "-n", "4", &ctlrank(), "kv"]);
    assert_eq!(d.code, Some(0), "{}\n{}", d.stdout, d.stderr);
    for r in 0..4 {
        assert!(d.stdout.contains(&format!("rank {r} saw 4 keys")), "{}", d.stdout);
        assert!(d.stdout.contains(&format!("rank {r} finalized")), "{}", d.stdout);
    }
}

#[test]
fn intruders_are_refused_and_the_job_completes() {
    let d = run(&["run", "-n", "3", &ctlrank(), "intruder"]);
    assert_eq!(d.code, Some(0), "{}\n{}", d.stdout, d.stderr);
    for line in [
        "intruder: wrong secret refused",
        "intruder: garbage connection closed",
        "intruder: rank out of range refused",
        "intruder: duplicate rank refused",
        "rank 0 saw 3 keys",
        "rank 2 finalized",
    ] {
        assert!(d.stdout.contains(line), "{line:?} missing in\n{}", d.stdout);
    }
    assert!(
        d.stderr.contains("failed authentication (wrong job secret)"),
        "{}",
        d.stderr
    );
    assert!(d.stderr.contains("not a pontoon rank"), "{}", d.stderr);
    // The silent connection rank 0 left open did not delay the end.
    assert!(d.elapsed < Duration::from_secs(4), "took {:?}", d.elapsed);
}

/// Starts a job whose ranks print `pid`/`child` lines, waits for them, then sends
/// `signal` to `pontoon run`.
fn signal_job(script: &str, signal: &str) -> (Done, Vec<u32>, Vec<u32>) {
    let started = Instant::now();
    let mut child = pontoon()
        .args(["run", "-n", "2", "sh", "-c", script])
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let out = thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    let mut seen = String::new();
    while numbers_after(&seen, "child").len() < 2 {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the ranks did not start");
        seen.push_str(&line);
        seen.push('\n');
    }
    let ranks = numbers_after(&seen, "pid");
    let mut all = numbers_after(&seen, "child");
    all.extend(&ranks);
    let sent = Instant::now();
    let st = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let mut d = finish(child, started, out);
    d.elapsed = sent.elapsed();
    (d, all, ranks)
}

#[test]
fn sigterm_to_pontoon_run_ends_every_rank() {
    let (d, all, ranks) = signal_job("echo pid $$; sleep 987 & echo child $!; wait", "-TERM");
    assert_eq!(d.code, Some(128 + 15), "{}", d.stderr);
    assert!(d.stderr.contains("received SIGTERM"), "{}", d.stderr);
    assert!(d.elapsed < Duration::from_secs(5), "took {:?}", d.elapsed);
    assert_all_gone(&all, &ranks);
}

#[test]
fn ranks_ignoring_sigterm_are_killed() {
    let script = "trap '' TERM INT; echo pid $$; sleep 987 & echo child $!; while :; do wait; done";
    let (d, all, ranks) = signal_job(script, "-INT");
    assert_eq!(d.code, Some(128 + 2), "{}", d.stderr);
    assert!(
        d.elapsed >= Duration::from_secs(1),
        "no grace period: {:?}",
        d.elapsed
    );
    assert!(d.elapsed < Duration::from_secs(5), "took {:?}", d.elapsed);
    assert_all_gone(&all, &ranks);
}

#[test]
fn timeout_ends_the_job() {
    let d = run(&[
        "run",
        "-n",
        "2",
        "--timeout",
        "0.5",
        "sh",
        "-c",
        "echo pid $$; sleep 987",
    ]);
    assert_eq!(d.code, Some(124), "{}", d.stderr);
    assert!(
        d.stderr.contains("did not finish within --timeout 500ms"),
        "{}",
        d.stderr
    );
    assert!(d.elapsed < Duration::from_secs(4), "took {:?}", d.elapsed);
    let ranks = numbers_after(&d.stdout, "pid");
    assert_all_gone(&ranks, &ranks);
}

/// Test harnesses (MPICH's test suite among them) give the limit in MPIEXEC_TIMEOUT.
#[test]
fn mpiexec_timeout_is_the_timeout() {
    let started = Instant::now();
    let mut child = pontoon()
        .env("MPIEXEC_TIMEOUT", "0.5")
        .args(["run", "-n", "1", "sleep", "987"])
        .spawn()
        .unwrap();
    let out = reader(child.stdout.take().unwrap());
    let d = finish(child, started, out);
    assert_eq!(d.code, Some(124), "{}", d.stderr);
    assert!(
        d.stderr.contains("did not finish within --timeout 500ms"),
        "{}",
        d.stderr
    );
}

#[test]
fn processes_the_ranks_leave_behind_are_ended() {
    // A daemon that left the rank's process group and ignores SIGTERM.
    let script = "setsid sh -c 'trap \"\" TERM; echo child $$; exec sleep 986' & sleep 0.2; echo pid $$";
    let d = run(&["run", "-n", "2", "sh", "-c", script]);
    assert_eq!(d.code, Some(0), "{}", d.stderr);
    assert!(d.elapsed < Duration::from_secs(4), "took {:?}", d.elapsed);
    let ranks = numbers_after(&d.stdout, "pid");
    let mut all = numbers_after(&d.stdout, "child");
    assert_eq!(all.len(), 2, "{}", d.stdout);
    all.extend(&ranks);
    assert_all_gone(&all, &all);
}

#[test]
fn a_missing_program_is_reported() {
    let d = run(&["run", "-n", "2", "pontoon-no-such-program"]);
    assert_eq!(d.code, Some(127));
    assert!(
        d.stderr.contains("cannot find `pontoon-no-such-program` in PATH"),
        "{}",
        d.stderr
    );
}

#[test]
fn info_lists_transports_parameters_and_launcher_variables() {
    let d = run(&["info"]);
    assert_eq!(d.code, Some(0));
    assert!(d.stdout.contains("transports: shm"), "{}", d.stdout);
    assert!(d.stdout.contains("eth (raw Ethernet"), "{}", d.stdout);
    for name in [
        "PONTOON_EAGER_LIMIT",
        "PONTOON_LOG",
        "PONTOON_RANK",
        "PONTOON_JOB_SECRET",
        "PONTOON_COORD",
    ] {
        assert!(d.stdout.contains(name), "{name} missing:\n{}", d.stdout);
    }
}

/// Runs `script` in a fresh network namespace (needs root); `None` where that is
/// not possible.
fn in_netns(script: &str) -> Option<Done> {
    let ok = Command::new("unshare")
        .args(["-n", "true"])
        .stderr(Stdio::null())
        .status();
    if !ok.is_ok_and(|s| s.success()) {
        eprintln!("skipped: `unshare -n` is not available here (it needs root)");
        return None;
    }
    let started = Instant::now();
    let mut child = Command::new("unshare")
        .args(["-n", "sh", "-c", script])
        .env("PONTOON", env!("CARGO_BIN_EXE_pontoon"))
        .env("CTLRANK", ctlrank())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = reader(child.stdout.take().unwrap());
    Some(finish(child, started, out))
}

#[test]
fn hosts_with_a_single_address_family_work() {
    let job = "\"$PONTOON\" run -n 2 sh -c 'echo $PONTOON_COORD' && \"$PONTOON\" run -n 3 \"$CTLRANK\" kv";
    let v4_only = format!("ip link set lo up && sysctl -qw net.ipv6.conf.lo.disable_ipv6=1 && {job}");
    let v6_only = format!("ip link set lo up && ip addr del 127.0.0.1/8 dev lo && {job}");
    for (script, want) in [(v4_only, "tcp://127.0.0.1:"), (v6_only, "tcp6://[::1]:")] {
        let Some(d) = in_netns(&script) else { return };
        assert_eq!(d.code, Some(0), "{}\n{}", d.stdout, d.stderr);
        let coord: Vec<&str> = d.stdout.lines().filter(|l| l.contains("://")).collect();
        assert_eq!(coord.len(), 2, "{}", d.stdout);
        assert!(
            coord.iter().all(|c| c.starts_with(want) && !c.contains(';')),
            "{coord:?}"
        );
        assert!(d.stdout.contains("rank 2 saw 3 keys"), "{}", d.stdout);
    }
}

/// `pontoon relay` listens where it is told, says so (with the addresses the launcher hands
/// the ranks), and speaks first: a challenge.
#[test]
fn pontoon_relay_listens_and_challenges_whoever_connects() {
    use std::io::{BufRead, BufReader, Read};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pontoon"))
        .args(["relay", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("pontoon relay starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // "pontoon relay: listening on ADDR; reachable at ADDR…", what the launcher reads.
    let listening = line
        .trim()
        .strip_prefix("pontoon relay: listening on ")
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("{line}"));
    let addr: std::net::SocketAddr = listening.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
    let reachable = launch::relays::parse_announcement(line.trim()).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!(reachable, [addr], "a concrete address is announced as it is");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut frame = [0u8; proto::wire::relay::FRAME_LEN];
    s.read_exact(&mut frame).unwrap();
    let f = proto::wire::relay::RelayFrame::new_checked(&frame[..]).unwrap();
    assert!(matches!(
        proto::wire::relay::RelayRepr::parse(&f),
        proto::wire::relay::RelayRepr::Challenge { .. }
    ));
    let _ = child.kill();
    let _ = child.wait();
}
