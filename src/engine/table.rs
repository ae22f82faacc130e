//! The table of live jobs: what the engine keeps per job, and the hash that keeps it compact.

use std::collections::HashMap;
use std::sync::Arc;

use crate::job::{ID_RUN_BITS, IdBuild, JobId, JobState};
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
    pub binary: bool,
    /// [`busy`](Job::busy) and [`far_copy`](Job::far_copy), in a byte: the job stays within
    /// 72 bytes (a slot of the job table with its id, 80).
    pub marks: Marks,
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

/// Two rarely set flags of a [`Job`], in a byte.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Marks(u8);

impl Marks {
    const BUSY: u8 = 1;
    const FAR_COPY: u8 = 2;

    fn set(&mut self, bit: u8, on: bool) {
        if on {
            self.0 |= bit;
        } else {
            self.0 &= !bit;
        }
    }
}

const _: () = assert!(std::mem::size_of::<Job>() == 72);

impl Job {
    /// A live call is appending a change of this job outside the state lock: other calls
    /// wait for it to be applied before they look at the job (`Shared::settled`).
    pub fn busy(&self) -> bool {
        self.marks.0 & Marks::BUSY != 0
    }

    pub fn set_busy(&mut self, busy: bool) {
        self.marks.set(Marks::BUSY, busy);
    }

    /// A copy of this job is in the files of a bucket beyond the resident horizon: when the
    /// job goes (finished), that copy must not come back when the bucket is loaded.
    pub fn far_copy(&self) -> bool {
        self.marks.0 & Marks::FAR_COPY != 0
    }

    pub fn set_far_copy(&mut self, far_copy: bool) {
        self.marks.set(Marks::FAR_COPY, far_copy);
    }
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

pub(crate) type JobMap = super::job_table::JobTable;
pub(crate) type ExtraMap = IdMap<Extra>;
/// Each keyed job's key hash ([`key_hash`]), by job: what finds the job's key in [`KeyIndex`].
pub(crate) type KeyOfMap = IdMap<u64>;
/// A call's own set of ids (to find the same id twice in its arguments): small, never sharded.
pub(crate) type CallIdSet = std::collections::HashSet<JobId, IdBuild>;

/// Bits of a shard's index: the engine's tables that grow with the jobs are split in 256
/// shards.
const SHARD_BITS: u32 = 8;
/// Shards of each table that grows with the jobs.
pub(crate) const SHARDS: usize = 1 << SHARD_BITS;
/// The fewest entries [`IdMap::reserve`] makes room for ahead: below it, about 64 a shard,
/// each shard grows by itself (moving at most a few dozen entries at a time).
pub(super) const RESERVE_MIN: usize = SHARDS * 64;

/// Bits of the well-mixed number a shard is picked from (see [`SHARD_OF`]).
const PICK_BITS: u32 = 12;

/// The shard for each value of a well-mixed 12-bit number, with shard `i` picked in
/// proportion to `256 + i`: the shards hold from one to two parts of the entries.
///
/// Why not evenly: shards filled evenly reach their growth points at about the same total, so
/// one apply of a batch (1 024 jobs under the state lock) could pay for a dozen growths or
/// more (up to 114,688 entries moved within 1 024 inserts at two million, counted by the test
/// below), and every shard is as empty after it as one table would be. Unevenly, shard `i`
/// grows when the total reaches its threshold times `98_176 / (256 + i)`: each doubling's 256
/// growths are spread over the doubling (at most three within 1 024 inserts, counted), and so
/// is the shards' fill.
const SHARD_OF: [u8; 1 << PICK_BITS] = {
    const WEIGHT_TOTAL: u64 =
        (SHARDS as u64) * (SHARDS as u64) + (SHARDS as u64 - 1) * (SHARDS as u64) / 2;
    let mut table = [0u8; 1 << PICK_BITS];
    let (mut j, mut shard, mut below) = (0, 0u64, 0u64);
    while j < table.len() {
        // The midpoint of pick value `j`, in units of weight.
        let at = (2 * j as u64 + 1) * WEIGHT_TOTAL / (2 << PICK_BITS);
        while below + SHARDS as u64 + shard <= at {
            below += SHARDS as u64 + shard;
            shard += 1;
        }
        table[j] = shard as u8;
        j += 1;
    }
    table
};

/// The shard of job `id`: by run of consecutive sequence numbers (see [`IdHasher`]), so that a
/// batch's jobs still share memory runs within their shards; the run mixed by a constant other
/// than the shard's hash's, and the product's top bits looked up in [`SHARD_OF`].
#[inline]
pub(super) fn shard_of(id: JobId) -> usize {
    let run = id.seq() >> ID_RUN_BITS;
    usize::from(SHARD_OF[(run.wrapping_mul(0xD6E8_FEB8_6659_FD93) >> (64 - PICK_BITS)) as usize])
}

/// What shard `shard` of a table reserved for `additional` more entries makes room for: its
/// part of them (`256 + shard` parts, see [`SHARD_OF`]) with a margin.
pub(super) fn reserve_in_shard(additional: usize, shard: usize) -> usize {
    let parts = (SHARDS * SHARDS + (SHARDS - 1) * SHARDS / 2) as u64;
    let expected = (additional as u64 * (SHARDS + shard) as u64).div_ceil(parts) as usize;
    expected + expected / 8 + 8
}

/// A table keyed by job id, split in [`SHARDS`] hash maps that each grow on their own.
///
/// A `HashMap` grows in one call: it moves every entry into a table twice the size. For the
/// job table, under the state lock, that one call held up every other call and the timer
/// thread for 55 ms at a million jobs and 120-220 ms at two million (`table_growth_probe` in
/// docs/benchmarks.md), and the pause doubles with the jobs. Split, a growth moves one shard's
/// entries: from a 384th to a 192nd of the jobs (see [`SHARD_OF`]). What it costs is a
/// multiplication and a table lookup per id, and 8 KiB per table.
pub(crate) struct IdMap<V> {
    shards: Box<[HashMap<JobId, V, IdBuild>]>,
}

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap {
            shards: (0..SHARDS).map(|_| HashMap::default()).collect(),
        }
    }
}

