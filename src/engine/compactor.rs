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
use crate::job::JobId;
use crate::stats::{CompactionReport, StoreStats};
use crate::store::compact::{self, Limits};
use crate::store::manifest::Manifest;

/// Jobs evicted (after a pass) or read back (for a call) per hold of the state lock.
const JOBS_PER_LOCK_HOLD: usize = 64;

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
    /// Damage found in a bucket file since open (by a load or a read of a job kept on disk).
    pub damage: Option<String>,
    /// Buckets below this one are resident (their jobs are in memory); buckets from it on are
    /// kept on disk, their jobs loaded when the horizon reaches them.
    pub resident_below: u64,
    /// The segment appended to, and when (engine clock, ms) a pass first saw it hold records:
    /// it is sealed `Config::seal_after_ms` later.
    pub holding_since: Option<(u64, u64)>,
    /// What passes work in, kept between them (see [`compact::FoldScratch`]).
    pub scratch: compact::FoldScratch,
}

impl StoreState {
    pub fn new(manifest: Manifest, resident_below: u64) -> Self {
        StoreState {
            manifest,
            stopped: None,
            last_error: None,
            totals: StoreStats::default(),
            stop: false,
            damage: None,
            resident_below,
            holding_since: None,
            scratch: compact::FoldScratch::default(),
        }
    }
}

impl Shared {
    /// Runs one compaction pass if a sealed journal segment holds records the buckets do not
    /// cover yet; `Ok(None)` if none does.
    pub(super) fn compact_once(&self) -> Result<Option<CompactionReport>> {
        let _span = tracing::debug_span!("timewheel_compaction").entered();
        let mut guard = lock(&self.store);
        let store = &mut *guard;
        if let Some(why) = &store.stopped {
            return Err(Error::Io(std::io::Error::other(format!(
                "compaction stopped after an earlier failure ({why}); reopen the engine"
            ))));
        }
        let limits = Limits {
            segments_max: self.config.compact_segments_max,
            runs_max: self.config.bucket_runs_max,
            space_percent_max: self.config.bucket_space_percent_max,
        };
        self.seal_if_held_long(store)?;
        let Some(fold_to) = compact::fold_point(&self.wal, &store.manifest, limits) else {
            return Ok(None);
        };
        let far_from = store.resident_below;
        let run_pass = |store: &mut StoreState| {
            compact::pass(
                &self.wal,
                &store.manifest,
                fold_to,
                limits,
                far_from,
                &mut store.scratch,
            )
        };
        let mut passed = run_pass(store);
        if let Err(failed) = &passed
            && failed.manifest_known
            && crate::store::is_no_space(&failed.error)
        {
            // The disk is full: give up the ballast and try once more, so that the pass can
            // write what it must before it deletes what it frees.
            match crate::store::release_ballast(self.wal.storage()) {
                Ok(true) => {
                    store.totals.ballast_released += 1;
                    tracing::warn!("the disk is full: gave up the ballast file for compaction");
                    passed = run_pass(store);
                }
                Ok(false) => {}
                Err(e) => return Err(self.compaction_failed(store, e, true)),
            }
        }
        match passed {
            Ok(compact::PassOutput {
                manifest,
                report,
                far,
                far_deleted,
                cleanup,
            }) => {
                let folded_to = manifest.covered_lsn;
                store.manifest = manifest;
                // Jobs beyond the horizon that the buckets now hold as memory does: memory
                // lets them go (in bounded chunks, so the timer gets the lock in between).
                // Deletes first: a job the pass moved from one far bucket into another is in
                // both lists, and its only copy now is the new one.
                for chunk in far_deleted.chunks(super::worker::LOCK_HOLD_ITEMS_MAX) {
                    let mut state = self.lock_state();
                    for id in chunk {
                        state.far_gone.remove(id);
                    }
                    self.step_aside(state, u64::MAX);
                }
                let mut evicted = 0;
                for chunk in far.chunks(JOBS_PER_LOCK_HOLD) {
                    let mut state = self.lock_state();
                    evicted += state.after_pass(chunk, folded_to);
                    // Let the timer and the calls at the lock between chunks: a pass may evict
                    // a million jobs (measured: chunks of 256 back to back put 7-38 ms tails
                    // into fire lateness).
                    self.step_aside(state, u64::MAX);
                }
                // Jobs memory held beyond the horizon that this pass has caught up with (read
                // back for a call, or changed after an earlier pass read them).
                let resident: Vec<JobId> = self.lock_state().far_resident.iter().copied().collect();
                for chunk in resident.chunks(JOBS_PER_LOCK_HOLD) {
                    let mut state = self.lock_state();
                    evicted += state.sweep_far_resident(chunk, folded_to, far_from);
                    self.step_aside(state, u64::MAX);
                }
                store.totals.evicted += evicted;
                store.last_error = None;
                let t = &mut store.totals;
                t.compactions += 1;
                t.records_folded += report.records;
                t.segments_deleted += report.segments_deleted;
                t.bytes_reclaimed += report.journal_bytes_deleted + report.run_bytes_removed;
                t.bytes_written += report.bytes_written;
                t.buckets_dropped += report.buckets_dropped;
                t.last_compaction = report.elapsed;
                tracing::debug!(
                    records = report.records,
                    segments_deleted = report.segments_deleted,
                    bytes_written = report.bytes_written,
                    buckets_dropped = report.buckets_dropped,
                    elapsed_ms = report.elapsed.as_millis() as u64,
                    "compacted"
                );
                if let Some(e) = cleanup {
                    // The new manifest stands (held above); what it no longer names is left
                    // for the next open or pass to remove.
                    return Err(self.compaction_failed(store, e, true));
                }
                // Room again, most likely: the ballast back for the next time the disk fills.
                if let Err(e) =
                    crate::store::ensure_ballast(self.wal.storage(), self.config.disk_ballast_bytes)
                {
                    return Err(self.compaction_failed(store, e, true));
                }
                Ok(Some(report))
            }
            Err(failed) => Err(self.compaction_failed(store, failed.error, failed.manifest_known)),
        }
    }

