//! The job-aware layer on disk beside the journal: hour-bucket files, the manifest that names
//! them, and the compactor that folds sealed journal segments into them.
//!
//! The journal (`timewheel-wal`) knows nothing of jobs; this module does. Data flows one way:
//! the engine appends to the journal; the compactor reads sealed (immutable, durable)
//! segments, folds what they say into per-hour bucket runs, replaces the manifest atomically,
//! and only then deletes the journal segments it folded and the runs it replaced. An open reads
//! the manifest, loads the buckets it names, and replays only the journal after
//! [`manifest::Manifest::covered_lsn`].
//!
//! Files in the data directory besides the journal's `*.wal`:
//! - `MANIFEST` (and `MANIFEST.tmp` while one is being replaced): [`manifest`];
//! - `bucket-{hour:010}-{generation:016}.run`: [`bucket`].

pub mod bucket;
pub(crate) mod compact;
pub(crate) mod loaded;
pub mod manifest;

use std::collections::HashMap;
use std::io;

use timewheel_wal::storage::{Storage, StorageFile};

use crate::config::HOUR_MS;
use crate::error::{Error, Result};
use crate::job::JobId;
use bucket::{StoredJob, decode_run, parse_run_file_name, run_file_name};
use loaded::BucketJobs;
use manifest::{BucketEntry, MANIFEST_NAME, MANIFEST_TMP_NAME, Manifest};

/// The hour bucket a job is scheduled into: the hour it is due, or the hour it was accepted
/// if it was due already then. Its id carries this bucket ([`JobId::bucket_residue`]).
pub(crate) fn home_bucket(due_ms: u64, created_ms: u64) -> u64 {
    due_ms.max(created_ms) / HOUR_MS
}

/// The hour bucket of a due time.
pub(crate) fn bucket_of(due_ms: u64) -> u64 {
    due_ms / HOUR_MS
}

fn corrupted(file: impl Into<String>, offset: u64, reason: impl Into<String>) -> Error {
    Error::CorruptedStore {
        file: file.into(),
        offset,
        reason: reason.into(),
    }
}

/// The file kept to be given up when the disk is full, so that a compaction pass (which must
/// write its runs and manifest before it may delete anything) can still run and free space.
pub const BALLAST_NAME: &str = "BALLAST";

/// Whether `e` says the disk is full.
pub(crate) fn is_no_space(e: &Error) -> bool {
    match e {
        Error::NoSpace { .. } => true,
        Error::Io(io) => io_full(io),
        _ => false,
    }
}

fn io_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
}

/// Makes the ballast file of `bytes` bytes if it is missing and the disk has room. `Ok(false)`
/// when there is no room for it (not an error: it is made again later).
pub(crate) fn ensure_ballast<S: Storage>(storage: &S, bytes: u64) -> Result<bool> {
    if bytes == 0 || storage.list()?.iter().any(|n| n == BALLAST_NAME) {
        return Ok(true);
    }
    match storage.create(BALLAST_NAME, bytes) {
        Ok(_) => {}
        Err(e) if io_full(&e) => {
            return Ok(false);
        }
        Err(e) => return Err(e.into()),
    }
    sync_dir(storage)?;
    Ok(true)
}

/// Gives the ballast file up (its space is free once the directory is synced). `Ok(false)` if
/// there was none.
pub(crate) fn release_ballast<S: Storage>(storage: &S) -> Result<bool> {
    match storage.remove(BALLAST_NAME) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e.into()),
    }
    sync_dir(storage)?;
    Ok(true)
}

/// Marks an I/O error as a failed sync: after one, nothing may be acknowledged (the engine
/// poisons its journal too).
#[derive(Debug)]
pub(crate) struct SyncFailed(io::Error);

impl std::fmt::Display for SyncFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sync failed: {}", self.0)
    }
}

impl std::error::Error for SyncFailed {}

fn synced(r: io::Result<()>) -> io::Result<()> {
    r.map_err(|e| io::Error::new(e.kind(), SyncFailed(e)))
}

/// Whether `e` is (or wraps) a failed sync of the store's files.
pub(crate) fn is_sync_failure(e: &Error) -> bool {
    matches!(e, Error::Io(io) if io.get_ref().is_some_and(|inner| inner.is::<SyncFailed>()))
}

/// Bytes [`release`] gives back per step.
const RELEASE_STEP_BYTES: usize = 2 << 20;

