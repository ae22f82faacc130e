//! Recovery from arbitrary bytes: a WAL directory on the fault-injecting disk is built from a
//! real small log (so the fuzzer starts past every checksum), ended by a clean close, a
//! process crash (optionally right after a failed sync) or a power cut, then damaged by byte
//! edits, extra files (segments, spares, leftover copies, header-less prepared files),
//! removals and renames chosen by the input. `Wal::open` must return `Ok` or `Err(Corrupted)`
//! (never panic, hang, or allocate without bound); after `Ok`, every record reads back, two
//! appends work, a reopen finds the same log plus them, and so does an open after a power cut
//! taken right after those appends (recovery made what it returned durable before anything
//! vouched for it). Without edits or media faults, what comes back is the written log, cut no
//! earlier than the last acknowledgement (after a close or a process crash, not cut at all).
//! Half of the opens hand the records they accept to a follower (`Wal::open_following`): what
//! it got is a prefix of the opened log, and all of it when the open repaired and cut nothing.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use timewheel_wal::format::FLAG_SKIPPABLE;
use timewheel_wal::storage::{Storage, StorageFile};
use timewheel_wal::testing::{CrashOptions, FaultDisk, FaultStorage, SyncFailure};
use timewheel_wal::{
    Error, Follow, Record, RecordRef, RecoveryMode, Wal, WalOptions, segment_file_name,
};

/// Limits that keep one execution small (every one is a count or a byte size).
const APPENDS_MAX: usize = 48;
const EDITS_MAX: usize = 16;
const BATCH_RECORDS_MAX: u8 = 8;
const EDIT_WRITE_BYTES_MAX: usize = 64;
const EXTRA_FILE_BYTES_MAX: u64 = 4 * 4096 + 100; // a two-page segment fits
const RECORD_BYTES_MAX: u32 = 1024;

#[derive(Arbitrary, Debug)]
enum Append {
    One {
        record_type: u8,
        skippable: bool,
        len: u16,
        fill: u8,
    },
    Batch {
        n: u8,
        len: u8,
        fill: u8,
    },
    /// Written but not waited for: a crash may keep it or not.
    NoWait {
        len: u8,
        fill: u8,
    },
    Sync,
}

#[derive(Arbitrary, Debug)]
struct Crash {
    keep_unsynced: u8,
    torn_pages: bool,
    bit_flips_unsynced: u8,
    bit_flips_synced: u8,
    misdirected_writes: u8,
    undo_dir_ops: bool,
    garbled_sectors: u8,
}

/// How the writing process ends.
#[derive(Arbitrary, Debug)]
enum End {
    /// A clean close (its close marker ends the last segment).
    Close,
    /// A process crash: the page cache survives, nothing more is synced. With
    /// `failed_sync`, a last unwaited append's sync fails first (its pages are marked clean
    /// without reaching the medium, as Linux does), so recovery finds in the cache a record
    /// the medium does not hold, and must copy rather than keep the segment as it is.
    Abandon { failed_sync: bool, len: u8 },
    /// A power cut.
    PowerCut(Crash),
}

#[derive(Arbitrary, Debug)]
enum Name {
    Segment(u8),
    /// Format 2's first release made these; recovery removes any it finds.
    Spare(u8),
    /// A leftover of recovery's copy; removed on open.
    Copy(u8),
    Other,
}

