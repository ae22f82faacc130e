//! The `lateness` workload alone, for a profiler: `cargo run --release -p timewheel-benches
//! --example lateness_probe -- [JOBS] [round|handoff] [compacting]` (default 300,000 jobs,
//! due over JOBS / 100 ms, so ~100k fires/s; two workers; with `compacting`, compaction
//! folds a journal of 3 x JOBS more jobs beside the fires) prints the lateness on the worker's clock
//! and the engine's own (due to ready queue), in µs. Under `perf sched record` it shows who
//! held the CPUs while a fired job waited.

use timewheel_benches::engine::firing::{Workers, lateness};

fn main() {
    let mut args = std::env::args().skip(1);
    let jobs: u64 = args.next().map_or(300_000, |a| a.parse().expect("JOBS"));
    let workers = match args.next().as_deref() {
        None | Some("round") => Workers::Round,
        Some("handoff") => Workers::Handoff,
        Some(other) => panic!("unknown worker loop {other:?}: round or handoff"),
    };
    let compacting = args.next().as_deref() == Some("compacting");
    let dir = std::env::temp_dir().join(format!("timewheel-lateness-probe-{}", std::process::id()));
    let l = lateness(&dir, jobs, 1_000, compacting, workers);
    let p = |name: &str, q: &timewheel_benches::engine::Percentiles| {
        println!(
            "{name}: p50 {:.0} p90 {:.0} p99 {:.0} p99.9 {:.0} max {:.0} µs",
            q.p50_us, q.p90_us, q.p99_us, q.p999_us, q.max_us
        );
    };
    p("worker's clock", &l.to_claim);
    p("engine, due to ready", &l.to_ready);
    std::fs::remove_dir_all(&dir).ok();
}
