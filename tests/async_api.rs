//! The async API (feature `async`) on a tokio runtime: many tasks' durable calls share the
//! syncs and each resolves only once durable; a failed sync resolves every waiting future with
//! an error (never an acknowledgement); the claimed stream delivers every fired job once and
//! ends when a drain ends the ready stream.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::{T0, open_sim};
use futures_core::Stream;
use timewheel::{Config, Engine, Error, JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SyncFailure};

/// The next item of a stream, without a helper crate.
async fn next<S: Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *stream).poll_next(cx)).await
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime")
}

#[test]
fn many_tasks_schedule_claim_and_complete_every_job_once() {
    many_tasks_every_job_once(1);
}

/// The same with two syncs in flight: two durability threads, the second leading a sync of
/// what was awaited while the first one's sync was in flight.
#[test]
fn many_tasks_every_job_once_with_two_syncs_in_flight() {
    many_tasks_every_job_once(2);
}

fn many_tasks_every_job_once(syncs_in_flight: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config::new(dir.path()).syncs_in_flight(syncs_in_flight);
    let engine = Arc::new(Engine::open(config).expect("open"));
    const TASKS: u64 = 64;
    const PER_TASK: u64 = 100;
    // Jobs a worker has claimed: one a worker completed is no longer visible.
    let taken = Arc::new(std::sync::Mutex::new(HashSet::new()));
    runtime().block_on(async {
        let producers: Vec<_> = (0..TASKS)
            .map(|t| {
                let (engine, taken) = (engine.clone(), taken.clone());
                tokio::spawn(async move {
                    let mut ids = Vec::new();
                    for i in 0..PER_TASK {
                        let payload = format!("{t}:{i}");
                        let id = engine
                            .schedule_async(JobSpec::at(0).payload(payload))
                            .await
                            .expect("durable schedule");
                        // Resolved means durable and visible (unless a worker took it first: the
                        // claim comes only once it is visible).
                        assert!(
                            engine.get(id).is_some() || taken.lock().unwrap().contains(&id),
                            "{id} visible once resolved"
                        );
                        ids.push(id);
                    }
                    ids
                })
            })
            .collect();
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (engine, taken) = (engine.clone(), taken.clone());
                tokio::spawn(async move {
                    let mut done = Vec::new();
                    let mut stream = engine.claimed_stream(64);
                    while let Some(job) = next(&mut stream).await {
                        let job = job.expect("claimed");
                        taken.lock().unwrap().insert(job.id);
                        assert!(engine.complete_async(&job).await.expect("complete"));
                        done.push(job.id);
                    }
                    done
                })
            })
            .collect();
        let mut scheduled = HashSet::new();
        for p in producers {
            for id in p.await.expect("producer") {
                assert!(scheduled.insert(id), "{id} handed out twice");
            }
        }
        // Every job is due at once; wait for the workers to take them all, then end the
        // stream with a drain.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while engine.stats().completed < TASKS * PER_TASK {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{:?}",
                engine.stats()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let report = engine.drain(Duration::from_secs(5)).expect("drain");
        assert_eq!((report.running, report.ready), (0, 0));
        let mut completed = HashSet::new();
        for w in workers {
            for id in w.await.expect("worker") {
                assert!(completed.insert(id), "{id} completed twice");
            }
        }
        assert_eq!(completed, scheduled);
    });
    let log = engine.log_stats();
    assert!(
        log.syncs < TASKS * PER_TASK,
        "the tasks' schedules share syncs: {log:?}"
    );
}

#[test]
fn cancel_and_reschedule_resolve_once_durable_and_survive_a_crash() {
    let disk = FaultDisk::new(71);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let rt = runtime();
    let (kept, cancelled) = rt.block_on(async {
        let kept = engine
            .schedule_async(JobSpec::at(T0 + 50_000))
            .await
            .expect("schedule");
        let cancelled = engine
            .schedule_async(JobSpec::at(T0 + 60_000))
            .await
            .expect("schedule");
        assert!(
            engine
                .reschedule_async(kept, T0 + 70_000)
                .await
                .expect("reschedule")
                .is_done()
        );
        assert!(
            engine
                .cancel_async(cancelled)
                .await
                .expect("cancel")
                .is_done()
        );
        assert!(
            !engine
                .cancel_async(cancelled)
                .await
                .expect("cancel")
                .is_done()
        );
        (kept, cancelled)
    });
    // Only what was synced survives a crash: every resolved call was.
    engine.abandon();
    let disk = disk.crash(&CrashOptions::clean());
    let engine = open_sim(&disk, &clock);
    assert_eq!(engine.get(kept).map(|j| j.due_ms), Some(T0 + 70_000));
    assert!(engine.get(cancelled).is_none());
}

