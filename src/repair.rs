//! Cutting the journal at a record boundary, with a backup of what is cut: what
//! `timewheel repair DIR --truncate-at SEGMENT:OFFSET` does. The operator's last resort when
//! the engine refuses to open a directory because acknowledged data is damaged
//! ([`Error::Corrupted`]): every record from the cut on is given up. See docs/recovery.md,
//! "Repair". Only with the `cli` feature (the binary's): its plan speaks in LSNs and segment
//! offsets, which the engine's API otherwise keeps to itself.
//!
//! 1. [`prepare`] runs the verify ([`crate::inspect::inspect`]: the next open's own recovery
//!    and replay, over the directory read in place), then takes the directory's lock, the one
//!    the engine takes (refused with [`Error::Locked`] while an engine holds it), checks that
//!    nothing changed in between, reads the manifest, and scans the journal
//!    ([`timewheel_wal::repair::plan_cut`]) to plan the cut: which records it removes (their
//!    LSNs, types and jobs), which bytes could not be read, which files it rewrites or
//!    removes. It changes nothing. It refuses ([`Plan::verdict`]) a cut that is not at a
//!    record boundary, lies past the damage or the end of the log, would remove records the
//!    hour-bucket files already hold ([`Refusal::BelowCovered`]), would keep a record replay
//!    refuses, or would not repair the damage verify found in the job store.
//! 2. [`Prepared::apply`] makes it, still under the lock: it copies every file the cut
//!    changes or removes, whole, into a new backup directory, with `REPAIR.txt` (the plan, how
//!    to undo it) and `jobs.txt` (the ids of the jobs the cut records name), and syncs them
//!    (the files, the directory, its parent); only then it cuts
//!    ([`timewheel_wal::repair::cut`]). Then it opens the log (its recovery, as the engine's
//!    open would run it), appends an id reservation past every id the cut records used (so
//!    that no id is handed out twice), closes it, and releases the lock; last, it verifies the
//!    directory again ([`Applied::after`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use timewheel_wal::repair::{CutObserver, CutRecord};
pub use timewheel_wal::repair::{
    CutPlan, CutPoint, Damage, Refusal as LogRefusal, SegmentSpan, Survey, Unreadable,
};
use timewheel_wal::storage::mmap::{LOCK_FILE_NAME, MmapStorage};
use timewheel_wal::{Durability, RecoveryMode, Storage, Wal, WalOptions};

use crate::error::Error;
use crate::inspect::{Inspection, inspect};
use crate::job::JobId;
use crate::record::{Event, TYPE_RESERVE_IDS};
use crate::store::manifest::{MANIFEST_NAME, Manifest};

/// The id block the margin for unreadable bytes assumes: the default `Config::id_block`.
/// A record reserves at most this many ids beyond the ones its own append schedules.
pub const ID_BLOCK_ASSUMED: u64 = 1 << 16;

/// The smallest record frame (an id reservation: 24 bytes of header, 8 of body), so that
/// `bytes / MIN_FRAME_BYTES` bounds the records unreadable bytes can have held.
const MIN_FRAME_BYTES: u64 = 32;

/// Ids skipped past the highest one found when `bytes` of what is cut could not be read: each
/// record they may have held reserved at most [`ID_BLOCK_ASSUMED`] ids beyond the ones
/// scheduled by records that were read (or by hidden ones, which count as records too).
pub fn unread_id_margin(bytes: u64) -> u64 {
    (bytes / MIN_FRAME_BYTES + 1).saturating_mul(ID_BLOCK_ASSUMED)
}

/// Bytes per read and write when backing up.
const COPY_CHUNK_BYTES: usize = 1 << 20;

/// What a repair is doing, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Progress {
    /// The verify before the cut (one scan; no count).
    Verify,
    /// Scanning the journal: about to read segment file `done + 1` of `total`.
    Scan {
        /// Files read.
        done: usize,
        /// Files to read.
        total: usize,
    },
    /// Copying what is cut into the backup.
    Backup {
        /// Bytes copied.
        done: u64,
        /// Bytes to copy.
        total: u64,
    },
    /// Cutting, opening the log and reserving ids.
    Cut,
    /// The verify after the cut.
    VerifyAfter,
}

