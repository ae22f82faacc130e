//! Jobs as callers see them: ids, what to schedule, and what a worker holds.

use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
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
    pub(crate) tenant: u32,
    /// 0: `Config::retry`'s.
    pub(crate) max_attempts: u32,
    pub(crate) backoff: Option<Backoff>,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) recurring: Option<Recurring>,
}

/// What a recurring job does about occurrences it missed (the engine was down, or stalled):
/// the Quartz vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Misfire {
    /// Fire once now for all that were missed, then go on from now (the default).
    #[default]
    Coalesce,
    /// Fire each missed occurrence, one after the other, but at most the `backfill_max` most
    /// recent ones; the older ones are skipped.
    FireAll {
        /// Missed occurrences fired at most.
        backfill_max: u32,
    },
    /// Do not fire an occurrence found more than `Config::misfire_threshold_ms` late: skip to
    /// the next one after now.
    Skip,
}

/// A recurring job's schedule: when it fires, and what it does about misfires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recurring {
    /// The occurrences.
    pub recurrence: crate::recur::Recurrence,
    /// What happens to missed ones.
    pub misfire: Misfire,
}

impl Recurring {
    /// The next due time after the occurrence due at `prev_due_ms` was done (or skipped) at
    /// `now_ms`, under the misfire policy; `None` when the recurrence has no more.
    pub fn next_due(&self, prev_due_ms: u64, now_ms: u64) -> Option<u64> {
        let r = &self.recurrence;
        match self.misfire {
            Misfire::Coalesce | Misfire::Skip => r.next_after(now_ms.max(prev_due_ms)),
            Misfire::FireAll { backfill_max } => {
                let first = r.next_after(prev_due_ms)?;
                if first > now_ms || backfill_max == 0 {
                    return if first > now_ms {
                        Some(first)
                    } else {
                        r.next_after(now_ms)
                    };
                }
                // The `backfill_max` most recent missed occurrences: `first` up to `now_ms`.
                let b = u64::from(backfill_max);
                if let crate::recur::Recurrence::Every(e) = r {
                    // Counted, not walked: a 1 s job down for a month missed 2.6 million.
                    let (interval, anchor) = (e.interval_ms(), e.anchor_ms());
                    let k_first = (first - anchor) / interval;
                    let k_last = (now_ms - anchor) / interval;
                    let k = k_first.max((k_last + 1).saturating_sub(b));
                    return Some(anchor + k * interval);
                }
                // A cron schedule's are walked (bounded); more missed than the walk reaches
                // coalesce, as `Coalesce` does: the window walked is not the most recent one.
                let mut recent = std::collections::VecDeque::with_capacity(b.min(64) as usize);
                let mut at = first;
                for _ in 0..MISFIRE_WALK_MAX {
                    if recent.len() as u64 == b {
                        recent.pop_front();
                    }
                    recent.push_back(at);
                    match r.next_after(at) {
                        Some(n) if n <= now_ms => at = n,
                        Some(_) => return recent.front().copied(),
                        None => return recent.front().copied().or_else(|| r.next_after(now_ms)),
                    }
                }
                r.next_after(now_ms)
            }
        }
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let (kind, backfill) = match self.misfire {
            Misfire::Coalesce => (0u8, 0u32),
            Misfire::FireAll { backfill_max } => (1, backfill_max),
            Misfire::Skip => (2, 0),
        };
        out.push(kind);
        out.extend_from_slice(&backfill.to_le_bytes());
        self.recurrence.encode(out);
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < 5 {
            return None;
        }
        let backfill = u32::from_le_bytes(bytes[1..5].try_into().ok()?);
        let misfire = match (bytes[0], backfill) {
            (0, 0) => Misfire::Coalesce,
            (1, b) => Misfire::FireAll { backfill_max: b },
            (2, 0) => Misfire::Skip,
            _ => return None,
        };
        let recurrence = crate::recur::Recurrence::decode(&bytes[5..]).ok()?;
        Some(Recurring {
            recurrence,
            misfire,
        })
    }
}

