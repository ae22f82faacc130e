//! What the engine reports about itself: counts per state, the ready queue, lateness, and
//! what recovery found.

use std::time::Duration;

/// What recovery did when the engine opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Log records replayed.
    pub records: u64,
    /// Log segments scanned.
    pub segments: u64,
    /// Bytes of log scanned.
    pub bytes: u64,
    /// Time spent opening the log and rebuilding the state.
    pub elapsed: Duration,
    /// Of `elapsed`, the log's own recovery: its files checked, and its newest blocks made
    /// durable, before anything is replayed.
    pub log_elapsed: Duration,
    /// Live jobs after replay.
    pub jobs: u64,
    /// Jobs whose due time passed while the engine was down; they fire at once, in due order.
    pub missed: u64,
    /// Jobs that were claimed but not finished when the engine stopped; they are delivered
    /// again with attempt + 1.
    pub interrupted: u64,
    /// Records of a later version, marked skippable, that replay skipped.
    pub skipped: u64,
    /// A torn tail cut off the log: `(segment, offset)`.
    pub torn_tail: Option<(u64, u64)>,
    /// Damage to one copy of a group commit, repaired from the other: `(segment, offset of
    /// the damage, what was wrong)`. The data is intact, but the medium lost bytes it had.
    pub repaired: Vec<(u64, u64, timewheel_wal::CorruptionReason)>,
    /// Group commits whose records were intact but whose second copy (the mirror) was
    /// damaged: the copy is written anew. The data is whole, but the medium lost bytes.
    pub damaged_mirrors: u64,
    /// Hour buckets loaded from their files (those within the resident horizon).
    pub buckets: u64,
    /// Jobs loaded from bucket files; the journal after them is replayed as `records`.
    pub bucket_jobs: u64,
    /// The journal LSN the buckets cover: replay started after it.
    pub covered_lsn: u64,
}

impl RecoveryStats {
    /// What the journal's scan found (segments, bytes, a torn tail, repaired groups, damaged
    /// mirrors); the rest is 0 for the caller to fill.
    pub(crate) fn scanned(report: &timewheel_wal::RecoveryReport) -> Self {
        RecoveryStats {
            segments: report.segments,
            bytes: report.bytes,
            torn_tail: report.torn_tail.as_ref().map(|t| (t.segment, t.offset)),
            repaired: report
                .repaired_groups
                .iter()
                .map(|g| (g.segment, g.damage_offset, g.reason))
                .collect(),
            damaged_mirrors: report.damaged_mirrors,
            log_elapsed: report.elapsed,
            ..RecoveryStats::default()
        }
    }

    /// No damage of any kind: nothing to cut, nothing repaired, no damaged copy.
    pub fn is_healthy(&self) -> bool {
        self.repaired.is_empty() && self.torn_tail.is_none() && self.damaged_mirrors == 0
    }

