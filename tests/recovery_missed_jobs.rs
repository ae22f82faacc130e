//! Jobs whose due time passed while the engine was down are missed jobs: after a restart hours
//! later they fire at once, in due order, and `stats()` counts them.

mod common;

use common::{T0, finish_all, fire, open_sim};
use timewheel::{JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk};

#[test]
fn missed_jobs_fire_at_once_in_due_order_after_downtime() {
    let disk = FaultDisk::new(40);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let hour = 3_600_000;
    // Dues over three hours, scheduled in scrambled order.
    let mut dues: Vec<u64> = (0..300u64)
        .map(|i| T0 + 1 + (i * 7919) % (3 * hour))
        .collect();
    let ids = engine
        .schedule_batch(dues.iter().map(|&d| JobSpec::at(d)))
        .expect("scheduled");
    let future = engine.schedule(JobSpec::at(T0 + 10 * hour)).expect("ok");
    engine.abandon();

    clock.set(T0 + 4 * hour);
    let engine = open_sim(&disk.crash(&CrashOptions::clean()), &clock);
    assert_eq!(engine.recovery().missed, 300);
    assert_eq!(engine.stats().missed_at_open, 300);
    let fired = fire(&engine);
    assert_eq!(fired.len(), 300, "every missed job fires at once");
    let due_of: std::collections::HashMap<_, _> = ids.iter().copied().zip(dues.drain(..)).collect();
    let fired_dues: Vec<u64> = fired.iter().map(|id| due_of[id]).collect();
    assert!(fired_dues.is_sorted(), "missed jobs fire in due order");
    let mut all: Vec<_> = fired.clone();
    all.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(all, want, "each missed job fires exactly once");
    assert!(!fired.contains(&future));
    finish_all(&engine, &fired);
    clock.set(T0 + 10 * hour);
    assert_eq!(fire(&engine), vec![future]);
}
