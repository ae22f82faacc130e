//! The durable peers of the engine: SQLite through rusqlite (bundled, so the version is pinned
//! by the lock file) and Redis through a minimal RESP client over TCP to a `redis-server` this
//! code starts on a loopback port.

pub mod redis;
pub mod sqlite;

/// A peer's failure, as text for the report.
pub type PeerResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
