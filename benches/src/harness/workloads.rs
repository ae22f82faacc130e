//! The workloads of a harness run, with their sizes (full or `--quick`) and their systems.

use std::path::{Path, PathBuf};

use timewheel::Durability;

use super::results::{Kind, Metric};
use super::{System, Workload};
use crate::engine::{Percentiles, churn, firing, fresh, lifecycle, schedule, store};
use crate::peers::redis::{self, Fsync};
use crate::peers::sqlite;
use crate::wheel::{self, Shape, Structure};

/// How big each workload is.
#[derive(Clone, Debug)]
pub struct Sizes {
    /// Runs of each workload (some take fewer, see below).
    pub runs: usize,
    /// The wheel workloads: (id, shape, runs).
    pub wheel: Vec<(&'static str, Shape, usize)>,
    /// Jobs per batch measurement.
    pub batch_jobs: u64,
    /// Seconds per single-call measurement.
    pub single_secs: f64,
    /// Jobs pending in the lateness workloads (due over `jobs / 100` ms).
    pub lateness_jobs: u64,
    /// How far ahead the first lateness job is due (time to schedule them all first).
    pub lateness_lead_ms: u64,
    /// Jobs in the sidecar's end-to-end run.
    pub sidecar_jobs: usize,
    /// The sidecar's lateness run: fires per second and seconds.
    pub sidecar_rate: (u64, u64),
    /// Jobs in the burst, and how far ahead they are due.
    pub burst: (u64, u64),
    /// Schedule records in the recovery log.
    pub recovery_jobs: u64,
    /// Jobs held for the resident-bytes workload.
    pub resident_jobs: u64,
    /// Jobs in the compaction workload.
    pub compaction_jobs: u64,
    /// Jobs in the horizon workload (none: left out), one run.
    pub horizon_jobs: Option<u64>,
    /// The churn on disk: jobs per simulated second and simulated seconds, one run.
    pub churn: churn::Shape,
    /// Jobs resident when listing a page.
    pub listing_jobs: u64,
    /// Jobs scheduled with and without idempotency keys.
    pub keyed_jobs: u64,
    /// The retry storm: jobs, and attempts each.
    pub storm: (u64, u32),
    /// Fairness: tenant 1's jobs, tenant 2's, tenant 1's running limit.
    pub fairness: (u64, u64, u32),
}

impl Sizes {
    /// The full run: the sizes the docs quote (about 25 minutes on 2 cores).
    pub fn full() -> Sizes {
        let hour = Shape {
            timers: 1_000_000,
            span_ms: 3_600_000,
            steady_ms: 600_000,
            bulk_jobs: 1_000_000,
        };
        Sizes {
            runs: 3,
            wheel: vec![
                ("wheel-1m", hour, 3),
                (
                    "wheel-10m",
                    Shape {
                        timers: 10_000_000,
                        ..hour
                    },
                    2,
                ),
            ],
            batch_jobs: 1_000_000,
            single_secs: 3.0,
            lateness_jobs: 1_000_000,
            lateness_lead_ms: 2_000,
            sidecar_jobs: 200_000,
            sidecar_rate: (20_000, 5),
            burst: (1_000_000, 70_000),
            recovery_jobs: 10_000_000,
            resident_jobs: 1_000_000,
            compaction_jobs: 2_000_000,
            horizon_jobs: Some(5_000_000),
            churn: churn_shape(10_000, 80 * 60),
            listing_jobs: 1_000_000,
            keyed_jobs: 1_000_000,
            storm: (100_000, 5),
            fairness: (1_000_000, 1_000, 64),
        }
    }

