//! The worker's side as a user drives it: `next` and `claim_next` take and claim in one step;
//! a fired id taken off the queue and never claimed comes back by itself; `cancel` says why
//! it did nothing; batches answer per item; `drain` ends the ready stream and lets in-flight
//! work finish.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{T0, config, fire, open_sim};
use timewheel::{Engine, JobSpec, ManualClock, Outcome};
use timewheel_wal::testing::FaultDisk;

#[test]
fn next_takes_and_claims_and_claim_next_batches() {
    let disk = FaultDisk::new(70);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let ids = engine
        .schedule_batch((0..5).map(|i| JobSpec::at(T0 + i)))
        .expect("scheduled");
    clock.set(T0 + 10);
    engine.run_timers();
    let one = engine.next(Duration::ZERO).expect("next").expect("a job");
    assert_eq!((one.id, one.attempt, one.ready_at_ms), (ids[0], 1, T0 + 10));
    let rest = engine.claim_next(10, Duration::ZERO).expect("claim_next");
    assert_eq!(rest.iter().map(|c| c.id).collect::<Vec<_>>(), ids[1..]);
    assert!(
        engine.next(Duration::ZERO).expect("next").is_none(),
        "nothing left"
    );
    let done = engine
        .complete_batch(&[one.clone(), one])
        .expect("complete");
    assert_eq!(
        done,
        [true, false],
        "a batch naming a job twice finishes it once"
    );
}

#[test]
fn a_fired_id_taken_and_never_claimed_comes_back() {
    let disk = FaultDisk::new(71);
    let clock = ManualClock::new(T0);
    let mut cfg = config();
    cfg.lease_ms = 1_000;
    let engine = Engine::open_on(disk.storage(), cfg, Arc::new(clock.clone())).expect("opens");
    let id = engine.schedule(JobSpec::at(T0)).expect("scheduled");
    assert_eq!(fire(&engine), vec![id], "a worker took the id, then died");
    clock.set(T0 + 999);
    assert!(fire(&engine).is_empty());
    clock.set(T0 + 1_000);
    assert_eq!(
        fire(&engine),
        vec![id],
        "queued again after the claim deadline"
    );
    assert_eq!(engine.stats().requeued, 1);
    let c = engine.claim(id).expect("claim").expect("ready");
    assert_eq!(
        c.attempt, 1,
        "never claimed before: still the first attempt"
    );
}

#[test]
fn cancel_says_why_and_batches_answer_per_item() {
    let disk = FaultDisk::new(72);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let ids = engine
        .schedule_batch([
            JobSpec::at(T0),
            JobSpec::at(T0 + 5_000),
            JobSpec::at(T0 + 6_000),
        ])
        .expect("scheduled");
    assert_eq!(fire(&engine), vec![ids[0]]);
    let running = engine.claim(ids[0]).expect("claim").expect("ready");
    let out = engine
        .cancel_batch(&[ids[0], ids[1], ids[1], timewheel::JobId(999)])
        .expect("cancel_batch");
    assert_eq!(
        out,
        [
            Outcome::Running,
            Outcome::Done,
            Outcome::NotFound,
            Outcome::NotFound
        ]
    );
    assert_eq!(
        engine.reschedule(ids[1], T0).expect("reschedule"),
        Outcome::NotFound
    );
    assert_eq!(
        engine.reschedule(ids[2], T0).expect("reschedule"),
        Outcome::Done
    );
    assert!(engine.complete(&running).expect("complete"));
    assert_eq!(engine.cancel(ids[0]).expect("cancel"), Outcome::NotFound);
    assert_eq!(fire(&engine), vec![ids[2]]);
    let claims = engine.claim_batch(&[ids[2], ids[2]]).expect("claim_batch");
    assert!(
        claims[0].is_some() && claims[1].is_none(),
        "one claim per job"
    );
}

#[test]
fn drain_ends_the_ready_stream_and_lets_running_work_finish() {
    let dir = common::TempDir::new("drain");
    let engine = Arc::new(Engine::open(timewheel::Config::new(&dir.0)).expect("opens"));
    let ids = engine
        .schedule_batch((0..20).map(|_| JobSpec::after(Duration::ZERO)))
        .expect("scheduled");
    let later = engine
        .schedule(JobSpec::after(Duration::from_secs(3_600)))
        .expect("scheduled");
    // One worker holds a job while the drain starts; another loops over the raw stream.
    let held = engine
        .next(Duration::from_secs(20))
        .expect("next")
        .expect("fires");
    let looper = std::thread::spawn({
        let engine = Arc::clone(&engine);
        move || {
            let mut done = 0;
            for id in engine.ready() {
                if let Some(c) = engine.claim(id).expect("claim during drain") {
                    assert!(engine.complete(&c).expect("complete during drain"));
                    done += 1;
                }
            }
            done
        }
    });
    // The held job is completed only once the drain has begun (the ready stream ends, and so
    // the loop over it, only then): the drain must wait for it.
    let finisher = std::thread::spawn({
        let engine = Arc::clone(&engine);
        move || {
            let looped = looper.join().expect("the for loop over ready() ended");
            let completed = engine.complete(&held).expect("complete during drain");
            (looped, completed, std::time::Instant::now())
        }
    });
    let report = engine.drain(Duration::from_secs(20)).expect("drain");
    let drained_at = std::time::Instant::now();
    let (looped, completed, completed_at) = finisher.join().expect("finisher");
    assert!(completed, "in-flight work finished during the drain");
    assert!(
        completed_at <= drained_at,
        "the drain returned before the running job finished"
    );
    assert_eq!(report.running, 0);
    assert!(looped < ids.len());
    assert!(
        engine.schedule(JobSpec::after(Duration::ZERO)).is_err(),
        "closed"
    );
    drop(engine);
    // What was not done is durable and comes back.
    let engine = Engine::open(timewheel::Config::new(&dir.0)).expect("reopens");
    let s = engine.stats();
    assert_eq!(s.scheduled + s.ready, (ids.len() - 1 - looped) as u64 + 1);
    assert!(engine.get(later).is_some());
}

