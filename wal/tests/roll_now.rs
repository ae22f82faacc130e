//! `Wal::roll_now`: a segment sealed before it is full. Its records are durable and listed as
//! sealed at once; a log with nothing in its segment does not roll; a full disk refuses the
//! roll with `NoSpace` and changes nothing; and recovery reads the short segment and those
//! after it as one log, after a clean close or a power cut.

use timewheel_wal::testing::{CrashOptions, FaultDisk};
use timewheel_wal::{Durability, Error, Wal, WalOptions};

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: 16384,
        record_bytes_max: 1024,
        durability: Durability::Buffered,
        ..Default::default()
    }
}

fn bodies(wal: &Wal<timewheel_wal::testing::FaultStorage>) -> Vec<Vec<u8>> {
    wal.iter_from(0).map(|r| r.unwrap().body.to_vec()).collect()
}

#[test]
fn a_rolled_segment_is_sealed_and_durable_and_an_empty_one_is_not_rolled() {
    let disk = FaultDisk::new(11);
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    assert!(!wal.roll_now().unwrap(), "nothing to seal in a fresh log");
    for i in 0..3u8 {
        wal.append_nowait(1, &[i; 10]).unwrap();
    }
    assert_eq!(wal.durable_lsn(), 0, "buffered: nothing synced yet");
    assert!(wal.roll_now().unwrap());
    assert_eq!(
        wal.durable_lsn(),
        3,
        "the roll made the sealed records durable"
    );
    let segments = wal.segments();
    assert_eq!(segments.len(), 2);
    assert!(segments[0].sealed && !segments[1].sealed);
    assert_eq!((segments[0].first_lsn, segments[0].last_lsn), (1, 3));
    assert_eq!(segments[1].first_lsn, 4);
    assert!(
        segments[0].used_bytes < segments[0].file_bytes,
        "rolled before it was full"
    );
    assert!(
        !wal.roll_now().unwrap(),
        "the new segment holds nothing yet"
    );
    assert_eq!(wal.segments().len(), 2);
    wal.append(2, b"after").unwrap();
    assert!(wal.roll_now().unwrap());
    assert_eq!(wal.segments().len(), 3);
    // The sealed ones can go: the log reads on from the third.
    assert_eq!(wal.delete_segments_below(4).unwrap(), 1);
    wal.append(3, b"last").unwrap();
    wal.close().unwrap();

    let (wal, report) = Wal::open(disk.storage(), opts()).unwrap();
    assert_eq!(report.last_lsn, 5);
    assert_eq!(wal.first_lsn(), 4);
    assert_eq!(bodies(&wal), [b"after".to_vec(), b"last".to_vec()]);
}

#[test]
fn a_power_cut_after_rolls_keeps_every_rolled_record() {
    let disk = FaultDisk::new(12);
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    let mut written = Vec::new();
    for round in 0..5u8 {
        for i in 0..=round {
            let body = vec![round ^ i; 20 + usize::from(i)];
            wal.append_nowait(1, &body).unwrap();
            written.push(body);
        }
        assert!(wal.roll_now().unwrap());
    }
    // Not synced, and lost to the cut.
    wal.append_nowait(1, b"unsynced").unwrap();
    let disk = disk.crash(&CrashOptions::clean());
    drop(wal);
    let (wal, report) = Wal::open(disk.storage(), opts()).unwrap();
    assert_eq!(report.last_lsn, written.len() as u64);
    assert_eq!(bodies(&wal), written);
    assert_eq!(wal.segments().len(), 6);
}

#[test]
fn a_roll_the_disk_has_no_room_for_changes_nothing() {
    let disk = FaultDisk::new(13);
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    // Full before the log could prepare segment 2 ahead of need: the roll must make it.
    disk.set_enospc(true);
    wal.append(1, b"one").unwrap();
    let err = wal.roll_now().unwrap_err();
    assert!(matches!(err, Error::NoSpace { segment: 2, .. }), "{err}");
    assert_eq!(wal.segments().len(), 1);
    assert_eq!(
        disk.live_names(),
        [timewheel_wal::segment_file_name(1)],
        "no half-made file"
    );
    assert!(!wal.is_poisoned());
    assert_eq!(wal.append(1, b"two").unwrap(), 2, "appends go on");
    disk.set_enospc(false);
    assert!(wal.roll_now().unwrap());
    assert_eq!(wal.segments()[1].first_lsn, 3);
    wal.close().unwrap();
    assert!(matches!(
        wal_closed_roll(&disk),
        Error::Locked | Error::Closed
    ));
}

/// A roll on a closed log is refused.
fn wal_closed_roll(disk: &FaultDisk) -> Error {
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    wal.shutdown().unwrap();
    wal.roll_now().unwrap_err()
}
