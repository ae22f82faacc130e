//! The engine's configuration: where it keeps its data, how durable an acknowledgement is, and a
//! name and a default for every limit.

use std::path::PathBuf;

pub use timewheel_wal::{Durability, RecoveryMode};

/// Milliseconds in an hour: the width of a bucket.
pub const HOUR_MS: u64 = 3_600_000;

/// The engine's configuration. Build it with [`Config::new`] and adjust the fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// The data directory (created if missing, locked while the engine is open).
    pub dir: PathBuf,
    /// When an acknowledgement may be given: after msync (`Sync`, the default), on a timer
    /// (`Periodic`), or never by itself (`Buffered`, for tests and benchmarks).
    pub durability: Durability,
    /// How recovery treats damage in the log.
    pub recovery_mode: RecoveryMode,
    /// Size of one log segment file.
    pub segment_bytes: u64,
    /// Largest payload a job may carry.
    pub payload_bytes_max: usize,
    /// Largest failure reason `fail` records; longer ones are refused.
    pub fail_reason_bytes_max: usize,
    /// How far ahead of now a job may be due. Dues in the past are accepted and fire at once.
    pub due_ahead_ms_max: u64,
    /// Largest number of jobs in one `schedule_batch` call.
    pub batch_jobs_max: usize,
    /// How long a claim holds a job before it is delivered again with attempt + 1.
    pub lease_ms: u64,
    /// Largest number of jobs the timer thread moves to the ready queue before it lets
    /// schedule and cancel calls through again.
    pub fires_per_advance_max: usize,
    /// Longest request line the sidecar accepts.
    pub line_bytes_max: usize,
    /// Run the timer thread. The simulation turns it off and calls `Engine::run_timers`
    /// itself, so that a seed alone decides what happens.
    pub timer_thread: bool,
}

impl Config {
    /// The defaults, with data kept in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Config {
            dir: dir.into(),
            durability: Durability::Sync,
            recovery_mode: RecoveryMode::TolerateTornTail,
            segment_bytes: 64 << 20,
            payload_bytes_max: 64 << 10,
            fail_reason_bytes_max: 4 << 10,
            due_ahead_ms_max: 100 * 366 * 24 * HOUR_MS,
            batch_jobs_max: 1 << 20,
            lease_ms: 30_000,
            fires_per_advance_max: 4096,
            line_bytes_max: 1 << 20,
            timer_thread: true,
        }
    }

    /// Checks the limits against each other.
    pub(crate) fn validate(&self) -> crate::Result<()> {
        let bad = |field, reason: &str| Err(crate::Error::invalid(field, reason));
        if self.payload_bytes_max > (16 << 20) {
            return bad("payload_bytes_max", "at most 16 MiB");
        }
        // A record carries a payload plus a fixed header; it must fit a segment comfortably.
        let record_max = crate::record::schedule_record_bytes_max(self) as u64;
        if record_max.saturating_mul(4) > self.segment_bytes {
            return bad(
                "segment_bytes",
                "must hold at least four records of the largest size",
            );
        }
        if self.lease_ms == 0 {
            return bad("lease_ms", "must be positive");
        }
        if self.fires_per_advance_max == 0 || self.batch_jobs_max == 0 {
            return bad("fires_per_advance_max", "limits must be positive");
        }
        Ok(())
    }
}
