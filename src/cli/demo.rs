//! `timewheel demo`: what `cargo run --release` shows on a fresh machine.
//!
//! Part 1 schedules a million durable jobs due over the next few seconds from several threads,
//! while a worker pool claims and completes them as they fire; it prints the scheduling
//! throughput, the fire lateness and that every job fired exactly once.
//! Part 2 schedules jobs due in one second in a child process, kills it (SIGKILL, a real
//! crash), waits past their due time, reopens, and shows every missed job replayed.
//! Part 3 compacts part 1's directory: every job there finished, so its journal shrinks to the
//! segment being appended to; a second later a pass seals that one too, no bucket is left,
//! and a reopen replays almost nothing.

use std::error::Error;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use timewheel::{Claimed, Config, Engine, JobSpec, SystemClock};

/// Options of the demo.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// Jobs to schedule in part 1.
    #[arg(long, default_value_t = 1_000_000)]
    pub jobs: u64,
    /// Their due times are spread over this many milliseconds from now.
    #[arg(long, default_value_t = 5_000)]
    pub spread_ms: u64,
    /// Threads scheduling.
    #[arg(long, default_value_t = 4)]
    pub schedulers: usize,
    /// Jobs per schedule_batch call.
    #[arg(long, default_value_t = 1_000)]
    pub batch: usize,
    /// Worker threads claiming and completing.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Jobs for the crash-and-recover part.
    #[arg(long, default_value_t = 100_000)]
    pub recovery_jobs: u64,
    /// Data directory (default: a fresh temporary one, removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

impl Default for DemoArgs {
    fn default() -> Self {
        DemoArgs {
            jobs: 1_000_000,
            spread_ms: 5_000,
            schedulers: 4,
            batch: 1_000,
            workers: 4,
            recovery_jobs: 100_000,
            dir: None,
        }
    }
}

type DynResult<T> = Result<T, Box<dyn Error>>;

/// Options of the hidden `demo-crash-child` command.
#[derive(clap::Args, Debug, Clone)]
pub struct CrashChildArgs {
    /// Data directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Jobs to schedule.
    #[arg(long)]
    pub jobs: u64,
    /// Their due time.
    #[arg(long)]
    pub due_ms: u64,
}

/// Schedules the jobs durably, prints `scheduled`, and waits to be killed.
pub fn crash_child(args: &CrashChildArgs) -> DynResult<()> {
    let engine = Engine::open(Config::new(&args.dir))?;
    let mut k = 0;
    while k < args.jobs {
        let m = 10_000.min(args.jobs - k);
        engine.schedule_batch((k..k + m).map(|_| JobSpec::at(args.due_ms)))?;
        k += m;
    }
    println!("scheduled");
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> DynResult<()> {
    let (dir, temporary) = match &args.dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("timewheel-demo-{}", std::process::id())),
            true,
        ),
    };
    if dir.exists() {
        return Err(format!("{} exists; the demo wants a fresh directory", dir.display()).into());
    }
    println!("timewheel demo: data directory {}", dir.display());
    let result = fire_part(&args, &dir.join("fire"))
        .and_then(|()| recovery_part(&args, &dir.join("recovery")))
        .and_then(|()| compaction_part(&dir.join("fire")))
        .and_then(|()| retry_part(&dir.join("retries")))
        .and_then(|()| keys_and_cron_part(&dir.join("keys")))
        .and_then(|()| fairness_part(&dir.join("fair-on"), true))
        .and_then(|()| fairness_part(&dir.join("fair-off"), false));
    if temporary {
        std::fs::remove_dir_all(&dir).ok();
    }
    result
}

fn now_ms() -> u64 {
    use timewheel::Clock;
    SystemClock.now_ms()
}

