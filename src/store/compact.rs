//! One compaction pass: sealed journal segments folded into hour-bucket runs.
//!
//! The pass reads only sealed segments (durable, immutable) and the runs already written, and
//! writes only new files, so it holds no lock the engine's calls or its timer need. Its steps,
//! each crash-safe because nothing is deleted before the manifest that no longer needs it is
//! durable:
//! 1. Read the records after the manifest's LSN, up to the end of the last sealed segment it
//!    folds, and net them per job: a job scheduled and finished within the pass never reaches
//!    a bucket; a job changed in place becomes a `Patch`; a finished one a `Delete`; one
//!    rescheduled into another hour a `Delete` in its old bucket and a `Put` in the new one.
//! 2. Write one new run per bucket touched (synced), or, for a bucket with too many runs, too
//!    many bytes stacked on its oldest, mostly finished jobs or none left, merge its runs into
//!    one (or into none: the bucket is dropped whole).
//! 3. Replace the manifest (temporary file, sync, rename, directory sync).
//! 4. Remove the runs the new manifest no longer names, then the folded journal segments.
//!
//! A crash before step 3 leaves files no manifest names (removed at the next open); after it,
//! files the manifest no longer needs (removed by the next pass or the next open).
//!
//! The pass trusts the journal's meaning: every record in it was accepted by the one state
//! machine, live and at every open since. It checks what it can (a change of a job no bucket
//! holds, a run that does not stack) and refuses, rather than guess, with `CorruptedStore`.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use timewheel_wal::format::FLAG_SKIPPABLE;
use timewheel_wal::storage::Storage;
use timewheel_wal::{Lsn, Wal};

use super::bucket::{
    self, Entry, Fate, Patch, StoredJob, encode_run, encode_run_of, run_file_name,
};
use super::loaded::BucketJobs;
use super::manifest::{Manifest, RunRef};
use super::{
    Locator, bucket_of, corrupted, home_bucket, load_bucket, replace_manifest, sync_dir, write_new,
};
use crate::error::{Error, Result};
use crate::job::{IdBuild, JobId};
use crate::record::Event;
use crate::stats::CompactionReport;

/// Limits of one pass.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Sealed segments folded at most.
    pub segments_max: usize,
    /// A bucket with more runs than this is merged into one.
    pub runs_max: usize,
    /// A bucket whose runs hold more than this percentage of its live jobs' bytes is merged
    /// (see [`mostly_dead`]).
    pub space_percent_max: u32,
}

/// Whether the runs `base` and `stacked` on it (the new one included) hold more than
/// `percent_max` % of what `live_jobs` need. Without this rule a bucket whose jobs are mostly
/// finished keeps, and loads, every job its oldest run was written with: the deletes stacked
/// on that run are a few bytes each, so the size rule alone never fires while one job is
/// left. With it, the bytes on disk stay within this factor of the live bytes, and each such
/// merge follows new records worth at least `percent_max - 100` % of the live bytes it
/// rewrites (the rewrites stay proportional to what was written). A base run is all puts (a
/// bucket's first run, or a merge), so its mean record size estimates a live job's bytes.
fn mostly_dead(base: &RunRef, stacked: u64, live_jobs: u64, percent_max: u32) -> bool {
    let per_job = base.bytes / base.records.max(1);
    let live_bytes = live_jobs.saturating_mul(per_job);
    (base.bytes + stacked).saturating_mul(100) > live_bytes.saturating_mul(u64::from(percent_max))
}

/// What a pass works in, kept from one pass to the next: the table of the jobs it nets.
///
/// Kept, not dropped, because of what giving it back costs the process. The table of a pass
/// over a few segments holds millions of jobs, hundreds of MB in one allocation, which the
/// allocator hands back with one `munmap`: measured at 3-28 ms for 50-420 MB, under the
/// process's memory-map lock, held for writing. Every other thread that faults a page in or
/// grows its heap waits that long: the timer thread did, and fire lateness beside compaction
/// had a p99 of 2-3 ms and a p99.9 of 13-19 ms on the engine's own clock. (Growing the table
/// by doubling gave back each smaller one the same way.) So the table keeps the room of the
/// largest pass, cleared between passes, until the engine closes.
#[derive(Default)]
pub(crate) struct FoldScratch {
    tracks: HashMap<JobId, Track, IdBuild>,
}

