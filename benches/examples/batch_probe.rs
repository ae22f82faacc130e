//! `schedule_batch` alone, for a profiler: `cargo run --release -p timewheel-benches --example
//! batch_probe -- [JOBS] [BATCH] [sync|buffered] [ROUNDS] [THREADS]` (default 1,000,000 jobs with
//! 16-byte payloads in batches of 10,000, durable, 3 rounds, each on a fresh directory, one
//! calling thread) prints jobs/s and the process's CPU per job.

use std::time::Instant;

use timewheel::Durability;
use timewheel_benches::cpu::process_cpu_seconds;
use timewheel_benches::engine::schedule::batch;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let jobs: u64 = args.first().map_or(1_000_000, |a| a.parse().expect("JOBS"));
    let size: u64 = args.get(1).map_or(10_000, |a| a.parse().expect("BATCH"));
    let durability = match args.get(2).map_or("sync", String::as_str) {
        "sync" => Durability::Sync,
        "buffered" => Durability::Buffered,
        other => panic!("unknown durability {other:?}: sync or buffered"),
    };
    let rounds: usize = args.get(3).map_or(3, |a| a.parse().expect("ROUNDS"));
    let threads: u64 = args.get(4).map_or(1, |a| a.parse().expect("THREADS"));
    for round in 1..=rounds {
        let dir = std::env::temp_dir().join(format!(
            "timewheel-batch-probe-{}-{round}",
            std::process::id()
        ));
        let (cpu0, t0) = (process_cpu_seconds(), Instant::now());
        let rate = batch(&dir, jobs, size, threads, durability);
        let (cpu, wall) = (process_cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
        println!(
            "round {round}: {rate:.0} jobs/s, {:.0} ns CPU per job, {:.2} CPU-s per s \
             (open and close included)",
            cpu * 1e9 / jobs as f64,
            cpu / wall
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
