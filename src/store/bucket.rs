//! Bucket files: the live jobs of one hour bucket, as the compactor folded them out of the
//! journal.
//!
//! A bucket is a stack of *runs*, one file each, named `bucket-{bucket:010}-{gen:016}.run`
//! (the hour bucket, `due_ms / 3_600_000`, and a generation that grows with every file the
//! compactor writes). A run holds what one compaction pass learnt about the bucket: jobs that
//! came in (`Put`, sorted by due time, so a load is a sorted bulk insert), jobs that changed
//! without moving (`Patch`) and jobs that left (`Delete`: finished, or moved to another
//! bucket). Read oldest run first, they give the bucket's jobs; a merge folds them into one run
//! of `Put`s only. A run is written whole, synced, and only then named by the manifest, so a
//! named run is never torn: any damage in one is corruption.
//!
//! ```text
//! header (64 bytes)
//!   0 magic "TWBUCKET" | 8 version u32 = 2 | 12 header_bytes u32 = 64 | 16 bucket u64
//!   | 24 generation u64 | 32 covered_lsn u64 | 40 records u64 | 48 body_bytes u64
//!   | 56 header_crc u32 (crc32 of bytes 0..56 then 60..64) | 60 crashes u32
//! records, from offset 64, each padded with zeros to a multiple of 8 bytes
//!   len u32 (of the body) | crc u32 (of the bytes from kind to the end of the body)
//!   | kind u8 | flags u8 = 0 | reserved u16 = 0 | body
//! kind 1  Put     id u64 | due_ms u64 | created_ms u64 | tenant u32 | shard u16 | flags u16
//!                 | max_attempts u32 | attempt u32 | leased u8 | crashes_behind u24
//!                 | payload_len u32 | payload ...
//! kind 2  Patch   id u64 | due_ms u64 | attempt u32 | set u8 (1: due, 2: attempt and lease,
//!                 4: crashes) | leased u8 | crashes_behind u16
//! kind 3  Delete  id u64
//! kind 4  Put2    the 48 bytes of a Put before payload_len's end, then
//!                 failures u32 | fate u8 (1: dead, 2: expired, 4: backoff, 8: error, 16: key,
//!                 32: recurring) | reserved u8 | recur_len u16 | died_at_ms u64
//!                 | backoff_base_ms u32 | backoff_cap_ms u32 | error_len u32 | key_len u32
//!                 | payload ... | error (UTF-8) ... | key ... | recurring ...
//! kind 5  Patch2  the 24 bytes of a Patch (set may be 0), then
//!                 failures_add u32 | fate u8 (1: reset failures first, 2: dead, 4: expired,
//!                 8: error set) | reserved [u8; 3] | died_at_ms u64 | error_len u32
//!                 | reserved u32 | error (UTF-8) ...
//! ```
//!
//! `crashes` is the count of runs of the engine that crashed, as of `covered_lsn` (the
//! `Opened` records, see [`crate::record`]); a job's `crashes_behind` is how many of them came
//! after its attempt was
//! last set (its schedule, claim or requeue), so that its next claim skips the numbers a crash
//! may have cut. The largest value of the field (`0xFFFFFF`, `0xFFFF`) stands for "any number
//! of them": the job counts every crash of the run's `crashes`, which may skip numbers but
//! never hands one out twice. Version 1 runs (no crash count; the header checksum covers bytes
//! 0..56 only, and bytes 60..64 are zero) are read as `crashes` 0.
//!
//! All integers are little-endian. Reserved fields are zero and read as zero. A job with
//! nothing of the lifecycle (no failures, not dead, no backoff of its own) is written as a
//! `Put`, a change that touches no failure as a `Patch`: the kinds 4 and 5 carry the rest (a
//! dead job stays in its bucket, in the dead-letter set, until purged).

use crate::job::JobId;
use crate::record::{put_u64, u16_at, u32_at, u64_at};

/// The magic at the start of every run file.
pub const RUN_MAGIC: [u8; 8] = *b"TWBUCKET";
/// The run format version this engine writes and reads.
pub const RUN_VERSION: u32 = 2;
/// `crashes_behind` of a `Put` standing for "all of the run's crashes".
const PUT_CRASHES_ALL: u32 = 0xFF_FFFF;
/// `crashes_behind` of a `Patch` standing for "all of the run's crashes".
const PATCH_CRASHES_ALL: u32 = 0xFFFF;
/// Bytes of a run's header.
pub const RUN_HEADER_BYTES: usize = 64;
const RECORD_HEADER_BYTES: usize = 12;

const KIND_PUT: u8 = 1;
const KIND_PATCH: u8 = 2;
const KIND_DELETE: u8 = 3;
const KIND_PUT2: u8 = 4;
const KIND_PATCH2: u8 = 5;
const PUT_FIXED_BYTES: usize = 48;
const PUT2_FIXED_BYTES: usize = 80;
const PATCH_BYTES: usize = 24;
const PATCH2_FIXED_BYTES: usize = 48;
const FATE_DEAD: u8 = 1;
const FATE_EXPIRED: u8 = 2;
const FATE_BACKOFF: u8 = 4;
const FATE_ERROR: u8 = 8;
const FATE_KEY: u8 = 16;
const FATE_RECURRING: u8 = 32;
const FATE_RESET: u8 = 1;
const FATE2_DEAD: u8 = 2;
const FATE2_EXPIRED: u8 = 4;
const FATE2_ERROR: u8 = 8;
const PATCH_DUE: u8 = 1;
const PATCH_LEASE: u8 = 2;
const PATCH_CRASHES: u8 = 4;

