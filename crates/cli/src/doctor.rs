//! `pontoon doctor`: run as a job (`pontoon run -n N pontoon doctor`), every rank
//! exchanges a message with every other rank, then rank 0 prints the rank × rank matrix
//! of the paths chosen and, per pair, every connection attempt with its result. The
//! reports travel through the launcher's coordinator, so pairs that cannot reach each
//! other are reported too.

use serde::Serialize;
use std::fmt::Write;
use std::process::ExitCode;

#[derive(Serialize)]
struct AttemptReport {
    /// The peer's address, or the relay's on a relayed path (`via`).
    addr: String,
    /// `direct`, `nat-proxy` or `two-proxy`.
    via: &'static str,
    /// On a two-proxy attempt, the relay at the peer's site (`addr` is our own site's).
    next_relay: Option<String>,
    class: String,
    bridge: bool,
    ms: f64,
    result: String,
}

/// How a lane reaches its peer.
#[derive(Serialize)]
struct Via {
    /// `direct`, `nat-proxy`, `two-proxy`, `punched`.
    kind: &'static str,
    /// The relays on the path, in order (the lane's remote end on a relayed path).
    relays: Vec<String>,
}

#[derive(Serialize)]
struct PathReport {
    via: Via,
    /// `tcp` or `shm`.
    transport: &'static str,
    /// The socket addresses of a network lane; `null` for shared memory.
    local: Option<String>,
    remote: Option<String>,
    /// The remote address's class, or `node-local` for shared memory.
    class: String,
    family: &'static str,
    initiated: bool,
    /// One-way latency in nanoseconds: half the smallest round trip on TCP lanes, once
    /// measured (every 200 ms); the transport's starting figure before.
    latency_ns: Option<u64>,
    /// Bytes per second: the kernel's delivery rate on TCP lanes once data has flowed.
    bandwidth: Option<u64>,
    /// A WAN lane: its round trip is 2 ms or more (`proto::caps::WAN_RTT_NS`).
    wide_area: bool,
    /// Its bytes travel encrypted (`PONTOON_ENCRYPT`).
    sealed: bool,
    /// What the lane carries under the engine's plan (`eager`, `bulk`, `large eager`),
    /// or `nothing: why` (`proto::caps::passed_over`).
    carries: Option<String>,
    /// Rendezvous messages are read out of the peer's memory in one copy
    /// (`PONTOON_SINGLE_COPY`, shared memory where a read at start-up worked).
    single_copy: bool,
}

#[derive(Serialize)]
struct PeerReport {
    peer: u32,
    ok: bool,
    error: Option<String>,
    path: Option<PathReport>,
    /// Every lane: the first connection (`path`), then one per further interface pair.
    lanes: Vec<PathReport>,
    attempts: Vec<AttemptReport>,
    /// Why punching through the NATs to a peer reached through a relay ended without a
    /// lane (`null`: it succeeded, or was not needed).
    punch: Option<String>,
    /// Every transport that carries no lane to the peer, and why.
    refused: Vec<RefusalReport>,
}

#[derive(Serialize)]
struct RefusalReport {
    /// `shm`, `tcp` or `eth`, as PONTOON_TRANSPORTS names them.
    transport: &'static str,
    why: String,
    /// What would help, where something would.
    help: Option<String>,
    /// It follows from where the two ranks run: nothing to fix.
    expected: bool,
}

#[derive(Serialize)]
struct RankReport {
    rank: u32,
    host: String,
    node: String,
    site: Option<String>,
    /// The NAT the coordinator saw this rank's connection come through, if any.
    nat: Option<String>,
    /// The relays this rank is registered with (their addresses on its card).
    relays: Vec<String>,
    interfaces: Vec<String>,
    /// Raw-Ethernet lanes: `on IFACE …`, `off: why` (no CAP_NET_RAW, …), or `not
    /// allowed` (not in PONTOON_TRANSPORTS).
    raw_ethernet: String,
    /// Bytes one TCP socket may have in flight: the kernel's autotuning limits, or
    /// PONTOON_SOCKBUF's buffers (what decides the streams of a WAN path).
    tcp_window_limit: u64,
    peers: Vec<PeerReport>,
}

#[derive(Serialize)]
struct Report {
    size: u32,
    /// How MPI_COMM_WORLD's collectives run: `site-aware` across its sites, `on the node's
    /// collective area` when its ranks are one node's, or `flat`.
    collectives: String,
    ranks: Vec<serde_json::Value>,
}