/// Where a job the pass saw stands at its end.
enum Track {
    /// Scheduled within the pass, still live: all of it is here.
    New {
        job: StoredJob,
        home: u64,
        target: u64,
    },
    /// Held by a bucket before the pass; what changed.
    Old {
        bucket: u64,
        due_ms: Option<u64>,
        lease: Option<(u32, bool)>,
        crashes_seen: Option<u32>,
        fate: Option<Fate>,
        finished: bool,
    },
}

/// The failures of a job the pass saw: counted, the job died, or came back.
fn fate_of(track: &mut Track) -> FateRef<'_> {
    match track {
        Track::New { job, .. } => FateRef::New(job),
        Track::Old { fate, .. } => FateRef::Old(fate.get_or_insert(Fate {
            reset: false,
            failures_add: 0,
            dead: None,
            error: None,
        })),
    }
}

enum FateRef<'a> {
    New(&'a mut StoredJob),
    Old(&'a mut Fate),
}

impl FateRef<'_> {
    /// One more failure, with its reason when it has one; alive after it.
    fn failed(self, reason: Option<&str>) {
        match self {
            FateRef::New(job) => {
                job.failures = job.failures.saturating_add(1);
                if let Some(r) = reason {
                    job.last_error = Some(r.to_owned());
                }
                job.dead = None;
            }
            FateRef::Old(f) => {
                f.failures_add = f.failures_add.saturating_add(1);
                if let Some(r) = reason {
                    f.error = Some(r.to_owned());
                }
                f.dead = None;
            }
        }
    }

    fn died(self, at_ms: u64, expired: bool, reason: &str) {
        match self {
            FateRef::New(job) => {
                job.failures = job.failures.saturating_add(1);
                job.last_error = Some(reason.to_owned());
                job.dead = Some((at_ms, expired));
            }
            FateRef::Old(f) => {
                f.failures_add = f.failures_add.saturating_add(1);
                f.error = Some(reason.to_owned());
                f.dead = Some((at_ms, expired));
            }
        }
    }

    fn requeued(self) {
        match self {
            FateRef::New(job) => {
                job.failures = 0;
                job.last_error = None;
                job.dead = None;
            }
            FateRef::Old(f) => {
                *f = Fate {
                    reset: true,
                    failures_add: 0,
                    dead: None,
                    error: Some(String::new()),
                };
            }
        }
    }
}

/// What the pass writes into one bucket.
#[derive(Default)]
struct Delta {
    puts: Vec<StoredJob>,
    patches: Vec<Patch>,
    deletes: Vec<JobId>,
}

impl Delta {
    fn into_entries(mut self) -> Vec<Entry> {
        let order = super::loaded::due_order(&self.puts, |j| Some(j));
        let mut puts: Vec<Option<StoredJob>> = self.puts.into_iter().map(Some).collect();
        self.patches.sort_by_key(|p| p.id);
        self.deletes.sort_unstable();
        let mut out = Vec::with_capacity(puts.len() + self.patches.len() + self.deletes.len());
        out.extend(
            order
                .into_iter()
                .map(|i| Entry::Put(puts[i].take().expect("each put is placed once"))),
        );
        out.extend(self.patches.into_iter().map(Entry::Patch));
        out.extend(self.deletes.into_iter().map(Entry::Delete));
        super::release(puts);
        out
    }
}

/// The end of the newest sealed segment a pass over `manifest` may fold, or `None` when no
/// sealed segment holds records after it.
pub(crate) fn fold_point<S: Storage>(
    wal: &Wal<S>,
    manifest: &Manifest,
    limits: Limits,
) -> Option<Lsn> {
    wal.segments()
        .iter()
        .filter(|s| s.sealed && s.last_lsn > manifest.covered_lsn)
        .take(limits.segments_max)
        .map(|s| s.last_lsn)
        .last()
}

