//! The jobs a bucket's runs hold, read back: the runs applied in order, oldest first.
//!
//! A bucket is read whole for three things: a load into the wheel (the horizon reached it, or
//! an open), a merge (its runs rewritten as one), and a far job's `get`, `cancel` or
//! `reschedule`. Its oldest run is usually most of it and is already in due order (a merge
//! writes one), so the jobs are kept in the order their puts came, with an index by id for the
//! patches and deletes stacked on them: each entry costs a hash probe, never a tree insert
//! that moves its neighbours, and [`BucketJobs::into_due_entries`] finds the due order on
//! small keys and then moves each job once.

use std::collections::HashMap;

use super::bucket::{Entry, StoredJob};
use crate::job::{IdBuild, JobId};

/// The jobs of a bucket, as its runs left them.
#[derive(Debug, Default, Clone)]
pub(crate) struct BucketJobs {
    /// Every put so far, in order, each an `Entry::Put` while its job is live and an
    /// `Entry::Delete` once deleted or taken. The first run's decoded entries become this
    /// vector as they are (no job is copied); later runs' puts are moved in.
    slots: Vec<Entry>,
    /// Where each live job's slot is.
    index: HashMap<JobId, u32, IdBuild>,
}

impl BucketJobs {
    /// Room for `entries` entries (a run's record count is an upper bound of its puts).
    pub fn with_capacity(entries: usize) -> Self {
        BucketJobs {
            slots: Vec::new(),
            index: HashMap::with_capacity_and_hasher(entries, IdBuild::default()),
        }
    }

    /// Live jobs.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Applies a run's entries to the jobs of the runs before it. Refuses (naming the job) an
    /// entry the compactor could not have written: a put of a job already there, a patch or
    /// delete of one that is not.
    pub fn apply(&mut self, mut entries: Vec<Entry>) -> Result<(), JobId> {
        if self.slots.is_empty() && entries.iter().all(|e| matches!(e, Entry::Put(_))) {
            // A bucket's first run (all puts): its vector is kept as it is.
            self.slots = entries;
            self.index.reserve(self.slots.len());
            for (slot, entry) in self.slots.iter().enumerate() {
                let slot = u32::try_from(slot).expect("a bucket's runs hold under 2^32 puts");
                if self.index.insert(entry.id(), slot).is_some() {
                    let id = entry.id();
                    self.slots.clear();
                    self.index.clear();
                    return Err(id);
                }
            }
            return Ok(());
        }
        self.reserve(entries.len());
        for entry in entries.drain(..) {
            match entry {
                Entry::Put(job) => self.put(job)?,
                Entry::Patch(p) => p.apply(self.get_mut(p.id).ok_or(p.id)?),
                Entry::Delete(id) => {
                    self.take(id).ok_or(id)?;
                }
            }
        }
        super::release(entries);
        Ok(())
    }

    /// Drops the jobs, giving their memory back as [`super::release`] does.
    pub fn release(self) {
        super::release(self.slots);
    }

    fn reserve(&mut self, more: usize) {
        self.slots.reserve(more);
        self.index.reserve(more);
    }

    /// Adds a job the bucket does not hold yet.
    pub fn put(&mut self, job: StoredJob) -> Result<(), JobId> {
        let slot = u32::try_from(self.slots.len()).expect("a bucket's runs hold under 2^32 puts");
        match self.index.entry(job.id) {
            std::collections::hash_map::Entry::Occupied(_) => Err(job.id),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(slot);
                self.slots.push(Entry::Put(job));
                Ok(())
            }
        }
    }

    /// The job `id`, to change in place.
    pub fn get_mut(&mut self, id: JobId) -> Option<&mut StoredJob> {
        let slot = *self.index.get(&id)?;
        match &mut self.slots[slot as usize] {
            Entry::Put(job) => Some(job),
            _ => unreachable!("an indexed slot holds its job"),
        }
    }

    /// The job `id`, if the bucket holds it.
    #[cfg(test)]
    pub fn get(&self, id: JobId) -> Option<&StoredJob> {
        let slot = *self.index.get(&id)?;
        match &self.slots[slot as usize] {
            Entry::Put(job) => Some(job),
            _ => unreachable!("an indexed slot holds its job"),
        }
    }

    /// Takes the job `id` out of the bucket.
    pub fn take(&mut self, id: JobId) -> Option<StoredJob> {
        let slot = self.index.remove(&id)?;
        match std::mem::replace(&mut self.slots[slot as usize], Entry::Delete(id)) {
            Entry::Put(job) => Some(job),
            _ => unreachable!("an indexed slot holds its job"),
        }
    }

    /// The live jobs, in the order their puts came.
    pub fn values(&self) -> impl Iterator<Item = &StoredJob> {
        self.slots.iter().filter_map(|e| match e {
            Entry::Put(job) => Some(job),
            _ => None,
        })
    }

    /// The live jobs, in the order their puts came.
    pub fn into_values(self) -> impl Iterator<Item = StoredJob> {
        self.slots.into_iter().filter_map(|e| match e {
            Entry::Put(job) => Some(job),
            _ => None,
        })
    }

    /// Where the live jobs' puts are, in due order, ties in id order: a merged run's entries,
    /// read in place with [`BucketJobs::slot`]. The order is found on small keys (the oldest
    /// run's stretch is in order already).
    pub fn due_slots(&self) -> Vec<usize> {
        due_order(&self.slots, |e| match e {
            Entry::Put(job) => Some(job),
            _ => None,
        })
    }

    /// The entry at `slot` (of [`BucketJobs::due_slots`]).
    pub fn slot(&self, slot: usize) -> &Entry {
        &self.slots[slot]
    }

    /// The live jobs' puts in due order, ties in id order, moved out: each job moves once.
    pub fn into_due_entries(mut self) -> Vec<Entry> {
        let order = self.due_slots();
        order
            .into_iter()
            .map(|slot| std::mem::replace(&mut self.slots[slot], Entry::Delete(JobId(0))))
            .collect()
    }

    /// The live jobs in due order, ties in id order: a load's.
    pub fn into_due_order(self) -> Vec<StoredJob> {
        self.into_due_entries()
            .into_iter()
            .map(|e| match e {
                Entry::Put(job) => job,
                _ => unreachable!("only puts are live"),
            })
            .collect()
    }
}

