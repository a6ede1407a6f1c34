//! Seed 003 (MPI over raw Ethernet frames): MPBench's bandwidth, roundtrip and
//! application latency, from 4 B to 1 KiB as in the paper and on to 4 MiB, between two
//! hosts of one L2 segment at MTU 1500 and 9000 — pontoon's raw-Ethernet lane alone and
//! beside TCP (the scoring choosing), pontoon over TCP, MPICH and Open MPI over TCP —,
//! the bare AF_PACKET ping-pong (`ethpp`) as the floor, and the lane's throughput with
//! loss and reordering on the segment.

use std::time::Duration;

use super::{Bed, Claim, Lab};
use crate::programs;
use crate::report::figure as fig;

/// pontoon's settings: the line's label and its `PONTOON_TRANSPORTS`.
const SETTINGS: [(&str, &str); 3] = [("eth", "eth"), ("tcp", "tcp"), ("eth+tcp", "tcp,eth")];

pub fn run(lab: &mut Lab) -> Result<(), String> {
    let quick = lab.quick;
    // The paper's sizes are 4 B to 1 KiB; beyond them, what bulk does.
    let (max, iters, mtus, losses): (u64, &str, &[u32], &[f64]) = if quick {
        (4096, "300", &[1500], &[1.0])
    } else {
        (4 << 20, "2000", &[1500, 9000], &[1.0, 5.0])
    };
    // The 8 B one-way targets from long runs: 2000 round trips of 8 B last a few ms,
    // which the machine's noise moves by 10-20 %.
    let long_iters = if quick { "3000" } else { "30000" };
    let max_text = max.to_string();
    let loss_max = max.min(1 << 20).to_string();
    let anchors = lab.anchors();
    for &mtu in mtus {
        let opts = testbed::PresetOptions {
            nodes: Some(2),
            mtu,
            ..Default::default()
        };
        let bed = lab.bed("lan", &opts, &format!("--nodes 2 --mtu {mtu}"))?;
        for _ in 0..lab.rounds {
            let tests: [(&str, Vec<&str>); 4] = [
                (
                    "roundtrip",
                    vec!["roundtrip", "--max", &max_text, "--iters", iters],
                ),
                (
                    "app-latency",
                    vec!["app-latency", "--max", &max_text, "--iters", iters],
                ),
                // Bandwidth in two parts: each moves a volume its sizes get through.
                (
                    "bw",
                    vec!["bw", "--min", "4", "--max", "512", "--volume", "1048576"],
                ),
                ("bw", vec!["bw", "--min", "1024", "--max", &max_text]),
            ];
            for (table, test) in &tests {
                let table = format!("{table}-{mtu}");
                for (label, transports) in SETTINGS {
                    let env = format!("PONTOON_TRANSPORTS={transports}");
                    let own = ["--systems", "pontoon", "--hosts", "h1,h2", "-x", &env];
                    lab.measure(&table, label, &bed, &[&test[..], &own[..]].concat())?;
                }
                if !anchors.is_empty() {
                    let own = ["--systems", &anchors, "--hosts", "h1,h2"];
                    lab.measure(&table, "tcp", &bed, &[&test[..], &own[..]].concat())?;
                }
                if table.starts_with("roundtrip") {
                    let rows: Vec<(u64, f64)> = ethpp(&bed, 1024, iters)?
                        .into_iter()
                        .map(|(bytes, us)| (bytes, round_trips(us)))
                        .collect();
                    let command = format!(
                        "ethpp client eth0 --max 1024 --iters {iters}  # on h1; ethpp server eth0 on h2"
                    );
                    lab.add_figures(&table, "ethpp", &command, &rows)?;
                }
            }
            if mtu == 1500 {
                let table = "latency8-1500";
                let test = ["latency", "--min", "8", "--max", "8", "--iters", long_iters];
                for (label, transports) in &SETTINGS[..2] {
                    let env = format!("PONTOON_TRANSPORTS={transports}");
                    let own = ["--systems", "pontoon", "--hosts", "h1,h2", "-x", &env];
                    lab.measure(table, label, &bed, &[&test[..], &own[..]].concat())?;
                }
                let rows: Vec<(u64, f64)> = ethpp(&bed, 8, long_iters)?
                    .into_iter()
                    .filter(|&(bytes, _)| bytes == 8)
                    .collect();
                let command = format!(
                    "ethpp client eth0 --max 8 --iters {long_iters}  # on h1; ethpp server eth0 on h2"
                );
                lab.add_figures(table, "ethpp", &command, &rows)?;
            }
        }
    }
    for &loss in losses {
        let opts = testbed::PresetOptions {
            nodes: Some(2),
            wan: testbed::WanImpairment {
                delay_ms: 0.1,
                loss_pct: loss,
                reorder_pct: loss,
                ..Default::default()
            },
            ..Default::default()
        };
        let flags = format!("--nodes 2 --delay-ms 0.1 --loss-pct {loss} --reorder-pct {loss}");
        let bed = lab.bed("lan", &opts, &flags)?;
        let table = format!("bw-loss{loss}");
        for _ in 0..lab.rounds {
            for (label, transports) in &SETTINGS[..2] {
                let env = format!("PONTOON_TRANSPORTS={transports}");
                // 4 MiB per size: TCP backs off hard under loss.
                let args = [
                    "bw",
                    "--min",
                    "1024",
                    "--max",
                    &loss_max,
                    "--volume",
                    "4194304",
                    "--systems",
                    "pontoon",
                    "--hosts",
                    "h1,h2",
                    "-x",
                    &env,
                ];
                lab.measure(&table, label, &bed, &args)?;
            }
        }
    }
    report(lab, mtus, losses)
}