fn fire_part(args: &DemoArgs, dir: &std::path::Path) -> DynResult<()> {
    let engine = Arc::new(Engine::open(Config::new(dir))?);
    let total = args.jobs;
    println!(
        "\n1. Scheduling {total} durable jobs due over the next {:.1} s from {} threads \
         (batches of {}), {} workers claiming and completing",
        args.spread_ms as f64 / 1000.0,
        args.schedulers,
        args.batch,
        args.workers
    );
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "   {spinner} [{elapsed_precise}] {bar:40} {pos}/{len} completed ({per_sec}) {msg}",
        )?
        .progress_chars("=> "),
    );
    let completed = Arc::new(AtomicU64::new(0));
    let duplicates = Arc::new(AtomicU64::new(0));
    let early = Arc::new(AtomicU64::new(0));
    // Due to claimed, in ms, as the workers see it on their own clock (the wall clock).
    let seen = Arc::new(std::sync::Mutex::new(
        hdrhistogram::Histogram::<u64>::new(3).expect("histogram"),
    ));
    // Dues start a little ahead, so that jobs are scheduled before they are due: lateness then
    // measures the engine, not the demo's own scheduling backlog.
    let start_ms = now_ms() + 1_500;
    let done_scheduling = Arc::new(Barrier::new(args.schedulers + 1));

    // Workers: take what is ready and claim it (one durable batch), complete it (another).
    let mut workers = Vec::new();
    for _ in 0..args.workers {
        let engine = engine.clone();
        let completed = completed.clone();
        let duplicates = duplicates.clone();
        let (early, seen) = (early.clone(), seen.clone());
        let bar = bar.clone();
        workers.push(std::thread::spawn(move || -> timewheel::Result<()> {
            let mut mine = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
            while completed.load(Ordering::Relaxed) < total {
                let batch: Vec<Claimed> = engine.claim_next(4096, Duration::from_millis(50))?;
                if batch.is_empty() {
                    continue;
                }
                let now = now_ms();
                for c in &batch {
                    if now < c.due_ms {
                        early.fetch_add(1, Ordering::Relaxed);
                    }
                    mine.saturating_record(now.saturating_sub(c.due_ms));
                }
                let results = engine.complete_batch(&batch)?;
                let ok = results.iter().filter(|&&b| b).count() as u64;
                duplicates.fetch_add(results.len() as u64 - ok, Ordering::Relaxed);
                completed.fetch_add(ok, Ordering::Relaxed);
                bar.inc(ok);
            }
            seen.lock()
                .expect("histogram lock")
                .add(&mine)
                .expect("same bounds");
            Ok(())
        }));
    }

    // Schedulers: each takes a share of the jobs, in batches, spread evenly over the window.
    let scheduled_at = Instant::now();
    let mut schedulers = Vec::new();
    let schedulers_n = args.schedulers;
    for t in 0..args.schedulers as u64 {
        let engine = engine.clone();
        let barrier = done_scheduling.clone();
        let (spread_ms, batch) = (args.spread_ms, args.batch as u64);
        schedulers.push(std::thread::spawn(move || -> timewheel::Result<u64> {
            // Threads take interleaved chunks, so the earliest dues are all scheduled first.
            let threads = schedulers_n as u64;
            let mut count = 0;
            let mut chunk = t;
            while chunk * batch < total {
                let from = chunk * batch;
                let to = (from + batch).min(total);
                let specs = (from..to).map(|k| {
                    let due = start_ms + k * spread_ms / total;
                    JobSpec::at(due).payload(k.to_le_bytes().to_vec())
                });
                engine.schedule_batch(specs)?;
                count += to - from;
                chunk += threads;
            }
            barrier.wait();
            Ok(count)
        }));
    }
    done_scheduling.wait();
    let schedule_elapsed = scheduled_at.elapsed();
    let mut scheduled = 0;
    for s in schedulers {
        scheduled += s.join().expect("scheduler thread")?;
    }
    bar.set_message(format!(
        "(all {scheduled} scheduled in {:.2} s)",
        schedule_elapsed.as_secs_f64()
    ));
    for w in workers {
        w.join().expect("worker thread")?;
    }
    bar.finish();
    let stats = engine.stats();
    println!(
        "   scheduled {scheduled} jobs in {:.3} s: {:.0} jobs/s, each acknowledged only once durable \
         (group commit, msync)",
        schedule_elapsed.as_secs_f64(),
        scheduled as f64 / schedule_elapsed.as_secs_f64()
    );
    println!(
        "   fire lateness (due -> in the ready queue): p50 {} us, p99 {} us, p99.9 {} us, max {} us \
         (timer thread {})",
        stats.lateness_us_p50,
        stats.lateness_us_p99,
        stats.lateness_us_p999,
        stats.lateness_us_max,
        if stats.timer_realtime {
            "at real-time priority"
        } else {
            "at normal priority: real-time refused"
        }
    );
    let seen = seen.lock().expect("histogram lock");
    println!(
        "   as the workers saw it (due -> claimed, on their own clock): p50 {} ms, p99 {} ms, \
         p99.9 {} ms, max {} ms; claimed before due: {}",
        seen.value_at_quantile(0.5),
        seen.value_at_quantile(0.99),
        seen.value_at_quantile(0.999),
        seen.max(),
        early.load(Ordering::Relaxed)
    );
    let fired_ok = stats.fired == scheduled
        && stats.completed == scheduled
        && early.load(Ordering::Relaxed) == 0;
    println!(
        "   fired {} == scheduled {scheduled}: {}; completed {}, duplicate deliveries {}",
        stats.fired,
        if fired_ok { "yes" } else { "NO" },
        stats.completed,
        duplicates.load(Ordering::Relaxed)
    );
    let engine = Arc::into_inner(engine).expect("all threads joined");
    engine.close()?;
    if !fired_ok {
        return Err("not every scheduled job fired exactly once, none early".into());
    }
    Ok(())
}

