//! Wire-up across clusters, shown by `pontoon doctor --json` on testbed topologies: which
//! path every pair chose, and every attempt that led there. Needs root.

use serde_json::Value;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use testbed::{PresetOptions, Topology};

mod common;
use common::{example, is_root, pontoon, preset, refusal, text, Bed};

/// Runs `pontoon doctor --json` on every host of the testbed, one rank each (the
/// testbed's forwarding hosts run relays).
fn doctor(bed: &Bed, env: &[(&str, &str)]) -> (Option<i32>, Value, String, Duration) {
    doctor_with(bed, &[], env)
}

/// [`doctor`] with further `pontoon run` options.
fn doctor_with(bed: &Bed, opts: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Value, String, Duration) {
    let n = bed.open().host_names().len().to_string();
    let start = Instant::now();
    let out = bed
        .pontoon()
        .args(["run", "--testbed", &bed.name, "-n", &n, "--timeout", "60"])
        .args(opts)
        .args(
            env.iter()
                .flat_map(|(k, v)| ["-x".to_string(), format!("{k}={v}")]),
        )
        .arg(pontoon())
        .args(["doctor", "--json"])
        .output()
        .expect("pontoon runs");
    let elapsed = start.elapsed();
    let stdout = text(&out.stdout);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("doctor printed no JSON ({e}):\n{stdout}\n{}", text(&out.stderr)));
    (out.status.code(), report, text(&out.stderr), elapsed)
}

/// (from host, to host, peer report) for every ordered pair.
fn pairs(report: &Value, hosts: &[String]) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for r in report["ranks"].as_array().expect("ranks") {
        let from = hosts[r["rank"].as_u64().unwrap() as usize].clone();
        for p in r["peers"].as_array().expect("peers") {
            let to = hosts[p["peer"].as_u64().unwrap() as usize].clone();
            out.push((from.clone(), to, p.clone()));
        }
    }
    out
}

fn cluster(host: &str) -> &str {
    &host[..1]
}

/// Two compute nodes of different clusters (no head among them).
fn computes_apart(from: &str, to: &str) -> bool {
    cluster(from) != cluster(to) && !from.ends_with("head") && !to.ends_with("head")
}

/// The pair's lane through a relay (its first lane), checking that the pair uses it, or
/// a lane punched through the NATs after it: punching may succeed even where the
/// emulated sites are too close to time it (see `punching_upgrades_...`).
fn relayed_lane<'a>(p: &'a Value, kind: &str) -> &'a Value {
    let via = p["path"]["via"]["kind"].as_str().unwrap_or("");
    assert!(via == kind || via == "punched", "{p:#}");
    let lane = &p["lanes"][0];
    assert_eq!(lane["via"]["kind"], kind, "the relayed lane stays open: {p:#}");
    lane
}

/// `two-clusters` without IPv6, `nodes` compute nodes each, the sites `delay_ms` apart.
/// At 10 ms both SYNs of a simultaneous open cross the NATs easily, even with the ranks'
/// timing off by some milliseconds on a machine busy with other tests.
fn nat_clusters(nodes: u16, delay_ms: f64) -> Topology {
    preset(
        "two-clusters",
        PresetOptions {
            nodes: Some(nodes),
            no_ipv6: vec!["a".into(), "b".into()],
            wan: testbed::topology::WanImpairment {
                delay_ms,
                ..Default::default()
            },
            ..PresetOptions::default()
        },
    )
}

/// The TCP lanes of a peer's doctor report (raw-Ethernet lanes, on by default as root,
/// beside them).
fn tcp_lanes(p: &Value) -> Vec<&Value> {
    let lanes = p["lanes"].as_array().expect("lanes");
    lanes.iter().filter(|l| l["transport"] == "tcp").collect()
}

fn ip_of(addr: &str) -> IpAddr {
    addr.parse::<std::net::SocketAddr>().expect("socket address").ip()
}

