//! The timing wheel beside DelayQueue, BinaryHeap and BTreeMap through the harness
//! (`timewheel_benches::wheel`), one run each, printing the report's tables:
//! `cargo bench -p timewheel-benches --bench wheel` (1M and 10M timers; `-- quick`: 100k).

use timewheel_benches::alloc_count::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn main() {
    timewheel_benches::harness::cli::bench_main(&["wheel"]);
}
