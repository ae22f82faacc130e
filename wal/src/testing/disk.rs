//! [`FaultDisk`] (one simulated disk, with its failpoints and inspection helpers),
//! [`FaultStorage`] (a [`Storage`] on it) and [`FaultFile`] (a [`StorageFile`]).
//!
//! All state of a disk sits behind one mutex. That makes every operation atomic with respect
//! to the others, and keeps the disk's random choices in one stream: the outcome depends only
//! on the seed and on the order of the calls.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::inode::Inode;
use super::rng::SimRng;
use crate::storage::mmap::{check_name, check_range};
use crate::storage::{Storage, StorageFile};

/// `EIO`: what a failed sync returns.
const EIO: i32 = 5;
/// `ENOSPC`: what a create on a full disk returns (`ErrorKind::StorageFull`).
const ENOSPC: i32 = 28;

/// When file and directory syncs fail with `EIO`. Every sync (file or directory) counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncFailure {
    /// Syncs succeed.
    #[default]
    Never,
    /// The next sync fails, once; then syncs succeed again (the fsyncgate trap: a retry
    /// "works" while the data is gone).
    Next,
    /// Every sync fails.
    Always,
    /// `n` more syncs succeed, then one fails, then syncs succeed again.
    AfterN(u64),
    /// `n` more syncs succeed, then every sync fails (a disk that dies).
    AlwaysAfterN(u64),
}

impl SyncFailure {
    /// Consumes one sync: whether it fails, and the policy for the next one.
    fn step(self) -> (bool, SyncFailure) {
        match self {
            SyncFailure::Never => (false, SyncFailure::Never),
            SyncFailure::Next | SyncFailure::AfterN(0) => (true, SyncFailure::Never),
            SyncFailure::Always | SyncFailure::AlwaysAfterN(0) => (true, SyncFailure::Always),
            SyncFailure::AfterN(n) => (false, SyncFailure::AfterN(n - 1)),
            SyncFailure::AlwaysAfterN(n) => (false, SyncFailure::AlwaysAfterN(n - 1)),
        }
    }
}

/// What happened on a disk. A disk made by [`FaultDisk::crash`] starts from its parent's
/// counts (with `crashes` one higher), so a simulation can read the totals at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FaultStats {
    /// Successful `sync_range` calls.
    pub file_syncs: u64,
    /// Successful `sync_dir` calls.
    pub dir_syncs: u64,
    /// Syncs (file or directory) that returned `EIO`.
    pub failed_syncs: u64,
    /// Sectors that a failed sync marked clean without persisting them.
    pub sectors_dropped: u64,
    /// Sectors that successful syncs persisted.
    pub sectors_synced: u64,
    /// `write_at` calls.
    pub writes: u64,
    /// Bytes passed to `write_at`.
    pub bytes_written: u64,
    /// Files created.
    pub creates: u64,
    /// `create` calls refused with `ENOSPC`.
    pub enospc_failures: u64,
    /// Files renamed.
    pub renames: u64,
    /// Files removed.
    pub removes: u64,
    /// Crashes in this disk's history.
    pub crashes: u64,
}

/// A directory operation not yet made durable by `sync_dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DirOp {
    Create { name: String, ino: u64 },
    Rename { from: String, to: String },
    Remove { name: String },
}

impl DirOp {
    /// Replays this operation on a directory (name to inode).
    pub(crate) fn apply(&self, names: &mut BTreeMap<String, u64>) {
        match self {
            DirOp::Create { name, ino } => {
                names.insert(name.clone(), *ino);
            }
            DirOp::Rename { from, to } => {
                if let Some(ino) = names.remove(from) {
                    names.insert(to.clone(), ino);
                }
            }
            DirOp::Remove { name } => {
                names.remove(name);
            }
        }
    }
}

/// Everything one simulated disk holds.
#[derive(Debug)]
pub(crate) struct DiskState {
    /// The seed of the first disk of this lineage, for failure reports.
    pub(crate) seed: u64,
    pub(crate) rng: SimRng,
    pub(crate) inodes: BTreeMap<u64, Inode>,
    pub(crate) next_ino: u64,
    /// The directory as `list` and `open` see it.
    pub(crate) live_names: BTreeMap<String, u64>,
    /// The directory as of the last successful `sync_dir`.
    pub(crate) durable_names: BTreeMap<String, u64>,
    /// Operations since then, in order: `live_names == durable_names + pending`.
    pub(crate) pending: Vec<DirOp>,
    lock_owner: Option<u64>,
    next_storage_id: u64,
    sync_failure: SyncFailure,
    enospc: bool,
    capacity_bytes: Option<u64>,
    pub(crate) stats: FaultStats,
}