/// Drops a vector's items, then gives its memory back a step at a time: for the big vectors
/// of a compaction pass and of a bucket's load (a bucket of a million jobs is hundreds of MB
/// decoded).
///
/// Dropped whole, such a vector goes back in one `munmap`, which holds the process's
/// memory-map lock for writing while it unmaps every page: 3-28 ms measured for 50-420 MB.
/// Every thread that faults a page in or grows its heap meanwhile waits, the timer thread
/// among them (fire lateness beside compaction, docs/benchmarks.md). Shrunk a step at a
/// time, each step gives back the vector's tail (with glibc's allocator, one `mremap` of
/// [`RELEASE_STEP_BYTES`]), and other threads take the lock between the steps.
pub(crate) fn release<T>(mut v: Vec<T>) {
    v.clear();
    let size = std::mem::size_of::<T>();
    if size == 0 {
        return;
    }
    let step = (RELEASE_STEP_BYTES / size).max(1);
    while v.capacity() > step {
        v.shrink_to(v.capacity() - step);
    }
}

/// Reads a whole file.
fn read_whole<S: Storage>(storage: &S, name: &str) -> io::Result<Vec<u8>> {
    let file = storage.open(name)?;
    let len = usize::try_from(file.len_bytes()).map_err(io::Error::other)?;
    let mut bytes = vec![0; len];
    file.read_at(0, &mut bytes)?;
    Ok(bytes)
}

/// Creates `name` holding exactly `bytes`, durable (the directory entry is not: the caller
/// syncs the directory).
fn write_new<S: Storage>(storage: &S, name: &str, bytes: &[u8]) -> io::Result<()> {
    let file = storage.create(name, bytes.len() as u64)?;
    file.write_at(0, bytes)?;
    synced(file.sync_range(0, bytes.len() as u64))
}

/// Replaces the manifest atomically: the temporary file, synced, renamed over the old one, and
/// the directory synced. After an `Err` the directory holds the old manifest or the new one;
/// which one is known only at the next open.
fn replace_manifest<S: Storage>(storage: &S, manifest: &Manifest) -> io::Result<()> {
    match storage.remove(MANIFEST_TMP_NAME) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    write_new(storage, MANIFEST_TMP_NAME, &manifest.encode())?;
    storage.rename(MANIFEST_TMP_NAME, MANIFEST_NAME)?;
    synced(storage.sync_dir())
}

/// Syncs the directory, marking a failure as a failed sync.
pub(crate) fn sync_dir<S: Storage>(storage: &S) -> io::Result<()> {
    synced(storage.sync_dir())
}

