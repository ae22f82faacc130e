//! Firing under load: lateness with many jobs pending (optionally beside compaction), and a
//! burst of jobs due in one millisecond.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use timewheel::{Config, Engine, JobSpec};

use super::{Percentiles, now_ms, now_us};

/// What a lateness run measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lateness {
    /// Due time to the claim's return, on the worker's clock.
    pub to_claim: Percentiles,
    /// The engine's own figure (`Stats::lateness_us_*`): due time to the ready queue (its p90
    /// is not kept: 0).
    pub to_ready: Percentiles,
    /// Claims whose due time was still ahead of the worker's clock.
    pub early: u64,
    /// Records folded by compaction beside the fires, per second (0 without compaction).
    pub compaction_records_per_s: f64,
}

/// How the lateness workload's two workers take and finish jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// Each completes the batch it holds and claims the next in one call
    /// (`complete_and_claim_next`): the claims come back once the completes are durable.
    Round,
    /// Each claims (`claim_next`, no sync) and hands what it took to a completer thread,
    /// which completes it (`complete_batch`, one sync for all it was handed): a worker never
    /// waits for the disk before its next claim.
    Handoff,
}

/// `jobs` jobs pending, due evenly over `jobs / 100` ms (~100k fires/s) from `lead_ms` ahead,
/// two workers taking them as `workers` says. With `compacting`, compaction folds a journal
/// of `3 * jobs` more jobs due over 30 days (3 of 4 cancelled) beside the fires, from 50 ms
/// before the first due time.
pub fn lateness(
    dir: &Path,
    jobs: u64,
    lead_ms: u64,
    compacting: bool,
    workers: Workers,
) -> Lateness {
    let n = jobs;
    let window_ms = (n / 100).max(1);
    let config = Config::new(dir).compact_interval_ms(0);
    let engine = Arc::new(Engine::open(config).expect("open"));
    if compacting {
        churn(&engine, 3 * n);
    }
    let start = now_ms() + lead_ms;
    let mut i = 0;
    while i < n {
        let m = 10_000.min(n - i);
        engine
            .schedule_batch((i..i + m).map(|k| JobSpec::at(start + k * window_ms / n)))
            .expect("schedule");
        i += m;
    }
    let compactor = compacting.then(|| {
        let engine = engine.clone();
        std::thread::spawn(move || {
            while now_ms() + 50 < start {
                std::thread::sleep(Duration::from_millis(5));
            }
            let t = Instant::now();
            let mut records = 0;
            loop {
                let r = engine.compact().expect("compact");
                if r.records == 0 {
                    return records as f64 / t.elapsed().as_secs_f64();
                }
                records += r.records;
            }
        })
    });
    let early = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let hist = Arc::new(Mutex::new(Histogram::<u64>::new(3).expect("histogram")));
    if workers == Workers::Handoff {
        let (to_complete, completions) = std::sync::mpsc::channel::<Vec<timewheel::Claimed>>();
        let completer = {
            let engine = engine.clone();
            std::thread::spawn(move || {
                while let Ok(mut batch) = completions.recv() {
                    batch.extend(completions.try_iter().flatten());
                    engine.complete_batch(&batch).expect("complete");
                }
            })
        };
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let (engine, early, done, hist, to_complete) = (
                    engine.clone(),
                    early.clone(),
                    done.clone(),
                    hist.clone(),
                    to_complete.clone(),
                );
                std::thread::spawn(move || {
                    let mut mine = Histogram::<u64>::new(3).expect("histogram");
                    while done.load(Ordering::Relaxed) < n {
                        let held = engine
                            .claim_next(4096, Duration::from_millis(100))
                            .expect("claim");
                        record_lateness(&held, &mut mine, &early);
                        done.fetch_add(held.len() as u64, Ordering::Relaxed);
                        to_complete.send(held).expect("completer running");
                    }
                    hist.lock()
                        .expect("no worker panicked")
                        .add(&mine)
                        .expect("same bounds");
                })
            })
            .collect();
        drop(to_complete);
        for t in takers {
            t.join().expect("worker");
        }
        completer.join().expect("completer");
        return finish(engine, &hist, &early, compactor);
    }
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (engine, early, done, hist) =
                (engine.clone(), early.clone(), done.clone(), hist.clone());
            std::thread::spawn(move || {
                let mut mine = Histogram::<u64>::new(3).expect("histogram");
                // Complete the jobs held and take and claim up to 4 096 fired ones, with one
                // sync for both (the worker loop the docs show).
                let mut held: Vec<timewheel::Claimed> = Vec::new();
                while done.load(Ordering::Relaxed) < n {
                    let finished = held.len() as u64;
                    held = engine
                        .complete_and_claim_next(&held, 4096, Duration::from_millis(100))
                        .expect("complete and claim");
                    done.fetch_add(finished, Ordering::Relaxed);
                    record_lateness(&held, &mut mine, &early);
                }
                engine.complete_batch(&held).expect("complete");
                hist.lock()
                    .expect("no worker panicked")
                    .add(&mine)
                    .expect("same bounds");
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    finish(engine, &hist, &early, compactor)
}

/// Records, on the worker's clock now, how late each of `held` is (`early`: due still ahead).
fn record_lateness(held: &[timewheel::Claimed], hist: &mut Histogram<u64>, early: &AtomicU64) {
    let at_us = now_us();
    for c in held {
        match at_us.checked_sub(c.due_ms * 1000) {
            Some(late) => hist.record(late).expect("in range"),
            None => {
                early.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The figures of a lateness run, once its workers are done; closes the engine.
fn finish(
    engine: Arc<Engine>,
    hist: &Mutex<Histogram<u64>>,
    early: &AtomicU64,
    compactor: Option<std::thread::JoinHandle<f64>>,
) -> Lateness {
    let compaction_records_per_s = compactor.map_or(0.0, |c| c.join().expect("compactor"));
    let st = engine.stats();
    let to_claim = Percentiles::of(&hist.lock().expect("joined"));
    Arc::into_inner(engine)
        .expect("joined")
        .close()
        .expect("close");
    Lateness {
        to_claim,
        to_ready: Percentiles {
            p50_us: st.lateness_us_p50 as f64,
            p90_us: 0.0,
            p99_us: st.lateness_us_p99 as f64,
            p999_us: st.lateness_us_p999 as f64,
            max_us: st.lateness_us_max as f64,
        },
        early: early.load(Ordering::Relaxed),
        compaction_records_per_s,
    }
}

/// Schedules `jobs` jobs due over 30 days from an hour ahead, and cancels 3 of 4: a journal
/// for compaction to fold.
pub fn churn(engine: &Engine, jobs: u64) {
    let far = now_ms() + 3_600_000;
    let span = 30 * 24 * 3_600_000u64;
    let mut i = 0;
    while i < jobs {
        let m = 100_000.min(jobs - i);
        let ids = engine
            .schedule_batch(
                (i..i + m).map(|k| JobSpec::at(far + k * 7_919 % span).payload([5u8; 16])),
            )
            .expect("schedule");
        let cancel: Vec<_> = ids
            .iter()
            .enumerate()
            .filter(|(j, _)| j % 4 != 0)
            .map(|(_, &id)| id)
            .collect();
        engine.cancel_batch(&cancel).expect("cancel");
        i += m;
    }
}

/// What a burst run measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Burst {
    /// The last of the burst entered the ready queue this long after its due time.
    pub last_ready_ms: f64,
    /// Single durable schedules from another thread meanwhile.
    pub schedule: Percentiles,
}

/// `jobs` jobs due in the same millisecond, `ahead_ms` ahead (70 s puts them in the minute
/// ring, so they cascade twice): how long after their due time the last one is in the ready
/// queue (a reader takes the ids off as they come), and the latency of single durable
/// schedules from another thread meanwhile, from 200 ms before the due time until the last id
/// is out.
pub fn burst(dir: &Path, jobs: u64, ahead_ms: u64) -> Burst {
    let n = jobs;
    let config = Config::new(dir).compact_interval_ms(0);
    let engine = Arc::new(Engine::open(config).expect("open"));
    let due = now_ms() + ahead_ms;
    super::schedule_in_batches(&engine, n, 10_000, |_| JobSpec::at(due));
    let finished = Arc::new(AtomicBool::new(false));
    let reader = {
        let (engine, finished) = (engine.clone(), finished.clone());
        std::thread::spawn(move || {
            let ready = engine.ready();
            let mut got = 0;
            while got < n {
                if ready.recv_timeout(Duration::from_secs(120)).is_err() {
                    panic!("only {got} of {n} fired");
                }
                got += 1;
            }
            let last_us = now_us();
            finished.store(true, Ordering::Release);
            last_us
        })
    };
    let scheduler = {
        let (engine, finished) = (engine.clone(), finished.clone());
        std::thread::spawn(move || {
            let mut hist = Histogram::<u64>::new(3).expect("histogram");
            while now_ms() + 200 < due {
                std::thread::sleep(Duration::from_millis(5));
            }
            while !finished.load(Ordering::Acquire) {
                let t = Instant::now();
                engine
                    .schedule(JobSpec::at(due + 3_600_000))
                    .expect("schedule");
                hist.record(t.elapsed().as_micros() as u64)
                    .expect("in range");
            }
            hist
        })
    };
    let last_us = reader.join().expect("reader");
    let hist = scheduler.join().expect("scheduler");
    Arc::into_inner(engine)
        .expect("joined")
        .close()
        .expect("close");
    Burst {
        last_ready_ms: last_us.saturating_sub(due * 1000) as f64 / 1e3,
        schedule: Percentiles::of(&hist),
    }
}
