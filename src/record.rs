//! What the engine writes into the log: one record per state change of a job.
//!
//! The log knows nothing of jobs; each record is a type byte plus a body written here by hand,
//! little-endian, with fixed offsets (no serde, no bincode: the layout is a file format and may
//! not drift).
//!
//! ```text
//! type 1  Schedule    id u64 | due_ms u64 | created_ms u64 | tenant u32 | shard u16 | flags u16
//!                     | max_attempts u32 | payload_len u32 | [backoff_base_ms u32
//!                     | backoff_cap_ms u32] | [key_len u32 | key ...]
//!                     | [recur_len u32 | misfire u8 | backfill_max u32 | recurrence ...]
//!                     | payload ...
//! type 2  Cancel      id u64
//! type 3  Reschedule  id u64 | due_ms u64
//! type 4  Claim       id u64 | attempt u32 | reserved u32 | lease_until_ms u64
//! type 5  Complete    id u64 | attempt u32 | reserved u32
//! type 6  Fail        id u64 | attempt u32 | reason_len u32 | reason (UTF-8) ...
//! type 7  Expire      id u64 | attempt u32 | reserved u32
//! type 8  ReserveIds  up_to u64
//! type 9  Retry       id u64 | attempt u32 | flags u16 | reserved u16 | due_ms u64
//!                     | reason_len u32 | reserved u32 | reason (UTF-8) ...
//! type 10 Bury        id u64 | attempt u32 | flags u16 | reserved u16 | at_ms u64
//!                     | reason_len u32 | reserved u32 | reason (UTF-8) ...
//! type 11 Extend      id u64 | attempt u32 | reserved u32 | lease_until_ms u64
//! type 12 Requeue     id u64 | due_ms u64
//! type 13 Purge       id u64
//! type 14 Next        id u64 | attempt u32 | flags u16 | reserved u16 | due_ms u64
//! type 15 Opened      crashes u32 | reserved u32
//! type 16 Closed      crashes u32 | reserved u32
//! ```
//!
//! `Opened` and `Closed` cut the log into the engine's *runs*, for the fencing token. A claim
//! is handed to its worker before its record is durable, so a crash may cut a claim whose
//! attempt number a worker saw. Every open appends `Opened` and syncs it before the first
//! claim; a clean close appends `Closed` last and syncs it (every claim before it is then
//! durable). `crashes` counts the runs that ended otherwise: an `Opened` that does not follow
//! a `Closed` (or an empty directory) counts one more than the record before it. A job's next
//! attempt is its last logged one + 1 + the crashed runs since its attempt was last set (its
//! schedule, claim or requeue): each may have cut one claim of it (no job has two claims
//! unsynced at once), so no number is handed out twice, while a clean restart skips none.
//!
//! The lifecycle records (9-13): `Retry` ends the lease of `attempt` and puts the job back to
//! wait until `due_ms`; with [`RETRY_FAILED`] it was a failure, counted against the job's
//! `max_attempts` (a retry the worker asked for with `retry_at` is not). `Bury` ends the lease
//! of `attempt` for good: the job is *dead* (in the dead-letter set) with its last error;
//! [`BURY_EXPIRED`] says that the lease ran out and it was the last attempt allowed, otherwise
//! the worker's failure was not retryable or the last allowed one. The failure and what follows
//! it (the retry, or the burial) are one record, so a crash cannot keep one without the other.
//! `Extend` moves the lease of `attempt` to `lease_until_ms`. `Requeue` gives a dead job a new
//! due time and a fresh count of failures; `Purge` forgets a dead job. Type 6 (`Fail`, which
//! ended a job without keeping it) is written by no engine since the dead-letter set; its old
//! records still replay.
//!
//! `Expire` says that the lease of `attempt` ran out and the job waits to be claimed again; it
//! is written (in the same append) in front of the cancel, reschedule or claim that follows
//! the expiry, so the timer thread never writes. `ReserveIds` says that ids up to `up_to` may
//! be handed out: it is appended in front of the first schedule that needs a new block, so an
//! id is never handed out twice, even when a crash cut the tail of the log.
//!
//! `tenant` and `shard` are written as 0 today and keep their place for the multi-tenant and
//! sharded engine; `max_attempts` (0 = the engine's default) is for retries; unknown `flags`
//! bits must be zero, so later features (recurrence, idempotency keys) can claim them.

use crate::job::JobId;

