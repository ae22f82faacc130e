//! The table of live jobs: each job in a slot of a chunked slab that never moves, found by id
//! through sharded hash tables of 4-byte slot numbers.
//!
//! Why not an [`IdMap<Job>`](super::table::IdMap): a hash table holds its entries inline, and
//! keeps from an eighth to more than half of its places empty (it doubles when seven eighths
//! are full). With an 80-byte job and its id in each entry, that spare room cost about 50
//! bytes per job on top of the 88 in use. Here the tables hold a `u32` per job, and their
//! spare room costs a few bytes; the slab holds each job once, in chunks of [`CHUNK`] slots
//! that are allocated as the jobs grow and never moved, so a growth under the state lock moves
//! 4-byte entries only. The harness's `resident` workload (a million pending jobs with 16-byte
//! payloads, heap bytes per job): 189 with the `IdMap`, 133 with this table, 125 once the job
//! shrank to 72 bytes (the timer key's generation never 0, two rare flags in a byte).
//!
//! The tables see the same inserts and removes, hashed alike, as an `IdMap` would: they visit
//! the jobs in the same order (which the simulation's trace digest checks).

use std::hash::BuildHasher as _;

use hashbrown::HashTable;

use super::table::{Job, RESERVE_MIN, SHARDS, reserve_in_shard, shard_of};
use crate::job::{IdBuild, JobId};

/// Slots per chunk of the slab: 80 KiB with 80-byte slots.
const CHUNK_BITS: u32 = 10;
const CHUNK: usize = 1 << CHUNK_BITS;

/// A slot of the slab: a job and its id, or a link in the list of free slots.
enum Slot {
    Full(JobId, Job),
    /// The next free slot (`u32::MAX`: none).
    Free(u32),
}

const NO_SLOT: u32 = u32::MAX;
const _: () = assert!(std::mem::size_of::<Slot>() == 80, "a job and its id");

/// Where a job is in the table: its slot, the same for as long as the job is in the table
/// (slots never move). The wheels hold it as their timers' value, so that a fire or a lease
/// running out reaches its job without a lookup (see [`JobTable::at`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct At(u32);

/// The live jobs by id. See the module's documentation.
pub(crate) struct JobTable {
    /// Per shard (see [`shard_of`]), the slots of its jobs, hashed by the jobs' ids.
    shards: Box<[HashTable<u32>]>,
    chunks: Vec<Box<[Slot]>>,
    /// The first free slot, `NO_SLOT` if every slot of every chunk is full.
    free: u32,
    len: usize,
}

impl Default for JobTable {
    fn default() -> Self {
        JobTable {
            shards: (0..SHARDS).map(|_| HashTable::new()).collect(),
            chunks: Vec::new(),
            free: NO_SLOT,
            len: 0,
        }
    }
}

impl std::fmt::Debug for JobTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[inline]
fn hash(id: JobId) -> u64 {
    IdBuild::default().hash_one(id)
}

/// Slot `slot` of `chunks`.
#[inline]
fn cell(chunks: &[Box<[Slot]>], slot: u32) -> &Slot {
    &chunks[(slot >> CHUNK_BITS) as usize][slot as usize & (CHUNK - 1)]
}

#[inline]
fn cell_mut(chunks: &mut [Box<[Slot]>], slot: u32) -> &mut Slot {
    &mut chunks[(slot >> CHUNK_BITS) as usize][slot as usize & (CHUNK - 1)]
}

/// The job of slot `slot` of `chunks`, which must be full.
#[inline]
fn full(chunks: &[Box<[Slot]>], slot: u32) -> (&JobId, &Job) {
    match cell(chunks, slot) {
        Slot::Full(id, job) => (id, job),
        Slot::Free(_) => unreachable!("slot {slot} is in a table and free"),
    }
}

#[inline]
fn full_mut(chunks: &mut [Box<[Slot]>], slot: u32) -> (&JobId, &mut Job) {
    match cell_mut(chunks, slot) {
        Slot::Full(id, job) => (id, job),
        Slot::Free(_) => unreachable!("slot {slot} is in a table and free"),
    }
}

