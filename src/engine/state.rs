//! The in-memory state of every live job, and the one transition function.
//!
//! [`State::apply`] is the only code that changes a job because of a log record. Live calls
//! check their (stricter) preconditions, append the records, then apply them; recovery applies
//! the records it reads and refuses the open when one is refused. So the log has one meaning:
//! a record replay accepts is one the live engine could have written, and replay rebuilds what
//! the live engine had.
//!
//! The log does not record firing or lease expiry in memory (the timer thread never writes):
//! in the log a job is either *waiting* (scheduled or ready) or *leased* (its newest claim has
//! no `Expire` after it). Live calls that follow an expiry in memory write the `Expire` first.

use crossbeam_channel::Sender;

use std::collections::BTreeMap;
use std::sync::Arc;

use super::job_table::At;
use super::table::{
    Counters, Dead, Extra, ExtraMap, IdSet, Job, JobMap, KeyIndex, KeyOfMap, Marks, Payload,
    key_hash,
};
use crate::job::{Claimed, DeadJob, JobId, JobInfo, JobQuery, JobState};
use crate::record::{
    BURY_EXPIRED, Event, FLAG_BINARY_PAYLOAD, NEXT_FAILED, NEXT_SKIPPED, RETRY_FAILED,
};
use crate::store::bucket::StoredJob;
use crate::store::compact::FarJob;
use crate::wheel::{TimerKey, TimingWheel};

/// Jobs the job table may move to give memory back, per job that leaves it
/// (`State::give_back_memory`). Two: a table that shrank by a quarter has moved, by the time
/// it shrank by another quarter, up to half its jobs, more than a shrink to that size asks.
const GIVE_BACK_MOVES: usize = 2;

/// Why a schedule of a job memory holds already is refused.
const SCHEDULED_TWICE: &str = "job scheduled twice";

/// An idempotency key the key table already names a new job as the holder of: taken when
/// its schedule was appended, the job's own from its commit on. With its hash.
pub(crate) struct TakenKey {
    pub hash: u64,
    pub key: Arc<[u8]>,
}

/// Whether a record is applied by a live call or by replay: replay keeps no timers (they are
/// armed once the whole log is read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Live,
    Replay,
}

/// Every live job, the wheels that time them, and the counters.
pub(crate) struct State {
    pub jobs: JobMap,
    /// Due times of `Scheduled` jobs.
    pub due: TimingWheel<At>,
    /// Claim deadlines of `Ready` jobs and lease deadlines of `Running` ones.
    pub leases: TimingWheel<At>,
    /// The timers one `fire_due` took out of `due` (kept to reuse its allocation).
    fired: Vec<(TimerKey, u64, At)>,
    pub counters: Counters,
    /// The highest clock reading seen: time never goes backwards inside the engine.
    pub now_ms: u64,
    /// When the timer thread plans to wake next (`u64::MAX`: not sleeping on a deadline).
    pub sleeping_until_ms: u64,
    /// Fire lateness in microseconds (due, or acceptance if later, to the ready queue).
    pub lateness_us: hdrhistogram::Histogram<u64>,
    /// Ready queue to claim, in microseconds.
    pub claim_wait_us: hdrhistogram::Histogram<u64>,
    /// Live jobs per state, indexed by [`state_index`].
    pub in_state: [u64; 3],
    /// How long a `Ready` job may wait for a claim before its id is queued again, and how long
    /// a claim holds a job.
    pub lease_ms: u64,
    /// Where fired ids go; `None` once a drain ended the ready stream.
    pub ready_tx: Option<Sender<JobId>>,
    /// Set by a drain: nothing more fires.
    pub draining: bool,
    /// Scheduled jobs kept on disk only, in buckets beyond the resident horizon (counted as
    /// scheduled).
    pub non_resident: u64,
    /// Jobs finished whose copy in a bucket beyond the horizon is still there (the finish is
    /// not folded yet): a load of that bucket skips them.
    pub far_gone: IdSet,
    /// Jobs held in memory that also have a copy in a bucket beyond the horizon (read back for
    /// a call, or kept after a pass because memory was newer): a later pass lets go of those
    /// it has caught up with (`sweep_far_resident`). Without it, such a job stayed in memory
    /// until the horizon reached its bucket, since a pass offers a far job only once, when it
    /// first writes it.
    pub far_resident: IdSet,
    /// Tenants, retry policies and failure reasons of the live jobs that have any.
    pub extra: ExtraMap,
    /// The key hash of every keyed job memory holds, live or dead: its key is the one `keys`
    /// names it the holder of. (A keyed job kept on disk beyond the horizon has no entry; its
    /// key is in `keys` all the same.)
    pub key_of: KeyOfMap,
    /// The dead-letter set.
    pub dead: BTreeMap<JobId, Dead>,
    /// Idempotency keys of every keyed job, live or dead, in memory or kept on disk, and of
    /// the schedules appended but not yet visible (their `commit` has not applied them).
    pub keys: KeyIndex,
    /// Per-tenant queues feeding the ready channel round-robin (`Config::fair_tenants`).
    pub fair: Option<super::fair::Fair>,
    /// Runs of the engine that ended without a clean close, as the log counts them (see
    /// [`crate::record`]'s `Opened`).
    pub crashes: u32,
    /// The last record applied is a `Closed` (or none was, in an empty directory): the run
    /// before the next `Opened` closed cleanly.
    pub clean: bool,
}

/// The attempt number of `job`'s next claim, once `crashes` runs of the engine crashed. A
/// claim is handed out before it is durable, so a crash may cut one that a worker saw; the
/// rules that keep the number unique (see [`crate::record`]):
/// - no job has two claims unsynced at once, and a job whose lease the log holds open is
///   claimed again only durably: such a job's next attempt is its last + 1 (a job interrupted
///   by a crash is delivered again with attempt + 1);
/// - any other job (waiting) may have had one claim cut by each crash since the record that
///   last set its count ([`Event::sets_crashes_seen`]): its next attempt is its last + 1 +
///   those crashes.
///
/// `None` past `u32::MAX`.
pub(crate) fn next_attempt(job: &Job, crashes: u32) -> Option<u32> {
    let cut = if job.lease_open {
        0
    } else {
        crashes
            .checked_sub(job.crashes_seen)
            .expect("a job sees no crash before it happened")
    };
    job.attempt.checked_add(1)?.checked_add(cut)
}

/// Index of a state in `State::in_state`.
pub(crate) fn state_index(s: JobState) -> usize {
    match s {
        JobState::Scheduled => 0,
        JobState::Ready => 1,
        JobState::Running => 2,
    }
}

/// What one pass of the timers moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TimerRun {
    /// Jobs fired (scheduled to ready).
    pub fired: usize,
    /// Leases that ran out (running to ready).
    pub expired: usize,
    /// Ready jobs nobody claimed in time, queued again.
    pub requeued: usize,
}

impl TimerRun {
    /// Whether either kind of work hit its bound, so there may be more right now.
    pub fn hit_bound(&self, max: usize) -> bool {
        self.fired >= max || self.expired + self.requeued >= max
    }

    /// Ids sent to the ready queue.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub fn queued(&self) -> usize {
        self.fired + self.expired + self.requeued
    }
}

/// A latency histogram from 1 µs to an hour, to 2 significant digits (each figure within 1%).
/// Three digits cost 8 times the counters (about 0.5 MiB per histogram, zeroed at every open)
/// and made every `stats()` walk them: most of what the simulation's per-step check cost.
fn histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("valid histogram bounds")
}

