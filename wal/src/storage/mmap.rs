//! [`MmapStorage`]: the production storage. Real files in one directory, preallocated with
//! `fallocate` and then memory-mapped with `memmap2`.
//!
//! # Ground rules
//!
//! This is the only module of the crate allowed `unsafe` code. The unsafe code that touches the
//! mapping is exactly one `ptr::copy_nonoverlapping` call, in [`MmapFile::write_at`], from a
//! caller's buffer into a shared file mapping, and one `MADV_DONTNEED` of written pages ahead
//! of their write-back (`MmapFile::unmap_written`, which changes no byte of the file); the
//! rest are system calls on descriptors. They rely on:
//!
//! 1. **The mapping stays valid and in bounds.** A `MappedFile` owns its `MmapRaw` (and the
//!    open `File`), so the mapping lives exactly as long as any handle to it. Every copy is
//!    bounds-checked against the length the mapping was made with, using checked arithmetic,
//!    before any pointer is formed.
//! 2. **Every mapped byte is backed by allocated blocks, and the file never shrinks.** Files
//!    are created here, allocated with `fallocate` (or explicit zero writes where the file
//!    system has no `fallocate`) and their length checked, all *before* they are mapped. No
//!    code in this crate truncates or resizes a file, mapped or not (the [`Storage`] trait has
//!    no such operation). A touch of a page beyond EOF, or of a page with no block on a full
//!    disk, would be a `SIGBUS`, not an error.
//! 3. **No data race inside the process.** Each mapped file has one `RwLock`: `write_at` copies
//!    under the write lock, `read_at` reads under a read lock, so a read never overlaps a
//!    concurrent write to the same mapping, whatever the callers do. Two handles on the same inode must
//!    share that lock, so handles are deduplicated through a process-wide registry keyed by
//!    `(device, inode)` (`REGISTRY`): opening a file that is already mapped anywhere in the
//!    process returns the existing mapping. A registry entry can not be confused with a
//!    recycled inode number, because the mapping it points to keeps its `File` open, which
//!    keeps the inode alive. No reference (`&[u8]`/`&mut [u8]`) to mapped memory is ever
//!    created; the map is touched only through raw pointers inside the two copies.
//! 4. **No other process writes the files.** The directory lock ([`Storage::try_lock`]) keeps
//!    other timewheel processes out. A foreign process that writes or truncates our files
//!    while they are mapped is outside the contract, as for every user of `mmap`; the lock is
//!    how the engine makes sure that does not happen by accident.
//!
//! **Reads never touch the map.** [`MmapFile::read_at`] is a positional `pread` on the file
//! descriptor (`FileExt::read_exact_at`). A read of a page that hits a media error is then an
//! `EIO` from the system call, which recovery and readers report as `Error::Io`, instead of a
//! `SIGBUS` from touching a mapped page that can not be read in. `pread` sees exactly what the
//! map wrote: a `MAP_SHARED` mapping and the file share one page cache.
//!
//! **Page-sized folios, written blocks.** An `msync` writes back every *folio* with a dirty
//! byte, and a write through a shared mapping dirties its whole folio. Linux (6.x) keeps file
//! pages in large folios where it can: readahead (a `pread`, or a fault on a mapped page) and
//! large `write`s fill the cache with folios of up to 2 MiB. One 640-byte commit into such a
//! folio wrote it all back: measured on this project's machine (ext4, kernel 6.18), single
//! durable schedules wrote 100 KB to 1 MB per sync, 2-7 GB in a 3 s run, and each `msync` took
//! 250-1200 µs instead of about 150 µs. So every file of this storage is opened with
//! `POSIX_FADV_RANDOM` (a `pread` reads what it asks for, into single pages) and mapped with
//! `MADV_RANDOM` (a fault reads one page), and [`MmapFile::prefault`] fills a fresh file with
//! zeros one page per `pwrite`. Those zero writes also turn the blocks `fallocate` left
//! *unwritten* into written ones: otherwise the first commit into each block also converts its
//! extent, one more synchronous write per sync (on ext4 without a journal, 3 writes per sync
//! instead of 2, about 250-400 µs instead of 120-170 µs). The cost: a segment's bytes are
//! written twice (zeros in the background, then records). A fresh log's first segment can not
//! be prepared so before its open returns (the open would wait for 64 MiB of zeros), so the
//! preparing thread writes its zeros while the log appends to it
//! ([`StorageFile::prepare_in_use`]): a step of 16 KiB at a time under the copy lock, always
//! past the page of the highest byte the appender has copied, so that no zero lands on a
//! record, and no further than a reach past it (the log's preparer calls again as the
//! appender moves on; a log that appends little writes few zeros). Its commits convert extents only until the zeros pass them (measured: single
//! durable schedules from one thread 3.0k/s before, 4.1-5.2k/s after, syncs of 310 µs against
//! 180-220 µs; docs/benchmarks.md).
//!
//! **Pages mapped ahead of the appender.** A first write into a page of the map is a page
//! fault (the page looked up, made writable, the file system told): 2-6 µs here, one per 4 KiB
//! of records and mirrors, on the appender's thread under the log's lock: a sixth of a durable
//! batch's CPU. [`StorageFile::map_ahead`] takes those faults on another thread, the log's
//! mapper: `MADV_POPULATE_WRITE` of the pages a few MiB past the last copy's page, under the
//! copy lock (shared), so that no copy lands in a page while it is mapped. Such a page holds
//! no record and was never synced by a commit; it is dirty from then on, with the bytes it
//! held (zeros; after an open, possibly stray bytes past the write bound that the log's
//! checker has yet to prove zero, which it does through the cache as before): a write-back
//! before the appender reaches it writes the bytes the medium holds and changes none. It is
//! never a page of a fresh file's unwritten extents that its zeros have not reached
//! (`MmapFile::zero_ahead_of_copies` records how far they went), whose zeros' own write-back
//! would write-protect it again.
//!
//! Who may touch the map: only [`MmapFile::write_at`] (the copy), [`MmapFile::sync_range`]
//! (`MADV_DONTNEED` of the whole pages below the last copy's, then `msync`) and
//! [`StorageFile::map_ahead`] (`MADV_POPULATE_WRITE` past the last copy's page): system calls
//! that need no lock, racing with nothing in the Rust memory model. A write into a mapped page
//! that is not resident reads it in first; the log only writes pages of preallocated files
//! that it has not written before or that it wrote itself in this process (still cached), so
//! that read is of zeros or of cache.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{FileExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};

use fs4::FileExt as _;
use memmap2::{Advice, MmapMut, MmapRaw, UncheckedAdvice};

use super::{Storage, StorageFile};

/// The name of the lock file in the directory. It is never listed, and can not be used as the
/// name of a log file.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// Linux's `EINVAL`: what `madvise` returns for an advice the kernel does not know.
const EINVAL: i32 = 22;

/// Linux's `EOPNOTSUPP`: `fallocate` is not supported by this file system.
const EOPNOTSUPP: i32 = 95;

/// Linux's `O_DIRECT` on the architectures where we know its value (it differs by
/// architecture); elsewhere [`StorageFile::read_durable`] says it can not read the medium.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "x86", target_arch = "riscv64")
))]
const O_DIRECT: Option<i32> = Some(0o40000);
#[cfg(all(target_os = "linux", any(target_arch = "aarch64", target_arch = "arm")))]
const O_DIRECT: Option<i32> = Some(0o200000);
#[cfg(not(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "riscv64",
        target_arch = "aarch64",
        target_arch = "arm"
    )
)))]
const O_DIRECT: Option<i32> = None;

