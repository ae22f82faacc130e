//! A job cancelled after its id was queued is skipped by `claim`; rescheduling a queued job
//! makes the queued id stale too.

mod common;

use common::{T0, fire, open_sim};
use timewheel::{JobSpec, JobState, ManualClock, Outcome};
use timewheel_wal::testing::FaultDisk;

#[test]
fn cancelled_while_in_the_ready_queue_claim_returns_none() {
    let disk = FaultDisk::new(10);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let id = engine.schedule(JobSpec::at(T0 + 10)).expect("scheduled");
    clock.set(T0 + 10);
    assert_eq!(fire(&engine), vec![id]);
    assert_eq!(engine.get(id).map(|j| j.state), Some(JobState::Ready));
    assert!(engine.cancel(id).expect("cancel").is_done());
    assert_eq!(engine.claim(id).expect("claim"), None);
    assert!(
        !engine.cancel(id).expect("second cancel").is_done(),
        "already cancelled"
    );
    assert_eq!(engine.stats().cancelled, 1);
}

#[test]
fn running_jobs_can_not_be_cancelled_or_rescheduled() {
    let disk = FaultDisk::new(11);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let id = engine.schedule(JobSpec::at(T0)).expect("scheduled");
    assert_eq!(fire(&engine), vec![id]);
    let claimed = engine.claim(id).expect("claim").expect("ready");
    assert_eq!(engine.cancel(id).expect("cancel"), Outcome::Running);
    assert!(!engine.reschedule(id, T0 + 5).expect("reschedule").is_done());
    assert!(engine.complete(&claimed).expect("complete"));
    assert!(
        !engine
            .cancel(id)
            .expect("cancel after completion")
            .is_done()
    );
    assert!(!engine.complete(&claimed).expect("second complete"));
}

#[test]
fn rescheduled_while_queued_fires_again_at_the_new_time() {
    let disk = FaultDisk::new(12);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let id = engine.schedule(JobSpec::at(T0)).expect("scheduled");
    assert_eq!(fire(&engine), vec![id]);
    assert!(
        engine
            .reschedule(id, T0 + 1_000)
            .expect("reschedule")
            .is_done()
    );
    assert_eq!(
        engine.claim(id).expect("claim"),
        None,
        "the queued id is stale"
    );
    clock.set(T0 + 999);
    assert!(fire(&engine).is_empty());
    clock.set(T0 + 1_000);
    assert_eq!(fire(&engine), vec![id]);
    assert!(engine.claim(id).expect("claim").is_some());
}
