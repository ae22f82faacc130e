//! The on-disk format: segment header and record framing, as pure encode/decode functions.
//!
//! Everything is little-endian and written by hand; `docs/wal-format.md` is the prose twin of
//! this comment and must change with it.
//!
//! ```text
//! Segment file `{id:016}.wal`, fixed length, preallocated, zero-filled:
//!
//! 0        8     10  11  12      16          24      32          40            48          60    64
//! +--------+-----+---+---+-------+-----------+-------+-----------+-------------+-----------+-----+
//! | magic  | ver |ck |hf | rsv32 | segment_id| salt  | first_lsn |segment_bytes|wb |rsv(8) | crc |
//! +--------+-----+---+---+-------+-----------+-------+-----------+-------------+---+-------+-----+
//!   wb = write bound in pages (u32, see below); header crc = crc32(bytes 0..60), unseeded;
//!   the rest of the first page is zero, and commit blocks start at 4096
//!
//! Commit block (one per group commit), at a 4096-aligned offset B >= 4096:
//!
//!   B: records of the group, contiguous, consecutive LSNs
//!   M = align512(end of the group): MIRROR record (type 0xF1), body =
//!       group_start u64 (= B) | first_lsn u64 | count u32 | write_bound u32 (pages) | the frames
//!   padding (never written, never read) up to the next 4096 boundary: the next block
//!
//! Write bound (version 3): the header and every mirror name an offset (in pages of 4096) at
//! and after which the log has written nothing in the segment, and writes nothing until a
//! later block naming a higher bound is durable. Recovery proves zeros only up to the highest
//! bound it found, not to the end of the file.
//!
//!   or, written by a clean close at a block start: a CLOSE record (type 0xF2, no body)
//!
//! Record at an 8-aligned offset `off` of the segment:
//!
//! 0     4     8    9     10         12      20              24          24+len   frame end
//! +-----+-----+----+-----+----------+-------+---------------+-------------+---------+
//! | len | crc |type|flags| reserved |  lsn  | durable_delta |  body (len) | pad 0..7|
//! +-----+-----+----+-----+----------+-------+---------------+-------------+---------+
//!   frame = align8(24 + len)
//!   crc   = crc32 with initial state seed(salt, off), over bytes 0..4 (len) then 8..frame end
//!           (everything after the crc field, padding included, plus the length)
//!   seed(salt, off) = fold32(salt ^ (off * 0x9E37_79B9_7F4A_7C15)),  fold32(x) = lo32(x) ^ hi32(x)
//! ```
//!
//! Type 0 is invalid, so the zero fill after the last record ends the log. Types `1..=0xEF` are
//! the user's; `0xF0..=0xFF` are reserved for the log itself: MIRROR and CLOSE carry no LSN of
//! their own and readers hide them. Any other record whose type a reader does not know is skipped if it has [`FLAG_SKIPPABLE`], and is an
//! error otherwise.

use crate::Lsn;
use crate::error::CorruptionReason;

/// The first 8 bytes of every segment file.
pub const MAGIC: [u8; 8] = *b"TWWALSEG";
/// The format version this code writes. Version 3 added the write bound (see
/// [`SegmentHeader::write_bound`]); version 2 added commit blocks (page-aligned group commits
/// with a mirror, see [`RECORD_TYPE_MIRROR`]), the header page, and the close marker.
pub const FORMAT_VERSION: u16 = 3;
/// The oldest format version this code reads: a version 2 segment has no write bound (its
/// zero checks run to the end of the file). Version 1 segments are refused.
pub const FORMAT_VERSION_READ_MIN: u16 = 2;
/// Checksum kind 1: crc32 (IEEE, `crc32fast`) seeded with the segment salt and record offset.
pub const CHECKSUM_CRC32_SALTED: u8 = 1;

