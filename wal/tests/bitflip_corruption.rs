//! Media damage to synced data: a bit flip in a record is repaired from its commit block's
//! mirror (and reported), a flip in a mirror alone is harmless, and damage to both copies of
//! a group that later records vouch for (or in a sealed segment) is refused as
//! `Corrupted { segment, offset }` naming the damaged record: never a panic, never a silent
//! drop.

use std::fs;
use std::path::Path;

use timewheel_wal::format::{MIRROR_ALIGN, RECORD_HEADER_BYTES, align_to, frame_bytes};
use timewheel_wal::testing::{CrashOptions, FaultDisk};
use timewheel_wal::{Error, Wal, WalOptions};

const BODY_BYTES: usize = 56;
/// Each synced append is a commit block of its own, one page.
const BLOCK: usize = 4096;

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: 8 * 4096,
        record_bytes_max: 512,
        ..Default::default()
    }
}

fn segment_path(dir: &Path, id: u64) -> std::path::PathBuf {
    dir.join(timewheel_wal::segment_file_name(id))
}

/// Offset of the `i`-th (0-based) record of a segment: one block per synced append.
fn record_offset(i: usize) -> usize {
    BLOCK + i * BLOCK
}

/// Offset of the mirror of the `i`-th record's block.
fn mirror_offset(i: usize) -> usize {
    align_to(
        (record_offset(i) + frame_bytes(BODY_BYTES)) as u64,
        MIRROR_ALIGN,
    ) as usize
}

fn write_records(dir: &Path, n: usize) {
    let (wal, _) = Wal::open_dir(dir, opts()).unwrap();
    for i in 0..n {
        wal.append(1, &[i as u8; BODY_BYTES]).unwrap();
    }
    wal.close().unwrap();
}

fn assert_corrupted<S: timewheel_wal::Storage>(
    result: Result<(Wal<S>, timewheel_wal::RecoveryReport), Error>,
    segment: u64,
    offset: usize,
) {
    match result {
        Err(Error::Corrupted {
            segment: s,
            offset: o,
            ..
        }) => {
            assert_eq!((s, o), (segment, offset as u64));
        }
        Err(e) => panic!("expected Corrupted at {segment}:{offset}, got {e}"),
        Ok((_, report)) => panic!("expected Corrupted at {segment}:{offset}, opened: {report:?}"),
    }
}

fn bodies(wal: &Wal) -> Vec<Vec<u8>> {
    wal.iter_from(1).map(|r| r.unwrap().body).collect()
}

#[test]
fn every_bit_of_a_record_is_repaired_from_its_mirror() {
    let dir = tempfile::tempdir().unwrap();
    write_records(dir.path(), 6);
    let path = segment_path(dir.path(), 1);
    let clean = fs::read(&path).unwrap();
    // A record in the middle (vouched for by later ones) and the newest one (nothing after it
    // vouches: the mirror is what tells its damage from a torn write).
    for i in [2, 5] {
        let target = record_offset(i);
        for byte in target..target + RECORD_HEADER_BYTES + BODY_BYTES {
            let mut flipped = clean.clone();
            flipped[byte] ^= 1 << (byte % 8);
            fs::write(&path, &flipped).unwrap();
            let (wal, report) = Wal::open_dir(dir.path(), opts()).unwrap();
            assert_eq!(report.repaired_groups.len(), 1, "byte {byte}: {report:?}");
            let repaired = &report.repaired_groups[0];
            assert_eq!((repaired.segment, repaired.offset), (1, target as u64));
            assert!(report.torn_tail.is_none());
            assert_eq!(
                bodies(&wal),
                (0..6u8).map(|i| vec![i; BODY_BYTES]).collect::<Vec<_>>()
            );
            drop(wal);
            // The repair was made durable: a second open finds nothing wrong.
            let (_, again) = Wal::open_dir(dir.path(), opts()).unwrap();
            assert!(again.repaired_groups.is_empty() && again.torn_tail.is_none());
        }
    }
}