/// Occurrences of a cron schedule a `FireAll` misfire walks at most to find the ones to
/// backfill (more missed than that coalesce): about 20 ms of searching. An interval's are
/// counted, not walked.
const MISFIRE_WALK_MAX: usize = 100_000;

/// The due time that marks a paused recurring job (`Engine::pause_schedule`): it never fires.
pub const PAUSED_DUE_MS: u64 = 1 << 62;

/// How long a job waits before its next attempt after a failure: exponential in the number of
/// failures, capped, with full jitter. The `n`-th failure (1 for the first) waits a uniformly
/// drawn time in `0 ..= min(cap_ms, base_ms * 2^(n-1))`. The draw is a hash of the job id, the
/// failure count and `Config::retry_seed`, so the same log and seed give the same retries.
///
/// ```
/// use timewheel::Backoff;
/// let b = Backoff::new(100, 10_000);
/// for n in 1..20 {
///     let d = b.delay_ms(n, 42, 0);
///     assert!(d <= b.ceiling_ms(n));
/// }
/// assert_eq!(b.ceiling_ms(1), 100);
/// assert_eq!(b.ceiling_ms(4), 800);
/// assert_eq!(b.ceiling_ms(30), 10_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Backoff {
    /// The ceiling after the first failure, in milliseconds.
    pub base_ms: u32,
    /// The largest ceiling, in milliseconds.
    pub cap_ms: u32,
}

impl Backoff {
    /// A backoff from `base_ms` doubling up to `cap_ms`.
    pub const fn new(base_ms: u32, cap_ms: u32) -> Self {
        Backoff { base_ms, cap_ms }
    }

    /// The most the `failures`-th failure waits.
    pub fn ceiling_ms(&self, failures: u32) -> u64 {
        let shift = failures.saturating_sub(1).min(40);
        (u64::from(self.base_ms) << shift).min(u64::from(self.cap_ms))
    }

    /// The wait after the `failures`-th failure of job `id` (full jitter, drawn from `seed`).
    pub fn delay_ms(&self, failures: u32, id: u64, seed: u64) -> u64 {
        let ceiling = self.ceiling_ms(failures);
        let draw = splitmix(seed ^ splitmix(id ^ (u64::from(failures) << 48)));
        // Uniform in 0..=ceiling (the modulo's bias is below 2^-20 for ceilings under 2^44).
        draw % (ceiling + 1)
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// What happens to a job whose attempt fails: at most `max_attempts` failed attempts (a
/// worker's retryable `fail`, or a lease that ran out), each followed by a wait from `backoff`;
/// the last one makes the job dead (kept in the dead-letter set). `Config::retry` is the
/// default; a job can have its own (`JobSpec::max_attempts`, `JobSpec::backoff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RetryPolicy {
    /// Failed attempts a job may have; the last makes it dead. 1: no retries.
    pub max_attempts: u32,
    /// The wait before each retry.
    pub backoff: Backoff,
}

impl Default for RetryPolicy {
    /// 25 attempts, waits from 1 s doubling to at most an hour (about 19 hours of retries in
    /// all, like Sidekiq's and River's defaults).
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 25,
            backoff: Backoff::new(1_000, 3_600_000),
        }
    }
}

impl JobSpec {
    /// A job due at `due_ms` (ms since the Unix epoch, UTC). A time in the past fires at once.
    pub fn at(due_ms: u64) -> Self {
        JobSpec {
            due: Due::At(due_ms),
            payload: Vec::new(),
            binary: false,
            tenant: 0,
            max_attempts: 0,
            backoff: None,
            key: None,
            recurring: None,
        }
    }