impl State {
    /// An empty state at `now_ms`; its job table's slab grows and shrinks `chunk_slots` slots
    /// at a time (`Config::job_table_chunk_slots`).
    pub fn new(now_ms: u64, chunk_slots: usize, lease_ms: u64, ready_tx: Sender<JobId>) -> Self {
        State {
            jobs: JobMap::with_chunk_slots(chunk_slots),
            due: TimingWheel::new(now_ms),
            leases: TimingWheel::new(now_ms),
            fired: Vec::new(),
            counters: Counters::default(),
            now_ms,
            sleeping_until_ms: u64::MAX,
            lateness_us: histogram(),
            claim_wait_us: histogram(),
            in_state: [0; 3],
            lease_ms,
            ready_tx: Some(ready_tx),
            draining: false,
            non_resident: 0,
            far_gone: IdSet::default(),
            far_resident: IdSet::default(),
            extra: ExtraMap::default(),
            key_of: KeyOfMap::default(),
            dead: BTreeMap::new(),
            keys: KeyIndex::default(),
            fair: None,
            crashes: 0,
            clean: true,
        }
    }

    fn count(&mut self, from: Option<JobState>, to: Option<JobState>) {
        if let Some(f) = from {
            let n = &mut self.in_state[state_index(f)];
            assert!(*n > 0, "state counts match the jobs");
            *n -= 1;
        }
        if let Some(t) = to {
            self.in_state[state_index(t)] += 1;
        }
    }

    /// Moves the engine's time to `clock_ms` unless that would go backwards.
    pub fn observe_time(&mut self, clock_ms: u64) -> u64 {
        self.now_ms = self.now_ms.max(clock_ms);
        self.now_ms
    }

    /// The one transition function: applies the record `event`, at `lsn` in the log (its ids
    /// already admitted by the id ledger), or says why the log could not hold it, changing
    /// nothing then.
    pub fn apply(&mut self, event: &Event<'_>, mode: Mode, lsn: u64) -> Result<(), &'static str> {
        self.transition(event, mode, None, lsn)
    }

    /// [`apply`](Self::apply) of a live schedule made visible by its commit: its key, if it
    /// names one, was taken when it was appended ([`KeyIndex::take_or_holder`]), so the key
    /// table is not looked up again. `false` (and nothing changed) when memory holds the job
    /// already (a pass folded it into a bucket beyond the horizon, and a load or a call naming
    /// it read it back, before the commit got here).
    pub fn apply_visible(&mut self, event: &Event<'_>, key: Option<TakenKey>, lsn: u64) -> bool {
        match self.transition(event, Mode::Live, key, lsn) {
            Ok(()) => true,
            Err(SCHEDULED_TWICE) => false,
            Err(e) => panic!("a schedule made visible applies: {e}"),
        }
    }

    fn transition(
        &mut self,
        event: &Event<'_>,
        mode: Mode,
        taken: Option<TakenKey>,
        lsn: u64,
    ) -> Result<(), &'static str> {
        self.change(event, mode, taken, lsn)?;
        self.clean = matches!(event, Event::Closed { .. });
        // The job's newest record (a schedule inserted it with both set: one lookup less on
        // the open's longest path).
        if !matches!(event, Event::Schedule(_))
            && let Some(id) = event.id()
            && let Some(job) = self.jobs.get_mut(&id)
        {
            if event.sets_crashes_seen() {
                job.crashes_seen = self.crashes;
            }
            job.lsn = lsn;
        }
        Ok(())
    }