/// Record type of a schedule.
pub const TYPE_SCHEDULE: u8 = 1;
/// Record type of a cancel.
pub const TYPE_CANCEL: u8 = 2;
/// Record type of a reschedule.
pub const TYPE_RESCHEDULE: u8 = 3;
/// Record type of a claim.
pub const TYPE_CLAIM: u8 = 4;
/// Record type of a completion.
pub const TYPE_COMPLETE: u8 = 5;
/// Record type of a failure.
pub const TYPE_FAIL: u8 = 6;
/// Record type of a lease expiry.
pub const TYPE_EXPIRE: u8 = 7;
/// Record type of an id reservation.
pub const TYPE_RESERVE_IDS: u8 = 8;
/// Record type of a failed (or worker-chosen) retry.
pub const TYPE_RETRY: u8 = 9;
/// Record type of a job moved to the dead-letter set.
pub const TYPE_BURY: u8 = 10;
/// Record type of a lease extension.
pub const TYPE_EXTEND: u8 = 11;
/// Record type of a dead job scheduled again.
pub const TYPE_REQUEUE: u8 = 12;
/// Record type of a dead job forgotten.
pub const TYPE_PURGE: u8 = 13;

/// `Retry` flag: the attempt failed (counted against `max_attempts`).
pub const RETRY_FAILED: u16 = 1 << 0;
/// `Bury` flag: the lease of the last allowed attempt ran out (rather than a worker's `fail`).
pub const BURY_EXPIRED: u16 = 1 << 0;

/// Schedule flag: the payload is binary (the sidecar reports it as `payload_b64`).
pub const FLAG_BINARY_PAYLOAD: u16 = 1 << 0;
/// Schedule flag: the job has a backoff of its own; 8 bytes follow the fixed part, before the
/// payload: `backoff_base_ms u32 | backoff_cap_ms u32`.
pub const FLAG_BACKOFF: u16 = 1 << 1;
/// Schedule flag: the job has an idempotency key; after the backoff extension (if any) come
/// `key_len u32 | key ...`, before the payload.
pub const FLAG_KEY: u16 = 1 << 2;
/// Schedule flag: a recurring job; after the key (if any) come `recur_len u32 | recurring ...`
/// (misfire kind u8 | backfill_max u32 | the recurrence's own layout, `recur::Recurrence`).
pub const FLAG_RECUR: u16 = 1 << 3;
const FLAGS_KNOWN: u16 = FLAG_BINARY_PAYLOAD | FLAG_BACKOFF | FLAG_KEY | FLAG_RECUR;
/// Record type of a recurring job's occurrence done and the next one scheduled.
pub const TYPE_NEXT: u8 = 14;
/// Record type of an open.
pub const TYPE_OPENED: u8 = 15;
/// Record type of a clean close.
pub const TYPE_CLOSED: u8 = 16;
/// `Next` flag: the occurrence failed its last attempt.
pub const NEXT_FAILED: u16 = 1 << 0;
/// `Next` flag: the occurrence was skipped (misfire policy `Skip`), not delivered.
pub const NEXT_SKIPPED: u16 = 1 << 1;
/// Bytes of the backoff extension of a schedule record.
pub const BACKOFF_EXT_BYTES: usize = 8;

const SCHEDULE_ID: usize = 0;
const SCHEDULE_DUE: usize = SCHEDULE_ID + 8;
const SCHEDULE_CREATED: usize = SCHEDULE_DUE + 8;
const SCHEDULE_TENANT: usize = SCHEDULE_CREATED + 8;
const SCHEDULE_SHARD: usize = SCHEDULE_TENANT + 4;
const SCHEDULE_FLAGS: usize = SCHEDULE_SHARD + 2;
const SCHEDULE_MAX_ATTEMPTS: usize = SCHEDULE_FLAGS + 2;
const SCHEDULE_PAYLOAD_LEN: usize = SCHEDULE_MAX_ATTEMPTS + 4;
/// Bytes of a schedule record's body before its payload.
pub const SCHEDULE_FIXED_BYTES: usize = SCHEDULE_PAYLOAD_LEN + 4;
const _: () = assert!(SCHEDULE_FIXED_BYTES == 40);

/// The largest record body the configuration allows (a schedule with the largest payload, or
/// a failure with the longest reason).
pub fn record_bytes_max(config: &crate::Config) -> usize {
    schedule_bytes_max(config).max(failure_bytes_max(config))
}

/// The largest schedule body the configuration allows.
pub(crate) fn schedule_bytes_max(config: &crate::Config) -> usize {
    SCHEDULE_FIXED_BYTES
        + BACKOFF_EXT_BYTES
        + 4
        + config.key_bytes_max
        + 4
        + 5
        + crate::recur::RECURRENCE_BYTES_MAX
        + config.payload_bytes_max
}

/// The largest failure body (`Retry`, `Bury`, old `Fail`) the configuration allows.
pub(crate) fn failure_bytes_max(config: &crate::Config) -> usize {
    LIFECYCLE_FIXED_BYTES + config.fail_reason_bytes_max
}

/// Bytes of a `Retry` or `Bury` body before its reason.
pub const LIFECYCLE_FIXED_BYTES: usize = 32;

