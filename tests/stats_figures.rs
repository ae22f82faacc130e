//! The figures `stats()` reports mean what a user reads into them: a job scheduled already past
//! due counts its lateness from when it was accepted, not its age; the missed jobs fired at
//! open are in the lateness histogram; a job interrupted by a crash and delivered again counts
//! as redelivered; the wait from ready queue to claim is measured; and one pass of the timers
//! counts both the jobs it fired and the leases it expired (defect 7: it used to take the
//! larger of the two).

mod common;

use std::sync::Arc;

use common::{T0, config, fire, open_sim};
use timewheel::{Engine, JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk};

#[test]
fn a_job_scheduled_past_due_is_not_an_hour_late() {
    let disk = FaultDisk::new(80);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    engine
        .schedule(JobSpec::at(T0 - 3_600_000))
        .expect("scheduled");
    assert_eq!(fire(&engine).len(), 1);
    let s = engine.stats();
    assert!(
        s.lateness_us_max < 1_000_000,
        "lateness {} us",
        s.lateness_us_max
    );
}

#[test]
fn missed_and_interrupted_jobs_are_counted_at_open() {
    let disk = FaultDisk::new(81);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let ids = engine
        .schedule_batch([JobSpec::at(T0), JobSpec::at(T0 + 10)])
        .expect("scheduled");
    assert_eq!(fire(&engine), vec![ids[0]]);
    engine.claim(ids[0]).expect("claim").expect("ready");
    // Claims are handed out before their sync: synced here, the claim is interrupted by the
    // crash rather than lost with it.
    engine.sync().expect("sync");
    engine.abandon();
    clock.set(T0 + 60_000);
    let engine = open_sim(&disk.crash(&CrashOptions::clean()), &clock);
    let s = engine.stats();
    assert_eq!((s.missed_at_open, s.fired, s.redelivered), (2, 2, 1));
    assert!(
        s.lateness_us_max > 0,
        "the fires at open are in the histogram"
    );
    clock.set(T0 + 60_005);
    let c = engine.claim(ids[0]).expect("claim").expect("ready");
    assert_eq!(c.attempt, 2);
    assert_eq!(
        engine.stats().claim_wait_us_max / 1000,
        5,
        "ready at open, claimed 5 ms later"
    );
}

#[test]
fn one_timer_pass_counts_fires_and_expiries() {
    let disk = FaultDisk::new(82);
    let clock = ManualClock::new(T0);
    let mut cfg = config();
    cfg.lease_ms = 100;
    let engine = Engine::open_on(disk.storage(), cfg, Arc::new(clock.clone())).expect("opens");
    let ids = engine
        .schedule_batch([JobSpec::at(T0), JobSpec::at(T0 + 100)])
        .expect("scheduled");
    assert_eq!(fire(&engine), vec![ids[0]]);
    engine.claim(ids[0]).expect("claim").expect("ready");
    clock.set(T0 + 100);
    assert_eq!(engine.run_timers(), 2, "one fire and one expired lease");
}