/// A free slot of `chunks` (a new chunk if `free` is `NO_SLOT`), now holding `id` and `job`.
fn take_slot(chunks: &mut Vec<Box<[Slot]>>, free: &mut u32, id: JobId, job: Job) -> u32 {
    if *free == NO_SLOT {
        let base = u32::try_from(chunks.len() * CHUNK)
            .ok()
            .filter(|base| base.checked_add(CHUNK as u32).is_some())
            .expect("fewer than 4 billion jobs in memory");
        chunks.push(
            (0..CHUNK as u32)
                .map(|i| {
                    Slot::Free(if i + 1 < CHUNK as u32 {
                        base + i + 1
                    } else {
                        NO_SLOT
                    })
                })
                .collect(),
        );
        *free = base;
    }
    let slot = *free;
    match std::mem::replace(cell_mut(chunks, slot), Slot::Full(id, job)) {
        Slot::Free(next) => *free = next,
        Slot::Full(..) => unreachable!("slot {slot} is on the free list and full"),
    }
    slot
}

impl JobTable {
    /// An empty table with room for `capacity` jobs in its hash tables.
    pub fn with_capacity(capacity: usize) -> Self {
        let mut table = Self::default();
        if capacity > 0 {
            table.reserve(capacity);
        }
        table
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The slot of `id`, if it is in the table.
    #[inline]
    fn find(&self, id: JobId) -> Option<u32> {
        let chunks = &self.chunks;
        self.shards[shard_of(id)]
            .find(hash(id), |&slot| *full(chunks, slot).0 == id)
            .copied()
    }

    #[inline]
    pub fn get(&self, id: &JobId) -> Option<&Job> {
        let slot = self.find(*id)?;
        Some(full(&self.chunks, slot).1)
    }

    #[inline]
    pub fn get_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        let slot = self.find(*id)?;
        Some(full_mut(&mut self.chunks, slot).1)
    }

    /// The job `id` and where it is.
    #[inline]
    pub fn get_at_mut(&mut self, id: &JobId) -> Option<(At, &mut Job)> {
        let slot = self.find(*id)?;
        Some((At(slot), full_mut(&mut self.chunks, slot).1))
    }

    #[inline]
    pub fn contains_key(&self, id: &JobId) -> bool {
        self.find(*id).is_some()
    }