fn recovery_part(args: &DemoArgs, dir: &std::path::Path) -> DynResult<()> {
    let n = args.recovery_jobs;
    println!("\n2. Crash and recovery: {n} durable jobs due in 1 s, then the process is killed");
    let due = now_ms() + 1_000;
    // A real crash: a child process schedules, says so, and is killed with SIGKILL.
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .arg("demo-crash-child")
        .arg("--dir")
        .arg(dir)
        .arg("--jobs")
        .arg(n.to_string())
        .arg("--due-ms")
        .arg(due.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut said = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("piped")),
        &mut said,
    )?;
    child.kill()?;
    let status = child.wait()?;
    if said.trim() != "scheduled" {
        return Err(format!("the crash child failed ({status}): {said:?}").into());
    }
    println!(
        "   a child process scheduled them durably and was killed with SIGKILL ({status}); \
         waiting 2 s"
    );
    std::thread::sleep(Duration::from_secs(2));
    let reopened_at = Instant::now();
    let engine = Engine::open(Config::new(dir))?;
    let open_elapsed = reopened_at.elapsed();
    let rec = engine.recovery().clone();
    println!(
        "   reopened in {:.1} ms: replayed {} records ({:.2} M records/s), {} missed jobs found",
        open_elapsed.as_secs_f64() * 1e3,
        rec.records,
        rec.records_per_sec() / 1e6,
        rec.missed
    );
    let mut replayed = 0u64;
    while replayed < n {
        let batch = engine.claim_next(10_000, Duration::from_secs(10))?;
        if batch.is_empty() {
            break;
        }
        replayed += engine
            .complete_batch(&batch)?
            .iter()
            .filter(|&&b| b)
            .count() as u64;
    }
    let all = replayed == n && rec.missed == n;
    println!(
        "   {replayed} of {n} missed jobs fired at once after the restart and completed: {}",
        if all { "all replayed" } else { "SOME MISSING" }
    );
    engine.close()?;
    if !all {
        return Err("missed jobs were not all replayed".into());
    }
    Ok(())
}