#[derive(Arbitrary, Debug)]
enum Edit {
    Flip {
        file: u8,
        offset: u16,
        bit: u8,
    },
    Write {
        file: u8,
        offset: u16,
        bytes: Vec<u8>,
    },
    /// A torn write caught as zeros: `len` bytes from `offset` become zero.
    Zero {
        file: u8,
        offset: u16,
        len: u16,
    },
    /// Everything from `offset` to the end becomes zero.
    ZeroTail {
        file: u8,
        offset: u16,
    },
    /// A stale or misplaced record: bytes copied from one place of a file to another.
    Copy {
        file: u8,
        from: u16,
        to: u16,
        len: u8,
    },
    /// A record copied into another file at the same offset (an older incarnation).
    CopyAcross {
        from_file: u8,
        to_file: u8,
        offset: u16,
        len: u8,
    },
    Remove {
        file: u8,
    },
    Rename {
        file: u8,
        to: Name,
    },
    Create {
        name: Name,
        len: u16,
        bytes: Vec<u8>,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    seed: u64,
    /// Segments of 8, 16 or 32 KiB; the last have write bounds short of their end (the
    /// smallest reach, 12 KiB with these records), which recovery's zero checks stop at.
    segment_size: u8,
    absolute: bool,
    appends: Vec<Append>,
    end: End,
    edits: Vec<Edit>,
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(input) = Input::arbitrary(&mut u) else {
        return;
    };
    run(input);
});

fn options(input: &Input) -> WalOptions {
    WalOptions {
        segment_bytes: match input.segment_size % 3 {
            0 => 8192,
            1 => 16384,
            _ => 32768,
        },
        record_bytes_max: RECORD_BYTES_MAX,
        write_reach_bytes: 4096,
        recovery_mode: if input.absolute {
            RecoveryMode::Absolute
        } else {
            RecoveryMode::TolerateTornTail
        },
        ..WalOptions::default()
    }
}

/// What was written: bodies by LSN (index = lsn - 1), and the last acknowledged LSN.
struct Written {
    records: Vec<(u8, u8, Vec<u8>)>,
    acked: u64,
}

fn body(lsn: u64, len: usize, fill: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            fill.wrapping_add((lsn as u8).wrapping_mul(31))
                .wrapping_add(i as u8)
        })
        .collect()
}

fn write_log(disk: &FaultDisk, input: &Input) -> (Wal<FaultStorage>, Written) {
    let (wal, report) = Wal::open(disk.storage(), options(input)).expect("a fresh log opens");
    assert_eq!(report.last_lsn, 0);
    let mut w = Written {
        records: Vec::new(),
        acked: 0,
    };
    for a in input.appends.iter().take(APPENDS_MAX) {
        let next = w.records.len() as u64 + 1;
        match *a {
            Append::One {
                record_type,
                skippable,
                len,
                fill,
            } => {
                let t = 1 + record_type % 0xEF;
                let flags = if skippable { FLAG_SKIPPABLE } else { 0 };
                let b = body(
                    next,
                    usize::from(len) % (RECORD_BYTES_MAX as usize + 1),
                    fill,
                );
                let lsn = wal
                    .append_with_flags(t, flags, &b)
                    .expect("append on a healthy disk");
                assert_eq!(lsn, next);
                w.records.push((t, flags, b));
                w.acked = lsn;
            }
            Append::Batch { n, len, fill } => {
                let n = 1 + n % BATCH_RECORDS_MAX;
                let bodies: Vec<Vec<u8>> = (0..u64::from(n))
                    .map(|i| body(next + i, usize::from(len), fill))
                    .collect();
                let lsn = wal
                    .append_batch(bodies.iter().map(|b| (2u8, &b[..])))
                    .expect("batch on a healthy disk");
                assert_eq!(lsn, next + u64::from(n) - 1);
                w.records.extend(bodies.into_iter().map(|b| (2, 0, b)));
                w.acked = lsn;
            }
            Append::NoWait { len, fill } => {
                let b = body(next, usize::from(len), fill);
                let lsn = wal
                    .append_nowait(3, &b)
                    .expect("append_nowait on a healthy disk");
                assert_eq!(lsn, next);
                w.records.push((3, 0, b));
            }
            Append::Sync => {
                w.acked = wal.sync().expect("sync on a healthy disk");
                assert_eq!(w.acked, w.records.len() as u64);
            }
        }
    }
    (wal, w)
}

fn names(disk: &FaultDisk) -> Vec<String> {
    disk.live_names()
}

fn pick(names: &[String], i: u8) -> Option<&String> {
    if names.is_empty() {
        None
    } else {
        Some(&names[usize::from(i) % names.len()])
    }
}