/// A job's schedule as written in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRecord<'a> {
    /// The job.
    pub id: JobId,
    /// When it is due.
    pub due_ms: u64,
    /// When it was scheduled.
    pub created_ms: u64,
    /// Tenant (0 until tenants exist).
    pub tenant: u32,
    /// Shard (0 until shards exist).
    pub shard: u16,
    /// `FLAG_*` bits.
    pub flags: u16,
    /// Attempts allowed (0 = the engine default).
    pub max_attempts: u32,
    /// The job's own backoff `(base_ms, cap_ms)` (written when `FLAG_BACKOFF` is set).
    pub backoff: Option<(u32, u32)>,
    /// The job's idempotency key (written when `FLAG_KEY` is set).
    pub key: Option<&'a [u8]>,
    /// A recurring job's schedule, encoded (written when `FLAG_RECUR` is set).
    pub recurring: Option<&'a [u8]>,
    /// The payload.
    pub payload: &'a [u8],
}

impl<'a> ScheduleRecord<'a> {
    /// The schedule of a plain job: tenant and shard 0, no flags (a UTF-8 payload), the
    /// engine's default attempts and backoff, no key, not recurring. (For tests.)
    #[cfg(any(test, feature = "testing"))]
    pub fn plain(id: JobId, due_ms: u64, created_ms: u64, payload: &'a [u8]) -> Self {
        ScheduleRecord {
            id,
            due_ms,
            created_ms,
            tenant: 0,
            shard: 0,
            flags: 0,
            max_attempts: 0,
            backoff: None,
            key: None,
            recurring: None,
            payload,
        }
    }
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// A job was scheduled.
    Schedule(ScheduleRecord<'a>),
    /// A job was cancelled.
    Cancel {
        /// The job.
        id: JobId,
    },
    /// A job got a new due time.
    Reschedule {
        /// The job.
        id: JobId,
        /// The new due time.
        due_ms: u64,
    },
    /// A job was claimed by a worker.
    Claim {
        /// The job.
        id: JobId,
        /// The delivery attempt (1 for the first).
        attempt: u32,
        /// When the lease runs out.
        lease_until_ms: u64,
    },
    /// A job completed.
    Complete {
        /// The job.
        id: JobId,
        /// The attempt that completed it.
        attempt: u32,
    },
    /// A job failed.
    Fail {
        /// The job.
        id: JobId,
        /// The attempt that failed.
        attempt: u32,
        /// Why.
        reason: &'a str,
    },
    /// The lease of a claimed job ran out; it waits to be claimed again.
    Expire {
        /// The job.
        id: JobId,
        /// The attempt whose lease ran out.
        attempt: u32,
    },
    /// The engine opened (see the module docs).
    Opened {
        /// Runs before it that did not close cleanly.
        crashes: u32,
    },
    /// The engine closed cleanly: every record before this one is durable.
    Closed {
        /// Runs before this one that did not close cleanly.
        crashes: u32,
    },
    /// Ids up to `up_to` (inclusive) may be handed out.
    ReserveIds {
        /// The highest id reserved.
        up_to: u64,
    },
    /// The lease of `attempt` ended and the job waits again until `due_ms`.
    Retry {
        /// The job.
        id: JobId,
        /// The attempt that ended.
        attempt: u32,
        /// `RETRY_*` bits.
        flags: u16,
        /// When it is due again.
        due_ms: u64,
        /// The failure, or why the worker asked for the retry.
        reason: &'a str,
    },
    /// The job is dead: it stays in the dead-letter set with its last error.
    Bury {
        /// The job.
        id: JobId,
        /// The attempt that ended.
        attempt: u32,
        /// `BURY_*` bits.
        flags: u16,
        /// When it died.
        at_ms: u64,
        /// The last error.
        reason: &'a str,
    },
    /// The lease of `attempt` now runs until `lease_until_ms`.
    Extend {
        /// The job.
        id: JobId,
        /// The attempt holding the lease.
        attempt: u32,
        /// The new end of the lease.
        lease_until_ms: u64,
    },
    /// A dead job waits again, until `due_ms`, with no failures counted.
    Requeue {
        /// The job.
        id: JobId,
        /// When it is due.
        due_ms: u64,
    },
    /// A dead job is forgotten.
    Purge {
        /// The job.
        id: JobId,
    },
    /// A recurring job's occurrence is done (`flags`: failed, or skipped): the job waits
    /// until `due_ms`, its next occurrence, with no failures counted.
    Next {
        /// The job.
        id: JobId,
        /// The attempt that ended (skipped: the job's newest attempt).
        attempt: u32,
        /// `NEXT_*` bits.
        flags: u16,
        /// The next occurrence.
        due_ms: u64,
    },
}

/// Why a record body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("record of type {record_type}: {what}")]
pub struct DecodeError {
    /// The record type.
    pub record_type: u8,
    /// What was wrong.
    pub what: &'static str,
}

impl Event<'_> {
    /// The log record type of this event.
    pub fn record_type(&self) -> u8 {
        match self {
            Event::Schedule(_) => TYPE_SCHEDULE,
            Event::Cancel { .. } => TYPE_CANCEL,
            Event::Reschedule { .. } => TYPE_RESCHEDULE,
            Event::Claim { .. } => TYPE_CLAIM,
            Event::Complete { .. } => TYPE_COMPLETE,
            Event::Fail { .. } => TYPE_FAIL,
            Event::Expire { .. } => TYPE_EXPIRE,
            Event::ReserveIds { .. } => TYPE_RESERVE_IDS,
            Event::Opened { .. } => TYPE_OPENED,
            Event::Closed { .. } => TYPE_CLOSED,
            Event::Retry { .. } => TYPE_RETRY,
            Event::Bury { .. } => TYPE_BURY,
            Event::Extend { .. } => TYPE_EXTEND,
            Event::Requeue { .. } => TYPE_REQUEUE,
            Event::Purge { .. } => TYPE_PURGE,
            Event::Next { .. } => TYPE_NEXT,
        }
    }