// Segment header fields, each offset built from the previous one so none can overlap.
const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + MAGIC.len();
const CHECKSUM_KIND_OFFSET: usize = VERSION_OFFSET + 2;
const HEADER_FLAGS_OFFSET: usize = CHECKSUM_KIND_OFFSET + 1;
const HEADER_RESERVED_OFFSET: usize = HEADER_FLAGS_OFFSET + 1;
const SEGMENT_ID_OFFSET: usize = HEADER_RESERVED_OFFSET + 4;
const SALT_OFFSET: usize = SEGMENT_ID_OFFSET + 8;
const FIRST_LSN_OFFSET: usize = SALT_OFFSET + 8;
const SEGMENT_BYTES_OFFSET: usize = FIRST_LSN_OFFSET + 8;
const WRITE_BOUND_OFFSET: usize = SEGMENT_BYTES_OFFSET + 8;
const HEADER_PAD_OFFSET: usize = WRITE_BOUND_OFFSET + 4;
const HEADER_CRC_OFFSET: usize = HEADER_PAD_OFFSET + 8;
/// Bytes of the segment header; the first record starts right after it.
pub const SEGMENT_HEADER_BYTES: usize = HEADER_CRC_OFFSET + 4;
const _: () = assert!(SEGMENT_HEADER_BYTES == 64);
const _: () = assert!(SEGMENT_HEADER_BYTES.is_multiple_of(RECORD_ALIGN));
const _: () = assert!(SEGMENT_ID_OFFSET.is_multiple_of(8) && FIRST_LSN_OFFSET.is_multiple_of(8));

// Record header fields.
const LEN_OFFSET: usize = 0;
const CRC_OFFSET: usize = LEN_OFFSET + 4;
const TYPE_OFFSET: usize = CRC_OFFSET + 4;
const FLAGS_OFFSET: usize = TYPE_OFFSET + 1;
const RESERVED_OFFSET: usize = FLAGS_OFFSET + 1;
const LSN_OFFSET: usize = RESERVED_OFFSET + 2;
const DURABLE_DELTA_OFFSET: usize = LSN_OFFSET + 8;
/// Bytes of a record header; the body follows.
pub const RECORD_HEADER_BYTES: usize = DURABLE_DELTA_OFFSET + 4;
/// Every record starts at a multiple of this, and every frame is a multiple of it.
pub const RECORD_ALIGN: usize = 8;
const _: () = assert!(RECORD_HEADER_BYTES == 24);
const _: () = assert!(RECORD_HEADER_BYTES.is_multiple_of(RECORD_ALIGN));
// The crc covers the len field and everything after the crc field: they must be adjacent.
const _: () = assert!(CRC_OFFSET == LEN_OFFSET + 4 && TYPE_OFFSET == CRC_OFFSET + 4);

/// The header has a page of its own: blocks start at this offset, so no write of a record ever
/// touches the page that holds the header.
pub const FIRST_BLOCK_OFFSET: u64 = 4096;
/// Every commit block starts at a multiple of this (the page size): a block's pages are
/// written only while it is open, so a successful sync of them is never followed by another
/// write into them.
pub const BLOCK_ALIGN: u64 = 4096;
/// A group's mirror starts at a multiple of this (the sector size) after the group, so that a
/// sector holds bytes of the group or of its mirror, never of both.
pub const MIRROR_ALIGN: u64 = 512;
/// Bytes of a mirror's body before the copied frames: `group_start u64 | first_lsn u64 |
/// count u32 | write_bound u32` (pages; 0 in version 2: none).
pub const MIRROR_PREFIX_BYTES: usize = 24;
/// Write bounds are counted in units of this many bytes (the page size).
pub const WRITE_BOUND_UNIT: u64 = 4096;
/// Groups grow to at most this many bytes of frames (a single larger record is a group of its
/// own); a larger batch is split into several blocks. A log with a small write reach caps
/// its groups lower (see [`group_limit`]).
pub const GROUP_BYTES_MAX: u64 = 1 << 20;
/// The lowest cap on a group's frames, whatever the write reach.
pub const GROUP_LIMIT_MIN: u64 = 4096;

