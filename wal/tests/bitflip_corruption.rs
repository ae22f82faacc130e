//! Bit flips in synced records that later valid records vouch for are refused as
//! `Corrupted { segment, offset }` naming the damaged record: never a panic, never a silent
//! drop. Damage anywhere in a sealed segment (one followed by another) is refused too.

use std::fs;
use std::path::Path;

use timewheel_wal::format::{SEGMENT_HEADER_BYTES, frame_bytes};
use timewheel_wal::testing::{CrashOptions, FaultDisk};
use timewheel_wal::{Error, Wal, WalOptions};

const BODY_BYTES: usize = 56;

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: 4096,
        record_bytes_max: 512,
        ..Default::default()
    }
}

fn segment_path(dir: &Path, id: u64) -> std::path::PathBuf {
    dir.join(timewheel_wal::segment_file_name(id))
}

/// Offset of the `i`-th (0-based) record of a segment when all bodies are `BODY_BYTES` long.
fn record_offset(i: usize) -> usize {
    SEGMENT_HEADER_BYTES + i * frame_bytes(BODY_BYTES)
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

#[test]
fn every_bit_of_a_vouched_record_is_protected() {
    let dir = tempfile::tempdir().unwrap();
    write_records(dir.path(), 6);
    let path = segment_path(dir.path(), 1);
    let clean = fs::read(&path).unwrap();
    let target = record_offset(2);
    for byte in target..target + 24 + BODY_BYTES {
        for bit in [0u8, 3, 7] {
            let mut flipped = clean.clone();
            flipped[byte] ^= 1 << bit;
            fs::write(&path, &flipped).unwrap();
            assert_corrupted(Wal::open_dir(dir.path(), opts()), 1, target);
            // Refusing modified nothing.
            assert_eq!(fs::read(&path).unwrap(), flipped);
        }
    }
}

#[test]
fn damage_in_a_sealed_segment_is_corruption_even_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    // 4096-byte segments hold (4096 - 64) / 80 = 50 records of 56 bytes (and 32 bytes of zero
    // fill): 100 records roll once.
    write_records(dir.path(), 100);
    assert!(segment_path(dir.path(), 2).exists());
    let path = segment_path(dir.path(), 1);
    let clean = fs::read(&path).unwrap();
    // The last record of segment 1: nothing later in that segment vouches for it, but the
    // existence of segment 2 proves it was durable.
    let last = record_offset(49);
    let mut flipped = clean.clone();
    flipped[last + 30] ^= 0x10;
    fs::write(&path, &flipped).unwrap();
    assert_corrupted(Wal::open_dir(dir.path(), opts()), 1, last);
    // Garbage after the records of a sealed segment.
    let mut garbage = clean.clone();
    garbage[4090] = 0xFF;
    fs::write(&path, &garbage).unwrap();
    assert_corrupted(Wal::open_dir(dir.path(), opts()), 1, record_offset(50));
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
    write_records(dir.path(), 200);
    assert!(segment_path(dir.path(), 4).exists());
    fs::remove_file(segment_path(dir.path(), 2)).unwrap();
    assert_corrupted(Wal::open_dir(dir.path(), opts()), 2, 0);
}

#[test]
fn fault_disk_bit_flip_in_synced_record() {
    let disk = FaultDisk::new(7);
    {
        let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
        for i in 0..10u8 {
            wal.append(1, &[i; BODY_BYTES]).unwrap();
        }
    }
    let name = timewheel_wal::segment_file_name(1);
    let target = record_offset(4);
    disk.flip_bit(&name, (target + 24 + 5) as u64, 2);
    let crashed = disk.crash(&CrashOptions::clean());
    assert_corrupted(Wal::open(crashed.storage(), opts()), 1, target);
}
