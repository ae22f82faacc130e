//! How much CPU one durable single schedule costs, the whole process counted (the callers, the
//! durability and timer threads, the log's preparing thread, the kernel's share of each):
//! the question behind the 64-caller goal, which is a ceiling of CPU or of waiting.
//!
//! `cargo run --release -p timewheel-benches --bin cpu-per-call -- [async|threads] [CALLERS]
//! [SECONDS] [RUNS]` prints, per run, calls/s, CPU-seconds per wall second (2 is both cores of
//! this machine), and CPU microseconds per call, with the records per sync and the mean sync time. A run below 2 CPU-seconds per second is not
//! CPU-bound: its callers wait on the disk and on wake-ups.

use std::path::PathBuf;
use std::time::Instant;

use timewheel_benches::cpu::process_cpu_seconds;
use timewheel_benches::engine::schedule::{single_async, single_threads};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map_or("async", String::as_str).to_owned();
    let callers: usize = args.get(1).map_or(64, |a| a.parse().expect("CALLERS"));
    let secs: f64 = args.get(2).map_or(3.0, |a| a.parse().expect("SECONDS"));
    let runs: usize = args.get(3).map_or(3, |a| a.parse().expect("RUNS"));
    let root = std::env::temp_dir().join(format!("timewheel-cpu-per-call-{}", std::process::id()));
    for run in 1..=runs {
        let dir: PathBuf = root.join(format!("run-{run}"));
        let (cpu0, t0) = (process_cpu_seconds(), Instant::now());
        let single = match mode.as_str() {
            "threads" => single_threads(&dir, callers, secs),
            "async" => single_async(&dir, callers, secs),
            other => panic!("unknown mode {other:?}: async or threads"),
        };
        let rate = single.calls_per_s;
        // The open and close are in the CPU time; they are small beside SECONDS of calls.
        let (cpu, wall) = (process_cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
        let calls = rate * secs;
        println!(
            "{mode} x{callers} run {run}: {rate:.0} calls/s, {:.2} CPU-s per s, {:.1} µs CPU per \
             call, {:.1} records per sync, {:.0} µs per sync",
            cpu / wall,
            cpu * 1e6 / calls,
            single.records_per_sync,
            single.sync_us
        );
        std::fs::remove_dir_all(&dir).ok();
    }
    std::fs::remove_dir_all(&root).ok();
}
