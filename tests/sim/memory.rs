//! The oracle on memory: after a compaction pass, the engine holds no job due beyond the
//! resident horizon whose every record is folded into the bucket files.
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
use timewheel_wal::{Durability, Storage as _, StorageFile as _, Wal, WalOptions, format};

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
    // Only the segments from the one holding `lsn + 1` on (the copy's log starts there, as
    // after compaction deleted the ones before): most checks need one or two.
    let mut segments: Vec<(u64, String, Vec<u8>)> = Vec::new();
    for name in disk.live_names() {
        let Some(id) = timewheel_wal::parse_segment_file_name(&name) else {
            continue;
        };
        segments.push((id, name.clone(), disk.live_file(&name)?));
    }
    segments.sort_by_key(|(id, ..)| *id);
    let first_lsn = |bytes: &[u8]| {
        let header: &[u8; format::SEGMENT_HEADER_BYTES] =
            bytes.get(..format::SEGMENT_HEADER_BYTES)?.try_into().ok()?;
        format::decode_header(header).ok().map(|h| h.first_lsn)
    };
    let start = segments
        .iter()
        .rposition(|(_, _, bytes)| first_lsn(bytes).is_some_and(|first| first <= lsn + 1))
        .unwrap_or(0);
    for (_, name, bytes) in &segments[start..] {
        let file = storage.create(name, bytes.len() as u64).ok()?;
        file.write_at(0, bytes).ok()?;
    }
    let options = WalOptions {
        segment_bytes: config.segment_bytes,
        record_bytes_max: u32::try_from(timewheel::record::record_bytes_max(config))
            .expect("a validated config's record limit fits a u32"),
        durability: Durability::Buffered,
        write_reach_bytes: config.write_reach_bytes,
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
/// this run has reached (`far_from_ms` on) must have a record the bucket files do not cover
/// (the pass did not fold it). Returns how many far jobs memory held
/// (all of them with such a record), or `None` if the journal could not be read through.
pub fn check_after_pass(
    engine: &Engine,
    when: &str,
    disk: &FaultDisk,
    config: &Config,
    far_from_ms: u64,
) -> Result<Option<usize>, Violation> {
    let mut query = JobQuery::due_between(far_from_ms, u64::MAX);
    query.state = Some(JobState::Scheduled);
    let mut far = Vec::new();
    let mut page = Some(query);
    while let Some(q) = page.take() {
        let listed = match engine.jobs(&q) {
            Ok(listed) => listed,
            Err(e) => return violation!("listing the jobs in memory failed: {e:?}"),
        };
        far.extend(listed.jobs.iter().map(|j| (j.id, j.due_ms)));
        page = listed.next;
    }
    if far.is_empty() {
        // Nothing to account for (most checks): the journal need not be read.
        return Ok(Some(0));
    }
    let covered = engine.store_stats().covered_lsn;
    let Some(changed) = changed_after(disk, covered, config) else {
        return Ok(None);
    };
    if let Some((id, due_ms)) = far.iter().find(|(id, _)| !changed.contains(id)) {
        return violation!(
            "job {} (due {due_ms} ms, beyond every horizon of the run: from {far_from_ms} ms) \
             is still in memory after the {when}, with every record of it folded into the \
             bucket files (they cover LSN {covered})",
            id.0
        );
    }
    Ok(Some(far.len()))
}
