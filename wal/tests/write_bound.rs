//! The write bound (format version 3, docs/wal-format.md "Write bound"): every header and
//! mirror names an offset at and after which the log has written nothing, so that recovery
//! proves zeros only that far instead of to the end of each file.
//!
//! - The writer's side, the property recovery relies on: at any moment, every byte the log
//!   has written (the live image) lies below the highest bound named by the *durable* image,
//!   through random mixes of synced appends, large unsynced batches and rolls.
//! - The reader's side: an open reads the used part of the last segment and one reach past it,
//!   not the whole file; bytes past the bound are never looked at, bytes before it are.
//! - A larger reach at open copies the last segment once (its header names the new bound); a
//!   version 2 segment (no bound) is read, its zero checks running to the end of the file.

use timewheel_wal::format::{
    FIRST_BLOCK_OFFSET, MIRROR_ALIGN, RECORD_HEADER_BYTES, RECORD_TYPE_MIRROR,
    SEGMENT_HEADER_BYTES, check_record_crc, crc_seed, decode_header, decode_mirror_prefix,
    decode_record_header, encode_header,
};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SimRng};
use timewheel_wal::{Wal, WalOptions};

const SEGMENT: &str = "0000000000000001.wal";

/// The highest write bound that `image` (a whole segment file) names: its header's, and that
/// of every crc-valid mirror at a sector boundary. `None` if it has no valid header.
fn named_bound(image: &[u8]) -> Option<u64> {
    let header = decode_header(image[..SEGMENT_HEADER_BYTES].try_into().unwrap()).ok()?;
    let mut bound = header.write_bound;
    let mut at = FIRST_BLOCK_OFFSET as usize;
    while at + RECORD_HEADER_BYTES <= image.len() {
        let h = decode_record_header(&image[at..]);
        let end = at as u64 + h.frame_bytes();
        if h.record_type == RECORD_TYPE_MIRROR
            && end <= image.len() as u64
            && check_record_crc(
                &h,
                crc_seed(header.salt, at as u64),
                &image[at..end as usize],
            )
            .is_ok()
            && let Some(prefix) =
                decode_mirror_prefix(&image[at + RECORD_HEADER_BYTES..end as usize])
        {
            bound = bound.max(prefix.write_bound);
        }
        at += MIRROR_ALIGN as usize;
    }
    Some(bound.min(image.len() as u64))
}

/// Offset just past the last non-zero byte of `image` (0 if all zero).
fn written_end(image: &[u8]) -> u64 {
    image
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i as u64 + 1)
}

/// Checks the writer's promise on every segment file of `disk`; returns, per file, the
/// durable bound and where the written bytes end.
fn check_promise(disk: &FaultDisk, context: &str) -> Vec<(u64, u64)> {
    let mut seen = Vec::new();
    for name in disk.live_names() {
        if !name.ends_with(".wal") {
            continue;
        }
        let live = disk.live_file(&name).expect("listed");
        let written = written_end(&live);
        let durable = disk.durable_file(&name).unwrap_or_default();
        let bound = if durable.len() == live.len() {
            named_bound(&durable)
        } else {
            None
        };
        match bound {
            Some(bound) => {
                assert!(
                    written <= bound,
                    "{context}: {name} holds bytes up to {written}, past its durable bound {bound}"
                );
                seen.push((bound, written));
            }
            // A file made ahead of need (or a header not yet durable): nothing in it yet.
            None => assert!(
                written == 0,
                "{context}: {name} has no durable header but holds bytes up to {written}"
            ),
        }
    }
    seen
}

