//! Cutting the log at a record boundary: the log's part of an operator's repair.
//!
//! Recovery never cuts acknowledged data: damage that a mirror can not repair and that is not
//! a torn tail refuses the open with [`Error::Corrupted`]. An operator who decides to give up
//! everything from some record on (after a verify, with a backup) asks for a cut instead:
//!
//! - [`plan_cut`] scans the log as recovery does (headers, commit blocks, mirrors, LSN
//!   sequence), without changing anything, up to the first damage no mirror repairs, and says
//!   what a cut at `SEGMENT:OFFSET` would remove, or why it refuses: the offset is not where a
//!   record starts, it lies past the damage (the log can not be read there, so the damage would
//!   stay) or past the end of the log, or it would leave no segment at all.
//! - [`cut`] makes a planned cut: it removes the later segment files (highest first, the
//!   directory synced after each, so a crash leaves a shorter run of segments, never a gap),
//!   then writes the kept part of the cut segment into a fresh file the way recovery copies a
//!   segment (header and kept blocks byte for byte, a block cut between two of its records
//!   sealed with a new mirror), syncs it and renames it over the segment, and syncs the
//!   directory. No synced page is written in place, so a power cut during the cut leaves the
//!   old segment or the new one; the zeros after the new one's last block end the log.
//!
//! Both work on a storage whose lock the caller holds ([`Storage::try_lock`]), the engine's
//! lock, so no engine has the directory open meanwhile. Backing up what is cut is the
//! caller's part: [`CutPlan::files`] names the files it touches.

use std::collections::BTreeSet;
use std::fmt;
use std::io;

use crate::Lsn;
use crate::error::{CorruptionReason, Error};
use crate::format::{
    BLOCK_ALIGN, FIRST_BLOCK_OFFSET, MIRROR_PREFIX_BYTES, RECORD_HEADER_BYTES,
    RECORD_TYPE_USER_MAX, SEGMENT_HEADER_BYTES, SegmentHeader, align_to, decode_record_header,
    raw_header_salt,
};
use crate::options::WalOptions;
use crate::recovery::{
    Block, Found, RecoveryReport, SCAN_CHUNK_BYTES, Scan, copy_segment, read_header, record_at,
    release, rest_is_zero, scan_blocks, scan_segment,
};
use crate::segment::{Window, copy_file_name, parse_segment_file_name, segment_file_name};
use crate::storage::{Storage, StorageFile};

/// A place in the log: a segment (its id, the number in its file name) and a byte offset in
/// its file. `verify` names damage this way; written `SEGMENT:OFFSET`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CutPoint {
    /// The segment id.
    pub segment: u64,
    /// The byte offset in its file.
    pub offset: u64,
}

impl fmt::Display for CutPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.segment, self.offset)
    }
}

/// The first damage in the log that no mirror repairs: the log can not be read past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Damage {
    /// The segment.
    pub segment: u64,
    /// Where in it the damage starts (0: the header, or the segment is missing).
    pub offset: u64,
    /// What is wrong there.
    pub reason: CorruptionReason,
}

impl Damage {
    /// Where the damage is.
    pub fn at(&self) -> CutPoint {
        CutPoint {
            segment: self.segment,
            offset: self.offset,
        }
    }
}

/// One segment of the log as the scan read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSpan {
    /// Its id.
    pub id: u64,
    /// The LSN of its first record.
    pub first_lsn: Lsn,
    /// The LSN of its last valid record (`first_lsn - 1` when it holds none).
    pub last_lsn: Lsn,
    /// Where its valid records end: the next block's offset, or the damage's.
    pub end: u64,
}

/// What the scan found, whatever the verdict on the cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Survey {
    /// The segments read (a valid header), in order, up to and including the damaged one.
    pub segments: Vec<SegmentSpan>,
    /// The first LSN of the log (1 when it holds no segment).
    pub first_lsn: Lsn,
    /// The last LSN read in sequence: up to the damage, or the end of the log.
    pub last_lsn: Lsn,
    /// The first damage that no mirror repairs (a torn tail included: recovery would cut it).
    pub damage: Option<Damage>,
    /// Where the records read in sequence end (the damage, or the end of the last segment);
    /// `None` when the directory holds no segment.
    pub end: Option<CutPoint>,
    /// The LSNs the caller asked [`plan_cut`] to locate, with where their record starts (or,
    /// for the LSN after the last one read, where the log ends). Only those found.
    pub located: Vec<(Lsn, CutPoint)>,
}

