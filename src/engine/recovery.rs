//! Rebuilding the engine's state from the log on open.
//!
//! The log has already been scanned and any torn tail cut off (`Wal::open`). Every record is
//! replayed in log order (read ahead on a second thread over real files: `read_ahead`)
//! through the same transition function the live calls use
//! ([`State::apply`], and the id rules of [`IdLedger`]); a record that function refuses could
//! not have been written by this engine, and the open fails with `Error::UndecodableRecord` naming its
//! LSN. Then the timers are armed:
//! - jobs whose due time passed while the engine was down (missed jobs) go to the ready queue
//!   at once, in due order;
//! - jobs that were claimed but not finished (interrupted) are ready again; their next claim
//!   gets attempt + 1, which no worker has seen, because a claim is durable before a worker
//!   gets it;
//! - cancelled, completed and failed jobs are gone and never fire again.

use std::time::Instant;

use timewheel_wal::format::FLAG_SKIPPABLE;
use timewheel_wal::storage::Storage;
use timewheel_wal::{Lsn, RecoveryReport, Wal};

use super::ids::IdLedger;
use super::state::{Mode, State};
use crate::error::{Error, Result};
use crate::job::JobId;
use crate::record::{Event, ScheduleRecord, TYPE_CANCEL, TYPE_COMPLETE, TYPE_SCHEDULE};
use crate::stats::RecoveryStats;
use crate::store::{self, bucket::StoredJob, manifest::Manifest};

/// Jobs the table is sized for up front, at most (from a manifest's count, or the journal's
/// schedules less its cancels and completions).
const RESERVE_JOBS_MAX: u64 = 1 << 28;

/// A schedule's id must be the next in the ledger and name the job's home bucket.
fn admit_schedule(
    ids: &mut IdLedger,
    s: &ScheduleRecord<'_>,
) -> std::result::Result<(), &'static str> {
    if s.id.bucket_residue()
        != JobId::compose(0, store::home_bucket(s.due_ms, s.created_ms)).bucket_residue()
    {
        return Err("job id does not name the job's home bucket");
    }
    ids.admit_schedule(s.id.seq())
}

/// Records a batch of the read-ahead carries, at most.
const READ_AHEAD_RECORDS: usize = 4096;
/// Body bytes a batch of the read-ahead carries, about (a larger record still goes whole).
const READ_AHEAD_BYTES: usize = 1 << 20;
/// Batches read and not yet replayed, at most.
const READ_AHEAD_BATCHES: usize = 4;

/// Records read from the journal on a second thread, ready for replay: bodies back to back.
#[derive(Default)]
struct ReadBatch {
    bodies: Vec<u8>,
    /// LSN, type, flags and the end of its body in `bodies` (it starts where the one before
    /// ends).
    records: Vec<(Lsn, u8, u8, usize)>,
    /// The read failed after the records above (the last batch).
    error: Option<timewheel_wal::Error>,
}

