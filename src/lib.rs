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
//! // Durable when it returns; it can fire only from then on.
//! let id = engine.schedule(JobSpec::after(Duration::from_millis(20)).payload("hello"))?;
//!
//! // A worker: take a fired job and claim it in one step, run it, complete it.
//! let job = engine.next(Duration::from_secs(5))?.expect("fires within 20 ms");
//! assert_eq!((job.id, &job.payload[..]), (id, &b"hello"[..]));
//! assert_eq!(job.attempt, 1); // the fencing token: unique per job, also across crashes
//! assert!(engine.complete(&job)?);
//! engine.close()?;
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(())
//! # }
//! ```
//!
//! ## Async (feature `async`, or `tokio`)
//!
//! The durable calls as futures (`schedule_async`, `cancel_async`, `reschedule_async`,
//! `complete_async`, `fail_async`), woken when group commit makes their records durable: no
//! thread is parked per waiting call, so thousands of tasks can wait on one engine and share
//! its syncs. The worker's take is a future too (`next_async`, `claim_next_async`) and a
//! `Stream` of claimed jobs (`Engine::claimed_stream`). The futures
//! need no particular runtime; `examples/async_service.rs` is a small tokio service.
//!
//! Dropping a future (a timeout, a `select!`) is safe: a change (cancel, reschedule, complete,
//! fail) is applied before the future waits and becomes durable with the next sync; a
//! schedule dropped while it waits still becomes visible (it fires, and its key finds it) once
//! a sync makes it durable; jobs a dropped take (`next_async`) or stream had claimed and not
//! handed out go back at once and fire again with the next attempt.
//!
//! ```
//! # fn main() -> timewheel::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("timewheel-doc-async-{}", std::process::id()));
//! use timewheel::{Config, Engine, JobSpec};
//!
//! let engine = Engine::open(Config::new(&dir))?;
//! let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! runtime.block_on(async {
//!     let id = engine.schedule_async(JobSpec::at(0).payload("hello")).await?;
//!     let job = engine.next_async().await?.expect("a job due at 0 fires at once");
//!     assert_eq!((job.id, &job.payload[..]), (id, &b"hello"[..]));
//!     assert!(engine.complete_async(&job).await?);
//!     Ok::<_, timewheel::Error>(())
//! })?;
//! # drop(engine);
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
pub mod inspect;
pub mod job;
pub mod metrics;
#[cfg(feature = "testing")]
pub mod record;
#[cfg(not(feature = "testing"))]
mod record;
pub mod recur;
#[cfg(feature = "cli")]
pub mod repair;
#[cfg(feature = "sidecar")]
pub mod sidecar;
pub mod stats;
#[cfg(feature = "testing")]
pub mod store;
#[cfg(not(feature = "testing"))]
mod store;
pub mod wheel;

// The README's examples are doc tests: they compile and run.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{Config, Durability, RecoveryMode};
#[cfg(feature = "async")]
pub use engine::ClaimedStream;
pub use engine::{DrainReport, Engine, Pending, ScheduleInfo, TenantStats};
pub use error::{Error, Result};
pub use job::{
    Backoff, Claimed, DeadJob, DeadPage, DeadQuery, Due, JobId, JobInfo, JobPage, JobQuery,
    JobSpec, JobState, Misfire, Outcome, PAUSED_DUE_MS, Recurring, RetryPolicy,
};
pub use recur::{CronSchedule, Every, RecurError, Recurrence};
pub use stats::{CompactionReport, LogStats, RecoveryStats, Stats, StoreStats};