fn compaction_part(dir: &std::path::Path) -> DynResult<()> {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    // The segment still appended to is sealed once it has held records for a second (the
    // default waits ten minutes), so that its completions are folded too.
    let seal_after = Duration::from_secs(1);
    let config = || Config::new(dir).seal_after_ms(seal_after.as_millis() as u64);
    let engine = Engine::open(config())?;
    let before = engine.store_stats();
    let replayed_before = engine.recovery().records;
    println!(
        "\n3. Compaction of part 1's directory, where every job completed: the journal holds \
         {} segments ({:.0} MiB); an open replayed {replayed_before} records",
        before.journal_segments,
        mib(before.journal_bytes)
    );
    let compact_all = || -> DynResult<u64> {
        let mut folded = 0;
        loop {
            let pass = engine.compact()?;
            if pass.records == 0 {
                return Ok(folded);
            }
            folded += pass.records;
        }
    };
    let started = Instant::now();
    let folded = compact_all()?;
    let elapsed = started.elapsed();
    let after = engine.store_stats();
    println!(
        "   folded {folded} records in {:.0} ms ({:.1} M records/s): {} journal segments \
         deleted, {:.0} MiB reclaimed; {} bucket(s) on disk hold {} jobs",
        elapsed.as_secs_f64() * 1e3,
        folded as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6,
        after.segments_deleted,
        mib(after.bytes_reclaimed),
        after.buckets,
        after.bucket_jobs
    );
    // The first pass saw the segment still appended to hold records; a pass once it has for a
    // second seals and folds it (during the passes above, if they took that long).
    let after = if after.segments_sealed_early == 0 {
        std::thread::sleep(seal_after.saturating_sub(started.elapsed()));
        compact_all()?;
        engine.store_stats()
    } else {
        after
    };
    println!(
        "   {} segment sealed early: the one appended to, by a pass once it had held records \
         for {} s (Config::seal_after_ms, default 10 min), and folded: {} bucket(s) left \
         holding {} jobs, {} dropped whole",
        after.segments_sealed_early,
        seal_after.as_secs(),
        after.buckets,
        after.bucket_jobs,
        after.buckets_dropped
    );
    engine.close()?;
    let reopened_at = Instant::now();
    let engine = Engine::open(config())?;
    let open_elapsed = reopened_at.elapsed();
    let store = engine.store_stats();
    // Where the open's time went: the log's own part, and the buckets' files, read whole
    // (a bucket's runs hold every job it was written with until they are merged).
    let r = engine.recovery();
    println!(
        "   the journal now holds {} segment(s) ({:.0} MiB); reopened in {:.1} ms (the log's \
         part {:.1} ms; {} jobs loaded from {} bucket(s)), replaying {} records after LSN {}",
        store.journal_segments,
        mib(store.journal_bytes),
        open_elapsed.as_secs_f64() * 1e3,
        r.log_elapsed.as_secs_f64() * 1e3,
        r.bucket_jobs,
        r.buckets,
        r.records,
        r.covered_lsn
    );
    let shrank = after.segments_deleted > 0 && r.records < replayed_before;
    engine.close()?;
    if before.journal_segments >= 2 && !shrank {
        return Err(
            "compaction did not shrink the log of a directory whose jobs all finished".into(),
        );
    }
    if after.bucket_jobs > 0 {
        return Err(format!(
            "{} finished jobs are still in the buckets after their segment was sealed",
            after.bucket_jobs
        )
        .into());
    }
    Ok(())
}

