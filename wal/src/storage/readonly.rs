//! [`ReadOnlyStorage`]: a data directory read in place, never written.
//!
//! The operator's tools (`timewheel verify`, `dump`, `inspect`) must see exactly what an open
//! would see, so they run the log's own recovery (and the engine's replay) rather than a second
//! reader of the format. But recovery changes the directory: it cuts a torn tail, copies the
//! last segment, removes files made ahead. Over this storage all of that happens in memory
//! only: a write lands in a private copy of the page it touches, `create`, `remove` and
//! `rename` change a private view of the directory, and syncs do nothing. The files on disk are
//! opened read-only and only ever read (`pread`, never mapped: a bad sector is an `EIO`, not a
//! `SIGBUS`).
//!
//! Memory: one 4 KiB copy per page written. Recovery writes little, except the copy of the last
//! segment after a crash (up to one segment).
//!
//! The lock: [`Storage::try_lock`] takes the directory's lock while the storage lives, so that
//! no engine opens the directory meanwhile, and says `false` while an engine holds it. It never
//! creates the lock file: a directory without one has never been opened by an engine.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::mmap::{LOCK_FILE_NAME, check_name, check_range};
use super::{Storage, StorageFile};

/// Bytes per private copy of a written page.
const PAGE_BYTES: u64 = 4096;

/// A data directory read in place; see the module documentation.
#[derive(Debug)]
pub struct ReadOnlyStorage {
    dir: PathBuf,
    /// The directory's lock file, held (shared by nobody) while this storage lives.
    lock: Mutex<Option<File>>,
    /// The private view of the directory: every name and the file behind it.
    view: Mutex<BTreeMap<String, ReadOnlyFile>>,
}

impl ReadOnlyStorage {
    /// Reads the directory's listing; the files themselves are opened when the log opens them.
    pub fn open_dir(dir: impl AsRef<Path>) -> io::Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let mut view = BTreeMap::new();
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            if !entry.file_type()?.is_file() {
                continue;
            }
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name == LOCK_FILE_NAME || check_name(&name).is_err() {
                continue;
            }
            let len_bytes = entry.metadata()?.len();
            let file = ReadOnlyFile::on_disk(dir.join(&name), len_bytes);
            view.insert(name, file);
        }
        Ok(ReadOnlyStorage {
            dir,
            lock: Mutex::new(None),
            view: Mutex::new(view),
        })
    }

    /// The directory read.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn view(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ReadOnlyFile>> {
        self.view.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Storage for ReadOnlyStorage {
    type File = ReadOnlyFile;

    /// The files are real ones: recovery may scan them on two threads.
    fn parallel_reads(&self) -> bool {
        true
    }

    fn try_lock(&self) -> io::Result<bool> {
        let mut held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        if held.is_some() {
            return Ok(true);
        }
        let file = match File::open(self.dir.join(LOCK_FILE_NAME)) {
            Ok(file) => file,
            // No engine ever opened this directory: nobody to exclude, and nothing is created.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(e),
        };
        // flock works on a descriptor opened for reading; the engine's is the same lock.
        if super::try_lock_file(&file)? {
            *held = Some(file);
            return Ok(true);
        }
        Ok(false)
    }

    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.view().keys().cloned().collect())
    }

    fn create(&self, name: &str, len_bytes: u64) -> io::Result<ReadOnlyFile> {
        check_name(name)?;
        let mut view = self.view();
        if view.contains_key(name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{name} exists"),
            ));
        }
        let file = ReadOnlyFile::in_memory(len_bytes);
        view.insert(name.to_string(), file.clone());
        Ok(file)
    }

    fn open(&self, name: &str) -> io::Result<ReadOnlyFile> {
        check_name(name)?;
        let view = self.view();
        let file = view.get(name).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{name}: no such file"))
        })?;
        file.open_base()?;
        Ok(file.clone())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        check_name(name)?;
        match self.view().remove(name) {
            Some(_) => Ok(()),
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{name}: no such file"),
            )),
        }
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        check_name(from)?;
        check_name(to)?;
        let mut view = self.view();
        let file = view.remove(from).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{from}: no such file"))
        })?;
        view.insert(to.to_string(), file);
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        Ok(())
    }
}