/// Bytes per `O_DIRECT` read (through one page-aligned anonymous buffer).
const DIRECT_READ_CHUNK_BYTES: usize = 1 << 20;

/// Longest range one `MADV_POPULATE_READ` call maps (see [`StorageFile::prefault`]).
const POPULATE_PIECE_BYTES: usize = 1 << 20;

/// The page size the mapping works in.
const PAGE: usize = 4096;

/// The start of the first page at or after `offset` that a file of `len` bytes has (`len` if
/// none): the first page that no copy ending at `offset` touched.
fn page_from(offset: u64, len: usize) -> usize {
    usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(len)
        .next_multiple_of(PAGE)
        .min(len)
}

/// Pages mapped for writing per hold of the copy lock by [`StorageFile::map_ahead`] (16
/// pages: the longest a copy waits for it, a few tens of µs).
const MAP_AHEAD_STEP_BYTES: usize = 64 << 10;

/// Bytes per zero write when [`StorageFile::prefault`] writes a fresh file's blocks: one page,
/// so that the page cache holds the file in single-page folios (see "Page-sized folios").
const PAGE_ZERO_BYTES: usize = 4096;

/// Zeros written and written back per step when [`StorageFile::prefault`] prepares a file.
const ZERO_PIECE_BYTES: usize = 1 << 20;

/// Zeros written per hold of the copy lock when the file in use is prepared ahead of the
/// appender ([`StorageFile::prepare_in_use`]): the longest a copy can wait for it.
const ZERO_HOLD_BYTES: usize = 16 << 10;

/// Writes back `start .. start + len` and waits for it (`sync_file_range`, data only: the
/// caller's `fdatasync` later makes the blocks' metadata durable). Elsewhere than Linux, does
/// nothing.
#[cfg(target_os = "linux")]
fn write_back_and_wait(file: &File, start: usize, len: usize) -> io::Result<()> {
    // `sync_file_range` reads a length of 0 as "to the end of the file".
    if len == 0 {
        return Ok(());
    }
    // SAFETY: `sync_file_range` reads no user memory; it takes the descriptor of an open file
    // that `file` keeps alive, and a range inside that file.
    let rc = unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            start as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn write_back_and_wait(_file: &File, _start: usize, _len: usize) -> io::Result<()> {
    Ok(())
}

/// Writes zeros over `from..to` of `file`, one page per `pwrite` (see "Page-sized folios").
fn write_zero_pages(file: &File, from: usize, to: usize) -> io::Result<()> {
    let zeros = [0u8; PAGE_ZERO_BYTES];
    let mut at = from;
    while at < to {
        let n = PAGE_ZERO_BYTES.min(to - at);
        file.write_all_at(&zeros[..n], at as u64)?;
        at += n;
    }
    Ok(())
}

/// Longest range one `sync_file_range` call starts writing back (see
/// [`start_writeback_in_pieces`]).
const WRITEBACK_PIECE_BYTES: usize = 256 << 10;

/// Starts the write-back of a long range in pieces of [`WRITEBACK_PIECE_BYTES`], one system
/// call each, before the `msync` that writes what is left, waits and flushes the device.
///
/// Why: one `msync` of megabytes runs in the kernel for milliseconds (every dirty page is
/// write-protected again, one TLB shootdown each), measured at 11-27 ms on the CPU in the
/// demo, and a kernel built `PREEMPT_NONE` lets no other thread onto that CPU meanwhile, not
/// even the real-time timer thread. Each return from a piece is a point where it can run. The
/// pieces only start I/O (`SYNC_FILE_RANGE_WRITE`, no wait), so the device still sees one
/// stream. A failure here is ignored: the `msync` after it writes the same pages and reports
/// the error, if any (the kernel keeps a write-back error for the next sync).
#[cfg(target_os = "linux")]
fn start_writeback_in_pieces(file: &File, start: usize, len: usize) {
    if len <= WRITEBACK_PIECE_BYTES {
        return;
    }
    let end = start + len;
    let mut offset = start;
    while offset < end {
        let n = WRITEBACK_PIECE_BYTES.min(end - offset);
        // SAFETY: `sync_file_range` reads no user memory; it takes the descriptor of an open
        // file that `file` keeps alive, and a range already checked to lie inside that file.
        let rc = unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                offset as libc::off64_t,
                n as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        if rc != 0 {
            return;
        }
        offset += n;
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback_in_pieces(_file: &File, _start: usize, _len: usize) {}

/// Checks that `name` is a plain file name that a [`Storage`] accepts: not empty, no path
/// separator, not `.` or `..`, not the lock file, no NUL. Both storages share this check, so
/// that code that works on the fault-injecting disk also works on real files.
pub(crate) fn check_name(name: &str) -> io::Result<()> {
    let bad = name.is_empty()
        || name == "."
        || name == ".."
        || name == LOCK_FILE_NAME
        || name.contains(['/', '\\', '\0']);
    if bad {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid storage file name {name:?}"),
        ));
    }
    Ok(())
}

/// Checks that `offset .. offset + len` lies inside a file of `file_len` bytes, and returns
/// the range as `usize`s. The error kind is the caller's (`UnexpectedEof` for reads); `what`
/// names the operation, formatted only for the error.
pub(crate) fn check_range(
    file_len: u64,
    offset: u64,
    len: usize,
    kind: io::ErrorKind,
    what: impl FnOnce() -> String,
) -> io::Result<(usize, usize)> {
    let end = offset.checked_add(len as u64);
    match end {
        Some(end) if end <= file_len => Ok((offset as usize, len)),
        _ => Err(io::Error::new(
            kind,
            format!(
                "{} of {len} bytes at offset {offset} is past the end ({file_len} bytes)",
                what()
            ),
        )),
    }
}

/// Every mapping of this process, keyed by `(device, inode)`, so that two handles on one file
/// share one lock (ground rule 3). Dead entries are pruned when a mapping is dropped.
static REGISTRY: Mutex<BTreeMap<(u64, u64), Weak<MappedFile>>> = Mutex::new(BTreeMap::new());

/// A directory of preallocated, memory-mapped files. See the module's ground rules.
#[derive(Debug)]
pub struct MmapStorage {
    dir: PathBuf,
    /// The open `LOCK` file once [`Storage::try_lock`] succeeded; the lock lives as long as it.
    lock: Mutex<Option<File>>,
}

impl MmapStorage {
    /// Opens the storage rooted at `path`, creating the directory (and syncing its parent) if
    /// it does not exist. Does not lock it: call [`Storage::try_lock`].
    pub fn open_dir(path: impl AsRef<Path>) -> io::Result<MmapStorage> {
        let dir = path.as_ref().to_path_buf();
        if !dir.is_dir() {
            fs::create_dir_all(&dir)?;
            // The new directory entry itself must survive a crash, or a later sync_dir syncs
            // a directory that may vanish.
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                File::open(parent)?.sync_all()?;
            }
        }
        Ok(MmapStorage {
            dir,
            lock: Mutex::new(None),
        })
    }

    /// The directory this storage works in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, name: &str) -> io::Result<PathBuf> {
        check_name(name)?;
        Ok(self.dir.join(name))
    }

    /// Allocates `len_bytes` for a freshly created, empty `file`, makes its length durable and
    /// maps it. The caller removes the file if this fails.
    fn allocate_and_map(&self, name: &str, file: File, len_bytes: u64) -> io::Result<MmapFile> {
        // Whether `fallocate` left the blocks unwritten (zero-filled files are written).
        let mut unwritten = false;
        if len_bytes > 0 {
            match file.allocate(len_bytes) {
                Ok(()) => unwritten = true,
                Err(e) if e.raw_os_error() == Some(EOPNOTSUPP) => zero_fill(&file, len_bytes)?,
                Err(e) => return Err(e),
            }
        }
        let actual_bytes = file.metadata()?.len();
        if actual_bytes != len_bytes {
            return Err(io::Error::other(format!(
                "{name}: allocated {actual_bytes} bytes, expected {len_bytes}"
            )));
        }
        // The length (and the allocation) must be durable before anyone relies on the file:
        // msync later only promises the data, and sync_dir only the directory entry.
        file.sync_all()?;
        let mapped = MappedFile::register(name, file)?;
        mapped.shared.unwritten.store(unwritten, Ordering::Relaxed);
        Ok(mapped)
    }
}

