//! Looking into a data directory without changing it: what the next open would find.
//!
//! [`inspect`] runs the engine's own open (the log's recovery, then replay through the one
//! transition function) over the directory read in place: every change the open would make
//! (a torn tail cut, a damaged copy repaired, the last segment copied) happens in memory only,
//! and nothing fires. So its verdict is the open's verdict, from the same code, and a directory
//! it finds healthy is one the engine will open. It takes the directory's lock while it runs
//! (no engine can open the directory meanwhile) and is refused with [`Error::Locked`](crate::Error::Locked) while an
//! engine holds it.
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("tw-inspect-doc-{}", std::process::id()));
//! # std::fs::remove_dir_all(&dir).ok();
//! use timewheel::{Config, Engine, JobSpec};
//!
//! let engine = Engine::open(Config::new(&dir))?;
//! engine.schedule(JobSpec::at(4_102_444_800_000).payload("order 42"))?;
//! engine.close()?;
//!
//! let found = timewheel::inspect::inspect(&dir)?;
//! assert!(found.is_healthy());
//! assert_eq!(found.scheduled, 1);
//! assert_eq!(found.due_range, Some((4_102_444_800_000, 4_102_444_800_000)));
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), timewheel::Error>(())
//! ```

use std::io::Write;
use std::path::Path;

use timewheel_wal::format::FLAG_SKIPPABLE;
use timewheel_wal::storage::readonly::ReadOnlyStorage;
use timewheel_wal::{Durability, Wal, WalOptions};

use crate::config::Config;
use crate::engine::Engine;
use crate::error::Result;
use crate::job::JobId;
use crate::record::{Event, FLAG_BINARY_PAYLOAD};
use crate::stats::{RecoveryStats, StoreStats};

/// What an open of the directory would find.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Inspection {
    /// What recovery and replay did (records, segments, bytes, a torn tail it would cut,
    /// damaged copies it would repair, missed and interrupted jobs).
    pub recovery: RecoveryStats,
    /// Live jobs waiting for their due time.
    pub scheduled: u64,
    /// Live jobs the next open delivers at once: fired and not finished before the engine
    /// stopped (`recovery.interrupted` of them were claimed), or missed while it was down
    /// (`recovery.missed`).
    pub ready: u64,
    /// Jobs finished over the life of the directory, as far as the log knows.
    pub completed: u64,
    /// See `completed`.
    pub cancelled: u64,
    /// See `completed`.
    pub failed: u64,
    /// The earliest and the latest due time of the live jobs.
    pub due_range: Option<(u64, u64)>,
    /// The journal segments and the hour-bucket files (every run read and checked at the
    /// open, as the engine's open reads them).
    pub store: StoreStats,
}

impl Inspection {
    /// No damage of any kind: nothing to cut, nothing repaired, no damaged copy. A torn tail is what a crash
    /// leaves (writes nobody was told were durable) and is not damage to acknowledged data,
    /// but it is reported: a clean shutdown leaves none.
    pub fn is_healthy(&self) -> bool {
        self.recovery.is_healthy()
    }
}

/// Refuses a directory that holds no timewheel data (no journal segment, no manifest): a
/// mistyped path is an error, not an empty log found healthy. The read-only open would
/// otherwise make its first segment in memory and report it.
fn holds_data(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if timewheel_wal::parse_segment_file_name(name).is_some()
            || name == crate::store::manifest::MANIFEST_NAME
        {
            return Ok(());
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!(
            "{} holds no timewheel data (no journal segment, no manifest)",
            dir.display()
        ),
    )
    .into())
}

/// The whole open over `dir` read in place, every bucket read, checked and loaded (counts and
/// due range cover every job).
fn open_in_place(dir: &Path) -> Result<Engine> {
    holds_data(dir)?;
    let config = Config::new(dir)
        .verify_buckets_at_open(true)
        .horizon_ms(100 * 366 * 24 * crate::config::HOUR_MS);
    Engine::open_read_only(config)
}

