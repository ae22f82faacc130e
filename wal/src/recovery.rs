//! Recovery on open: scan every segment block by block, repair a damaged group from its
//! mirror, cut a torn tail, refuse damage to acknowledged data.
//!
//! The rules (see `docs/wal-format.md`, "Recovery"):
//!
//! 1. Leftover spares and copies are removed. Segment ids must be consecutive. Trailing
//!    segment files that are all zero (made ahead of need, never rolled into) are removed,
//!    except the one right after the last segment: it becomes the last segment's copy, or
//!    else the next segment's file again.
//! 2. Each segment's header must be valid and start at the previous segment's last LSN + 1.
//!    The *last* segment may instead have a torn header and only zeros after it: a roll that
//!    crashed before its header was durable. It is removed (its predecessor was synced before
//!    the roll began, so nothing is lost).
//! 3. Commit blocks are checked in order from offset 4096: the group's records (crc, bounds,
//!    LSN = previous + 1), then its mirror at the next sector boundary, which must describe
//!    exactly that group; the next block starts at the next page boundary. A clean close's
//!    marker at a block start, or zeros from a block start to the end of the file, end the
//!    segment.
//! 4. When a block's records are damaged but a crc-valid mirror of that block exists, the
//!    group is **repaired** from it. When the mirror alone is damaged (the next block, or the
//!    end of a sealed segment, confirms where the group ended), it is ignored. Otherwise the
//!    first failure, at offset `off` expecting LSN `L`, is the *damage*.
//! 5. Damage is a **torn tail** only if it is in the last segment and no crc-valid record at
//!    or after it vouches for `L` (`lsn - durable_delta >= L`). Anything else is `Corrupted`,
//!    and nothing is modified.
//! 6. A segment that needs a repair, and the last segment unless a clean close left it (its
//!    close marker ends it, with zeros after), is **copied** into a fresh file (records up to
//!    the cut, repaired groups, every block with its mirror), synced, and renamed over the old
//!    one; for the last segment that file is the one made ahead, if there is one. The last
//!    segment is kept as it is instead when it needs no repair or cut and the bytes that
//!    nothing in it vouches for are found on the medium (synced, then read past the cache).
//!    Either way, "durable before anything vouches for it" holds. Nothing already synced is ever written over in place, so a power cut during
//!    recovery can not damage it; and records found in the page cache after a process crash
//!    (maybe never written back, after a failed sync) are on disk before anything vouches for
//!    them.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::Lsn;
use crate::error::{CorruptionReason, Error};
use crate::format::{
    BLOCK_ALIGN, FIRST_BLOCK_OFFSET, LSN_MAX, MIRROR_ALIGN, MIRROR_PREFIX_BYTES, MirrorPrefix,
    RECORD_ALIGN, RECORD_HEADER_BYTES, RECORD_TYPE_CLOSE, RECORD_TYPE_MIRROR, RECORD_TYPE_USER_MAX,
    RecordHeader, SEGMENT_HEADER_BYTES, SegmentHeader, align_to, check_record_crc,
    check_record_header, crc_seed, decode_header, decode_mirror_prefix, decode_record_header,
    encode_header, encode_mirror, next_block, record_disposition, sealed_end, write_bound_after,
};
use crate::options::{RecoveryMode, WalOptions};
use crate::scan_ahead::{Ahead, StopOnDrop, Taken};
use crate::segment::{
    Segment, Window, all_zero, copy_file_name, create_error, install_segment, is_copy_file_name,
    is_spare_file_name, parse_segment_file_name, segment_file_name, zero_stray,
};
use crate::storage::{Storage, StorageFile};

/// Bytes read per call while scanning.
pub(crate) const SCAN_CHUNK_BYTES: usize = 1 << 20;
/// Bytes read per call by the zero checks: small enough to stay in the CPU's cache between the
/// copy out of the page cache and the check.
const ZERO_CHECK_CHUNK_BYTES: usize = 256 << 10;
/// A zero check this long or longer (each half) uses a second thread when allowed.
const PARALLEL_ZERO_CHECK_MIN_BYTES: u64 = 4 << 20;
/// Bytes read per call, from the medium and from the cache, when checking that the unvouched
/// part of the last segment is durable.
const VERIFY_CHUNK_BYTES: usize = 1 << 20;

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
    /// Bytes dropped, from `offset` to the last non-zero byte of the segment (the segment is
    /// rewritten without them).
    pub bytes_zeroed: u64,
}

/// A commit block whose damaged records recovery rewrote from the block's mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairedGroup {
    /// The segment.
    pub segment: u64,
    /// The block's offset.
    pub offset: u64,
    /// Where the damage was found.
    pub damage_offset: u64,
    /// What was wrong there.
    pub reason: CorruptionReason,
    /// The group's first LSN.
    pub first_lsn: Lsn,
    /// Its records.
    pub records: u32,
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
    /// The valid records by type (index: the record type; 256 entries), of the groups read in
    /// place: the records of a group repaired from its mirror are counted in `records` only.
    /// For a caller sizing what replay will build.
    pub records_by_type: Vec<u64>,
    /// The first LSN in the log (`last_lsn + 1` when it holds no record).
    pub first_lsn: Lsn,
    /// The last LSN in the log (0 when nothing was ever written).
    pub last_lsn: Lsn,
    /// Bytes of the valid record frames scanned.
    pub bytes: u64,
    /// The torn tail cut off, if there was one.
    pub torn_tail: Option<TornTail>,
    /// Files removed: a torn roll's segment, prepared next segments never rolled into (all
    /// zero), leftover spares and copies.
    pub removed_files: Vec<String>,
    /// Groups repaired from their mirror (damaged records, intact mirror).
    pub repaired_groups: Vec<RepairedGroup>,
    /// Mirrors found damaged while their group was intact: ignored, and rewritten when the
    /// segment is copied.
    pub damaged_mirrors: u64,
    /// Segments copied into a fresh file: the last one unless a clean close left it or it was
    /// found durable as it is, and any that needed a repair.
    pub segments_copied: u64,
    /// Last segments that a clean close did not end but that needed no copy: no repair, no
    /// cut, and what nothing vouched for was found on the medium, as the cache shows it.
    pub segments_verified: u64,
    /// Wall time recovery took.
    pub elapsed: Duration,
}