/// How the world's collectives run, and why.
fn collectives(world: &pontoon::Comm) -> String {
    match world.site_count() {
        Some(n) => format!("site-aware across {n} sites (PONTOON_COLL_HIER=0 for the flat algorithms)"),
        None if world.on_node_area() => "on the node's collective area: every rank is on this node and \
                                         joined its shared memory (small collectives meet there, larger \
                                         ones go by messages)"
            .into(),
        None => {
            "flat (one site: none declared to every rank and none inferred; or PONTOON_COLL_HIER=0)".into()
        }
    }
}

/// Exchanges one message with every other rank; `Err` holds why it failed.
fn ping_all(world: &pontoon::Comm) -> Vec<(u32, Result<(), String>)> {
    let (me, n) = (world.rank(), world.size());
    let others: Vec<u32> = (0..n).filter(|r| *r != me).collect();
    let recvs: Vec<_> = others
        .iter()
        .map(|&r| world.irecv(vec![0u32; 1], Some(r), 0x0d0c))
        .collect();
    let sends: Vec<_> = others.iter().map(|&r| world.isend(vec![me], r, 0x0d0c)).collect();
    others
        .iter()
        .zip(sends.into_iter().zip(recvs))
        .map(|(&peer, (s, r))| {
            let sent = s.and_then(|s| s.wait().0);
            let got = r.and_then(|r| r.wait().0);
            (peer, sent.and(got).map(|_| ()).map_err(|e| e.to_string()))
        })
        .collect()
}

fn path_report(universe: &pontoon::Universe, peer: u32, p: runtime::PathInfo) -> PathReport {
    let caps = universe.diag().lane_caps(p.lane);
    let (local, remote, class, family) = match p.route {
        runtime::Route::Ip { local, remote, class } => (
            Some(local.to_string()),
            Some(remote.to_string()),
            class.name().to_string(),
            if remote.is_ipv4() { "ipv4" } else { "ipv6" },
        ),
        runtime::Route::Node => (None, None, "node-local".to_string(), "local"),
        runtime::Route::Eth { local, remote, .. } => (
            Some(runtime::mac_text(&local)),
            Some(runtime::mac_text(&remote)),
            "same-segment".to_string(),
            "ethernet",
        ),
    };
    // The route's remote end is the relay next to us; a two-proxy lane we set up also
    // knows the one at the peer's site.
    let relays = match (p.via.kind.relayed(), &remote) {
        (true, Some(r)) => std::iter::once(r.clone())
            .chain(p.via.next.map(|n| n.to_string()))
            .collect(),
        _ => Vec::new(),
    };
    PathReport {
        via: Via {
            kind: p.via.kind.name(),
            relays,
        },
        transport: p.transport.name(),
        local,
        remote,
        class,
        family,
        initiated: p.initiated,
        latency_ns: caps.map(|c| c.latency_ns),
        bandwidth: caps.map(|c| c.bandwidth),
        single_copy: caps.is_some_and(|c| c.single_copy),
        wide_area: caps.is_some_and(|c| c.is_wan()),
        sealed: p.sealed,
        carries: universe.diag().lane_use(peer, p.lane),
    }
}

fn rank_report(universe: &pontoon::Universe, results: Vec<(u32, Result<(), String>)>) -> RankReport {
    let me = universe.world().rank();
    let card = universe.diag().card(me);
    let peers = results
        .into_iter()
        .map(|(peer, result)| PeerReport {
            peer,
            ok: result.is_ok(),
            error: result.err(),
            path: universe.diag().path(peer).map(|p| path_report(universe, peer, p)),
            punch: universe.diag().punch_note(peer),
            refused: universe
                .diag()
                .refusals(peer)
                .into_iter()
                .map(|r| RefusalReport {
                    transport: r.transport.name(),
                    why: r.why,
                    help: r.help,
                    expected: r.expected,
                })
                .collect(),
            lanes: universe
                .diag()
                .lanes(peer)
                .into_iter()
                .map(|p| path_report(universe, peer, p))
                .collect(),
            attempts: universe
                .diag()
                .attempts(peer)
                .iter()
                .map(|a| AttemptReport {
                    addr: a.addr.to_string(),
                    via: a.kind.name(),
                    next_relay: a.next.map(|n| n.to_string()),
                    class: a.class.name().to_string(),
                    bridge: a.bridge,
                    ms: (a.elapsed.as_secs_f64() * 1e4).round() / 10.0,
                    result: match &a.result {
                        Ok(()) => "connected".into(),
                        Err(e) => e.clone(),
                    },
                })
                .collect(),
        })
        .collect();
    RankReport {
        rank: me,
        host: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
        node: card
            .as_ref()
            .map(|c| format!("{:016x}", c.node))
            .unwrap_or_default(),
        site: universe.site(me),
        nat: card.as_ref().and_then(|c| c.nat()).map(|ip| ip.to_string()),
        relays: card
            .iter()
            .flat_map(|c| &c.relays)
            .map(|r| {
                let addrs: Vec<String> = r.addrs.iter().map(|a| a.to_string()).collect();
                addrs.join(" ")
            })
            .collect(),
        interfaces: card
            .iter()
            .flat_map(|c| &c.ifaces)
            .map(|i| {
                let addrs: Vec<String> = i.addrs.iter().map(|a| a.to_string()).collect();
                let bridge = if i.bridge { " (virtual bridge)" } else { "" };
                format!("{}{bridge}: {}", i.name, addrs.join(" "))
            })
            .collect(),
        raw_ethernet: match universe.diag().raw_ethernet() {
            Some(Ok(ifaces)) => format!("on {}", ifaces.join(" ")),
            Some(Err(why)) => format!("off: {why}"),
            None => "not allowed (add `eth` to PONTOON_TRANSPORTS)".into(),
        },
        tcp_window_limit: runtime::tcp_window_limit(runtime::Config::from_env().map_or(0, |c| c.sockbuf)),
        peers,
    }
}

