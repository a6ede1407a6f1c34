//! Seed 001 (MPI across private clusters through NAT and relays): nat-proxy — outgoing
//! streams through the front end's NAT, incoming ones through one user-level relay —
//! against PACX-MPI's two-proxy, with routed IPv6 between the clusters as the reference:
//! 128 B latency and bandwidth of the 1:1, 2:1, 4:1 and 4:4 patterns between the clusters.

use super::{Claim, Lab};
use crate::report::figure as fig;

pub fn run(lab: &mut Lab) -> Result<(), String> {
    // Each sender moves 4 MiB per size: a third of a second at 100 Mbit/s.
    let (nodes, rate, patterns, bw_max, lat_iters): (u16, u64, &[(u16, u16)], &str, &str) = if lab.quick {
        (1, 1000, &[(1, 1)], "16384", "200")
    } else {
        (4, 100, &[(1, 1), (2, 1), (4, 1), (4, 4)], "1048576", "2000")
    };
    let lat_rounds = lab.latency_rounds();
    let flags = |ipv6: bool| {
        let v6 = if ipv6 { "" } else { " --no-ipv6 a --no-ipv6 b" };
        format!("--nodes {nodes} --rate-mbit {rate}{v6}")
    };
    let routed_opts = testbed::PresetOptions {
        nodes: Some(nodes),
        rate_mbit: Some(rate),
        ..Default::default()
    };
    let nat_opts = testbed::PresetOptions {
        no_ipv6: vec!["a".into(), "b".into()],
        ..routed_opts.clone()
    };
    let routed = lab.bed("two-clusters", &routed_opts, &flags(true))?;
    let natted = lab.bed("two-clusters", &nat_opts, &flags(false))?;
    // `pontoon run --testbed` starts a relay on each head; up to 8 ranks and the relays
    // share this machine's CPUs, so ranks yield while they poll.
    let paths = [
        ("routed", &routed, "PONTOON_PATHS=direct"),
        ("nat-proxy", &natted, "PONTOON_PATHS=direct,nat-proxy"),
        ("two-proxy", &natted, "PONTOON_PATHS=direct,two-proxy"),
    ];
    let common = |env| ["--systems", "pontoon", "-x", env, "-x", "PONTOON_YIELD=always"];
    // Latency is cheap and its single runs spread widely: more rounds of it.
    for _ in 0..lat_rounds {
        for (label, bed, env) in paths {
            let lat = [
                "latency",
                "--max",
                "128",
                "--iters",
                lat_iters,
                "--hosts",
                "a-c1,b-c1",
            ];
            lab.measure("latency", label, bed, &[&lat[..], &common(env)[..]].concat())?;
        }
    }
    for _ in 0..lab.rounds {
        for (label, bed, env) in paths {
            for &(s, r) in patterns {
                let hosts: Vec<String> = (1..=s)
                    .map(|i| format!("a-c{i}"))
                    .chain((1..=r).map(|i| format!("b-c{i}")))
                    .collect();
                let (pattern, hosts) = (format!("{s}:{r}"), hosts.join(","));
                let bw = [
                    "bw",
                    "--pattern",
                    &pattern,
                    "--max",
                    bw_max,
                    "--volume",
                    "4194304",
                    "--hosts",
                    &hosts,
                ];
                lab.measure(
                    &format!("bw-{s}to{r}"),
                    label,
                    bed,
                    &[&bw[..], &common(env)[..]].concat(),
                )?;
            }
        }
    }
    drop((routed, natted));
    lab.text(format!(
        "## Between two private clusters\n\n\
         `two-clusters --nodes {nodes}`, every NIC limited to {rate} Mbit/s (tbf). *routed*: compute \
         nodes talk over global IPv6, routed by the heads (the reference). *nat-proxy* and *two-proxy*: \
         the same clusters without IPv6; a relay on each head (`pontoon run --testbed` starts them), \
         the path kind chosen with `PONTOON_PATHS`. `bench/relays.sh` is the longer form of this \
         experiment, with the relays' CPU and hole punching (`docs/experiments.md`).\n"
    ));
    lab.show(
        "latency",
        &format!("Ping-pong latency a-c1 to b-c1 ({lat_rounds} rounds)"),
        Some("two-proxy"),
    )?;
    for &(s, r) in patterns {
        lab.show(
            &format!("bw-{s}to{r}"),
            &format!("Bandwidth between the clusters, {s}:{r}"),
            Some("routed"),
        )?;
    }
    let (nat, two, routed) = (
        lab.median("latency", "nat-proxy", 128)?,
        lab.median("latency", "two-proxy", 128)?,
        lab.median("latency", "routed", 128)?,
    );
    let r = nat.median / two.median;
    lab.claim(Claim {
        what: "128 B latency, nat-proxy / two-proxy".into(),
        paper: "0.70 (1923 / 2756 µs)".into(),
        paper_value: Some(1923.0 / 2756.0),
        ours: r,
        ours_text: format!("{r:.2} ({} / {} µs)", fig(nat.median), fig(two.median)),
        verdict: format!(
            "{} One user-level hop instead of two; the relay hop costs {} µs over routed IPv6 ({} µs). \
             The paper's absolute figures are 2005 hardware on a 100 Mbit/s wire; the ratio carries over.",
            if (r - 0.70).abs() <= 0.07 {
                "Matches."
            } else {
                "Differs by more than 10 %."
            },
            fig(nat.median - routed.median),
            fig(routed.median)
        ),
    });
    let top = bw_max.parse::<u64>().unwrap_or(1 << 20);
    let (nat_bw, two_bw, routed_bw) = (
        lab.median("bw-1to1", "nat-proxy", top)?,
        lab.median("bw-1to1", "two-proxy", top)?,
        lab.median("bw-1to1", "routed", top)?,
    );
    let r = nat_bw.median / two_bw.median;
    lab.claim(Claim {
        what: format!("Bandwidth 1:1 at {} B, nat-proxy / two-proxy", top),
        paper: "> 1, the gap widening with the size (Fig. 3, no figures)".into(),
        paper_value: None,
        ours: r,
        ours_text: format!(
            "{r:.2} ({} / {} MB/s; routed {})",
            fig(nat_bw.median),
            fig(two_bw.median),
            fig(routed_bw.median)
        ),
        verdict: format!(
            "{} Pontoon's relays splice bytes kernel to kernel, so a second relay costs CPU more than \
             bandwidth; the paper's proxies copied every byte through user space.",
            if r > 1.05 {
                "Matches: nat-proxy moves more."
            } else if r >= 0.95 {
                "Differs: both fill the link alike."
            } else {
                "Differs: two-proxy moves more."
            }
        ),
    });
    Ok(())
}
