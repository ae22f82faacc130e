//! The wire format: parsing a request line, rendering replies and events.
//!
//! Pure functions, no I/O, so that every rule of the contract (BRIEF.md section 4) is unit
//! tested here. The serving loop in `sidecar::serve` only moves lines around.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Error;
use crate::job::{Claimed, JobId, JobSpec};
use crate::stats::Stats;

/// One request, checked field by field. What the client sent as `req` travels beside it, in
/// [`Parsed::req`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `{"op":"schedule","due_ms":T}` or `"delay_ms":D`, with an optional payload.
    Schedule(JobSpec),
    /// `{"op":"cancel","id":"ID"}`.
    Cancel(JobId),
    /// `{"op":"reschedule","id":"ID","due_ms":T}`.
    Reschedule(JobId, u64),
    /// `{"op":"complete","id":"ID"}`, optionally with the `"attempt"` of the delivery being
    /// finished (an addition to the contract: a fencing token against finishing a newer
    /// delivery than the one the client worked on).
    Complete(JobId, Option<u32>),
    /// `{"op":"fail","id":"ID","error":"text"}`; a missing `error` is an empty reason. Takes
    /// `"attempt"` like `Complete`, and `"retryable":true` to have the job retried under its
    /// retry policy (without it the job goes to the dead-letter set, as before retries).
    Fail(JobId, String, Option<u32>, bool),
    /// `{"op":"retry","id":"ID","due_ms":T}` (or `"delay_ms"`): ends the delivery without a
    /// failure, the job fires again then. Takes `"attempt"`.
    Retry(JobId, RetryWhen, Option<u32>),
    /// `{"op":"extend","id":"ID","lease_ms":L}`: the lease of the held delivery runs until L ms
    /// from now. Takes `"attempt"`.
    Extend(JobId, u64, Option<u32>),
    /// `{"op":"dlq_list"}`, with optional `"tenant"`, `"after"` (an id) and `"limit"`.
    DlqList(crate::job::DeadQuery),
    /// `{"op":"dlq_requeue","id":"ID"}` or `"ids":[...]`.
    DlqRequeue(Vec<JobId>),
    /// `{"op":"dlq_purge"}` with `"id"`, `"ids"`, `"tenant"` or `"all":true`.
    DlqPurge(Purge),
    /// `{"op":"schedules_list"}`, optional `"after"` and `"limit"`.
    SchedulesList(Option<JobId>, usize),
    /// `{"op":"schedule_pause","id":"ID"}`, `schedule_resume`, `schedule_delete`.
    ScheduleOp(ScheduleVerb, JobId),
    /// `{"op":"stats"}`.
    Stats,
    /// `{"op":"shutdown"}`.
    Shutdown,
}

/// When a `retry` fires again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryWhen {
    /// At this time.
    At(u64),
    /// This many ms from now.
    After(u64),
}

/// What a `schedule_*` op does to a recurring job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleVerb {
    /// `schedule_pause`.
    Pause,
    /// `schedule_resume`.
    Resume,
    /// `schedule_delete`.
    Delete,
}

/// What a `dlq_purge` forgets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Purge {
    /// These dead jobs.
    Ids(Vec<JobId>),
    /// Every dead job of a tenant.
    Tenant(u32),
    /// Every dead job.
    All,
}

/// A parsed line: the `req` to echo (`null` when absent or unreadable) and the request or the
/// reason it was refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The client's `req`, echoed in the reply.
    pub req: Value,
    /// The request, or why it is a `bad_request`.
    pub request: Result<Request, String>,
}

/// Parses one line (without its newline). Never fails: a line that can not be read becomes a
/// `bad_request` with `req` null.
pub fn parse_line(line: &[u8]) -> Parsed {
    // The fast path reads only the fields this version knows, straight into their slots,
    // and skips the others unread (no map, no key strings).
    if let Ok(top) = serde_json::from_slice::<Top>(line) {
        return Parsed {
            req: top.req,
            request: parse_object(&top.fields),
        };
    }
    // Not a JSON object: say why, through the general parser (rare, so its cost is no matter).
    parse_general(line)
}

/// What `parse_line` answers, through a whole `serde_json::Value`: the reference the fast path
/// is tested against, and the path that explains unreadable lines.
fn parse_general(line: &[u8]) -> Parsed {
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return Parsed {
                req: Value::Null,
                request: Err(format!("not JSON: {e}")),
            };
        }
    };
    let Value::Object(obj) = value else {
        return Parsed {
            req: Value::Null,
            request: Err("a request must be a JSON object".into()),
        };
    };
    let mut top = Top::default();
    for (key, value) in obj {
        top.set(Key::of(&key), value);
    }
    Parsed {
        req: top.req,
        request: parse_object(&top.fields),
    }
}

/// A request line's `req` and the fields this version reads. Unknown fields are skipped, and a
/// field given twice keeps its last value, as with a JSON map.
#[derive(Default)]
struct Top {
    req: Value,
    fields: Fields,
}

#[derive(Default)]
struct Fields {
    op: Option<Value>,
    id: Option<Value>,
    due_ms: Option<Value>,
    delay_ms: Option<Value>,
    payload: Option<Value>,
    payload_b64: Option<Value>,
    attempt: Option<Value>,
    error: Option<Value>,
    retryable: Option<Value>,
    max_attempts: Option<Value>,
    backoff: Option<Value>,
    tenant: Option<Value>,
    lease_ms: Option<Value>,
    ids: Option<Value>,
    after: Option<Value>,
    limit: Option<Value>,
    all: Option<Value>,
    key: Option<Value>,
    cron: Option<Value>,
    tz: Option<Value>,
    every_ms: Option<Value>,
    misfire: Option<Value>,
    backfill_max: Option<Value>,
}

