//! Shared helpers for the benchmarks.

pub mod alloc_count;