impl RecoveryReport {
    /// Nothing found yet.
    pub(crate) fn empty() -> Self {
        RecoveryReport {
            segments: 0,
            records: 0,
            skipped_records: 0,
            records_by_type: vec![0; 256],
            first_lsn: 1,
            last_lsn: 0,
            bytes: 0,
            torn_tail: None,
            removed_files: Vec::new(),
            repaired_groups: Vec::new(),
            damaged_mirrors: 0,
            segments_copied: 0,
            segments_verified: 0,
            elapsed: Duration::ZERO,
        }
    }
}

/// A segment's scan made ahead of recovery's loop (see `scan_ahead`).
struct ScannedAhead {
    /// The header it was made under, read without the check against the previous segment:
    /// the loop reads the header itself, checks it, and uses the scan only under the same one.
    header: SegmentHeader,
    scan: Scan,
    /// What the scan counted (records, bytes, types, repaired groups, damaged mirrors).
    report: RecoveryReport,
}

/// Scans segment `id` from a handle of its own, ahead of recovery's loop: `None` if its
/// header does not check out (the loop finds out itself).
fn scan_ahead_of_loop<S: Storage>(
    storage: &S,
    id: u64,
    opts: &WalOptions,
    window: &mut Window,
) -> Result<Option<Box<ScannedAhead>>, Error> {
    let file = storage.open(&segment_file_name(id))?;
    window.reset();
    let Ok(header) = read_header(&file, id, None)? else {
        return Ok(None);
    };
    let mut report = RecoveryReport::empty();
    let scan = scan_segment(&file, &header, window, &mut report, opts, &mut None)?;
    Ok(Some(Box::new(ScannedAhead {
        header,
        scan,
        report,
    })))
}

impl RecoveryReport {
    /// Adds what a scan made ahead counted into its own report (see `scan_ahead`): the
    /// fields `scan_blocks` counts into, and no other.
    pub(crate) fn absorb_scan(&mut self, scan: RecoveryReport) {
        self.records += scan.records;
        self.skipped_records += scan.skipped_records;
        self.bytes += scan.bytes;
        self.damaged_mirrors += scan.damaged_mirrors;
        self.repaired_groups.extend(scan.repaired_groups);
        for (total, n) in self.records_by_type.iter_mut().zip(scan.records_by_type) {
            *total += n;
        }
    }
}

fn count_types(report: &mut RecoveryReport, types: &[u8]) {
    for &t in types {
        report.records_by_type[usize::from(t)] += 1;
    }
}

/// The segments in id order (the last is appended to), the next segment's file if one made
/// ahead of need was kept (all zero, by id), and the report.
pub(crate) type Recovered<F> = (Vec<Segment<F>>, Option<(u64, F)>, RecoveryReport);

/// Takes the records an open accepts while the open goes on ([`crate::Wal::open_following`]),
/// so that whoever rebuilds state from the log can start before the open has finished (the
/// engine replays them on another thread while recovery checks the rest).
///
/// What it is handed is a prefix of the opened log, in LSN order: each record of a commit
/// block that recovery accepted whole (every record's crc and the block's mirror checked),
/// except records of a later version's types marked skippable (which a reader skips too). At
/// the first block that recovery has to repair or can not check whole (damage, a repair from
/// a mirror, a damaged mirror), it stops handing records over for good; the follower reads on
/// from there with [`crate::Wal::iter_from`] once the open has returned. If the open fails,
/// nothing it handed over counts.
///
/// ```
/// use timewheel_wal::{Follow, MmapStorage, RecordRef, Wal, WalOptions};
///
/// /// Sums the bodies' lengths as the open accepts the records.
/// #[derive(Default)]
/// struct Sum {
///     bytes: usize,
///     last_lsn: u64,
/// }
///
/// impl Follow for Sum {
///     fn expect(&mut self, _records: u64) {}
///     fn record(&mut self, r: RecordRef<'_>) {
///         self.bytes += r.body.len();
///         self.last_lsn = r.lsn;
///     }
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let (wal, _) = Wal::open_dir(dir.path(), WalOptions::default())?;
/// wal.append_batch([(1, &b"schedule 7"[..]), (1, &b"schedule 8"[..])])?;
/// wal.close()?;
///
/// let mut sum = Sum::default();
/// let storage = MmapStorage::open_dir(dir.path())?;
/// let (wal, _) = Wal::open_following(storage, WalOptions::default(), &mut sum)?;
/// // Whatever the open did not hand over (here: nothing), read on after the last record.
/// for r in wal.iter_from(sum.last_lsn + 1) {
///     sum.bytes += r?.body.len();
/// }
/// assert_eq!(sum.bytes, 20);
/// # Ok(())
/// # }
/// ```
pub trait Follow {
    /// Called once, before any record: about how many records the log holds (exactly for
    /// its sealed segments, all but the last; for the last, as many as a sealed one holds on
    /// average), so that the follower can size what it builds once.
    fn expect(&mut self, records: u64);
    /// The next record.
    fn record(&mut self, record: crate::RecordRef<'_>);
}

/// The follower of an open, while it is still handed records (`None` once recovery met a
/// block it could not accept whole).
pub(crate) type Following<'f> = Option<&'f mut dyn Follow>;

/// Hands the records of the group `block_start .. block_start + group_bytes` (first LSN
/// `first_lsn`), just accepted, to the follower. The bytes are those the scan checked, still
/// held by the window; should the window no longer hold them all, following stops instead of
/// reading them again.
fn hand_over(
    window: &Window,
    follow: &mut Following<'_>,
    block_start: u64,
    group_bytes: u64,
    first_lsn: Lsn,
) {
    let Some(f) = follow.as_deref_mut() else {
        return;
    };
    let Some(group) = window.held(block_start, group_bytes as usize) else {
        *follow = None;
        return;
    };
    let (mut rel, mut lsn) = (0usize, first_lsn);
    while rel < group.len() {
        let h = decode_record_header(&group[rel..]);
        assert_eq!(h.lsn, lsn, "an accepted group holds its LSNs in order");
        if h.record_type <= RECORD_TYPE_USER_MAX {
            f.record(crate::RecordRef {
                lsn,
                record_type: h.record_type,
                flags: h.flags,
                body: &group[rel + RECORD_HEADER_BYTES..][..h.len as usize],
            });
        }
        rel += h.frame_bytes() as usize;
        lsn += 1;
    }
}

/// One commit block as recovery found it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    pub(crate) start: u64,
    pub(crate) group_bytes: u64,
    /// LSN of its last record.
    pub(crate) last_lsn: Lsn,
    /// Where a valid mirror of the group is, when the group itself is damaged.
    pub(crate) repair_from: Option<u64>,
    /// The block's mirror is missing or damaged (the copy writes a new one).
    pub(crate) mirror_bad: bool,
}

