//! A file made ahead for a later segment (all zero, no header) that a crash left behind while
//! the removal of the one below it survived holds nothing: the open removes it instead of
//! refusing the log as `SegmentMissing` (found by the engine's simulation, seeds 6015584 and
//! 7029202: a batch needing two new segments made both, failed, removed them, and the crash
//! kept only the lower removal).

use timewheel_wal::storage::Storage;
use timewheel_wal::testing::{CrashOptions, FaultDisk};
use timewheel_wal::{Wal, WalOptions};

#[test]
fn an_all_zero_file_past_a_gap_is_removed_not_taken_for_a_missing_segment() {
    let disk = FaultDisk::new(5);
    let opts = WalOptions {
        segment_bytes: 16 << 10,
        record_bytes_max: 1024,
        ..WalOptions::default()
    };
    let (wal, _) = Wal::open(disk.storage(), opts.clone()).expect("opens");
    wal.append(1, b"kept").expect("durable");
    wal.abandon();
    drop(wal);
    let storage = disk.storage();
    drop(
        storage
            .create("0000000000000003.wal", opts.segment_bytes)
            .expect("create"),
    );
    storage.sync_dir().expect("sync dir");
    drop(storage);
    let disk = disk.crash(&CrashOptions::clean());
    let (wal, report) = Wal::open(disk.storage(), opts).expect("a never-started file is no gap");
    assert_eq!(report.last_lsn, 1);
    let bodies: Vec<Vec<u8>> = wal
        .iter_from(1)
        .map(|r| r.map(|r| r.body))
        .collect::<Result<_, _>>()
        .expect("reads");
    assert_eq!(bodies, [b"kept".to_vec()]);
    assert!(
        !disk
            .live_names()
            .contains(&"0000000000000003.wal".to_owned())
    );
}
