//! A claim that is not completed within its lease is delivered again with attempt + 1, and the
//! older attempt can no longer complete the job (the attempt is the fencing token).

mod common;

use common::{T0, config, fire};
use std::sync::Arc;
use timewheel::{Engine, JobSpec, ManualClock};
use timewheel_wal::testing::FaultDisk;

#[test]
fn an_expired_lease_redelivers_with_the_next_attempt() {
    let disk = FaultDisk::new(20);
    let clock = ManualClock::new(T0);
    let mut cfg = config();
    cfg.lease_ms = 1_000;
    let engine = Engine::open_on(disk.storage(), cfg, Arc::new(clock.clone())).expect("opens");
    let id = engine
        .schedule(JobSpec::at(T0).payload("p"))
        .expect("scheduled");
    assert_eq!(fire(&engine), vec![id]);
    let first = engine.claim(id).expect("claim").expect("ready");
    assert_eq!((first.attempt, first.lease_until_ms), (1, T0 + 1_000));

    clock.set(T0 + 999);
    assert!(fire(&engine).is_empty(), "the lease still holds");
    clock.set(T0 + 1_000);
    assert_eq!(
        fire(&engine),
        vec![id],
        "redelivered when the lease runs out"
    );
    let second = engine.claim(id).expect("claim").expect("ready again");
    assert_eq!(second.attempt, 2);
    assert_eq!(&second.payload[..], b"p");

    assert!(!engine.complete(&first).expect("stale complete"), "fenced");
    assert!(engine.complete(&second).expect("complete"));
    clock.set(T0 + 10_000);
    assert!(
        fire(&engine).is_empty(),
        "a completed job never fires again"
    );
    assert_eq!(engine.stats().redelivered, 1);
}

#[test]
fn an_expired_lease_not_yet_reclaimed_still_lets_its_holder_finish() {
    let disk = FaultDisk::new(21);
    let clock = ManualClock::new(T0);
    let mut cfg = config();
    cfg.lease_ms = 10;
    let engine = Engine::open_on(disk.storage(), cfg, Arc::new(clock.clone())).expect("opens");
    let id = engine.schedule(JobSpec::at(T0)).expect("scheduled");
    fire(&engine);
    let c = engine.claim(id).expect("claim").expect("ready");
    clock.set(T0 + 50);
    assert_eq!(fire(&engine), vec![id]);
    assert!(engine.fail_permanently(&c, "worker gave up").expect("fail"));
    assert_eq!(engine.claim(id).expect("claim"), None, "finished");
    assert_eq!(engine.stats().failed, 1);
    assert_eq!(
        engine.dead_letter(id).map(|d| d.attempt),
        Some(1),
        "dead, with the attempt that held the lease"
    );
}