/// Why a cut is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// No segment of the log has this id (it is before the first, or the directory holds
    /// no segment).
    NoSuchSegment {
        /// The segment asked for.
        segment: u64,
    },
    /// Offset 0 of the log's first segment: no segment would be left, and the log's LSNs
    /// would start again at 1. Cut at offset 4096 instead (the header stays, no record).
    WholeLog {
        /// The first segment.
        segment: u64,
    },
    /// Past the first damage: the log can not be read there, so a cut there would keep the
    /// damage. Cut at the damage or before it.
    BeyondDamage(Damage),
    /// Past the end of the log.
    BeyondEnd {
        /// Where the log ends.
        end: CutPoint,
    },
    /// Not an offset where a record starts (nor where the segment's valid records end).
    NotABoundary {
        /// The nearest boundary before it, if any.
        before: Option<u64>,
        /// The nearest boundary after it in the same segment, if any.
        after: Option<u64>,
    },
    /// The segment holds a record of a type this version does not know (written by a newer
    /// version?) before the offset, so its boundaries are not known; only the whole segment
    /// can be cut (`SEGMENT:0`).
    Unscannable(Damage),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NoSuchSegment { segment } => {
                write!(f, "the log has no segment {segment}")
            }
            Refusal::WholeLog { segment } => write!(
                f,
                "offset 0 of segment {segment}, the log's first, would leave no segment and \
                 start the log's numbering again; cut at {segment}:{FIRST_BLOCK_OFFSET} to keep \
                 its header and no record"
            ),
            Refusal::BeyondDamage(d) => write!(
                f,
                "the log is damaged at {} ({}), before the cut: it can not be read past there, \
                 so that cut would keep the damage; cut at {} or before",
                d.at(),
                d.reason,
                d.at()
            ),
            Refusal::BeyondEnd { end } => {
                write!(f, "past the end of the log, which ends at {end}")
            }
            Refusal::NotABoundary { before, after } => {
                write!(f, "not where a record starts")?;
                match (before, after) {
                    (Some(b), Some(a)) => write!(f, "; the nearest boundaries are {b} and {a}"),
                    (Some(b), None) => write!(f, "; the nearest boundary before it is {b}"),
                    (None, Some(a)) => write!(f, "; the first boundary after it is {a}"),
                    (None, None) => Ok(()),
                }
            }
            Refusal::Unscannable(d) => write!(
                f,
                "segment {} holds a record of a type this version does not know at offset {} \
                 ({}), so where its records start is not known; only the whole segment can be \
                 cut ({}:0)",
                d.segment, d.offset, d.reason, d.segment
            ),
        }
    }
}

impl std::error::Error for Refusal {}

/// Bytes that a cut removes and that could not be read as records: from a damage to the last
/// non-zero byte of its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreadable {
    /// The segment.
    pub segment: u64,
    /// Where the unreadable bytes start.
    pub offset: u64,
    /// How many, up to the last non-zero byte of the file.
    pub bytes: u64,
    /// Why they could not be read.
    pub reason: CorruptionReason,
}

/// What a cut would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutPlan {
    /// Where.
    pub at: CutPoint,
    /// The LSN the record at the cut had, the first one cut (the next append gets it): every
    /// record from the log's first LSN to this one minus one is kept.
    pub first_lsn_cut: Lsn,
    /// Records cut that could be read (valid and in sequence in their segment), each of which
    /// [`CutObserver::record`] saw.
    pub records: u64,
    /// The highest LSN among them (`first_lsn_cut - 1` when there is none).
    pub last_lsn_cut: Lsn,
    /// What is cut that could not be read as records.
    pub unreadable: Vec<Unreadable>,
    /// The segment file written anew without what is cut (`None` when the cut is at offset
    /// 0, or only zeros follow the cut in it and nothing before it needs a repair).
    pub rewritten: Option<String>,
    /// The files removed whole, in id order: the later segments, and the cut segment itself
    /// when the cut is at offset 0 (not the files made ahead of need, all zero, which hold
    /// nothing: recovery removes them or keeps one as the next segment's file).
    pub removed: Vec<String>,
    /// The cut is at the end of the log: nothing would change.
    pub nothing_to_do: bool,
}

