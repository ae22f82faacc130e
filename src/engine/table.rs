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
    /// `State::crashes` at the job's newest record that sets it
    /// ([`crate::record::Event::sets_crashes_seen`]): while it waits, each crash since may
    /// have cut one claim of it, which spent a number (`state::next_attempt`).
    pub crashes_seen: u32,
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

/// What few jobs have: a tenant, a retry policy of their own, a failure's reason, a recurrence.
/// Kept beside the table (in `State::extra`), only for the jobs that have any of it. A job's
/// idempotency key is not here: the key table holds it, and `State::key_of` the key's hash
/// (an entry here cost a keyed schedule a fifth of its time: docs/benchmarks.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Extra {
    pub tenant: u32,
    /// 0: the engine's default.
    pub max_attempts: u32,
    pub backoff: Option<(u32, u32)>,
    pub last_error: Option<Arc<str>>,
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
const ID_RUN_BITS: u32 = 6;
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

pub(crate) type JobMap = HashMap<JobId, Job, BuildHasherDefault<IdHasher>>;
pub(crate) type ExtraMap = HashMap<JobId, Extra, BuildHasherDefault<IdHasher>>;
/// Each keyed job's key hash ([`key_hash`]), by job: what finds the job's key in [`KeyIndex`].
pub(crate) type KeyOfMap = HashMap<JobId, u64, BuildHasherDefault<IdHasher>>;
pub(crate) type IdSet = std::collections::HashSet<JobId, BuildHasherDefault<IdHasher>>;

/// The hash of an idempotency key in [`KeyIndex`]: SipHash with a key chosen at random once
/// per process (keys come from users: a fixed hash would let one make every key collide).
/// Callers hash a key once, outside the state lock, and pass the hash to every lookup.
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    use std::hash::BuildHasher as _;
    static HASHER: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    HASHER
        .get_or_init(std::hash::RandomState::new)
        .hash_one(key)
}

/// Idempotency keys, in one table: each key with the one job that holds it (a visible job,
/// live or dead, resident or not, or a job whose schedule naming it is appended but not
/// visible yet). One entry per key, found by a hash computed once per call ([`key_hash`]),
/// where two maps and a hash per lookup cost a keyed schedule eight SipHash runs.
///
/// Whether a holder is visible is not kept in its entry: a batch's new jobs have consecutive
/// sequence numbers, and the batch's range stays in `unseen` from the append until its
/// commit makes them visible. So a commit touches one range, not each of its keys: a second
/// probe per key there (one cache miss for the control group and one for the entry, among a
/// million keys) was the largest part of a keyed schedule's extra cost.
#[derive(Debug, Default)]
pub(crate) struct KeyIndex {
    table: hashbrown::HashTable<KeyEntry>,
    /// Sequence ranges of jobs appended and not visible yet: one per keyed batch between its
    /// append and its commit (or the sync that makes a dropped one visible). Only lookups by
    /// key alone read it.
    unseen: Vec<std::ops::Range<u64>>,
}

#[derive(Debug)]
struct KeyEntry {
    hash: u64,
    /// One allocation per key (shared with the pending batch that took it, until its commit).
    key: Arc<[u8]>,
    holder: JobId,
}

impl KeyIndex {
    fn find(&self, hash: u64, key: &[u8]) -> Option<&KeyEntry> {
        self.table.find(hash, |e| e.hash == hash && *e.key == *key)
    }

    /// Whether `id`'s schedule is appended and not visible yet.
    fn is_unseen(&self, id: JobId) -> bool {
        let seq = id.seq();
        self.unseen.iter().any(|r| r.contains(&seq))
    }

    /// The visible job holding `key`.
    pub fn held(&self, hash: u64, key: &[u8]) -> Option<JobId> {
        self.find(hash, key)
            .map(|e| e.holder)
            .filter(|&id| !self.is_unseen(id))
    }

