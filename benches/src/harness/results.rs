//! The raw results of a harness run (what `results.json` holds) and their summaries.

use serde::{Deserialize, Serialize};

use super::machine::Machine;

/// One figure a workload reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metric {
    /// What it measures, e.g. "jobs/s" or "p99".
    pub name: &'static str,
    /// Its unit, e.g. "jobs/s", "µs".
    pub unit: &'static str,
    /// Whether a larger value is better (throughput) or worse (latency, bytes).
    pub higher_is_better: bool,
}

impl Metric {
    /// A figure where more is better.
    pub const fn higher(name: &'static str, unit: &'static str) -> Self {
        Metric {
            name,
            unit,
            higher_is_better: true,
        }
    }

    /// A figure where less is better.
    pub const fn lower(name: &'static str, unit: &'static str) -> Self {
        Metric {
            name,
            unit,
            higher_is_better: false,
        }
    }
}

/// Everything one run of the harness measured, and where.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Results {
    /// The command line, as it would be typed.
    pub command: String,
    /// `git describe`-like: the commit the harness was built from, `-dirty` if changed.
    pub commit: String,
    /// When the run started, UTC, RFC 3339.
    pub date: String,
    /// Whether this was a `--quick` run.
    pub quick: bool,
    /// Runs per workload (some workloads take fewer; each series has its own values).
    pub runs: usize,
    /// The machine.
    pub machine: Machine,
    /// How long the whole run took, s, from after the sidecar binary's build.
    pub elapsed_s: f64,
    /// How long building the release sidecar binary took first, s (0 when it was up to date
    /// or not built by us).
    #[serde(default)]
    pub build_s: f64,
    /// Systems or workloads left out, and why (one line each).
    pub skipped: Vec<String>,
    /// The workloads, in the order they ran.
    pub workloads: Vec<WorkloadResult>,
}

/// One workload's figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkloadResult {
    /// Short id (`batch`, `wheel-1m`, ...), as `--only` takes it.
    pub id: String,
    /// A title for the report.
    pub title: String,
    /// What exactly runs, for the report.
    pub note: String,
    /// How it is plotted.
    pub kind: Kind,
    /// The system the ratios are taken against (timewheel's).
    pub reference: String,
    /// The figures, in the order first reported.
    pub metrics: Vec<MetricResult>,
    /// Failures during the run, one line each.
    pub errors: Vec<String>,
    /// How long the workload took, all runs and systems, s.
    pub elapsed_s: f64,
}

/// Which plot a workload goes into.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// Its first metric is a throughput: the throughput bars.
    Throughput,
    /// Its metrics are lateness percentiles (p50 .. max): the lateness plot.
    Lateness,
    /// Tables only.
    #[default]
    Other,
}

/// One figure across the systems of a workload.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MetricResult {
    /// See [`Metric::name`].
    pub name: String,
    /// See [`Metric::unit`].
    pub unit: String,
    /// See [`Metric::higher_is_better`].
    pub higher_is_better: bool,
    /// One series per system, in the order the systems ran.
    pub series: Vec<Series>,
}

/// Every run's value of one figure for one system.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Series {
    /// The system.
    pub system: String,
    /// One value per run, in run order.
    pub values: Vec<f64>,
}

impl WorkloadResult {
    /// Adds one run's `value` of `metric` for `system`.
    pub fn record(&mut self, system: &str, metric: Metric, value: f64) {
        let m = match self.metrics.iter().position(|m| m.name == metric.name) {
            Some(i) => &mut self.metrics[i],
            None => {
                self.metrics.push(MetricResult {
                    name: metric.name.to_owned(),
                    unit: metric.unit.to_owned(),
                    higher_is_better: metric.higher_is_better,
                    series: Vec::new(),
                });
                self.metrics.last_mut().expect("just pushed")
            }
        };
        match m.series.iter_mut().find(|s| s.system == system) {
            Some(s) => s.values.push(value),
            None => m.series.push(Series {
                system: system.to_owned(),
                values: vec![value],
            }),
        }
    }
}

/// Min, median and max of a series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// The smallest value.
    pub min: f64,
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The largest value.
    pub max: f64,
}

impl Summary {
    /// The summary of `values`, or `None` if there are none (NaNs are left out).
    pub fn of(values: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Some(Summary {
            min: v[0],
            median,
            max: v[v.len() - 1],
        })
    }
}

impl MetricResult {
    /// The reference system's median, if it has one (and it is not 0).
    pub fn reference_median(&self, reference: &str) -> Option<f64> {
        let s = self.series.iter().find(|s| s.system == reference)?;
        Summary::of(&s.values)
            .map(|s| s.median)
            .filter(|m| *m != 0.0)
    }

    /// `system`'s median over the reference's: how many times the reference's figure it is.
    pub fn ratio(&self, system: &str, reference: &str) -> Option<f64> {
        let base = self.reference_median(reference)?;
        let s = self.series.iter().find(|s| s.system == system)?;
        Summary::of(&s.values).map(|s| s.median / base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary sorts, takes the middle (or the mean of the middle two), and skips NaN.
    #[test]
    fn summary_min_median_max() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).expect("values");
        assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 3.0));
        let s = Summary::of(&[4.0, 1.0, 3.0, 10.0]).expect("values");
        assert_eq!((s.min, s.median, s.max), (1.0, 3.5, 10.0));
        let s = Summary::of(&[f64::NAN, 5.0]).expect("values");
        assert_eq!((s.min, s.median, s.max), (5.0, 5.0, 5.0));
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[f64::NAN]).is_none());
    }

    /// Values land in one series per (metric, system) in run order, and the ratio is of
    /// medians against the reference.
    #[test]
    fn record_and_ratio() {
        let mut w = WorkloadResult {
            reference: "tw".into(),
            ..Default::default()
        };
        let m = Metric::higher("rate", "jobs/s");
        for (tw, peer) in [(10.0, 2.0), (30.0, 4.0), (20.0, 9.0)] {
            w.record("tw", m, tw);
            w.record("peer", m, peer);
        }
        w.record("tw", Metric::lower("p99", "µs"), 7.0);
        assert_eq!(w.metrics.len(), 2);
        let rate = &w.metrics[0];
        assert_eq!(rate.series[0].values, vec![10.0, 30.0, 20.0]);
        assert_eq!(rate.series[1].system, "peer");
        assert_eq!(rate.ratio("peer", "tw"), Some(0.2));
        assert_eq!(rate.ratio("tw", "tw"), Some(1.0));
        assert_eq!(w.metrics[1].ratio("peer", "tw"), None);
    }
}
