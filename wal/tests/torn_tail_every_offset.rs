//! Torn tail: the last record is cut at every byte offset (the rest zero, or garbage, as a
//! torn write can leave); recovery returns exactly the records before it, reports the cut
//! with its segment and offset, and appends continue right after them.

use std::fs;
use std::path::Path;

use timewheel_wal::{Wal, WalOptions};

const SEGMENT: &str = "0000000000000001.wal";

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: 8192,
        record_bytes_max: 1024,
        ..Default::default()
    }
}

/// Writes five records, the last with a 60-byte body; returns the file and where the last
/// record starts and where its bytes end (its 4 bytes of padding are zero anyway).
fn write_log(dir: &Path) -> (Vec<u8>, usize, usize) {
    let (wal, _) = Wal::open_dir(dir, opts()).unwrap();
    for i in 0..4u8 {
        wal.append(1, &[i; 20]).unwrap();
    }
    let before = fs::read(dir.join(SEGMENT)).unwrap();
    wal.append(2, &[0x5A; 60]).unwrap();
    wal.close().unwrap();
    let after = fs::read(dir.join(SEGMENT)).unwrap();
    let start = (0..after.len()).find(|&i| before[i] != after[i]).unwrap() / 8 * 8;
    // Four records of 20 bytes: 4 * align8(24 + 20) = 192 bytes after the 64-byte header.
    assert_eq!(start, 64 + 4 * 48);
    (after, start, start + 84)
}

fn check_cut(dir: &Path, file: &[u8], last_start: usize, cut: usize, fill: u8) {
    let mut damaged = file.to_vec();
    damaged[cut..last_start + 88].fill(fill);
    fs::write(dir.join(SEGMENT), &damaged).unwrap();

    let (wal, report) = Wal::open_dir(dir, opts()).unwrap();
    assert_eq!(report.last_lsn, 4, "cut at {cut}, fill {fill:#x}");
    let bodies: Vec<_> = wal.iter_from(1).map(|r| r.unwrap().body).collect();
    assert_eq!(bodies, (0..4u8).map(|i| vec![i; 20]).collect::<Vec<_>>());
    let clean_end = cut == last_start && fill == 0;
    match &report.torn_tail {
        None => assert!(clean_end, "cut at {cut}: damage must be reported"),
        Some(t) => {
            assert!(!clean_end);
            assert_eq!(
                (t.segment, t.offset, t.expected_lsn),
                (1, last_start as u64, 5)
            );
        }
    }
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
fn torn_last_record_at_every_offset_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (file, start, end) = write_log(dir.path());
    for cut in start..end {
        check_cut(dir.path(), &file, start, cut, 0);
    }
}

#[test]
fn torn_last_record_followed_by_garbage_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (file, start, end) = write_log(dir.path());
    for cut in (start..end).step_by(3) {
        check_cut(dir.path(), &file, start, cut, 0xA5);
    }
}

#[test]
fn absolute_mode_refuses_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (mut file, start, _) = write_log(dir.path());
    file[start + 30] ^= 0xFF;
    fs::write(dir.path().join(SEGMENT), &file).unwrap();
    let absolute = WalOptions {
        recovery_mode: timewheel_wal::RecoveryMode::Absolute,
        ..opts()
    };
    let err = Wal::open_dir(dir.path(), absolute).unwrap_err();
    assert!(
        matches!(err, timewheel_wal::Error::Corrupted { segment: 1, offset, .. } if offset == start as u64),
        "{err}"
    );
    // Nothing was modified: the tolerant mode still sees (and cuts) the same damage.
    let (_, report) = Wal::open_dir(dir.path(), opts()).unwrap();
    assert_eq!(report.torn_tail.unwrap().offset, start as u64);
}