#[test]
fn a_damaged_mirror_of_an_intact_group_is_harmless() {
    let dir = tempfile::tempdir().unwrap();
    write_records(dir.path(), 6);
    let path = segment_path(dir.path(), 1);
    let clean = fs::read(&path).unwrap();
    for i in [2, 5] {
        let mut flipped = clean.clone();
        flipped[mirror_offset(i) + 40] ^= 0x10;
        fs::write(&path, &flipped).unwrap();
        let (wal, report) = Wal::open_dir(dir.path(), opts()).unwrap();
        assert_eq!(report.last_lsn, 6, "{report:?}");
        assert!(report.repaired_groups.is_empty());
        assert_eq!(bodies(&wal).len(), 6);
    }
}

#[test]
fn both_copies_damaged_under_a_voucher_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    write_records(dir.path(), 6);
    let path = segment_path(dir.path(), 1);
    let mut flipped = fs::read(&path).unwrap();
    let target = record_offset(2);
    flipped[target + 30] ^= 1;
    flipped[mirror_offset(2) + 60] ^= 1;
    fs::write(&path, &flipped).unwrap();
    assert_corrupted(Wal::open_dir(dir.path(), opts()), 1, target);
    assert_eq!(
        fs::read(&path).unwrap(),
        flipped,
        "refusing modified nothing"
    );
}

#[test]
fn damage_in_a_sealed_segment_is_repaired_or_corruption() {
    let dir = tempfile::tempdir().unwrap();
    // 8-page segments hold 7 one-page blocks: 10 records roll once.
    write_records(dir.path(), 10);
    assert!(segment_path(dir.path(), 2).exists());
    let path = segment_path(dir.path(), 1);
    let clean = fs::read(&path).unwrap();
    // The last record of segment 1: repaired from its mirror.
    let last = record_offset(6);
    let mut flipped = clean.clone();
    flipped[last + 30] ^= 0x10;
    fs::write(&path, &flipped).unwrap();
    let (_, report) = Wal::open_dir(dir.path(), opts()).unwrap();
    assert_eq!(report.repaired_groups.len(), 1);
    assert_eq!(report.last_lsn, 10);
    // Both copies: corruption (the next segment proves it was durable).
    fs::write(&path, &clean).unwrap();
    let mut both = clean.clone();
    both[last + 30] ^= 0x10;
    both[mirror_offset(6) + 60] ^= 0x10;
    fs::write(&path, &both).unwrap();
    assert_corrupted(Wal::open_dir(dir.path(), opts()), 1, last);
    // A flipped header bit of a segment holding records, sealed or last: not a torn roll.
    let mut header = clean.clone();
    header[20] ^= 1;
    fs::write(&path, &header).unwrap();
    assert_corrupted(Wal::open_dir(dir.path(), opts()), 1, 0);
    fs::write(&path, &clean).unwrap();
    let current = segment_path(dir.path(), 2);
    let mut current_header = fs::read(&current).unwrap();
    current_header[40] ^= 1;
    fs::write(&current, &current_header).unwrap();
    assert_corrupted(Wal::open_dir(dir.path(), opts()), 2, 0);
}

#[test]
fn missing_middle_segment_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    write_records(dir.path(), 30);
    assert!(segment_path(dir.path(), 4).exists());
    fs::remove_file(segment_path(dir.path(), 2)).unwrap();
    assert_corrupted(Wal::open_dir(dir.path(), opts()), 2, 0);
}

#[test]
fn fault_disk_bit_flip_in_the_newest_synced_record_is_repaired() {
    let disk = FaultDisk::new(7);
    {
        let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
        for i in 0..5u8 {
            wal.append(1, &[i; BODY_BYTES]).unwrap();
        }
        wal.abandon(); // a crash: no close marker
    }
    let name = timewheel_wal::segment_file_name(1);
    let target = record_offset(4);
    disk.flip_bit(&name, (target + 24 + 5) as u64, 2);
    let crashed = disk.crash(&CrashOptions::clean());
    let (wal, report) = Wal::open(crashed.storage(), opts()).unwrap();
    assert_eq!(report.repaired_groups.len(), 1, "{report:?}");
    assert_eq!(report.last_lsn, 5, "never cut silently");
    assert_eq!(
        wal.iter_from(5).next().unwrap().unwrap().body,
        [4u8; BODY_BYTES]
    );
}
