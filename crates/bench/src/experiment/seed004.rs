//! Seed 004 (protocols over an InfiniBand WAN): streaming bandwidth against the round trip
//! of a 1 Gbit/s WAN link between two sites — pontoon with one TCP stream per path and
//! with its parallel streams, iperf3 with 1 and 4 streams beside them — with 0, 0.1 and
//! 1 % loss, under BBR (this VM's default) and CUBIC (most clusters'), with the testbed's
//! raised socket-buffer limits and with Linux's default ones; and the rate of small
//! messages with and without coalescing.

use super::{Bed, Claim, Lab};
use crate::report::{figure as fig, size};

/// Round trips of the WAN link, ms (each way half of it).
const RTTS_MS: [u64; 3] = [10, 50, 100];
/// The message size; a setting whose one stream would take too long for one
/// gets smaller messages ([`sizing`]).
const MESSAGE: u64 = 64 << 20;
/// Seconds one run aims to stream for.
const RUN_S: f64 = 8.0;
/// The WAN link's rate, MB/s (1 Gbit/s), the unit of the tables.
const LINK_MB_S: f64 = 125.0;
/// The rows of the tables: the link's round trip.
const AXIS: &str = "round trip, ms";

/// One table: the hosts' TCP stack and the link's loss, at each round trip.
#[derive(Clone, Copy)]
struct Setting {
    cc: &'static str,
    loss: f64,
    /// Linux's default socket-buffer limits, not the testbed's 64 MiB.
    kernel_buffers: bool,
}

impl Setting {
    fn table(&self) -> String {
        let buffers = if self.kernel_buffers {
            "-kernel-buffers"
        } else {
            ""
        };
        format!("bw-{}-loss{}{buffers}", self.cc, self.loss)
    }

    fn heading(&self) -> String {
        format!(
            "{}, {} % loss, {} socket-buffer limits",
            self.cc.to_uppercase(),
            self.loss,
            if self.kernel_buffers {
                "Linux's default"
            } else {
                "64 MiB"
            }
        )
    }
}

pub fn run(lab: &mut Lab) -> Result<(), String> {
    let mut plan: Vec<(Setting, Vec<u64>)> = Vec::new();
    if lab.quick {
        let cubic = Setting {
            cc: "cubic",
            loss: 0.1,
            kernel_buffers: false,
        };
        plan.push((cubic, vec![20]));
    } else {
        for cc in ["bbr", "cubic"] {
            for loss in [0.0, 0.1, 1.0] {
                let s = Setting {
                    cc,
                    loss,
                    kernel_buffers: false,
                };
                plan.push((s, RTTS_MS.to_vec()));
            }
        }
        for cc in ["bbr", "cubic"] {
            let s = Setting {
                cc,
                loss: 0.0,
                kernel_buffers: true,
            };
            plan.push((s, vec![100]));
        }
    }
    // iperf3 is an anchor (`scripts/install-deps.sh --anchors`); a quick run goes without.
    let iperf = !lab.quick && crate::programs::in_path("iperf3").is_ok();
    let mut sizes = Vec::new();
    for (setting, rtts) in &plan {
        for &rtt in rtts {
            let bed = wan_bed(lab, setting, rtt)?;
            let at = Some((AXIS, rtt));
            // A quick run has no iperf3 to size by: messages one stream moves in seconds.
            let mut message = lab.quick.then_some(16 << 20);
            for _ in 0..lab.rounds {
                let anchors = if iperf {
                    Some((iperf3(&bed, 1)?, iperf3(&bed, 4)?))
                } else {
                    None
                };
                // The message size is chosen once per link, from the first round's one
                // iperf3 stream, so that every line and round moves the same messages.
                let (msg, one, many) = sizing(message, anchors);
                message = Some(msg);
                let table = setting.table();
                for (label, streams, volume) in [("1 stream", "1", one), ("streams", "auto", many)] {
                    let (msg, volume) = (msg.to_string(), volume.to_string());
                    let env = format!("PONTOON_WAN_STREAMS={streams}");
                    let args = [
                        "bw",
                        "--min",
                        &msg,
                        "--max",
                        &msg,
                        "--volume",
                        &volume,
                        "--systems",
                        "pontoon",
                        "--hosts",
                        "a-h1,b-h1",
                        "-x",
                        &env,
                    ];
                    lab.measure_at(&table, label, &bed, &args, at)?;
                }
                if let Some((one, four)) = anchors {
                    for (label, streams, mb_s) in [("iperf3 -P 1", 1, one), ("iperf3 -P 4", 4, four)] {
                        let command = format!(
                            "iperf3 -c 2001:db8:2::11 -t {RUN_S} -P {streams} -J  # on a-h1; iperf3 -s -1 on b-h1"
                        );
                        lab.add_figures(&table, label, &command, &[(rtt, mb_s)])?;
                    }
                }
            }
            if let Some(m) = message.filter(|&m| m != MESSAGE) {
                sizes.push(format!(
                    "{}, round trip {rtt} ms: {} messages",
                    setting.heading(),
                    size(m)
                ));
            }
        }
    }
    let rates = small_message_rates(lab)?;
    report(lab, &plan, &sizes)?;
    rate_report(lab, &rates)
}

