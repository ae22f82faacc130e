//! The oracle on memory: after a compaction pass, the engine holds no job due beyond the
//! resident horizon whose every record the pass folded into the bucket files.
//!
//! The promise behind it ("a far-future job costs no memory once compacted", issue 9) is one
//! the answers cannot show: a job held in memory too long answers every call as it should.
//! Twice a far job stayed in memory for good (a batch straddling a segment's end; a job read
//! back for a call), found by measuring a long run, not by the simulation. This check reads
//! the journal itself, from a copy of its files as they are now (not the engine's own
//! bookkeeping of which record last changed a job), so that a job the engine marks with the
//! wrong record is caught too.

use std::collections::HashSet;

use timewheel::record::Event;
use timewheel::{Config, Engine, JobId, JobQuery, JobState};
use timewheel_wal::testing::FaultDisk;
use timewheel_wal::{Durability, Storage as _, StorageFile as _, Wal, WalOptions};

use crate::model::Violation;
use crate::violation;

/// The jobs with a record after `lsn` in the journal `disk` holds now (every appended record,
/// synced or not: what the engine's memory may be newer by). `None` if the copy cannot be
/// read through (media damage the sim injected; the check is skipped then).
fn changed_after(disk: &FaultDisk, lsn: u64, config: &Config) -> Option<HashSet<JobId>> {
    // A copy on a disk with no faults armed: reading it consumes none of the seed's faults,
    // so the check does not change what the run does next.
    let copy = FaultDisk::new(0);
    let storage = copy.storage();
    for name in disk.live_names() {
        if timewheel_wal::parse_segment_file_name(&name).is_none() {
            continue;
        }
        let bytes = disk.live_file(&name)?;
        let file = storage.create(&name, bytes.len() as u64).ok()?;
        file.write_at(0, &bytes).ok()?;
    }
    let options = WalOptions {
        segment_bytes: config.segment_bytes,
        record_bytes_max: u32::try_from(timewheel::record::record_bytes_max(config))
            .expect("a validated config's record limit fits a u32"),
        durability: Durability::Buffered,
        ..WalOptions::default()
    };
    let (wal, _) = Wal::open(storage, options).ok()?;
    let mut ids = HashSet::new();
    let mut iter = wal.iter_from(lsn + 1);
    while let Some(record) = iter.next_ref() {
        let record = record.ok()?;
        if let Ok(event) = Event::decode(record.record_type, record.body)
            && let Some(id) = event.id()
        {
            ids.insert(id);
        }
    }
    drop(iter);
    wal.abandon();
    Some(ids)
}

/// After a pass: every job listed in memory, waiting, and due in an hour bucket no horizon of
/// this run has reached (`far_from_ms` on) must have a record the pass did not fold. Returns
/// how many far jobs memory held (all of them with such a record), or `None` if the journal
/// could not be read through.
pub fn check_after_pass(
    engine: &Engine,
    disk: &FaultDisk,
    config: &Config,
    far_from_ms: u64,
) -> Result<Option<usize>, Violation> {
    let covered = engine.store_stats().covered_lsn;
    let Some(changed) = changed_after(disk, covered, config) else {
        return Ok(None);
    };
    let mut query = JobQuery::due_between(far_from_ms, u64::MAX);
    query.state = Some(JobState::Scheduled);
    let mut held = 0;
    let mut page = Some(query);
    while let Some(q) = page.take() {
        let listed = match engine.jobs(&q) {
            Ok(listed) => listed,
            Err(e) => return violation!("listing the jobs in memory failed: {e:?}"),
        };
        for job in &listed.jobs {
            if !changed.contains(&job.id) {
                return violation!(
                    "job {} (due {} ms, beyond every horizon of the run: from {far_from_ms} ms) \
                     is still in memory after a pass that folded every record of it (the \
                     buckets cover LSN {covered})",
                    job.id.0,
                    job.due_ms
                );
            }
            held += 1;
        }
        page = listed.next;
    }
    Ok(Some(held))
}
