//! Raw-Ethernet lanes between testbed hosts (root only; skipped with a message
//! otherwise): they come up next to TCP on a shared segment, they alone carry
//! the C programs, and every payload arrives over a segment that loses and reorders.

mod common;

use common::{c_program, is_root, pontoon, preset, refusal, text, Bed};
use testbed::PresetOptions;

fn run(bed: &Bed, transports: &str, prog: &std::path::Path) -> (bool, String) {
    let out = bed
        .pontoon()
        .args(["run", "--testbed", &bed.name, "-n", "2", "--timeout", "60"])
        .args(["-x", &format!("PONTOON_TRANSPORTS={transports}")])
        // A SYN lost on the lossy segment costs TCP a second: the control connection
        // to the launcher must outlast that.
        .args(["-x", "PONTOON_ATTEMPT_TIMEOUT_MS=5000"])
        .arg(prog)
        .output()
        .expect("pontoon runs");
    (
        out.status.success(),
        format!("{}{}", text(&out.stdout), text(&out.stderr)),
    )
}

/// Two hosts on one segment of `mtu` bytes.
fn two_hosts(mtu: u32) -> Bed {
    Bed::up(&preset(
        "lan",
        PresetOptions {
            nodes: Some(2),
            mtu,
            ..PresetOptions::default()
        },
    ))
}

/// `pontoon doctor --json` on both hosts with every transport allowed, started through
/// `wrapper` (a command that runs the rest of its arguments); its report.
fn doctor(bed: &Bed, wrapper: &[&str]) -> serde_json::Value {
    let out = bed
        .pontoon()
        .args([
            "run",
            "--testbed",
            &bed.name,
            "-n",
            "2",
            "-x",
            "PONTOON_TRANSPORTS=all",
            "--",
        ])
        .args(wrapper)
        .arg(pontoon())
        .args(["doctor", "--json"])
        .output()
        .expect("doctor runs");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor's JSON ({e}): {}", text(&out.stderr)))
}

#[test]
fn an_eth_lane_comes_up_beside_tcp_on_one_segment() {
    if !is_root() {
        return;
    }
    let report = doctor(&two_hosts(1500), &[]);
    for r in report["ranks"].as_array().expect("ranks") {
        for p in r["peers"].as_array().expect("peers") {
            let lanes: Vec<&str> = p["lanes"]
                .as_array()
                .expect("lanes")
                .iter()
                .filter_map(|l| l["transport"].as_str())
                .collect();
            assert!(lanes.contains(&"tcp") && lanes.contains(&"eth"), "{lanes:?}");
            let eth = p["lanes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["transport"] == "eth")
                .unwrap();
            assert_eq!(eth["class"], "same-segment", "{eth:#}");
            // Which lane carries eager messages depends on the round trips measured so
            // far (`proto::caps::plan`, tested in the simulator), not asserted here.
        }
    }
}

#[test]
fn c_programs_pass_over_raw_ethernet_alone_also_with_loss_and_reordering() {
    if !is_root() {
        return;
    }
    let programs: Vec<_> = ["p2p", "coll", "nbc", "types", "cancel"]
        .iter()
        .map(|n| (*n, c_program(n)))
        .collect();
    let clean = two_hosts(9000);
    for (name, exe) in &programs {
        let (ok, out) = run(&clean, "eth", exe);
        assert!(
            ok && out.contains(&format!("{name} OK on 2 ranks")),
            "{name}: {out}"
        );
    }
    // Small messages on the raw lane, larger ones on TCP: a CANCEL may overtake its
    // message there, and must withdraw it when it comes.
    let (ok, out) = run(&clean, "eth,tcp", &programs[4].1);
    assert!(
        ok && out.contains("cancel OK on 2 ranks"),
        "cancel over eth and tcp: {out}"
    );
    drop(clean);
    for loss in ["1.0", "5.0"] {
        // Reordered frames are sent at once, overtaking the ones the emulator delays.
        let topo = format!(
            "[[segment]]\nname = \"lan\"\nipv4 = \"10.9.0.0/24\"\nmtu = 1500\n\n[segment.wan]\n\
             delay_ms = 0.1\njitter_ms = 0.0\nloss_pct = {loss}\nreorder_pct = {loss}\n\n\
             [[host]]\nname = \"x1\"\n\n[[host.nic]]\nsegment = \"lan\"\nindex = 1\n\n\
             [[host]]\nname = \"x2\"\n\n[[host.nic]]\nsegment = \"lan\"\nindex = 2\n"
        );
        let lossy = Bed::up(&testbed::Topology::from_toml(&topo).expect("topology"));
        for (name, exe) in &programs[..2] {
            let (ok, out) = run(&lossy, "eth", exe);
            assert!(
                ok && out.contains(&format!("{name} OK on 2 ranks")),
                "{loss}% loss, {name}: {out}"
            );
        }
    }
}

#[test]
fn without_cap_net_raw_doctor_says_why_and_tcp_carries_everything() {
    if !is_root() {
        return;
    }
    if std::process::Command::new("setpriv")
        .arg("--help")
        .output()
        .is_err()
    {
        eprintln!("skipped: setpriv (util-linux) is not installed");
        return;
    }
    // Dropped from the bounding set, CAP_NET_RAW is gone from root too after exec.
    let report = doctor(&two_hosts(1500), &["setpriv", "--bounding-set", "-net_raw"]);
    for r in report["ranks"].as_array().expect("ranks") {
        let raw = r["raw_ethernet"].as_str().unwrap_or("");
        assert!(raw.starts_with("off:") && raw.contains("CAP_NET_RAW"), "{raw}");
        for p in r["peers"].as_array().expect("peers") {
            assert_eq!(p["ok"], true, "{p:#}");
            assert_eq!(p["path"]["transport"], "tcp");
            // The pair lists raw Ethernet as refused, with what would help.
            let eth =
                refusal(p, "eth").unwrap_or_else(|| panic!("raw Ethernet is not listed as refused: {p:#}"));
            assert!(
                eth["why"].as_str().unwrap().contains("no raw-Ethernet port"),
                "{eth}"
            );
            assert!(eth["help"].as_str().unwrap().contains("CAP_NET_RAW"), "{eth}");
        }
    }
}