fn name_of(n: &Name) -> String {
    match *n {
        Name::Segment(id) => segment_file_name(u64::from(id % 6)),
        Name::Spare(id) => format!("{:016}.wal.spare", id % 6),
        Name::Copy(id) => format!("{:016}.wal.copy", id % 6),
        Name::Other => "MANIFEST".to_owned(),
    }
}

fn file_len(disk: &FaultDisk, name: &str) -> usize {
    disk.live_file(name).map_or(0, |f| f.len())
}

/// Applies the edits; returns whether any was applied.
fn edit(disk: &FaultDisk, edits: &[Edit]) -> bool {
    let storage = disk.storage();
    let mut any = false;
    for e in edits.iter().take(EDITS_MAX) {
        let names = names(disk);
        match e {
            Edit::Flip { file, offset, bit } => {
                let Some(n) = pick(&names, *file) else {
                    continue;
                };
                let len = file_len(disk, n);
                if len > 0 {
                    disk.flip_bit(n, (usize::from(*offset) % len) as u64, bit % 8);
                    any = true;
                }
            }
            Edit::Write {
                file,
                offset,
                bytes,
            } => {
                let Some(n) = pick(&names, *file) else {
                    continue;
                };
                let len = file_len(disk, n);
                if len > 0 {
                    let at = usize::from(*offset) % len;
                    let b = &bytes[..bytes.len().min(EDIT_WRITE_BYTES_MAX).min(len - at)];
                    disk.write_raw(n, at as u64, b, true);
                    any = true;
                }
            }
            Edit::Zero {
                file,
                offset,
                len: zlen,
            } => {
                let Some(n) = pick(&names, *file) else {
                    continue;
                };
                let len = file_len(disk, n);
                if len > 0 {
                    let at = usize::from(*offset) % len;
                    let z = usize::from(*zlen).min(len - at);
                    disk.write_raw(n, at as u64, &vec![0; z], true);
                    any = true;
                }
            }
            Edit::ZeroTail { file, offset } => {
                let Some(n) = pick(&names, *file) else {
                    continue;
                };
                let len = file_len(disk, n);
                if len > 0 {
                    let at = usize::from(*offset) % len;
                    disk.write_raw(n, at as u64, &vec![0; len - at], true);
                    any = true;
                }
            }
            Edit::Copy {
                file,
                from,
                to,
                len: clen,
            } => {
                let Some(n) = pick(&names, *file) else {
                    continue;
                };
                let image = disk.live_file(n).unwrap_or_default();
                if image.is_empty() {
                    continue;
                }
                // Copies keep record alignment, like a misplaced or stale record would.
                let from = (usize::from(*from) * 8) % image.len();
                let to = (usize::from(*to) * 8) % image.len();
                let c = (usize::from(*clen) * 8)
                    .min(image.len() - from)
                    .min(image.len() - to);
                disk.write_raw(n, to as u64, &image[from..from + c], true);
                any = true;
            }
            Edit::CopyAcross {
                from_file,
                to_file,
                offset,
                len: clen,
            } => {
                let (Some(a), Some(b)) = (pick(&names, *from_file), pick(&names, *to_file)) else {
                    continue;
                };
                let (ia, lb) = (disk.live_file(a).unwrap_or_default(), file_len(disk, b));
                let at = usize::from(*offset) * 8;
                if at >= ia.len().min(lb) {
                    continue;
                }
                let c = (usize::from(*clen) * 8).min(ia.len() - at).min(lb - at);
                disk.write_raw(b, at as u64, &ia[at..at + c], true);
                any = true;
            }
            Edit::Remove { file } => {
                let Some(n) = pick(&names, *file) else {
                    continue;
                };
                storage.remove(n).expect("remove a listed file");
                any = true;
            }
            Edit::Rename { file, to } => {
                let Some(n) = pick(&names, *file) else {
                    continue;
                };
                storage
                    .rename(n, &name_of(to))
                    .expect("rename a listed file");
                any = true;
            }
            Edit::Create { name, len, bytes } => {
                let name = name_of(name);
                if names.contains(&name) {
                    continue;
                }
                let len = u64::from(*len) % (EXTRA_FILE_BYTES_MAX + 1);
                let file = storage
                    .create(&name, len)
                    .expect("create on a healthy disk");
                let b = &bytes[..bytes.len().min(len as usize)];
                file.write_at(0, b).expect("write inside the file");
                file.sync_range(0, b.len() as u64)
                    .expect("sync on a healthy disk");
                any = true;
            }
        }
    }
    storage.sync_dir().expect("sync_dir on a healthy disk");
    any
}

