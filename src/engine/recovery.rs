//! Rebuilding the engine's state from the log on open.
//!
//! Replay follows the log's recovery (`open`): the records recovery accepts are applied as it
//! accepts them (`Wal::open_following`), on a second thread over real files, and whatever it
//! did not hand over is read once the log is open (read ahead on a second thread:
//! `read_ahead`); torn tails are cut before anything is handed over. Every record is
//! replayed in log order through the same transition function the live calls use
//! ([`State::apply`], and the id rules of [`IdLedger`]); a record that function refuses could
//! not have been written by this engine, and the open fails with `Error::UndecodableRecord` naming its
//! LSN. Then the timers are armed:
//! - jobs whose due time passed while the engine was down (missed jobs) go to the ready queue
//!   at once, in due order;
//! - jobs that were claimed but not finished (interrupted) are ready again; their next claim
//!   gets attempt + 1, which no worker has seen, because a claim is durable before a worker
//!   gets it;
//! - cancelled, completed and failed jobs are gone and never fire again.

use std::collections::{HashMap, hash_map};
use std::time::Instant;

use crossbeam_channel::Receiver;
use timewheel_wal::format::FLAG_SKIPPABLE;
use timewheel_wal::storage::Storage;
use timewheel_wal::{Follow, Lsn, RecordRef, RecoveryReport, Wal, WalOptions};

use super::ids::IdLedger;
use super::state::{Mode, State};
use crate::error::{Error, Result};
use crate::job::JobId;
use crate::record::{Event, ScheduleRecord, TYPE_CANCEL, TYPE_COMPLETE, TYPE_SCHEDULE};
use crate::stats::RecoveryStats;
use crate::store::loaded::BucketJobs;
use crate::store::{self, manifest::BucketEntry, manifest::Manifest};

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
/// Batches an open's scan may hand over ahead of replay, at most: enough for the scan of a
/// segment to finish first, so that the checks that end it (the tail read back from the
/// medium: milliseconds of direct reads) overlap the replay instead of following it (about
/// 130k records, at most some 35 MiB in flight).
const FOLLOW_AHEAD_BATCHES: usize = 32;

/// Records read from the journal on a second thread, ready for replay: bodies back to back.
#[derive(Default)]
struct ReadBatch {
    bodies: Vec<u8>,
    /// LSN, type, flags and the end of its body in `bodies` (it starts where the one before
    /// ends).
    records: Vec<(Lsn, u8, u8, usize)>,
    /// The read failed after the records above (the last batch).
    error: Option<timewheel_wal::Error>,
    /// About how many records the log holds (the first batch an open hands over).
    expected: Option<u64>,
}

impl ReadBatch {
    /// An emptied batch: one handed back by replay if there is one, else a new one.
    fn recycled(empty: &crossbeam_channel::Receiver<ReadBatch>) -> ReadBatch {
        let mut batch = empty.try_recv().unwrap_or_default();
        batch.bodies.clear();
        batch.records.clear();
        batch
    }

    /// Adds a record; `true` once the batch is full.
    fn push(&mut self, r: RecordRef<'_>) -> bool {
        self.bodies.extend_from_slice(r.body);
        self.records
            .push((r.lsn, r.record_type, r.flags, self.bodies.len()));
        self.records.len() >= READ_AHEAD_RECORDS || self.bodies.len() >= READ_AHEAD_BYTES
    }