/// One run of the bare AF_PACKET ping-pong between the bed's two hosts: one-way µs by
/// size.
fn ethpp(bed: &Bed, max: u64, iters: &str) -> Result<Vec<(u64, f64)>, String> {
    let exe = programs::build_bare(programs::ETHPP)?;
    let exe = exe.to_str().ok_or("the cache's path is not UTF-8")?;
    let tb = testbed::Testbed::open(Some(&bed.name))?;
    let mut server = tb
        .command("h2", exe)?
        .args(["server", "eth0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start ethpp's server: {e}"))?;
    let mut client = tb.command("h1", exe)?;
    client.args(["client", "eth0", "--max", &max.to_string(), "--iters", iters]);
    let out = programs::finish(client, Duration::from_secs(120), "ethpp");
    let _ = server.kill();
    let _ = server.wait();
    let rows: Vec<(u64, f64)> = out?
        .rows
        .into_iter()
        .filter_map(|(bytes, v)| Some((bytes, *v.first()?)))
        .collect();
    if rows.is_empty() {
        return Err("ethpp printed no figures".into());
    }
    Ok(rows)
}

/// Round trips per second of a one-way time in µs, and back.
fn round_trips(one_way_us: f64) -> f64 {
    1e6 / (2.0 * one_way_us)
}

fn report(lab: &mut Lab, mtus: &[u32], losses: &[f64]) -> Result<(), String> {
    lab.text(
        "## Raw Ethernet against TCP on one segment\n\n\
         Two hosts of a `lan` testbed (veth pairs on a bridge, no rate limit). *eth*: pontoon's \
         raw-Ethernet lane alone (`PONTOON_TRANSPORTS=eth`; AF_PACKET, EtherType 0x88B5, \
         pontoon's reliability layer, every datagram tagged with SipHash-2-4 keyed from the \
         lane's key); *tcp*: pontoon over TCP alone; *eth+tcp*: both lanes, pontoon's \
         scoring choosing per message (`PONTOON_TRANSPORTS=tcp,eth`); *mpich*, *openmpi*: at \
         their defaults, TCP between the hosts; *ethpp*: `bench/sock/ethpp.c`, a \
         busy-polling AF_PACKET ping-pong with no MPI and no reliability, the floor of this \
         path. MPBench's set: roundtrip (transactions/s), application latency (µs in a \
         blocking MPI_Send) and bandwidth.\n",
    );
    lab.show(
        "latency8-1500",
        "8 B one-way latency in long runs, MTU 1500 (the targets' figures)",
        Some("ethpp"),
    )?;
    for &mtu in mtus {
        lab.show(
            &format!("roundtrip-{mtu}"),
            &format!("Roundtrip, MTU {mtu}"),
            Some("tcp"),
        )?;
        lab.show(
            &format!("app-latency-{mtu}"),
            &format!("Application latency, MTU {mtu}"),
            Some("tcp"),
        )?;
        lab.show(
            &format!("bw-{mtu}"),
            &format!("Bandwidth, MTU {mtu}"),
            Some("tcp"),
        )?;
    }
    lab.text(
        "## With loss and reordering on the segment\n\n\
         The testbed's emulator between the two hosts drops the given share of frames and \
         sends as many at once, ahead of the others (which it delays 0.1 ms). Every payload \
         arriving intact and in MPI order is what `crates/cli/tests/eth.rs` checks with the C \
         tests over this lane; here, how much it moves.\n",
    );
    for &loss in losses {
        lab.show(
            &format!("bw-loss{loss}"),
            &format!("Bandwidth with {loss} % loss and reordering, MTU 1500"),
            Some("tcp"),
        )?;
    }
    claims(lab, losses)
}

