//! Recovery keeps the file made ahead for the next segment (all zero, header-less) instead of
//! removing it: when the last segment needs no copy (a clean close, or a crash after which
//! its unvouched bytes are found on the medium) it is the next segment's file again; when it
//! does, it is the copy's destination. A file of the wrong length, or one that no longer
//! follows the last segment, is removed as before.

mod common;

use timewheel_wal::storage::Storage;
use timewheel_wal::testing::{CrashOptions, FaultDisk, SyncFailure};
use timewheel_wal::{Error, Wal, WalOptions};

const SEGMENT_BYTES: u64 = 32768;

fn opts() -> WalOptions {
    common::sync_opts(SEGMENT_BYTES)
}

fn all_records(wal: &Wal<timewheel_wal::testing::FaultStorage>) -> Vec<Vec<u8>> {
    wal.iter_from(1).map(|r| r.unwrap().body.to_vec()).collect()
}

/// A log of one segment with three records, and a zero file of `bytes` made for segment 2
/// (what the background preparer leaves behind).
fn log_with_prepared(disk: &FaultDisk, bytes: u64, clean_close: bool) {
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    for i in 0..3u8 {
        wal.append(1, &[i; 100]).unwrap();
    }
    let made = disk
        .storage()
        .create("0000000000000002.wal", bytes)
        .unwrap();
    drop(made);
    disk.storage().sync_dir().unwrap();
    if clean_close {
        wal.close().unwrap();
    } else {
        wal.abandon();
    }
}

#[test]
fn after_a_clean_close_the_prepared_file_is_the_next_segment_again() {
    let disk = FaultDisk::new(1);
    log_with_prepared(&disk, SEGMENT_BYTES, true);
    let (wal, report) = Wal::open(disk.storage(), opts()).unwrap();
    assert!(report.removed_files.is_empty(), "{report:?}");
    assert_eq!(report.segments_copied, 0);
    assert_eq!(
        disk.live_names(),
        ["0000000000000001.wal", "0000000000000002.wal"]
    );
    // Enough to roll into it: it becomes segment 2, header and all.
    for i in 0..30u8 {
        wal.append(1, &[i; 900]).unwrap();
    }
    wal.close().unwrap();
    let (wal, report) = Wal::open(disk.storage(), opts()).unwrap();
    assert!(report.segments >= 2, "{report:?}");
    assert_eq!(all_records(&wal).len(), 33);
    drop(wal);
    // And a power cut after all that keeps every record (all were acknowledged).
    let crashed = disk.crash(&CrashOptions::default());
    let (wal, _) = Wal::open(crashed.storage(), opts()).unwrap();
    assert_eq!(all_records(&wal).len(), 33);
}

#[test]
fn after_a_process_crash_a_durable_segment_is_kept_as_it_is() {
    let disk = FaultDisk::new(2);
    log_with_prepared(&disk, SEGMENT_BYTES, false);
    let before = disk.live_file("0000000000000001.wal").unwrap();
    let (wal, report) = Wal::open(disk.storage(), opts()).unwrap();
    // Every record was acknowledged, so the medium holds what the cache shows: nothing is
    // copied, nothing rewritten, and the prepared file stays the next segment's.
    assert_eq!(report.segments_copied, 0);
    assert_eq!(report.segments_verified, 1);
    assert!(report.removed_files.is_empty(), "{report:?}");
    assert_eq!(disk.live_file("0000000000000001.wal").unwrap(), before);
    assert_eq!(
        disk.live_names(),
        ["0000000000000001.wal", "0000000000000002.wal"]
    );
    assert_eq!(all_records(&wal), [[0u8; 100], [1; 100], [2; 100]]);
    wal.append(1, b"after").unwrap();
    drop(wal);
    let crashed = disk.crash(&CrashOptions::default());
    let (wal, _) = Wal::open(crashed.storage(), opts()).unwrap();
    assert_eq!(all_records(&wal).len(), 4);
}

#[test]
fn bytes_a_failed_sync_left_only_in_the_cache_are_copied_into_the_prepared_file() {
    let disk = FaultDisk::new(4);
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    for i in 0..3u8 {
        wal.append(1, &[i; 100]).unwrap();
    }
    drop(
        disk.storage()
            .create("0000000000000002.wal", SEGMENT_BYTES)
            .unwrap(),
    );
    disk.storage().sync_dir().unwrap();
    // The fourth record's sync fails: its page is marked clean without reaching the medium,
    // and the log is poisoned. The process then ends without a power cut.
    disk.set_sync_failure(SyncFailure::Next);
    assert!(matches!(wal.append(1, &[3; 100]), Err(Error::Io(_))));
    wal.abandon();
    drop(wal);
    let (wal, report) = Wal::open(disk.storage(), opts()).unwrap();
    // Recovery sees the record in the cache, but not on the medium: the segment is copied
    // (into the prepared file, renamed over it), so that the record is durable before
    // anything vouches for it.
    assert_eq!(report.segments_copied, 1);
    assert_eq!(report.segments_verified, 0);
    assert!(report.removed_files.is_empty(), "{report:?}");
    assert_eq!(disk.live_names(), ["0000000000000001.wal"]);
    assert_eq!(all_records(&wal).len(), 4);
    wal.append(1, b"after").unwrap();
    drop(wal);
    let crashed = disk.crash(&CrashOptions::default());
    let (wal, _) = Wal::open(crashed.storage(), opts()).unwrap();
    assert_eq!(all_records(&wal).len(), 5);
}

#[test]
fn a_prepared_file_of_another_length_is_removed() {
    let disk = FaultDisk::new(3);
    log_with_prepared(&disk, 2 * SEGMENT_BYTES, true);
    let (wal, report) = Wal::open(disk.storage(), opts()).unwrap();
    assert_eq!(report.removed_files, ["0000000000000002.wal"]);
    assert_eq!(disk.live_names(), ["0000000000000001.wal"]);
    for i in 0..30u8 {
        wal.append(1, &[i; 900]).unwrap();
    }
    assert_eq!(all_records(&wal).len(), 33);
}
