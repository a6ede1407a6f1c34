//! What every experiment shares: testbeds that are always torn down, `pontoon bench`
//! commands run round by round, their figures gathered into tables and plots, the
//! seed's claims beside pontoon's figures, and the report written out.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use clap::Parser;
use indicatif::ProgressBar;

use super::Seed;
use crate::plot::{Chart, Series as PlotSeries};
use crate::programs::System;
use crate::report::{figure as fig, size};
use crate::stats::{self, Summary};

/// A testbed of the experiment's, removed when dropped (also on failure).
pub struct Bed {
    pub name: String,
    /// How it was built, as a command a user would type.
    pub command: String,
}

impl Bed {
    pub fn up(preset: &str, opts: &testbed::PresetOptions, flags: &str) -> Result<Bed, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("x{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let topo = testbed::preset(preset, opts)?;
        let exe = std::env::current_exe().map_err(|e| format!("where is pontoon: {e}"))?;
        let up = testbed::UpOptions::of_pontoon(&exe);
        let bed = Bed {
            command: format!("pontoon testbed up {preset} {flags}"),
            name,
        };
        testbed::up(&bed.name, &topo, &up).map_err(|e| format!("{}: {e}", bed.command))?;
        Ok(bed)
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Err(e) = testbed::down(&self.name) {
            eprintln!("pontoon bench: tearing down testbed {}: {e}", self.name);
        }
    }
}

/// The runs of one line of a table, by message size.
struct Line {
    label: String,
    runs: BTreeMap<u64, Vec<f64>>,
}

/// Figures of several settings (or systems) against message size.
struct Table {
    id: String,
    title: String,
    unit: &'static str,
    lower_is_better: bool,
    /// What the rows are (the CSV's `bytes` column): message sizes, unless
    /// [`Lab::measure_at`] made it something else (a round trip).
    x_name: &'static str,
    lines: Vec<Line>,
}

impl Table {
    /// Line `label`, added empty if new.
    fn line(&mut self, label: &str) -> &mut Line {
        match self.lines.iter().position(|l| l.label == label) {
            Some(i) => &mut self.lines[i],
            None => {
                self.lines.push(Line {
                    label: label.to_string(),
                    runs: BTreeMap::new(),
                });
                self.lines.last_mut().expect("just pushed")
            }
        }
    }
}

/// A claim of the seed's paper beside pontoon's figure.
pub struct Claim {
    pub what: String,
    /// The paper's figure as it says it.
    pub paper: String,
    pub paper_value: Option<f64>,
    pub ours: f64,
    /// How pontoon's figure is written (its unit).
    pub ours_text: String,
    /// What matches and what differs, and why.
    pub verdict: String,
}

#[derive(Parser)]
struct BenchCommand {
    #[command(flatten)]
    options: crate::Options,
}

pub struct Lab<'a> {
    pub seed: Seed,
    pub quick: bool,
    /// Rounds: each runs every setting once, in turn.
    pub rounds: u32,
    bar: &'a ProgressBar,
    out: PathBuf,
    timeout: u64,
    tables: Vec<Table>,
    /// The `pontoon bench` commands run, with the testbed's name as `$BED`.
    commands: Vec<String>,
    beds: Vec<String>,
    sections: Vec<String>,
    claims: Vec<Claim>,
    started: std::time::Instant,
}

