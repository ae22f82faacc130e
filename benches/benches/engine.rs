//! End-to-end engine benchmarks, with the peers measured in the same run.
//!
//! `cargo bench -p timewheel-benches --bench engine` (add `-- quick` for a smaller run; name
//! workloads to run only those: `-- quick batch recovery`; `no-peers` skips SQLite and Redis;
//! `no-evict` keeps every job resident in `lateness-compacting`).
//!
//! Figures: durable `schedule_batch` throughput; single durable `schedule` calls from 1, 8 and
//! 64 threads; fire lateness with 1M pending and ~100k fires/s; recovery time for 10M jobs;
//! compaction, the resident horizon, and a burst of 1M jobs due in one millisecond.
//! Peers, where a peer exists: SQLite (WAL mode, synchronous=FULL: durable like us) and Redis
//! (ZADD with appendonly yes, appendfsync always) when `redis-server` is installed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use timewheel::{Clock, Config, Durability, Engine, JobSpec, SystemClock};

#[path = "peers/mod.rs"]
mod peers;

struct Sizes {
    batch_jobs: u64,
    single_secs: f64,
    lateness_jobs: u64,
    recovery_jobs: u64,
    compaction_jobs: u64,
    horizon_jobs: u64,
    burst_jobs: u64,
    /// How far ahead the burst is scheduled: 70 s puts it in the minute ring.
    burst_ahead_ms: u64,
}

fn main() {
    // The horizon workload's reopen, in a process of its own so that its memory is its own.
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "horizon-reopen") {
        horizon_reopen(Path::new(&args[i + 1]));
        return;
    }
    let quick = std::env::args().any(|a| a == "quick");
    let sizes = if quick {
        Sizes {
            batch_jobs: 200_000,
            single_secs: 1.0,
            lateness_jobs: 100_000,
            recovery_jobs: 1_000_000,
            compaction_jobs: 1_000_000,
            horizon_jobs: 2_000_000,
            burst_jobs: 200_000,
            burst_ahead_ms: 3_000,
        }
    } else {
        Sizes {
            batch_jobs: 2_000_000,
            single_secs: 3.0,
            lateness_jobs: 1_000_000,
            recovery_jobs: 10_000_000,
            compaction_jobs: 10_000_000,
            horizon_jobs: 20_000_000,
            burst_jobs: 1_000_000,
            burst_ahead_ms: 70_000,
        }
    };
    let root = bench_dir();
    println!(
        "# timewheel engine benchmarks ({} run), data under {}",
        if quick { "quick" } else { "full" },
        root.display()
    );
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| {
            [
                "batch",
                "single",
                "lateness",
                "lateness-compacting",
                "recovery",
                "compaction",
                "horizon",
                "burst",
                "listing",
            ]
            .contains(&a.as_str())
        })
        .collect();
    let wanted = |w: &str| named.is_empty() || named.iter().any(|a| a == w);
    let peers = !std::env::args().any(|a| a == "no-peers");
    if wanted("batch") {
        batch_schedule(&root, &sizes, peers);
    }
    if wanted("single") {
        single_schedule(&root, &sizes, peers);
    }
    if wanted("lateness") {
        lateness(&root, &sizes, false);
    }
    if wanted("lateness-compacting") {
        lateness(&root, &sizes, true);
    }
    if wanted("recovery") {
        recovery(&root, &sizes);
    }
    if wanted("compaction") {
        compaction(&root, &sizes);
    }
    if wanted("horizon") {
        horizon(&root, &sizes);
    }
    if wanted("burst") {
        burst(&root, &sizes);
    }
    if wanted("listing") {
        listing(&root, &sizes);
    }
    std::fs::remove_dir_all(&root).ok();
}

