//! The [`Wal`]: appends, group commit, rolls, reading and deleting segments, shutdown.
//!
//! Locks, always taken in this order: `delete_lock` → `log` → `next` → the group commit's own
//! lock. `log` is held only to assign LSNs and copy frames into the storage (and across a
//! roll). The next segment's file is made ahead of need by the *preparer*, a background
//! thread (unless the storage asks for none, as the simulated disk does): created,
//! preallocated, pre-faulted (not written back), directory synced, all with no lock held. A
//! roll under `log` is then a switch: one group-commit round for the old segment's tail (the
//! invariant "a segment's header exists only once its predecessor is durable" needs it before
//! the header) and the header's one-page sync. Only when the preparer is behind or failed does
//! an append make the file itself, under `log`. A second background thread, the *mapper*,
//! keeps the pages the appender copies into next mapped for writing, a few MiB ahead of it
//! and never over a page it wrote (`StorageFile::map_ahead`), so that the appender takes no
//! page fault of its own while it moves.
//!
//! Files found on disk at an open hold bytes that recovery did not read (past the appended-to
//! segment's write bound; most of the file made ahead). Before a block names a bound over
//! them they are proven zero, zeros written over anything found (`zero_proof`, the protocol in
//! `zero.rs`): by the *checker*, a background thread that keeps a reach ahead of the highest
//! bound named, or, with no background threads or once the checker is joined (the log is
//! closing), by the seal itself: never both at once.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::Lsn;
use crate::commit::{CommitError, DirtyRange, GroupCommit, Taken};
use crate::error::Error;
use crate::format::{
    Cursor, FIRST_BLOCK_OFFSET, FLAGS_KNOWN, MirrorPrefix, Place, RECORD_TYPE_INVALID,
    RECORD_TYPE_USER_MAX, RecordMeta, durable_delta, encode_close, encode_mirror, encode_record,
    frame_bytes, next_block, sealed_end, write_bound_after,
};
use crate::options::{Durability, WalOptions};
use crate::reader::{Iter, SegmentView};
use crate::recovery::{Follow, Following, RecoveryReport, recover};
use crate::segment::{Segment, create_next, segment_file_name, start_segment, zero_stray};
use crate::storage::mmap::MmapStorage;
use crate::storage::{Storage, StorageFile};
use crate::zero::{self, ProofError, ZeroProof};
use std::sync::{Condvar, Mutex, MutexGuard};

/// How much the checker proves per step: small enough that a seal waiting for it is not held
/// long.
const ZERO_STEP_BYTES: u64 = 1 << 20;

/// Frames are copied into the storage in writes of at most about this many bytes, so the
/// scratch buffer stays small whatever the batch.
const WRITE_CHUNK_BYTES: usize = 1 << 20;

/// A segmented, append-only write-ahead log. `Send + Sync`: share it with `Arc`.
///
/// Records are numbered by LSN from 1 without gaps. An append returns once its record is
/// durable as [`Durability`] says; see the crate docs for the guarantees.
pub struct Wal<S: Storage = MmapStorage> {
    shared: Arc<Shared<S>>,
    background: Mutex<Option<JoinHandle<()>>>,
    preparer: Mutex<Option<JoinHandle<()>>>,
    mapper: Mutex<Option<JoinHandle<()>>>,
    checker: Mutex<Option<JoinHandle<()>>>,
}

struct Shared<S: Storage> {
    storage: S,
    opts: WalOptions,
    log: Mutex<LogState<S::File>>,
    commit: GroupCommit<S::File>,
    /// Set to stop the periodic sync thread.
    stop: Mutex<bool>,
    stop_changed: Condvar,
    /// Serializes `delete_segments_below` (it does directory I/O outside `log`).
    delete_lock: Mutex<()>,
    /// The next segments' files, made ahead of need.
    next: Mutex<NextFiles<S::File>>,
    next_changed: Condvar,
    /// When a failed preallocation was last logged, and how many were not logged since.
    warned: Mutex<(Option<std::time::Instant>, u64)>,
    /// What of the files found at open is proven zero (see the module docs).
    zero_proof: ZeroProof<S::File>,
    /// What [`Wal::stats`] reports.
    figures: Figures,
    /// The background threads (preparer, checker) wait until this is set: an open with a
    /// follower holds them until the first write or [`Wal::release_background`], so that
    /// they do not take the CPU (and the address space's lock, mapping and populating) from
    /// the follower still rebuilding its state. Set under `held`, which the waiters wait on.
    released: std::sync::atomic::AtomicBool,
    held: Mutex<()>,
    held_changed: Condvar,
    /// What [`Wal::room_hint`] reads: the bytes left in the segment after the last append,
    /// were its open group sealed then. On a cache line of its own: every append writes it,
    /// and async calls on other threads read it before they append.
    room_hint: RoomHint,
}

/// [`Shared::room_hint`]'s cell, alone on its cache line(s).
#[derive(Default)]
#[repr(align(128))]
struct RoomHint(std::sync::atomic::AtomicU64);

/// Upper bounds, in seconds, of the buckets of [`WalStats::sync_seconds_buckets`] (the last
/// bucket, `+Inf`, is implied).
pub const SYNC_SECONDS_BOUNDS: [f64; 13] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// What the log has done since it opened: counted with relaxed atomic adds on the paths that
/// do the work, read by [`Wal::stats`].
#[derive(Default)]
struct Figures {
    records: std::sync::atomic::AtomicU64,
    bytes: std::sync::atomic::AtomicU64,
    syncs: std::sync::atomic::AtomicU64,
    sync_ns: std::sync::atomic::AtomicU64,
    /// Syncs by duration: one counter per bound of [`SYNC_SECONDS_BOUNDS`], then `+Inf`.
    sync_buckets: [std::sync::atomic::AtomicU64; SYNC_SECONDS_BOUNDS.len() + 1],
    rolls: std::sync::atomic::AtomicU64,
}

impl Figures {
    fn add(counter: &std::sync::atomic::AtomicU64, n: u64) {
        counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    fn sync_took(&self, took: std::time::Duration) {
        Self::add(&self.syncs, 1);
        Self::add(&self.sync_ns, took.as_nanos() as u64);
        let secs = took.as_secs_f64();
        let bucket = SYNC_SECONDS_BOUNDS
            .iter()
            .position(|&bound| secs <= bound)
            .unwrap_or(SYNC_SECONDS_BOUNDS.len());
        Self::add(&self.sync_buckets[bucket], 1);
    }
}

/// What the log has done since it opened (see [`Wal::stats`]).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct WalStats {
    /// Records appended.
    pub records: u64,
    /// Bytes of record frames appended (headers and padding included).
    pub bytes: u64,
    /// Group-commit syncs (each may cover many appends).
    pub syncs: u64,
    /// Time spent in those syncs.
    pub sync_seconds_total: f64,
    /// Syncs by duration, cumulative as Prometheus counts them: entry `i` counts the syncs
    /// that took at most `SYNC_SECONDS_BOUNDS[i]` seconds; the last entry counts them all.
    pub sync_seconds_buckets: Vec<u64>,
    /// Segment rolls.
    pub rolls: u64,
}