/// Runs one pass over `manifest` (the durable one) folding the journal up to `fold_to`.
/// Returns the new manifest, durable, and what the pass did. On `Err` the durable manifest is
/// `manifest` or, if the error struck while replacing it, perhaps the new one: the caller must
/// not run another pass until an open has read which.
pub(crate) fn pass<S: Storage>(
    wal: &Wal<S>,
    manifest: &Manifest,
    fold_to: Lsn,
    limits: Limits,
    far_from: u64,
    scratch: &mut FoldScratch,
) -> std::result::Result<PassOutput, PassError> {
    let started = Instant::now();
    let storage = wal.storage();
    let mut done = Done {
        far: Far {
            from: far_from,
            new: Vec::new(),
            deleted: Vec::new(),
        },
        report: CompactionReport::default(),
        written: Vec::new(),
    };
    let folded = fold(
        wal,
        manifest,
        fold_to,
        limits,
        &mut done,
        &mut scratch.tracks,
    );
    let Done {
        far,
        mut report,
        written,
    } = done;
    let (next, doomed) = match folded {
        Ok(planned) => planned,
        Err(error) => {
            // Nothing names the runs written so far: remove them now if we can (the next
            // open removes them otherwise). The durable manifest is still `manifest`.
            for name in &written {
                let _ = storage.remove(name);
            }
            // A failed sync here must poison like any other (the caller tells by the error).
            let error = match sync_dir(storage) {
                Err(e) if !super::is_sync_failure(&error) => Error::Io(e),
                _ => error,
            };
            return Err(PassError {
                error,
                manifest_known: true,
            });
        }
    };
    let unknown = |error: Error| PassError {
        error,
        manifest_known: false,
    };
    // 4. The manifest, then what it no longer needs.
    replace_manifest(storage, &next).map_err(|e| unknown(e.into()))?;
    // From here on the new manifest is durable, and the caller must hold it whatever fails
    // below: the old one names runs that may already be removed (a failed directory sync
    // after the removals once left memory reading a far job from a run that was gone). A
    // failure here leaves files the new manifest does not name (the next open removes them)
    // or journal segments it covers (a later pass deletes them).
    let cleanup = remove_replaced(wal, &doomed, fold_to, &mut report).err();
    report.elapsed = started.elapsed();
    Ok(PassOutput {
        manifest: next,
        report,
        far: far.new,
        far_deleted: far.deleted,
        cleanup,
    })
}

/// Removes the runs a durable manifest no longer names, then the journal segments it covers.
fn remove_replaced<S: Storage>(
    wal: &Wal<S>,
    doomed: &[(u64, RunRef)],
    fold_to: Lsn,
    report: &mut CompactionReport,
) -> Result<()> {
    let storage = wal.storage();
    for (bucket, run) in doomed {
        storage.remove(&run_file_name(*bucket, run.generation))?;
        report.runs_removed += 1;
        report.run_bytes_removed += run.bytes;
    }
    if !doomed.is_empty() {
        sync_dir(storage)?;
    }
    let before = wal.segments();
    let deleted = wal.delete_segments_below(fold_to + 1)?;
    report.segments_deleted = deleted as u64;
    report.journal_bytes_deleted = before.iter().take(deleted).map(|s| s.file_bytes).sum();
    Ok(())
}

/// What a pass has done so far: the far jobs it put and deleted, its figures, and the runs it
/// wrote (which no manifest names until the pass ends).
struct Done {
    far: Far,
    report: CompactionReport,
    written: Vec<String>,
}

/// What a pass leaves: the new manifest (durable), what it did, the jobs it put into buckets
/// from `far_from` on (new there: scheduled or moved in) as they are there, `(id, due_ms,
/// attempt, leased)`, and the jobs it deleted from such buckets.
pub(crate) struct PassOutput {
    pub manifest: Manifest,
    pub report: CompactionReport,
    pub far: Vec<FarJob>,
    pub far_deleted: Vec<JobId>,
    /// A failure after the manifest was replaced, removing what it no longer needs: the
    /// pass's result stands, and the caller reports this.
    pub cleanup: Option<Error>,
}