fn bench_dir() -> PathBuf {
    // Not /dev/shm: a sync on tmpfs costs nothing and would flatter every durable figure.
    let d = std::env::temp_dir().join(format!("timewheel-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("bench dir");
    d
}

fn fresh(root: &Path, name: &str) -> PathBuf {
    let d = root.join(name);
    std::fs::remove_dir_all(&d).ok();
    d
}

fn now_ms() -> u64 {
    SystemClock.now_ms()
}

fn batch_schedule(root: &Path, s: &Sizes, peers: bool) {
    println!(
        "\n## Durable batch schedule ({} jobs, 16-byte payloads, Sync)",
        s.batch_jobs
    );
    println!("| system | threads | batch | jobs/s |");
    println!("|---|---|---|---|");
    // The last row syncs nothing (`Durability::Buffered`): the engine's own cost per job,
    // apart from the disk's.
    let rows = [
        (1u64, 1_000u64, Durability::Sync),
        (1, 10_000, Durability::Sync),
        (4, 10_000, Durability::Sync),
        (1, 10_000, Durability::Buffered),
    ];
    for (threads, batch, durability) in rows {
        let config = Config::new(fresh(root, "batch")).durability(durability);
        let engine = Arc::new(Engine::open(config).expect("open"));
        let due = now_ms() + 3_600_000;
        let per_thread = s.batch_jobs / threads;
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
        let name = match durability {
            Durability::Sync => "timewheel schedule_batch",
            _ => "timewheel schedule_batch, Buffered (no sync)",
        };
        println!("| {name} | {threads} | {batch} | {rate:.0} |");
        Arc::into_inner(engine)
            .expect("joined")
            .close()
            .expect("close");
    }
    if !peers {
        return;
    }
    let n = (s.batch_jobs / 10).max(10_000);
    match peers::sqlite_batch(&fresh(root, "sqlite"), n, 1_000) {
        Ok(r) => {
            println!("| SQLite (WAL, synchronous=FULL), 1 txn per batch | 1 | 1000 | {r:.0} |")
        }
        Err(e) => println!("| SQLite | 1 | 1000 | skipped: {e} |"),
    }
    match peers::redis_batch(&fresh(root, "redis"), n, 1_000) {
        Ok(r) => println!("| Redis ZADD pipelined, AOF fsync always | 1 | 1000 | {r:.0} |"),
        Err(e) => println!("| Redis | 1 | 1000 | skipped: {e} |"),
    }
}

fn single_schedule(root: &Path, s: &Sizes, peers: bool) {
    println!(
        "\n## Single durable schedule calls ({:.0} s per row, Sync, group commit)",
        s.single_secs
    );
    println!("| system | threads | calls/s |");
    println!("|---|---|---|");
    for threads in [1usize, 8, 64] {
        let engine = Arc::new(Engine::open(Config::new(fresh(root, "single"))).expect("open"));
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
        let t = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(s.single_secs));
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().expect("thread");
        }
        let rate = count.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64();
        println!("| timewheel schedule | {threads} | {rate:.0} |");
        Arc::into_inner(engine)
            .expect("joined")
            .close()
            .expect("close");
    }
    // The same calls as futures: tasks on a tokio runtime with a worker thread per core,
    // woken by group commit instead of parking a thread each.
    for tasks in [64usize, 256] {
        let engine = Arc::new(Engine::open(Config::new(fresh(root, "single"))).expect("open"));
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
                    while !stop.load(Ordering::Relaxed) {
                        engine
                            .schedule_async(JobSpec::at(due).payload([1u8; 16]))
                            .await
                            .expect("schedule");
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let t = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(s.single_secs));
        stop.store(true, Ordering::Relaxed);
        runtime.block_on(async {
            for h in handles {
                h.await.expect("task");
            }
        });
        let rate = count.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64();
        let syncs = engine.log_stats().syncs;
        println!(
            "| timewheel schedule_async, {tasks} tasks on 2 tokio workers | - | {rate:.0} ({:.0} schedules per sync) |",
            count.load(Ordering::Relaxed) as f64 / syncs.max(1) as f64
        );
        drop(runtime);
        Arc::into_inner(engine)
            .expect("joined")
            .close()
            .expect("close");
    }
    if !peers {
        return;
    }
    match peers::sqlite_single(&fresh(root, "sqlite1"), s.single_secs) {
        Ok(r) => println!("| SQLite, 1 row per transaction | 1 | {r:.0} |"),
        Err(e) => println!("| SQLite | 1 | skipped: {e} |"),
    }
    for clients in [1usize, 8, 64] {
        match peers::redis_single(&fresh(root, "redis1"), clients, s.single_secs) {
            Ok(r) => println!("| Redis ZADD, AOF fsync always | {clients} | {r:.0} |"),
            Err(e) => println!("| Redis | {clients} | skipped: {e} |"),
        }
    }
}

