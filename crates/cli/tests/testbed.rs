//! `pontoon testbed` for real: every preset is built from network namespaces, its
//! reachability matrix is checked against what the topology means, and everything is
//! torn down without a trace — also after a failure or a crash mid-way. Then the first
//! multi-host jobs: 8 ranks across two NAT'd clusters with the same private subnet.
//!
//! Needs root (CI runs as root); elsewhere every test says why it does nothing.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;
use testbed::probe::Answer;
use testbed::{PresetOptions, Testbed, Topology};

mod common;
use common::{example, is_root, pontoon, preset, small_two_clusters, text, Bed};

/// Nothing of testbed `name` is left: no holder, no named namespace, no state, no
/// process in any of its namespaces, and the root namespace's links are as before.
fn assert_gone(name: &str, root_links_before: &str) {
    assert!(testbed::netns::holders(Some(name)).is_empty(), "holders left");
    assert!(
        testbed::netns::named_netns(Some(name)).is_empty(),
        "namespaces left"
    );
    assert!(!testbed::state_dir(name).exists(), "state directory left");
    assert!(!testbed::list().contains(&name.to_string()), "still listed");
    assert_eq!(
        root_links(),
        root_links_before,
        "links changed in the root namespace"
    );
    let tables = Command::new("nft")
        .args(["list", "tables"])
        .output()
        .expect("nft runs");
    assert!(
        !text(&tables.stdout).contains("pontoon"),
        "nft table in the root namespace"
    );
}

fn root_links() -> String {
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("ip runs");
    let mut names: Vec<String> = text(&out.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1).map(str::to_string))
        .collect();
    names.sort();
    names.join(" ")
}

/// Who should answer `addr` from `from`, from what the topology means: an address the
/// source itself has is its own (docker bridges too); a duplicated private address is
/// the owner's on the source's own segment (NAT never lets it reach the other cluster);
/// a unique address is its owner's — unless the source has no address of that family.
fn expected(topo: &Topology, from: &str, addr: IpAddr) -> Option<String> {
    let owners = &topo.address_owners()[&addr];
    if owners.iter().any(|o| o == from) {
        return Some(from.to_string());
    }
    let src = topo.host(from).expect("host");
    let src_nics = topo.nics(src);
    if !src_nics
        .iter()
        .any(|n| n.addrs.iter().any(|(a, _)| a.is_ipv6() == addr.is_ipv6()))
    {
        return None;
    }
    let src_segments: BTreeSet<&str> = src_nics.iter().map(|n| n.segment.as_str()).collect();
    // Behind a head that lets nothing of its family out: its own segments and the head.
    let gateway = src.gateway.as_deref().and_then(|g| topo.host(g));
    let blocked = gateway.is_some_and(|g| {
        g.masquerades.iter().any(|m| {
            m.mode == testbed::NatMode::Blocked
                && src_nics
                    .iter()
                    .any(|n| n.addrs.iter().any(|(a, _)| m.source.contains(*a)))
                && m.source.addr.is_ipv6() == addr.is_ipv6()
        })
    });
    if blocked {
        let near = |o: &&String| {
            gateway.is_some_and(|g| &g.name == *o)
                || topo.nics(topo.host(o).expect("owner")).iter().any(|n| {
                    src_segments.contains(n.segment.as_str()) && n.addrs.iter().any(|(a, _)| *a == addr)
                })
        };
        return owners.iter().find(near).cloned();
    }
    if owners.len() == 1 {
        return Some(owners[0].clone());
    }
    owners
        .iter()
        .find(|o| {
            let host = topo.host(o).expect("owner");
            topo.nics(host)
                .iter()
                .any(|n| src_segments.contains(n.segment.as_str()) && n.addrs.iter().any(|(a, _)| *a == addr))
        })
        .cloned()
}