impl DiskState {
    pub(crate) fn new(seed: u64, rng: SimRng, stats: FaultStats) -> DiskState {
        DiskState {
            seed,
            rng,
            inodes: BTreeMap::new(),
            next_ino: 1,
            live_names: BTreeMap::new(),
            durable_names: BTreeMap::new(),
            pending: Vec::new(),
            lock_owner: None,
            next_storage_id: 1,
            sync_failure: SyncFailure::Never,
            enospc: false,
            capacity_bytes: None,
            stats,
        }
    }

    /// Consumes one sync against the failure policy; `true` if it must fail.
    fn sync_fails(&mut self) -> bool {
        let (fails, next) = self.sync_failure.step();
        self.sync_failure = next;
        if fails {
            self.stats.failed_syncs += 1;
        }
        fails
    }

    /// Drops the inodes nothing can reach any more: no name (live or durable), no pending
    /// create that a crash could keep, no open handle. Real disks free them too.
    fn collect_garbage(&mut self) {
        let DiskState {
            inodes,
            live_names,
            durable_names,
            pending,
            ..
        } = self;
        inodes.retain(|ino, inode| {
            inode.open_handles > 0
                || live_names.values().any(|i| i == ino)
                || durable_names.values().any(|i| i == ino)
                || pending
                    .iter()
                    .any(|op| matches!(op, DirOp::Create { ino: i, .. } if i == ino))
        });
    }

    /// The inode a test helper means by `name`: the live one, else the durable one.
    fn inode_named(&mut self, name: &str) -> &mut Inode {
        let ino = self
            .live_names
            .get(name)
            .or_else(|| self.durable_names.get(name))
            .copied()
            .unwrap_or_else(|| panic!("no file named {name:?} on this disk"));
        self.inodes.get_mut(&ino).expect("named inodes exist")
    }

    fn allocated_bytes(&self) -> u64 {
        self.inodes.values().map(|i| i.len_bytes() as u64).sum()
    }
}

/// One simulated disk. Cloning it is cheap and gives another handle on the same disk.
///
/// See the [module docs](super) for the model and an example.
#[derive(Clone)]
pub struct FaultDisk {
    state: Arc<Mutex<DiskState>>,
}

impl fmt::Debug for FaultDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("FaultDisk")
            .field("seed", &s.seed)
            .field("live_names", &s.live_names)
            .field("pending_dir_ops", &s.pending.len())
            .field("stats", &s.stats)
            .finish_non_exhaustive()
    }
}

impl FaultDisk {
    /// An empty disk. Every random choice it makes (crash contents) follows from `seed` and
    /// the history of calls.
    pub fn new(seed: u64) -> FaultDisk {
        FaultDisk::from_state(DiskState::new(
            seed,
            SimRng::new(seed),
            FaultStats::default(),
        ))
    }

