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
    pub fn apply(&mut self, entries: Vec<Entry>) -> Result<(), JobId> {
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

    /// The live jobs' puts in due order, ties in id order: a merged run's entries. The order
    /// is found on small keys (the oldest run's stretch is in order already); each job then
    /// moves once.
    pub fn into_due_entries(mut self) -> Vec<Entry> {
        let mut order: Vec<(u64, JobId, u32)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, e)| match e {
                Entry::Put(job) => Some((job.due_ms, job.id, slot as u32)),
                _ => None,
            })
            .collect();
        order.sort_unstable();
        order
            .into_iter()
            .map(|(_, id, slot)| {
                std::mem::replace(&mut self.slots[slot as usize], Entry::Delete(id))
            })
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
