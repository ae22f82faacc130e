//! How long an open takes, on copies of one data directory: the log alone (`Wal::open` and a
//! read of every record) against the whole engine (`Engine::open`: the log, replay through
//! the transition function, the wheel, missed jobs queued).
//!
//! `cargo run --release --example open_speed -- DIR [ROUNDS] [--make N] [--engine-only]`
//!
//! `--engine-only` skips the log-alone open (for a profile of the engine's open).
//! With `--make N`, DIR (which must not exist) is first made as the benchmark harness's
//! `recovery` workload makes it: N schedule records with 16-byte payloads, due over the hour
//! after the next, in batches of 100,000, the engine abandoned as in a crash.
//! Otherwise DIR is any data directory, for example one left by a crash:
//! `timewheel demo-crash-child --dir /tmp/crashed --jobs 100000 --due-ms 1` killed with
//! `kill -9` once it prints `scheduled`. Each round copies DIR (`cp -a`) under `TMPDIR` and
//! opens the copy, so DIR itself is never changed; the copies are removed.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn copy_of(src: &Path, name: &str) -> std::path::PathBuf {
    let dst = std::env::temp_dir().join(format!("open-speed-{}-{name}", std::process::id()));
    std::fs::remove_dir_all(&dst).ok();
    let ok = Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(&dst)
        .status()
        .expect("cp");
    assert!(ok.success(), "cp -a {} failed", src.display());
    dst
}

/// N schedules in a new directory, the engine abandoned as in a crash.
fn make(dir: &Path, jobs: u64) {
    assert!(!dir.exists(), "--make: {} exists", dir.display());
    let engine =
        timewheel::Engine::open(timewheel::Config::new(dir).compact_interval_ms(0)).expect("open");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64;
    let due = now + 3_600_000;
    let mut i = 0;
    while i < jobs {
        let m = 100_000.min(jobs - i);
        engine
            .schedule_batch(
                (i..i + m).map(|k| timewheel::JobSpec::at(due + k % 3_600_000).payload([3u8; 16])),
            )
            .expect("schedule");
        i += m;
    }
    engine.abandon();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: open_speed DIR [ROUNDS] [--make N] [--engine-only]";
    let (mut positional, mut make_jobs, mut engine_only) = (Vec::new(), None, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--engine-only" {
            engine_only = true;
        } else if a == "--make" {
            let n = it.next().expect(usage);
            make_jobs = Some(n.parse::<u64>().expect("--make N: N is a number"));
        } else {
            positional.push(a.clone());
        }
    }
    let src = positional.first().expect(usage).clone();
    let rounds: usize = positional
        .get(1)
        .map_or(5, |a| a.parse().expect("ROUNDS is a number"));
    if let Some(n) = make_jobs {
        make(Path::new(&src), n);
    }
    for round in 0..rounds {
        if engine_only {
            let dst = copy_of(Path::new(&src), "engine");
            let t = Instant::now();
            let engine = timewheel::Engine::open(timewheel::Config::new(&dst)).expect("open");
            println!("engine open {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
            engine.abandon();
            std::fs::remove_dir_all(&dst).ok();
            continue;
        }
        let dst = copy_of(Path::new(&src), "wal");
        let t = Instant::now();
        let (wal, _) =
            timewheel_wal::Wal::open_dir(&dst, timewheel_wal::WalOptions::default()).expect("open");
        let mut records = 0u64;
        let mut it = wal.iter_from(wal.first_lsn());
        while let Some(record) = it.next_ref() {
            record.expect("read");
            records += 1;
        }
        drop(it);
        let wal_ms = t.elapsed().as_secs_f64() * 1e3;
        wal.abandon();
        std::fs::remove_dir_all(&dst).ok();

        let dst = copy_of(Path::new(&src), "engine");
        let t = Instant::now();
        let engine = timewheel::Engine::open(timewheel::Config::new(&dst)).expect("open");
        let engine_ms = t.elapsed().as_secs_f64() * 1e3;
        let recovery = engine.recovery().clone();
        engine.abandon();
        std::fs::remove_dir_all(&dst).ok();
        println!(
            "round {round}: log open + read {records} records {wal_ms:.1} ms ({:.2}M/s); \
             engine open {engine_ms:.1} ms ({:.2}M/s, {} missed)",
            records as f64 / wal_ms / 1e3,
            recovery.records as f64 / engine_ms / 1e3,
            recovery.missed
        );
    }
}
