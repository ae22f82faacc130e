//! Looking into a data directory without changing it: what the next open would find.
//!
//! [`inspect`] runs the engine's own open (the log's recovery, then replay through the one
//! transition function) over the directory read in place: every change the open would make
//! (a torn tail cut, a damaged copy repaired, the last segment copied) happens in memory only,
//! and nothing fires. So its verdict is the open's verdict, from the same code, and a directory
//! it finds healthy is one the engine will open. It takes the directory's lock while it runs
//! (no engine can open the directory meanwhile) and is refused with [`Error::Locked`] while an
//! engine holds it.
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("tw-inspect-doc-{}", std::process::id()));
//! # std::fs::remove_dir_all(&dir).ok();
//! use timewheel::{Config, Engine, JobSpec};
//!
//! let engine = Engine::open(Config::new(&dir))?;
//! engine.schedule(JobSpec::at(4_102_444_800_000).payload("order 42"))?;
//! engine.close()?;
//!
//! let found = timewheel::inspect::inspect(&dir)?;
//! assert!(found.is_healthy());
//! assert_eq!(found.scheduled, 1);
//! assert_eq!(found.due_range, Some((4_102_444_800_000, 4_102_444_800_000)));
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), timewheel::Error>(())
//! ```

use std::path::Path;

use crate::config::Config;
use crate::engine::Engine;
use crate::error::Result;
use crate::stats::RecoveryStats;

/// What an open of the directory would find.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Inspection {
    /// What recovery and replay did (records, segments, bytes, a torn tail it would cut,
    /// damaged copies it would repair, missed and interrupted jobs).
    pub recovery: RecoveryStats,
    /// Live jobs waiting for their due time.
    pub scheduled: u64,
    /// Live jobs the next open delivers at once: fired and not finished before the engine
    /// stopped (`recovery.interrupted` of them were claimed), or missed while it was down
    /// (`recovery.missed`).
    pub ready: u64,
    /// Jobs finished over the life of the directory, as far as the log knows.
    pub completed: u64,
    /// See `completed`.
    pub cancelled: u64,
    /// See `completed`.
    pub failed: u64,
    /// The earliest and the latest due time of the live jobs.
    pub due_range: Option<(u64, u64)>,
}

impl Inspection {
    /// No damage of any kind: nothing to cut and nothing repaired. A torn tail is what a crash
    /// leaves (writes nobody was told were durable) and is not damage to acknowledged data,
    /// but it is reported: a clean shutdown leaves none.
    pub fn is_healthy(&self) -> bool {
        self.recovery.repaired.is_empty() && self.recovery.torn_tail.is_none()
    }
}

/// Runs the next open's recovery and replay over `dir` without changing it; see the module
/// documentation. Damage an open would refuse is the same error here
/// ([`Error::Corrupted`](crate::Error::Corrupted) with segment and offset, or
/// [`Error::UndecodableRecord`](crate::Error::UndecodableRecord) with the LSN).
pub fn inspect(dir: impl AsRef<Path>) -> Result<Inspection> {
    let engine = Engine::open_read_only(Config::new(dir.as_ref()))?;
    let stats = engine.stats();
    let found = Inspection {
        recovery: engine.recovery().clone(),
        scheduled: stats.scheduled,
        ready: stats.ready,
        completed: stats.completed,
        cancelled: stats.cancelled,
        failed: stats.failed,
        due_range: engine.due_range(),
    };
    engine.abandon_read_only();
    Ok(found)
}
