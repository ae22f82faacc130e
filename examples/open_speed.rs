//! How long an open takes, on copies of one data directory: the log alone (`Wal::open` and a
//! read of every record) against the whole engine (`Engine::open`: the log, replay through
//! the transition function, the wheel, missed jobs queued).
//!
//! `cargo run --release --example open_speed -- DIR [ROUNDS]`
//!
//! DIR is any data directory, for example one left by a crash:
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

fn main() {
    let src = std::env::args()
        .nth(1)
        .expect("usage: open_speed DIR [ROUNDS]");
    let rounds: usize = std::env::args()
        .nth(2)
        .map_or(5, |a| a.parse().expect("ROUNDS is a number"));
    for round in 0..rounds {
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
