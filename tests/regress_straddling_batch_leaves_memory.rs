//! Far-future jobs leave memory once compacted, also those of a batch that straddles a
//! segment's end. A batch's commit used to mark each of its jobs with the batch's last LSN: a
//! pass that folded the sealed segment holding a job (the batch's tail in the next segment, not
//! yet sealed) saw memory "newer" than what it folded and kept the job, and a pass offers a far
//! job for eviction only once, when it first writes it into its bucket. So the part of every
//! straddling batch stayed in memory for good: 12 % of the jobs scheduled in batches of
//! 100,000 (`benches/examples/writer_rss.rs`: 2.6M of 18M jobs resident, growing).

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
