//! [`FaultDisk`]: one simulated disk, its state, failpoints and inspection helpers.
//!
//! All state of a disk sits behind one mutex. That makes every operation atomic with respect
//! to the others, and keeps the disk's random choices in one stream: the outcome depends only
//! on the seed and on the order of the calls.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use super::inode::Inode;
use super::rng::SimRng;
use super::storage::FaultStorage;

/// `EIO`: what a failed sync returns.
pub(super) const EIO: i32 = 5;
/// `ENOSPC`: what a create on a full disk returns (`ErrorKind::StorageFull`).
pub(super) const ENOSPC: i32 = 28;

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
    /// Reads that returned `EIO` (a read failure policy, or a bad sector).
    pub failed_reads: u64,
    /// Reads that met the read failure policy: every read, failed or not, but those of a bad
    /// sector (which fail before it).
    pub reads: u64,
    /// Bytes that reads (of the live or the durable image) returned.
    pub bytes_read: u64,
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
    pub(super) lock_owner: Option<u64>,
    pub(super) next_storage_id: u64,
    pub(super) sync_failure: SyncFailure,
    pub(super) read_failure: SyncFailure,
    pub(super) enospc: bool,
    pub(super) capacity_bytes: Option<u64>,
    /// What the storages say to [`Storage::parallel_reads`](crate::storage::Storage).
    pub(super) parallel_reads: bool,
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
            read_failure: SyncFailure::Never,
            enospc: false,
            capacity_bytes: None,
            parallel_reads: false,
            stats,
        }
    }

    /// Consumes one sync against the failure policy; `true` if it must fail.
    pub(super) fn sync_fails(&mut self) -> bool {
        let (fails, next) = self.sync_failure.step();
        self.sync_failure = next;
        if fails {
            self.stats.failed_syncs += 1;
        }
        fails
    }

    /// Consumes one read against the read failure policy; `true` if it must fail.
    pub(super) fn read_fails(&mut self) -> bool {
        self.stats.reads += 1;
        let (fails, next) = self.read_failure.step();
        self.read_failure = next;
        fails
    }

    /// Drops the inodes nothing can reach any more: no name (live or durable), no pending
    /// create that a crash could keep, no open handle. Real disks free them too.
    pub(super) fn collect_garbage(&mut self) {
        let DiskState {
            inodes,
            live_names,
            durable_names,
            pending,
            ..
        } = self;
        // Collected once: this runs at every handle's drop, and a simulated log has hundreds
        // of segments.
        let mut reachable: std::collections::HashSet<u64> = live_names
            .values()
            .chain(durable_names.values())
            .copied()
            .collect();
        reachable.extend(pending.iter().filter_map(|op| match op {
            DirOp::Create { ino, .. } => Some(*ino),
            _ => None,
        }));
        inodes.retain(|ino, inode| inode.open_handles > 0 || reachable.contains(ino));
    }

    /// What [`DiskState::collect_garbage`] does when only `ino` can have become garbage: the
    /// last handle on it was dropped. Every other operation that can make files unreachable
    /// collects them all, so nothing else is garbage here.
    pub(super) fn collect_if_garbage(&mut self, ino: u64) {
        if self
            .inodes
            .get(&ino)
            .is_none_or(|inode| inode.open_handles > 0)
        {
            return;
        }
        let named = self.live_names.values().chain(self.durable_names.values());
        let reachable = named.copied().any(|i| i == ino)
            || self
                .pending
                .iter()
                .any(|op| matches!(op, DirOp::Create { ino: i, .. } if *i == ino));
        if !reachable {
            self.inodes.remove(&ino);
        }
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

    pub(super) fn allocated_bytes(&self) -> u64 {
        self.inodes.values().map(|i| i.len_bytes() as u64).sum()
    }
}

/// One simulated disk. Cloning it is cheap and gives another handle on the same disk.
///
/// See the [module docs](super) for the model and an example.
#[derive(Clone)]
pub struct FaultDisk {
    state: Arc<Mutex<DiskState>>,
    /// Whether syncs are held (see [`FaultDisk::hold_syncs`]), and how many wait there,
    /// outside the state's lock so that a held sync blocks only its caller.
    sync_gate: Arc<(Mutex<SyncGate>, Condvar)>,
}

