//! Recovery on open: scan every segment, cut a torn tail, refuse damage to acknowledged data.
//!
//! The rules (see `docs/wal-format.md`, "Recovery"):
//!
//! 1. Leftover spares are removed. Segment ids must be consecutive.
//! 2. Each segment's header must be valid and start at the previous segment's last LSN + 1.
//!    The *last* segment may instead have a torn header and only zeros after it: a roll that
//!    crashed before its header was durable. It is removed (its predecessor was synced before
//!    the roll began, so nothing is lost).
//! 3. Records are checked in order: crc, bounds, LSN = previous + 1. The first record that
//!    fails, at offset `off` expecting LSN `L`, is the *damage*; so are non-zero bytes after the
//!    end of the records.
//! 4. Damage is a **torn tail** only if it is in the last segment and no crc-valid record at
//!    or after it vouches for `L` (`lsn - durable_delta >= L`): then nothing at or after `L` was
//!    ever acknowledged. A torn tail is zeroed (up to the last non-zero byte, so stale records
//!    can not come back) and synced. Anything else is `Corrupted`, and nothing is modified.
//! 5. The last segment is synced whole before anything is reported durable, because records
//!    found in the page cache after a process crash may not be on disk yet.

use std::io;
use std::time::{Duration, Instant};

use crate::Lsn;
use crate::error::{CorruptionReason, Error};
use crate::format::{
    LSN_MAX, RECORD_ALIGN, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, SegmentHeader,
    check_record_crc, check_record_header, crc_seed, decode_header, decode_record_header,
    record_disposition,
};
use crate::options::{RecoveryMode, WalOptions};
use crate::segment::{
    Segment, Window, all_zero, install_segment, is_spare_file_name, parse_segment_file_name,
    segment_file_name,
};
use crate::storage::{Storage, StorageFile};

/// Bytes read per call while scanning.
const SCAN_CHUNK_BYTES: usize = 4 << 20;
/// Bytes of zeros written per call while cutting a torn tail.
const ZERO_CHUNK_BYTES: usize = 1 << 20;

/// A torn tail that recovery cut off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment it was in.
    pub segment: u64,
    /// Offset of the first damaged record; appends continue here.
    pub offset: u64,
    /// The LSN that record should have had; the next append gets it.
    pub expected_lsn: Lsn,
    /// What was wrong there.
    pub reason: CorruptionReason,
    /// Bytes zeroed, from `offset` to the last non-zero byte of the segment.
    pub bytes_zeroed: u64,
}

/// What recovery found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segment files in the log after recovery.
    pub segments: u64,
    /// Valid records found (skipped ones included).
    pub records: u64,
    /// Records of unknown reserved types skipped because they were marked skippable.
    pub skipped_records: u64,
    /// The first LSN in the log (`last_lsn + 1` when it holds no record).
    pub first_lsn: Lsn,
    /// The last LSN in the log (0 when nothing was ever written).
    pub last_lsn: Lsn,
    /// Bytes of the valid record frames scanned.
    pub bytes: u64,
    /// The torn tail cut off, if there was one.
    pub torn_tail: Option<TornTail>,
    /// Files removed: a torn roll's segment and leftover spares.
    pub removed_files: Vec<String>,
    /// Wall time recovery took.
    pub elapsed: Duration,
}

/// The segments in id order (the last is appended to) and the report.
pub(crate) type Recovered<F> = (Vec<Segment<F>>, RecoveryReport);

/// The outcome of scanning one segment's records.
struct Scan {
    /// Offset after the last valid record.
    end: u64,
    /// LSN of the last valid record (`first_lsn - 1` if none).
    last_lsn: Lsn,
    /// The first damage, as (offset, reason); `end` is then its offset.
    damage: Option<(u64, CorruptionReason)>,
}

fn corrupted(segment: u64, offset: u64, reason: CorruptionReason) -> Error {
    Error::Corrupted {
        segment,
        offset,
        reason,
    }
}