fn lateness(root: &Path, s: &Sizes, compacting: bool) {
    let n = s.lateness_jobs;
    let window_ms = n / 100; // ~100k fires per second
    let beside = if compacting {
        format!(
            "; meanwhile compaction folds a journal of {} more jobs due over 30 days, 3 of 4 \
             cancelled",
            3 * n
        )
    } else {
        String::new()
    };
    println!(
        "\n## Fire lateness: {n} jobs pending, due over {:.1} s (~100k fires/s), 2 workers claiming{beside}",
        window_ms as f64 / 1000.0
    );
    let mut config = Config::new(fresh(root, "late")).compact_interval_ms(0);
    if std::env::args().any(|a| a == "no-evict") {
        // Every job stays resident: the passes write, but evict nothing.
        config = config.horizon_ms(366 * 24 * 3_600_000);
    }
    let engine = Arc::new(Engine::open(config).expect("open"));
    if compacting {
        let far = now_ms() + 3_600_000;
        let span = 30 * 24 * 3_600_000u64;
        let mut i = 0;
        while i < 3 * n {
            let m = 100_000.min(3 * n - i);
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
    let start = now_ms() + 2_000;
    let mut i = 0;
    while i < n {
        let m = 10_000.min(n - i);
        engine
            .schedule_batch((i..i + m).map(|k| JobSpec::at(start + k * window_ms / n)))
            .expect("schedule");
        i += m;
    }
    let early = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    // The compaction passes start just before the first job is due, and run beside the fires.
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
                    return (records, t.elapsed());
                }
                records += r.records;
            }
        })
    });
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (engine, early, done) = (engine.clone(), early.clone(), done.clone());
            std::thread::spawn(move || {
                let ready = engine.ready();
                let mut batch = Vec::new();
                while done.load(Ordering::Relaxed) < n {
                    let Ok(id) = ready.recv_timeout(Duration::from_millis(100)) else {
                        continue;
                    };
                    for id in std::iter::once(id).chain(ready.try_iter().take(4095)) {
                        if let Some(c) = engine.claim(id).expect("claim") {
                            if now_ms() < c.due_ms {
                                early.fetch_add(1, Ordering::Relaxed);
                            }
                            batch.push(c);
                        }
                    }
                    let ok = engine.complete_batch(&batch).expect("complete").len() as u64;
                    done.fetch_add(ok, Ordering::Relaxed);
                    batch.clear();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let folded = compactor.map(|c| c.join().expect("compactor"));
    let st = engine.stats();
    println!("| figure | value |");
    println!("|---|---|");
    println!("| pending at start | {n} |");
    if let Some((records, took)) = folded {
        println!(
            "| compaction beside the fires | {records} records in {:.0} ms ({:.2} M records/s), from 50 ms before the first due time |",
            took.as_secs_f64() * 1e3,
            records as f64 / took.as_secs_f64() / 1e6
        );
    }

    println!("| lateness p50 | {} us |", st.lateness_us_p50);
    println!("| lateness p99 | {} us |", st.lateness_us_p99);
    println!("| lateness p99.9 | {} us |", st.lateness_us_p999);
    println!("| lateness max | {} us |", st.lateness_us_max);
    println!("| fired early | {} |", early.load(Ordering::Relaxed));
    Arc::into_inner(engine)
        .expect("joined")
        .close()
        .expect("close");
}

fn recovery(root: &Path, s: &Sizes) {
    let n = s.recovery_jobs;
    println!("\n## Recovery: {n} jobs in the log (schedule records, 16-byte payloads)");
    let dir = fresh(root, "recovery");
    // The journal alone: no compaction folds it meanwhile (the compaction workload measures
    // an open from bucket files).
    let config = Config::new(&dir).compact_interval_ms(0);
    let engine = Engine::open(config.clone()).expect("open");
    let due = now_ms() + 3_600_000;
    let mut i = 0;
    while i < n {
        let m = 100_000.min(n - i);
        engine
            .schedule_batch((i..i + m).map(|k| JobSpec::at(due + k % 3_600_000).payload([3u8; 16])))
            .expect("schedule");
        i += m;
    }
    engine.abandon();
    let t = Instant::now();
    let engine = Engine::open(config).expect("reopen");
    let elapsed = t.elapsed();
    let rec = engine.recovery().clone();
    println!("| figure | value |");
    println!("|---|---|");
    println!("| records replayed | {} |", rec.records);
    println!("| log bytes scanned | {} MiB |", rec.bytes >> 20);
    println!(
        "| open (lock + scan + replay + rebuild wheel) | {:.0} ms |",
        elapsed.as_secs_f64() * 1e3
    );
    println!(
        "| records/s | {:.2} M |",
        rec.records as f64 / elapsed.as_secs_f64() / 1e6
    );
    engine.close().expect("close");
}

/// Jobs spread over 30 days, most of them then cancelled or completed (churn): how fast a pass
/// folds the journal, what is left on disk against the live records' own bytes, and the open
/// from the journal against the open from the bucket files.
fn compaction(root: &Path, s: &Sizes) {
    let n = s.compaction_jobs;
    println!(
        "\n## Compaction: {n} jobs due over 30 days (16-byte payloads), 3 of 4 then cancelled"
    );
    let dir = fresh(root, "compaction");
    let config = Config::new(&dir).compact_interval_ms(0);
    let engine = Engine::open(config.clone()).expect("open");
    let start = now_ms() + 3_600_000;
    let span = 30 * 24 * 3_600_000u64;
    let mut i = 0;
    let mut live = 0u64;
    while i < n {
        let m = 100_000.min(n - i);
        let ids = engine
            .schedule_batch(
                (i..i + m).map(|k| JobSpec::at(start + k * 7_919 % span).payload([3u8; 16])),
            )
            .expect("schedule");
        let (keep, cancel): (Vec<_>, Vec<_>) =
            ids.iter().enumerate().partition(|(j, _)| j % 4 == 0);
        live += keep.len() as u64;
        let cancel: Vec<_> = cancel.into_iter().map(|(_, &id)| id).collect();
        engine.cancel_batch(&cancel).expect("cancel");
        i += m;
    }
    engine.close().expect("close");
    let t = Instant::now();
    let engine = Engine::open(config.clone()).expect("reopen");
    let open_journal = t.elapsed();
    let before = engine.store_stats();
    let t = Instant::now();
    let mut folded = 0u64;
    let mut passes = 0u64;
    loop {
        let r = engine.compact().expect("compact");
        if r.records == 0 {
            break;
        }
        folded += r.records;
        passes += 1;
    }
    let compact_elapsed = t.elapsed();
    let after = engine.store_stats();
    engine.close().expect("close");
    let t = Instant::now();
    let engine = Engine::open(config).expect("reopen");
    let open_buckets = t.elapsed();
    let rec = engine.recovery().clone();
    engine.close().expect("close");
    // A job's own bytes in a run: the 12-byte frame, the 48-byte put, its payload.
    let job_bytes = 12 + 48 + 16;
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| journal before | {} segments, {:.0} MiB |",
        before.journal_segments,
        mib(before.journal_bytes)
    );
    println!(
        "| compaction | {folded} records in {passes} passes, {:.0} ms: {:.2} M records/s |",
        compact_elapsed.as_secs_f64() * 1e3,
        folded as f64 / compact_elapsed.as_secs_f64() / 1e6
    );
    println!(
        "| after | journal {} segments ({:.0} MiB); {} buckets in {} files, {:.1} MiB for {} jobs |",
        after.journal_segments,
        mib(after.journal_bytes),
        after.buckets,
        after.bucket_files,
        mib(after.bucket_bytes),
        after.bucket_jobs
    );
    println!(
        "| bucket bytes / the bucket jobs' own record bytes | {:.2} ({:.0} bytes per job; \
         {live} jobs live, the other {} wait for cancels in the unsealed segment) |",
        after.bucket_bytes as f64 / (after.bucket_jobs * job_bytes).max(1) as f64,
        after.bucket_bytes as f64 / after.bucket_jobs.max(1) as f64,
        after.bucket_jobs.saturating_sub(live)
    );
    println!(
        "| open from the journal | {:.0} ms |",
        open_journal.as_secs_f64() * 1e3
    );
    println!(
        "| open from the buckets | {:.0} ms ({} jobs loaded, {} journal records replayed) |",
        open_buckets.as_secs_f64() * 1e3,
        rec.bucket_jobs,
        rec.records
    );
}

/// The process's resident memory, from /proc (0 where there is none).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn horizon_config(dir: &Path) -> Config {
    Config::new(dir)
        .compact_interval_ms(0)
        .horizon_ms(2 * 3_600_000)
}

