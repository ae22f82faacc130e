//! The jobs a bucket's runs hold, read back: the runs applied in order, oldest first.
//!
//! A bucket is read whole for three things: a load into the wheel (the horizon reached it, or
//! an open), a merge (its runs rewritten as one), and a far job's `get`, `cancel` or
//! `reschedule`. Its oldest run is usually most of it and is already in due order (a merge
//! writes one), so the jobs are kept in the order their puts came, with an index by id for the
//! patches and deletes stacked on them: each entry costs a hash probe, never a tree insert
//! that moves its neighbours, and [`BucketJobs::into_due_order`] sorts input that is mostly
//! sorted already (one ascending stretch per run).

use std::collections::HashMap;

use super::bucket::{Entry, StoredJob};
use crate::job::{IdBuild, JobId};

/// The jobs of a bucket, as its runs left them.
#[derive(Debug, Default, Clone)]
pub(crate) struct BucketJobs {
    /// Every put so far, in order; `None` once deleted or taken.
    slots: Vec<Option<StoredJob>>,
    /// Where each live job's slot is.
    index: HashMap<JobId, u32, IdBuild>,
}

impl BucketJobs {
    /// Room for `entries` entries (a run's record count is an upper bound of its puts).
    pub fn with_capacity(entries: usize) -> Self {
        BucketJobs {
            slots: Vec::with_capacity(entries),
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
    pub fn apply(&mut self, entries: Vec<Entry>) -> Result<(), JobId> {
        self.reserve(entries.len());
        for entry in entries {
            match entry {
                Entry::Put(job) => self.put(job)?,
                Entry::Patch(p) => p.apply(self.get_mut(p.id).ok_or(p.id)?),
                Entry::Delete(id) => {
                    self.take(id).ok_or(id)?;
                }
            }
        }
        Ok(())
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
                self.slots.push(Some(job));
                Ok(())
            }
        }
    }

    /// The job `id`, to change in place.
    pub fn get_mut(&mut self, id: JobId) -> Option<&mut StoredJob> {
        let slot = *self.index.get(&id)?;
        self.slots[slot as usize].as_mut()
    }

    /// The job `id`, if the bucket holds it.
    #[cfg(test)]
    pub fn get(&self, id: JobId) -> Option<&StoredJob> {
        let slot = *self.index.get(&id)?;
        self.slots[slot as usize].as_ref()
    }

    /// Takes the job `id` out of the bucket.
    pub fn take(&mut self, id: JobId) -> Option<StoredJob> {
        let slot = self.index.remove(&id)?;
        let job = self.slots[slot as usize].take();
        assert!(job.is_some(), "an indexed slot holds its job");
        job
    }

    /// The live jobs, in the order their puts came.
    pub fn values(&self) -> impl Iterator<Item = &StoredJob> {
        self.slots.iter().flatten()
    }

    /// The live jobs, in the order their puts came.
    pub fn into_values(self) -> impl Iterator<Item = StoredJob> {
        self.slots.into_iter().flatten()
    }

    /// The live jobs in due order, ties in id order: a merged run's entries, or a load's.
    pub fn into_due_order(self) -> Vec<StoredJob> {
        let mut jobs: Vec<StoredJob> = self.into_values().collect();
        // Stable and run-adaptive: the oldest run's stretch is in order already.
        jobs.sort_by_key(|j| (j.due_ms, j.id));
        jobs
    }
}
