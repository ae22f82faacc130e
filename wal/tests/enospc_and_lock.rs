//! Typed errors at the edges: a directory already locked gives `Locked` (real files and the
//! fault disk); ENOSPC while preallocating a segment gives `NoSpace`, writes nothing, leaves no
//! half-made file, and the log keeps working once space is back.

use timewheel_wal::testing::FaultDisk;
use timewheel_wal::{Error, Wal, WalOptions};

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: 16384,
        record_bytes_max: 1024,
        ..Default::default()
    }
}

#[test]
fn second_opener_of_a_directory_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open_dir(dir.path(), opts()).unwrap();
    assert!(matches!(
        Wal::open_dir(dir.path(), opts()),
        Err(Error::Locked)
    ));
    wal.append(1, b"still mine").unwrap();
    wal.close().unwrap();
    // Closing releases the lock.
    let (wal, report) = Wal::open_dir(dir.path(), opts()).unwrap();
    assert_eq!(report.last_lsn, 1);
    drop(wal);
}

#[test]
fn second_opener_of_a_fault_disk_is_locked_out() {
    let disk = FaultDisk::new(1);
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    assert!(matches!(
        Wal::open(disk.storage(), opts()),
        Err(Error::Locked)
    ));
    drop(wal);
    assert!(Wal::open(disk.storage(), opts()).is_ok());
}

#[test]
fn enospc_on_first_segment_is_typed_and_leaves_nothing() {
    let disk = FaultDisk::new(2);
    disk.set_enospc(true);
    let err = Wal::open(disk.storage(), opts()).unwrap_err();
    assert!(matches!(err, Error::NoSpace { segment: 1, .. }), "{err}");
    assert!(disk.live_names().is_empty(), "{:?}", disk.live_names());
}

#[test]
fn enospc_at_roll_writes_nothing_and_recovers_when_space_returns() {
    let disk = FaultDisk::new(3);
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    // 16 KiB segments: each synced append is a commit block of one page, from offset 4096;
    // two leave one page, too small for a block of two 1000-byte records and their mirror.
    let body = [7u8; 1000];
    // Full before the log could prepare segment 2 ahead of need: the roll must make it.
    disk.set_enospc(true);
    for _ in 0..2 {
        wal.append(1, &body).unwrap();
    }
    let batch = [(1u8, &body[..]), (2, &body[..])];
    let err = wal.append_batch(batch).unwrap_err();
    assert!(matches!(err, Error::NoSpace { segment: 2, .. }), "{err}");
    assert_eq!(
        wal.last_lsn(),
        2,
        "nothing of the failed appends was written"
    );
    let names = disk.live_names();
    assert_eq!(
        names,
        [timewheel_wal::segment_file_name(1)],
        "no half-made file"
    );
    // A record that still fits needs no new segment.
    assert_eq!(wal.append(3, b"small").unwrap(), 3);
    disk.set_enospc(false);
    assert_eq!(wal.append_batch(batch).unwrap(), 5);
    drop(wal);
    let (wal, report) = Wal::open(disk.storage(), opts()).unwrap();
    assert_eq!(report.last_lsn, 5);
    let types: Vec<u8> = wal.iter_from(1).map(|r| r.unwrap().record_type).collect();
    assert_eq!(types, [1, 1, 3, 1, 2]);
}

#[test]
fn enospc_for_a_second_roll_writes_nothing_and_removes_the_first() {
    let disk = FaultDisk::new(4);
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    let body = [7u8; 1000];
    for _ in 0..2 {
        wal.append(1, &body).unwrap();
    }
    // Room for one more segment file: 16 records of 1000 bytes need segments 2 and 3.
    disk.set_capacity_bytes(Some(2 * 16384));
    let batch: Vec<(u8, &[u8])> = (0..16).map(|_| (1u8, &body[..])).collect();
    let err = wal.append_batch(batch.iter().copied()).unwrap_err();
    assert!(matches!(err, Error::NoSpace { segment: 3, .. }), "{err}");
    assert_eq!(wal.last_lsn(), 2, "nothing of the failed batch was written");
    assert_eq!(
        disk.live_names(),
        [timewheel_wal::segment_file_name(1)],
        "the file made for segment 2 is removed again"
    );
    disk.set_capacity_bytes(None);
    assert_eq!(wal.append_batch(batch.iter().copied()).unwrap(), 18);
    drop(wal);
    let (wal, report) = Wal::open(disk.storage(), opts()).unwrap();
    assert_eq!(report.last_lsn, 18);
    assert_eq!(wal.iter_from(1).count(), 18);
}
