//! Seed 000 (an IPv6 extension to Open MPI): IPv4 against IPv6 between two hosts on one
//! 1 Gbit/s link (its Fig. 2), and compute node to compute node across two clusters over
//! routed IPv6 against each of the three links alone (its Fig. 3): IMB's ping-pong.

use super::{Bed, Claim, Lab};
use crate::report::figure as fig;

const RATE: u64 = 1000;

/// The ping-pong's sizes and iterations: for latency, and for throughput.
struct PingPong<'a> {
    lat_max: &'a str,
    lat_iters: &'a str,
    tp_max: &'a str,
    tp_iters: &'a str,
}

impl PingPong<'_> {
    /// Latency into table `{prefix}-latency` (more rounds: cheap and noisy), then
    /// throughput into `{prefix}-throughput`, every setting taking its turn.
    fn measure(
        &self,
        lab: &mut Lab,
        bed: &Bed,
        prefix: &str,
        settings: &[(&str, Vec<&str>)],
    ) -> Result<(), String> {
        let latency = ["latency", "--max", self.lat_max, "--iters", self.lat_iters];
        lab.alternate(
            lab.latency_rounds(),
            &format!("{prefix}-latency"),
            bed,
            &latency,
            settings,
        )?;
        let throughput = ["pingpong", "--max", self.tp_max, "--iters", self.tp_iters];
        lab.alternate(
            lab.rounds,
            &format!("{prefix}-throughput"),
            bed,
            &throughput,
            settings,
        )
    }
}

pub fn run(lab: &mut Lab) -> Result<(), String> {
    let pp = if lab.quick {
        PingPong {
            lat_max: "64",
            lat_iters: "200",
            tp_max: "262144",
            tp_iters: "50",
        }
    } else {
        PingPong {
            lat_max: "4096",
            lat_iters: "10000",
            tp_max: "4194304",
            tp_iters: "1000",
        }
    };
    families(lab, &pp)?;
    across_clusters(lab, &pp)
}

/// Fig. 2: one link, pontoon held to one address family at a time.
fn families(lab: &mut Lab, pp: &PingPong) -> Result<(), String> {
    let opts = testbed::PresetOptions {
        nodes: Some(2),
        rate_mbit: Some(RATE),
        ..Default::default()
    };
    let bed = lab.bed("lan", &opts, &format!("--nodes 2 --rate-mbit {RATE}"))?;
    let families = [
        ("IPv4", "PONTOON_IF_INCLUDE=10.0.0.0/24"),
        ("IPv6", "PONTOON_IF_INCLUDE=fd00:0:0:1::/64"),
    ];
    let settings: Vec<(&str, Vec<&str>)> = families
        .iter()
        .map(|&(label, env)| (label, vec!["--systems", "pontoon", "--hosts", "h1,h2", "-x", env]))
        .collect();
    pp.measure(lab, &bed, "lan", &settings)?;
    drop(bed);
    lab.text(format!(
        "## IPv4 against IPv6 on one {RATE} Mbit/s link (the paper's Fig. 2)\n\n\
         Two hosts on one segment limited to {RATE} Mbit/s (tbf); pontoon held to one family with \
         `PONTOON_IF_INCLUDE`. IMB PingPong's method: a ping-pong, one-way time, throughput = bytes / one-way time. \
         The rate limit lets a burst of 128 KiB through at once (one TSO segment, as a NIC sends it), so \
         messages up to about that size cross faster than the rate: the claims use the largest size.\n"
    ));
    lab.show(
        "lan-throughput",
        "Ping-pong throughput, IPv4 and IPv6",
        Some("IPv4"),
    )?;
    let heading = format!(
        "Ping-pong latency, IPv4 and IPv6 ({} rounds)",
        lab.latency_rounds()
    );
    lab.show("lan-latency", &heading, Some("IPv4"))?;
    let (v4_at, v4) = lab.largest("lan-throughput", "IPv4")?;
    let (v6_at, v6) = lab.largest("lan-throughput", "IPv6")?;
    let tp = v6.median / v4.median;
    lab.claim(Claim {
        what: "IPv6 / IPv4 ping-pong throughput at the largest size, one 1 Gbit/s link".into(),
        paper: "0.987 (110.0 / 111.5 MiB/s)".into(),
        paper_value: Some(110.0 / 111.5),
        ours: tp,
        ours_text: format!("{tp:.3} ({} / {} MB/s)", fig(v6.median), fig(v4.median)),
        verdict: format!(
            "{}: the paper's drop of 1.4 % is the larger IPv6 header (1440 B of payload per 1500-byte frame \
             against 1460 B: 1.37 %); pontoon's is {:.1} % ({} and {} bytes).",
            if (tp - 110.0 / 111.5).abs() <= 0.01 {
                "Matches"
            } else {
                "Differs"
            },
            (1.0 - tp) * 100.0,
            v6_at,
            v4_at
        ),
    });
    let small = 8.min(pp.lat_max.parse().unwrap_or(8));
    let (l4, l6) = (
        lab.median("lan-latency", "IPv4", small)?,
        lab.median("lan-latency", "IPv6", small)?,
    );
    let lat = l6.median / l4.median;
    lab.claim(Claim {
        what: format!("IPv6 / IPv4 ping-pong latency, {small} B"),
        paper: "≈ 1 (\"no noticeable difference\")".into(),
        paper_value: Some(1.0),
        ours: lat,
        ours_text: format!("{lat:.3} ({} / {} µs)", fig(l6.median), fig(l4.median)),
        verdict: if (lat - 1.0).abs() <= 0.05 {
            "Matches: IPv6's longer header costs nothing measurable at this size.".into()
        } else if l6.min <= l4.max && l4.min <= l6.max {
            format!(
                "Matches within this machine's noise: the medians differ by {:.0} %, but the runs overlap \
                 (IPv4 {}-{} µs, IPv6 {}-{} µs).",
                (lat - 1.0).abs() * 100.0,
                fig(l4.min),
                fig(l4.max),
                fig(l6.min),
                fig(l6.max)
            )
        } else {
            format!(
                "Differs by {:.0} % (runs: IPv4 {}-{} µs, IPv6 {}-{} µs).",
                (lat - 1.0).abs() * 100.0,
                fig(l4.min),
                fig(l4.max),
                fig(l6.min),
                fig(l6.max)
            )
        },
    });
    Ok(())
}

