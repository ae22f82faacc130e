//! Single durable `schedule_async` calls from many tokio tasks, for a profile of what a call
//! costs: `cargo run --release -p timewheel-benches --example async_probe -- TASKS SECS`.
use timewheel_benches::engine::schedule::single_async;

fn main() {
    let mut args = std::env::args().skip(1);
    let tasks: usize = args.next().map_or(64, |a| a.parse().expect("TASKS"));
    let secs: f64 = args.next().map_or(5.0, |a| a.parse().expect("SECS"));
    let dir = std::env::temp_dir().join(format!("async_probe.{}", std::process::id()));
    let cpu0 = timewheel_benches::cpu::process_cpu_seconds();
    let run = single_async(&dir, tasks, secs);
    let cpu = timewheel_benches::cpu::process_cpu_seconds() - cpu0;
    std::fs::remove_dir_all(&dir).expect("remove the data directory");
    println!(
        "{:.0} calls/s, {:.1} records per sync, {:.0} µs per sync; process CPU {cpu:.2} s, {:.2} µs per call",
        run.calls_per_s,
        run.records_per_sync,
        run.sync_us,
        cpu * 1e6 / (run.calls_per_s * secs)
    );
}