/// Short cell text for the matrix.
fn cell(peer: &serde_json::Value) -> String {
    if !peer["ok"].as_bool().unwrap_or(false) {
        return "FAILED".into();
    }
    if peer["path"]["transport"].as_str() == Some("shm") {
        return "shm".into();
    }
    if let Some(kind) = peer["path"]["via"]["kind"].as_str().filter(|k| *k != "direct") {
        return kind.to_string();
    }
    let class = match peer["path"]["class"].as_str() {
        Some("ipv6-global") => "v6-global",
        Some("ipv4-public") => "v4-public",
        Some("ipv4-private") => "v4-private",
        Some("ipv6-ula") => "v6-ula",
        Some("loopback") => "loopback",
        Some(other) => other,
        None => "ok",
    };
    match peer["lanes"].as_array().map_or(0, Vec::len) {
        n if n > 1 => format!("{class}x{n}"),
        _ => class.to_string(),
    }
}

/// The rank × rank table of [`cell`]s, its columns as wide as their widest text and
/// two spaces apart.
fn path_matrix(size: u32, ranks: &[serde_json::Value]) -> String {
    let rows: Vec<(String, Vec<String>)> = ranks
        .iter()
        .map(|r| {
            let peers = r["peers"].as_array().cloned().unwrap_or_default();
            let cells = (0..size)
                .map(|c| {
                    peers
                        .iter()
                        .find(|p| p["peer"].as_u64() == Some(u64::from(c)))
                        .map_or_else(|| "-".to_string(), cell)
                })
                .collect();
            (r["rank"].to_string(), cells)
        })
        .collect();
    let label = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0).max(4);
    let width = |c: usize| {
        let widest = rows.iter().map(|(_, cells)| cells[c].len()).max().unwrap_or(0);
        widest.max(c.to_string().len()) + 2
    };
    let widths: Vec<usize> = (0..size as usize).map(width).collect();
    let mut out = format!("{:>label$}", "");
    for (c, w) in widths.iter().enumerate() {
        let _ = write!(out, "{c:>w$}");
    }
    out.push('\n');
    for (l, cells) in &rows {
        let _ = write!(out, "{l:>label$}");
        for (text, w) in cells.iter().zip(&widths) {
            let _ = write!(out, "{text:>w$}");
        }
        out.push('\n');
    }
    out
}