/// A job a pass put into a bucket beyond the horizon, as it is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FarJob {
    pub id: JobId,
    pub due_ms: u64,
    pub attempt: u32,
    pub leased: bool,
    pub failures: u32,
}

/// What a pass wrote into buckets from `from` on.
struct Far {
    from: u64,
    new: Vec<FarJob>,
    deleted: Vec<JobId>,
}

/// A pass that failed, and whether the durable manifest is still the one it started from
/// (then another pass may run; otherwise only an open can tell which manifest is durable).
#[derive(Debug)]
pub(crate) struct PassError {
    pub error: Error,
    pub manifest_known: bool,
}

/// Steps 1 to 3: the new manifest (not yet written), and the runs it no longer names.
/// A run's entries before they are encoded: a merge's are the bucket's jobs read in place in
/// due order (no job moves into a new vector); a stacked run's are the pass's delta.
enum RunEntries {
    Merged { jobs: BucketJobs, order: Vec<usize> },
    Delta(Vec<Entry>),
}

fn fold<S: Storage>(
    wal: &Wal<S>,
    manifest: &Manifest,
    fold_to: Lsn,
    limits: Limits,
    done: &mut Done,
    tracks: &mut HashMap<JobId, Track, IdBuild>,
) -> Result<(Manifest, Vec<(u64, RunRef)>)> {
    let Done {
        far,
        report,
        written,
    } = done;
    let storage = wal.storage();
    let mut next = manifest.clone();
    next.generation += 1;
    next.covered_lsn = fold_to;
    let locator = Locator::new(manifest)?;

    // Whether the last record folded is a `Closed` (before the first record of a directory:
    // yes, no run came before it).
    next.clean = manifest.clean || manifest.covered_lsn == 0;
    // 1. Net the records per job.
    // By id, hashed: the pass's entries are put in order per bucket afterwards. (Empty, with
    // the room of the largest pass so far; a pass that failed may have left entries.)
    tracks.clear();
    let mut iter = wal.iter_from(manifest.covered_lsn + 1);
    while let Some(record) = iter.next_ref() {
        let record = record?;
        if record.lsn > fold_to {
            break;
        }
        report.records += 1;
        let clean_before = next.clean;
        next.clean = record.record_type == crate::record::TYPE_CLOSED;
        let refuse = |reason: String| Error::UndecodableRecord {
            lsn: record.lsn,
            reason,
        };
        let event = match Event::decode(record.record_type, record.body) {
            Ok(event) => event,
            Err(_) if record.flags & FLAG_SKIPPABLE != 0 => continue,
            Err(e) => return Err(refuse(e.to_string())),
        };
        let lsn = record.lsn;
        // As in memory (`Event::sets_crashes_seen`).
        if event.sets_crashes_seen()
            && let Some(id) = event.id()
            && !matches!(event, Event::Schedule(_))
        {
            set_crashes_seen(track(tracks, &locator, manifest, id, lsn)?, next.crashes);
        }
        match event {
            Event::ReserveIds { up_to } => next.ids_reserved = up_to,
            Event::Opened { crashes } => {
                if Some(crashes) != next.crashes.checked_add(u32::from(!clean_before)) {
                    return Err(refuse("an open counts other crashes than the log".into()));
                }
                next.crashes = crashes;
            }
            Event::Closed { .. } => {}
            Event::Schedule(s) => {
                next.ids_last = s.id.seq();
                let home = home_bucket(s.due_ms, s.created_ms);
                let job = StoredJob {
                    id: s.id,
                    due_ms: s.due_ms,
                    created_ms: s.created_ms,
                    tenant: s.tenant,
                    shard: s.shard,
                    flags: s.flags,
                    max_attempts: s.max_attempts,
                    attempt: 0,
                    leased: false,
                    crashes_seen: next.crashes,
                    failures: 0,
                    dead: None,
                    backoff: s.backoff,
                    last_error: None,
                    key: s.key.map(<[u8]>::to_vec),
                    recurring: s.recurring.map(<[u8]>::to_vec),
                    payload: s.payload.to_vec(),
                };
                let before = tracks.insert(
                    s.id,
                    Track::New {
                        job,
                        home,
                        target: home,
                    },
                );
                if before.is_some() {
                    return Err(refuse(format!("job {} scheduled twice", s.id)));
                }
            }
            Event::Cancel { id }
            | Event::Complete { id, .. }
            | Event::Fail { id, .. }
            | Event::Purge { id } => {
                match &event {
                    Event::Cancel { .. } => next.cancelled += 1,
                    Event::Complete { .. } => next.completed += 1,
                    Event::Fail { .. } => next.failed += 1,
                    _ => {}
                }
                match track(tracks, &locator, manifest, id, lsn)? {
                    Track::New { .. } => drop(tracks.remove(&id)),
                    Track::Old { finished, .. } => *finished = true,
                }
            }
            Event::Claim { id, attempt, .. } => {
                set_lease(track(tracks, &locator, manifest, id, lsn)?, attempt, true);
            }
            Event::Expire { id, attempt } => {
                let t = track(tracks, &locator, manifest, id, lsn)?;
                set_lease(t, attempt, false);
                fate_of(t).failed(None);
            }
            Event::Reschedule { id, due_ms } => {
                set_due(track(tracks, &locator, manifest, id, lsn)?, due_ms);
            }
            Event::Retry {
                id,
                attempt,
                flags,
                due_ms,
                reason,
            } => {
                let t = track(tracks, &locator, manifest, id, lsn)?;
                set_lease(t, attempt, false);
                set_due(t, due_ms);
                if flags & crate::record::RETRY_FAILED != 0 {
                    fate_of(t).failed(Some(reason));
                }
            }
            Event::Bury {
                id,
                attempt,
                flags,
                at_ms,
                reason,
            } => {
                next.failed += 1;
                let t = track(tracks, &locator, manifest, id, lsn)?;
                set_lease(t, attempt, false);
                let expired = flags & crate::record::BURY_EXPIRED != 0;
                fate_of(t).died(at_ms, expired, reason);
            }
            Event::Extend { id, .. } => {
                // The lease stays open with the same attempt: nothing a bucket keeps changes.
                track(tracks, &locator, manifest, id, lsn)?;
            }
            Event::Next {
                id,
                attempt,
                flags,
                due_ms,
            } => {
                if flags & crate::record::NEXT_FAILED != 0 {
                    next.failed += 1;
                } else if flags & crate::record::NEXT_SKIPPED == 0 {
                    next.completed += 1;
                }
                let t = track(tracks, &locator, manifest, id, lsn)?;
                set_lease(t, attempt, false);
                set_due(t, due_ms);
                fate_of(t).requeued();
            }
            Event::Requeue { id, due_ms } => {
                let t = track(tracks, &locator, manifest, id, lsn)?;
                set_due(t, due_ms);
                fate_of(t).requeued();
            }
        }
    }
    drop(iter);

    // 2. What each bucket gets.
    let mut deltas: BTreeMap<u64, Delta> = BTreeMap::new();
    // Jobs moving out of an old bucket into another: (new bucket, patch) by old bucket.
    let mut moving: BTreeMap<u64, Vec<(u64, Patch)>> = BTreeMap::new();
    for (id, track) in tracks.drain() {
        match track {
            Track::New { job, home, target } => {
                if target != home {
                    next.moved.insert(id, target);
                }
                deltas.entry(target).or_default().puts.push(job);
            }
            Track::Old {
                bucket, finished, ..
            } if finished => {
                next.moved.remove(&id);
                deltas.entry(bucket).or_default().deletes.push(id);
            }
            Track::Old {
                bucket,
                due_ms,
                lease,
                crashes_seen,
                fate,
                ..
            } => {
                if due_ms.is_none() && lease.is_none() && crashes_seen.is_none() && fate.is_none() {
                    continue; // Only extended: nothing changed.
                }
                let patch = Patch {
                    id,
                    due_ms,
                    lease,
                    crashes_seen,
                    fate,
                };
                match due_ms.map(bucket_of) {
                    Some(target) if target != bucket => {
                        next.moved.remove(&id);
                        if target % (1 << JobId::BUCKET_BITS) != id.bucket_residue() {
                            next.moved.insert(id, target);
                        }
                        deltas.entry(bucket).or_default().deletes.push(id);
                        moving.entry(bucket).or_default().push((target, patch));
                    }
                    _ => deltas.entry(bucket).or_default().patches.push(patch),
                }
            }
        }
    }
    for (bucket, moves) in moving {
        let entry = manifest
            .buckets
            .get(&bucket)
            .expect("located in a live bucket");
        let mut jobs = load_bucket(storage, bucket, entry)?;
        for (target, patch) in moves {
            let mut job = jobs.take(patch.id).ok_or_else(|| {
                corrupted(
                    run_file_name(bucket, 0),
                    0,
                    format!("job {} is not in the bucket that should hold it", patch.id),
                )
            })?;
            patch.apply(&mut job);
            deltas.entry(target).or_default().puts.push(job);
        }
        jobs.release();
    }

    // 3. Write the runs.
    let mut doomed: Vec<(u64, RunRef)> = Vec::new();
    for (bucket, delta) in deltas {
        let mut entry = next.buckets.get(&bucket).cloned().unwrap_or_default();
        let gained = delta.puts.len() as u64;
        let lost = delta.deletes.len() as u64;
        let jobs_after = (entry.jobs + gained).checked_sub(lost).ok_or_else(|| {
            corrupted(
                run_file_name(bucket, 0),
                0,
                "the journal finishes more jobs than the bucket holds",
            )
        })?;
        let min_due = delta
            .puts
            .iter()
            .map(|j| j.due_ms)
            .chain(delta.patches.iter().filter_map(|p| p.due_ms))
            .min();
        // Merged when nothing is left, when the runs would be too many, when the runs
        // stacked on the oldest (the new one included) hold as many bytes as it does (each
        // merge then at least doubles the oldest run, so a job is rewritten a logarithmic
        // number of times, not once every few passes), or when the runs would hold more than
        // `Limits::space_percent_max` of what the live jobs need (see `mostly_dead`).
        let new_bytes: u64 = delta.puts.iter().map(bucket::put_bytes).sum::<u64>()
            + delta.patches.iter().map(bucket::patch_bytes).sum::<u64>()
            + (delta.deletes.len() as u64) * bucket::DELETE_RECORD_BYTES;
        let stacked: u64 = entry.runs.iter().skip(1).map(|r| r.bytes).sum::<u64>() + new_bytes;
        let merge = jobs_after == 0
            || entry.runs.len() + 1 > limits.runs_max
            || entry.runs.first().is_some_and(|base| {
                stacked >= base.bytes
                    || mostly_dead(base, stacked, jobs_after, limits.space_percent_max)
            });
        if bucket >= far.from {
            far.new.extend(
                delta
                    .puts
                    .iter()
                    .filter(|j| j.dead.is_none())
                    .map(|j| FarJob {
                        id: j.id,
                        due_ms: j.due_ms,
                        attempt: j.attempt,
                        leased: j.leased,
                        failures: j.failures,
                    }),
            );
            far.deleted.extend(&delta.deletes);
        }
        let keyed_puts = delta.puts.iter().filter(|j| j.key.is_some()).count() as u32;
        let entries = delta.into_entries();
        let (entries, min_due_ms) = if merge {
            let mut jobs = load_bucket(storage, bucket, &entry)?;
            jobs.apply(entries).map_err(|id| {
                corrupted(
                    run_file_name(bucket, 0),
                    0,
                    format!("the journal changes job {id} in a bucket that does not hold it"),
                )
            })?;
            assert_eq!(
                jobs.len() as u64,
                jobs_after,
                "a merge counts what it stacks"
            );
            let min = jobs.values().map(|j| j.due_ms).min();
            entry.keyed = jobs.values().filter(|j| j.key.is_some()).count() as u32;
            doomed.extend(entry.runs.drain(..).map(|r| (bucket, r)));
            report.buckets_merged += u64::from(jobs_after > 0);
            report.buckets_dropped += u64::from(jobs_after == 0);
            let order = jobs.due_slots();
            (RunEntries::Merged { jobs, order }, min.unwrap_or(0))
        } else {
            entry.keyed = entry.keyed.saturating_add(keyed_puts);
            let min = match (entry.runs.is_empty(), min_due) {
                (true, m) => m.unwrap_or(0),
                (false, Some(m)) => m.min(entry.min_due_ms),
                (false, None) => entry.min_due_ms,
            };
            (RunEntries::Delta(entries), min)
        };
        let records = match &entries {
            RunEntries::Merged { order, .. } => order.len(),
            RunEntries::Delta(entries) => entries.len(),
        };
        if records == 0 {
            next.buckets.remove(&bucket);
            continue;
        }

        let generation = next.next_run;
        next.next_run += 1;
        let bytes = match &entries {
            RunEntries::Merged { jobs, order } => encode_run_of(
                bucket,
                generation,
                fold_to,
                next.crashes,
                order.iter().map(|&at| jobs.slot(at)),
            ),
            RunEntries::Delta(entries) => {
                encode_run(bucket, generation, fold_to, next.crashes, entries)
            }
        };
        match entries {
            RunEntries::Merged { jobs, order } => {
                jobs.release();
                super::release(order);
            }
            RunEntries::Delta(entries) => super::release(entries),
        }
        let name = run_file_name(bucket, generation);
        written.push(name.clone());
        write_new(storage, &name, &bytes)?;
        report.runs_written += 1;
        report.bytes_written += bytes.len() as u64;
        entry.runs.push(RunRef {
            generation,
            bytes: bytes.len() as u64,
            records: records as u64,
        });
        entry.jobs = jobs_after;
        entry.min_due_ms = min_due_ms;
        next.buckets.insert(bucket, entry);
        super::release(bytes);
    }
    next.moved.retain(|_, b| next.buckets.contains_key(b));
    Locator::new(&next)?;

    // The runs' directory entries, before a manifest names them.
    sync_dir(storage)?;
    Ok((next, doomed))
}

