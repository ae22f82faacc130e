//! Torn tail: the newest commit block is torn at every byte offset (the rest of the block
//! zero, or garbage, as a torn write can leave, its mirror included); recovery returns exactly
//! the records before it, reports the cut with its segment and offset, and appends continue
//! after them. When the mirror survived the tear, the block is repaired instead.

use std::fs;
use std::path::Path;

use timewheel_wal::{Wal, WalOptions};

const SEGMENT: &str = "0000000000000001.wal";
const BLOCK: usize = 4096;

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: 32 << 10,
        record_bytes_max: 1024,
        ..Default::default()
    }
}

/// Writes five records, each synced (so each is a block of one page), the last with a
/// 60-byte body; returns the file and where the last block starts.
fn write_log(dir: &Path) -> (Vec<u8>, usize) {
    let (wal, _) = Wal::open_dir(dir, opts()).unwrap();
    for i in 0..4u8 {
        wal.append(1, &[i; 20]).unwrap();
    }
    let before = fs::read(dir.join(SEGMENT)).unwrap();
    wal.append(2, &[0x5A; 60]).unwrap();
    wal.close().unwrap();
    let after = fs::read(dir.join(SEGMENT)).unwrap();
    let start = (0..after.len()).find(|&i| before[i] != after[i]).unwrap();
    assert_eq!(start, 5 * BLOCK, "blocks from 4096, one page each");
    (after, start)
}

fn check_cut(dir: &Path, file: &[u8], last_start: usize, cut: usize, fill: u8) {
    let mut damaged = file.to_vec();
    // The tear reaches the end of the block: the record and its mirror.
    damaged[cut..last_start + BLOCK].fill(fill);
    fs::write(dir.join(SEGMENT), &damaged).unwrap();

    let (wal, report) = Wal::open_dir(dir, opts()).unwrap();
    assert_eq!(report.last_lsn, 4, "cut at {cut}, fill {fill:#x}");
    assert!(report.repaired_groups.is_empty());
    let bodies: Vec<_> = wal.iter_from(1).map(|r| r.unwrap().body).collect();
    assert_eq!(bodies, (0..4u8).map(|i| vec![i; 20]).collect::<Vec<_>>());
    // Even a block torn to all zeros is reported: the close marker after it is not zero.
    let t = report.torn_tail.expect("damage must be reported");
    assert_eq!(
        (t.segment, t.offset, t.expected_lsn),
        (1, last_start as u64, 5),
        "cut at {cut}"
    );
    assert_eq!(wal.append(3, b"next").unwrap(), 5);
    wal.close().unwrap();
    let (wal, report) = Wal::open_dir(dir, opts()).unwrap();
    assert!(report.torn_tail.is_none());
    let last = wal.iter_from(5).next().unwrap().unwrap();
    assert_eq!(
        (last.lsn, last.record_type, last.body.as_slice()),
        (5, 3, &b"next"[..])
    );
    wal.close().unwrap();
}

#[test]
fn torn_last_block_at_every_offset_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (file, start) = write_log(dir.path());
    // The record's bytes end at start + 84 (then zero padding).
    for cut in start..start + 84 {
        check_cut(dir.path(), &file, start, cut, 0);
    }
}

#[test]
fn torn_last_block_followed_by_garbage_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (file, start) = write_log(dir.path());
    for cut in (start..start + 88).step_by(3) {
        check_cut(dir.path(), &file, start, cut, 0xA5);
    }
}

#[test]
fn a_torn_record_whose_mirror_landed_is_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let (file, start) = write_log(dir.path());
    for cut in start..start + 84 {
        let mut damaged = file.clone();
        damaged[cut..start + 88].fill(0);
        fs::write(dir.path().join(SEGMENT), &damaged).unwrap();
        let (wal, report) = Wal::open_dir(dir.path(), opts()).unwrap();
        assert_eq!(report.last_lsn, 5, "cut at {cut}");
        assert_eq!(report.repaired_groups.len(), 1, "cut at {cut}");
        assert_eq!(wal.iter_from(5).next().unwrap().unwrap().body, [0x5A; 60]);
    }
}

#[test]
fn absolute_mode_refuses_a_torn_tail_and_a_repair() {
    let dir = tempfile::tempdir().unwrap();
    let (mut file, start) = write_log(dir.path());
    file[start + 30] ^= 0xFF;
    fs::write(dir.path().join(SEGMENT), &file).unwrap();
    let absolute = WalOptions {
        recovery_mode: timewheel_wal::RecoveryMode::Absolute,
        ..opts()
    };
    let err = Wal::open_dir(dir.path(), absolute.clone()).unwrap_err();
    assert!(
        matches!(err, timewheel_wal::Error::Corrupted { segment: 1, offset, .. } if offset == start as u64),
        "{err}"
    );
    // Nothing was modified: the tolerant mode still sees (and repairs) the same damage.
    let (wal, report) = Wal::open_dir(dir.path(), opts()).unwrap();
    assert_eq!(report.repaired_groups[0].damage_offset, start as u64);
    drop(wal);
    // A torn block (mirror too) is refused as well.
    let mut torn = fs::read(dir.path().join(SEGMENT)).unwrap();
    torn[start + 30..start + BLOCK].fill(0);
    fs::write(dir.path().join(SEGMENT), &torn).unwrap();
    let err = Wal::open_dir(dir.path(), absolute).unwrap_err();
    assert!(
        matches!(err, timewheel_wal::Error::Corrupted { .. }),
        "{err}"
    );
}
