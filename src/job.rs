//! Jobs as callers see them: ids, what to schedule, and what a worker holds.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A job's id: never reused within a data directory, also across restarts.
///
/// Its low [`JobId::BUCKET_BITS`] bits name the hour bucket the job was scheduled into (the
/// hour of its due time, or of its acceptance if it was due already, modulo
/// 2<sup>20</sup> hours, about 119 years), so that the engine finds a job kept on disk from its
/// id alone; the high bits are a sequence number that grows with every job scheduled. The
/// first ids are around 2<sup>20</sup>, and they stay below 2<sup>53</sup> (exact as a
/// JavaScript number) for the first 8.5 billion jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub u64);

impl JobId {
    /// Bits of an id that hold its home hour bucket.
    pub const BUCKET_BITS: u32 = 20;
    const BUCKET_MASK: u64 = (1 << Self::BUCKET_BITS) - 1;

    /// The id of the `seq`-th job, scheduled into hour bucket `bucket`.
    pub(crate) fn compose(seq: u64, bucket: u64) -> JobId {
        assert!(seq < 1 << (64 - Self::BUCKET_BITS), "job sequence in range");
        JobId((seq << Self::BUCKET_BITS) | (bucket & Self::BUCKET_MASK))
    }

    /// The sequence number: ids grow with it.
    pub(crate) fn seq(self) -> u64 {
        self.0 >> Self::BUCKET_BITS
    }

    /// The job's home hour bucket, modulo 2<sup>20</sup>.
    pub(crate) fn bucket_residue(self) -> u64 {
        self.0 & Self::BUCKET_MASK
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// When a [`JobSpec`] is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// At this time (ms since the Unix epoch, UTC).
    At(u64),
    /// This long after the moment the engine accepts the job.
    After(Duration),
}

/// What to schedule: a due time and an opaque payload.
///
/// ```
/// use std::time::Duration;
/// use timewheel::JobSpec;
/// let a = JobSpec::at(1_900_000_000_000).payload(b"order 42".to_vec());
/// let b = JobSpec::after(Duration::from_secs(30 * 60)).payload("cancel if unpaid");
/// # let _ = (a, b);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    pub(crate) due: Due,
    pub(crate) payload: Vec<u8>,
    pub(crate) binary: bool,
}

impl JobSpec {
    /// A job due at `due_ms` (ms since the Unix epoch, UTC). A time in the past fires at once.
    pub fn at(due_ms: u64) -> Self {
        JobSpec {
            due: Due::At(due_ms),
            payload: Vec::new(),
            binary: false,
        }
    }

    /// A job due `delay` after it is accepted.
    pub fn after(delay: Duration) -> Self {
        JobSpec {
            due: Due::After(delay),
            payload: Vec::new(),
            binary: false,
        }
    }

    /// A job due at a UTC date-time. Times before 1970 are clamped to the epoch, which is in
    /// the past and so fires at once.
    pub fn at_time(at: chrono::DateTime<chrono::Utc>) -> Self {
        Self::at(crate::clock::ms_from_datetime(at).unwrap_or(0))
    }

    /// Sets the payload (at most `Config::payload_bytes_max` bytes).
    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = payload.into();
        self
    }

    /// Marks the payload as binary rather than text; the sidecar then reports it as
    /// `payload_b64`. Kept in the log with the job.
    pub fn binary(mut self, binary: bool) -> Self {
        self.binary = binary;
        self
    }

    /// When the job is due.
    pub fn due(&self) -> Due {
        self.due
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting for its due time.
    Scheduled,
    /// Due; its id is in the ready queue (or will be again after a lease ran out).
    Ready,
    /// Claimed by a worker, leased until a deadline.
    Running,
}

/// A snapshot of a live job. Finished jobs (completed, failed, cancelled) are not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The job.
    pub id: JobId,
    /// Its state.
    pub state: JobState,
    /// When it is due.
    pub due_ms: u64,
    /// Deliveries so far (0 before the first claim).
    pub attempt: u32,
    /// The payload.
    pub payload: Arc<[u8]>,
}

