//! `pontoon bench TEST`: MPI micro-benchmarks (the OSU methods, MPBench's set) of pontoon
//! beside MPICH and Open MPI, runs alternating between the systems, medians with min–max,
//! a ratio column against the anchor named; as a table, JSON or CSV.
#![forbid(unsafe_code)]

pub mod experiment;
pub mod plot;
pub mod programs;
pub mod report;
pub mod stats;

use std::collections::BTreeMap;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use programs::{Program, System};
use report::{Report, Row, SystemReport};
use stats::Summary;

/// What can be measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Test {
    /// One-way latency of a ping-pong between 2 ranks (osu_latency), µs
    Latency,
    /// The same ping-pong by `--threads` pairs of threads at once, at
    /// MPI_THREAD_MULTIPLE (osu_latency_mt), mean over the pairs, µs
    LatencyMt,
    /// Round trips per second of the same ping-pong (MPBench's roundtrip)
    Roundtrip,
    /// Throughput of the same ping-pong: bytes / one-way time (IMB PingPong), MB/s
    Pingpong,
    /// Application latency: how long a blocking MPI_Send takes to return while messages
    /// stream one way (MPBench's), µs
    AppLatency,
    /// Share of a non-blocking exchange hidden behind a compute loop of the same length
    /// (seed 002's mpptest idea), %
    Overlap,
    /// The same for an MPI_Iallreduce of doubles among `-n` ranks, %
    OverlapAllreduce,
    /// Speed-up of an exchange-then-compute loop when a second thread does the exchanges
    /// while the first computes (seed 002's communication thread), ×
    CommThread,
    /// Streaming bandwidth, a window of non-blocking sends (osu_bw), S senders to R
    /// receivers (`--pattern S:R`: 1:1, N:1, N:N), aggregate MB/s
    Bw,
    /// Message rate of `--pattern P:P` pairs, each streaming windows of non-blocking
    /// sends to its partner (osu_mbw_mr), aggregate millions of messages per second
    MsgRate,
    /// Bidirectional bandwidth between 2 ranks (osu_bibw), MB/s
    Bibw,
    /// MPI_Allreduce of doubles, average latency over the ranks (osu_allreduce), µs
    Allreduce,
    /// MPI_Bcast of bytes from rank 0, average latency over the ranks (osu_bcast), µs
    Bcast,
    /// MPI_Reduce of doubles to rank 0, average latency over the ranks (osu_reduce), µs
    Reduce,
    /// MPI_Allgather, the size being each rank's block (osu_allgather), µs
    Allgather,
    /// MPI_Alltoall, the size being each block one rank sends another (osu_alltoall), µs
    Alltoall,
    /// A benchmark of the OSU suite itself (`--osu NAME`), built by
    /// `scripts/build-osu.sh` with each MPI's own compiler wrapper into `--osu-dir`
    Osu,
    /// A seed's experiment, end to end on the testbed (as root): `experiment SEED`
    Experiment,
}