/// Why the plan refuses the cut.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The journal's own refusal: not a record boundary, past the damage or the end of the
    /// log, no such segment, the whole log.
    Log(LogRefusal),
    /// The cut would remove records the hour-bucket files already hold the effects of (LSNs
    /// up to the manifest's `covered_lsn`): the buckets would then say what the journal no
    /// longer does, and the next records would get LSNs that the next open skips.
    BelowCovered {
        /// The first LSN the cut removes.
        first_lsn_cut: u64,
        /// The manifest's covered LSN.
        covered_lsn: u64,
        /// Where the earliest allowed cut is (the record with LSN `covered_lsn + 1`, or the
        /// end of the log), if the journal holds it.
        earliest: Option<CutPoint>,
    },
    /// Verify found a record that replay refuses, and the cut would keep it: the engine
    /// would still refuse to open.
    KeepsRefusedRecord {
        /// Its LSN.
        lsn: u64,
        /// Where it is, if the scan found it.
        at: Option<CutPoint>,
        /// Why replay refuses it.
        reason: String,
    },
    /// The job store (a bucket file or the manifest) is damaged: cutting the journal does not
    /// repair it.
    StoreDamaged {
        /// The file.
        file: String,
        /// Where in it.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Log(r) => write!(f, "{r}"),
            Refusal::BelowCovered {
                first_lsn_cut,
                covered_lsn,
                earliest,
            } => {
                write!(
                    f,
                    "the cut would remove LSN {first_lsn_cut} and after, but the hour-bucket \
                     files already hold what every record up to LSN {covered_lsn} did (the \
                     manifest's covered LSN): they would contradict the journal"
                )?;
                match earliest {
                    Some(p) => write!(f, "; the earliest cut allowed is at {p}"),
                    None => Ok(()),
                }
            }
            Refusal::KeepsRefusedRecord { lsn, at, reason } => {
                write!(f, "the record at LSN {lsn}")?;
                if let Some(p) = at {
                    write!(f, " ({p})")?;
                }
                write!(
                    f,
                    ", which replay refuses ({reason}), comes before the cut, which would keep \
                     it; cut at it or before"
                )
            }
            Refusal::StoreDamaged {
                file,
                offset,
                reason,
            } => write!(
                f,
                "the job store is damaged ({file} at offset {offset}: {reason}); cutting the \
                 journal does not repair it"
            ),
        }
    }
}

impl std::error::Error for Refusal {}

/// Why a repair could not run (nothing was changed, unless the error says otherwise).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RepairError {
    /// The path is not a directory.
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// The directory holds no journal segment: it is not a data directory (nothing is
    /// created in it, not even the lock file).
    #[error("{} holds no journal segment (*.wal): not a data directory", .0.display())]
    NoJournal(PathBuf),
    /// The engine's error: [`Error::Locked`] while an engine holds the directory, I/O errors.
    #[error(transparent)]
    Engine(#[from] Error),
    /// The directory changed between the verify and taking the lock (an engine opened it?).
    #[error(
        "the directory changed between the verify and the lock (did an engine open it?); \
         nothing was changed: run repair again"
    )]
    Changed,
    /// The backup directory exists already.
    #[error("the backup directory {} exists already; nothing was changed", .0.display())]
    BackupExists(PathBuf),
    /// [`Prepared::apply`] of a refused plan.
    #[error("the cut is refused: {0}")]
    Refused(Refusal),
    /// The cut failed part way: some later segments may be removed already. The backup holds
    /// everything the cut removes; the same repair, run again, finishes it.
    #[error(
        "the cut failed part way (backup in {}): {source}; run the same repair again to finish it",
        backup.display()
    )]
    CutFailed {
        /// The backup directory.
        backup: PathBuf,
        /// What failed.
        source: Error,
    },
    /// The cut was made, but what came after it failed: the log's open, the id reservation.
    /// The backup holds what was cut.
    #[error("the cut was made (backup in {}), but then: {source}", backup.display())]
    AfterCut {
        /// The backup directory.
        backup: PathBuf,
        /// What failed.
        source: Error,
    },
}

impl From<io::Error> for RepairError {
    fn from(e: io::Error) -> Self {
        RepairError::Engine(Error::Io(e))
    }
}

