//! Read errors (defect 5): a media error while recovering or reading is `Error::Io`, never a
//! panic and never a `SIGBUS`. On the fault disk, bad sectors and a read failure policy; on
//! real files, a mapped file shrunk behind the log's back (a read through the map would be a
//! `SIGBUS` there; a `pread` is an error).

use timewheel_wal::storage::{Storage, StorageFile};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SyncFailure};
use timewheel_wal::{Error, MmapStorage, Wal, WalOptions, segment_file_name};

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: 16 << 10,
        record_bytes_max: 1024,
        ..Default::default()
    }
}

/// A log of `n` records of 200 bytes (several segments for large `n`), closed cleanly.
fn disk_with_log(seed: u64, n: usize) -> FaultDisk {
    let disk = FaultDisk::new(seed);
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    for i in 0..n {
        wal.append(1, &[i as u8; 200]).unwrap();
    }
    wal.close().unwrap();
    disk
}

#[test]
fn a_bad_sector_anywhere_fails_recovery_with_io() {
    let disk = disk_with_log(1, 150);
    let names = disk.live_names();
    let segments: Vec<&String> = names.iter().filter(|n| n.ends_with(".wal")).collect();
    assert!(segments.len() >= 3, "{names:?}");
    // The header of the first segment, a record page of a sealed one, the last segment.
    for (name, offset) in [
        (segments[0], 0),
        (segments[1], 4096),
        (segments[segments.len() - 1], 4096),
    ] {
        let crashed = disk.crash(&CrashOptions::clean());
        crashed.set_bad_sectors(name, offset, 512, true);
        match Wal::open(crashed.storage(), opts()) {
            Err(Error::Io(e)) => assert_eq!(e.raw_os_error(), Some(5), "{name}@{offset}"),
            Err(e) => panic!("{name}@{offset}: expected Io, got {e}"),
            Ok(_) => panic!("{name}@{offset}: opened over a bad sector"),
        }
        // Bad sectors are media: they stay bad across a crash.
        let again = crashed.crash(&CrashOptions::clean());
        assert!(matches!(
            Wal::open(again.storage(), opts()),
            Err(Error::Io(_))
        ));
        // Readable again, the same log opens.
        again.set_bad_sectors(name, offset, 512, false);
        let (wal, report) = Wal::open(again.storage(), opts()).unwrap();
        assert_eq!(report.last_lsn, 150);
        wal.close().unwrap();
    }
}

#[test]
fn every_read_failing_in_turn_fails_recovery_with_io() {
    // The n-th read of the open fails, for every n until an open needs fewer reads.
    let disk = disk_with_log(2, 60);
    let mut failed = 0;
    for n in 0.. {
        let crashed = disk.crash(&CrashOptions::clean());
        crashed.set_read_failure(SyncFailure::AfterN(n));
        match Wal::open(crashed.storage(), opts()) {
            Err(Error::Io(_)) => failed += 1,
            Err(e) => panic!("read {n} failing: expected Io, got {e}"),
            Ok((wal, report)) => {
                assert_eq!(report.last_lsn, 60);
                assert_eq!(crashed.stats().failed_reads, 0, "read {n} failing");
                drop(wal);
                break;
            }
        }
    }
    assert!(failed > 0);
}

#[test]
fn a_reader_over_a_bad_sector_yields_io_then_ends() {
    let disk = FaultDisk::new(3);
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    for i in 0..10u8 {
        wal.append(1, &[i; 200]).unwrap();
    }
    disk.set_bad_sectors(&segment_file_name(1), 0, 16 << 10, true);
    let mut it = wal.iter_from(1);
    assert!(matches!(it.next(), Some(Err(Error::Io(_)))));
    assert!(it.next().is_none());
    disk.set_bad_sectors(&segment_file_name(1), 0, 16 << 10, false);
    assert_eq!(wal.iter_from(1).count(), 10);
}

#[test]
fn mmap_reads_do_not_go_through_the_map() {
    // Shrinking a mapped file breaks the storage's ground rules on purpose: a read of a page
    // past the new end through the map would kill the process with SIGBUS. A pread returns an
    // error instead, which is what a media error does too.
    let dir = tempfile::tempdir().unwrap();
    let storage = MmapStorage::open_dir(dir.path()).unwrap();
    let file = storage.create("f", 8192).unwrap();
    file.write_at(5000, b"through the map").unwrap();
    let mut buf = [0u8; 15];
    file.read_at(5000, &mut buf).unwrap();
    assert_eq!(&buf, b"through the map", "pread sees what the map wrote");
    std::fs::File::options()
        .write(true)
        .open(dir.path().join("f"))
        .unwrap()
        .set_len(4096)
        .unwrap();
    let err = file.read_at(5000, &mut buf).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
}