/// Record type 0: never valid, so zero fill ends the log.
pub const RECORD_TYPE_INVALID: u8 = 0;
/// Reserved for a padding record (not written by version 2: padding is never read, see
/// [`BLOCK_ALIGN`]).
pub const RECORD_TYPE_PAD: u8 = 0xF0;
/// The log's own record that closes a commit block: a verbatim copy of the group's frames, at
/// the first [`MIRROR_ALIGN`] boundary after them. It carries no LSN of its own (its `lsn`
/// field is the group's last LSN) and readers never show it.
pub const RECORD_TYPE_MIRROR: u8 = 0xF1;
/// The log's own record written by a clean close at the start of a block: everything before
/// it was synced by that close. No body, no LSN of its own (its `lsn` field is the last LSN);
/// the next open writes over it.
pub const RECORD_TYPE_CLOSE: u8 = 0xF2;
/// The highest record type a user may append.
pub const RECORD_TYPE_USER_MAX: u8 = 0xEF;
/// Flag: a reader that does not know this record's type skips it instead of failing.
pub const FLAG_SKIPPABLE: u8 = 1 << 0;
/// Flag bits defined by version 1; the others must be zero.
pub const FLAGS_KNOWN: u8 = FLAG_SKIPPABLE;

/// The largest first LSN a segment header may carry. Far below `u64::MAX`, so LSN arithmetic
/// on any byte content (the LSN of each record of a segment follows the header's) cannot
/// overflow.
pub const LSN_MAX: Lsn = 1 << 62;

/// `durable_delta` value meaning "vouches for nothing" (the true delta did not fit).
pub const DURABLE_DELTA_NONE: u32 = u32::MAX;

/// A decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The segment id, also its file name.
    pub segment_id: u64,
    /// Random per segment incarnation; seeds every record crc in it.
    pub salt: u64,
    /// The LSN of the segment's first record (previous segment's last + 1).
    pub first_lsn: Lsn,
    /// The file length, fixed at creation.
    pub segment_bytes: u64,
    /// The write bound of an empty segment (version 3): the log writes nothing at or after
    /// this offset until a durable block names a higher bound. A multiple of
    /// [`WRITE_BOUND_UNIT`], at most `segment_bytes`; a version 2 header decodes to
    /// `segment_bytes` (no bound).
    pub write_bound: u64,
}

/// A decoded record header. Decoding never fails; [`check_record_header`] and
/// [`check_record_crc`] say whether it is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Body length in bytes.
    pub len: u32,
    /// The stored crc.
    pub crc: u32,
    /// The record type.
    pub record_type: u8,
    /// The flags.
    pub flags: u8,
    /// Must be zero in version 1.
    pub reserved: u16,
    /// The record's LSN.
    pub lsn: Lsn,
    /// `lsn - durable LSN at write time`, or [`DURABLE_DELTA_NONE`].
    pub durable_delta: u32,
}

impl RecordHeader {
    /// Whether all header bytes were zero: the end of the written part of a segment.
    pub fn is_zero(&self) -> bool {
        self.len == 0
            && self.crc == 0
            && self.record_type == 0
            && self.flags == 0
            && self.reserved == 0
            && self.lsn == 0
            && self.durable_delta == 0
    }

    /// Bytes of this record's frame (header, body, padding), if it could fit in `u64`.
    pub fn frame_bytes(&self) -> u64 {
        frame_bytes(self.len as usize) as u64
    }

    /// The highest LSN this record vouches was durable before it was written (0: none).
    pub fn vouched_lsn(&self) -> Lsn {
        vouched_lsn(self.lsn, self.durable_delta)
    }
}

/// Rounds `n` up to a multiple of `align` (a power of two).
pub const fn align_to(n: u64, align: u64) -> u64 {
    (n + (align - 1)) & !(align - 1)
}

/// Where the block that starts at `block_start` ends once sealed with `group_bytes` of frames:
/// the end of its mirror (the next block starts at the next [`BLOCK_ALIGN`] boundary).
pub const fn sealed_end(block_start: u64, group_bytes: u64) -> u64 {
    align_to(block_start + group_bytes, MIRROR_ALIGN)
        + frame_bytes(MIRROR_PREFIX_BYTES + group_bytes as usize) as u64
}

/// Where the next block starts after a block sealed at `mirror_end`.
pub const fn next_block(mirror_end: u64) -> u64 {
    align_to(mirror_end, BLOCK_ALIGN)
}