/// Fig. 3: a-c1 to b-c1 through both heads over routed IPv6, and each link alone.
fn across_clusters(lab: &mut Lab, pp: &PingPong) -> Result<(), String> {
    let opts = testbed::PresetOptions {
        nodes: Some(1),
        rate_mbit: Some(RATE),
        ..Default::default()
    };
    let bed = lab.bed("two-clusters", &opts, &format!("--nodes 1 --rate-mbit {RATE}"))?;
    let pairs = [
        ("end to end", "a-c1,b-c1"),
        ("a-c1 - a-head", "a-c1,a-head"),
        ("a-head - b-head", "a-head,b-head"),
        ("b-head - b-c1", "b-head,b-c1"),
    ];
    // The paper's single cell: global IPv6 addresses everywhere, routed by the heads.
    let settings: Vec<(&str, Vec<&str>)> = pairs
        .iter()
        .map(|&(label, hosts)| {
            let pin = [
                "-x",
                "PONTOON_IF_INCLUDE=2001:db8::/32",
                "-x",
                "PONTOON_PATHS=direct",
            ];
            (
                label,
                [&["--systems", "pontoon", "--hosts", hosts][..], &pin].concat(),
            )
        })
        .collect();
    pp.measure(lab, &bed, "clusters", &settings)?;
    drop(bed);
    lab.text(
        "## Compute node to compute node across two clusters (the paper's Fig. 3)\n\n\
         `two-clusters`: a-c1 behind head a-head, b-c1 behind b-head, the heads on a public segment, \
         every segment limited to 1000 Mbit/s; global IPv6 routed by the heads (no NAT, no relay). \
         End to end (a-c1 to b-c1) against each link measured alone.\n",
    );
    lab.show(
        "clusters-throughput",
        "Ping-pong throughput, end to end and per link",
        Some("end to end"),
    )?;
    let heading = format!(
        "Ping-pong latency, end to end and per link ({} rounds)",
        lab.latency_rounds()
    );
    lab.show("clusters-latency", &heading, Some("end to end"))?;
    let links = ["a-c1 - a-head", "a-head - b-head", "b-head - b-c1"];
    let (at, e2e) = lab.largest("clusters-throughput", "end to end")?;
    let weakest = links
        .iter()
        .map(|l| lab.median("clusters-throughput", l, at).map(|s| s.median))
        .collect::<Result<Vec<f64>, String>>()?
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    let tp = e2e.median / weakest;
    lab.claim(Claim {
        what: "End-to-end throughput / the weakest link's, at the largest size".into(),
        paper: "≈ 1 (\"very close\", Fig. 3a)".into(),
        paper_value: Some(1.0),
        ours: tp,
        ours_text: format!("{tp:.3} ({} / {} MB/s)", fig(e2e.median), fig(weakest)),
        verdict: format!(
            "{}: routing in the heads' kernels adds no bottleneck of its own.",
            if tp >= 0.95 {
                "Matches"
            } else {
                "Differs (below 0.95)"
            }
        ),
    });
    lab.claim(Claim {
        what: "End-to-end throughput across the clusters, at the largest size".into(),
        paper: "> 100 MB/s".into(),
        paper_value: Some(100.0),
        ours: e2e.median,
        ours_text: format!("{} MB/s ({at} B)", fig(e2e.median)),
        verdict: format!(
            "{} at Gigabit rate: 1000 Mbit/s carries about 118 MB/s of TCP payload; the rate limit's \
             128 KiB burst lifts a single message a little above that.",
            if e2e.median > 100.0 {
                "Matches"
            } else {
                "Below 100 MB/s"
            }
        ),
    });
    let small = 8.min(pp.lat_max.parse().unwrap_or(8));
    let e2e_lat = lab.median("clusters-latency", "end to end", small)?.median;
    let sum: f64 = links
        .iter()
        .map(|l| lab.median("clusters-latency", l, small).map(|s| s.median))
        .sum::<Result<f64, String>>()?;
    let r = e2e_lat / sum;
    lab.claim(Claim {
        what: format!("End-to-end latency / the sum of the three links' latencies, {small} B"),
        paper: "< 1 (Fig. 3b)".into(),
        paper_value: None,
        ours: r,
        ours_text: format!("{r:.3} ({} / {} µs)", fig(e2e_lat), fig(sum)),
        verdict: format!(
            "{}: each link's figure carries the MPI and TCP overheads of both ends once; the end-to-end \
             path carries them once in all, the heads forwarding in the kernel. A user-level gateway would \
             add its own (seed 001).",
            if r < 1.0 {
                "Matches"
            } else {
                "Differs (not below the sum)"
            }
        ),
    });
    Ok(())
}
