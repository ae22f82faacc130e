//! Jobs fire in due order, never early, with a manual clock; the timer thread wakes for an
//! earlier schedule and for a clock moved by hand.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{T0, config, fire, open_sim, recv_n};
use timewheel::{Engine, JobSpec, ManualClock};
use timewheel_wal::testing::FaultDisk;

#[test]
fn jobs_fire_in_due_order_and_never_early() {
    let disk = FaultDisk::new(1);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    // Scheduled out of order, with ties and one in the past.
    let dues = [
        T0 + 500,
        T0 + 5,
        T0 + 3_600_000,
        T0 + 5,
        T0 - 1000,
        T0 + 61_000,
    ];
    let ids: Vec<_> = dues
        .iter()
        .map(|&d| engine.schedule(JobSpec::at(d)).expect("scheduled"))
        .collect();
    let mut fired = Vec::new();
    let mut now = T0;
    while fired.len() < ids.len() {
        for id in fire(&engine) {
            let i = ids.iter().position(|&x| x == id).expect("a job of ours");
            assert!(dues[i] <= now, "job due {} fired at {now}", dues[i]);
            fired.push((dues[i], id));
            // A worker that takes the job: an unclaimed one would be queued again.
            let job = engine.claim(id).expect("claim").expect("ready");
            assert!(engine.complete(&job).expect("complete"));
        }
        // Jump to the next deadline the engine reports: it is never later than the earliest
        // due, so jumping there can not skip a firing.
        match engine.next_deadline() {
            Some(next) if next > now => now = next,
            Some(_) => now += 1,
            None => break,
        }
        clock.set(now);
    }
    assert_eq!(fired.len(), ids.len());
    let fired_dues: Vec<u64> = fired.iter().map(|(due, _)| *due).collect();
    assert!(fired_dues.is_sorted(), "fired in due order: {fired_dues:?}");
    assert_eq!(engine.stats().fired, 6);
}

#[test]
fn the_timer_thread_wakes_for_an_earlier_job_and_a_moved_clock() {
    let disk = FaultDisk::new(2);
    let clock = ManualClock::new(T0);
    let mut cfg = config();
    cfg.timer_thread = true;
    let engine = Engine::open_on(disk.storage(), cfg, Arc::new(clock.clone())).expect("opens");
    let late = engine
        .schedule(JobSpec::at(T0 + 10_000))
        .expect("scheduled");
    let early = engine.schedule(JobSpec::at(T0 + 10)).expect("scheduled");
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        engine.ready().try_recv().is_err(),
        "nothing fires before its time"
    );
    clock.advance(10);
    assert_eq!(recv_n(&engine, 1), vec![early]);
    clock.advance(10_000);
    assert_eq!(recv_n(&engine, 1), vec![late]);
}

#[test]
fn time_going_backwards_holds() {
    let disk = FaultDisk::new(3);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let id = engine.schedule(JobSpec::at(T0 + 100)).expect("scheduled");
    clock.set(T0 + 100);
    assert_eq!(fire(&engine), vec![id]);
    // The clock steps back: a job due between the two readings must wait for real time again,
    // but nothing already fired comes back.
    clock.set(T0 + 50);
    let b = engine.schedule(JobSpec::at(T0 + 80)).expect("scheduled");
    assert_eq!(
        fire(&engine),
        vec![b],
        "held at the highest time seen (T0+100)"
    );
    assert!(fire(&engine).is_empty());
}