/// Small messages in flight per window of the rate runs: enough to keep a long link
/// busy (osu_bw's 64 would bound the rate to 64 messages per round trip, whatever the
/// protocol does with them).
const RATE_WINDOW: u64 = 4096;
/// Message sizes of the rate runs, bytes.
const RATE_SIZES: [u64; 2] = [8, 256];
/// Windows per rate run: enough that the connection's start is a small part of it.
const RATE_WINDOWS: u64 = 32;

/// The rate of small messages over the WAN link with coalescing (pontoon's default) and
/// without (`PONTOON_COALESCE_US=0`), at each round trip, BBR, no loss; the round trips
/// measured.
fn small_message_rates(lab: &mut Lab) -> Result<Vec<u64>, String> {
    let rtts = if lab.quick { vec![20] } else { RTTS_MS.to_vec() };
    let setting = Setting {
        cc: "bbr",
        loss: 0.0,
        kernel_buffers: false,
    };
    for &rtt in &rtts {
        let bed = wan_bed(lab, &setting, rtt)?;
        for _ in 0..lab.rounds {
            for n in RATE_SIZES {
                for (label, us) in [("coalescing", "500"), ("no coalescing", "0")] {
                    let (n_text, window) = (n.to_string(), RATE_WINDOW.to_string());
                    let volume = (n * RATE_WINDOW * RATE_WINDOWS).to_string();
                    let env = format!("PONTOON_COALESCE_US={us}");
                    let args = [
                        "bw",
                        "--min",
                        &n_text,
                        "--max",
                        &n_text,
                        "--volume",
                        &volume,
                        "--window",
                        &window,
                        "--systems",
                        "pontoon",
                        "--hosts",
                        "a-h1,b-h1",
                        "-x",
                        &env,
                    ];
                    lab.measure_at(&rate_table(n), label, &bed, &args, Some((AXIS, rtt)))?;
                }
            }
        }
    }
    Ok(rtts)
}

fn rate_table(bytes: u64) -> String {
    format!("rate-{bytes}B")
}

