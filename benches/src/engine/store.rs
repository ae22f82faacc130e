//! The engine's memory and files: resident bytes per job, recovery, compaction, the resident
//! horizon (reopened in a fresh process), and listing jobs.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use timewheel::{Config, Durability, Engine, JobId, JobSpec};

use super::{cpu_seconds, now_ms, rss_bytes, schedule_in_batches};
use crate::alloc_count::{allocated_bytes, allocated_since, set_counting};
use crate::engine::firing::churn;

/// What holding jobs costs in memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct Resident {
    /// Heap bytes allocated per job (needs the counting allocator installed, else 0).
    pub heap_bytes_per_job: f64,
    /// Growth of the process's resident memory per job (heap, plus the log pages mapped).
    pub rss_bytes_per_job: f64,
    /// Heap bytes still allocated once nine jobs in ten were cancelled, per job left: what a
    /// burst leaves behind after it drained.
    pub heap_bytes_per_job_left: f64,
    /// The same, two seconds later with the engine idle (the wheel's sweep reclaims the
    /// cancelled timers' items in the background).
    pub heap_bytes_per_job_left_idle: f64,
}

/// `jobs` jobs with 16-byte payloads due over an hour, all resident: the memory they take.
pub fn resident(dir: &Path, jobs: u64) -> Resident {
    let config = Config::new(dir)
        .durability(Durability::Buffered)
        .compact_interval_ms(0);
    let engine = Engine::open(config).expect("open");
    // Allocated and freed while the counting is off: not the engine's.
    let mut ids = Vec::with_capacity(jobs as usize);
    set_counting(true);
    let (heap, rss) = (allocated_bytes(), rss_bytes());
    fill(&engine, jobs, &mut ids);
    let held = allocated_since(heap);
    let rss = rss_bytes().saturating_sub(rss);
    let left = drain_nine_in_ten(&engine, &ids);
    let kept = allocated_since(heap);
    std::thread::sleep(Duration::from_secs(2));
    let kept_idle = allocated_since(heap);
    set_counting(false);
    drop(ids);
    engine.close().expect("close");
    Resident {
        heap_bytes_per_job: held as f64 / jobs as f64,
        rss_bytes_per_job: rss as f64 / jobs as f64,
        heap_bytes_per_job_left: kept as f64 / left.max(1) as f64,
        heap_bytes_per_job_left_idle: kept_idle as f64 / left.max(1) as f64,
    }
}

/// Schedules `jobs` jobs with 16-byte payloads due over an hour from a minute ahead, in
/// batches of 10,000, and pushes their ids onto `ids` (the `resident` workload's burst).
pub fn fill(engine: &Engine, jobs: u64, ids: &mut Vec<JobId>) {
    let due = now_ms() + 60_000;
    let mut i = 0;
    while i < jobs {
        let m = 10_000.min(jobs - i);
        ids.extend(
            engine
                .schedule_batch(
                    (i..i + m).map(|k| JobSpec::at(due + k % 3_600_000).payload([7u8; 16])),
                )
                .expect("schedule"),
        );
        i += m;
    }
}

/// Cancels nine jobs in ten of `ids`, spread over the whole burst (as jobs of a burst finish),
/// in batches of 9,000; returns how many are left.
pub fn drain_nine_in_ten(engine: &Engine, ids: &[JobId]) -> u64 {
    let mut left = 0u64;
    for batch in ids.chunks(10_000) {
        let leaving: Vec<_> = (batch.iter().enumerate())
            .filter(|(k, _)| k % 10 != 0)
            .map(|(_, &id)| id)
            .collect();
        left += (batch.len() - leaving.len()) as u64;
        engine.cancel_batch(&leaving).expect("cancel");
    }
    left
}

/// What a recovery run measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recovery {
    /// The open: lock, scan and check every record, replay, rebuild the wheel.
    pub open_ms: f64,
    /// Records replayed per second of the open.
    pub records_per_s: f64,
    /// `timewheel verify`'s scan of the same directory afterwards
    /// ([`timewheel::inspect::verify`]): bytes of the log's segment files per second.
    pub verify_bytes_per_s: f64,
    /// `timewheel verify --deep` ([`timewheel::inspect::inspect`]: the open, read only).
    pub verify_deep_bytes_per_s: f64,
}

