//! The plots, as SVG and PNG: throughput bars per workload, and fire-lateness percentiles.
//!
//! Text in the PNGs is drawn with a font compiled into the binary (DejaVu Sans Mono, in
//! `benches/assets/` with its licence), so no system font or fontconfig is needed.

use std::error::Error;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::fmt_value;
use super::results::{Kind, Results, Summary, WorkloadResult};

const FONT: &[u8] = include_bytes!("../../assets/DejaVuSansMono.ttf");
const FAMILY: &str = "sans-serif";

/// The percentile metrics of a lateness workload, in plotting order.
pub const PERCENTILES: [&str; 5] = ["p50", "p90", "p99", "p99.9", "max"];

type PlotResult = Result<(), Box<dyn Error>>;

fn register_font() {
    for style in [FontStyle::Normal, FontStyle::Bold] {
        // Registering twice replaces the entry; the bytes are a valid font (tested).
        plotters::style::register_font(FAMILY, style, FONT).ok();
    }
}

/// Writes `STEM.svg` and `STEM.png` into `dir` for every plot there is data for; returns the
/// stems written.
pub fn write_all(r: &Results, dir: &Path) -> Result<Vec<String>, Box<dyn Error>> {
    register_font();
    let mut stems = Vec::new();
    let throughput: Vec<&WorkloadResult> = r
        .workloads
        .iter()
        .filter(|w| w.kind == Kind::Throughput && !w.metrics.is_empty())
        .collect();
    if !throughput.is_empty() {
        let rows = throughput.len().div_ceil(2);
        let size = (1400, 40 + 230 * rows as u32);
        let svg = dir.join("throughput.svg");
        draw_throughput(
            &SVGBackend::new(&svg, size).into_drawing_area(),
            &throughput,
        )?;
        let png = dir.join("throughput.png");
        draw_throughput(
            &BitMapBackend::new(&png, size).into_drawing_area(),
            &throughput,
        )?;
        stems.push("throughput".to_owned());
    }
    let lateness: Vec<&WorkloadResult> = r
        .workloads
        .iter()
        .filter(|w| w.kind == Kind::Lateness && !w.metrics.is_empty())
        .collect();
    if !lateness.is_empty() {
        let size = (1200, 700);
        let svg = dir.join("lateness.svg");
        draw_lateness(&SVGBackend::new(&svg, size).into_drawing_area(), &lateness)?;
        let png = dir.join("lateness.png");
        draw_lateness(
            &BitMapBackend::new(&png, size).into_drawing_area(),
            &lateness,
        )?;
        stems.push("lateness".to_owned());
    }
    Ok(stems)
}

fn draw_throughput<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    ws: &[&WorkloadResult],
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let root = root.titled(
        "Throughput per system (median bar, min-max line; higher is better)",
        (FAMILY, 22),
    )?;
    let rows = ws.len().div_ceil(2);
    for (w, area) in ws.iter().zip(root.split_evenly((rows, 2))) {
        let m = &w.metrics[0];
        let bars: Vec<(String, Summary)> = m
            .series
            .iter()
            .filter_map(|s| Some((s.system.clone(), Summary::of(&s.values)?)))
            .collect();
        let top = bars.iter().map(|(_, s)| s.max).fold(1.0, f64::max);
        let n = bars.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&area)
            .caption(format!("{} ({})", w.title, m.unit), (FAMILY, 16))
            .margin(8)
            .x_label_area_size(24)
            .y_label_area_size(8)
            .build_cartesian_2d(0.0..top * 2.2, 0.0..n)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_labels(5)
            .x_label_formatter(&|v| fmt_value(*v))
            .label_style((FAMILY, 12))
            .draw()?;
        for (i, (system, s)) in bars.iter().enumerate() {
            // The first system (timewheel) on top.
            let y = n - 1.0 - i as f64;
            let color = Palette99::pick(i).to_rgba();
            chart.draw_series(std::iter::once(Rectangle::new(
                [(0.0, y + 0.15), (s.median, y + 0.85)],
                color.filled(),
            )))?;
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(s.min, y + 0.5), (s.max, y + 0.5)],
                BLACK.stroke_width(2),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("{system}: {}", fmt_value(s.median)),
                (s.max.max(s.median) + top * 0.03, y + 0.7),
                (FAMILY, 13),
            )))?;
        }
    }
    root.present()?;
    Ok(())
}