    /// `--quick`: every workload, smaller, in under two minutes on 2 cores.
    pub fn quick() -> Sizes {
        let ten_minutes = Shape {
            timers: 100_000,
            span_ms: 600_000,
            steady_ms: 60_000,
            bulk_jobs: 100_000,
        };
        Sizes {
            runs: 2,
            wheel: vec![
                ("wheel-100k", ten_minutes, 2),
                (
                    "wheel-500k",
                    Shape {
                        timers: 500_000,
                        ..ten_minutes
                    },
                    2,
                ),
            ],
            batch_jobs: 100_000,
            single_secs: 0.5,
            lateness_jobs: 100_000,
            lateness_lead_ms: 500,
            sidecar_jobs: 20_000,
            sidecar_rate: (20_000, 1),
            burst: (200_000, 3_000),
            recovery_jobs: 1_000_000,
            resident_jobs: 200_000,
            // Enough to seal a segment (64 MiB): an unsealed one is not folded.
            compaction_jobs: 500_000,
            horizon_jobs: None,
            churn: churn_shape(2_000, 20 * 60),
            listing_jobs: 100_000,
            keyed_jobs: 100_000,
            storm: (10_000, 5),
            fairness: (50_000, 500, 64),
        }
    }
}

/// The churn's shape: `rate` jobs per simulated second for `seconds`, 9 of 10 cancelled, unless
/// the environment's `CHURN=RATE:SECONDS[:PERCENT]` says otherwise (the day-long run of the
/// docs is `CHURN=10000:86400`; `PERCENT` sets `Config::bucket_space_percent_max`).
fn churn_shape(rate: u64, seconds: u64) -> churn::Shape {
    let (rate, seconds, space_percent_max) = std::env::var("CHURN")
        .ok()
        .and_then(|v| {
            let mut parts = v.split(':');
            let r = parts.next()?.parse().ok()?;
            let s = parts.next()?.parse().ok()?;
            let percent = match parts.next() {
                Some(p) => Some(p.parse().ok()?),
                None => None,
            };
            Some((r, s, percent))
        })
        .unwrap_or((rate, seconds, None));
    churn::Shape {
        rate,
        seconds,
        cancelled_of_10: 9,
        space_percent_max,
    }
}

/// What the workloads need to know about their surroundings.
pub struct Context {
    /// Where the data directories go (a real disk, not tmpfs).
    pub root: PathBuf,
    /// Whether to run SQLite and Redis.
    pub peers: bool,
    /// `redis-server --version`, if it is on PATH.
    pub redis: Option<String>,
    /// The release `timewheel` binary for the sidecar, or why there is none.
    pub sidecar_bin: Result<PathBuf, String>,
    /// This executable, for the horizon's reopening child.
    pub exe: PathBuf,
}

const JOBS_S: Metric = Metric::higher("throughput", "jobs/s");
const CALLS_S: Metric = Metric::higher("throughput", "calls/s");

fn percentiles(p: &Percentiles) -> Vec<(Metric, f64)> {
    p.labelled()
        .into_iter()
        .map(|(name, v)| (Metric::lower(name, "µs"), v))
        .collect()
}

fn dir(root: &Path, name: &str) -> PathBuf {
    fresh(root, name)
}

/// Every workload, in the order they run, and the lines for what was left out.
pub fn plan(s: &Sizes, cx: &Context) -> (Vec<Workload>, Vec<String>) {
    let mut skipped = Vec::new();
    let redis = cx.peers && cx.redis.is_some();
    if cx.peers && cx.redis.is_none() {
        skipped.push(
            "Redis: `redis-server` is not on PATH (`apt-get install redis-server` adds it)".into(),
        );
    }
    if !cx.peers {
        skipped.push("SQLite and Redis: `--no-peers`".into());
    }
    let mut w: Vec<Workload> = s
        .wheel
        .iter()
        .map(|&(id, shape, runs)| wheel_workload(id, shape, runs))
        .collect();
    w.push(batch(s, cx, redis));
    for callers in [1usize, 8, 64] {
        w.push(single(s, cx, redis, callers));
    }
    w.push(lateness(s, cx));
    w.push(lateness_compacting(s, cx));
    match &cx.sidecar_bin {
        Ok(bin) => w.extend(sidecar(s, cx, bin)),
        Err(e) => skipped.push(format!("the sidecar workloads: {e}")),
    }
    w.push(burst(s, cx));
    w.push(recovery(s, cx));
    w.push(resident(s, cx, redis));
    w.push(compaction(s, cx));
    match s.horizon_jobs {
        Some(n) => w.push(horizon(n, cx)),
        None => skipped.push(
            "the horizon workload: full runs only (it reopens in a child process and idles)".into(),
        ),
    }
    w.push(churn_workload(s.churn, cx));
    w.push(listing(s, cx));
    w.push(keyed(s, cx));
    w.push(storm(s, cx));
    w.push(fairness(s, cx));
    (w, skipped)
}

fn keyed(s: &Sizes, cx: &Context) -> Workload {
    let n = s.keyed_jobs;
    let systems = [("timewheel", false), ("timewheel, keyed", true)]
        .into_iter()
        .map(|(name, keyed)| {
            let r = cx.root.clone();
            System::new(name, move || {
                let rate = lifecycle::keyed_batches(&dir(&r, "keyed"), n, 10_000, keyed);
                Ok(vec![(JOBS_S, rate)])
            })
        })
        .collect();
    Workload {
        id: "keyed",
        title: "Idempotency keys: schedule_batch with a unique key per job".into(),
        note: format!(
            "{n} durable jobs in batches of 10 000, 1 thread, with a 18-byte key each or none; \
             the goal is a keyed schedule costing at most 1.5 times a plain one."
        ),
        kind: Kind::Throughput,
        runs: s.runs,
        systems,
    }
}

fn storm(s: &Sizes, cx: &Context) -> Workload {
    let (n, attempts) = s.storm;
    let r = cx.root.clone();
    let system = System::new("timewheel", move || {
        let st = lifecycle::retry_storm(&dir(&r, "storm"), n, attempts);
        let mut out = vec![
            (
                Metric::higher("failed attempts", "attempts/s"),
                st.attempts_per_s,
            ),
            (Metric::lower("storm", "s"), st.seconds),
        ];
        out.extend(
            st.lateness
                .labelled()
                .into_iter()
                .map(|(name, v)| (Metric::lower(name, "µs"), v)),
        );
        Ok(out)
    });
    Workload {
        id: "retry-storm",
        title: "Retry storm".into(),
        note: format!(
            "{n} jobs due over 1 s that fail every attempt, {attempts} attempts each, backoff \
             10 ms doubling to 200 ms with full jitter; two workers claim up to 4 096 and fail \
             them in one batch. Every job is checked to end dead with exactly {attempts} \
             attempts. Lateness: each delivery's due time (the retry's) to its claim, on the \
             worker's clock."
        ),
        kind: Kind::Other,
        runs: s.runs,
        systems: vec![system],
    }
}

fn fairness(s: &Sizes, cx: &Context) -> Workload {
    let (a, b, limit) = s.fairness;
    let systems = [("timewheel, fair", true), ("timewheel, unfair", false)]
        .into_iter()
        .map(|(name, fair)| {
            let r = cx.root.clone();
            System::new(name, move || {
                let p = lifecycle::fairness(&dir(&r, "fairness"), a, b, fair, limit);
                Ok(percentiles(&p))
            })
        })
        .collect();
    Workload {
        id: "fairness",
        title: "Tenant fairness: a small tenant beside another's burst".into(),
        note: format!(
            "tenant 1 has {a} jobs due within one second, tenant 2 {b} due over the same \
             second; two workers claim up to 256 and complete them. Figures: tenant 2's due \
             time to claim, on the workers' clock. Fair: `Config::fair_tenants` with tenant 1 \
             limited to {limit} running; unfair: off (firing order). The goal is a p99 of at \
             most 5 ms with fairness."
        ),
        kind: Kind::Lateness,
        runs: s.runs,
        systems,
    }
}

fn wheel_workload(id: &'static str, shape: Shape, runs: usize) -> Workload {
    let systems = Structure::ALL
        .into_iter()
        .map(|structure| {
            System::new(structure.name(), move || {
                let dues = wheel::dues(shape.timers, shape.span_ms, 42);
                let f = wheel::measure(structure, &dues, &shape);
                Ok(vec![
                    (Metric::lower("W1 insert", "ns"), f.insert_ns),
                    (Metric::lower("W1 fire", "ns per timer"), f.fire_ns),
                    (Metric::lower("W2 cancel", "ns"), f.cancel_ns),
                    (Metric::lower("W2 fire", "ns per timer fired"), f.w2_fire_ns),
                    (Metric::lower("W3 fire + insert", "ns"), f.cycle_ns),
                    (Metric::lower("W4 sorted bulk insert", "ns"), f.bulk_ns),
                    (
                        Metric::lower("W3 worst single call", "µs"),
                        f.worst_call_ns as f64 / 1e3,
                    ),
                    (Metric::lower("bytes per timer", "B"), f.bytes_per_timer),
                ])
            })
        })
        .collect();
    Workload {
        id,
        title: format!(
            "Timing wheel, {} timers",
            crate::harness::report::fmt_value(shape.timers as f64)
        ),
        note: format!(
            "Dues uniform over {} s, a virtual 1 ms clock. W1 fill-drain (drain time per timer \
             includes the idle ms steps), W2 cancel 90% then drain, W3 steady state for {} s \
             virtual (fire + insert), W4 a sorted run of {} two spans ahead, W3's slowest single \
             call, heap bytes per timer after W1's inserts. DelayQueue runs on a paused tokio \
             clock (each ms one `advance`); BinaryHeap cancels by tombstone.",
            shape.span_ms / 1000,
            shape.steady_ms / 1000,
            shape.bulk_jobs
        ),
        kind: Kind::Other,
        runs,
        systems,
    }
}

fn batch(s: &Sizes, cx: &Context, redis: bool) -> Workload {
    let n = s.batch_jobs;
    let root = cx.root.clone();
    let mut systems = Vec::new();
    for (name, batch, durability) in [
        ("timewheel", 1_000, Durability::Sync),
        ("timewheel, batches of 10 000", 10_000, Durability::Sync),
        (
            "timewheel, Buffered (no sync)",
            10_000,
            Durability::Buffered,
        ),
    ] {
        let root = root.clone();
        systems.push(System::new(name, move || {
            Ok(vec![(
                JOBS_S,
                schedule::batch(&dir(&root, "batch"), n, batch, 1, durability),
            )])
        }));
    }
    if cx.peers {
        let r = root.clone();
        systems.push(System::new("SQLite", move || {
            sqlite::batch(&dir(&r, "sqlite"), n, 1_000)
                .map(|v| vec![(JOBS_S, v)])
                .map_err(|e| e.to_string())
        }));
    }
    if redis {
        for (name, fsync) in [
            ("Redis (AOF always)", Fsync::Always),
            ("Redis (AOF everysec)", Fsync::EverySec),
        ] {
            let r = root.clone();
            systems.push(System::new(name, move || {
                let server =
                    redis::Server::start(&dir(&r, "redis"), fsync).map_err(|e| e.to_string())?;
                redis::batch(&server, n, 1_000)
                    .map(|v| vec![(JOBS_S, v)])
                    .map_err(|e| e.to_string())
            }));
        }
    }
    Workload {
        id: "batch",
        title: "Durable batch schedules".into(),
        note: format!(
            "{n} jobs with 16-byte payloads, one thread, batches of 1 000 (SQLite: one transaction \
             per batch; Redis: 1 000 ZADDs pipelined). timewheel `schedule_batch` with \
             `Durability::Sync`; the Buffered row syncs nothing (the engine's own cost)."
        ),
        kind: Kind::Throughput,
        runs: s.runs,
        systems,
    }
}

/// A run of single calls as figures: the throughput, and what each sync carried and took.
fn single_figures(run: schedule::Single) -> Vec<(Metric, f64)> {
    vec![
        (CALLS_S, run.calls_per_s),
        (
            Metric::higher("records per sync", "records"),
            run.records_per_sync,
        ),
        (Metric::lower("time per sync", "µs"), run.sync_us),
        (
            Metric::lower("process CPU per call", "µs"),
            run.cpu_us_per_call,
        ),
    ]
}

fn single(s: &Sizes, cx: &Context, redis: bool, callers: usize) -> Workload {
    let secs = s.single_secs;
    let root = cx.root.clone();
    let mut systems = Vec::new();
    {
        let r = root.clone();
        systems.push(System::new("timewheel", move || {
            Ok(single_figures(schedule::single_threads(
                &dir(&r, "single"),
                callers,
                secs,
            )))
        }));
        let r = root.clone();
        systems.push(System::new(
            "timewheel async (tokio, 2 workers)",
            move || {
                Ok(single_figures(schedule::single_async(
                    &dir(&r, "single"),
                    callers,
                    secs,
                )))
            },
        ));
    }
    if cx.peers {
        let r = root.clone();
        systems.push(System::new("SQLite", move || {
            sqlite::single(&dir(&r, "sqlite"), callers, secs)
                .map(|v| vec![(CALLS_S, v)])
                .map_err(|e| e.to_string())
        }));
    }
    if redis {
        for (name, fsync) in [
            ("Redis (AOF always)", Fsync::Always),
            ("Redis (AOF everysec)", Fsync::EverySec),
        ] {
            let r = root.clone();
            systems.push(System::new(name, move || {
                let server =
                    redis::Server::start(&dir(&r, "redis"), fsync).map_err(|e| e.to_string())?;
                redis::single(&server, callers, secs)
                    .map(|v| vec![(CALLS_S, v)])
                    .map_err(|e| e.to_string())
            }));
        }
    }
    let id = match callers {
        1 => "single-1",
        8 => "single-8",
        _ => "single-64",
    };
    Workload {
        id,
        title: format!("Durable single schedules, {callers} callers"),
        note: format!(
            "One job per call, acknowledged once durable, {secs} s per measurement. timewheel: \
             `schedule` from {callers} threads (group commit), and `schedule_async` from \
             {callers} tasks on a 2-worker tokio runtime. SQLite: one row per transaction, the \
             callers sharing one connection behind a mutex (one writer at a time). Redis: \
             {callers} connections, one ZADD at a time each. For timewheel, from the log's \
             counters: the records each sync made durable on average, and the mean time of a \
             sync under this load (one sync at a time carries at most {callers} records); and \
             the process's CPU time per call (every thread: callers, runtime, engine)."
        ),
        kind: Kind::Throughput,
        runs: s.runs,
        systems,
    }
}

fn lateness(s: &Sizes, cx: &Context) -> Workload {
    let (n, lead) = (s.lateness_jobs, s.lateness_lead_ms);
    let root = cx.root.clone();
    let mut systems = Vec::new();
    for (name, workers, tag) in [
        ("timewheel", firing::Workers::Round, "late"),
        (
            "timewheel, completes on a 2nd thread",
            firing::Workers::Handoff,
            "late-handoff",
        ),
    ] {
        let r = root.clone();
        systems.push(System::new(name, move || {
            let l = firing::lateness(&dir(&r, tag), n, lead, false, workers);
            let mut v = percentiles(&l.to_claim);
            v.push((
                Metric::lower("engine's own p99, due to ready queue", "µs"),
                l.to_ready.p99_us,
            ));
            v.push((Metric::lower("claimed early", "jobs"), l.early as f64));
            Ok(v)
        }));
    }
    if cx.peers {
        let r = root.clone();
        systems.push(System::new("SQLite (polled every ms)", move || {
            let h = sqlite::poll_lateness(&dir(&r, "sqlite-late"), n, n / 100, lead)
                .map_err(|e| e.to_string())?;
            Ok(percentiles(&Percentiles::of(&h)))
        }));
    }
    Workload {
        id: "lateness",
        title: "Fire lateness under load".into(),
        note: format!(
            "{n} jobs pending, due evenly over {:.1} s (~100k fires/s). Lateness is the worker's \
             clock when its claim returns, minus the due time (a claim returns without a \
             sync; its attempt stays unique across crashes). timewheel: 2 workers each \
             complete the batch they hold and claim the next (up to 4 096 ready jobs) in one \
             call, which returns once the completes are durable (`complete_and_claim_next`). \
             timewheel, completes on a 2nd thread: the 2 workers only claim (`claim_next`) \
             and hand what they took to a completer thread (`complete_batch`): no worker \
             waits for the disk. SQLite: a poller every ms selects due rows (1 000 at most) \
             and marks them claimed in one transaction.",
            (n / 100) as f64 / 1000.0
        ),
        kind: Kind::Lateness,
        runs: s.runs,
        systems,
    }
}

fn lateness_compacting(s: &Sizes, cx: &Context) -> Workload {
    let (n, lead) = (s.lateness_jobs, s.lateness_lead_ms);
    let systems = [
        ("timewheel", firing::Workers::Round, "late-compacting"),
        (
            "timewheel, completes on a 2nd thread",
            firing::Workers::Handoff,
            "late-compacting-handoff",
        ),
    ]
    .into_iter()
    .map(|(name, workers, tag)| {
        let r = cx.root.clone();
        System::new(name, move || {
            let l = firing::lateness(&dir(&r, tag), n, lead, true, workers);
            let mut v = percentiles(&l.to_claim);
            v.push((
                Metric::higher("compaction beside the fires", "records/s"),
                l.compaction_records_per_s,
            ));
            v.push((Metric::lower("claimed early", "jobs"), l.early as f64));
            Ok(v)
        })
    })
    .collect();
    Workload {
        id: "lateness-compacting",
        title: "Fire lateness beside compaction".into(),
        note: format!(
            "As `lateness` (both worker loops), while compaction folds a journal of {} more \
             jobs due over 30 days (3 of 4 cancelled), from 50 ms before the first due time.",
            3 * n
        ),
        kind: Kind::Lateness,
        runs: s.runs,
        systems,
    }
}

/// The second rate of the sidecar's lateness workload, fires per second.
const SIDECAR_QUIET_RATE: u64 = 1_000;

fn sidecar(s: &Sizes, cx: &Context, bin: &Path) -> Vec<Workload> {
    let jobs = s.sidecar_jobs;
    let (rate, secs) = s.sidecar_rate;
    let (r, b) = (cx.root.clone(), bin.to_owned());
    let e2e = System::new("timewheel serve", move || {
        let manual = crate::sidecar::end_to_end(&b, &r, jobs, false);
        let auto = crate::sidecar::end_to_end(&b, &r, jobs, true);
        Ok(vec![
            (
                Metric::higher("client completes each job", "jobs/s"),
                jobs as f64 / manual.done.as_secs_f64(),
            ),
            (
                Metric::higher("--auto-complete, to all completed", "jobs/s"),
                jobs as f64 / auto.done.as_secs_f64(),
            ),
        ])
    });
    // The two rates: the workload's, and a quiet 1 000 fires/s over the same span.
    let late_at = |rate: u64| {
        let (r, b) = (cx.root.clone(), bin.to_owned());
        System::new(format!("timewheel serve, {rate} fires/s"), move || {
            let l = crate::sidecar::lateness(&b, &r, rate * secs, secs * 1000);
            let mut v = percentiles(&Percentiles::of(&l.hist));
            v.push((Metric::lower("read early", "jobs"), l.early as f64));
            Ok(v)
        })
    };
    let late = vec![late_at(rate), late_at(SIDECAR_QUIET_RATE)];
    vec![
        Workload {
            id: "sidecar",
            title: "Sidecar end to end".into(),
            note: format!(
                "The release `timewheel serve` driven over pipes by a client thread pair: {jobs} \
                 schedules due at once, pipelined; the client completes each job as its `fired` \
                 event arrives (or, with `--auto-complete`, only reads the events). From the \
                 first schedule written to the last complete acknowledged."
            ),
            kind: Kind::Throughput,
            runs: s.runs,
            systems: vec![e2e],
        },
        Workload {
            id: "sidecar-lateness",
            title: "Sidecar fire lateness".into(),
            note: format!(
                "{} jobs due evenly over {secs} s ({rate} fires/s), and {} over the same span \
                 ({SIDECAR_QUIET_RATE} fires/s), with `--auto-complete`; lateness is the \
                 client's clock when it reads the event line minus `due_ms` (the claim's \
                 sync, the pipe and the client's own scheduling included).",
                rate * secs,
                SIDECAR_QUIET_RATE * secs
            ),
            kind: Kind::Lateness,
            runs: s.runs,
            systems: late,
        },
    ]
}

fn burst(s: &Sizes, cx: &Context) -> Workload {
    let (n, ahead) = s.burst;
    let r = cx.root.clone();
    let system = System::new("timewheel", move || {
        let b = firing::burst(&dir(&r, "burst"), n, ahead);
        Ok(vec![
            (
                Metric::lower(
                    "last of the burst in the ready queue, after its due time",
                    "ms",
                ),
                b.last_ready_ms,
            ),
            (
                Metric::lower("single schedule meanwhile, p50", "µs"),
                b.schedule.p50_us,
            ),
            (
                Metric::lower("single schedule meanwhile, p99", "µs"),
                b.schedule.p99_us,
            ),
            (
                Metric::lower("single schedule meanwhile, max", "µs"),
                b.schedule.max_us,
            ),
        ])
    });
    Workload {
        id: "burst",
        title: "Burst: jobs due in one millisecond".into(),
        note: format!(
            "{n} jobs due in the same ms, scheduled {} s ahead; a reader takes the ids off the \
             ready queue; single durable schedules from another thread from 200 ms before the \
             due time until the last id is out.",
            ahead / 1000
        ),
        kind: Kind::Other,
        runs: s.runs,
        systems: vec![system],
    }
}

fn recovery(s: &Sizes, cx: &Context) -> Workload {
    let n = s.recovery_jobs;
    let r = cx.root.clone();
    let system = System::new("timewheel", move || {
        let rec = store::recovery(&dir(&r, "recovery"), n);
        let crash = store::crash_open(&dir(&r, "crash-open"), 100_000);
        Ok(vec![
            (Metric::higher("replay", "records/s"), rec.records_per_s),
            (Metric::lower("open", "ms"), rec.open_ms),
            (
                Metric::higher("demo crash open (100,000 records)", "records/s"),
                crash.records_per_s,
            ),
            (
                Metric::lower("demo crash open (100,000 records), whole open", "ms"),
                crash.open_ms,
            ),
            (
                Metric::lower("demo crash open (100,000 records), the log's part", "ms"),
                crash.log_ms,
            ),
            (
                Metric::higher("timewheel verify, log files scanned", "MB/s"),
                rec.verify_bytes_per_s / 1e6,
            ),
            (
                Metric::higher("timewheel verify --deep, log files replayed", "MB/s"),
                rec.verify_deep_bytes_per_s / 1e6,
            ),
        ])
    });
    Workload {
        id: "recovery",
        title: "Recovery".into(),
        note: format!(
            "{n} schedule records (16-byte payloads) in the journal, no compaction, the engine \
             abandoned as in a crash; the open locks, scans and checks every record, replays it \
             and rebuilds the wheel. The demo's crash open: 100,000 jobs scheduled in durable \
             batches of 10,000, the engine abandoned, then the open (whole, and the log's part). \
             Then `timewheel verify` over the segment files' bytes: \
             every record's checksum, sequence and copy, every body decoded, the bucket files \
             (`timewheel::inspect::verify`); and `timewheel verify --deep`, the next open's \
             recovery and replay, read only (`timewheel::inspect::inspect`)."
        ),
        kind: Kind::Other,
        runs: s.runs,
        systems: vec![system],
    }
}

fn resident(s: &Sizes, cx: &Context, redis: bool) -> Workload {
    let n = s.resident_jobs;
    let r = cx.root.clone();
    let mut systems = vec![System::new("timewheel", move || {
        let res = store::resident(&dir(&r, "resident"), n);
        Ok(vec![
            (
                Metric::lower("resident bytes per job", "B"),
                res.heap_bytes_per_job,
            ),
            (
                Metric::lower("process RSS growth per job", "B"),
                res.rss_bytes_per_job,
            ),
            (
                Metric::lower("heap kept per job left after 9 in 10 left", "B"),
                res.heap_bytes_per_job_left,
            ),
            (
                Metric::lower("the same, 2 s later (idle)", "B"),
                res.heap_bytes_per_job_left_idle,
            ),
        ])
    })];
    if redis {
        let r = cx.root.clone();
        systems.push(System::new("Redis (AOF everysec)", move || {
            let server = redis::Server::start(&dir(&r, "redis"), Fsync::EverySec)
                .map_err(|e| e.to_string())?;
            let before = server.used_memory().map_err(|e| e.to_string())?;
            redis::zadd_pipelined(&server, 0, n, 1_000).map_err(|e| e.to_string())?;
            let after = server.used_memory().map_err(|e| e.to_string())?;
            redis::zrem_nine_in_ten(&server, n, 1_000).map_err(|e| e.to_string())?;
            let drained = server.used_memory().map_err(|e| e.to_string())?;
            let left = n.div_ceil(10).max(1);
            Ok(vec![
                (
                    Metric::lower("resident bytes per job", "B"),
                    after.saturating_sub(before) as f64 / n as f64,
                ),
                (
                    Metric::lower("heap kept per job left after 9 in 10 left", "B"),
                    drained.saturating_sub(before) as f64 / left as f64,
                ),
            ])
        }));
    }
    Workload {
        id: "resident",
        title: "Resident bytes per job".into(),
        note: format!(
            "{n} jobs held in memory, due over an hour. timewheel: heap bytes allocated per job \
             with 16-byte payloads (counting allocator), and the process's RSS growth (heap plus \
             the log pages mapped). Redis: `used_memory` growth per sorted-set member (the \
             member is the id, the score the due time; no payload). Then nine jobs in ten \
             leave (timewheel: `cancel_batch`, Redis: `ZREM`), spread over the whole burst: \
             the memory still held, per job left, is what a drained burst leaves behind (at \
             once, and two seconds later with the engine idle)."
        ),
        kind: Kind::Other,
        runs: s.runs,
        systems,
    }
}

fn compaction(s: &Sizes, cx: &Context) -> Workload {
    let n = s.compaction_jobs;
    let r = cx.root.clone();
    let system = System::new("timewheel", move || {
        let c = store::compaction(&dir(&r, "compaction"), n);
        Ok(vec![
            (Metric::higher("folded", "records/s"), c.records_per_s),
            (
                Metric::lower("bucket bytes per job", "B"),
                c.bucket_bytes_per_job,
            ),
            (
                Metric::lower("open from the journal", "ms"),
                c.open_journal_ms,
            ),
            (
                Metric::lower("open from the buckets", "ms"),
                c.open_buckets_ms,
            ),
        ])
    });
    Workload {
        id: "compaction",
        title: "Compaction".into(),
        note: format!(
            "{n} jobs due over 30 days (16-byte payloads), 3 of 4 then cancelled; compaction \
             until nothing is left to fold; the open before (from the journal) and after (from \
             the bucket files)."
        ),
        kind: Kind::Other,
        runs: s.runs,
        systems: vec![system],
    }
}

fn horizon(n: u64, cx: &Context) -> Workload {
    let (r, exe) = (cx.root.clone(), cx.exe.clone());
    let system = System::new("timewheel", move || {
        let h = store::horizon(&dir(&r, "horizon"), n, &exe)?;
        Ok(vec![
            (
                Metric::higher("scheduled and compacted as they came", "jobs/s"),
                h.scheduled_per_s,
            ),
            (
                Metric::lower("reopen in a fresh process", "ms"),
                h.reopen_ms,
            ),
            (
                Metric::lower("reopened process's resident memory", "MiB"),
                h.reopen_rss_mib,
            ),
            (
                Metric::lower("the same after 3 s idle", "MiB"),
                h.idle_rss_mib,
            ),
            (
                Metric::lower("idle CPU for 3 s after the reopen", "% of a core"),
                h.idle_cpu_percent,
            ),
        ])
    });
    Workload {
        id: "horizon",
        title: "Resident horizon".into(),
        note: format!(
            "{n} jobs due over 30 days with a 2-hour horizon, scheduled in batches of 100 000 \
             with compaction after each; then the directory reopened in a fresh process. One run."
        ),
        kind: Kind::Other,
        runs: 1,
        systems: vec![system],
    }
}

fn churn_workload(shape: churn::Shape, cx: &Context) -> Workload {
    let r = cx.root.clone();
    let system = System::new("timewheel", move || {
        let t = std::time::Instant::now();
        let keep = std::env::var_os("CHURN_KEEP").map(|root| churn::Keep { root: root.into() });
        let c = churn::churn(
            &dir(&r, "churn"),
            shape,
            keep.as_ref(),
            |s, record_bytes| {
                eprintln!(
                    "churn: {:>6} s simulated ({:.0} s real): {} live jobs, journal {} MiB, \
                 buckets {} MiB, directory {} MiB, {:.2}x the live records",
                    s.at_s,
                    t.elapsed().as_secs_f64(),
                    s.live_jobs,
                    s.journal_bytes >> 20,
                    s.bucket_bytes >> 20,
                    s.dir_bytes >> 20,
                    s.ratio(record_bytes)
                );
            },
        )?;
        for (at_s, ms) in &c.reopens {
            eprintln!("churn: reopened at {at_s} s simulated in {ms:.0} ms");
        }
        if let Some(at_s) = c.stopped_at {
            return Err(format!(
                "stopped at {at_s} s simulated, as asked (the stop file in CHURN_KEEP); the same \
                 command goes on from there once the stop file is removed"
            ));
        }
        let mut figures = vec![
            (
                Metric::lower("disk against the live records, worst once steady", "x"),
                c.worst_ratio(),
            ),
            (
                Metric::lower("peak disk in the last third against the first", "x"),
                c.drift(),
            ),
            (
                Metric::lower("peak disk once steady", "MiB"),
                c.peak_bytes() as f64 / f64::from(1 << 20),
            ),
            (
                Metric::lower("least disk once steady", "MiB"),
                c.trough_bytes() as f64 / f64::from(1 << 20),
            ),
            (
                Metric::higher("jobs through their lifecycle", "jobs/s"),
                c.jobs as f64 / c.real_s,
            ),
        ];
        if let Some(slowest) = c.reopens.iter().map(|r| r.1).reduce(f64::max) {
            figures.push((
                Metric::lower("reopen of the kept run's directory, slowest", "ms"),
                slowest,
            ));
        }
        Ok(figures)
    });
    let (rate, secs) = (shape.rate, shape.seconds);
    Workload {
        id: "churn",
        title: "Churn on disk".into(),
        note: format!(
            "{rate} jobs per simulated second for {} simulated minutes (a `ManualClock`; the \
             disk and its syncs are real), each due 6-60 minutes after its schedule; 9 of 10 \
             cancelled 5 minutes after it, the others fired, claimed and completed; compaction \
             every simulated minute. The disk (journal plus bucket files) against the live \
             jobs' schedule records, sampled every 10 simulated minutes after a compaction; \
             steady means after the first hour. One run; `CHURN=RATE:SECONDS[:PERCENT]` \
             changes the shape (`PERCENT`: `Config::bucket_space_percent_max`); with \
             `CHURN_KEEP=DIR` the run keeps its directory there and stops at the next sample \
             once `DIR/stop` exists, and the same command goes on from there later.",
            secs / 60
        ),
        kind: Kind::Other,
        runs: 1,
        systems: vec![system],
    }
}

fn listing(s: &Sizes, cx: &Context) -> Workload {
    let n = s.listing_jobs;
    let r = cx.root.clone();
    let system = System::new("timewheel", move || {
        let d = dir(&r, "listing");
        Ok(vec![
            (
                Metric::lower("a page of 100", "ms"),
                store::listing(&d, n, 100),
            ),
            (
                Metric::lower("a page of 10 000", "ms"),
                store::listing(&fresh(&r, "listing"), n, 10_000),
            ),
        ])
    });
    Workload {
        id: "listing",
        title: "Listing jobs".into(),
        note: format!(
            "`Engine::jobs`: one page of the jobs due in the next hour out of {n} resident jobs, \
             best of 5 (one pass over the job table, the state lock taken for four of its 256 shards at a time)."
        ),
        kind: Kind::Other,
        runs: s.runs,
        systems: vec![system],
    }
}