    /// Journal records replayed plus jobs loaded from bucket files, per second.
    pub fn records_per_sec(&self) -> f64 {
        (self.records + self.bucket_jobs) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl StoreStats {
    /// Sets what the directory holds: the journal's `segments` and the files `manifest`
    /// names (the other fields, what compaction did and what memory holds, are left alone).
    pub(crate) fn set_files(
        &mut self,
        manifest: &crate::store::manifest::Manifest,
        segments: &[timewheel_wal::SegmentInfo],
    ) {
        self.journal_segments = segments.len() as u64;
        self.journal_bytes = segments.iter().map(|s| s.file_bytes).sum();
        self.buckets = manifest.buckets.len() as u64;
        self.bucket_files = manifest.buckets.values().map(|b| b.runs.len() as u64).sum();
        self.bucket_bytes = manifest.run_bytes();
        self.bucket_jobs = manifest.jobs();
        self.moved_jobs = manifest.moved.len() as u64;
        self.covered_lsn = manifest.covered_lsn;
    }
}

/// What compaction has done since open, and what the data directory holds now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreStats {
    /// Journal segment files.
    pub journal_segments: u64,
    /// Bytes of the journal's segment files (preallocated: whole segments).
    pub journal_bytes: u64,
    /// Live hour buckets on disk.
    pub buckets: u64,
    /// Their run files.
    pub bucket_files: u64,
    /// Bytes of the run files.
    pub bucket_bytes: u64,
    /// Jobs the bucket files hold (as of the LSN they cover).
    pub bucket_jobs: u64,
    /// Jobs kept outside their home bucket (rescheduled into another hour).
    pub moved_jobs: u64,
    /// The journal LSN the buckets cover.
    pub covered_lsn: u64,
    /// Compaction passes since open.
    pub compactions: u64,
    /// Journal records folded since open.
    pub records_folded: u64,
    /// Journal segments deleted since open.
    pub segments_deleted: u64,
    /// Journal segments sealed before they were full since open, because they had held
    /// records for [`Config::seal_after_ms`](crate::Config#structfield.seal_after_ms).
    pub segments_sealed_early: u64,
    /// Bytes freed since open: journal segments deleted, and runs merged or dropped.
    pub bytes_reclaimed: u64,
    /// Bytes of run files written since open.
    pub bytes_written: u64,
    /// Buckets dropped whole since open (every job in them finished).
    pub buckets_dropped: u64,
    /// How long the last pass took.
    pub last_compaction: std::time::Duration,
    /// Jobs beyond the resident horizon dropped from memory since open (kept on disk).
    pub evicted: u64,
    /// Jobs loaded from bucket files into memory since open, as the horizon reached them.
    pub loaded: u64,
    /// Scheduled jobs kept on disk only now.
    pub non_resident: u64,
    /// Times the disk was full and the ballast file was given up to compaction, since open.
    pub ballast_released: u64,
    /// Damage found in a bucket file beyond the horizon since open, when it was read (its
    /// jobs can not fire; `timewheel verify` names the file).
    pub damage: Option<String>,
    /// Why compaction stopped, if it did (an I/O error: it resumes after a reopen).
    pub compaction_error: Option<String>,
}

/// A snapshot of the engine's counters.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// Jobs waiting for their due time: in memory, or kept on disk only beyond the resident
    /// horizon ([`StoreStats::non_resident`]).
    pub scheduled: u64,
    /// Jobs fired and waiting to be claimed (or whose lease ran out).
    pub ready: u64,
    /// Jobs claimed and leased.
    pub running: u64,
    /// Jobs completed (over the life of the data directory).
    pub completed: u64,
    /// Jobs cancelled (over the life of the data directory).
    pub cancelled: u64,
    /// Jobs that failed for good, moved to the dead-letter set (over the life of the data
    /// directory; purged ones included).
    pub failed: u64,
    /// Jobs in the dead-letter set now.
    pub dead: u64,
    /// Failed attempts followed by a retry (and `retry_at`s), since open.
    pub retried: u64,
    /// Schedules that named the idempotency key of an existing job (and so scheduled
    /// nothing), since open.
    pub deduplicated: u64,
    /// Ids in the ready channel, including ones `claim` will skip.
    pub ready_queue_depth: usize,
    /// Jobs past due and not yet running: the ready ones, plus scheduled ones the timer has not
    /// reached (0 unless the timer thread is behind).
    pub overdue: u64,
    /// Jobs fired since open.
    pub fired: u64,
    /// Deliveries claimed by workers since open.
    pub claimed: u64,
    /// Deliveries repeated since open: leases that ran out, and jobs interrupted by a crash
    /// or shutdown and delivered again at open.
    pub redelivered: u64,
    /// Ready jobs nobody claimed within the lease (a worker took the id and died), queued
    /// again, since open.
    pub requeued: u64,
    /// Missed jobs found at open.
    pub missed_at_open: u64,
    /// Runs of the engine on this data directory that ended without a clean close (a crash,
    /// a kill, a failed sync), as the log counts them: each may have cut one unsynced claim
    /// per job, so a job that lived through it skips one attempt number at its next claim.
    pub crashed_runs: u64,
    /// Fire lateness percentiles since open, in microseconds: p50, p99, p99.9, max.
    pub lateness_us_p50: u64,
    /// See `lateness_us_p50`.
    pub lateness_us_p99: u64,
    /// See `lateness_us_p50`.
    pub lateness_us_p999: u64,
    /// See `lateness_us_p50`.
    pub lateness_us_max: u64,
    /// Time from the ready queue to the claim since open, in microseconds: p50, p99, max. How
    /// long fired jobs wait for a worker.
    pub claim_wait_us_p50: u64,
    /// See `claim_wait_us_p50`.
    pub claim_wait_us_p99: u64,
    /// See `claim_wait_us_p50`.
    pub claim_wait_us_max: u64,
    /// The timer thread runs at the real-time priority it asks for
    /// ([`Config::timer_realtime`](crate::Config#structfield.timer_realtime)).
    pub timer_realtime: bool,
}

