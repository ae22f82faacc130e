//! The job lifecycle's workloads (issue 10): idempotency keys, a retry storm, tenant fairness.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use timewheel::{Backoff, Claimed, Config, DeadQuery, Engine, JobId, JobSpec, RetryPolicy};

use super::{Percentiles, now_ms, now_us};

/// `schedule_batch` throughput in jobs/s, batches of `batch`, with a unique idempotency key on
/// every job (`keyed`) or none. The keys' text is made before the clock starts (formatting it
/// is the caller's work, not the engine's); each spec gets its own copy, as a caller's would.
pub fn keyed_batches(dir: &Path, jobs: u64, batch: u64, keyed: bool) -> f64 {
    let engine = Engine::open(Config::new(dir)).expect("open");
    let due = now_ms() + 3_600_000;
    // The keys are made before the clock starts, and moved into the specs (as a caller moves
    // the order number it already holds): the clock times the engine's work, not a copy.
    let mut keys = if keyed {
        (0..jobs).map(|k| format!("order-{k:012}")).collect()
    } else {
        Vec::new()
    }
    .into_iter();
    let t = Instant::now();
    let mut i = 0;
    while i < jobs {
        let n = batch.min(jobs - i);
        engine
            .schedule_batch((i..i + n).map(|k| {
                let spec = JobSpec::at(due + k % 1000).payload([7u8; 16]);
                match keys.next() {
                    Some(key) => spec.key(key),
                    None => spec,
                }
            }))
            .expect("schedule");
        i += n;
    }
    let rate = jobs as f64 / t.elapsed().as_secs_f64();
    engine.close().expect("close");
    rate
}

/// What the retry storm saw.
#[derive(Clone, Copy, Debug)]
pub struct Storm {
    /// Failed deliveries handled per second, over the whole storm.
    pub attempts_per_s: f64,
    /// Due (of each retry) to its claim, on the worker's clock.
    pub lateness: Percentiles,
    /// Seconds from the first due time until the last job was dead.
    pub seconds: f64,
}

/// `jobs` jobs that fail every attempt, `attempts` allowed each, with a backoff from 10 ms
/// doubling to 200 ms; two workers claim and fail in batches. Panics if any job does not end
/// dead with exactly `attempts` attempts (no lost or duplicated attempt).
pub fn retry_storm(dir: &Path, jobs: u64, attempts: u32) -> Storm {
    let config = Config::new(dir).retry(RetryPolicy {
        max_attempts: attempts,
        backoff: Backoff::new(10, 200),
    });
    let engine = Arc::new(Engine::open(config).expect("open"));
    let start = now_ms() + 500;
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(10_000) {
        engine
            .schedule_batch(chunk.iter().map(|k| JobSpec::at(start + k % 1000)))
            .expect("schedule");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let t = Instant::now();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (engine, stop) = (engine.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut late = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 2)
                    .expect("histogram");
                let mut handled = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let got = engine
                        .claim_next(4096, Duration::from_millis(50))
                        .expect("claim");
                    let now = now_us();
                    for c in &got {
                        late.saturating_record(now.saturating_sub(c.due_ms * 1000).max(1));
                    }
                    handled += got.len() as u64;
                    let failed: Vec<(Claimed, String)> = got
                        .into_iter()
                        .map(|c| {
                            let r = format!("attempt {}", c.attempt);
                            (c, r)
                        })
                        .collect();
                    engine.fail_batch(&failed).expect("fail");
                }
                (late, handled)
            })
        })
        .collect();
    while engine.stats().dead < jobs {
        std::thread::sleep(Duration::from_millis(20));
    }
    let seconds = t.elapsed().as_secs_f64() - 0.5;
    stop.store(true, Ordering::Relaxed);
    let mut late =
        hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 2).expect("histogram");
    let mut handled = 0;
    for w in workers {
        let (h, n) = w.join().expect("worker");
        late.add(&h).expect("same bounds");
        handled += n;
    }
    assert_eq!(
        handled,
        jobs * u64::from(attempts),
        "every attempt delivered exactly once"
    );
    let mut seen = HashSet::new();
    let mut q = Some(DeadQuery::default().limit(10_000));
    while let Some(query) = q {
        let page = engine.dead_letters(&query).expect("list");
        for d in &page.jobs {
            assert_eq!(
                d.attempt, attempts,
                "job {} ended at attempt {}",
                d.id, d.attempt
            );
            assert_eq!(d.failures, attempts);
            assert!(seen.insert(d.id));
        }
        q = page.next;
    }
    assert_eq!(seen.len() as u64, jobs);
    Arc::into_inner(engine)
        .expect("workers joined")
        .close()
        .expect("close");
    Storm {
        attempts_per_s: handled as f64 / seconds,
        lateness: Percentiles::of(&late),
        seconds,
    }
}