#[test]
fn two_clusters_connect_over_global_ipv6_and_never_to_the_wrong_node() {
    if !is_root() {
        return;
    }
    let topo: Topology = preset(
        "two-clusters",
        PresetOptions {
            nodes: Some(2),
            docker: true,
            ..PresetOptions::default()
        },
    );
    let bed = Bed::up(&topo);
    let hosts = bed.open().host_names();
    let (code, report, stderr, _) = doctor(&bed, &[]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    let owners = topo.address_owners();
    for (from, to, p) in pairs(&report, &hosts) {
        assert_eq!(p["ok"], true, "{from} -> {to}: {p:#}");
        // Hosts on one segment (a cluster's nodes, the heads on the public one) get a
        // raw-Ethernet lane that may carry the path: checked by MAC in its handshake, it
        // has no address to check here, so the TCP lane beside it is.
        let path = if p["path"]["transport"] == "eth" {
            tcp_lanes(&p)[0]
        } else {
            &p["path"]
        };
        let remote = ip_of(path["remote"].as_str().expect("a path"));
        if path["initiated"] == true {
            assert!(
                owners[&remote].contains(&to),
                "{from} -> {to} over {remote}, which is {:?}",
                owners[&remote]
            );
        }
        for lane in tcp_lanes(&p) {
            let ip = ip_of(lane["remote"].as_str().unwrap());
            assert_ne!(
                ip.to_string(),
                "172.17.0.1",
                "{from} -> {to}: the docker bridge became a lane"
            );
        }
        if cluster(&from) != cluster(&to) {
            assert_eq!(path["class"], "ipv6-global", "{from} -> {to}: {p:#}");
        }
        // The first lane's attempts: up to the one that connected (further lanes follow).
        let all = p["attempts"].as_array().unwrap();
        let upto = all
            .iter()
            .position(|a| a["result"] == "connected")
            .map_or(all.len(), |i| i + 1);
        let attempts = &all[..upto];
        // Best class first; bridge addresses only after every other candidate.
        if let (true, Some(first)) = (cluster(&from) != cluster(&to), attempts.first()) {
            assert_eq!(first["class"], "ipv6-global", "{from} -> {to}: {p:#}");
        }
        let first_bridge = attempts.iter().position(|a| a["bridge"] == true);
        if let Some(b) = first_bridge {
            assert!(
                attempts[b..].iter().all(|a| a["bridge"] == true),
                "{from} -> {to}: {p:#}"
            );
        }
        for a in all {
            let ip = ip_of(a["addr"].as_str().unwrap());
            let connected = a["result"] == "connected";
            if connected {
                assert!(
                    owners[&ip].contains(&to),
                    "{from} -> {to}: connected to {ip}, which is {:?}",
                    owners[&ip]
                );
            }
            if cluster(&from) != cluster(&to) && ip.to_string().starts_with("10.0.0.") {
                assert!(!connected, "{from} -> {to}: used the duplicated {ip}");
            }
        }
    }
}

#[test]
fn without_ipv6_and_without_relays_pairs_across_nat_fail_within_the_deadline_and_clusters_still_work() {
    if !is_root() {
        return;
    }
    let topo = nat_clusters(1, 0.0);
    let bed = Bed::up(&topo);
    let hosts = bed.open().host_names();
    let (code, report, stderr, elapsed) =
        doctor_with(&bed, &["--no-relays"], &[("PONTOON_CONNECT_TIMEOUT_MS", "3000")]);
    assert_eq!(code, Some(2), "doctor reports failed pairs: {report:#}\n{stderr}");
    assert!(elapsed < Duration::from_secs(20), "the job hung: {elapsed:?}");
    for (from, to, p) in pairs(&report, &hosts) {
        let computes_apart = computes_apart(&from, &to);
        if computes_apart {
            assert_eq!(
                p["ok"], false,
                "{from} -> {to} cannot work without IPv6 or a relay: {p:#}"
            );
            let error = p["error"].as_str().unwrap();
            assert!(
                error.contains("within 3000 ms")
                    && error.contains("registered with no relay")
                    && error.contains("pontoon run --relay HOST"),
                "{error}"
            );
            // The coordinator's view explains it: one of the two is behind its head's NAT.
            assert!(error.contains("behind NAT"), "{error}");
            // Doctor lists TCP as refused: what was tried, and what would help.
            let tcp = refusal(&p, "tcp").unwrap_or_else(|| panic!("TCP is not listed as refused: {p:#}"));
            assert!(
                tcp["help"].as_str().unwrap().contains("pontoon run --relay HOST"),
                "{tcp}"
            );
        } else {
            // Inside a cluster; or a head and a node across the NAT: the node connects out
            // to the head's public address, and the head waits for it instead of giving up.
            assert_eq!(p["ok"], true, "{from} -> {to}: {p:#}");
        }
    }
    // The coordinator runs on the first host. Compute nodes of the other cluster reach it
    // through their head's NAT, and are seen with the head's public address; every other
    // rank reaches it directly.
    let coordinator_cluster = cluster(&hosts[0]);
    for r in report["ranks"].as_array().expect("ranks") {
        let host = &hosts[r["rank"].as_u64().unwrap() as usize];
        let nat = r["nat"].as_str();
        if cluster(host) != coordinator_cluster && !host.ends_with("head") {
            let head = topo.host(&format!("{}-head", cluster(host))).unwrap();
            let head_addrs: Vec<IpAddr> = topo
                .nics(head)
                .into_iter()
                .flat_map(|n| n.addrs)
                .map(|(a, _)| a)
                .collect();
            let ip: IpAddr = nat
                .unwrap_or_else(|| panic!("{host} is behind a NAT: {r:#}"))
                .parse()
                .unwrap();
            assert!(
                head_addrs.contains(&ip),
                "{host} seen as {ip}, not as its head: {r:#}"
            );
        } else {
            assert_eq!(nat, None, "{host} reaches the coordinator directly: {r:#}");
        }
    }
}

/// The example ring around one rank on every host of the testbed.
fn ring_on_every_host(bed: &Bed, n: usize) {
    let out = bed
        .pontoon()
        .args([
            "run",
            "--testbed",
            &bed.name,
            "-n",
            &n.to_string(),
            "--timeout",
            "60",
        ])
        .arg(example("ring"))
        .output()
        .expect("pontoon runs");
    let stdout = text(&out.stdout);
    let sum = n * (n - 1) / 2;
    assert!(
        out.status.success() && stdout.contains(&format!("token came back to rank 0 with value {sum}")),
        "{stdout}\n{}",
        text(&out.stderr)
    );
}

/// The addresses of `host` in the topology.
fn addrs_of(topo: &Topology, host: &str) -> Vec<IpAddr> {
    let h = topo.host(host).expect("a host of the topology");
    topo.nics(h)
        .into_iter()
        .flat_map(|n| n.addrs)
        .map(|(a, _)| a)
        .collect()
}

#[test]
fn without_ipv6_relays_on_the_heads_carry_every_pair_across_nat() {
    if !is_root() {
        return;
    }
    // An easy NAT and a hard one (a random port per connection): a relayed path does not
    // care which.
    for nat in [testbed::NatMode::Masquerade, testbed::NatMode::FullyRandom] {
        relays_carry_every_pair(nat);
    }
}

fn relays_carry_every_pair(nat: testbed::NatMode) {
    let topo = preset(
        "two-clusters",
        PresetOptions {
            docker: true,
            no_ipv6: vec!["a".into(), "b".into()],
            nat,
            ..PresetOptions::default()
        },
    );
    let bed = Bed::up(&topo);
    let hosts = bed.open().host_names();
    let (code, report, stderr, _) = doctor(&bed, &[]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    // Every rank is registered with the relay of its own cluster's head; a compute node
    // with no other (the other head sees it through its NAT).
    for r in report["ranks"].as_array().unwrap() {
        let host = &hosts[r["rank"].as_u64().unwrap() as usize];
        let relays: Vec<&str> = r["relays"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let head = addrs_of(&topo, &format!("{}-head", cluster(host)));
        assert!(
            relays
                .iter()
                .any(|r| r.split(' ').any(|a| head.contains(&ip_of(a)))),
            "{host} is not registered with its head's relay: {relays:?}"
        );
        if !host.ends_with("head") {
            assert_eq!(relays.len(), 1, "{host}: {relays:?}");
        }
    }
    for (from, to, p) in pairs(&report, &hosts) {
        assert_eq!(p["ok"], true, "{from} -> {to}: {p:#}");
        if !computes_apart(&from, &to) {
            continue;
        }
        // Seed 001's nat-proxy: out through the own NAT, in through the relay on the
        // head of the side that accepted the stream; never a wrong node.
        let lane = relayed_lane(&p, "nat-proxy");
        let relay = ip_of(lane["via"]["relays"][0].as_str().expect("the relay"));
        let accepting = if lane["initiated"] == true { &to } else { &from };
        let head = addrs_of(&topo, &format!("{}-head", cluster(accepting)));
        assert!(head.contains(&relay), "{from} -> {to} through {relay}: {p:#}");
        for a in p["attempts"].as_array().unwrap() {
            if a["result"] == "connected" {
                assert!(
                    a["via"] == "nat-proxy" || a["via"] == "punched",
                    "{from} -> {to}: {p:#}"
                );
            }
        }
        // A NAT that picks a random port for every connection cannot be punched: the
        // rank that would lead says so, and does not try.
        if nat == testbed::NatMode::FullyRandom && lane["initiated"] == true {
            assert_eq!(p["path"]["via"]["kind"], "nat-proxy", "{from} -> {to}: {p:#}");
            let why = p["punch"].as_str().unwrap_or_default();
            assert!(why.contains("does not keep ports"), "{from} -> {to}: {p:#}");
        }
    }
    ring_on_every_host(&bed, hosts.len());
}

#[test]
fn punching_upgrades_every_pair_across_nat_to_a_direct_lane_over_a_wan() {
    if !is_root() {
        return;
    }
    // (On the testbed's default zero-delay link the SYNs cannot be timed to cross within
    // the ~20 µs between the heads, and the relay carries on.)
    let topo = nat_clusters(2, 10.0);
    let bed = Bed::up(&topo);
    let hosts = bed.open().host_names();
    let (code, report, stderr, _) = doctor(&bed, &[]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    for (from, to, p) in pairs(&report, &hosts) {
        assert_eq!(p["ok"], true, "{from} -> {to}: {p:#}");
        if !computes_apart(&from, &to) {
            continue;
        }
        // Started through the relay, then a direct lane through both NATs, which carries
        // the traffic; the relayed lane stays as a fallback.
        let path = &p["path"];
        assert_eq!(path["via"]["kind"], "punched", "{from} -> {to}: {p:#}");
        assert_eq!(
            path["via"]["relays"],
            serde_json::json!([]),
            "{from} -> {to}: {p:#}"
        );
        let remote = ip_of(path["remote"].as_str().unwrap());
        let far_head = addrs_of(&topo, &format!("{}-head", cluster(&to)));
        assert!(
            far_head.contains(&remote),
            "straight to the far NAT: {from} -> {to}: {p:#}"
        );
        relayed_lane(&p, "nat-proxy");
        assert_eq!(p["punch"], Value::Null, "{from} -> {to}: {p:#}");
    }
    ring_on_every_host(&bed, hosts.len());
    // Punching can be turned off: the relay then carries every pair.
    let (code, report, stderr, _) = doctor(&bed, &[("PONTOON_PATHS", "direct,nat-proxy,two-proxy")]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    for (from, to, p) in pairs(&report, &hosts) {
        if computes_apart(&from, &to) {
            assert_eq!(p["path"]["via"]["kind"], "nat-proxy", "{from} -> {to}: {p:#}");
        }
    }
}

#[test]
fn with_no_outbound_nat_two_relays_carry_every_pair_and_the_coordinator() {
    if !is_root() {
        return;
    }
    // The heads let nothing of their compute nodes out: a node reaches its own segment
    // and its head, nothing else — not the coordinator on a-head for cluster b, not the
    // other head's relay. Its own head's relay passes every stream on (PACX-MPI's scheme).
    let topo = preset(
        "two-clusters",
        PresetOptions {
            nodes: Some(2),
            no_ipv6: vec!["a".into(), "b".into()],
            nat: testbed::NatMode::Blocked,
            ..PresetOptions::default()
        },
    );
    let bed = Bed::up(&topo);
    let hosts = bed.open().host_names();
    let (code, report, stderr, _) = doctor(&bed, &[]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    for (from, to, p) in pairs(&report, &hosts) {
        assert_eq!(p["ok"], true, "{from} -> {to}: {p:#}");
        let computes_apart = computes_apart(&from, &to);
        if !computes_apart {
            continue;
        }
        let via = &p["path"]["via"];
        assert_eq!(via["kind"], "two-proxy", "{from} -> {to}: {p:#}");
        let relays: Vec<IpAddr> = via["relays"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| ip_of(r.as_str().unwrap()))
            .collect();
        let head_of = |h: &str| addrs_of(&topo, &format!("{}-head", cluster(h)));
        if p["path"]["initiated"] == true {
            // Ours first, then the one at the peer's site.
            assert_eq!(relays.len(), 2, "{from} -> {to}: {p:#}");
            assert!(head_of(&from).contains(&relays[0]), "{from} -> {to}: {p:#}");
            assert!(head_of(&to).contains(&relays[1]), "{from} -> {to}: {p:#}");
        } else {
            // The relay that connected in is the one on our own head.
            assert!(head_of(&from).contains(&relays[0]), "{from} -> {to}: {p:#}");
        }
    }
    // Cluster b reached the coordinator (on a-head) only through b-head's relay: the
    // coordinator saw its connections come from b-head.
    let b_head = addrs_of(&topo, "b-head");
    for r in report["ranks"].as_array().unwrap() {
        let host = &hosts[r["rank"].as_u64().unwrap() as usize];
        if host.starts_with("b-c") {
            let nat: IpAddr = r["nat"].as_str().expect("seen through its head").parse().unwrap();
            assert!(b_head.contains(&nat), "{host}: {r:#}");
        }
    }
    ring_on_every_host(&bed, hosts.len());
}

#[test]
fn an_ipv4_only_site_and_an_ipv6_only_site_meet_through_dual_stack_relays() {
    if !is_root() {
        return;
    }
    // docs/testbed/three-sites.toml: an IPv4-only cluster behind NAT, an IPv6-only site and
    // a dual-stack one. Nodes of the first two share no address family at all.
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/testbed/three-sites.toml");
    let topo = Topology::from_toml(&std::fs::read_to_string(file).unwrap()).unwrap();
    let bed = Bed::up(&topo);
    let hosts = bed.open().host_names();
    let (code, report, stderr, _) = doctor(&bed, &[]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    let site = |h: &str| h.split('-').next().unwrap().to_string();
    for (from, to, p) in pairs(&report, &hosts) {
        assert_eq!(p["ok"], true, "{from} -> {to}: {p:#}");
        let (a, b) = (site(&from), site(&to));
        let nodes = from.contains("-c") && to.contains("-c");
        if nodes && ((a == "v4" && b == "v6") || (a == "v6" && b == "v4")) {
            let via = &relayed_lane(&p, "nat-proxy")["via"];
            // One hop through a dual-stack relay on a gateway: the one at the target's site,
            // or the requester's own when the target registered there too (an IPv6-only node
            // reaches v4-head's relay over routed IPv6, without NAT).
            let relay = ip_of(via["relays"][0].as_str().unwrap());
            let gateways = ["v4-head", "v6-gw", "ds-gw"].map(|g| addrs_of(&topo, g));
            assert!(
                gateways.iter().any(|g| g.contains(&relay)),
                "{from} -> {to}: {p:#}"
            );
        }
    }
    ring_on_every_host(&bed, hosts.len());
}

#[test]
fn a_hostfile_marks_the_relays_and_a_relay_only_head_takes_no_rank() {
    if !is_root() {
        return;
    }
    let topo = nat_clusters(1, 0.0);
    let bed = Bed::up(&topo);
    let hostfile = "a-head slots=0 relay\na-c1\nb-head slots=0 relay\nb-c1\n";
    let out = bed
        .run_inside("a-head", hostfile)
        .args(["-n", "2"])
        .arg(pontoon())
        .args(["doctor", "--json"])
        .output()
        .expect("pontoon runs");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let report: Value = serde_json::from_str(&stdout).expect("JSON");
    let hosts = ["a-c1".to_string(), "b-c1".to_string()];
    for r in report["ranks"].as_array().unwrap() {
        assert_eq!(r["host"], hosts[r["rank"].as_u64().unwrap() as usize], "{r:#}");
    }
    for (_, _, p) in pairs(&report, &hosts) {
        relayed_lane(&p, "nat-proxy");
    }
}

#[test]
fn known_sites_skip_foreign_private_addresses_and_the_policy_hides_bridges() {
    if !is_root() {
        return;
    }
    let topo = preset(
        "two-clusters",
        PresetOptions {
            nodes: Some(1),
            docker: true,
            no_ipv6: vec!["a".into(), "b".into()],
            ..PresetOptions::default()
        },
    );
    let bed = Bed::up(&topo);
    let hosts = bed.open().host_names();
    let lines: Vec<String> = hosts.iter().map(|h| format!("{h} site={}", cluster(h))).collect();
    let out = bed
        .run_inside("a-head", &lines.join("\n"))
        .args(["-n", &hosts.len().to_string()])
        .args([
            "-x",
            "PONTOON_IF_EXCLUDE=docker*",
            "-x",
            "PONTOON_CONNECT_TIMEOUT_MS=3000",
        ])
        .arg(pontoon())
        .args(["doctor", "--json"])
        .output()
        .expect("pontoon runs");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{}", text(&out.stderr));
    let report: Value = serde_json::from_str(&stdout).expect("JSON");
    for r in report["ranks"].as_array().unwrap() {
        let host = r["host"].as_str().unwrap();
        assert_eq!(r["site"].as_str(), Some(cluster(host)), "{r:#}");
        let ifaces = r["interfaces"].as_array().unwrap();
        assert!(
            ifaces.iter().all(|i| !i.as_str().unwrap().starts_with("docker0")),
            "{host}: {ifaces:?}"
        );
    }
    for (from, to, p) in pairs(&report, &hosts) {
        let computes_apart = computes_apart(&from, &to);
        if computes_apart {
            // Only the same private address is left, and the sites say it is not theirs.
            let error = p["error"].as_str().unwrap_or_default();
            assert!(
                p["attempts"].as_array().unwrap().is_empty() && error.contains("PONTOON_SITE"),
                "{p:#}"
            );
        } else {
            assert_eq!(p["ok"], true, "{from} -> {to}: {p:#}");
        }
        for a in p["attempts"].as_array().unwrap() {
            let ip = ip_of(a["addr"].as_str().unwrap());
            let private = matches!(ip, IpAddr::V4(v4) if v4.is_private());
            assert!(
                !(private && cluster(&from) != cluster(&to)),
                "{from} -> {to}: tried {ip} in another site"
            );
        }
    }
}

#[test]
fn two_nics_give_two_lanes_on_separate_nics_and_the_policy_one() {
    if !is_root() {
        return;
    }
    let topo = preset(
        "multinic",
        PresetOptions {
            nodes: Some(3),
            docker: true,
            ..PresetOptions::default()
        },
    );
    let bed = Bed::up(&topo);
    let hosts = bed.open().host_names();
    // The segment an address of `host` is on.
    let segment_of = |host: &str, ip: IpAddr| {
        let h = topo.host(host).unwrap();
        topo.nics(h)
            .into_iter()
            .find(|n| n.addrs.iter().any(|(a, _)| *a == ip))
            .map(|n| n.segment)
            .unwrap_or_else(|| panic!("{ip} is not {host}'s"))
    };
    let (code, report, stderr, _) = doctor(&bed, &[]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    for (from, to, p) in pairs(&report, &hosts) {
        let lanes = tcp_lanes(&p);
        assert_eq!(lanes.len(), 2, "{from} -> {to}: {p:#}");
        // Unasked, one raw-Ethernet lane beside them (both NICs are shared segments).
        let raw = p["lanes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["transport"] == "eth");
        assert_eq!(raw.count(), 1, "{from} -> {to}: {p:#}");
        let mut local_nics: Vec<String> = lanes
            .iter()
            .map(|l| segment_of(&from, ip_of(l["local"].as_str().unwrap())))
            .collect();
        let mut remote_nics: Vec<String> = lanes
            .iter()
            .map(|l| segment_of(&to, ip_of(l["remote"].as_str().unwrap())))
            .collect();
        local_nics.dedup();
        remote_nics.dedup();
        assert_eq!(
            (local_nics.len(), remote_nics.len()),
            (2, 2),
            "{from} -> {to}: one lane per NIC: {p:#}"
        );
    }
    let (code, report, stderr, _) = doctor(&bed, &[("PONTOON_IF_INCLUDE", "eth0")]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    for (from, to, p) in pairs(&report, &hosts) {
        assert_eq!(tcp_lanes(&p).len(), 1, "{from} -> {to}: {p:#}");
    }
}

#[test]
fn one_nic_with_several_addresses_gives_one_lane_per_pair() {
    if !is_root() {
        return;
    }
    // Every host's one NIC has IPv4 and IPv6 from the preset, plus an IPv4 alias and a
    // second IPv6 address added the way an administrator would.
    let bed = Bed::up(&preset(
        "lan",
        PresetOptions {
            nodes: Some(3),
            ..PresetOptions::default()
        },
    ));
    let hosts = bed.open().host_names();
    for (i, host) in hosts.iter().enumerate() {
        for (family, addr) in [
            ("-4", format!("10.0.0.{}/24", 101 + i)),
            ("-6", format!("fd00:0:0:1::{}/64", 101 + i)),
        ] {
            let out = bed
                .pontoon()
                .args([
                    "testbed", "exec", host, "--", "ip", family, "addr", "add", &addr, "dev", "eth0", "nodad",
                ])
                .output()
                .expect("ip runs");
            assert!(out.status.success(), "{host}: {}", text(&out.stderr));
        }
    }
    let (code, report, stderr, _) = doctor(&bed, &[]);
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    for r in report["ranks"].as_array().expect("ranks") {
        // The card lists the one NIC ("eth0: ADDR ADDR …") with all four addresses.
        let eth0: Vec<&str> = r["interfaces"]
            .as_array()
            .expect("interfaces")
            .iter()
            .filter_map(|i| i.as_str()?.strip_prefix("eth0:"))
            .collect();
        assert_eq!(eth0.len(), 1, "{r:#}");
        assert_eq!(eth0[0].split_whitespace().count(), 4, "{r:#}");
    }
    for (from, to, p) in pairs(&report, &hosts) {
        assert_eq!(
            tcp_lanes(&p).len(),
            1,
            "{from} -> {to}: one NIC each, one TCP lane: {p:#}"
        );
    }
}

/// Runs `lane_failover` (with `args`) on a two-host `multinic` testbed: two NICs give two
/// TCP lanes (TCP alone: these are about TCP lanes), and rank 0 breaks one during a 256 MiB
/// transfer (the second, which carries only rendezvous fragments; with `--control` the one
/// of eager messages and control frames). Checks that it completed over the other lane,
/// every byte intact, with one lane left; returns (stdout, stderr).
fn break_a_lane(args: &[&str]) -> (String, String) {
    break_a_lane_of(args, "tcp,shm", 1)
}

/// [`break_a_lane`] with the transports allowed and the lanes left after the break.
fn break_a_lane_of(args: &[&str], transports: &str, left: usize) -> (String, String) {
    let topo = preset(
        "multinic",
        PresetOptions {
            nodes: Some(2),
            ..PresetOptions::default()
        },
    );
    let bed = Bed::up(&topo);
    let out = bed
        .pontoon()
        .args(["run", "--testbed", &bed.name, "-n", "2", "--timeout", "60"])
        .args([
            "-x",
            "PONTOON_LANE_TIMEOUT_MS=1000",
            "-x",
            "PONTOON_LOG=pontoon_runtime=info",
        ])
        .args(["-x", &format!("PONTOON_TRANSPORTS={transports}")])
        .arg(example("lane_failover"))
        .args(args)
        .output()
        .expect("pontoon runs");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "sent 268435456 bytes; receiver says intact; {left} lane(s) left to rank 1"
        )),
        "{stdout}\n{stderr}"
    );
    // The rank that saw the lane fail first says which and that the transfers went on.
    // Usually rank 0, which broke it; a raw lane's stall is found by both ends' timers,
    // and when rank 1's fires first it replays, the transfer ends and rank 1 finalizes,
    // so that rank 0's own detector then finds a peer that is closing (nothing to say).
    let went_on = format!("its transfers go on over the {left} other lane(s)");
    assert!(
        stderr.lines().any(|l| {
            (l.contains("rank 0: lane ") || l.contains("rank 1: lane ")) && l.contains(&went_on)
        }),
        "{stderr}"
    );
    (stdout, stderr)
}

/// The second lane's connection is destroyed (`ss -K`: both ends see it reset).
#[test]
fn a_lane_reset_during_a_transfer_fails_over_to_the_other_nic() {
    if !is_root() {
        return;
    }
    let (stdout, _) = break_a_lane(&[]);
    assert!(
        stdout.contains("during the transfer: ss exit exit status: 0"),
        "{stdout}"
    );
}

/// The second lane's NIC is taken down (`ip link set … down`): no reset reaches either
/// end and TCP would retry for a quarter of an hour. The stall detector sees that
/// nothing is acknowledged (PONTOON_LANE_TIMEOUT_MS, 1 s here) and closes the lane.
#[test]
fn a_nic_taken_down_during_a_transfer_fails_over_to_the_other_nic() {
    if !is_root() {
        return;
    }
    // Every transport allowed: a raw lane carries the control frames, TCP on the other
    // NIC goes down.
    let (stdout, stderr) = break_a_lane_of(&["--down"], "all", 2);
    assert!(
        stdout.contains("down (the second lane") && stdout.contains("ip exit exit status: 0"),
        "{stdout}"
    );
    assert!(
        stderr.contains("the path is dead: no acknowledgement for"),
        "{stderr}"
    );
}

/// The connection of the lane that carries eager messages and control frames is reset
/// while 2,000 small messages are on their way beside the transfer: each end says how
/// many of the other's frames on it arrived, the rest go again on the other lane, and
/// every message arrives, whole and in order (`lane_failover` checks).
#[test]
fn a_reset_control_lane_fails_over_and_what_it_lost_goes_again() {
    if !is_root() {
        return;
    }
    let (stdout, stderr) = break_a_lane(&["--control"]);
    assert!(
        stdout.contains("destroyed the connection of the lane of control frames"),
        "{stdout}"
    );
    assert!(
        stderr.contains("frame(s) of a broken lane to rank 1 go again on lane"),
        "{stderr}"
    );
}

/// With every transport allowed (the default), the raw-Ethernet lane carries eager
/// messages and control frames. Its frames stop arriving (a filter drops EtherType 0x88B5
/// at rank 0's NIC; IP keeps flowing) while 2,000 small messages are on their way beside
/// the transfer: the stall detector closes the raw lane at both ends
/// (PONTOON_LANE_TIMEOUT_MS, as for TCP), what it lost goes again over TCP, and every
/// message arrives, whole and in order.
#[test]
fn a_raw_lane_that_goes_silent_fails_over_to_tcp_and_what_it_lost_goes_again() {
    if !is_root() {
        return;
    }
    let (stdout, stderr) = break_a_lane_of(&["--control", "--block-raw"], "all", 2);
    assert!(
        stdout.contains("blocked raw Ethernet on") && stdout.contains("the lane of control frames"),
        "{stdout}"
    );
    assert!(
        stderr.contains("(eth ")
            && stderr.contains("datagram(s) unacknowledged, the retransmission timer expired"),
        "{stderr}"
    );
    assert!(
        stderr.contains("frame(s) of a broken lane to rank 1 go again on lane"),
        "{stderr}"
    );
}

/// A punched lane whose connection is reset (a NAT that forgot its mapping, say) while
/// messages flow: the relayed lane, kept open, takes over, and what the punched lane lost
/// goes again on it.
#[test]
fn a_broken_punched_lane_falls_back_to_the_relay() {
    if !is_root() {
        return;
    }
    let topo = nat_clusters(1, 10.0);
    let bed = Bed::up(&topo);
    let hostfile = "a-head slots=0 relay\nb-head slots=0 relay\na-c1\nb-c1\n";
    let out = bed
        .run_inside("a-head", hostfile)
        .args(["-n", "2", "-x", "PONTOON_LOG=pontoon_runtime=info"])
        .arg(example("lane_failover"))
        .arg("--control")
        .output()
        .expect("pontoon runs");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The lane of control frames was the punched one: to b-head's public address.
    assert!(
        stdout.contains("destroyed the connection of the lane of control frames (10.0.0.11:")
            && stdout.contains("-> 198.51.100.2:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("receiver says intact; 1 lane(s) left to rank 1"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("frame(s) of a broken lane to rank 1 go again on lane 0"),
        "{stderr}"
    );
}