/// Runs the next open's recovery and replay over `dir` without changing it; see the module
/// documentation. Damage an open would refuse is the same error here
/// ([`Error::Corrupted`](crate::Error::Corrupted) with segment and offset, or
/// [`Error::UndecodableRecord`](crate::Error::UndecodableRecord) with the LSN).
pub fn inspect(dir: impl AsRef<Path>) -> Result<Inspection> {
    let engine = open_in_place(dir.as_ref())?;
    let stats = engine.stats();
    let found = Inspection {
        recovery: engine.recovery().clone(),
        scheduled: stats.scheduled,
        ready: stats.ready,
        completed: stats.completed,
        cancelled: stats.cancelled,
        failed: stats.failed,
        due_range: engine.due_range(),
        store: engine.store_stats(),
    };
    engine.abandon_read_only();
    Ok(found)
}

/// What [`verify`] found: the format of every file checked, nothing replayed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Verification {
    /// The journal's scan, as the next open's scan would find it: `records`, `segments`,
    /// `bytes`, `skipped`, `torn_tail`, `repaired`. The replay's fields (`jobs`, `missed`,
    /// `interrupted`) stay 0: nothing is replayed.
    pub recovery: RecoveryStats,
    /// The journal segments and the hour-bucket files, every run read and checked.
    pub store: StoreStats,
}

impl Verification {
    /// No damage of any kind (see [`Inspection::is_healthy`]).
    pub fn is_healthy(&self) -> bool {
        self.recovery.is_healthy()
    }
}

/// Checks every byte of `dir` that an open would read, without replaying it: every journal
/// record's checksum, its LSN's place in the sequence and the copy of each group commit, as the
/// open's scan checks them; every record's body decodes as a record of its type; the manifest
/// and every bucket file named in it, their checksums and what the manifest says of them.
/// What it leaves to [`inspect`] (the open itself): whether each record is one the state
/// machine could have written after the ones before it. Reads the directory in place, under
/// its lock, as [`inspect`] does; damage is the same error an open would return.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("tw-verify-doc-{}", std::process::id()));
/// # std::fs::remove_dir_all(&dir).ok();
/// use timewheel::{Config, Engine, JobSpec};
///
/// let engine = Engine::open(Config::new(&dir))?;
/// engine.schedule(JobSpec::at(4_102_444_800_000).payload("order 42"))?;
/// engine.close()?;
///
/// let found = timewheel::inspect::verify(&dir)?;
/// assert!(found.is_healthy());
/// assert!(found.recovery.records >= 1);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), timewheel::Error>(())
/// ```
pub fn verify(dir: impl AsRef<Path>) -> Result<Verification> {
    let started = std::time::Instant::now();
    holds_data(dir.as_ref())?;
    let config = Config::new(dir.as_ref());
    let storage = ReadOnlyStorage::open_dir(dir.as_ref())?;
    let options = WalOptions {
        durability: Durability::Buffered,
        ..config.wal_options()
    };
    let (wal, report) = Wal::open(storage, options)?;
    let result = (|| {
        // Two halves of the journal, split at a segment, decoded on two threads; the first
        // half's error is the first in the log.
        let segments = wal.segments();
        let total: u64 = segments.iter().map(|s| s.used_bytes).sum();
        let mut sum = 0;
        let split = segments
            .iter()
            .find(|s| {
                sum += s.used_bytes;
                sum > total / 2
            })
            .map_or(wal.first_lsn(), |s| s.last_lsn + 1);
        let (first, second) = std::thread::scope(|scope| {
            let second = scope.spawn(|| decode_records(&wal, split, u64::MAX));
            (decode_records(&wal, wal.first_lsn(), split), second.join())
        });
        let (first, second) = (first?, second.expect("the decoding thread does not panic")?);
        let (records, skipped) = (first.0 + second.0, first.1 + second.1);
        let manifest = crate::store::open(wal.storage(), wal.first_lsn())?;
        for (&bucket, entry) in &manifest.buckets {
            crate::store::load_bucket(wal.storage(), bucket, entry)?;
        }
        let mut store = StoreStats::default();
        store.set_files(&manifest, &wal.segments());
        let recovery = RecoveryStats {
            records,
            skipped,
            elapsed: started.elapsed(),
            buckets: manifest.buckets.len() as u64,
            bucket_jobs: manifest.jobs(),
            covered_lsn: manifest.covered_lsn,
            ..RecoveryStats::scanned(&report)
        };
        Ok(Verification { recovery, store })
    })();
    wal.abandon();
    result
}

