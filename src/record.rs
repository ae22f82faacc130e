//! What the engine writes into the log: one record per state change of a job.
//!
//! The log knows nothing of jobs; each record is a type byte plus a body written here by hand,
//! little-endian, with fixed offsets (no serde, no bincode: the layout is a file format and may
//! not drift).
//!
//! ```text
//! type 1  Schedule    id u64 | due_ms u64 | created_ms u64 | tenant u32 | shard u16 | flags u16
//!                     | max_attempts u32 | payload_len u32 | payload ...
//! type 2  Cancel      id u64
//! type 3  Reschedule  id u64 | due_ms u64
//! type 4  Claim       id u64 | attempt u32 | reserved u32 | lease_until_ms u64
//! type 5  Complete    id u64 | attempt u32 | reserved u32
//! type 6  Fail        id u64 | attempt u32 | reason_len u32 | reason (UTF-8) ...
//! type 7  Expire      id u64 | attempt u32 | reserved u32
//! type 8  ReserveIds  up_to u64
//! ```
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

/// Schedule flag: the payload is binary (the sidecar reports it as `payload_b64`).
pub const FLAG_BINARY_PAYLOAD: u16 = 1 << 0;
const FLAGS_KNOWN: u16 = FLAG_BINARY_PAYLOAD;

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

/// The largest schedule body the configuration allows.
pub(crate) fn schedule_record_bytes_max(config: &crate::Config) -> usize {
    SCHEDULE_FIXED_BYTES + config.payload_bytes_max
}

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
    /// The payload.
    pub payload: &'a [u8],
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
    /// Ids up to `up_to` (inclusive) may be handed out.
    ReserveIds {
        /// The highest id reserved.
        up_to: u64,
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
            | Event::Expire { id, .. } => Some(*id),
            Event::ReserveIds { .. } => None,
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
                if body.len() - SCHEDULE_FIXED_BYTES != len {
                    return Err(err("payload length does not match the body"));
                }
                let flags = u16_at(body, SCHEDULE_FLAGS);
                if flags & !FLAGS_KNOWN != 0 {
                    return Err(err("unknown schedule flags"));
                }
                Ok(Event::Schedule(ScheduleRecord {
                    id: id(),
                    due_ms: u64_at(body, SCHEDULE_DUE),
                    created_ms: u64_at(body, SCHEDULE_CREATED),
                    tenant: u32_at(body, SCHEDULE_TENANT),
                    shard: u16_at(body, SCHEDULE_SHARD),
                    flags,
                    max_attempts: u32_at(body, SCHEDULE_MAX_ATTEMPTS),
                    payload: &body[SCHEDULE_FIXED_BYTES..],
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
            payload: b"\x00\xffhello",
        }));
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
            payload: b"",
        })
        .encode(&mut buf);
        assert!(Event::decode(TYPE_SCHEDULE, &buf).is_err());
    }
}
