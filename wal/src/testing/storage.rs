//! [`FaultStorage`] (a [`Storage`] on a [`FaultDisk`]) and [`FaultFile`] (a [`StorageFile`]):
//! the trait side of the simulated disk. Every call is one atomic step on the disk's state.

use std::fmt;
use std::io;

use super::disk::{DirOp, DiskState, EIO, ENOSPC, FaultDisk};
use super::inode::Inode;
use crate::storage::mmap::{check_name, check_range};
use crate::storage::{Storage, StorageFile};

/// A [`Storage`] on a [`FaultDisk`]. Dropping it releases the disk's lock if it held it.
pub struct FaultStorage {
    pub(super) disk: FaultDisk,
    pub(super) id: u64,
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

    /// No background thread on a simulated disk: the order of its calls, and so every crash,
    /// follows from the seed.
    fn prepare_in_background(&self) -> bool {
        false
    }

    /// `false` (one thread, the seed's order) unless a test asked for the real files' answer
    /// ([`FaultDisk::allow_parallel_reads`]).
    fn parallel_reads(&self) -> bool {
        self.disk.lock().parallel_reads
    }

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
        self.disk.wait_for_sync_gate();
        let mut s = self.disk.lock();
        if s.sync_fails() {
            // The operations stay pending: a crash may keep any prefix of them.
            return Err(io::Error::from_raw_os_error(EIO));
        }
        // `live_names == durable_names + pending`: replaying the few pending operations is
        // cheaper than copying the whole directory.
        let DiskState {
            durable_names,
            pending,
            ..
        } = &mut *s;
        for op in pending.drain(..) {
            op.apply(durable_names);
        }
        debug_assert_eq!(s.durable_names, s.live_names);
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
        self.disk
            .lock()
            .inodes
            .get_mut(&self.ino)
            .expect("open inodes exist")
            .open_handles += 1;
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
        s.collect_if_garbage(self.ino);
    }
}

impl StorageFile for FaultFile {
    fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    /// Fixed by the disk's seed and the file's inode (never reused in a disk's history, a
    /// crash's disk included), drawn from neither random stream: the same seed writes the
    /// same bytes.
    fn new_salt(&self) -> u64 {
        let mut state = self.disk.seed() ^ self.ino.rotate_left(32);
        super::rng::splitmix64(&mut state)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let (start, len) = check_range(
            self.len_bytes,
            offset,
            buf.len(),
            io::ErrorKind::UnexpectedEof,
            || "read".into(),
        )?;
        let mut s = self.disk.lock();
        let inode = &s.inodes[&self.ino];
        if inode.reads_bad(&(start..start + len)) || s.read_fails() {
            s.stats.failed_reads += 1;
            return Err(io::Error::from_raw_os_error(EIO));
        }
        buf.copy_from_slice(&s.inodes[&self.ino].live[start..start + len]);
        s.stats.bytes_read += len as u64;
        Ok(())
    }

    /// The durable image: what a power cut now would keep for sure.
    fn read_durable(&self, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
        let (start, len) = check_range(
            self.len_bytes,
            offset,
            buf.len(),
            io::ErrorKind::UnexpectedEof,
            || "read".into(),
        )?;
        let mut s = self.disk.lock();
        let inode = &s.inodes[&self.ino];
        if inode.reads_bad(&(start..start + len)) || s.read_fails() {
            s.stats.failed_reads += 1;
            return Err(io::Error::from_raw_os_error(EIO));
        }
        buf.copy_from_slice(&s.inodes[&self.ino].durable[start..start + len]);
        s.stats.bytes_read += len as u64;
        Ok(true)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let (start, _) = check_range(
            self.len_bytes,
            offset,
            data.len(),
            io::ErrorKind::InvalidInput,
            || "write".into(),
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
            || "sync".into(),
        )?;
        if len == 0 {
            return Ok(()); // like MmapFile: nothing to write back, no system call
        }
        let range = start..start + len;
        self.disk.wait_for_sync_gate();
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
