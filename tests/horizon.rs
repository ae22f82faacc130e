//! The resident horizon: jobs due beyond `Config::horizon_ms` cost no memory once compacted,
//! yet `get`, `cancel` and `reschedule` work on them, they fire on time as the clock reaches
//! their hour, nothing finished comes back, and a reopen loads only the near term.
//!
//! Checked against a model (id -> due time of every live job) after every step, over weeks of
//! simulated time, with compaction passes, reopens and crashes in between.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{T0, config};
use timewheel::{Clock, Config, Engine, JobId, JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SimRng};

const HOUR: u64 = 3_600_000;
const DAY: u64 = 24 * HOUR;

fn cfg() -> Config {
    let mut c = config();
    c.segment_bytes = 64 << 10;
    c.payload_bytes_max = 512;
    c.horizon_ms = 2 * HOUR;
    c.bucket_runs_max = 3;
    c
}

fn open(disk: &FaultDisk, clock: &ManualClock) -> Engine {
    Engine::open_on(disk.storage(), cfg(), Arc::new(clock.clone())).expect("opens")
}

/// Live jobs show their due time, finished ones show nothing: every `stride`-th id of each
/// (a `get` of a job kept on disk reads it back into memory, so a full check each step would
/// keep everything resident), and the counts of all.
fn check(engine: &Engine, model: &BTreeMap<JobId, u64>, gone: &[JobId], stride: usize, when: &str) {
    for (&id, &due) in model.iter().step_by(stride) {
        let got = engine.get(id).map(|j| j.due_ms);
        assert_eq!(got, Some(due), "{when}: live job {id}");
    }
    for &id in gone.iter().step_by(stride) {
        assert!(
            engine.get(id).is_none(),
            "{when}: finished job {id} came back"
        );
    }
    assert_eq!(
        engine.stats().scheduled + engine.stats().ready + engine.stats().running,
        model.len() as u64,
        "{when}: counts"
    );
}

#[test]
fn far_jobs_live_on_disk_and_still_fire_change_and_finish() {
    let mut disk = FaultDisk::new(21);
    let clock = ManualClock::new(T0);
    let mut rng = SimRng::new(9);
    let mut engine = open(&disk, &clock);
    let mut model: BTreeMap<JobId, u64> = BTreeMap::new();
    let mut gone: Vec<JobId> = Vec::new();
    let mut max_non_resident = 0;
    let mut faulted_changes = 0;

    for step in 0..40u64 {
        // New jobs, mostly far ahead.
        let specs: Vec<(u64, JobSpec)> = (0..120)
            .map(|i| {
                let due = clock.now_ms() + rng.between(0, 10 * DAY);
                (
                    due,
                    JobSpec::at(due).payload(vec![i as u8; (i % 50) as usize]),
                )
            })
            .collect();
        let dues: Vec<u64> = specs.iter().map(|(d, _)| *d).collect();
        let ids = engine
            .schedule_batch(specs.into_iter().map(|(_, s)| s))
            .unwrap();
        model.extend(ids.iter().copied().zip(dues));

        // Changes of known jobs: many of them kept on disk only by now.
        let known: Vec<JobId> = model.keys().copied().collect();
        for _ in 0..20 {
            let Some(&id) = rng.pick(&known) else { break };
            if !model.contains_key(&id) {
                continue;
            }
            let on_disk = engine.store_stats().non_resident > 0;
            if rng.chance(0.5) {
                let out = engine.cancel(id).unwrap();
                if out.is_done() {
                    model.remove(&id);
                    gone.push(id);
                }
            } else {
                let due = clock.now_ms() + rng.between(0, 12 * DAY);
                if engine.reschedule(id, due).unwrap().is_done() {
                    model.insert(id, due);
                }
            }
            faulted_changes += u64::from(on_disk);
        }

        // Time passes: what is due fires, and is completed.
        clock.advance(rng.between(HOUR / 2, 8 * HOUR));
        let now = clock.now_ms();
        let fired = common::fire(&engine);
        for &id in &fired {
            let due = model.get(&id).copied();
            assert!(
                due.is_some_and(|d| d <= now),
                "step {step}: {id} fired early or twice"
            );
        }
        common::finish_all(&engine, &fired);
        for id in fired {
            model.remove(&id);
            gone.push(id);
        }
        let overdue: Vec<JobId> = model
            .iter()
            .filter(|&(_, &d)| d <= now)
            .map(|(&id, _)| id)
            .collect();
        assert!(
            overdue.is_empty(),
            "step {step}: due jobs did not fire: {overdue:?}"
        );

        if step % 3 == 0 {
            while engine.compact().unwrap().records > 0 {}
        }
        max_non_resident = max_non_resident.max(engine.store_stats().non_resident);
        check(&engine, &model, &gone, 40, &format!("step {step}"));

        match step % 10 {
            4 => {
                engine.close().unwrap();
                engine = open(&disk, &clock);
                let r = engine.recovery().clone();
                assert!(
                    r.bucket_jobs < engine.stats().scheduled || r.buckets == 0,
                    "an open loads only the near term: {r:?}"
                );
                check(&engine, &model, &gone, 7, &format!("step {step}, reopened"));
            }
            9 => {
                engine.abandon();
                disk = disk.crash(&CrashOptions::random(&mut rng));
                engine = open(&disk, &clock);
                // Everything above was acknowledged: nothing is lost, nothing comes back.
                check(
                    &engine,
                    &model,
                    &gone,
                    7,
                    &format!("step {step}, after a crash"),
                );
            }
            _ => {}
        }
    }
    assert!(
        max_non_resident > 1_000,
        "most far jobs were kept on disk only: {max_non_resident}"
    );
    assert!(
        faulted_changes > 100,
        "changes of jobs kept on disk: {faulted_changes}"
    );

    check(&engine, &model, &gone, 1, "at the end");
    // The clock past every due time: every live job fires once.
    clock.advance(30 * DAY);
    let fired = common::fire(&engine);
    let mut expected: Vec<JobId> = model.keys().copied().collect();
    let mut got = fired.clone();
    got.sort_unstable();
    expected.sort_unstable();
    assert_eq!(
        got, expected,
        "every live job fires once the clock passes it"
    );
}