/// Runs recovery over `storage` (already locked), returning the segments in id order (the
/// last is the one to append to, never empty of a header) and the report.
pub(crate) fn recover<S: Storage>(
    storage: &S,
    opts: &WalOptions,
) -> Result<Recovered<S::File>, Error> {
    let started = Instant::now();
    let mut report = RecoveryReport {
        segments: 0,
        records: 0,
        skipped_records: 0,
        first_lsn: 1,
        last_lsn: 0,
        bytes: 0,
        torn_tail: None,
        removed_files: Vec::new(),
        elapsed: Duration::ZERO,
    };
    let names = storage.list()?;
    for name in names.iter().filter(|n| is_spare_file_name(n)) {
        storage.remove(name)?;
        report.removed_files.push(name.clone());
    }
    if !report.removed_files.is_empty() {
        storage.sync_dir()?;
    }
    let mut ids: Vec<u64> = names
        .iter()
        .filter_map(|n| parse_segment_file_name(n))
        .collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[1] != w[0] + 1) {
        let id = w[0] + 1;
        return Err(corrupted(id, 0, CorruptionReason::SegmentMissing { id }));
    }

    let mut window = Window::new(SCAN_CHUNK_BYTES);
    let mut segments: Vec<Segment<S::File>> = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        let is_last = i + 1 == ids.len();
        let name = segment_file_name(id);
        let file = storage.open(&name)?;
        window.reset();
        let expected_first = segments.last().map(|s| s.last_lsn + 1);
        let header = match read_header(&file, id, expected_first)? {
            Ok(header) => header,
            Err(reason) => {
                // Only a header that failed its crc (or a file cut short) can be a torn write;
                // a crc-valid header with wrong contents is something else.
                let torn_write = matches!(
                    reason,
                    CorruptionReason::HeaderChecksum | CorruptionReason::FileTooSmall { .. }
                );
                let torn_roll = is_last
                    && torn_write
                    && opts.recovery_mode == RecoveryMode::TolerateTornTail
                    && (expected_first.is_some() || id == 1)
                    // Records are appended only once the header is durable, so a torn roll
                    // holds nothing after it; anything there (even bytes that no longer check
                    // out under the damaged header's salt) means the header was damaged later.
                    && rest_is_zero(&file, &mut window, SEGMENT_HEADER_BYTES as u64)?;
                if !torn_roll {
                    return Err(corrupted(id, 0, reason));
                }
                drop(file);
                storage.remove(&name)?;
                storage.sync_dir()?;
                tracing::warn!(segment = id, %reason, "WAL torn roll: removed a segment whose header never became durable");
                report.removed_files.push(name);
                break;
            }
        };
        let scan = scan_segment(&file, &header, &mut window, &mut report)?;
        let mut segment = Segment {
            id,
            salt: header.salt,
            first_lsn: header.first_lsn,
            file_bytes: file.len_bytes(),
            end: scan.end,
            last_lsn: scan.last_lsn,
            file: file.into(),
        };
        if let Some((offset, reason)) = scan.damage {
            let expected_lsn = scan.last_lsn + 1;
            if !is_last || opts.recovery_mode == RecoveryMode::Absolute {
                tracing::error!(segment = id, offset, %reason, sealed = !is_last, "WAL damage refused");
                return Err(corrupted(id, offset, reason));
            }
            let look = look_ahead(
                &*segment.file,
                header.salt,
                offset,
                Some(expected_lsn),
                &mut window,
            )?;
            if let Some((voucher_offset, voucher_lsn)) = look.found {
                tracing::error!(segment = id, offset, %reason, voucher_offset, voucher_lsn,
                    "WAL damage to acknowledged data: a later record vouches for it");
                return Err(corrupted(id, offset, reason));
            }
            let bytes_zeroed = zero_range(&*segment.file, offset, look.nonzero_end)?;
            tracing::warn!(segment = id, offset, expected_lsn, %reason, bytes_zeroed, "WAL torn tail cut");
            report.torn_tail = Some(TornTail {
                segment: id,
                offset,
                expected_lsn,
                reason,
                bytes_zeroed,
            });
            segment.end = offset;
        }
        segments.push(segment);
    }

    if segments.is_empty() {
        // A fresh directory, or a first segment whose creation never became durable.
        segments.push(install_segment(storage, 1, 1, opts.segment_bytes, false)?);
    }
    let last = segments.last().expect("at least one segment");
    // Records read back from the page cache after a process crash may not be on disk yet;
    // they are about to be vouched for, so make them durable first. A sync alone is not
    // enough: after an earlier failed sync the kernel marks the pages clean without writing
    // them, so they are rewritten (dirtied) first. Likewise the directory entries.
    storage.sync_dir()?;
    rewrite_range(&*last.file, 0, last.end)?;
    report.segments = segments.len() as u64;
    report.first_lsn = segments[0].first_lsn;
    report.last_lsn = last.last_lsn;
    report.elapsed = started.elapsed();
    Ok((segments, report))
}

