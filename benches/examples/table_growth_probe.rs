//! What the job table's growth costs the engine's other callers: one thread schedules `JOBS`
//! jobs (16-byte payloads, due in an hour) in batches of 10,000 while another calls `tenant_stats`, which
//! takes the state lock and nothing else, every 100 µs and times each call on its own clock.
//!
//! `cargo run --release -p timewheel-benches --example table_growth_probe -- [JOBS] [ROUNDS]`
//! (default 2,000,000 jobs, 2 rounds, each on a fresh directory) prints the slowest call, the
//! slowest batch, and every call over 5 ms with the jobs scheduled when it started. Then, with
//! every job scheduled, it lists 20 pages (`Engine::jobs`, the 100 jobs due first: one pass
//! over the table each) while the calls go on, and prints the time of a page.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use timewheel::{Clock, Config, Durability, Engine, JobSpec};

const BATCH: u64 = 10_000;
/// Pages listed once every job is scheduled.
const PAGES: usize = 20;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let jobs: u64 = args.first().map_or(2_000_000, |a| a.parse().expect("JOBS"));
    let rounds: usize = args.get(1).map_or(2, |a| a.parse().expect("ROUNDS"));
    for round in 1..=rounds {
        let dir = std::env::temp_dir().join(format!(
            "timewheel-table-growth-probe-{}-{round}",
            std::process::id()
        ));
        let config = Config::new(&dir).durability(Durability::Buffered);
        let engine = Arc::new(Engine::open(config).expect("open"));
        let due = timewheel::SystemClock.now_ms() + 3_600_000;
        let scheduled = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let prober = {
            let (engine, scheduled, done) = (engine.clone(), scheduled.clone(), done.clone());
            std::thread::spawn(move || {
                let mut slowest = Duration::ZERO;
                let mut stalls = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    let at = scheduled.load(Ordering::Relaxed);
                    let t = Instant::now();
                    std::hint::black_box(engine.tenant_stats());
                    let took = t.elapsed();
                    slowest = slowest.max(took);
                    if took > Duration::from_millis(5) {
                        stalls.push((at, took));
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
                (slowest, stalls)
            })
        };
        let mut slowest_batch = Duration::ZERO;
        let start = Instant::now();
        let mut i = 0;
        while i < jobs {
            let n = BATCH.min(jobs - i);
            let t = Instant::now();
            engine
                .schedule_batch((0..n).map(|k| JobSpec::at(due + k % 1000).payload([7u8; 16])))
                .expect("schedule");
            slowest_batch = slowest_batch.max(t.elapsed());
            i += n;
            scheduled.store(i, Ordering::Relaxed);
        }
        let rate = jobs as f64 / start.elapsed().as_secs_f64();
        // Then a listing: pages of the 100 jobs due first, each one pass over the table.
        scheduled.store(u64::MAX, Ordering::Relaxed);
        let t = Instant::now();
        for _ in 0..PAGES {
            let page = engine
                .jobs(&timewheel::JobQuery::all().limit(100))
                .expect("page");
            std::hint::black_box(page);
        }
        let page_ms = t.elapsed().as_secs_f64() * 1e3 / PAGES as f64;
        done.store(true, Ordering::Relaxed);
        let (slowest, stalls) = prober.join().expect("prober");
        println!(
            "round {round}: {jobs} jobs at {rate:.0}/s; slowest call {:.2} ms, slowest batch \
             {:.2} ms; a page of the listing {page_ms:.1} ms",
            slowest.as_secs_f64() * 1e3,
            slowest_batch.as_secs_f64() * 1e3
        );
        for (at, took) in stalls {
            let when = if at == u64::MAX {
                "while listing".to_owned()
            } else {
                format!("at {at} jobs scheduled")
            };
            println!("  call {when}: {:.1} ms", took.as_secs_f64() * 1e3);
        }
        drop(engine);
        std::fs::remove_dir_all(&dir).ok();
    }
}