/// `jobs` schedule records (16-byte payloads) in the journal, no compaction, the engine
/// abandoned as in a crash; then the open.
pub fn recovery(dir: &Path, jobs: u64) -> Recovery {
    let config = Config::new(dir).compact_interval_ms(0);
    let engine = Engine::open(config.clone()).expect("open");
    let due = now_ms() + 3_600_000;
    schedule_in_batches(&engine, jobs, 100_000, |k| {
        JobSpec::at(due + k % 3_600_000).payload([3u8; 16])
    });
    engine.abandon();
    let t = Instant::now();
    let engine = Engine::open(config).expect("reopen");
    let elapsed = t.elapsed().as_secs_f64();
    let records = engine.recovery().records;
    engine.close().expect("close");
    let log_bytes: u64 = std::fs::read_dir(dir)
        .expect("the data directory")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".wal"))
        .map(|e| e.metadata().expect("metadata").len())
        .sum();
    let t = Instant::now();
    let found = timewheel::inspect::verify(dir).expect("verify");
    let verify_s = t.elapsed().as_secs_f64();
    assert!(found.is_healthy(), "a healthy log");
    assert!(
        found.recovery.records >= records,
        "verify read what the open read"
    );
    let t = Instant::now();
    let found = timewheel::inspect::inspect(dir).expect("verify --deep");
    let deep_s = t.elapsed().as_secs_f64();
    assert!(found.recovery.repaired.is_empty(), "a healthy log");
    Recovery {
        open_ms: elapsed * 1e3,
        records_per_s: records as f64 / elapsed,
        verify_bytes_per_s: log_bytes as f64 / verify_s,
        verify_deep_bytes_per_s: log_bytes as f64 / deep_s,
    }
}

/// What the open after the demo's crash measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct CrashOpen {
    /// The whole `Engine::open`.
    pub open_ms: f64,
    /// Of it, the log's own recovery ([`timewheel::RecoveryStats::log_elapsed`]).
    pub log_ms: f64,
    /// Records replayed per second of the whole open.
    pub records_per_s: f64,
}

/// The demo's crash, in process: `jobs` jobs without payload scheduled in durable batches of
/// 10,000 into a fresh directory (one 64 MiB segment, the next one prepared beside it), the
/// engine abandoned as a SIGKILL leaves it (nothing more synced, the page cache kept); then
/// the open, timed. (`cargo run --release -p timewheel-benches --example crash_open_probe`
/// does the same with a child process killed for real.)
pub fn crash_open(dir: &Path, jobs: u64) -> CrashOpen {
    let _ = std::fs::remove_dir_all(dir);
    let config = Config::new(dir).compact_interval_ms(0);
    let engine = Engine::open(config.clone()).expect("open");
    let due = now_ms() + 3_600_000;
    schedule_in_batches(&engine, jobs, 10_000, |_| JobSpec::at(due));
    engine.abandon();
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let engine = Engine::open(config).expect("reopen");
    let open = t.elapsed().as_secs_f64();
    let rec = engine.recovery().clone();
    engine.close().expect("close");
    let _ = std::fs::remove_dir_all(dir);
    CrashOpen {
        open_ms: open * 1e3,
        log_ms: rec.log_elapsed.as_secs_f64() * 1e3,
        records_per_s: rec.records as f64 / open,
    }
}

/// What a compaction run measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Compaction {
    /// Records folded per second, every pass until nothing is left.
    pub records_per_s: f64,
    /// Bytes in bucket files per job they hold.
    pub bucket_bytes_per_job: f64,
    /// The open from the whole journal, before compaction.
    pub open_journal_ms: f64,
    /// The open from the bucket files, after.
    pub open_buckets_ms: f64,
}

/// `jobs` jobs due over 30 days, 3 of 4 cancelled; then compaction until nothing is left, and
/// the opens before and after.
pub fn compaction(dir: &Path, jobs: u64) -> Compaction {
    let config = Config::new(dir).compact_interval_ms(0);
    let engine = Engine::open(config.clone()).expect("open");
    churn(&engine, jobs);
    engine.close().expect("close");
    let t = Instant::now();
    let engine = Engine::open(config.clone()).expect("reopen");
    let open_journal = t.elapsed();
    let t = Instant::now();
    let mut folded = 0u64;
    while let r = engine.compact().expect("compact")
        && r.records > 0
    {
        folded += r.records;
    }
    let compact_elapsed = t.elapsed();
    let after = engine.store_stats();
    engine.close().expect("close");
    let t = Instant::now();
    let engine = Engine::open(config).expect("reopen");
    let open_buckets = t.elapsed();
    engine.close().expect("close");
    Compaction {
        records_per_s: folded as f64 / compact_elapsed.as_secs_f64(),
        bucket_bytes_per_job: after.bucket_bytes as f64 / after.bucket_jobs.max(1) as f64,
        open_journal_ms: open_journal.as_secs_f64() * 1e3,
        open_buckets_ms: open_buckets.as_secs_f64() * 1e3,
    }
}

pub fn horizon_config(dir: &Path) -> Config {
    Config::new(dir)
        .compact_interval_ms(0)
        .horizon_ms(2 * 3_600_000)
}

/// Schedules `jobs` jobs due over 30 days from a minute ahead, in batches of 100,000, each
/// compacted at once as the background compactor would; `after_batch` gets the count so far.
pub fn schedule_far(engine: &Engine, jobs: u64, mut after_batch: impl FnMut(u64)) {
    let start = now_ms() + 60_000;
    let span = 30 * 24 * 3_600_000u64;
    let mut i = 0;
    while i < jobs {
        let m = 100_000.min(jobs - i);
        engine
            .schedule_batch(
                (i..i + m).map(|k| JobSpec::at(start + k * 7_919 % span).payload([5u8; 16])),
            )
            .expect("schedule");
        i += m;
        while engine.compact().expect("compact").records > 0 {}
        after_batch(i);
    }
}

