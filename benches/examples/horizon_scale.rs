//! The resident horizon at a scale the harness does not run (issue 9's goal names 100M jobs):
//! `N` jobs due over 30 days with a 2-hour horizon, scheduled in batches of 100,000 and
//! compacted after each, then reopened in a fresh process (the harness's `horizon` workload,
//! `timewheel_benches::engine::store::horizon`, at another size). Prints what it measured and
//! the directory's bytes; needs about 81 bytes of disk per job.
//!
//! `cargo build --release -p timewheel-benches && cargo run --release -p timewheel-benches
//! --example horizon_scale -- 100000000 /path/on/a/real/disk [--keep]` (`--keep` leaves the
//! directory for a look: `timewheel inspect`, or another reopen)

use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let jobs: u64 = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("a job count"));
    let dir = PathBuf::from(
        args.next()
            .unwrap_or_else(|| format!("target/horizon-scale-{jobs}")),
    );
    let keep = args.next().as_deref() == Some("--keep");
    let _ = std::fs::remove_dir_all(&dir);
    // The harness binary serves as the reopening child.
    let exe = std::env::current_exe()
        .expect("this example's path")
        .parent()
        .and_then(|examples| examples.parent())
        .expect("target/release")
        .join("timewheel-benches");
    let t = std::time::Instant::now();
    let h = timewheel_benches::engine::store::horizon(&dir, jobs, &exe).expect("horizon");
    let bytes: u64 = std::fs::read_dir(&dir)
        .expect("the data directory")
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "{jobs} jobs: scheduled and compacted {:.0} jobs/s; reopen {:.0} ms, {:.1} MiB resident \
         ({:.1} MiB after 3 s idle), idle CPU {:.2} % of a core; {bytes} bytes on disk ({:.1} \
         per job); {:.0} s in all",
        h.scheduled_per_s,
        h.reopen_ms,
        h.reopen_rss_mib,
        h.idle_rss_mib,
        h.idle_cpu_percent,
        bytes as f64 / jobs as f64,
        t.elapsed().as_secs_f64()
    );
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