/// The outcome of scanning one segment.
pub(crate) struct Scan {
    /// The blocks with records, in order (the last may be a torn tail's surviving part).
    pub(crate) blocks: Vec<Block>,
    /// Where the next block starts (a clean close's marker, or after the last block).
    pub(crate) end: u64,
    /// LSN of the last valid record (`first_lsn - 1` if none).
    pub(crate) last_lsn: Lsn,
    /// A clean close's marker ended the segment (at `end`) with only zeros after it.
    pub(crate) closed: bool,
    /// Only zeros follow `end` (or `end` is the end of the file).
    pub(crate) zeros_after: bool,
    /// The highest LSN that a valid record of the segment vouches for (0: none).
    pub(crate) vouched: Lsn,
    /// The highest write bound named by the header or an accepted block's mirror: the log
    /// wrote nothing at or after it, so zeros are proved up to it only.
    pub(crate) write_bound: u64,
    /// The first damage that could not be repaired, as (offset, reason).
    pub(crate) damage: Option<(u64, CorruptionReason)>,
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
    mut follow: Following<'_>,
) -> Result<Recovered<S::File>, Error> {
    let started = Instant::now();
    let mut report = RecoveryReport::empty();
    let names = storage.list()?;
    for name in names
        .iter()
        .filter(|n| is_spare_file_name(n) || is_copy_file_name(n))
    {
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

    let mut window = Window::new(SCAN_CHUNK_BYTES);
    window.parallel = storage.parallel_reads();
    let reach = opts.write_reach();
    // A file with no valid header holds no block if this much of it is zero: the first
    // block of a segment that was ever started lies there, from the first page after the
    // header page, its records and its mirror in different sectors, so one damaged sector
    // can not make a started segment look unstarted. The rest of the file is not read.
    let unstarted_proof = FIRST_BLOCK_OFFSET + opts.block_span_max();
    // Files made ahead for segments the log never rolled into: all zero, header included.
    // They hold nothing (a roll writes the header before any record), and the segment before
    // them is the last one. The lowest of them, the file right after the last segment, is
    // kept: it becomes the destination of the last segment's copy, or else the next
    // segment's file again, so that the open neither makes nor prefaults a 64 MiB file. Any
    // others are removed, in every mode.
    let mut next_file: Option<(u64, S::File)> = None;
    let mut removed_next = false;
    while let Some(&id) = ids.last() {
        let name = segment_file_name(id);
        let file = storage.open(&name)?;
        window.reset();
        if !zeros_between(&file, &mut window, 0, unstarted_proof)? {
            break;
        }
        if let Some((higher, file)) = next_file.replace((id, file)) {
            drop(file);
            remove_never_started(storage, higher, &mut report)?;
            removed_next = true;
        }
        ids.pop();
    }
    // The kept file must be the one right after the last segment. A file made ahead for a
    // segment further on (a batch that needed several segments made them all first, then
    // failed and removed the lower ones, and a crash kept only some of those removals) holds
    // nothing either: it goes too, rather than be taken for a gap in the log.
    if let Some((id, file)) = next_file.take() {
        if ids.last().is_some_and(|&last| id == last + 1) {
            next_file = Some((id, file));
        } else {
            drop(file);
            remove_never_started(storage, id, &mut report)?;
            removed_next = true;
        }
    }
    // Gaps among the segments that hold something are damage (checked before anything
    // removed above is synced away, so a refused open still modifies only never-started
    // files).
    if let Some(w) = ids.windows(2).find(|w| w[1] != w[0] + 1) {
        let id = w[0] + 1;
        return Err(corrupted(id, 0, CorruptionReason::SegmentMissing { id }));
    }
    if removed_next {
        storage.sync_dir()?;
    }
    // A torn roll: the last file's header failed its crc (or the file is cut short) and only
    // zeros follow it. Decided before the segments are scanned, so that the segment before it,
    // the one appended to next, gets the last segment's treatment (found durable, or copied):
    // a roll syncs it before writing the header, but if the header is not a torn roll's after
    // all (damage that merely looks like one), its bytes may be in the cache only. For damage
    // it stays a sealed segment (refused, never cut). The file is removed once the segments
    // before it checked out (so a refused open modifies nothing).
    let mut torn_roll: Option<(String, CorruptionReason)> = None;
    if let Some(&id) = ids.last()
        && opts.recovery_mode == RecoveryMode::TolerateTornTail
        && (ids.len() >= 2 || id == 1)
    {
        let name = segment_file_name(id);
        let file = storage.open(&name)?;
        window.reset();
        // Only a header that failed its crc (or a file cut short) can be a torn write; a
        // crc-valid header with wrong contents is something else. Records are appended only
        // once the header is durable, so a torn roll holds nothing after it; anything there
        // (even bytes that no longer check out under the damaged header's salt) means the
        // header was damaged later.
        if let Err(
            reason @ (CorruptionReason::HeaderChecksum | CorruptionReason::FileTooSmall { .. }),
        ) = read_header(&file, id, None)?
            && zeros_between(
                &file,
                &mut window,
                SEGMENT_HEADER_BYTES as u64,
                unstarted_proof,
            )?
        {
            torn_roll = Some((name, reason));
            ids.pop();
        }
    }
    let mut segments: Vec<Segment<S::File>> = Vec::new();
    // Files replaced by their copy (already unlinked by the rename), to close at the end.
    let mut retired: Vec<S::File> = Vec::new();
    if let Some(f) = follow.as_deref_mut() {
        f.expect(expected_records(storage, &ids)?);
    }
    // The scans of the next segments, made ahead on a second thread (real files only), unless
    // a follower takes the records as they are accepted: it takes the second CPU then, and
    // scans made ahead hand it nothing.
    let ahead = (storage.parallel_reads() && ids.len() > 1 && follow.is_none()).then(|| {
        Ahead::new(ids.len(), SCAN_CHUNK_BYTES, |i, window: &mut Window| {
            scan_ahead_of_loop(storage, ids[i], opts, window)
        })
    });
    std::thread::scope(|scope| -> Result<(), Error> {
        let _stop = ahead.as_ref().map(|a| {
            scope.spawn(|| a.help());
            StopOnDrop(a)
        });
        for (i, &id) in ids.iter().enumerate() {
            // The segment appended to next; the last one for damage unless a torn roll follows.
            let appended_to = i + 1 == ids.len();
            let is_last = appended_to && torn_roll.is_none();
            let name = segment_file_name(id);
            let file = storage.open(&name)?;
            window.reset();
            let expected_first = segments.last().map(|s| s.last_lsn + 1);
            let header = match read_header(&file, id, expected_first)? {
                Ok(header) => header,
                Err(reason) => return Err(corrupted(id, 0, reason)),
            };
            let taken = match &ahead {
                Some(a) => a.take(i, &mut window),
                None => Taken::Free,
            };
            let mut scan = match taken {
                Taken::Ahead(Ok(Some(s))) if s.header == header => {
                    report.absorb_scan(s.report);
                    s.scan
                }
                // Nobody scanned it, its header read differently the first time, or the scan
                // ahead met an error (an I/O error on the helper's own handle): scanned here,
                // where a real error is met again and returned as a serial open returns it.
                _ => {
                    window.reset();
                    scan_segment(&file, &header, &mut window, &mut report, opts, &mut follow)?
                }
            };
            if let Some((offset, reason)) = scan.damage {
                let expected_lsn = scan.last_lsn + 1;
                if !is_last || opts.recovery_mode == RecoveryMode::Absolute {
                    tracing::error!(segment = id, offset, %reason, sealed = !is_last, "WAL damage refused");
                    return Err(corrupted(id, offset, reason));
                }
                let look = look_ahead(&file, header.salt, offset, Some(expected_lsn), &mut window)?;
                if let Some((voucher_offset, voucher_lsn)) = look.found {
                    tracing::error!(segment = id, offset, %reason, voucher_offset, voucher_lsn,
                    "WAL damage to acknowledged data: a later record vouches for it");
                    return Err(corrupted(id, offset, reason));
                }
                let bytes_zeroed = look.nonzero_end.saturating_sub(offset);
                tracing::warn!(segment = id, offset, expected_lsn, %reason, bytes_zeroed, "WAL torn tail cut");
                report.torn_tail = Some(TornTail {
                    segment: id,
                    offset,
                    expected_lsn,
                    reason,
                    bytes_zeroed,
                });
            }
            let repaired = scan
                .blocks
                .iter()
                .any(|b| b.repair_from.is_some() || b.mirror_bad);
            // The last segment is copied unless a clean close left it: its records may be only
            // in the page cache (a process crash after a failed sync), or cut, or unsealed. Also
            // when it holds no record: its header may be only in the page cache too (a roll whose
            // header sync failed, then a drop without a crash), and the records appended after
            // this open would then sit behind a header that a power cut turns to zeros.
            //
            // Unless what the copy is for is already true: a last segment that needs no repair and
            // no cut, with only zeros after its blocks, whose bytes that nothing vouches for are
            // found on the medium itself, byte for byte as the cache shows them, after a sync of
            // that range (see `on_medium`), is durable as it is and is kept, unwritten.
            let mut copy = repaired || (appended_to && !scan.closed);
            if copy && !repaired && scan.damage.is_none() && scan.zeros_after {
                let from = unvouched_from(&scan, header.first_lsn);
                if on_medium(&file, from, scan.end, id)? {
                    copy = false;
                    report.segments_verified += 1;
                }
            }
            // The segment appended to next needs a write bound a whole block past its end (see
            // `write_reach`); a log written with smaller records has a lower one, which only a
            // copy (a header naming a new bound) raises.
            if appended_to
                && scan.write_bound < write_bound_after(scan.end, reach, file.len_bytes())
            {
                copy = true;
            }
            let mut file = file;
            // The scan proved the appended-to segment zero from its end to its bound (or cut
            // what it found there); past the bound it read nothing. A sealed one is never
            // written again.
            let mut unchecked_from = if appended_to {
                scan.write_bound
            } else {
                file.len_bytes()
            };
            if copy {
                if scan.damage.is_some() {
                    // The surviving part of the torn block is sealed anew by the copy.
                    if let Some(last) = scan.blocks.last_mut() {
                        last.mirror_bad = true;
                    }
                }
                // The next segment's file, made ahead and all zero, is the copy's destination
                // when it fits: its blocks are allocated and (after a process crash) its pages still
                // cached, so the copy costs little more than its bytes.
                let spare = if appended_to {
                    next_file
                        .take_if(|(next, f)| *next == id + 1 && f.len_bytes() == file.len_bytes())
                } else {
                    None
                };
                let copied;
                (copied, unchecked_from) = copy_segment(
                    storage,
                    file,
                    (&header, reach),
                    &mut scan,
                    &mut window,
                    spare.map(|(_, f)| f),
                    &mut retired,
                )?;
                file = copied;
                report.segments_copied += 1;
            }
            segments.push(Segment {
                id,
                salt: header.salt,
                first_lsn: header.first_lsn,
                file_bytes: file.len_bytes(),
                end: scan.end,
                last_lsn: scan.last_lsn,
                write_bound: scan.write_bound,
                unchecked_from,
                file: file.into(),
            });
        }
        Ok(())
    })?;

    if let Some((name, reason)) = torn_roll {
        storage.remove(&name)?;
        storage.sync_dir()?;
        tracing::warn!(segment = ?parse_segment_file_name(&name), %reason,
            "WAL torn roll: removed a segment whose header never became durable");
        report.removed_files.push(name);
    }
    if segments.is_empty() {
        // A fresh directory, or a first segment whose creation never became durable.
        segments.push(install_segment(storage, 1, 1, (opts.segment_bytes, reach))?);
    }
    let last = segments.last().expect("at least one segment");
    // The file made ahead, if the copy did not take it and it still follows the last segment
    // (not after a torn roll) with the length appends expect, is the next segment's file.
    let next_file = match next_file {
        Some((id, file)) if id == last.id + 1 && file.len_bytes() == opts.segment_bytes => {
            Some((id, file))
        }
        Some((id, file)) => {
            drop(file);
            remove_never_started(storage, id, &mut report)?;
            None
        }
        None => None,
    };
    // The directory entries recovery relies on must be durable before anything vouches.
    storage.sync_dir()?;
    report.segments = segments.len() as u64;
    report.first_lsn = segments[0].first_lsn;
    report.last_lsn = last.last_lsn;
    release(storage, retired);
    report.elapsed = started.elapsed();
    Ok((segments, next_file, report))
}

/// About how many records segments `ids` hold (see [`Follow::expect`]): those before the
/// last, from the first LSNs the first and the last segment's headers name (0 if either does
/// not check out: the scan finds out), and for the last as many as a sealed one holds on
/// average (at most a segment's worth too many: only its scan knows them, and reading its
/// end to guess better would read bytes the open otherwise never reads, past its write
/// bound). Nothing for a log of one segment.
fn expected_records<S: Storage>(storage: &S, ids: &[u64]) -> Result<u64, Error> {
    let (Some(&first), Some(&last)) = (ids.first(), ids.last()) else {
        return Ok(0);
    };
    if first == last {
        return Ok(0);
    }
    let header = |id: u64| -> Result<Option<Lsn>, Error> {
        let file = storage.open(&segment_file_name(id))?;
        Ok(read_header(&file, id, None)?.ok().map(|h| h.first_lsn))
    };
    Ok(match (header(first)?, header(last)?) {
        (Some(a), Some(b)) => {
            let sealed = b.saturating_sub(a);
            sealed + sealed / (last - first)
        }
        _ => 0,
    })
}

/// Where the bytes of a scanned segment start that no record vouches for: the start of the
/// first block with a record after the highest LSN vouched for, or 0 (the header too) when
/// nothing in the segment is vouched for. Everything before it was acknowledged durable (a
/// sync covering it, and its mirror, returned success before the vouching record was written).
fn unvouched_from(scan: &Scan, first_lsn: Lsn) -> u64 {
    if scan.vouched < first_lsn {
        return 0;
    }
    scan.blocks
        .iter()
        .find(|b| b.last_lsn > scan.vouched)
        .map_or(scan.end, |b| b.start)
}

/// Whether bytes `from..to` of `file` (page aligned) are on the medium: syncs the range (its
/// dirty pages are written back, none of which a successful sync covered before: blocks start
/// on fresh pages), then reads it from the medium itself ([`StorageFile::read_durable`]) and
/// from the cache, and compares. A page a failed sync marked clean without writing it (Linux
/// does) differs, and so does anything the medium lost. `Ok(false)` when they differ or the
/// storage can not read the medium; a failed sync or read is an error, as in the copy.
fn on_medium<F: StorageFile>(file: &F, from: u64, to: u64, id: u64) -> Result<bool, Error> {
    if from >= to {
        return Ok(true);
    }
    file.sync_range(from, to - from)?;
    let chunk = (to - from).min(VERIFY_CHUNK_BYTES as u64) as usize;
    let (mut medium, mut cache) = (vec![0u8; chunk], vec![0u8; chunk]);
    let mut off = from;
    while off < to {
        let n = (to - off).min(chunk as u64) as usize;
        if !file.read_durable(off, &mut medium[..n])? {
            return Ok(false);
        }
        file.read_at(off, &mut cache[..n])?;
        if medium[..n] != cache[..n] {
            tracing::warn!(
                segment = id,
                offset = off,
                "WAL bytes in the cache are not on the medium (an earlier sync failed?): copying"
            );
            return Ok(false);
        }
        off += n as u64;
    }
    Ok(true)
}

/// Removes the file of segment `id`, made ahead and never rolled into (all zero).
fn remove_never_started<S: Storage>(
    storage: &S,
    id: u64,
    report: &mut RecoveryReport,
) -> Result<(), Error> {
    let name = segment_file_name(id);
    storage.remove(&name)?;
    tracing::debug!(
        segment = id,
        "WAL removed a prepared segment file never rolled into"
    );
    report.removed_files.push(name);
    Ok(())
}

/// Closes the files that recovery's copies replaced. Their names are gone already (renamed
/// over, directory synced), so closing them only frees the old inodes; on a real file system
/// that drops their page cache and frees their blocks, which for a 64 MiB segment takes tens
/// of milliseconds, so a storage that prepares segments in the background (real files) does
/// it on a short-lived thread instead of on the open path. The fault storage, which must stay
/// deterministic, closes them here.
pub(crate) fn release<S: Storage>(storage: &S, retired: Vec<S::File>) {
    if retired.is_empty() || !storage.prepare_in_background() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("timewheel-wal-release".to_owned())
        .spawn(move || drop(retired));
    if let Err(e) = spawned {
        // The closure (and the files) were dropped with the error: closed here after all.
        tracing::debug!(error = %e, "WAL closed replaced segment files inline");
    }
}

/// Reads and checks a segment header. The outer `Result` is I/O, the inner one the verdict.
pub(crate) fn read_header<F: StorageFile>(
    file: &F,
    id: u64,
    expected_first: Option<Lsn>,
) -> io::Result<Result<SegmentHeader, CorruptionReason>> {
    let file_bytes = file.len_bytes();
    if file_bytes < FIRST_BLOCK_OFFSET + RECORD_HEADER_BYTES as u64 {
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

/// What lies at an offset where a record may start.
pub(crate) enum Found {
    /// A crc-valid record (any type) with this header.
    Valid(RecordHeader),
    /// An all-zero header.
    Zero,
    /// Anything else, and why.
    Bad(CorruptionReason),
}

pub(crate) fn record_at<F: StorageFile>(
    file: &F,
    window: &mut Window,
    salt: u64,
    off: u64,
) -> io::Result<Found> {
    record_at_keeping(file, window, salt, off, off)
}

/// [`record_at`] for a scan that comes back to `keep` (`<= off`, its group's start): see
/// [`Window::get_keeping`].
fn record_at_keeping<F: StorageFile>(
    file: &F,
    window: &mut Window,
    salt: u64,
    keep: u64,
    off: u64,
) -> io::Result<Found> {
    let len = file.len_bytes();
    if off + RECORD_HEADER_BYTES as u64 > len {
        return Ok(Found::Bad(CorruptionReason::RecordLength { len: 0 }));
    }
    let h = decode_record_header(window.get_keeping(file, len, keep, off, RECORD_HEADER_BYTES)?);
    if h.is_zero() {
        return Ok(Found::Zero);
    }
    if let Err(reason) = check_record_header(&h, len - off) {
        return Ok(Found::Bad(reason));
    }
    let frame = window.get_keeping(file, len, keep, off, h.frame_bytes() as usize)?;
    Ok(match check_record_crc(&h, crc_seed(salt, off), frame) {
        Ok(()) => Found::Valid(h),
        Err(reason) => Found::Bad(reason),
    })
}

/// Whether a crc-valid mirror at `at` describes the block at `block_start` whose first LSN is
/// `first_lsn`, and its frames check out (every record valid at its place, LSNs in order).
/// Returns the group's prefix and bytes.
///
/// With `checked_group = Some(bytes)` the caller has already checked, record by record, the
/// `bytes` of records at `block_start` (LSNs from `first_lsn` on): then the copy must hold
/// exactly those bytes, and is compared with them instead of being checked frame by frame
/// again (equal bytes at the same place get the same verdict), so a good block costs one crc
/// pass over its group and one over its mirror.
fn mirror_at<F: StorageFile>(
    file: &F,
    window: &mut Window,
    salt: u64,
    at: u64,
    block_start: u64,
    first_lsn: Lsn,
    checked_group: Option<u64>,
) -> io::Result<Option<(MirrorPrefix, u64)>> {
    // With a checked group, the group is read again below, beside its mirror: kept.
    let keep = if checked_group.is_some() && block_start <= at {
        block_start
    } else {
        at
    };
    let Found::Valid(h) = record_at_keeping(file, window, salt, keep, at)? else {
        return Ok(None);
    };
    if h.record_type != RECORD_TYPE_MIRROR || (h.len as usize) <= MIRROR_PREFIX_BYTES {
        return Ok(None);
    }
    let len = file.len_bytes();
    let group_bytes = (h.len as usize - MIRROR_PREFIX_BYTES) as u64;
    if at < block_start || align_to(block_start + group_bytes, MIRROR_ALIGN) != at {
        return Ok(None);
    }
    if checked_group.is_some_and(|g| g != group_bytes) {
        return Ok(None);
    }
    // With a checked group, the group and its mirror in one piece (the mirror follows the
    // group within 512 bytes).
    let from = if checked_group.is_some() {
        block_start
    } else {
        at
    };
    let span = window.get(file, len, from, (at - from + h.frame_bytes()) as usize)?;
    let (group, frame) = span.split_at((at - from) as usize);
    let body = &frame[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + h.len as usize];
    let Some(prefix) = decode_mirror_prefix(body) else {
        return Ok(None);
    };
    let frames = &body[MIRROR_PREFIX_BYTES..];
    if prefix.group_start != block_start
        || prefix.first_lsn != first_lsn
        || prefix.count == 0
        || h.lsn != first_lsn + u64::from(prefix.count) - 1
    {
        return Ok(None);
    }
    if checked_group.is_some() {
        // `group` runs up to the mirror: the records, then the gap (never read).
        return Ok((group[..frames.len()] == *frames).then_some((prefix, group_bytes)));
    }
    // Every frame of the copy must be a valid record at its own place.
    let mut rel = 0usize;
    let mut lsn = first_lsn;
    while rel < frames.len() {
        if frames.len() - rel < RECORD_HEADER_BYTES {
            return Ok(None);
        }
        let r = decode_record_header(&frames[rel..]);
        if check_record_header(&r, (frames.len() - rel) as u64).is_err()
            || r.record_type > RECORD_TYPE_USER_MAX && r.flags & crate::format::FLAG_SKIPPABLE == 0
            || r.record_type == RECORD_TYPE_MIRROR
            || r.record_type == RECORD_TYPE_CLOSE
            || r.lsn != lsn
        {
            return Ok(None);
        }
        let f = &frames[rel..rel + r.frame_bytes() as usize];
        if check_record_crc(&r, crc_seed(salt, block_start + rel as u64), f).is_err() {
            return Ok(None);
        }
        rel += f.len();
        lsn += 1;
    }
    if lsn - first_lsn != u64::from(prefix.count) {
        return Ok(None);
    }
    Ok(Some((prefix, group_bytes)))
}

/// Scans the blocks of one segment until its end, a clean close's marker, or the first
/// damage that its mirror can not repair.
pub(crate) fn scan_segment<F: StorageFile>(
    file: &F,
    header: &SegmentHeader,
    window: &mut Window,
    report: &mut RecoveryReport,
    opts: &WalOptions,
    follow: &mut Following<'_>,
) -> Result<Scan, Error> {
    scan_blocks(
        file,
        header,
        (FIRST_BLOCK_OFFSET, header.first_lsn),
        window,
        (report, follow),
        opts,
    )
}

/// Like [`scan_segment`], from the block at `from` (page aligned), whose first record must
/// have LSN `first_lsn`: an operator's repair reads on past damage this way. The records of
/// each block accepted whole go to the follower, if any (see [`Follow`]).
pub(crate) fn scan_blocks<F: StorageFile>(
    file: &F,
    header: &SegmentHeader,
    (from, first_lsn): (u64, Lsn),
    window: &mut Window,
    (report, follow): (&mut RecoveryReport, &mut Following<'_>),
    opts: &WalOptions,
) -> Result<Scan, Error> {
    let len = file.len_bytes();
    let salt = header.salt;
    let id = header.segment_id;
    let mut scan = Scan {
        blocks: Vec::new(),
        end: from,
        last_lsn: first_lsn - 1,
        closed: false,
        zeros_after: false,
        vouched: 0,
        write_bound: header.write_bound.min(len),
        damage: None,
    };
    let mut b = from;
    let mut lsn = first_lsn;
    // The types of the current group's records, counted once the group is accepted.
    let mut types: Vec<u8> = Vec::new();
    while b < len {
        scan.end = b;
        // The group's records.
        let first = lsn;
        let mut o = b;
        let (mut records, mut skipped, mut bytes) = (0u64, 0u64, 0u64);
        types.clear();
        // The loop found the group's valid mirror right after its last record.
        let mut mirror_ok = false;
        // The write bound that mirror names.
        let mut mirror_bound = 0;
        let stop = loop {
            // The group may end here, its mirror at the next sector boundary (the gap is never
            // read: it may be shorter than a record header, or damaged).
            if o > b && !o.is_multiple_of(MIRROR_ALIGN) {
                let m = align_to(o, MIRROR_ALIGN);
                if m + RECORD_HEADER_BYTES as u64 <= len {
                    let mh = decode_record_header(window.get_keeping(
                        file,
                        len,
                        b,
                        m,
                        RECORD_HEADER_BYTES,
                    )?);
                    if mh.record_type == RECORD_TYPE_MIRROR
                        && u64::from(mh.len) == MIRROR_PREFIX_BYTES as u64 + (o - b)
                        && let Some((p, _)) =
                            mirror_at(file, window, salt, m, b, first, Some(o - b))?
                        && u64::from(p.count) == lsn - first
                    {
                        mirror_ok = true;
                        mirror_bound = p.write_bound;
                        break None;
                    }
                }
            }
            match record_at_keeping(file, window, salt, b, o)? {
                Found::Zero => break None,
                Found::Bad(reason) => break Some(reason),
                Found::Valid(h)
                    if h.record_type == RECORD_TYPE_MIRROR
                        || h.record_type == RECORD_TYPE_CLOSE =>
                {
                    break None;
                }
                Found::Valid(h) if h.lsn != lsn => {
                    break Some(CorruptionReason::RecordLsn {
                        expected: lsn,
                        found: h.lsn,
                    });
                }
                Found::Valid(h) => {
                    match record_disposition(&h) {
                        Ok(true) => {}
                        Ok(false) => skipped += 1,
                        // A valid record this version can not read: not damage, but not to be
                        // cut either.
                        Err(reason) => return Err(corrupted(id, o, reason)),
                    }
                    records += 1;
                    types.push(h.record_type);
                    bytes += h.frame_bytes();
                    scan.vouched = scan.vouched.max(h.vouched_lsn());
                    o += h.frame_bytes();
                    lsn += 1;
                }
            }
        };
        let count = lsn - first;
        if stop.is_none() {
            if count == 0 {
                // A clean close's marker, or the end of the records.
                if let Found::Valid(h) = record_at(file, window, salt, b)?
                    && h.record_type == RECORD_TYPE_CLOSE
                    && h.len == 0
                    && h.lsn == lsn - 1
                {
                    scan.closed =
                        zeros_between(file, window, b + h.frame_bytes(), scan.write_bound)?;
                    break;
                }
                if zeros_between(file, window, b, scan.write_bound)? {
                    scan.zeros_after = true;
                    break;
                }
            } else if mirror_ok || {
                let found = mirror_at(
                    file,
                    window,
                    salt,
                    align_to(o, MIRROR_ALIGN),
                    b,
                    first,
                    Some(o - b),
                )?;
                match found {
                    Some((p, g)) if u64::from(p.count) == count && g == o - b => {
                        mirror_bound = p.write_bound;
                        true
                    }
                    _ => false,
                }
            } {
                scan.write_bound = scan.write_bound.max(mirror_bound.min(len));
                report.records += records;
                count_types(report, &types);
                report.skipped_records += skipped;
                report.bytes += bytes;
                scan.blocks.push(Block {
                    start: b,
                    group_bytes: o - b,
                    last_lsn: lsn - 1,
                    repair_from: None,
                    mirror_bad: false,
                });
                hand_over(window, follow, b, o - b, first);
                scan.last_lsn = lsn - 1;
                b = next_block(sealed_end(b, o - b));
                continue;
            }
        }
        let reason = stop.unwrap_or(if count == 0 {
            CorruptionReason::GarbageAfterEnd
        } else {
            CorruptionReason::Mirror
        });
        // Whatever follows, this block is not accepted whole: the follower reads on from
        // here once the open is done.
        *follow = None;
        // A valid mirror of this block repairs it: the group's records are damaged.
        if let Some((m, prefix, group_bytes)) = find_mirror(file, window, salt, b, first, o)? {
            if opts.recovery_mode == RecoveryMode::Absolute {
                return Err(corrupted(id, o, reason));
            }
            tracing::warn!(segment = id, offset = b, damage_offset = o, %reason, first_lsn = first,
                records = prefix.count, "WAL group repaired from its mirror");
            report.repaired_groups.push(RepairedGroup {
                segment: id,
                offset: b,
                damage_offset: o,
                reason,
                first_lsn: first,
                records: prefix.count,
            });
            report.records += u64::from(prefix.count);
            report.bytes += group_bytes;
            scan.write_bound = scan.write_bound.max(prefix.write_bound.min(len));
            scan.blocks.push(Block {
                start: b,
                group_bytes,
                last_lsn: first + u64::from(prefix.count) - 1,
                repair_from: Some(m),
                mirror_bad: false,
            });
            lsn = first + u64::from(prefix.count);
            scan.last_lsn = lsn - 1;
            b = next_block(sealed_end(b, group_bytes));
            continue;
        }
        // The group looks whole and only its mirror is damaged, if what follows confirms
        // where it ended: the next block goes on with the next LSN, or a sealed segment ends
        // there (the next segment's header then names the next LSN).
        if count > 0 && opts.recovery_mode != RecoveryMode::Absolute {
            let next = next_block(sealed_end(b, o - b));
            let confirmed = if next < len {
                match record_at(file, window, salt, next)? {
                    Found::Valid(h) if h.record_type <= RECORD_TYPE_USER_MAX => h.lsn == lsn,
                    Found::Valid(h) if h.record_type == RECORD_TYPE_CLOSE => h.lsn == lsn - 1,
                    _ => false,
                }
            } else {
                false
            };
            if confirmed {
                tracing::warn!(segment = id, offset = align_to(o, MIRROR_ALIGN), %reason,
                    "WAL damaged mirror of an intact group ignored");
                report.damaged_mirrors += 1;
                report.records += records;
                count_types(report, &types);
                report.skipped_records += skipped;
                report.bytes += bytes;
                scan.blocks.push(Block {
                    start: b,
                    group_bytes: o - b,
                    last_lsn: lsn - 1,
                    repair_from: None,
                    mirror_bad: true,
                });
                scan.last_lsn = lsn - 1;
                b = next;
                continue;
            }
        }
        // Damage. The records before it in this block survive a cut.
        report.records += records;
        count_types(report, &types);
        report.skipped_records += skipped;
        report.bytes += bytes;
        if count > 0 {
            scan.blocks.push(Block {
                start: b,
                group_bytes: o - b,
                last_lsn: lsn - 1,
                repair_from: None,
                mirror_bad: true,
            });
        }
        scan.last_lsn = lsn - 1;
        scan.damage = Some((o, reason));
        return Ok(scan);
    }
    scan.end = b.min(len);
    scan.zeros_after |= b >= len;
    Ok(scan)
}

/// Looks for a valid mirror of the block at `block_start` (first LSN `first_lsn`) at every
/// sector boundary from `from` to the end of the file; returns its offset, prefix and bytes.
fn find_mirror<F: StorageFile>(
    file: &F,
    window: &mut Window,
    salt: u64,
    block_start: u64,
    first_lsn: Lsn,
    from: u64,
) -> io::Result<Option<(u64, MirrorPrefix, u64)>> {
    let len = file.len_bytes();
    let mut at = align_to(from.max(block_start + 1), MIRROR_ALIGN);
    while at + RECORD_HEADER_BYTES as u64 <= len {
        let h = decode_record_header(window.get(file, len, at, RECORD_HEADER_BYTES)?);
        if h.record_type == RECORD_TYPE_MIRROR
            && let Some((prefix, bytes)) =
                mirror_at(file, window, salt, at, block_start, first_lsn, None)?
        {
            return Ok(Some((at, prefix, bytes)));
        }
        at += MIRROR_ALIGN;
    }
    Ok(None)
}

/// Writes segment `id` anew into a fresh file: its header, every block of `scan` (good blocks
/// byte for byte with their mirror, repaired groups from their mirror, the others with a new
/// mirror), nothing after; syncs it and renames it over the segment. The fresh file is
/// `spare` (the all-zero file made ahead for segment `id + 1`, renamed to the copy's name
/// first) or else a new one. Returns the new file and where its bytes start that nothing
/// proved zero (past the bound its header names, in the spare; nowhere in a new file); the
/// replaced one goes to `retired`, and `scan.end` becomes the next block.
pub(crate) fn copy_segment<S: Storage>(
    storage: &S,
    old: S::File,
    (header, reach): (&SegmentHeader, u64),
    scan: &mut Scan,
    window: &mut Window,
    spare: Option<S::File>,
    retired: &mut Vec<S::File>,
) -> Result<(S::File, u64), Error> {
    let len = old.len_bytes();
    let (id, salt) = (header.segment_id, header.salt);
    let name = copy_file_name(id);
    let from_spare = spare.is_some();
    let new = match spare {
        Some(file) => {
            storage.rename(&segment_file_name(id + 1), &name)?;
            // Durable before anything is written into it: a crash must never leave segment
            // `id`'s copy under the name of segment `id + 1`.
            storage.sync_dir()?;
            file
        }
        None => storage
            .create(&name, len)
            .map_err(|e| create_error(id, e))?,
    };
    let result = (|| -> Result<u64, Error> {
        let mut end = FIRST_BLOCK_OFFSET;
        let mut frames = Vec::new();
        let mut mirror = Vec::new();
        for block in &scan.blocks {
            let mirror_end = sealed_end(block.start, block.group_bytes);
            if block.repair_from.is_none() && !block.mirror_bad {
                // A good block with its good mirror: copied as it is (same salt, same place),
                // with no crc to compute again.
                frames.resize((mirror_end - block.start) as usize, 0);
                old.read_at(block.start, &mut frames)?;
                new.write_at(block.start, &frames)?;
                end = next_block(mirror_end);
                continue;
            }
            let source = match block.repair_from {
                Some(m) => m + (RECORD_HEADER_BYTES + MIRROR_PREFIX_BYTES) as u64,
                None => block.start,
            };
            frames.resize(block.group_bytes as usize, 0);
            old.read_at(source, &mut frames)?;
            new.write_at(block.start, &frames)?;
            let first_lsn = decode_record_header(&frames).lsn;
            let mut count = 0u32;
            let mut rel = 0usize;
            while rel < frames.len() {
                rel += decode_record_header(&frames[rel..]).frame_bytes() as usize;
                count += 1;
            }
            let at = align_to(block.start + block.group_bytes, MIRROR_ALIGN);
            mirror.clear();
            let prefix = MirrorPrefix {
                group_start: block.start,
                first_lsn,
                count,
                write_bound: write_bound_after(next_block(mirror_end), reach, len),
            };
            encode_mirror(&mut mirror, salt, at, prefix, &frames);
            debug_assert_eq!(at + mirror.len() as u64, mirror_end);
            new.write_at(at, &mirror)?;
            end = next_block(mirror_end);
        }
        // The header (the old one's fields, this version's format) names a bound a whole
        // block past the copy's end, whatever the old one named.
        let fresh = SegmentHeader {
            write_bound: write_bound_after(end, reach, len),
            ..*header
        };
        // Appends go up to that bound without waiting: in the spare, whose bytes past what
        // recovery read of it no one has seen, they are proven zero first.
        if from_spare {
            let stray = zero_stray(&new, end, fresh.write_bound)?;
            if stray > 0 {
                tracing::warn!(
                    segment = id,
                    from = end,
                    to = fresh.write_bound,
                    stray,
                    "WAL zeroed stray bytes in the file made ahead"
                );
            }
        }
        new.write_at(0, &encode_header(&fresh))?;
        new.sync_range(0, end.min(len))?;
        storage.rename(&name, &segment_file_name(id))?;
        storage.sync_dir()?;
        Ok(end)
    })();
    window.reset();
    match result {
        Ok(end) => {
            retired.push(old);
            tracing::info!(
                segment = id,
                bytes = end,
                "WAL segment rewritten into a fresh file"
            );
            scan.end = end;
            scan.write_bound = write_bound_after(end, reach, len);
            let unchecked_from = if from_spare { scan.write_bound } else { len };
            Ok((new, unchecked_from))
        }
        Err(e) => {
            drop(new);
            let _ = storage.remove(&name);
            Err(e)
        }
    }
}

/// Whether every byte of `file` from `off` to its end is zero. Recovery runs this over most
/// of a segment (the unused part of the last one, a file made ahead), so it reads in chunks
/// that stay in the CPU's cache, and, when `window.parallel` allows, checks the second half on
/// a second thread.
pub(crate) fn rest_is_zero<F: StorageFile>(
    file: &F,
    window: &mut Window,
    off: u64,
) -> io::Result<bool> {
    zeros_between(file, window, off, u64::MAX)
}

/// Whether every byte of `file` from `off` up to `to` (or its end, if sooner) is zero: the
/// zero checks that a write bound limits.
pub(crate) fn zeros_between<F: StorageFile>(
    file: &F,
    window: &mut Window,
    off: u64,
    to: u64,
) -> io::Result<bool> {
    let len = file.len_bytes().min(to);
    if off >= len {
        return Ok(true);
    }
    if !window.parallel || len - off < 2 * PARALLEL_ZERO_CHECK_MIN_BYTES {
        return zeros_in(file, off, len, &AtomicBool::new(false));
    }
    let mid = align_to(off + (len - off) / 2, BLOCK_ALIGN);
    let nonzero = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let second = scope.spawn(|| zeros_in(file, mid, len, &nonzero));
        let first = zeros_in(file, off, mid, &nonzero);
        let second = second.join().expect("a WAL zero check panicked");
        Ok(first? && second?)
    })
}

/// Whether bytes `from..to` of `file` are all zero; gives up early (with a meaningless
/// answer) once `nonzero` is set by another part of the same check, and sets it on a find.
fn zeros_in<F: StorageFile>(
    file: &F,
    from: u64,
    to: u64,
    nonzero: &AtomicBool,
) -> io::Result<bool> {
    let mut buf = vec![0u8; (to - from).min(ZERO_CHECK_CHUNK_BYTES as u64) as usize];
    let mut off = from;
    while off < to {
        if nonzero.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let n = (to - off).min(buf.len() as u64) as usize;
        file.read_at(off, &mut buf[..n])?;
        if !all_zero(&buf[..n]) {
            nonzero.store(true, Ordering::Relaxed);
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
