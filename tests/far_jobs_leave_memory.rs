//! Far-future jobs leave memory once compacted, whatever brought them there: a batch that
//! straddles a segment's end, a call that read them back, a change that a later pass folds.
//!
//! A batch's commit used to mark each of its jobs with the batch's last LSN: a
//! pass that folded the sealed segment holding a job (the batch's tail in the next segment, not
//! yet sealed) saw memory "newer" than what it folded and kept the job, and a pass offers a far
//! job for eviction only once, when it first writes it into its bucket. So the part of every
//! straddling batch stayed in memory for good: 12 % of the jobs scheduled in batches of
//! 100,000 (`benches/examples/writer_rss.rs`: 2.6M of 18M jobs resident, growing). And a far
//! job read back into memory by `get` (or `reschedule`, `cancel`'s check) stayed there until
//! the horizon reached its bucket: a pass offered it for eviction never again.

mod common;

use std::sync::Arc;

use common::{T0, config};
use timewheel::{Config, Engine, JobSpec, ManualClock};
use timewheel_wal::testing::FaultDisk;

const HOUR: u64 = 3_600_000;

fn cfg() -> Config {
    let mut c = config();
    c.segment_bytes = 64 << 10;
    c.payload_bytes_max = 512;
    c.horizon_ms = 2 * HOUR;
    c
}

/// Jobs held in memory: the scheduled ones less those kept only on disk.
fn in_memory(engine: &Engine) -> u64 {
    engine.stats().scheduled - engine.store_stats().non_resident
}

#[test]
fn every_far_job_of_a_folded_segment_leaves_memory() {
    let disk = FaultDisk::new(5);
    let clock = ManualClock::new(T0);
    let engine = Engine::open_on(disk.storage(), cfg(), Arc::new(clock.clone())).expect("opens");
    // Batches of 150 jobs with 100-byte payloads (about 32 KiB of log each, mirrors included):
    // most batches straddle a 64 KiB segment's end.
    const BATCH: u64 = 150;
    let mut scheduled = 0;
    let mut worst = 0;
    for b in 0..40u64 {
        engine
            .schedule_batch((0..BATCH).map(|i| {
                // Due 3 to 30 days ahead: all beyond the horizon.
                JobSpec::at(T0 + 3 * 24 * HOUR + (b * BATCH + i) * 7_919 % (27 * 24 * HOUR))
                    .payload(vec![1u8; 100])
            }))
            .expect("scheduled");
        scheduled += BATCH;
        while engine.compact().expect("compact").records > 0 {}
        // What the passes could not fold yet: the segment being appended to. It holds at most
        // two batches' worth of records here (64 KiB against ~32 KiB a batch).
        let held = in_memory(&engine);
        worst = worst.max(held);
        assert!(
            held <= 2 * BATCH,
            "after batch {b}: {held} of {scheduled} far jobs still in memory"
        );
    }
    assert_eq!(engine.stats().scheduled, scheduled);
    assert!(
        worst > 0,
        "the active segment's jobs are held until it is sealed"
    );
    assert!(
        engine.store_stats().non_resident >= scheduled - 2 * BATCH,
        "the rest live on disk only"
    );
}