/// Reads the journal from `from` on a second thread and hands each record to `replay_one`
/// on this one, in LSN order. Replay is the open's longest part and runs on one thread (the
/// state machine is sequential); the reads, checksums and copies of each record (a quarter of
/// that thread's time, at 10M schedules) overlap it instead of adding to it. The first
/// error, the reader's or `replay_one`'s, ends it.
fn read_ahead<S: Storage>(
    wal: &Wal<S>,
    from: Lsn,
    replay_one: &mut impl FnMut(Lsn, u8, u8, &[u8]) -> Result<()>,
) -> Result<()> {
    let (full_tx, full_rx) = crossbeam_channel::bounded::<ReadBatch>(READ_AHEAD_BATCHES);
    let (empty_tx, empty_rx) = crossbeam_channel::bounded::<ReadBatch>(READ_AHEAD_BATCHES + 1);
    std::thread::scope(|scope| {
        let reader = std::thread::Builder::new()
            .name("timewheel-replay-read".into())
            .spawn_scoped(scope, move || {
                let mut iter = wal.iter_from(from);
                loop {
                    let mut batch = empty_rx.try_recv().unwrap_or_default();
                    batch.bodies.clear();
                    batch.records.clear();
                    let mut last = false;
                    while batch.records.len() < READ_AHEAD_RECORDS
                        && batch.bodies.len() < READ_AHEAD_BYTES
                    {
                        match iter.next_ref() {
                            None => {
                                last = true;
                                break;
                            }
                            Some(Err(e)) => {
                                batch.error = Some(e);
                                last = true;
                                break;
                            }
                            Some(Ok(r)) => {
                                batch.bodies.extend_from_slice(r.body);
                                let end = batch.bodies.len();
                                batch.records.push((r.lsn, r.record_type, r.flags, end));
                            }
                        }
                    }
                    // Gone: replay refused a record and stopped.
                    if full_tx.send(batch).is_err() || last {
                        return;
                    }
                }
            });
        let reader = match reader {
            Ok(reader) => reader,
            Err(e) => return Err(Error::Io(e)),
        };
        let replayed = (|| {
            for mut batch in full_rx.iter() {
                let mut start = 0;
                for &(lsn, record_type, flags, end) in &batch.records {
                    replay_one(lsn, record_type, flags, &batch.bodies[start..end])?;
                    start = end;
                }
                if let Some(e) = batch.error.take() {
                    return Err(Error::from(e));
                }
                let _ = empty_tx.try_send(batch);
            }
            Ok(())
        })();
        drop(full_rx);
        if let Err(panic) = reader.join() {
            std::panic::resume_unwind(panic);
        }
        replayed
    })
}

/// What replay rebuilt.
pub(super) struct Replayed {
    pub ids: IdLedger,
    pub recovery: RecoveryStats,
}

