//! A compaction pass that fails after its new manifest is durable (removing the runs it
//! replaced, syncing the directory after that, deleting folded journal segments) keeps the new
//! manifest: every job kept on disk stays readable, before and after a power cut.
//!
//! A regression (found by the simulation, seed 8028344): the pass replaced the manifest and
//! removed the runs it had merged, then the directory sync after the removals failed, and the
//! engine went on with the old manifest in memory. `get` of a job kept on disk beyond the
//! horizon read a run that was gone and answered `None` for an acknowledged job (and `cancel`
//! or `reschedule` would have failed) until a reopen.

mod common;

use common::T0;
use std::sync::Arc;
use timewheel::{Config, Engine, JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SyncFailure};

const DAY_MS: u64 = 86_400_000;

/// Small segments, and every pass into a bucket that has a run merges it, so that the pass
/// replaces (removes) runs.
fn config() -> Config {
    common::config()
        .segment_bytes(8192)
        .payload_bytes_max(256)
        .fail_reason_bytes_max(256)
        .bucket_runs_max(1)
}

/// Schedules `n` jobs due `days` ahead, with payloads big enough to fill segments.
fn schedule(e: &Engine, n: u64, days: u64) -> Vec<timewheel::JobId> {
    (0..n)
        .map(|i| {
            e.schedule(JobSpec::at(T0 + days * DAY_MS + i).payload(vec![7; 200]))
                .expect("acked")
        })
        .collect()
}

fn compact_all(e: &Engine) {
    while e.compact().expect("compact").records > 0 {}
}

#[test]
fn a_pass_that_fails_after_its_manifest_keeps_it() {
    let mut failed_after_manifest = 0;
    for n in 0..40 {
        let disk = FaultDisk::new(n);
        let clock = Arc::new(ManualClock::new(T0));
        let e = Engine::open_on(disk.storage(), config(), clock.clone()).expect("opens");
        let far = schedule(&e, 60, 10);
        compact_all(&e);
        assert!(e.store_stats().non_resident > 0, "the far jobs left memory");
        // More jobs for the same bucket: the next pass merges its run and removes the old one.
        let more = schedule(&e, 60, 10);
        disk.set_sync_failure(SyncFailure::AfterN(n));
        let failed = e.compact().is_err();
        disk.set_sync_failure(SyncFailure::Never);
        let stats = e.store_stats();
        if failed && stats.compactions > 1 {
            failed_after_manifest += 1;
        }
        for id in far.iter().chain(&more) {
            assert!(
                e.get(*id).is_some(),
                "sync failure after {n} syncs: acknowledged job {id} not found after the pass"
            );
        }
        e.abandon();
        let disk = disk.crash(&CrashOptions::clean());
        let e = Engine::open_on(disk.storage(), config(), clock).expect("reopens");
        for id in far.iter().chain(&more) {
            assert!(
                e.get(*id).is_some(),
                "sync failure after {n} syncs: acknowledged job {id} lost at the reopen"
            );
        }
    }
    assert!(
        failed_after_manifest > 0,
        "some failure struck after a manifest was replaced"
    );
}