    fn change(
        &mut self,
        event: &Event<'_>,
        mode: Mode,
        taken: Option<TakenKey>,
        lsn: u64,
    ) -> Result<(), &'static str> {
        let live = mode == Mode::Live;
        match *event {
            Event::ReserveIds { .. } => Ok(()),
            Event::Opened { crashes } => {
                if Some(crashes) != self.crashes.checked_add(u32::from(!self.clean)) {
                    return Err("an open counts other crashes than the log");
                }
                self.crashes = crashes;
                Ok(())
            }
            Event::Closed { crashes } => {
                if crashes != self.crashes {
                    return Err("a close counts other crashes than the log");
                }
                Ok(())
            }
            Event::Schedule(ref s) => {
                // With a key, asked before the key is taken; without one, the insert below
                // finds a job scheduled twice itself (one lookup of the table, not two).
                if self.dead.contains_key(&s.id)
                    || (s.key.is_some() && self.jobs.contains_key(&s.id))
                {
                    return Err(SCHEDULED_TWICE);
                }
                // Taken first: the one check that can still refuse, and it changes nothing
                // when it does.
                let key_hash: Option<u64> = match (s.key, taken) {
                    (None, _) => None,
                    (Some(k), Some(TakenKey { hash, key })) => {
                        assert!(*key == *k, "the key taken is the record's");
                        debug_assert!(self.keys.holds(hash, k, s.id));
                        Some(hash)
                    }
                    (Some(k), None) => {
                        let hash = key_hash(k);
                        self.keys
                            .hold(hash, k, s.id)
                            .ok_or("idempotency key held by another job")?;
                        Some(hash)
                    }
                };
                if !self.insert_scheduled(
                    s.id,
                    s.due_ms,
                    Payload::new(s.payload),
                    s.flags & FLAG_BINARY_PAYLOAD != 0,
                    (live, lsn),
                ) {
                    assert!(key_hash.is_none(), "asked before the key was taken");
                    return Err(SCHEDULED_TWICE);
                }
                let recurring = s.recurring.map(|r| {
                    Arc::new(crate::job::Recurring::decode(r).expect("checked by decode"))
                });
                let extra = Extra {
                    tenant: s.tenant,
                    max_attempts: s.max_attempts,
                    backoff: s.backoff,
                    last_error: None,
                    recurring,
                };
                if !extra.is_empty() {
                    self.extra.insert(s.id, extra);
                }
                if let Some(hash) = key_hash {
                    self.key_of.insert(s.id, hash);
                }
                Ok(())
            }
            Event::Cancel { id } => {
                self.waiting(id)?;
                self.forget_extra(id);
                let job = self.take_job(id);
                if live {
                    assert!(matches!(job.state, JobState::Scheduled | JobState::Ready));
                    self.drop_timer(&job);
                    self.left_ready(id, job.state);
                }
                if job.far_copy() {
                    self.far_gone.insert(id);
                }
                self.count(Some(job.state), None);
                self.counters.cancelled += 1;
                Ok(())
            }
            Event::Reschedule { id, due_ms } => {
                self.waiting(id)?;
                let now_ms = self.now_ms;
                let (at, job) = self.jobs.get_at_mut(&id).expect("checked");
                job.due_ms = due_ms;
                if !live {
                    return Ok(());
                }
                let from = job.state;
                match (from, job.timer) {
                    (JobState::Scheduled, Some(key)) => {
                        let moved = self.due.reschedule(key, due_ms.max(now_ms));
                        job.timer = Some(moved.expect("the timer of a scheduled job is live"));
                    }
                    (JobState::Ready, key) => {
                        // Queued already: it waits again; the id left in the channel is skipped.
                        if let Some(key) = key {
                            self.leases.cancel(key);
                        }
                        job.state = JobState::Scheduled;
                        job.timer = Some(self.due.insert(due_ms.max(now_ms), at));
                        self.count(Some(JobState::Ready), Some(JobState::Scheduled));
                        self.left_ready(id, JobState::Ready);
                    }
                    other => panic!("reschedule of job {id} in {other:?}, checked first"),
                }
                Ok(())
            }
            Event::Expire { id, attempt } => {
                let job = self.jobs.get_mut(&id).ok_or("expiry of an unknown job")?;
                if !job.lease_open || job.attempt != attempt {
                    return Err("expiry of a lease the job does not hold");
                }
                job.lease_open = false;
                // A lease that ran out is a failed attempt.
                job.failures = job.failures.saturating_add(1);
                if live {
                    assert_eq!(
                        job.state,
                        JobState::Ready,
                        "a lease expires in memory first"
                    );
                } else {
                    // Replay's `Running` means leased in the log; waiting again now.
                    job.state = JobState::Scheduled;
                    self.count(Some(JobState::Running), Some(JobState::Scheduled));
                }
                Ok(())
            }
            Event::Claim {
                id,
                attempt,
                lease_until_ms,
            } => {
                let now_ms = self.now_ms;
                let (at, job) = self.jobs.get_at_mut(&id).ok_or("claim of an unknown job")?;
                if job.lease_open {
                    return Err("claim of a job whose lease did not expire");
                }
                if next_attempt(job, self.crashes) != Some(attempt) {
                    return Err("claim attempt is not the previous one + 1 + the crashes since");
                }
                job.attempt = attempt;
                job.crashes_seen = self.crashes;
                job.lease_open = true;
                if !live {
                    job.state = JobState::Running;
                    self.count(Some(JobState::Scheduled), Some(JobState::Running));
                    return Ok(());
                }
                assert_eq!(
                    job.state,
                    JobState::Ready,
                    "claim of job {id} checked first"
                );
                let ready_at_ms = job.at_ms;
                job.state = JobState::Running;
                job.at_ms = lease_until_ms;
                let old = job.timer.take();
                if let Some(key) = old {
                    self.leases.cancel(key);
                }
                job.timer = Some(self.leases.insert(lease_until_ms, at));
                self.count(Some(JobState::Ready), Some(JobState::Running));
                self.taken(id, true);
                self.counters.claimed += 1;
                let wait_us = now_ms.saturating_sub(ready_at_ms).saturating_mul(1000);
                self.claim_wait_us.saturating_record(wait_us.max(1));
                Ok(())
            }
            Event::Retry {
                id,
                attempt,
                flags,
                due_ms,
                reason,
            } => {
                self.holding(id, attempt)?;
                if live && self.jobs[&id].state == JobState::Running {
                    self.stopped_running(id);
                }
                let now_ms = self.now_ms;
                if flags & RETRY_FAILED != 0 {
                    let e = self.extra.get_or_default(id);
                    e.last_error = Some(Arc::from(reason));
                }
                // Since open (`Stats::retried`): replay's retries happened before it.
                if live {
                    self.counters.retried += 1;
                }
                let (at, job) = self.jobs.get_at_mut(&id).expect("checked");
                job.lease_open = false;
                job.due_ms = due_ms;
                if flags & RETRY_FAILED != 0 {
                    job.failures = job.failures.saturating_add(1);
                }
                if !live {
                    // Replay's `Running` means leased in the log; waiting again now.
                    job.state = JobState::Scheduled;
                    self.count(Some(JobState::Running), Some(JobState::Scheduled));
                    return Ok(());
                }
                let from = job.state;
                assert!(
                    matches!(from, JobState::Running | JobState::Ready),
                    "a retry of job {id} in {from:?}, checked first"
                );
                if let Some(key) = job.timer.take() {
                    self.leases.cancel(key);
                }
                job.state = JobState::Scheduled;
                job.timer = Some(self.due.insert(due_ms.max(now_ms), at));
                self.count(Some(from), Some(JobState::Scheduled));
                self.left_ready(id, from);
                Ok(())
            }
            Event::Bury {
                id,
                attempt,
                flags,
                at_ms,
                reason,
            } => {
                self.holding(id, attempt)?;
                if live && self.jobs[&id].state == JobState::Running {
                    self.stopped_running(id);
                }
                let job = self.take_job(id);
                if live {
                    assert!(matches!(job.state, JobState::Running | JobState::Ready));
                    self.drop_timer(&job);
                    self.left_ready(id, job.state);
                }
                let mut extra = self.extra.remove(&id).unwrap_or_default();
                extra.last_error = None;
                self.count(Some(job.state), None);
                self.counters.failed += 1;
                let far_copy = job.far_copy();
                self.dead.insert(
                    id,
                    Dead {
                        due_ms: job.due_ms,
                        attempt: job.attempt,
                        failures: job.failures.saturating_add(1),
                        died_at_ms: at_ms,
                        expired: flags & BURY_EXPIRED != 0,
                        reason: Arc::from(reason),
                        binary: job.binary,
                        payload: job.payload,
                        extra,
                        busy: false,
                        far_copy,
                    },
                );
                Ok(())
            }
            Event::Extend {
                id,
                attempt,
                lease_until_ms,
            } => {
                self.holding(id, attempt)?;
                if !live {
                    return Ok(());
                }
                let job = self.jobs.get_mut(&id).expect("checked");
                assert_eq!(
                    job.state,
                    JobState::Running,
                    "extend of job {id} checked first"
                );
                job.at_ms = lease_until_ms;
                let key = job.timer.take().expect("a running job has a lease timer");
                let moved = self.leases.reschedule(key, lease_until_ms);
                job.timer = Some(moved.expect("the lease timer of a running job is live"));
                Ok(())
            }
            Event::Requeue { id, due_ms } => {
                if self.jobs.contains_key(&id) {
                    return Err("requeue of a job that is not dead");
                }
                let dead = self
                    .dead
                    .remove(&id)
                    .ok_or("requeue of a job that is not dead")?;
                assert!(
                    self.insert_scheduled(id, due_ms, dead.payload, dead.binary, (live, lsn)),
                    "not in the table: asked above"
                );
                let job = self.jobs.get_mut(&id).expect("inserted");
                job.attempt = dead.attempt;
                job.set_far_copy(dead.far_copy);
                if !dead.extra.is_empty() {
                    self.extra.insert(id, dead.extra);
                }
                Ok(())
            }
            Event::Purge { id } => {
                let dead = self
                    .dead
                    .remove(&id)
                    .ok_or("purge of a job that is not dead")?;
                self.release_key(id);
                if dead.far_copy {
                    self.far_gone.insert(id);
                }
                Ok(())
            }
            Event::Next {
                id,
                attempt,
                flags,
                due_ms,
            } => {
                if self.extra.get(&id).is_none_or(|e| e.recurring.is_none()) {
                    return Err("next occurrence of a job that does not recur");
                }
                if flags & NEXT_SKIPPED != 0 {
                    // Skipped as it was about to be delivered: waiting, not leased.
                    self.waiting(id)?;
                    if self.jobs[&id].attempt != attempt {
                        return Err("skip of an attempt that is not the job's newest");
                    }
                } else {
                    self.holding(id, attempt)?;
                    if live && self.jobs[&id].state == JobState::Running {
                        self.stopped_running(id);
                    }
                }
                let now_ms = self.now_ms;
                if let Some(e) = self.extra.get_mut(&id) {
                    e.last_error = None;
                }
                if flags & NEXT_FAILED != 0 {
                    self.counters.failed += 1;
                } else if flags & NEXT_SKIPPED == 0 {
                    self.counters.completed += 1;
                }
                let (at, job) = self.jobs.get_at_mut(&id).expect("checked");
                job.lease_open = false;
                job.failures = 0;
                job.due_ms = due_ms;
                let from = job.state;
                if !live {
                    if from == JobState::Running {
                        job.state = JobState::Scheduled;
                        self.count(Some(JobState::Running), Some(JobState::Scheduled));
                    }
                    return Ok(());
                }
                if from == JobState::Scheduled {
                    // A skip of a job that was not fired (replayed live: none).
                    return Ok(());
                }
                if let Some(key) = job.timer.take() {
                    self.leases.cancel(key);
                }
                job.state = JobState::Scheduled;
                job.timer = Some(self.due.insert(due_ms.max(now_ms), at));
                self.count(Some(from), Some(JobState::Scheduled));
                self.left_ready(id, from);
                Ok(())
            }
            Event::Complete { id, attempt } | Event::Fail { id, attempt, .. } => {
                self.holding(id, attempt)
                    .map_err(|_| "finish by an attempt that does not hold the lease")?;
                if live && self.jobs[&id].state == JobState::Running {
                    self.stopped_running(id);
                }
                self.forget_extra(id);
                let job = self.take_job(id);
                if live {
                    assert!(matches!(job.state, JobState::Running | JobState::Ready));
                    self.drop_timer(&job);
                    self.left_ready(id, job.state);
                }
                if job.far_copy() {
                    self.far_gone.insert(id);
                }
                self.count(Some(job.state), None);
                if matches!(event, Event::Complete { .. }) {
                    self.counters.completed += 1;
                } else {
                    self.counters.failed += 1;
                }
                Ok(())
            }
        }
    }

    /// The transition of a job read from a bucket file at open: it enters as the records
    /// folded into the file left it (waiting, or leased by `attempt`), exactly as replay of
    /// those records would have. Refuses a job already there.
    pub fn restore(&mut self, job: &StoredJob) -> Result<(), &'static str> {
        if self.jobs.contains_key(&job.id) || self.dead.contains_key(&job.id) {
            return Err("job restored twice");
        }
        if job.leased && job.attempt == 0 {
            return Err("job leased by attempt 0");
        }
        let key_hash: Option<u64> = match job.key.as_deref() {
            None => None,
            Some(k) => {
                let hash = key_hash(k);
                self.keys
                    .hold(hash, k, job.id)
                    .ok_or("idempotency key held by another job")?;
                Some(hash)
            }
        };
        let recurring = match &job.recurring {
            None => None,
            Some(bytes) => Some(Arc::new(
                crate::job::Recurring::decode(bytes).ok_or("undecodable recurrence")?,
            )),
        };
        let extra = Extra {
            tenant: job.tenant,
            max_attempts: job.max_attempts,
            backoff: job.backoff,
            last_error: job.last_error.as_deref().map(Arc::from),
            recurring,
        };
        if let Some((died_at_ms, expired)) = job.dead {
            if job.leased {
                return Err("dead job with an open lease");
            }
            if let Some(hash) = key_hash {
                self.key_of.insert(job.id, hash);
            }
            self.dead.insert(
                job.id,
                Dead {
                    due_ms: job.due_ms,
                    attempt: job.attempt,
                    failures: job.failures,
                    died_at_ms,
                    expired,
                    reason: extra.last_error.clone().unwrap_or_else(|| Arc::from("")),
                    binary: job.flags & FLAG_BINARY_PAYLOAD != 0,
                    payload: Payload::new(&job.payload),
                    extra: Extra {
                        last_error: None,
                        ..extra
                    },
                    busy: false,
                    far_copy: false,
                },
            );
            return Ok(());
        }
        let inserted = self.insert_scheduled(
            job.id,
            job.due_ms,
            Payload::new(&job.payload),
            job.flags & FLAG_BINARY_PAYLOAD != 0,
            (false, 0),
        );
        assert!(inserted, "a job loaded from a bucket is not in the table");
        if !extra.is_empty() {
            self.extra.insert(job.id, extra);
        }
        if let Some(hash) = key_hash {
            self.key_of.insert(job.id, hash);
        }
        let entry = self.jobs.get_mut(&job.id).expect("inserted");
        entry.attempt = job.attempt;
        entry.crashes_seen = job.crashes_seen;
        entry.failures = job.failures;
        if job.leased {
            // Replay's `Running` means leased in the log.
            entry.lease_open = true;
            entry.state = JobState::Running;
            self.count(Some(JobState::Scheduled), Some(JobState::Running));
        }
        Ok(())
    }

    /// Drops a scheduled job from memory whose bucket file holds it exactly as memory does
    /// (`due_ms`, no claim yet or a closed lease at `attempt`): a later `cancel`, `reschedule`
    /// or `get` reads it back from there, and the bucket's load puts it back on the wheel.
    /// Returns whether it was dropped (a job that changed since, is being changed, or is not
    /// waiting on the due wheel stays).
    pub fn evict(&mut self, far: &FarJob, folded_to: u64) -> bool {
        let Some(job) = self.jobs.get(&far.id) else {
            return false;
        };
        // Changed by a record the pass did not fold: the bucket's copy is older than memory,
        // even where the two look alike (moved away and back again), and the next pass moves
        // that copy on.
        if job.lsn > folded_to {
            return false;
        }
        if job.state != JobState::Scheduled
            || job.busy()
            || job.lease_open
            || far.leased
            || job.due_ms != far.due_ms
            || job.attempt != far.attempt
            || job.failures != far.failures
        {
            return false;
        }
        let id = far.id;
        self.extra.remove(&id);
        // Its key stays in the key table (a schedule naming it must find it); a read back
        // puts the hash here again.
        self.key_of.remove(&id);
        let job = self.take_job(id);
        self.drop_timer(&job);
        self.count(Some(JobState::Scheduled), None);
        self.non_resident += 1;
        true
    }

    /// After a pass wrote `jobs` (new in their buckets, as `(id, due_ms, attempt, leased)`)
    /// into buckets beyond the horizon: memory lets go of those it holds exactly so, marks the
    /// others it holds as having a far copy, and remembers the ones it no longer holds (they
    /// finished since the records the pass read), so that a load of their bucket skips them.
    /// Returns how many it let go.
    pub fn after_pass(&mut self, jobs: &[FarJob], folded_to: u64) -> u64 {
        let mut evicted = 0;
        for far in jobs {
            let id = far.id;
            if self.evict(far, folded_to) {
                evicted += 1;
            } else if self.jobs.contains_key(&id) {
                self.held_with_far_copy(id);
            } else {
                self.far_gone.insert(id);
            }
        }
        evicted
    }

    /// Notes that memory holds job `id` (live) while a bucket beyond the horizon holds a copy:
    /// a later pass that has folded every change of it lets memory go of it
    /// (`sweep_far_resident`).
    pub fn held_with_far_copy(&mut self, id: JobId) {
        self.jobs.get_mut(&id).expect("held").set_far_copy(true);
        self.far_resident.insert(id);
    }

    /// After a pass that folded the journal up to `folded_to`, with the buckets from
    /// `far_from` on beyond the horizon: lets go of the jobs of `ids` (from `far_resident`)
    /// that memory holds as the bucket files now do (no change since `folded_to`, waiting on
    /// the due wheel, due in a bucket beyond the horizon), and forgets those no longer held
    /// with a far copy. Returns how many it let go.
    pub fn sweep_far_resident(&mut self, ids: &[JobId], folded_to: u64, far_from: u64) -> u64 {
        let mut evicted = 0;
        for &id in ids {
            let Some(job) = self.jobs.get(&id) else {
                self.far_resident.remove(&id);
                continue;
            };
            if !job.far_copy() {
                self.far_resident.remove(&id);
                continue;
            }
            if crate::store::bucket_of(job.due_ms) < far_from {
                // Within the horizon: memory holds it, as it holds every near job.
                continue;
            }
            // Every record that changed it is folded: the files hold it as memory does.
            let far = FarJob {
                id,
                due_ms: job.due_ms,
                attempt: job.attempt,
                leased: false,
                failures: job.failures,
            };
            if self.evict(&far, folded_to) {
                self.far_resident.remove(&id);
                evicted += 1;
            }
        }
        evicted
    }

    /// A job of a bucket the horizon reached: into memory unless memory is newer (it holds
    /// the job, or the job finished). The bucket is resident from now on, so no mark is kept.
    pub fn load(&mut self, job: &StoredJob) -> bool {
        if self.far_gone.remove(&job.id) {
            return false;
        }
        if let Some(d) = self.dead.get_mut(&job.id) {
            d.far_copy = false;
            return false;
        }
        if let Some(j) = self.jobs.get_mut(&job.id) {
            j.set_far_copy(false);
            return false;
        }
        self.fault_in(job, true);
        self.jobs
            .get_mut(&job.id)
            .expect("loaded")
            .set_far_copy(false);
        true
    }

    /// Puts back a job read from a bucket beyond the resident horizon (by a load of its bucket,
    /// or because a call or replay needs it): like [`State::restore`], armed when `live`.
    /// Does nothing for a job memory holds already (memory is newer).
    pub fn fault_in(&mut self, job: &StoredJob, live: bool) -> bool {
        if self.jobs.contains_key(&job.id)
            || self.dead.contains_key(&job.id)
            || self.far_gone.contains(&job.id)
        {
            return false;
        }
        assert!(job.dead.is_none(), "a dead job is never beyond the horizon");
        self.restore(job).expect("checked absent");
        assert!(self.non_resident > 0, "a job kept on disk was counted");
        self.non_resident -= 1;
        self.held_with_far_copy(job.id);
        if live {
            let now_ms = self.now_ms;
            let (at, entry) = self.jobs.get_at_mut(&job.id).expect("restored");
            if job.leased {
                // Interrupted while running (a bucket written before a crash): ready again at
                // once, as an open delivers it; the next claim writes the `Expire`.
                entry.state = JobState::Ready;
                entry.at_ms = now_ms;
                entry.timer = Some(self.leases.insert(now_ms.saturating_add(self.lease_ms), at));
                self.count(Some(JobState::Running), Some(JobState::Ready));
                self.counters.redelivered += 1;
                self.deliver(job.id);
            } else {
                entry.timer = Some(self.due.insert(job.due_ms.max(now_ms), at));
            }
        }
        true
    }

    /// Drops what a finished job kept beside the table, its key included.
    fn forget_extra(&mut self, id: JobId) {
        self.extra.remove(&id);
        self.release_key(id);
    }

    /// Lets go of the key job `id` holds, if it has one. (A keyed job memory holds has its
    /// hash in `key_of`: one kept on disk is read back before a record changes it.)
    fn release_key(&mut self, id: JobId) {
        if let Some(hash) = self.key_of.remove(&id) {
            self.keys.release_held(hash, id);
        }
    }

    /// A job whose lease `attempt` holds in the log: what finishing it needs.
    fn holding(&self, id: JobId, attempt: u32) -> Result<(), &'static str> {
        match self.jobs.get(&id) {
            Some(j) if j.lease_open && j.attempt == attempt => Ok(()),
            Some(_) => Err("end of a lease the attempt does not hold"),
            None => Err("end of a lease of an unknown job"),
        }
    }

    /// A job the log has waiting (not leased): what cancel and reschedule need.
    fn waiting(&self, id: JobId) -> Result<(), &'static str> {
        match self.jobs.get(&id) {
            None => Err("change of an unknown job"),
            Some(j) if j.lease_open => Err("change of a job whose lease did not expire"),
            Some(_) => Ok(()),
        }
    }

    /// Takes job `id`, which must be in the table, out of it, and gives memory back.
    fn take_job(&mut self, id: JobId) -> Job {
        let job = self.jobs.remove(&id).expect("checked");
        self.give_back_memory();
        job
    }

    /// A job left the table: while the table has much room to spare, moves a few jobs out of
    /// its last chunk (each a slot copy and its wheel timer's value set), so that memory goes
    /// back once the number of jobs fell (`JobTable::give_back`). The jobs that leave pay for
    /// it, [`GIVE_BACK_MOVES`] each, as cancels pay for the wheel's sweeps.
    fn give_back_memory(&mut self) {
        let (due, leases) = (&mut self.due, &mut self.leases);
        self.jobs.give_back(GIVE_BACK_MOVES, |id, at, job| {
            if let Some(key) = job.timer {
                let wheel = match job.state {
                    JobState::Scheduled => &mut *due,
                    JobState::Ready | JobState::Running => &mut *leases,
                };
                assert!(wheel.set(key, at), "the timer of job {id} is live");
            }
        });
    }

    fn drop_timer(&mut self, job: &Job) {
        if let Some(key) = job.timer {
            let wheel = match job.state {
                JobState::Scheduled => &mut self.due,
                JobState::Ready | JobState::Running => &mut self.leases,
            };
            assert!(wheel.remove(key), "a live job's timer is live");
        }
    }

    fn insert_scheduled(
        &mut self,
        id: JobId,
        due_ms: u64,
        payload: Payload,
        binary: bool,
        (arm, lsn): (bool, u64),
    ) -> bool {
        // A due time already past fires at once; its lateness counts from now, not from a
        // due time the engine never had a chance to meet.
        let Some(at) = self.jobs.try_insert_new(
            id,
            Job {
                due_ms,
                attempt: 0,
                crashes_seen: self.crashes,
                failures: 0,
                state: JobState::Scheduled,
                lease_open: false,
                marks: Marks::default(),
                binary,
                payload,
                timer: None,
                at_ms: 0,
                lsn,
            },
        ) else {
            return false;
        };
        if arm {
            let timer = self.due.insert(due_ms.max(self.now_ms), at);
            self.jobs.at(at).1.timer = Some(timer);
        }
        self.count(None, Some(JobState::Scheduled));
        true
    }

    /// After replay: `missed` (due by now) jobs go straight to the ready queue in due order,
    /// the rest onto the due wheel, in the job table's slot order (a sequential walk, which
    /// the log's records alone decide: jobs due in the same millisecond fire in it). A job
    /// replay left leased was interrupted: it is ready again, its lease still open in the log
    /// (the next claim writes the `Expire`).
    pub fn arm_after_replay(&mut self, open_started_ms: u64) -> ArmReport {
        let now_ms = self.now_ms;
        self.in_state = [0; 3];
        let mut missed = Vec::new();
        let mut interrupted = 0;
        let (due, in_state) = (&mut self.due, &mut self.in_state);
        self.jobs.for_each_mut(|id, at, job| {
            assert!(job.timer.is_none(), "replay arms no timers");
            // Replay's `Running` means leased in the log.
            let leased = job.state == JobState::Running;
            assert_eq!(leased, job.lease_open);
            interrupted += u64::from(leased);
            if job.due_ms <= now_ms || leased {
                missed.push((job.due_ms, id, at));
            } else {
                job.state = JobState::Scheduled;
                job.timer = Some(due.insert(job.due_ms, at));
                in_state[state_index(JobState::Scheduled)] += 1;
            }
        });
        // Due order; ties in id order, which is schedule order. Not through the wheel, which
        // would see them all as due "now" and keep no order among them.
        sort_due_order(&mut missed);
        let claim_by_ms = now_ms.saturating_add(self.lease_ms);
        // The lateness of a run of jobs due at the same time, recorded at once.
        let mut late_run = (0u64, 0u64);
        for &(due_ms, id, at) in &missed {
            let key = self.leases.insert(claim_by_ms, at);
            let job = self.jobs.at_mut(at, id);
            job.state = JobState::Ready;
            job.at_ms = now_ms;
            job.timer = Some(key);
            if job.lease_open {
                self.counters.redelivered += 1;
            }
            self.in_state[state_index(JobState::Ready)] += 1;
            let late_us = now_ms
                .saturating_sub(due_ms.max(open_started_ms))
                .saturating_mul(1000)
                .max(1);
            if late_run.0 != late_us {
                if late_run.1 > 0 {
                    self.lateness_us.saturating_record_n(late_run.0, late_run.1);
                }
                late_run = (late_us, 0);
            }
            late_run.1 += 1;
            self.counters.fired += 1;
            self.deliver(id);
        }
        if late_run.1 > 0 {
            self.lateness_us.saturating_record_n(late_run.0, late_run.1);
        }
        ArmReport {
            missed: missed.len() as u64,
            interrupted,
        }
    }

    /// A job is ready: into the channel, or into its tenant's queue with fairness on.
    fn deliver(&mut self, id: JobId) {
        if self.fair.is_none() {
            self.send(id);
            return;
        }
        let tenant = self.tenant_of(id);
        if let Some(fair) = self.fair.as_mut() {
            fair.enqueue(id, tenant);
        }
        self.refill();
    }

    /// Puts ids taken off the ready channel and not claimed (a dropped async take that was
    /// waiting to claim them) back into it, those still ready.
    #[cfg(feature = "async")]
    pub fn give_back(&mut self, ids: &[JobId]) {
        for &id in ids {
            if self.can_claim(id).is_some() {
                self.taken(id, false);
                self.deliver(id);
            }
        }
    }

    /// Feeds the ready channel from the tenants' queues (fairness on), as far as it may.
    pub fn refill(&mut self) {
        if let (Some(fair), Some(tx)) = (self.fair.as_mut(), self.ready_tx.as_ref()) {
            fair.refill(tx, &self.jobs, self.now_ms);
        }
    }

    /// A job's tenant.
    pub fn tenant_of(&self, id: JobId) -> u32 {
        self.extra.get(&id).map_or(0, |e| e.tenant)
    }

    /// With fairness on: a running job stopped running, its tenant may run another.
    fn stopped_running(&mut self, id: JobId) {
        if self.fair.is_none() {
            return;
        }
        let tenant = self.tenant_of(id);
        if let Some(fair) = self.fair.as_mut() {
            fair.stopped(tenant);
        }
    }

    /// With fairness on: a ready job stopped being ready other than by a claim (`from` is the
    /// state it left): cancelled, rescheduled, paused, or finished by the claim whose lease
    /// ran out. Its id fed into the channel no longer counts against its tenant's limit (nobody
    /// may ever look at it: the worker that took it may have died), and it is queued anew
    /// when it is ready again. An id still waiting in its tenant's queue is dropped when the
    /// round-robin reaches it.
    fn left_ready(&mut self, id: JobId, from: JobState) {
        if from == JobState::Ready {
            self.taken(id, false);
        }
    }

    /// With fairness on: an id taken from the channel was looked at by a claim (`claimed`:
    /// it was claimed).
    pub fn taken(&mut self, id: JobId, claimed: bool) {
        if self.fair.is_none() {
            return;
        }
        let tenant = claimed.then(|| self.tenant_of(id));
        if let Some(fair) = self.fair.as_mut() {
            fair.taken(id, tenant);
        }
    }

    fn send(&self, id: JobId) {
        if let Some(tx) = &self.ready_tx {
            // The engine holds a receiver as long as it holds the sender: a send can not fail.
            let _ = tx.send(id);
        }
    }

    /// Whether any of `ids` is being changed by a call appending outside the lock.
    pub fn any_busy(&self, ids: impl IntoIterator<Item = JobId>) -> bool {
        ids.into_iter().any(|id| {
            self.jobs.get(&id).is_some_and(Job::busy) || self.dead.get(&id).is_some_and(|d| d.busy)
        })
    }

    /// Marks or unmarks jobs a call appends changes of outside the lock (live or dead).
    pub fn set_busy(&mut self, ids: &[JobId], busy: bool) {
        for id in ids {
            if let Some(job) = self.jobs.get_mut(id) {
                assert_ne!(job.busy(), busy, "one call at a time changes a job");
                job.set_busy(busy);
                continue;
            }
            let dead = self
                .dead
                .get_mut(id)
                .expect("a busy job stays until its call applies");
            assert_ne!(dead.busy, busy, "one call at a time changes a job");
            dead.busy = busy;
        }
    }

    /// Whether a live `cancel` or `reschedule` applies: the job waits or is queued.
    pub fn can_change(&self, id: JobId) -> Option<&Job> {
        self.jobs
            .get(&id)
            .filter(|j| matches!(j.state, JobState::Scheduled | JobState::Ready))
    }

    /// Whether a live `claim` applies: the job is queued.
    pub fn can_claim(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id).filter(|j| j.state == JobState::Ready)
    }

    /// Whether a worker holding `attempt` may still finish the job: it is the newest claim,
    /// and nobody claimed it since (a lease that ran out without a new claim is honoured).
    pub fn can_finish(&self, id: JobId, attempt: u32) -> bool {
        self.jobs.get(&id).is_some_and(|j| {
            j.lease_open
                && j.attempt == attempt
                && matches!(j.state, JobState::Running | JobState::Ready)
        })
    }

    /// What a worker receives for a job just claimed (after `apply` of its claim).
    pub fn claimed(&self, id: JobId, ready_at_ms: u64) -> Claimed {
        let job = &self.jobs[&id];
        assert_eq!(job.state, JobState::Running);
        Claimed {
            id,
            due_ms: job.due_ms,
            attempt: job.attempt,
            payload: job.payload.to_shared(),
            binary: job.binary,
            ready_at_ms,
            lease_until_ms: job.at_ms,
        }
    }

    /// Fires due jobs and expires leases, at most `max` of each kind.
    pub fn run_timers(&mut self, now_us: u64, max: usize) -> TimerRun {
        let mut run = TimerRun::default();
        if !self.draining {
            run.fired = self.fire_due(now_us, max);
        }
        self.expire_leases(max, &mut run);
        run
    }

    fn fire_due(&mut self, now_us: u64, max: usize) -> usize {
        let now_ms = self.now_ms;
        let claim_by_ms = now_ms.saturating_add(self.lease_ms);
        let mut batch = std::mem::take(&mut self.fired);
        batch.clear();
        let fired = self.due.poll_many(now_ms, max, &mut batch);
        for &(fired_key, due_ms, at) in &batch {
            assert!(due_ms <= now_ms, "the wheel never fires early");
            let key = self.leases.insert(claim_by_ms, at);
            let (id, job) = self.jobs.at(at);
            assert_eq!(job.timer, Some(fired_key), "job {id} is its timer's job");
            assert_eq!(job.state, JobState::Scheduled);
            job.state = JobState::Ready;
            job.timer = Some(key);
            job.at_ms = now_ms;
            self.count(Some(JobState::Scheduled), Some(JobState::Ready));
            let late_us = now_us.saturating_sub(due_ms.saturating_mul(1000));
            self.lateness_us.saturating_record(late_us.max(1));
            self.counters.fired += 1;
            self.deliver(id);
        }
        self.fired = batch;
        fired
    }

    /// Running jobs whose lease ran out are ready again (attempt + 1 at the next claim); ready
    /// jobs nobody claimed in time (a worker took the id and died) are queued again.
    fn expire_leases(&mut self, max: usize, run: &mut TimerRun) {
        let now_ms = self.now_ms;
        while run.expired + run.requeued < max {
            let Some((fired_key, _deadline, at)) = self.leases.poll(now_ms) else {
                break;
            };
            let key = self.leases.insert(now_ms.saturating_add(self.lease_ms), at);
            let (id, job) = self.jobs.at(at);
            assert_eq!(job.timer, Some(fired_key), "job {id} is its lease's job");
            job.timer = Some(key);
            match job.state {
                JobState::Running => {
                    tracing::debug!(%id, attempt = job.attempt, "lease ran out; the job is ready again");
                    job.state = JobState::Ready;
                    job.at_ms = now_ms;
                    self.count(Some(JobState::Running), Some(JobState::Ready));
                    self.counters.redelivered += 1;
                    run.expired += 1;
                    self.stopped_running(id);
                    self.deliver(id);
                }
                JobState::Ready => {
                    tracing::debug!(%id, "ready job not claimed within the lease; queued again");
                    run.requeued += 1;
                    self.counters.requeued += 1;
                    if self.fair.is_some() {
                        let (tenant, lease_ms) = (self.tenant_of(id), self.lease_ms);
                        if let Some(fair) = self.fair.as_mut() {
                            fair.requeue(id, tenant, now_ms, lease_ms);
                        }
                        self.refill();
                        continue;
                    }
                    // The channel holding at least as many ids as there are ready jobs most
                    // likely holds this one: do not let a slow backlog double itself.
                    let queued = self.ready_tx.as_ref().map_or(0, |tx| tx.len() as u64);
                    if queued < self.in_state[state_index(JobState::Ready)] {
                        self.send(id);
                    }
                }
                JobState::Scheduled => panic!("job {id} is scheduled with a lease timer"),
            }
        }
    }

    /// The next time the timer thread has something to do.
    pub fn next_deadline(&self) -> Option<u64> {
        let due = if self.draining {
            None
        } else {
            // Also wake where the wheel can cascade a coming slot ahead of time in bounded
            // steps, rather than all of it in one lock hold when it comes.
            match (self.due.next_due(), self.due.look_ahead_due()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        };
        match (due, self.leases.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Adds the jobs of the table's shards `shards` that `query` admits to `best`, which keeps
    /// the `query.limit + 1` first by `(due_ms, id)`: one step of a page's scan (see
    /// `Engine::jobs`, which takes the state lock for a few shards at a time).
    pub fn page_scan(
        &self,
        query: &JobQuery,
        shards: std::ops::Range<usize>,
        best: &mut std::collections::BinaryHeap<(u64, JobId)>,
    ) {
        for shard in shards {
            for (&id, job) in self.jobs.shard_iter(shard) {
                if !query.admits(id, job.state, job.due_ms) {
                    continue;
                }
                let key = (job.due_ms, id);
                if best.len() <= query.limit {
                    best.push(key);
                } else if best.peek().is_some_and(|&top| key < top) {
                    best.pop();
                    best.push(key);
                }
            }
        }
    }

    /// The page the scan found, in `(due_ms, id)` order, and whether more jobs follow. A job
    /// that finished, or changed so that the query no longer admits it where the scan found
    /// it, since its shard was scanned is left out.
    pub fn page_finish(
        &self,
        query: &JobQuery,
        best: std::collections::BinaryHeap<(u64, JobId)>,
    ) -> (Vec<JobInfo>, bool) {
        let more = best.len() > query.limit;
        let mut keys = best.into_sorted_vec();
        keys.truncate(query.limit);
        let jobs = keys
            .into_iter()
            .filter_map(|(due_ms, id)| {
                let info = self.info(id)?;
                (info.due_ms == due_ms && query.admits(id, info.state, due_ms)).then_some(info)
            })
            .collect();
        (jobs, more)
    }

    pub fn info(&self, id: JobId) -> Option<JobInfo> {
        let extra = self.extra.get(&id);
        self.jobs.get(&id).map(|j| JobInfo {
            id,
            state: j.state,
            due_ms: j.due_ms,
            attempt: j.attempt,
            failures: j.failures,
            // An empty reason is no error: compaction keeps it so (a fate's "" clears it).
            last_error: extra
                .and_then(|e| e.last_error.clone())
                .filter(|e| !e.is_empty()),
            tenant: extra.map_or(0, |e| e.tenant),
            key: self.key_of_job(id),
            payload: j.payload.to_shared(),
        })
    }

    /// The idempotency key of job `id` (live or dead, in memory).
    fn key_of_job(&self, id: JobId) -> Option<Arc<[u8]>> {
        let hash = *self.key_of.get(&id)?;
        Some(Arc::clone(
            self.keys
                .held_by(hash, id)
                .expect("a keyed job holds its key"),
        ))
    }

    /// A job of the dead-letter set, as callers see it.
    pub fn dead_info(&self, id: JobId) -> Option<DeadJob> {
        self.dead.get(&id).map(|d| DeadJob {
            id,
            tenant: d.extra.tenant,
            key: self.key_of_job(id),
            due_ms: d.due_ms,
            attempt: d.attempt,
            failures: d.failures,
            died_at_ms: d.died_at_ms,
            reason: d.reason.clone(),
            expired: d.expired,
            payload: d.payload.to_shared(),
            binary: d.binary,
        })
    }

    /// The retry policy of a live job: its own, else `default`.
    pub fn policy(&self, id: JobId, default: crate::RetryPolicy) -> crate::RetryPolicy {
        match self.extra.get(&id) {
            None => default,
            Some(e) => crate::RetryPolicy {
                max_attempts: if e.max_attempts == 0 {
                    default.max_attempts
                } else {
                    e.max_attempts
                },
                backoff: e
                    .backoff
                    .map_or(default.backoff, |(b, c)| crate::Backoff::new(b, c)),
            },
        }
    }
}

/// Sorts `(due_ms, id, _)` triples by due, then id, stably (the third is carried along; an
/// open's ids are unique, so it never decides anything), by a least-significant-digit radix
/// sort over 11-bit digits, skipping those in which no two triples differ: the missed jobs of
/// an open share most of their due times' bits and their ids' high bits, so the hundred
/// thousand of the demo's crash (one due time, ids in a run) would sort in two passes: 2.0 ms
/// here, against 3.1 ms for `sort_unstable`. In order already (as they are when the job
/// table's slot order is the ids' order, a log that has not moved them), the pass that looks
/// at the bits finds so, and nothing moves.
fn sort_due_order<T: Copy + Default>(pairs: &mut Vec<(u64, JobId, T)>) {
    const DIGIT_BITS: u32 = 11;
    const DIGITS: usize = 1 << DIGIT_BITS;
    if pairs.len() < 1024 {
        pairs.sort_by_key(|&(due, id, _)| (due, id));
        return;
    }
    let (due0, id0) = (pairs[0].0, pairs[0].1.0);
    let (mut due_bits, mut id_bits) = (0u64, 0u64);
    // In order already (the demo's crash: one due time, the table's slot order the ids'
    // order), nothing to do.
    let (mut sorted, mut last) = (true, (due0, id0));
    for &(due, JobId(id), _) in pairs.iter() {
        due_bits |= due ^ due0;
        id_bits |= id ^ id0;
        sorted &= last <= (due, id);
        last = (due, id);
    }
    if sorted {
        return;
    }
    let mask = (DIGITS - 1) as u64;
    let varies = |bits: u64, shift: u32| (bits >> shift) & mask != 0;
    // Least significant first: the ids' digits, then the due times'.
    let passes = (0..64)
        .step_by(DIGIT_BITS as usize)
        .filter(|&shift| varies(id_bits, shift))
        .map(|shift| (false, shift))
        .chain(
            (0..64)
                .step_by(DIGIT_BITS as usize)
                .filter(|&shift| varies(due_bits, shift))
                .map(|shift| (true, shift)),
        );
    let mut out = vec![(0u64, JobId(0), T::default()); pairs.len()];
    let mut starts = vec![0usize; DIGITS];
    for (of_due, shift) in passes {
        let digit = |&(due, JobId(id), _): &(u64, JobId, T)| {
            ((if of_due { due } else { id } >> shift) & mask) as usize
        };
        starts.fill(0);
        for p in pairs.iter() {
            starts[digit(p)] += 1;
        }
        let mut at = 0;
        for s in starts.iter_mut() {
            (*s, at) = (at, at + *s);
        }
        for p in pairs.iter() {
            let d = digit(p);
            out[starts[d]] = *p;
            starts[d] += 1;
        }
        std::mem::swap(pairs, &mut out);
    }
}

/// What arming the replayed jobs found.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ArmReport {
    pub missed: u64,
    pub interrupted: u64,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{JobId, sort_due_order};

    /// Pairs around a few due times and a run of ids, as an open finds them, with some spread
    /// over all 64 bits (so that every byte takes its pass somewhere).
    fn pairs() -> impl Strategy<Value = Vec<(u64, JobId, u32)>> {
        let due = prop_oneof![
            (0u64..4).prop_map(|k| 1_800_000_000_000 + k),
            (0u64..3_600_000).prop_map(|k| 1_800_000_000_000 + k),
            any::<u64>(),
        ];
        let id = prop_oneof![(0u64..200_000).prop_map(|s| (1 << 20) + s), any::<u64>()];
        prop::collection::vec((due, id.prop_map(JobId), any::<u32>()), 0..3000)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn the_missed_jobs_sort_as_a_comparison_sort_sorts_them(mut v in pairs()) {
            // By (due, id), stably: the carried value keeps its place among equal pairs (an
            // open's ids are unique, so it never meets one).
            let mut want = v.clone();
            want.sort_by_key(|&(due, id, _)| (due, id));
            sort_due_order(&mut v);
            prop_assert_eq!(v, want);
        }

        #[test]
        fn pairs_in_order_but_one_are_sorted_too(mut v in pairs(), swap in any::<(usize, usize)>()) {
            // In order, then (unless the two are equal) out of order in one place: the sort
            // must not take the second for the first.
            v.sort_by_key(|&(due, id, _)| (due, id));
            let want = v.clone();
            sort_due_order(&mut v);
            prop_assert_eq!(&v, &want);
            if !v.is_empty() {
                let (a, b) = (swap.0 % v.len(), swap.1 % v.len());
                v.swap(a, b);
                sort_due_order(&mut v);
                prop_assert_eq!(
                    v.iter().map(|&(due, id, _)| (due, id)).collect::<Vec<_>>(),
                    want.iter().map(|&(due, id, _)| (due, id)).collect::<Vec<_>>()
                );
            }
        }
    }
}

/// The job table moves jobs to give memory back (`State::give_back_memory`; the unit tests'
/// chunks hold 16 jobs, so a few hundred jobs fill and empty many): every timer must still
/// reach its own job. Against a model of the jobs: each scheduled job fires once, never before
/// it is due; a claimed job whose lease runs out, or a ready job not claimed within a lease,
/// is delivered again, not before; cancelled and completed jobs never come back. A timer that reached another job trips the fire's assert.
#[cfg(test)]
mod moves {
    use std::collections::BTreeMap;

    use crossbeam_channel::Receiver;

    use super::{Mode, State};
    use crate::engine::table::xorshift;
    use crate::job::{JobId, JobState};
    use crate::record::{Event, ScheduleRecord};

    const T0: u64 = 1_700_000_000_000;
    const LEASE_MS: u64 = 500;

    fn schedule(state: &mut State, id: JobId, due_ms: u64, lsn: u64) {
        let payload = due_ms.to_le_bytes();
        let record = ScheduleRecord::plain(id, due_ms, T0, &payload);
        state
            .apply(&Event::Schedule(record), Mode::Live, lsn)
            .expect("a new id");
    }

    /// A job of the model: its due time, its state, and when its claim deadline or lease
    /// runs out (`Ready`, `Running`).
    type Model = BTreeMap<JobId, (u64, JobState, u64)>;

    /// Ids delivered since the last call, each checked against the model and marked ready.
    fn delivered(rx: &Receiver<JobId>, model: &mut Model, now_ms: u64) {
        for id in rx.try_iter() {
            let (due_ms, state, until_ms) = model.get_mut(&id).expect("a delivered job is live");
            let not_before = match state {
                JobState::Scheduled => *due_ms,
                JobState::Ready | JobState::Running => *until_ms,
            };
            assert!(
                not_before <= now_ms,
                "job {id} {state:?} delivered at {now_ms}, not before {not_before}"
            );
            *state = JobState::Ready;
            *until_ms = now_ms + LEASE_MS;
        }
    }

    /// A schedule of a job the table holds is refused and changes nothing, with a key or
    /// without (without one, the insert finds it: the table is not asked first); a schedule
    /// made visible after its job was read back from a bucket is skipped so.
    #[test]
    fn a_second_schedule_of_one_job_changes_nothing() {
        let (tx, _rx) = crossbeam_channel::unbounded();
        let mut state = State::new(T0, 16, LEASE_MS, tx);
        let id = JobId::compose(1, 493_000);
        schedule(&mut state, id, T0 + 50, 1);
        let before = (state.jobs.len(), state.in_state, state.due.len());
        for key in [None, Some(&b"k"[..])] {
            let mut record = ScheduleRecord::plain(id, T0 + 900, T0, b"other");
            record.key = key;
            let event = Event::Schedule(record);
            assert_eq!(
                state.apply(&event, Mode::Live, 2),
                Err(super::SCHEDULED_TWICE)
            );
            assert!(!state.apply_visible(&event, None, 2));
            let after = (state.jobs.len(), state.in_state, state.due.len());
            assert_eq!(after, before, "nothing changed (key {key:?})");
            assert!(
                !state.keys.holds(super::key_hash(b"k"), b"k", id),
                "the key was not taken"
            );
            let job = state.jobs.get(&id).expect("still there");
            assert_eq!(
                (job.due_ms, job.lsn),
                (T0 + 50, 1),
                "the first schedule's job"
            );
        }
    }

    #[test]
    fn timers_follow_the_jobs_the_table_moves() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut state = State::new(T0, 16, LEASE_MS, tx);
        let mut model = Model::default();
        let mut next = xorshift(0x00c0_ffee_d00d);
        let (mut seq, mut lsn) = (0u64, 0u64);
        let mut peak_slots = 0;
        for round in 0..40u64 {
            // Fill up to a peak that changes from round to round, then let most go.
            let peak = 100 + (round * 337) % 900;
            while (model.len() as u64) < peak {
                seq += 1;
                lsn += 1;
                let id = JobId::compose(seq, 493_000);
                let due_ms = state.now_ms + next() % 3_000;
                schedule(&mut state, id, due_ms, lsn);
                model.insert(id, (due_ms, JobState::Scheduled, 0));
            }
            peak_slots = peak_slots.max(state.jobs.slots());
            let keep = (next() % 60) as usize;
            while model.len() > keep {
                let r = next();
                lsn += 1;
                let id = *model
                    .keys()
                    .nth(r as usize % model.len())
                    .expect("in range");
                let (due_ms, job_state, _) = model[&id];
                let job = &state.jobs[&id];
                if job.lease_open && job_state == JobState::Ready {
                    // Its lease ran out in memory: the log hears of it first (as the engine
                    // writes it before the next change).
                    let expire = Event::Expire {
                        id,
                        attempt: job.attempt,
                    };
                    state.apply(&expire, Mode::Live, lsn).expect("ran out");
                    lsn += 1;
                }
                match (job_state, r % 4) {
                    (JobState::Scheduled, 0) => {
                        let due_ms = due_ms + r % 700;
                        let event = Event::Reschedule { id, due_ms };
                        state.apply(&event, Mode::Live, lsn).expect("waiting");
                        model.insert(id, (due_ms, JobState::Scheduled, 0));
                    }
                    (JobState::Scheduled | JobState::Ready, 1) => {
                        state
                            .apply(&Event::Cancel { id }, Mode::Live, lsn)
                            .expect("waiting");
                        model.remove(&id);
                    }
                    (JobState::Ready, _) => {
                        let attempt = state.jobs[&id].attempt + 1;
                        let lease_until_ms = state.now_ms + LEASE_MS;
                        let claim = Event::Claim {
                            id,
                            attempt,
                            lease_until_ms,
                        };
                        state.apply(&claim, Mode::Live, lsn).expect("ready");
                        if r.is_multiple_of(3) {
                            // Left to run out: the lease wheel delivers it again.
                            model.insert(id, (due_ms, JobState::Running, lease_until_ms));
                        } else {
                            lsn += 1;
                            let done = Event::Complete { id, attempt };
                            state.apply(&done, Mode::Live, lsn).expect("held");
                            model.remove(&id);
                        }
                    }
                    _ => {
                        let now_ms = state.observe_time(state.now_ms + r % 97);
                        state.run_timers(now_ms * 1_000, usize::MAX);
                        delivered(&rx, &mut model, now_ms);
                    }
                }
            }
            for (&id, &(due_ms, job_state, _)) in &model {
                let job = &state.jobs[&id];
                assert_eq!((job.due_ms, job.state), (due_ms, job_state), "job {id}");
            }
        }
        // Everything left fires, and every lease runs out.
        let now_ms = state.observe_time(state.now_ms + 10_000);
        state.run_timers(now_ms * 1_000, usize::MAX);
        delivered(&rx, &mut model, now_ms);
        assert!(model.values().all(|&(_, s, _)| s == JobState::Ready));
        assert!(
            state.jobs.slots() < peak_slots / 4,
            "the table gave memory back: {} slots, {peak_slots} at the peak",
            state.jobs.slots()
        );
    }
}