/// The indices of the items of `items` that hold a job (`job`), in the jobs' due order, ties
/// in id order. Found on 24-byte keys, so that a caller then moves each job once.
pub(crate) fn due_order<T>(items: &[T], job: impl Fn(&T) -> Option<&StoredJob>) -> Vec<usize> {
    let mut order: Vec<(u64, JobId, u32)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| job(item).map(|j| (j.due_ms, j.id, i as u32)))
        .collect();
    order.sort_unstable();
    order.into_iter().map(|(_, _, i)| i as usize).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::store::bucket::Patch;

    fn job(id: u64, due_ms: u64) -> StoredJob {
        crate::store::bucket::tests::job(id, due_ms, &id.to_le_bytes())
    }

    /// Runs of operations `(kind, pick, due)`, turned into entries by [`entries`].
    fn runs() -> impl Strategy<Value = Vec<Vec<(u8, usize, u64)>>> {
        prop::collection::vec(
            prop::collection::vec((0u8..16, any::<usize>(), 0u64..20), 0..40),
            1..6,
        )
    }

    /// Mostly entries the compactor could write, given the jobs `live` holds: puts of new ids,
    /// patches and deletes of jobs there; one kind in 16 an entry it could not (a put of a
    /// job there, a patch or delete of one that is not).
    fn entries(ops: &[(u8, usize, u64)], live: &mut Vec<u64>, next: &mut u64) -> Vec<Entry> {
        ops.iter()
            .map(|&(kind, pick, due)| {
                let there = (!live.is_empty()).then(|| pick % live.len());
                match (kind, there) {
                    (0..=5, _) | (6..=14, None) => {
                        *next += 1;
                        live.push(*next);
                        Entry::Put(job(*next, due))
                    }
                    (6..=10, Some(i)) => Entry::Patch(Patch {
                        id: JobId(live[i]),
                        due_ms: Some(due),
                        lease: Some((due as u32, due % 2 == 0)),
                        crashes_seen: None,
                        fate: None,
                    }),
                    (11..=14, Some(i)) => Entry::Delete(JobId(live.swap_remove(i))),
                    _ => match there {
                        Some(i) if pick % 2 == 0 => Entry::Put(job(live[i], due)),
                        _ if pick % 3 == 0 => Entry::Delete(JobId(*next + 1)),
                        _ => Entry::Patch(Patch {
                            id: JobId(*next + 1),
                            due_ms: None,
                            lease: None,
                            crashes_seen: None,
                            fate: None,
                        }),
                    },
                }
            })
            .collect()
    }

    /// The model: a map by id, each entry applied in turn; the first refused entry names its
    /// job and the run stops there.
    fn model_apply(model: &mut BTreeMap<JobId, StoredJob>, run: &[Entry]) -> Result<(), JobId> {
        for e in run {
            let id = e.id();
            match e {
                Entry::Put(j) => {
                    if model.insert(id, j.clone()).is_some() {
                        return Err(id);
                    }
                }
                Entry::Patch(p) => p.apply(model.get_mut(&id).ok_or(id)?),
                Entry::Delete(_) => {
                    model.remove(&id).ok_or(id)?;
                }
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Runs stacked on `BucketJobs` leave the jobs a map applying the same entries leaves,
        /// refuse the same entry, and come out in due order (ties by id).
        #[test]
        fn bucket_jobs_follow_a_map(runs in runs()) {
            let mut jobs = BucketJobs::default();
            let mut model = BTreeMap::new();
            let (mut live, mut next) = (Vec::new(), 0);
            for ops in &runs {
                let run = entries(ops, &mut live, &mut next);
                let expected = model_apply(&mut model, &run);
                let got = jobs.apply(run);
                prop_assert_eq!(got, expected);
                if expected.is_err() {
                    // A refused run is corruption: the load stops, nothing after it counts.
                    return Ok(());
                }
                prop_assert_eq!(jobs.len(), model.len());
                for (id, j) in &model {
                    prop_assert_eq!(jobs.get(*id), Some(j));
                }
            }
            // A merge encodes the jobs in place: the same bytes as from the moved entries.
            let order = jobs.due_slots();
            let in_place = crate::store::bucket::encode_run_of(
                1, 2, 3, 0, order.iter().map(|&at| jobs.slot(at)),
            );
            let moved = jobs.clone().into_due_entries();
            prop_assert_eq!(in_place, crate::store::bucket::encode_run(1, 2, 3, 0, &moved));
            let mut want: Vec<StoredJob> = model.into_values().collect();
            want.sort_by_key(|j| (j.due_ms, j.id));
            let got: Vec<StoredJob> = jobs
                .into_due_entries()
                .into_iter()
                .map(|e| match e {
                    Entry::Put(j) => j,
                    other => panic!("a merged run holds puts only: {other:?}"),
                })
                .collect();
            prop_assert_eq!(got, want);
        }
    }
}