/// Where the writer stands in its segment: the open block and the bytes of frames in it
/// (0: no group is open, and the next block starts at `block_start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// Start of the open block, or of the next one.
    pub block_start: u64,
    /// Bytes of frames in the open group.
    pub group_bytes: u64,
    /// The segment's length.
    pub file_bytes: u64,
    /// Bytes of frames a group grows to at most ([`group_limit`]; a single larger record is
    /// a group of its own).
    pub group_limit: u64,
}

/// Where the next frame goes, given a [`Cursor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Into the open group (or a new group at `block_start`).
    Group,
    /// The open group must be sealed first (it would grow too large or not fit its mirror).
    SealFirst,
    /// The segment has no room for it even in a fresh block: roll.
    Roll,
}

impl Cursor {
    /// The placement rule, shared by the writer and by preallocation.
    pub fn place(&self, frame: u64) -> Place {
        let group = self.group_bytes + frame;
        let fits = sealed_end(self.block_start, group) <= self.file_bytes;
        if self.group_bytes == 0 {
            if fits { Place::Group } else { Place::Roll }
        } else if fits && group <= self.group_limit {
            Place::Group
        } else {
            Place::SealFirst
        }
    }

    /// The cursor after the open group is sealed.
    pub fn sealed(&self) -> Cursor {
        if self.group_bytes == 0 {
            return *self;
        }
        Cursor {
            block_start: next_block(sealed_end(self.block_start, self.group_bytes)),
            group_bytes: 0,
            file_bytes: self.file_bytes,
            group_limit: self.group_limit,
        }
    }
}

/// The decoded prefix of a mirror's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorPrefix {
    /// Offset of the group (its block's start).
    pub group_start: u64,
    /// LSN of the group's first record.
    pub first_lsn: Lsn,
    /// Records in the group.
    pub count: u32,
    /// The write bound this block names once durable (a multiple of [`WRITE_BOUND_UNIT`]; 0:
    /// none, as version 2 wrote).
    pub write_bound: u64,
}

/// Decodes a mirror body's prefix (`body` at least [`MIRROR_PREFIX_BYTES`] long).
pub fn decode_mirror_prefix(body: &[u8]) -> Option<MirrorPrefix> {
    if body.len() < MIRROR_PREFIX_BYTES {
        return None;
    }
    Some(MirrorPrefix {
        group_start: u64_at(body, 0),
        first_lsn: u64_at(body, 8),
        count: u32_at(body, 16),
        write_bound: u64::from(u32_at(body, 20)) * WRITE_BOUND_UNIT,
    })
}

/// Appends the mirror record of a group (`frames`, starting at `group_start` with LSN
/// `first_lsn`, `count` records), to be written at `offset` of a segment with `salt`.
pub fn encode_mirror(
    out: &mut Vec<u8>,
    salt: u64,
    offset: u64,
    group: MirrorPrefix,
    frames: &[u8],
) {
    let mut prefix = [0u8; MIRROR_PREFIX_BYTES];
    prefix[0..8].copy_from_slice(&group.group_start.to_le_bytes());
    prefix[8..16].copy_from_slice(&group.first_lsn.to_le_bytes());
    prefix[16..20].copy_from_slice(&group.count.to_le_bytes());
    prefix[20..24].copy_from_slice(&bound_pages(group.write_bound).to_le_bytes());
    let meta = RecordMeta {
        lsn: group.first_lsn + u64::from(group.count) - 1,
        record_type: RECORD_TYPE_MIRROR,
        flags: FLAG_SKIPPABLE,
        durable_delta: DURABLE_DELTA_NONE,
    };
    encode_record_parts(out, salt, offset, meta, &[&prefix, frames]);
}

/// Appends a close marker, to be written at `offset` (a block start) of a segment with
/// `salt`, after the last record `last_lsn` (0: none).
pub fn encode_close(out: &mut Vec<u8>, salt: u64, offset: u64, last_lsn: Lsn) {
    let meta = RecordMeta {
        lsn: last_lsn,
        record_type: RECORD_TYPE_CLOSE,
        flags: FLAG_SKIPPABLE,
        durable_delta: DURABLE_DELTA_NONE,
    };
    encode_record_parts(out, salt, offset, meta, &[]);
}