impl Fields {
    fn get(&self, field: &str) -> Option<&Value> {
        match Key::of(field) {
            Key::Op => self.op.as_ref(),
            Key::Id => self.id.as_ref(),
            Key::DueMs => self.due_ms.as_ref(),
            Key::DelayMs => self.delay_ms.as_ref(),
            Key::Payload => self.payload.as_ref(),
            Key::PayloadB64 => self.payload_b64.as_ref(),
            Key::Attempt => self.attempt.as_ref(),
            Key::Error => self.error.as_ref(),
            Key::Retryable => self.retryable.as_ref(),
            Key::MaxAttempts => self.max_attempts.as_ref(),
            Key::Backoff => self.backoff.as_ref(),
            Key::Tenant => self.tenant.as_ref(),
            Key::LeaseMs => self.lease_ms.as_ref(),
            Key::Ids => self.ids.as_ref(),
            Key::After => self.after.as_ref(),
            Key::Limit => self.limit.as_ref(),
            Key::All => self.all.as_ref(),
            Key::Idem => self.key.as_ref(),
            Key::Cron => self.cron.as_ref(),
            Key::Tz => self.tz.as_ref(),
            Key::EveryMs => self.every_ms.as_ref(),
            Key::Misfire => self.misfire.as_ref(),
            Key::Backfill => self.backfill_max.as_ref(),
            Key::Req | Key::Other => None,
        }
    }
}

impl Top {
    fn set(&mut self, key: Key, value: Value) {
        let f = &mut self.fields;
        let slot = match key {
            Key::Req => {
                self.req = value;
                return;
            }
            Key::Other => return,
            Key::Op => &mut f.op,
            Key::Id => &mut f.id,
            Key::DueMs => &mut f.due_ms,
            Key::DelayMs => &mut f.delay_ms,
            Key::Payload => &mut f.payload,
            Key::PayloadB64 => &mut f.payload_b64,
            Key::Attempt => &mut f.attempt,
            Key::Error => &mut f.error,
            Key::Retryable => &mut f.retryable,
            Key::MaxAttempts => &mut f.max_attempts,
            Key::Backoff => &mut f.backoff,
            Key::Tenant => &mut f.tenant,
            Key::LeaseMs => &mut f.lease_ms,
            Key::Ids => &mut f.ids,
            Key::After => &mut f.after,
            Key::Limit => &mut f.limit,
            Key::All => &mut f.all,
            Key::Idem => &mut f.key,
            Key::Cron => &mut f.cron,
            Key::Tz => &mut f.tz,
            Key::EveryMs => &mut f.every_ms,
            Key::Misfire => &mut f.misfire,
            Key::Backfill => &mut f.backfill_max,
        };
        *slot = Some(value);
    }
}

/// The name of a request field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Req,
    Op,
    Id,
    DueMs,
    DelayMs,
    Payload,
    PayloadB64,
    Attempt,
    Error,
    Retryable,
    MaxAttempts,
    Backoff,
    Tenant,
    LeaseMs,
    Ids,
    After,
    Limit,
    All,
    Idem,
    Cron,
    Tz,
    EveryMs,
    Misfire,
    Backfill,
    Other,
}

