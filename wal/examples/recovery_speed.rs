//! Recovery speed of the log on real files: the open after a crash, and an empty open.
//!
//! `cargo run --release -p timewheel-wal --example recovery_speed [RECORDS] [BATCH] [ROUNDS]`
//!
//! The crash case mirrors the demo's part 2: RECORDS (default 100,000) records of 40 bytes in
//! `Durability::Sync` batches of BATCH (default 10,000), default 64 MiB segments, then the log
//! stops the way a process crash does (`Wal::abandon`: nothing more is synced, no close
//! marker; the page cache keeps everything, as after SIGKILL). Each round opens the log
//! again (recovery copies the last segment, since no clean close ended it), then abandons it
//! again, so every round recovers the same state. An empty open is a fresh directory each
//! round. Prints the median and the minimum of `RecoveryReport::elapsed` and of the whole
//! `Wal::open` call, and records/s. The temporary directories live under `TMPDIR`.

use std::time::{Duration, Instant};

use timewheel_wal::{Wal, WalOptions};

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .map_or(default, |a| a.parse().expect("a number"))
}

fn summary(name: &str, records: u64, mut recover: Vec<Duration>, mut open: Vec<Duration>) {
    recover.sort();
    open.sort();
    let med = |v: &[Duration]| v[v.len() / 2];
    let rate = |d: Duration| records as f64 / d.as_secs_f64() / 1e6;
    println!(
        "{name}: recovery median {:.2} ms (min {:.2} ms), open median {:.2} ms (min {:.2} ms){}",
        med(&recover).as_secs_f64() * 1e3,
        recover[0].as_secs_f64() * 1e3,
        med(&open).as_secs_f64() * 1e3,
        open[0].as_secs_f64() * 1e3,
        if records > 0 {
            format!(
                "; {:.2}M records/s by recovery median, {:.2}M by open median",
                rate(med(&recover)),
                rate(med(&open))
            )
        } else {
            String::new()
        }
    );
}

fn main() {
    let records = arg(1, 100_000);
    let batch = arg(2, 10_000).max(1);
    let rounds = arg(3, 11).max(1);
    let opts = WalOptions::default();

    let dir = tempfile::tempdir().expect("a temporary directory");
    {
        let (wal, _) = Wal::open_dir(dir.path(), opts.clone()).expect("open");
        let body = [7u8; 40];
        let mut left = records;
        while left > 0 {
            let n = left.min(batch);
            wal.append_batch((0..n).map(|_| (1u8, &body[..])))
                .expect("append");
            left -= n;
        }
        std::thread::sleep(Duration::from_millis(50));
        wal.abandon();
    }
    let (mut recover, mut open) = (Vec::new(), Vec::new());
    let (mut copied, mut verified) = (0, 0);
    for _ in 0..rounds {
        let started = Instant::now();
        let (wal, report) = Wal::open_dir(dir.path(), opts.clone()).expect("reopen");
        open.push(started.elapsed());
        assert_eq!(report.records, records as u64);
        copied += report.segments_copied;
        verified += report.segments_verified;
        recover.push(report.elapsed);
        // Let the preparer start on the next segment's file, as it had in the crashed process
        // (abandon waits for it to finish), so that every open finds one.
        std::thread::sleep(Duration::from_millis(50));
        wal.abandon();
    }
    println!(
        "crash opens: {rounds}, segments copied {copied}, found durable as they were {verified}"
    );
    summary(
        &format!("crash open, {records} records"),
        records as u64,
        recover,
        open,
    );

    let (mut recover, mut open) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let started = Instant::now();
        let (wal, report) = Wal::open_dir(dir.path(), opts.clone()).expect("open");
        open.push(started.elapsed());
        recover.push(report.elapsed);
        wal.close().expect("close");
    }
    summary("empty open", 0, recover, open);
}