#[derive(Debug, clap::Args)]
pub struct Options {
    #[arg(value_enum)]
    pub test: Test,
    /// The seed whose experiment runs (with `experiment`)
    #[arg(value_enum, required_if_eq("test", "experiment"))]
    pub seed: Option<experiment::Seed>,
    /// A short run of the experiment: fewer sizes, runs and settings (what CI checks)
    #[arg(long)]
    pub quick: bool,
    /// Where the experiment writes SEED.md, its plots and its CSV
    #[arg(long, value_name = "DIR", default_value = "docs/experiments")]
    pub out: std::path::PathBuf,
    /// Runs per system; the systems take turns run by run
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Systems to run (default: every one installed here)
    #[arg(long, value_enum, value_delimiter = ',')]
    pub systems: Vec<System>,
    /// The system the ratio column divides by (default: MPICH if it runs, else Open MPI)
    #[arg(long, value_enum)]
    pub anchor: Option<System>,
    /// Largest message, bytes (sizes double from 0, or from `--min` for bw)
    #[arg(long, default_value_t = 1 << 20)]
    pub max: u64,
    /// Smallest message of bw (default 1024) and msg-rate (default 1), bytes
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub min: Option<u64>,
    /// Timed iterations per size (fewer above 8 KiB, as OSU does; default: the program's)
    #[arg(long)]
    pub iters: Option<u32>,
    /// Thread pairs of latency-mt
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: u32,
    /// Ranks of an allreduce
    #[arg(short = 'n', long = "np", default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..))]
    pub ranks: u32,
    /// Senders:receivers of bw (P:P, P pairs, for msg-rate)
    #[arg(long, default_value = "1:1", value_parser = parse_pattern)]
    pub pattern: (u32, u32),
    /// Bytes each sender of bw moves per size (default: 8 MiB or 16 of the largest
    /// messages, whichever is more)
    #[arg(long, value_name = "BYTES")]
    pub volume: Option<u64>,
    /// Messages in flight per window of bw (osu_bw's 64 keeps a long link idle between
    /// windows of small messages)
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    pub window: u32,
    /// The OSU benchmark `osu` runs: osu_latency, osu_bw, osu_bibw, osu_mbw_mr (on `-n`
    /// ranks: half as many pairs), osu_multi_lat, or a collective (osu_allreduce,
    /// osu_ibcast, …; on `-n` ranks, the non-blocking ones' pure communication time)
    #[arg(long, value_name = "NAME", required_if_eq("test", "osu"))]
    pub osu: Option<String>,
    /// Where `scripts/build-osu.sh` put the OSU builds: DIR/pontoon/NAME, DIR/mpich/NAME,
    /// DIR/openmpi/NAME
    #[arg(long, value_name = "DIR", default_value = "bench/build/osu")]
    pub osu_dir: std::path::PathBuf,
    /// Print JSON (every run of every figure)
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV: test,figure,system,bytes,run,value
    #[arg(long)]
    pub csv: bool,
    /// Also draw the figures against the message size, one line per system, into FILE
    /// (.svg or .png)
    #[arg(long, value_name = "FILE")]
    pub plot: Option<std::path::PathBuf>,
    /// Give up on a run after SECONDS
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Run the ranks on the hosts of this testbed, one per host in turn (as root; the
    /// anchors held to TCP between the hosts, as between real ones)
    #[arg(long, value_name = "NAME")]
    pub testbed: Option<String>,
    /// The testbed hosts to run on, in rank order (default: all, one rank per host in turn)
    #[arg(long, value_delimiter = ',', requires = "testbed")]
    pub hosts: Vec<String>,
    /// Tell pontoon's ranks the testbed site of their host (`pontoon run --sites`): its
    /// site-aware collectives run across the sites
    #[arg(long, requires = "testbed")]
    pub sites: bool,
    /// Every MPI with its progress thread: pontoon's PONTOON_ASYNC_PROGRESS=on, MPICH's
    /// MPICH_ASYNC_PROGRESS=1, Open MPI's TCP progress thread
    #[arg(long)]
    pub progress_thread: bool,
    /// Set VAR=VALUE for pontoon's ranks (as `pontoon run -x`); the anchors run at their
    /// defaults. Repeatable
    #[arg(short = 'x', value_name = "VAR=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (var, value) = s.split_once('=').ok_or("-x takes VAR=VALUE")?;
    Ok((var.to_string(), value.to_string()))
}

/// The test's name as typed (`bw`, `latency`).
fn test_name(t: Test) -> String {
    use clap::ValueEnum;
    t.to_possible_value()
        .map_or_else(|| format!("{t:?}"), |v| v.get_name().to_string())
}

fn parse_pattern(s: &str) -> Result<(u32, u32), String> {
    let (a, b) = s.split_once(':').ok_or("a pattern is S:R, e.g. 1:1, 4:1, 4:4")?;
    let n = |x: &str| x.trim().parse::<u32>().ok().filter(|&v| v >= 1);
    match (n(a), n(b)) {
        (Some(s), Some(r)) => Ok((s, r)),
        _ => Err(format!("`{s}`: senders and receivers are numbers of at least 1")),
    }
}

/// The executable a test runs.
enum Exe {
    /// A program of `bench/c`, built here for each system.
    Bench(Program),
    /// A benchmark built outside (the OSU suite): DIR/SYSTEM/NAME.
    Built { dir: std::path::PathBuf, name: String },
}

impl Exe {
    /// The executable for `system`, or why there is none.
    fn for_system(&self, system: System) -> Result<std::path::PathBuf, String> {
        match self {
            Exe::Bench(program) => programs::build(*program, system),
            Exe::Built { dir, name } => {
                let exe = dir.join(system.name()).join(name);
                exe.is_file().then_some(exe.clone()).ok_or_else(|| {
                    format!(
                        "no {} (build the OSU suite with each MPI: scripts/build-osu.sh OSU_SOURCE {})",
                        exe.display(),
                        dir.display()
                    )
                })
            }
        }
    }
}

/// How one test runs: its program, arguments, ranks and what its numbers mean.
struct Plan {
    exe: Exe,
    args: Vec<String>,
    ranks: u32,
    /// Which number of a row is the figure (after the size).
    column: usize,
    /// Which is the CPU seconds per GB moved, if the program measures it.
    cpu_column: Option<usize>,
    /// Turns the program's figure into the test's (a round trip rate from a latency).
    convert: fn(f64) -> f64,
    unit: &'static str,
    lower_is_better: bool,
    what: String,
}

impl Plan {
    /// `program` run with `args` on `ranks` ranks, its first figure after the size
    /// being the test's, as it is.
    fn new(
        program: Program,
        args: Vec<String>,
        ranks: u32,
        unit: &'static str,
        lower_is_better: bool,
        what: String,
    ) -> Plan {
        Plan {
            exe: Exe::Bench(program),
            args,
            ranks,
            column: 0,
            cpu_column: None,
            convert: |v| v,
            unit,
            lower_is_better,
            what,
        }
    }
}

fn plan(o: &Options) -> Result<Plan, String> {
    let iters = |default: u32| o.iters.unwrap_or(default).to_string();
    let max = o.max.to_string();
    let collective = |op: &str, what: &str| {
        let args = vec![op.into(), o.max.max(8).to_string(), iters(1000)];
        let what = format!("{what}, {} ranks (osu_{op})", o.ranks);
        Plan::new(programs::COLLECTIVE, args, o.ranks, "µs", true, what)
    };
    let pingpong = || {
        let what = "one-way latency, 2 ranks (osu_latency)".into();
        Plan::new(
            programs::PINGPONG,
            vec![max.clone(), iters(10_000)],
            2,
            "µs",
            true,
            what,
        )
    };
    Ok(match o.test {
        Test::Latency => pingpong(),
        Test::LatencyMt => {
            let what = format!(
                "one-way latency, {} thread pairs at once between 2 ranks, MPI_THREAD_MULTIPLE (osu_latency_mt)",
                o.threads
            );
            let args = vec![max, iters(10_000), o.threads.to_string()];
            Plan::new(programs::LATENCY_MT, args, 2, "µs", true, what)
        }
        Test::Pingpong => Plan {
            column: 1,
            unit: "MB/s",
            lower_is_better: false,
            what: "ping-pong throughput, bytes / one-way time, 2 ranks (IMB PingPong)".into(),
            ..pingpong()
        },
        Test::Experiment => unreachable!("refused by run"),
        Test::Roundtrip => Plan {
            // One-way µs: a round trip takes twice that.
            convert: |one_way_us| 1e6 / (2.0 * one_way_us),
            unit: "round trips/s",
            lower_is_better: false,
            what: "ping-pong round trips per second, 2 ranks (MPBench's roundtrip)".into(),
            ..pingpong()
        },
        Test::AppLatency => {
            let what = "time in a blocking MPI_Send, one-way stream, 2 ranks (MPBench's application latency)";
            let args = vec![max, iters(10_000)];
            Plan::new(programs::APPLAT, args, 2, "µs", true, what.into())
        }
        Test::Overlap => {
            let what =
                "share of an Isend/Irecv exchange hidden behind computation, 2 ranks (mpptest's overlap)";
            let args = vec![max, iters(200)];
            Plan::new(programs::OVERLAP, args, 2, "% hidden", false, what.into())
        }
        Test::OverlapAllreduce => {
            let what = format!(
                "share of an MPI_Iallreduce hidden behind computation, {} ranks (mpptest's overlap)",
                o.ranks
            );
            let args = vec![max, iters(200), "iallreduce".into()];
            Plan::new(programs::OVERLAP, args, o.ranks, "% hidden", false, what)
        }
        Test::CommThread => {
            let what = "speed-up of an exchange-then-compute loop with the exchanges in a thread of their own, 2 ranks (seed 002's communication thread)";
            let args = vec![max, iters(200)];
            Plan::new(programs::COMM_THREAD, args, 2, "×", false, what.into())
        }
        Test::Bcast => collective("bcast", "MPI_Bcast of bytes from rank 0"),
        Test::Reduce => collective("reduce", "MPI_Reduce of doubles to rank 0"),
        Test::Allgather => collective("allgather", "MPI_Allgather, bytes per rank"),
        Test::Alltoall => collective("alltoall", "MPI_Alltoall, bytes per block"),
        Test::Bw => {
            let (s, r) = o.pattern;
            // Each sender moves at least 8 MiB per size, more for the larger messages.
            let args = streams_args(o, 1024, (8u64 << 20).max(o.max * 16));
            let window = match o.window {
                64 => "osu_bw's window".to_string(),
                w => format!("windows of {w} messages"),
            };
            let what = format!("aggregate bandwidth, {s}:{r} ({window})");
            Plan {
                cpu_column: Some(1),
                ..Plan::new(programs::STREAMS, args, s + r, "MB/s", false, what)
            }
        }
        Test::MsgRate => {
            let pairs = o.pattern.0;
            if o.pattern.1 != pairs {
                return Err(format!("msg-rate runs pairs: --pattern {pairs}:{pairs}"));
            }
            let args = streams_args(o, 1, 4 << 20);
            let what = format!(
                "message rate, {pairs} pair(s), windows of {} (osu_mbw_mr)",
                o.window
            );
            Plan {
                column: 2,
                convert: |per_s| per_s / 1e6,
                ..Plan::new(programs::STREAMS, args, 2 * pairs, "M msgs/s", false, what)
            }
        }
        Test::Osu => osu_plan(o)?,
        Test::Bibw => {
            let what = "bidirectional bandwidth, 2 ranks (osu_bibw)".into();
            Plan {
                cpu_column: Some(1),
                ..Plan::new(programs::BIBW, vec![max, iters(100)], 2, "MB/s", false, what)
            }
        }
        Test::Allreduce => {
            let args = vec![o.max.max(8).to_string(), iters(1000)];
            let what = format!("MPI_Allreduce of doubles, {} ranks (osu_allreduce)", o.ranks);
            Plan::new(programs::ALLREDUCE, args, o.ranks, "µs", true, what)
        }
    })
}

/// The arguments of `bench/c/streams.c` for `--pattern`, `--window`, `--max` and, unless
/// given, the smallest size and each sender's volume per size.
fn streams_args(o: &Options, min: u64, volume: u64) -> Vec<String> {
    let (senders, receivers) = o.pattern;
    [
        senders.into(),
        receivers.into(),
        o.min.unwrap_or(min),
        o.max,
        o.volume.unwrap_or(volume),
        2,
        o.window.into(),
    ]
    .map(|v: u64| v.to_string())
    .to_vec()
}

/// Whether `name` is an OSU benchmark of a collective with a size: `Some(true)` for a
/// non-blocking one (`osu_ibcast`), `Some(false)` for a blocking one.
fn osu_collective(name: &str) -> Option<bool> {
    const SIZED: [&str; 13] = [
        "allgather",
        "allgatherv",
        "allreduce",
        "alltoall",
        "alltoallv",
        "alltoallw",
        "bcast",
        "gather",
        "gatherv",
        "reduce",
        "reduce_scatter",
        "scatter",
        "scatterv",
    ];
    let op = name.strip_prefix("osu_")?;
    if SIZED.contains(&op) && op != "alltoallw" {
        return Some(false);
    }
    op.strip_prefix('i').filter(|o| SIZED.contains(o)).map(|_| true)
}

/// How a benchmark of the OSU suite runs and which of its columns is the figure.
fn osu_plan(o: &Options) -> Result<Plan, String> {
    let name = o.osu.clone().unwrap_or_default();
    let mut args = Vec::new();
    if let Some(i) = o.iters {
        args.extend(["-i".to_string(), i.to_string()]);
    }
    let plan = |ranks, column, unit, lower_is_better, what: String, args: Vec<String>| Plan {
        exe: Exe::Built {
            dir: o.osu_dir.clone(),
            name: name.clone(),
        },
        args,
        ranks,
        column,
        cpu_column: None,
        convert: |v| v,
        unit,
        lower_is_better,
        what: format!("{what} ({name}, OSU's own build)"),
    };
    Ok(match name.as_str() {
        "osu_latency" => plan(2, 0, "µs", true, "one-way latency, 2 ranks".into(), args),
        "osu_multi_lat" => plan(
            o.ranks,
            0,
            "µs",
            true,
            format!("latency, {} pairs", o.ranks / 2),
            args,
        ),
        "osu_bw" => plan(2, 0, "MB/s", false, "bandwidth, windows of 64".into(), args),
        "osu_bibw" => plan(2, 0, "MB/s", false, "bidirectional bandwidth".into(), args),
        "osu_mbw_mr" => Plan {
            convert: |per_s| per_s / 1e6,
            ..plan(
                o.ranks,
                1,
                "M msgs/s",
                false,
                format!("message rate, {} pairs", o.ranks / 2),
                args,
            )
        },
        n if osu_collective(n).is_some() => {
            args.extend(["-m".to_string(), o.max.to_string()]);
            if osu_collective(n) == Some(true) {
                // Non-blocking: its pure communication time (OSU's columns: overall,
                // compute, pure communication, overlap).
                plan(
                    o.ranks,
                    2,
                    "µs",
                    true,
                    format!("pure communication time, {} ranks", o.ranks),
                    args,
                )
            } else {
                plan(
                    o.ranks,
                    0,
                    "µs",
                    true,
                    format!("average latency, {} ranks", o.ranks),
                    args,
                )
            }
        }
        _ => {
            return Err(format!(
                "`{name}`: pontoon bench osu runs osu_latency, osu_bw, osu_bibw, osu_mbw_mr, osu_multi_lat \
                 or a collective's benchmark (osu_allreduce, osu_ibcast, …)"
            ))
        }
    })
}

/// A progress bar on stderr when it is a terminal (silent otherwise), counting runs.
pub fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::new(0);
    if let Ok(style) = ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} runs  {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Runs the test and returns its report; `bar` counts the runs and says which is going.
pub fn run(o: &Options, bar: &ProgressBar) -> Result<Report, String> {
    if o.test == Test::Experiment {
        return Err("an experiment is many tests: experiment::run".into());
    }
    let plan = plan(o)?;
    let place = match &o.testbed {
        Some(name) => programs::Place::testbed(name, &o.hosts, o.sites)?,
        None => programs::Place::Local,
    };
    let timeout = Duration::from_secs(o.timeout);
    let wanted: Vec<System> = if o.systems.is_empty() {
        System::ALL.to_vec()
    } else {
        o.systems.clone()
    };
    let mut systems: Vec<SystemReport> = Vec::new();
    let mut exes = BTreeMap::new();
    for s in wanted {
        let built = s.available().and_then(|()| plan.exe.for_system(s));
        match built {
            Ok(exe) => {
                exes.insert(s, exe);
            }
            Err(why) if !o.systems.is_empty() => return Err(format!("{}: {why}", s.name())),
            Err(_) => continue, // not installed: left out without a word
        }
        systems.push(SystemReport {
            name: s,
            library: None,
            failed: None,
        });
    }
    bar.inc_length(u64::from(o.runs) * systems.len() as u64);
    // Figures per system and size, run by run.
    let mut figures: BTreeMap<(System, u64), Vec<f64>> = BTreeMap::new();
    let mut cpu: BTreeMap<(System, u64), Vec<f64>> = BTreeMap::new();
    for run in 1..=o.runs {
        for sr in systems.iter_mut().filter(|s| s.failed.is_none()) {
            bar.set_message(format!(
                "{} run {run}/{}: {}",
                test_name(o.test),
                o.runs,
                sr.name.name()
            ));
            let job = programs::Job {
                args: &plan.args,
                ranks: plan.ranks,
                timeout,
                place: &place,
                pontoon_env: &o.env,
                progress_thread: o.progress_thread,
            };
            let result = programs::run(sr.name, &exes[&sr.name], &job);
            bar.inc(1);
            match result {
                Ok(out) if out.rows.is_empty() => sr.failed = Some("the program printed no figures".into()),
                Ok(out) => {
                    sr.library = sr.library.take().or(out.library);
                    for (size, values) in out.rows {
                        if let Some(&v) = values.get(plan.column) {
                            figures
                                .entry((sr.name, size))
                                .or_default()
                                .push((plan.convert)(v));
                        }
                        if let Some(&v) = plan.cpu_column.and_then(|c| values.get(c)) {
                            cpu.entry((sr.name, size)).or_default().push(v);
                        }
                    }
                }
                Err(why) => sr.failed = Some(why),
            }
        }
    }
    if let Some(p) = systems.iter().find(|s| s.name == System::Pontoon) {
        if let Some(why) = &p.failed {
            return Err(format!("pontoon: {why}"));
        }
    }
    let ran: Vec<System> = systems
        .iter()
        .filter(|s| s.failed.is_none())
        .map(|s| s.name)
        .collect();
    let anchor = o
        .anchor
        .or_else(|| {
            [System::Mpich, System::Openmpi]
                .into_iter()
                .find(|s| ran.contains(s))
        })
        .filter(|a| ran.contains(a) && *a != System::Pontoon);
    let sizes: std::collections::BTreeSet<u64> = figures.keys().map(|k| k.1).collect();
    let rows = sizes
        .into_iter()
        .map(|bytes| {
            let summaries = |of: &BTreeMap<(System, u64), Vec<f64>>| -> BTreeMap<System, Summary> {
                ran.iter()
                    .filter_map(|&s| Some((s, Summary::of(of.get(&(s, bytes))?)?)))
                    .collect()
            };
            let ratio_of = |m: &BTreeMap<System, Summary>| {
                anchor.and_then(|a| stats::ratio(m.get(&System::Pontoon)?, m.get(&a)?))
            };
            let (results, cpu_s_per_gb) = (summaries(&figures), summaries(&cpu));
            Row {
                bytes,
                ratio: ratio_of(&results),
                cpu_ratio: ratio_of(&cpu_s_per_gb),
                results,
                cpu_s_per_gb,
            }
        })
        .collect();
    Ok(Report {
        test: test_name(o.test),
        what: plan.what,
        unit: plan.unit,
        better: if plan.lower_is_better { "lower" } else { "higher" },
        ranks: plan.ranks,
        place: match &place {
            programs::Place::Local => "this host".into(),
            programs::Place::Testbed { name, hosts, .. } => format!(
                "testbed {name} ({})",
                hosts
                    .iter()
                    .take(plan.ranks as usize)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        runs: o.runs,
        systems,
        anchor,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: Options,
    }

    fn options(args: &[&str]) -> Options {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .unwrap()
            .options
    }

    /// The figure of each OSU benchmark is the column its output names (OSU 5.3's, as
    /// printed).
    #[test]
    fn each_osu_benchmark_gives_the_column_it_reports() {
        let mbw_mr = "# OSU MPI Multiple Bandwidth / Message Rate Test v5.3\n\
                      # [ pairs: 1 ] [ window size: 64 ]\n\
                      # Size                  MB/s        Messages/s\n\
                      1                       2.61        2609295.86\n";
        let ibcast = "# OSU MPI Non-Blocking Broadcast Latency Test v5.3\n\
                      # Size           Overall(us)       Compute(us)    Pure Comm.(us)        Overlap(%)\n\
                      64                      2.28              1.26              0.85              0.00\n";
        let latency =
            "# OSU MPI Latency Test v5.3\n# Size          Latency (us)\n8                       0.20\n";
        for (name, ranks, out, bytes, figure, unit) in [
            ("osu_mbw_mr", "4", mbw_mr, 1, 2.60929586, "M msgs/s"),
            ("osu_ibcast", "4", ibcast, 64, 0.85, "µs"),
            ("osu_latency", "4", latency, 8, 0.20, "µs"),
        ] {
            let p = plan(&options(&["osu", "--osu", name, "-n", ranks])).unwrap();
            let rows = programs::parse(out).rows;
            assert_eq!(rows[0].0, bytes, "{name}");
            let got = (p.convert)(rows[0].1[p.column]);
            assert!((got - figure).abs() < 1e-6, "{name}: {got} against {figure}");
            assert_eq!(p.unit, unit);
            let pt2pt = name == "osu_latency";
            assert_eq!(p.ranks, if pt2pt { 2 } else { 4 }, "{name}");
        }
        let why = plan(&options(&["osu", "--osu", "osu_put_latency"]))
            .err()
            .unwrap();
        assert!(why.contains("osu_latency, osu_bw"), "{why}");
    }

    /// msg-rate runs pairs and reads streams.c's fourth column, in millions.
    #[test]
    fn the_message_rate_runs_pairs_of_streams() {
        let p = plan(&options(&["msg-rate", "--pattern", "2:2"])).unwrap();
        assert_eq!((p.ranks, p.column), (4, 2));
        assert_eq!(&p.args[..3], ["2", "2", "1"], "2 senders, 2 receivers, from 1 B");
        assert_eq!((p.convert)(2.5e6), 2.5);
        assert!(plan(&options(&["msg-rate", "--pattern", "2:1"])).is_err());
    }
}