fn draw_lateness<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    ws: &[&WorkloadResult],
) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    // One line per (workload, system): the median over the runs at each percentile.
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for w in ws {
        let systems: Vec<&str> = w
            .metrics
            .iter()
            .flat_map(|m| m.series.iter().map(|s| s.system.as_str()))
            .fold(Vec::new(), |mut v, s| {
                if !v.contains(&s) {
                    v.push(s);
                }
                v
            });
        for system in systems {
            let points: Vec<(f64, f64)> = PERCENTILES
                .iter()
                .enumerate()
                .filter_map(|(x, p)| {
                    let m = w.metrics.iter().find(|m| m.name == *p)?;
                    let s = m.series.iter().find(|s| s.system == system)?;
                    let median = Summary::of(&s.values)?.median;
                    (median > 0.0).then_some((x as f64, median))
                })
                .collect();
            if !points.is_empty() {
                lines.push((format!("{}: {system}", w.title), points));
            }
        }
    }
    let top = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
        .fold(10.0, f64::max);
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Fire lateness percentiles, µs (median of the runs; log scale; lower is better)",
            (FAMILY, 20),
        )
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.2..4.2, (1.0..top * 2.0).log_scale())?;
    chart
        .configure_mesh()
        .x_labels(5)
        .x_label_formatter(&|x: &f64| {
            let i = x.round();
            if (x - i).abs() < 0.01 && (0.0..5.0).contains(&i) {
                PERCENTILES[i as usize].to_owned()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| fmt_value(*v))
        .y_desc("µs after the due time")
        .label_style((FAMILY, 14))
        .draw()?;
    for (i, (label, points)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::results::Metric;
    use super::*;

    /// Both plots are written from a small result set, as SVG with their labels and as PNG
    /// (the embedded font loads: without it, drawing text fails).
    #[test]
    fn plots_are_written_in_both_formats() {
        let dir = std::env::temp_dir().join(format!("tw-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut t = WorkloadResult {
            id: "batch".into(),
            title: "Batches".into(),
            kind: Kind::Throughput,
            reference: "timewheel".into(),
            ..Default::default()
        };
        let mut l = WorkloadResult {
            id: "lateness".into(),
            title: "Lateness".into(),
            kind: Kind::Lateness,
            reference: "timewheel".into(),
            ..Default::default()
        };
        for run in 0..2 {
            let k = f64::from(run);
            t.record("timewheel", Metric::higher("throughput", "jobs/s"), 1e6 + k);
            t.record("SQLite", Metric::higher("throughput", "jobs/s"), 3e5 + k);
            for (i, p) in PERCENTILES.iter().enumerate() {
                l.record(
                    "timewheel",
                    Metric::lower(p, "µs"),
                    50.0 * (i as f64 + 1.0) + k,
                );
            }
        }
        let r = Results {
            workloads: vec![t, l],
            ..Default::default()
        };
        let stems = write_all(&r, &dir).expect("plots");
        assert_eq!(stems, ["throughput", "lateness"]);
        for stem in &stems {
            let svg = std::fs::read_to_string(dir.join(format!("{stem}.svg"))).expect("svg");
            assert!(svg.contains("<text"), "{stem}.svg has no text");
            let png = std::fs::read(dir.join(format!("{stem}.png"))).expect("png");
            assert_eq!(&png[1..4], b"PNG");
        }
        let svg = std::fs::read_to_string(dir.join("throughput.svg")).expect("svg");
        assert!(svg.contains("SQLite: 300,000"), "the bar's label");
        std::fs::remove_dir_all(&dir).ok();
    }
}