fn claims(lab: &mut Lab, losses: &[f64]) -> Result<(), String> {
    // The 8 B claims from the long runs (one-way µs); the roundtrip table's short runs
    // give the same figures, noisier.
    let (eth, tcp, bare) = (
        lab.median("latency8-1500", "eth", 8)?,
        lab.median("latency8-1500", "tcp", 8)?,
        lab.median("latency8-1500", "ethpp", 8)?,
    );
    let r = tcp.median / eth.median;
    lab.claim(Claim {
        what: "8 B roundtrip rate, raw Ethernet / TCP".into(),
        paper: "about 2 (Fig. 6.2, small messages)".into(),
        paper_value: Some(2.0),
        ours: r,
        ours_text: format!(
            "{r:.2} ({} / {} round trips/s; one-way {} / {} µs)",
            fig(round_trips(eth.median)),
            fig(round_trips(tcp.median)),
            fig(eth.median),
            fig(tcp.median)
        ),
        verdict: format!(
            "{} The issue's target is one-way ≤ 0.6× TCP, a rate ≥ 1.67×. Both sides pay the \
             kernel's syscalls; the paper's TCP also paid MPICH-1's p4 layer, pontoon's TCP lane \
             busy-polls a nonblocking socket.",
            if r >= 1.8 {
                "Matches."
            } else if r >= 1.67 {
                "Short of the paper's 2, within the issue's target."
            } else {
                "Differs: short of the paper and of the issue's target."
            }
        ),
    });
    let r = eth.median / bare.median;
    lab.claim(Claim {
        what: "8 B one-way latency, pontoon's raw Ethernet / bare AF_PACKET (ethpp)".into(),
        paper: "- (the paper's prototype had no reliability; target ≤ 1.15)".into(),
        paper_value: None,
        ours: r,
        ours_text: format!("{r:.2} ({} / {} µs)", fig(eth.median), fig(bare.median)),
        verdict: format!(
            "{} What pontoon adds to the bare path: MPI matching, the reliability layer's \
             sequence numbers and acknowledgements, the keyed tag on every datagram, and a \
             per-rank BPF filter.",
            if r <= 1.15 {
                "Within the target."
            } else {
                "Above the target."
            }
        ),
    });
    let (eth, tcp) = (
        lab.median("app-latency-1500", "eth", 4)?,
        lab.median("app-latency-1500", "tcp", 4)?,
    );
    let r = eth.median / tcp.median;
    lab.claim(Claim {
        what: "4 B application latency, raw Ethernet / TCP".into(),
        paper: "< 1 (Fig. 6.3, no figures)".into(),
        paper_value: None,
        ours: r,
        ours_text: format!("{r:.2} ({} / {} µs)", fig(eth.median), fig(tcp.median)),
        verdict: format!(
            "{} A small blocking send returns once the lane has the message: one sendto of a \
             frame against one send on a socket.",
            if r < 0.95 {
                "Matches."
            } else {
                "Differs: no gain here."
            }
        ),
    });
    let (eth, tcp) = (
        lab.median("bw-1500", "eth", 1024)?,
        lab.median("bw-1500", "tcp", 1024)?,
    );
    let r = eth.median / tcp.median;
    lab.claim(Claim {
        what: "1 KiB bandwidth, raw Ethernet / TCP".into(),
        paper: "> 1, the gap widening up to 1 KiB (Fig. 6.1, no figures)".into(),
        paper_value: None,
        ours: r,
        ours_text: format!("{r:.2} ({} / {} MB/s)", fig(eth.median), fig(tcp.median)),
        verdict: format!(
            "{} Streaming is where TCP's offloads (segmentation, checksums, large receives) \
             pay on a veth pair, and where the raw lane's per-frame work (a syscall batch, the \
             keyed tag) costs most.",
            if r > 1.05 {
                "Matches."
            } else {
                "Differs: TCP moves as much or more."
            }
        ),
    });
    let (at, both) = lab.largest("bw-1500", "eth+tcp")?;
    let (tcp, eth) = (
        lab.median("bw-1500", "tcp", at)?,
        lab.median("bw-1500", "eth", at)?,
    );
    let r = both.median / tcp.median;
    lab.claim(Claim {
        what: format!("{} bandwidth, both lanes / TCP alone", crate::report::size(at)),
        paper: "- (the paper stops at 1 KiB; target ≥ 0.9, or bulk stays on TCP)".into(),
        paper_value: None,
        ours: r,
        ours_text: format!(
            "{r:.2} ({} / {} MB/s; eth alone {})",
            fig(both.median),
            fig(tcp.median),
            fig(eth.median)
        ),
        verdict: format!(
            "{} The scoring (`proto::caps::plan`) never puts bulk on a raw lane beside a kernel \
             lane; eth alone moves {:.2}× TCP.",
            if r >= 0.9 {
                "Within the target: bulk stays on TCP."
            } else {
                "Below the target."
            },
            eth.median / tcp.median
        ),
    });
    let loss = losses.last().copied().unwrap_or(1.0);
    let table = format!("bw-loss{loss}");
    let (at, eth) = lab.largest(&table, "eth")?;
    let tcp = lab.median(&table, "tcp", at)?;
    let r = eth.median / tcp.median;
    lab.claim(Claim {
        what: format!(
            "{} bandwidth with {loss} % loss and reordering, raw Ethernet / TCP",
            crate::report::size(at)
        ),
        paper: "- (no loss handling: a lost frame stalls the prototype)".into(),
        paper_value: None,
        ours: r,
        ours_text: format!("{r:.2} ({} / {} MB/s)", fig(eth.median), fig(tcp.median)),
        verdict: "Nothing is lost: the reliability layer resends what SACKs and timeouts say is \
                  missing. The figure is how much the lane still moves."
            .into(),
    });
    Ok(())
}
