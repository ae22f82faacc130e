//! Benchmarks of timewheel beside its peers, and the harness that runs them all.
//!
//! The workloads live here, as functions that measure once and return figures, so that the
//! harness binary (`cargo run --release -p timewheel-benches`, in `src/bin/harness.rs`) and the
//! `cargo bench` targets run the same code:
//! - [`wheel`]: the timing wheel beside DelayQueue, BinaryHeap and BTreeMap;
//! - [`engine`]: the durable engine end to end (schedules, firing, recovery, compaction);
//! - [`peers`]: SQLite and Redis doing the same jobs;
//! - [`sidecar`]: `timewheel serve` driven over pipes;
//! - [`harness`]: running them interleaved, and the report, JSON, plots and docs.

pub mod alloc_count;
pub mod cpu;
pub mod engine;
pub mod harness;
pub mod peers;
pub mod sidecar;
pub mod wheel;