    /// The event's name in JSON dumps and reports.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Schedule(_) => "schedule",
            Event::Cancel { .. } => "cancel",
            Event::Reschedule { .. } => "reschedule",
            Event::Claim { .. } => "claim",
            Event::Complete { .. } => "complete",
            Event::Fail { .. } => "fail",
            Event::Expire { .. } => "expire",
            Event::ReserveIds { .. } => "reserve_ids",
            Event::Opened { .. } => "opened",
            Event::Closed { .. } => "closed",
            Event::Retry { .. } => "retry",
            Event::Bury { .. } => "bury",
            Event::Extend { .. } => "extend",
            Event::Requeue { .. } => "requeue",
            Event::Purge { .. } => "purge",
            Event::Next { .. } => "next",
        }
    }

    /// The job this event is about (`None` for an id reservation).
    pub fn id(&self) -> Option<JobId> {
        match self {
            Event::Schedule(s) => Some(s.id),
            Event::Cancel { id }
            | Event::Reschedule { id, .. }
            | Event::Claim { id, .. }
            | Event::Complete { id, .. }
            | Event::Fail { id, .. }
            | Event::Expire { id, .. }
            | Event::Retry { id, .. }
            | Event::Bury { id, .. }
            | Event::Extend { id, .. }
            | Event::Requeue { id, .. }
            | Event::Purge { id }
            | Event::Next { id, .. } => Some(*id),
            Event::ReserveIds { .. } | Event::Opened { .. } | Event::Closed { .. } => None,
        }
    }

    /// Whether this record sets its job's count of crashes seen (see the module docs): a
    /// schedule, a claim or a requeue (the attempt is known then), or a record that ends or
    /// extends a claim's open lease (while a lease is open in the log, a claim is durable
    /// before it is handed out, so no crash cut one). A reschedule, cancel or skipped
    /// occurrence of a waiting job keeps the count: a claim a crash cut before it is not in
    /// the log, and its number must still be skipped.
    pub fn sets_crashes_seen(&self) -> bool {
        match self {
            Event::Schedule(_)
            | Event::Claim { .. }
            | Event::Requeue { .. }
            | Event::Expire { .. }
            | Event::Retry { .. }
            | Event::Bury { .. }
            | Event::Extend { .. } => true,
            Event::Next { flags, .. } => flags & NEXT_SKIPPED == 0,
            _ => false,
        }
    }

    /// Appends the body of this event to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Event::Schedule(s) => {
                let start = out.len();
                put_u64(out, s.id.0);
                put_u64(out, s.due_ms);
                put_u64(out, s.created_ms);
                out.extend_from_slice(&s.tenant.to_le_bytes());
                out.extend_from_slice(&s.shard.to_le_bytes());
                out.extend_from_slice(&s.flags.to_le_bytes());
                out.extend_from_slice(&s.max_attempts.to_le_bytes());
                let len = u32::try_from(s.payload.len()).expect("payload length checked by caller");
                out.extend_from_slice(&len.to_le_bytes());
                debug_assert_eq!(out.len() - start, SCHEDULE_FIXED_BYTES);
                assert_eq!(
                    s.backoff.is_some(),
                    s.flags & FLAG_BACKOFF != 0,
                    "the backoff flag says whether a backoff follows"
                );
                if let Some((base, cap)) = s.backoff {
                    out.extend_from_slice(&base.to_le_bytes());
                    out.extend_from_slice(&cap.to_le_bytes());
                }
                assert_eq!(
                    s.key.is_some(),
                    s.flags & FLAG_KEY != 0,
                    "the key flag says whether a key follows"
                );
                if let Some(key) = s.key {
                    let klen = u32::try_from(key.len()).expect("key length checked by caller");
                    out.extend_from_slice(&klen.to_le_bytes());
                    out.extend_from_slice(key);
                }
                assert_eq!(
                    s.recurring.is_some(),
                    s.flags & FLAG_RECUR != 0,
                    "the recur flag says whether a schedule follows"
                );
                if let Some(r) = s.recurring {
                    let rlen = u32::try_from(r.len()).expect("a recurrence is small");
                    out.extend_from_slice(&rlen.to_le_bytes());
                    out.extend_from_slice(r);
                }
                out.extend_from_slice(s.payload);
            }
            Event::Cancel { id } => put_u64(out, id.0),
            Event::Reschedule { id, due_ms } => {
                put_u64(out, id.0);
                put_u64(out, *due_ms);
            }
            Event::Claim {
                id,
                attempt,
                lease_until_ms,
            } => {
                put_u64(out, id.0);
                out.extend_from_slice(&attempt.to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
                put_u64(out, *lease_until_ms);
            }
            Event::Complete { id, attempt } | Event::Expire { id, attempt } => {
                put_u64(out, id.0);
                out.extend_from_slice(&attempt.to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
            }
            Event::Fail {
                id,
                attempt,
                reason,
            } => {
                put_u64(out, id.0);
                out.extend_from_slice(&attempt.to_le_bytes());
                let len = u32::try_from(reason.len()).expect("reason length checked by caller");
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(reason.as_bytes());
            }
            Event::ReserveIds { up_to } => put_u64(out, *up_to),
            Event::Opened { crashes } | Event::Closed { crashes } => {
                out.extend_from_slice(&crashes.to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
            }
            Event::Retry {
                id,
                attempt,
                flags,
                due_ms: at,
                reason,
            }
            | Event::Bury {
                id,
                attempt,
                flags,
                at_ms: at,
                reason,
            } => {
                put_u64(out, id.0);
                out.extend_from_slice(&attempt.to_le_bytes());
                out.extend_from_slice(&flags.to_le_bytes());
                out.extend_from_slice(&0u16.to_le_bytes());
                put_u64(out, *at);
                let len = u32::try_from(reason.len()).expect("reason length checked by caller");
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
                out.extend_from_slice(reason.as_bytes());
            }
            Event::Extend {
                id,
                attempt,
                lease_until_ms,
            } => {
                put_u64(out, id.0);
                out.extend_from_slice(&attempt.to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
                put_u64(out, *lease_until_ms);
            }
            Event::Requeue { id, due_ms } => {
                put_u64(out, id.0);
                put_u64(out, *due_ms);
            }
            Event::Purge { id } => put_u64(out, id.0),
            Event::Next {
                id,
                attempt,
                flags,
                due_ms,
            } => {
                put_u64(out, id.0);
                out.extend_from_slice(&attempt.to_le_bytes());
                out.extend_from_slice(&flags.to_le_bytes());
                out.extend_from_slice(&0u16.to_le_bytes());
                put_u64(out, *due_ms);
            }
        }
    }

    /// Decodes a record body. Never panics, whatever the bytes.
    pub fn decode(record_type: u8, body: &[u8]) -> Result<Event<'_>, DecodeError> {
        let err = |what| DecodeError { record_type, what };
        let exact = |n: usize| {
            if body.len() == n {
                Ok(())
            } else {
                Err(err("wrong body length"))
            }
        };
        let id = || JobId(u64_at(body, 0));
        // Reserved words are written as zero and must read as zero, so that a later version
        // can give them a meaning without old records being misread.
        let reserved_zero = |b: &[u8], at: usize| {
            if u32_at(b, at) == 0 {
                Ok(())
            } else {
                Err(err("reserved field is not zero"))
            }
        };
        match record_type {
            TYPE_SCHEDULE => {
                if body.len() < SCHEDULE_FIXED_BYTES {
                    return Err(err("short schedule body"));
                }
                let len = u32_at(body, SCHEDULE_PAYLOAD_LEN) as usize;
                let flags = u16_at(body, SCHEDULE_FLAGS);
                if flags & !FLAGS_KNOWN != 0 {
                    return Err(err("unknown schedule flags"));
                }
                let mut ext = if flags & FLAG_BACKOFF != 0 {
                    BACKOFF_EXT_BYTES
                } else {
                    0
                };
                if body.len() < SCHEDULE_FIXED_BYTES + ext {
                    return Err(err("short backoff extension"));
                }
                let backoff = (ext > 0).then(|| {
                    (
                        u32_at(body, SCHEDULE_FIXED_BYTES),
                        u32_at(body, SCHEDULE_FIXED_BYTES + 4),
                    )
                });
                let mut key = None;
                if flags & FLAG_KEY != 0 {
                    let at = SCHEDULE_FIXED_BYTES + ext;
                    if body.len() < at + 4 {
                        return Err(err("short key extension"));
                    }
                    let klen = u32_at(body, at) as usize;
                    if klen == 0 || body.len() - at - 4 < klen {
                        return Err(err("key length does not match the body"));
                    }
                    key = Some(&body[at + 4..at + 4 + klen]);
                    ext += 4 + klen;
                }
                let mut recurring = None;
                if flags & FLAG_RECUR != 0 {
                    let at = SCHEDULE_FIXED_BYTES + ext;
                    if body.len() < at + 4 {
                        return Err(err("short recurrence extension"));
                    }
                    let rlen = u32_at(body, at) as usize;
                    if rlen == 0 || body.len() - at - 4 < rlen {
                        return Err(err("recurrence length does not match the body"));
                    }
                    let r = &body[at + 4..at + 4 + rlen];
                    if crate::job::Recurring::decode(r).is_none() {
                        return Err(err("undecodable recurrence"));
                    }
                    recurring = Some(r);
                    ext += 4 + rlen;
                }
                if body.len() - SCHEDULE_FIXED_BYTES != ext + len {
                    return Err(err("payload length does not match the body"));
                }
                Ok(Event::Schedule(ScheduleRecord {
                    id: id(),
                    due_ms: u64_at(body, SCHEDULE_DUE),
                    created_ms: u64_at(body, SCHEDULE_CREATED),
                    tenant: u32_at(body, SCHEDULE_TENANT),
                    shard: u16_at(body, SCHEDULE_SHARD),
                    flags,
                    max_attempts: u32_at(body, SCHEDULE_MAX_ATTEMPTS),
                    backoff,
                    key,
                    recurring,
                    payload: &body[SCHEDULE_FIXED_BYTES + ext..],
                }))
            }
            TYPE_CANCEL => exact(8).map(|()| Event::Cancel { id: id() }),
            TYPE_RESCHEDULE => exact(16).map(|()| Event::Reschedule {
                id: id(),
                due_ms: u64_at(body, 8),
            }),
            TYPE_CLAIM => {
                exact(24)?;
                reserved_zero(body, 12)?;
                Ok(Event::Claim {
                    id: id(),
                    attempt: u32_at(body, 8),
                    lease_until_ms: u64_at(body, 16),
                })
            }
            TYPE_COMPLETE => {
                exact(16)?;
                reserved_zero(body, 12)?;
                Ok(Event::Complete {
                    id: id(),
                    attempt: u32_at(body, 8),
                })
            }
            TYPE_EXPIRE => {
                exact(16)?;
                reserved_zero(body, 12)?;
                Ok(Event::Expire {
                    id: id(),
                    attempt: u32_at(body, 8),
                })
            }
            TYPE_RESERVE_IDS => exact(8).map(|()| Event::ReserveIds {
                up_to: u64_at(body, 0),
            }),
            TYPE_OPENED | TYPE_CLOSED => {
                exact(8)?;
                reserved_zero(body, 4)?;
                let crashes = u32_at(body, 0);
                Ok(if record_type == TYPE_OPENED {
                    Event::Opened { crashes }
                } else {
                    Event::Closed { crashes }
                })
            }
            TYPE_RETRY | TYPE_BURY => {
                if body.len() < LIFECYCLE_FIXED_BYTES {
                    return Err(err("short lifecycle body"));
                }
                let flags = u16_at(body, 12);
                let known = if record_type == TYPE_RETRY {
                    RETRY_FAILED
                } else {
                    BURY_EXPIRED
                };
                if flags & !known != 0 {
                    return Err(err("unknown lifecycle flags"));
                }
                if u16_at(body, 14) != 0 {
                    return Err(err("reserved field is not zero"));
                }
                reserved_zero(body, 28)?;
                let len = u32_at(body, 24) as usize;
                if body.len() - LIFECYCLE_FIXED_BYTES != len {
                    return Err(err("reason length does not match the body"));
                }
                let reason = std::str::from_utf8(&body[LIFECYCLE_FIXED_BYTES..])
                    .map_err(|_| err("reason is not UTF-8"))?;
                let (id, attempt, at) = (id(), u32_at(body, 8), u64_at(body, 16));
                Ok(if record_type == TYPE_RETRY {
                    Event::Retry {
                        id,
                        attempt,
                        flags,
                        due_ms: at,
                        reason,
                    }
                } else {
                    Event::Bury {
                        id,
                        attempt,
                        flags,
                        at_ms: at,
                        reason,
                    }
                })
            }
            TYPE_EXTEND => {
                exact(24)?;
                reserved_zero(body, 12)?;
                Ok(Event::Extend {
                    id: id(),
                    attempt: u32_at(body, 8),
                    lease_until_ms: u64_at(body, 16),
                })
            }
            TYPE_REQUEUE => exact(16).map(|()| Event::Requeue {
                id: id(),
                due_ms: u64_at(body, 8),
            }),
            TYPE_PURGE => exact(8).map(|()| Event::Purge { id: id() }),
            TYPE_NEXT => {
                exact(24)?;
                let flags = u16_at(body, 12);
                if flags & !(NEXT_FAILED | NEXT_SKIPPED) != 0 || u16_at(body, 14) != 0 {
                    return Err(err("unknown next flags or reserved bytes"));
                }
                Ok(Event::Next {
                    id: id(),
                    attempt: u32_at(body, 8),
                    flags,
                    due_ms: u64_at(body, 16),
                })
            }
            TYPE_FAIL => {
                if body.len() < 16 {
                    return Err(err("short fail body"));
                }
                let len = u32_at(body, 12) as usize;
                if body.len() - 16 != len {
                    return Err(err("reason length does not match the body"));
                }
                let reason =
                    std::str::from_utf8(&body[16..]).map_err(|_| err("reason is not UTF-8"))?;
                Ok(Event::Fail {
                    id: id(),
                    attempt: u32_at(body, 8),
                    reason,
                })
            }
            _ => Err(err("unknown record type")),
        }
    }
}

pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

// Callers check the body length first; these only read inside it.
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(e: Event<'_>) {
        let mut buf = Vec::new();
        e.encode(&mut buf);
        assert_eq!(Event::decode(e.record_type(), &buf).expect("decodes"), e);
        // Every strict prefix and one extra byte are refused, never a panic.
        for cut in 0..buf.len() {
            assert!(Event::decode(e.record_type(), &buf[..cut]).is_err());
        }
        buf.push(0);
        assert!(Event::decode(e.record_type(), &buf).is_err());
    }

    #[test]
    fn every_event_roundtrips_and_truncations_are_refused() {
        roundtrip(Event::Schedule(ScheduleRecord {
            id: JobId(7),
            due_ms: 1_700_000_000_000,
            created_ms: 1_699_999_999_000,
            tenant: 0,
            shard: 0,
            flags: FLAG_BINARY_PAYLOAD,
            max_attempts: 0,
            backoff: None,
            key: None,
            recurring: None,
            payload: b"\x00\xffhello",
        }));
        roundtrip(Event::Schedule(ScheduleRecord {
            id: JobId(8),
            due_ms: 1,
            created_ms: 1,
            tenant: 7,
            shard: 0,
            flags: FLAG_BACKOFF,
            max_attempts: 5,
            backoff: Some((250, 60_000)),
            key: None,
            recurring: None,
            payload: b"with a backoff",
        }));
        roundtrip(Event::Schedule(ScheduleRecord {
            id: JobId(9),
            due_ms: 1,
            created_ms: 1,
            tenant: 0,
            shard: 0,
            flags: FLAG_BACKOFF | FLAG_KEY,
            max_attempts: 0,
            backoff: Some((1, 2)),
            key: Some(b"order-42"),
            recurring: None,
            payload: b"keyed",
        }));
        let mut rec = Vec::new();
        crate::job::Recurring {
            recurrence: crate::recur::Recurrence::every(60_000, 5).expect("interval"),
            misfire: crate::job::Misfire::FireAll { backfill_max: 3 },
        }
        .encode(&mut rec);
        roundtrip(Event::Schedule(ScheduleRecord {
            id: JobId(10),
            due_ms: 60_005,
            created_ms: 1,
            tenant: 0,
            shard: 0,
            flags: FLAG_KEY | FLAG_RECUR,
            max_attempts: 0,
            backoff: None,
            key: Some(b"k"),
            recurring: Some(&rec),
            payload: b"recurring",
        }));
        roundtrip(Event::Next {
            id: JobId(10),
            attempt: 3,
            flags: NEXT_FAILED,
            due_ms: 120_005,
        });
        roundtrip(Event::Retry {
            id: JobId(3),
            attempt: 2,
            flags: RETRY_FAILED,
            due_ms: 1_700_000_000_500,
            reason: "503 from upstream",
        });
        roundtrip(Event::Retry {
            id: JobId(3),
            attempt: 3,
            flags: 0,
            due_ms: 9,
            reason: "",
        });
        roundtrip(Event::Bury {
            id: JobId(3),
            attempt: 5,
            flags: BURY_EXPIRED,
            at_ms: 77,
            reason: "lease ran out ✓",
        });
        roundtrip(Event::Extend {
            id: JobId(3),
            attempt: 1,
            lease_until_ms: 1 << 41,
        });
        roundtrip(Event::Requeue {
            id: JobId(3),
            due_ms: 12,
        });
        roundtrip(Event::Purge { id: JobId(3) });
        roundtrip(Event::Cancel { id: JobId(1) });
        roundtrip(Event::Reschedule {
            id: JobId(u64::MAX),
            due_ms: 5,
        });
        roundtrip(Event::Claim {
            id: JobId(3),
            attempt: 2,
            lease_until_ms: 99,
        });
        roundtrip(Event::Complete {
            id: JobId(3),
            attempt: 2,
        });
        roundtrip(Event::Fail {
            id: JobId(3),
            attempt: 1,
            reason: "timeout ✓",
        });
        roundtrip(Event::Expire {
            id: JobId(3),
            attempt: 4,
        });
        roundtrip(Event::ReserveIds { up_to: 1 << 40 });
        roundtrip(Event::Opened { crashes: 3 });
        roundtrip(Event::Opened { crashes: 0 });
        roundtrip(Event::Closed { crashes: 0 });
    }

    #[test]
    fn schedule_layout_is_fixed() {
        // Golden bytes: the log format may not drift silently.
        let mut buf = Vec::new();
        Event::Schedule(ScheduleRecord {
            id: JobId(0x0102_0304_0506_0708),
            due_ms: 0x10,
            created_ms: 0x20,
            tenant: 0x30,
            shard: 0x40,
            flags: 0,
            max_attempts: 3,
            backoff: None,
            key: None,
            recurring: None,
            payload: b"ab",
        })
        .encode(&mut buf);
        let want: Vec<u8> = [
            &[8, 7, 6, 5, 4, 3, 2, 1][..],
            &[0x10, 0, 0, 0, 0, 0, 0, 0],
            &[0x20, 0, 0, 0, 0, 0, 0, 0],
            &[0x30, 0, 0, 0],
            &[0x40, 0],
            &[0, 0],
            &[3, 0, 0, 0],
            &[2, 0, 0, 0],
            b"ab",
        ]
        .concat();
        assert_eq!(buf, want);
    }

    #[test]
    fn run_marks_layout_is_fixed() {
        let mut body = Vec::new();
        Event::Opened { crashes: 0x0102 }.encode(&mut body);
        assert_eq!(body, [2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            Event::decode(TYPE_CLOSED, &body),
            Ok(Event::Closed { crashes: 0x0102 })
        );
        body[5] = 1;
        assert!(Event::decode(TYPE_OPENED, &body).is_err(), "reserved bytes");
        assert!(Event::decode(TYPE_OPENED, &[0; 7]).is_err(), "short");
    }

    #[test]
    fn retry_layout_is_fixed() {
        let mut buf = Vec::new();
        Event::Retry {
            id: JobId(0x11),
            attempt: 2,
            flags: RETRY_FAILED,
            due_ms: 0x22,
            reason: "no",
        }
        .encode(&mut buf);
        let want: Vec<u8> = [
            &[0x11, 0, 0, 0, 0, 0, 0, 0][..],
            &[2, 0, 0, 0],
            &[1, 0],
            &[0, 0],
            &[0x22, 0, 0, 0, 0, 0, 0, 0],
            &[2, 0, 0, 0],
            &[0, 0, 0, 0],
            b"no",
        ]
        .concat();
        assert_eq!(buf, want);
        // Unknown flags and reserved bytes are refused.
        let mut bad = buf.clone();
        bad[12] = 2;
        assert!(Event::decode(TYPE_RETRY, &bad).is_err());
        let mut bad = buf.clone();
        bad[29] = 1;
        assert!(Event::decode(TYPE_RETRY, &bad).is_err());
        let mut bad = buf;
        bad[14] = 1;
        assert!(Event::decode(TYPE_RETRY, &bad).is_err());
    }

    #[test]
    fn reserved_words_must_be_zero() {
        // Found by the job_record_decode fuzz target: decode(b) then encode must give b back.
        let mut claim = Vec::new();
        Event::Claim {
            id: JobId(1),
            attempt: 1,
            lease_until_ms: 2,
        }
        .encode(&mut claim);
        claim[12] = 1;
        assert!(Event::decode(TYPE_CLAIM, &claim).is_err());
        let mut complete = Vec::new();
        Event::Complete {
            id: JobId(1),
            attempt: 1,
        }
        .encode(&mut complete);
        complete[15] = 0x80;
        assert!(Event::decode(TYPE_COMPLETE, &complete).is_err());
    }

    #[test]
    fn unknown_types_and_flags_are_refused() {
        assert!(Event::decode(0, &[]).is_err());
        assert!(Event::decode(200, &[0; 8]).is_err());
        let mut buf = Vec::new();
        Event::Schedule(ScheduleRecord {
            id: JobId(1),
            due_ms: 1,
            created_ms: 1,
            tenant: 0,
            shard: 0,
            flags: 0x8000,
            max_attempts: 0,
            backoff: None,
            key: None,
            recurring: None,
            payload: b"",
        })
        .encode(&mut buf);
        assert!(Event::decode(TYPE_SCHEDULE, &buf).is_err());
    }
}