    /// Who a new schedule of `key` finds: the job holding it, visible or not. If there is
    /// none, `id` (a job of a batch that [`note_unseen`](Self::note_unseen) names before the
    /// state lock is let go) becomes the holder and `None` is returned. One lookup.
    pub fn take_or_holder(&mut self, hash: u64, key: &Arc<[u8]>, id: JobId) -> Option<JobId> {
        let entry = self
            .table
            .entry(hash, |e| e.hash == hash && *e.key == **key, |e| e.hash);
        match entry {
            hashbrown::hash_table::Entry::Occupied(e) => Some(e.get().holder),
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert(KeyEntry {
                    hash,
                    key: Arc::clone(key),
                    holder: id,
                });
                None
            }
        }
    }

    /// The jobs with sequence numbers in `seqs` are appended, not visible yet.
    pub fn note_unseen(&mut self, seqs: std::ops::Range<u64>) {
        if !seqs.is_empty() {
            self.unseen.push(seqs);
        }
    }

    /// The jobs of the unseen range ending at `end` are visible up to sequence `up_to`
    /// (exclusive): all of them once `up_to` reaches `end`, or when the batch's append failed
    /// and its keys were let go.
    pub fn seen_up_to(&mut self, end: u64, up_to: u64) {
        if let Some(i) = self.unseen.iter().position(|r| r.end == end) {
            let r = &mut self.unseen[i];
            r.start = r.start.max(up_to);
            if r.is_empty() {
                self.unseen.swap_remove(i);
            }
        }
    }

    /// Lets go of `key` if `id` holds it (visible or not): the job finished, or its append
    /// failed.
    pub fn release(&mut self, hash: u64, key: &[u8], id: JobId) {
        if let Ok(e) = self.table.find_entry(hash, |e| {
            e.hash == hash && (e.holder == id || *e.key == *key)
        }) && e.get().holder == id
        {
            e.remove();
        }
    }

    /// Lets go of the key of hash `hash` that `id` holds, if it does: the job finished.
    pub fn release_held(&mut self, hash: u64, id: JobId) {
        if let Ok(e) = self
            .table
            .find_entry(hash, |e| e.hash == hash && e.holder == id)
        {
            e.remove();
        }
    }

    /// The key of hash `hash` that `id` holds.
    pub fn held_by(&self, hash: u64, id: JobId) -> Option<&Arc<[u8]>> {
        self.table
            .find(hash, |e| e.hash == hash && e.holder == id)
            .map(|e| &e.key)
    }

    /// Makes `id` the holder of `key` (a job replayed, or read back from a bucket) and returns
    /// the key's allocation, for the job's own record of its key; or `None`, and changes
    /// nothing, when another job holds `key`. One lookup.
    pub fn hold(&mut self, hash: u64, key: &[u8], id: JobId) -> Option<Arc<[u8]>> {
        let e = self
            .table
            .entry(
                hash,
                |e| e.hash == hash && (e.holder == id || *e.key == *key),
                |e| e.hash,
            )
            .or_insert_with(|| KeyEntry {
                hash,
                key: Arc::from(key),
                holder: id,
            })
            .into_mut();
        (e.holder == id).then(|| Arc::clone(&e.key))
    }

    /// Whether `id` holds `key`, visible or not (for checks).
    pub fn holds(&self, hash: u64, key: &[u8], id: JobId) -> bool {
        self.find(hash, key).is_some_and(|e| e.holder == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// The fastest of three timings of `f` over `ids`.
    fn fastest(ids: &[JobId], f: impl Fn(&JobId) -> bool) -> Duration {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                let found = ids.iter().filter(|id| f(id)).count();
                std::hint::black_box(found);
                t.elapsed()
            })
            .min()
            .expect("three runs")
    }

    /// A lookup of an id that is not in the table (a job just finished, an unknown id) must
    /// cost about what a lookup of a live job costs, also when the live jobs are a million
    /// consecutive ids. Hashed by the sequence number alone, the ids filled a million
    /// consecutive slots, and such a lookup probed group after full group to the end of them:
    /// 3-6 µs against 20 ns for a hit, under the state lock, once per completed job in a
    /// worker's batch (fire lateness beside compaction: p50 1-2 s). A ratio, not a time: the
    /// machines that run this are shared.
    #[test]
    fn a_missing_id_costs_about_what_a_present_one_costs() {
        const N: u64 = 1 << 20;
        let id = |seq: u64| JobId::compose(seq, 493_000 + seq / 100_000);
        let mut map: HashMap<JobId, [u64; 10], BuildHasherDefault<IdHasher>> = HashMap::default();
        for seq in 0..N {
            map.insert(id(seq), [seq; 10]);
        }
        // The oldest jobs finish, as a worker finishes them: in order.
        let gone: Vec<JobId> = (0..N / 8).map(id).collect();
        for g in &gone {
            map.remove(g);
        }
        let live: Vec<JobId> = (N / 2..N / 2 + N / 8).map(id).collect();
        let hit = fastest(&live, |i| map.contains_key(i));
        let miss = fastest(&gone, |i| map.contains_key(i));
        assert!(
            miss < hit * 20,
            "{} lookups of missing ids took {miss:?}, of present ones {hit:?}",
            gone.len()
        );
    }
}