/// Files made for segments the log has not rolled into yet: all zero, no header, directory
/// entry durable (see [`create_next`]).
struct NextFiles<F> {
    /// The id the preparer makes next: the current segment's + 1.
    want: u64,
    /// Someone (the preparer, or an append under `log`) is making `want` right now.
    busy: bool,
    /// Making `want` failed; the preparer leaves it to the next append that needs it.
    failed: bool,
    /// Made and not yet rolled into, by id.
    ready: BTreeMap<u64, F>,
    /// The log is closing: the preparer thread ends.
    stop: bool,
}

struct LogState<F> {
    /// In id order; the last one is appended to.
    segments: VecDeque<Segment<F>>,
    next_lsn: Lsn,
    scratch: Vec<u8>,
    /// The open group of the current segment: records written since the last seal.
    group: OpenGroup,
    /// The cap on a group's frames ([`WalOptions::group_limit`]).
    group_limit: u64,
    /// Write bounds named by the current segment's sealed blocks that are not yet known
    /// durable, as (the block's last LSN, its bound), oldest first.
    raises: VecDeque<(Lsn, u64)>,
    closed: bool,
}

/// The records of the open commit block, kept to write its mirror when it is sealed.
#[derive(Default)]
struct OpenGroup {
    /// The block's start (a page boundary); meaningful while `count > 0`.
    start: u64,
    first_lsn: Lsn,
    /// Records in the group; 0: no group is open.
    count: u32,
    /// Their frames, as written.
    frames: Vec<u8>,
}

impl<F> LogState<F> {
    fn current(&self) -> &Segment<F> {
        self.segments.back().expect("the log always has a segment")
    }

    /// The placement cursor of the current segment.
    fn cursor(&self) -> Cursor {
        let seg = self.current();
        if self.group.count > 0 {
            Cursor {
                block_start: self.group.start,
                group_bytes: self.group.frames.len() as u64,
                file_bytes: seg.file_bytes,
                group_limit: self.group_limit,
            }
        } else {
            Cursor {
                block_start: seg.end,
                group_bytes: 0,
                file_bytes: seg.file_bytes,
                group_limit: self.group_limit,
            }
        }
    }
}

/// One segment of the log, as [`Wal::segments`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Its id (its file name holds it).
    pub id: u64,
    /// The LSN of its first record.
    pub first_lsn: Lsn,
    /// The LSN of its last record (`first_lsn - 1` when it has none).
    pub last_lsn: Lsn,
    /// The file's length.
    pub file_bytes: u64,
    /// Bytes written into it so far.
    pub used_bytes: u64,
    /// The log rolled past it: its records are durable and never change.
    pub sealed: bool,
}

/// One record to append: type, flags, body.
type Entry<'a> = (u8, u8, &'a [u8]);

impl Wal<MmapStorage> {
    /// Opens (creating if needed) the log in directory `path` on memory-mapped files.
    pub fn open_dir(
        path: impl AsRef<Path>,
        opts: WalOptions,
    ) -> Result<(Self, RecoveryReport), Error> {
        Self::open(MmapStorage::open_dir(path)?, opts)
    }
}

impl<S: Storage> Wal<S> {
    /// Opens the log on `storage`: takes the directory lock (`Locked` if taken), recovers (see
    /// [`RecoveryReport`]), and starts the periodic sync thread if asked for.
    pub fn open(storage: S, opts: WalOptions) -> Result<(Self, RecoveryReport), Error> {
        Self::open_inner(storage, opts, None)
    }

    /// [`Wal::open`], handing `follow` the records recovery accepts as it goes (see
    /// [`Follow`]: a prefix of the log, in LSN order). Whoever rebuilds state from the log
    /// applies them meanwhile, on another thread if it likes, instead of reading the log
    /// again once the open is done; it reads on with [`Wal::iter_from`] after the last one
    /// it was handed.
    ///
    /// The log's background work on real files (making the next segment, preparing the one
    /// in use, proving the unused bytes of the files found zero) waits until the first write
    /// or [`Wal::release_background`], whichever comes first, so that the follower, which may
    /// still be applying what it was handed when this returns, has the CPU meanwhile.
    pub fn open_following(
        storage: S,
        opts: WalOptions,
        follow: &mut dyn Follow,
    ) -> Result<(Self, RecoveryReport), Error> {
        Self::open_inner(storage, opts, Some(follow))
    }

    fn open_inner(
        storage: S,
        opts: WalOptions,
        follow: Following<'_>,
    ) -> Result<(Self, RecoveryReport), Error> {
        opts.validate()?;
        if !storage.try_lock()? {
            return Err(Error::Locked);
        }
        let following = follow.is_some();
        let (segments, next_file, report) = recover(&storage, &opts, follow)?;
        let last_lsn = segments.last().expect("recovery leaves a segment").last_lsn;
        let last_id = segments.last().expect("recovery leaves a segment").id;
        let background = storage.prepare_in_background();
        // A follower may still be applying what it was handed: the background work waits.
        let hold = following && background;
        let current = segments.last().expect("recovery leaves a segment");
        let zero_proof = ZeroProof::new(
            zero::Found {
                segment: last_id,
                file: (current.unchecked_from < current.file_bytes)
                    .then(|| Arc::clone(&current.file)),
                from: current.unchecked_from,
                bound: current.write_bound,
                next: next_file.as_ref().map(|&(id, _)| id),
                // What recovery proved of a file with no header (`recover`).
                next_from: FIRST_BLOCK_OFFSET + opts.block_span_max(),
                background,
            },
            opts.write_reach(),
            ZERO_STEP_BYTES,
        );
        tracing::info!(
            segments = report.segments,
            records = report.records,
            last_lsn,
            elapsed_us = report.elapsed.as_micros() as u64,
            "WAL recovered"
        );
        let shared = Arc::new(Shared {
            storage,
            log: Mutex::new(LogState {
                segments: segments.into(),
                next_lsn: last_lsn + 1,
                scratch: Vec::new(),
                group: OpenGroup::default(),
                group_limit: opts.group_limit(),
                raises: VecDeque::new(),
                closed: false,
            }),
            commit: GroupCommit::new(last_lsn, opts.syncs_in_flight),
            stop: Mutex::new(false),
            stop_changed: Condvar::new(),
            delete_lock: Mutex::new(()),
            next: Mutex::new(NextFiles {
                want: last_id + 1,
                busy: false,
                failed: false,
                ready: next_file.into_iter().collect(),
                stop: false,
            }),
            next_changed: Condvar::new(),
            warned: Mutex::new((None, 0)),
            zero_proof,
            figures: Figures::default(),
            opts,
            released: std::sync::atomic::AtomicBool::new(!hold),
            held: Mutex::new(()),
            held_changed: Condvar::new(),
            room_hint: RoomHint::default(),
        });
        shared.publish_room(&lock(&shared.log));
        // A background thread of the log, named `name`, running `run` on the shared state,
        // if `wanted`.
        let start = |wanted: bool, name: &str, run: fn(&Shared<S>)| {
            wanted
                .then(|| {
                    let shared = Arc::clone(&shared);
                    std::thread::Builder::new()
                        .name(name.to_owned())
                        .spawn(move || run(&shared))
                })
                .transpose()
        };
        let preparer = start(background, "timewheel-wal-prepare", prepare_loop)?;
        let mapper = start(background, "timewheel-wal-map", map_loop)?;
        let checker = start(
            shared.zero_proof.wants_checker(),
            "timewheel-wal-zero",
            check_loop,
        )?;
        let background = match shared.opts.durability {
            Durability::Periodic(interval) => {
                let shared = Arc::clone(&shared);
                let handle = std::thread::Builder::new()
                    .name("timewheel-wal-sync".to_owned())
                    .spawn(move || periodic_sync(&shared, interval))?;
                Some(handle)
            }
            Durability::Sync | Durability::Buffered => None,
        };
        Ok((
            Self {
                shared,
                background: Mutex::new(background),
                preparer: Mutex::new(preparer),
                mapper: Mutex::new(mapper),
                checker: Mutex::new(checker),
            },
            report,
        ))
    }

