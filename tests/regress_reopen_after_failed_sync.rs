//! Reopening (without a crash) after a failed sync must not serve data the media does not hold.
//! A failed sync marks the pages clean without writing them (Linux, fsyncgate); the page cache
//! still shows them, so recovery read them as durable, and later acknowledged records vouched
//! for them: a crash then lost them, and the next open refused the log as `Corrupted` (or, for a
//! directory entry, silently lost a whole segment). Found by the simulation (seeds 1, 8, 11).

mod common;

use common::{T0, config, open_sim};
use std::sync::Arc;
use timewheel::{Engine, JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SyncFailure};

#[test]
fn records_whose_sync_failed_are_made_durable_by_the_next_open() {
    let disk = FaultDisk::new(1);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let a = engine
        .schedule(JobSpec::at(T0 + 10).payload("a"))
        .expect("acked");
    disk.set_sync_failure(SyncFailure::Next);
    // Spans whole sectors, so that some of them hold nothing but this record.
    let b = engine.schedule(JobSpec::at(T0 + 20).payload(vec![b'b'; 1500]));
    assert!(b.is_err(), "its sync failed");
    drop(engine);

    // Same disk, no crash: the page cache still shows b; recovery serves it.
    let engine = open_sim(&disk, &clock);
    let c = engine
        .schedule(JobSpec::at(T0 + 30).payload("c"))
        .expect("acked");
    engine.abandon();

    let disk = disk.crash(&CrashOptions::clean());
    let engine = Engine::open_on(disk.storage(), config(), Arc::new(clock.clone()))
        .expect("power-cut faults only: the log opens");
    assert!(engine.get(a).is_some(), "acknowledged job a survives");
    assert!(engine.get(c).is_some(), "acknowledged job c survives");
}

#[test]
fn a_segment_whose_directory_sync_failed_is_made_durable_by_the_next_open() {
    let disk = FaultDisk::new(2);
    let clock = ManualClock::new(T0);
    // The first open creates segment 1: its header sync succeeds, the directory sync fails.
    disk.set_sync_failure(SyncFailure::AfterN(1));
    let first = Engine::open_on(disk.storage(), config(), Arc::new(clock.clone()));
    assert!(first.is_err(), "the directory sync failed");
    drop(first);

    let engine = open_sim(&disk, &clock);
    let a = engine
        .schedule(JobSpec::at(T0 + 10).payload("a"))
        .expect("acked");
    engine.abandon();

    let disk = disk.crash(&CrashOptions::clean());
    let engine = open_sim(&disk, &clock);
    assert!(engine.get(a).is_some(), "acknowledged job a survives");
}