    pub(crate) fn from_state(state: DiskState) -> FaultDisk {
        FaultDisk {
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// The disk's state. A panic while it was held (a failed assertion in a test) does not
    /// make the disk unusable: its state is consistent between operations.
    pub(crate) fn lock(&self) -> MutexGuard<'_, DiskState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new [`Storage`] on this disk. Several may exist; only one holds the lock at a time.
    pub fn storage(&self) -> FaultStorage {
        let mut s = self.lock();
        let id = s.next_storage_id;
        s.next_storage_id += 1;
        FaultStorage {
            disk: self.clone(),
            id,
        }
    }

    /// The seed of the first disk of this lineage (crashed disks keep it): print it with any
    /// failure.
    pub fn seed(&self) -> u64 {
        self.lock().seed
    }

    /// Sets when syncs fail with `EIO` (file syncs and directory syncs alike).
    pub fn set_sync_failure(&self, failure: SyncFailure) {
        self.lock().sync_failure = failure;
    }

    /// While `on`, every `create` fails with `ErrorKind::StorageFull` (raw OS error 28) and
    /// leaves nothing behind.
    pub fn set_enospc(&self, on: bool) {
        self.lock().enospc = on;
    }

    /// Limits the bytes of all files on the disk (including removed files still open, as on a
    /// real file system); a `create` beyond it fails with `ENOSPC`. `None` is unlimited.
    pub fn set_capacity_bytes(&self, capacity_bytes: Option<u64>) {
        self.lock().capacity_bytes = capacity_bytes;
    }

    /// What reads of the file `name` (as the directory lists it now) return.
    pub fn live_file(&self, name: &str) -> Option<Vec<u8>> {
        let s = self.lock();
        let ino = s.live_names.get(name)?;
        Some(s.inodes[ino].live.clone())
    }

    /// What the media holds for `name` as of the last directory sync: the file a crash
    /// with nothing unsynced kept would show.
    pub fn durable_file(&self, name: &str) -> Option<Vec<u8>> {
        let s = self.lock();
        let ino = s.durable_names.get(name)?;
        Some(s.inodes[ino].durable.clone())
    }

    /// The names in the live directory, sorted.
    pub fn live_names(&self) -> Vec<String> {
        self.lock().live_names.keys().cloned().collect()
    }

    /// The names in the durable directory, sorted.
    pub fn durable_names(&self) -> Vec<String> {
        self.lock().durable_names.keys().cloned().collect()
    }

    /// How many directory operations a `sync_dir` has not yet made durable.
    pub fn pending_dir_ops(&self) -> usize {
        self.lock().pending.len()
    }

    /// How many 512-byte sectors of `name` (live) were written and not yet persisted.
    pub fn dirty_sectors(&self, name: &str) -> Option<usize> {
        let s = self.lock();
        let ino = s.live_names.get(name)?;
        Some(s.inodes[ino].dirty_sectors().count())
    }

    /// Media corruption of synced data: flips `bit` (0..8) of byte `byte_offset` of `name`, in
    /// the live and the durable image. `name` is looked up in the live directory, then in the
    /// durable one. Panics if there is no such file or byte.
    pub fn flip_bit(&self, name: &str, byte_offset: u64, bit: u8) {
        let mut s = self.lock();
        let inode = s.inode_named(name);
        assert!(
            byte_offset < inode.len_bytes() as u64,
            "byte {byte_offset} is past the end of {name:?}"
        );
        inode.flip_bit(byte_offset as usize, bit);
    }

    /// Writes `bytes` at `offset` of `name` behind the storage's back: into the live image
    /// (as an unsynced write), or into both images if `durable`. Looked up like
    /// [`FaultDisk::flip_bit`]; panics if out of bounds.
    pub fn write_raw(&self, name: &str, offset: u64, bytes: &[u8], durable: bool) {
        let mut s = self.lock();
        let inode = s.inode_named(name);
        assert!(
            offset
                .checked_add(bytes.len() as u64)
                .is_some_and(|end| end <= inode.len_bytes() as u64),
            "write_raw of {} bytes at {offset} is past the end of {name:?}",
            bytes.len()
        );
        inode.write_raw(offset as usize, bytes, durable);
    }

    /// What happened on this disk so far.
    pub fn stats(&self) -> FaultStats {
        self.lock().stats
    }
}

/// A [`Storage`] on a [`FaultDisk`]. Dropping it releases the disk's lock if it held it.
pub struct FaultStorage {
    disk: FaultDisk,
    id: u64,
}

impl fmt::Debug for FaultStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultStorage")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl FaultStorage {
    /// The disk this storage runs on.
    pub fn disk(&self) -> &FaultDisk {
        &self.disk
    }
}

impl Drop for FaultStorage {
    fn drop(&mut self) {
        let mut s = self.disk.lock();
        if s.lock_owner == Some(self.id) {
            s.lock_owner = None;
        }
    }
}

impl Storage for FaultStorage {
    type File = FaultFile;