/// `  FROM -> TO: round trip, streams` for every pair with WAN lanes.
fn wan_paths(ranks: &[serde_json::Value]) -> Vec<String> {
    let mut out = Vec::new();
    for r in ranks {
        for p in r["peers"].as_array().into_iter().flatten() {
            let wan: Vec<&serde_json::Value> = p["lanes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|l| l["wide_area"].as_bool() == Some(true))
                .collect();
            let Some(rtt_ns) = wan
                .iter()
                .filter_map(|l| l["latency_ns"].as_u64())
                .min()
                .map(|l| 2 * l)
            else {
                continue;
            };
            let use_of = match wan.len() {
                1 => "one stream".to_string(),
                2 => "2 TCP streams, both pull fragments".to_string(),
                n => format!(
                    "{n} TCP streams: 1 for eager messages and control frames, {} pull fragments",
                    n - 1
                ),
            };
            let window = r["tcp_window_limit"].as_u64().unwrap_or(0);
            let sealed = if wan.iter().all(|l| l["sealed"].as_bool() == Some(true)) {
                ", encrypted"
            } else {
                ""
            };
            out.push(format!(
                "  {} -> {}: round trip {:.1} ms, {use_of}{sealed} (a socket's window: at most {} KiB)",
                r["rank"],
                p["peer"],
                rtt_ns as f64 / 1e6,
                window >> 10
            ));
        }
    }
    out
}

/// `  FROM -> TO: text` for every pair whose report has a text under `field`.
fn pair_notes(ranks: &[serde_json::Value], field: &str) -> Vec<String> {
    let mut out = Vec::new();
    for r in ranks {
        for p in r["peers"].as_array().into_iter().flatten() {
            if let Some(text) = p[field].as_str() {
                out.push(format!("  {} -> {}: {text}", r["rank"], p["peer"]));
            }
        }
    }
    out
}

/// `  TRANSPORT: why (help): FROM -> TO, …` for every refusal not explained by the
/// ranks' placement, each text once with the pairs it holds for.
fn refusals(ranks: &[serde_json::Value]) -> Vec<String> {
    let mut pairs: Vec<(String, Vec<String>)> = Vec::new();
    for r in ranks {
        for p in r["peers"].as_array().into_iter().flatten() {
            for refusal in p["refused"].as_array().into_iter().flatten() {
                if refusal["expected"].as_bool() == Some(true) {
                    continue;
                }
                let help = refusal["help"]
                    .as_str()
                    .map(|h| format!(" ({h})"))
                    .unwrap_or_default();
                let text = format!(
                    "{}: {}{help}",
                    refusal["transport"].as_str().unwrap_or("?"),
                    refusal["why"].as_str().unwrap_or("")
                );
                let pair = format!("{} -> {}", r["rank"], p["peer"]);
                match pairs.iter_mut().find(|(t, _)| *t == text) {
                    Some((_, of)) => of.push(pair),
                    None => pairs.push((text, vec![pair])),
                }
            }
        }
    }
    pairs
        .into_iter()
        .map(|(text, of)| format!("  {text}: {}", of.join(", ")))
        .collect()
}

fn render(size: u32, ranks: &[serde_json::Value]) -> String {
    let mut out = format!("pontoon doctor: {size} ranks\n\nranks:\n");
    for r in ranks {
        let site = r["site"].as_str().unwrap_or("-");
        let nat = r["nat"]
            .as_str()
            .map(|ip| format!(", behind NAT {ip}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {} on {} (node {}, site {site}{nat})",
            r["rank"],
            r["host"].as_str().unwrap_or("?"),
            r["node"].as_str().unwrap_or("?")
        );
        for i in r["interfaces"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "      {}", i.as_str().unwrap_or(""));
        }
        for relay in r["relays"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "      relay {}", relay.as_str().unwrap_or(""));
        }
        if let Some(raw) = r["raw_ethernet"]
            .as_str()
            .filter(|s| !s.starts_with("not allowed"))
        {
            let _ = writeln!(out, "      raw Ethernet {raw}");
        }
    }
    let _ = writeln!(
        out,
        "\npaths (row: from, column: to; shm for shared memory, nat-proxy through a relay at the \
         target's site, two-proxy through ours and theirs, punched straight through both NATs, \
         else the class of the first lane's address, xN for N lanes):"
    );
    out.push_str(&path_matrix(size, ranks));
    let _ = writeln!(out, "\nattempts (by the rank that connected):");
    for r in ranks {
        for p in r["peers"].as_array().into_iter().flatten() {
            for a in p["attempts"].as_array().into_iter().flatten() {
                let bridge = if a["bridge"].as_bool() == Some(true) {
                    ", virtual bridge"
                } else {
                    ""
                };
                let addr = a["addr"].as_str().unwrap_or("");
                let at = match (a["via"].as_str(), a["next_relay"].as_str()) {
                    (Some("nat-proxy"), _) => format!("relay {addr}"),
                    (Some("two-proxy"), Some(next)) => format!("relays {addr} then {next}"),
                    (Some("punched"), _) => format!("punched {addr}"),
                    _ => addr.to_string(),
                };
                let _ = writeln!(
                    out,
                    "  {} -> {}: {at} ({}{bridge}) {} after {} ms",
                    r["rank"],
                    p["peer"],
                    a["class"].as_str().unwrap_or(""),
                    a["result"].as_str().unwrap_or(""),
                    a["ms"]
                );
            }
        }
    }
    let wan = wan_paths(ranks);
    if !wan.is_empty() {
        let _ = writeln!(
            out,
            "\nWAN paths (a round trip of 2 ms or more; PONTOON_WAN_STREAMS sets the streams):\n{}",
            wan.join("\n")
        );
    }
    let unpunched = pair_notes(ranks, "punch");
    if !unpunched.is_empty() {
        let _ = writeln!(
            out,
            "\nnot punched (the relay carries these pairs):\n{}",
            unpunched.join("\n")
        );
    }
    let refused = refusals(ranks);
    if !refused.is_empty() {
        let _ = writeln!(
            out,
            "\ntransports refused (besides those the ranks' placement rules out; --json lists all):\n{}",
            refused.join("\n")
        );
    }
    let failures = pair_notes(ranks, "error");
    if !failures.is_empty() {
        let _ = writeln!(out, "\nfailures:\n{}", failures.join("\n"));
    }
    out
}

