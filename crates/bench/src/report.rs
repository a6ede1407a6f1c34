//! A benchmark's report: the figures of every system per message size, rendered as an
//! aligned table, JSON or CSV.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::programs::System;
use crate::stats::Summary;

#[derive(Debug, Serialize)]
pub struct SystemReport {
    pub name: System,
    /// What the library says it is (`MPI_Get_library_version`).
    pub library: Option<String>,
    /// Why its runs stopped (its figures are left out).
    pub failed: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Row {
    pub bytes: u64,
    pub results: BTreeMap<System, Summary>,
    /// pontoon's median / the anchor's.
    pub ratio: Option<f64>,
    /// User + system CPU seconds of every rank per GB moved, where the test measures it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cpu_s_per_gb: BTreeMap<System, Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ratio: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub test: String,
    pub what: String,
    pub unit: &'static str,
    /// Whether lower or higher figures are better.
    pub better: &'static str,
    pub ranks: u32,
    /// Where the ranks ran.
    pub place: String,
    pub runs: u32,
    pub systems: Vec<SystemReport>,
    pub anchor: Option<System>,
    pub rows: Vec<Row>,
}

pub fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

pub fn figure(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

impl Report {
    /// The systems with figures, in the order of the columns.
    fn columns(&self) -> Vec<System> {
        self.systems
            .iter()
            .filter(|s| s.failed.is_none())
            .map(|s| s.name)
            .collect()
    }

    /// An aligned table: median (min-max) per system, and the ratio to the anchor.
    pub fn table(&self) -> String {
        let mut out = format!(
            "pontoon bench {}: {}, on {}; {}, {} is better; median (min-max) of {} run(s) each, the systems taking turns\n",
            self.test, self.what, self.place, self.unit, self.better, self.runs
        );
        for s in &self.systems {
            let lib = s.library.as_deref().unwrap_or("?");
            match &s.failed {
                None => {
                    let _ = writeln!(out, "  {}: {lib}", s.name.name());
                }
                Some(why) => {
                    let _ = writeln!(out, "  {}: FAILED, left out: {why}", s.name.name());
                }
            }
        }
        out.push_str(&self.grid(|r| (&r.results, r.ratio)));
        if self.rows.iter().any(|r| !r.cpu_s_per_gb.is_empty()) {
            out.push_str(
                "CPU seconds per GB moved (user + system of every rank, getrusage), lower is better\n",
            );
            out.push_str(&self.grid(|r| (&r.cpu_s_per_gb, r.cpu_ratio)));
        }
        out
    }

    /// Aligned rows of one figure per system; `pick` gives a row's figures and ratio.
    fn grid(&self, pick: impl Fn(&Row) -> (&BTreeMap<System, Summary>, Option<f64>)) -> String {
        let cols = self.columns();
        let mut header = vec!["bytes".to_string()];
        header.extend(cols.iter().map(|s| s.name().to_string()));
        if let Some(a) = self.anchor {
            header.push(format!("pontoon/{}", a.name()));
        }
        let mut lines = vec![header];
        for r in &self.rows {
            let (figures, ratio) = pick(r);
            let mut line = vec![size(r.bytes)];
            for s in &cols {
                line.push(figures.get(s).map_or("-".into(), |m| {
                    format!("{} ({}-{})", figure(m.median), figure(m.min), figure(m.max))
                }));
            }
            if self.anchor.is_some() {
                line.push(ratio.map_or("-".into(), |x| format!("{x:.2}")));
            }
            lines.push(line);
        }
        let widths: Vec<usize> = (0..lines[0].len())
            .map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for l in &lines {
            let cells: Vec<String> = l
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:>w$}", w = *w))
                .collect();
            let _ = writeln!(out, "{}", cells.join("  "));
        }
        out
    }

    /// Every run of every figure: `test,figure,system,bytes,run,value` (figure: the
    /// test's unit, or `cpu_s_per_GB`).
    pub fn csv(&self) -> String {
        let mut out = String::from("test,figure,system,bytes,run,value\n");
        for r in &self.rows {
            for (figure, m) in [(self.unit, &r.results), ("cpu_s_per_GB", &r.cpu_s_per_gb)] {
                for (s, m) in m {
                    for (i, v) in m.runs.iter().enumerate() {
                        let _ = writeln!(
                            out,
                            "{},{figure},{},{},{},{v}",
                            self.test,
                            s.name(),
                            r.bytes,
                            i + 1
                        );
                    }
                }
            }
        }
        out
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        let s = |v: &[f64]| Summary::of(v).unwrap();
        Report {
            test: "latency".into(),
            what: "one-way latency".into(),
            unit: "µs",
            better: "lower",
            ranks: 2,
            place: "this host".into(),
            runs: 2,
            systems: vec![
                SystemReport {
                    name: System::Pontoon,
                    library: Some("pontoon 0.1".into()),
                    failed: None,
                },
                SystemReport {
                    name: System::Mpich,
                    library: Some("MPICH 4".into()),
                    failed: None,
                },
                SystemReport {
                    name: System::Openmpi,
                    library: None,
                    failed: Some("mpirun exited with 1".into()),
                },
            ],
            anchor: Some(System::Mpich),
            rows: vec![
                Row {
                    bytes: 8,
                    results: [(System::Pontoon, s(&[1.0, 2.0])), (System::Mpich, s(&[2.0, 4.0]))].into(),
                    ratio: Some(0.5),
                    cpu_s_per_gb: [(System::Pontoon, s(&[0.5, 0.7]))].into(),
                    cpu_ratio: None,
                },
                Row {
                    bytes: 1 << 20,
                    results: [(System::Pontoon, s(&[150.0, 250.0]))].into(),
                    ratio: None,
                    cpu_s_per_gb: BTreeMap::new(),
                    cpu_ratio: None,
                },
            ],
        }
    }

    #[test]
    fn the_table_aligns_columns_and_names_failures() {
        let t = report().table();
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with("pontoon bench latency: one-way latency, on this host; µs, lower is better")
        );
        assert!(
            t.contains("openmpi: FAILED, left out: mpirun exited with 1"),
            "{t}"
        );
        let header = lines
            .iter()
            .position(|l| l.trim_start().starts_with("bytes"))
            .unwrap();
        assert!(lines[header].ends_with("pontoon/mpich"), "{t}");
        assert!(
            lines[header + 1].contains("1.50 (1.00-2.00)") && lines[header + 1].ends_with("0.50"),
            "{t}"
        );
        assert!(lines[header + 2].starts_with("   1M") || lines[header + 2].trim_start().starts_with("1M"));
        assert!(
            lines[header + 2].contains("200 (150-250)") && lines[header + 2].ends_with('-'),
            "{t}"
        );
        let widths: Vec<usize> = lines[header..header + 3]
            .iter()
            .map(|l| l.chars().count())
            .collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "aligned: {t}");
        assert!(lines[header + 3].starts_with("CPU seconds per GB moved"), "{t}");
        assert!(lines[header + 5].contains("0.60 (0.50-0.70)"), "{t}");
    }

    #[test]
    fn csv_and_json_carry_every_run() {
        let r = report();
        let csv = r.csv();
        assert_eq!(csv.lines().count(), 1 + 2 + 2 + 2 + 2);
        assert!(csv.contains("latency,µs,mpich,8,2,4\n"), "{csv}");
        assert!(csv.contains("latency,cpu_s_per_GB,pontoon,8,2,0.7\n"), "{csv}");
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v["anchor"], "mpich");
        assert_eq!(
            v["rows"][0]["results"]["pontoon"]["runs"],
            serde_json::json!([1.0, 2.0])
        );
        assert_eq!(v["systems"][2]["failed"], "mpirun exited with 1");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(0), "0");
        assert_eq!(size(1000), "1000");
        assert_eq!(size(4096), "4K");
        assert_eq!(size(3 << 20), "3M");
    }
}
