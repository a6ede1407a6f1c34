//! Charts of figures against message size, one line per system or setting: SVG (viewable
//! in a browser) or PNG. Text is laid out with DejaVu Sans, bundled in the binary, so a
//! chart looks the same on a host without fonts.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;

use crate::report::{size, Report};

/// One line: medians with their min-max, by message size.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    /// (bytes, median, min, max)
    pub points: Vec<(u64, f64, f64, f64)>,
}

#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub y_label: String,
    /// Latencies span decades: logarithmic. Rates: linear from zero.
    pub log_y: bool,
    /// What the x axis counts (its values double, or nearly: a base-2 logarithmic axis).
    pub x_desc: String,
    pub series: Vec<Series>,
}

const FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
const COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

impl Report {
    /// The report as a chart: one line per system that has figures.
    pub fn chart(&self) -> Chart {
        let series = self
            .systems
            .iter()
            .filter(|s| s.failed.is_none())
            .map(|s| Series {
                name: s.name.name().into(),
                points: self
                    .rows
                    .iter()
                    .filter_map(|r| {
                        let m = r.results.get(&s.name)?;
                        Some((r.bytes, m.median, m.min, m.max))
                    })
                    .collect(),
            })
            .collect();
        Chart {
            title: format!("pontoon bench {}: {} ({})", self.test, self.what, self.place),
            y_label: format!("{}, {} is better", self.unit, self.better),
            log_y: self.better == "lower",
            x_desc: "message size, bytes".into(),
            series,
        }
    }
}

impl Chart {
    /// Draws the chart into `path`: SVG or PNG by its extension.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let what = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
        match path.extension().and_then(|e| e.to_str()) {
            Some("svg") => self.draw(SVGBackend::new(path, (900, 560)).into_drawing_area()),
            Some("png") => self.draw(BitMapBackend::new(path, (900, 560)).into_drawing_area()),
            _ => return Err(what(&"the file name ends in .svg or .png")),
        }
        .map_err(|e| what(&e))
    }

    fn draw<B: DrawingBackend>(&self, root: DrawingArea<B, plotters::coord::Shift>) -> Result<(), String>
    where
        B::ErrorType: 'static,
    {
        static REGISTER: Once = Once::new();
        REGISTER.call_once(|| {
            // The bundled font is a valid TrueType file: checked by a test.
            let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
        });
        let e = |e: DrawingAreaErrorKind<B::ErrorType>| e.to_string();
        // A logarithmic size axis has no room for 0 bytes.
        let points = || {
            self.series
                .iter()
                .flat_map(|s| s.points.iter())
                .filter(|p| p.0 > 0)
        };
        let (x_lo, x_hi) = points().fold((u64::MAX, 1), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
        let (y_lo, y_hi) = points().fold((f64::INFINITY, 0.0f64), |(lo, hi), p| (lo.min(p.2), hi.max(p.3)));
        if x_lo == u64::MAX {
            return Err("no figures to draw".into());
        }
        // A logarithmic axis has no room for figures that are all zero; a linear one does.
        if self.log_y && (y_hi <= 0.0 || y_hi.is_nan()) {
            return Err("no positive figures to draw on a logarithmic axis".into());
        }
        root.fill(&WHITE).map_err(e)?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(&self.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(72);
        // Sizes double: the axis is their base-2 logarithm, labelled with the sizes.
        let log2 = |b: u64| (b as f64).log2();
        let x_range = log2(x_lo) - 0.4..log2(x_hi) + 0.4;
        let x_fmt = |x: &f64| {
            let whole = x.round();
            if (x - whole).abs() < 1e-6 && whole >= 0.0 {
                size(1u64 << whole as u32)
            } else {
                String::new()
            }
        };
        macro_rules! finish {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(&self.x_desc)
                    .y_desc(&self.y_label)
                    .x_label_formatter(&x_fmt)
                    .x_labels(((log2(x_hi) - log2(x_lo)) as usize + 1).min(24))
                    .label_style(("sans-serif", 13))
                    .draw()
                    .map_err(e)?;
                for (i, s) in self.series.iter().enumerate() {
                    let color = COLORS[i % COLORS.len()];
                    let pts: Vec<_> = s.points.iter().filter(|p| p.0 > 0).collect();
                    chart
                        .draw_series(LineSeries::new(
                            pts.iter().map(|p| (log2(p.0), p.1)),
                            color.stroke_width(2),
                        ))
                        .map_err(e)?
                        .label(&s.name)
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                        });
                    chart
                        .draw_series(
                            pts.iter()
                                .map(|p| ErrorBar::new_vertical(log2(p.0), p.2, p.1, p.3, color.filled(), 6)),
                        )
                        .map_err(e)?;
                }
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .label_font(("sans-serif", 13))
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .draw()
                    .map_err(e)?;
            }};
        }
        if self.log_y {
            let y = (y_lo.max(y_hi * 1e-6) / 1.3..y_hi * 1.3).log_scale();
            finish!(builder.build_cartesian_2d(x_range, y).map_err(e)?);
        } else {
            let top = if y_hi > 0.0 { y_hi * 1.1 } else { 1.0 };
            finish!(builder.build_cartesian_2d(x_range, 0.0..top).map_err(e)?);
        }
        root.present().map_err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(log_y: bool) -> Chart {
        let line = |name: &str, k: f64| Series {
            name: name.into(),
            points: [0u64, 8, 1024, 1 << 20]
                .iter()
                .map(|&b| (b, k * (1.0 + b as f64 / 1e3), k, 2.0 * k * (1.0 + b as f64 / 1e3)))
                .collect(),
        };
        Chart {
            title: "latency".into(),
            y_label: "µs, lower is better".into(),
            log_y,
            x_desc: "message size, bytes".into(),
            series: vec![line("pontoon", 1.0), line("mpich", 2.0)],
        }
    }

    #[test]
    fn the_bundled_font_is_a_font() {
        assert!(plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok());
    }

    #[test]
    fn svg_and_png_charts_are_written_with_every_series_named() {
        let dir = std::env::temp_dir().join(format!("pontoon-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("c.svg");
        chart(true).write(&svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(
            text.starts_with("<svg") && text.trim_end().ends_with("</svg>"),
            "{text}"
        );
        for name in ["pontoon", "mpich", "message size, bytes", "1K", "1M"] {
            assert!(text.contains(name), "{name} missing");
        }
        let png = dir.join("c.png");
        chart(false).write(&png).unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(chart(false)
            .write(&dir.join("c.pdf"))
            .unwrap_err()
            .contains(".svg or .png"));
        let empty = Chart {
            series: vec![],
            ..chart(true)
        };
        assert!(empty.write(&svg).unwrap_err().contains("no figures"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
