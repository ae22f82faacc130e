//! The threads oracle (`threads_oracle.rs`) with the async API: tokio tasks on two workers
//! schedule (single calls, batches, and idempotency keys shared among them), cancel,
//! reschedule, take from the claimed stream and complete, all at once against the engine's
//! timer thread on the system clock, on the fault-injecting disk. Checked as it runs: no job
//! claimed before its due time (by the test's clock), none after its cancel or completion was
//! acknowledged, no (job, attempt) twice, no new job's id twice. Then a power cut that keeps
//! only what was synced, and a reopen: every id a call resolved with (a key's holder too,
//! whoever appended it) is there with its due time unless its cancel or completion was
//! acknowledged, and no acknowledged end comes back.
//!
//! `ASYNC_ORACLE_OPS=500000 cargo test --release --test async_oracle` runs a campaign.

mod common;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_core::Stream;
use timewheel::{Clock, Config, Engine, JobId, JobSpec, Outcome, SystemClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SimRng};

#[derive(Default)]
struct Ledger {
    /// Jobs a schedule without a key resolved with (new jobs, each its call's own) -> due time.
    plain: HashMap<JobId, u64>,
    /// Ids a schedule with a key resolved with: the call's new job, or the job holding the
    /// key, which another call may have appended and not yet seen resolve (so no due time).
    keyed: HashSet<JobId>,
    /// The newest jobs, for the canceller to race the timer and the workers on.
    recent: VecDeque<JobId>,
    cancelled: HashSet<JobId>,
    completed: HashSet<JobId>,
    claims: HashSet<(JobId, u32)>,
    /// Keyed schedules that resolved with an id already known.
    named: u64,
}

impl Ledger {
    fn remember(&mut self, id: JobId) {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(id);
    }
}

const RECENT: usize = 256;
/// Keys `k0`..: few, so that calls name each other's jobs.
const KEYS: u64 = 8;
/// Durable images kept for the check at the end (each is a copy of the disk).
const IMAGES_MAX: usize = 96;

fn config() -> Config {
    Config::new("/unused")
        .segment_bytes(1 << 20)
        .lease_ms(60_000)
        .id_block(97)
}

/// The next item of a stream, without a helper crate.
async fn next<S: Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *stream).poll_next(cx)).await
}