    /// Inserts or replaces; the job replaced, if any.
    #[cfg(test)]
    pub fn insert(&mut self, id: JobId, job: Job) -> Option<Job> {
        let chunks = &self.chunks;
        // `entry`, as `HashMap::insert`: it makes room before it looks for a place, where
        // `insert_unique` would reuse a removed entry's place first, and the tables would then
        // differ from an `IdMap`'s (and visit the jobs in another order).
        let entry = self.shards[shard_of(id)].entry(
            hash(id),
            |&slot| *full(chunks, slot).0 == id,
            |&slot| hash(*full(chunks, slot).0),
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(e) => {
                let slot = *e.get();
                Some(std::mem::replace(full_mut(&mut self.chunks, slot).1, job))
            }
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert(take_slot(&mut self.chunks, &mut self.free, id, job));
                self.len += 1;
                None
            }
        }
    }

    /// Inserts a job not in the table yet (asserted), and says where it is.
    pub fn insert_new(&mut self, id: JobId, job: Job) -> At {
        let chunks = &self.chunks;
        // `entry`, as `insert` (see there).
        let entry = self.shards[shard_of(id)].entry(
            hash(id),
            |&slot| *full(chunks, slot).0 == id,
            |&slot| hash(*full(chunks, slot).0),
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(_) => panic!("job {id} is in the table already"),
            hashbrown::hash_table::Entry::Vacant(v) => {
                let slot = take_slot(&mut self.chunks, &mut self.free, id, job);
                v.insert(slot);
                self.len += 1;
                At(slot)
            }
        }
    }

    pub fn remove(&mut self, id: &JobId) -> Option<Job> {
        let chunks = &self.chunks;
        let entry = self.shards[shard_of(*id)]
            .find_entry(hash(*id), |&slot| *full(chunks, slot).0 == *id)
            .ok()?;
        let (slot, _) = entry.remove();
        let freed = Slot::Free(self.free);
        let Slot::Full(_, job) = std::mem::replace(cell_mut(&mut self.chunks, slot), freed) else {
            unreachable!("slot {slot} is in a table and free");
        };
        self.free = slot;
        self.len -= 1;
        Some(job)
    }

    /// Room for `additional` more jobs in the hash tables, spread over the shards as ids spread
    /// over them (see [`IdMap::reserve`](super::table::IdMap::reserve)). The slab grows a chunk
    /// at a time and moves nothing when it does.
    pub fn reserve(&mut self, additional: usize) {
        if additional < RESERVE_MIN {
            return;
        }
        let chunks = &self.chunks;
        for (i, shard) in self.shards.iter_mut().enumerate() {
            shard.reserve(reserve_in_shard(additional, i), |&s| {
                hash(*full(chunks, s).0)
            });
        }
    }

    /// The jobs of shard `shard` (below [`SHARDS`]).
    pub fn shard_iter(&self, shard: usize) -> impl Iterator<Item = (&JobId, &Job)> {
        let chunks = &self.chunks;
        self.shards[shard]
            .iter()
            .map(move |&slot| full(chunks, slot))
    }

    /// Every job, shard by shard (in no particular order, as a `HashMap`'s).
    pub fn iter(&self) -> impl Iterator<Item = (&JobId, &Job)> {
        (0..SHARDS).flat_map(|shard| self.shard_iter(shard))
    }

    /// Calls `f` on every job, with where it is, in [`iter`](Self::iter)'s order.
    pub fn for_each_mut(&mut self, mut f: impl FnMut(JobId, At, &mut Job)) {
        for shard in self.shards.iter() {
            for &slot in shard.iter() {
                let (&id, job) = full_mut(&mut self.chunks, slot);
                f(id, At(slot), job);
            }
        }
    }

    /// The job `id` at `at`, without a lookup: asserts that the slot still holds `id`.
    pub fn at_mut(&mut self, at: At, id: JobId) -> &mut Job {
        let (&held, job) = full_mut(&mut self.chunks, at.0);
        assert_eq!(held, id, "slot {} moved on since it was handed out", at.0);
        job
    }

    /// The job at `at` and its id, without a lookup. Asserts that the slot is full; the caller
    /// checks that it holds the job it means (a wheel's caller: that the job's timer is the
    /// one that fired).
    #[inline]
    pub fn at(&mut self, at: At) -> (JobId, &mut Job) {
        let (&id, job) = full_mut(&mut self.chunks, at.0);
        (id, job)
    }

    pub fn values(&self) -> impl Iterator<Item = &Job> {
        self.iter().map(|(_, job)| job)
    }
}

impl std::ops::Index<&JobId> for JobTable {
    type Output = Job;