#[test]
fn the_log_never_writes_past_the_bound_its_durable_blocks_name() {
    let mut raised_past_the_header = false;
    let mut unused_tail_left = false;
    let mut waits = 0u64;
    for seed in 0..12u64 {
        let disk = FaultDisk::new(seed);
        let mut rng = SimRng::new(seed ^ 0x5eed);
        let opts = WalOptions {
            segment_bytes: 512 << 10,
            record_bytes_max: 8 << 10,
            // Groups capped at 4 KiB, the reach raised to one whole block (20 KiB).
            write_reach_bytes: 4096,
            ..WalOptions::default()
        };
        let reach = opts.write_reach();
        let (wal, _) = Wal::open(disk.storage(), opts).expect("opens");
        for step in 0..30 {
            let syncs_before = disk.stats().file_syncs;
            match rng.below(4) {
                0 => {
                    let body = vec![7u8; 1 + rng.below(3000) as usize];
                    wal.append(1, &body).expect("durable append");
                }
                1 | 2 => {
                    // An unsynced batch, up to several reaches of frames.
                    let n = 1 + rng.below(40) as usize;
                    let bodies: Vec<Vec<u8>> = (0..n)
                        .map(|i| vec![(i % 250) as u8 + 1; 1 + rng.below(4000) as usize])
                        .collect();
                    wal.append_batch_nowait(bodies.iter().map(|b| (1u8, b.as_slice())))
                        .expect("buffered batch");
                }
                _ => {
                    wal.sync().expect("sync");
                }
            }
            waits += disk.stats().file_syncs - syncs_before;
            for (bound, written) in check_promise(&disk, &format!("seed {seed} step {step}")) {
                raised_past_the_header |= bound > FIRST_BLOCK_OFFSET + reach;
                unused_tail_left |= written > 0 && bound < 512 << 10;
            }
        }
        wal.close().expect("closes");
        check_promise(&disk, &format!("seed {seed} after close"));
    }
    assert!(raised_past_the_header, "blocks raised the bound");
    assert!(unused_tail_left, "some bound stopped short of a file's end");
    assert!(waits > 0, "syncs happened");
}

/// A log of `records` synced 100-byte records in one segment of `segment_bytes`, left by a
/// process crash (everything written survives).
fn crashed_log(segment_bytes: u64, records: u32, opts: &WalOptions) -> FaultDisk {
    let disk = FaultDisk::new(u64::from(records));
    let opts = WalOptions {
        segment_bytes,
        ..opts.clone()
    };
    let (wal, _) = Wal::open(disk.storage(), opts).expect("opens");
    for i in 0..records {
        wal.append(1, &[i as u8; 100]).expect("durable");
    }
    wal.abandon();
    drop(wal);
    disk.crash(&CrashOptions::all_unsynced())
}

fn bodies(wal: &Wal<timewheel_wal::testing::FaultStorage>) -> usize {
    wal.iter_from(1)
        .map(|r| r.expect("reads"))
        .filter(|r| r.body.len() == 100)
        .count()
}

#[test]
fn an_open_reads_the_used_part_and_one_reach_not_the_whole_file() {
    let opts = WalOptions::default();
    let disk = crashed_log(64 << 20, 300, &opts);
    let before = disk.stats().bytes_read;
    let (wal, report) =
        Wal::open(disk.storage(), WalOptions::default()).expect("reopens after a crash");
    let read = disk.stats().bytes_read - before;
    assert_eq!(report.last_lsn, 300);
    assert_eq!(bodies(&wal), 300);
    // 300 blocks of one page (read in a scan window of 4 MiB), the newest ones again from the
    // medium, and one reach (8 MiB) of zeros: about 12.3 MiB, where reading to the end of the
    // file was more than 64 MiB.
    assert!(
        read < 16 << 20,
        "the open read {read} bytes of a 64 MiB segment"
    );
}

#[test]
fn bytes_past_the_bound_are_not_read_and_bytes_before_it_are_checked() {
    let opts = WalOptions::default();
    let reach = opts.write_reach();
    let segment_bytes = 32 << 20;
    // 3 synced records: blocks at 4096, 8192, 12288; the last names 16384 + reach.
    let bound = 16384 + reach;
    for (garbage_at, found) in [(bound + 4096, false), (bound - 4096, true), (20480, true)] {
        let disk = crashed_log(segment_bytes, 3, &opts);
        disk.write_raw(SEGMENT, garbage_at, b"not zero", true);
        let (wal, report) = Wal::open(disk.storage(), opts.clone()).expect("opens");
        assert_eq!(
            bodies(&wal),
            3,
            "garbage at {garbage_at}: every record kept"
        );
        assert_eq!(
            report.torn_tail.is_some(),
            found,
            "garbage at {garbage_at} (bound {bound}) found: {:?}",
            report.torn_tail
        );
    }
}