#[test]
fn a_failed_sync_resolves_every_waiting_future_with_an_error() {
    for syncs_in_flight in [1, 2] {
        failed_sync_fails_every_future(syncs_in_flight);
    }
}

fn failed_sync_fails_every_future(syncs_in_flight: usize) {
    let disk = FaultDisk::new(72);
    let clock = ManualClock::new(T0);
    let engine = Arc::new(
        Engine::open_on(
            disk.storage(),
            common::config().syncs_in_flight(syncs_in_flight),
            Arc::new(clock.clone()),
        )
        .expect("engine opens"),
    );
    disk.set_sync_failure(SyncFailure::Next);
    let results: Vec<Result<timewheel::JobId, Error>> = runtime().block_on(async {
        let calls: Vec<_> = (0..16)
            .map(|i| {
                let engine = engine.clone();
                tokio::spawn(async move { engine.schedule_async(JobSpec::at(T0 + i)).await })
            })
            .collect();
        let mut results = Vec::new();
        for c in calls {
            results.push(c.await.expect("task"));
        }
        results
    });
    // The first sync failed and poisoned the log; a schedule that resolved Ok was synced
    // before it (none here: every one waited behind the failed sync or came after it).
    let acked: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert!(
        acked.is_empty(),
        "acknowledged after a failed sync: {acked:?}"
    );
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Err(Error::Poisoned | Error::Io(_)))),
        "{results:?}"
    );
}