/// Reads and checks a segment header. The outer `Result` is I/O, the inner one the verdict.
fn read_header<F: StorageFile>(
    file: &F,
    id: u64,
    expected_first: Option<Lsn>,
) -> io::Result<Result<SegmentHeader, CorruptionReason>> {
    let file_bytes = file.len_bytes();
    if file_bytes < (SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES) as u64 {
        return Ok(Err(CorruptionReason::FileTooSmall { bytes: file_bytes }));
    }
    let mut raw = [0u8; SEGMENT_HEADER_BYTES];
    file.read_at(0, &mut raw)?;
    let header = match decode_header(&raw) {
        Ok(h) => h,
        Err(reason) => return Ok(Err(reason)),
    };
    let verdict = if header.segment_id != id {
        Err(CorruptionReason::HeaderSegmentId {
            found: header.segment_id,
        })
    } else if header.segment_bytes != file_bytes {
        Err(CorruptionReason::HeaderSegmentBytes {
            found: header.segment_bytes,
            file_bytes,
        })
    } else if header.first_lsn == 0
        || header.first_lsn > LSN_MAX
        || expected_first.is_some_and(|e| e != header.first_lsn)
    {
        let expected = expected_first.unwrap_or(1);
        Err(CorruptionReason::HeaderFirstLsn {
            expected,
            found: header.first_lsn,
        })
    } else {
        Ok(header)
    };
    Ok(verdict)
}

/// Scans the records of one segment until the end of its records or the first damage.
fn scan_segment<F: StorageFile>(
    file: &F,
    header: &SegmentHeader,
    window: &mut Window,
    report: &mut RecoveryReport,
) -> Result<Scan, Error> {
    let len = file.len_bytes();
    let mut off = SEGMENT_HEADER_BYTES as u64;
    let mut lsn = header.first_lsn;
    let damaged = |off, lsn: Lsn, reason| Scan {
        end: off,
        last_lsn: lsn - 1,
        damage: Some((off, reason)),
    };
    loop {
        if off + RECORD_HEADER_BYTES as u64 > len
            || all_zero(window.get(file, len, off, RECORD_HEADER_BYTES)?)
        {
            // The end of the records: everything after must be zero fill.
            if rest_is_zero(file, window, off)? {
                return Ok(Scan {
                    end: off,
                    last_lsn: lsn - 1,
                    damage: None,
                });
            }
            return Ok(damaged(off, lsn, CorruptionReason::GarbageAfterEnd));
        }
        let h = decode_record_header(window.get(file, len, off, RECORD_HEADER_BYTES)?);
        if let Err(reason) = check_record_header(&h, len - off) {
            return Ok(damaged(off, lsn, reason));
        }
        let frame = window.get(file, len, off, h.frame_bytes() as usize)?;
        if let Err(reason) = check_record_crc(&h, crc_seed(header.salt, off), frame) {
            return Ok(damaged(off, lsn, reason));
        }
        if h.lsn != lsn {
            return Ok(damaged(
                off,
                lsn,
                CorruptionReason::RecordLsn {
                    expected: lsn,
                    found: h.lsn,
                },
            ));
        }
        match record_disposition(&h) {
            Ok(true) => report.records += 1,
            Ok(false) => {
                report.records += 1;
                report.skipped_records += 1;
            }
            // A valid record this version can not read: not damage, but not to be cut either.
            Err(reason) => return Err(corrupted(header.segment_id, off, reason)),
        }
        report.bytes += h.frame_bytes();
        off += h.frame_bytes();
        lsn += 1;
    }
}