impl CutPlan {
    /// Every file the cut changes or removes: what a backup must hold.
    pub fn files(&self) -> Vec<String> {
        self.rewritten
            .iter()
            .chain(&self.removed)
            .cloned()
            .collect()
    }
}

/// A record that a cut removes, as [`plan_cut`] read it.
#[derive(Debug, Clone, Copy)]
pub struct CutRecord<'a> {
    /// Where it is.
    pub at: CutPoint,
    /// Its LSN.
    pub lsn: Lsn,
    /// Its type (a user type, `1..=0xEF`).
    pub record_type: u8,
    /// Its body.
    pub body: &'a [u8],
}

/// What [`plan_cut`] reports while it scans.
pub trait CutObserver {
    /// About to read segment file `done + 1` of `total`.
    fn scanning(&mut self, done: usize, total: usize) {
        let _ = (done, total);
    }

    /// A record the cut would remove (user types only; records of unknown types marked
    /// skippable are counted but not shown). Only meaningful when the plan is not refused.
    fn record(&mut self, record: &CutRecord<'_>) {
        let _ = record;
    }
}

impl CutObserver for () {}

/// How the cut resolved in its segment.
#[derive(Debug, Default)]
struct Boundaries {
    exact: Option<Lsn>,
    before: Option<u64>,
    after: Option<u64>,
}

impl Boundaries {
    fn see(&mut self, target: u64, offset: u64, lsn: Lsn) {
        if offset == target {
            self.exact = Some(lsn);
        } else if offset < target {
            self.before = Some(self.before.map_or(offset, |b| b.max(offset)));
        } else {
            self.after = Some(self.after.map_or(offset, |a| a.min(offset)));
        }
    }
}

/// The group's frames of a scanned block: from the block itself, or from its mirror when it
/// was repaired from it.
fn group_frames<F: StorageFile>(file: &F, block: &Block) -> io::Result<Vec<u8>> {
    let source = match block.repair_from {
        Some(m) => m + (RECORD_HEADER_BYTES + MIRROR_PREFIX_BYTES) as u64,
        None => block.start,
    };
    let mut frames = vec![0u8; block.group_bytes as usize];
    file.read_at(source, &mut frames)?;
    Ok(frames)
}

/// Calls `each(offset, lsn, record_type, body)` for every record of the scanned blocks.
fn for_each_record<F: StorageFile>(
    file: &F,
    blocks: &[Block],
    mut each: impl FnMut(u64, Lsn, u8, &[u8]),
) -> io::Result<()> {
    for block in blocks {
        let frames = group_frames(file, block)?;
        let mut rel = 0usize;
        while rel < frames.len() {
            let h = decode_record_header(&frames[rel..]);
            let body =
                &frames[rel + RECORD_HEADER_BYTES..rel + RECORD_HEADER_BYTES + h.len as usize];
            each(block.start + rel as u64, h.lsn, h.record_type, body);
            rel += h.frame_bytes() as usize;
        }
    }
    Ok(())
}

/// Offset just past the last non-zero byte of `file` at or after `from` (`from` if none).
fn nonzero_end<F: StorageFile>(file: &F, from: u64) -> io::Result<u64> {
    let len = file.len_bytes();
    let mut buf = vec![0u8; (len.saturating_sub(from)).min(SCAN_CHUNK_BYTES as u64) as usize];
    let mut end = from;
    let mut off = from;
    while off < len {
        let n = (len - off).min(buf.len() as u64) as usize;
        file.read_at(off, &mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b != 0) {
            end = off + i as u64 + 1;
        }
        off += n as u64;
    }
    Ok(end)
}

/// Scans a segment's blocks; a valid record of an unknown type (recovery's `Corrupted`) is
/// returned as its place instead, with no blocks.
fn scan<F: StorageFile>(
    file: &F,
    header: &SegmentHeader,
    window: &mut Window,
) -> Result<Result<Scan, (u64, CorruptionReason)>, Error> {
    scan_from(file, header, (FIRST_BLOCK_OFFSET, header.first_lsn), window)
}

