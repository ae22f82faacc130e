//! Single durable `schedule_async` calls from many tokio tasks, for a profile of what a call
//! costs: `cargo run --release -p timewheel-benches --example async_probe -- TASKS SECS
//! [JOBS_PER_CALL]` (with more than one job per call, `schedule_batch_async`, and the rate
//! counts jobs). The data directory is under the system temp dir (`TMPDIR=/dev/shm` for one
//! on tmpfs, where a sync costs nothing and the CPU per call is the limit).
use timewheel_benches::engine::schedule::async_calls;

fn main() {
    let mut args = std::env::args().skip(1);
    let tasks: usize = args.next().map_or(64, |a| a.parse().expect("TASKS"));
    let secs: f64 = args.next().map_or(5.0, |a| a.parse().expect("SECS"));
    let per_call: u64 = args.next().map_or(1, |a| a.parse().expect("JOBS_PER_CALL"));
    let dir = std::env::temp_dir().join(format!("async_probe.{}", std::process::id()));
    let cpu0 = timewheel_benches::cpu::process_cpu_seconds();
    let run = async_calls(&dir, tasks, per_call, secs);
    let cpu = timewheel_benches::cpu::process_cpu_seconds() - cpu0;
    std::fs::remove_dir_all(&dir).expect("remove the data directory");
    println!(
        "{:.0} jobs/s ({per_call} per call), {:.1} records per sync, {:.0} µs per sync; \
         process CPU {cpu:.2} s, {:.2} µs per job",
        run.calls_per_s,
        run.records_per_sync,
        run.sync_us,
        cpu * 1e6 / (run.calls_per_s * secs)
    );
}