fn rate_report(lab: &mut Lab, rtts: &[u64]) -> Result<(), String> {
    lab.text(format!(
        "## Small messages against the round trip\n\n\
         The same link (BBR, no loss): `bench/c/streams.c` with windows of {RATE_WINDOW} \
         messages (`pontoon bench bw --window {RATE_WINDOW}`, {RATE_WINDOWS} windows a run), with \
         coalescing (pontoon's default: small messages to a WAN peer that follow each other \
         within 500 µs, at most a sixteenth of the round trip, travel packed in one frame of \
         up to 16 KiB) and without (`PONTOON_COALESCE_US=0`: a frame, a system call and a \
         packet each). MB/s of payload; messages per second are MB/s × 10⁶ / size.\n"
    ));
    for n in RATE_SIZES {
        let heading = format!("{n} B messages, BBR, no loss");
        lab.show(&rate_table(n), &heading, Some("no coalescing"))?;
    }
    let far = *rtts.last().ok_or("no round trips")?;
    let table = rate_table(RATE_SIZES[0]);
    let (on, off) = (
        lab.median(&table, "coalescing", far)?,
        lab.median(&table, "no coalescing", far)?,
    );
    let r = on.median / off.median;
    lab.claim(Claim {
        what: format!(
            "{} B messages, coalescing / not, {far} ms round trip",
            RATE_SIZES[0]
        ),
        paper: "> 1 (\"transferring data using large messages (message coalescing)\" improves \
                high-delay communication)"
            .into(),
        paper_value: Some(1.0),
        ours: r,
        ours_text: format!("{r:.2} ({} / {} MB/s)", fig(on.median), fig(off.median)),
        verdict: if r > 1.05 {
            "Matches: packed, a burst of small messages costs one system call and a few packets.".into()
        } else {
            "Differs: coalescing gains nothing here.".into()
        },
    });
    Ok(())
}

/// A `wan` testbed of one host per site whose link has round trip `rtt` ms.
fn wan_bed(lab: &mut Lab, s: &Setting, rtt: u64) -> Result<Bed, String> {
    let delay = rtt as f64 / 2.0;
    let opts = testbed::PresetOptions {
        nodes: Some(1),
        wan: testbed::WanImpairment {
            delay_ms: delay,
            loss_pct: s.loss,
            rate_mbit: Some(1000),
            ..Default::default()
        },
        tcp: testbed::topology::HostTcp {
            congestion: Some(s.cc.into()),
            kernel_buffers: s.kernel_buffers,
        },
        ..Default::default()
    };
    let flags = format!(
        "--nodes 1 --delay-ms {delay} --loss-pct {} --wan-rate-mbit 1000 --tcp-cc {}{}",
        s.loss,
        s.cc,
        if s.kernel_buffers {
            " --kernel-tcp-buffers"
        } else {
            ""
        }
    );
    lab.bed("wan", &opts, &flags)
}

/// The message size of a link (`known`, else from iperf3's one stream: [`MESSAGE`] unless
/// one would take longer than a run, then the largest power of two that does not, at
/// least 1 MiB) and the volume of the one-stream and the parallel runs: what iperf3's 1
/// and 4 streams move in [`RUN_S`], in whole messages. Without iperf3: one message each.
fn sizing(known: Option<u64>, iperf: Option<(f64, f64)>) -> (u64, u64, u64) {
    let Some((one, four)) = iperf else {
        let m = known.unwrap_or(MESSAGE);
        return (m, m, m);
    };
    let bytes = |mb_s: f64| (mb_s * 1e6 * RUN_S) as u64;
    let m = known.unwrap_or_else(|| {
        let mut m = MESSAGE;
        while m > 1 << 20 && m > bytes(one) {
            m /= 2;
        }
        m
    });
    let volume = |mb_s: f64| (bytes(mb_s) / m).max(1) * m;
    (m, volume(one), volume(four))
}

