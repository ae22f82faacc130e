//! The table of live jobs: what the engine keeps per job, and the hash that keeps it compact.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::job::{JobId, JobState};
use crate::wheel::TimerKey;

/// One live job.
#[derive(Debug)]
pub(crate) struct Job {
    pub due_ms: u64,
    /// Deliveries so far: the attempt of the newest claim (0 before the first).
    pub attempt: u32,
    /// Failed attempts (a retryable fail, a lease that ran out), counted against the job's
    /// `max_attempts`.
    pub failures: u32,
    pub state: JobState,
    /// The log's last word on this job is the claim of `attempt`, with no expiry after it:
    /// the job is `Running`, or its lease ran out in memory (then it is `Ready` again, and the
    /// next cancel, reschedule or claim writes the `Expire` first).
    pub lease_open: bool,
    /// A live call is appending a change of this job outside the state lock: other calls
    /// wait for it to be applied before they look at the job (`Shared::settled`).
    pub busy: bool,
    pub binary: bool,
    /// A copy of this job is in the files of a bucket beyond the resident horizon: when the job
    /// goes (finished), that copy must not come back when the bucket is loaded.
    pub far_copy: bool,
    pub payload: Payload,
    /// Its entry in the due wheel while `Scheduled`, or in the lease wheel while `Ready`
    /// (the deadline for a claim, after which the id is queued again) or `Running` (the lease).
    pub timer: Option<TimerKey>,
    /// `Ready`: when it entered the ready queue. `Running`: when its lease runs out.
    pub at_ms: u64,
    /// The LSN of the newest record applied to it (0: as a bucket file holds it). A pass
    /// that folded the journal only up to an LSN below this has not seen its newest state, so
    /// memory may not let it go (`State::evict`).
    pub lsn: u64,
}

/// What few jobs have: a tenant, a retry policy of their own, a failure's reason. Kept beside
/// the table (in `State::extra`), only for the jobs that have any of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Extra {
    pub tenant: u32,
    /// 0: the engine's default.
    pub max_attempts: u32,
    pub backoff: Option<(u32, u32)>,
    pub last_error: Option<Arc<str>>,
    /// The idempotency key (also in `State::keys`).
    pub key: Option<Arc<[u8]>>,
    /// A recurring job's schedule.
    pub recurring: Option<Arc<crate::job::Recurring>>,
}

impl Extra {
    pub fn is_empty(&self) -> bool {
        *self == Extra::default()
    }
}

/// A job in the dead-letter set.
#[derive(Debug)]
pub(crate) struct Dead {
    pub due_ms: u64,
    pub attempt: u32,
    pub failures: u32,
    pub died_at_ms: u64,
    pub expired: bool,
    pub reason: Arc<str>,
    pub binary: bool,
    pub payload: Payload,
    /// Tenant and retry policy (the reason is `reason`).
    pub extra: Extra,
    /// A live call is appending a requeue or purge of it.
    pub busy: bool,
    /// Like `Job::far_copy`.
    pub far_copy: bool,
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
    /// Claims since open (each delivery a worker took).
    pub claimed: u64,
    pub redelivered: u64,
    /// Ready jobs nobody claimed within the lease, queued again.
    pub requeued: u64,
    /// Failed attempts followed by a retry, since open.
    pub retried: u64,
    /// Schedules that named the key of an existing job, since open.
    pub deduplicated: u64,
}

/// The hash of a job id. Ids are handed out in sequence, so the id's sequence number
/// ([`JobId::seq`], the id without its home-bucket bits, which are the same for every job of an
/// hour), in the low bits the table indexes by, puts jobs scheduled together in neighbouring
/// buckets: a batch of inserts walks memory in order instead of missing the cache once per job
/// (SipHash, or any mixing hash, costs a cache miss per job at millions of jobs). Sequence
/// numbers are unique per job, so they alone tell live jobs apart. The top 7 bits, which the
/// table compares to tell keys in one group apart, come from a multiplicative mix of the whole
/// id so that they vary.
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
        let seq = JobId(v).seq();
        self.0 = (seq & !TOP7) | (v.wrapping_mul(0x9E37_79B9_7F4A_7C15) & TOP7);
    }
}

pub(crate) type JobMap = HashMap<JobId, Job, BuildHasherDefault<IdHasher>>;
pub(crate) type ExtraMap = HashMap<JobId, Extra, BuildHasherDefault<IdHasher>>;
/// Idempotency keys of the jobs that have one, live or dead, resident or not.
pub(crate) type KeyMap = HashMap<Arc<[u8]>, JobId>;
pub(crate) type IdSet = std::collections::HashSet<JobId, BuildHasherDefault<IdHasher>>;
