//! Reading records back: an iterator from an LSN across segments.

use std::io;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::Lsn;
use crate::error::{CorruptionReason, Error};
use crate::format::{
    FIRST_BLOCK_OFFSET, MIRROR_ALIGN, MIRROR_PREFIX_BYTES, RECORD_HEADER_BYTES, RECORD_TYPE_CLOSE,
    RECORD_TYPE_MIRROR, RecordHeader, align_to, check_record_crc, check_record_header, crc_seed,
    decode_record_header, next_block, record_disposition,
};
use crate::log::Wal;
use crate::segment::Window;
use crate::storage::{Storage, StorageFile};

/// Bytes read per call by an iterator.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// One record read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its LSN.
    pub lsn: Lsn,
    /// Its type (`1..=0xEF`).
    pub record_type: u8,
    /// Its flags (see [`FLAG_SKIPPABLE`](crate::format::FLAG_SKIPPABLE)).
    pub flags: u8,
    /// Its body.
    pub body: Vec<u8>,
}

/// What an iterator needs of a segment, captured when it was created.
pub(crate) struct SegmentView<F> {
    pub(crate) id: u64,
    pub(crate) salt: u64,
    pub(crate) first_lsn: Lsn,
    /// Offset after the last record written when the iterator was created.
    pub(crate) end: u64,
    pub(crate) file: Arc<F>,
}

/// A record borrowed from an [`Iter`]'s buffer (see [`Iter::next_ref`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'r> {
    /// Its log sequence number.
    pub lsn: Lsn,
    /// Its type.
    pub record_type: u8,
    /// Its flags.
    pub flags: u8,
    /// Its body.
    pub body: &'r [u8],
}

/// Iterates records in LSN order from an LSN, across segments, up to the last record written
/// when it was created (written, not necessarily durable: compare with
/// [`Wal::durable_lsn`]). Each record is checked again as it is read; damage yields one
/// `Err(Corrupted)` and then the end. Segments deleted meanwhile stay readable, as the
/// iterator holds their files open.
pub struct Iter<'a, S: Storage> {
    segments: Vec<SegmentView<S::File>>,
    index: usize,
    offset: u64,
    /// Start of the commit block being read (to check its mirror, which is skipped).
    block_start: u64,
    expected_lsn: Lsn,
    start_lsn: Lsn,
    last_lsn: Lsn,
    window: Window,
    done: bool,
    _wal: PhantomData<&'a Wal<S>>,
}

impl<S: Storage> Iter<'_, S> {
    /// Starts at `start_lsn`, or at the first LSN still in the log if that is later.
    pub(crate) fn new(segments: Vec<SegmentView<S::File>>, start_lsn: Lsn, last_lsn: Lsn) -> Self {
        let first = segments.first().map_or(last_lsn + 1, |s| s.first_lsn);
        let start_lsn = start_lsn.max(first);
        // The last segment that starts at or before the start (segments are in LSN order).
        let index = segments
            .partition_point(|s| s.first_lsn <= start_lsn)
            .saturating_sub(1);
        let expected_lsn = segments.get(index).map_or(last_lsn + 1, |s| s.first_lsn);
        Self {
            segments,
            index,
            offset: FIRST_BLOCK_OFFSET,
            block_start: FIRST_BLOCK_OFFSET,
            expected_lsn,
            start_lsn,
            last_lsn,
            window: Window::new(READ_CHUNK_BYTES),
            done: false,
            _wal: PhantomData,
        }
    }

    fn fail<T>(
        &mut self,
        segment: u64,
        offset: u64,
        reason: CorruptionReason,
    ) -> Option<Result<T, Error>> {
        self.done = true;
        Some(Err(Error::Corrupted {
            segment,
            offset,
            reason,
        }))
    }

    fn io_fail<T>(&mut self, e: std::io::Error) -> Option<Result<T, Error>> {
        self.done = true;
        Some(Err(Error::Io(e)))
    }
}

