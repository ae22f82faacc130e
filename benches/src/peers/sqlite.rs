//! SQLite as a job table: WAL journal, `synchronous=FULL` (durable like the engine), a jobs
//! table with an index on `(state, due_ms)`.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::PeerResult;
use crate::engine::{now_ms, now_us};

/// Opens a fresh database in `dir` with the jobs table.
pub fn open(dir: &Path) -> PeerResult<rusqlite::Connection> {
    std::fs::create_dir_all(dir)?;
    let c = rusqlite::Connection::open(dir.join("jobs.db"))?;
    c.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
         CREATE TABLE jobs(id INTEGER PRIMARY KEY, due_ms INTEGER NOT NULL, state INTEGER NOT NULL, payload BLOB);
         CREATE INDEX jobs_due ON jobs(state, due_ms);",
    )?;
    Ok(c)
}

/// Inserts `jobs` rows due `due_ms(k)`, one transaction per `batch`.
fn insert(
    c: &mut rusqlite::Connection,
    jobs: u64,
    batch: u64,
    due_ms: impl Fn(u64) -> u64,
) -> PeerResult<()> {
    let mut i = 0;
    while i < jobs {
        let tx = c.transaction()?;
        {
            let mut st =
                tx.prepare_cached("INSERT INTO jobs(due_ms, state, payload) VALUES (?1, 0, ?2)")?;
            for k in i..(i + batch).min(jobs) {
                st.execute(rusqlite::params![due_ms(k) as i64, &[7u8; 16][..]])?;
            }
        }
        tx.commit()?;
        i += batch;
    }
    Ok(())
}

/// Durable inserts per second, one transaction per batch.
pub fn batch(dir: &Path, jobs: u64, batch: u64) -> PeerResult<f64> {
    let mut c = open(dir)?;
    let t = Instant::now();
    insert(&mut c, jobs, batch, |k| k)?;
    Ok(jobs as f64 / t.elapsed().as_secs_f64())
}

/// Durable inserts per second, one row per transaction, from `callers` threads sharing one
/// connection (SQLite has one writer at a time; a mutex is its best case, with no busy-wait).
pub fn single(dir: &Path, callers: usize, secs: f64) -> PeerResult<f64> {
    let c = Arc::new(Mutex::new(open(dir)?));
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..callers)
        .map(|_| {
            let (c, stop, count) = (c.clone(), stop.clone(), count.clone());
            std::thread::spawn(move || -> Result<(), String> {
                while !stop.load(Ordering::Relaxed) {
                    let c = c.lock().expect("no caller panicked");
                    let mut st = c
                        .prepare_cached(
                            "INSERT INTO jobs(due_ms, state, payload) VALUES (?1, 0, ?2)",
                        )
                        .map_err(|e| e.to_string())?;
                    st.execute(rusqlite::params![1i64, &[7u8; 16][..]])
                        .map_err(|e| e.to_string())?;
                    count.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().map_err(|_| "caller panicked")??;
    }
    Ok(count.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64())
}

/// Fire lateness of a table polled every millisecond: `jobs` rows due evenly over
/// `window_ms` from `lead_ms` ahead; a poller selects the due rows (up to 1 000 a query) and marks
/// them claimed in one durable transaction. Lateness in µs, on the poller's clock once the
/// claim is committed, minus the due time.
pub fn poll_lateness(
    dir: &Path,
    jobs: u64,
    window_ms: u64,
    lead_ms: u64,
) -> PeerResult<Histogram<u64>> {
    let mut c = open(dir)?;
    let start = now_ms() + lead_ms;
    insert(&mut c, jobs, 10_000, |k| start + k * window_ms / jobs)?;
    let mut hist = Histogram::<u64>::new(3)?;
    let mut claimed = 0;
    let mut due = Vec::new();
    while claimed < jobs {
        due.clear();
        {
            let mut st = c.prepare_cached(
                "SELECT id, due_ms FROM jobs WHERE state = 0 AND due_ms <= ?1 ORDER BY due_ms LIMIT 1000",
            )?;
            let rows = st.query_map([now_ms() as i64], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })?;
            for row in rows {
                due.push(row?);
            }
        }
        if due.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let tx = c.transaction()?;
        {
            let mut st = tx.prepare_cached("UPDATE jobs SET state = 1 WHERE id = ?1")?;
            for (id, _) in &due {
                st.execute([id])?;
            }
        }
        tx.commit()?;
        let at_us = now_us();
        for &(_, due_ms) in &due {
            hist.record(at_us.saturating_sub(due_ms as u64 * 1000))?;
        }
        claimed += due.len() as u64;
    }
    Ok(hist)
}
