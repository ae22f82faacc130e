//! The deterministic simulation: one `u64` seed drives the real engine on the fault-injecting
//! disk with a manual clock. See `tests/simulation.rs` and docs/testing.md.

pub mod model;
pub mod ops;
pub mod run;
pub mod trace;