/// What an open handed over (`Wal::open_following`).
#[derive(Default)]
struct Taker {
    expected: Option<u64>,
    records: Vec<(u64, u8, u8, Vec<u8>)>,
}

impl Follow for Taker {
    fn expect(&mut self, records: u64) {
        assert!(self.expected.is_none() && self.records.is_empty());
        self.expected = Some(records);
    }

    fn record(&mut self, r: RecordRef<'_>) {
        assert!(self.expected.is_some(), "expect comes first");
        assert!(
            self.records.last().is_none_or(|p| p.0 < r.lsn),
            "records come in LSN order"
        );
        self.records
            .push((r.lsn, r.record_type, r.flags, r.body.to_vec()));
    }
}

fn read_all(wal: &Wal<FaultStorage>) -> Vec<Record> {
    let first = wal.first_lsn();
    let mut out: Vec<Record> = Vec::new();
    for r in wal.iter_from(0) {
        let r = r.unwrap_or_else(|e| panic!("a recovered log reads back whole: {e}"));
        assert!(r.lsn >= first && r.lsn <= wal.last_lsn());
        assert!(
            out.last().is_none_or(|p| p.lsn < r.lsn),
            "records come in LSN order"
        );
        assert!(
            (1..=0xEF).contains(&r.record_type),
            "only user records are yielded"
        );
        out.push(r);
    }
    out
}

