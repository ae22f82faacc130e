//! The in-memory state of every live job, and the transitions between states.
//!
//! Live calls and recovery go through the same transitions, so that what recovery rebuilds is
//! exactly what the running engine had: a record is appended to the log and applied here under
//! one lock, which makes the log's order the order of the state changes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crossbeam_channel::Sender;

use crate::job::{Claimed, JobId, JobInfo, JobState};
use crate::wheel::{TimerKey, TimingWheel};

/// One live job.
#[derive(Debug)]
pub(crate) struct Job {
    pub due_ms: u64,
    pub attempt: u32,
    pub state: JobState,
    pub binary: bool,
    pub payload: Payload,
    /// Its entry in the due wheel while `Scheduled`, or in the lease wheel while `Running`.
    pub timer: Option<TimerKey>,
    pub lease_until_ms: u64,
}

/// A job's payload. Short ones (most: an order id, a key) live inside the job, so scheduling
/// one allocates nothing; longer ones are shared with the workers that claim the job.
#[derive(Debug, Clone)]
pub(crate) enum Payload {
    Inline {
        len: u8,
        bytes: [u8; PAYLOAD_INLINE_MAX],
    },
    Shared(Arc<[u8]>),
}

/// Longest payload kept inline: the size of the `Shared` variant plus the spare bytes of the
/// enum, so inlining costs no space.
pub(crate) const PAYLOAD_INLINE_MAX: usize = 22;
const _: () = assert!(std::mem::size_of::<Payload>() == 24);

impl Payload {
    pub fn new(bytes: &[u8]) -> Self {
        if bytes.len() <= PAYLOAD_INLINE_MAX {
            let mut inline = [0; PAYLOAD_INLINE_MAX];
            inline[..bytes.len()].copy_from_slice(bytes);
            Payload::Inline {
                len: bytes.len() as u8,
                bytes: inline,
            }
        } else {
            Payload::Shared(Arc::from(bytes))
        }
    }

    /// The payload as workers receive it.
    pub fn to_shared(&self) -> Arc<[u8]> {
        match self {
            Payload::Inline { len, bytes } => Arc::from(&bytes[..usize::from(*len)]),
            Payload::Shared(shared) => shared.clone(),
        }
    }
}

/// Counters of things that happened, since the data directory was created where the log
/// knows them (completed, cancelled, failed) and since open otherwise.
#[derive(Debug, Default, Clone)]
pub(crate) struct Counters {
    pub completed: u64,
    pub cancelled: u64,
    pub failed: u64,
    pub fired: u64,
    pub redelivered: u64,
}

/// The hash of a job id. Ids are handed out in sequence, so the id itself, in the low bits the
/// table indexes by, puts jobs scheduled together in neighbouring buckets: a batch of inserts
/// walks memory in order instead of missing the cache once per job (SipHash, or any mixing
/// hash, costs a cache miss per job at millions of jobs). The top 7 bits, which the table
/// compares to tell keys in one group apart, come from a multiplicative mix so that they vary.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        const TOP7: u64 = 0xFE00_0000_0000_0000;
        self.0 = (v & !TOP7) | (v.wrapping_mul(0x9E37_79B9_7F4A_7C15) & TOP7);
    }
}

pub(crate) type JobMap = HashMap<JobId, Job, BuildHasherDefault<IdHasher>>;
pub(crate) type IdSet = std::collections::HashSet<JobId, BuildHasherDefault<IdHasher>>;

/// Every live job, the wheels that time them, and the counters.
pub(crate) struct State {
    pub jobs: JobMap,
    /// Due times of `Scheduled` jobs.
    pub due: TimingWheel<u64>,
    /// Lease deadlines of `Running` jobs.
    pub leases: TimingWheel<u64>,
    pub counters: Counters,
    /// The highest clock reading seen: time never goes backwards inside the engine.
    pub now_ms: u64,
    /// When the timer thread plans to wake next (`u64::MAX`: not sleeping on a deadline).
    pub sleeping_until_ms: u64,
    /// Fire lateness in microseconds.
    pub lateness_us: hdrhistogram::Histogram<u64>,
    /// Live jobs per state, indexed by [`state_index`].
    pub in_state: [u64; 3],
}