impl From<timewheel_wal::Error> for RepairError {
    fn from(e: timewheel_wal::Error) -> Self {
        RepairError::Engine(Error::from(e))
    }
}

/// The records a cut removes, as the engine reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CutRecords {
    /// How many of each type (`schedule`, `cancel`, `reschedule`, `claim`, `complete`,
    /// `fail`, `expire`, `reserve_ids`).
    pub by_type: BTreeMap<&'static str, u64>,
    /// Every job a cut record names.
    pub jobs: BTreeSet<JobId>,
    /// The jobs whose schedule record is cut: after the cut the engine does not know them.
    pub scheduled: BTreeSet<JobId>,
    /// Records whose body does not decode.
    pub undecodable: u64,
    /// The highest id sequence number a cut record reserved or scheduled.
    pub ids_max: Option<u64>,
}

impl CutRecords {
    fn add(&mut self, record_type: u8, body: &[u8]) {
        let event = match Event::decode(record_type, body) {
            Ok(event) => event,
            Err(_) => {
                self.undecodable += 1;
                return;
            }
        };
        let name = event.name();
        *self.by_type.entry(name).or_default() += 1;
        let seq = match &event {
            Event::ReserveIds { up_to } => Some(*up_to),
            Event::Schedule(s) => {
                self.scheduled.insert(s.id);
                Some(s.id.seq())
            }
            _ => None,
        };
        if let Some(seq) = seq {
            self.ids_max = Some(self.ids_max.map_or(seq, |m| m.max(seq)));
        }
        if let Some(id) = event.id() {
            self.jobs.insert(id);
        }
    }
}

/// The plan of a repair: what verify found, the journal as the scan read it, and what the
/// cut would do or why it is refused.
#[derive(Debug)]
#[non_exhaustive]
pub struct Plan {
    /// The data directory.
    pub dir: PathBuf,
    /// Where the cut was asked for.
    pub at: CutPoint,
    /// What verify found before (the next open's verdict): a healthy directory, or the
    /// damage the open refuses.
    pub verified: Result<Inspection, Error>,
    /// The journal as the scan read it.
    pub survey: Survey,
    /// The manifest's covered LSN: the hour-bucket files hold every record up to it.
    pub covered_lsn: u64,
    /// The cut, or why it is refused.
    pub verdict: Result<CutPlan, Refusal>,
    /// The records it removes, decoded (meaningful when the cut is not refused).
    pub records: CutRecords,
    /// The files the backup copies (every file the cut rewrites or removes), with their sizes.
    pub files: Vec<(String, u64)>,
}

impl Plan {
    /// Bytes the backup copies.
    pub fn backup_bytes(&self) -> u64 {
        self.files.iter().map(|(_, b)| b).sum()
    }
}

/// A planned repair, holding the directory's lock until it is applied or dropped.
#[derive(Debug)]
pub struct Prepared {
    plan: Plan,
    storage: MmapStorage,
    manifest: Manifest,
}

/// What [`Prepared::apply`] did.
#[derive(Debug)]
#[non_exhaustive]
pub struct Applied {
    /// The plan it carried out.
    pub plan: Plan,
    /// The backup directory (`None` when there was nothing to cut).
    pub backup: Option<PathBuf>,
    /// The id reservation appended after the cut (a sequence number), if one was needed.
    pub ids_reserved_up_to: Option<u64>,
    /// The verify after the cut, with the lock released.
    pub after: Result<Inspection, Error>,
}

/// The directory's files as a list of (name, length, modification time, inode), to tell
/// whether anything changed between two moments. The lock file is left out.
type Fingerprint = Vec<(String, u64, i64, i64, u64)>;

fn fingerprint(dir: &Path) -> io::Result<Fingerprint> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !meta.is_file() || name == LOCK_FILE_NAME {
            continue;
        }
        files.push((
            name,
            meta.len(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ino(),
        ));
    }
    files.sort();
    Ok(files)
}

/// Collects the cut records and reports the scan's progress.
struct Collect<'p> {
    records: CutRecords,
    progress: &'p mut dyn FnMut(Progress),
}

