//! The engine's errors.
//!
//! Bad input is [`Error::InvalidInput`] and writes nothing. I/O failures are `Err`s, never
//! panics. A broken invariant is an `assert!`, never an `Err`.

use std::io;

/// Everything that can go wrong in the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another engine (in this or another process) holds the data directory.
    #[error("the data directory is locked by another engine")]
    Locked,
    /// Acknowledged data on disk is damaged; the engine refuses to open rather than lose it.
    #[error("the log is corrupted in segment {segment} at offset {offset}: {reason}")]
    Corrupted {
        /// The segment id.
        segment: u64,
        /// The byte offset in that segment.
        offset: u64,
        /// What was wrong, as the log found it.
        reason: timewheel_wal::CorruptionReason,
    },
    /// A bucket file or the manifest (the compacted part of the data directory) is damaged,
    /// or does not agree with the rest; the engine refuses to open rather than lose jobs.
    #[error("the job store is corrupted in {file} at offset {offset}: {reason}")]
    CorruptedStore {
        /// The file.
        file: String,
        /// The byte offset in it (0 when the damage is in what the file says, not where).
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// An I/O error.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// A sync failed earlier; the engine acknowledges nothing more and must be reopened.
    #[error("the log is poisoned by an earlier failed sync; reopen the engine")]
    Poisoned,
    /// The request was refused before anything was written.
    #[error("invalid input: {field}: {reason}")]
    InvalidInput {
        /// The offending field.
        field: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// A record passed its checksum but can not be replayed: it does not decode (written by a
    /// newer version), or the one state machine refuses it (the live engine could not have
    /// written it after the records before it). Recovery stops rather than guess.
    #[error("the log record at LSN {lsn} can not be replayed: {reason}")]
    UndecodableRecord {
        /// Its position in the log.
        lsn: u64,
        /// Why.
        reason: String,
    },
    /// The engine was closed.
    #[error("the engine is closed")]
    Closed,
    /// The disk has no room for the log to grow; nothing was written.
    #[error("no space left for the log (segment {segment}): {source}")]
    NoSpace {
        /// The log segment that could not be allocated.
        segment: u64,
        /// The storage's error.
        #[source]
        source: io::Error,
    },
    /// Any other error from the log.
    #[error(transparent)]
    Wal(timewheel_wal::Error),
}

impl Error {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidInput {
            field,
            reason: reason.into(),
        }
    }
}

impl From<timewheel_wal::Error> for Error {
    fn from(e: timewheel_wal::Error) -> Self {
        use timewheel_wal::Error as W;
        match e {
            W::Locked => Error::Locked,
            W::Corrupted {
                segment,
                offset,
                reason,
            } => Error::Corrupted {
                segment,
                offset,
                reason,
            },
            W::Io(io) => Error::Io(io),
            W::Poisoned => Error::Poisoned,
            W::Closed => Error::Closed,
            W::NoSpace { segment, source } => Error::NoSpace { segment, source },
            other => Error::Wal(other),
        }
    }
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
