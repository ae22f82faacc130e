//! Recovery keeps the file made ahead for the next segment (all zero, header-less) instead of
//! removing it: after a clean close it is the next segment's file again, after a crash it is
//! the destination of the last segment's copy. A file of the wrong length, or one that no
//! longer follows the last segment, is removed as before.

use timewheel_wal::storage::Storage;
use timewheel_wal::testing::{CrashOptions, FaultDisk};
use timewheel_wal::{Durability, Wal, WalOptions};

const SEGMENT_BYTES: u64 = 32768;

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: SEGMENT_BYTES,
        record_bytes_max: 1000,
        durability: Durability::Sync,
        ..Default::default()
    }
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
fn after_a_crash_the_prepared_file_takes_the_copy() {
    let disk = FaultDisk::new(2);
    log_with_prepared(&disk, SEGMENT_BYTES, false);
    let (wal, report) = Wal::open(disk.storage(), opts()).unwrap();
    assert_eq!(report.segments_copied, 1);
    assert!(report.removed_files.is_empty(), "{report:?}");
    assert_eq!(disk.live_names(), ["0000000000000001.wal"]);
    assert_eq!(all_records(&wal), [[0u8; 100], [1; 100], [2; 100]]);
    wal.append(1, b"after").unwrap();
    drop(wal);
    let crashed = disk.crash(&CrashOptions::default());
    let (wal, _) = Wal::open(crashed.storage(), opts()).unwrap();
    assert_eq!(all_records(&wal).len(), 4);
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
