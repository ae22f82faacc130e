//! # timewheel
//!
//! An embedded, durable timer and job engine: schedule millions of jobs for future times,
//! get each one acknowledged only once it is on disk, and have it fire at its millisecond —
//! also after a crash, when the jobs missed while the process was down are replayed.
//!
//! Inside, a hierarchical timing wheel ([`wheel`]) holds job ids in memory for O(1) insert,
//! cancel and fire, over a memory-mapped, append-only write-ahead log (`timewheel-wal`) with
//! group commit. Workers receive only job ids, and `claim` each one, which re-reads its state
//! (so a job cancelled after it was queued is skipped) and leases it.
//!
//! ```
//! use std::time::Duration;
//! use timewheel::{Config, Engine, JobSpec};
//!
//! # fn main() -> timewheel::Result<()> {
//! let dir = std::env::temp_dir().join(format!("timewheel-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let engine = Engine::open(Config::new(&dir))?;
//! let id = engine.schedule(JobSpec::after(Duration::from_millis(20)).payload("hello"))?;
//!
//! // A worker: take fired ids from the queue, claim, run, complete.
//! let ready = engine.ready();
//! let fired = ready.recv_timeout(Duration::from_secs(5)).expect("fires within 20 ms");
//! assert_eq!(fired, id);
//! let job = engine.claim(fired)?.expect("nobody cancelled it");
//! assert_eq!(&job.payload[..], b"hello");
//! assert!(engine.complete(&job)?);
//! engine.close()?;
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(())
//! # }
//! ```
//!
//! The same engine is available to other languages as a sidecar speaking JSON lines on
//! stdin/stdout: `timewheel serve --dir DIR` (see [`sidecar`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod config;
mod engine;
pub mod error;
pub mod job;
pub mod record;
pub mod sidecar;
pub mod stats;
pub mod wheel;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{Config, Durability, RecoveryMode};
pub use engine::Engine;
pub use error::{Error, Result};
pub use job::{Claimed, Due, JobId, JobInfo, JobSpec, JobState};
pub use stats::{RecoveryStats, Stats};