/// Tenant 1 has `a_jobs` due within one second, tenant 2 `b_jobs` due over the same second;
/// two workers claim (batches of 256) and complete. Returns tenant 2's due-to-claim lateness
/// on the workers' clock, with fairness on (tenant 1 limited to `a_limit` running) or off.
pub fn fairness(dir: &Path, a_jobs: u64, b_jobs: u64, fair: bool, a_limit: u32) -> Percentiles {
    fairness_with(dir, a_jobs, b_jobs, fair, a_limit, |_| {})
}

/// [`fairness`], with the engine's config changed by `tune` (`examples/fairness_probe.rs`:
/// which part of tenant 2's tail is compaction's disk work, which the log's segment rolls).
pub fn fairness_with(
    dir: &Path,
    a_jobs: u64,
    b_jobs: u64,
    fair: bool,
    a_limit: u32,
    tune: impl FnOnce(&mut Config),
) -> Percentiles {
    let mut config = Config::new(dir);
    if fair {
        config = config.fair_tenants(0);
        config.tenant_running_limits.insert(1, a_limit);
    }
    tune(&mut config);
    let engine = Arc::new(Engine::open(config).expect("open"));
    let start = now_ms() + 3_000;
    for chunk in (0..a_jobs).collect::<Vec<_>>().chunks(10_000) {
        engine
            .schedule_batch(
                chunk
                    .iter()
                    .map(|k| JobSpec::at(start + k * 1000 / a_jobs).tenant(1)),
            )
            .expect("schedule a");
    }
    let b: HashSet<JobId> = engine
        .schedule_batch((0..b_jobs).map(|k| JobSpec::at(start + k * 1000 / b_jobs).tenant(2)))
        .expect("schedule b")
        .into_iter()
        .collect();
    let b = Arc::new(b);
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (engine, stop, b) = (engine.clone(), stop.clone(), b.clone());
            std::thread::spawn(move || {
                let mut late = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 2)
                    .expect("histogram");
                let mut done = 0u64;
                // Each round completes the last round's jobs and claims the next ones with one
                // sync (`complete_and_claim_next`).
                let mut got = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    got = engine
                        .complete_and_claim_next(&got, 256, Duration::from_millis(50))
                        .expect("complete and claim");
                    let now = now_us();
                    for c in got.iter().filter(|c| b.contains(&c.id)) {
                        late.saturating_record(now.saturating_sub(c.due_ms * 1000).max(1));
                    }
                    done += got.len() as u64;
                }
                engine.complete_batch(&got).expect("complete");
                (late, done)
            })
        })
        .collect();
    let total = a_jobs + b_jobs;
    while engine.stats().completed < total {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let mut late =
        hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 2).expect("histogram");
    for w in workers {
        let (h, _) = w.join().expect("worker");
        late.add(&h).expect("same bounds");
    }
    assert_eq!(late.len(), b_jobs, "every job of tenant 2 was claimed once");
    Arc::into_inner(engine)
        .expect("workers joined")
        .close()
        .expect("close");
    Percentiles::of(&late)
}