impl Key {
    fn of(name: &str) -> Key {
        match name {
            "req" => Key::Req,
            "op" => Key::Op,
            "id" => Key::Id,
            "due_ms" => Key::DueMs,
            "delay_ms" => Key::DelayMs,
            "payload" => Key::Payload,
            "payload_b64" => Key::PayloadB64,
            "attempt" => Key::Attempt,
            "error" => Key::Error,
            "retryable" => Key::Retryable,
            "max_attempts" => Key::MaxAttempts,
            "backoff" => Key::Backoff,
            "tenant" => Key::Tenant,
            "lease_ms" => Key::LeaseMs,
            "ids" => Key::Ids,
            "after" => Key::After,
            "limit" => Key::Limit,
            "all" => Key::All,
            "key" => Key::Idem,
            "cron" => Key::Cron,
            "tz" => Key::Tz,
            "every_ms" => Key::EveryMs,
            "misfire" => Key::Misfire,
            "backfill_max" => Key::Backfill,
            _ => Key::Other,
        }
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Key, E> {
                Ok(Key::of(name))
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Top {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TopVisitor;
        impl<'de> Visitor<'de> for TopVisitor {
            type Value = Top;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
                let mut top = Top::default();
                while let Some(key) = map.next_key::<Key>()? {
                    if key == Key::Other {
                        map.next_value::<IgnoredAny>()?;
                    } else {
                        top.set(key, map.next_value()?);
                    }
                }
                Ok(top)
            }
        }
        d.deserialize_map(TopVisitor)
    }
}

fn parse_object(obj: &Fields) -> Result<Request, String> {
    let op = match obj.get("op") {
        Some(Value::String(op)) => op.as_str(),
        Some(_) => return Err("field op: must be a string".into()),
        None => return Err("missing field op".into()),
    };
    // Unknown fields are ignored, so that a client written for a later, extended version of
    // the protocol still works here for the requests both understand.
    match op {
        "schedule" => parse_schedule(obj).map(Request::Schedule),
        "cancel" => Ok(Request::Cancel(id_field(obj)?)),
        "reschedule" => {
            let id = id_field(obj)?;
            let due_ms = opt_u64(obj, "due_ms")?.ok_or("missing field due_ms")?;
            Ok(Request::Reschedule(id, due_ms))
        }
        "complete" => Ok(Request::Complete(id_field(obj)?, attempt_field(obj)?)),
        "fail" => {
            let id = id_field(obj)?;
            let error = opt_str(obj, "error")?.unwrap_or_default();
            let retryable = opt_bool(obj, "retryable")?.unwrap_or(false);
            Ok(Request::Fail(
                id,
                error.to_owned(),
                attempt_field(obj)?,
                retryable,
            ))
        }
        "retry" => {
            let id = id_field(obj)?;
            let when = match (opt_u64(obj, "due_ms")?, opt_u64(obj, "delay_ms")?) {
                (Some(t), None) => RetryWhen::At(t),
                (None, Some(d)) => RetryWhen::After(d),
                (Some(_), Some(_)) => return Err("give due_ms or delay_ms, not both".into()),
                (None, None) => return Err("missing field due_ms (or delay_ms)".into()),
            };
            Ok(Request::Retry(id, when, attempt_field(obj)?))
        }
        "extend" => {
            let id = id_field(obj)?;
            let lease_ms = opt_u64(obj, "lease_ms")?.ok_or("missing field lease_ms")?;
            Ok(Request::Extend(id, lease_ms, attempt_field(obj)?))
        }
        "dlq_list" => {
            let after = after_field(obj)?;
            let q = crate::job::DeadQuery {
                tenant: opt_u32(obj, "tenant")?,
                after,
                limit: opt_u64(obj, "limit")?
                    .map_or(1_000, |l| usize::try_from(l).unwrap_or(usize::MAX)),
            };
            Ok(Request::DlqList(q))
        }
        "dlq_requeue" => Ok(Request::DlqRequeue(ids_field(obj)?)),
        "schedules_list" => {
            let after = after_field(obj)?;
            let limit =
                opt_u64(obj, "limit")?.map_or(1_000, |l| usize::try_from(l).unwrap_or(usize::MAX));
            Ok(Request::SchedulesList(after, limit))
        }
        "schedule_pause" => Ok(Request::ScheduleOp(ScheduleVerb::Pause, id_field(obj)?)),
        "schedule_resume" => Ok(Request::ScheduleOp(ScheduleVerb::Resume, id_field(obj)?)),
        "schedule_delete" => Ok(Request::ScheduleOp(ScheduleVerb::Delete, id_field(obj)?)),
        "dlq_purge" => {
            let given = [
                obj.get("id").is_some() || obj.get("ids").is_some(),
                obj.get("tenant").is_some(),
                obj.get("all").is_some(),
            ];
            if given.iter().filter(|&&g| g).count() != 1 {
                return Err("give one of id, ids, tenant or all".into());
            }
            if given[0] {
                Ok(Request::DlqPurge(Purge::Ids(ids_field(obj)?)))
            } else if given[1] {
                Ok(Request::DlqPurge(Purge::Tenant(
                    opt_u32(obj, "tenant")?.ok_or("field tenant: must be a number")?,
                )))
            } else if opt_bool(obj, "all")? == Some(true) {
                Ok(Request::DlqPurge(Purge::All))
            } else {
                Err("field all: must be true".into())
            }
        }
        "stats" => Ok(Request::Stats),
        "shutdown" => Ok(Request::Shutdown),
        other => Err(format!("unknown op {other:?}")),
    }
}

fn parse_schedule(obj: &Fields) -> Result<JobSpec, String> {
    let recurrence = match (opt_str(obj, "cron")?, opt_u64(obj, "every_ms")?) {
        (Some(_), Some(_)) => return Err("give cron or every_ms, not both".into()),
        (Some(expr), None) => {
            let tz = opt_str(obj, "tz")?.unwrap_or("UTC");
            Some(crate::recur::Recurrence::cron(expr, tz).map_err(|e| e.to_string())?)
        }
        (None, Some(ms)) => {
            // The grid starts at the given due time, else at acceptance.
            let anchor = opt_u64(obj, "due_ms")?
                .unwrap_or_else(|| crate::clock::Clock::now_ms(&crate::clock::SystemClock));
            Some(crate::recur::Recurrence::every(ms, anchor).map_err(|e| e.to_string())?)
        }
        (None, None) => {
            if obj.get("tz").is_some() || obj.get("misfire").is_some() {
                return Err("tz and misfire go with cron or every_ms".into());
            }
            None
        }
    };
    let mut spec = match recurrence {
        None => parse_schedule_due_and_payload(obj)?,
        Some(r) => {
            let misfire = match opt_str(obj, "misfire")? {
                None | Some("coalesce") => crate::job::Misfire::Coalesce,
                Some("skip") => crate::job::Misfire::Skip,
                Some("fire_all") => crate::job::Misfire::FireAll {
                    backfill_max: opt_u32(obj, "backfill_max")?.unwrap_or(u32::MAX),
                },
                Some(other) => {
                    return Err(format!(
                        "field misfire: {other:?}; one of coalesce, fire_all, skip"
                    ));
                }
            };
            let spec = JobSpec::recurring(r).misfire(misfire);
            match (opt_str(obj, "payload")?, opt_str(obj, "payload_b64")?) {
                (Some(_), Some(_)) => return Err("give payload or payload_b64, not both".into()),
                (Some(text), None) => spec.payload(text.as_bytes()),
                (None, Some(b64)) => spec
                    .payload(
                        BASE64
                            .decode(b64)
                            .map_err(|e| format!("field payload_b64: not standard base64: {e}"))?,
                    )
                    .binary(true),
                (None, None) => spec,
            }
        }
    };
    if let Some(t) = opt_u32(obj, "tenant")? {
        spec = spec.tenant(t);
    }
    if let Some(k) = opt_str(obj, "key")? {
        spec = spec.key(k.as_bytes());
    }
    if let Some(m) = opt_u32(obj, "max_attempts")? {
        if m == 0 {
            return Err("field max_attempts: at least 1".into());
        }
        spec = spec.max_attempts(m);
    }
    match obj.get("backoff") {
        None | Some(Value::Null) => {}
        Some(Value::Object(b)) => {
            let ms = |name: &str| match b.get(name) {
                Some(Value::Number(n)) => n
                    .as_u64()
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| format!("field backoff.{name}: {n} is out of range")),
                _ => Err(format!("field backoff.{name}: missing, or not a number")),
            };
            spec = spec.backoff(crate::job::Backoff::new(ms("base_ms")?, ms("cap_ms")?));
        }
        Some(_) => return Err("field backoff: must be an object {base_ms, cap_ms}".into()),
    }
    Ok(spec)
}