    /// Seals the journal segment being appended to once it has held records for
    /// `Config::seal_after_ms`, so that this pass folds them. A full disk only puts the seal
    /// off (the pass may free room); any other failure poisoned the log and ends the pass.
    fn seal_if_held_long(&self, store: &mut StoreState) -> Result<()> {
        let after = self.config.seal_after_ms;
        if after == 0 {
            return Ok(());
        }
        let active = *self.wal.segments().last().expect("the log has a segment");
        if active.last_lsn < active.first_lsn {
            store.holding_since = None;
            return Ok(());
        }
        let now = self.clock.now_ms();
        let since = match store.holding_since {
            Some((id, since)) if id == active.id => since,
            _ => {
                store.holding_since = Some((active.id, now));
                return Ok(());
            }
        };
        if now.saturating_sub(since) < after {
            return Ok(());
        }
        match self.wal.roll_now() {
            Ok(rolled) => {
                store.holding_since = None;
                if rolled {
                    store.totals.segments_sealed_early += 1;
                    tracing::debug!(
                        segment = active.id,
                        records = active.last_lsn + 1 - active.first_lsn,
                        held_ms = now - since,
                        "sealed a journal segment before it was full"
                    );
                }
                Ok(())
            }
            // The log logged it (at most once a second); the seal is tried at the next pass.
            Err(timewheel_wal::Error::NoSpace { .. }) => Ok(()),
            Err(e) => Err(self.compaction_failed(store, e.into(), true)),
        }
    }

    /// Records a failed pass (or a failed step around one) and returns its error.
    fn compaction_failed(
        &self,
        store: &mut StoreState,
        error: Error,
        manifest_known: bool,
    ) -> Error {
        let why = error.to_string();
        if crate::store::is_sync_failure(&error) {
            // Nothing is acknowledged after a failed sync, of the journal or beside it.
            self.wal.poison();
            tracing::error!(error = %why, "a compaction sync failed; the engine is poisoned");
        }
        if manifest_known {
            tracing::warn!(error = %why, "compaction failed; it is retried later");
        } else {
            tracing::error!(error = %why, "compaction failed while replacing the manifest; \
                            it stops until the engine is reopened");
            store.stopped = Some(why.clone());
        }
        store.last_error = Some(why);
        error
    }

    /// What the data directory holds, and what compaction did since open.
    pub(super) fn store_stats(&self) -> StoreStats {
        let segments = self.wal.segments();
        let non_resident = self.lock_state().non_resident;
        let store = lock(&self.store);
        let mut stats = store.totals.clone();
        stats.set_files(&store.manifest, &segments);
        stats.compaction_error = store.stopped.clone().or_else(|| store.last_error.clone());
        stats.non_resident = non_resident;
        stats.damage = store.damage.clone();
        stats
    }
}

impl Shared {
    /// The first bucket beyond the horizon now.
    fn horizon_bucket(&self) -> u64 {
        let now_ms = self.lock_state().now_ms.max(self.clock.now_ms());
        crate::store::bucket_of(now_ms.saturating_add(self.config.horizon_ms)) + 1
    }

