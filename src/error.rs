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
    /// A record passed its checksum but does not make sense to the engine (written by a
    /// newer version, or a bug): recovery stops rather than guess.
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

    /// A short, stable name for the kind of error, as the sidecar protocol reports it.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Locked => "locked",
            Error::Corrupted { .. } | Error::UndecodableRecord { .. } => "corrupted",
            Error::Io(_) => "io",
            Error::Poisoned => "poisoned",
            Error::InvalidInput { .. } => "invalid_input",
            Error::Closed => "closed",
            Error::Wal(_) => "io",
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
                reason: reason.to_string(),
            },
            W::Io(io) => Error::Io(io),
            W::Poisoned => Error::Poisoned,
            W::Closed => Error::Closed,
            other => Error::Wal(other),
        }
    }
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