    /// A job due `delay` after it is accepted.
    pub fn after(delay: Duration) -> Self {
        JobSpec {
            due: Due::After(delay),
            payload: Vec::new(),
            binary: false,
            tenant: 0,
            max_attempts: 0,
            backoff: None,
            key: None,
            recurring: None,
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

    /// Failed attempts allowed before the job is dead (1 to `Config::max_attempts_max`;
    /// unset: `Config::retry`'s).
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// The job's own wait between failed attempts (unset: `Config::retry`'s).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// An idempotency key (1 to `Config::key_bytes_max` bytes): while a job with this key
    /// exists (scheduled, ready, running, or dead in the dead-letter set), scheduling another
    /// with the same key schedules nothing and returns the existing job's id, also across
    /// restarts and from concurrent callers. The key is free again once that job completes,
    /// is cancelled, or is purged. [`Engine::get_by_key`](crate::Engine::get_by_key),
    /// `cancel_by_key` and `reschedule_by_key` find the job by its key alone.
    ///
    /// ```
    /// # fn main() -> timewheel::Result<()> {
    /// # let dir = std::env::temp_dir().join(format!("timewheel-doc-key-{}", std::process::id()));
    /// use std::time::Duration;
    /// use timewheel::{Config, Engine, JobSpec, Outcome};
    ///
    /// let engine = Engine::open(Config::new(&dir))?;
    /// let remind = || JobSpec::after(Duration::from_secs(1800)).key("order-42").payload("unpaid?");
    /// let first = engine.schedule(remind())?;
    /// assert_eq!(engine.schedule(remind())?, first, "a retried submit is the same job");
    /// // The payment service knows the order number, not the job id.
    /// assert_eq!(engine.cancel_by_key(b"order-42")?, Outcome::Done);
    /// assert_ne!(engine.schedule(remind())?, first, "the key is free again");
    /// # drop(engine);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok(())
    /// # }
    /// ```
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// A recurring job: due at the recurrence's first occurrence after it is accepted, and
    /// after each completed occurrence at the next one (the completion and the next
    /// occurrence are one log record). An occurrence that fails its last attempt is skipped to
    /// the next one (counted in `Stats::failed`): a recurring job is never dead. Cancel it to
    /// delete the schedule; see also `Engine::pause_schedule`, `resume_schedule`,
    /// `schedules`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("timewheel-doc-cron-{}", std::process::id()));
    /// use timewheel::recur::Recurrence;
    /// use timewheel::{Config, Engine, JobSpec, Misfire};
    ///
    /// let engine = Engine::open(Config::new(&dir))?;
    /// let nightly = Recurrence::cron("0 2 * * *", "Europe/Berlin")?;
    /// let id = engine.schedule(JobSpec::recurring(nightly.clone()).misfire(Misfire::Skip))?;
    /// let now = timewheel::Clock::now_ms(&timewheel::SystemClock);
    /// assert_eq!(engine.get(id).unwrap().due_ms, nightly.next_after(now).unwrap());
    /// assert_eq!(engine.schedules(None, 10)?.len(), 1);
    /// # drop(engine);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok(())
    /// # }
    /// ```
    pub fn recurring(recurrence: crate::recur::Recurrence) -> Self {
        let mut spec = JobSpec::after(Duration::ZERO);
        spec.recurring = Some(Recurring {
            recurrence,
            misfire: Misfire::default(),
        });
        spec
    }

    /// A recurring job's misfire policy (no effect on other jobs).
    pub fn misfire(mut self, misfire: Misfire) -> Self {
        if let Some(r) = &mut self.recurring {
            r.misfire = misfire;
        }
        self
    }

    /// The tenant the job belongs to (0 unless set). Kept with the job; the dead-letter set
    /// can be listed and purged by tenant.
    pub fn tenant(mut self, tenant: u32) -> Self {
        self.tenant = tenant;
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

/// A snapshot of a live job. Finished jobs (completed, cancelled) are not kept; dead ones are
/// in the dead-letter set ([`Engine::dead_letter`](crate::Engine::dead_letter)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobInfo {
    /// The job.
    pub id: JobId,
    /// Its state.
    pub state: JobState,
    /// When it is due (after a failure: when it is tried again).
    pub due_ms: u64,
    /// Deliveries so far (0 before the first claim).
    pub attempt: u32,
    /// Failed attempts so far (a retryable `fail`, or a lease that ran out).
    pub failures: u32,
    /// The newest failure's reason, while the job is being retried.
    pub last_error: Option<Arc<str>>,
    /// Its tenant.
    pub tenant: u32,
    /// Its idempotency key.
    pub key: Option<Arc<[u8]>>,
    /// The payload.
    pub payload: Arc<[u8]>,
}

/// A job in the dead-letter set: its last attempt failed for good (a failure that was not
/// retryable, the last one allowed, or a lease that ran out on the last attempt allowed).
/// It stays until purged, also across restarts and compaction; `requeue_dead` schedules it
/// again with no failures counted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadJob {
    /// The job.
    pub id: JobId,
    /// Its tenant.
    pub tenant: u32,
    /// Its idempotency key (held until the job is purged).
    pub key: Option<Arc<[u8]>>,
    /// When it was last due.
    pub due_ms: u64,
    /// Deliveries it had (its last attempt).
    pub attempt: u32,
    /// Failed attempts it had, the last included.
    pub failures: u32,
    /// When it died.
    pub died_at_ms: u64,
    /// The last error.
    pub reason: Arc<str>,
    /// The lease of its last attempt ran out (rather than a worker failing it).
    pub expired: bool,
    /// The payload.
    pub payload: Arc<[u8]>,
    /// Whether the payload was marked binary.
    pub binary: bool,
}

/// Which dead jobs [`Engine::dead_letters`](crate::Engine::dead_letters) lists, in id order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadQuery {
    /// Only this tenant's; `None`: every tenant's.
    pub tenant: Option<u32>,
    /// Only ids after this one: where the previous page ended.
    pub after: Option<JobId>,
    /// Jobs per page, 1 to `Config::page_jobs_max`.
    pub limit: usize,
}

impl Default for DeadQuery {
    fn default() -> Self {
        DeadQuery {
            tenant: None,
            after: None,
            limit: 1_000,
        }
    }
}

impl DeadQuery {
    /// Only `tenant`'s dead jobs.
    pub fn tenant(mut self, tenant: u32) -> Self {
        self.tenant = Some(tenant);
        self
    }

