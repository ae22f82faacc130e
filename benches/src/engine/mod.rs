//! End-to-end engine workloads: each opens a fresh data directory, measures one thing and
//! returns its figures (the harness in `crate::harness` runs them beside the peers).
//!
//! Everything durable is `Durability::Sync`: an acknowledgement only after the msync, with
//! group commit. Data directories live under the system temp dir, not /dev/shm: a sync on
//! tmpfs costs nothing and would flatter every durable figure.

pub mod churn;
pub mod firing;
pub mod lifecycle;
pub mod schedule;
pub mod store;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use timewheel::{Clock, SystemClock};

/// The wall clock in ms, as the engine reads it.
pub fn now_ms() -> u64 {
    SystemClock.now_ms()
}

/// The wall clock in µs since the epoch.
pub fn now_us() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(d.as_micros()).expect("fits")
}

/// Schedules `jobs` jobs, the `k`th made by `spec(k)`, in durable batches of `batch`.
pub fn schedule_in_batches(
    engine: &timewheel::Engine,
    jobs: u64,
    batch: u64,
    spec: impl Fn(u64) -> timewheel::JobSpec,
) {
    let mut i = 0;
    while i < jobs {
        let m = batch.min(jobs - i);
        engine
            .schedule_batch((i..i + m).map(&spec))
            .expect("schedule");
        i += m;
    }
}

/// `root/name`, emptied.
pub fn fresh(root: &Path, name: &str) -> PathBuf {
    let d = root.join(name);
    std::fs::remove_dir_all(&d).ok();
    d
}

/// The process's resident memory, from /proc (0 where there is none).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// CPU time this process used so far (user + system), from /proc (0 where there is none).
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// Percentiles of a latency histogram in µs, as the report shows them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Percentiles {
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// The largest.
    pub max_us: f64,
}

impl Percentiles {
    /// From a histogram of µs.
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Self {
        let q = |q: f64| h.value_at_quantile(q) as f64;
        Percentiles {
            p50_us: q(0.5),
            p90_us: q(0.9),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: h.max() as f64,
        }
    }

    /// `(label, value)` pairs, in order.
    pub fn labelled(&self) -> [(&'static str, f64); 5] {
        [
            ("p50", self.p50_us),
            ("p90", self.p90_us),
            ("p99", self.p99_us),
            ("p99.9", self.p999_us),
            ("max", self.max_us),
        ]
    }
}
