//! Recurring jobs: each completion schedules the next occurrence in the same record, across
//! reopens and compaction; misfire policies after downtime; pause, resume, delete; an
//! occurrence that fails its last attempt goes on to the next one.

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use timewheel::recur::Recurrence;
use timewheel::{
    Claimed, Config, Engine, JobId, JobSpec, JobState, ManualClock, Misfire, Outcome,
    PAUSED_DUE_MS, RetryPolicy,
};
use timewheel_wal::testing::FaultDisk;

use common::T0;

const SEC: u64 = 1_000;

fn config() -> Config {
    let mut c = common::config();
    c.segment_bytes = 16 << 10;
    c.payload_bytes_max = 256;
    c.fail_reason_bytes_max = 64;
    c.lease_ms = 500;
    c.retry = RetryPolicy {
        max_attempts: 2,
        ..RetryPolicy::default()
    };
    c
}

fn open(disk: &FaultDisk, clock: &ManualClock) -> Engine {
    Engine::open_on(disk.storage(), config(), Arc::new(clock.clone())).expect("opens")
}

fn take(engine: &Engine) -> Vec<Claimed> {
    engine.run_timers();
    let ids: Vec<JobId> = engine.ready().try_iter().collect();
    engine
        .claim_batch(&ids)
        .expect("claim")
        .into_iter()
        .flatten()
        .collect()
}

fn every_second(misfire: Misfire) -> JobSpec {
    JobSpec::recurring(Recurrence::every(SEC, T0).expect("interval")).misfire(misfire)
}

#[test]
fn each_completion_schedules_the_next_occurrence_durably() {
    let disk = FaultDisk::new(1);
    let clock = ManualClock::new(T0);
    let mut engine = open(&disk, &clock);
    let id = engine
        .schedule(every_second(Misfire::Coalesce))
        .expect("schedule");
    assert_eq!(engine.get(id).expect("live").due_ms, T0 + SEC);
    for k in 1..=6u64 {
        clock.set(T0 + k * SEC);
        let got = take(&engine);
        assert_eq!(got.len(), 1, "occurrence {k}");
        assert_eq!(got[0].due_ms, T0 + k * SEC);
        assert_eq!(
            got[0].attempt, k as u32,
            "the fencing token grows over occurrences"
        );
        assert!(engine.complete(&got[0]).expect("complete"));
        let info = engine.get(id).expect("still live");
        assert_eq!(
            (info.state, info.due_ms),
            (JobState::Scheduled, T0 + (k + 1) * SEC)
        );
        if k == 3 {
            engine.sync().expect("sync");
            engine.compact().expect("compact");
            engine.close().expect("close");
            engine = open(&disk, &clock);
        }
    }
    assert_eq!(engine.stats().completed, 6);
    let s = engine.schedules(None, 10).expect("list");
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].id, s[0].due_ms, s[0].paused),
        (id, T0 + 7 * SEC, false)
    );
}

/// After `down` of downtime, what a job every second with `misfire` fires: the due times of
/// the deliveries until it is due in the future again.
fn after_downtime(misfire: Misfire, down: u64) -> Vec<u64> {
    let disk = FaultDisk::new(2);
    let clock = ManualClock::new(T0);
    let engine = open(&disk, &clock);
    engine.schedule(every_second(misfire)).expect("schedule");
    engine.close().expect("close");
    clock.set(T0 + down);
    let engine = open(&disk, &clock);
    let mut fired = Vec::new();
    for _ in 0..50 {
        let got = take(&engine);
        if got.is_empty() {
            break;
        }
        for c in got {
            fired.push(c.due_ms);
            assert!(engine.complete(&c).expect("complete"));
        }
    }
    fired
}

#[test]
fn misfires_coalesce_fire_all_within_the_backfill_or_skip() {
    let down = 10 * 60 * SEC + 500; // 10 minutes: over the misfire threshold (60 s)
    assert_eq!(
        after_downtime(Misfire::Coalesce, down),
        [T0 + SEC],
        "one firing for all the missed ones"
    );
    let all = after_downtime(Misfire::FireAll { backfill_max: 3 }, down);
    // The first missed one fires at open, then the 3 most recent missed ones.
    assert_eq!(
        all,
        [T0 + SEC, T0 + 598 * SEC, T0 + 599 * SEC, T0 + 600 * SEC]
    );
    assert!(
        after_downtime(Misfire::Skip, down).is_empty(),
        "skipped, not delivered"
    );
    // Late by less than the threshold: delivered under every policy.
    assert_eq!(after_downtime(Misfire::Skip, 30 * SEC), [T0 + SEC]);
}

#[test]
fn pause_resume_delete() {
    let disk = FaultDisk::new(3);
    let clock = ManualClock::new(T0);
    let engine = open(&disk, &clock);
    let id = engine
        .schedule(every_second(Misfire::Coalesce))
        .expect("schedule");
    assert_eq!(engine.pause_schedule(id).expect("pause"), Outcome::Done);
    clock.set(T0 + 3600 * SEC);
    assert!(take(&engine).is_empty(), "a paused schedule does not fire");
    let s = &engine.schedules(None, 10).expect("list")[0];
    assert!(s.paused && s.due_ms == PAUSED_DUE_MS);
    assert_eq!(engine.resume_schedule(id).expect("resume"), Outcome::Done);
    assert_eq!(engine.get(id).expect("live").due_ms, T0 + 3601 * SEC);
    let plain = engine
        .schedule(JobSpec::at(T0 + 7200 * SEC))
        .expect("plain");
    assert_eq!(
        engine.pause_schedule(plain).expect("pause"),
        Outcome::NotFound
    );
    assert_eq!(engine.delete_schedule(id).expect("delete"), Outcome::Done);
    assert!(engine.get(id).is_none());
    assert!(engine.schedules(None, 10).expect("list").is_empty());
}