impl<S: Storage> Iter<'_, S> {
    /// The next record, borrowed from the reader's buffer instead of copied into a new `Vec`:
    /// how recovery replays millions of records without an allocation each.
    pub fn next_ref(&mut self) -> Option<Result<RecordRef<'_>, Error>> {
        let (h, file, end, off) = loop {
            if self.done || self.expected_lsn > self.last_lsn {
                return None;
            }
            let seg = &self.segments[self.index];
            if self.offset >= seg.end {
                let (id, end) = (seg.id, seg.end);
                self.index += 1;
                let Some(next) = self.segments.get(self.index) else {
                    // The log said more records exist than the segments hold.
                    let expected = self.expected_lsn;
                    return self.fail(id, end, CorruptionReason::RecordLsn { expected, found: 0 });
                };
                if next.first_lsn != self.expected_lsn {
                    let (id, expected, found) = (next.id, self.expected_lsn, next.first_lsn);
                    return self.fail(id, 0, CorruptionReason::HeaderFirstLsn { expected, found });
                }
                self.offset = FIRST_BLOCK_OFFSET;
                self.block_start = FIRST_BLOCK_OFFSET;
                self.window.reset();
                continue;
            }
            let (id, salt, end, off) = (seg.id, seg.salt, seg.end, self.offset);
            let file = Arc::clone(&seg.file);
            if off + RECORD_HEADER_BYTES as u64 > end {
                return self.fail(id, off, CorruptionReason::RecordLength { len: 0 });
            }
            let mut h = match self
                .window
                .get_keeping(&*file, end, off, off, RECORD_HEADER_BYTES)
            {
                Ok(b) => decode_record_header(b),
                Err(e) => return self.io_fail(e),
            };
            // The group may end here, its mirror at the next sector boundary: its header names
            // exactly this group's length.
            let mut at = off;
            let m = align_to(off, MIRROR_ALIGN);
            if off > self.block_start && m != off && m + RECORD_HEADER_BYTES as u64 <= end {
                let mh = match self
                    .window
                    .get_keeping(&*file, end, off, m, RECORD_HEADER_BYTES)
                {
                    Ok(b) => decode_record_header(b),
                    Err(e) => return self.io_fail(e),
                };
                if mh.record_type == RECORD_TYPE_MIRROR
                    && u64::from(mh.len) == MIRROR_PREFIX_BYTES as u64 + (off - self.block_start)
                {
                    // When the group goes on at `off`, `m` is inside one of its records, whose
                    // body may hold anything, these two fields too (seed 2033034: a job id of
                    // 56 and a due time's low byte 0xF1). A record header is never all zero,
                    // so with zeros at `off` (the gap as written) the group ends here; with
                    // anything else the look-alike ends it only if it is the group's mirror
                    // as recovery requires one to be: valid at its place, crc included (no
                    // body can forge that without the segment's salt), and naming the group's
                    // last LSN. Otherwise the record at `off` is read as any other. A real
                    // mirror ends the group either way: what the gap holds only decides
                    // whether its crc is checked (so a good block costs no extra pass).
                    let ends_here = h.is_zero()
                        || match valid_at(&mut self.window, &*file, end, salt, off, m, &mh) {
                            Ok(valid) => valid && mh.lsn + 1 == self.expected_lsn,
                            Err(e) => return self.io_fail(e),
                        };
                    if ends_here {
                        at = m;
                        h = mh;
                    }
                }
            }
            if let Err(reason) = check_record_header(&h, end - at) {
                return self.fail(id, at, reason);
            }
            if h.record_type == RECORD_TYPE_MIRROR {
                // The mirror is the log's own: check that it is the one of this group (its
                // copy was checked by recovery), skip it and its block's padding.
                let group_bytes = off - self.block_start;
                if group_bytes == 0
                    || at != align_to(off, MIRROR_ALIGN)
                    || u64::from(h.len) != MIRROR_PREFIX_BYTES as u64 + group_bytes
                {
                    return self.fail(id, at, CorruptionReason::Mirror);
                }
                self.offset = next_block(at + h.frame_bytes());
                self.block_start = self.offset;
                continue;
            }
            if at != off || h.record_type == RECORD_TYPE_CLOSE {
                let record_type = h.record_type;
                return self.fail(id, at, CorruptionReason::MisplacedLogRecord { record_type });
            }
            let frame =
                match self
                    .window
                    .get_keeping(&*file, end, off, off, h.frame_bytes() as usize)
                {
                    Ok(frame) => frame,
                    Err(e) => return self.io_fail(e),
                };
            if let Err(reason) = check_record_crc(&h, crc_seed(salt, off), frame) {
                return self.fail(id, off, reason);
            }
            if h.lsn != self.expected_lsn {
                let expected = self.expected_lsn;
                return self.fail(
                    id,
                    off,
                    CorruptionReason::RecordLsn {
                        expected,
                        found: h.lsn,
                    },
                );
            }
            let wanted = h.lsn >= self.start_lsn;
            let readable = match record_disposition(&h) {
                Ok(readable) => readable,
                Err(reason) => return self.fail(id, off, reason),
            };
            self.offset += h.frame_bytes();
            self.expected_lsn += 1;
            if wanted && readable {
                break (h, file, end, off);
            }
        };
        // The frame is in the window already (it was just checked): this `get` reads nothing
        // and can not fail, but an error is still reported rather than assumed away.
        let frame = match self
            .window
            .get_keeping(&*file, end, off, off, h.frame_bytes() as usize)
        {
            Ok(frame) => frame,
            Err(e) => {
                self.done = true;
                return Some(Err(Error::Io(e)));
            }
        };
        Some(Ok(RecordRef {
            lsn: h.lsn,
            record_type: h.record_type,
            flags: h.flags,
            body: &frame[RECORD_HEADER_BYTES..][..h.len as usize],
        }))
    }
}

/// Whether the record with header `h` at `at` is valid there: its header checks out and fits
/// before `end`, and its crc (seeded by `salt` and `at`) matches. The window keeps what it
/// holds from `keep` on (the record the caller reads next).
fn valid_at<F: StorageFile>(
    window: &mut Window,
    file: &F,
    end: u64,
    salt: u64,
    keep: u64,
    at: u64,
    h: &RecordHeader,
) -> io::Result<bool> {
    if check_record_header(h, end - at).is_err() {
        return Ok(false);
    }
    let frame = window.get_keeping(file, end, keep, at, h.frame_bytes() as usize)?;
    Ok(check_record_crc(h, crc_seed(salt, at), frame).is_ok())
}

impl<S: Storage> Iterator for Iter<'_, S> {
    type Item = Result<Record, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_ref().map(|r| {
            r.map(|r| Record {
                lsn: r.lsn,
                record_type: r.record_type,
                flags: r.flags,
                body: r.body.to_vec(),
            })
        })
    }
}
