//! What a drained burst keeps, for a heap profiler: a million jobs with 16-byte payloads (as
//! the harness's `resident` workload), nine in ten cancelled, two seconds idle, then the process
//! exits without closing the engine, so that what the profiler reports as leaked is what the
//! engine kept. `cargo build --release -p timewheel-benches --example drain_probe`, then
//! `heaptrack target/release/examples/drain_probe [JOBS]` and `heaptrack_print -f FILE
//! --flamegraph-cost-type leaked -F STACKS` (docs/benchmarks.md, thirtieth session).
use std::time::Duration;
use timewheel::{Config, Durability, Engine};
use timewheel_benches::engine::store;

fn main() {
    let jobs: u64 = std::env::args()
        .nth(1)
        .map_or(1_000_000, |a| a.parse().expect("JOBS"));
    let dir = std::env::temp_dir().join(format!("drain_probe.{}", std::process::id()));
    let config = Config::new(&dir)
        .durability(Durability::Buffered)
        .compact_interval_ms(0);
    let engine = Engine::open(config).expect("open");
    let mut ids = Vec::new();
    store::fill(&engine, jobs, &mut ids);
    store::drain_nine_in_ten(&engine, &ids);
    drop(ids);
    std::thread::sleep(Duration::from_secs(2));
    std::fs::remove_dir_all(&dir).ok();
    std::process::exit(0);
}
