//! Every live operation is check, then append, then apply: when the log can not grow
//! (`NoSpace`), a schedule or a claim changes nothing, in the log or in memory, and works once
//! space is back. (A claim used to apply first, so a `NoSpace` left a running job with no
//! claim record.)

mod common;

use std::sync::Arc;

use common::{T0, config, fill_until_no_space, fire};
use timewheel::{Engine, Error, JobSpec, JobState, ManualClock};
use timewheel_wal::testing::FaultDisk;

#[test]
fn a_claim_that_finds_no_space_leaves_the_job_ready() {
    let disk = FaultDisk::new(90);
    let clock = ManualClock::new(T0);
    // No reserve for finishing jobs: the claim must meet the full disk itself.
    let cfg = config()
        .segment_bytes(16 << 10)
        .payload_bytes_max(1 << 10)
        .no_space_reserve_bytes(0);
    let engine = Engine::open_on(disk.storage(), cfg, Arc::new(clock.clone())).expect("opens");
    let id = engine.schedule(JobSpec::at(T0)).expect("scheduled");
    disk.set_enospc(true);
    // Fill the segment: the next commit needs a new one, which can not be allocated.
    fill_until_no_space(&engine, 64, || JobSpec::at(T0 + 3_600_000));
    assert_eq!(fire(&engine), vec![id]);
    let before = engine.stats();
    match engine.claim(id) {
        Err(Error::NoSpace { .. }) => {}
        other => panic!("expected NoSpace, got {other:?}"),
    }
    let job = engine.get(id).expect("still live");
    assert_eq!(
        (job.state, job.attempt),
        (JobState::Ready, 0),
        "nothing applied"
    );
    let after = engine.stats();
    assert_eq!((after.ready, after.running), (before.ready, before.running));
    disk.set_enospc(false);
    let c = engine.claim(id).expect("claim").expect("ready");
    assert_eq!(c.attempt, 1);
    assert!(engine.complete(&c).expect("complete"));
}

/// Once the log could not grow, schedules are refused while the current segment is down to the
/// reserve kept for finishing jobs (`Config::no_space_reserve_bytes`), and at once, with no
/// allocation tried, for `Config::no_space_retry_ms` of the engine's clock (a flood of refused
/// requests costs nothing and logs nothing), the wait doubling with each failure; cancels still
/// go through, into the reserve; once space is back and the wait is over, schedules work again.
#[test]
fn a_full_disk_is_retried_after_a_back_off_not_on_every_request() {
    let disk = FaultDisk::new(91);
    let clock = ManualClock::new(T0);
    // A quarter of the segment (16 KiB) is kept for finishing jobs.
    let cfg = config().segment_bytes(64 << 10).payload_bytes_max(1 << 10);
    let engine = Engine::open_on(disk.storage(), cfg, Arc::new(clock.clone())).expect("opens");
    let keep: Vec<_> = (0..3)
        .map(|_| {
            engine
                .schedule(JobSpec::at(T0 + 3_600_000))
                .expect("scheduled")
        })
        .collect();
    disk.set_enospc(true);
    fill_until_no_space(&engine, 1_000, || {
        JobSpec::at(T0 + 3_600_000).payload(vec![1; 200])
    });
    let tried = disk.stats().enospc_failures;
    for _ in 0..500 {
        common::assert_refused_by_back_off(engine.schedule(JobSpec::at(T0)));
    }
    assert_eq!(
        disk.stats().enospc_failures,
        tried,
        "no allocation tried during the back-off"
    );
    // Cancels go through: the reserve holds them.
    for id in keep {
        assert!(engine.cancel(id).expect("cancel").is_done());
    }
    // Past the wait: tried again (still full), and the next wait is twice as long.
    clock.advance(100);
    assert!(matches!(
        engine.schedule(JobSpec::at(T0)),
        Err(Error::NoSpace { .. })
    ));
    assert_eq!(
        disk.stats().enospc_failures,
        tried + 1,
        "one attempt after the wait"
    );
    clock.advance(100);
    assert!(matches!(
        engine.schedule(JobSpec::at(T0)),
        Err(Error::NoSpace { .. })
    ));
    assert_eq!(
        disk.stats().enospc_failures,
        tried + 1,
        "the second wait is 200 ms"
    );
    // Space is back: after the wait, schedules work again.
    disk.set_enospc(false);
    clock.advance(100);
    engine.schedule(JobSpec::at(T0)).expect("space is back");
    engine.schedule(JobSpec::at(T0)).expect("and stays");
}