/// The track of job `id`, started from the bucket that holds it if the pass has not seen it.
fn track<'t>(
    tracks: &'t mut HashMap<JobId, Track, IdBuild>,
    locator: &Locator,
    manifest: &Manifest,
    id: JobId,
    lsn: Lsn,
) -> Result<&'t mut Track> {
    match tracks.entry(id) {
        std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
        std::collections::hash_map::Entry::Vacant(e) => {
            let bucket = locator
                .locate(manifest, id)
                .ok_or_else(|| Error::UndecodableRecord {
                    lsn,
                    reason: format!("change of job {id}, which no bucket holds"),
                })?;
            Ok(e.insert(Track::Old {
                bucket,
                due_ms: None,
                lease: None,
                crashes_seen: None,
                fate: None,
                finished: false,
            }))
        }
    }
}

fn set_due(track: &mut Track, due_ms: u64) {
    match track {
        Track::New { job, target, .. } => {
            job.due_ms = due_ms;
            *target = bucket_of(due_ms);
        }
        Track::Old { due_ms: d, .. } => *d = Some(due_ms),
    }
}

fn set_crashes_seen(track: &mut Track, crashes: u32) {
    match track {
        Track::New { job, .. } => job.crashes_seen = crashes,
        Track::Old { crashes_seen, .. } => *crashes_seen = Some(crashes),
    }
}

fn set_lease(track: &mut Track, attempt: u32, leased: bool) {
    match track {
        Track::New { job, .. } => {
            job.attempt = attempt;
            job.leased = leased;
        }
        Track::Old { lease, .. } => *lease = Some((attempt, leased)),
    }
}