/// A job a worker has claimed. Hand it back to `complete` or `fail` before `lease_until_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The job.
    pub id: JobId,
    /// When it was due.
    pub due_ms: u64,
    /// The delivery attempt, 1 for the first: the fencing token. A completion with an older
    /// attempt than the job's current one is refused.
    pub attempt: u32,
    /// The payload.
    pub payload: Arc<[u8]>,
    /// Whether the payload was marked binary.
    pub binary: bool,
    /// When the job entered the ready queue (fired, or its previous lease ran out).
    pub ready_at_ms: u64,
    /// When the lease runs out and the job is delivered again.
    pub lease_until_ms: u64,
}

/// What a cancel or reschedule did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// Done, and durable (under the configured durability).
    Done,
    /// The job is running (claimed): it can no longer be cancelled or moved. Its worker
    /// completes or fails it; if its lease runs out it is ready again, and can be.
    Running,
    /// No such job: it never existed, already finished (completed, failed, cancelled), or its
    /// schedule is not yet durable.
    NotFound,
}

impl Outcome {
    /// Whether the change was made.
    pub fn is_done(self) -> bool {
        self == Outcome::Done
    }
}

/// Which jobs [`Engine::jobs`](crate::Engine::jobs) lists: a state (or all), a due range, and
/// where the previous page ended. Pages come in `(due_ms, id)` order.
///
/// ```
/// # fn main() -> timewheel::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("timewheel-doc-jobs-{}", std::process::id()));
/// use timewheel::{Config, Engine, JobQuery, JobSpec, JobState};
///
/// let engine = Engine::open(Config::new(&dir))?;
/// let now = timewheel::Clock::now_ms(&timewheel::SystemClock);
/// engine.schedule_batch((0..250).map(|i| JobSpec::at(now + 60_000 + i)))?;
/// // What is scheduled for the next hour, 100 at a time.
/// let mut query = Some(
///     JobQuery::due_between(now, now + 3_600_000)
///         .state(JobState::Scheduled)
///         .limit(100),
/// );
/// let mut seen = 0;
/// while let Some(q) = query {
///     let page = engine.jobs(&q)?;
///     assert!(page.jobs.is_sorted_by_key(|j| (j.due_ms, j.id)));
///     seen += page.jobs.len();
///     query = page.next;
/// }
/// assert_eq!(seen, 250);
/// # drop(engine);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobQuery {
    /// Only jobs in this state; `None`: every state.
    pub state: Option<JobState>,
    /// Jobs due at or after this.
    pub due_from_ms: u64,
    /// Jobs due before this.
    pub due_to_ms: u64,
    /// Only jobs after this `(due_ms, id)`: where the previous page ended.
    pub after: Option<(u64, JobId)>,
    /// Jobs per page, at most `Config::page_jobs_max`.
    pub limit: usize,
}

impl JobQuery {
    /// Every live job, 1 000 a page.
    pub fn all() -> Self {
        Self::due_between(0, u64::MAX)
    }

    /// Jobs due in `from_ms .. to_ms`, in every state, 1 000 a page.
    pub fn due_between(from_ms: u64, to_ms: u64) -> Self {
        JobQuery {
            state: None,
            due_from_ms: from_ms,
            due_to_ms: to_ms,
            after: None,
            limit: 1_000,
        }
    }

    /// Only jobs in `state`.
    pub fn state(mut self, state: JobState) -> Self {
        self.state = Some(state);
        self
    }

    /// At most `limit` jobs per page.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    pub(crate) fn admits(&self, id: JobId, state: JobState, due_ms: u64) -> bool {
        self.state.is_none_or(|s| s == state)
            && (self.due_from_ms..self.due_to_ms).contains(&due_ms)
            && self.after.is_none_or(|after| (due_ms, id) > after)
    }
}

/// One page of [`Engine::jobs`](crate::Engine::jobs).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobPage {
    /// The jobs, in `(due_ms, id)` order.
    pub jobs: Vec<JobInfo>,
    /// The query for the next page; `None` when this one is the last.
    pub next: Option<JobQuery>,
}