    /// The job `id`, which must be there (as `HashMap`'s index).
    fn index(&self, id: &JobId) -> &Job {
        self.get(id).expect("an id the table holds")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::table::{IdMap, Payload, xorshift};
    use crate::job::JobState;

    fn job(due_ms: u64) -> Job {
        Job {
            due_ms,
            attempt: 0,
            crashes_seen: 0,
            failures: 0,
            state: JobState::Scheduled,
            lease_open: false,
            binary: false,
            marks: Default::default(),
            payload: Payload::new(&due_ms.to_le_bytes()),
            timer: None,
            at_ms: 0,
            lsn: due_ms,
        }
    }

    /// The slab's table against an `IdMap` holding the same jobs inline: the same answers to
    /// every call, and the same order of iteration (the simulation's trace depends on it).
    #[test]
    fn the_job_table_answers_and_iterates_as_an_id_map() {
        let mut table = JobTable::default();
        let mut model: IdMap<u64> = IdMap::default();
        let mut next = xorshift(0x0dd0_1234_5678_9abc);
        for step in 0..300_000u64 {
            let r = next();
            let id = JobId::compose(r % 60_000, 493_000 + r % 3);
            match r >> 60 {
                0..=6 => assert_eq!(
                    table.insert(id, job(step)).map(|j| j.due_ms),
                    model.insert(id, step)
                ),
                7..=10 => assert_eq!(table.remove(&id).map(|j| j.lsn), model.remove(&id)),
                11 => {
                    if let Some(j) = table.get_mut(&id) {
                        j.due_ms += 7;
                        j.lsn += 7;
                    }
                    if let Some(v) = model.get_mut(&id) {
                        *v += 7;
                    }
                }
                12 if step % 50_000 == 0 => {
                    table.reserve(70_000);
                    model.reserve(70_000);
                }
                _ => {
                    assert_eq!(table.get(&id).map(|j| j.due_ms), model.get(&id).copied());
                    assert_eq!(table.contains_key(&id), model.contains_key(&id));
                }
            }
            assert_eq!(table.len(), model.len());
        }
        let ours: Vec<(JobId, u64)> = table.iter().map(|(&id, j)| (id, j.due_ms)).collect();
        let theirs: Vec<(JobId, u64)> = model.iter().map(|(&id, &v)| (id, v)).collect();
        assert_eq!(ours, theirs, "the same jobs in the same order");
        let mut visited = Vec::new();
        let mut places = Vec::new();
        table.for_each_mut(|id, at, j| {
            j.at_ms = 1;
            visited.push((id, j.due_ms));
            places.push((id, at));
        });
        assert_eq!(visited, theirs, "for_each_mut visits in iter's order");
        for &(id, at) in &places {
            let due_ms = table[&id].due_ms;
            assert_eq!(table.at_mut(at, id).due_ms, due_ms, "job {id:?}");
        }
        assert!(table.values().all(|j| j.at_ms == 1));
        // Every job is still whole: no slot was handed out twice.
        for (id, j) in table.iter() {
            assert_eq!(j.due_ms, j.lsn, "job {id:?}");
            let bytes: [u8; 8] = (*j.payload.to_shared()).try_into().expect("8 bytes");
            assert_eq!((j.lsn - u64::from_le_bytes(bytes)) % 7, 0, "job {id:?}");
        }
    }

    /// A table reserved for `n` entries takes `n` consecutive ids without any shard growing
    /// (what replay relies on: an open reserves the table for the jobs it replays).
    #[test]
    fn a_reserved_table_takes_its_entries_without_growing() {
        const N: u64 = 300_000;
        let mut map = JobTable::with_capacity(N as usize);
        let before: Vec<usize> = map.shards.iter().map(HashTable::capacity).collect();
        for seq in 0..N {
            map.insert(JobId::compose(seq, 493_000), job(seq));
        }
        let after: Vec<usize> = map.shards.iter().map(HashTable::capacity).collect();
        assert_eq!(before, after, "no shard grew");
    }

    /// What the sharding is for: no insert moves more than a small part of the table, and the
    /// moves are spread over the inserts. Counted in entries moved (a shard's growth moves its
    /// entries), not timed: over two million consecutive ids, the largest single growth moves
    /// under 1 % of the entries, and from half a million on no run of 1 024 inserts (one apply
    /// of a batch under the state lock) moves more than a 48th of them (at most 21,504 of 1.8M
    /// here, three shards' growths). One `HashMap` moved every entry at once (55 ms at a
    /// million jobs, measured); 256 shards filled evenly moved up to 114,688 within 1 024
    /// inserts (sixteen growths).
    #[test]
    fn growth_moves_a_small_part_at_a_time_spread_over_the_inserts() {
        const WINDOW: u64 = 1024;
        let mut map = JobTable::default();
        let mut largest_move = 0usize;
        let mut window: std::collections::VecDeque<(u64, usize)> = Default::default();
        let mut moved_in_window = 0usize;
        for seq in 0..2_000_000u64 {
            let id = JobId::compose(seq, 493_000 + seq / 1_000_000);
            let shard = shard_of(id);
            let (before_len, before_cap) = (map.shards[shard].len(), map.shards[shard].capacity());
            map.insert(id, job(seq));
            if map.shards[shard].capacity() != before_cap {
                largest_move = largest_move.max(before_len);
                window.push_back((seq, before_len));
                moved_in_window += before_len;
            }
            while window.front().is_some_and(|&(at, _)| at + WINDOW <= seq) {
                moved_in_window -= window.pop_front().expect("front").1;
            }
            let total = map.len();
            assert!(
                total < 500_000 || moved_in_window * 48 <= total,
                "{moved_in_window} entries moved within {WINDOW} inserts at {total}"
            );
        }
        assert!(
            largest_move * 100 < map.len(),
            "a growth moved {largest_move} of {} entries",
            map.len()
        );
    }
}