/// Jobs spread over 30 days with a 2-hour horizon: scheduled, compacted, then the directory
/// reopened in a fresh process, which reports its open time and resident memory.
fn horizon(root: &Path, s: &Sizes) {
    let n = s.horizon_jobs;
    println!("\n## Resident horizon: {n} jobs due over 30 days (16-byte payloads), horizon 2 h");
    let dir = fresh(root, "horizon");
    let engine = Engine::open(horizon_config(&dir)).expect("open");
    let start = now_ms() + 60_000;
    let span = 30 * 24 * 3_600_000u64;
    let t = Instant::now();
    let mut i = 0;
    while i < n {
        let m = 100_000.min(n - i);
        engine
            .schedule_batch(
                (i..i + m).map(|k| JobSpec::at(start + k * 7_919 % span).payload([5u8; 16])),
            )
            .expect("schedule");
        i += m;
        // Folding as it goes, as the background compactor would.
        while engine.compact().expect("compact").records > 0 {}
    }
    let scheduled_in = t.elapsed();
    let store = engine.store_stats();
    let stats = engine.stats();
    let rss_writer = rss_bytes();
    engine.close().expect("close");
    let me = std::env::current_exe().expect("the bench binary");
    let out = std::process::Command::new(me)
        .arg("horizon-reopen")
        .arg(&dir)
        .output()
        .expect("the reopen child runs");
    let child = String::from_utf8_lossy(&out.stdout);
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| scheduled and compacted as they came | {:.1} s ({:.2} M jobs/s) |",
        scheduled_in.as_secs_f64(),
        n as f64 / scheduled_in.as_secs_f64() / 1e6
    );
    println!(
        "| jobs kept on disk only / scheduled | {} / {} |",
        store.non_resident, stats.scheduled
    );
    println!(
        "| on disk | journal {:.0} MiB, {} buckets {:.0} MiB ({:.0} bytes per job) |",
        mib(store.journal_bytes),
        store.buckets,
        mib(store.bucket_bytes),
        store.bucket_bytes as f64 / store.bucket_jobs.max(1) as f64
    );
    println!(
        "| writer's resident memory at the end | {:.0} MiB |",
        mib(rss_writer)
    );
    print!("{child}");
}

