//! A failed sync poisons the log (fsyncgate): the caller whose sync failed gets the I/O error,
//! every other waiter and every later append or sync gets `Poisoned`, `durable_lsn` never moves
//! again, and nothing written after the failure is ever acknowledged, even though the disk's
//! next sync would "succeed". After a crash every acknowledged record is still there.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use timewheel_wal::storage::{Storage, StorageFile};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SyncFailure};
use timewheel_wal::{Durability, Error, Wal, WalOptions};

fn opts(durability: Durability) -> WalOptions {
    WalOptions {
        segment_bytes: 32 << 10,
        record_bytes_max: 1024,
        durability,
        ..Default::default()
    }
}

#[test]
fn failed_sync_fails_the_waiter_and_everything_after() {
    let disk = FaultDisk::new(1);
    let (wal, _) = Wal::open(disk.storage(), opts(Durability::Sync)).unwrap();
    for i in 0..5u8 {
        wal.append(1, &[i; 30]).unwrap();
    }
    disk.set_sync_failure(SyncFailure::Next);
    let err = wal.append(1, b"lost").unwrap_err();
    assert!(
        matches!(err, Error::Io(_)),
        "the failed sync's own caller sees the cause: {err}"
    );
    // The disk would now sync fine: the log must not believe a retry.
    for _ in 0..3 {
        assert!(matches!(wal.append(1, b"later"), Err(Error::Poisoned)));
        assert!(matches!(wal.sync(), Err(Error::Poisoned)));
        assert!(matches!(
            wal.append_batch([(1, &b"x"[..])]),
            Err(Error::Poisoned)
        ));
        assert!(matches!(wal.append_nowait(1, b"x"), Err(Error::Poisoned)));
    }
    assert!(matches!(wal.wait_durable(6), Err(Error::Poisoned)));
    assert_eq!(wal.durable_lsn(), 5);
    assert_eq!(
        wal.last_lsn(),
        6,
        "the record whose sync failed was written, never acked"
    );
    assert!(
        wal.wait_durable(5).is_ok(),
        "what was durable before the failure stays so"
    );
    assert!(matches!(wal.close(), Err(Error::Poisoned)));

    let disk = disk.crash(&CrashOptions::clean());
    let (wal, report) = Wal::open(disk.storage(), opts(Durability::Sync)).unwrap();
    assert_eq!(report.last_lsn, 5);
    assert_eq!(wal.append(1, b"next life").unwrap(), 6);
}

