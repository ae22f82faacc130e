//! Storage without powersafe overwrite: a power cut may garble whole sectors of every page
//! being written back, its unchanged (acknowledged) bytes included. Because every group commit
//! starts a fresh page, the pages of commit N are never written again, so a power cut during
//! commit N+1 can not damage commit N, whatever sectors it garbles.

use timewheel_wal::storage::{Storage, StorageFile};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SECTOR_BYTES, SimRng};
use timewheel_wal::{Durability, Wal, WalOptions, segment_file_name};

fn opts(durability: Durability) -> WalOptions {
    WalOptions {
        segment_bytes: 64 << 10,
        record_bytes_max: 1024,
        durability,
        ..Default::default()
    }
}

fn body(commit: usize, i: usize, len: usize) -> Vec<u8> {
    let mut b = format!("commit {commit} record {i} ").into_bytes();
    b.resize(len.max(b.len()), (commit * 31 + i) as u8);
    b
}

/// Commits `n` groups of 1..4 records (each acknowledged), then writes one more group
/// without syncing it (the commit in flight). Returns the disk, the bodies by LSN and the
/// last acknowledged LSN.
fn acked_then_in_flight(seed: u64, rng: &mut SimRng) -> (FaultDisk, Vec<Vec<u8>>, u64) {
    let disk = FaultDisk::new(seed);
    let (wal, _) = Wal::open(disk.storage(), opts(Durability::Sync)).unwrap();
    let mut bodies = Vec::new();
    for commit in 0..rng.between(1, 6) as usize {
        let group: Vec<Vec<u8>> = (0..rng.between(1, 4) as usize)
            .map(|i| body(commit, i, rng.below(300) as usize))
            .collect();
        wal.append_batch(group.iter().map(|b| (1u8, b.as_slice())))
            .unwrap();
        bodies.extend(group);
    }
    let acked = wal.durable_lsn();
    assert_eq!(acked, bodies.len() as u64);
    let group: Vec<Vec<u8>> = (0..rng.between(1, 12) as usize)
        .map(|i| body(99, i, rng.below(600) as usize))
        .collect();
    wal.append_batch_nowait(group.iter().map(|b| (2u8, b.as_slice())))
        .unwrap();
    bodies.extend(group);
    wal.abandon();
    (disk, bodies, acked)
}

fn check(disk: &FaultDisk, bodies: &[Vec<u8>], acked: u64, what: &str) {
    let (wal, report) = Wal::open(disk.storage(), opts(Durability::Sync))
        .unwrap_or_else(|e| panic!("{what}: the open failed: {e}"));
    assert!(
        report.last_lsn >= acked,
        "{what}: acknowledged LSN {acked} lost ({report:?})"
    );
    for r in wal.iter_from(1) {
        let r = r.unwrap();
        assert_eq!(
            r.body,
            bodies[(r.lsn - 1) as usize],
            "{what}: LSN {}",
            r.lsn
        );
    }
    // And the log goes on.
    let next = wal.append(3, b"after").unwrap();
    assert_eq!(next, report.last_lsn + 1);
}

#[test]
fn a_power_cut_during_commit_n_plus_1_never_loses_commit_n() {
    for seed in 0..400 {
        let mut rng = SimRng::new(seed);
        let (disk, bodies, acked) = acked_then_in_flight(seed, &mut rng);
        let crash = CrashOptions {
            garbled_sectors: rng.between(1, 8) as u32,
            ..CrashOptions::random(&mut rng)
        };
        let crashed = disk.crash(&crash);
        check(&crashed, &bodies, acked, &format!("seed {seed}, {crash:?}"));
    }
}

#[test]
fn every_sector_of_the_commit_in_flight_garbled_in_turn() {
    // The pages the commit in flight dirtied, every sector of them garbled whole (random
    // bytes), one at a time, with the rest of the commit kept or lost.
    for seed in 0..12 {
        let mut rng = SimRng::new(1000 + seed);
        let (disk, bodies, acked) = acked_then_in_flight(1000 + seed, &mut rng);
        let name = segment_file_name(1);
        let live = disk.live_file(&name).unwrap();
        let durable = disk
            .crash(&CrashOptions::clean())
            .durable_file(&name)
            .unwrap();
        // The pages holding bytes the commit in flight wrote.
        let pages: Vec<usize> = (0..live.len() / 4096)
            .filter(|p| live[p * 4096..(p + 1) * 4096] != durable[p * 4096..(p + 1) * 4096])
            .collect();
        assert!(!pages.is_empty());
        for keep in [CrashOptions::clean(), CrashOptions::all_unsynced()] {
            for &page in &pages {
                for sector in 0..4096 / SECTOR_BYTES {
                    let crashed = disk.crash(&keep);
                    let mut garbage = vec![0u8; SECTOR_BYTES];
                    rng.fill(&mut garbage);
                    let at = (page * 4096 + sector * SECTOR_BYTES) as u64;
                    crashed.write_raw(&name, at, &garbage, true);
                    check(
                        &crashed,
                        &bodies,
                        acked,
                        &format!("seed {seed}, sector at {at}"),
                    );
                }
            }
        }
    }
}

#[test]
fn the_pages_of_an_acknowledged_commit_are_never_written_again() {
    // The invariant itself, on the storage: after commit N is acknowledged, no later write
    // (more commits, a roll, a clean close, a reopen and its recovery) touches its pages.
    let disk = FaultDisk::new(5);
    let (wal, _) = Wal::open(disk.storage(), opts(Durability::Sync)).unwrap();
    wal.append(1, b"commit N").unwrap();
    let name = segment_file_name(1);
    let snapshot = disk.live_file(&name).unwrap();
    let used = |img: &[u8]| {
        (0..img.len() / 4096)
            .filter(|&p| img[p * 4096..(p + 1) * 4096].iter().any(|&b| b != 0))
            .collect::<Vec<_>>()
    };
    let acked_pages = used(&snapshot);
    for i in 0..200u32 {
        wal.append(1, &i.to_le_bytes()).unwrap();
    }
    wal.close().unwrap();
    let (wal, _) = Wal::open(disk.storage(), opts(Durability::Sync)).unwrap();
    wal.append(1, b"after reopen").unwrap();
    drop(wal);
    let after = disk.live_file(&name).unwrap();
    for p in acked_pages {
        assert_eq!(
            after[p * 4096..(p + 1) * 4096],
            snapshot[p * 4096..(p + 1) * 4096],
            "page {p}"
        );
    }
    // The storage trait is what the log writes through; nothing else wrote this file.
    let storage = disk.storage();
    assert!(storage.try_lock().unwrap());
    assert_eq!(storage.open(&name).unwrap().len_bytes(), 64 << 10);
}