/// A job as the store keeps it: its schedule, and where its delivery stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredJob {
    /// The job.
    pub id: JobId,
    /// When it is due (after any reschedule).
    pub due_ms: u64,
    /// When it was scheduled.
    pub created_ms: u64,
    /// Tenant (0 until tenants exist).
    pub tenant: u32,
    /// Shard (0 until shards exist).
    pub shard: u16,
    /// The schedule's `FLAG_*` bits.
    pub flags: u16,
    /// Attempts allowed (0: the engine default).
    pub max_attempts: u32,
    /// The attempt of the newest claim (0: never claimed).
    pub attempt: u32,
    /// The newest claim's lease is open in the log (no expiry after it): the job was running.
    pub leased: bool,
    /// Runs of the engine that had crashed when `attempt` was last set (its schedule, claim or
    /// requeue).
    pub crashes_seen: u32,
    /// Failed attempts counted against `max_attempts`.
    pub failures: u32,
    /// Dead (in the dead-letter set): `(died_at_ms, its last lease ran out)`.
    pub dead: Option<(u64, bool)>,
    /// The job's own backoff `(base_ms, cap_ms)`.
    pub backoff: Option<(u32, u32)>,
    /// The newest failure's reason.
    pub last_error: Option<String>,
    /// The idempotency key.
    pub key: Option<Vec<u8>>,
    /// A recurring job's schedule, encoded as in its schedule record.
    pub recurring: Option<Vec<u8>>,
    /// The payload.
    pub payload: Vec<u8>,
}

impl StoredJob {
    /// Whether the job has anything of the lifecycle (written as a `Put2`).
    fn has_fate(&self) -> bool {
        self.failures > 0
            || self.dead.is_some()
            || self.backoff.is_some()
            || self.last_error.is_some()
            || self.key.is_some()
            || self.recurring.is_some()
    }
}

/// What a pass learnt about a job's failures: applied after the due and lease of its patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fate {
    /// Failures are counted from zero again first (a requeue of a dead job).
    pub reset: bool,
    /// Failures to add.
    pub failures_add: u32,
    /// Whether the job is dead after the change, `(died_at_ms, expired)`.
    pub dead: Option<(u64, bool)>,
    /// The new last error (`None`: unchanged; `Some("")`: none).
    pub error: Option<String>,
}

impl Fate {
    /// Applies the change to a job.
    pub fn apply(&self, job: &mut StoredJob) {
        if self.reset {
            job.failures = 0;
        }
        job.failures = job.failures.saturating_add(self.failures_add);
        job.dead = self.dead;
        if let Some(e) = &self.error {
            job.last_error = (!e.is_empty()).then(|| e.clone());
        }
    }
}

/// A change of a job that stays in its bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// The job.
    pub id: JobId,
    /// Its new due time, if it was rescheduled.
    pub due_ms: Option<u64>,
    /// Its newest attempt and whether that lease is open, if it was claimed or expired.
    pub lease: Option<(u32, bool)>,
    /// Its `crashes_seen`, if a claim or a requeue set it.
    pub crashes_seen: Option<u32>,
    /// Its failures, if any were counted, reset or the job died or came back.
    pub fate: Option<Fate>,
}

impl Patch {
    /// Applies the change to a job.
    pub fn apply(&self, job: &mut StoredJob) {
        if let Some(due_ms) = self.due_ms {
            job.due_ms = due_ms;
        }
        if let Some((attempt, leased)) = self.lease {
            job.attempt = attempt;
            job.leased = leased;
        }
        if let Some(crashes) = self.crashes_seen {
            job.crashes_seen = crashes;
        }
        if let Some(f) = &self.fate {
            f.apply(job);
        }
    }
}

/// One record of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A job came into the bucket.
    Put(StoredJob),
    /// A job of the bucket changed.
    Patch(Patch),
    /// A job left the bucket.
    Delete(JobId),
}

impl Entry {
    /// The job this entry is about.
    pub fn id(&self) -> JobId {
        match self {
            Entry::Put(j) => j.id,
            Entry::Patch(p) => p.id,
            Entry::Delete(id) => *id,
        }
    }
}

/// What a run's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunHeader {
    /// The hour bucket.
    pub bucket: u64,
    /// The run's generation (unique in the directory).
    pub generation: u64,
    /// The journal LSN the pass that wrote it had folded up to.
    pub covered_lsn: u64,
    /// Records in the run.
    pub records: u64,
    /// Bytes of records after the header.
    pub body_bytes: u64,
    /// Runs of the engine that had crashed, as of `covered_lsn`.
    pub crashes: u32,
}

/// Why a run did not decode: where, and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at offset {offset}: {what}")]
pub struct RunError {
    /// Byte offset in the file.
    pub offset: u64,
    /// What was wrong.
    pub what: &'static str,
}

/// The file name of a run.
pub fn run_file_name(bucket: u64, generation: u64) -> String {
    format!("bucket-{bucket:010}-{generation:016}.run")
}

