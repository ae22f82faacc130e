//! The sidecar measured from the outside through the harness (`timewheel_benches::sidecar`),
//! one run each, printing the report's tables: `cargo bench -p timewheel-benches --bench
//! sidecar [-- quick]`. Builds `target/release/timewheel` first; `SIDECAR_BIN=path` measures
//! that binary instead.

fn main() {
    timewheel_benches::harness::cli::bench_main(&["sidecar"]);
}