fn parse_schedule_due_and_payload(obj: &Fields) -> Result<JobSpec, String> {
    let spec = match (opt_u64(obj, "due_ms")?, opt_u64(obj, "delay_ms")?) {
        (Some(due_ms), None) => JobSpec::at(due_ms),
        (None, Some(delay_ms)) => JobSpec::after(Duration::from_millis(delay_ms)),
        (Some(_), Some(_)) => return Err("give due_ms or delay_ms, not both".into()),
        (None, None) => return Err("missing field due_ms (or delay_ms)".into()),
    };
    match (opt_str(obj, "payload")?, opt_str(obj, "payload_b64")?) {
        (Some(_), Some(_)) => Err("give payload or payload_b64, not both".into()),
        (Some(text), None) => Ok(spec.payload(text.as_bytes())),
        (None, Some(b64)) => {
            let bytes = BASE64
                .decode(b64)
                .map_err(|e| format!("field payload_b64: not standard base64: {e}"))?;
            Ok(spec.payload(bytes).binary(true))
        }
        (None, None) => Ok(spec),
    }
}

/// A job id: a JSON string of decimal digits that fits a u64. Numbers are refused because
/// a JavaScript client would already have rounded a large one.
fn id_field(obj: &Fields) -> Result<JobId, String> {
    match obj.get("id") {
        None | Some(Value::Null) => Err("missing field id".into()),
        Some(Value::String(s)) => parse_id(s).ok_or_else(|| {
            format!("field id: {s:?} is not a string of decimal digits that fits a u64")
        }),
        Some(_) => Err("field id: must be a string of decimal digits".into()),
    }
}

/// Parses a decimal job id; `u64::from_str` alone would also take a leading `+`.
pub fn parse_id(s: &str) -> Option<JobId> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().map(JobId)
}

/// The optional `attempt` of complete and fail.
fn attempt_field(obj: &Fields) -> Result<Option<u32>, String> {
    match opt_u64(obj, "attempt")? {
        None => Ok(None),
        Some(n) => u32::try_from(n)
            .map(Some)
            .map_err(|_| format!("field attempt: {n} is out of range")),
    }
}

/// An optional non-negative integer field; `null` counts as absent, as many JSON writers emit
/// it for an unset optional.
fn opt_u64(obj: &Fields, field: &str) -> Result<Option<u64>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("field {field}: {n} is not a whole number of ms in 0..=2^64-1")),
        Some(_) => Err(format!("field {field}: must be a number")),
    }
}

/// The optional `after` of a listing: where the previous page ended, a string id.
fn after_field(obj: &Fields) -> Result<Option<JobId>, String> {
    match obj.get("after") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_id(s)
            .map(Some)
            .ok_or_else(|| format!("field after: {s:?} is not a job id")),
        Some(_) => Err("field after: must be a string id".into()),
    }
}

/// An optional field that fits a u32.
fn opt_u32(obj: &Fields, field: &str) -> Result<Option<u32>, String> {
    opt_u64(obj, field)?
        .map(|n| u32::try_from(n).map_err(|_| format!("field {field}: {n} is out of range")))
        .transpose()
}

/// An optional boolean field; `null` counts as absent.
fn opt_bool(obj: &Fields, field: &str) -> Result<Option<bool>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("field {field}: must be true or false")),
    }
}

/// `"id":"ID"` or `"ids":["ID", ...]` (at least one).
fn ids_field(obj: &Fields) -> Result<Vec<JobId>, String> {
    match (obj.get("id"), obj.get("ids")) {
        (Some(_), Some(_)) => Err("give id or ids, not both".into()),
        (Some(_), None) => Ok(vec![id_field(obj)?]),
        (None, Some(Value::Array(items))) if !items.is_empty() => items
            .iter()
            .map(|v| match v {
                Value::String(s) => parse_id(s)
                    .ok_or_else(|| format!("field ids: {s:?} is not a string of decimal digits")),
                _ => Err("field ids: must hold string ids".into()),
            })
            .collect(),
        (None, Some(_)) => Err("field ids: must be a non-empty array of string ids".into()),
        (None, None) => Err("missing field id (or ids)".into()),
    }
}

/// An optional string field; `null` counts as absent.
fn opt_str<'a>(obj: &'a Fields, field: &str) -> Result<Option<&'a str>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("field {field}: must be a string")),
    }
}

/// The body of a reply, after `"req"` and `"ok"`.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `"ok":true` and nothing else (complete, fail, shutdown).
    Done,
    /// The id of a scheduled job.
    Scheduled(JobId),
    /// Whether a cancel took effect.
    Cancelled(bool),
    /// Whether a reschedule took effect.
    Rescheduled(bool),
    /// The engine's counters.
    Stats(Box<Stats>),
    /// The new end of an extended lease.
    LeaseUntil(u64),
    /// A page of the dead-letter set, and the id to pass as `after` for the next one.
    Dead(Vec<crate::job::DeadJob>, Option<JobId>),
    /// Dead jobs requeued.
    Requeued(u64),
    /// Dead jobs purged.
    Purged(u64),
    /// Recurring jobs.
    Schedules(Vec<crate::engine::ScheduleInfo>),
    /// Whether a schedule op took effect.
    ScheduleDone(bool),
    /// `"ok":false` with an error kind and message.
    Error {
        /// `bad_request`, `invalid_input`, `not_found`, or [`error_kind`].
        kind: &'static str,
        /// For humans.
        message: String,
    },
}

impl Reply {
    /// A `bad_request` error.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Reply::Error {
            kind: "bad_request",
            message: message.into(),
        }
    }

    /// A `not_found` error: complete or fail of a job this sidecar does not hold a claim on.
    pub fn not_found(id: JobId) -> Self {
        Reply::Error {
            kind: "not_found",
            message: format!(
                "job {id} is not claimed by this sidecar (never delivered, already finished, or its lease ran out)"
            ),
        }
    }

    /// The reply for an engine error.
    pub fn engine_error(e: &Error) -> Self {
        Reply::Error {
            kind: error_kind(e),
            message: e.to_string(),
        }
    }
}

/// Serialized field by field in this order, so that every line reads
/// `{"req":..,"ok":..,<body>}`.
#[derive(Serialize)]
struct ReplyLine<'a> {
    req: &'a Value,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cancelled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rescheduled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stats: Option<StatsJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_until_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jobs: Option<Vec<DeadJson<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    requeued: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    purged: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    schedules: Option<Vec<ScheduleJson>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    done: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorJson<'a>>,
}