/// Asks the kernel to read this file one requested range at a time, into single-page folios,
/// both for `pread` and for faults on the mapping (see "Page-sized folios"). Only a cost if it
/// fails: logged, not returned.
fn read_single_pages(name: &str, file: &File, map: &MmapRaw) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: posix_fadvise reads no user memory; the descriptor is open (owned by `file`).
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        if rc != 0 {
            tracing::debug!(name, rc, "posix_fadvise(RANDOM) failed");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
    if map.len() > 0
        && let Err(e) = map.advise(Advice::Random)
    {
        tracing::debug!(name, error = %e, "madvise(RANDOM) failed");
    }
}

/// Writes zeros over the whole file, for file systems without `fallocate`: this allocates
/// every block, which is what protects the mapping from `SIGBUS` on a full disk.
fn zero_fill(file: &File, len_bytes: u64) -> io::Result<()> {
    let zeros = vec![0u8; PAGE_ZERO_BYTES.min(len_bytes as usize)];
    let mut offset = 0u64;
    while offset < len_bytes {
        let n = zeros.len().min((len_bytes - offset) as usize);
        file.write_all_at(&zeros[..n], offset)?;
        offset += n as u64;
    }
    Ok(())
}

impl Storage for MmapStorage {
    type File = MmapFile;

    fn prepare_in_background(&self) -> bool {
        true
    }

    fn parallel_reads(&self) -> bool {
        true
    }

    fn try_lock(&self) -> io::Result<bool> {
        let mut held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        if held.is_some() {
            return Ok(true);
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join(LOCK_FILE_NAME))?;
        // std's lock (flock on Linux), called by path to avoid fs4's FileExt::try_lock. flock
        // belongs to the open file description, so a second MmapStorage in this same process
        // is refused too.
        if super::try_lock_file(&file)? {
            *held = Some(file);
            return Ok(true);
        }
        Ok(false)
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if !entry.file_type()?.is_file() {
                continue;
            }
            match entry.file_name().into_string() {
                Ok(name) if name == LOCK_FILE_NAME => {}
                Ok(name) => names.push(name),
                // Not a name this storage could have made; the log has no use for it.
                Err(name) => tracing::warn!(?name, dir = ?self.dir, "ignoring non-UTF-8 file"),
            }
        }
        Ok(names)
    }

    fn create(&self, name: &str, len_bytes: u64) -> io::Result<MmapFile> {
        let path = self.path_of(name)?;
        if usize::try_from(len_bytes).is_err() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name}: {len_bytes} bytes can not be mapped on this platform"),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        match self.allocate_and_map(name, file, len_bytes) {
            Ok(mapped) => Ok(mapped),
            Err(e) => {
                // No half-made file: the caller sees the original error (ENOSPC stays
                // StorageFull), and a failed cleanup is only logged.
                if let Err(rm) = fs::remove_file(&path) {
                    tracing::warn!(?path, error = %rm, "could not remove half-created file");
                }
                Err(e)
            }
        }
    }

    fn open(&self, name: &str) -> io::Result<MmapFile> {
        let path = self.path_of(name)?;
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        MappedFile::register(name, file)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.path_of(name)?)
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.path_of(from)?, self.path_of(to)?)
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }
}

/// See `MappedFile::map_hook`.
#[cfg(test)]
#[derive(Default)]
struct MapHook(Mutex<Option<HookFn>>);

/// What a test runs at the hook: given the first byte of the step about to be mapped.
#[cfg(test)]
type HookFn = Box<dyn FnMut(usize) + Send>;

#[cfg(test)]
impl std::fmt::Debug for MapHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MapHook")
    }
}

/// One mapping of one inode, shared by all handles on it in this process.
#[derive(Debug)]
struct MappedFile {
    /// The registry key, to prune the entry on drop.
    key: (u64, u64),
    /// The name the file was first opened under, for error messages only (it may be renamed).
    opened_as: String,
    len_bytes: u64,
    /// Orders the copies (ground rule 3): writers exclusive, readers shared. Holds the end of
    /// the highest byte ever copied into the map by this process (0 for none): no page at or
    /// after the page that follows it was written here.
    copy_lock: RwLock<u64>,
    /// Set when this process created the file with `fallocate` (its blocks are *unwritten*:
    /// all zero, and the first write-back into each converts its extent) and no one has
    /// written zeros over them since ([`StorageFile::prefault`], or
    /// [`StorageFile::prepare_in_use`] on the file in use).
    unwritten: AtomicBool,
    /// While `unwritten`: the zeros [`MmapFile::zero_ahead_of_copies`] wrote and wrote back
    /// reach this offset, so a page below it may be mapped for writing
    /// ([`StorageFile::map_ahead`]) without a later write-back of zeros write-protecting it.
    zeroed_to: AtomicU64,
    /// Cleared when `MADV_POPULATE_WRITE` failed on this mapping: no more mapping ahead.
    maps_ahead: AtomicBool,
    /// A test's hook into [`StorageFile::map_ahead`], called with the step's first byte after
    /// the step read the last copy's end and before it maps: where a race would go.
    #[cfg(test)]
    map_hook: MapHook,
    map: MmapRaw,
    /// Kept open so that the inode (and with it the registry key) stays alive as long as the
    /// mapping does; reads `pread` from it.
    file: File,
}

impl MappedFile {
    /// Returns the process's mapping of `file`'s inode, mapping it if there is none yet.
    fn register(name: &str, file: File) -> io::Result<MmapFile> {
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name} is not a regular file"),
            ));
        }
        let key = (meta.dev(), meta.ino());
        let mut registry = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(shared) = registry.get(&key).and_then(Weak::upgrade) {
            return Ok(MmapFile { shared });
        }
        let len_bytes = meta.len();
        if usize::try_from(len_bytes).is_err() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name}: {len_bytes} bytes can not be mapped on this platform"),
            ));
        }
        let map = MmapRaw::map_raw(&file)?;
        read_single_pages(name, &file, &map);
        assert!(
            map.len() as u64 == len_bytes || len_bytes == 0,
            "{name}: mapped {} bytes of a {len_bytes}-byte file",
            map.len()
        );
        let shared = Arc::new(MappedFile {
            key,
            opened_as: name.to_owned(),
            len_bytes,
            copy_lock: RwLock::new(0),
            unwritten: AtomicBool::new(false),
            zeroed_to: AtomicU64::new(0),
            maps_ahead: AtomicBool::new(true),
            #[cfg(test)]
            map_hook: MapHook::default(),
            map,
            file,
        });
        registry.insert(key, Arc::downgrade(&shared));
        Ok(MmapFile { shared })
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        let mut registry = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
        // Another thread may already have re-registered this inode with a fresh mapping
        // (our File is still open, so the key can only mean this same inode): keep that one.
        if registry
            .get(&self.key)
            .is_some_and(|w| w.strong_count() == 0)
        {
            registry.remove(&self.key);
        }
    }
}