/// Part 4: jobs whose worker fails them, retried with backoff until the dead-letter set; one
/// of them requeued and completed. Timed on the worker's own clock.
fn retry_part(dir: &std::path::Path) -> DynResult<()> {
    use timewheel::{Backoff, DeadQuery};
    const JOBS: u64 = 5;
    const ATTEMPTS: u32 = 4;
    let backoff = Backoff::new(50, 400);
    println!(
        "\n4. Retries and dead letters: {JOBS} jobs whose worker always fails them, at most \
         {ATTEMPTS} attempts each, backoff from {} ms doubling to {} ms (full jitter)",
        backoff.base_ms, backoff.cap_ms
    );
    let engine = Engine::open(Config::new(dir))?;
    let start = now_ms();
    let ids = engine.schedule_batch((0..JOBS).map(|i| {
        JobSpec::at(start)
            .payload(format!("charge card #{i}"))
            .max_attempts(ATTEMPTS)
            .backoff(backoff)
    }))?;
    // Each delivery as the worker saw it: (job index, attempt, ms since the first fire).
    let mut seen: Vec<(usize, u32, u64)> = Vec::new();
    let mut last_at = std::collections::HashMap::new();
    let mut waits = Vec::new();
    while engine.stats().dead < JOBS {
        let Some(job) = engine.next(Duration::from_secs(5))? else {
            return Err("a retried job did not come back within 5 s".into());
        };
        let at = now_ms();
        if let Some(failed_at) = last_at.get(&job.id) {
            waits.push((job.attempt, at.saturating_sub(*failed_at)));
        }
        let index = ids
            .iter()
            .position(|&id| id == job.id)
            .expect("one of ours");
        seen.push((index, job.attempt, at - start));
        engine.fail(&job, &format!("card declined (attempt {})", job.attempt))?;
        // From when the failure was durable, on the worker's clock.
        last_at.insert(job.id, now_ms());
    }
    for attempt in 2..=ATTEMPTS {
        let w: Vec<u64> = waits
            .iter()
            .filter(|(a, _)| *a == attempt)
            .map(|(_, w)| *w)
            .collect();
        println!(
            "   attempt {attempt}: {} deliveries, {} to {} ms after the failure before it was \
             durable (backoff drawn from 0 to {} ms, plus the fire's lateness)",
            w.len(),
            w.iter().min().copied().unwrap_or(0),
            w.iter().max().copied().unwrap_or(0),
            backoff.ceiling_ms(attempt - 1)
        );
    }
    let page = engine.dead_letters(&DeadQuery::default())?;
    let stats = engine.stats();
    println!(
        "   {} deliveries in all, {} retries; the dead-letter set holds {} jobs, e.g. {} after \
         {} attempts: \"{}\"",
        seen.len(),
        stats.retried,
        page.jobs.len(),
        page.jobs[0].id,
        page.jobs[0].attempt,
        page.jobs[0].reason
    );
    if seen.len() as u64 != JOBS * u64::from(ATTEMPTS) || page.jobs.len() as u64 != JOBS {
        return Err("the retries did not end in the dead-letter set as the policy says".into());
    }
    // The dead letters survive a restart; one is requeued and this time succeeds.
    engine.close()?;
    let engine = Engine::open(Config::new(dir))?;
    let survived = engine.stats().dead;
    engine.requeue_dead(&[ids[0]])?;
    let job = engine
        .next(Duration::from_secs(5))?
        .ok_or("the requeued job did not fire")?;
    engine.complete(&job)?;
    let purged = engine.purge_dead_where(None)?;
    println!(
        "   after a restart the set still holds {survived}; job {} requeued and completed at \
         attempt {}, the other {purged} purged",
        job.id, job.attempt
    );
    engine.close()?;
    Ok(())
}