fn scan_from<F: StorageFile>(
    file: &F,
    header: &SegmentHeader,
    from: (u64, Lsn),
    window: &mut Window,
) -> Result<Result<Scan, (u64, CorruptionReason)>, Error> {
    let opts = WalOptions::default();
    let scanned = if from.0 == FIRST_BLOCK_OFFSET && from.1 == header.first_lsn {
        scan_segment(
            file,
            header,
            window,
            &mut RecoveryReport::empty(),
            &opts,
            &mut None,
        )
    } else {
        scan_blocks(
            file,
            header,
            from,
            window,
            (&mut RecoveryReport::empty(), &mut None),
            &opts,
        )
    };
    match scanned {
        Ok(scan) => Ok(Ok(scan)),
        Err(Error::Corrupted { offset, reason, .. }) => Ok(Err((offset, reason))),
        Err(e) => Err(e),
    }
}

/// Reads on past damage at `from` in segment `id`: at each later block boundary where a valid
/// user record starts (valid under the segment's salt at its own place, so written there in
/// this incarnation of the file; at most [`WalOptions::RECORD_BYTES_MAX_DEFAULT`] long), the
/// blocks are scanned again from it, and `visit` sees the blocks
/// read. Returns the stretches that could not be read: from each damage to where reading
/// resumed, or to the last non-zero byte of the file.
fn read_past_damage<F: StorageFile>(
    file: &F,
    header: &SegmentHeader,
    window: &mut Window,
    (mut from, mut reason): (u64, CorruptionReason),
    mut visit: impl FnMut(&[Block]) -> io::Result<()>,
) -> Result<Vec<Unreadable>, Error> {
    let id = header.segment_id;
    let len = file.len_bytes();
    let mut stretches = Vec::new();
    loop {
        let mut at = align_to(from + 1, BLOCK_ALIGN).max(FIRST_BLOCK_OFFSET);
        let mut resumed = None;
        while at + RECORD_HEADER_BYTES as u64 <= len {
            // A cheap look at the header first: on garbage, only a plausible one costs a crc
            // over its frame.
            let h = decode_record_header(window.get(file, len, at, RECORD_HEADER_BYTES)?);
            let plausible = (1..=RECORD_TYPE_USER_MAX).contains(&h.record_type)
                && h.len <= WalOptions::RECORD_BYTES_MAX_DEFAULT
                && h.lsn != 0;
            if plausible && let Found::Valid(h) = record_at(file, window, header.salt, at)? {
                resumed = Some((at, h.lsn));
                break;
            }
            at += BLOCK_ALIGN;
        }
        let Some((at, lsn)) = resumed else {
            let end = nonzero_end(file, from)?;
            if end > from {
                stretches.push(Unreadable {
                    segment: id,
                    offset: from,
                    bytes: end - from,
                    reason,
                });
            }
            return Ok(stretches);
        };
        stretches.push(Unreadable {
            segment: id,
            offset: from,
            bytes: at - from,
            reason,
        });
        match scan_from(file, header, (at, lsn), window)? {
            Ok(scan) => {
                visit(&scan.blocks)?;
                match scan.damage {
                    Some(damage) => (from, reason) = damage,
                    None => return Ok(stretches),
                }
            }
            Err(damage) => (from, reason) = damage,
        }
    }
}

/// The header of segment `id` as far as it can be read when it is damaged: its salt, so that
/// the records after it can still be checked.
fn damaged_header<F: StorageFile>(file: &F, id: u64) -> io::Result<SegmentHeader> {
    let mut raw = [0u8; SEGMENT_HEADER_BYTES];
    if file.len_bytes() >= SEGMENT_HEADER_BYTES as u64 {
        file.read_at(0, &mut raw)?;
    }
    Ok(SegmentHeader {
        segment_id: id,
        salt: raw_header_salt(&raw),
        first_lsn: 1,
        segment_bytes: file.len_bytes(),
        write_bound: file.len_bytes(),
    })
}

/// The records a cut removes, counted and shown to the observer.
struct Tally<'o> {
    records: u64,
    last_lsn: Lsn,
    observer: &'o mut dyn CutObserver,
}

