//! The storage the log runs on: a directory of fixed-size files, behind a small trait.
//!
//! The implementations:
//! - [`mmap::MmapStorage`]: real files, preallocated with `fallocate` and then memory-mapped.
//!   This is production, and the only place in the crate that holds `unsafe` code.
//! - [`readonly::ReadOnlyStorage`]: a directory read in place, for the operator's tools: the
//!   log can open it and run its whole recovery, but every change stays in memory.
//! - `testing::FaultStorage` (feature `testing`, or in this crate's own tests): an in-memory disk
//!   that keeps a *live* and a *durable* image of every file and of the directory, from which
//!   `crash()` builds what a power cut could leave behind. It also injects failures (sync `EIO`,
//!   preallocation `ENOSPC`).
//!
//! The log above never touches `std::fs` directly: everything it does to the disk goes through
//! these two traits, which is what lets the simulation drive the real code.

use std::io;

pub mod mmap;
pub mod readonly;

/// A directory of files that the log owns.
///
/// A file's *name* is a plain file name (no separators, not `.` or `..`, not the reserved
/// lock file name [`mmap::LOCK_FILE_NAME`]); other names are `InvalidInput` errors, in both
/// implementations. Directory operations (`create`, `rename`, `remove`) are not durable until
/// [`Storage::sync_dir`] returns `Ok`.
pub trait Storage: Send + Sync + 'static {
    /// A file of this storage.
    type File: StorageFile;

    /// Takes the exclusive lock on the directory for as long as this storage value lives.
    /// Returns `Ok(false)` when another owner holds it.
    fn try_lock(&self) -> io::Result<bool>;

    /// The names of the files in the directory, in no particular order. The lock file, if the
    /// implementation has one, is not listed.
    fn list(&self) -> io::Result<Vec<String>>;

    /// Creates a new file of exactly `len_bytes` bytes, all zero, with its blocks allocated up
    /// front (so that a later write into it can not fail for lack of space), and opens it.
    /// Fails with `AlreadyExists` if the name is taken, and with `StorageFull` (ENOSPC) if the
    /// space can not be allocated; in that case no file is left behind.
    fn create(&self, name: &str, len_bytes: u64) -> io::Result<Self::File>;

    /// Opens an existing file, whole.
    fn open(&self, name: &str) -> io::Result<Self::File>;

    /// Removes a file. Handles already open stay valid until dropped.
    fn remove(&self, name: &str) -> io::Result<()>;

    /// Renames a file, replacing `to` if it exists.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;

    /// Makes every earlier `create`, `rename` and `remove` durable.
    fn sync_dir(&self) -> io::Result<()>;

    /// Whether the log may prepare its next segment ahead of need on a background thread.
    /// When `false` (the default, so that a wrapper that does not forward it keeps the old,
    /// deterministic behaviour) an append makes the next segment's file when it needs it,
    /// under the append lock. [`mmap::MmapStorage`] says `true`; the fault storage says
    /// `false`, so that a simulation's disk sees the same calls in the same order for a seed.
    fn prepare_in_background(&self) -> bool {
        false
    }

    /// Whether reads of different files may run on several threads at once, in an order that
    /// varies from run to run: recovery then scans the next segments ahead on a second
    /// thread. Real files say `true`; the default, and the fault storage, say `false`, so that
    /// a simulation's disk sees the same calls in the same order for a seed.
    fn parallel_reads(&self) -> bool {
        false
    }
}