/// Rounds `n` up to the record alignment.
pub const fn align_up(n: u64) -> u64 {
    (n + (RECORD_ALIGN as u64 - 1)) & !(RECORD_ALIGN as u64 - 1)
}

/// Bytes of the frame of a record with a body of `body_len` bytes.
pub const fn frame_bytes(body_len: usize) -> usize {
    align_up((RECORD_HEADER_BYTES + body_len) as u64) as usize
}

/// The value written in `durable_delta` by a record `lsn` written while `durable` was the
/// highest durable LSN; saturates to [`DURABLE_DELTA_NONE`] so it never over-claims.
pub fn durable_delta(lsn: Lsn, durable: Lsn) -> u32 {
    assert!(
        durable < lsn,
        "a record is written after everything durable"
    );
    u32::try_from(lsn - durable).unwrap_or(DURABLE_DELTA_NONE)
}

/// The highest LSN that a record `lsn` with `delta` proves was acknowledged durable.
pub fn vouched_lsn(lsn: Lsn, delta: u32) -> Lsn {
    if delta == DURABLE_DELTA_NONE {
        0
    } else {
        lsn.saturating_sub(u64::from(delta))
    }
}

fn fold32(x: u64) -> u32 {
    (x as u32) ^ ((x >> 32) as u32)
}