/// Part 5: a duplicate submit returns the same job; a cron job fires each second.
fn keys_and_cron_part(dir: &std::path::Path) -> DynResult<()> {
    use timewheel::recur::Recurrence;
    println!("\n5. Idempotency keys and a cron job");
    let engine = Engine::open(Config::new(dir))?;
    let remind = || {
        JobSpec::after(Duration::from_secs(1800))
            .key("order-1042")
            .payload("cancel if unpaid")
    };
    let first = engine.schedule(remind())?;
    let again = engine.schedule(remind())?;
    println!(
        "   schedule with key \"order-1042\" twice: ids {first} and {again} ({}), {} job(s) \
         scheduled; cancel_by_key(\"order-1042\"): {:?}",
        if first == again {
            "the same job"
        } else {
            "DIFFERENT"
        },
        engine.stats().scheduled,
        engine.cancel_by_key(b"order-1042")?
    );
    if first != again {
        return Err("a duplicate submit made a second job".into());
    }
    let every_second = Recurrence::cron("* * * * * *", "Europe/Berlin")?;
    let id = engine.schedule(JobSpec::recurring(every_second).payload("heartbeat"))?;
    let mut fired = Vec::new();
    for _ in 0..3 {
        let job = engine
            .next(Duration::from_secs(5))?
            .ok_or("the cron job did not fire within 5 s")?;
        let at = now_ms();
        fired.push(format!(
            "{} (due {}, {} ms late)",
            job.attempt,
            chrono::DateTime::from_timestamp_millis(job.due_ms as i64)
                .map(|t| t.format("%H:%M:%S%.3f").to_string())
                .unwrap_or_default(),
            at.saturating_sub(job.due_ms)
        ));
        engine.complete(&job)?;
    }
    println!(
        "   cron \"* * * * * *\" (every second, Europe/Berlin): occurrences {}; the next is \
         due {} ms from now; {} schedule(s) listed",
        fired.join(", "),
        engine
            .get(id)
            .map_or(0, |j| j.due_ms.saturating_sub(now_ms())),
        engine.schedules(None, 10)?.len()
    );
    engine.delete_schedule(id)?;
    engine.close()?;
    Ok(())
}

/// Part 6: tenant 1's burst beside tenant 2's few jobs, with fairness on or off; tenant 2's
/// due-to-claim time on the worker's clock.
fn fairness_part(dir: &std::path::Path, fair: bool) -> DynResult<()> {
    const A: u64 = 20_000;
    const B: u64 = 100;
    let mut config = Config::new(dir);
    if fair {
        config = config.fair_tenants(0);
        config.tenant_running_limits.insert(1, 32);
        println!(
            "\n6. Tenant fairness: tenant 1 has {A} jobs due now, tenant 2 {B}; one worker \
             completes its jobs and claims up to 64 more in each round"
        );
    }
    let engine = Engine::open(config)?;
    let due = now_ms() + 500;
    engine.schedule_batch((0..A).map(|_| JobSpec::at(due).tenant(1)))?;
    let b: std::collections::HashSet<_> = engine
        .schedule_batch((0..B).map(|_| JobSpec::at(due + 1).tenant(2)))?
        .into_iter()
        .collect();
    let mut waits = Vec::new();
    let mut done = 0;
    let mut got = Vec::new();
    while done < A + B {
        // The last round's jobs completed and the next ones claimed, with one sync.
        got = engine.complete_and_claim_next(&got, 64, Duration::from_secs(5))?;
        if got.is_empty() {
            return Err("the fairness run's jobs stopped coming".into());
        }
        let at = now_ms();
        waits.extend(
            got.iter()
                .filter(|c| b.contains(&c.id))
                .map(|c| at.saturating_sub(c.due_ms)),
        );
        done += got.len() as u64;
    }
    engine.complete_batch(&got)?;
    waits.sort_unstable();
    let p99 = waits[(waits.len() * 99 / 100).min(waits.len() - 1)];
    println!(
        "   {}: tenant 2's jobs were claimed {} to {} ms after their due time (p99 {p99} ms)",
        if fair {
            "fair (tenant 1 limited to 32 running)"
        } else {
            "unfair (firing order)        "
        },
        waits[0],
        waits[waits.len() - 1]
    );
    engine.close()?;
    if !fair {
        println!("\nDone. Data in each part was acknowledged only after msync.");
    }
    Ok(())
}
