//! A record body may hold, at the sector boundary where its group's mirror would sit if the
//! group ended before it, bytes that look like that mirror's header (type `0xF1`, and the
//! length a mirror of the group so far would have). Found by simulation seed 2033034: a
//! schedule record's job id (56) and the low byte of its due time (`0xF1`) read as a mirror
//! header at offset 4608 of the block at 4096, after a first record of 32 bytes; the iterator
//! took it for the mirror without checking it, and the replay of the open failed with
//! `Corrupted { reason: RecordReserved }` although nothing was damaged. Only a crc-valid
//! mirror ends a group (as in recovery); the records must all be read back, live, after a
//! reopen and after a power cut.

mod common;

use timewheel_wal::format::{
    DURABLE_DELTA_NONE, FIRST_BLOCK_OFFSET, FLAG_SKIPPABLE, MIRROR_ALIGN, MIRROR_PREFIX_BYTES,
    RECORD_HEADER_BYTES, RECORD_TYPE_MIRROR, align_to, frame_bytes,
};
use timewheel_wal::testing::{CrashOptions, FaultDisk, FaultStorage};
use timewheel_wal::{Wal, WalOptions};

/// The seed's segments: one block after the header page.
const SEGMENT_BYTES: u64 = 8192;
/// The second record's body, long enough to cover the first sector boundary after it starts.
const SECOND_BODY_BYTES: usize = 600;

fn opts() -> WalOptions {
    common::sync_opts(SEGMENT_BYTES)
}

fn bodies(wal: &Wal<FaultStorage>) -> Vec<Vec<u8>> {
    wal.iter_from(1)
        .map(|r| r.expect("every record reads back").body)
        .collect()
}

/// A look-alike of the header of a mirror of a group that ends after a first record with a
/// body of `first_body` bytes: what the second record's body holds at that mirror's place.
/// `well_formed` also gets every other field right (flags, reserved, LSN, no vouching), as a
/// body crafted to fool a reader could; only the crc, seeded by the segment's random salt,
/// is out of its reach.
fn lookalike(first_body: usize, well_formed: bool) -> [u8; RECORD_HEADER_BYTES] {
    let group_bytes = frame_bytes(first_body);
    let mut h = [0u8; RECORD_HEADER_BYTES];
    h[0..4].copy_from_slice(&((MIRROR_PREFIX_BYTES + group_bytes) as u32).to_le_bytes());
    h[8] = RECORD_TYPE_MIRROR;
    if well_formed {
        h[4..8].copy_from_slice(&0x1234_5678u32.to_le_bytes());
        h[9] = FLAG_SKIPPABLE;
        h[12..20].copy_from_slice(&1u64.to_le_bytes());
        h[20..24].copy_from_slice(&DURABLE_DELTA_NONE.to_le_bytes());
    } else {
        // The seed's bytes: the high half of the job id, then the due time's next bytes.
        h[9..12].copy_from_slice(&[0x7a, 0xcf, 0x2a]);
    }
    h
}

/// Appends, as one group, a record with a `first_body`-byte body and one whose body holds a
/// mirror look-alike where the first record's mirror would be; returns the two bodies.
fn append_pair(wal: &Wal<FaultStorage>, first_body: usize, well_formed: bool) -> [Vec<u8>; 2] {
    let second_at = FIRST_BLOCK_OFFSET + frame_bytes(first_body) as u64;
    let mirror_at = align_to(second_at, MIRROR_ALIGN);
    let in_body = (mirror_at - second_at) as usize - RECORD_HEADER_BYTES;
    let first = vec![0x11u8; first_body];
    let mut second = vec![0x22u8; SECOND_BODY_BYTES];
    second[in_body..in_body + RECORD_HEADER_BYTES]
        .copy_from_slice(&lookalike(first_body, well_formed));
    wal.append_batch([(1u8, &first[..]), (1u8, &second[..])])
        .unwrap();
    [first, second]
}

fn check(first_body: usize, well_formed: bool) {
    let case = format!("first body {first_body} bytes, well formed {well_formed}");
    let disk = FaultDisk::new(2033034 + first_body as u64);
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    let written = append_pair(&wal, first_body, well_formed);
    assert_eq!(bodies(&wal), written, "live: {case}");
    wal.abandon();
    drop(wal);
    // A process crash: recovery scans the block (and finds it durable), the replay reads it.
    let (wal, report) = Wal::open(disk.storage(), opts()).unwrap();
    assert_eq!(report.records, 2, "{case}: {report:?}");
    assert_eq!(bodies(&wal), written, "after a reopen: {case}");
    wal.abandon();
    drop(wal);
    // A power cut (nothing unsynced: the group was acknowledged).
    let crashed = disk.crash(&CrashOptions::default());
    let (wal, _) = Wal::open(crashed.storage(), opts()).unwrap();
    assert_eq!(bodies(&wal), written, "after a power cut: {case}");
}

#[test]
fn the_seeds_bytes_are_read_as_the_record_they_are() {
    // The seed: a first record of 8 bytes (a 32-byte frame), the look-alike at 4608.
    check(8, false);
}

#[test]
fn a_well_formed_lookalike_without_its_crc_does_not_end_the_group() {
    check(8, true);
}

#[test]
fn lookalikes_after_first_records_of_every_size_up_to_a_sector() {
    // Every first record whose second record's body covers the next sector boundary.
    for first_body in (0..=464).step_by(8) {
        for well_formed in [false, true] {
            check(first_body, well_formed);
        }
    }
}