pub fn main(json: bool) -> ExitCode {
    let universe = match pontoon::init() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("pontoon doctor: {e}");
            return ExitCode::FAILURE;
        }
    };
    let world = universe.world();
    let (me, size) = (world.rank(), world.size());
    // Further lanes come up in the background after the first message: let them, then
    // exchange again, so that every rank progresses while its peers finish theirs.
    let first = ping_all(&world);
    universe.diag().settle_wireup(std::time::Duration::from_secs(10));
    // Network lanes are measured every 200 ms: progress long enough for one look.
    let measured = std::time::Instant::now() + std::time::Duration::from_millis(250);
    while std::time::Instant::now() < measured {
        universe.progress();
    }
    let second = ping_all(&world);
    let results: Vec<(u32, Result<(), String>)> = first
        .into_iter()
        .zip(second)
        .map(|((peer, a), (_, b))| (peer, a.and(b)))
        .collect();
    let failed = results.iter().any(|(_, r)| r.is_err());
    let report = rank_report(&universe, results);
    let bytes = serde_json::to_vec(&report).expect("a report serializes");
    let all = match universe.exchange("doctor", &bytes) {
        Ok(all) => all,
        Err(e) => {
            eprintln!("pontoon doctor: rank {me}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if me == 0 {
        let ranks: Vec<serde_json::Value> = (0..size)
            .map(|r| {
                all.get(r as usize)
                    .and_then(|b| serde_json::from_slice(b).ok())
                    .unwrap_or_else(|| serde_json::json!({ "rank": r, "peers": [] }))
            })
            .collect();
        let collectives = collectives(&world);
        if json {
            let report = Report {
                size,
                collectives,
                ranks,
            };
            println!("{}", serde_json::to_string_pretty(&report).expect("serializes"));
        } else {
            print!("{}", render(size, &ranks));
            println!("\ncollectives on MPI_COMM_WORLD: {collectives}");
        }
    }
    if let Err(e) = universe.finalize() {
        eprintln!("pontoon doctor: rank {me}: {e}");
        return ExitCode::FAILURE;
    }
    if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A cell as wide as a column once ran into its neighbour
    /// (`-same-segmentx2  v4-privatex2same-segmentx2` in `make demo`).
    #[test]
    fn matrix_columns_are_as_wide_as_their_cells_and_stay_apart() {
        let lane = json!({});
        let peer = |to: u32, class: &str, lanes: usize| json!({ "peer": to, "ok": true, "path": { "class": class }, "lanes": vec![lane.clone(); lanes] });
        let ranks = vec![
            json!({ "rank": 0, "peers": [peer(1, "same-segment", 2), peer(2, "ipv4-private", 2)] }),
            json!({ "rank": 1, "peers": [peer(0, "same-segment", 2), peer(2, "same-segment", 2)] }),
            json!({ "rank": 2, "peers": [peer(0, "ipv4-private", 2), peer(1, "same-segment", 2)] }),
        ];
        let text = path_matrix(3, &ranks);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        for row in &lines[1..] {
            let words: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(words.len(), 4, "a row of a label and three cells: {row:?}");
        }
        // Columns line up: every cell of a column ends where its header does.
        let ends = |line: &str| -> Vec<usize> {
            let mut v = Vec::new();
            let b = line.as_bytes();
            for i in 0..b.len() {
                if b[i] != b' ' && (i + 1 == b.len() || b[i + 1] == b' ') {
                    v.push(i);
                }
            }
            v
        };
        let header = ends(lines[0]);
        for row in &lines[1..] {
            assert_eq!(ends(row)[1..], header[..], "{text}");
        }
    }
}
