//! The sidecar's fire lateness taken apart: `cargo run --release -p timewheel-benches --example
//! sidecar_lateness_probe -- [JOBS] [SPAN_MS] [ROUNDS]` (default 100,000 jobs over 5,000 ms,
//! 3 rounds) drives the release `timewheel serve --auto-complete` as the harness's
//! `sidecar-lateness` workload does and prints, per round, the client's lateness (due to the
//! event line read) beside the engine's own (due to ready queue) and the claim wait (ready
//! queue to claim), so a tail can be placed.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let jobs: u64 = args.first().map_or(100_000, |a| a.parse().expect("JOBS"));
    let span_ms: u64 = args.get(1).map_or(5_000, |a| a.parse().expect("SPAN_MS"));
    let rounds: u32 = args.get(2).map_or(3, |a| a.parse().expect("ROUNDS"));
    let bin = timewheel_benches::sidecar::release_binary().expect("the release timewheel binary");
    let root = std::env::temp_dir().join(format!("sidecar-lateness-probe-{}", std::process::id()));
    for round in 1..=rounds {
        let l = timewheel_benches::sidecar::lateness(&bin, &root, jobs, span_ms);
        let q = |p: f64| l.hist.value_at_quantile(p) as f64 / 1000.0;
        println!(
            "round {round}: client p50 {:.2} p99 {:.2} p99.9 {:.2} max {:.2} ms | engine due->ready \
             p50 {:.2} p99 {:.2} p99.9 {:.2} max {:.2} | ready->claim p50 {:.2} p99 {:.2} max {:.2}",
            q(0.5),
            q(0.99),
            q(0.999),
            l.hist.max() as f64 / 1000.0,
            l.engine[0],
            l.engine[1],
            l.engine[2],
            l.engine[3],
            l.claim_wait[0],
            l.claim_wait[1],
            l.claim_wait[2],
        );
    }
    std::fs::remove_dir_all(&root).ok();
}
