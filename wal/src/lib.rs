//! `timewheel-wal`: a segmented, memory-mapped, append-only write-ahead log.
//!
//! A record is a type byte (`1..=0xEF`) plus opaque bytes; the log numbers records by LSN from
//! 1 without gaps, keeps them in fixed-size preallocated segment files, makes them durable with
//! group commit, and on open recovers: a torn tail (damage that nothing acknowledged depends
//! on) is cut off and logged, a damaged group is repaired from its mirror, and other damage to
//! acknowledged data refuses the open with [`Error::Corrupted`]. The byte layout is in [`format`](mod@format) and `docs/wal-format.md`.
//!
//! ```
//! use timewheel_wal::{Wal, WalOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let opts = WalOptions { segment_bytes: 1 << 20, record_bytes_max: 64 << 10, ..WalOptions::default() };
//! let (wal, report) = Wal::open_dir(dir.path(), opts.clone())?;
//! assert_eq!(report.last_lsn, 0);
//!
//! // Durable when it returns (the default `Durability::Sync`).
//! let first = wal.append(1, b"schedule job 7 at 09:00")?;
//! let last = wal.append_batch([(2, &b"cancel 7"[..]), (1, &b"schedule 8"[..])])?;
//! assert_eq!((first, last), (1, 3));
//! wal.close()?;
//!
//! // Reopening recovers every record, in order.
//! let (wal, report) = Wal::open_dir(dir.path(), opts)?;
//! assert_eq!(report.last_lsn, 3);
//! let bodies: Vec<Vec<u8>> = wal.iter_from(2).map(|r| r.map(|r| r.body)).collect::<Result<_, _>>()?;
//! assert_eq!(bodies, [b"cancel 7".to_vec(), b"schedule 8".to_vec()]);
//! # Ok(())
//! # }
//! ```
//!
//! # Guarantees
//!
//! - **Acknowledged means durable.** In [`Durability::Sync`] an append returns `Ok` only after
//!   a sync that covers its record succeeded; in the other modes, after [`Wal::wait_durable`]
//!   or [`Wal::sync`] returns `Ok`.
//! - **A failed sync poisons.** The caller whose sync failed gets [`Error::Io`]; every other
//!   waiter, and every later append or sync, gets [`Error::Poisoned`]. `durable_lsn` never
//!   moves again, so nothing written after the failure is ever acknowledged. Reopen to go on.
//! - **Recovery** returns exactly a gap-free prefix of what was written, containing every
//!   acknowledged record, or refuses with `Corrupted { segment, offset, reason }`.
//! - **A power cut never damages acknowledged records**, even on storage without powersafe
//!   overwrite: every group commit starts a fresh page, so a synced page is never written
//!   again. Damage to the newest acknowledged group is repaired from the mirror of its records
//!   that the same sync wrote; only two independent faults (in the group and in its mirror)
//!   can make it look like a torn tail.
//! - **Read errors are errors**: recovery and readers read with `pread`, so a media error is
//!   [`Error::Io`], never a `SIGBUS`.
//!
//! The engine shares a `Wal` through `Arc`; [`Wal::shutdown`] closes a shared log.
//!
//! An operator's repair (`timewheel repair`) cuts the log at a record boundary through
//! [`repair::plan_cut`] and [`repair::cut`], never by itself.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(unsafe_code)] // the one exception is `storage::mmap`, which opens with its ground rules
#![warn(missing_docs)]

mod commit;
pub mod error;
pub mod format;
mod log;
pub mod options;
mod reader;
pub mod recovery;
pub mod repair;
mod scan_ahead;
mod segment;
pub mod storage;
mod sync;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod zero;

pub use error::{CorruptionReason, Error};
pub use log::{SYNC_SECONDS_BOUNDS, SegmentInfo, Wal, WalStats};
pub use options::{Durability, RecoveryMode, WalOptions};
pub use reader::{Iter, Record, RecordRef};
pub use recovery::{Follow, RecoveryReport, RepairedGroup, TornTail};
pub use segment::{parse_segment_file_name, segment_file_name};
pub use storage::mmap::MmapStorage;
pub use storage::{Storage, StorageFile};

/// Log sequence number: records are numbered from 1 without gaps; 0 means "none".
pub type Lsn = u64;