/// Index of a state in `State::in_state`.
pub(crate) fn state_index(s: JobState) -> usize {
    match s {
        JobState::Scheduled => 0,
        JobState::Ready => 1,
        JobState::Running => 2,
    }
}

impl State {
    pub fn new(now_ms: u64, capacity: usize) -> Self {
        State {
            jobs: JobMap::with_capacity_and_hasher(capacity, Default::default()),
            due: TimingWheel::with_capacity(now_ms, capacity),
            leases: TimingWheel::new(now_ms),
            counters: Counters::default(),
            now_ms,
            sleeping_until_ms: u64::MAX,
            lateness_us: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("valid histogram bounds"),
            in_state: [0; 3],
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

    /// Adds a new job, waiting for its due time.
    pub fn insert_scheduled(&mut self, id: JobId, due_ms: u64, payload: Payload, binary: bool) {
        let key = self.due.insert(due_ms, id.0);
        let old = self.jobs.insert(
            id,
            Job {
                due_ms,
                attempt: 0,
                state: JobState::Scheduled,
                binary,
                payload,
                timer: Some(key),
                lease_until_ms: 0,
            },
        );
        assert!(old.is_none(), "job id {id} scheduled twice");
        self.count(None, Some(JobState::Scheduled));
    }

    /// Puts a job replayed from the log (in the table, no timer yet) back on its timer, as
    /// `Scheduled` whatever it was: a claim that did not finish before the engine stopped is
    /// void, and the job fires again (its next claim gets attempt + 1).
    pub fn arm_recovered(&mut self, id: JobId) {
        let job = self.jobs.get_mut(&id).expect("a replayed job");
        assert!(job.timer.is_none(), "replayed jobs have no timer yet");
        job.state = JobState::Scheduled;
        job.timer = Some(self.due.insert(job.due_ms, id.0));
        self.count(None, Some(JobState::Scheduled));
    }

    /// Marks a replayed job that is due already `Ready`: the caller queues its id (a missed
    /// job, fired at once).
    pub fn ready_recovered(&mut self, id: JobId) {
        let job = self.jobs.get_mut(&id).expect("a replayed job");
        assert!(job.timer.is_none(), "replayed jobs have no timer yet");
        job.state = JobState::Ready;
        self.count(None, Some(JobState::Ready));
        self.counters.fired += 1;
    }

    /// Whether `cancel` would succeed: the job is waiting or queued, not running or done.
    pub fn can_cancel(&self, id: JobId) -> bool {
        self.jobs
            .get(&id)
            .is_some_and(|j| matches!(j.state, JobState::Scheduled | JobState::Ready))
    }

    /// Cancels a waiting or queued job. A queued id stays in the channel; `claim` skips it.
    pub fn cancel(&mut self, id: JobId) {
        assert!(self.can_cancel(id), "cancel of job {id} checked first");
        let job = self.jobs.remove(&id).expect("checked");
        if let Some(key) = job.timer {
            let gone = self.due.cancel(key);
            assert_eq!(gone, Some(id.0), "the timer of job {id} belongs to it");
        }
        self.count(Some(job.state), None);
        self.counters.cancelled += 1;
    }

    /// Whether `reschedule` would succeed.
    pub fn can_reschedule(&self, id: JobId) -> bool {
        self.can_cancel(id)
    }

    /// Gives a waiting or queued job a new due time.
    pub fn reschedule(&mut self, id: JobId, due_ms: u64) {
        assert!(
            self.can_reschedule(id),
            "reschedule of job {id} checked first"
        );
        let job = self.jobs.get_mut(&id).expect("checked");
        job.due_ms = due_ms;
        match job.timer {
            Some(key) => {
                let moved = self.due.reschedule(key, due_ms);
                assert!(moved, "the timer of job {id} is live");
            }
            None => {
                // Queued already: it waits again; the id left in the channel is skipped.
                job.state = JobState::Scheduled;
                job.timer = Some(self.due.insert(due_ms, id.0));
                self.count(Some(JobState::Ready), Some(JobState::Scheduled));
            }
        }
    }

    /// Claims a queued job for a worker until `lease_until_ms`.
    pub fn claim(&mut self, id: JobId, lease_until_ms: u64) -> Option<Claimed> {
        let job = self.jobs.get_mut(&id)?;
        if job.state != JobState::Ready {
            return None;
        }
        job.attempt += 1;
        job.state = JobState::Running;
        job.lease_until_ms = lease_until_ms;
        job.timer = Some(self.leases.insert(lease_until_ms, id.0));
        let claimed = Claimed {
            id,
            due_ms: job.due_ms,
            attempt: job.attempt,
            payload: job.payload.to_shared(),
            binary: job.binary,
            lease_until_ms,
        };
        self.count(Some(JobState::Ready), Some(JobState::Running));
        Some(claimed)
    }

    /// Whether a worker holding `attempt` may still finish the job: it is the newest delivery,
    /// and nobody claimed it since (a lease that ran out without a new claim is still honoured).
    pub fn can_finish(&self, id: JobId, attempt: u32) -> bool {
        self.jobs.get(&id).is_some_and(|j| {
            attempt >= 1
                && j.attempt == attempt
                && matches!(j.state, JobState::Running | JobState::Ready)
        })
    }

    /// Finishes a job (completed or failed).
    pub fn finish(&mut self, id: JobId, attempt: u32, completed: bool) {
        assert!(
            self.can_finish(id, attempt),
            "finish of job {id} checked first"
        );
        let job = self.jobs.remove(&id).expect("checked");
        if let Some(key) = job.timer {
            let wheel = match job.state {
                JobState::Running => &mut self.leases,
                _ => &mut self.due,
            };
            wheel.cancel(key);
        }
        self.count(Some(job.state), None);
        if completed {
            self.counters.completed += 1;
        } else {
            self.counters.failed += 1;
        }
    }

    /// Moves due jobs to the ready queue, at most `max` of them. Returns how many moved.
    pub fn fire_due(&mut self, now_us: u64, max: usize, ready: &Sender<JobId>) -> usize {
        let mut fired = 0;
        while fired < max {
            let Some((_key, due_ms, raw)) = self.due.poll(self.now_ms) else {
                break;
            };
            assert!(due_ms <= self.now_ms, "the wheel never fires early");
            let id = JobId(raw);
            let job = self.jobs.get_mut(&id).expect("a timer's job is live");
            assert_eq!(job.state, JobState::Scheduled);
            job.state = JobState::Ready;
            job.timer = None;
            self.count(Some(JobState::Scheduled), Some(JobState::Ready));
            let late_us = now_us.saturating_sub(due_ms.saturating_mul(1000));
            self.lateness_us.saturating_record(late_us.max(1));
            self.counters.fired += 1;
            // The receiver lives as long as the engine; a send can not fail.
            let _ = ready.send(id);
            fired += 1;
        }
        fired
    }

    /// Puts jobs whose lease ran out back in the ready queue. Returns how many.
    pub fn expire_leases(&mut self, max: usize, ready: &Sender<JobId>) -> usize {
        let mut expired = 0;
        while expired < max {
            let Some((_key, _deadline, raw)) = self.leases.poll(self.now_ms) else {
                break;
            };
            let id = JobId(raw);
            let job = self.jobs.get_mut(&id).expect("a lease's job is live");
            assert_eq!(job.state, JobState::Running);
            job.state = JobState::Ready;
            job.timer = None;
            self.count(Some(JobState::Running), Some(JobState::Ready));
            self.counters.redelivered += 1;
            let _ = ready.send(id);
            expired += 1;
        }
        expired
    }

    /// The next time the timer thread has something to do.
    pub fn next_deadline(&self) -> Option<u64> {
        match (self.due.next_due(), self.leases.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn info(&self, id: JobId) -> Option<JobInfo> {
        self.jobs.get(&id).map(|j| JobInfo {
            id,
            state: j.state,
            due_ms: j.due_ms,
            attempt: j.attempt,
        })
    }
}