impl Tally<'_> {
    /// The records of `blocks` of segment `id` at or after offset `from`.
    fn blocks<F: StorageFile>(
        &mut self,
        file: &F,
        id: u64,
        blocks: &[Block],
        from: u64,
    ) -> io::Result<()> {
        for_each_record(file, blocks, |offset, lsn, record_type, body| {
            if offset < from {
                return;
            }
            self.records += 1;
            self.last_lsn = self.last_lsn.max(lsn);
            if record_type <= RECORD_TYPE_USER_MAX {
                self.observer.record(&CutRecord {
                    at: CutPoint {
                        segment: id,
                        offset,
                    },
                    lsn,
                    record_type,
                    body,
                });
            }
        })
    }
}

/// Scans the log in `storage` (locked by the caller) and plans a cut at `at`: the record that
/// starts there and everything after it. Changes nothing. `locate` names LSNs whose place the
/// caller wants to know ([`Survey::located`]). The outer `Result` is I/O; the inner one the
/// verdict.
///
/// The boundaries of a segment are the offsets where its records start, where each block's
/// records end (the same cut as at the next block), and where its valid records end (the next
/// block after the last, or the damage). Offset 0 cuts the whole segment (not the log's first).
pub fn plan_cut<S: Storage>(
    storage: &S,
    at: CutPoint,
    locate: &[Lsn],
    observer: &mut dyn CutObserver,
) -> Result<(Survey, Result<CutPlan, Refusal>), Error> {
    let mut all_ids: Vec<u64> = storage
        .list()?
        .iter()
        .filter_map(|n| parse_segment_file_name(n))
        .collect();
    all_ids.sort_unstable();
    let mut window = Window::new(SCAN_CHUNK_BYTES);
    window.parallel = storage.parallel_reads();

    // Trailing files that are all zero were made ahead of need and never started.
    let mut ids = all_ids.clone();
    let mut unstarted = BTreeSet::new();
    while let Some(&id) = ids.last() {
        let file = storage.open(&segment_file_name(id))?;
        window.reset();
        if !rest_is_zero(&file, &mut window, 0)? {
            break;
        }
        unstarted.insert(id);
        ids.pop();
    }
    // The log: consecutive ids from the first; a gap is damage (a missing segment).
    let mut log: Vec<u64> = Vec::new();
    let mut gap = None;
    for &id in &ids {
        match log.last() {
            Some(&last) if id != last + 1 => {
                gap = Some(last + 1);
                break;
            }
            _ => log.push(id),
        }
    }

    let mut survey = Survey {
        segments: Vec::new(),
        first_lsn: 1,
        last_lsn: 0,
        damage: None,
        end: None,
        located: Vec::new(),
    };
    let mut tally = Tally {
        records: 0,
        last_lsn: 0,
        observer,
    };
    let mut found = Boundaries::default();
    let mut unscannable: Option<Damage> = None;
    let mut rewrite = false;
    let mut unreadable = Vec::new();
    let mut prev_last: Option<Lsn> = None;
    let mut scanned = BTreeSet::new();
    let total = ids.len();

    for (i, &id) in log.iter().enumerate() {
        tally.observer.scanning(i, total);
        scanned.insert(id);
        let file = storage.open(&segment_file_name(id))?;
        window.reset();
        let header = match read_header(&file, id, prev_last.map(|l| l + 1))? {
            Ok(h) => h,
            Err(reason) => {
                survey.damage = Some(Damage {
                    segment: id,
                    offset: 0,
                    reason,
                });
                if id >= at.segment {
                    let header = damaged_header(&file, id)?;
                    unreadable.extend(read_past_damage(
                        &file,
                        &header,
                        &mut window,
                        (0, reason),
                        |blocks| tally.blocks(&file, id, blocks, 0),
                    )?);
                }
                break;
            }
        };
        if survey.segments.is_empty() {
            survey.first_lsn = header.first_lsn;
        }
        let (scan, damage) = match scan(&file, &header, &mut window)? {
            Ok(scan) => {
                let damage = scan.damage;
                (Some(scan), damage)
            }
            Err(place) => (None, Some(place)),
        };
        if let Some(scan) = &scan {
            let end = damage.map_or(scan.end, |(offset, _)| offset);
            let wanted = locate
                .iter()
                .any(|&l| header.first_lsn <= l && l <= scan.last_lsn);
            if wanted || id == at.segment {
                for_each_record(&file, &scan.blocks, |offset, lsn, _, _| {
                    if locate.contains(&lsn) {
                        survey.located.push((
                            lsn,
                            CutPoint {
                                segment: id,
                                offset,
                            },
                        ));
                    }
                    if id == at.segment {
                        found.see(at.offset, offset, lsn);
                    }
                })?;
            }
            if id >= at.segment {
                let from = if id == at.segment { at.offset } else { 0 };
                tally.blocks(&file, id, &scan.blocks, from)?;
            }
            if id == at.segment {
                for b in &scan.blocks {
                    found.see(at.offset, b.start + b.group_bytes, b.last_lsn + 1);
                }
                found.see(at.offset, end, scan.last_lsn + 1);
                if at.offset >= FIRST_BLOCK_OFFSET && at.offset <= end {
                    let repairs = scan
                        .blocks
                        .iter()
                        .any(|b| b.start < at.offset && (b.repair_from.is_some() || b.mirror_bad));
                    window.reset();
                    rewrite = repairs || !rest_is_zero(&file, &mut window, at.offset)?;
                }
            }
            survey.segments.push(SegmentSpan {
                id,
                first_lsn: header.first_lsn,
                last_lsn: scan.last_lsn,
                end,
            });
            survey.last_lsn = scan.last_lsn;
            prev_last = Some(scan.last_lsn);
        }
        if let Some((offset, reason)) = damage {
            let d = Damage {
                segment: id,
                offset,
                reason,
            };
            survey.damage = Some(d);
            if scan.is_none() && id == at.segment {
                unscannable = Some(d);
            }
            if id >= at.segment {
                unreadable.extend(read_past_damage(
                    &file,
                    &header,
                    &mut window,
                    (offset, reason),
                    |blocks| tally.blocks(&file, id, blocks, 0),
                )?);
            }
            break;
        }
    }
    if survey.damage.is_none()
        && let Some(id) = gap
    {
        survey.damage = Some(Damage {
            segment: id,
            offset: 0,
            reason: CorruptionReason::SegmentMissing { id },
        });
    }
    survey.end = match (survey.damage, survey.segments.last()) {
        (Some(d), _) => Some(d.at()),
        (None, Some(s)) => Some(CutPoint {
            segment: s.id,
            offset: s.end,
        }),
        (None, None) => None,
    };
    let next_lsn = survey.last_lsn + 1;
    if let Some(end) = survey.end
        && locate.contains(&next_lsn)
        && !survey.located.iter().any(|&(l, _)| l == next_lsn)
    {
        survey.located.push((next_lsn, end));
    }

    let verdict = (|| {
        let (Some(&first), Some(end)) = (log.first(), survey.end) else {
            return Err(Refusal::NoSuchSegment {
                segment: at.segment,
            });
        };
        if at.segment < first {
            return Err(Refusal::NoSuchSegment {
                segment: at.segment,
            });
        }
        let past = || match survey.damage {
            Some(d) => Refusal::BeyondDamage(d),
            None => Refusal::BeyondEnd { end },
        };
        if at.offset == 0 {
            if at.segment == first {
                return Err(Refusal::WholeLog { segment: first });
            }
            if at.segment > end.segment {
                return Err(past());
            }
            let before = survey
                .segments
                .iter()
                .find(|s| s.id == at.segment - 1)
                .expect("the segments before the damage were read");
            return Ok(before.last_lsn + 1);
        }
        if at.segment > end.segment || (at.segment == end.segment && at.offset > end.offset) {
            return Err(past());
        }
        if let Some(d) = unscannable {
            return Err(Refusal::Unscannable(d));
        }
        found.exact.ok_or(Refusal::NotABoundary {
            before: found.before,
            after: found.after,
        })
    })();
    let first_lsn_cut = match verdict {
        Ok(lsn) => lsn,
        Err(refusal) => return Ok((survey, Err(refusal))),
    };

    // Segments after the damage (or a gap), cut whole: what can be read is read, for the
    // report.
    for (i, &id) in ids.iter().enumerate() {
        if scanned.contains(&id) || id < at.segment {
            continue;
        }
        tally.observer.scanning(i, total);
        let file = storage.open(&segment_file_name(id))?;
        window.reset();
        let (header, damage) = match read_header(&file, id, None)? {
            Ok(header) => match scan(&file, &header, &mut window)? {
                Ok(scan) => {
                    tally.blocks(&file, id, &scan.blocks, 0)?;
                    (header, scan.damage)
                }
                Err(place) => (header, Some(place)),
            },
            Err(reason) => (damaged_header(&file, id)?, Some((0, reason))),
        };
        if let Some(damage) = damage {
            unreadable.extend(read_past_damage(
                &file,
                &header,
                &mut window,
                damage,
                |blocks| tally.blocks(&file, id, blocks, 0),
            )?);
        }
    }

    let later: Vec<u64> = all_ids
        .iter()
        .copied()
        .filter(|&id| id > at.segment || (id == at.segment && at.offset == 0))
        .collect();
    let nothing_to_do = at.offset > 0
        && tally.records == 0
        && unreadable.is_empty()
        && survey.damage.is_none()
        && later.iter().all(|id| unstarted.contains(id));
    let plan = CutPlan {
        at,
        first_lsn_cut,
        records: tally.records,
        last_lsn_cut: tally.last_lsn.max(first_lsn_cut - 1),
        unreadable,
        rewritten: (!nothing_to_do && at.offset > 0 && rewrite)
            .then(|| segment_file_name(at.segment)),
        // Files made ahead and never started hold nothing; recovery removes them, or keeps
        // the one right after the last segment as the next segment's file.
        removed: if nothing_to_do {
            Vec::new()
        } else {
            later
                .iter()
                .filter(|id| !unstarted.contains(id))
                .map(|&id| segment_file_name(id))
                .collect()
        },
        nothing_to_do,
    };
    Ok((survey, Ok(plan)))
}

