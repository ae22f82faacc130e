//! Replay follows the log's recovery: an open reads the store's manifest and loads its buckets
//! before it takes the directory's lock, and applies the records recovery accepts while
//! recovery goes on. What it read before the lock is trusted only if the manifest under the
//! lock is the same: here another process changes the directory (a later state of the same
//! engine, with another compaction behind it) between the early read and the lock, and the
//! open must rebuild exactly the later state, as a plain open of it does.

mod common;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{T0, config, view};
use timewheel::{Clock, Config, Engine, JobId, JobSpec, ManualClock};
use timewheel_wal::storage::Storage;
use timewheel_wal::storage::mmap::{MmapFile, MmapStorage};

const HOUR: u64 = 3_600_000;

fn cfg() -> Config {
    let mut c = config();
    c.segment_bytes = 64 << 10;
    c.payload_bytes_max = 1024;
    c
}

/// Real files whose directory is replaced by `swap_in`'s files at the moment the lock is
/// taken: another process ran there after the open's early read, and exited.
struct SwappedAtLock {
    inner: MmapStorage,
    dir: PathBuf,
    swap_in: PathBuf,
}

fn replace_files(dir: &Path, from: &Path) {
    for entry in fs::read_dir(dir).unwrap() {
        fs::remove_file(entry.unwrap().path()).unwrap();
    }
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
}

impl Storage for SwappedAtLock {
    type File = MmapFile;
    fn try_lock(&self) -> io::Result<bool> {
        replace_files(&self.dir, &self.swap_in);
        self.inner.try_lock()
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list()
    }
    fn create(&self, name: &str, len_bytes: u64) -> io::Result<MmapFile> {
        self.inner.create(name, len_bytes)
    }
    fn open(&self, name: &str) -> io::Result<MmapFile> {
        self.inner.open(name)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.inner.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.inner.sync_dir()
    }
    fn prepare_in_background(&self) -> bool {
        self.inner.prepare_in_background()
    }
    fn parallel_reads(&self) -> bool {
        self.inner.parallel_reads()
    }
}

fn open(dir: &Path, clock: &ManualClock) -> Engine {
    Engine::open_on(
        MmapStorage::open_dir(dir).unwrap(),
        cfg(),
        Arc::new(clock.clone()),
    )
    .expect("the engine opens")
}

/// Schedules `n` jobs over the next 30 hours, cancels every fifth and moves every seventh,
/// then folds the sealed segments into bucket files.
fn work(engine: &Engine, clock: &ManualClock, n: u64, ids: &mut Vec<JobId>) {
    let base = ids.len() as u64;
    let specs = (0..n).map(|i| {
        let k = base + i;
        JobSpec::at(clock.now_ms() + HOUR + (k * 7_919) % (30 * HOUR)).payload(vec![k as u8; 24])
    });
    let new = engine.schedule_batch(specs).expect("schedule");
    let cancel: Vec<JobId> = new.iter().copied().step_by(5).collect();
    engine.cancel_batch(&cancel).expect("cancel");
    let moves: Vec<(JobId, u64)> = new
        .iter()
        .skip(1)
        .step_by(7)
        .map(|&id| (id, clock.now_ms() + 2 * HOUR))
        .collect();
    engine.reschedule_batch(&moves).expect("reschedule");
    ids.extend(new);
    engine.compact().expect("compact");
}

#[test]
fn a_store_changed_before_the_lock_is_replayed_anew() {
    let root = tempfile::tempdir().unwrap();
    let (dir, earlier, later) = (
        root.path().join("log"),
        root.path().join("earlier"),
        root.path().join("later"),
    );
    for d in [&dir, &earlier, &later] {
        fs::create_dir_all(d).unwrap();
    }
    let clock = ManualClock::new(T0);
    let mut ids = Vec::new();
    {
        let engine = open(&dir, &clock);
        work(&engine, &clock, 3_000, &mut ids);
        engine.close().expect("close");
    }
    replace_files(&earlier, &dir);
    {
        let engine = open(&dir, &clock);
        work(&engine, &clock, 3_000, &mut ids);
        // And a journal tail past the last pass.
        work(&engine, &clock, 500, &mut ids);
        engine.close().expect("close");
    }
    replace_files(&later, &dir);
    assert_ne!(
        fs::read(earlier.join("MANIFEST")).unwrap(),
        fs::read(later.join("MANIFEST")).unwrap(),
        "the two states have different manifests"
    );
    let expected = {
        let scratch = root.path().join("plain");
        fs::create_dir_all(&scratch).unwrap();
        replace_files(&scratch, &later);
        let engine = open(&scratch, &clock);
        let v = view(&engine, &ids);
        engine.close().expect("close");
        v
    };
    assert!(expected.len() > 4_000, "{} jobs live", expected.len());
    // The open reads the earlier state's manifest and buckets, then finds the later one
    // under its lock.
    let opened = root.path().join("opened");
    fs::create_dir_all(&opened).unwrap();
    replace_files(&opened, &earlier);
    let storage = SwappedAtLock {
        inner: MmapStorage::open_dir(&opened).unwrap(),
        dir: opened.clone(),
        swap_in: later.clone(),
    };
    let engine =
        Engine::open_on(storage, cfg(), Arc::new(clock.clone())).expect("the engine opens");
    assert_eq!(view(&engine, &ids), expected);
    engine.close().expect("close");
}