/// The initial crc state of the record at `offset` of a segment with `salt`. Mixing both in
/// means a record copied to another offset, another segment or from an earlier incarnation of
/// this segment never validates.
pub fn crc_seed(salt: u64, offset: u64) -> u32 {
    fold32(salt ^ offset.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The crc of a whole frame (`frame.len()` is the frame length), ignoring its stored crc.
pub fn record_crc(seed: u32, frame: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(seed);
    hasher.update(&frame[LEN_OFFSET..CRC_OFFSET]);
    hasher.update(&frame[TYPE_OFFSET..]);
    hasher.finalize()
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A write bound as stored: in pages, rounded up and saturating. Both only ever name a bound
/// no lower than the truth (it is capped by the segment's length when read), so a reader
/// checks at least the bytes the writer may have written.
fn bound_pages(bound: u64) -> u32 {
    u32::try_from(bound.div_ceil(WRITE_BOUND_UNIT)).unwrap_or(u32::MAX)
}

/// The cap on a group's frames for a wanted write reach: [`GROUP_BYTES_MAX`], lowered to a
/// quarter of the reach (at least [`GROUP_LIMIT_MIN`]) so that a small reach is not raised
/// to two megabytes by the size of a block.
pub const fn group_limit(wanted_reach: u64) -> u64 {
    let quarter = wanted_reach / 4;
    if quarter >= GROUP_BYTES_MAX {
        GROUP_BYTES_MAX
    } else if quarter <= GROUP_LIMIT_MIN {
        GROUP_LIMIT_MIN
    } else {
        align_to(quarter, RECORD_ALIGN as u64)
    }
}

/// The most frame bytes one commit block's group can hold, with records of at most
/// `record_bytes_max` bytes of body and groups capped at `group_limit`: the cap, or a single
/// larger record.
pub const fn group_bytes_max(record_bytes_max: u32, group_limit: u64) -> u64 {
    let one = frame_bytes(record_bytes_max as usize) as u64;
    if one > group_limit { one } else { group_limit }
}

/// The most bytes one commit block spans (its largest group, the mirror, and the padding to
/// the next block), with records of at most `record_bytes_max` bytes of body and groups
/// capped at `group_limit`.
pub const fn block_span_max(record_bytes_max: u32, group_limit: u64) -> u64 {
    align_to(
        sealed_end(0, group_bytes_max(record_bytes_max, group_limit)),
        WRITE_BOUND_UNIT,
    )
}

/// How far past the start of the next block a block's write bound reaches: `wanted` (the
/// writer may run that far ahead of its last durable block before it waits for a sync, and
/// recovery proves that many zero bytes after the last block), raised to room for one whole
/// block (its largest group and mirror), so that once every sealed block is durable the next
/// block fits under the bound.
pub const fn write_reach(record_bytes_max: u32, wanted: u64) -> u64 {
    let block = block_span_max(record_bytes_max, group_limit(wanted));
    let wanted = align_to(wanted, WRITE_BOUND_UNIT);
    if block > wanted { block } else { wanted }
}

/// The write bound a block (or an empty segment's header) names when the next block starts
/// at `next_block` in a file of `file_bytes`.
pub const fn write_bound_after(next_block: u64, reach: u64, file_bytes: u64) -> u64 {
    let bound = next_block + reach;
    if bound < file_bytes {
        bound
    } else {
        file_bytes
    }
}

/// Encodes a segment header.
pub fn encode_header(h: &SegmentHeader) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut b = [0u8; SEGMENT_HEADER_BYTES];
    b[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&MAGIC);
    b[VERSION_OFFSET..CHECKSUM_KIND_OFFSET].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    b[CHECKSUM_KIND_OFFSET] = CHECKSUM_CRC32_SALTED;
    b[SEGMENT_ID_OFFSET..SALT_OFFSET].copy_from_slice(&h.segment_id.to_le_bytes());
    b[SALT_OFFSET..FIRST_LSN_OFFSET].copy_from_slice(&h.salt.to_le_bytes());
    b[FIRST_LSN_OFFSET..SEGMENT_BYTES_OFFSET].copy_from_slice(&h.first_lsn.to_le_bytes());
    b[SEGMENT_BYTES_OFFSET..WRITE_BOUND_OFFSET].copy_from_slice(&h.segment_bytes.to_le_bytes());
    b[WRITE_BOUND_OFFSET..HEADER_PAD_OFFSET]
        .copy_from_slice(&bound_pages(h.write_bound).to_le_bytes());
    let crc = crc32fast::hash(&b[..HEADER_CRC_OFFSET]);
    b[HEADER_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes and checks a segment header (crc first, so a torn header reports `HeaderChecksum`).
pub fn decode_header(b: &[u8; SEGMENT_HEADER_BYTES]) -> Result<SegmentHeader, CorruptionReason> {
    if crc32fast::hash(&b[..HEADER_CRC_OFFSET]) != u32_at(b, HEADER_CRC_OFFSET) {
        return Err(CorruptionReason::HeaderChecksum);
    }
    if b[MAGIC_OFFSET..VERSION_OFFSET] != MAGIC {
        return Err(CorruptionReason::HeaderMagic);
    }
    let version = u16_at(b, VERSION_OFFSET);
    if !(FORMAT_VERSION_READ_MIN..=FORMAT_VERSION).contains(&version) {
        return Err(CorruptionReason::HeaderVersion { found: version });
    }
    if b[CHECKSUM_KIND_OFFSET] != CHECKSUM_CRC32_SALTED {
        return Err(CorruptionReason::HeaderChecksumKind {
            found: b[CHECKSUM_KIND_OFFSET],
        });
    }
    let bound_pages = u32_at(b, WRITE_BOUND_OFFSET);
    let reserved_zero = b[HEADER_FLAGS_OFFSET] == 0
        && u32_at(b, HEADER_RESERVED_OFFSET) == 0
        && (version > 2 || bound_pages == 0)
        && b[HEADER_PAD_OFFSET..HEADER_CRC_OFFSET]
            .iter()
            .all(|&x| x == 0);
    if !reserved_zero {
        return Err(CorruptionReason::HeaderReserved);
    }
    let segment_bytes = u64_at(b, SEGMENT_BYTES_OFFSET);
    // A version 3 writer stores a bound in 1..=the segment's pages; anything else is damage
    // (and would not re-encode to the same bytes).
    if version > 2
        && (bound_pages == 0 || u64::from(bound_pages) > segment_bytes.div_ceil(WRITE_BOUND_UNIT))
    {
        return Err(CorruptionReason::HeaderWriteBound { pages: bound_pages });
    }
    let write_bound = match u64::from(bound_pages) * WRITE_BOUND_UNIT {
        0 => segment_bytes,
        bound => bound.min(segment_bytes),
    };
    Ok(SegmentHeader {
        segment_id: u64_at(b, SEGMENT_ID_OFFSET),
        salt: u64_at(b, SALT_OFFSET),
        first_lsn: u64_at(b, FIRST_LSN_OFFSET),
        segment_bytes,
        write_bound,
    })
}

/// The salt field of a header, read without checking it (to test a torn header's records).
pub fn raw_header_salt(b: &[u8; SEGMENT_HEADER_BYTES]) -> u64 {
    u64_at(b, SALT_OFFSET)
}

/// Decodes the first [`RECORD_HEADER_BYTES`] of `b` as a record header.
pub fn decode_record_header(b: &[u8]) -> RecordHeader {
    assert!(b.len() >= RECORD_HEADER_BYTES);
    RecordHeader {
        len: u32_at(b, LEN_OFFSET),
        crc: u32_at(b, CRC_OFFSET),
        record_type: b[TYPE_OFFSET],
        flags: b[FLAGS_OFFSET],
        reserved: u16_at(b, RESERVED_OFFSET),
        lsn: u64_at(b, LSN_OFFSET),
        durable_delta: u32_at(b, DURABLE_DELTA_OFFSET),
    }
}

/// What a record's frame needs besides its body.
#[derive(Debug, Clone, Copy)]
pub struct RecordMeta {
    /// The record's LSN.
    pub lsn: Lsn,
    /// Its type.
    pub record_type: u8,
    /// Its flags.
    pub flags: u8,
    /// See [`durable_delta`].
    pub durable_delta: u32,
}

/// Appends the frame of one record, to be written at `offset` of a segment with `salt`.
pub fn encode_record(out: &mut Vec<u8>, salt: u64, offset: u64, meta: RecordMeta, body: &[u8]) {
    encode_record_parts(out, salt, offset, meta, &[body]);
}

/// [`encode_record`] with a body given in parts (concatenated).
pub fn encode_record_parts(
    out: &mut Vec<u8>,
    salt: u64,
    offset: u64,
    meta: RecordMeta,
    parts: &[&[u8]],
) {
    assert_eq!(offset % RECORD_ALIGN as u64, 0, "records are 8-aligned");
    let body_len: usize = parts.iter().map(|p| p.len()).sum();
    let len = u32::try_from(body_len).expect("body length was validated against u32");
    let start = out.len();
    let frame = frame_bytes(body_len);
    out.reserve(frame);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // crc, below
    out.push(meta.record_type);
    out.push(meta.flags);
    out.extend_from_slice(&[0; 2]);
    out.extend_from_slice(&meta.lsn.to_le_bytes());
    out.extend_from_slice(&meta.durable_delta.to_le_bytes());
    for part in parts {
        out.extend_from_slice(part);
    }
    out.resize(start + frame, 0);
    let f = &mut out[start..];
    let crc = record_crc(crc_seed(salt, offset), f);
    f[CRC_OFFSET..TYPE_OFFSET].copy_from_slice(&crc.to_le_bytes());
}

/// Checks the parts of a record header that need no body: a non-zero type, zero reserved
/// bits, and a frame that ends within `room_bytes` (the bytes left in the segment at it).
pub fn check_record_header(h: &RecordHeader, room_bytes: u64) -> Result<(), CorruptionReason> {
    if h.record_type == RECORD_TYPE_INVALID {
        return Err(CorruptionReason::RecordType);
    }
    if h.reserved != 0 || h.flags & !FLAGS_KNOWN != 0 {
        return Err(CorruptionReason::RecordReserved);
    }
    if h.frame_bytes() > room_bytes {
        return Err(CorruptionReason::RecordLength { len: h.len });
    }
    Ok(())
}

/// Checks a whole frame's crc; `frame` is exactly `h.frame_bytes()` long.
pub fn check_record_crc(h: &RecordHeader, seed: u32, frame: &[u8]) -> Result<(), CorruptionReason> {
    assert_eq!(frame.len() as u64, h.frame_bytes());
    if record_crc(seed, frame) != h.crc {
        return Err(CorruptionReason::RecordChecksum);
    }
    Ok(())
}

/// Whether a reader must fail on this (crc-valid) record: a reserved type it does not know,
/// without [`FLAG_SKIPPABLE`]. Returns `Ok(true)` to yield it, `Ok(false)` to skip it.
pub fn record_disposition(h: &RecordHeader) -> Result<bool, CorruptionReason> {
    if h.record_type <= RECORD_TYPE_USER_MAX {
        Ok(true)
    } else if h.flags & FLAG_SKIPPABLE != 0 {
        Ok(false)
    } else {
        Err(CorruptionReason::UnknownRecordType {
            record_type: h.record_type,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_aligned() {
        assert_eq!(frame_bytes(0), 24);
        assert_eq!(frame_bytes(1), 32);
        assert_eq!(frame_bytes(8), 32);
        assert_eq!(frame_bytes(9), 40);
        assert_eq!(frame_bytes(40), 64);
    }

    #[test]
    fn durable_delta_never_over_claims() {
        assert_eq!(durable_delta(5, 0), 5);
        assert_eq!(vouched_lsn(5, 5), 0);
        assert_eq!(vouched_lsn(9, durable_delta(9, 7)), 7);
        let big = u64::from(u32::MAX) + 10;
        assert_eq!(durable_delta(big, 1), DURABLE_DELTA_NONE);
        assert_eq!(vouched_lsn(big, DURABLE_DELTA_NONE), 0);
    }

    #[test]
    fn header_roundtrip_and_crc() {
        let h = SegmentHeader {
            segment_id: 7,
            salt: 0xABCD,
            first_lsn: 99,
            segment_bytes: 8192,
            write_bound: 8192,
        };
        let mut b = encode_header(&h);
        assert_eq!(decode_header(&b), Ok(h));
        b[20] ^= 1;
        assert_eq!(decode_header(&b), Err(CorruptionReason::HeaderChecksum));
    }

    /// A version 3 header names a bound of 1..=the segment's pages; a header with any other
    /// is refused rather than read as "no bound" (found by the `wal_record_decode` fuzz
    /// target: such a header decoded but did not re-encode to the same bytes).
    #[test]
    fn header_write_bound_outside_the_segment_is_damage() {
        let h = SegmentHeader {
            segment_id: 7,
            salt: 0xABCD,
            first_lsn: 99,
            segment_bytes: 16384,
            write_bound: 8192,
        };
        let with_pages = |pages: u32| {
            let mut b = encode_header(&h);
            b[WRITE_BOUND_OFFSET..HEADER_PAD_OFFSET].copy_from_slice(&pages.to_le_bytes());
            let crc = crc32fast::hash(&b[..HEADER_CRC_OFFSET]);
            b[HEADER_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
            b
        };
        for pages in [0, 5, u32::MAX] {
            assert_eq!(
                decode_header(&with_pages(pages)),
                Err(CorruptionReason::HeaderWriteBound { pages })
            );
        }
        for pages in 1..=4 {
            let b = with_pages(pages);
            let d = decode_header(&b).unwrap();
            assert_eq!(d.write_bound, u64::from(pages) * WRITE_BOUND_UNIT);
            assert_eq!(encode_header(&d), b);
        }
        // A bound that is not a whole page is stored rounded up (never naming less room).
        let odd = SegmentHeader {
            segment_bytes: 9000,
            write_bound: 9000,
            ..h
        };
        let b = encode_header(&odd);
        assert_eq!(u32_at(&b, WRITE_BOUND_OFFSET), 3);
        assert_eq!(decode_header(&b).unwrap().write_bound, 9000);
    }

    #[test]
    fn record_crc_depends_on_salt_and_offset() {
        let meta = RecordMeta {
            lsn: 1,
            record_type: 1,
            flags: 0,
            durable_delta: 1,
        };
        let mut a = Vec::new();
        encode_record(&mut a, 1, 64, meta, b"hello");
        let h = decode_record_header(&a);
        assert!(check_record_crc(&h, crc_seed(1, 64), &a).is_ok());
        assert!(check_record_crc(&h, crc_seed(2, 64), &a).is_err());
        assert!(check_record_crc(&h, crc_seed(1, 72), &a).is_err());
        // The length is covered too.
        let mut b = a.clone();
        b[0] ^= 1;
        let hb = decode_record_header(&b);
        assert!(check_record_crc(&hb, crc_seed(1, 64), &b[..hb.frame_bytes() as usize]).is_err());
    }
}