/// What the horizon run measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Horizon {
    /// Jobs scheduled and compacted as they came, per second.
    pub scheduled_per_s: f64,
    /// The reopen, in a fresh process.
    pub reopen_ms: f64,
    /// The reopened process's resident memory, when the open returned.
    pub reopen_rss_mib: f64,
    /// The same after a few idle seconds (the log's next segment prepared meanwhile).
    pub idle_rss_mib: f64,
    /// Its CPU use while idle for a few seconds, in % of a core.
    pub idle_cpu_percent: f64,
}

/// What the reopening child reports on its stdout, as one JSON line.
#[derive(Serialize, Deserialize)]
struct Reopened {
    open_ms: f64,
    rss_mib: f64,
    idle_rss_mib: f64,
    idle_cpu_percent: f64,
}

/// The argument that makes a harness binary the horizon's reopening child (see
/// [`horizon_child`]).
pub const HORIZON_CHILD_ARG: &str = "horizon-reopen";

/// `jobs` jobs due over 30 days with a 2-hour horizon, scheduled in batches of 100 000 with
/// compaction after each, then the directory reopened by `exe HORIZON_CHILD_ARG dir` in a
/// fresh process (whose memory is its own), which reports its open time and resident memory.
pub fn horizon(dir: &Path, jobs: u64, exe: &Path) -> Result<Horizon, String> {
    let engine = Engine::open(horizon_config(dir)).expect("open");
    let t = Instant::now();
    schedule_far(&engine, jobs, |_| {});
    let scheduled_per_s = jobs as f64 / t.elapsed().as_secs_f64();
    engine.close().expect("close");
    let out = std::process::Command::new(exe)
        .arg(HORIZON_CHILD_ARG)
        .arg(dir)
        .output()
        .map_err(|e| format!("the reopening child did not run: {e}"))?;
    let line = String::from_utf8_lossy(&out.stdout);
    let r: Reopened = serde_json::from_str(line.trim())
        .map_err(|e| format!("the reopening child said {line:?} ({e})"))?;
    Ok(Horizon {
        scheduled_per_s,
        reopen_ms: r.open_ms,
        reopen_rss_mib: r.rss_mib,
        idle_rss_mib: r.idle_rss_mib,
        idle_cpu_percent: r.idle_cpu_percent,
    })
}

/// The reopening child of [`horizon`]: when the process's arguments are
/// `HORIZON_CHILD_ARG DIR`, reopens DIR, prints its figures as a JSON line and returns true.
/// Binaries that run [`horizon`] call this first thing in `main`.
pub fn horizon_child() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let Some(i) = args.iter().position(|a| a == HORIZON_CHILD_ARG) else {
        return false;
    };
    let dir = Path::new(&args[i + 1]);
    let t = Instant::now();
    // The background compactor as in production (nothing to fold while idle).
    let engine = Engine::open(horizon_config(dir).compact_interval_ms(10_000)).expect("reopen");
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let rss_mib = rss_bytes() as f64 / f64::from(1 << 20);
    // Idle: nothing due for the next minute; the timer and compactor threads sleep.
    let cpu0 = cpu_seconds();
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let idle_cpu_percent = (cpu_seconds() - cpu0) / t.elapsed().as_secs_f64() * 100.0;
    let idle_rss_mib = rss_bytes() as f64 / f64::from(1 << 20);
    engine.close().expect("close");
    let r = Reopened {
        open_ms,
        rss_mib,
        idle_rss_mib,
        idle_cpu_percent,
    };
    println!("{}", serde_json::to_string(&r).expect("plain numbers"));
    true
}

/// `Engine::jobs`: ms for one page of `page` jobs due in the next hour, out of `jobs` resident
/// jobs, best of 5 (one pass over the job table, the state lock taken for four of its 256
/// shards at a time).
pub fn listing(dir: &Path, jobs: u64, page: usize) -> f64 {
    let config = Config::new(dir)
        .durability(Durability::Buffered)
        .compact_interval_ms(0);
    let engine = Engine::open(config).expect("open");
    let now = now_ms();
    let mut i = 0;
    while i < jobs {
        let m = 10_000.min(jobs - i);
        engine
            .schedule_batch((i..i + m).map(|k| JobSpec::at(now + 60_000 + k * 3)))
            .expect("schedule");
        i += m;
    }
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let got = engine
            .jobs(&timewheel::JobQuery::due_between(now, now + 3_600_000).limit(page))
            .expect("page");
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(got.jobs.len(), page.min(jobs as usize));
    }
    engine.close().expect("close");
    best
}