/// A recurring job in a `schedules_list` reply.
#[derive(Serialize)]
struct ScheduleJson {
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tz: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    every_ms: Option<u64>,
    misfire: &'static str,
    due_ms: u64,
    paused: bool,
    tenant: u32,
}

/// A dead job in a `dlq_list` reply.
#[derive(Serialize)]
struct DeadJson<'a> {
    id: String,
    tenant: u32,
    due_ms: u64,
    attempt: u32,
    failures: u32,
    died_at_ms: u64,
    error: &'a str,
    expired: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_b64: Option<String>,
}

#[derive(Serialize)]
struct ErrorJson<'a> {
    kind: &'a str,
    message: &'a str,
}

/// The stats object of a reply. Counts of jobs by state first (the contract's minimum), then
/// the queue and lateness figures.
#[derive(Serialize)]
struct StatsJson {
    scheduled: u64,
    ready: u64,
    running: u64,
    completed: u64,
    cancelled: u64,
    failed: u64,
    dead: u64,
    retried: u64,
    deduplicated: u64,
    ready_queue_depth: u64,
    overdue: u64,
    fired: u64,
    redelivered: u64,
    missed_at_open: u64,
    crashed_runs: u64,
    lateness_us_p50: u64,
    lateness_us_p99: u64,
    lateness_us_p999: u64,
    lateness_us_max: u64,
    requeued: u64,
    claim_wait_us_p50: u64,
    claim_wait_us_p99: u64,
    claim_wait_us_max: u64,
}

impl From<&Stats> for StatsJson {
    fn from(s: &Stats) -> Self {
        StatsJson {
            scheduled: s.scheduled,
            ready: s.ready,
            running: s.running,
            completed: s.completed,
            cancelled: s.cancelled,
            failed: s.failed,
            dead: s.dead,
            retried: s.retried,
            deduplicated: s.deduplicated,
            ready_queue_depth: s.ready_queue_depth as u64,
            overdue: s.overdue,
            fired: s.fired,
            redelivered: s.redelivered,
            missed_at_open: s.missed_at_open,
            crashed_runs: s.crashed_runs,
            lateness_us_p50: s.lateness_us_p50,
            lateness_us_p99: s.lateness_us_p99,
            lateness_us_p999: s.lateness_us_p999,
            lateness_us_max: s.lateness_us_max,
            requeued: s.requeued,
            claim_wait_us_p50: s.claim_wait_us_p50,
            claim_wait_us_p99: s.claim_wait_us_p99,
            claim_wait_us_max: s.claim_wait_us_max,
        }
    }
}

/// Renders a reply as one line, newline included.
pub fn render_reply(req: &Value, reply: &Reply) -> Vec<u8> {
    let mut line = ReplyLine {
        req,
        ok: !matches!(reply, Reply::Error { .. }),
        id: None,
        cancelled: None,
        rescheduled: None,
        stats: None,
        lease_until_ms: None,
        jobs: None,
        next_after: None,
        requeued: None,
        purged: None,
        schedules: None,
        done: None,
        error: None,
    };
    match reply {
        Reply::Schedules(list) => {
            line.schedules = Some(
                list.iter()
                    .map(|s| {
                        let (cron, tz, every_ms) = match &s.recurring.recurrence {
                            crate::recur::Recurrence::Cron(c) => (
                                Some(c.expr().to_owned()),
                                Some(c.zone().name().to_owned()),
                                None,
                            ),
                            crate::recur::Recurrence::Every(e) => {
                                (None, None, Some(e.interval_ms()))
                            }
                        };
                        ScheduleJson {
                            id: s.id.to_string(),
                            cron,
                            tz,
                            every_ms,
                            misfire: match s.recurring.misfire {
                                crate::job::Misfire::Coalesce => "coalesce",
                                crate::job::Misfire::FireAll { .. } => "fire_all",
                                crate::job::Misfire::Skip => "skip",
                            },
                            due_ms: s.due_ms,
                            paused: s.paused,
                            tenant: s.tenant,
                        }
                    })
                    .collect(),
            );
        }
        Reply::ScheduleDone(b) => line.done = Some(*b),
        Reply::LeaseUntil(t) => line.lease_until_ms = Some(*t),
        Reply::Dead(jobs, next) => {
            line.jobs = Some(
                jobs.iter()
                    .map(|d| {
                        let (payload, payload_b64) = payload_fields(&d.payload, d.binary);
                        DeadJson {
                            id: d.id.to_string(),
                            tenant: d.tenant,
                            due_ms: d.due_ms,
                            attempt: d.attempt,
                            failures: d.failures,
                            died_at_ms: d.died_at_ms,
                            error: &d.reason,
                            expired: d.expired,
                            payload,
                            payload_b64,
                        }
                    })
                    .collect(),
            );
            line.next_after = next.map(|id| id.to_string());
        }
        Reply::Requeued(n) => line.requeued = Some(*n),
        Reply::Purged(n) => line.purged = Some(*n),
        Reply::Done => {}
        Reply::Scheduled(id) => line.id = Some(id.to_string()),
        Reply::Cancelled(b) => line.cancelled = Some(*b),
        Reply::Rescheduled(b) => line.rescheduled = Some(*b),
        Reply::Stats(s) => line.stats = Some(StatsJson::from(&**s)),
        Reply::Error { kind, message } => {
            line.error = Some(ErrorJson {
                kind,
                message: message.as_str(),
            });
        }
    }
    to_line(&line)
}

#[derive(Serialize)]
struct FiredLine<'a> {
    event: &'static str,
    id: String,
    due_ms: u64,
    fired_ms: u64,
    attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_b64: Option<String>,
}