/// Decodes the records from LSN `from` up to `to` (exclusive): `(records, skipped)`, or the
/// first that does not decode (a later version's record marked skippable is skipped).
fn decode_records<S: timewheel_wal::storage::Storage>(
    wal: &Wal<S>,
    from: u64,
    to: u64,
) -> Result<(u64, u64)> {
    let (mut records, mut skipped) = (0, 0);
    let mut iter = wal.iter_from(from);
    while let Some(record) = iter.next_ref() {
        let record = record?;
        if record.lsn >= to {
            break;
        }
        records += 1;
        if let Err(e) = Event::decode(record.record_type, record.body) {
            if record.flags & FLAG_SKIPPABLE != 0 {
                skipped += 1;
                continue;
            }
            return Err(crate::Error::UndecodableRecord {
                lsn: record.lsn,
                reason: e.to_string(),
            });
        }
    }
    Ok((records, skipped))
}

/// Calls `each` with every live job of `dir` that `query` admits, in `(due_ms, id)` order,
/// paging with [`Engine::jobs`] over the directory read in place (as [`inspect`] does: every
/// bucket loaded, so far-future jobs are listed too). Returns how many it listed.
pub fn jobs(
    dir: impl AsRef<Path>,
    query: &crate::JobQuery,
    mut each: impl FnMut(&crate::JobInfo),
) -> Result<u64> {
    let engine = open_in_place(dir.as_ref())?;
    let mut listed = 0;
    let mut next = Some(query.clone());
    let result = (|| {
        while let Some(q) = next.take() {
            let page = engine.jobs(&q)?;
            for job in &page.jobs {
                each(job);
                listed += 1;
            }
            next = page.next;
        }
        Ok(listed)
    })();
    engine.abandon_read_only();
    result
}

/// Which records [`dump`] writes.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct DumpFilter {
    /// Only records from this LSN on.
    pub from_lsn: u64,
    /// Only records of this job.
    pub job: Option<JobId>,
}

impl DumpFilter {
    /// Every record.
    pub fn all() -> Self {
        DumpFilter::default()
    }

    /// Only records from `lsn` on.
    pub fn from_lsn(mut self, lsn: u64) -> Self {
        self.from_lsn = lsn;
        self
    }

    /// Only records of `job`.
    pub fn job(mut self, job: JobId) -> Self {
        self.job = Some(job);
        self
    }
}

/// Writes the log's records as JSON lines, one object per record, in log order: `lsn`, `type`
/// and the record's fields (`id`, `due_ms`, `attempt`, ...; a text payload as `payload`, a
/// binary one as `payload_hex`). A record the engine can not decode is written with its
/// `type_byte` and `body_hex` and an `undecodable` reason, and the dump goes on: an open would
/// refuse the log there, which is when an operator needs to see it. Only the log's recovery
/// runs (over the directory read in place, as for [`inspect`]), not the replay. Returns the
/// records written.
pub fn dump(dir: impl AsRef<Path>, filter: DumpFilter, out: &mut impl Write) -> Result<u64> {
    holds_data(dir.as_ref())?;
    let storage = ReadOnlyStorage::open_dir(dir.as_ref())?;
    let options = WalOptions {
        durability: Durability::Buffered,
        ..WalOptions::default()
    };
    let (wal, _) = Wal::open(storage, options)?;
    let mut written = 0;
    let mut iter = wal.iter_from(filter.from_lsn.max(1));
    while let Some(record) = iter.next_ref() {
        let record = record?;
        let event = Event::decode(record.record_type, record.body);
        if let Some(job) = filter.job
            && event.as_ref().ok().and_then(Event::id) != Some(job)
        {
            continue;
        }
        let mut line = String::with_capacity(128);
        line.push_str(&format!("{{\"lsn\":{}", record.lsn));
        match &event {
            Ok(event) => render(event, &mut line),
            Err(e) => {
                line.push_str(&format!(
                    ",\"type_byte\":{},\"undecodable\":{},\"body_hex\":\"{}\"",
                    record.record_type,
                    json_string(&e.to_string()),
                    hex(record.body)
                ));
            }
        }
        line.push_str("}\n");
        out.write_all(line.as_bytes())?;
        written += 1;
    }
    drop(iter);
    wal.abandon();
    Ok(written)
}

