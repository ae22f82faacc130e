//! Durable `schedule_batch` throughput with nothing newer than the first session's API, so that
//! it builds at any commit of this repository: `history.sh` copies it into a worktree's
//! `examples/` and runs it there. Not part of the workspace's build.
//!
//! `bisect_batch [JOBS] [BATCH]` (default 2,000,000 jobs in batches of 10,000): a fresh
//! directory, jobs due over the next hour with 16-byte payloads, `Durability::Sync` (the
//! default), one thread; prints jobs/s from the first call to the last acknowledgement.
use std::time::Instant;
use timewheel::{Config, Engine, JobSpec};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let jobs: u64 = args.get(1).map_or(2_000_000, |a| a.parse().expect("JOBS"));
    let batch: u64 = args.get(2).map_or(10_000, |a| a.parse().expect("BATCH"));
    let dir = std::env::temp_dir().join(format!("bisect-batch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::open(Config::new(&dir)).expect("open");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let due = now + 3_600_000;
    let t = Instant::now();
    let mut k = 0;
    while k < jobs {
        let m = batch.min(jobs - k);
        engine
            .schedule_batch(
                (k..k + m).map(|i| JobSpec::at(due + i % 3_600_000).payload(vec![3u8; 16])),
            )
            .expect("schedule_batch");
        k += m;
    }
    let secs = t.elapsed().as_secs_f64();
    println!("{:.0} jobs/s", jobs as f64 / secs);
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}