/// Renders the `fired` event of a claimed job, newline included. A job scheduled with
/// `payload_b64` reports `payload_b64`; a text job reports `payload` (also when empty). A job
/// marked text whose bytes are not UTF-8 (scheduled through the library) falls back to
/// `payload_b64` rather than lose bytes.
pub fn render_fired(job: &Claimed, fired_ms: u64) -> Vec<u8> {
    let (payload, payload_b64) = payload_fields(&job.payload, job.binary);
    let line = FiredLine {
        event: "fired",
        id: job.id.to_string(),
        due_ms: job.due_ms,
        fired_ms,
        attempt: job.attempt,
        payload,
        payload_b64,
    };
    to_line(&line)
}

/// `payload` for text, `payload_b64` for binary payloads (and text ones that are not UTF-8).
fn payload_fields(payload: &[u8], binary: bool) -> (Option<&str>, Option<String>) {
    let text = if binary {
        None
    } else {
        std::str::from_utf8(payload).ok()
    };
    match text {
        Some(t) => (Some(t), None),
        None => (None, Some(BASE64.encode(payload))),
    }
}

/// The protocol's short, stable name for the kind of an engine error.
pub fn error_kind(e: &Error) -> &'static str {
    match e {
        Error::Locked => "locked",
        Error::Corrupted { .. }
        | Error::CorruptedStore { .. }
        | Error::UndecodableRecord { .. } => "corrupted",
        Error::Io(_) | Error::Wal(_) => "io",
        Error::NoSpace { .. } => "no_space",
        Error::Poisoned => "poisoned",
        Error::InvalidInput { .. } => "invalid_input",
        Error::Closed => "closed",
    }
}

