//! The simulation's oracle with real threads: producers schedule, cancellers cancel, workers
//! take, claim and complete, all at once against the engine's own timer thread on the system
//! clock, on the fault-injecting disk. Checked as it runs: no job is claimed before its due
//! time (by the test's own clock), none after its cancel was acknowledged, none again after
//! its completion was acknowledged, no (job, attempt) twice, no id twice. Then a power cut that
//! keeps only what was synced, and a reopen: every acknowledged job that was not acknowledged
//! cancelled or completed is there with its due time, and no acknowledged end comes back.
//!
//! `THREADS_ORACLE_OPS=2000000 cargo test --release --test threads_oracle` runs a campaign.

mod common;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use timewheel::{Clock, Config, Engine, JobId, JobSpec, SystemClock};
use timewheel_wal::testing::{FaultDisk, SimRng};

#[derive(Default)]
struct Ledger {
    /// Acknowledged schedules: id -> due.
    acked: HashMap<JobId, u64>,
    /// The newest acknowledged ids, for the canceller to race the timer and the workers on.
    recent: VecDeque<JobId>,
    cancelled: HashSet<JobId>,
    completed: HashSet<JobId>,
    claims: HashSet<(JobId, u32)>,
}

/// How many of the newest acknowledged ids the canceller picks from.
const RECENT: usize = 256;

fn config(syncs_in_flight: usize) -> Config {
    Config::new("/unused")
        .segment_bytes(1 << 20)
        .lease_ms(60_000)
        .id_block(97)
        .syncs_in_flight(syncs_in_flight)
}

#[test]
fn real_threads_keep_the_oracle() {
    keep_the_oracle(1);
}

/// The same with two group-commit syncs in flight: a record written while one sync runs is
/// synced beside it, and acknowledged only once both have ended.
#[test]
fn real_threads_keep_the_oracle_with_two_syncs_in_flight() {
    keep_the_oracle(2);
}

fn keep_the_oracle(syncs_in_flight: usize) {
    let ops: u64 = std::env::var("THREADS_ORACLE_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40_000);
    let disk = FaultDisk::new(4242);
    let clock = Arc::new(SystemClock);
    let engine = Arc::new(
        Engine::open_on(disk.storage(), config(syncs_in_flight), clock.clone()).expect("opens"),
    );
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let done_ops = Arc::new(AtomicU64::new(0));
    let producing = Arc::new(AtomicBool::new(true));
    let mut threads = Vec::new();

    for p in 0..3u64 {
        let (engine, ledger, done_ops, producing) = (
            engine.clone(),
            ledger.clone(),
            done_ops.clone(),
            producing.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let mut rng = SimRng::new(p);
            while done_ops.fetch_add(1, Ordering::Relaxed) < ops {
                let n = 1 + rng.below(8) as usize;
                let now = SystemClock.now_ms();
                let dues: Vec<u64> = (0..n).map(|_| now + rng.below(30)).collect();
                let ids = engine
                    .schedule_batch(dues.iter().map(|&d| JobSpec::at(d)))
                    .expect("schedule");
                let mut l = ledger.lock().unwrap();
                for (id, due) in ids.into_iter().zip(dues) {
                    assert!(
                        l.acked.insert(id, due).is_none(),
                        "id {id} handed out twice"
                    );
                    if l.recent.len() == RECENT {
                        l.recent.pop_front();
                    }
                    l.recent.push_back(id);
                }
            }
            producing.store(false, Ordering::Release);
        }));
    }
    {
        let (engine, ledger, producing) = (engine.clone(), ledger.clone(), producing.clone());
        threads.push(std::thread::spawn(move || {
            let mut rng = SimRng::new(99);
            while producing.load(Ordering::Acquire) {
                // Recent ids are the ones still waiting. (Ids are not dense: a job's hour
                // bucket is in its low bits, so the ids near a live one are mostly unknown.)
                let ids: Vec<JobId> = {
                    let l = ledger.lock().unwrap();
                    if l.recent.is_empty() {
                        continue;
                    }
                    let n = l.recent.len() as u64;
                    let mut ids: Vec<JobId> =
                        (0..4).map(|_| l.recent[rng.below(n) as usize]).collect();
                    ids.sort_unstable();
                    ids.dedup();
                    ids
                };
                let out = engine.cancel_batch(&ids).expect("cancel");
                let l = &mut *ledger.lock().unwrap();
                common::record_cancels(&ids, out, &mut l.cancelled, &l.completed);
            }
        }));
    }
    for _ in 0..2 {
        let (engine, ledger, producing) = (engine.clone(), ledger.clone(), producing.clone());
        threads.push(std::thread::spawn(move || {
            loop {
                let jobs = engine
                    .claim_next(64, Duration::from_millis(50))
                    .expect("claim_next");
                let now = SystemClock.now_ms();
                if jobs.is_empty() {
                    if !producing.load(Ordering::Acquire) {
                        return;
                    }
                    continue;
                }
                {
                    let l = ledger.lock().unwrap();
                    for c in &jobs {
                        common::check_claim(c, now, &l.cancelled, &l.completed);
                    }
                }
                let done = engine.complete_batch(&jobs).expect("complete");
                let l = &mut *ledger.lock().unwrap();
                for (c, ok) in jobs.iter().zip(done) {
                    common::record_completion(c, ok, &mut l.claims, &mut l.completed);
                }
            }
        }));
    }
    for t in threads {
        t.join().expect("a thread broke the oracle");
    }
    // Jobs due after the last claim_next are still waiting; a power cut keeps what was synced.
    let l = ledger.lock().unwrap();
    assert!(
        l.cancelled.is_disjoint(&l.completed),
        "no job both cancelled and completed"
    );
    let Ok(engine) = Arc::try_unwrap(engine) else {
        panic!("threads joined");
    };
    common::check_after_power_cut(
        engine,
        &disk,
        config(syncs_in_flight),
        clock,
        l.acked.iter().map(|(id, due)| (*id, Some(*due))),
        |id| l.cancelled.contains(id) || l.completed.contains(id),
    );
    assert!(
        l.completed.len() as u64 > 0 && !l.cancelled.is_empty(),
        "every kind of op ran"
    );
}