#[test]
fn a_larger_reach_at_open_copies_the_last_segment_once() {
    let small = WalOptions {
        segment_bytes: 32 << 20,
        write_reach_bytes: 4096,
        ..WalOptions::default()
    };
    let large = WalOptions {
        write_reach_bytes: 16 << 20,
        ..small.clone()
    };
    let disk = FaultDisk::new(9);
    let (wal, _) = Wal::open(disk.storage(), small).expect("opens");
    for i in 0..10u8 {
        wal.append(1, &[i; 100]).expect("durable");
    }
    wal.close().expect("closes");
    let (wal, report) = Wal::open(disk.storage(), large.clone()).expect("reopens");
    assert_eq!(report.segments_copied, 1, "the bound is raised by a copy");
    let header = decode_header(
        disk.durable_file(SEGMENT).unwrap()[..SEGMENT_HEADER_BYTES]
            .try_into()
            .unwrap(),
    )
    .unwrap();
    // Ten blocks of one page from 4096, then the next block at 45056.
    assert_eq!(header.write_bound, 45056 + (16 << 20));
    for i in 10..20u8 {
        wal.append(1, &[i; 100])
            .expect("durable past the old bound's reach");
    }
    assert_eq!(bodies(&wal), 20);
    wal.close().expect("closes");
    let (wal, report) = Wal::open(disk.storage(), large).expect("reopens");
    assert_eq!(report.segments_copied, 0, "once only");
    assert_eq!(bodies(&wal), 20);
    check_promise(&disk, "after the copy");
}

#[test]
fn a_version_2_segment_is_read_and_checked_to_its_end() {
    let opts = WalOptions {
        segment_bytes: 32 << 20,
        ..WalOptions::default()
    };
    for (garbage, found) in [(false, false), (true, true)] {
        let disk = crashed_log(32 << 20, 3, &opts);
        let image = disk.durable_file(SEGMENT).unwrap();
        // Rewrite the header as version 2 wrote it: no bound (the field zero).
        let mut header = encode_header(
            &decode_header(image[..SEGMENT_HEADER_BYTES].try_into().unwrap()).unwrap(),
        );
        header[8..10].copy_from_slice(&2u16.to_le_bytes());
        header[48..52].fill(0);
        let crc = crc32fast::hash(&header[..60]);
        header[60..].copy_from_slice(&crc.to_le_bytes());
        disk.write_raw(SEGMENT, 0, &header, true);
        // Its mirrors name bounds (version 3 wrote them); the header's absence of one wins.
        if garbage {
            disk.write_raw(SEGMENT, (32 << 20) - 4096, b"not zero", true);
        }
        let (wal, report) = Wal::open(disk.storage(), opts.clone()).expect("opens");
        assert_eq!(bodies(&wal), 3);
        assert_eq!(report.torn_tail.is_some(), found, "{:?}", report.torn_tail);
    }
}

/// Several threads appending synced and unsynced batches to real files, two syncs in flight,
/// with the smallest reach: the writers wait for syncs to raise the bound all the time, beside
/// rolls, and every record is there after a reopen.
#[test]
fn concurrent_writers_with_a_small_reach_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let opts = WalOptions {
        segment_bytes: 256 << 10,
        record_bytes_max: 1024,
        write_reach_bytes: 4096,
        syncs_in_flight: 2,
        ..WalOptions::default()
    };
    let (wal, _) = Wal::open_dir(dir.path(), opts.clone()).unwrap();
    let threads = 4u8;
    let batches = 60;
    std::thread::scope(|s| {
        for t in 0..threads {
            let wal = &wal;
            s.spawn(move || {
                for b in 0..batches {
                    let bodies: Vec<Vec<u8>> = (0..20).map(|i| vec![t + 1; 100 + i * 20]).collect();
                    let records = bodies.iter().map(|body| (1u8, body.as_slice()));
                    if b % 3 == 0 {
                        wal.append_batch_nowait(records).unwrap();
                    } else {
                        wal.append_batch(records).unwrap();
                    }
                }
            });
        }
    });
    let last = wal.last_lsn();
    wal.close().unwrap();
    let (wal, report) = Wal::open_dir(dir.path(), opts).unwrap();
    assert_eq!(report.last_lsn, last);
    let mut per_thread = vec![0u64; usize::from(threads)];
    for record in wal.iter_from(1) {
        let body = record.unwrap().body;
        per_thread[usize::from(body[0] - 1)] += 1;
    }
    assert_eq!(per_thread, vec![batches * 20; usize::from(threads)]);
    assert!(report.segments > 3, "the log rolled: {}", report.segments);
}

/// Options whose write bound stays far short of a segment's end: 64 KiB segments, the
/// smallest reach (about 10 KiB with records of at most 3,000 bytes).
fn short_bound_options() -> WalOptions {
    WalOptions {
        segment_bytes: 64 << 10,
        record_bytes_max: 3000,
        write_reach_bytes: 4096,
        ..WalOptions::default()
    }
}