    /// Appends one record and returns its LSN once it is durable per the durability mode.
    pub fn append(&self, record_type: u8, body: &[u8]) -> Result<Lsn, Error> {
        self.append_entries(&[(record_type, 0, body)], self.waits())
    }

    /// Like [`Wal::append`], with flags (see [`FLAG_SKIPPABLE`](crate::format::FLAG_SKIPPABLE)).
    pub fn append_with_flags(&self, record_type: u8, flags: u8, body: &[u8]) -> Result<Lsn, Error> {
        self.append_entries(&[(record_type, flags, body)], self.waits())
    }

    /// Appends records with consecutive LSNs and returns the last one, after one durability
    /// wait for all of them. Every record is validated first: on a bad one nothing is written.
    /// Segments the batch will need are preallocated before anything is written, so `NoSpace`
    /// also writes nothing. An empty batch writes nothing and returns [`Wal::last_lsn`].
    pub fn append_batch<'a>(
        &self,
        records: impl IntoIterator<Item = (u8, &'a [u8])>,
    ) -> Result<Lsn, Error> {
        let entries: Vec<Entry<'a>> = records.into_iter().map(|(t, b)| (t, 0, b)).collect();
        self.append_entries(&entries, self.waits())
    }

    /// Appends one record into the storage and returns its LSN without waiting for
    /// durability, whatever the mode; pair with [`Wal::wait_durable`].
    pub fn append_nowait(&self, record_type: u8, body: &[u8]) -> Result<Lsn, Error> {
        self.append_entries(&[(record_type, 0, body)], false)
    }

    /// [`Wal::append_batch`] without the durability wait.
    pub fn append_batch_nowait<'a>(
        &self,
        records: impl IntoIterator<Item = (u8, &'a [u8])>,
    ) -> Result<Lsn, Error> {
        let entries: Vec<Entry<'a>> = records.into_iter().map(|(t, b)| (t, 0, b)).collect();
        self.append_entries(&entries, false)
    }

    /// Blocks until `lsn` is durable, syncing if no sync is in flight (in every mode).
    /// Returns `Ok` at once for an LSN already durable, even on a poisoned log; otherwise a
    /// poisoned log returns `Poisoned`, and the caller whose own sync failed gets `Io`.
    pub fn wait_durable(&self, lsn: Lsn) -> Result<(), Error> {
        let last = self.shared.commit.written_lsn();
        if lsn > last {
            return Err(Error::LsnNotWritten { lsn, last });
        }
        self.wait_commit(lsn)
    }

    /// Makes everything written so far durable and returns the durable LSN.
    pub fn sync(&self) -> Result<Lsn, Error> {
        if self.shared.commit.is_poisoned() {
            return Err(Error::Poisoned);
        }
        self.wait_commit(self.shared.commit.written_lsn())?;
        Ok(self.durable_lsn())
    }

    /// What the log did since it opened: records and bytes appended, syncs and their
    /// durations, rolls.
    pub fn stats(&self) -> WalStats {
        use std::sync::atomic::Ordering::Relaxed;
        let f = &self.shared.figures;
        let mut total = 0;
        let sync_seconds_buckets = f
            .sync_buckets
            .iter()
            .map(|b| {
                total += b.load(Relaxed);
                total
            })
            .collect();
        WalStats {
            records: f.records.load(Relaxed),
            bytes: f.bytes.load(Relaxed),
            syncs: f.syncs.load(Relaxed),
            sync_seconds_total: f.sync_ns.load(Relaxed) as f64 / 1e9,
            sync_seconds_buckets,
            rolls: f.rolls.load(Relaxed),
        }
    }

    /// The highest LSN known durable (0: none).
    pub fn durable_lsn(&self) -> Lsn {
        self.shared.commit.durable_lsn()
    }

    /// The highest LSN written (0: none). Records up to it can be read; they are durable only
    /// up to [`Wal::durable_lsn`].
    pub fn last_lsn(&self) -> Lsn {
        self.shared.commit.written_lsn()
    }

    /// The first LSN still in the log (segments below it were deleted); `last_lsn() + 1` when
    /// the log holds no record.
    pub fn first_lsn(&self) -> Lsn {
        lock(&self.shared.log)
            .segments
            .front()
            .expect("a segment")
            .first_lsn
    }

    /// Bytes left in the segment being appended to, and whether the next segment's file is
    /// made already (appends that fill this segment then need no allocation).
    pub fn room(&self) -> (u64, bool) {
        let log = lock(&self.shared.log);
        let current = log.current();
        let left = current
            .file_bytes
            .saturating_sub(log.cursor().block_start + log.cursor().group_bytes);
        let id = current.id + 1;
        drop(log);
        (left, lock(&self.shared.next).ready.contains_key(&id))
    }

