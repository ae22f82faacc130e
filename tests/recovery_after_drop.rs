//! After the engine is dropped without closing (as a crash would), a reopen brings back every
//! acknowledged job: pending ones fire on time, completed and cancelled ones never fire again,
//! and a claimed but unfinished one is delivered again with attempt + 1.

mod common;

use common::{T0, fire, open_sim};
use timewheel::{JobSpec, JobState, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk};

#[test]
fn every_acknowledged_change_survives_an_abandoned_engine() {
    let disk = FaultDisk::new(30);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let pending = engine
        .schedule(JobSpec::at(T0 + 5_000).payload("later"))
        .expect("ok");
    let cancelled = engine.schedule(JobSpec::at(T0 + 5_000)).expect("ok");
    let completed = engine.schedule(JobSpec::at(T0)).expect("ok");
    let interrupted = engine.schedule(JobSpec::at(T0)).expect("ok");
    let moved = engine.schedule(JobSpec::at(T0 + 5_000)).expect("ok");
    assert!(engine.cancel(cancelled).expect("cancel").is_done());
    assert!(
        engine
            .reschedule(moved, T0 + 9_000)
            .expect("reschedule")
            .is_done()
    );
    let mut fired = fire(&engine);
    fired.sort();
    assert_eq!(fired, vec![completed, interrupted]);
    let c = engine.claim(completed).expect("claim").expect("ready");
    assert!(engine.complete(&c).expect("complete"));
    let i = engine.claim(interrupted).expect("claim").expect("ready");
    assert_eq!(i.attempt, 1);
    engine.sync().expect("the claim is durable too");
    engine.abandon();

    // Only what was synced survives this crash.
    let disk = disk.crash(&CrashOptions::clean());
    let engine = open_sim(&disk, &clock);
    let rec = engine.recovery().clone();
    assert_eq!((rec.jobs, rec.interrupted), (3, 1));
    assert_eq!(engine.get(completed), None);
    assert_eq!(engine.get(cancelled), None);
    assert_eq!(
        engine.get(pending).map(|j| j.state),
        Some(JobState::Scheduled)
    );
    assert_eq!(engine.get(moved).map(|j| j.due_ms), Some(T0 + 9_000));
    assert_eq!(
        fire(&engine),
        vec![interrupted],
        "the interrupted job fires at once"
    );
    let again = engine.claim(interrupted).expect("claim").expect("ready");
    assert_eq!(again.attempt, 2, "delivered again with attempt + 1");
    assert!(engine.complete(&again).expect("complete"));

    clock.set(T0 + 5_000);
    assert_eq!(fire(&engine), vec![pending]);
    let p = engine.claim(pending).expect("claim").expect("ready");
    assert_eq!(&p.payload[..], b"later");
    assert!(engine.complete(&p).expect("complete"));
    clock.set(T0 + 9_000);
    assert_eq!(fire(&engine), vec![moved]);
    let m = engine.claim(moved).expect("claim").expect("ready");
    assert!(engine.complete(&m).expect("complete"));
    clock.set(T0 + 100_000);
    assert!(
        fire(&engine).is_empty(),
        "cancelled and completed jobs never fire"
    );
    let stats = engine.stats();
    assert_eq!((stats.completed, stats.cancelled), (4, 1));
}