#[test]
fn an_occurrence_that_fails_its_last_attempt_moves_on_and_the_job_is_never_dead() {
    let disk = FaultDisk::new(4);
    let clock = ManualClock::new(T0);
    let engine = open(&disk, &clock);
    let id = engine
        .schedule(every_second(Misfire::Coalesce))
        .expect("schedule");
    clock.set(T0 + SEC);
    let c = take(&engine).pop().expect("due");
    assert!(engine.fail_permanently(&c, "bad").expect("fail"));
    let info = engine.get(id).expect("still scheduled");
    assert_eq!((info.due_ms, info.failures), (T0 + 2 * SEC, 0));
    assert!(engine.dead_letter(id).is_none());
    assert_eq!(engine.stats().failed, 1);
    // A lease that runs out on the last attempt allowed: also on to the next occurrence.
    clock.set(T0 + 2 * SEC);
    let c = take(&engine).pop().expect("due");
    assert!(
        engine.fail(&c, "flaky").expect("fail"),
        "retried (2 attempts)"
    );
    let retry_due = engine.get(id).expect("live").due_ms;
    clock.set(retry_due.max(T0 + 2 * SEC));
    let again = take(&engine).pop().expect("retried");
    clock.advance(600); // the lease (500 ms) runs out
    engine.run_timers();
    assert!(
        take(&engine).is_empty(),
        "not delivered again: that was the last attempt"
    );
    let info = engine.get(id).expect("live");
    assert!(info.due_ms > again.due_ms && info.failures == 0, "{info:?}");
}

#[test]
fn a_cron_job_fires_at_its_wall_clock_times() {
    let disk = FaultDisk::new(5);
    // 2026-03-28T12:00:00Z: the next 02:30 in Berlin is on the spring-forward day, which has
    // no 02:30: it fires at 03:00 CEST (01:00 UTC).
    let start = 1_774_699_200_000;
    let clock = ManualClock::new(start);
    let engine = Engine::open_on(disk.storage(), config(), Arc::new(clock.clone())).expect("open");
    let r = Recurrence::cron("30 2 * * *", "Europe/Berlin").expect("cron");
    let id = engine.schedule(JobSpec::recurring(r)).expect("schedule");
    let first = engine.get(id).expect("live").due_ms;
    assert_eq!(first, 1_774_746_000_000, "2026-03-29T01:00:00Z");
    clock.set(first);
    let c = take(&engine).pop().expect("due");
    assert!(engine.complete(&c).expect("complete"));
    // Then 02:30 CEST, 00:30 UTC.
    assert_eq!(engine.get(id).expect("live").due_ms, 1_774_830_600_000);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// An interval job completed at random moments (some late) through reopens: every
    /// delivery is due on the grid `T0 + k * interval`, strictly later than the one before,
    /// never in the future, and (coalescing) the next is the first grid point after the
    /// completion.
    #[test]
    fn deliveries_stay_on_the_grid(
        interval in 1u64..5_000,
        steps in prop::collection::vec((0u64..20_000, any::<bool>()), 1..40),
    ) {
        let disk = FaultDisk::new(6);
        let clock = ManualClock::new(T0);
        let mut engine = open(&disk, &clock);
        let id = engine
            .schedule(JobSpec::recurring(Recurrence::every(interval, T0).expect("interval")))
            .expect("schedule");
        let mut last = T0;
        for (advance, reopen) in steps {
            clock.advance(advance);
            let now = timewheel::Clock::now_ms(&clock);
            for c in take(&engine) {
                prop_assert_eq!((c.due_ms - T0) % interval, 0);
                prop_assert!(c.due_ms > last && c.due_ms <= now);
                last = c.due_ms;
                prop_assert!(engine.complete(&c).expect("complete"));
                let next = engine.get(id).expect("live").due_ms;
                prop_assert_eq!(next, T0 + ((now - T0) / interval + 1) * interval);
            }
            if reopen {
                engine.close().expect("close");
                engine = open(&disk, &clock);
            }
        }
    }
}

#[test]
fn the_next_occurrence_fires_on_the_timer_thread() {
    // Found by the sidecar test: the completion's next occurrence waited for the timer
    // thread's next deadline (the lease, here a minute) because nothing woke it. The 10 s are
    // a guard, well under the lease, not a measurement.
    let dir = common::TempDir::new("recurring-timer");
    let engine = Engine::open(Config::new(&dir.0).lease_ms(60_000)).expect("opens");
    let now = timewheel::Clock::now_ms(&timewheel::SystemClock);
    let id = engine
        .schedule(JobSpec::recurring(
            Recurrence::every(50, now).expect("interval"),
        ))
        .expect("schedule");
    for k in 1..=3 {
        let job = engine
            .next(std::time::Duration::from_secs(10))
            .expect("next")
            .unwrap_or_else(|| panic!("occurrence {k} did not fire"));
        assert_eq!(job.id, id);
        assert!(engine.complete(&job).expect("complete"));
    }
}