#[test]
fn far_jobs_read_back_or_changed_leave_memory_after_the_next_pass() {
    let disk = FaultDisk::new(6);
    let clock = ManualClock::new(T0);
    let engine = Engine::open_on(disk.storage(), cfg(), Arc::new(clock.clone())).expect("opens");
    let far = |i: u64| T0 + 5 * 24 * HOUR + i * 1_000;
    let mut ids = Vec::new();
    for b in 0..20u64 {
        ids.extend(
            engine
                .schedule_batch(
                    (0..100).map(|i| JobSpec::at(far(b * 100 + i)).payload(vec![1u8; 100])),
                )
                .expect("scheduled"),
        );
        while engine.compact().expect("compact").records > 0 {}
    }
    let settled = in_memory(&engine);
    assert!(
        settled <= 200,
        "{settled} of {} far jobs in memory",
        ids.len()
    );

    // Read every one back: all in memory, as a call needs them.
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(engine.get(id).map(|j| j.due_ms), Some(far(i as u64)));
    }
    assert_eq!(in_memory(&engine), ids.len() as u64);
    // The next pass that folds anything lets them go again (nothing changed them).
    let push = |n: u64| {
        for k in 0..n {
            engine
                .schedule(JobSpec::at(T0 + 9 * 24 * HOUR + k).payload(vec![2u8; 100]))
                .expect("scheduled");
        }
        while engine.compact().expect("compact").records > 0 {}
    };
    push(200);
    let after_reads = in_memory(&engine);
    assert!(
        after_reads <= 400,
        "{after_reads} far jobs in memory after the pass"
    );

    // Reschedule half within their bucket: in memory, changed; once a pass folds the change,
    // they go, and the bucket files answer with the new due time.
    for &id in &ids[..1_000] {
        let due = engine.get(id).expect("live").due_ms;
        engine.reschedule(id, due + 1).expect("rescheduled");
    }
    push(400);
    let after_changes = in_memory(&engine);
    assert!(
        after_changes <= 400,
        "{after_changes} far jobs in memory after the changes"
    );
    for (i, &id) in ids.iter().enumerate() {
        let want = far(i as u64) + u64::from(i < 1_000);
        assert_eq!(engine.get(id).map(|j| j.due_ms), Some(want), "job {i}");
    }
    assert_eq!(engine.stats().scheduled, ids.len() as u64 + 600);
}

/// A batch whose commit comes after a pass folded its records: the pass found its far jobs
/// nowhere in memory (not visible yet) and took them for finished; the commit then put them in
/// memory, where they stayed until the horizon reached their bucket. Now the commit marks them
/// as held with a far copy, and the next pass lets them go. (A committing thread descheduled
/// across a segment roll and a pass: here made certain with `schedule_batch_nowait`.)
#[test]
fn far_jobs_committed_after_a_pass_folded_them_leave_memory() {
    let disk = FaultDisk::new(7);
    let clock = ManualClock::new(T0);
    let engine = Engine::open_on(disk.storage(), cfg(), Arc::new(clock.clone())).expect("opens");
    let late = |i: u64| T0 + 6 * 24 * HOUR + i * 1_000;
    let (late_ids, pending) = engine
        .schedule_batch_nowait((0..300).map(|i| JobSpec::at(late(i)).payload(vec![3u8; 100])))
        .expect("appended");
    // Jobs of about 1 KiB, committed: they seal the segments holding the pending batch.
    let push =
        |n: u64| {
            for k in 0..n {
                engine
                    .schedule_batch((0..4).map(|i| {
                        JobSpec::at(T0 + 9 * 24 * HOUR + k * 4 + i).payload(vec![4u8; 500])
                    }))
                    .expect("scheduled");
                while engine.compact().expect("compact").records > 0 {}
            }
        };
    push(100);
    assert!(
        engine.get(late_ids[0]).is_none(),
        "not visible before its commit"
    );
    engine.commit(pending).expect("durable");
    for (i, &id) in late_ids.iter().enumerate() {
        assert_eq!(
            engine.get(id).map(|j| j.due_ms),
            Some(late(i as u64)),
            "job {i}"
        );
    }
    push(100);
    // What memory holds now: the jobs of the segment being appended to (64 KiB: a few dozen
    // of the 1 KiB jobs), not the 300 committed late.
    let held = in_memory(&engine);
    assert!(held < 150, "{held} far jobs in memory after the passes");
    for (i, &id) in late_ids.iter().enumerate() {
        assert_eq!(
            engine.get(id).map(|j| j.due_ms),
            Some(late(i as u64)),
            "job {i}"
        );
    }
    assert_eq!(engine.stats().scheduled, 300 + 800);
}