/// The gate of [`FaultDisk::hold_syncs`].
#[derive(Debug, Default)]
struct SyncGate {
    held: bool,
    /// Syncs blocked at the gate now.
    waiting: usize,
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
            sync_gate: Arc::new((Mutex::new(SyncGate::default()), Condvar::new())),
        }
    }

    /// The disk's state. A panic while it was held (a failed assertion in a test) does not
    /// make the disk unusable: its state is consistent between operations.
    pub(crate) fn lock(&self) -> MutexGuard<'_, DiskState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new [`Storage`](crate::storage::Storage) on this disk. Several may exist; only one
    /// holds the lock at a time.
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

    /// Lets the storages say that reads may run on several threads, as real files do, so that
    /// a test drives the code that reads ahead (recovery's scan, replay's reads) on this disk.
    /// Off by default: the order of the calls then varies from run to run, and a seed no
    /// longer fixes what happens.
    pub fn allow_parallel_reads(&self, allow: bool) {
        self.lock().parallel_reads = allow;
    }

    /// Holds every sync (file or directory) that starts from now on until `hold_syncs(false)`:
    /// a slow disk, for a test that must see a caller waiting on its sync. Only the syncing
    /// thread blocks; writes, reads and the other calls go on. A crashed disk starts released.
    pub fn hold_syncs(&self, hold: bool) {
        let (gate, changed) = &*self.sync_gate;
        gate.lock().unwrap_or_else(PoisonError::into_inner).held = hold;
        changed.notify_all();
    }

    /// Blocks until `n` syncs wait at the gate that [`FaultDisk::hold_syncs`] closed (they
    /// are then all in flight at once), or `timeout` passes; returns how many wait.
    pub fn wait_for_held_syncs(&self, n: usize, timeout: std::time::Duration) -> usize {
        let (gate, changed) = &*self.sync_gate;
        let gate = gate.lock().unwrap_or_else(PoisonError::into_inner);
        let (gate, _) = changed
            .wait_timeout_while(gate, timeout, |g| g.waiting < n)
            .unwrap_or_else(PoisonError::into_inner);
        gate.waiting
    }

    /// Blocks while syncs are held.
    pub(super) fn wait_for_sync_gate(&self) {
        let (gate, changed) = &*self.sync_gate;
        let mut gate = gate.lock().unwrap_or_else(PoisonError::into_inner);
        if !gate.held {
            return;
        }
        gate.waiting += 1;
        changed.notify_all();
        while gate.held {
            gate = changed.wait(gate).unwrap_or_else(PoisonError::into_inner);
        }
        gate.waiting -= 1;
    }

    /// Sets when syncs fail with `EIO` (file syncs and directory syncs alike).
    pub fn set_sync_failure(&self, failure: SyncFailure) {
        self.lock().sync_failure = failure;
    }

    /// Sets when file reads fail with `EIO` (a media error: what a real disk returns for a
    /// sector it can not read, and what `MmapStorage` returns instead of a `SIGBUS`). The same
    /// schedule type as syncs; every `read_at` counts. A crash disarms it.
    pub fn set_read_failure(&self, failure: SyncFailure) {
        self.lock().read_failure = failure;
    }

    /// Marks the sectors of `name` that `offset .. offset + len` touches as bad (`bad = true`)
    /// or readable again: every read that touches a bad sector fails with `EIO`. Bad sectors
    /// belong to the file's media, so they survive renames and crashes. Looked up like
    /// [`FaultDisk::flip_bit`]; panics if out of bounds.
    pub fn set_bad_sectors(&self, name: &str, offset: u64, len: u64, bad: bool) {
        let mut s = self.lock();
        let inode = s.inode_named(name);
        let end = offset.checked_add(len).expect("range overflows");
        assert!(
            end <= inode.len_bytes() as u64,
            "bad sectors at {offset}..{end} are past the end of {name:?}"
        );
        inode.set_bad(&(offset as usize..end as usize), bad);
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
