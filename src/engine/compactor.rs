//! The engine's side of compaction: the durable manifest it started from, the passes run since
//! open, and the background thread that runs them.
//!
//! A pass ([`crate::store::compact`]) reads sealed journal segments and writes new files; it
//! takes no lock the engine's calls or its timer need (only `Shared::store`, which nothing on
//! the hot path takes). A failed pass that left the durable manifest known is retried at the
//! next interval (a full disk, say, that compaction itself may free later); one that left it
//! unknown (the replacement's directory sync failed) stops compaction until the next open,
//! which reads whichever manifest is durable.

use std::sync::Arc;
use std::time::Duration;

use super::{Shared, lock};
use crate::error::{Error, Result};
use crate::stats::{CompactionReport, StoreStats};
use crate::store::compact::{self, Limits};
use crate::store::manifest::Manifest;

/// What the engine knows of its store.
pub(crate) struct StoreState {
    /// The manifest known durable.
    pub manifest: Manifest,
    /// Set when a pass left the durable manifest unknown: no pass runs until a reopen.
    pub stopped: Option<String>,
    /// The last pass that failed, and why (cleared by one that succeeds).
    pub last_error: Option<String>,
    /// Totals since open.
    pub totals: StoreStats,
    /// The background thread is asked to end.
    pub stop: bool,
}

impl StoreState {
    pub fn new(manifest: Manifest) -> Self {
        StoreState {
            manifest,
            stopped: None,
            last_error: None,
            totals: StoreStats::default(),
            stop: false,
        }
    }
}

impl Shared {
    /// Runs one compaction pass if a sealed journal segment holds records the buckets do not
    /// cover yet; `Ok(None)` if none does.
    pub(super) fn compact_once(&self) -> Result<Option<CompactionReport>> {
        let mut store = lock(&self.store);
        if let Some(why) = &store.stopped {
            return Err(Error::Io(std::io::Error::other(format!(
                "compaction stopped after an earlier failure ({why}); reopen the engine"
            ))));
        }
        let limits = Limits {
            segments_max: self.config.compact_segments_max,
            runs_max: self.config.bucket_runs_max,
        };
        let Some(fold_to) = compact::fold_point(&self.wal, &store.manifest, limits) else {
            return Ok(None);
        };
        match compact::pass(&self.wal, &store.manifest, fold_to, limits) {
            Ok((manifest, report)) => {
                store.manifest = manifest;
                store.last_error = None;
                let t = &mut store.totals;
                t.compactions += 1;
                t.records_folded += report.records;
                t.segments_deleted += report.segments_deleted;
                t.bytes_reclaimed += report.journal_bytes_deleted + report.run_bytes_removed;
                t.bytes_written += report.bytes_written;
                t.buckets_dropped += report.buckets_dropped;
                t.last_compaction = report.elapsed;
                tracing::debug!(?report, "compacted");
                Ok(Some(report))
            }
            Err(failed) => {
                let why = failed.error.to_string();
                if crate::store::is_sync_failure(&failed.error) {
                    // Nothing is acknowledged after a failed sync, of the journal or beside it.
                    self.wal.poison();
                    tracing::error!(error = %why, "a compaction sync failed; the engine is poisoned");
                }
                if failed.manifest_known {
                    tracing::warn!(error = %why, "compaction failed; it is retried later");
                } else {
                    tracing::error!(error = %why, "compaction failed while replacing the manifest; \
                                    it stops until the engine is reopened");
                    store.stopped = Some(why.clone());
                }
                store.last_error = Some(why);
                Err(failed.error)
            }
        }
    }

    /// What the data directory holds, and what compaction did since open.
    pub(super) fn store_stats(&self) -> StoreStats {
        let segments = self.wal.segments();
        let store = lock(&self.store);
        let m = &store.manifest;
        let mut stats = store.totals.clone();
        stats.journal_segments = segments.len() as u64;
        stats.journal_bytes = segments.iter().map(|s| s.file_bytes).sum();
        stats.buckets = m.buckets.len() as u64;
        stats.bucket_files = m.buckets.values().map(|b| b.runs.len() as u64).sum();
        stats.bucket_bytes = m.run_bytes();
        stats.bucket_jobs = m.jobs();
        stats.moved_jobs = m.moved.len() as u64;
        stats.covered_lsn = m.covered_lsn;
        stats.compaction_error = store.stopped.clone().or_else(|| store.last_error.clone());
        stats
    }
}

/// The background compactor: every `Config::compact_interval_ms`, passes until nothing sealed
/// is left to fold.
pub(super) fn run(shared: Arc<Shared>) {
    let interval = Duration::from_millis(shared.config.compact_interval_ms);
    loop {
        {
            let store = lock(&shared.store);
            let (store, _) = shared
                .compactor_wake
                .wait_timeout_while(store, interval, |s| !s.stop)
                .expect("an engine lock poisoned by a panic");
            if store.stop {
                return;
            }
        }
        // Bounded: each pass folds at most `compact_segments_max` segments, and stops early
        // when the engine is closing.
        while !lock(&shared.store).stop {
            match shared.compact_once() {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
}