impl<'a> Lab<'a> {
    pub fn new(seed: Seed, o: &crate::Options, bar: &'a ProgressBar) -> Result<Lab<'a>, String> {
        std::fs::create_dir_all(&o.out).map_err(|e| format!("cannot create {}: {e}", o.out.display()))?;
        Ok(Lab {
            seed,
            quick: o.quick,
            rounds: if o.quick { 1 } else { o.runs.max(3) },
            bar,
            out: o.out.clone(),
            timeout: o.timeout,
            tables: Vec::new(),
            commands: Vec::new(),
            beds: Vec::new(),
            sections: Vec::new(),
            claims: Vec::new(),
            started: std::time::Instant::now(),
        })
    }

    /// Rounds of latency runs: they are cheap, and single runs spread widely, so a full
    /// run takes at least 11.
    pub fn latency_rounds(&self) -> u32 {
        if self.quick {
            1
        } else {
            self.rounds.max(11)
        }
    }

    /// The anchors installed here, as `--systems` takes them (none in a quick run).
    pub fn anchors(&self) -> String {
        if self.quick {
            return String::new();
        }
        [System::Mpich, System::Openmpi]
            .into_iter()
            .filter(|s| s.available().is_ok())
            .map(System::name)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Builds a testbed for the experiment (noted in the report).
    pub fn bed(&mut self, preset: &str, opts: &testbed::PresetOptions, flags: &str) -> Result<Bed, String> {
        self.bar.set_message(format!("testbed up {preset} {flags}"));
        let bed = Bed::up(preset, opts, flags)?;
        self.beds.push(bed.command.clone());
        Ok(bed)
    }

    /// Runs `pontoon bench ARGS --runs 1` on `bed` and adds its figures to table `table`:
    /// pontoon's as line `label`, each anchor's as a line of its own name.
    pub fn measure(&mut self, table: &str, label: &str, bed: &Bed, args: &[&str]) -> Result<(), String> {
        self.measure_at(table, label, bed, args, None)
    }

    /// [`Lab::measure`], with the figures of every size filed under row `at.1` of a table
    /// whose rows are `at.0` (e.g. a round trip in ms), not message sizes.
    pub fn measure_at(
        &mut self,
        table: &str,
        label: &str,
        bed: &Bed,
        args: &[&str],
        at: Option<(&'static str, u64)>,
    ) -> Result<(), String> {
        let shown = args.join(" ");
        let mut argv = vec!["pontoon-bench".to_string()];
        argv.extend(args.iter().map(|a| a.to_string()));
        argv.extend(["--testbed".into(), bed.name.clone(), "--runs".into(), "1".into()]);
        argv.extend(["--timeout".into(), self.timeout.to_string()]);
        let cmd = BenchCommand::try_parse_from(&argv).map_err(|e| format!("pontoon bench {shown}: {e}"))?;
        let command = format!("pontoon bench {shown} --testbed $BED");
        if !self.commands.contains(&command) {
            self.commands.push(command);
        }
        let mut report =
            crate::run(&cmd.options, self.bar).map_err(|e| format!("pontoon bench {shown}: {e}"))?;
        if let Some((_, x)) = at {
            report.rows.iter_mut().for_each(|r| r.bytes = x);
        }
        let x_name = at.map_or("bytes", |(name, _)| name);
        let at = match self.tables.iter().position(|t| t.id == table) {
            Some(i) => i,
            None => {
                self.tables.push(Table {
                    id: table.into(),
                    title: report.what.clone(),
                    unit: report.unit,
                    lower_is_better: report.better == "lower",
                    x_name,
                    lines: Vec::new(),
                });
                self.tables.len() - 1
            }
        };
        self.add(at, label, &report, |r, s| r.results.get(&s));
        if report.rows.iter().any(|r| !r.cpu_s_per_gb.is_empty()) {
            let id = format!("{table}-cpu");
            let at = match self.tables.iter().position(|t| t.id == id) {
                Some(i) => i,
                None => {
                    self.tables.push(Table {
                        id,
                        title: format!(
                            "CPU seconds per GB moved, user + system of every rank (getrusage), of: {}",
                            report.what
                        ),
                        unit: "CPU s/GB",
                        lower_is_better: true,
                        x_name,
                        lines: Vec::new(),
                    });
                    self.tables.len() - 1
                }
            };
            self.add(at, label, &report, |r, s| r.cpu_s_per_gb.get(&s));
        }
        Ok(())
    }

    /// Adds figures measured outside `pontoon bench` (a bare socket anchor run by
    /// `command`) to table `table` as line `label`; a `measure` made the table.
    pub fn add_figures(
        &mut self,
        table: &str,
        label: &str,
        command: &str,
        rows: &[(u64, f64)],
    ) -> Result<(), String> {
        if !self.commands.iter().any(|c| c == command) {
            self.commands.push(command.to_string());
        }
        let line = self
            .tables
            .iter_mut()
            .find(|t| t.id == table)
            .ok_or_else(|| format!("no table {table} for {label}'s figures"))?
            .line(label);
        for &(bytes, v) in rows {
            line.runs.entry(bytes).or_default().push(v);
        }
        Ok(())
    }

    /// Adds the figures `pick` takes from `report` to table `at`: pontoon's as line
    /// `label`, each anchor's under its own name.
    fn add(
        &mut self,
        at: usize,
        label: &str,
        report: &crate::report::Report,
        pick: impl Fn(&crate::report::Row, System) -> Option<&Summary>,
    ) {
        let t = &mut self.tables[at];
        for s in report.systems.iter().filter(|s| s.failed.is_none()) {
            let name = if s.name == System::Pontoon {
                label.to_string()
            } else {
                s.name.name().to_string()
            };
            let line = t.line(&name);
            for row in &report.rows {
                if let Some(m) = pick(row, s.name) {
                    line.runs.entry(row.bytes).or_default().extend(&m.runs);
                }
            }
        }
    }

    /// `rounds` rounds of `test` (the test and its arguments) on `bed`, every setting
    /// (a line's label and its own arguments) taking its turn in each, into table `table`.
    pub fn alternate(
        &mut self,
        rounds: u32,
        table: &str,
        bed: &Bed,
        test: &[&str],
        settings: &[(&str, Vec<&str>)],
    ) -> Result<(), String> {
        for _ in 0..rounds {
            for (label, own) in settings {
                self.measure(table, label, bed, &[test, &own[..]].concat())?;
            }
        }
        Ok(())
    }

    fn table(&self, id: &str) -> Result<&Table, String> {
        self.tables
            .iter()
            .find(|t| t.id == id)
            .ok_or_else(|| format!("no figures for {id}"))
    }

    /// The median of line `label` of table `id` at `bytes`.
    pub fn median(&self, id: &str, label: &str, bytes: u64) -> Result<Summary, String> {
        let t = self.table(id)?;
        t.lines
            .iter()
            .find(|l| l.label == label)
            .and_then(|l| Summary::of(l.runs.get(&bytes)?))
            .ok_or_else(|| format!("{id}: no figure of {label} at {bytes} bytes"))
    }

    /// The best median of line `label` over the sizes (highest, or lowest where lower is
    /// better), and its size.
    pub fn best(&self, id: &str, label: &str) -> Result<(u64, Summary), String> {
        let t = self.table(id)?;
        let line = t
            .lines
            .iter()
            .find(|l| l.label == label)
            .ok_or_else(|| format!("{id}: no line {label}"))?;
        let better = |a: f64, b: f64| if t.lower_is_better { a < b } else { a > b };
        line.runs
            .iter()
            .filter_map(|(&b, runs)| Some((b, Summary::of(runs)?)))
            .fold(None, |best: Option<(u64, Summary)>, (b, s)| match best {
                Some((_, ref m)) if !better(s.median, m.median) => best,
                _ => Some((b, s)),
            })
            .ok_or_else(|| format!("{id}: {label} has no figures"))
    }

    /// The figure of line `label` at the largest size it has, and that size: where a
    /// rate limit, not a burst, sets the pace.
    pub fn largest(&self, id: &str, label: &str) -> Result<(u64, Summary), String> {
        let t = self.table(id)?;
        t.lines
            .iter()
            .find(|l| l.label == label)
            .and_then(|l| l.runs.iter().next_back())
            .and_then(|(&b, runs)| Some((b, Summary::of(runs)?)))
            .ok_or_else(|| format!("{id}: {label} has no figures"))
    }

    /// A section of text in the report.
    pub fn text(&mut self, markdown: impl Into<String>) {
        self.sections.push(markdown.into());
    }

    /// Table `id` in the report — median (min-max) per line and size, and each line's
    /// ratio to line `base` — with its plot beside it.
    pub fn show(&mut self, id: &str, heading: &str, base: Option<&str>) -> Result<(), String> {
        let t = self.table(id)?;
        let sizes: std::collections::BTreeSet<u64> =
            t.lines.iter().flat_map(|l| l.runs.keys().copied()).collect();
        let mut md = format!(
            "### {heading}\n\n{}; {}, {} is better.\n\n",
            t.title,
            t.unit,
            if t.lower_is_better { "lower" } else { "higher" }
        );
        let mut header = vec![t.x_name.to_string()];
        header.extend(t.lines.iter().map(|l| l.label.clone()));
        let others: Vec<&Line> = t
            .lines
            .iter()
            .filter(|l| Some(l.label.as_str()) != base)
            .collect();
        if let Some(b) = base {
            header.extend(others.iter().map(|l| format!("{} / {b}", l.label)));
        }
        let _ = writeln!(md, "| {} |", header.join(" | "));
        let _ = writeln!(md, "|{}", "---|".repeat(header.len()));
        for bytes in sizes {
            let summary = |l: &Line| l.runs.get(&bytes).and_then(|r| Summary::of(r));
            let mut cells = vec![if t.x_name == "bytes" {
                size(bytes)
            } else {
                bytes.to_string()
            }];
            cells.extend(t.lines.iter().map(|l| {
                summary(l).map_or("-".into(), |m| {
                    format!("{} ({}-{})", fig(m.median), fig(m.min), fig(m.max))
                })
            }));
            if let Some(b) = base {
                let base_line = t.lines.iter().find(|l| l.label == b);
                for l in &others {
                    let r = base_line
                        .and_then(summary)
                        .zip(summary(l))
                        .and_then(|(bm, m)| stats::ratio(&m, &bm));
                    cells.push(r.map_or("-".into(), |r| format!("{r:.3}")));
                }
            }
            let _ = writeln!(md, "| {} |", cells.join(" | "));
        }
        let chart = Chart {
            title: format!("seed {}: {heading}", self.seed.number()),
            y_label: format!(
                "{}, {} is better",
                t.unit,
                if t.lower_is_better { "lower" } else { "higher" }
            ),
            log_y: t.lower_is_better,
            x_desc: if t.x_name == "bytes" {
                "message size, bytes".into()
            } else {
                t.x_name.into()
            },
            series: t
                .lines
                .iter()
                .map(|l| PlotSeries {
                    name: l.label.clone(),
                    points: l
                        .runs
                        .iter()
                        .filter_map(|(&b, r)| Summary::of(r).map(|m| (b, m.median, m.min, m.max)))
                        .collect(),
                })
                .collect(),
        };
        let file = format!("{}-{id}.svg", self.seed.number());
        chart.write(&self.out.join(&file))?;
        let _ = writeln!(md, "\n![{heading}]({file})");
        self.sections.push(md);
        Ok(())
    }

    pub fn claim(&mut self, claim: Claim) {
        self.claims.push(claim);
    }

    /// Writes `SEED.md` and `SEED.csv`; returns the report's path.
    pub fn finish(self) -> Result<PathBuf, String> {
        let n = self.seed.number();
        let mut md = format!("# Seed {n}: {}\n\n", title(self.seed));
        let _ = writeln!(
            md,
            "Written by `pontoon bench experiment {n}{}` on {} ({} round{}, the settings taking turns \
             within each; {:.0} s). Figures are medians (min-max) of the rounds; the machine is shared \
             and noisy, so ratios within this run say more than absolute figures.\n",
            if self.quick { " --quick" } else { "" },
            machine(),
            self.rounds,
            if self.rounds == 1 { "" } else { "s" },
            self.started.elapsed().as_secs_f64(),
        );
        if self.quick {
            md.push_str("**A quick run** (`--quick`: one round, few sizes): it shows the experiment works, not what it measures.\n\n");
        }
        md.push_str("## The paper's claims and pontoon's figures\n\n| claim | paper | pontoon | pontoon / paper |\n|---|---|---|---|\n");
        for c in &self.claims {
            let ratio = c
                .paper_value
                .filter(|p| *p != 0.0)
                .map_or("-".into(), |p| format!("{:.2}", c.ours / p));
            let _ = writeln!(md, "| {} | {} | {} | {ratio} |", c.what, c.paper, c.ours_text);
        }
        md.push('\n');
        for c in &self.claims {
            let _ = writeln!(md, "- **{}**: {}", c.what, c.verdict);
        }
        md.push_str("\n## How it ran\n\nTestbeds (each torn down when its runs are done):\n\n```sh\n");
        for b in &self.beds {
            let _ = writeln!(md, "{b}");
        }
        md.push_str("```\n\nMeasurements, each run once per round unless its table says more rounds (`$BED`: the testbed it ran on):\n\n```sh\n");
        for c in &self.commands {
            let _ = writeln!(md, "{c}");
        }
        let _ = writeln!(md, "```\n\nEvery run's figure: [`{n}.csv`]({n}.csv).\n");
        for s in &self.sections {
            let _ = writeln!(md, "{s}");
        }
        let mut csv = String::from("table,line,bytes,run,value\n");
        for t in &self.tables {
            for l in &t.lines {
                for (bytes, runs) in &l.runs {
                    for (i, v) in runs.iter().enumerate() {
                        let _ = writeln!(csv, "{},{},{bytes},{},{v}", t.id, l.label, i + 1);
                    }
                }
            }
        }
        let write = |name: String, text: &str| {
            let path = self.out.join(name);
            std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok::<PathBuf, String>(path)
        };
        write(format!("{n}.csv"), &csv)?;
        write(format!("{n}.md"), &md)
    }
}

fn title(seed: Seed) -> &'static str {
    match seed {
        Seed::Ipv6 => "MPI over IPv6 across clusters (IPv6 extension to Open MPI)",
        Seed::Relays => "NAT and one relay against two user-level proxies",
        Seed::Tuning => "MPI over TCP on Gigabit Ethernet: buffers, MTU, CPU load, overlap",
        Seed::RawEthernet => "MPI over raw Ethernet",
        Seed::Wan => "WAN-aware protocols on clusters of clusters",
    }
}

/// The date, CPUs and kernel of this machine.
fn machine() -> String {
    let out = |cmd: &str, args: &[&str]| {
        std::process::Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "{}, {} CPUs, Linux {}",
        out("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        out("uname", &["-r"])
    )
}
