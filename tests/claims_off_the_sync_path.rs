//! Claims are handed to workers before their records are durable (the fire-to-worker time is
//! the engine's, not the disk's), and the attempt number stays a fencing token: never handed
//! out twice for a job, across any crash. The rules (`src/record.rs`, `Opened`):
//! - every open appends and syncs an `Opened` record, and a clean close a `Closed`: the log
//!   counts the runs that crashed (`Stats::crashed_runs`);
//! - no job has two claims unsynced at once;
//! - a job whose lease the log holds open is claimed again only durably, so a job interrupted
//!   by a crash is delivered again with attempt + 1;
//! - a waiting job skips one number per crash it lived through (a claim that crash cut may
//!   have used it), and a clean restart skips none.

mod common;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use common::{T0, fire, open_sim};
use timewheel::{Engine, JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk};

/// Crashes `engine`'s disk keeping only what was synced.
fn crash(engine: Engine, disk: &FaultDisk) -> FaultDisk {
    engine.abandon();
    disk.crash(&CrashOptions::clean())
}

/// Claims `id` after firing it, expecting a delivery (the ready queue may also hold a stale
/// copy of its id, from before a reschedule).
fn claim_attempt(engine: &Engine, id: timewheel::JobId) -> u32 {
    let fired = fire(engine);
    assert!(
        !fired.is_empty() && fired.iter().all(|&f| f == id),
        "{fired:?}"
    );
    engine.claim(id).expect("claim").expect("ready").attempt
}

#[test]
fn a_claim_is_handed_out_before_its_sync() {
    let disk = FaultDisk::new(90);
    let clock = ManualClock::new(T0);
    let engine = Arc::new(open_sim(&disk, &clock));
    let id = engine.schedule(JobSpec::at(T0)).expect("durable");
    assert_eq!(fire(&engine), vec![id]);
    let syncs = disk.stats().file_syncs;
    disk.hold_syncs(true);
    let (tx, rx) = mpsc::channel();
    let worker = {
        let engine = engine.clone();
        std::thread::spawn(move || tx.send(engine.claim(id)).expect("sent"))
    };
    // A bounded guard, not a timing assertion: with every sync held, only a claim that does
    // not wait for one comes back.
    let got = rx.recv_timeout(Duration::from_secs(60));
    disk.hold_syncs(false);
    let claimed = got
        .expect("the claim came back with the syncs held")
        .expect("claim")
        .expect("ready");
    worker.join().expect("worker");
    assert_eq!((claimed.id, claimed.attempt), (id, 1));
    assert_eq!(disk.stats().file_syncs, syncs, "no sync ran for the claim");
    // The complete is durable when it returns, and the claim with it.
    assert!(engine.complete(&claimed).expect("durable"));
}

#[test]
fn a_claim_a_crash_cut_is_never_handed_out_again_even_after_a_reschedule() {
    let mut disk = FaultDisk::new(91);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let id = engine.schedule(JobSpec::at(T0)).expect("durable");
    assert_eq!(claim_attempt(&engine, id), 1);
    disk = crash(engine, &disk);

    // The claim is gone with the crash: the job waits again, its log attempt 0. A reschedule
    // (a record of the job) does not make it forget the number the cut claim used.
    let engine = open_sim(&disk, &clock);
    assert_eq!(engine.stats().crashed_runs, 1);
    let job = engine.get(id).expect("live");
    assert_eq!((job.attempt, job.failures), (0, 0));
    assert!(engine.reschedule(id, T0 + 10).expect("durable").is_done());
    clock.set(T0 + 10);
    assert_eq!(claim_attempt(&engine, id), 2);
    disk = crash(engine, &disk);

    let engine = open_sim(&disk, &clock);
    assert_eq!(engine.stats().crashed_runs, 2);
    assert_eq!(claim_attempt(&engine, id), 3);
    let c = engine.claim_batch(&[]).expect("nothing");
    assert!(c.is_empty());
}

#[test]
fn an_interrupted_job_is_delivered_again_with_attempt_plus_one_and_that_claim_is_durable() {
    let mut disk = FaultDisk::new(92);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let id = engine.schedule(JobSpec::at(T0)).expect("durable");
    assert_eq!(claim_attempt(&engine, id), 1);
    engine
        .sync()
        .expect("the claim made durable by a later sync");
    disk = crash(engine, &disk);

    // The log holds the lease of attempt 1 open: the job was running when the engine died.
    let engine = open_sim(&disk, &clock);
    assert_eq!(engine.recovery().interrupted, 1);
    assert_eq!(
        claim_attempt(&engine, id),
        2,
        "attempt + 1, no number skipped"
    );
    // That claim (an expired lease's) was synced before it was handed out: a crash right
    // after it keeps it, and the next delivery is 3, not 2 again.
    disk = crash(engine, &disk);
    let engine = open_sim(&disk, &clock);
    assert_eq!(engine.recovery().interrupted, 1);
    assert_eq!(claim_attempt(&engine, id), 3);
}

#[test]
fn a_waiting_job_skips_a_number_per_crash_and_a_clean_restart_skips_none() {
    let mut disk = FaultDisk::new(93);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let early = engine.schedule(JobSpec::at(T0)).expect("durable");
    let late = engine.schedule(JobSpec::at(T0 + 1_000)).expect("durable");
    assert_eq!(claim_attempt(&engine, early), 1);
    engine.close().expect("clean close");

    // A clean restart: nothing skipped, the interrupted job gets attempt + 1.
    let engine = open_sim(&disk, &clock);
    assert_eq!(engine.stats().crashed_runs, 0);
    assert_eq!(claim_attempt(&engine, early), 2);
    disk = crash(engine, &disk);
    let engine = open_sim(&disk, &clock);
    disk = crash(engine, &disk);

    // Two crashes: the job that waited through them may have had a claim cut in each.
    let engine = open_sim(&disk, &clock);
    assert_eq!(engine.stats().crashed_runs, 2);
    clock.set(T0 + 1_000);
    let fired = fire(&engine);
    assert!(fired.contains(&late), "{fired:?}");
    let c = engine.claim(late).expect("claim").expect("ready");
    assert_eq!(c.attempt, 3, "first delivery, two numbers skipped");
    engine.close().expect("clean close");
    let engine = open_sim(&disk, &clock);
    assert_eq!(
        engine.stats().crashed_runs,
        2,
        "a clean close counts no crash"
    );
}
