//! Two group-commit syncs in flight (`WalOptions::syncs_in_flight`): a record written while a
//! sync is in flight is synced at once, beside it, rather than after it; nothing is
//! acknowledged before every sync up to it has ended; a failure beside a sync in flight
//! acknowledges nothing after it; and every acknowledged record survives a crash. With
//! `syncs_in_flight = 1` the second caller waits for the first sync instead.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use timewheel_wal::testing::{CrashOptions, FaultDisk, SyncFailure};
use timewheel_wal::{Durability, Error, Wal, WalOptions};

/// A bound on waits that must end (a hung test fails instead of hanging), not a timing claim.
const BOUND: Duration = Duration::from_secs(60);

fn opts(syncs_in_flight: usize) -> WalOptions {
    WalOptions {
        segment_bytes: 64 << 10,
        record_bytes_max: 1024,
        durability: Durability::Sync,
        syncs_in_flight,
        ..Default::default()
    }
}

/// Opens a log on `disk` with one record acknowledged (the open's own directory work done),
/// and holds every sync from then on.
fn held_log(
    disk: &FaultDisk,
    syncs_in_flight: usize,
) -> Arc<Wal<timewheel_wal::testing::FaultStorage>> {
    let (wal, _) = Wal::open(disk.storage(), opts(syncs_in_flight)).unwrap();
    assert_eq!(wal.append(1, b"before").unwrap(), 1);
    disk.hold_syncs(true);
    Arc::new(wal)
}

fn append_in_thread(
    wal: &Arc<Wal<timewheel_wal::testing::FaultStorage>>,
    body: &'static [u8],
) -> thread::JoinHandle<Result<u64, Error>> {
    let wal = Arc::clone(wal);
    thread::spawn(move || wal.append(1, body))
}

/// Waits until the log has written `lsn` (its caller is then past the append, in the wait).
fn wait_written(wal: &Wal<timewheel_wal::testing::FaultStorage>, lsn: u64) {
    let started = std::time::Instant::now();
    while wal.last_lsn() < lsn {
        assert!(started.elapsed() < BOUND, "LSN {lsn} was never written");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_record_written_during_a_sync_is_synced_beside_it() {
    let disk = FaultDisk::new(7);
    let wal = held_log(&disk, 2);
    let first = append_in_thread(&wal, b"first");
    assert_eq!(
        disk.wait_for_held_syncs(1, BOUND),
        1,
        "the first sync started"
    );
    let second = append_in_thread(&wal, b"second");
    assert_eq!(
        disk.wait_for_held_syncs(2, BOUND),
        2,
        "the second record's sync started while the first was in flight"
    );
    assert_eq!(
        wal.durable_lsn(),
        1,
        "nothing new is durable while both are held"
    );
    disk.hold_syncs(false);
    let (a, b) = (
        first.join().unwrap().unwrap(),
        second.join().unwrap().unwrap(),
    );
    assert_eq!((a.min(b), a.max(b)), (2, 3));
    assert_eq!(wal.durable_lsn(), 3);

    // Both are durable: a crash that loses everything unsynced keeps them.
    let crashed = disk.crash(&CrashOptions::all_unsynced());
    drop(wal);
    let (wal, _) = Wal::open(crashed.storage(), opts(2)).unwrap();
    let bodies: Vec<Vec<u8>> = wal.iter_from(1).map(|r| r.unwrap().body.to_vec()).collect();
    assert_eq!(bodies.len(), 3);
    assert!(bodies.contains(&b"first".to_vec()) && bodies.contains(&b"second".to_vec()));
}

#[test]
fn with_one_sync_in_flight_the_second_waits_for_the_first() {
    let disk = FaultDisk::new(8);
    let wal = held_log(&disk, 1);
    let first = append_in_thread(&wal, b"first");
    assert_eq!(disk.wait_for_held_syncs(1, BOUND), 1);
    let second = append_in_thread(&wal, b"second");
    wait_written(&wal, 3);
    // Its caller waits on the group commit, not at the disk: a second sync never starts. (A
    // wrong implementation would reach the gate within this time; a right one never does.)
    assert_eq!(disk.wait_for_held_syncs(2, Duration::from_millis(200)), 1);
    disk.hold_syncs(false);
    first.join().unwrap().unwrap();
    second.join().unwrap().unwrap();
    assert_eq!(wal.durable_lsn(), 3);
}

/// One of the two syncs in flight fails. Whichever it is, the second record is never
/// acknowledged (its own sync failed, or the one before it did), the first only if its own
/// sync succeeded before the failure, nothing after the failure is, and every acknowledged
/// record survives a crash.
#[test]
fn a_failed_sync_beside_another_acknowledges_nothing_after_it() {
    for seed in 0..8 {
        let disk = FaultDisk::new(100 + seed);
        let wal = held_log(&disk, 2);
        let first = append_in_thread(&wal, b"first");
        assert_eq!(disk.wait_for_held_syncs(1, BOUND), 1);
        let second = append_in_thread(&wal, b"second");
        assert_eq!(disk.wait_for_held_syncs(2, BOUND), 2);
        disk.set_sync_failure(SyncFailure::Next);
        disk.hold_syncs(false);
        // The first caller's record is LSN 2 (its sync was in flight before the second
        // caller appended), the second's LSN 3.
        let (early, late) = (first.join().unwrap(), second.join().unwrap());
        assert!(
            late.is_err(),
            "seed {seed}: the later record was acknowledged"
        );
        if let Ok(lsn) = early {
            assert_eq!(lsn, 2);
        }
        let durable = wal.durable_lsn();
        assert!(durable <= 2, "seed {seed}: durable {durable}");
        assert!(matches!(wal.append(1, b"after"), Err(Error::Poisoned)));
        assert_eq!(
            wal.durable_lsn(),
            durable,
            "durable never moves after the failure"
        );

        let crashed = disk.crash(&CrashOptions::all_unsynced());
        drop(wal);
        let (wal, _) = Wal::open(crashed.storage(), opts(2)).unwrap();
        assert!(
            wal.last_lsn() >= durable,
            "seed {seed}: an acknowledged record was lost"
        );
    }
}