fn horizon_reopen(dir: &Path) {
    let before = rss_bytes();
    let t = Instant::now();
    // The background compactor as in production (nothing to fold while idle).
    let engine = Engine::open(horizon_config(dir).compact_interval_ms(10_000)).expect("reopen");
    let elapsed = t.elapsed();
    let after = rss_bytes();
    let r = engine.recovery().clone();
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    println!(
        "| reopen (fresh process) | {:.0} ms: {} buckets loaded, {} jobs, {} journal records |",
        elapsed.as_secs_f64() * 1e3,
        r.buckets,
        r.bucket_jobs,
        r.records
    );
    println!(
        "| reopened process's resident memory | {:.0} MiB ({:.0} MiB before the open) |",
        mib(after),
        mib(before)
    );
    // Idle: nothing due for the next minute; the timer and compactor threads sleep.
    let cpu0 = cpu_seconds();
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(10));
    let busy = (cpu_seconds() - cpu0) / t.elapsed().as_secs_f64();
    println!(
        "| idle CPU, 10 s with {} jobs kept on disk | {:.1}% of a core (CPU time counts in 10 ms \
         ticks: 0.0 is under 0.1%) |",
        engine.store_stats().non_resident,
        busy * 100.0
    );
    engine.close().expect("close");
}

/// CPU time this process used so far (user + system), from /proc (0 where there is none).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// 1M jobs due in the same millisecond, scheduled 70 s ahead (so they wait in the minute ring
/// and cascade twice; the quick run: 200k, 3 s ahead): how long after their due time the last one is in the ready queue (a
/// reader takes the ids off as they come), and the latency of single durable schedules from
/// another thread meanwhile, from 200 ms before the due time until the last id is out.
fn burst(root: &Path, s: &Sizes) {
    let n = s.burst_jobs;
    println!(
        "\n## Burst: {n} jobs due in one millisecond, {} s ahead, single schedules beside it",
        s.burst_ahead_ms / 1000
    );
    let config = Config::new(fresh(root, "burst")).compact_interval_ms(0);
    let engine = Arc::new(Engine::open(config).expect("open"));
    let due = now_ms() + s.burst_ahead_ms;
    let mut i = 0;
    while i < n {
        let m = 10_000.min(n - i);
        engine
            .schedule_batch((0..m).map(|_| JobSpec::at(due)))
            .expect("schedule");
        i += m;
    }
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
            let last_ms = now_ms();
            finished.store(true, Ordering::Release);
            last_ms
        })
    };
    let scheduler = {
        let (engine, finished) = (engine.clone(), finished.clone());
        std::thread::spawn(move || {
            let mut latencies_us = Vec::new();
            while now_ms() + 200 < due {
                std::thread::sleep(Duration::from_millis(5));
            }
            let mut slowest = (0u64, 0i64);
            while !finished.load(Ordering::Acquire) {
                let (t, at) = (Instant::now(), now_ms() as i64 - due as i64);
                engine
                    .schedule(JobSpec::at(due + 3_600_000))
                    .expect("schedule");
                let us = t.elapsed().as_micros() as u64;
                if us > slowest.0 {
                    slowest = (us, at);
                }
                latencies_us.push(us);
            }
            eprintln!(
                "slowest schedule: {} us, started {} ms after the due time",
                slowest.0, slowest.1
            );
            latencies_us
        })
    };
    let last_ms = reader.join().expect("reader");
    let mut latencies = scheduler.join().expect("scheduler");
    latencies.sort_unstable();
    let pick = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| last of the burst in the ready queue | {} ms after its due time |",
        last_ms.saturating_sub(due)
    );
    println!(
        "| single durable schedules meanwhile | {} calls: p50 {} us, p99 {} us, max {} us |",
        latencies.len(),
        pick(0.5),
        pick(0.99),
        latencies.last().copied().unwrap_or(0)
    );
    Arc::into_inner(engine)
        .expect("joined")
        .close()
        .expect("close");
}

/// `Engine::jobs`: one page of the jobs due in the next hour, from 1M resident jobs (the
/// quick run: 100k), best of 5 per page size. Each page is one pass over the job table under
/// the state lock, so this is also how long the timer thread may wait behind it.
fn listing(root: &Path, s: &Sizes) {
    let n = s.burst_jobs;
    println!("\n## Listing jobs: a page of `Engine::jobs` over {n} resident jobs");
    let config = Config::new(fresh(root, "listing"))
        .durability(Durability::Buffered)
        .compact_interval_ms(0);
    let engine = Engine::open(config).expect("open");
    let now = now_ms();
    let mut i = 0;
    while i < n {
        let m = 10_000.min(n - i);
        engine
            .schedule_batch((i..i + m).map(|k| JobSpec::at(now + 60_000 + k * 3)))
            .expect("schedule");
        i += m;
    }
    println!("| page size | ms (best of 5) |");
    println!("|---|---|");
    for limit in [100usize, 1_000, 10_000] {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            let page = engine
                .jobs(&timewheel::JobQuery::due_between(now, now + 3_600_000).limit(limit))
                .expect("page");
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(page.jobs.len(), limit);
        }
        println!("| {limit} | {best:.1} |");
    }
    engine.close().expect("close");
}
