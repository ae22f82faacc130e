//! An open with a follower (`Wal::open_following`, the engine's replay) holds the log's
//! background work on real files (the preparer, which makes the next segment's file, and the
//! zero checker) until the first write or `Wal::release_background`, so that the follower,
//! still applying what it was handed, has the CPU. Held, the work must never be waited for:
//! a write that needs it (a seal waiting for the checker) starts it first.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use timewheel_wal::storage::mmap::MmapStorage;
use timewheel_wal::{Durability, Follow, RecordRef, Wal, WalOptions};

/// A follower that takes nothing.
struct Nothing;

impl Follow for Nothing {
    fn expect(&mut self, _records: u64) {}
    fn record(&mut self, _record: RecordRef<'_>) {}
}

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: 1 << 20,
        write_reach_bytes: 64 << 10,
        record_bytes_max: 1000,
        durability: Durability::Sync,
        ..Default::default()
    }
}

/// The file the preparer makes for segment 2 of a fresh log.
fn spare(dir: &Path) -> bool {
    dir.join("0000000000000002.wal").exists()
}

/// Whether `cond` holds within 30 s (a shared machine may be slow; nothing here is timed).
fn within_30s(cond: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

#[test]
fn a_fresh_log_opened_with_a_follower_makes_no_spare_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let storage = MmapStorage::open_dir(dir.path()).unwrap();
    let (wal, _) = Wal::open_following(storage, opts(), &mut Nothing).unwrap();
    // Without the hold the preparer makes it at once (the next test).
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !spare(dir.path()),
        "the preparer made the next segment's file while the follower held it"
    );
    wal.release_background();
    assert!(
        within_30s(|| spare(dir.path())),
        "released, the preparer never made the next segment's file"
    );
    wal.close().unwrap();
}

#[test]
fn a_fresh_log_opened_without_a_follower_makes_its_spare_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open_dir(dir.path(), opts()).unwrap();
    assert!(
        within_30s(|| spare(dir.path())),
        "the preparer never made the next segment's file"
    );
    wal.close().unwrap();
}

#[test]
fn the_first_write_after_an_open_with_a_follower_starts_the_work_it_waits_for() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (wal, _) = Wal::open_dir(dir.path(), opts()).unwrap();
        for i in 0..20u8 {
            wal.append(1, &[i; 500]).unwrap();
        }
        // A crash: the open below leaves the zero checker bytes to prove past the tail, and
        // the first seal names a bound past what recovery proved.
        wal.abandon();
    }
    let storage = MmapStorage::open_dir(dir.path()).unwrap();
    let (wal, _) = Wal::open_following(storage, opts(), &mut Nothing).unwrap();
    let (tx, rx) = mpsc::channel();
    let writer = std::thread::spawn(move || {
        let appended = wal.append(1, b"after the open");
        tx.send(appended.is_ok()).unwrap();
        wal
    });
    let appended = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the append hung: its seal waited for a checker that was held");
    assert!(appended);
    let wal = writer.join().unwrap();
    assert!(
        wal.iter_from(1)
            .any(|r| r.unwrap().body == b"after the open")
    );
    wal.close().unwrap();
}