/// Makes the cut that [`plan_cut`] planned on the same `storage` (whose lock the caller has
/// held since): removes [`CutPlan::removed`], highest id first, the directory synced after
/// each; then writes the kept part of the cut segment into a fresh file, synced, renamed over
/// it, the directory synced. Nothing is written into a file that holds log data. After an
/// `Err` the directory holds the old segment or the new one, and possibly fewer later
/// segments; running the same cut again finishes it.
pub fn cut<S: Storage>(storage: &S, plan: &CutPlan) -> Result<(), Error> {
    if plan.nothing_to_do {
        return Ok(());
    }
    let mut removed: Vec<(u64, &String)> = plan
        .removed
        .iter()
        .map(|n| (parse_segment_file_name(n).unwrap_or(u64::MAX), n))
        .collect();
    removed.sort_unstable_by(|a, b| b.cmp(a));
    for (_, name) in removed {
        match storage.remove(name) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        storage.sync_dir()?;
        tracing::warn!(file = %name, "WAL repair: removed a segment file past the cut");
    }
    let Some(name) = &plan.rewritten else {
        return Ok(());
    };
    let id = plan.at.segment;
    let changed = || {
        Error::Io(io::Error::other(format!(
            "segment {id} is not as planned; plan the cut again"
        )))
    };
    let file = storage.open(name)?;
    let mut window = Window::new(SCAN_CHUNK_BYTES);
    let header = read_header(&file, id, None)?.map_err(|_| changed())?;
    let mut scan = scan(&file, &header, &mut window)?.map_err(|_| changed())?;
    // Keep the blocks before the cut; a block the cut goes through keeps its records before
    // it and gets a new mirror.
    let cut_at = plan.at.offset;
    scan.blocks.retain(|b| b.start < cut_at);
    if let Some(last) = scan.blocks.last_mut()
        && last.start + last.group_bytes > cut_at
    {
        last.group_bytes = cut_at - last.start;
        last.mirror_bad = true;
    }
    let mut kept_last = header.first_lsn - 1;
    for_each_record(&file, &scan.blocks, |_, lsn, _, _| kept_last = lsn)?;
    if kept_last + 1 != plan.first_lsn_cut {
        return Err(changed());
    }
    // (The surviving part of a damaged block came with `mirror_bad` from the scan: it is
    // sealed anew, as recovery does for a torn tail.)
    scan.damage = None;
    let copy = copy_file_name(id);
    match storage.remove(&copy) {
        Ok(()) => storage.sync_dir()?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let mut retired = Vec::new();
    let (new, _) = copy_segment(
        storage,
        file,
        (&header, WalOptions::default().write_reach()),
        &mut scan,
        &mut window,
        None,
        &mut retired,
    )?;
    drop(new);
    release(storage, retired);
    tracing::warn!(segment = id, offset = cut_at, "WAL repair: segment cut");
    Ok(())
}
