//! Deterministic fault injection: an in-memory disk that can crash, lose, tear and corrupt
//! writes, and a seedable RNG to drive simulations.
//!
//! Compiled for this crate's tests and, with the `testing` feature, for other crates' tests.
//!
//! # The model
//!
//! A [`FaultDisk`] holds files (inodes) and one directory.
//! - **Data.** Each file has a *live* image (what reads see) and a *durable* image (what the
//!   media holds), tracked per 512-byte sector. `write_at` changes the live image and marks
//!   its sectors dirty; `sync_range` widens its range to whole 4096-byte pages and copies their
//!   dirty sectors to the durable image. A failed sync (`EIO`) marks them clean *without*
//!   persisting them, as Linux does: the data stays readable, and is lost in a crash.
//! - **Directory.** `create`, `rename` and `remove` change the live directory and join a log
//!   of unsynced operations; `sync_dir` makes them durable. Files are inodes: a rename keeps
//!   the data, and open handles outlive `remove`. A new file is all zeros, also on the media.
//! - **Crash.** [`FaultDisk::crash`] builds a *new* disk from the durable state plus a random
//!   part of the unsynced state, with optional tearing, bit flips and misdirected writes
//!   ([`CrashOptions`]). The old disk and its handles stay as they were.
//! - **Failpoints.** [`FaultDisk::set_sync_failure`] (EIO), [`FaultDisk::set_enospc`] and
//!   [`FaultDisk::set_capacity_bytes`] (ENOSPC on `create`), [`FaultDisk::set_read_failure`]
//!   (EIO on reads) and [`FaultDisk::set_bad_sectors`] (media errors: reads of those sectors
//!   fail with EIO, across crashes).
//! - **Determinism.** All choices come from one [`SimRng`] per disk, seeded by the caller, and
//!   all state lives in ordered maps: the same seed and the same sequence of calls give the
//!   same crash images. (Calls from several threads are atomic, but their order is then the
//!   threads' order; a simulation that wants replays drives the disk from one thread.)
//!
//! # Example
//!
//! ```
//! use timewheel_wal::storage::{Storage, StorageFile};
//! use timewheel_wal::testing::{CrashOptions, FaultDisk};
//!
//! let disk = FaultDisk::new(42);
//! let storage = disk.storage();
//! assert!(storage.try_lock()?);
//! let file = storage.create("0000000000000001", 8192)?;
//! storage.sync_dir()?;
//! file.write_at(0, b"acknowledged")?;
//! file.sync_range(0, 12)?;
//! file.write_at(4096, b"in flight")?;
//!
//! let after = disk.crash(&CrashOptions::clean());
//! let image = after.durable_file("0000000000000001").unwrap();
//! assert_eq!(&image[..12], b"acknowledged");
//! assert_eq!(&image[4096..4105], [0; 9]); // unsynced: lost in a clean crash
//! # Ok::<(), std::io::Error>(())
//! ```

mod crash;
mod disk;
mod inode;
mod rng;
mod storage;

pub use crash::CrashOptions;
pub use disk::{FaultDisk, FaultStats, SyncFailure};
pub use rng::SimRng;
pub use storage::{FaultFile, FaultStorage};

/// The sector size of the simulated disk: the unit that a crash keeps or loses atomically.
pub const SECTOR_BYTES: usize = inode::SECTOR_BYTES;
/// The page size of the simulated disk: the unit of a sync, and of a crash without torn pages.
pub const PAGE_BYTES: usize = inode::PAGE_BYTES;