impl Stats {
    pub(crate) fn collect(
        view: &StateView<'_>,
        ready_queue_depth: usize,
        recovery: &RecoveryStats,
    ) -> Stats {
        let q = |h: &hdrhistogram::Histogram<u64>, p: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(p)
            }
        };
        let (h, w) = (view.lateness_us, view.claim_wait_us);
        Stats {
            scheduled: view.scheduled,
            ready: view.ready,
            running: view.running,
            completed: view.completed,
            cancelled: view.cancelled,
            failed: view.failed,
            dead: view.dead,
            retried: view.retried,
            deduplicated: view.deduplicated,
            ready_queue_depth,
            overdue: view.ready + view.scheduled_overdue,
            fired: view.fired,
            claimed: view.claimed,
            redelivered: view.redelivered,
            requeued: view.requeued,
            missed_at_open: recovery.missed,
            crashed_runs: view.crashed_runs,
            lateness_us_p50: q(h, 0.5),
            lateness_us_p99: q(h, 0.99),
            lateness_us_p999: q(h, 0.999),
            lateness_us_max: q(h, 1.0),
            claim_wait_us_p50: q(w, 0.5),
            claim_wait_us_p99: q(w, 0.99),
            claim_wait_us_max: q(w, 1.0),
            timer_realtime: false,
        }
    }
}

/// The figures `stats()` reads, taken under the state lock.
pub(crate) struct StateView<'a> {
    pub scheduled: u64,
    pub ready: u64,
    pub running: u64,
    pub completed: u64,
    pub cancelled: u64,
    pub failed: u64,
    pub dead: u64,
    pub retried: u64,
    pub deduplicated: u64,
    pub fired: u64,
    pub claimed: u64,
    pub redelivered: u64,
    pub requeued: u64,
    pub crashed_runs: u64,
    /// At least one scheduled job is past due (the timer thread is behind): a lower bound.
    pub scheduled_overdue: u64,
    pub lateness_us: &'a hdrhistogram::Histogram<u64>,
    pub claim_wait_us: &'a hdrhistogram::Histogram<u64>,
}

/// What one compaction pass did ([`Engine::compact`](crate::Engine::compact)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactionReport {
    /// Journal records folded.
    pub records: u64,
    /// Journal segments deleted.
    pub segments_deleted: u64,
    /// Journal bytes deleted (whole segment files).
    pub journal_bytes_deleted: u64,
    /// Run files written.
    pub runs_written: u64,
    /// Bytes of the runs written.
    pub bytes_written: u64,
    /// Run files removed (merged or dropped).
    pub runs_removed: u64,
    /// Bytes of the runs removed.
    pub run_bytes_removed: u64,
    /// Buckets merged into one run.
    pub buckets_merged: u64,
    /// Buckets dropped whole: every job in them finished.
    pub buckets_dropped: u64,
    /// How long it took.
    pub elapsed: Duration,
}

/// What the journal did since the engine opened (see [`Engine::log_stats`](crate::Engine::log_stats)).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct LogStats {
    /// Records appended.
    pub records: u64,
    /// Bytes of record frames appended (headers and padding included).
    pub bytes: u64,
    /// Group-commit syncs; each covers every append published before it.
    pub syncs: u64,
    /// Time spent in those syncs.
    pub sync_seconds_total: f64,
    /// Syncs by duration, cumulative: `(upper bound in seconds, syncs that took at most that)`,
    /// the last bound infinite (it counts them all).
    pub sync_seconds_buckets: Vec<(f64, u64)>,
    /// Segment rolls.
    pub rolls: u64,
}

impl LogStats {
    pub(crate) fn from_wal(wal: &timewheel_wal::WalStats) -> Self {
        let bounds = timewheel_wal::SYNC_SECONDS_BOUNDS
            .iter()
            .copied()
            .chain([f64::INFINITY]);
        LogStats {
            records: wal.records,
            bytes: wal.bytes,
            syncs: wal.syncs,
            sync_seconds_total: wal.sync_seconds_total,
            sync_seconds_buckets: bounds
                .zip(wal.sync_seconds_buckets.iter().copied())
                .collect(),
            rolls: wal.rolls,
        }
    }
}
