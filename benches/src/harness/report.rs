//! The Markdown report: the run described, then one table per workload with each system's
//! min / median / max over the runs and its median's ratio to timewheel's.

use std::fmt::Write as _;

use super::results::{Results, Summary, WorkloadResult};

/// A value for a table: thousands separated from 10 000 up, a few significant digits below.
pub fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a >= 10_000.0 {
        let s = format!("{:.0}", a);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if v < 0.0 { format!("-{out}") } else { out }
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A ratio: `2.31x`.
pub fn fmt_ratio(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}x")
    } else if r >= 10.0 {
        format!("{r:.1}x")
    } else {
        format!("{r:.2}x")
    }
}

/// Where the plots are, relative to the Markdown file.
pub struct PlotLinks<'a> {
    /// A directory prefix, `""` beside the report.
    pub prefix: &'a str,
    /// The plot files' stems that exist (`throughput`, `lateness`, ...).
    pub stems: &'a [String],
}

/// The whole report; `level` is the heading level of its title (1 for report.md, 2 inside
/// docs/benchmarks.md).
pub fn markdown(r: &Results, level: usize, plots: &PlotLinks) -> String {
    let h = |n: usize| "#".repeat(level + n);
    let mut out = String::new();
    let kind = if r.quick { "quick" } else { "full" };
    let _ = writeln!(out, "{} Harness run ({kind}), {}\n", h(0), r.date);
    let _ = writeln!(out, "- command: `{}`", r.command);
    let _ = writeln!(out, "- commit: `{}`", r.commit);
    let _ = writeln!(out, "- machine: {}", r.machine.line());
    let _ = writeln!(
        out,
        "- {} runs per workload unless a table says otherwise, interleaved: each run goes \
         round-robin over the workload's systems, so drift of the machine hits all of them alike; \
         the whole run took {:.0} s{}",
        r.runs,
        r.elapsed_s,
        if r.build_s >= 1.0 {
            format!(
                " (after {:.0} s building the release sidecar binary)",
                r.build_s
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "- `× timewheel` is the system's median over timewheel's (the table's first system) for \
         that figure: above 1 is more, not better; each figure says which way is better"
    );
    for s in &r.skipped {
        let _ = writeln!(out, "- skipped: {s}");
    }
    out.push('\n');
    for stem in plots.stems {
        let _ = writeln!(out, "![{stem}]({}{stem}.svg)", plots.prefix);
    }
    if !plots.stems.is_empty() {
        let _ = writeln!(
            out,
            "\n(PNG versions beside them: {})\n",
            plots
                .stems
                .iter()
                .map(|s| format!("[{s}.png]({}{s}.png)", plots.prefix))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for w in &r.workloads {
        table(&mut out, w, &h(1));
    }
    out
}

fn table(out: &mut String, w: &WorkloadResult, heading: &str) {
    let _ = writeln!(out, "{heading} {} (`{}`)\n", w.title, w.id);
    let _ = writeln!(out, "{} (took {:.0} s)\n", w.note, w.elapsed_s);
    let _ = writeln!(
        out,
        "| figure | system | runs | min | median | max | × timewheel |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|");
    for m in &w.metrics {
        let better = if m.higher_is_better {
            "higher"
        } else {
            "lower"
        };
        for (i, s) in m.series.iter().enumerate() {
            let Some(sum) = Summary::of(&s.values) else {
                continue;
            };
            let figure = if i == 0 {
                format!("{} ({}; {better} is better)", m.name, m.unit)
            } else {
                String::new()
            };
            let ratio = match m.ratio(&s.system, &w.reference) {
                Some(r) if s.system != w.reference => fmt_ratio(r),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "| {figure} | {} | {} | {} | {} | {} | {ratio} |",
                s.system,
                s.values.len(),
                fmt_value(sum.min),
                fmt_value(sum.median),
                fmt_value(sum.max)
            );
        }
    }
    for e in &w.errors {
        let _ = writeln!(out, "\n- failed: {e}");
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::super::results::{Metric, Results, WorkloadResult};
    use super::*;

    /// Numbers read as a person writes them.
    #[test]
    fn values_are_formatted_for_reading() {
        assert_eq!(fmt_value(1_234_567.4), "1,234,567");
        assert_eq!(fmt_value(12_345.0), "12,345");
        assert_eq!(fmt_value(-12_345.0), "-12,345");
        assert_eq!(fmt_value(999.6), "1000");
        assert_eq!(fmt_value(42.25), "42.2");
        assert_eq!(fmt_value(2.5), "2.50");
        assert_eq!(fmt_value(0.0), "0");
        assert_eq!(fmt_ratio(0.456), "0.46x");
        assert_eq!(fmt_ratio(12.34), "12.3x");
    }

    /// A table row per system with min / median / max and the ratio of medians to the
    /// reference; the reference's own ratio cell is empty.
    #[test]
    fn table_rows_carry_the_summary_and_the_ratio() {
        let mut w = WorkloadResult {
            id: "batch".into(),
            title: "Batches".into(),
            reference: "timewheel".into(),
            ..Default::default()
        };
        let m = Metric::higher("throughput", "jobs/s");
        for (a, b) in [(100.0, 10.0), (300.0, 30.0), (200.0, 50.0)] {
            w.record("timewheel", m, a);
            w.record("SQLite", m, b);
        }
        let r = Results {
            runs: 3,
            workloads: vec![w],
            skipped: vec!["Redis: not on PATH".into()],
            ..Default::default()
        };
        let md = markdown(
            &r,
            1,
            &PlotLinks {
                prefix: "",
                stems: &["throughput".into()],
            },
        );
        assert!(
            md.contains(
                "| throughput (jobs/s; higher is better) | timewheel | 3 | 100 | 200 | 300 |  |"
            ),
            "{md}"
        );
        assert!(
            md.contains("|  | SQLite | 3 | 10.0 | 30.0 | 50.0 | 0.15x |"),
            "{md}"
        );
        assert!(md.contains("- skipped: Redis: not on PATH"));
        assert!(md.contains("![throughput](throughput.svg)"));
        assert!(md.contains("## Batches (`batch`)"));
    }
}