/// Cancel safety: a schedule whose future is dropped while it waits for its sync (a timeout,
/// a `select!` that took another branch) still makes its job visible once the job is durable.
/// The job is not hidden until the next open: a retry with the same key gets its id and finds
/// it. (Before, the dropped batch stayed invisible, its key pointing at it, until a restart.)
#[test]
fn a_schedule_future_dropped_while_it_waits_still_makes_its_job_visible() {
    let disk = FaultDisk::new(64);
    let clock = ManualClock::new(T0);
    let engine = Arc::new(open_sim(&disk, &clock));
    // A slow disk: no sync ends until the futures are dropped, so each one is dropped while
    // it waits (on a fast machine a sync could otherwise end within the first poll).
    let held = HeldSyncs::new(&disk);
    runtime().block_on(async {
        let mut dropped = Vec::new();
        for i in 0..20 {
            let key = format!("order-{i}");
            let spec = JobSpec::at(T0 + 1_000).key(key.clone());
            // Polled once (it appends and starts waiting), then dropped.
            let once = tokio::time::timeout(Duration::ZERO, engine.schedule_async(spec)).await;
            if once.is_err() {
                dropped.push(key);
            }
        }
        assert_eq!(
            dropped.len(),
            20,
            "every future was dropped while it waited"
        );
        for key in &dropped {
            assert_eq!(
                engine.id_by_key(key.as_bytes()),
                None,
                "{key}: not durable yet"
            );
        }
        drop(held);
        for key in &dropped {
            // A bounded wait for the durability thread's sync, not a timing assertion.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            let id = loop {
                if let Some(id) = engine.id_by_key(key.as_bytes()) {
                    break id;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{key}: its job never became visible"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            assert!(engine.get(id).is_some(), "{key}: {id} visible");
            let again = engine
                .schedule_async(JobSpec::at(T0 + 5).key(key.clone()))
                .await
                .expect("a retry of the same key");
            assert_eq!(again, id, "{key}: the retry finds the job");
        }
    });
}

/// A schedule whose key names a job appended but not yet durable (another caller's batch,
/// waiting for its sync) resolves only once that job is durable, as the blocking call does:
/// it acknowledges that job. (Before, it resolved at once with the id, nothing appended to
/// wait for, and a crash then lost the job it had acknowledged.)
#[test]
fn a_schedule_naming_a_key_not_yet_durable_resolves_once_the_job_is() {
    let disk = FaultDisk::new(73);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let spec = || JobSpec::at(T0 + 1_000).key("order-1");
    let (ids, pending) = engine.schedule_batch_nowait([spec()]).expect("append");
    let held = HeldSyncs::new(&disk);
    let id = runtime().block_on(async {
        let once = tokio::time::timeout(Duration::ZERO, engine.schedule_async(spec())).await;
        assert!(
            once.is_err(),
            "resolved while the job its key names was not durable: {once:?}"
        );
        drop(held);
        engine
            .schedule_async(spec())
            .await
            .expect("the same key, syncs going again")
    });
    assert_eq!(id, ids[0], "the key names the appended job");
    // Acknowledged, so a crash keeps it (with the batch never committed by its own caller).
    drop(pending);
    engine.abandon();
    let disk = disk.crash(&CrashOptions::clean());
    let engine = open_sim(&disk, &clock);
    assert_eq!(engine.id_by_key(b"order-1"), Some(id));
}

/// A take returns its claim without waiting for a sync (the claim's attempt is unique all
/// the same: see `Engine::claim`); the complete that ends the attempt is durable when it
/// returns, and with it the claim. With the disk's syncs held, a take that waited for its
/// claim's sync would never return (this test would fail at its guard).
#[test]
fn a_take_returns_its_claim_before_any_sync() {
    let disk = FaultDisk::new(65);
    let clock = ManualClock::new(T0);
    let engine = Arc::new(open_sim(&disk, &clock));
    let id = engine.schedule(JobSpec::at(T0)).expect("durable");
    assert_eq!(engine.run_timers(), 1, "due now");
    let syncs_before = disk.stats().file_syncs;
    let held = HeldSyncs::new(&disk);
    let claimed = runtime().block_on(async {
        // A bounded guard, not a timing assertion: the take must not wait for the disk.
        tokio::time::timeout(Duration::from_secs(60), engine.next_async())
            .await
            .expect("returned with the syncs held")
            .expect("claimed")
            .expect("a job")
    });
    assert_eq!((claimed.id, claimed.attempt), (id, 1));
    assert_eq!(disk.stats().file_syncs, syncs_before, "no sync ran");
    drop(held);
    assert!(engine.complete(&claimed).expect("durable"));
}

/// Cancel safety of a take that must wait: the claim of a job whose lease ran out is durable
/// before it is handed out, so the take awaits its sync; dropped while it awaits, it hands the
/// job back at once (the attempt ends without a failure), and the job fires again now with the
/// next attempt instead of when the new lease runs out (30 s by default).
#[test]
fn a_take_dropped_while_its_claim_awaits_the_sync_hands_the_job_back() {
    // The lease runs out: the job is ready again, its lease open in the log.
    let (disk, engine, id) = lease_ran_out(67, true);
    let held = HeldSyncs::new(&disk);
    runtime().block_on(async {
        let once = tokio::time::timeout(Duration::ZERO, engine.next_async()).await;
        assert!(once.is_err(), "the claim awaited its sync and was dropped");
    });
    drop(held);
    let job = engine.get(id).expect("live");
    assert_eq!(
        (job.state, job.attempt),
        (timewheel::JobState::Scheduled, 2),
        "attempt 2 was claimed, then handed back"
    );
    assert_eq!(engine.run_timers(), 1, "fires again at once");
    let again = runtime()
        .block_on(engine.next_async())
        .expect("claimed")
        .expect("a job");
    assert_eq!((again.id, again.attempt), (id, 3));
    assert!(engine.complete(&again).expect("durable"));
}

/// A take that waits to claim a job whose newest record is not durable yet (no job has two
/// claims unsynced) and is dropped meanwhile puts the id back into the ready queue: the job is
/// not left ready with its id taken until the claim deadline requeues it.
#[test]
fn a_take_dropped_while_it_waits_to_claim_puts_the_id_back() {
    // Its lease runs out before its claim is durable.
    let (disk, engine, id) = lease_ran_out(68, false);
    let held = HeldSyncs::new(&disk);
    runtime().block_on(async {
        let once = tokio::time::timeout(Duration::ZERO, engine.next_async()).await;
        assert!(
            once.is_err(),
            "waited for the first claim's sync, and was dropped"
        );
    });
    assert_eq!(
        engine.ready().try_iter().collect::<Vec<_>>(),
        vec![id],
        "the id is back in the ready queue"
    );
    drop(held);
    let again = engine.claim(id).expect("claim").expect("ready");
    assert_eq!(again.attempt, 2);
    assert!(engine.complete(&again).expect("durable"));
}

/// A job claimed once (attempt 1, made durable if `synced`) whose lease then ran out: it is
/// ready again, its id alone in the ready queue.
fn lease_ran_out(seed: u64, synced: bool) -> (FaultDisk, Arc<Engine>, timewheel::JobId) {
    let disk = FaultDisk::new(seed);
    let clock = ManualClock::new(T0);
    let engine = Arc::new(open_sim(&disk, &clock));
    let id = engine.schedule(JobSpec::at(T0)).expect("durable");
    assert_eq!(engine.run_timers(), 1);
    assert_eq!(engine.ready().try_iter().collect::<Vec<_>>(), vec![id]);
    let first = engine.claim(id).expect("claim").expect("ready");
    assert_eq!(first.attempt, 1);
    if synced {
        engine.sync().expect("the first claim durable");
    }
    clock.set(first.lease_until_ms);
    assert_eq!(engine.run_timers(), 1, "the lease ran out");
    (disk, engine, id)
}

/// Holds a disk's syncs until dropped (also when a failed assertion unwinds, which would
/// otherwise hang in the engine's closing sync).
struct HeldSyncs<'a>(&'a FaultDisk);