/// The bucket and generation a run's file name says, or `None` for any other name.
pub fn parse_run_file_name(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix("bucket-")?.strip_suffix(".run")?;
    let (b, g) = rest.split_once('-')?;
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|c| c.is_ascii_digit());
    if !digits(b, 10) || !digits(g, 16) {
        return None;
    }
    Some((b.parse().ok()?, g.parse().ok()?))
}

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// Bytes of the record of a put job, framing and padding included.
pub fn put_bytes(job: &StoredJob) -> u64 {
    if job.has_fate() {
        let error = job.last_error.as_ref().map_or(0, String::len);
        let key = job.key.as_ref().map_or(0, Vec::len);
        let rec = job.recurring.as_ref().map_or(0, Vec::len);
        pad8(RECORD_HEADER_BYTES + PUT2_FIXED_BYTES + job.payload.len() + error + key + rec) as u64
    } else {
        pad8(RECORD_HEADER_BYTES + PUT_FIXED_BYTES + job.payload.len()) as u64
    }
}

/// Bytes of a patch's record, framing and padding included.
pub fn patch_bytes(patch: &Patch) -> u64 {
    match &patch.fate {
        None => PATCH_RECORD_BYTES,
        Some(f) => {
            let error = f.error.as_ref().map_or(0, String::len);
            pad8(RECORD_HEADER_BYTES + PATCH2_FIXED_BYTES + error) as u64
        }
    }
}

/// Bytes of a `Patch` record, framing and padding included.
pub const PATCH_RECORD_BYTES: u64 = ((RECORD_HEADER_BYTES + PATCH_BYTES).div_ceil(8) * 8) as u64;
/// Bytes of a `Delete` record, framing and padding included.
pub const DELETE_RECORD_BYTES: u64 = ((RECORD_HEADER_BYTES + 8).div_ceil(8) * 8) as u64;

/// Encodes a whole run file.
pub fn encode_run(
    bucket: u64,
    generation: u64,
    covered_lsn: u64,
    crashes: u32,
    entries: &[Entry],
) -> Vec<u8> {
    encode_run_of(bucket, generation, covered_lsn, crashes, entries.iter())
}

