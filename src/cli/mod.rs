//! The subcommands of the `timewheel` binary that are more than a call into the library.

pub mod check;
pub mod demo;
pub mod jobs;
pub mod prometheus;
pub mod repair;