impl<'a> HeldSyncs<'a> {
    fn new(disk: &'a FaultDisk) -> Self {
        disk.hold_syncs(true);
        HeldSyncs(disk)
    }
}

impl Drop for HeldSyncs<'_> {
    fn drop(&mut self) {
        self.0.hold_syncs(false);
    }
}

/// A claimed stream dropped with jobs it took in a batch but has not yielded hands them back
/// at once; the one it yielded stays the caller's.
#[test]
fn a_stream_dropped_with_claims_it_has_not_yielded_hands_them_back() {
    let disk = FaultDisk::new(66);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let ids: HashSet<_> = engine
        .schedule_batch((0..3).map(|_| JobSpec::at(T0)))
        .expect("durable")
        .into_iter()
        .collect();
    assert_eq!(engine.run_timers(), 3);
    let first = runtime().block_on(async {
        let mut stream = engine.claimed_stream(3);
        next(&mut stream).await.expect("an item").expect("claimed")
    });
    assert!(ids.contains(&first.id));
    assert_eq!(
        engine.run_timers(),
        2,
        "the two not yielded fire again at once"
    );
    let again = engine
        .claim_batch(&fire_ids(&engine))
        .expect("claimed")
        .into_iter()
        .flatten()
        .map(|c| (c.id, c.attempt))
        .collect::<HashSet<_>>();
    let want: HashSet<_> = ids
        .iter()
        .filter(|&&id| id != first.id)
        .map(|&id| (id, 2))
        .collect();
    assert_eq!(again, want);
    assert!(
        engine.complete(&first).expect("durable"),
        "still the caller's"
    );
}

fn fire_ids(engine: &Engine) -> Vec<timewheel::JobId> {
    engine.ready().try_iter().collect()
}

/// Polls the future it holds, and wakes its own task again at once whenever that is pending.
struct Restless<F>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future> std::future::Future for Restless<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let polled = self.0.as_mut().poll(cx);
        if polled.is_pending() {
            cx.waker().wake_by_ref();
        }
        polled
    }
}

