//! Durable schedules: batches, and single calls from threads or async tasks.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use timewheel::{Config, Durability, Engine, JobSpec};

use super::now_ms;
use crate::cpu::process_cpu_seconds;

/// `schedule_batch` throughput in jobs/s: `jobs` jobs with 16-byte payloads in batches of
/// `batch`, from `threads` threads, due an hour ahead.
pub fn batch(dir: &Path, jobs: u64, batch: u64, threads: u64, durability: Durability) -> f64 {
    let config = Config::new(dir).durability(durability);
    let engine = Arc::new(Engine::open(config).expect("open"));
    let due = now_ms() + 3_600_000;
    let per_thread = jobs / threads;
    let t = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let mut i = 0;
                while i < per_thread {
                    let n = batch.min(per_thread - i);
                    engine
                        .schedule_batch(
                            (i..i + n).map(|k| JobSpec::at(due + k % 1000).payload([7u8; 16])),
                        )
                        .expect("schedule");
                    i += n;
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("scheduler");
    }
    let rate = (per_thread * threads) as f64 / t.elapsed().as_secs_f64();
    close(engine);
    rate
}

/// What a run of single durable calls measured.
#[derive(Clone, Copy, Debug)]
pub struct Single {
    /// Calls acknowledged per second.
    pub calls_per_s: f64,
    /// Records each sync made durable, on average: how many callers' records group commit
    /// gathered into one sync.
    pub records_per_sync: f64,
    /// Mean time of one sync (the disk's, under this load), µs.
    pub sync_us: f64,
    /// The process's CPU time (every thread: callers, runtime, engine) per call, µs: on two
    /// vCPUs, what bounds many callers once the disk keeps up.
    pub cpu_us_per_call: f64,
}

impl Single {
    fn measured(engine: &Engine, calls: u64, elapsed_s: f64, cpu_s: f64) -> Single {
        let log = engine.log_stats();
        let syncs = log.syncs.max(1) as f64;
        Single {
            calls_per_s: calls as f64 / elapsed_s,
            records_per_sync: log.records as f64 / syncs,
            sync_us: log.sync_seconds_total * 1e6 / syncs,
            cpu_us_per_call: cpu_s * 1e6 / calls.max(1) as f64,
        }
    }
}

fn close(engine: Arc<Engine>) {
    Arc::into_inner(engine)
        .expect("every user joined")
        .close()
        .expect("close");
}

/// The single-call workloads' config: the defaults, but for `Config::syncs_in_flight` when
/// the environment sets `TIMEWHEEL_SYNCS_IN_FLIGHT` (to compare one and two syncs in flight).
fn single_config(dir: &Path) -> Config {
    let config = Config::new(dir);
    match std::env::var("TIMEWHEEL_SYNCS_IN_FLIGHT") {
        Ok(n) => config.syncs_in_flight(n.parse().expect("TIMEWHEEL_SYNCS_IN_FLIGHT: a number")),
        Err(_) => config,
    }
}

/// Single durable `schedule` calls from `threads` threads, for `secs`.
pub fn single_threads(dir: &Path, threads: usize, secs: f64) -> Single {
    let engine = Arc::new(Engine::open(single_config(dir)).expect("open"));
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let due = now_ms() + 3_600_000;
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (engine, stop, count) = (engine.clone(), stop.clone(), count.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    engine
                        .schedule(JobSpec::at(due).payload([1u8; 16]))
                        .expect("schedule");
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let (t, cpu0) = (Instant::now(), process_cpu_seconds());
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("thread");
    }
    let run = Single::measured(
        &engine,
        count.load(Ordering::Relaxed),
        t.elapsed().as_secs_f64(),
        process_cpu_seconds() - cpu0,
    );
    close(engine);
    run
}

/// Single durable `schedule_async` calls per second from `tasks` tasks on a tokio runtime with
/// two worker threads, for `secs`: futures woken by group commit, no parked thread per call.
pub fn single_async(dir: &Path, tasks: usize, secs: f64) -> Single {
    async_calls(dir, tasks, 1, secs)
}

/// Like [`single_async`], each call scheduling `per_call` jobs (`schedule_batch_async` when
/// more than one): what the per-call costs weigh against the per-job ones. `calls_per_s`
/// then counts jobs.
pub fn async_calls(dir: &Path, tasks: usize, per_call: u64, secs: f64) -> Single {
    let engine = Arc::new(Engine::open(single_config(dir)).expect("open"));
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let due = now_ms() + 3_600_000;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (engine, stop, count) = (engine.clone(), stop.clone(), count.clone());
            runtime.spawn(async move {
                let spec = || JobSpec::at(due).payload([1u8; 16]);
                while !stop.load(Ordering::Relaxed) {
                    if per_call == 1 {
                        engine.schedule_async(spec()).await.expect("schedule");
                    } else {
                        engine
                            .schedule_batch_async((0..per_call).map(|_| spec()))
                            .await
                            .expect("schedule");
                    }
                    count.fetch_add(per_call, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let (t, cpu0) = (Instant::now(), process_cpu_seconds());
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(async {
        for h in handles {
            h.await.expect("task");
        }
    });
    let run = Single::measured(
        &engine,
        count.load(Ordering::Relaxed),
        t.elapsed().as_secs_f64(),
        process_cpu_seconds() - cpu0,
    );
    drop(runtime);
    close(engine);
    run
}