/// A handle on one memory-mapped file of an [`MmapStorage`]. Cloning it is cheap, and all
/// handles on one file (in this process) share one mapping.
#[derive(Debug, Clone)]
pub struct MmapFile {
    shared: Arc<MappedFile>,
}

/// Puts the calling thread's I/O in the idle class (`IOPRIO_CLASS_IDLE`): the device's
/// scheduler serves it only when no other I/O is queued, so that the log's preparing thread
/// (zeros for the next segment, 64 MiB at a time) does not delay the commits' syncs. Only a
/// cost if refused (a scheduler without classes ignores it); logged at debug.
pub(crate) fn background_io_class() {
    #[cfg(target_os = "linux")]
    {
        const WHO_PROCESS: libc::c_long = 1;
        const CLASS_IDLE: libc::c_long = 3;
        const CLASS_SHIFT: libc::c_long = 13;
        // SAFETY: ioprio_set reads and writes no user memory; `0` names the calling thread.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_ioprio_set,
                WHO_PROCESS,
                0,
                CLASS_IDLE << CLASS_SHIFT,
            )
        };
        if rc != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "ioprio_set(IDLE) refused");
        }
    }
}

impl MmapFile {
    /// Unmaps the pages that `start .. end` touches below the page the highest copy ended in,
    /// ahead of their write-back (`MADV_DONTNEED`): the log appends, so no copy writes them
    /// again, and their write-back then has no mapping to write-protect. Mapped, each page
    /// written back was write-protected on its own, and each write-protection flushed the
    /// other cores' TLBs by an interrupt (measured: about 9 % of the CPU of durable batches, on
    /// a VM where an interrupt between cores is a hypervisor exit); unmapped, the range takes
    /// one flush. A later write to such a page (none is made today) maps it again from the
    /// cache, as any first write does. Best effort: a failure only leaves the pages mapped.
    fn unmap_written(&self, start: usize, end: usize) {
        let f = &*self.shared;
        let copied_end = *f.copy_lock.read().unwrap_or_else(PoisonError::into_inner);
        // The page holding `start` too: a page below the last copy's is complete.
        let first = (start / PAGE) * PAGE;
        let last = (end.min(usize::try_from(copied_end).unwrap_or(usize::MAX)) / PAGE) * PAGE;
        if first >= last {
            return;
        }
        // SAFETY: `MADV_DONTNEED` on a shared file mapping only removes the page-table entries
        // of `first .. last` (in bounds: at most the synced range, checked against the
        // mapping's length by the caller): the pages and their dirty data stay in the page
        // cache, and the next touch of one maps it again with the same bytes, so no byte of the
        // file changes. No reference to mapped memory exists (ground rule 3), so none can see
        // a page go; a copy racing with this call (into later pages only, see above) faults
        // its page in again if it is in the range.
        if let Err(e) = unsafe {
            f.map
                .unchecked_advise_range(UncheckedAdvice::DontNeed, first, last - first)
        } {
            tracing::debug!(name = %f.opened_as, error = %e, "madvise(DONTNEED) failed");
        }
    }

    /// Writes zeros over the pages from `offset` to the end that no copy has touched, while
    /// the appender copies records into the pages before them: [`StorageFile::prefault`]'s
    /// zeros, for a file already in use (a fresh log's first segment). Each step holds the copy
    /// lock for [`ZERO_HOLD_BYTES`], starting past the page of the highest byte ever copied,
    /// so it never writes a page that holds a record and no copy waits longer than one step.
    /// Goes at most `ahead` bytes past that page: returns `Some(at)` when it stopped there
    /// with more to do, `None` at the end of the file or when `stop` says so. Paced as
    /// `prefault` is; what it wrote is durable when it returns.
    fn zero_ahead_of_copies(
        &self,
        offset: u64,
        ahead: u64,
        stop: &dyn Fn() -> bool,
    ) -> io::Result<Option<u64>> {
        let f = &*self.shared;
        let len = f.len_bytes as usize;
        let ahead = usize::try_from(ahead).unwrap_or(usize::MAX);
        let mut at = page_from(offset, len);
        // Zeros written and not yet written back: `piece_start .. at`.
        let mut piece_start = at;
        let (mut wrote, mut paused) = (false, false);
        while at < len {
            if stop() {
                break;
            }
            let copied_end = f.copy_lock.write().unwrap_or_else(PoisonError::into_inner);
            let clear = page_from(*copied_end, len);
            if clear > at {
                // The appender went past: what lies behind it is its own.
                drop(copied_end);
                write_back_and_wait(&f.file, piece_start, at - piece_start)?;
                f.zeroed_to.fetch_max(at as u64, Ordering::Relaxed);
                (at, piece_start) = (clear, clear);
                continue;
            }
            let limit = clear.saturating_add(ahead).min(len);
            if at >= limit {
                paused = true;
                break;
            }
            let hold_end = (at + ZERO_HOLD_BYTES).min(limit);
            write_zero_pages(&f.file, at, hold_end)?;
            (at, wrote) = (hold_end, true);
            drop(copied_end);
            if at - piece_start >= ZERO_PIECE_BYTES {
                write_back_and_wait(&f.file, piece_start, at - piece_start)?;
                f.zeroed_to.fetch_max(at as u64, Ordering::Relaxed);
                piece_start = at;
            }
        }
        write_back_and_wait(&f.file, piece_start, at - piece_start)?;
        f.zeroed_to.fetch_max(at as u64, Ordering::Relaxed);
        if wrote {
            // The converted extents: durable now, not in the next commit's sync.
            f.file.sync_data()?;
        }
        Ok(paused.then_some(at as u64))
    }
}

impl StorageFile for MmapFile {
    fn len_bytes(&self) -> u64 {
        self.shared.len_bytes
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let f = &*self.shared;
        let (start, len) = check_range(
            f.len_bytes,
            offset,
            buf.len(),
            io::ErrorKind::UnexpectedEof,
            || format!("{}: read", f.opened_as),
        )?;
        if len == 0 {
            return Ok(());
        }
        let _guard = f.copy_lock.read().unwrap_or_else(PoisonError::into_inner);
        // A positional read on the descriptor, never through the map (see "Reads never touch
        // the map"): a media error is an `EIO` here, not a `SIGBUS`.
        f.file.read_exact_at(buf, start as u64)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let f = &*self.shared;
        let (start, len) = check_range(
            f.len_bytes,
            offset,
            data.len(),
            io::ErrorKind::InvalidInput,
            || format!("{}: write", f.opened_as),
        )?;
        if len == 0 {
            return Ok(());
        }
        let mut copied_end = f.copy_lock.write().unwrap_or_else(PoisonError::into_inner);
        *copied_end = (*copied_end).max((start + len) as u64);
        // SAFETY: the destination is in bounds of the live, fully allocated mapping (rules 1
        // and 2). The write lock excludes every other in-process reader and writer of this
        // inode (rule 3). `data` is a Rust slice, which can not alias the mapping because no
        // reference to mapped memory is ever handed out.
        unsafe {
            ptr::copy_nonoverlapping(data.as_ptr(), f.map.as_mut_ptr().add(start), len);
        }
        Ok(())
    }