fn to_line(value: &impl Serialize) -> Vec<u8> {
    // Serializing plain structs of strings and numbers into memory can not fail.
    let mut out = serde_json::to_vec(value).expect("reply serializes");
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn parse(v: &str) -> Parsed {
        parse_line(v.as_bytes())
    }

    fn bad(v: &str) -> (Value, String) {
        let p = parse(v);
        (p.req, p.request.expect_err("should be a bad request"))
    }

    #[test]
    fn schedule_takes_due_or_delay_and_text_or_binary_payload() {
        let p = parse(r#"{"op":"schedule","req":1,"due_ms":5,"payload":"hi"}"#);
        assert_eq!(p.req, json!(1));
        assert_eq!(
            p.request,
            Ok(Request::Schedule(JobSpec::at(5).payload("hi")))
        );
        let p = parse(r#"{"op":"schedule","delay_ms":7,"payload_b64":"/wA="}"#);
        let want = JobSpec::after(Duration::from_millis(7))
            .payload(vec![0xff, 0])
            .binary(true);
        assert_eq!(p.request, Ok(Request::Schedule(want)));
        // null counts as absent for optional fields.
        let p = parse(r#"{"op":"schedule","due_ms":1,"delay_ms":null,"payload":null}"#);
        assert_eq!(p.request, Ok(Request::Schedule(JobSpec::at(1))));
    }

    #[test]
    fn schedule_refuses_ambiguous_or_malformed_fields() {
        for line in [
            r#"{"op":"schedule","req":"r"}"#,
            r#"{"op":"schedule","req":"r","due_ms":1,"delay_ms":2}"#,
            r#"{"op":"schedule","req":"r","due_ms":-1}"#,
            r#"{"op":"schedule","req":"r","due_ms":1.5}"#,
            r#"{"op":"schedule","req":"r","due_ms":"1"}"#,
            r#"{"op":"schedule","req":"r","due_ms":1,"payload":"a","payload_b64":"YQ=="}"#,
            r#"{"op":"schedule","req":"r","due_ms":1,"payload":5}"#,
            r#"{"op":"schedule","req":"r","due_ms":1,"payload_b64":"not base64!"}"#,
        ] {
            let (req, _) = bad(line);
            assert_eq!(req, json!("r"), "{line}");
        }
    }

    #[test]
    fn ids_are_strings_of_decimal_digits_that_fit_a_u64() {
        let p = parse(r#"{"op":"cancel","id":"18446744073709551615"}"#);
        assert_eq!(p.request, Ok(Request::Cancel(JobId(u64::MAX))));
        for id in [
            "5",
            "\"\"",
            "\"+5\"",
            "\"-5\"",
            "\"5a\"",
            "\" 5\"",
            "\"18446744073709551616\"",
            "null",
            "[\"5\"]",
        ] {
            let line = format!(r#"{{"op":"complete","req":[1],"id":{id}}}"#);
            let (req, _) = bad(&line);
            assert_eq!(req, json!([1]), "{line}");
        }
        assert_eq!(parse_id("007"), Some(JobId(7)));
    }

    #[test]
    fn other_ops_parse() {
        let p = parse(r#"{"op":"reschedule","id":"3","due_ms":9}"#);
        assert_eq!(p.request, Ok(Request::Reschedule(JobId(3), 9)));
        assert!(bad(r#"{"op":"reschedule","id":"3"}"#).1.contains("due_ms"));
        let p = parse(r#"{"op":"fail","id":"3","error":"boom"}"#);
        assert_eq!(
            p.request,
            Ok(Request::Fail(JobId(3), "boom".into(), None, false))
        );
        let p = parse(r#"{"op":"fail","id":"3","attempt":2}"#);
        assert_eq!(
            p.request,
            Ok(Request::Fail(JobId(3), String::new(), Some(2), false))
        );
        let p = parse(r#"{"op":"complete","id":"3","attempt":1}"#);
        assert_eq!(p.request, Ok(Request::Complete(JobId(3), Some(1))));
        assert!(
            bad(r#"{"op":"complete","id":"3","attempt":4294967296}"#)
                .1
                .contains("attempt")
        );
        assert!(
            bad(r#"{"op":"complete","id":"3","attempt":"1"}"#)
                .1
                .contains("attempt")
        );
        assert_eq!(parse(r#"{"op":"stats"}"#).request, Ok(Request::Stats));
        let p = parse(r#"{"op":"shutdown","extra":1}"#);
        assert_eq!(p.request, Ok(Request::Shutdown));
    }

    #[test]
    fn the_fast_parser_answers_what_the_general_one_does() {
        let lines = [
            r#"{"op":"schedule","req":1,"due_ms":5,"payload":"hi"}"#,
            r#"{"op":"schedule","delay_ms":7,"payload_b64":"/wA="}"#,
            r#"{"op":"schedule","due_ms":1,"delay_ms":null,"payload":null}"#,
            r#"{"op":"schedule","req":"r","due_ms":1,"delay_ms":2}"#,
            r#"{"op":"schedule","req":"r","due_ms":-1}"#,
            r#"{"op":"schedule","req":"r","due_ms":1.5,"extra":{"a":[1,2,{"b":null}]}}"#,
            r#"{"op":"schedule","req":"r","due_ms":1,"payload":5}"#,
            r#"{"op":"cancel","id":"18446744073709551615"}"#,
            r#"{"op":"cancel","id":"18446744073709551616","req":{"x":1}}"#,
            r#"{"op":"complete","id":"3","attempt":4294967296}"#,
            r#"{"op":"fail","id":"3","error":"boom","attempt":2}"#,
            r#"{"op":"fail","id":"3","error":7}"#,
            r#"{"op":"reschedule","id":"3"}"#,
            r#"{"op":"frobnicate","req":{"a":[1]}}"#,
            r#"{"op":7,"req":7}"#,
            r#"{"req":"x"}"#,
            r#"{"op":"cancel","id":"1","id":"2","req":1,"req":[2]}"#,
            r#"{"\u006fp":"stats","r\u0065q":"e"}"#,
            r#"  {"op":"stats"}  "#,
            "{}",
        ];
        for line in lines {
            assert_eq!(
                parse_line(line.as_bytes()),
                parse_general(line.as_bytes()),
                "{line}"
            );
        }
    }

    #[test]
    fn unknown_fields_are_skipped_and_a_repeated_field_keeps_its_last_value() {
        let p = parse(
            r#"{"x":{"deep":[1,{"op":"cancel"}]},"op":"cancel","id":"1","id":"2","req":1,"req":[2],"y":null}"#,
        );
        assert_eq!(p.req, json!([2]));
        assert_eq!(p.request, Ok(Request::Cancel(JobId(2))));
        // Escaped names are names like any other.
        let p = parse(r#"{"\u006fp":"stats","r\u0065q":"e"}"#);
        assert_eq!((p.req, p.request), (json!("e"), Ok(Request::Stats)));
    }

    #[test]
    fn unreadable_lines_have_a_null_req_and_bad_ops_keep_theirs() {
        assert_eq!(bad("not json").0, Value::Null);
        assert_eq!(bad("").0, Value::Null);
        assert_eq!(bad("[1,2]").0, Value::Null);
        assert_eq!(bad(r#"{"req":1,"op":"x"} trailing"#).0, Value::Null);
        assert_eq!(bad(&String::from_utf8_lossy(b"\xff\xfe")).0, Value::Null);
        assert_eq!(
            bad(r#"{"op":"frobnicate","req":{"a":[1]}}"#).0,
            json!({"a":[1]})
        );
        assert_eq!(bad(r#"{"op":7,"req":7}"#).0, json!(7));
        assert_eq!(bad(r#"{"req":"x"}"#).0, json!("x"));
    }

    fn line_json(bytes: &[u8]) -> Value {
        assert_eq!(bytes.last(), Some(&b'\n'));
        assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 1);
        serde_json::from_slice(bytes).expect("valid JSON")
    }

    #[test]
    fn replies_echo_req_and_carry_their_body() {
        let req = json!({"n": 2});
        let r = render_reply(&req, &Reply::Scheduled(JobId(42)));
        assert_eq!(line_json(&r), json!({"req":{"n":2},"ok":true,"id":"42"}));
        assert!(r.starts_with(br#"{"req":{"n":2},"ok":true,"id":"42"}"#));
        let r = render_reply(&Value::Null, &Reply::Cancelled(false));
        assert_eq!(
            line_json(&r),
            json!({"req":null,"ok":true,"cancelled":false})
        );
        let r = render_reply(&json!(1), &Reply::Rescheduled(true));
        assert_eq!(line_json(&r), json!({"req":1,"ok":true,"rescheduled":true}));
        let r = render_reply(&json!("x"), &Reply::Done);
        assert_eq!(line_json(&r), json!({"req":"x","ok":true}));
        let r = render_reply(&json!(1), &Reply::bad_request("line\nbreak"));
        assert_eq!(
            line_json(&r),
            json!({"req":1,"ok":false,"error":{"kind":"bad_request","message":"line\nbreak"}})
        );
        let e = Error::invalid("payload", "too big");
        let r = line_json(&render_reply(&json!(1), &Reply::engine_error(&e)));
        assert_eq!(r["error"]["kind"], "invalid_input");
        let r = line_json(&render_reply(&json!(1), &Reply::not_found(JobId(9))));
        assert_eq!(r["error"]["kind"], "not_found");
    }

    #[test]
    fn stats_reply_has_the_counts_by_state() {
        let s = Stats {
            scheduled: 1,
            completed: 2,
            ..Stats::default()
        };
        let r = line_json(&render_reply(&json!(0), &Reply::Stats(Box::new(s))));
        for k in [
            "scheduled",
            "ready",
            "running",
            "completed",
            "cancelled",
            "failed",
            "dead",
            "retried",
            "ready_queue_depth",
            "overdue",
            "fired",
            "missed_at_open",
            "crashed_runs",
            "lateness_us_p50",
            "lateness_us_p99",
            "lateness_us_p999",
            "lateness_us_max",
            "requeued",
            "claim_wait_us_p50",
            "claim_wait_us_p99",
            "claim_wait_us_max",
        ] {
            assert!(r["stats"][k].is_u64(), "{k} in {r}");
        }
        assert_eq!(r["stats"]["scheduled"], 1);
        assert_eq!(r["stats"]["completed"], 2);
    }

    #[test]
    fn lifecycle_ops_parse_and_old_requests_keep_their_meaning() {
        let p = parse(
            r#"{"op":"schedule","due_ms":5,"tenant":7,"max_attempts":3,"backoff":{"base_ms":10,"cap_ms":99},"key":"order-1"}"#,
        );
        assert_eq!(
            p.request,
            Ok(Request::Schedule(
                JobSpec::at(5)
                    .tenant(7)
                    .key("order-1")
                    .max_attempts(3)
                    .backoff(crate::job::Backoff::new(10, 99))
            ))
        );
        let p = parse(r#"{"op":"fail","id":"3","error":"x","retryable":true}"#);
        assert_eq!(
            p.request,
            Ok(Request::Fail(JobId(3), "x".into(), None, true))
        );
        // Without `retryable` a fail is what it was before retries: the job is not delivered
        // again (it goes to the dead-letter set).
        let p = parse(r#"{"op":"fail","id":"3","error":"x"}"#);
        assert_eq!(
            p.request,
            Ok(Request::Fail(JobId(3), "x".into(), None, false))
        );
        assert_eq!(
            parse(r#"{"op":"retry","id":"3","delay_ms":50,"attempt":2}"#).request,
            Ok(Request::Retry(JobId(3), RetryWhen::After(50), Some(2)))
        );
        assert_eq!(
            parse(r#"{"op":"extend","id":"3","lease_ms":9000}"#).request,
            Ok(Request::Extend(JobId(3), 9000, None))
        );
        assert_eq!(
            parse(r#"{"op":"dlq_list","tenant":2,"after":"8","limit":5}"#).request,
            Ok(Request::DlqList(crate::job::DeadQuery {
                tenant: Some(2),
                after: Some(JobId(8)),
                limit: 5
            }))
        );
        assert_eq!(
            parse(r#"{"op":"dlq_requeue","ids":["1","2"]}"#).request,
            Ok(Request::DlqRequeue(vec![JobId(1), JobId(2)]))
        );
        assert_eq!(
            parse(r#"{"op":"dlq_purge","all":true}"#).request,
            Ok(Request::DlqPurge(Purge::All))
        );
        assert_eq!(
            parse(r#"{"op":"dlq_purge","tenant":4}"#).request,
            Ok(Request::DlqPurge(Purge::Tenant(4)))
        );
        assert_eq!(
            parse(r#"{"op":"dlq_purge","id":"9"}"#).request,
            Ok(Request::DlqPurge(Purge::Ids(vec![JobId(9)])))
        );
        for line in [
            r#"{"op":"schedule","due_ms":5,"max_attempts":0}"#,
            r#"{"op":"schedule","due_ms":5,"backoff":{"base_ms":10}}"#,
            r#"{"op":"schedule","due_ms":5,"backoff":7}"#,
            r#"{"op":"schedule","due_ms":5,"tenant":4294967296}"#,
            r#"{"op":"fail","id":"3","retryable":"yes"}"#,
            r#"{"op":"retry","id":"3"}"#,
            r#"{"op":"retry","id":"3","due_ms":1,"delay_ms":1}"#,
            r#"{"op":"extend","id":"3"}"#,
            r#"{"op":"dlq_list","after":7}"#,
            r#"{"op":"dlq_requeue"}"#,
            r#"{"op":"dlq_requeue","ids":[]}"#,
            r#"{"op":"dlq_requeue","ids":[1]}"#,
            r#"{"op":"dlq_purge"}"#,
            r#"{"op":"dlq_purge","all":false}"#,
            r#"{"op":"dlq_purge","all":true,"tenant":1}"#,
        ] {
            assert!(parse(line).request.is_err(), "{line} must be a bad request");
        }
    }

    #[test]
    fn dead_letter_replies_render_their_fields() {
        let dead = crate::job::DeadJob {
            id: JobId(12),
            tenant: 3,
            key: None,
            due_ms: 10,
            attempt: 4,
            failures: 4,
            died_at_ms: 20,
            reason: Arc::from("declined"),
            expired: false,
            payload: Arc::from(&b"\xff"[..]),
            binary: true,
        };
        let r = line_json(&render_reply(
            &json!(1),
            &Reply::Dead(vec![dead], Some(JobId(12))),
        ));
        assert_eq!(
            r,
            json!({"req":1,"ok":true,"jobs":[{"id":"12","tenant":3,"due_ms":10,"attempt":4,
                   "failures":4,"died_at_ms":20,"error":"declined","expired":false,
                   "payload_b64":"/w=="}],"next_after":"12"})
        );
        assert_eq!(
            line_json(&render_reply(&json!(2), &Reply::Purged(3))),
            json!({"req":2,"ok":true,"purged":3})
        );
        assert_eq!(
            line_json(&render_reply(&json!(2), &Reply::LeaseUntil(77))),
            json!({"req":2,"ok":true,"lease_until_ms":77})
        );
    }

    fn claimed(payload: &[u8], binary: bool) -> Claimed {
        Claimed {
            id: JobId(u64::MAX),
            due_ms: 10,
            attempt: 2,
            payload: Arc::from(payload),
            binary,
            ready_at_ms: 12,
            lease_until_ms: 100,
        }
    }

    #[test]
    fn fired_events_report_text_or_base64_payloads() {
        let e = line_json(&render_fired(&claimed(b"hi \"there\"", false), 12));
        assert_eq!(
            e,
            json!({"event":"fired","id":"18446744073709551615","due_ms":10,"fired_ms":12,
                   "attempt":2,"payload":"hi \"there\""})
        );
        let e = line_json(&render_fired(&claimed(b"", false), 12));
        assert_eq!(e["payload"], "");
        let e = line_json(&render_fired(&claimed(&[0xff, 0, b'\n'], true), 12));
        assert_eq!(e["payload_b64"], "/wAK");
        assert!(e.get("payload").is_none());
        // Not UTF-8 although marked text: nothing is lost.
        let e = line_json(&render_fired(&claimed(&[0xc3], false), 12));
        assert_eq!(e["payload_b64"], "ww==");
    }
}