/// One open file of a [`Storage`]. Its length never changes while it is open.
///
/// All methods take `&self`: one appender writes while readers read the part already written.
pub trait StorageFile: Send + Sync + 'static {
    /// The length of the file in bytes.
    fn len_bytes(&self) -> u64;

    /// Copies `buf.len()` bytes at `offset` into `buf`. Reading past the end is an
    /// `UnexpectedEof` error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;

    /// Copies `data` into the file at `offset`. Writing past the end is an error. The write is
    /// visible to readers at once but durable only after a [`StorageFile::sync_range`] that
    /// covers it returns `Ok`.
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;

    /// Makes the bytes in `offset .. offset + len` durable (msync `MS_SYNC` / fdatasync).
    /// The range is widened to whole pages, so it may persist neighbouring bytes too; a range
    /// past the end is an error, an empty range does nothing. After an `Err`, the state of
    /// those bytes on disk is unknown (the fault storage assumes the worst: lost, though
    /// still readable), and the caller must not believe a retry (the log poisons itself
    /// instead).
    fn sync_range(&self, offset: u64, len: u64) -> io::Result<()>;

    /// A salt for a new segment in this file: a value no other segment of the directory's
    /// history is likely to share, so that a stale record (a misdirected write, a reused
    /// file's old bytes) can not validate in it. The default is random (a randomly keyed
    /// hash of a counter, the clock and the process id). The fault storage derives it from
    /// its seed and the file, so that a simulated disk holds the same bytes for a seed: with
    /// a random salt, a crash's injected damage was judged on bytes that differed from run to
    /// run, and about one seed run in 20,000 recovered differently.
    fn new_salt(&self) -> u64 {
        crate::segment::random_salt()
    }

    /// Reads `buf.len()` bytes at `offset` from the medium itself, past any cache that may
    /// show bytes the medium does not hold (a page that a failed write-back marked clean), and
    /// returns `Ok(true)`; or returns `Ok(false)` when this storage can not read that way (the
    /// default: callers then assume nothing about the medium). `offset` and `buf.len()` are
    /// multiples of 4096. Recovery calls it after a successful [`StorageFile::sync_range`] of
    /// the range, so what it reads is durable. A media error is an `Err`, as for `read_at`.
    fn read_durable(&self, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
        let _ = (offset, buf);
        Ok(false)
    }

    /// Prepares a freshly created (all-zero) file for appends, ahead of need and off the
    /// append path: so that the commits into it later write back only the pages they touch,
    /// convert no block on the medium, and take no page fault that reads, zeroes or allocates
    /// (see `MmapFile`'s implementation for what each of those cost). Called only on a file
    /// nothing else uses yet. The default does nothing (the fault storage has no page cache).
    fn prefault(&self) -> io::Result<()> {
        Ok(())
    }

    /// Brings the pages from `offset` to the end into memory for reading, so that the first
    /// write into each later takes only a cheap fault (no page to find, zero or read ahead).
    /// Unlike [`StorageFile::prefault`], it never marks a page dirty: it is safe on a file
    /// being appended to and synced meanwhile, since a synced page it touches is not written
    /// again. The log calls it on the segment it appends to after an open, whose pages past
    /// the end nothing prepared. The default does nothing.
    fn prefault_read(&self, offset: u64) -> io::Result<()> {
        let _ = offset;
        Ok(())
    }

    /// Maps for writing, ahead of the appender, the pages it copies into next: from the page
    /// after the highest byte copied into the file (and from `from` on, which the caller
    /// keeps: the end of the log in this file when it started, then what this returned) up
    /// to `ahead` bytes past that page. So the appender's first write into each page takes no
    /// fault; the mapping work runs on the caller's thread instead. It never touches a page a
    /// copy wrote: a synced page is never made dirty again. Returns the offset it mapped up
    /// to, to pass as `from` next time. The default maps nothing and returns `from`.
    fn map_ahead(&self, from: u64, ahead: u64) -> io::Result<u64> {
        let _ = ahead;
        Ok(from)
    }

    /// Prepares the pages from `offset` to the end of the file being appended to, while the
    /// appender writes: [`StorageFile::prefault_read`], and first, on a file this storage
    /// created with its blocks still unallocated on the medium (a fresh log's first segment),
    /// zeros over those blocks as [`StorageFile::prefault`] writes them, page by page ahead of
    /// the appender and never into a page it has written, so that the commits into the rest
    /// of the file convert no extent. The zeros go at most `ahead` bytes past the highest
    /// byte the appender has written: then it returns `Ok(Some(at))`, the offset to call it
    /// again from once the appender has moved on (a log that appends little writes few
    /// zeros). `Ok(None)` once the file is prepared to its end, or when `stop` says so
    /// (checked between steps). The default is `prefault_read`, then `Ok(None)`.
    fn prepare_in_use(
        &self,
        offset: u64,
        ahead: u64,
        stop: &dyn Fn() -> bool,
    ) -> io::Result<Option<u64>> {
        let _ = (ahead, stop);
        self.prefault_read(offset)?;
        Ok(None)
    }
}

/// Tries of the directory's lock before it is reported held (see [`try_lock_file`]).
const LOCK_TRIES: u32 = 10;
/// The pause between two tries: with `LOCK_TRIES`, a held lock is reported after about 45 ms.
const LOCK_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(5);

/// Takes the exclusive lock of the open `LOCK` file (std's `try_lock`, an `flock` on Linux):
/// `Ok(false)` if another holds it. A few tries, a few milliseconds apart: a child process
/// forked by any thread of the holding process keeps a copy of every descriptor until its exec
/// (close-on-exec closes it then), so a lock an engine released a moment ago can look held
/// (seen in this project's own tests, which spawn processes side by side). A real holder keeps
/// it past the last try.
pub(crate) fn try_lock_file(file: &std::fs::File) -> io::Result<bool> {
    for tries_left in (0..LOCK_TRIES).rev() {
        match std::fs::File::try_lock(file) {
            Ok(()) => return Ok(true),
            Err(std::fs::TryLockError::WouldBlock) if tries_left > 0 => {
                std::thread::sleep(LOCK_RETRY_PAUSE);
            }
            Err(std::fs::TryLockError::WouldBlock) => return Ok(false),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
    Ok(false)
}