/// `,"type":...` and the fields of one record.
fn render(event: &Event<'_>, line: &mut String) {
    use std::fmt::Write as _;
    let w = match event {
        Event::Schedule(s) => {
            let payload = if s.flags & FLAG_BINARY_PAYLOAD == 0
                && let Ok(text) = std::str::from_utf8(s.payload)
            {
                format!("\"payload\":{}", json_string(text))
            } else {
                format!("\"payload_hex\":\"{}\"", hex(s.payload))
            };
            write!(
                line,
                ",\"type\":\"schedule\",\"id\":{},\"due_ms\":{},\"created_ms\":{},\"tenant\":{},\
                 \"shard\":{},\"flags\":{},\"max_attempts\":{},{payload}",
                s.id.0, s.due_ms, s.created_ms, s.tenant, s.shard, s.flags, s.max_attempts
            )
        }
        Event::Cancel { id } => write!(line, ",\"type\":\"cancel\",\"id\":{}", id.0),
        Event::Reschedule { id, due_ms } => write!(
            line,
            ",\"type\":\"reschedule\",\"id\":{},\"due_ms\":{due_ms}",
            id.0
        ),
        Event::Claim {
            id,
            attempt,
            lease_until_ms,
        } => write!(
            line,
            ",\"type\":\"claim\",\"id\":{},\"attempt\":{attempt},\"lease_until_ms\":{lease_until_ms}",
            id.0
        ),
        Event::Complete { id, attempt } => write!(
            line,
            ",\"type\":\"complete\",\"id\":{},\"attempt\":{attempt}",
            id.0
        ),
        Event::Fail {
            id,
            attempt,
            reason,
        } => write!(
            line,
            ",\"type\":\"fail\",\"id\":{},\"attempt\":{attempt},\"reason\":{}",
            id.0,
            json_string(reason)
        ),
        Event::Expire { id, attempt } => write!(
            line,
            ",\"type\":\"expire\",\"id\":{},\"attempt\":{attempt}",
            id.0
        ),
        Event::Retry {
            id,
            attempt,
            flags,
            due_ms,
            reason,
        } => write!(
            line,
            ",\"type\":\"retry\",\"id\":{},\"attempt\":{attempt},\"failed\":{},\"due_ms\":{due_ms},\"reason\":{}",
            id.0,
            flags & crate::record::RETRY_FAILED != 0,
            json_string(reason)
        ),
        Event::Bury {
            id,
            attempt,
            flags,
            at_ms,
            reason,
        } => write!(
            line,
            ",\"type\":\"bury\",\"id\":{},\"attempt\":{attempt},\"expired\":{},\"at_ms\":{at_ms},\"reason\":{}",
            id.0,
            flags & crate::record::BURY_EXPIRED != 0,
            json_string(reason)
        ),
        Event::Extend {
            id,
            attempt,
            lease_until_ms,
        } => write!(
            line,
            ",\"type\":\"extend\",\"id\":{},\"attempt\":{attempt},\"lease_until_ms\":{lease_until_ms}",
            id.0
        ),
        Event::Requeue { id, due_ms } => write!(
            line,
            ",\"type\":\"requeue\",\"id\":{},\"due_ms\":{due_ms}",
            id.0
        ),
        Event::Purge { id } => write!(line, ",\"type\":\"purge\",\"id\":{}", id.0),
        Event::Next {
            id,
            attempt,
            flags,
            due_ms,
        } => write!(
            line,
            ",\"type\":\"next\",\"id\":{},\"attempt\":{attempt},\"failed\":{},\"skipped\":{},\"due_ms\":{due_ms}",
            id.0,
            flags & crate::record::NEXT_FAILED != 0,
            flags & crate::record::NEXT_SKIPPED != 0
        ),
        Event::ReserveIds { up_to } => {
            write!(line, ",\"type\":\"reserve_ids\",\"up_to\":{up_to}")
        }
        Event::Opened { crashes } | Event::Closed { crashes } => {
            write!(line, ",\"type\":\"{}\",\"crashes\":{crashes}", event.name())
        }
    };
    w.expect("writing to a String does not fail");
}

/// A JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
