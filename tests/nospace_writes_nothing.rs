//! Every live operation is check, then append, then apply: when the log can not grow
//! (`NoSpace`), a schedule or a claim changes nothing, in the log or in memory, and works once
//! space is back. (A claim used to apply first, so a `NoSpace` left a running job with no
//! claim record.)

mod common;

use std::sync::Arc;

use common::{T0, config, fire};
use timewheel::{Engine, Error, JobSpec, JobState, ManualClock};
use timewheel_wal::testing::FaultDisk;

#[test]
fn a_claim_that_finds_no_space_leaves_the_job_ready() {
    let disk = FaultDisk::new(90);
    let clock = ManualClock::new(T0);
    let cfg = config().segment_bytes(16 << 10).payload_bytes_max(1 << 10);
    let engine = Engine::open_on(disk.storage(), cfg, Arc::new(clock.clone())).expect("opens");
    let id = engine.schedule(JobSpec::at(T0)).expect("scheduled");
    disk.set_enospc(true);
    // Fill the segment: the next commit needs a new one, which can not be allocated.
    let mut filled = false;
    for _ in 0..64 {
        match engine.schedule(JobSpec::at(T0 + 3_600_000)) {
            Ok(_) => {}
            Err(Error::NoSpace { .. }) => {
                filled = true;
                break;
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert!(filled, "the segment filled up");
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