#[test]
fn reschedule_and_fail_batches_answer_per_item_and_refuse_bad_input_whole() {
    let disk = FaultDisk::new(73);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let ids = engine
        .schedule_batch([JobSpec::at(T0), JobSpec::at(T0), JobSpec::at(T0 + 9_000)])
        .expect("scheduled");
    assert!(
        engine
            .reschedule_batch(&[(ids[2], T0), (ids[2], u64::MAX)])
            .is_err(),
        "a due out of range refuses the whole batch"
    );
    assert_eq!(
        engine.get(ids[2]).expect("live").due_ms,
        T0 + 9_000,
        "nothing written"
    );
    let mut fired = fire(&engine);
    fired.sort();
    assert_eq!(fired, ids[..2]);
    let held = engine.claim_batch(&ids[..2]).expect("claim");
    let (a, b) = (held[0].clone().expect("a"), held[1].clone().expect("b"));
    let out = engine
        .reschedule_batch(&[
            (ids[0], T0 + 5),
            (ids[2], T0 + 1),
            (timewheel::JobId(999), T0),
        ])
        .expect("reschedule_batch");
    assert_eq!(out, [Outcome::Running, Outcome::Done, Outcome::NotFound]);
    let too_long = "x".repeat(config().fail_reason_bytes_max + 1);
    assert!(engine.fail_batch(&[(a.clone(), too_long)]).is_err());
    let done = engine
        .fail_batch(&[
            (a.clone(), "boom".into()),
            (b, "bust".into()),
            (a, "again".into()),
        ])
        .expect("fail_batch");
    assert_eq!(done, [true, true, false]);
    // Retryable failures: both wait for a retry, with the failure counted.
    assert_eq!(engine.stats().retried, 2);
    assert_eq!(engine.stats().failed, 0);
    for id in [ids[0], ids[1]] {
        let info = engine.get(id).expect("retried");
        assert_eq!(
            (info.state, info.failures),
            (timewheel::JobState::Scheduled, 1)
        );
    }
    clock.set(T0 + 1);
    assert_eq!(fire(&engine), vec![ids[2]], "moved earlier by the batch");
}

#[test]
fn complete_and_claim_next_shares_one_sync_and_its_completions_survive_a_crash() {
    let disk = FaultDisk::new(71);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let ids = engine
        .schedule_batch((0..10).map(|i| JobSpec::at(T0 + i)))
        .expect("scheduled");
    clock.set(T0 + 10);
    engine.run_timers();
    let mut held = engine.claim_next(4, Duration::ZERO).expect("first claims");
    let mut seen: Vec<_> = held.iter().map(|c| c.id).collect();
    let mut rounds = 0;
    while seen.len() < ids.len() {
        let syncs = disk.stats().file_syncs;
        held = engine
            .complete_and_claim_next(&held, 4, Duration::ZERO)
            .expect("round");
        assert_eq!(
            disk.stats().file_syncs - syncs,
            1,
            "round {rounds}: the completions and the claims share one sync"
        );
        seen.extend(held.iter().map(|c| c.id));
        rounds += 1;
    }
    assert_eq!(seen, ids, "every job claimed once, in firing order");
    assert_eq!(engine.stats().completed, 8, "all but the last round's two");
    // The last round: nothing left to claim, so it waits for its completions alone.
    let rest = engine
        .complete_and_claim_next(&held, 4, Duration::ZERO)
        .expect("last round");
    assert!(rest.is_empty());
    engine.abandon();
    let disk = disk.crash(&timewheel_wal::testing::CrashOptions::clean());
    let engine = open_sim(&disk, &clock);
    assert_eq!(
        engine.stats().scheduled + engine.stats().ready + engine.stats().running,
        0,
        "every completion was durable when its call returned"
    );
    for id in ids {
        assert!(engine.get(id).is_none(), "job {id} came back after a crash");
    }
}