/// iperf3 with `streams` streams from `a-h1` to `b-h1` for [`RUN_S`]: what the receiver
/// got, MB/s.
fn iperf3(bed: &Bed, streams: u32) -> Result<f64, String> {
    let tb = testbed::Testbed::open(Some(&bed.name))?;
    let mut server = tb
        .command("b-h1", "iperf3")?
        .args(["-s", "-1"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start iperf3's server: {e}"))?;
    let mut result = Err("iperf3 did not run".to_string());
    // The server may not listen yet: a refused client tries again.
    for _ in 0..10 {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let out = tb
            .command("a-h1", "iperf3")?
            .args(["-c", "2001:db8:2::11", "-J", "-t"])
            .arg(RUN_S.to_string())
            .args(["-P", &streams.to_string()])
            .output()
            .map_err(|e| format!("cannot run iperf3: {e}"))?;
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        match json["end"]["sum_received"]["bits_per_second"].as_f64() {
            Some(bits) => {
                result = Ok(bits / 8e6);
                break;
            }
            None => result = Err(format!("iperf3 -P {streams}: {}", json["error"])),
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    result
}

fn report(lab: &mut Lab, plan: &[(Setting, Vec<u64>)], sizes: &[String]) -> Result<(), String> {
    lab.text(format!(
        "## Streaming bandwidth against the round trip\n\n\
         Two sites of a `wan` testbed, one host each, routed over the testbed's emulated WAN \
         link: 1 Gbit/s, the round trip of each row, the loss of each table (each way), the \
         hosts' congestion control and socket-buffer limits as the table says (`--tcp-cc`, \
         `--kernel-tcp-buffers`). `bench/c/streams.c` between them (`pontoon bench bw`, 1 \
         sender, 1 receiver, windows of up to 64 messages of 64 MiB) moves what iperf3 moves \
         in {RUN_S} s. *1 stream*: pontoon with `PONTOON_WAN_STREAMS=1` (one TCP connection \
         per path, as on a LAN); *streams*: pontoon as it is (`auto`: 4 to 8 streams per WAN \
         path, one of them for eager messages and control frames; docs/wan.md); *iperf3 -P \
         1*, *-P 4*: iperf3 over the same path, {RUN_S} s each (the TCP anchor: no MPI). The \
         emulator's frames are wire-sized (offloads are off on the emulated link; \
         docs/testbed.md).\n"
    ));
    if !sizes.is_empty() {
        lab.text(format!(
            "Where one stream moves too little for a 64 MiB message in a run, the messages are \
             smaller (the same for every line of the row):\n\n- {}\n",
            sizes.join("\n- ")
        ));
    }
    for (s, _) in plan {
        lab.show(&s.table(), &s.heading(), Some("1 stream"))?;
    }
    claims(lab, plan)
}

fn claims(lab: &mut Lab, plan: &[(Setting, Vec<u64>)]) -> Result<(), String> {
    // The longest round trip of the lossy CUBIC table: the seed's high-delay case.
    let (cubic, rtts) = plan
        .iter()
        .find(|(s, _)| s.cc == "cubic" && s.loss > 0.0 && !s.kernel_buffers)
        .ok_or("no lossy CUBIC setting")?;
    let (table, far, near) = (cubic.table(), *rtts.last().unwrap(), rtts[0]);
    let (one, many) = (
        lab.median(&table, "1 stream", far)?,
        lab.median(&table, "streams", far)?,
    );
    let r = many.median / one.median;
    lab.claim(Claim {
        what: format!(
            "parallel streams / one stream, {far} ms round trip, {}",
            cubic.heading()
        ),
        paper: "up to 1.5 (\"up to 50 %\" from parallel streams and coalescing at high delay)".into(),
        paper_value: Some(1.5),
        ours: r,
        ours_text: format!("{r:.2} ({} / {} MB/s)", fig(many.median), fig(one.median)),
        verdict: format!(
            "{} The issue's target is ≥ 2× under CUBIC at 100 ms and 0.1 % loss: each stream's \
             window is bounded by its own losses, so streams add up.",
            if r >= 2.0 {
                "Beyond the paper, within the target."
            } else if r >= 1.5 {
                "Matches the paper; short of the issue's 2×."
            } else {
                "Differs: short of the paper."
            }
        ),
    });
    if far != near {
        let first = lab.median(&table, "1 stream", near)?;
        let r = one.median / first.median;
        lab.claim(Claim {
            what: format!("one TCP stream at {far} ms / at {near} ms, {}", cubic.heading()),
            paper: "< 1: \"TCP/IP bandwidth drops fast with the increasing delay\"".into(),
            paper_value: None,
            ours: r,
            ours_text: format!("{r:.2} ({} / {} MB/s)", fig(one.median), fig(first.median)),
            verdict: if r < 0.5 {
                "Matches: a lossy long path starves one stream.".into()
            } else {
                "Differs: one stream holds up.".into()
            },
        });
    }
    if let Some((bbr, rtts)) = plan
        .iter()
        .find(|(s, _)| s.cc == "bbr" && s.loss > 0.0 && s.loss < 1.0)
    {
        let far = *rtts.last().unwrap();
        let streams = lab.median(&bbr.table(), "streams", far)?;
        let r = streams.median / LINK_MB_S;
        lab.claim(Claim {
            what: format!(
                "parallel streams / the 1 Gbit/s link rate, {far} ms, {}",
                bbr.heading()
            ),
            paper: "- (IB verbs \"sustain\" the link; target ≥ 0.9)".into(),
            paper_value: None,
            ours: r,
            ours_text: format!("{r:.2} ({} MB/s of 125)", fig(streams.median)),
            verdict: format!(
                "{} TCP's payload is at most 0.95 of a 1 Gbit/s Ethernet link's rate (1448 of 1514 \
                 bytes a frame); BBR keeps one stream near the rate through random loss.",
                if r >= 0.9 {
                    "Within the target."
                } else {
                    "Below the target."
                }
            ),
        });
    }
    if let Ok(four) = lab.median(&table, "iperf3 -P 4", far) {
        let r = many.median / four.median;
        lab.claim(Claim {
            what: format!("pontoon's streams / iperf3 -P 4, {far} ms, {}", cubic.heading()),
            paper: "- (the TCP anchor: as many streams, no MPI)".into(),
            paper_value: None,
            ours: r,
            ours_text: format!("{r:.2} ({} / {} MB/s)", fig(many.median), fig(four.median)),
            verdict: if r >= 0.9 {
                "As fast as bare TCP streams: fragments go to whichever stream drains.".into()
            } else {
                "Slower than bare TCP streams.".into()
            },
        });
    }
    // Never below one stream: the worst ratio over every row of every table.
    let mut worst: Option<(f64, String)> = None;
    for (s, rtts) in plan {
        for &rtt in rtts {
            let r = lab.median(&s.table(), "streams", rtt)?.median
                / lab.median(&s.table(), "1 stream", rtt)?.median;
            if worst.as_ref().is_none_or(|(w, _)| r < *w) {
                worst = Some((r, format!("{rtt} ms, {}", s.heading())));
            }
        }
    }
    let (r, at) = worst.ok_or("no figures")?;
    lab.claim(Claim {
        what: "parallel streams / one stream, the worst case over every setting".into(),
        paper: "- (target: never below one stream)".into(),
        paper_value: None,
        ours: r,
        ours_text: format!("{r:.2} ({at})"),
        verdict: if r >= 0.95 {
            "Within the target (runs of one setting spread by a few %).".into()
        } else {
            "Below one stream somewhere.".into()
        },
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_shrink_to_what_one_stream_moves_in_a_run() {
        assert_eq!(sizing(None, None), (MESSAGE, MESSAGE, MESSAGE));
        // 100 MB/s moves 800 MB in a run: 64 MiB messages, 11 of them.
        let (m, one, many) = sizing(None, Some((100.0, 110.0)));
        assert_eq!((m, one / m, many / m), (MESSAGE, 11, 13));
        // 2 MB/s moves 16 MB: 8 MiB messages, one of them; four streams move 5.
        let (m, one, many) = sizing(None, Some((2.0, 6.0)));
        assert_eq!((m, one, many), (8 << 20, 8 << 20, 5 * (8 << 20)));
        assert_eq!(sizing(None, Some((0.01, 0.01))).0, 1 << 20, "at least 1 MiB");
        assert_eq!(sizing(Some(8 << 20), Some((100.0, 100.0))).0, 8 << 20, "kept");
    }
}
