//! The crate's error type, and the structured reasons for corruption.
//!
//! One enum serves every operation: the operations share almost all their failure modes (I/O,
//! poisoning, closed), and the engine matches on the few that differ (`Locked`, `Corrupted`,
//! `RecordTooLarge`, `NoSpace`). The enum is `#[non_exhaustive]` so variants can be added.

use std::fmt;
use std::io;

use crate::Lsn;

/// Every error of the log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another owner (process or `Wal` value) holds the directory lock.
    #[error("the WAL directory is locked by another owner")]
    Locked,
    /// Damage to data that was acknowledged durable (or any damage under
    /// [`RecoveryMode::Absolute`](crate::RecoveryMode::Absolute)). Nothing was modified.
    #[error("WAL corrupted in segment {segment} at offset {offset}: {reason}")]
    Corrupted {
        /// The segment id (its file name).
        segment: u64,
        /// The byte offset in the segment file where the damage starts.
        offset: u64,
        /// What is wrong there.
        reason: CorruptionReason,
    },
    /// An I/O error. When it came from a write or sync, the log is also poisoned.
    #[error("WAL I/O error: {0}")]
    Io(#[from] io::Error),
    /// Preallocating a new segment failed for lack of space. Nothing was written and no file was
    /// left behind; the log stays usable, and a later append tries again.
    #[error("no space to preallocate WAL segment {segment}: {source}")]
    NoSpace {
        /// The id of the segment that could not be created.
        segment: u64,
        /// The storage's error.
        #[source]
        source: io::Error,
    },
    /// An earlier write or sync failed, so nothing can be acknowledged any more. Reopen the log
    /// (recovery decides what survived).
    #[error("the WAL is poisoned by an earlier failed write or sync")]
    Poisoned,
    /// The body is longer than `WalOptions::record_bytes_max`. Nothing was written.
    #[error("record body of {len} bytes exceeds record_bytes_max = {max}")]
    RecordTooLarge {
        /// The body length.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// The record type is 0 or reserved for the log (user types are `1..=0xEF`). Nothing was
    /// written.
    #[error("record type {0:#04x} is not a user type (1..=0xEF)")]
    InvalidRecordType(u8),
    /// The flags set bits that version 1 does not define. Nothing was written.
    #[error("record flags {0:#04x} set undefined bits")]
    InvalidFlags(u8),
    /// The options are inconsistent.
    #[error("invalid WAL options: {0}")]
    InvalidOptions(String),
    /// `wait_durable` was asked for an LSN that has not been written yet.
    #[error("LSN {lsn} has not been written (last written is {last})")]
    LsnNotWritten {
        /// The LSN asked for.
        lsn: Lsn,
        /// The last LSN written.
        last: Lsn,
    },
    /// The log was shut down.
    #[error("the WAL is closed")]
    Closed,
}

/// Why a segment or record is considered damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorruptionReason {
    /// The segment file is shorter than a header.
    FileTooSmall {
        /// Its length.
        bytes: u64,
    },
    /// The header crc does not match (torn or flipped header).
    HeaderChecksum,
    /// The header has the wrong magic.
    HeaderMagic,
    /// The header names a format version this code does not read.
    HeaderVersion {
        /// The version found.
        found: u16,
    },
    /// The header names an unknown checksum kind.
    HeaderChecksumKind {
        /// The kind found.
        found: u8,
    },
    /// Reserved header bytes are not zero.
    HeaderReserved,
    /// A version 3 header's write bound is zero or past the segment's end (no writer
    /// stores either).
    HeaderWriteBound {
        /// The bound found, in pages.
        pages: u32,
    },
    /// The header's segment id differs from the file name.
    HeaderSegmentId {
        /// The id in the header.
        found: u64,
    },
    /// The header's segment length differs from the file length.
    HeaderSegmentBytes {
        /// The length in the header.
        found: u64,
        /// The file's length.
        file_bytes: u64,
    },
    /// The segment's first LSN does not follow the previous segment's last.
    HeaderFirstLsn {
        /// The LSN expected.
        expected: Lsn,
        /// The LSN in the header.
        found: Lsn,
    },
    /// A segment id is missing between two present ones.
    SegmentMissing {
        /// The missing id.
        id: u64,
    },
    /// A record has type 0 where a record was expected (a hole).
    RecordType,
    /// A record sets reserved bits.
    RecordReserved,
    /// A record's length runs past the end of its segment.
    RecordLength {
        /// The length found.
        len: u32,
    },
    /// A record's crc does not match.
    RecordChecksum,
    /// A valid record has the wrong LSN (a gap, or a stale or misplaced record).
    RecordLsn {
        /// The LSN expected.
        expected: Lsn,
        /// The LSN found.
        found: Lsn,
    },
    /// A valid record of a reserved type this version does not know, not marked skippable.
    UnknownRecordType {
        /// The type.
        record_type: u8,
    },
    /// Non-zero bytes after the end of the records, where zero fill is expected.
    GarbageAfterEnd,
    /// A commit block whose records end without a valid mirror of them (a torn commit, or a
    /// damaged mirror), or a mirror that does not describe the group before it.
    Mirror,
    /// A log record (mirror, close marker) where a record of the group was expected.
    MisplacedLogRecord {
        /// Its type.
        record_type: u8,
    },
}

impl fmt::Display for CorruptionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::FileTooSmall { bytes } => write!(f, "file of {bytes} bytes is too small"),
            Self::HeaderChecksum => f.write_str("segment header checksum mismatch"),
            Self::HeaderMagic => f.write_str("segment header has the wrong magic"),
            Self::HeaderVersion { found } => write!(f, "unsupported format version {found}"),
            Self::HeaderChecksumKind { found } => write!(f, "unsupported checksum kind {found}"),
            Self::HeaderReserved => f.write_str("reserved segment header bytes are not zero"),
            Self::HeaderWriteBound { pages } => {
                write!(
                    f,
                    "header names a write bound of {pages} pages, outside the segment"
                )
            }
            Self::HeaderSegmentId { found } => {
                write!(f, "header names segment {found}, not the file's")
            }
            Self::HeaderSegmentBytes { found, file_bytes } => {
                write!(f, "header says {found} bytes, file has {file_bytes}")
            }
            Self::HeaderFirstLsn { expected, found } => {
                write!(f, "segment starts at LSN {found}, expected {expected}")
            }
            Self::SegmentMissing { id } => write!(f, "segment {id} is missing"),
            Self::RecordType => f.write_str("record type 0 (a hole) where a record was expected"),
            Self::RecordReserved => f.write_str("record sets reserved bits"),
            Self::RecordLength { len } => write!(f, "record length {len} runs past the segment"),
            Self::RecordChecksum => f.write_str("record checksum mismatch"),
            Self::RecordLsn { expected, found } => {
                write!(f, "record has LSN {found}, expected {expected}")
            }
            Self::UnknownRecordType { record_type } => {
                write!(
                    f,
                    "unknown reserved record type {record_type:#04x}, not skippable"
                )
            }
            Self::GarbageAfterEnd => f.write_str("non-zero bytes after the last record"),
            Self::Mirror => f.write_str("commit block without a valid mirror of its records"),
            Self::MisplacedLogRecord { record_type } => {
                write!(f, "log record of type {record_type:#04x} out of place")
            }
        }
    }
}

impl Error {
    /// Whether this error means the log refuses all further work.
    pub fn is_poisoned(&self) -> bool {
        matches!(self, Self::Poisoned)
    }
}
