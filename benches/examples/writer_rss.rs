//! The resident memory of the process that schedules far-future jobs, as it goes: `N` jobs due
//! over 30 days with a 2-hour horizon, in batches of 100,000, each compacted at once (as in the
//! harness's `horizon` workload); prints the process's RSS every million jobs.
//!
//! `cargo run --release -p timewheel-benches --example writer_rss -- 4000000`

use timewheel::Engine;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

fn main() {
    let jobs: u64 = std::env::args()
        .nth(1)
        .map_or(4_000_000, |s| s.parse().expect("a job count"));
    let dir = std::path::PathBuf::from("target/writer-rss");
    let _ = std::fs::remove_dir_all(&dir);
    let engine =
        Engine::open(timewheel_benches::engine::store::horizon_config(&dir)).expect("open");
    timewheel_benches::engine::store::schedule_far(&engine, jobs, |i| {
        if i % 1_000_000 == 0 {
            let store = engine.store_stats();
            println!(
                "{i} jobs scheduled: {:.0} MiB resident; {} jobs in memory ({} evicted)",
                rss_mib(),
                engine.stats().scheduled - store.non_resident,
                store.evicted
            );
        }
    });
    engine.close().expect("close");
    let _ = std::fs::remove_dir_all(&dir);
}