/// A file of a [`ReadOnlyStorage`]: the bytes on disk (if it is not a file the log created
/// here) under the private copies of the pages written.
#[derive(Debug, Clone)]
pub struct ReadOnlyFile {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Where the file is on disk; `None` for a file created in memory.
    path: Option<PathBuf>,
    /// Opened (read-only) on the first `open`.
    base: Mutex<Option<Arc<File>>>,
    len_bytes: u64,
    /// Private copies of the pages written, by page index.
    pages: RwLock<BTreeMap<u64, Box<[u8]>>>,
}

impl ReadOnlyFile {
    fn on_disk(path: PathBuf, len_bytes: u64) -> Self {
        Self::new(Some(path), len_bytes)
    }

    fn in_memory(len_bytes: u64) -> Self {
        Self::new(None, len_bytes)
    }

    fn new(path: Option<PathBuf>, len_bytes: u64) -> Self {
        ReadOnlyFile {
            inner: Arc::new(Inner {
                path,
                base: Mutex::new(None),
                len_bytes,
                pages: RwLock::new(BTreeMap::new()),
            }),
        }
    }

    fn open_base(&self) -> io::Result<Option<Arc<File>>> {
        let Some(path) = &self.inner.path else {
            return Ok(None);
        };
        let mut base = self
            .inner
            .base
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if base.is_none() {
            let file = OpenOptions::new().read(true).open(path)?;
            let on_disk = file.metadata()?.len();
            if on_disk < self.inner.len_bytes {
                // Shrunk since it was listed: reads past the new end would fail anyway.
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "{}: {on_disk} bytes, listed with {}",
                        path.display(),
                        self.inner.len_bytes
                    ),
                ));
            }
            *base = Some(Arc::new(file));
        }
        Ok(base.clone())
    }

    /// Reads from the disk (or zeros for a file created here), ignoring private copies.
    fn read_base(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        match self.open_base()? {
            Some(file) => file.read_exact_at(buf, offset),
            None => {
                buf.fill(0);
                Ok(())
            }
        }
    }
}

