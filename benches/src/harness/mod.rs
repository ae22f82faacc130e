//! The side-by-side harness: every workload against timewheel and its peers in one process
//! run, interleaved, then a Markdown report, the raw results as JSON, plots, and the generated
//! part of docs/benchmarks.md.
//!
//! A workload is a list of systems, each with a closure that measures it once. Run `r` of a
//! workload measures every system once, in order, before run `r + 1` starts (round-robin), so
//! that drift of the machine (another job, the disk's cache, thermal state) hits all systems
//! of a workload alike rather than all runs of one.

pub mod cli;
pub mod docs;
pub mod headline;
pub mod machine;
pub mod plot;
pub mod report;
pub mod results;
pub mod workloads;

use std::io::IsTerminal;
use std::panic::{AssertUnwindSafe, catch_unwind};

use indicatif::{ProgressBar, ProgressStyle};

use results::{Kind, Metric, WorkloadResult};

/// One measurement of a system: its figures, or why it failed.
pub type Measure = Box<dyn FnMut() -> Result<Vec<(Metric, f64)>, String>>;

/// A system under test within a workload.
pub struct System {
    /// Its name in the tables (the first system of a workload is the reference).
    pub name: String,
    /// Measures it once.
    pub measure: Measure,
}

impl System {
    /// A system measured by `measure`.
    pub fn new(
        name: impl Into<String>,
        measure: impl FnMut() -> Result<Vec<(Metric, f64)>, String> + 'static,
    ) -> Self {
        System {
            name: name.into(),
            measure: Box::new(measure),
        }
    }
}

/// A workload: the same measurement of several systems.
pub struct Workload {
    /// Short id, as `--only` takes it.
    pub id: &'static str,
    /// The table's title.
    pub title: String,
    /// What exactly runs.
    pub note: String,
    /// Which plot it goes into.
    pub kind: Kind,
    /// Runs of every system.
    pub runs: usize,
    /// The systems, timewheel's first.
    pub systems: Vec<System>,
}

/// Where progress goes: a bar on a terminal, a line per measurement otherwise (CI logs).
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Progress over `total` measurements.
    pub fn new(total: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar
        });
        Progress { bar }
    }

    fn start(&self, what: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(what.to_owned()),
            None => eprintln!("harness: {what}"),
        }
    }

    fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// How many measurements `workloads` make.
pub fn measurements(workloads: &[Workload]) -> u64 {
    workloads
        .iter()
        .map(|w| (w.runs * w.systems.len()) as u64)
        .sum()
}

/// Runs one workload, round-robin over its systems for its runs. A system that fails (an
/// error, or a panic) is recorded as an error and not measured again.
pub fn run_workload(w: &mut Workload, progress: &Progress) -> WorkloadResult {
    let mut out = WorkloadResult {
        id: w.id.to_owned(),
        title: w.title.clone(),
        note: w.note.clone(),
        kind: w.kind,
        reference: w
            .systems
            .first()
            .map(|s| s.name.clone())
            .unwrap_or_default(),
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let mut failed = vec![false; w.systems.len()];
    for run in 0..w.runs {
        for (i, system) in w.systems.iter_mut().enumerate() {
            if failed[i] {
                progress.done();
                continue;
            }
            progress.start(&format!(
                "{}: {} (run {}/{})",
                w.id,
                system.name,
                run + 1,
                w.runs
            ));
            let got = catch_unwind(AssertUnwindSafe(|| (system.measure)()))
                .unwrap_or_else(|panic| Err(panic_text(&panic)));
            match got {
                Ok(figures) => {
                    for (metric, value) in figures {
                        out.record(&system.name, metric, value);
                    }
                }
                Err(e) => {
                    failed[i] = true;
                    out.errors
                        .push(format!("{} (run {}): {e}", system.name, run + 1));
                }
            }
            progress.done();
        }
    }
    out.elapsed_s = started.elapsed().as_secs_f64();
    out
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    let text = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic".to_owned());
    format!("panicked: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Runs go round-robin over the systems (a, b, a, b, ...), and a system that fails once is
    /// reported and skipped in later runs while the others go on.
    #[test]
    fn runs_are_interleaved_and_failures_recorded() {
        let order = Rc::new(RefCell::new(Vec::new()));
        let metric = Metric::higher("rate", "ops/s");
        let system = |name: &'static str, fail: bool| {
            let order = order.clone();
            System::new(name, move || {
                order.borrow_mut().push(name);
                if fail {
                    panic!("boom");
                }
                Ok(vec![(metric, 1.0)])
            })
        };
        let mut w = Workload {
            id: "t",
            title: "T".into(),
            note: String::new(),
            kind: Kind::Other,
            runs: 3,
            systems: vec![system("a", false), system("b", false), system("c", true)],
        };
        let r = run_workload(&mut w, &Progress { bar: None });
        assert_eq!(*order.borrow(), ["a", "b", "c", "a", "b", "a", "b"]);
        assert_eq!(r.reference, "a");
        assert_eq!(r.metrics[0].series.len(), 2);
        assert_eq!(r.metrics[0].series[1].values, vec![1.0; 3]);
        assert_eq!(r.errors, ["c (run 1): panicked: boom"]);
    }
}
