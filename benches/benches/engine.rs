//! The engine's workloads through the harness (`timewheel_benches::harness`), one run each,
//! printing the report's tables: `cargo bench -p timewheel-benches --bench engine -- [quick]
//! [no-peers] [WORKLOAD...]`, e.g. `-- quick batch recovery`. The full side-by-side run with
//! plots is `cargo run --release -p timewheel-benches`.

use timewheel_benches::alloc_count::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn main() {
    timewheel_benches::harness::cli::bench_main(&[
        "batch",
        "single",
        "lateness",
        "lateness-compacting",
        "burst",
        "recovery",
        "resident",
        "compaction",
        "horizon",
        "churn",
        "listing",
    ]);
}