    fn try_lock(&self) -> io::Result<bool> {
        let mut s = self.disk.lock();
        match s.lock_owner {
            None => {
                s.lock_owner = Some(self.id);
                Ok(true)
            }
            Some(owner) => Ok(owner == self.id),
        }
    }

    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.disk.live_names())
    }

    fn create(&self, name: &str, len_bytes: u64) -> io::Result<FaultFile> {
        check_name(name)?;
        let mut s = self.disk.lock();
        if s.live_names.contains_key(name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{name} already exists"),
            ));
        }
        let over_capacity = s
            .capacity_bytes
            .is_some_and(|cap| s.allocated_bytes().saturating_add(len_bytes) > cap);
        if s.enospc || over_capacity {
            s.stats.enospc_failures += 1;
            return Err(io::Error::from_raw_os_error(ENOSPC));
        }
        let len = usize::try_from(len_bytes).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "file too large to simulate")
        })?;
        let ino = s.next_ino;
        s.next_ino += 1;
        let mut inode = Inode::new(len);
        inode.open_handles = 1;
        s.inodes.insert(ino, inode);
        s.live_names.insert(name.to_owned(), ino);
        s.pending.push(DirOp::Create {
            name: name.to_owned(),
            ino,
        });
        s.stats.creates += 1;
        Ok(FaultFile {
            disk: self.disk.clone(),
            ino,
            len_bytes,
        })
    }

    fn open(&self, name: &str) -> io::Result<FaultFile> {
        check_name(name)?;
        let mut s = self.disk.lock();
        let Some(&ino) = s.live_names.get(name) else {
            return Err(not_found(name));
        };
        let inode = s.inodes.get_mut(&ino).expect("named inodes exist");
        inode.open_handles += 1;
        Ok(FaultFile {
            disk: self.disk.clone(),
            ino,
            len_bytes: inode.len_bytes() as u64,
        })
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        check_name(name)?;
        let mut s = self.disk.lock();
        if s.live_names.remove(name).is_none() {
            return Err(not_found(name));
        }
        s.pending.push(DirOp::Remove {
            name: name.to_owned(),
        });
        s.stats.removes += 1;
        s.collect_garbage();
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        check_name(from)?;
        check_name(to)?;
        let mut s = self.disk.lock();
        let Some(&ino) = s.live_names.get(from) else {
            return Err(not_found(from));
        };
        if from == to {
            return Ok(()); // POSIX: renaming a file onto itself does nothing
        }
        s.live_names.remove(from);
        s.live_names.insert(to.to_owned(), ino);
        s.pending.push(DirOp::Rename {
            from: from.to_owned(),
            to: to.to_owned(),
        });
        s.stats.renames += 1;
        s.collect_garbage();
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut s = self.disk.lock();
        if s.sync_fails() {
            // The operations stay pending: a crash may keep any prefix of them.
            return Err(io::Error::from_raw_os_error(EIO));
        }
        s.durable_names = s.live_names.clone();
        s.pending.clear();
        s.stats.dir_syncs += 1;
        s.collect_garbage();
        Ok(())
    }
}

fn not_found(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no file named {name}"))
}

/// A file of a [`FaultStorage`]: a handle on an inode, valid until dropped even if the file
/// is removed or renamed. It stays on the disk it was opened on, also after that disk
/// [crashed](FaultDisk::crash).
pub struct FaultFile {
    disk: FaultDisk,
    ino: u64,
    len_bytes: u64,
}

impl fmt::Debug for FaultFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultFile")
            .field("ino", &self.ino)
            .field("len_bytes", &self.len_bytes)
            .finish_non_exhaustive()
    }
}

impl Clone for FaultFile {
    fn clone(&self) -> FaultFile {
        self.disk.lock().inodes.get_mut(&self.ino).expect("open inodes exist").open_handles += 1;
        FaultFile {
            disk: self.disk.clone(),
            ino: self.ino,
            len_bytes: self.len_bytes,
        }
    }
}

impl Drop for FaultFile {
    fn drop(&mut self) {
        let mut s = self.disk.lock();
        if let Some(inode) = s.inodes.get_mut(&self.ino) {
            inode.open_handles -= 1;
        }
        s.collect_garbage();
    }
}

impl StorageFile for FaultFile {
    fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let (start, len) = check_range(
            self.len_bytes,
            offset,
            buf.len(),
            io::ErrorKind::UnexpectedEof,
            "read",
        )?;
        let s = self.disk.lock();
        buf.copy_from_slice(&s.inodes[&self.ino].live[start..start + len]);
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let (start, _) = check_range(
            self.len_bytes,
            offset,
            data.len(),
            io::ErrorKind::InvalidInput,
            "write",
        )?;
        let mut s = self.disk.lock();
        s.stats.writes += 1;
        s.stats.bytes_written += data.len() as u64;
        let inode = s.inodes.get_mut(&self.ino).expect("open inodes exist");
        inode.write(start, data);
        Ok(())
    }

    fn sync_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "sync length overflows usize")
        })?;
        let (start, len) = check_range(
            self.len_bytes,
            offset,
            len,
            io::ErrorKind::InvalidInput,
            "sync",
        )?;
        if len == 0 {
            return Ok(()); // like MmapFile: nothing to write back, no system call
        }
        let range = start..start + len;
        let mut s = self.disk.lock();
        if s.sync_fails() {
            let inode = s.inodes.get_mut(&self.ino).expect("open inodes exist");
            let dropped = inode.fail_sync(&range);
            s.stats.sectors_dropped += dropped as u64;
            return Err(io::Error::from_raw_os_error(EIO));
        }
        let inode = s.inodes.get_mut(&self.ino).expect("open inodes exist");
        let persisted = inode.sync(&range);
        s.stats.file_syncs += 1;
        s.stats.sectors_synced += persisted as u64;
        Ok(())
    }
}