/// A roll syncs the old segment's tail and the new header: an async call whose append would
/// fill the segment must not do that on the runtime's thread. With every sync held, tasks
/// schedule more than a segment holds on a runtime of one thread: the log must roll (once the
/// syncs go through) while a heartbeat task on the same thread keeps running. Before the
/// durability thread rolled ahead of them, the call that filled the segment stopped the
/// runtime's only thread in the roll's held sync, and the heartbeat with it; and with a roll
/// ahead that let a call go on at its second poll, a restless call (polled for nothing while
/// it waited for the roll) did the same.
#[test]
fn a_call_that_fills_the_segment_does_not_sync_on_the_runtime_thread() {
    let disk = FaultDisk::new(991);
    let clock = ManualClock::new(T0);
    let engine = Arc::new(
        Engine::open_on(
            disk.storage(),
            Config::new("/unused").segment_bytes(1 << 20),
            Arc::new(clock),
        )
        .expect("opens"),
    );
    let beats = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let runtime_thread = {
        let (engine, beats) = (engine.clone(), beats.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let heart = {
                    let beats = beats.clone();
                    tokio::spawn(async move {
                        loop {
                            beats.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    })
                };
                // 320 calls of 4 KiB: more than the 1 MiB segment holds. Every other one is
                // restless: polled again at once whenever it is pending, as a `select!` beside
                // a busy branch would poll it, so that what it awaits is woken for nothing.
                let calls: Vec<_> = (0..320u32)
                    .map(|i| {
                        let engine = engine.clone();
                        tokio::spawn(async move {
                            let call = engine.schedule_async(
                                JobSpec::at(T0 + 60_000).payload(vec![i as u8; 4096]),
                            );
                            if i % 2 == 0 {
                                Restless(Box::pin(call)).await
                            } else {
                                call.await
                            }
                        })
                    })
                    .collect();
                let mut ids = Vec::new();
                for call in calls {
                    ids.push(call.await.expect("task").expect("scheduled"));
                }
                heart.abort();
                ids
            })
        })
    };
    disk.hold_syncs(true);
    // The first syncs are held (the durability thread's); meanwhile the calls go on until
    // the segment is nearly full. The heartbeat must go on through it.
    assert!(
        disk.wait_for_held_syncs(1, Duration::from_secs(30)) >= 1,
        "a sync is held"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut before = beats.load(std::sync::atomic::Ordering::Relaxed);
    let mut beats_while_held = 0;
    while beats_while_held < 200 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
        let now = beats.load(std::sync::atomic::Ordering::Relaxed);
        beats_while_held += now - before;
        before = now;
    }
    assert!(
        beats_while_held >= 200,
        "the runtime's thread stopped while the syncs were held ({beats_while_held} \
         heartbeats): some call synced on it"
    );
    disk.hold_syncs(false);
    let ids = runtime_thread.join().expect("runtime thread");
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        320,
        "each its own job"
    );
    assert!(engine.log_stats().rolls >= 1, "the log rolled");
    for id in ids {
        assert!(engine.get(id).is_some(), "job {id} is visible");
    }
}

/// A full disk through the async API, as `nospace_writes_nothing` has it for the blocking
/// calls: async schedules fill the log until the next segment can not be allocated; then they
/// are refused at once during the back-off, with no allocation tried by them nor by a roll
/// ahead of them; async cancels still go through, into the reserve; once space is back and
/// the wait is over, async schedules work again, into a new segment.
#[test]
fn a_full_disk_refuses_async_schedules_without_retrying_and_lets_cancels_through() {
    let disk = FaultDisk::new(92);
    let clock = ManualClock::new(T0);
    let cfg = common::config()
        .segment_bytes(64 << 10)
        .payload_bytes_max(1 << 10);
    let engine = Engine::open_on(disk.storage(), cfg, Arc::new(clock.clone())).expect("opens");
    runtime().block_on(async {
        let mut keep = Vec::new();
        for _ in 0..3 {
            keep.push(
                engine
                    .schedule_async(JobSpec::at(T0 + 3_600_000))
                    .await
                    .expect("scheduled"),
            );
        }
        disk.set_enospc(true);
        let mut filled = false;
        for _ in 0..1_000 {
            match engine
                .schedule_async(JobSpec::at(T0 + 3_600_000).payload(vec![1; 200]))
                .await
            {
                Ok(_) => {}
                Err(Error::NoSpace { .. }) => {
                    filled = true;
                    break;
                }
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        assert!(filled, "the log filled up");
        let tried = disk.stats().enospc_failures;
        for _ in 0..500 {
            common::assert_refused_by_back_off(engine.schedule_async(JobSpec::at(T0)).await);
        }
        assert_eq!(
            disk.stats().enospc_failures,
            tried,
            "no allocation tried during the back-off"
        );
        for id in keep {
            assert!(engine.cancel_async(id).await.expect("cancel").is_done());
        }
        assert_eq!(
            disk.stats().enospc_failures,
            tried,
            "cancels try none either"
        );
        disk.set_enospc(false);
        clock.advance(100);
        let rolls = engine.log_stats().rolls;
        for _ in 0..400 {
            engine
                .schedule_async(JobSpec::at(T0 + 3_600_000).payload(vec![2; 200]))
                .await
                .expect("space is back");
        }
        assert!(engine.log_stats().rolls > rolls, "into a new segment");
    });
}