impl CutObserver for Collect<'_> {
    fn scanning(&mut self, done: usize, total: usize) {
        (self.progress)(Progress::Scan { done, total });
    }

    fn record(&mut self, record: &CutRecord<'_>) {
        self.records.add(record.record_type, record.body);
    }
}

/// Verifies `dir`, locks it, and plans a cut at `at` (see the module documentation). Changes
/// nothing. The lock is held by the returned value until it is applied or dropped.
pub fn prepare(
    dir: impl AsRef<Path>,
    at: CutPoint,
    progress: &mut dyn FnMut(Progress),
) -> Result<Prepared, RepairError> {
    let dir = dir.as_ref();
    if !dir.is_dir() {
        return Err(RepairError::NotADirectory(dir.to_path_buf()));
    }
    let before = fingerprint(dir)?;
    if !before
        .iter()
        .any(|(name, ..)| timewheel_wal::parse_segment_file_name(name).is_some())
    {
        return Err(RepairError::NoJournal(dir.to_path_buf()));
    }
    progress(Progress::Verify);
    let verified = inspect(dir);
    match &verified {
        Ok(_)
        | Err(Error::Corrupted { .. })
        | Err(Error::CorruptedStore { .. })
        | Err(Error::UndecodableRecord { .. }) => {}
        Err(_) => return Err(RepairError::Engine(verified.expect_err("an error"))),
    }
    let storage = MmapStorage::open_dir(dir)?;
    if !storage.try_lock()? {
        return Err(Error::Locked.into());
    }
    if fingerprint(dir)? != before {
        return Err(RepairError::Changed);
    }
    let (manifest, manifest_damage) = match fs::read(dir.join(MANIFEST_NAME)) {
        Ok(bytes) => match Manifest::decode(&bytes) {
            Ok(m) => (m, None),
            Err(e) => (
                Manifest::default(),
                Some(Refusal::StoreDamaged {
                    file: MANIFEST_NAME.to_string(),
                    offset: e.offset,
                    reason: e.what.to_string(),
                }),
            ),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => (Manifest::default(), None),
        Err(e) => return Err(e.into()),
    };
    let covered_lsn = manifest.covered_lsn;
    let refused_lsn = match &verified {
        Err(Error::UndecodableRecord { lsn, reason }) => Some((*lsn, reason.clone())),
        _ => None,
    };
    let mut locate = vec![covered_lsn + 1];
    locate.extend(refused_lsn.as_ref().map(|(lsn, _)| *lsn));
    let mut collect = Collect {
        records: CutRecords::default(),
        progress,
    };
    let (survey, verdict) = timewheel_wal::repair::plan_cut(&storage, at, &locate, &mut collect)?;
    let located = |lsn: u64| {
        survey
            .located
            .iter()
            .find(|&&(l, _)| l == lsn)
            .map(|&(_, p)| p)
    };
    let verdict = match verdict {
        Err(r) => Err(Refusal::Log(r)),
        Ok(_) if manifest_damage.is_some() => Err(manifest_damage.expect("checked")),
        Ok(_) if matches!(verified, Err(Error::CorruptedStore { .. })) => {
            let Err(Error::CorruptedStore {
                file,
                offset,
                reason,
            }) = &verified
            else {
                unreachable!("matched above")
            };
            Err(Refusal::StoreDamaged {
                file: file.clone(),
                offset: *offset,
                reason: reason.clone(),
            })
        }
        Ok(plan) if plan.first_lsn_cut <= covered_lsn => Err(Refusal::BelowCovered {
            first_lsn_cut: plan.first_lsn_cut,
            covered_lsn,
            earliest: located(covered_lsn + 1),
        }),
        Ok(plan) => match refused_lsn {
            Some((lsn, reason)) if lsn < plan.first_lsn_cut => Err(Refusal::KeepsRefusedRecord {
                lsn,
                at: located(lsn),
                reason,
            }),
            _ => Ok(plan),
        },
    };
    let mut files = Vec::new();
    if let Ok(plan) = &verdict {
        for name in plan.files() {
            let bytes = fs::metadata(dir.join(&name))?.len();
            files.push((name, bytes));
        }
    }
    let plan = Plan {
        dir: dir.to_path_buf(),
        at,
        verified,
        survey,
        covered_lsn,
        verdict,
        records: collect.records,
        files,
    };
    Ok(Prepared {
        plan,
        storage,
        manifest,
    })
}

impl Prepared {
    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The plan, releasing the lock without changing anything (a dry run).
    pub fn into_plan(self) -> Plan {
        self.plan
    }

    /// Backs up what the cut removes into `backup` (a directory that must not exist; `None`:
    /// `DIR/repair-<UTC time>`), syncs the backup, makes the cut, opens the log, reserves the
    /// ids the cut records used, closes the log, releases the lock, and verifies the
    /// directory again. Does nothing (no backup) when there is nothing to cut.
    pub fn apply(
        self,
        backup: Option<&Path>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Applied, RepairError> {
        let plan = match &self.plan.verdict {
            Ok(plan) => plan.clone(),
            Err(r) => return Err(RepairError::Refused(r.clone())),
        };
        let dir = self.plan.dir.clone();
        if plan.nothing_to_do {
            drop(self.storage);
            return Ok(Applied {
                plan: self.plan,
                backup: None,
                ids_reserved_up_to: None,
                after: inspect(&dir),
            });
        }
        let target = match backup {
            Some(path) => path.to_path_buf(),
            None => default_backup_dir(&dir),
        };
        write_backup(&self.plan, &target, progress)?;

        progress(Progress::Cut);
        timewheel_wal::repair::cut(&self.storage, &plan).map_err(|e| RepairError::CutFailed {
            backup: target.clone(),
            source: e.into(),
        })?;
        let after_cut = |source: Error| RepairError::AfterCut {
            backup: target.clone(),
            source,
        };
        let reserved = reopen_and_reserve(self.storage, &self.manifest, &self.plan, &plan)
            .map_err(after_cut)?;
        progress(Progress::VerifyAfter);
        let after = inspect(&dir);
        Ok(Applied {
            plan: self.plan,
            backup: Some(target),
            ids_reserved_up_to: reserved,
            after,
        })
    }
}

/// `DIR/repair-<UTC time>`, with a suffix if that exists.
fn default_backup_dir(dir: &Path) -> PathBuf {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string();
    let mut path = dir.join(format!("repair-{stamp}"));
    let mut n = 2;
    while path.exists() {
        path = dir.join(format!("repair-{stamp}-{n}"));
        n += 1;
    }
    path
}

/// Syncs a directory (its entries).
fn sync_dir(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()
}

/// Writes `bytes` to a new file, synced.
fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = File::create_new(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// The backup: the files whole, `REPAIR.txt`, `jobs.txt`, every file synced, then the
/// directory, then its parent.
fn write_backup(
    plan: &Plan,
    target: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<(), RepairError> {
    match fs::create_dir(target) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(RepairError::BackupExists(target.to_path_buf()));
        }
        Err(e) => return Err(e.into()),
    }
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    let total = plan.backup_bytes();
    let mut done = 0u64;
    progress(Progress::Backup { done, total });
    let mut buf = vec![0u8; COPY_CHUNK_BYTES];
    for (name, _) in &plan.files {
        let mut from = File::open(plan.dir.join(name))?;
        let mut to = File::create_new(target.join(name))?;
        loop {
            let n = from.read(&mut buf)?;
            if n == 0 {
                break;
            }
            to.write_all(&buf[..n])?;
            done += n as u64;
            progress(Progress::Backup { done, total });
        }
        to.sync_all()?;
    }
    write_synced(&target.join("REPAIR.txt"), describe(plan).as_bytes())?;
    let mut jobs = String::new();
    for id in &plan.records.jobs {
        jobs.push_str(&format!("{id}\n"));
    }
    write_synced(&target.join("jobs.txt"), jobs.as_bytes())?;
    sync_dir(target)?;
    Ok(())
}

/// "LSN a to b", or "no record".
fn lsn_range(first: u64, last: u64) -> String {
    if last < first {
        "no record".to_string()
    } else {
        format!("LSN {first} to {last}")
    }
}

/// `REPAIR.txt`: what was cut, and how to undo it.
fn describe(plan: &Plan) -> String {
    let Ok(cut) = &plan.verdict else {
        return String::new();
    };
    let mut s = String::new();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    s.push_str(&format!(
        "timewheel repair of {}, {now}\n\ncut at {} (segment {}, offset {}): the record with \
         LSN {} and everything after it\n",
        plan.dir.display(),
        cut.at,
        cut.at.segment,
        cut.at.offset,
        cut.first_lsn_cut
    ));
    s.push_str(&format!(
        "kept: {}\n",
        lsn_range(plan.survey.first_lsn, cut.first_lsn_cut - 1)
    ));
    s.push_str(&format!(
        "cut: {} records read ({})\n",
        cut.records,
        lsn_range(cut.first_lsn_cut, cut.last_lsn_cut)
    ));
    for u in &cut.unreadable {
        s.push_str(&format!(
            "cut: {} bytes that could not be read, segment {} from offset {}: {}\n",
            u.bytes, u.segment, u.offset, u.reason
        ));
    }
    for (name, n) in &plan.records.by_type {
        s.push_str(&format!("records cut: {n} {name}\n"));
    }
    s.push_str(&format!(
        "jobs named by the records cut: {} (their ids are in jobs.txt); jobs scheduled in \
         them, now unknown to the engine: {}\n\n",
        plan.records.jobs.len(),
        plan.records.scheduled.len()
    ));
    s.push_str("The files here are the data directory's files as they were before the cut:\n");
    for (name, bytes) in &plan.files {
        let what = if cut.rewritten.as_deref() == Some(name.as_str()) {
            format!("rewritten without its bytes from offset {}", cut.at.offset)
        } else {
            "removed".to_string()
        };
        s.push_str(&format!("  {name} ({bytes} bytes): {what}\n"));
    }
    s.push_str(
        "\nTo undo the repair, before any engine opened the directory again: stop every \
         process that uses it, then copy every .wal file here back into it, replacing the \
         files of the same name.\n",
    );
    s
}

/// After the cut: the log's recovery (as the engine's open runs it first), an id reservation
/// past every id the cut records reserved or used, and a clean close. Returns the reservation
/// appended.
fn reopen_and_reserve(
    storage: MmapStorage,
    manifest: &Manifest,
    plan: &Plan,
    cut: &CutPlan,
) -> Result<Option<u64>, Error> {
    // New segments get the size of the last one kept.
    let last_kept = if cut.at.offset > 0 {
        cut.at.segment
    } else {
        cut.at.segment - 1
    };
    let segment_bytes = fs::metadata(plan.dir.join(timewheel_wal::segment_file_name(last_kept)))
        .map_or(WalOptions::SEGMENT_BYTES_DEFAULT, |m| m.len());
    let options = WalOptions {
        segment_bytes,
        record_bytes_max: 64,
        durability: Durability::Sync,
        recovery_mode: RecoveryMode::TolerateTornTail,
        ..WalOptions::default()
    };
    let (wal, _) = Wal::open(storage, options)?;
    let unread = !cut.unreadable.is_empty();
    let mut reserved = None;
    if plan.records.ids_max.is_some() || unread {
        // The reservation replay will have reached: the manifest's, then the journal's.
        let mut kept = manifest.ids_reserved;
        let mut iter = wal.iter_from((manifest.covered_lsn + 1).max(wal.first_lsn()));
        while let Some(record) = iter.next_ref() {
            let record = record?;
            if record.record_type == TYPE_RESERVE_IDS
                && let Ok(Event::ReserveIds { up_to }) =
                    Event::decode(record.record_type, record.body)
            {
                kept = kept.max(up_to);
            }
        }
        drop(iter);
        let margin = if unread {
            unread_id_margin(cut.unreadable.iter().map(|u| u.bytes).sum())
        } else {
            0
        };
        let up_to = plan
            .records
            .ids_max
            .unwrap_or(0)
            .max(kept)
            .saturating_add(margin);
        if up_to > kept {
            let mut body = Vec::with_capacity(8);
            Event::ReserveIds { up_to }.encode(&mut body);
            wal.append(TYPE_RESERVE_IDS, &body)?;
            tracing::warn!(up_to, "repair: ids reserved past those of the records cut");
            reserved = Some(up_to);
        }
    }
    wal.close()?;
    Ok(reserved)
}
