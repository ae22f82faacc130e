//! The journal alone under the 64-async-tasks workload's shape, to tell the disk's part from
//! the engine's and the runtime's: CALLERS logical callers, each with one record of BYTES
//! bytes outstanding, served by two threads (as a 2-worker runtime would serve tasks), and one
//! durability thread that waits for the last record written, again and again (as the async
//! API's does). A caller whose record is durable appends its next at once: no engine call, no
//! waker, no task switch, so what is left is the log's append, its group commit and the sync.
//!
//! `cargo run --release -p timewheel-benches --example wal_closed_loop -- [CALLERS] [SECS]
//! [BYTES]` (default 64 callers, 4 s, 70-byte records: a schedule record with a 16-byte
//! payload) prints records/s, records per sync and the sync's own time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use timewheel_wal::{Wal, WalOptions};

/// What the durability thread signals when it made more durable.
#[derive(Default)]
struct Durable {
    lock: Mutex<()>,
    changed: Condvar,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let callers: usize = args.first().map_or(64, |a| a.parse().expect("CALLERS"));
    let secs: f64 = args.get(1).map_or(4.0, |a| a.parse().expect("SECS"));
    let bytes: usize = args.get(2).map_or(70, |a| a.parse().expect("BYTES"));
    let gather: Option<(u64, u64)> = args.get(3).map(|a| {
        let (r, us) = a.split_once(':').expect("GATHER: RECORDS:MICROSECONDS");
        (
            r.parse().expect("RECORDS"),
            us.parse().expect("MICROSECONDS"),
        )
    });
    let dir = std::env::temp_dir().join(format!("wal_closed_loop.{}", std::process::id()));
    let (wal, _) = Wal::open_dir(&dir, WalOptions::default()).expect("open the log");
    let wal = Arc::new(wal);
    let durable = Arc::new(Durable::default());
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let body = vec![5u8; bytes];

    let workers: Vec<_> = (0..2)
        .map(|w| {
            let (wal, durable, stop, done, body) = (
                wal.clone(),
                durable.clone(),
                stop.clone(),
                done.clone(),
                body.clone(),
            );
            let mine = callers / 2 + usize::from(w < callers % 2);
            std::thread::spawn(move || {
                let append = || wal.append_nowait(1, &body).expect("append");
                let mut awaited: Vec<u64> = (0..mine).map(|_| append()).collect();
                while !stop.load(Ordering::Relaxed) {
                    let through = wal.durable_lsn();
                    let mut served = 0;
                    for lsn in awaited.iter_mut().filter(|lsn| **lsn <= through) {
                        *lsn = append();
                        served += 1;
                    }
                    if served > 0 {
                        done.fetch_add(served, Ordering::Relaxed);
                        continue;
                    }
                    let guard = durable.lock.lock().expect("not poisoned");
                    if wal.durable_lsn() == through {
                        let _ = durable
                            .changed
                            .wait_timeout(guard, Duration::from_millis(5))
                            .expect("not poisoned");
                    }
                }
            })
        })
        .collect();

    let syncer = {
        let (wal, durable, stop) = (wal.clone(), durable.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut last = wal.last_lsn();
                if let Some((records, us)) = gather {
                    let since = Instant::now();
                    while last - wal.durable_lsn() < records
                        && since.elapsed() < Duration::from_micros(us)
                    {
                        std::hint::spin_loop();
                        last = wal.last_lsn();
                    }
                }
                if last > wal.durable_lsn() {
                    wal.wait_durable(last).expect("sync");
                    let _guard = durable.lock.lock().expect("not poisoned");
                    durable.changed.notify_all();
                } else {
                    std::thread::yield_now();
                }
            }
        })
    };

    let t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (records, elapsed, stats) = (
        done.load(Ordering::Relaxed),
        t.elapsed().as_secs_f64(),
        wal.stats(),
    );
    stop.store(true, Ordering::Relaxed);
    durable.changed.notify_all();
    for w in workers {
        w.join().expect("a caller thread");
    }
    syncer.join().expect("the durability thread");
    let syncs = stats.syncs.max(1) as f64;
    println!(
        "{callers} callers: {:.0} records/s, {:.1} records per sync, {:.0} B of frames per sync, \
         {:.0} µs per sync, {:.0} µs per round",
        records as f64 / elapsed,
        stats.records as f64 / syncs,
        stats.bytes as f64 / syncs,
        stats.sync_seconds_total * 1e6 / syncs,
        elapsed * 1e6 / syncs
    );
    drop(wal);
    std::fs::remove_dir_all(&dir).expect("remove the log directory");
}