fn check_matrix(bed: &Bed) {
    let tb = bed.open();
    let matrix = testbed::probe::matrix(&tb).expect("probes run");
    let mut wrong = Vec::new();
    for ((from, addr), answer) in &matrix {
        let want = expected(&tb.topology, from, *addr);
        let ok = match (&want, answer) {
            (Some(w), Answer::Host(h)) => w == h,
            (None, Answer::Host(_)) => false,
            (None, _) => true,
            (Some(_), _) => false,
        };
        if !ok {
            wrong.push(format!("from {from} to {addr}: expected {want:?}, got {answer}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "reachability differs from the topology:\n{}\n\nwhole matrix:\n{}",
        wrong.join("\n"),
        testbed::probe::render(&matrix)
    );
    assert_eq!(
        matrix.len(),
        tb.topology.hosts.len() * tb.topology.address_owners().len()
    );
}

#[test]
fn every_preset_builds_reaches_what_it_should_and_leaves_nothing() {
    if !is_root() {
        return;
    }
    let before = root_links();
    let small = |nodes| PresetOptions {
        nodes: Some(nodes),
        ..PresetOptions::default()
    };
    let mut wan = small(1);
    wan.wan.delay_ms = 1.0;
    let cases = [
        ("lan", small(3)),
        ("multinic", small(2)),
        (
            "two-clusters",
            PresetOptions {
                docker: true,
                ..small(2)
            },
        ),
        (
            "two-clusters",
            PresetOptions {
                no_ipv6: vec!["b".into()],
                ..small(2)
            },
        ),
        (
            "two-clusters",
            PresetOptions {
                nat: testbed::NatMode::FullyRandom,
                ..small(1)
            },
        ),
        (
            "two-clusters",
            PresetOptions {
                nat: testbed::NatMode::Blocked,
                no_ipv6: vec!["a".into()],
                ..small(2)
            },
        ),
        ("wan", wan),
    ];
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/testbed/mixed-sites.toml");
    let example = Topology::from_toml(&std::fs::read_to_string(example).unwrap()).unwrap();
    let topologies = cases.into_iter().map(|(name, opts)| preset(name, opts));
    for topo in topologies.chain([example]) {
        let bed = Bed::up(&topo);
        check_matrix(&bed);
        let tb_name = bed.name.clone();
        drop(bed);
        assert_gone(&tb_name, &before);
    }
}

#[test]
fn the_duplicated_private_subnet_reaches_the_own_cluster_only() {
    if !is_root() {
        return;
    }
    let bed = Bed::up(&preset("two-clusters", PresetOptions::default()));
    let tb = bed.open();
    let matrix = testbed::probe::matrix(&tb).expect("probes run");
    let answer = |from: &str, to: &str| matrix[&(from.to_string(), to.parse().unwrap())].to_string();
    assert_eq!(answer("a-c1", "10.0.0.12"), "a-c2");
    assert_eq!(answer("b-c1", "10.0.0.12"), "b-c2");
    assert_eq!(answer("a-c1", "2001:db8:b::12"), "b-c2");
    assert_eq!(answer("a-c1", "198.51.100.2"), "b-head");
}

#[test]
fn hosts_have_their_own_name_shm_and_hosts_file() {
    if !is_root() {
        return;
    }
    let bed = Bed::up(&small_two_clusters());
    let exec = |host: &str, script: &str| {
        let out = bed
            .pontoon()
            .args(["testbed", "exec", host, "--", "sh", "-c", script])
            .output()
            .expect("pontoon runs");
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(exec("a-c1", "hostname"), "a-c1\n");
    exec("a-c1", "echo x > /dev/shm/pontoon-test");
    assert_eq!(exec("b-c1", "ls /dev/shm"), "");
    // Nothing else that shared-memory transports (UCX posix, sysv) take for one machine.
    exec("a-c1", "ipcmk -M 4096 >/dev/null");
    assert_eq!(exec("b-c1", "ipcs -m | grep -c 4096 || true"), "0\n");
    let boot_id = "cat /proc/sys/kernel/random/boot_id";
    assert_ne!(exec("a-c1", boot_id), exec("b-c1", boot_id));
    assert_ne!(
        exec("a-c1", boot_id),
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap()
    );
    let hosts = exec("a-c1", "cat /etc/hosts");
    assert!(hosts.contains("2001:db8:b::11\tb-c1"), "{hosts}");
    assert!(!hosts.contains("10.0.0.11\tb-c1"), "{hosts}");
    // The agent behaves like ssh: words joined for a shell, exit status passed on.
    let out = bed
        .pontoon()
        .args([
            "testbed",
            "agent",
            "-x",
            "b-c1",
            "echo",
            "$(hostname)",
            ";",
            "exit",
            "3",
        ])
        .output()
        .expect("pontoon runs");
    assert_eq!(
        (text(&out.stdout).as_str(), out.status.code()),
        ("b-c1\n", Some(3))
    );
    let out = bed
        .pontoon()
        .args(["testbed", "agent", "no-such-host", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(255), "ssh's status for its own failures");
    assert!(
        text(&out.stderr).contains("no-such-host"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_failed_build_and_a_crashed_up_leave_nothing_behind() {
    if !is_root() {
        return;
    }
    let before = root_links();
    // Fails half-way: every host is built when the WAN emulator cannot be started.
    let name = Bed::unique_name();
    let _guard = Bed { name: name.clone() };
    let opts = testbed::UpOptions {
        emulator: vec!["/nonexistent/wan-emulator".into()],
        agent: vec![],
    };
    let err = testbed::up(&name, &preset("wan", PresetOptions::default()), &opts).unwrap_err();
    assert!(
        err.contains("WAN emulator") && err.contains("removed again"),
        "{err}"
    );
    assert_gone(&name, &before);

    // `up` killed mid-way: `down` still finds and removes everything.
    let name = Bed::unique_name();
    let _guard = Bed { name: name.clone() };
    let mut up = Command::new(pontoon())
        .args(["testbed", "up", "lan", "--nodes", "60", "--name", &name])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut waited = Duration::ZERO;
    while testbed::netns::holders(Some(&name)).len() < 5 && waited < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
        waited += Duration::from_millis(5);
    }
    up.kill().unwrap();
    let _ = up.wait();
    assert!(
        !testbed::netns::holders(Some(&name)).is_empty(),
        "the crash left something to find"
    );
    assert!(Testbed::open(Some(&name))
        .unwrap_err()
        .contains("not completely built"));
    let out = Command::new(pontoon())
        .args(["testbed", "down", &name])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_gone(&name, &before);
    // Names that would reach outside the state directory are refused, not removed.
    for bad in ["/", "..", "", "a/b"] {
        let out = Command::new(pontoon())
            .args(["testbed", "down", bad])
            .output()
            .unwrap();
        assert!(
            !out.status.success() && text(&out.stderr).contains("testbed name"),
            "{bad:?}"
        );
    }
    assert!(std::path::Path::new("/run").is_dir());
    // And again: down is idempotent.
    let out = Command::new(pontoon())
        .args(["testbed", "down", &name])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn eight_ranks_across_two_clusters_behind_nat() {
    if !is_root() {
        return;
    }
    let bed = Bed::up(&preset("two-clusters", PresetOptions::default()));
    let run = |prog: &str| {
        bed.pontoon()
            .args([
                "run",
                "--testbed",
                &bed.name,
                "-n",
                "8",
                "--timeout",
                "60",
                "--tag-output",
            ])
            .arg(example(prog))
            .output()
            .expect("pontoon runs")
    };
    let out = run("ring");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("ring of 8 ranks: token came back to rank 0 with value 28"),
        "{stdout}"
    );
    let out = run("all_connect");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert_eq!(stdout.matches(": 7 connections").count(), 8, "{stdout}");
    // One rank per host, round-robin, each on the host it was placed on.
    let out = bed
        .pontoon()
        .args([
            "run",
            "--testbed",
            &bed.name,
            "-n",
            "8",
            "sh",
            "-c",
            "echo $PONTOON_RANK $(hostname) $PONTOON_NODE",
        ])
        .output()
        .unwrap();
    let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    lines.sort();
    let hosts = bed.open().host_names();
    let want: Vec<String> = hosts
        .iter()
        .enumerate()
        .map(|(r, h)| format!("{r} {h} {h}"))
        .collect();
    assert_eq!(lines, want);
}

#[test]
fn hostfile_and_agent_place_ranks_by_slot() {
    if !is_root() {
        return;
    }
    let bed = Bed::up(&small_two_clusters());
    let launch = |prog: &[&str]| {
        let out = bed
            .run_inside("a-head", "# two slots each\na-c1 slots=2\nb-c1:2\n")
            .args(["--map-by", "slot", "-n", "4"])
            .args(prog)
            .output()
            .expect("pontoon runs");
        assert!(
            out.status.success(),
            "{}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    let out = launch(&[
        "sh",
        "-c",
        "echo $PONTOON_RANK $(hostname) $PONTOON_LOCAL_RANK/$PONTOON_LOCAL_SIZE",
    ]);
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, ["0 a-c1 0/2", "1 a-c1 1/2", "2 b-c1 0/2", "3 b-c1 1/2"]);
    let ring = example("ring");
    let out = launch(&[ring.to_str().unwrap()]);
    assert!(
        out.contains("ring of 4 ranks: token came back to rank 0 with value 6"),
        "{out}"
    );
    // Two ranks per host: shared memory within a host, TCP across, in doctor too.
    let out = launch(&[pontoon().to_str().unwrap(), "doctor", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&out).expect("doctor --json");
    for r in report["ranks"].as_array().unwrap() {
        let from = r["rank"].as_u64().unwrap();
        for p in r["peers"].as_array().unwrap() {
            let to = p["peer"].as_u64().unwrap();
            let want = if from / 2 == to / 2 { "shm" } else { "tcp" };
            assert_eq!(p["path"]["transport"], want, "{from} -> {to}: {p:#}");
        }
    }
    let comm_check = example("comm_check");
    let out = launch(&[comm_check.to_str().unwrap(), "100"]);
    assert_eq!(out.matches(": 2 ranks on this node").count(), 4, "{out}");
}
