//! Any [`Storage`] behind one concrete type, so that `Engine` has no storage type parameter:
//! production runs on memory-mapped files, the tests and the simulation on the fault-injecting
//! storage, and the public API names neither. One virtual call per file operation costs
//! nothing beside a write into the page cache or a sync.

use std::io;

use timewheel_wal::storage::{Storage, StorageFile};

/// The object-safe face of a [`Storage`].
trait DynStorage: Send + Sync + 'static {
    fn try_lock(&self) -> io::Result<bool>;
    fn list(&self) -> io::Result<Vec<String>>;
    fn create(&self, name: &str, len_bytes: u64) -> io::Result<ErasedFile>;
    fn open(&self, name: &str) -> io::Result<ErasedFile>;
    fn remove(&self, name: &str) -> io::Result<()>;
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    fn sync_dir(&self) -> io::Result<()>;
    fn prepare_in_background(&self) -> bool;
    fn parallel_reads(&self) -> bool;
}

impl<S: Storage> DynStorage for S {
    fn try_lock(&self) -> io::Result<bool> {
        Storage::try_lock(self)
    }
    fn list(&self) -> io::Result<Vec<String>> {
        Storage::list(self)
    }
    fn create(&self, name: &str, len_bytes: u64) -> io::Result<ErasedFile> {
        Ok(ErasedFile(Box::new(Storage::create(
            self, name, len_bytes,
        )?)))
    }
    fn open(&self, name: &str) -> io::Result<ErasedFile> {
        Ok(ErasedFile(Box::new(Storage::open(self, name)?)))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        Storage::remove(self, name)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Storage::rename(self, from, to)
    }
    fn sync_dir(&self) -> io::Result<()> {
        Storage::sync_dir(self)
    }
    fn prepare_in_background(&self) -> bool {
        Storage::prepare_in_background(self)
    }
    fn parallel_reads(&self) -> bool {
        Storage::parallel_reads(self)
    }
}

/// A storage of any kind.
pub(crate) struct ErasedStorage(Box<dyn DynStorage>);

impl ErasedStorage {
    pub(crate) fn new(storage: impl Storage) -> Self {
        ErasedStorage(Box::new(storage))
    }
}

/// A file of an [`ErasedStorage`].
pub(crate) struct ErasedFile(Box<dyn StorageFile>);

impl StorageFile for ErasedFile {
    fn len_bytes(&self) -> u64 {
        self.0.len_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write_at(offset, data)
    }
    fn sync_range(&self, offset: u64, len: u64) -> io::Result<()> {
        self.0.sync_range(offset, len)
    }
    fn prefault(&self) -> io::Result<()> {
        self.0.prefault()
    }
    fn prefault_read(&self, offset: u64) -> io::Result<()> {
        self.0.prefault_read(offset)
    }
    fn prepare_in_use(
        &self,
        offset: u64,
        ahead: u64,
        stop: &dyn Fn() -> bool,
    ) -> io::Result<Option<u64>> {
        self.0.prepare_in_use(offset, ahead, stop)
    }
    fn map_ahead(&self, from: u64, ahead: u64) -> io::Result<u64> {
        self.0.map_ahead(from, ahead)
    }
    fn read_durable(&self, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
        self.0.read_durable(offset, buf)
    }
    fn new_salt(&self) -> u64 {
        self.0.new_salt()
    }
}

impl Storage for ErasedStorage {
    type File = ErasedFile;

    fn try_lock(&self) -> io::Result<bool> {
        self.0.try_lock()
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.0.list()
    }
    fn create(&self, name: &str, len_bytes: u64) -> io::Result<ErasedFile> {
        self.0.create(name, len_bytes)
    }
    fn open(&self, name: &str) -> io::Result<ErasedFile> {
        self.0.open(name)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.0.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.0.rename(from, to)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.0.sync_dir()
    }
    fn prepare_in_background(&self) -> bool {
        self.0.prepare_in_background()
    }
    fn parallel_reads(&self) -> bool {
        self.0.parallel_reads()
    }
}