/// Loads the buckets `manifest` names below `far_from` into `state` (empty, its clock at
/// `now_ms`), then replays the journal after the LSN they cover. The jobs of the buckets from
/// `far_from` on stay on disk, counted in `State::non_resident`, except those a replayed
/// record changes: they are read back first.
pub(super) fn replay<S: Storage>(
    wal: &Wal<S>,
    report: &RecoveryReport,
    manifest: &Manifest,
    (far_from, verify_far): (u64, bool),
    state: &mut State,
    open_started_ms: u64,
) -> Result<Replayed> {
    let started = Instant::now();
    if verify_far {
        for (&bucket, entry) in manifest.buckets.range(far_from..) {
            store::load_bucket(wal.storage(), bucket, entry)?;
        }
    }
    let mut restored = 0u64;
    state.crashes = manifest.crashes;
    // Before the first record of a directory, no run came before: it counts as clean.
    state.clean = manifest.clean || manifest.covered_lsn == 0;
    state.non_resident = manifest
        .buckets
        .range(far_from..)
        .map(|(_, b)| b.jobs)
        .sum();
    state.jobs.reserve(
        manifest
            .jobs()
            .saturating_sub(state.non_resident)
            .min(RESERVE_JOBS_MAX) as usize,
    );
    let locator = store::Locator::new(manifest)?;
    // Far buckets a replayed record needed, read once each.
    let mut far_read: std::collections::HashMap<u64, std::collections::BTreeMap<JobId, StoredJob>> =
        Default::default();
    for (&bucket, entry) in manifest.buckets.range(..far_from) {
        for job in store::load_bucket(wal.storage(), bucket, entry)?.values() {
            state.restore(job).map_err(|why| Error::CorruptedStore {
                file: store::bucket::run_file_name(bucket, entry.runs[0].generation),
                offset: 0,
                reason: format!("{why} (job {})", job.id),
            })?;
            restored += 1;
        }
    }
    // Keys of keyed jobs kept on disk beyond the horizon: a schedule naming one must find it.
    for (&bucket, entry) in manifest.buckets.range(far_from..) {
        if entry.keyed == 0 {
            continue;
        }
        for job in store::load_bucket(wal.storage(), bucket, entry)?.into_values() {
            if let Some(key) = job.key {
                // The first far job naming a key holds it. A store this engine wrote has no
                // second; if one had, its restore refuses it when its bucket loads.
                let _ = state.keys.hold(super::table::key_hash(&key), &key, job.id);
            }
        }
    }
    state.counters.completed = manifest.completed;
    state.counters.cancelled = manifest.cancelled;
    state.counters.failed = manifest.failed;
    // Size the table once for the journal's jobs instead of rehashing it all the way up (a
    // third of the open of 10M schedules): its schedules, less the cancels and completions
    // that end them (an estimate: a far job's cancel counts against it, a burial does not).
    let by_type = |t: u8| {
        report
            .records_by_type
            .get(usize::from(t))
            .copied()
            .unwrap_or(0)
    };
    let journal_jobs = by_type(TYPE_SCHEDULE)
        .saturating_sub(by_type(TYPE_CANCEL))
        .saturating_sub(by_type(TYPE_COMPLETE));
    state
        .jobs
        .reserve(journal_jobs.min(RESERVE_JOBS_MAX) as usize);
    let mut ids = IdLedger {
        last_id: manifest.ids_last,
        reserved_up_to: manifest.ids_reserved,
    };
    let mut records = 0u64;
    let mut skipped = 0u64;
    let mut replay_one = |lsn: Lsn, record_type: u8, flags: u8, body: &[u8]| -> Result<()> {
        records += 1;
        let refuse = |reason: String| Error::UndecodableRecord { lsn, reason };
        let event = match Event::decode(record_type, body) {
            Ok(event) => event,
            // A later version's record that it marked safe to ignore.
            Err(_) if flags & FLAG_SKIPPABLE != 0 => {
                skipped += 1;
                return Ok(());
            }
            Err(e) => return Err(refuse(e.to_string())),
        };
        // A change of a job kept on disk beyond the horizon: read it back first.
        if let Some(id) = event.id()
            && !matches!(event, Event::Schedule(_))
            && !state.jobs.contains_key(&id)
            && !state.far_gone.contains(&id)
            && let Some(bucket) = locator.locate(manifest, id).filter(|&b| b >= far_from)
        {
            let jobs = match far_read.entry(bucket) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(store::load_bucket(
                    wal.storage(),
                    bucket,
                    &manifest.buckets[&bucket],
                )?),
            };
            if let Some(job) = jobs.remove(&id) {
                state.fault_in(&job, false);
                restored += 1;
            }
        }
        let admitted = match &event {
            Event::ReserveIds { up_to } => ids.admit_reserve(*up_to),
            Event::Schedule(s) => admit_schedule(&mut ids, s),
            _ => Ok(()),
        };
        admitted
            .and_then(|()| state.apply(&event, Mode::Replay, lsn))
            .map_err(|why| {
                let job = event
                    .id()
                    .map_or(String::new(), |id| format!(" (job {id})"));
                refuse(format!("{why}{job}"))
            })
    };
    let from = manifest.covered_lsn + 1;
    if wal.storage().parallel_reads() {
        read_ahead(wal, from, &mut replay_one)?;
    } else {
        // The simulation's disk: one thread, so that its faults come in a fixed order.
        let mut iter = wal.iter_from(from);
        while let Some(record) = iter.next_ref() {
            let r = record?;
            replay_one(r.lsn, r.record_type, r.flags, r.body)?;
        }
    }
    let live = state.jobs.len() as u64;
    let armed = state.arm_after_replay(open_started_ms);
    let recovery = RecoveryStats {
        records,
        skipped,
        elapsed: report.elapsed + started.elapsed(),
        jobs: live,
        missed: armed.missed,
        interrupted: armed.interrupted,
        buckets: manifest.buckets.range(..far_from).count() as u64,
        bucket_jobs: restored,
        covered_lsn: manifest.covered_lsn,
        ..RecoveryStats::scanned(report)
    };
    tracing::info!(
        records = recovery.records,
        segments = recovery.segments,
        bytes = recovery.bytes,
        jobs = recovery.jobs,
        buckets = recovery.buckets,
        bucket_jobs = recovery.bucket_jobs,
        elapsed_ms = recovery.elapsed.as_millis() as u64,
        "recovered"
    );
    if recovery.missed > 0 || recovery.interrupted > 0 {
        tracing::info!(
            missed = recovery.missed,
            interrupted = recovery.interrupted,
            "recovered jobs that were due or running while the engine was down"
        );
    }
    Ok(Replayed {
        ids: ids.reopened(),
        recovery,
    })
}