/// Opens `disk`, appends until the log has rolled twice, crashes; then the next open must
/// accept the log and hold every record. Records are synced one by one (a block of one page
/// each) until one page is left in the segment, then a record needs two: the roll leaves the
/// last page unused, under the segment's final bound.
fn append_past_stray_bytes_and_reopen(disk: &FaultDisk, context: &str) {
    let opts = short_bound_options();
    let (wal, report) = Wal::open(disk.storage(), opts.clone()).expect("opens");
    assert!(
        report
            .torn_tail
            .as_ref()
            .is_none_or(|t| t.bytes_zeroed == 0),
        "{context}: the open did not read the stray bytes: {:?}",
        report.torn_tail
    );
    let appended = report.last_lsn + append_until_two_rolls(&wal, context);
    check_promise(disk, context);
    wal.abandon();
    drop(wal);
    let disk = disk.crash(&CrashOptions::all_unsynced());
    let (wal, report) = Wal::open(disk.storage(), opts)
        .unwrap_or_else(|e| panic!("{context}: the open after the appends refused the log: {e}"));
    assert_eq!(report.last_lsn, appended, "{context}");
    assert_eq!(wal.iter_from(1).count() as u64, appended, "{context}");
}

/// Appends until the log has rolled twice, each roll leaving the last page of a segment
/// unused (see [`append_past_stray_bytes_and_reopen`]); returns the records appended.
fn append_until_two_rolls<S: timewheel_wal::storage::Storage>(wal: &Wal<S>, context: &str) -> u64 {
    let mut appended = 0;
    let mut rolls_leaving_a_page = 0;
    let first = wal.segments().len();
    while wal.segments().len() < first + 2 {
        let current = *wal.segments().last().unwrap();
        if current.used_bytes + 4096 == current.file_bytes {
            wal.append(1, &[8; 3000]).expect("durable");
            rolls_leaving_a_page += 1;
        } else {
            wal.append(1, &[7; 100]).expect("durable");
        }
        appended += 1;
    }
    assert_eq!(rolls_leaving_a_page, 2, "{context}: {:?}", wal.segments());
    appended
}

/// Bytes that the log never wrote, past the write bound of the segment it appends to after
/// an open (a misdirected write), are not read by that open; the appends after it raise the
/// bound over them. They must be found and zeroed before that: otherwise, once a roll seals
/// the segment, the next open refuses them as damage in a sealed segment (found by the
/// `wal_open` fuzz target with 32 KiB segments).
#[test]
fn stray_bytes_past_the_bound_never_surface_in_a_sealed_segment() {
    let opts = short_bound_options();
    for stray_at in [61440 + 8, 61440 + 2000, (64 << 10) - 8] {
        let disk = crashed_log(64 << 10, 2, &opts);
        disk.write_raw(SEGMENT, stray_at, b"stray!!!", true);
        append_past_stray_bytes_and_reopen(&disk, &format!("stray bytes at {stray_at}"));
    }
}

/// The same for the file made ahead for the next segment, which an open proves zero only at
/// its start: stray bytes further in must not surface once a roll made it a segment, nor in
/// the copy of the last segment that an open may write into it.
#[test]
fn stray_bytes_in_the_file_made_ahead_never_surface() {
    use timewheel_wal::storage::Storage;
    let opts = short_bound_options();
    let next = "0000000000000002.wal";
    // (The open proves the first 16 KiB zero; a copy of the last segment, 3 pages, names a
    // bound 12 KiB past them.)
    for (unsynced, stray_at) in [(false, 61440 + 8), (true, 20480), (true, 61440 + 8)] {
        let disk = crashed_log(64 << 10, 2, &opts);
        let storage = disk.storage();
        drop(storage.create(next, 64 << 10).expect("made ahead"));
        storage.sync_dir().unwrap();
        disk.write_raw(next, stray_at, b"stray!!!", true);
        if unsynced {
            // A record the last segment holds only in the cache: the open copies the
            // segment, into the file made ahead.
            let (wal, _) = Wal::open(disk.storage(), opts.clone()).expect("opens");
            wal.append_nowait(1, &[9; 100]).unwrap();
            wal.abandon();
            drop(wal);
            let (wal, report) = Wal::open(disk.storage(), opts.clone()).expect("opens");
            assert_eq!(
                report.segments_copied, 1,
                "the open copies the last segment"
            );
            assert!(disk.live_file(next).is_none(), "into the file made ahead");
            wal.abandon();
        }
        append_past_stray_bytes_and_reopen(
            &disk,
            &format!("stray bytes at {stray_at} of the file made ahead (copy: {unsynced})"),
        );
    }
}

