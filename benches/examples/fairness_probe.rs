//! The harness's `fairness` workload with knobs: tenant 1's running limit, the background
//! compactor on or off, the journal's segment size. Prints tenant 2's due-to-claim percentiles
//! for each run.
//!
//! `cargo run --release -p timewheel-benches --example fairness_probe -- [A_JOBS] [LIMIT]
//! [on|off] [SEGMENT_MIB] [RUNS]` (defaults: 1000000 64 on 64 3; data under the system temp dir)

fn main() {
    let mut args = std::env::args().skip(1);
    let a_jobs: u64 = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("a job count"));
    let limit: u32 = args
        .next()
        .map_or(64, |s| s.parse().expect("a running limit"));
    let compaction = match args.next().as_deref() {
        None | Some("on") => true,
        Some("off") => false,
        Some(other) => panic!("compaction `on` or `off`, not {other:?}"),
    };
    let segment_mib: u64 = args.next().map_or(64, |s| s.parse().expect("MiB"));
    let runs: u32 = args.next().map_or(3, |s| s.parse().expect("a run count"));
    println!(
        "tenant 1: {a_jobs} jobs in one second, limited to {limit} running; tenant 2: 1000; \
         background compaction {}; segments of {segment_mib} MiB",
        if compaction { "on" } else { "off" }
    );
    for run in 0..runs {
        let dir = std::env::temp_dir().join(format!(
            "timewheel-fairness-probe-{}-{run}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let p = timewheel_benches::engine::lifecycle::fairness_with(
            &dir,
            a_jobs,
            1000,
            true,
            limit,
            |c| {
                if !compaction {
                    c.compact_interval_ms = 0;
                }
                c.segment_bytes = segment_mib << 20;
            },
        );
        println!(
            "run {run}: tenant 2 due to claim p50 {:.2} ms, p90 {:.2}, p99 {:.2}, p99.9 {:.2}, \
             max {:.2}",
            p.p50_us / 1000.0,
            p.p90_us / 1000.0,
            p.p99_us / 1000.0,
            p.p999_us / 1000.0,
            p.max_us / 1000.0
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