/// [`encode_run`] of entries read wherever they are (a merge reads them in place, in due
/// order, instead of moving every job into a new vector first). The iterator is walked twice:
/// once for the run's size, once to encode.
pub(crate) fn encode_run_of<'a>(
    bucket: u64,
    generation: u64,
    covered_lsn: u64,
    crashes: u32,
    entries: impl ExactSizeIterator<Item = &'a Entry> + Clone,
) -> Vec<u8> {
    // How many of the run's crashes came after `seen`, or `all` for "every one".
    let behind = |seen: u32, all: u32| {
        let behind = crashes
            .checked_sub(seen)
            .expect("a job sees no crash after its run's");
        behind.min(all)
    };
    // The header's room first, filled in last: the records are written once, in place.
    let count = entries.len();
    let bytes: u64 = entries.clone().map(entry_bytes).sum();
    let mut body = Vec::with_capacity(RUN_HEADER_BYTES + bytes as usize);
    body.resize(RUN_HEADER_BYTES, 0);
    let mut scratch = Vec::new();
    for entry in entries {
        scratch.clear();
        let kind = match entry {
            Entry::Put(j) => {
                put_u64(&mut scratch, j.id.0);
                put_u64(&mut scratch, j.due_ms);
                put_u64(&mut scratch, j.created_ms);
                scratch.extend_from_slice(&j.tenant.to_le_bytes());
                scratch.extend_from_slice(&j.shard.to_le_bytes());
                scratch.extend_from_slice(&j.flags.to_le_bytes());
                scratch.extend_from_slice(&j.max_attempts.to_le_bytes());
                scratch.extend_from_slice(&j.attempt.to_le_bytes());
                let behind = behind(j.crashes_seen, PUT_CRASHES_ALL);
                scratch.push(u8::from(j.leased));
                scratch.extend_from_slice(&behind.to_le_bytes()[..3]);
                let len = u32::try_from(j.payload.len()).expect("payload length checked");
                scratch.extend_from_slice(&len.to_le_bytes());
                debug_assert_eq!(scratch.len(), PUT_FIXED_BYTES);
                if j.has_fate() {
                    scratch.extend_from_slice(&j.failures.to_le_bytes());
                    let fate = if j.dead.is_some() { FATE_DEAD } else { 0 }
                        | if j.dead.is_some_and(|(_, e)| e) {
                            FATE_EXPIRED
                        } else {
                            0
                        }
                        | if j.backoff.is_some() { FATE_BACKOFF } else { 0 }
                        | if j.last_error.is_some() {
                            FATE_ERROR
                        } else {
                            0
                        }
                        | if j.key.is_some() { FATE_KEY } else { 0 }
                        | if j.recurring.is_some() {
                            FATE_RECURRING
                        } else {
                            0
                        };
                    let rec = j.recurring.as_deref().unwrap_or(&[]);
                    let rlen = u16::try_from(rec.len()).expect("a recurrence is small");
                    scratch.extend_from_slice(&[fate, 0]);
                    scratch.extend_from_slice(&rlen.to_le_bytes());
                    put_u64(&mut scratch, j.dead.map_or(0, |(at, _)| at));
                    let (base, cap) = j.backoff.unwrap_or((0, 0));
                    scratch.extend_from_slice(&base.to_le_bytes());
                    scratch.extend_from_slice(&cap.to_le_bytes());
                    let error = j.last_error.as_deref().unwrap_or("");
                    let elen = u32::try_from(error.len()).expect("reason length checked");
                    scratch.extend_from_slice(&elen.to_le_bytes());
                    let key = j.key.as_deref().unwrap_or(&[]);
                    let klen = u32::try_from(key.len()).expect("key length checked");
                    scratch.extend_from_slice(&klen.to_le_bytes());
                    debug_assert_eq!(scratch.len(), PUT2_FIXED_BYTES);
                    scratch.extend_from_slice(&j.payload);
                    scratch.extend_from_slice(error.as_bytes());
                    scratch.extend_from_slice(key);
                    scratch.extend_from_slice(rec);
                    KIND_PUT2
                } else {
                    scratch.extend_from_slice(&j.payload);
                    KIND_PUT
                }
            }
            Entry::Patch(p) => {
                put_u64(&mut scratch, p.id.0);
                put_u64(&mut scratch, p.due_ms.unwrap_or(0));
                let (attempt, leased) = p.lease.unwrap_or((0, false));
                scratch.extend_from_slice(&attempt.to_le_bytes());
                let set = if p.due_ms.is_some() { PATCH_DUE } else { 0 }
                    | if p.lease.is_some() { PATCH_LEASE } else { 0 }
                    | if p.crashes_seen.is_some() {
                        PATCH_CRASHES
                    } else {
                        0
                    };
                let behind = p
                    .crashes_seen
                    .map_or(0, |seen| behind(seen, PATCH_CRASHES_ALL));
                scratch.extend_from_slice(&[set, u8::from(leased)]);
                scratch.extend_from_slice(&(behind as u16).to_le_bytes());
                match &p.fate {
                    None => KIND_PATCH,
                    Some(f) => {
                        scratch.extend_from_slice(&f.failures_add.to_le_bytes());
                        let bits = if f.reset { FATE_RESET } else { 0 }
                            | if f.dead.is_some() { FATE2_DEAD } else { 0 }
                            | if f.dead.is_some_and(|(_, e)| e) {
                                FATE2_EXPIRED
                            } else {
                                0
                            }
                            | if f.error.is_some() { FATE2_ERROR } else { 0 };
                        scratch.extend_from_slice(&[bits, 0, 0, 0]);
                        put_u64(&mut scratch, f.dead.map_or(0, |(at, _)| at));
                        let error = f.error.as_deref().unwrap_or("");
                        let elen = u32::try_from(error.len()).expect("reason length checked");
                        scratch.extend_from_slice(&elen.to_le_bytes());
                        scratch.extend_from_slice(&[0; 4]);
                        debug_assert_eq!(scratch.len(), PATCH2_FIXED_BYTES);
                        scratch.extend_from_slice(error.as_bytes());
                        KIND_PATCH2
                    }
                }
            }
            Entry::Delete(id) => {
                put_u64(&mut scratch, id.0);
                KIND_DELETE
            }
        };
        let start = body.len();
        body.extend_from_slice(&(scratch.len() as u32).to_le_bytes());
        body.extend_from_slice(&[0; 4]);
        body.extend_from_slice(&[kind, 0, 0, 0]);
        body.extend_from_slice(&scratch);
        let crc = crc32fast::hash(&body[start + 8..]);
        body[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        body.resize(start + pad8(RECORD_HEADER_BYTES + scratch.len()), 0);
    }
    let mut out = Vec::with_capacity(RUN_HEADER_BYTES);
    out.extend_from_slice(&RUN_MAGIC);
    out.extend_from_slice(&RUN_VERSION.to_le_bytes());
    out.extend_from_slice(&(RUN_HEADER_BYTES as u32).to_le_bytes());
    put_u64(&mut out, bucket);
    put_u64(&mut out, generation);
    put_u64(&mut out, covered_lsn);
    put_u64(&mut out, count as u64);
    put_u64(&mut out, (body.len() - RUN_HEADER_BYTES) as u64);
    let crc = header_crc(&out, &crashes.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&crashes.to_le_bytes());
    debug_assert_eq!(out.len(), RUN_HEADER_BYTES);
    body[..RUN_HEADER_BYTES].copy_from_slice(&out);
    debug_assert_eq!(body.len(), RUN_HEADER_BYTES + bytes as usize);
    body
}

/// The bytes `entry` takes in a run.
fn entry_bytes(entry: &Entry) -> u64 {
    match entry {
        Entry::Put(job) => put_bytes(job),
        Entry::Patch(patch) => patch_bytes(patch),
        Entry::Delete(_) => DELETE_RECORD_BYTES,
    }
}

/// The checksum of a version 2 header: its first 56 bytes, then the crash count.
fn header_crc(first: &[u8], crashes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&first[..56]);
    h.update(crashes);
    h.finalize()
}

/// `crashes_seen` from a `crashes_behind` field of a run with `crashes` (`all`: every one).
fn crashes_seen(crashes: u32, behind: u32, all: u32) -> Option<u32> {
    if behind == all && crashes >= all {
        Some(0)
    } else {
        crashes.checked_sub(behind)
    }
}