    /// A lower bound of [`Wal::room`]'s bytes left, read without the append lock, for a caller
    /// that only needs to know there is plenty: the bytes left after the last append (or the
    /// open, or the last roll), were its open group sealed then (a seal takes the group's
    /// mirror and the padding to the next block).
    pub fn room_hint(&self) -> u64 {
        self.shared
            .room_hint
            .0
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Makes the next segment's file now, if it is not made yet, so that the appends that fill
    /// the current segment can roll into it: `NoSpace` if it can not be allocated (nothing else
    /// changes). Holds the append lock while it allocates (only called when space runs low).
    pub fn prepare_next_now(&self) -> Result<(), Error> {
        let log = lock(&self.shared.log);
        if log.closed {
            return Err(Error::Closed);
        }
        let id = log.current().id + 1;
        let mut made = Vec::new();
        self.shared.ensure_next(id, &mut made)
    }

    /// Seals the segment being appended to, if it holds a record, and goes on in the next one:
    /// its records become durable (one group-commit round) and then never change, so a reader
    /// of sealed segments (a compactor) may take them. Returns whether it rolled (`false`: the
    /// segment holds no record, nothing done). For a log whose segment fills slowly, so that
    /// its records need not wait for it to fill; each roll starts a new file of
    /// [`WalOptions::segment_bytes`](crate::WalOptions::segment_bytes), so call it minutes
    /// apart, not for every record.
    ///
    /// `NoSpace` if the next segment's file can not be made (nothing changes); a failed sync
    /// poisons the log as an append's would.
    pub fn roll_now(&self) -> Result<bool, Error> {
        let sh = &*self.shared;
        let mut guard = lock(&sh.log);
        let log = &mut *guard;
        if log.closed {
            return Err(Error::Closed);
        }
        if sh.commit.is_poisoned() {
            return Err(Error::Poisoned);
        }
        let current = log.current();
        if current.last_lsn < current.first_lsn {
            return Ok(false);
        }
        let id = current.id + 1;
        let mut made = Vec::new();
        if let Err(e) = sh.ensure_next(id, &mut made) {
            sh.warn_preallocate(id, &e);
            return Err(e);
        }
        debug_assert!(
            log.scratch.is_empty(),
            "every append flushes before it returns"
        );
        sh.roll(log)?;
        Ok(true)
    }

    /// Poisons the log as a failed sync of its own would: every waiter gets
    /// [`Error::Poisoned`], and nothing more is acknowledged. For a caller whose own sync of a
    /// file beside the log failed (a compactor's), so that nothing is acknowledged after a
    /// failed sync anywhere in the directory.
    pub fn poison(&self) {
        self.shared.commit.poison();
    }

    /// Whether a failed write or sync poisoned the log (see [`Error::Poisoned`]).
    pub fn is_poisoned(&self) -> bool {
        self.shared.commit.is_poisoned()
    }

    /// The options the log was opened with.
    pub fn options(&self) -> &WalOptions {
        &self.shared.opts
    }

    /// The storage the log runs on (locked by it). Other files may live beside the segments,
    /// e.g. a manifest, as long as their names do not end in `.wal`, `.wal.spare` or `.wal.copy`.
    pub fn storage(&self) -> &S {
        &self.shared.storage
    }

    /// Iterates records from `lsn` (or the first still in the log) up to the last written now.
    pub fn iter_from(&self, lsn: Lsn) -> Iter<'_, S> {
        let log = lock(&self.shared.log);
        let views = log
            .segments
            .iter()
            .map(|s| SegmentView {
                id: s.id,
                salt: s.salt,
                first_lsn: s.first_lsn,
                end: s.end,
                file: Arc::clone(&s.file),
            })
            .collect();
        Iter::new(views, lsn, log.next_lsn - 1)
    }