/// The same on real files, where the preparer thread proves the bytes zero behind the open
/// while appends go on (a seal waits for it before it names a bound past what is proven).
#[test]
fn stray_bytes_in_real_files_are_zeroed_behind_the_open() {
    use std::os::unix::fs::FileExt;
    let opts = short_bound_options();
    for stray_at in [24576, 61440 + 8, (64 << 10) - 8] {
        let dir = tempfile::tempdir().unwrap();
        {
            let (wal, _) = Wal::open_dir(dir.path(), opts.clone()).unwrap();
            wal.append(1, &[1; 100]).unwrap();
            wal.append(1, &[2; 100]).unwrap();
            wal.prepare_next_now().unwrap();
            wal.abandon();
        }
        for name in [SEGMENT, "0000000000000002.wal"] {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.path().join(name))
                .unwrap();
            file.write_all_at(b"stray!!!", stray_at).unwrap();
            file.sync_all().unwrap();
        }
        let context = format!("stray bytes at {stray_at}");
        let (wal, report) = Wal::open_dir(dir.path(), opts.clone()).unwrap();
        assert!(
            report.torn_tail.is_none(),
            "{context}: {:?}",
            report.torn_tail
        );
        let appended = 2 + append_until_two_rolls(&wal, &context);
        wal.close().unwrap();
        let (wal, report) = Wal::open_dir(dir.path(), opts.clone()).unwrap_or_else(|e| {
            panic!("{context}: the open after the appends refused the log: {e}")
        });
        assert_eq!(report.last_lsn, appended, "{context}");
        assert_eq!(wal.iter_from(1).count() as u64, appended, "{context}");
    }
}

/// The checker proves bytes zero while appenders run: with stray bytes in every sector past
/// the bound of the segment appended to and of the file made ahead, four threads append (synced
/// and unsynced batches, through rolls) right after the open. Had the checker ever zeroed
/// where a writer wrote, or a seal named a bound over bytes not yet proven, records would be
/// lost or the reopen refused (checked: with the seal's wait for the checker taken out, every
/// run of three failed, "Corrupted { segment: 2, offset: 258048, reason: GarbageAfterEnd }").
#[test]
fn appenders_racing_the_checker_lose_nothing() {
    // A race: several rounds, each with a fresh directory.
    for _ in 0..8 {
        race_the_checker();
    }
}

fn race_the_checker() {
    use std::os::unix::fs::FileExt;
    let opts = WalOptions {
        segment_bytes: 256 << 10,
        record_bytes_max: 3000,
        write_reach_bytes: 4096,
        ..WalOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    {
        let (wal, _) = Wal::open_dir(dir.path(), opts.clone()).unwrap();
        wal.append(1, &[1; 100]).unwrap();
        wal.prepare_next_now().unwrap();
        wal.abandon();
    }
    for (name, from) in [(SEGMENT, 32768u64), ("0000000000000002.wal", 32768)] {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join(name))
            .unwrap();
        let mut at = from;
        while at < 256 << 10 {
            file.write_all_at(b"stray!!!", at + 256).unwrap();
            at += 512;
        }
        file.sync_all().unwrap();
    }
    let (wal, _) = Wal::open_dir(dir.path(), opts.clone()).unwrap();
    let threads = 4u8;
    let batches = 40;
    std::thread::scope(|s| {
        for t in 0..threads {
            let wal = &wal;
            s.spawn(move || {
                for b in 0..batches {
                    // The last record needs a block of two pages: rolls leave pages unused.
                    let bodies: Vec<Vec<u8>> = (0..8)
                        .map(|i| vec![t + 1; if i == 7 { 2500 } else { 100 + i * 50 }])
                        .collect();
                    let records = bodies.iter().map(|body| (1u8, body.as_slice()));
                    if b % 3 == 0 {
                        wal.append_batch_nowait(records).unwrap();
                    } else {
                        wal.append_batch(records).unwrap();
                    }
                }
            });
        }
    });
    let last = wal.last_lsn();
    assert!(wal.segments().len() >= 3, "the log rolled past both files");
    wal.close().unwrap();
    let (wal, report) = Wal::open_dir(dir.path(), opts).unwrap();
    assert_eq!(report.last_lsn, last);
    assert!(report.torn_tail.is_none(), "{:?}", report.torn_tail);
    let mut per_thread = vec![0u64; usize::from(threads)];
    for record in wal.iter_from(1) {
        let body = record.unwrap().body;
        assert!(
            body.iter().all(|&b| b == body[0]),
            "a record reads back whole"
        );
        per_thread[usize::from(body[0] - 1)] += 1;
    }
    let mut expected = vec![batches as u64 * 8; usize::from(threads)];
    expected[0] += 1; // the first record's body is 1s, as thread 0's are
    assert_eq!(per_thread, expected);
}