    /// Its records in order: LSN, type, flags and body.
    fn each(&self) -> impl Iterator<Item = (Lsn, u8, u8, &[u8])> {
        let starts = std::iter::once(0).chain(self.records.iter().map(|r| r.3));
        self.records
            .iter()
            .zip(starts)
            .map(|(&(lsn, t, flags, end), start)| (lsn, t, flags, &self.bodies[start..end]))
    }
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
                    let mut batch = ReadBatch::recycled(&empty_rx);
                    let last = loop {
                        match iter.next_ref() {
                            None => break true,
                            Some(Err(e)) => {
                                batch.error = Some(e);
                                break true;
                            }
                            Some(Ok(r)) => {
                                if batch.push(r) {
                                    break false;
                                }
                            }
                        }
                    };
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
                for (lsn, record_type, flags, body) in batch.each() {
                    replay_one(lsn, record_type, flags, body)?;
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

/// What an open found: the log, the store's manifest, the state replayed from them (with its
/// ready queue's receiving end) and what replay rebuilt.
pub(super) struct Opened<S: Storage> {
    pub wal: Wal<S>,
    pub manifest: Manifest,
    pub state: State,
    pub ready_rx: Receiver<JobId>,
    pub replayed: Replayed,
}

/// A fresh state for an open, and the receiving end of its ready queue.
pub(super) type NewState<'a> = &'a dyn Fn() -> (State, Receiver<JobId>);

/// Opens the log on `storage` and rebuilds the state from the store and the log.
///
/// Replay follows recovery: before the directory's lock is taken, the manifest is read and
/// the buckets it names are loaded (nothing is written); then the log's open hands over each
/// record it accepts ([`Wal::open_following`]) and replay applies it at once, on a second
/// thread over real files, while recovery checks the rest (the open of a crash's log is then
/// about as long as the longer of the two, not both). Once the log is open, the store is
/// opened under the lock: if its manifest is not the one read ahead (another process changed
/// the directory meanwhile), the early work is thrown away and replay starts over from it.
/// Replay reads on with an iterator after the last record the open handed over, and from
/// wherever the early replay stopped (a record that needs a bucket file read, a record it
/// refused: met again there, with the directory locked).
pub(super) fn open<S: Storage>(
    storage: S,
    opts: WalOptions,
    far: (u64, bool),
    new_state: NewState<'_>,
    open_started_ms: u64,
) -> Result<Opened<S>> {
    let started = Instant::now();
    let (mut state, mut ready_rx) = new_state();
    let ahead = store::peek(&storage)?;
    let mut early = match ahead
        .as_ref()
        .map(|m| Replay::begin(&storage, m, far, &mut state))
    {
        None => None,
        Some(Ok(replay)) => Some(replay),
        // A failed read is an error, lock or not.
        Some(Err(e @ Error::Io(_))) => return Err(e),
        // What a bucket file holds is judged under the lock (another process may have been
        // replacing it): the state starts over there.
        Some(Err(_)) => {
            (state, ready_rx) = new_state();
            None
        }
    };
    let parallel = storage.parallel_reads();
    let (wal, report) = match early.as_mut() {
        None => Wal::open(storage, opts)?,
        Some(replay) if !parallel => Wal::open_following(
            storage,
            opts,
            &mut Inline {
                replay,
                state: &mut state,
            },
        )?,
        Some(replay) => std::thread::scope(|scope| -> Result<_> {
            let (full_tx, full_rx) = crossbeam_channel::bounded::<ReadBatch>(FOLLOW_AHEAD_BATCHES);
            let (empty_tx, empty_rx) =
                crossbeam_channel::bounded::<ReadBatch>(FOLLOW_AHEAD_BATCHES + 1);
            let state = &mut state;
            let consumer = std::thread::Builder::new()
                .name("timewheel-replay".into())
                .spawn_scoped(scope, move || {
                    for mut batch in full_rx.iter() {
                        if let Some(n) = batch.expected.take() {
                            replay.expect_records(n);
                        }
                        for (lsn, record_type, flags, body) in batch.each() {
                            replay.feed(state, lsn, record_type, flags, body);
                        }
                        let _ = empty_tx.try_send(batch);
                    }
                })?;
            let mut feed = Batches {
                batch: ReadBatch::default(),
                full_tx,
                empty_rx,
            };
            let opened = Wal::open_following(storage, opts, &mut feed);
            feed.send();
            drop(feed);
            if let Err(panic) = consumer.join() {
                std::panic::resume_unwind(panic);
            }
            Ok(opened?)
        })?,
    };
    let manifest = store::open(wal.storage(), wal.first_lsn())?;
    let had_early = early.is_some();
    let mut replay = match early.filter(|_| ahead.as_ref() == Some(&manifest)) {
        Some(replay) => replay,
        None => {
            if had_early {
                tracing::info!("the store changed before the open took the lock: replaying anew");
            }
            (state, ready_rx) = new_state();
            let replay = Replay::begin(wal.storage(), &manifest, far, &mut state)?;
            replay.expect(&mut state, journal_jobs(&report));
            replay
        }
    };
    if let Some(e) = replay.error.take() {
        return Err(e);
    }
    let from = replay.next;
    {
        let storage = wal.storage();
        let read_far =
            |bucket: u64, entry: &BucketEntry| store::load_bucket(storage, bucket, entry);
        let mut replay_one = |lsn: Lsn, record_type: u8, flags: u8, body: &[u8]| {
            let applied =
                replay.apply(&mut state, Some(&read_far), lsn, record_type, flags, body)?;
            assert!(
                applied,
                "with the bucket files at hand, every record is applied"
            );
            Ok(())
        };
        if from > wal.last_lsn() {
            // The open handed every record over.
        } else if storage.parallel_reads() {
            read_ahead(&wal, from, &mut replay_one)?;
        } else {
            // The simulation's disk: one thread, so that its faults come in a fixed order.
            let mut iter = wal.iter_from(from);
            while let Some(record) = iter.next_ref() {
                let r = record?;
                replay_one(r.lsn, r.record_type, r.flags, r.body)?;
            }
        }
    }
    let replayed = replay.finish(&mut state, &report, started, open_started_ms);

    Ok(Opened {
        wal,
        manifest,
        state,
        ready_rx,
        replayed,
    })
}

/// Jobs the journal holds, about (to size the table once): its schedules, less the cancels
/// and completions that end them (a far job's cancel counts against it, a burial does not).
fn journal_jobs(report: &RecoveryReport) -> u64 {
    let by_type = |t: u8| {
        report
            .records_by_type
            .get(usize::from(t))
            .copied()
            .unwrap_or(0)
    };
    by_type(TYPE_SCHEDULE)
        .saturating_sub(by_type(TYPE_CANCEL))
        .saturating_sub(by_type(TYPE_COMPLETE))
}

/// Reads the jobs of a bucket file (the bucket, its manifest entry).
type ReadFar<'s> = dyn Fn(u64, &BucketEntry) -> Result<BucketJobs> + 's;

/// The open's records applied on the open's own thread, as it hands them over.
struct Inline<'r, 'm> {
    replay: &'r mut Replay<'m>,
    state: &'r mut State,
}

impl Follow for Inline<'_, '_> {
    fn expect(&mut self, records: u64) {
        self.replay.expect_records(records);
    }

    fn record(&mut self, r: RecordRef<'_>) {
        self.replay
            .feed(self.state, r.lsn, r.record_type, r.flags, r.body);
    }
}

/// The open's records gathered into batches for the replay thread.
struct Batches {
    batch: ReadBatch,
    full_tx: crossbeam_channel::Sender<ReadBatch>,
    empty_rx: crossbeam_channel::Receiver<ReadBatch>,
}

impl Batches {
    /// Sends the batch gathered so far (if it holds anything) and starts the next.
    fn send(&mut self) {
        if self.batch.records.is_empty() && self.batch.expected.is_none() {
            return;
        }
        let next = ReadBatch::recycled(&self.empty_rx);
        // The replay thread only ends when this side hangs up.
        let _ = self.full_tx.send(std::mem::replace(&mut self.batch, next));
    }
}

impl Follow for Batches {
    fn expect(&mut self, records: u64) {
        self.batch.expected = Some(records);
        self.send();
    }

    fn record(&mut self, r: RecordRef<'_>) {
        if self.batch.push(r) {
            self.send();
        }
    }
}

/// The journal's replay, one record at a time, after the store's buckets: `begin`, then
/// `feed` (the records an open hands over) or `apply` (those read after it), then `finish`.
struct Replay<'m> {
    manifest: &'m Manifest,
    far_from: u64,
    locator: store::Locator,
    /// Far buckets a replayed record needed, read once each.
    far_read: HashMap<u64, BucketJobs>,
    ids: IdLedger,
    /// The next LSN to apply: every record before it is applied (or covered by the buckets).
    next: Lsn,
    /// The open's records are no longer applied as they come (one needed a bucket file
    /// read, or was refused); replay reads on from `next` once the log is open.
    stopped: bool,
    /// The record the early replay refused, to be reported once the open holds the lock
    /// and found the same manifest.
    error: Option<Error>,
    /// The records the open expects, until the table is sized for them
    /// (`expect_records`).
    sizing: Option<u64>,
    /// The table's jobs when the journal's replay began (those of the buckets).
    restored_jobs: usize,
    records: u64,
    skipped: u64,
    restored: u64,
}

impl<'m> Replay<'m> {
    /// Loads the buckets `manifest` names below `far_from` into `state` (empty, its clock at
    /// the open's time), ready for the journal's records after the LSN they cover. The jobs
    /// of the buckets from `far_from` on stay on disk, counted in `State::non_resident`,
    /// except those a replayed record changes: they are read back first.
    fn begin<S: Storage>(
        storage: &S,
        manifest: &'m Manifest,
        (far_from, verify_far): (u64, bool),
        state: &mut State,
    ) -> Result<Self> {
        if verify_far {
            for (&bucket, entry) in manifest.buckets.range(far_from..) {
                store::load_bucket(storage, bucket, entry)?;
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
        for (&bucket, entry) in manifest.buckets.range(..far_from) {
            for job in store::load_bucket(storage, bucket, entry)?.values() {
                state.restore(job).map_err(|why| Error::CorruptedStore {
                    file: store::bucket::run_file_name(bucket, entry.runs[0].generation),
                    offset: 0,
                    reason: format!("{why} (job {})", job.id),
                })?;
                restored += 1;
            }
        }
        // Keys of keyed jobs kept on disk beyond the horizon: a schedule naming one must find
        // it.
        for (&bucket, entry) in manifest.buckets.range(far_from..) {
            if entry.keyed == 0 {
                continue;
            }
            for job in store::load_bucket(storage, bucket, entry)?.into_values() {
                if let Some(key) = job.key {
                    // The first far job naming a key holds it. A store this engine wrote has
                    // no second; if one had, its restore refuses it when its bucket loads.
                    let _ = state.keys.hold(super::table::key_hash(&key), &key, job.id);
                }
            }
        }
        state.counters.completed = manifest.completed;
        state.counters.cancelled = manifest.cancelled;
        state.counters.failed = manifest.failed;
        Ok(Replay {
            manifest,
            far_from,
            locator,
            far_read: HashMap::new(),
            ids: IdLedger {
                last_id: manifest.ids_last,
                reserved_up_to: manifest.ids_reserved,
            },
            next: manifest.covered_lsn + 1,
            stopped: false,
            error: None,
            sizing: None,
            restored_jobs: state.jobs.len(),
            records: 0,
            skipped: 0,
            restored,
        })
    }

    /// Sizes the table once for about `jobs` more from the journal, instead of rehashing it
    /// all the way up (a third of the open of 10M schedules).
    fn expect(&self, state: &mut State, jobs: u64) {
        state.jobs.reserve(jobs.min(RESERVE_JOBS_MAX) as usize);
    }

    /// The open's log holds about `records`: once an eighth of them are applied, the
    /// table is sized for the rest at the rate of jobs per record seen so far (records are
    /// not jobs: a job's claims and completion are records too, and sizing for every record
    /// would spread few jobs over a table many times their size, each on a page of its own).
    fn expect_records(&mut self, records: u64) {
        self.sizing = Some(records);
    }

    /// A record the open handed over: applied, unless an earlier one stopped the early
    /// replay. One that needs a bucket file read, or is refused, stops it.
    fn feed(&mut self, state: &mut State, lsn: Lsn, record_type: u8, flags: u8, body: &[u8]) {
        if self.stopped {
            return;
        }
        if let Some(records) = self.sizing
            && self.records >= records / 8
        {
            self.sizing = None;
            if self.records > 0 {
                let added = state.jobs.len().saturating_sub(self.restored_jobs);
                let per_record = added as f64 / self.records as f64;
                let rest = records.saturating_sub(self.records) as f64 * per_record;
                self.expect(state, rest as u64);
            }
        }
        match self.apply(state, None, lsn, record_type, flags, body) {
            Ok(true) => {}
            Ok(false) => self.stopped = true,
            Err(e) => {
                self.stopped = true;
                self.error = Some(e);
            }
        }
    }

    /// Applies the record at `lsn` (one before `next`, covered by the buckets, is skipped).
    /// A change of a job kept in a bucket beyond the horizon reads it back first, with
    /// `read_far`; with none, nothing is applied and the answer is `false`.
    fn apply(
        &mut self,
        state: &mut State,
        read_far: Option<&ReadFar<'_>>,
        lsn: Lsn,
        record_type: u8,
        flags: u8,
        body: &[u8],
    ) -> Result<bool> {
        if lsn < self.next {
            return Ok(true);
        }
        let refuse = |reason: String| Error::UndecodableRecord { lsn, reason };
        let event = match Event::decode(record_type, body) {
            Ok(event) => event,
            // A later version's record that it marked safe to ignore.
            Err(_) if flags & FLAG_SKIPPABLE != 0 => {
                self.records += 1;
                self.skipped += 1;
                self.next = lsn + 1;
                return Ok(true);
            }
            Err(e) => return Err(refuse(e.to_string())),
        };
        // A change of a job kept on disk beyond the horizon: read it back first.
        if let Some(id) = event.id()
            && !matches!(event, Event::Schedule(_))
            && !state.jobs.contains_key(&id)
            && !state.far_gone.contains(&id)
            && let Some(bucket) = self
                .locator
                .locate(self.manifest, id)
                .filter(|&b| b >= self.far_from)
        {
            let jobs = match self.far_read.entry(bucket) {
                hash_map::Entry::Occupied(e) => e.into_mut(),
                hash_map::Entry::Vacant(e) => {
                    let Some(read_far) = read_far else {
                        return Ok(false);
                    };
                    e.insert(read_far(bucket, &self.manifest.buckets[&bucket])?)
                }
            };
            if let Some(job) = jobs.take(id) {
                state.fault_in(&job, false);
                self.restored += 1;
            }
        }
        let admitted = match &event {
            Event::ReserveIds { up_to } => self.ids.admit_reserve(*up_to),
            Event::Schedule(s) => admit_schedule(&mut self.ids, s),
            _ => Ok(()),
        };
        admitted
            .and_then(|()| state.apply(&event, Mode::Replay, lsn))
            .map_err(|why| {
                let job = event
                    .id()
                    .map_or(String::new(), |id| format!(" (job {id})"));
                refuse(format!("{why}{job}"))
            })?;
        self.records += 1;
        self.next = lsn + 1;
        Ok(true)
    }

    /// Arms the timers and says what replay rebuilt: the open's whole recovery took from
    /// `started` until now.
    fn finish(
        self,
        state: &mut State,
        report: &RecoveryReport,
        started: Instant,
        open_started_ms: u64,
    ) -> Replayed {
        let live = state.jobs.len() as u64;
        let armed = state.arm_after_replay(open_started_ms);
        let recovery = RecoveryStats {
            records: self.records,
            skipped: self.skipped,
            elapsed: started.elapsed(),
            jobs: live,
            missed: armed.missed,
            interrupted: armed.interrupted,
            buckets: self.manifest.buckets.range(..self.far_from).count() as u64,
            bucket_jobs: self.restored,
            covered_lsn: self.manifest.covered_lsn,
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
        Replayed {
            ids: self.ids.reopened(),
            recovery,
        }
    }
}