    /// The segments in the log now, oldest first. Every segment but the last is *sealed*: the
    /// log rolled past it, which made all its records durable and the next segment's header
    /// too, so its records never change again (until [`Wal::delete_segments_below`] removes
    /// it). A compactor may fold sealed segments and then delete them.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        let log = lock(&self.shared.log);
        let sealed = log.segments.len() - 1;
        log.segments
            .iter()
            .enumerate()
            .map(|(i, s)| SegmentInfo {
                id: s.id,
                first_lsn: s.first_lsn,
                last_lsn: s.last_lsn,
                file_bytes: s.file_bytes,
                used_bytes: s.end,
                sealed: i < sealed,
            })
            .collect()
    }

    /// Deletes whole sealed segments (never the one being appended to) whose records are all
    /// below `lsn`, oldest first, syncing the directory after each, so a crash leaves a
    /// contiguous run of segments. Returns how many were deleted. A failed directory sync
    /// poisons the log.
    pub fn delete_segments_below(&self, lsn: Lsn) -> Result<usize, Error> {
        let sh = &*self.shared;
        let _one_at_a_time = lock(&sh.delete_lock);
        let doomed: Vec<u64> = {
            let log = lock(&sh.log);
            if log.closed {
                return Err(Error::Closed);
            }
            let sealed = log.segments.len() - 1;
            log.segments
                .iter()
                .take(sealed)
                .take_while(|s| s.last_lsn < lsn)
                .map(|s| s.id)
                .collect()
        };
        for &id in &doomed {
            if sh.commit.is_poisoned() {
                return Err(Error::Poisoned);
            }
            sh.storage.remove(&segment_file_name(id))?;
            let front = lock(&sh.log)
                .segments
                .pop_front()
                .expect("a sealed segment");
            assert_eq!(front.id, id, "only delete_segments_below removes segments");
            if let Err(e) = sh.storage.sync_dir() {
                sh.commit.poison();
                tracing::error!(segment = id, error = %e, "WAL directory sync failed after delete; poisoned");
                return Err(Error::Io(e));
            }
        }
        Ok(doomed.len())
    }

    /// Syncs everything written and stops the periodic sync thread; later appends get
    /// `Closed`. Idempotent. For an `Arc`-shared log; [`Wal::close`] consumes it.
    pub fn shutdown(&self) -> Result<(), Error> {
        {
            let mut log = lock(&self.shared.log);
            if log.closed {
                return Ok(());
            }
            log.closed = true;
        }
        self.stop_background();
        if self.shared.commit.is_poisoned() {
            return Err(Error::Poisoned);
        }
        self.wait_commit(self.shared.commit.written_lsn())?;
        self.shared.write_close_marker()
    }

    /// Stops the log the way a crash would, for tests and simulations: later calls get
    /// `Closed`, the periodic sync thread stops, and nothing more is synced (not even on drop).
    /// The directory lock is released when the log is dropped.
    pub fn abandon(&self) {
        lock(&self.shared.log).closed = true;
        self.stop_background();
    }

    /// Lets the background work an open with a follower held start now (see
    /// [`Wal::open_following`]); nothing if it runs already.
    pub fn release_background(&self) {
        self.shared.release_background();
    }

    /// [`Wal::shutdown`], then releases the directory lock (by dropping the storage).
    pub fn close(self) -> Result<(), Error> {
        self.shutdown()
    }

    fn stop_background(&self) {
        // Threads still held start, and see the stops below as the others do.
        self.shared.release_background();
        *lock(&self.shared.stop) = true;
        self.shared.stop_changed.notify_all();
        if let Some(handle) = lock(&self.background).take() {
            // The thread only syncs; a panic there already broke an assertion.
            handle.join().expect("the WAL sync thread panicked");
        }
        lock(&self.shared.next).stop = true;
        self.shared.next_changed.notify_all();
        if let Some(handle) = lock(&self.preparer).take() {
            handle.join().expect("the WAL prepare thread panicked");
        }
        if let Some(handle) = lock(&self.mapper).take() {
            handle.join().expect("the WAL map thread panicked");
        }
        self.shared.zero_proof.stop();
        if let Some(handle) = lock(&self.checker).take() {
            handle.join().expect("the WAL zero-check thread panicked");
        }
        // From here a seal proves what it needs itself (the checker may have stopped with
        // some left), never beside the checker.
        self.shared.zero_proof.joined();
    }

    fn waits(&self) -> bool {
        self.shared.opts.durability == Durability::Sync
    }

    fn wait_commit(&self, lsn: Lsn) -> Result<(), Error> {
        self.shared.wait_commit(lsn)
    }

    fn validate(&self, entries: &[Entry<'_>]) -> Result<(), Error> {
        let max = self.shared.opts.record_bytes_max;
        for &(record_type, flags, body) in entries {
            if record_type == RECORD_TYPE_INVALID || record_type > RECORD_TYPE_USER_MAX {
                return Err(Error::InvalidRecordType(record_type));
            }
            if flags & !FLAGS_KNOWN != 0 {
                return Err(Error::InvalidFlags(flags));
            }
            if body.len() > max as usize {
                return Err(Error::RecordTooLarge {
                    len: body.len(),
                    max,
                });
            }
        }
        Ok(())
    }

    fn append_entries(&self, entries: &[Entry<'_>], wait: bool) -> Result<Lsn, Error> {
        self.validate(entries)?;
        if entries.is_empty() {
            return Ok(self.last_lsn());
        }
        let last = self.write_entries(entries)?;
        if wait {
            self.wait_commit(last)?;
        }
        Ok(last)
    }

    /// Copies the frames into the storage, sealing blocks and rolling as needed, and publishes
    /// them as written.
    fn write_entries(&self, entries: &[Entry<'_>]) -> Result<Lsn, Error> {
        let sh = &*self.shared;
        let mut guard = lock(&sh.log);
        let log = &mut *guard;
        let mut frame_bytes_total = 0u64;
        if log.closed {
            return Err(Error::Closed);
        }
        if sh.commit.is_poisoned() {
            return Err(Error::Poisoned);
        }
        sh.preallocate(log, entries)?;
        let mut durable = sh.commit.durable_lsn();
        // LSN of the next frame encoded into `scratch` (`log.next_lsn` moves at each flush).
        let mut lsn = log.next_lsn;
        log.scratch.clear();
        for &(record_type, flags, body) in entries {
            let frame = frame_bytes(body.len()) as u64;
            loop {
                match log.cursor().place(frame) {
                    Place::Group => break,
                    Place::SealFirst => {
                        sh.flush(log, lsn)?;
                        sh.seal(log)?;
                    }
                    Place::Roll => {
                        sh.flush(log, lsn)?;
                        sh.roll(log)?;
                        // The roll made everything durable: later records vouch for more.
                        durable = sh.commit.durable_lsn();
                    }
                }
            }
            if log.group.count == 0 && !sh.block_fits_bound(log) {
                // The new block could grow past the write bound: wait for the sealed blocks
                // before it to be durable, the last of which names a bound far enough.
                sh.wait_commit_locked(log, sh.commit.written_lsn())?;
                durable = sh.commit.durable_lsn();
                assert!(
                    sh.block_fits_bound(log),
                    "once every block is durable the next one fits its write bound"
                );
            }
            let seg = log.segments.back().expect("a segment");
            if log.group.count == 0 {
                log.group.start = seg.end;
                log.group.first_lsn = lsn;
                log.group.frames.clear();
            }
            let offset = log.group.start + log.group.frames.len() as u64;
            let meta = RecordMeta {
                lsn,
                record_type,
                flags,
                durable_delta: durable_delta(lsn, durable),
            };
            let at = log.scratch.len();
            encode_record(&mut log.scratch, seg.salt, offset, meta, body);
            log.group.frames.extend_from_slice(&log.scratch[at..]);
            log.group.count += 1;
            frame_bytes_total += (log.scratch.len() - at) as u64;
            lsn += 1;
            if log.scratch.len() >= WRITE_CHUNK_BYTES {
                sh.flush(log, lsn)?;
            }
        }
        sh.flush(log, lsn)?;
        sh.publish_room(log);
        Figures::add(&sh.figures.records, entries.len() as u64);
        Figures::add(&sh.figures.bytes, frame_bytes_total);
        Ok(lsn - 1)
    }
}

impl<S: Storage> Shared<S> {
    /// Publishes what [`Wal::room_hint`] reads: the bytes left in the segment appended to,
    /// were its open group sealed now. Called with the append lock held, after each append,
    /// roll and open.
    fn publish_room(&self, log: &LogState<S::File>) {
        let cursor = log.cursor();
        let used = if cursor.group_bytes == 0 {
            cursor.block_start
        } else {
            crate::format::next_block(crate::format::sealed_end(
                cursor.block_start,
                cursor.group_bytes,
            ))
        };
        self.room_hint.0.store(
            cursor.file_bytes.saturating_sub(used),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Waits until `lsn` is durable, leading a sync if none is in flight. Must not be called
    /// with the `log` lock held (see [`Shared::wait_commit_locked`]).
    fn wait_commit(&self, lsn: Lsn) -> Result<(), Error> {
        self.commit_with(lsn, false, || {
            let mut log = lock(&self.log);
            // Seal only when this caller will lead: sealing costs the block's padding.
            if self.commit.would_lead(lsn) {
                self.seal(&mut log).map_err(|e| match e {
                    Error::Io(e) => CommitError::SyncFailed(e),
                    _ => CommitError::Poisoned,
                })?;
            }
            self.commit.try_take(lsn)
        })
    }

    /// [`Shared::wait_commit`] for a caller that holds the `log` lock (a roll): nobody else can
    /// become leader meanwhile, so it waits for the sync in flight and then leads itself.
    fn wait_commit_locked(&self, log: &mut LogState<S::File>, lsn: Lsn) -> Result<(), Error> {
        self.seal(log)?;
        self.commit_with(lsn, true, || self.commit.try_take(lsn))
    }

    /// Writes the frames encoded in `scratch` (all of the open group) at the end of the
    /// current segment and publishes them; `next_lsn` is the LSN after the last of them.
    fn flush(&self, log: &mut LogState<S::File>, next_lsn: Lsn) -> Result<(), Error> {
        if log.scratch.is_empty() {
            return Ok(());
        }
        let seg = log.segments.back_mut().expect("a segment");
        let start = seg.end;
        if let Err(e) = seg.file.write_at(start, &log.scratch) {
            self.commit.poison();
            tracing::error!(segment = seg.id, offset = start, error = %e, "WAL write failed; poisoned");
            return Err(Error::Io(e));
        }
        let end = start + log.scratch.len() as u64;
        seg.end = end;
        seg.last_lsn = next_lsn - 1;
        log.next_lsn = next_lsn;
        log.scratch.clear();
        let range = DirtyRange {
            segment_id: seg.id,
            file: Arc::clone(&seg.file),
            start,
            end,
        };
        self.commit.publish_written(next_lsn - 1, range);
        Ok(())
    }

    /// Seals the open group: writes its mirror at the next sector boundary after it, and moves
    /// the segment's end to the next page boundary, where the next block starts. The mirror's
    /// range is published dirty (with the gap before it, so it merges with the group's range
    /// into one sync).
    fn seal(&self, log: &mut LogState<S::File>) -> Result<(), Error> {
        if log.group.count == 0 {
            return Ok(());
        }
        if self.commit.is_poisoned() {
            return Err(Error::Poisoned);
        }
        debug_assert!(log.scratch.is_empty(), "flushed before sealing");
        let group = &log.group;
        let seg = log.segments.back_mut().expect("a segment");
        let group_end = group.start + group.frames.len() as u64;
        assert_eq!(seg.end, group_end, "the group's frames are all written");
        let mirror_end = sealed_end(group.start, group.frames.len() as u64);
        let frame =
            crate::format::frame_bytes(crate::format::MIRROR_PREFIX_BYTES + group.frames.len())
                as u64;
        let mirror_at = mirror_end - frame;
        let write_bound = write_bound_after(
            next_block(mirror_end),
            self.opts.write_reach(),
            seg.file_bytes,
        );
        self.prove_zero_to(seg.id, write_bound)?;
        let prefix = MirrorPrefix {
            group_start: group.start,
            first_lsn: group.first_lsn,
            count: group.count,
            write_bound,
        };
        log.scratch.clear();
        encode_mirror(&mut log.scratch, seg.salt, mirror_at, prefix, &group.frames);
        if let Err(e) = seg.file.write_at(mirror_at, &log.scratch) {
            self.commit.poison();
            tracing::error!(segment = seg.id, offset = mirror_at, error = %e, "WAL write failed; poisoned");
            return Err(Error::Io(e));
        }
        log.scratch.clear();
        seg.end = next_block(mirror_end);
        let last_lsn = group.first_lsn + u64::from(group.count) - 1;
        log.raises.push_back((last_lsn, write_bound));
        self.commit.publish_dirty(DirtyRange {
            segment_id: seg.id,
            file: Arc::clone(&seg.file),
            start: group_end,
            end: mirror_end,
        });
        log.group.count = 0;
        log.group.frames.clear();
        if log.group.frames.capacity() > 2 * crate::format::GROUP_BYTES_MAX as usize {
            log.group.frames = Vec::new(); // one huge record: do not keep its buffer
        }
        Ok(())
    }

    /// After a clean shutdown synced everything: marks the end of the log with a close record
    /// at the next block, so that the next open knows nothing needs to be made durable again.
    /// The next open writes over it.
    fn write_close_marker(&self) -> Result<(), Error> {
        let mut guard = lock(&self.log);
        let log = &mut *guard;
        if self.commit.is_poisoned() {
            return Err(Error::Poisoned);
        }
        if log.group.count > 0 {
            return Ok(()); // not everything is sealed: nothing to vouch for
        }
        let last_lsn = log.next_lsn - 1;
        let write_bound = self.write_bound(log);
        let seg = log.segments.back().expect("a segment");
        let at = seg.end;
        if at + crate::format::RECORD_HEADER_BYTES as u64 > seg.file_bytes {
            return Ok(()); // a full segment: the next open copies it instead
        }
        assert!(
            at + crate::format::RECORD_HEADER_BYTES as u64 <= write_bound,
            "a clean close finds every block durable, the last naming a bound past the marker"
        );
        log.scratch.clear();
        encode_close(&mut log.scratch, seg.salt, at, last_lsn);
        let written = seg
            .file
            .write_at(at, &log.scratch)
            .and_then(|()| seg.file.sync_range(at, log.scratch.len() as u64));
        log.scratch.clear();
        if let Err(e) = written {
            self.commit.poison();
            tracing::error!(segment = seg.id, offset = at, error = %e, "WAL close marker failed; poisoned");
            return Err(Error::Io(e));
        }
        Ok(())
    }

    /// Makes sure segment `id` is proven zero up to `bound` before a block names it (see
    /// `zero.rs`); a failed proof poisons the log.
    fn prove_zero_to(&self, id: u64, bound: u64) -> Result<(), Error> {
        // A seal may wait for the checker.
        self.release_background();
        let proven = self.zero_proof.prove_to(id, bound, &zero_stray);
        self.proof_outcome(id, proven)
    }

    /// Lets the background threads start (see `released`); nothing if they run already.
    fn release_background(&self) {
        use std::sync::atomic::Ordering;
        if self.released.load(Ordering::Acquire) {
            return;
        }
        let _held = lock(&self.held);
        self.released.store(true, Ordering::Release);
        self.held_changed.notify_all();
    }

    /// Waits until the background threads may start (see `released`).
    fn wait_released(&self) {
        let mut held = lock(&self.held);
        while !self.released.load(std::sync::atomic::Ordering::Acquire) {
            held = self.held_changed.wait(held).expect("a WAL thread panicked");
        }
    }

    /// Logs what a proof found, and poisons the log if it failed.
    fn proof_outcome(&self, id: u64, proven: Result<u64, ProofError>) -> Result<(), Error> {
        match proven {
            Ok(stray) => {
                if stray > 0 {
                    tracing::warn!(
                        segment = id,
                        stray,
                        "WAL zeroed stray bytes that the log never wrote, past a write bound"
                    );
                }
                Ok(())
            }
            Err(ProofError::Poisoned) => Err(Error::Poisoned),
            Err(ProofError::Failed(e)) => {
                self.commit.poison();
                tracing::error!(segment = id, error = %e,
                    "WAL could not prove a segment's unused bytes zero; poisoned");
                Err(Error::Io(e))
            }
        }
    }

    /// The current segment's write bound: the highest its header or a durable block names
    /// (blocks whose sync returned raise it here).
    fn write_bound(&self, log: &mut LogState<S::File>) -> u64 {
        let durable = self.commit.durable_lsn();
        let seg = log.segments.back_mut().expect("a segment");
        while let Some(&(lsn, bound)) = log.raises.front()
            && lsn <= durable
        {
            seg.write_bound = seg.write_bound.max(bound);
            log.raises.pop_front();
        }
        seg.write_bound
    }

    /// Whether a block opened at the current segment's end could grow to its largest (or to
    /// the end of the file) without passing the write bound.
    fn block_fits_bound(&self, log: &mut LogState<S::File>) -> bool {
        let seg = log.current();
        let largest = (seg.end + self.opts.block_span_max()).min(seg.file_bytes);
        largest <= self.write_bound(log)
    }

    /// Waits for `lsn` through group commit; `holds_writers`: the caller holds the `log` lock
    /// (`lead` then must not take it).
    fn commit_with(
        &self,
        lsn: Lsn,
        holds_writers: bool,
        lead: impl FnMut() -> Result<Option<Taken<S::File>>, CommitError>,
    ) -> Result<(), Error> {
        let sync = |ranges: &[DirtyRange<S::File>]| {
            let started = std::time::Instant::now();
            let synced = ranges
                .iter()
                .try_for_each(|r| r.file.sync_range(r.start, r.end - r.start));
            self.figures.sync_took(started.elapsed());
            synced
        };
        let waited = if holds_writers {
            self.commit.wait_durable_holding_writers(lsn, lead, sync)
        } else {
            self.commit.wait_durable(lsn, lead, sync)
        };
        waited.map_err(|e| match e {
            CommitError::SyncFailed(e) => {
                tracing::error!(error = %e, "WAL sync failed; poisoned, nothing more is acknowledged");
                Error::Io(e)
            }
            CommitError::Poisoned => Error::Poisoned,
        })
    }

    /// Makes sure a file exists for every segment the entries will roll into, before anything
    /// is written, so running out of space leaves no half-written batch. The first is usually
    /// ready (the preparer made it); the others are made here. On failure the files made here
    /// are removed (recovery removes any that survive a crash).
    fn preallocate(&self, log: &LogState<S::File>, entries: &[Entry<'_>]) -> Result<(), Error> {
        // The same placement rule as `write_entries`.
        let mut rolls = 0u64;
        let mut cursor = log.cursor();
        for &(_, _, body) in entries {
            let frame = frame_bytes(body.len()) as u64;
            loop {
                match cursor.place(frame) {
                    Place::Group => break,
                    Place::SealFirst => cursor = cursor.sealed(),
                    Place::Roll => {
                        rolls += 1;
                        cursor = Cursor {
                            block_start: FIRST_BLOCK_OFFSET,
                            group_bytes: 0,
                            file_bytes: self.opts.segment_bytes,
                            group_limit: log.group_limit,
                        };
                    }
                }
            }
            cursor.group_bytes += frame;
        }
        let current = log.current().id;
        let mut made_here = Vec::new();
        for k in 1..=rolls {
            if let Err(e) = self.ensure_next(current + k, &mut made_here) {
                let mut next = lock(&self.next);
                for id in made_here {
                    if next.ready.remove(&id).is_some() {
                        let _ = self.storage.remove(&segment_file_name(id));
                    }
                }
                self.warn_preallocate(current + k, &e);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Logs a failed preallocation at most once a second (a full disk refuses every append that
    /// needs a new segment: hundreds a second would flood a log whose reader is slow), with the
    /// count of those not logged since.
    fn warn_preallocate(&self, segment: u64, e: &Error) {
        let mut last = lock(&self.warned);
        let now = std::time::Instant::now();
        if last
            .0
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            last.1 += 1;
            return;
        }
        let suppressed = std::mem::take(&mut last.1);
        last.0 = Some(now);
        tracing::warn!(segment, error = %e, suppressed, "WAL could not preallocate a segment");
    }

    /// Makes sure the file of segment `id` is ready: made ahead, or being made by the preparer
    /// (then this waits for it), or made here and now. Called under `log`.
    fn ensure_next(&self, id: u64, made_here: &mut Vec<u64>) -> Result<(), Error> {
        let mut next = lock(&self.next);
        loop {
            if next.ready.contains_key(&id) {
                return Ok(());
            }
            if next.busy && next.want == id {
                next = self.next_changed.wait(next).expect("a WAL thread panicked");
                continue;
            }
            break;
        }
        // Nobody is making it: make it here (the preparer only ever makes `want`).
        let claimed = next.want == id;
        next.busy |= claimed;
        drop(next);
        let made = create_next(&self.storage, id, self.opts.segment_bytes);
        let mut next = lock(&self.next);
        if claimed {
            next.busy = false;
        }
        self.next_changed.notify_all();
        match made {
            Ok(file) => {
                next.ready.insert(id, file);
                if claimed {
                    next.failed = false;
                }
                made_here.push(id);
                Ok(())
            }
            Err(e) => {
                if claimed {
                    next.failed = true;
                }
                if matches!(e, Error::Io(_)) {
                    // A failed sync of the directory (or of the file): never believed again.
                    self.commit.poison();
                }
                Err(e)
            }
        }
    }

    /// The preparer's one step: makes the file of segment `want` if nobody has, with no lock
    /// held during the I/O. Returns whether it did anything.
    fn prepare_next(&self) -> bool {
        let id = {
            let mut next = lock(&self.next);
            if next.stop
                || next.busy
                || next.failed
                || next.ready.contains_key(&next.want)
                || self.commit.is_poisoned()
            {
                return false;
            }
            next.busy = true;
            next.want
        };
        let made = create_next(&self.storage, id, self.opts.segment_bytes);
        let mut next = lock(&self.next);
        next.busy = false;
        match made {
            Ok(file) => {
                next.ready.insert(id, file);
                tracing::debug!(segment = id, "WAL next segment prepared");
            }
            Err(e) => {
                // Not believed, and not fatal here: `create_next` removed the file, and the
                // append that needs it makes it itself, under `log`, where a failure poisons
                // the log in that caller's context (an appender never sees `Poisoned` for a
                // failure that struck after it wrote).
                next.failed = true;
                tracing::warn!(segment = id, error = %e, "WAL could not prepare a segment ahead");
            }
        }
        self.next_changed.notify_all();
        true
    }

    /// Seals the current segment and starts the next one in its prepared file. Everything
    /// written is made durable first (one group-commit round, which acknowledges its waiters
    /// too), and only then is the new header written and synced: a segment's header then
    /// proves its predecessor durable, which is what lets recovery call any damage in a sealed
    /// segment corruption.
    fn roll(&self, log: &mut LogState<S::File>) -> Result<(), Error> {
        self.wait_commit_locked(log, self.commit.written_lsn())?;
        let current = log.current();
        let (id, first_lsn) = (current.id + 1, current.last_lsn + 1);
        let file = {
            // Taken and the next one wanted in one step: the preparer must never see `want`
            // missing from `ready` while its file is being rolled into.
            let mut next = lock(&self.next);
            let file = next
                .ready
                .remove(&id)
                .expect("preallocate made the next segment's file");
            next.want = id + 1;
            next.failed = false;
            self.next_changed.notify_all();
            file
        };
        let reach = self.opts.write_reach();
        let file = Arc::new(file);
        let header_bound = write_bound_after(FIRST_BLOCK_OFFSET, reach, file.len_bytes());
        // The roll's proof may wait for the checker.
        self.release_background();
        let proven = self.proof_outcome(
            id,
            self.zero_proof
                .roll_into(id, &file, header_bound, &zero_stray),
        );
        match proven
            .and_then(|()| start_segment(file, id, first_lsn, (self.opts.segment_bytes, reach)))
        {
            Ok(segment) => {
                log.raises.clear(); // the old segment's, all durable now
                Figures::add(&self.figures.rolls, 1);
                tracing::debug!(segment = id, first_lsn, "WAL rolled");
                log.segments.push_back(segment);
                log.group.count = 0;
                self.publish_room(log);
                Ok(())
            }
            Err(e) => {
                self.commit.poison();
                tracing::error!(segment = id, error = %e, "WAL roll failed; poisoned");
                Err(e)
            }
        }
    }
}

/// How far past the appender the preparer writes the zeros of the segment in use (see
/// [`StorageFile::prepare_in_use`]): more than the appends of one
/// [`IN_USE_POLL_MAX`] at the rates the log takes in a burst after a quiet spell (a
/// commit into pages the zeros have not reached yet only converts its extent, slower).
const IN_USE_ZEROS_AHEAD: u64 = 16 << 20;
/// The preparer looks at the appender's progress this often while it moves...
const IN_USE_POLL_MIN: Duration = Duration::from_millis(10);
/// ...and backs off to this while it does not (an idle log wakes it once a second).
const IN_USE_POLL_MAX: Duration = Duration::from_secs(1);

/// The background preparer: prepares the pages of the segment being appended to past its
/// end (a fresh log's first segment, or the last one after an open: nothing prepared them;
/// see [`StorageFile::prepare_in_use`]), a reach ahead of the appender and again as it moves,
/// until that segment is prepared or rolled past; and makes the next segment's file whenever
/// it is wanted and missing.
fn prepare_loop<S: Storage>(shared: &Shared<S>) {
    // Its zeros wait for the commits' syncs at the device, not the other way round.
    crate::storage::mmap::background_io_class();
    shared.wait_released();
    // The segment in use (its file, id, and where its preparation goes on from), until done.
    let mut in_use = {
        let log = lock(&shared.log);
        let current = log.current();
        Some((Arc::clone(&current.file), current.id, current.end))
    };
    let mut poll = IN_USE_POLL_MIN;
    let stop = || lock(&shared.next).stop;
    loop {
        if let Some((file, id, from)) = in_use.take() {
            match file.prepare_in_use(from, IN_USE_ZEROS_AHEAD, &stop) {
                Ok(Some(at)) => {
                    poll = if at > from {
                        IN_USE_POLL_MIN
                    } else {
                        (poll * 2).min(IN_USE_POLL_MAX)
                    };
                    in_use = Some((file, id, at));
                }
                Ok(None) => {}
                Err(e) => {
                    // Writing zeros back and syncing them reads the file's write-back error,
                    // which the kernel reports once per open file: a failure of a *record's*
                    // write-back could be the one seen here, and a commit's sync would then
                    // not see it. So nothing is acknowledged from now on.
                    shared.commit.poison();
                    tracing::error!(
                        error = %e,
                        "WAL could not prepare the segment in use; poisoned"
                    );
                    return;
                }
            }
        }
        {
            let mut next = lock(&shared.next);
            // Rolled past (the roll wants the segment after the new one): the rest of that
            // file is never written.
            if in_use
                .as_ref()
                .is_some_and(|(_, id, _)| next.want != id + 1)
            {
                in_use = None;
            }
            while !next.stop && (next.busy || next.failed || next.ready.contains_key(&next.want)) {
                if in_use.is_some() {
                    next = shared
                        .next_changed
                        .wait_timeout(next, poll)
                        .expect("a WAL thread panicked")
                        .0;
                    break;
                }
                next = shared
                    .next_changed
                    .wait(next)
                    .expect("a WAL thread panicked");
            }
            if next.stop {
                return;
            }
        }
        if !shared.prepare_next() && shared.commit.is_poisoned() {
            return; // nothing more will be appended
        }
    }
}

/// How far past the appender the mapper keeps the pages of the segment in use mapped for
/// writing (see [`StorageFile::map_ahead`]): more than the appender copies in one
/// [`MAP_POLL_MIN`] at its fastest (records and their mirrors: about 300 MB/s here), so that
/// it meets no page of its own to fault in while it moves.
const MAPPED_AHEAD: u64 = 4 << 20;
/// The mapper looks at the appender's progress this often while it moves...
const MAP_POLL_MIN: Duration = Duration::from_millis(2);
/// ...and backs off to this while it does not (an idle log wakes it once a second; a roll
/// wakes it at once).
const MAP_POLL_MAX: Duration = Duration::from_secs(1);

/// The mapper: follows the segment being appended to, and keeps the pages the appender
/// copies into next mapped for writing (see [`StorageFile::map_ahead`]). Ends at `stop`.
fn map_loop<S: Storage>(shared: &Shared<S>) {
    shared.wait_released();
    // The segment written to, its id, and how far it is mapped: from its end at the start.
    let current = || {
        let log = lock(&shared.log);
        let current = log.current();
        (Arc::clone(&current.file), current.id, current.end)
    };
    let (mut file, mut id, mut mapped_to) = current();
    let mut poll = MAP_POLL_MIN;
    loop {
        match file.map_ahead(mapped_to, MAPPED_AHEAD) {
            Ok(at) => {
                poll = if at > mapped_to {
                    MAP_POLL_MIN
                } else {
                    (poll * 2).min(MAP_POLL_MAX)
                };
                mapped_to = at;
            }
            // Only mapping work lost: the appender takes its own faults, as without it.
            Err(e) => tracing::debug!(error = %e, "WAL could not map pages ahead"),
        }
        let rolled = {
            let mut next = lock(&shared.next);
            // A roll wants the segment after the new one (and wakes this thread).
            if !next.stop && next.want == id + 1 {
                next = shared
                    .next_changed
                    .wait_timeout(next, poll)
                    .expect("a WAL thread panicked")
                    .0;
            }
            if next.stop {
                return;
            }
            next.want != id + 1
        };
        if rolled {
            // Not under `next`: a roll takes `next` under `log`.
            (file, id, mapped_to) = current();
            poll = MAP_POLL_MIN;
        }
    }
}

/// The checker (see `zero.rs`): proves the files found at open zero, a step at a time with no
/// lock held. Ends when nothing is left to prove, at `stop`, or after an error.
fn check_loop<S: Storage>(shared: &Shared<S>) {
    shared.wait_released();
    while let Some((id, file, from, to)) = shared.zero_proof.next_step() {
        let proven = shared
            .zero_proof
            .step_done(id, to, zero_stray(&*file, from, to));
        if shared.proof_outcome(id, proven).is_err() {
            return;
        }
    }
}

fn periodic_sync<S: Storage>(shared: &Shared<S>, interval: Duration) {
    loop {
        {
            let stop = lock(&shared.stop);
            let (stop, _) = shared
                .stop_changed
                .wait_timeout_while(stop, interval, |stop| !*stop)
                .expect("a WAL thread panicked");
            if *stop {
                return;
            }
        }
        let written = shared.commit.written_lsn();
        if written > shared.commit.durable_lsn() && shared.wait_commit(written).is_err() {
            // Poisoned: appenders and waiters see it; there is nothing left to sync.
            return;
        }
    }
}

impl<S: Storage> Drop for Wal<S> {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!(error = %e, "WAL dropped without a clean close");
        }
    }
}

impl<S: Storage> std::fmt::Debug for Wal<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("durable_lsn", &self.durable_lsn())
            .field("last_lsn", &self.last_lsn())
            .finish_non_exhaustive()
    }
}

// The engine shares one log between threads through `Arc`.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<Wal<MmapStorage>>();
};

/// Locks one of the log's own mutexes (always `std`: only the group commit runs under loom). A
/// poisoned mutex means a thread panicked mid-update, so this panics too.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .expect("a WAL thread panicked while holding a lock")
}