/// Decodes a run's header. Never panics, whatever the bytes.
pub fn decode_run_header(bytes: &[u8]) -> Result<RunHeader, RunError> {
    let err = |offset, what| Err(RunError { offset, what });
    if bytes.len() < RUN_HEADER_BYTES {
        return err(0, "file shorter than a run header");
    }
    if bytes[..8] != RUN_MAGIC {
        return err(0, "not a bucket run (bad magic)");
    }
    let crc = match u32_at(bytes, 8) {
        1 if u32_at(bytes, 60) == 0 => crc32fast::hash(&bytes[..56]),
        RUN_VERSION => header_crc(bytes, &bytes[60..64]),
        1 => return err(60, "version 1 run with a crash count"),
        _ => return err(8, "unknown run format version"),
    };
    if crc != u32_at(bytes, 56) {
        return err(56, "run header checksum mismatch");
    }
    if u32_at(bytes, 12) as usize != RUN_HEADER_BYTES {
        return err(12, "unexpected run header layout");
    }
    let header = RunHeader {
        bucket: u64_at(bytes, 16),
        generation: u64_at(bytes, 24),
        covered_lsn: u64_at(bytes, 32),
        records: u64_at(bytes, 40),
        body_bytes: u64_at(bytes, 48),
        crashes: u32_at(bytes, 60),
    };
    if header.body_bytes != (bytes.len() - RUN_HEADER_BYTES) as u64 {
        return err(48, "run length does not match its header");
    }
    Ok(header)
}

/// Decodes a whole run file. Never panics, whatever the bytes.
pub fn decode_run(bytes: &[u8]) -> Result<(RunHeader, Vec<Entry>), RunError> {
    let header = decode_run_header(bytes)?;
    let mut entries = Vec::new();
    let mut at = RUN_HEADER_BYTES;
    while at < bytes.len() {
        let err = |what| RunError {
            offset: at as u64,
            what,
        };
        if bytes.len() - at < RECORD_HEADER_BYTES {
            return Err(err("record header cut short"));
        }
        let len = u32_at(bytes, at) as usize;
        let end = at
            .checked_add(RECORD_HEADER_BYTES)
            .and_then(|e| e.checked_add(len))
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| err("record runs past the end of the file"))?;
        if crc32fast::hash(&bytes[at + 8..end]) != u32_at(bytes, at + 4) {
            return Err(err("record checksum mismatch"));
        }
        let padded = at + pad8(RECORD_HEADER_BYTES + len);
        if padded > bytes.len() || bytes[end..padded].iter().any(|&b| b != 0) {
            return Err(err("bad record padding"));
        }
        if bytes[at + 9] != 0 || u16_at(bytes, at + 10) != 0 {
            return Err(err("reserved record field is not zero"));
        }
        let body = &bytes[at + RECORD_HEADER_BYTES..end];
        let entry = match bytes[at + 8] {
            KIND_PUT2 => Entry::Put(decode_put2(body, header.crashes).map_err(err)?),
            KIND_PATCH2 => Entry::Patch(decode_patch2(body, header.crashes).map_err(err)?),
            KIND_PUT => {
                if body.len() < PUT_FIXED_BYTES
                    || body.len() - PUT_FIXED_BYTES != u32_at(body, 44) as usize
                {
                    return Err(err("put record length does not match its payload"));
                }
                if body[40] > 1 {
                    return Err(err("put record has a bad lease byte"));
                }
                Entry::Put(
                    put_base(body, header.crashes, body[PUT_FIXED_BYTES..].to_vec())
                        .map_err(err)?,
                )
            }
            KIND_PATCH => {
                let set = body.get(20).copied().unwrap_or(0);
                if body.len() != PATCH_BYTES || set == 0 {
                    return Err(err("bad patch record"));
                }
                Entry::Patch(patch_base(body, header.crashes, None).map_err(err)?)
            }
            KIND_DELETE if body.len() == 8 => Entry::Delete(JobId(u64_at(body, 0))),
            _ => return Err(err("unknown run record kind")),
        };
        entries.push(entry);
        at = padded;
    }
    if entries.len() as u64 != header.records {
        return Err(RunError {
            offset: 40,
            what: "record count does not match the header",
        });
    }
    Ok((header, entries))
}

/// The fields a `Patch` and a `Patch2` share (their first 24 bytes), with `fate`. The caller
/// has checked the length.
fn patch_base(body: &[u8], crashes: u32, fate: Option<Fate>) -> Result<Patch, &'static str> {
    let set = body[20];
    let behind = u32::from(u16_at(body, 22));
    if set & !(PATCH_DUE | PATCH_LEASE | PATCH_CRASHES) != 0
        || body[21] > 1
        // Fields the patch does not set are written as zero and must read so (found by the
        // store_decode fuzz target: decode then encode must give the bytes back).
        || (set & PATCH_DUE == 0 && u64_at(body, 8) != 0)
        || (set & PATCH_LEASE == 0 && (u32_at(body, 16) != 0 || body[21] != 0))
        || (set & PATCH_CRASHES == 0 && behind != 0)
    {
        return Err("bad patch record");
    }
    let crashes_seen = if set & PATCH_CRASHES != 0 {
        Some(
            crashes_seen(crashes, behind, PATCH_CRASHES_ALL)
                .ok_or("patch behind more crashes than its run")?,
        )
    } else {
        None
    };
    Ok(Patch {
        id: JobId(u64_at(body, 0)),
        due_ms: (set & PATCH_DUE != 0).then(|| u64_at(body, 8)),
        lease: (set & PATCH_LEASE != 0).then(|| (u32_at(body, 16), body[21] == 1)),
        crashes_seen,
        fate,
    })
}