#[test]
fn concurrent_waiters_all_fail_and_nothing_after_is_acked() {
    let disk = FaultDisk::new(2);
    let (wal, _) = Wal::open(disk.storage(), opts(Durability::Sync)).unwrap();
    let wal = Arc::new(wal);
    disk.set_sync_failure(SyncFailure::AfterN(20));
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let wal = Arc::clone(&wal);
            thread::spawn(move || {
                let mut acked = Vec::new();
                let mut failed_at = None;
                for i in 0..200u32 {
                    match wal.append(1, format!("{t}:{i}").as_bytes()) {
                        Ok(lsn) => {
                            assert!(
                                failed_at.is_none(),
                                "an append succeeded after this thread saw a failure"
                            );
                            acked.push(lsn);
                        }
                        Err(Error::Io(_) | Error::Poisoned) => failed_at = failed_at.or(Some(i)),
                        Err(e) => panic!("unexpected {e}"),
                    }
                }
                (acked, failed_at.is_some())
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(
        results.iter().all(|(_, failed)| *failed),
        "every thread sees the poison"
    );
    let durable = wal.durable_lsn();
    let acked: Vec<u64> = results.into_iter().flat_map(|(a, _)| a).collect();
    assert!(
        acked.iter().all(|&lsn| lsn <= durable),
        "nothing above durable_lsn {durable} was acked"
    );
    assert!(matches!(wal.sync(), Err(Error::Poisoned)));
    assert_eq!(
        wal.durable_lsn(),
        durable,
        "durable_lsn never moves after the failure"
    );

    let crashed = disk.crash(&CrashOptions::default());
    drop(wal);
    let (wal, report) = Wal::open(crashed.storage(), opts(Durability::Sync)).unwrap();
    assert!(report.last_lsn >= durable);
    let present: std::collections::HashSet<u64> =
        wal.iter_from(1).map(|r| r.unwrap().lsn).collect();
    assert!(acked.iter().all(|lsn| present.contains(lsn)));
}

#[test]
fn failed_sync_at_a_roll_poisons() {
    let disk = FaultDisk::new(3);
    let (wal, _) = Wal::open(disk.storage(), opts(Durability::Buffered)).unwrap();
    // One open group: 13 frames of 1024 bytes and their mirror fit in a 32 KiB segment.
    for _ in 0..13 {
        wal.append(1, &[1; 1000]).unwrap();
    }
    // The directory sync that makes segment 2's file durable succeeds, the next sync fails.
    disk.set_sync_failure(SyncFailure::AfterN(1));
    // The 14th does not fit: the roll must sync segment 1 first, and that fails.
    assert!(matches!(wal.append(1, &[2; 1000]), Err(Error::Io(_))));
    assert!(matches!(wal.append(1, b"small"), Err(Error::Poisoned)));
    assert_eq!(wal.durable_lsn(), 0);
    // The file made for segment 2 stays, all zero and header-less, until recovery takes it
    // (as the destination of segment 1's copy) or removes it: segment 2 never started.
    assert_eq!(
        disk.live_names(),
        ["0000000000000001.wal", "0000000000000002.wal"]
    );
    assert!(
        disk.live_file("0000000000000002.wal")
            .unwrap()
            .iter()
            .all(|&b| b == 0)
    );
    drop(wal);
    let (wal, report) = Wal::open(disk.storage(), opts(Durability::Sync)).unwrap();
    assert_eq!(report.segments, 1);
    assert_eq!(report.segments_copied, 1);
    // Segment 1's copy went into the file made for segment 2, renamed over segment 1.
    assert!(report.removed_files.is_empty());
    assert_eq!(disk.live_names(), ["0000000000000001.wal"]);
    drop(wal);
}

#[test]
fn periodic_sync_failure_poisons_later_appends() {
    let disk = FaultDisk::new(4);
    let (wal, _) = Wal::open(
        disk.storage(),
        opts(Durability::Periodic(Duration::from_millis(1))),
    )
    .unwrap();
    disk.set_sync_failure(SyncFailure::Always);
    let lsn = wal.append(1, b"returns at once").unwrap();
    // The background sync fails, or this wait's own sync does: either way, never Ok.
    assert!(wal.wait_durable(lsn).is_err());
    assert!(matches!(wal.append(1, b"after"), Err(Error::Poisoned)));
    assert_eq!(wal.durable_lsn(), 0);
}

#[test]
fn failed_sync_during_recovery_fails_the_open() {
    let disk = FaultDisk::new(5);
    {
        let (wal, _) = Wal::open(disk.storage(), opts(Durability::Buffered)).unwrap();
        wal.append(1, b"unsynced").unwrap();
        let crashed = disk.crash(&CrashOptions::all_unsynced());
        crashed.set_sync_failure(SyncFailure::Always);
        assert!(matches!(
            Wal::open(crashed.storage(), opts(Durability::Sync)),
            Err(Error::Io(_))
        ));
        crashed.set_sync_failure(SyncFailure::Never);
        let (wal, report) = Wal::open(crashed.storage(), opts(Durability::Sync)).unwrap();
        assert_eq!(report.last_lsn, 1);
        drop(wal);
    }
}

/// A roll whose header sync fails leaves the new segment's header in the page cache only
/// (a failed sync marks the pages clean without persisting them). A reopen without a crash
/// sees it there; it must not trust it: the next power cut would leave a segment with a
/// zero header and acknowledged records after it, which is not a torn roll but looks like
/// corruption. Found by the engine simulation (seed 0).
#[test]
fn a_header_whose_sync_failed_is_made_durable_by_the_next_open() {
    let disk = FaultDisk::new(6);
    // One block per segment: every commit after the first rolls.
    let o = WalOptions {
        segment_bytes: 8192,
        ..opts(Durability::Sync)
    };
    let (wal, _) = Wal::open(disk.storage(), o.clone()).unwrap();
    assert_eq!(wal.append(1, b"one").unwrap(), 1);
    // The directory sync of segment 2's new file succeeds; the roll to segment 2 then fails
    // at its header's sync (segment 1 is durable already: nothing else to sync).
    disk.set_sync_failure(SyncFailure::AfterN(1));
    assert!(matches!(wal.append(1, b"never acked"), Err(Error::Io(_))));
    drop(wal); // poisoned: no close marker
    assert!(
        disk.live_names()
            .contains(&"0000000000000002.wal".to_owned())
    );

    let (wal, _) = Wal::open(disk.storage(), o.clone()).unwrap();
    let lsn = wal.append(1, b"two").unwrap();
    assert_eq!(wal.durable_lsn(), lsn);
    wal.abandon();
    drop(wal);

    let crashed = disk.crash(&CrashOptions::clean());
    let (wal, report) = Wal::open(crashed.storage(), o).expect("power cuts only");
    assert_eq!(report.last_lsn, lsn);
    let bodies: Vec<Vec<u8>> = wal.iter_from(1).map(|r| r.unwrap().body).collect();
    assert_eq!(bodies, [b"one".to_vec(), b"two".to_vec()]);
}

/// Fuzz finding (wal_open, with the power cut after recovery): a failed sync leaves a record in
/// the cache only, and a file that looks like a torn roll follows the segment. Recovery
/// removed that file but had treated the segment before it as sealed, so it neither copied it
/// nor checked it on the medium; the appends after the open then vouched for a record the
/// next power cut took away (`Corrupted`: segment 2 starts at LSN 2, expected 1).
#[test]
fn the_segment_before_a_torn_roll_is_made_durable_like_a_last_one() {
    let disk = FaultDisk::new(7);
    let opts = || WalOptions {
        segment_bytes: 8192,
        record_bytes_max: 1000,
        ..WalOptions::default()
    };
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    let lsn = wal.append_nowait(1, &[1; 50]).unwrap();
    disk.set_sync_failure(SyncFailure::Next);
    assert!(wal.wait_durable(lsn).is_err());
    wal.abandon();
    drop(wal);
    // A header that fails its crc with only zeros after it: what a torn roll leaves.
    let file = disk.storage().create("0000000000000002.wal", 8192).unwrap();
    file.write_at(0, &[0xFF, 0]).unwrap();
    file.sync_range(0, 4096).unwrap();
    drop(file);
    disk.storage().sync_dir().unwrap();

    let (wal, report) = Wal::open(disk.storage(), opts()).unwrap();
    assert_eq!(report.removed_files, ["0000000000000002.wal"]);
    assert_eq!(report.segments_copied, 1, "{report:?}");
    assert_eq!(report.last_lsn, 1);
    wal.append(1, &[2; 900]).unwrap();
    wal.append(1, &[3; 900]).unwrap();
    drop(wal);
    let crashed = disk.crash(&CrashOptions::default());
    let (wal, _) = Wal::open(crashed.storage(), opts()).unwrap();
    assert_eq!(wal.iter_from(1).count(), 3);
}