    /// Loads the buckets the horizon reached since the last load into the wheel. Off the timer
    /// thread (the compactor's, or a caller's); the state lock is taken per bounded chunk.
    pub(super) fn load_horizon(&self) -> Result<()> {
        let mut store = lock(&self.store);
        let target = self.horizon_bucket();
        if target <= store.resident_below {
            return Ok(());
        }
        let due: Vec<u64> = store
            .manifest
            .buckets
            .range(store.resident_below..target)
            .map(|(&b, _)| b)
            .collect();
        for bucket in due {
            let entry = &store.manifest.buckets[&bucket];
            let jobs = crate::store::load_bucket(self.wal.storage(), bucket, entry)
                .inspect_err(|e| note_damage(&mut store.damage, e))?;
            let jobs = jobs.into_due_order();
            let mut loaded = 0;
            for chunk in jobs.chunks(super::worker::LOCK_HOLD_ITEMS_MAX) {
                let mut state = self.lock_state();
                let mut earliest = u64::MAX;
                for job in chunk {
                    if state.load(job) {
                        loaded += 1;
                        earliest = earliest.min(job.due_ms);
                    }
                }
                self.step_aside(state, earliest);
            }
            store.totals.loaded += loaded;
            tracing::debug!(bucket, loaded, "loaded a bucket the horizon reached");
        }
        store.resident_below = target;
        Ok(())
    }

    /// Puts the jobs of `ids` that are kept on disk only back into memory, so that a call can
    /// change or show them. Costs nothing when no bucket beyond the horizon exists or memory
    /// holds every id.
    pub(super) fn fault_in_ids(&self, ids: impl Iterator<Item = JobId>) -> Result<()> {
        let absent: Vec<JobId> = {
            let state = self.lock_state();
            if state.non_resident == 0 {
                return Ok(());
            }
            ids.filter(|id| !state.jobs.contains_key(id) && !state.far_gone.contains(id))
                .collect()
        };
        if absent.is_empty() {
            return Ok(());
        }
        let mut store = lock(&self.store);
        let found = crate::store::read_far_jobs(
            self.wal.storage(),
            &store.manifest,
            store.resident_below,
            &absent,
        )
        .inspect_err(|e| note_damage(&mut store.damage, e))?;
        for chunk in found.chunks(JOBS_PER_LOCK_HOLD) {
            let mut state = self.lock_state();
            let mut earliest = u64::MAX;
            for job in chunk {
                if state.fault_in(job, true) {
                    earliest = earliest.min(job.due_ms);
                }
            }
            self.step_aside(state, earliest);
        }
        Ok(())
    }
}

/// Keeps the first damage found in a bucket file (an I/O error is not damage: it is retried).
fn note_damage(damage: &mut Option<String>, e: &Error) {
    if matches!(e, Error::CorruptedStore { .. }) && damage.is_none() {
        tracing::error!(error = %e, "a bucket file beyond the horizon is damaged");
        *damage = Some(e.to_string());
    }
}

/// The background compactor: loads buckets as the horizon reaches them (checked every second),
/// every `Config::compact_interval_ms` (0: never) passes until nothing sealed is left to fold,
/// and every `Config::metrics_interval_ms` (0: never) publishes the engine's metrics.
pub(super) fn run(shared: Arc<Shared>) {
    let interval = Duration::from_millis(shared.config.compact_interval_ms);
    let metrics_interval = Duration::from_millis(shared.config.metrics_interval_ms);
    let tick = [interval, metrics_interval]
        .into_iter()
        .filter(|d| !d.is_zero())
        .fold(Duration::from_secs(1), Duration::min);
    let (mut since_pass, mut since_metrics) = (Duration::ZERO, Duration::ZERO);
    if !metrics_interval.is_zero() {
        shared.publish_metrics();
    }
    loop {
        {
            let store = lock(&shared.store);
            let (store, _) = shared
                .compactor_wake
                .wait_timeout_while(store, tick, |s| !s.stop)
                .expect("an engine lock poisoned by a panic");
            if store.stop {
                return;
            }
        }
        if let Err(e) = shared.load_horizon() {
            tracing::warn!(error = %e, "loading a bucket that the horizon reached failed; retried");
        }
        since_metrics += tick;
        if !metrics_interval.is_zero() && since_metrics >= metrics_interval {
            since_metrics = Duration::ZERO;
            shared.publish_metrics();
        }
        since_pass += tick;
        if interval.is_zero() || since_pass < interval {
            continue;
        }
        since_pass = Duration::ZERO;
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
