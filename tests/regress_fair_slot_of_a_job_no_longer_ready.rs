//! Regression (found by the simulation with fairness, 2026-12-03): a ready job whose id was fed
//! into the channel counted against its tenant's running limit until a claim looked at the
//! id. When the worker that took the id died and the job then stopped being ready another way
//! (cancelled, rescheduled, paused, or completed by the claim whose lease had run out), nobody
//! ever looked at it: the tenant lost the slot until the next open, and with a limit of 1 its
//! other jobs were never delivered again.

mod common;

use std::sync::Arc;

use common::{T0, config, fire};
use timewheel::{Engine, JobId, JobSpec, ManualClock, TenantStats};
use timewheel_wal::testing::FaultDisk;

fn open(disk: &FaultDisk, clock: &ManualClock) -> Engine {
    let mut c = config();
    c.fair_tenants = true;
    c.tenant_running_max = 1;
    c.lease_ms = 1_000;
    Engine::open_on(disk.storage(), c, Arc::new(clock.clone())).expect("opens")
}

fn tenant(engine: &Engine, t: u32) -> TenantStats {
    *engine
        .tenant_stats()
        .iter()
        .find(|s| s.tenant == t)
        .expect("listed")
}

/// Tenant 7's jobs `a` (due first) and `b`: only `a` is fed (the limit is 1), and the worker
/// that took its id dies without claiming it.
fn two_jobs(engine: &Engine, clock: &ManualClock) -> (JobId, JobId) {
    let a = engine.schedule(JobSpec::at(T0).tenant(7)).expect("a");
    let b = engine.schedule(JobSpec::at(T0 + 1).tenant(7)).expect("b");
    clock.set(T0 + 2);
    assert_eq!(fire(engine), vec![a], "the limit lets one through");
    assert_eq!(
        (tenant(engine, 7).in_channel, tenant(engine, 7).queued),
        (1, 1)
    );
    (a, b)
}

#[test]
fn a_cancelled_job_frees_its_tenants_slot_at_once() {
    let disk = FaultDisk::new(1);
    let clock = ManualClock::new(T0);
    let engine = open(&disk, &clock);
    let (a, b) = two_jobs(&engine, &clock);
    assert!(engine.cancel(a).expect("cancel").is_done());
    // The cancel fed the tenant's next job.
    assert_eq!(engine.ready().try_iter().collect::<Vec<_>>(), vec![b]);
    assert_eq!(tenant(&engine, 7).in_channel, 1);
    let c = engine.claim(b).expect("claim").expect("b is delivered");
    assert!(engine.complete(&c).expect("complete"));
    let t = tenant(&engine, 7);
    assert_eq!((t.queued, t.in_channel, t.running), (0, 0, 0));
}

#[test]
fn a_rescheduled_job_frees_its_slot_and_is_fed_again_when_it_fires() {
    let disk = FaultDisk::new(2);
    let clock = ManualClock::new(T0);
    let engine = open(&disk, &clock);
    let (a, b) = two_jobs(&engine, &clock);
    assert!(engine.reschedule(a, T0 + 10).expect("reschedule").is_done());
    assert_eq!(engine.ready().try_iter().collect::<Vec<_>>(), vec![b]);
    let c = engine.claim(b).expect("claim").expect("b is delivered");
    assert!(engine.complete(&c).expect("complete"));
    // `a` fires again, and is fed again (it was not held back as "already fed").
    clock.set(T0 + 10);
    assert_eq!(fire(&engine), vec![a]);
    assert!(engine.claim(a).expect("claim").is_some());
}

#[test]
fn a_job_completed_by_its_expired_claim_frees_its_slot() {
    let disk = FaultDisk::new(3);
    let clock = ManualClock::new(T0);
    let engine = open(&disk, &clock);
    let a = engine.schedule(JobSpec::at(T0).tenant(7)).expect("a");
    clock.set(T0 + 2);
    assert_eq!(fire(&engine), vec![a]);
    let first = engine.claim(a).expect("claim").expect("a");
    // Its lease runs out: `a` is ready again and fed again; that id's worker dies.
    clock.set(T0 + 2 + 1_000);
    assert_eq!(fire(&engine), vec![a]);
    let b = engine.schedule(JobSpec::at(T0).tenant(7)).expect("b");
    assert_eq!(fire(&engine), vec![], "the limit holds `b` back");
    // The first worker still completes `a` ("complete still takes it until someone claims
    // it"): the slot of its fed id is free, and `b` is fed.
    assert!(engine.complete(&first).expect("complete"));
    assert_eq!(engine.ready().try_iter().collect::<Vec<_>>(), vec![b]);
    assert_eq!(tenant(&engine, 7).in_channel, 1);
    assert!(engine.claim(b).expect("claim").is_some());
}