fn rest_is_zero<F: StorageFile>(file: &F, window: &mut Window, mut off: u64) -> io::Result<bool> {
    let len = file.len_bytes();
    while off < len {
        let n = (len - off).min(SCAN_CHUNK_BYTES as u64) as usize;
        if !all_zero(window.get(file, len, off, n)?) {
            return Ok(false);
        }
        off += n as u64;
    }
    Ok(true)
}

/// What a look-ahead past damage found.
struct LookAhead {
    /// A crc-valid record (offset, LSN) that vouches (or, with no LSN to vouch for, any
    /// crc-valid record at all).
    found: Option<(u64, Lsn)>,
    /// Offset just past the last non-zero 8-byte word (or byte, at an unaligned file end).
    nonzero_end: u64,
}

/// Tries every 8-aligned offset from `from` to the end of the file for a crc-valid record of
/// this segment's `salt`. With `vouch_for = Some(L)`, only a record that vouches for `L` counts,
/// and its LSN must be plausible (at most one record per 24 bytes after `from`), which keeps the
/// crc work on garbage small.
fn look_ahead<F: StorageFile>(
    file: &F,
    salt: u64,
    from: u64,
    vouch_for: Option<Lsn>,
    window: &mut Window,
) -> io::Result<LookAhead> {
    assert_eq!(from % RECORD_ALIGN as u64, 0);
    let len = file.len_bytes();
    let mut nonzero_end = from;
    let mut off = from;
    while off < len {
        let word_len = (len - off).min(RECORD_ALIGN as u64) as usize;
        if !all_zero(window.get(file, len, off, word_len)?) {
            nonzero_end = off + word_len as u64;
        }
        if off + RECORD_HEADER_BYTES as u64 <= len {
            let h = decode_record_header(window.get(file, len, off, RECORD_HEADER_BYTES)?);
            let plausible = match vouch_for {
                Some(l) => {
                    let lsn_max = l + (off - from) / RECORD_HEADER_BYTES as u64;
                    h.lsn >= l && h.lsn <= lsn_max && h.vouched_lsn() >= l
                }
                None => true,
            };
            if plausible && check_record_header(&h, len - off).is_ok() {
                let frame = window.get(file, len, off, h.frame_bytes() as usize)?;
                if check_record_crc(&h, crc_seed(salt, off), frame).is_ok() {
                    return Ok(LookAhead {
                        found: Some((off, h.lsn)),
                        nonzero_end,
                    });
                }
            }
        }
        off += word_len as u64;
    }
    Ok(LookAhead {
        found: None,
        nonzero_end,
    })
}

/// Writes `from..to` back over itself and syncs it, so that bytes the media may not hold (a
/// failed sync dropped them, yet reads still see them) reach it.
fn rewrite_range<F: StorageFile>(file: &F, from: u64, to: u64) -> io::Result<()> {
    let mut buf = vec![0u8; (to.saturating_sub(from) as usize).min(SCAN_CHUNK_BYTES)];
    let mut off = from;
    while off < to {
        let n = ((to - off) as usize).min(buf.len());
        file.read_at(off, &mut buf[..n])?;
        file.write_at(off, &buf[..n])?;
        off += n as u64;
    }
    file.sync_range(from, to - from)
}

/// Zeroes `from..to` and syncs it; returns the bytes zeroed.
fn zero_range<F: StorageFile>(file: &F, from: u64, to: u64) -> io::Result<u64> {
    if to <= from {
        return Ok(0);
    }
    let zeros = vec![0u8; ((to - from) as usize).min(ZERO_CHUNK_BYTES)];
    let mut off = from;
    while off < to {
        let n = ((to - off) as usize).min(zeros.len());
        file.write_at(off, &zeros[..n])?;
        off += n as u64;
    }
    file.sync_range(from, to - from)?;
    Ok(to - from)
}