/// The manifest as the directory holds it now, read without the directory's lock and without
/// removing anything: `None` if it does not decode. An open reads it ahead of its lock to
/// start replaying early, and trusts what it read only if [`open`] (under the lock) finds the
/// same. A failed read is an error, as under the lock.
pub(crate) fn peek<S: Storage>(storage: &S) -> Result<Option<Manifest>> {
    match read_manifest(storage, &storage.list()?) {
        Ok(manifest) => Ok(Some(manifest)),
        Err(Error::CorruptedStore { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The manifest of a directory holding `names`: none yet is the empty one.
fn read_manifest<S: Storage>(storage: &S, names: &[String]) -> Result<Manifest> {
    if !names.iter().any(|n| n == MANIFEST_NAME) {
        return Ok(Manifest::default());
    }
    let bytes = read_whole(storage, MANIFEST_NAME)?;
    Manifest::decode(&bytes).map_err(|e| corrupted(MANIFEST_NAME, e.offset, e.what))
}

/// Opens the store of a directory whose journal is open: reads the manifest (none yet: the
/// empty one), removes what a crash in the middle of a compaction left behind (a manifest
/// that was never renamed, runs no manifest names), and checks that the journal still holds
/// everything after the manifest's LSN.
pub(crate) fn open<S: Storage>(storage: &S, journal_first_lsn: u64) -> Result<Manifest> {
    let names = storage.list()?;
    let manifest = read_manifest(storage, &names)?;
    let mut removed = false;
    for name in &names {
        let orphan = name == MANIFEST_TMP_NAME
            || parse_run_file_name(name).is_some_and(|(bucket, generation)| {
                !manifest
                    .buckets
                    .get(&bucket)
                    .is_some_and(|b| b.runs.iter().any(|r| r.generation == generation))
            });
        if orphan {
            storage.remove(name)?;
            tracing::info!(file = %name, "removed a file an interrupted compaction left");
            removed = true;
        }
    }
    if removed {
        storage.sync_dir()?;
    }
    if journal_first_lsn > manifest.covered_lsn + 1 {
        return Err(corrupted(
            MANIFEST_NAME,
            24,
            format!(
                "the journal starts at LSN {journal_first_lsn}, but the buckets cover only up \
                 to {}: the segments between are missing",
                manifest.covered_lsn
            ),
        ));
    }
    Ok(manifest)
}

/// The jobs of one bucket: its runs read oldest first and stacked.
pub(crate) fn load_bucket<S: Storage>(
    storage: &S,
    bucket: u64,
    entry: &BucketEntry,
) -> Result<BucketJobs> {
    let records: u64 = entry.runs.iter().map(|r| r.records).sum();
    let mut jobs = BucketJobs::with_capacity(usize::try_from(records).unwrap_or(usize::MAX));
    for run in &entry.runs {
        let name = run_file_name(bucket, run.generation);
        let bytes = read_whole(storage, &name)?;
        let (header, entries) =
            decode_run(&bytes).map_err(|e| corrupted(name.as_str(), e.offset, e.what))?;
        if header.bucket != bucket
            || header.generation != run.generation
            || header.records != run.records
            || bytes.len() as u64 != run.bytes
        {
            return Err(corrupted(
                name,
                0,
                "run does not match what the manifest says of it",
            ));
        }
        jobs.apply(entries).map_err(|id| {
            corrupted(
                name.as_str(),
                0,
                format!("run changes job {id}, which the runs before it do not hold as it says"),
            )
        })?;
        release(bytes);
    }
    if jobs.len() as u64 != entry.jobs {
        return Err(corrupted(
            run_file_name(bucket, entry.runs.last().map_or(0, |r| r.generation)),
            0,
            format!(
                "bucket holds {} jobs, the manifest says {}",
                jobs.len(),
                entry.jobs
            ),
        ));
    }
    Ok(jobs)
}

/// The jobs of `ids` as the bucket files hold them, for those a live bucket from `far_from`
/// on holds (jobs kept on disk only); each bucket read once.
pub(crate) fn read_far_jobs<S: Storage>(
    storage: &S,
    manifest: &Manifest,
    far_from: u64,
    ids: &[JobId],
) -> Result<Vec<StoredJob>> {
    let locator = Locator::new(manifest)?;
    let mut read: HashMap<u64, BucketJobs> = HashMap::new();
    let mut found = Vec::new();
    for &id in ids {
        let Some(bucket) = locator.locate(manifest, id).filter(|&b| b >= far_from) else {
            continue;
        };
        let jobs = match read.entry(bucket) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(load_bucket(storage, bucket, &manifest.buckets[&bucket])?)
            }
        };
        found.extend(jobs.take(id));
    }
    Ok(found)
}

/// Which live bucket holds a job: the one its id names (the live bucket with the same
/// residue), or the one the moved table names.
pub(crate) struct Locator {
    by_residue: HashMap<u64, u64>,
}

impl Locator {
    /// Refuses a set of live buckets in which two share a residue (they are 2<sup>20</sup>
    /// hours, about 119 years, apart): an id would not say which one holds its job.
    pub fn new(manifest: &Manifest) -> Result<Locator> {
        let mut by_residue = HashMap::with_capacity(manifest.buckets.len());
        for &bucket in manifest.buckets.keys() {
            let residue = JobId::compose(0, bucket).bucket_residue();
            if let Some(other) = by_residue.insert(residue, bucket) {
                return Err(corrupted(
                    MANIFEST_NAME,
                    0,
                    format!(
                        "live buckets {other} and {bucket} are 2^20 hours apart: job ids can \
                         not tell them apart (a job has been live for over 19 years past its \
                         due time)"
                    ),
                ));
            }
        }
        Ok(Locator { by_residue })
    }

    /// The bucket holding `id`, if a live one does.
    pub fn locate(&self, manifest: &Manifest, id: JobId) -> Option<u64> {
        manifest
            .moved
            .get(&id)
            .copied()
            .or_else(|| self.by_residue.get(&id.bucket_residue()).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_bucket_is_the_due_hour_or_the_acceptance_hour() {
        assert_eq!(home_bucket(3 * HOUR_MS + 5, 0), 3);
        assert_eq!(home_bucket(5, 2 * HOUR_MS), 2);
        let id = JobId::compose(9, home_bucket(491_234 * HOUR_MS, 0));
        assert_eq!(id.seq(), 9);
        assert_eq!(id.bucket_residue(), 491_234);
    }
}