    fn sync_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let f = &*self.shared;
        let len = usize::try_from(len).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "sync length overflows usize")
        })?;
        let (start, len) = check_range(
            f.len_bytes,
            offset,
            len,
            io::ErrorKind::InvalidInput,
            || format!("{}: sync", f.opened_as),
        )?;
        if len == 0 {
            return Ok(());
        }
        self.unmap_written(start, start + len);
        start_writeback_in_pieces(&f.file, start, len);
        // memmap2 rounds the start down to a page boundary; msync(MS_SYNC) then covers every
        // page the range touches.
        f.map.flush_range(start, len)
    }

    /// An `O_DIRECT` read (Linux), which bypasses the page cache: it reads what the device
    /// holds, not a cached page that a failed write-back left clean but unwritten. The file is
    /// opened again through `/proc/self/fd` with `O_DIRECT`; a file system that refuses
    /// `O_DIRECT` (tmpfs), a missing `/proc` or an unknown platform is `Ok(false)`. The buffer
    /// is an anonymous mapping, so it is page aligned, as `O_DIRECT` needs.
    fn read_durable(&self, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
        let f = &*self.shared;
        check_range(
            f.len_bytes,
            offset,
            buf.len(),
            io::ErrorKind::UnexpectedEof,
            || format!("{}: direct read", f.opened_as),
        )?;
        if !offset.is_multiple_of(4096) || !buf.len().is_multiple_of(4096) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a direct read must be page aligned",
            ));
        }
        let Some(o_direct) = O_DIRECT else {
            return Ok(false);
        };
        if buf.is_empty() {
            return Ok(true);
        }
        let direct = match OpenOptions::new()
            .read(true)
            .custom_flags(o_direct)
            .open(format!("/proc/self/fd/{}", f.file.as_raw_fd()))
        {
            Ok(file) => file,
            Err(e) if e.raw_os_error() == Some(EINVAL) || e.kind() == io::ErrorKind::NotFound => {
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let mut aligned = MmapMut::map_anon(DIRECT_READ_CHUNK_BYTES.min(buf.len()))?;
        let mut done = 0usize;
        while done < buf.len() {
            let n = aligned.len().min(buf.len() - done);
            match direct.read_exact_at(&mut aligned[..n], offset + done as u64) {
                Ok(()) => {}
                // Some file systems accept the open but not the read.
                Err(e) if e.raw_os_error() == Some(EINVAL) => return Ok(false),
                Err(e) => return Err(e),
            }
            buf[done..done + n].copy_from_slice(&aligned[..n]);
            done += n;
        }
        Ok(true)
    }

    fn prefault(&self) -> io::Result<()> {
        let f = &*self.shared;
        f.unwritten.store(false, Ordering::Relaxed);
        let len = f.len_bytes as usize;
        if len == 0 {
            return Ok(());
        }
        // Zeros over the zeros, one page per `pwrite` (see "Page-sized folios"): the blocks
        // become written ones and the page cache holds the file in single-page folios, so
        // that each later commit writes back only the pages it touched and converts no extent.
        // Through the descriptor, not the map: nothing is mapped writable yet, so the sync
        // below write-protects nothing and no later write takes a second fault. The file is
        // fresh and nothing else uses it (the trait's contract), so no record can be
        // overwritten.
        //
        // Paced: each piece of `ZERO_PIECE_BYTES` is written back and waited for before the
        // next is written, so the device never holds more than one piece of zeros ahead of a
        // commit's sync. (Written at once, the 64 MiB went to the device as one burst of
        // write-back, and the commits of the segment in use waited behind it: tenant 2's p99
        // in the fairness workload went from 20-30 ms to 50-230 ms.)
        let mut offset = 0usize;
        while offset < len {
            let piece_end = (offset + ZERO_PIECE_BYTES).min(len);
            write_zero_pages(&f.file, offset, piece_end)?;
            write_back_and_wait(&f.file, offset, piece_end - offset)?;
            offset = piece_end;
        }
        f.file.sync_data()?;
        // Then map every page for reading: the pages are in the cache, so each first write
        // later is a write-protect fault on a resident page, with nothing to read, zero or
        // allocate. (A first write into an unprepared page of a fresh file faulted, and the
        // fault's readahead zeroed a whole window of pages in one go: measured at up to 19 ms
        // on the CPU, with no preemption on a PREEMPT_NONE kernel, while the timer thread
        // waited for that CPU.) Nothing is dirtied, so nothing is written back again.
        self.prefault_read(0)
    }

    fn prepare_in_use(
        &self,
        offset: u64,
        ahead: u64,
        stop: &dyn Fn() -> bool,
    ) -> io::Result<Option<u64>> {
        if self.shared.unwritten.load(Ordering::Relaxed) {
            if let Some(at) = self.zero_ahead_of_copies(offset, ahead, stop)? {
                return Ok(Some(at));
            }
            self.shared.unwritten.store(false, Ordering::Relaxed);
        }
        if !stop() {
            self.prefault_read(offset)?;
        }
        Ok(None)
    }

    /// Under the copy lock, a step at a time: the lock keeps every copy out of the pages a
    /// step maps, so each of them lies past the highest byte copied while it is mapped, holds
    /// no record and was never synced by a commit. `MADV_POPULATE_WRITE` makes it dirty and
    /// writable in the page tables with the bytes it holds (see "Pages mapped ahead of the
    /// appender": never a page of a fresh file's unwritten extents that
    /// `MmapFile::zero_ahead_of_copies` has not zeroed, whose zeros' later write-back would
    /// write-protect it again), so a write-back of it before the appender gets there changes
    /// no byte of the file.
    fn map_ahead(&self, from: u64, ahead: u64) -> io::Result<u64> {
        let f = &*self.shared;
        let len = f.len_bytes as usize;
        let ahead = usize::try_from(ahead).unwrap_or(usize::MAX);
        let mut at = page_from(from, len);
        while f.maps_ahead.load(Ordering::Relaxed) {
            let copied_end = f.copy_lock.read().unwrap_or_else(PoisonError::into_inner);
            let clear = page_from(*copied_end, len);
            at = at.max(clear);
            let mut limit = clear.saturating_add(ahead).min(len);
            if f.unwritten.load(Ordering::Relaxed) {
                limit = limit.min(f.zeroed_to.load(Ordering::Relaxed) as usize);
            }
            if at >= limit {
                break;
            }
            let end = (at + MAP_AHEAD_STEP_BYTES).min(limit);
            #[cfg(test)]
            if let Some(hook) = &mut *f.map_hook.0.lock().unwrap_or_else(PoisonError::into_inner) {
                hook(at);
            }
            if let Err(e) = f.map.advise_range(Advice::PopulateWrite, at, end - at) {
                // A kernel before 5.14 (EINVAL), or a page it could not bring in: the appender
                // takes its faults itself, as without this.
                f.maps_ahead.store(false, Ordering::Relaxed);
                tracing::debug!(name = %f.opened_as, error = %e, "madvise(POPULATE_WRITE) failed");
                break;
            }
            drop(copied_end);
            at = end;
        }
        Ok(at as u64)
    }

    fn prefault_read(&self, offset: u64) -> io::Result<()> {
        let f = &*self.shared;
        let len = f.len_bytes as usize;
        // MADV_POPULATE_READ maps each page for reading (a zeroed page-cache page where the
        // file was never written); it never dirties one, so a page the appender synced
        // meanwhile is not written again. In pieces, as for `prefault`.
        let mut at = (offset as usize / 4096) * 4096;
        while at < len {
            let n = POPULATE_PIECE_BYTES.min(len - at);
            match f.map.advise_range(Advice::PopulateRead, at, n) {
                Ok(()) => {}
                // A kernel before 5.14: the appender takes the faults itself, as before.
                Err(e) if e.raw_os_error() == Some(EINVAL) => return Ok(()),
                Err(e) => return Err(e),
            }
            at += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn names_are_plain_file_names() {
        for bad in ["", ".", "..", "a/b", "LOCK", "nul\0"] {
            assert_eq!(
                check_name(bad).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
        }
        check_name("0000000000000001").unwrap();
    }

    #[test]
    fn range_check_catches_overflow() {
        let kind = io::ErrorKind::UnexpectedEof;
        assert_eq!(check_range(10, 2, 8, kind, || "r".into()).unwrap(), (2, 8));
        assert!(check_range(10, 3, 8, kind, || "r".into()).is_err());
        assert!(check_range(10, u64::MAX, 1, kind, || "r".into()).is_err());
        assert_eq!(
            check_range(10, 10, 0, kind, || "r".into()).unwrap(),
            (10, 0)
        );
    }

    /// Whether any block of `file` is still *unwritten* on the medium (allocated by
    /// `fallocate`, never written back), by `FIEMAP`; `None` where the file system can not say.
    #[cfg(target_os = "linux")]
    fn has_unwritten_blocks(file: &File) -> Option<bool> {
        unwritten_bytes(file, 0, u64::MAX).map(|n| n > 0)
    }

    /// Bytes of `from .. to` in extents the file system reports *unwritten* (`FIEMAP`), or
    /// `None` where it can not say.
    fn unwritten_bytes(file: &File, from: u64, to: u64) -> Option<u64> {
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Extent {
            logical: u64,
            physical: u64,
            length: u64,
            reserved64: [u64; 2],
            flags: u32,
            reserved: [u32; 3],
        }
        #[repr(C)]
        struct Map {
            start: u64,
            length: u64,
            flags: u32,
            mapped: u32,
            count: u32,
            reserved: u32,
            extents: [Extent; 64],
        }
        const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
        const UNWRITTEN: u32 = 0x800;
        const LAST: u32 = 0x1;
        let (mut start, mut unwritten) = (from, 0u64);
        while start < to {
            let mut map = Map {
                start,
                length: to - start,
                flags: 0,
                mapped: 0,
                count: 64,
                reserved: 0,
                extents: [Extent::default(); 64],
            };
            // SAFETY: FIEMAP writes at most `count` extents into the array it is given, which
            // has room for them; the descriptor is open.
            let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP, &mut map as *mut Map) };
            if rc != 0 {
                return None;
            }
            let extents = &map.extents[..map.mapped as usize];
            for e in extents.iter().filter(|e| e.flags & UNWRITTEN != 0) {
                let (a, b) = (e.logical.max(from), (e.logical + e.length).min(to));
                unwritten += b.saturating_sub(a);
            }
            match extents.last() {
                Some(e) if e.flags & LAST == 0 => start = e.logical + e.length,
                _ => break,
            }
        }
        Some(unwritten)
    }

    /// What the test appender writes at `at`.
    fn byte_at(at: usize) -> u8 {
        (at % 251) as u8 | 1
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_file_in_use_is_zeroed_ahead_of_the_appender_and_never_over_it() {
        let dir = tempfile::tempdir().unwrap();
        let storage = MmapStorage::open_dir(dir.path()).unwrap();
        for (round, pause_us) in [0u64, 20, 200].into_iter().enumerate() {
            let len = 4 << 20;
            let file = storage.create(&format!("f{round}"), len as u64).unwrap();
            match has_unwritten_blocks(&file.shared.file) {
                Some(true) => {}
                other => {
                    eprintln!(
                        "skipped: fallocate left no unwritten blocks here ({other:?}), the case \
                         this preparation is for"
                    );
                    return;
                }
            }
            // Records copied in while the file is prepared, in steps of 1-12 KiB, each
            // byte a function of its offset. The preparation starts behind the appender, as
            // the log's does: from the end it saw, which the appender has left since.
            let (seen, first) = (5000, 300_000);
            let head: Vec<u8> = (0..first).map(byte_at).collect();
            file.write_at(0, &head).unwrap();
            let appender = {
                let file = file.clone();
                std::thread::spawn(move || {
                    let (mut at, mut step) = (first, 1usize);
                    while at < len {
                        let n = (1024 + step * 4099 % 11_264).min(len - at);
                        let data: Vec<u8> = (at..at + n).map(byte_at).collect();
                        file.write_at(at as u64, &data).unwrap();
                        at += n;
                        step += 1;
                        if pause_us > 0 {
                            std::thread::sleep(Duration::from_micros(pause_us));
                        }
                    }
                })
            };
            // A short reach, so that the zeros keep stopping and starting again behind the
            // appender as the log's preparer's do.
            let mut from = seen;
            while let Some(at) = file.prepare_in_use(from, 64 << 10, &|| false).unwrap() {
                from = at;
                std::thread::yield_now();
            }
            appender.join().unwrap();
            file.sync_range(0, len as u64).unwrap();
            let mut got = vec![0u8; len];
            file.read_at(0, &mut got).unwrap();
            let bad = (0..len).find(|&i| got[i] != byte_at(i));
            assert_eq!(bad, None, "round {round}: a copied byte was overwritten");
            // What the medium holds, past the cache.
            assert!(file.read_durable(0, &mut got).unwrap());
            let bad = (0..len).find(|&i| got[i] != byte_at(i));
            assert_eq!(bad, None, "round {round}: the medium lost a copied byte");
            drop(file);
        }
        // Zeros ahead of an appender that stopped: a reach past its page, and no further until
        // it moves on.
        let (len, reach) = (1u64 << 20, 64u64 << 10);
        let file = storage.create("g", len).unwrap();
        file.write_at(0, b"head").unwrap();
        let at = file.prepare_in_use(4, reach, &|| false).unwrap();
        assert_eq!(at, Some(4096 + reach));
        assert_eq!(
            file.prepare_in_use(4096 + reach, reach, &|| false).unwrap(),
            at
        );
        let raw = &file.shared.file;
        assert_eq!(unwritten_bytes(raw, 4096, 4096 + reach), Some(0));
        assert_eq!(
            unwritten_bytes(raw, 4096 + reach, len),
            Some(len - 4096 - reach)
        );
        // The appender moves on: the zeros follow it, past what it wrote.
        file.write_at(200_000, b"more").unwrap();
        let page = 200_004u64.next_multiple_of(4096);
        let at = file.prepare_in_use(4096 + reach, reach, &|| false).unwrap();
        assert_eq!(at, Some(page + reach));
        assert_eq!(unwritten_bytes(raw, page, page + reach), Some(0));
        assert_eq!(
            unwritten_bytes(raw, page + reach, len),
            Some(len - page - reach)
        );
        // An unbounded reach: every block written to the end, the bytes unchanged.
        assert_eq!(
            file.prepare_in_use(page + reach, u64::MAX, &|| false)
                .unwrap(),
            None
        );
        assert_eq!(unwritten_bytes(raw, page, len), Some(0));
        let mut got = vec![1u8; len as usize];
        file.read_at(0, &mut got).unwrap();
        assert_eq!(&got[..4], b"head");
        assert_eq!(&got[200_000..200_004], b"more");
        let zero = |r: std::ops::Range<usize>| got[r].iter().all(|&b| b == 0);
        assert!(zero(4..200_000) && zero(200_004..len as usize));
        // A file found on disk (not created here) is never written so: its bytes past the
        // end of the log may be evidence that recovery has yet to judge.
        drop(file);
        let found = storage.open("g").unwrap();
        assert!(!found.shared.unwritten.load(Ordering::Relaxed));
    }

    /// A fresh log writes its first segment's zeros only a reach ahead of its appends
    /// (`IN_USE_ZEROS_AHEAD` in `log.rs`, 16 MiB), and follows them as they go: a log that
    /// appends little writes little.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_fresh_log_zeros_its_first_segment_only_a_reach_ahead_of_its_appends() {
        const MIB: u64 = 1 << 20;
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = crate::Wal::open_dir(dir.path(), crate::WalOptions::default()).unwrap();
        let first = File::open(dir.path().join("0000000000000001.wal")).unwrap();
        let len = first.metadata().unwrap().len();
        assert_eq!(len, 64 * MIB);
        if unwritten_bytes(&first, 32 * MIB, len).is_none_or(|n| n == 0) {
            eprintln!("skipped: fallocate left no unwritten blocks here, the case this is for");
            return;
        }
        wal.append(1, b"one record").unwrap();
        // The preparer makes the spare only after its first step over the segment in use.
        let spare = dir.path().join("0000000000000002.wal");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !spare.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "no spare segment made"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // Zeros up to a reach past the record, none beyond: the appender has not moved.
        assert_eq!(unwritten_bytes(&first, MIB, 16 * MIB), Some(0));
        assert_eq!(unwritten_bytes(&first, 20 * MIB, len), Some(len - 20 * MIB));
        // About 20 MiB of records: the zeros follow them, a reach ahead again.
        let body = vec![7u8; 64 << 10];
        let used = loop {
            for _ in 0..16 {
                wal.append_nowait(1, &body).unwrap();
            }
            wal.sync().unwrap();
            let used = wal.segments()[0].used_bytes;
            if used >= 20 * MIB {
                break used.next_multiple_of(4096);
            }
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while unwritten_bytes(&first, used, used + 15 * MIB) != Some(0) {
            assert!(
                std::time::Instant::now() < deadline,
                "the zeros never followed the appends to {used}: {:?} bytes unwritten after",
                unwritten_bytes(&first, used, used + 15 * MIB)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let beyond = used + 18 * MIB;
        assert_eq!(unwritten_bytes(&first, beyond, len), Some(len - beyond));
        wal.close().unwrap();
    }

    /// The log's preparing thread writes its zeros in the idle I/O class, where the device's
    /// scheduler serves them after the commits' writes (see `background_io_class`).
    #[cfg(target_os = "linux")]
    #[test]
    fn the_preparing_thread_does_its_io_in_the_idle_class() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = crate::Wal::open_dir(dir.path(), crate::WalOptions::default()).unwrap();
        let class_of = |tid: libc::c_long| {
            // SAFETY: ioprio_get reads no user memory.
            let prio = unsafe { libc::syscall(libc::SYS_ioprio_get, 1 as libc::c_long, tid) };
            prio >> 13
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let preparer = loop {
            let found = fs::read_dir("/proc/self/task").unwrap().find_map(|task| {
                let task = task.ok()?;
                let comm = fs::read_to_string(task.path().join("comm")).ok()?;
                (comm.trim() == "timewheel-wal-p")
                    .then(|| task.file_name().to_str()?.parse::<libc::c_long>().ok())
                    .flatten()
            });
            match found {
                // The thread sets its class first thing; wait for it to have run.
                Some(tid) if class_of(tid) == 3 || std::time::Instant::now() > deadline => {
                    break tid;
                }
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        assert_eq!(class_of(preparer), 3, "the preparer's I/O class is IDLE");
        // Everyone else keeps theirs.
        // SAFETY: as above; 0 is the calling thread.
        let own = unsafe { libc::syscall(libc::SYS_ioprio_get, 1 as libc::c_long, 0) };
        assert_ne!(own >> 13, 3);
        drop(wal);
    }

    #[test]
    fn pages_unmapped_at_a_sync_keep_their_bytes_and_take_writes_again() {
        let dir = tempfile::tempdir().unwrap();
        let storage = MmapStorage::open_dir(dir.path()).unwrap();
        let file = storage.create("seg", 16 * 4096).unwrap();
        let mut expected = vec![0u8; 16 * 4096];
        let mut write = |at: usize, len: usize, seed: u8| {
            let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
            file.write_at(at as u64, &data).unwrap();
            expected[at..at + len].copy_from_slice(&data);
        };
        // Three and a half pages, synced: the whole pages below the last copy's page go
        // unmapped, the half page stays mapped.
        write(100, 3 * 4096 + 1_900, 1);
        file.sync_range(0, 4 * 4096).unwrap();
        // The half page goes on; then a page unmapped above is written again (the log does
        // not, but nothing must depend on that) and a later one for the first time.
        write(3 * 4096 + 2_000, 3_000, 2);
        write(4_000, 300, 3);
        write(9 * 4096, 10, 4);
        file.sync_range(0, 16 * 4096).unwrap();
        let mut got = vec![0u8; 16 * 4096];
        file.read_at(0, &mut got).unwrap();
        assert!(got == expected, "the file through pread");
        drop(file);
        drop(storage);
        let on_disk = std::fs::read(dir.path().join("seg")).unwrap();
        assert!(on_disk == expected, "the file as read afresh");
    }

    /// Dirty pages of `file` in `from .. to` (`cachestat`, Linux 6.5), `None` where the kernel
    /// has no such call.
    #[cfg(target_os = "linux")]
    fn dirty_pages(file: &MmapFile, from: u64, to: u64) -> Option<u64> {
        #[repr(C)]
        struct Range {
            off: u64,
            len: u64,
        }
        #[repr(C)]
        #[derive(Default)]
        struct Stat {
            cache: u64,
            dirty: u64,
            writeback: u64,
            evicted: u64,
            recently_evicted: u64,
        }
        const SYS_CACHESTAT: libc::c_long = 451;
        let range = Range {
            off: from,
            len: to - from,
        };
        let mut stat = Stat::default();
        // SAFETY: cachestat reads `range` and writes one `Stat`, both live and laid out as the
        // kernel's structs; the descriptor is open.
        let rc = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                file.shared.file.as_raw_fd(),
                &range as *const Range,
                &mut stat as *mut Stat,
                0,
            )
        };
        (rc == 0).then_some(stat.dirty)
    }

    /// A prepared file of `len` bytes whose first two and a half pages were copied and synced
    /// (the next step of `map_ahead` maps from page 3), with its directory; `None`, said on
    /// stderr, where `cachestat` can not count dirty pages.
    #[cfg(target_os = "linux")]
    fn synced_head(len: u64) -> Option<(tempfile::TempDir, MmapFile)> {
        let dir = tempfile::tempdir().unwrap();
        let storage = MmapStorage::open_dir(dir.path()).unwrap();
        let file = storage.create("seg", len).unwrap();
        file.prefault().unwrap();
        if dirty_pages(&file, 0, len).is_none() {
            eprintln!("skipped: no cachestat here to count dirty pages");
            return None;
        }
        file.write_at(0, &[7u8; 10_000]).unwrap();
        file.sync_range(0, 10_000).unwrap();
        Some((dir, file))
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn pages_mapped_ahead_lie_past_every_copy_and_no_synced_page_is_dirtied_again() {
        const PAGE: u64 = 4096;
        let len = 8u64 << 20;
        let Some((_dir, file)) = synced_head(len) else {
            return;
        };
        assert_eq!(dirty_pages(&file, 0, len), Some(0));
        // Mapped ahead: the sixteen pages after the last copy's page, dirty (zeros) now, and not
        // one page of the copies.
        let ahead = 16 * PAGE;
        let at = file.map_ahead(0, ahead).unwrap();
        if dirty_pages(&file, 0, len) == Some(0) {
            eprintln!("skipped: MADV_POPULATE_WRITE mapped nothing here (a kernel before 5.14)");
            return;
        }
        assert_eq!(at, 3 * PAGE + ahead);
        assert_eq!(dirty_pages(&file, 0, 3 * PAGE), Some(0));
        assert_eq!(dirty_pages(&file, 3 * PAGE, at), Some(16));
        assert_eq!(dirty_pages(&file, at, len), Some(0));
        // Called again before the appender moved: nothing more.
        assert_eq!(file.map_ahead(at, ahead).unwrap(), at);
        assert_eq!(dirty_pages(&file, at, len), Some(0));
        // An appender that copies and syncs each copy, beside a mapper: at the end, every page
        // below the last copy's was synced by a copy's own sync and is clean (a page the mapper
        // had made dirty again after its sync would still be), and every byte is the copy's.
        let appender = {
            let file = file.clone();
            std::thread::spawn(move || {
                let (mut at, mut step) = (10_000u64, 1u64);
                while at < len - (1 << 20) {
                    let n = 700 + step * 4099 % 9_000;
                    let data: Vec<u8> = (at..at + n).map(|i| byte_at(i as usize)).collect();
                    file.write_at(at, &data).unwrap();
                    file.sync_range(at, n).unwrap();
                    at += n;
                    step += 1;
                }
                at
            })
        };
        // Mostly the one page after the last copy's, where the appender goes next.
        let (mut mapped, mut round) = (at, 0u64);
        while !appender.is_finished() {
            let ahead = if round % 8 == 0 { 64 << 10 } else { PAGE };
            mapped = file.map_ahead(mapped, ahead).unwrap();
            round += 1;
        }
        let end = appender.join().unwrap();
        assert_eq!(dirty_pages(&file, 0, end / PAGE * PAGE), Some(0));
        let mut got = vec![0u8; (end - 10_000) as usize];
        file.read_at(10_000, &mut got).unwrap();
        let bad = (0..got.len()).find(|&i| got[i] != byte_at(10_000 + i));
        assert_eq!(bad, None, "a copied byte changed");
    }

    /// The race the copy lock rules out, driven: a copy and its sync land in the pages a step
    /// of `map_ahead` is about to map, between its read of the last copy's end and its
    /// `madvise`. With the lock held across both, the copy waits until the step has mapped,
    /// and its sync then leaves every page below its last one clean. Were the lock let go
    /// before the `madvise` (a mutant that the concurrent test above did not catch in five
    /// runs), the copy and sync finish inside the window, the `madvise` makes a synced page
    /// of records dirty again, and this test fails.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_copy_and_its_sync_can_not_land_between_a_steps_look_and_its_mapping() {
        use std::sync::mpsc;
        const PAGE: u64 = 4096;
        let len = 1u64 << 20;
        // Two and a half pages copied and synced: the next step maps from page 3.
        let Some((_dir, file)) = synced_head(len) else {
            return;
        };
        // The copy the hook lets loose: from inside page 2 to inside page 4, over the pages the
        // step maps; then its sync.
        let (go, went) = mpsc::channel::<()>();
        let (done, finished) = mpsc::channel::<()>();
        let appender = {
            let file = file.clone();
            std::thread::spawn(move || {
                went.recv().unwrap();
                let data: Vec<u8> = (10_000..17_000).map(byte_at).collect();
                file.write_at(10_000, &data).unwrap();
                file.sync_range(10_000, 7_000).unwrap();
                // The hook has stopped listening, unless the copy came inside its window.
                done.send(()).ok();
            })
        };
        // In the window: set the copy going, and give it a long time to finish there.
        let finished_in_window = Arc::new(AtomicBool::new(false));
        let mut first = Some((go, finished, Arc::clone(&finished_in_window)));
        *file.shared.map_hook.0.lock().unwrap() = Some(Box::new(move |at| {
            if let Some((go, finished, in_window)) = first.take() {
                assert_eq!(at as u64, 3 * PAGE, "the step after the last copy's page");
                go.send(()).unwrap();
                let result = finished.recv_timeout(Duration::from_millis(300));
                in_window.store(result.is_ok(), Ordering::Relaxed);
            }
        }));
        file.map_ahead(0, 16 * PAGE).unwrap();
        appender.join().unwrap();
        *file.shared.map_hook.0.lock().unwrap() = None;
        assert!(
            !finished_in_window.load(Ordering::Relaxed),
            "a copy finished while a step of map_ahead was between its look and its mapping"
        );
        if dirty_pages(&file, 4 * PAGE, len) == Some(0) {
            eprintln!("skipped: MADV_POPULATE_WRITE mapped nothing here (a kernel before 5.14)");
            return;
        }
        assert_eq!(
            dirty_pages(&file, 0, 4 * PAGE),
            Some(0),
            "a page the copy's sync wrote back was made dirty again"
        );
        let mut got = vec![0u8; 7_000];
        file.read_at(10_000, &mut got).unwrap();
        assert!(got.iter().zip(10_000..).all(|(&b, i)| b == byte_at(i)));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_fresh_files_pages_are_mapped_ahead_only_once_zeroed() {
        let dir = tempfile::tempdir().unwrap();
        let storage = MmapStorage::open_dir(dir.path()).unwrap();
        let (len, reach) = (1u64 << 20, 64u64 << 10);
        let file = storage.create("g", len).unwrap();
        if dirty_pages(&file, 0, len).is_none() || !file.shared.unwritten.load(Ordering::Relaxed) {
            eprintln!("skipped: no cachestat or no unwritten blocks here");
            return;
        }
        file.write_at(0, b"head").unwrap();
        file.sync_range(0, 4).unwrap();
        // Nothing zeroed yet: nothing mapped (a page mapped now would be write-protected again
        // by the write-back of its zeros).
        assert_eq!(file.map_ahead(0, reach).unwrap(), 4096);
        assert_eq!(dirty_pages(&file, 0, len), Some(0));
        // Zeroed a reach ahead: mapped up to there, and no further.
        assert_eq!(
            file.prepare_in_use(4, reach, &|| false).unwrap(),
            Some(4096 + reach)
        );
        assert_eq!(file.map_ahead(0, 4 * reach).unwrap(), 4096 + reach);
        assert_eq!(dirty_pages(&file, 4096, 4096 + reach), Some(reach / 4096));
        assert_eq!(dirty_pages(&file, 4096 + reach, len), Some(0));
    }

    #[test]
    fn two_handles_share_one_mapping() {
        // Ground rule 3 depends on it: a second open of a mapped inode reuses the mapping.
        let dir = tempfile::tempdir().unwrap();
        let storage = MmapStorage::open_dir(dir.path()).unwrap();
        let a = storage.create("a", 4096).unwrap();
        let b = storage.open("a").unwrap();
        assert!(Arc::ptr_eq(&a.shared, &b.shared));
        b.write_at(1, b"x").unwrap();
        let mut got = [0u8; 1];
        a.read_at(1, &mut got).unwrap();
        assert_eq!(&got, b"x");
    }
}