/// The fields a `Put` and a `Put2` share (their first 48 bytes), with nothing of the
/// lifecycle, and `payload`. The caller has checked the length and the lease byte.
fn put_base(body: &[u8], crashes: u32, payload: Vec<u8>) -> Result<StoredJob, &'static str> {
    let behind = u32::from(body[41]) | u32::from(body[42]) << 8 | u32::from(body[43]) << 16;
    let crashes_seen = crashes_seen(crashes, behind, PUT_CRASHES_ALL)
        .ok_or("put behind more crashes than its run")?;
    Ok(StoredJob {
        id: JobId(u64_at(body, 0)),
        due_ms: u64_at(body, 8),
        created_ms: u64_at(body, 16),
        tenant: u32_at(body, 24),
        shard: u16_at(body, 28),
        flags: u16_at(body, 30),
        max_attempts: u32_at(body, 32),
        attempt: u32_at(body, 36),
        leased: body[40] == 1,
        crashes_seen,
        failures: 0,
        dead: None,
        backoff: None,
        last_error: None,
        key: None,
        recurring: None,
        payload,
    })
}

fn decode_put2(body: &[u8], crashes: u32) -> Result<StoredJob, &'static str> {
    if body.len() < PUT2_FIXED_BYTES {
        return Err("short put2 record");
    }
    let payload_len = u32_at(body, 44) as usize;
    let error_len = u32_at(body, 72) as usize;
    let key_len = u32_at(body, 76) as usize;
    let rec_len = usize::from(u16_at(body, 54));
    if (body.len() - PUT2_FIXED_BYTES) as u64
        != payload_len as u64 + error_len as u64 + key_len as u64 + rec_len as u64
    {
        return Err("put2 record length does not match its payload, error, key and recurrence");
    }
    let fate = body[52];
    if body[40] > 1
        || body[53] != 0
        || fate
            & !(FATE_DEAD | FATE_EXPIRED | FATE_BACKOFF | FATE_ERROR | FATE_KEY | FATE_RECURRING)
            != 0
        || ((fate & FATE_RECURRING == 0) != (rec_len == 0))
        || (fate & FATE_EXPIRED != 0 && fate & FATE_DEAD == 0)
        || (fate & FATE_ERROR == 0 && error_len != 0)
        || ((fate & FATE_KEY == 0) != (key_len == 0))
    {
        return Err("put2 record has bad flags or reserved bytes");
    }
    let error_at = PUT2_FIXED_BYTES + payload_len;
    let key_at = error_at + error_len;
    let error =
        std::str::from_utf8(&body[error_at..key_at]).map_err(|_| "put2 error is not UTF-8")?;
    let job = StoredJob {
        failures: u32_at(body, 48),
        dead: (fate & FATE_DEAD != 0).then(|| (u64_at(body, 56), fate & FATE_EXPIRED != 0)),
        backoff: (fate & FATE_BACKOFF != 0).then(|| (u32_at(body, 64), u32_at(body, 68))),
        last_error: (fate & FATE_ERROR != 0).then(|| error.to_owned()),
        key: (fate & FATE_KEY != 0).then(|| body[key_at..key_at + key_len].to_vec()),
        recurring: (fate & FATE_RECURRING != 0).then(|| body[key_at + key_len..].to_vec()),
        ..put_base(body, crashes, body[PUT2_FIXED_BYTES..error_at].to_vec())?
    };
    if !job.has_fate()
        || (job.dead.is_none() && u64_at(body, 56) != 0)
        || (job.backoff.is_none() && u64_at(body, 64) != 0)
    {
        // A put2 with nothing a put lacks, or unused fields not zero: not what we write.
        return Err("put2 record that a put would hold");
    }
    Ok(job)
}

