//! The keyed workload's one side alone, for a profiler: `cargo run --release -p
//! timewheel-benches --example keyed_probe -- keyed|plain [JOBS] [RUNS]` schedules JOBS
//! durable jobs (default 1,000,000) in batches of 10,000, with a unique idempotency key on
//! each (`keyed`) or none, RUNS times (default 3) in fresh directories under the system temp
//! dir, and prints each run's jobs/s. `perf record -g` of `keyed` against `plain` shows what
//! a key costs.

fn main() {
    let mut args = std::env::args().skip(1);
    let keyed = match args.next().as_deref() {
        Some("keyed") => true,
        Some("plain") => false,
        _ => {
            eprintln!("usage: keyed_probe keyed|plain [JOBS] [RUNS]");
            std::process::exit(2);
        }
    };
    let jobs: u64 = args.next().map_or(1_000_000, |a| a.parse().expect("JOBS"));
    let runs: u32 = args.next().map_or(3, |a| a.parse().expect("RUNS"));
    for r in 0..runs {
        let dir =
            std::env::temp_dir().join(format!("timewheel-keyed-probe-{}-{r}", std::process::id()));
        let rate = timewheel_benches::engine::lifecycle::keyed_batches(&dir, jobs, 10_000, keyed);
        println!("run {r}: {rate:.0} jobs/s");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
