//! Regression (found by the simulation with recurring jobs, 2026-12-03): `Misfire::FireAll`
//! walked at most 100 000 occurrences from the first missed one and took the end of that
//! window for the most recent ones. A 1 s job down for a month (2.6 million missed) then fired
//! occurrences from its first days, one per completion, about 26 of them, instead of the
//! `backfill_max` most recent. An interval's missed occurrences are now counted; a cron
//! schedule that missed more than the walk reaches coalesces.

mod common;

use std::sync::Arc;

use common::T0;
use timewheel::recur::Recurrence;
use timewheel::{Engine, JobId, JobSpec, ManualClock, Misfire, Recurring};
use timewheel_wal::testing::FaultDisk;

const SEC: u64 = 1_000;
const DAY: u64 = 86_400 * SEC;

#[test]
fn fire_all_backfills_the_most_recent_after_a_month_down() {
    let disk = FaultDisk::new(1);
    let clock = ManualClock::new(T0);
    let mut c = common::config();
    c.lease_ms = 500;
    let engine =
        Engine::open_on(disk.storage(), c.clone(), Arc::new(clock.clone())).expect("opens");
    let every = Recurrence::every(SEC, T0).expect("interval");
    let id = engine
        .schedule(JobSpec::recurring(every).misfire(Misfire::FireAll { backfill_max: 3 }))
        .expect("schedule");
    assert_eq!(engine.get(id).expect("live").due_ms, T0 + SEC);
    drop(engine);
    // A month down.
    let now = T0 + 30 * DAY + 500;
    clock.set(now);
    let engine = Engine::open_on(disk.storage(), c, Arc::new(clock.clone())).expect("reopens");
    let mut fired = Vec::new();
    loop {
        engine.run_timers();
        let ids: Vec<JobId> = engine.ready().try_iter().collect();
        if ids.is_empty() {
            break;
        }
        for got in engine
            .claim_batch(&ids)
            .expect("claim")
            .into_iter()
            .flatten()
        {
            fired.push(got.due_ms);
            assert!(engine.complete(&got).expect("complete"));
        }
        assert!(fired.len() < 10, "fired {fired:?}");
    }
    // The first missed, then the three most recent; then on schedule.
    let last = now - 500;
    assert_eq!(fired, vec![T0 + SEC, last - 2 * SEC, last - SEC, last]);
    assert_eq!(engine.get(id).expect("live").due_ms, last + SEC);
}

#[test]
fn next_due_counts_an_intervals_misses_and_coalesces_a_crons_beyond_the_walk() {
    let every = Recurring {
        recurrence: Recurrence::every(SEC, T0).expect("interval"),
        misfire: Misfire::FireAll { backfill_max: 5 },
    };
    let now = T0 + 30 * DAY;
    assert_eq!(every.next_due(T0, now), Some(now - 4 * SEC));
    // Fewer missed than the backfill: the first missed.
    assert_eq!(every.next_due(T0, T0 + 3 * SEC), Some(T0 + SEC));
    // A backfill of u32::MAX fires every missed one (and allocates nothing for it).
    let all = Recurring {
        misfire: Misfire::FireAll {
            backfill_max: u32::MAX,
        },
        ..every.clone()
    };
    assert_eq!(all.next_due(T0, now), Some(T0 + SEC));
    // Every second by cron, two days missed (172 800 > 100 000): coalesced to the next one.
    let cron = Recurring {
        recurrence: Recurrence::cron("* * * * * *", "UTC").expect("cron"),
        misfire: Misfire::FireAll { backfill_max: 5 },
    };
    let (t0_s, now_s) = (T0 - T0 % SEC, T0 - T0 % SEC + 2 * DAY);
    assert_eq!(cron.next_due(t0_s, now_s), Some(now_s + SEC));
    // Within the walk: the five most recent.
    assert_eq!(cron.next_due(t0_s, t0_s + 60 * SEC), Some(t0_s + 56 * SEC));
}
