//! The deterministic simulation: one `u64` seed drives the real engine on the fault-injecting
//! disk with a manual clock. See `tests/simulation.rs` and docs/testing.md. The oracle is the
//! engine model in `tests/model/`, shared with the `engine_ops` fuzz target.

pub mod memory;
pub mod ops;
pub mod run;
pub mod trace;

/// `Err(Violation)` from a format string.
#[macro_export]
macro_rules! violation {
    ($($arg:tt)*) => {
        Err($crate::model::Violation(format!($($arg)*)))
    };
}