fn decode_patch2(body: &[u8], crashes: u32) -> Result<Patch, &'static str> {
    if body.len() < PATCH2_FIXED_BYTES {
        return Err("short patch2 record");
    }
    let bits = body[28];
    let error_len = u32_at(body, 40) as usize;
    if body.len() - PATCH2_FIXED_BYTES != error_len
        || body[29..32] != [0, 0, 0]
        || u32_at(body, 44) != 0
        || bits & !(FATE_RESET | FATE2_DEAD | FATE2_EXPIRED | FATE2_ERROR) != 0
        || (bits & FATE2_EXPIRED != 0 && bits & FATE2_DEAD == 0)
        || (bits & FATE2_ERROR == 0 && error_len != 0)
        || (bits & FATE2_DEAD == 0 && u64_at(body, 32) != 0)
    {
        return Err("bad patch2 record");
    }
    let error = std::str::from_utf8(&body[PATCH2_FIXED_BYTES..])
        .map_err(|_| "patch2 error is not UTF-8")?;
    patch_base(
        body,
        crashes,
        Some(Fate {
            reset: bits & FATE_RESET != 0,
            failures_add: u32_at(body, 24),
            dead: (bits & FATE2_DEAD != 0).then(|| (u64_at(body, 32), bits & FATE2_EXPIRED != 0)),
            error: (bits & FATE2_ERROR != 0).then(|| error.to_owned()),
        }),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::loaded::BucketJobs;

    /// A plain job (no fate), for the store's tests.
    pub(crate) fn job(id: u64, due_ms: u64, payload: &[u8]) -> StoredJob {
        StoredJob {
            id: JobId(id),
            due_ms,
            created_ms: 7,
            tenant: 0,
            shard: 0,
            flags: 1,
            max_attempts: 0,
            attempt: 2,
            leased: true,
            crashes_seen: 0,
            failures: 0,
            dead: None,
            backoff: None,
            last_error: None,
            key: None,
            recurring: None,
            payload: payload.to_vec(),
        }
    }

    fn fated(id: u64) -> StoredJob {
        StoredJob {
            failures: 3,
            dead: Some((0x77, true)),
            backoff: Some((10, 20)),
            last_error: Some("boom ✓".into()),
            key: Some(b"order-9".to_vec()),
            recurring: Some(vec![0, 0, 0, 0, 0, 9]),
            leased: false,
            ..job(id, 40, b"xyz")
        }
    }

    #[test]
    fn golden_bytes_of_a_small_run() {
        let entries = vec![
            Entry::Put(job(0x0102, 0x0a0b, b"hi")),
            Entry::Patch(Patch {
                id: JobId(3),
                due_ms: Some(9),
                lease: None,
                crashes_seen: None,
                fate: None,
            }),
            Entry::Delete(JobId(4)),
        ];
        let bytes = encode_run(5, 6, 8, 0, &entries);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let expected = concat!(
            // header
            "54574255434b4554",
            "02000000",
            "40000000",
            "0500000000000000",
            "0600000000000000",
            "0800000000000000",
            "0300000000000000",
            "8000000000000000",
            "5344e15e",
            "00000000", // crashes
            // put: len 50, crc, kind 1, body, 2 payload bytes, padded from 62 to 64
            "32000000",
            "3f600d3f",
            "01000000",
            "0201000000000000",
            "0b0a000000000000",
            "0700000000000000",
            "00000000",
            "0000",
            "0100",
            "00000000",
            "02000000",
            "01000000",
            "02000000",
            "6869",
            "0000",
            // patch: len 24
            "18000000",
            "404dc2be",
            "02000000",
            "0300000000000000",
            "0900000000000000",
            "00000000",
            "01000000",
            "00000000", // padded from 36 to 40
            // delete: len 8
            "08000000",
            "651a0188",
            "03000000",
            "0400000000000000",
            "00000000",
        );
        assert_eq!(hex, expected);
        let (header, decoded) = decode_run(&bytes).unwrap();
        assert_eq!(
            header,
            RunHeader {
                bucket: 5,
                generation: 6,
                covered_lsn: 8,
                records: 3,
                body_bytes: bytes.len() as u64 - 64,
                crashes: 0,
            }
        );
        assert_eq!(decoded, entries);
    }

    #[test]
    fn crash_counts_are_kept_relative_to_their_run() {
        let big = PUT_CRASHES_ALL + 5;
        let put = |id, seen| {
            Entry::Put(StoredJob {
                crashes_seen: seen,
                ..job(id, 10, b"p")
            })
        };
        let patch = |id, seen| {
            Entry::Patch(Patch {
                id: JobId(id),
                due_ms: None,
                lease: None,
                crashes_seen: Some(seen),
                fate: None,
            })
        };
        // Behind by 0, by some, and by more than the field holds (then: all of the run's).
        let entries = vec![put(1, 7), put(2, 3), patch(3, 7), patch(4, 0)];
        let bytes = encode_run(1, 2, 3, 7, &entries);
        let (header, decoded) = decode_run(&bytes).unwrap();
        assert_eq!((header.crashes, &decoded), (7, &entries));
        let far = vec![put(1, 1), put(2, big), patch(3, 2), patch(4, big - 3)];
        let (_, decoded) = decode_run(&encode_run(1, 2, 3, big, &far)).unwrap();
        let seen: Vec<u32> = decoded
            .iter()
            .map(|e| match e {
                Entry::Put(j) => j.crashes_seen,
                Entry::Patch(p) => p.crashes_seen.unwrap(),
                Entry::Delete(_) => unreachable!(),
            })
            .collect();
        // Too far behind for the field: counted from the first crash, never from a later one.
        assert_eq!(seen, [0, big, 0, big - 3]);
        // A version 1 run (no crash count, the older checksum) still reads, as 0 crashes.
        let mut v1 = encode_run(1, 2, 3, 0, &[put(1, 0)]);
        v1[8] = 1;
        let crc = crc32fast::hash(&v1[..56]);
        v1[56..60].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_run(&v1).unwrap().0.crashes, 0);
        v1[60] = 1;
        assert!(
            decode_run(&v1).is_err(),
            "a version 1 run has no crash count"
        );
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        let entries = vec![Entry::Put(job(1, 10, b"payload")), Entry::Delete(JobId(2))];
        let bytes = encode_run(1, 2, 3, 0, &entries);
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(decode_run(&b).is_err(), "flip at {i} went unnoticed");
        }
        for cut in 0..bytes.len() {
            assert!(
                decode_run(&bytes[..cut]).is_err(),
                "cut at {cut} went unnoticed"
            );
        }
    }

    #[test]
    fn lifecycle_entries_round_trip_and_flips_are_refused() {
        let entries = vec![
            Entry::Put(fated(1)),
            Entry::Put(StoredJob {
                dead: None,
                backoff: None,
                last_error: None,
                key: None,
                recurring: None,
                ..fated(2)
            }),
            Entry::Put(StoredJob {
                failures: 0,
                dead: None,
                backoff: None,
                last_error: None,
                ..fated(5)
            }),
            Entry::Patch(Patch {
                id: JobId(3),
                due_ms: Some(12),
                lease: Some((4, false)),
                crashes_seen: None,
                fate: Some(Fate {
                    reset: false,
                    failures_add: 1,
                    dead: Some((99, false)),
                    error: Some("the last error".into()),
                }),
            }),
            Entry::Patch(Patch {
                id: JobId(4),
                due_ms: None,
                lease: None,
                crashes_seen: None,
                fate: Some(Fate {
                    reset: true,
                    failures_add: 0,
                    dead: None,
                    error: None,
                }),
            }),
        ];
        let bytes = encode_run(1, 2, 3, 0, &entries);
        assert_eq!(decode_run(&bytes).unwrap().1, entries);
        // Only the job with a fate is a Put2, only the patches with one Patch2s.
        let kinds: Vec<u8> = {
            let mut at = RUN_HEADER_BYTES;
            let mut k = Vec::new();
            while at < bytes.len() {
                k.push(bytes[at + 8]);
                at += pad8(RECORD_HEADER_BYTES + u32_at(&bytes, at) as usize);
            }
            k
        };
        assert_eq!(
            kinds,
            [KIND_PUT2, KIND_PUT2, KIND_PUT2, KIND_PATCH2, KIND_PATCH2]
        );
        // The recurrence's bytes are the bucket layer's to carry, not to read.
        assert!(matches!(&entries[0], Entry::Put(j) if j.recurring.is_some()));
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(decode_run(&b).is_err(), "flip at {i} went unnoticed");
        }
    }

    #[test]
    fn a_patch_field_it_does_not_set_must_be_zero() {
        let patch = |due_ms, lease| {
            Entry::Patch(Patch {
                id: JobId(3),
                due_ms,
                lease,
                crashes_seen: None,
                fate: None,
            })
        };
        let bytes = encode_run(1, 1, 1, 0, &[patch(Some(9), None)]);
        assert!(decode_run(&bytes).is_ok());
        // The attempt word of a due-only patch, set by hand (with its CRC mended).
        let mut b = bytes.clone();
        let at = RUN_HEADER_BYTES;
        b[at + RECORD_HEADER_BYTES + 16] = 59;
        let crc = crc32fast::hash(&b[at + 8..at + RECORD_HEADER_BYTES + PATCH_BYTES]);
        b[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        assert!(decode_run(&b).is_err(), "an attempt the patch does not set");
    }

    #[test]
    fn runs_stack_and_merge_in_due_order() {
        let mut jobs = BucketJobs::default();
        jobs.apply(vec![
            Entry::Put(job(1, 30, b"a")),
            Entry::Put(job(2, 10, b"b")),
            Entry::Put(job(3, 20, b"c")),
        ])
        .unwrap();
        jobs.apply(vec![
            Entry::Delete(JobId(2)),
            Entry::Patch(Patch {
                id: JobId(1),
                due_ms: Some(5),
                lease: Some((3, false)),
                crashes_seen: None,
                fate: Some(Fate {
                    reset: false,
                    failures_add: 2,
                    dead: None,
                    error: Some("e".into()),
                }),
            }),
        ])
        .unwrap();
        let merged = jobs.clone().into_due_entries();
        let order: Vec<u64> = merged.iter().map(|e| e.id().0).collect();
        assert_eq!(order, [1, 3]);
        assert_eq!(jobs.get(JobId(1)).unwrap().attempt, 3);
        assert!(!jobs.get(JobId(1)).unwrap().leased);
        assert_eq!(jobs.get(JobId(1)).unwrap().failures, 2);
        assert_eq!(jobs.get(JobId(1)).unwrap().last_error.as_deref(), Some("e"));
        assert_eq!(jobs.apply(vec![Entry::Delete(JobId(2))]), Err(JobId(2)));
        assert_eq!(jobs.apply(vec![Entry::Put(job(3, 1, b""))]), Err(JobId(3)));
    }

    #[test]
    fn record_sizes_are_what_the_merge_policy_counts() {
        for len in [0, 1, 7, 8, 100] {
            for j in [
                job(1, 1, &vec![0; len]),
                StoredJob {
                    payload: vec![1; len],
                    ..fated(1)
                },
            ] {
                let bytes = encode_run(1, 1, 1, 0, &[Entry::Put(j.clone())]);
                assert_eq!(bytes.len() as u64 - RUN_HEADER_BYTES as u64, put_bytes(&j));
            }
        }
        let fate = Patch {
            id: JobId(1),
            due_ms: None,
            lease: None,
            crashes_seen: None,
            fate: Some(Fate {
                reset: true,
                failures_add: 0,
                dead: None,
                error: Some("reason".into()),
            }),
        };
        assert_eq!(
            encode_run(1, 1, 1, 0, &[Entry::Patch(fate.clone())]).len() as u64 - 64,
            patch_bytes(&fate)
        );
        let patch = Entry::Patch(Patch {
            id: JobId(1),
            due_ms: None,
            lease: Some((1, true)),
            crashes_seen: None,
            fate: None,
        });
        assert_eq!(
            encode_run(1, 1, 1, 0, &[patch]).len() as u64 - 64,
            PATCH_RECORD_BYTES
        );
        let delete = Entry::Delete(JobId(1));
        assert_eq!(
            encode_run(1, 1, 1, 0, &[delete]).len() as u64 - 64,
            DELETE_RECORD_BYTES
        );
    }

    #[test]
    fn file_names_round_trip_and_others_are_not_runs() {
        let name = run_file_name(491_234, 7);
        assert_eq!(name, "bucket-0000491234-0000000000000007.run");
        assert_eq!(parse_run_file_name(&name), Some((491_234, 7)));
        for other in [
            "MANIFEST",
            "0000000000000001.wal",
            "bucket-1-2.run",
            "bucket-0000491234-0000000000000007.run.tmp",
        ] {
            assert_eq!(parse_run_file_name(other), None, "{other}");
        }
    }
}