    /// At most `limit` per page.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }
}

/// One page of [`Engine::dead_letters`](crate::Engine::dead_letters).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadPage {
    /// The dead jobs, in id order.
    pub jobs: Vec<DeadJob>,
    /// The query for the next page; `None` when this one is the last.
    pub next: Option<DeadQuery>,
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

/// The hash of a job id, from its sequence number ([`JobId::seq`]: the id without its
/// home-bucket bits, which are the same for every job of an hour; unique per job).
///
/// Ids are handed out in sequence, and jobs scheduled together are usually fired, claimed and
/// finished together, so a run of [`ID_RUN`] consecutive sequence numbers keeps consecutive
/// slots: a batch walks memory in order and misses the cache once per run, not once per job
/// (a mixing hash costs a miss per job at millions of jobs). The runs themselves are placed by
/// a multiplicative mix, so the table has no long stretch of full groups.
///
/// That last part matters: the sequence number alone (the hash until 2026-12-02) packs a
/// million live jobs into a million consecutive full slots, and a lookup of an id that is not
/// there (a job just finished, an unknown id, a key's holder gone) probes group after full
/// group until it finds an empty one: 3-6 µs each at 1M jobs against 30-60 ns here (the test
/// below: 162 times a hit before, under 20 times now), under the state lock, thousands per
/// worker batch. The top 7 bits, which the table compares first, come from the run's mix: the
/// jobs of one run share them (giving each its own measured no faster: the run's entries are
/// in cache already).
#[derive(Default)]
pub(crate) struct IdHasher(u64);

/// Consecutive sequence numbers kept in consecutive slots of the job table (a power of two).
pub(crate) const ID_RUN_BITS: u32 = 6;
/// See [`IdHasher`].
const ID_RUN: u64 = 1 << ID_RUN_BITS;

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
        let seq = JobId(v).seq();
        let mut run = (seq >> ID_RUN_BITS).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // The product's high bits are its well-mixed ones: fold them into the low bits that
        // index the table.
        run ^= run >> 29;
        self.0 = (run << ID_RUN_BITS) | (seq & (ID_RUN - 1));
    }
}

pub(crate) type IdBuild = BuildHasherDefault<IdHasher>;
