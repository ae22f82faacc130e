//! `timewheel-wal`: a segmented, memory-mapped, append-only write-ahead log.
//!
//! (Crate docs with a runnable example: to be written by the log's author.)
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(unsafe_code)] // the one exception is `storage::mmap`, which opens with its ground rules
#![warn(missing_docs)]

pub mod storage;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