impl StorageFile for ReadOnlyFile {
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(
            self.inner.len_bytes,
            offset,
            buf.len(),
            io::ErrorKind::UnexpectedEof,
            || "read".into(),
        )?;
        if buf.is_empty() {
            return Ok(());
        }
        let pages = self
            .inner
            .pages
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let end = offset + buf.len() as u64;
        let mut at = offset;
        while at < end {
            // Up to the next page boundary (or the end): one source for the whole piece.
            let page = at / PAGE_BYTES;
            let piece_end = ((page + 1) * PAGE_BYTES).min(end);
            let out = &mut buf[(at - offset) as usize..(piece_end - offset) as usize];
            match pages.get(&page) {
                Some(copy) => {
                    let from = (at - page * PAGE_BYTES) as usize;
                    out.copy_from_slice(&copy[from..from + out.len()]);
                    at = piece_end;
                }
                None => {
                    // The disk up to the next page that has a private copy (fewer reads).
                    let next_copy = pages
                        .range(page + 1..)
                        .next()
                        .map_or(end, |(&p, _)| (p * PAGE_BYTES).min(end));
                    let out = &mut buf[(at - offset) as usize..(next_copy - offset) as usize];
                    self.read_base(at, out)?;
                    at = next_copy;
                }
            }
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        check_range(
            self.inner.len_bytes,
            offset,
            data.len(),
            io::ErrorKind::InvalidInput,
            || "write".into(),
        )?;
        let mut pages = self
            .inner
            .pages
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let end = offset + data.len() as u64;
        let mut at = offset;
        while at < end {
            let page = at / PAGE_BYTES;
            let page_start = page * PAGE_BYTES;
            let page_len = PAGE_BYTES.min(self.inner.len_bytes - page_start) as usize;
            let copy = match pages.entry(page) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    let mut copy = vec![0u8; page_len].into_boxed_slice();
                    self.read_base(page_start, &mut copy)?;
                    e.insert(copy)
                }
            };
            let piece_end = (page_start + page_len as u64).min(end);
            let from = (at - page_start) as usize;
            let n = (piece_end - at) as usize;
            copy[from..from + n].copy_from_slice(&data[(at - offset) as usize..][..n]);
            at = piece_end;
        }
        Ok(())
    }

    fn sync_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "sync length overflows usize")
        })?;
        check_range(
            self.inner.len_bytes,
            offset,
            len,
            io::ErrorKind::InvalidInput,
            || "sync".into(),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_stay_in_memory_and_reads_see_them() {
        let dir = tempfile::tempdir().unwrap();
        let on_disk: Vec<u8> = (0..3 * PAGE_BYTES as usize)
            .map(|i| (i % 251) as u8)
            .collect();
        fs::write(dir.path().join("a"), &on_disk).unwrap();
        let storage = ReadOnlyStorage::open_dir(dir.path()).unwrap();
        assert!(storage.try_lock().unwrap());
        let file = storage.open("a").unwrap();
        // Across a page boundary, and a whole later page.
        file.write_at(PAGE_BYTES - 2, b"wxyz").unwrap();
        file.write_at(2 * PAGE_BYTES, &[9; PAGE_BYTES as usize])
            .unwrap();
        let mut got = vec![0u8; on_disk.len()];
        file.read_at(0, &mut got).unwrap();
        let mut want = on_disk.clone();
        want[PAGE_BYTES as usize - 2..PAGE_BYTES as usize + 2].copy_from_slice(b"wxyz");
        want[2 * PAGE_BYTES as usize..].fill(9);
        assert_eq!(got, want);
        file.sync_range(0, 3 * PAGE_BYTES).unwrap();
        assert_eq!(
            fs::read(dir.path().join("a")).unwrap(),
            on_disk,
            "disk unchanged"
        );
    }

    #[test]
    fn directory_changes_stay_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a"), [1u8; 10]).unwrap();
        let storage = ReadOnlyStorage::open_dir(dir.path()).unwrap();
        let b = storage.create("b", 8).unwrap();
        b.write_at(0, b"12345678").unwrap();
        storage.rename("b", "c").unwrap();
        storage.remove("a").unwrap();
        storage.sync_dir().unwrap();
        assert_eq!(storage.list().unwrap(), vec!["c".to_string()]);
        let mut got = [0u8; 8];
        storage.open("c").unwrap().read_at(0, &mut got).unwrap();
        assert_eq!(&got, b"12345678");
        assert!(storage.open("a").is_err());
        let mut on_disk: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        on_disk.sort();
        assert_eq!(
            on_disk,
            vec!["a".to_string()],
            "nothing created, removed or renamed"
        );
    }

    #[test]
    fn the_lock_excludes_a_running_engine_and_is_never_created() {
        let dir = tempfile::tempdir().unwrap();
        let storage = ReadOnlyStorage::open_dir(dir.path()).unwrap();
        assert!(storage.try_lock().unwrap());
        assert!(!dir.path().join(LOCK_FILE_NAME).exists());
        let engine = super::super::mmap::MmapStorage::open_dir(dir.path()).unwrap();
        assert!(engine.try_lock().unwrap());
        let reader = ReadOnlyStorage::open_dir(dir.path()).unwrap();
        assert!(!reader.try_lock().unwrap(), "held by the engine");
        drop(engine);
        assert!(reader.try_lock().unwrap());
    }
}
