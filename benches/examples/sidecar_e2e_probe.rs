//! The sidecar end to end alone, for a profiler: `cargo run --release -p timewheel-benches
//! --example sidecar_e2e_probe -- [JOBS] [ROUNDS] [auto]` (default 200,000 jobs, 3 rounds)
//! drives the release `timewheel serve` as the harness's `sidecar` workload does (schedules
//! due at once, pipelined; the client completes each fired job, or with `auto` the sidecar
//! does) and prints jobs/s to the last fired event and to the last complete.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let jobs: usize = args.first().map_or(200_000, |a| a.parse().expect("JOBS"));
    let rounds: u32 = args.get(1).map_or(3, |a| a.parse().expect("ROUNDS"));
    let auto = args.get(2).is_some_and(|a| a == "auto");
    let bin = timewheel_benches::sidecar::release_binary().expect("the release timewheel binary");
    let root = std::env::temp_dir().join(format!("sidecar-e2e-probe-{}", std::process::id()));
    for round in 1..=rounds {
        let r = timewheel_benches::sidecar::end_to_end(&bin, &root, jobs, auto);
        println!(
            "round {round}: {:.0} jobs/s to the last fired event, {:.0} jobs/s to the last complete",
            jobs as f64 / r.fired.as_secs_f64(),
            jobs as f64 / r.done.as_secs_f64(),
        );
    }
    std::fs::remove_dir_all(&root).ok();
}