impl<V: std::fmt::Debug> std::fmt::Debug for IdMap<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V> IdMap<V> {
    #[inline]
    fn shard(&self, id: &JobId) -> &HashMap<JobId, V, IdBuild> {
        &self.shards[shard_of(*id)]
    }

    #[inline]
    fn shard_mut(&mut self, id: &JobId) -> &mut HashMap<JobId, V, IdBuild> {
        &mut self.shards[shard_of(*id)]
    }

    #[inline]
    pub fn get(&self, id: &JobId) -> Option<&V> {
        self.shard(id).get(id)
    }

    #[inline]
    pub fn get_mut(&mut self, id: &JobId) -> Option<&mut V> {
        self.shard_mut(id).get_mut(id)
    }

    #[inline]
    pub fn contains_key(&self, id: &JobId) -> bool {
        self.shard(id).contains_key(id)
    }

    /// Inserts or replaces; the value replaced, if any.
    #[inline]
    pub fn insert(&mut self, id: JobId, value: V) -> Option<V> {
        self.shard_mut(&id).insert(id, value)
    }

    #[inline]
    pub fn remove(&mut self, id: &JobId) -> Option<V> {
        self.shard_mut(id).remove(id)
    }

    /// The value of `id`, inserted as `V::default()` if there is none.
    pub fn get_or_default(&mut self, id: JobId) -> &mut V
    where
        V: Default,
    {
        self.shards[shard_of(id)].entry(id).or_default()
    }

    /// Every entry, shard by shard (in no particular order, as a `HashMap`'s).
    pub fn iter(&self) -> impl Iterator<Item = (&JobId, &V)> {
        self.shards.iter().flat_map(HashMap::iter)
    }

    /// Entries in all (a sum over the shards: only the tests ask).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shards.iter().map(HashMap::len).sum()
    }

    /// Room for `additional` more entries, as [`JobTable::reserve`](super::job_table::JobTable)
    /// makes: the model of its hash tables in its tests.
    #[cfg(test)]
    pub fn reserve(&mut self, additional: usize) {
        if additional >= RESERVE_MIN {
            for (i, shard) in self.shards.iter_mut().enumerate() {
                shard.reserve(reserve_in_shard(additional, i));
            }
        }
    }
}

impl<V> std::ops::Index<&JobId> for IdMap<V> {
    type Output = V;

    /// The value of `id`, which must be there (as `HashMap`'s index).
    fn index(&self, id: &JobId) -> &V {
        self.get(id).expect("an id the table holds")
    }
}

/// A set of job ids that grows with the jobs: sharded as [`IdMap`] is.
#[derive(Debug, Default)]
pub(crate) struct IdSet(IdMap<()>);

impl IdSet {
    /// Whether `id` was not in the set.
    #[inline]
    pub fn insert(&mut self, id: JobId) -> bool {
        self.0.insert(id, ()).is_none()
    }

    /// Whether `id` was in the set.
    #[inline]
    pub fn remove(&mut self, id: &JobId) -> bool {
        self.0.remove(id).is_some()
    }