fn run(input: Input) {
    let disk = FaultDisk::new(input.seed);
    let (wal, mut written) = write_log(&disk, &input);
    let mut media_faults = false;
    let disk = match &input.end {
        End::PowerCut(c) => {
            let opts = CrashOptions {
                keep_unsynced: f64::from(c.keep_unsynced) / 255.0,
                torn_pages: c.torn_pages,
                bit_flips_unsynced: u32::from(c.bit_flips_unsynced % 4),
                bit_flips_synced: u32::from(c.bit_flips_synced % 4),
                misdirected_writes: u32::from(c.misdirected_writes % 3),
                undo_dir_ops: c.undo_dir_ops,
                garbled_sectors: u32::from(c.garbled_sectors % 3),
            };
            media_faults = opts.bit_flips_synced > 0 || opts.misdirected_writes > 0;
            let after = disk.crash(&opts);
            drop(wal);
            after
        }
        End::Close => {
            wal.close().expect("close on a healthy disk");
            disk
        }
        End::Abandon { failed_sync, len } => {
            if *failed_sync {
                let lsn = wal
                    .append_nowait(
                        3,
                        &body(written.records.len() as u64 + 1, usize::from(*len), 1),
                    )
                    .expect("append_nowait on a healthy disk");
                disk.set_sync_failure(SyncFailure::Next);
                assert!(wal.wait_durable(lsn).is_err(), "the sync was made to fail");
                written
                    .records
                    .push((3, 0, body(lsn, usize::from(*len), 1)));
            }
            wal.abandon();
            drop(wal);
            disk
        }
    };
    let crashed = matches!(input.end, End::PowerCut(_) | End::Abandon { .. });
    let edited = edit(&disk, &input.edits);
    let opts = options(&input);

    // Half of the opens hand their records to a follower as they accept them.
    let mut follower = input.seed.is_multiple_of(2).then(Taker::default);
    let opened = match follower.as_mut() {
        Some(f) => Wal::open_following(disk.storage(), opts.clone(), f),
        None => Wal::open(disk.storage(), opts.clone()),
    };
    let (wal, report) = match opened {
        Ok(x) => x,
        // Absolute mode refuses a torn tail too.
        Err(Error::Corrupted { .. }) if edited || media_faults || (input.absolute && crashed) => {
            return;
        }
        Err(e) => panic!("recovery failed without damage to synced data: {e} ({e:?})"),
    };
    assert_eq!(wal.last_lsn(), report.last_lsn);
    assert_eq!(wal.first_lsn(), report.first_lsn);
    let records = read_all(&wal);
    let in_log = report.last_lsn + 1 - report.first_lsn;
    assert_eq!(
        report.records, in_log,
        "recovery counts every record in the log"
    );
    assert_eq!(
        records.len() as u64,
        in_log - report.skipped_records,
        "every record reads back"
    );
    if let Some(f) = follower {
        // What the open handed over is a prefix of the log it opened; all of it when it
        // repaired nothing, cut nothing and met no damaged mirror.
        assert!(f.records.len() <= records.len());
        for (got, r) in f.records.iter().zip(&records) {
            assert_eq!(got, &(r.lsn, r.record_type, r.flags, r.body.clone()));
        }
        if report.repaired_groups.is_empty()
            && report.torn_tail.is_none()
            && report.damaged_mirrors == 0
        {
            assert_eq!(
                f.records.len(),
                records.len(),
                "a healthy log is handed over whole"
            );
        }
    }

    if !edited {
        // No record is invented or altered: what came back is a prefix of what was written.
        assert_eq!(report.first_lsn, 1);
        assert!(
            report.last_lsn <= written.records.len() as u64,
            "no record invented"
        );
        for r in &records {
            let (t, f, b) = &written.records[(r.lsn - 1) as usize];
            assert_eq!(
                (r.record_type, r.flags, &r.body),
                (*t, *f, b),
                "record {} altered",
                r.lsn
            );
        }
        if !media_faults {
            // A power cut loses nothing acknowledged; a clean close loses nothing at all.
            assert!(
                report.last_lsn >= written.acked,
                "acknowledged record lost: {report:?}"
            );
            // A clean close loses nothing, and neither does a process crash: what it wrote is
            // in the page cache (after a failed sync too, though not on the medium); only an
            // unsealed last group's missing mirror may be reported as a torn tail, with its
            // records kept.
            if matches!(input.end, End::Close | End::Abandon { .. }) {
                assert_eq!(report.last_lsn, written.records.len() as u64);
            }
            if matches!(input.end, End::Close) {
                assert!(report.torn_tail.is_none());
            }
        }
    }

    // The recovered log takes appends, and a reopen finds exactly it again.
    let lsn = wal
        .append(7, b"after recovery")
        .expect("append after recovery");
    assert_eq!(lsn, report.last_lsn + 1);
    let lsn2 = wal
        .append(8, &[0x5A; 900])
        .expect("a second append after recovery");
    assert_eq!(lsn2, lsn + 1);
    let mut before = records;
    before.extend(read_all(&wal).into_iter().filter(|r| r.lsn >= lsn));
    assert_eq!(before.len(), read_all(&wal).len());
    // Both appends were acknowledged, and they vouch for everything recovery returned: a power
    // cut now (on a copy of the disk) must keep all of it, whether recovery copied the last
    // segment or found its bytes on the medium already.
    let cut = disk.crash(&CrashOptions::default());
    wal.close().expect("close after recovery");
    let (wal, again) = Wal::open(disk.storage(), opts)
        .unwrap_or_else(|e| panic!("reopen after a good recovery: {e}"));
    assert!(
        again.torn_tail.is_none(),
        "a second recovery finds nothing to cut: {again:?}"
    );
    assert_eq!(again.last_lsn, lsn2);
    assert_eq!(read_all(&wal), before, "a reopen finds the same records");
    drop(wal);
    let (wal, _) = Wal::open(cut.storage(), options(&input))
        .unwrap_or_else(|e| panic!("open after a power cut that followed recovery: {e}"));
    assert_eq!(
        read_all(&wal),
        before,
        "a power cut after recovery and two acknowledged appends keeps every record"
    );
}