#[test]
fn async_tasks_keep_the_oracle() {
    let ops: u64 = std::env::var("ASYNC_ORACLE_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let disk = FaultDisk::new(4343);
    let clock = Arc::new(SystemClock);
    let engine = Arc::new(Engine::open_on(disk.storage(), config(), clock.clone()).expect("opens"));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let scheduled = Arc::new(AtomicU64::new(0));
    let producing = Arc::new(AtomicBool::new(true));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    let mut producers = Vec::new();
    for p in 0..16u64 {
        let (engine, ledger, scheduled) = (engine.clone(), ledger.clone(), scheduled.clone());
        producers.push(runtime.spawn(async move {
            let mut rng = SimRng::new(p);
            while scheduled.fetch_add(1, Ordering::Relaxed) < ops {
                let n = if rng.chance(0.6) {
                    1
                } else {
                    1 + rng.below(6) as usize
                };
                let now = SystemClock.now_ms();
                let specs: Vec<(u64, Option<u64>)> = (0..n)
                    .map(|_| {
                        let key = rng.chance(0.25).then(|| rng.below(KEYS));
                        // Half the keyed jobs far ahead: they stay, so an image that lost
                        // one shows it (a job that ended could have ended durably).
                        let far = key.is_some() && rng.chance(0.5);
                        (now + if far { 3_600_000 } else { rng.below(30) }, key)
                    })
                    .collect();
                // A key's name changes every 10 ms, so that keys keep being taken anew (a far
                // job would hold its key for good) and calls close in time name each other's.
                let epoch = now / 10;
                let spec = |&(due, key): &(u64, Option<u64>)| match key {
                    Some(k) => JobSpec::at(due).key(format!("k{k}-{epoch}")),
                    None => JobSpec::at(due),
                };
                let ids = if n == 1 {
                    vec![
                        engine
                            .schedule_async(spec(&specs[0]))
                            .await
                            .expect("schedule"),
                    ]
                } else {
                    engine
                        .schedule_batch_async(specs.iter().map(spec))
                        .await
                        .expect("schedule a batch")
                };
                let mut l = ledger.lock().unwrap();
                for (id, &(due, key)) in ids.into_iter().zip(&specs) {
                    if key.is_none() {
                        assert!(
                            !l.keyed.contains(&id) && l.plain.insert(id, due).is_none(),
                            "id {id} handed out twice"
                        );
                        l.remember(id);
                    } else {
                        assert!(!l.plain.contains_key(&id), "id {id} handed out twice");
                        if l.keyed.insert(id) {
                            l.remember(id);
                        } else {
                            l.named += 1;
                        }
                    }
                }
            }
        }));
    }
    let canceller = {
        let (engine, ledger, producing) = (engine.clone(), ledger.clone(), producing.clone());
        runtime.spawn(async move {
            let mut rng = SimRng::new(99);
            while producing.load(Ordering::Acquire) {
                let ids: Vec<JobId> = {
                    let l = ledger.lock().unwrap();
                    let n = l.recent.len() as u64;
                    let mut ids: Vec<JobId> = (0..n.min(4))
                        .map(|_| l.recent[rng.below(n) as usize])
                        .collect();
                    ids.sort_unstable();
                    ids.dedup();
                    ids
                };
                if ids.is_empty() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                if rng.chance(0.3) {
                    // Moved a little later: still racing the timer.
                    let due = SystemClock.now_ms() + rng.below(40);
                    let id = ids[0];
                    let out = engine.reschedule_async(id, due).await.expect("reschedule");
                    let mut l = ledger.lock().unwrap();
                    if out == Outcome::Done {
                        assert!(!l.completed.contains(&id), "moved {id} after completion");
                        assert!(!l.cancelled.contains(&id), "moved {id} after its cancel");
                        if let Some(d) = l.plain.get_mut(&id) {
                            *d = due;
                        }
                    }
                    continue;
                }
                let out = if ids.len() == 1 {
                    vec![engine.cancel_async(ids[0]).await.expect("cancel")]
                } else {
                    engine.cancel_batch_async(&ids).await.expect("cancel")
                };
                let l = &mut *ledger.lock().unwrap();
                common::record_cancels(&ids, out, &mut l.cancelled, &l.completed);
            }
        })
    };
    // A slow disk now and then: syncs held for a moment, then the durable image taken (a
    // power cut's, the engine going on) with the ids resolved by then. Every one of them must
    // be in that image unless its job ended (an end can be durable before its call resolves).
    // A thread of its own: an async call that rolls the log syncs on its runtime worker (see
    // `engine::asynch`), so a task could not be sure to run and let the syncs go.
    let snapshotter = {
        let (disk, ledger, producing) = (disk.clone(), ledger.clone(), producing.clone());
        std::thread::spawn(move || {
            let mut images = Vec::new();
            while producing.load(Ordering::Acquire) {
                disk.hold_syncs(true);
                std::thread::sleep(Duration::from_millis(2));
                if images.len() < IMAGES_MAX {
                    let l = ledger.lock().unwrap();
                    let ids: Vec<JobId> = l.plain.keys().chain(&l.keyed).copied().collect();
                    images.push((disk.crash(&CrashOptions::clean()), ids));
                }
                disk.hold_syncs(false);
                std::thread::sleep(Duration::from_millis(3));
            }
            images
        })
    };
    let mut workers = Vec::new();
    for w in 0..2 {
        let (engine, ledger, producing) = (engine.clone(), ledger.clone(), producing.clone());
        workers.push(runtime.spawn(async move {
            let mut stream = engine.claimed_stream(32);
            loop {
                let taken = if w == 0 {
                    tokio::time::timeout(Duration::from_millis(50), next(&mut stream))
                        .await
                        .ok()
                        .flatten()
                        .map(|r| r.expect("claimed stream"))
                } else {
                    tokio::time::timeout(Duration::from_millis(50), engine.next_async())
                        .await
                        .ok()
                        .and_then(|r| r.expect("next"))
                };
                let Some(job) = taken else {
                    if !producing.load(Ordering::Acquire) {
                        return;
                    }
                    continue;
                };
                let now = SystemClock.now_ms();
                {
                    let l = ledger.lock().unwrap();
                    common::check_claim(&job, now, &l.cancelled, &l.completed);
                }
                let done = engine.complete_async(&job).await.expect("complete");
                let l = &mut *ledger.lock().unwrap();
                common::record_completion(&job, done, &mut l.claims, &mut l.completed);
            }
        }));
    }
    runtime.block_on(async {
        for p in producers {
            p.await.expect("a producer broke the oracle");
        }
        producing.store(false, Ordering::Release);
        canceller.await.expect("the canceller broke the oracle");
        for w in workers {
            w.await.expect("a worker broke the oracle");
        }
    });
    drop(runtime);
    let images = snapshotter.join().expect("the snapshots");
    let l = ledger.lock().unwrap();
    assert!(
        l.cancelled.is_disjoint(&l.completed),
        "no job both cancelled and completed"
    );
    eprintln!(
        "async oracle: {} jobs, {} keyed, {} schedules named a job by its key, {} cancelled, \
         {} completed; {} durable images checked",
        l.plain.len() + l.keyed.len(),
        l.keyed.len(),
        l.named,
        l.cancelled.len(),
        l.completed.len(),
        images.len()
    );
    let ended = |id: &JobId| l.cancelled.contains(id) || l.completed.contains(id);
    assert!(!images.is_empty(), "the disk was slow at least once");
    for (n, (image, ids)) in images.iter().enumerate() {
        let engine = Engine::open_on(image.storage(), config(), clock.clone()).expect("opens");
        for id in ids {
            assert!(
                engine.get(*id).is_some() || ended(id),
                "job {id} resolved before image {n} and missing from it: acknowledged before \
                 it was durable"
            );
        }
    }
    let Ok(engine) = Arc::try_unwrap(engine) else {
        panic!("every task ended");
    };
    let plain = l.plain.iter().map(|(id, due)| (*id, Some(*due)));
    let acked = plain.chain(l.keyed.iter().map(|id| (*id, None)));
    common::check_after_power_cut(engine, &disk, config(), clock, acked, ended);
    assert!(
        !l.completed.is_empty() && !l.cancelled.is_empty() && l.named > 0,
        "every kind of op ran: {} completed, {} cancelled, {} named by a key",
        l.completed.len(),
        l.cancelled.len(),
        l.named
    );
}