    #[inline]
    pub fn contains(&self, id: &JobId) -> bool {
        self.0.contains_key(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &JobId> {
        self.0.iter().map(|(id, ())| id)
    }
}

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
#[derive(Debug)]
pub(crate) struct KeyIndex {
    /// Sharded by the key's hash, as [`IdMap`] is by id and for the same reason (a growth
    /// moves one shard's keys); the shard from bits that neither the shard's bucket index
    /// (the low bits) nor its control byte (the top 7) uses.
    tables: Box<[hashbrown::HashTable<KeyEntry>]>,
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

/// The shard of a key of hash `hash`: bits 40-51, which neither a shard's bucket index (the
/// low bits) nor its control byte (the top 7) uses, looked up in [`SHARD_OF`].
#[inline]
fn key_shard(hash: u64) -> usize {
    usize::from(SHARD_OF[((hash >> 40) as usize) & ((1 << PICK_BITS) - 1)])
}

impl Default for KeyIndex {
    fn default() -> Self {
        KeyIndex {
            tables: (0..SHARDS).map(|_| hashbrown::HashTable::new()).collect(),
            unseen: Vec::new(),
        }
    }
}

impl KeyIndex {
    #[inline]
    fn table(&self, hash: u64) -> &hashbrown::HashTable<KeyEntry> {
        &self.tables[key_shard(hash)]
    }

    #[inline]
    fn table_mut(&mut self, hash: u64) -> &mut hashbrown::HashTable<KeyEntry> {
        &mut self.tables[key_shard(hash)]
    }

    fn find(&self, hash: u64, key: &[u8]) -> Option<&KeyEntry> {
        self.table(hash)
            .find(hash, |e| e.hash == hash && *e.key == *key)
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
        let entry =
            self.table_mut(hash)
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
        if let Ok(e) = self.table_mut(hash).find_entry(hash, |e| {
            e.hash == hash && (e.holder == id || *e.key == *key)
        }) && e.get().holder == id
        {
            e.remove();
        }
    }

    /// Lets go of the key of hash `hash` that `id` holds, if it does: the job finished.
    pub fn release_held(&mut self, hash: u64, id: JobId) {
        if let Ok(e) = self
            .table_mut(hash)
            .find_entry(hash, |e| e.hash == hash && e.holder == id)
        {
            e.remove();
        }
    }

    /// The key of hash `hash` that `id` holds.
    pub fn held_by(&self, hash: u64, id: JobId) -> Option<&Arc<[u8]>> {
        self.table(hash)
            .find(hash, |e| e.hash == hash && e.holder == id)
            .map(|e| &e.key)
    }

    /// Makes `id` the holder of `key` (a job replayed, or read back from a bucket) and returns
    /// the key's allocation, for the job's own record of its key; or `None`, and changes
    /// nothing, when another job holds `key`. One lookup.
    pub fn hold(&mut self, hash: u64, key: &[u8], id: JobId) -> Option<Arc<[u8]>> {
        let e = self
            .table_mut(hash)
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

/// A xorshift generator from `seed` (not 0): the random operations of the tables' tests.
#[cfg(test)]
pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
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

    #[test]
    fn every_shard_is_picked_in_proportion_to_its_weight() {
        let mut counts = [0usize; SHARDS];
        for &shard in &SHARD_OF {
            counts[usize::from(shard)] += 1;
        }
        let total: usize = counts.iter().sum();
        assert_eq!(total, 1 << PICK_BITS);
        for (i, &n) in counts.iter().enumerate() {
            // 4096 picks over weights 256..512: shard i's share is about 4096 (256 + i) / 98176.
            let expected = (1 << PICK_BITS) as f64 * (256 + i) as f64 / 98_176.0;
            assert!(
                (n as f64 - expected).abs() <= 1.0,
                "shard {i} picked {n} times, expected about {expected:.1}"
            );
        }
        assert!(SHARD_OF.is_sorted(), "picks ascend with the mixed number");
    }

    /// The sharded table against a `HashMap`: the same answers to every call, the same count.
    #[test]
    fn an_id_map_answers_as_a_hash_map() {
        let mut map: IdMap<u64> = IdMap::default();
        let mut model: HashMap<JobId, u64> = HashMap::new();
        let mut next = xorshift(0x1234_5678_9abc_def0);
        for step in 0..200_000u64 {
            let r = next();
            let id = JobId::compose(r % 50_000, 493_000 + r % 3);
            match r >> 60 {
                0..=6 => assert_eq!(map.insert(id, step), model.insert(id, step)),
                7..=10 => assert_eq!(map.remove(&id), model.remove(&id)),
                11 => {
                    *map.get_or_default(id) += 1;
                    *model.entry(id).or_default() += 1;
                }
                12 => {
                    if let Some(v) = map.get_mut(&id) {
                        *v += 7;
                    }
                    if let Some(v) = model.get_mut(&id) {
                        *v += 7;
                    }
                }
                _ => {
                    assert_eq!(map.get(&id), model.get(&id));
                    assert_eq!(map.contains_key(&id), model.contains_key(&id));
                }
            }
            assert_eq!(map.len(), model.len());
        }
        let mut all: Vec<(JobId, u64)> = map.iter().map(|(&k, &v)| (k, v)).collect();
        all.sort();
        let mut expected: Vec<(JobId, u64)> = model.into_iter().collect();
        expected.sort();
        assert_eq!(all, expected, "iteration visits every entry once");
        assert_eq!(map.iter().count(), map.len());
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
        let mut map: HashMap<JobId, [u64; 10], IdBuild> = HashMap::default();
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
