//! The wire format: parsing a request line, rendering replies and events.
//!
//! Pure functions, no I/O, so that every rule of the contract (BRIEF.md section 4) is unit
//! tested here. The serving loop in [`super::serve`] only moves lines around.

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
    /// `"attempt"` like `Complete`.
    Fail(JobId, String, Option<u32>),
    /// `{"op":"stats"}`.
    Stats,
    /// `{"op":"shutdown"}`.
    Shutdown,
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
            Ok(Request::Fail(id, error.to_owned(), attempt_field(obj)?))
        }
        "stats" => Ok(Request::Stats),
        "shutdown" => Ok(Request::Shutdown),
        other => Err(format!("unknown op {other:?}")),
    }
}

fn parse_schedule(obj: &Fields) -> Result<JobSpec, String> {
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
    error: Option<ErrorJson<'a>>,
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
    ready_queue_depth: u64,
    overdue: u64,
    fired: u64,
    redelivered: u64,
    missed_at_open: u64,
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
            ready_queue_depth: s.ready_queue_depth as u64,
            overdue: s.overdue,
            fired: s.fired,
            redelivered: s.redelivered,
            missed_at_open: s.missed_at_open,
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
        error: None,
    };
    match reply {
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
    let text = if job.binary {
        None
    } else {
        std::str::from_utf8(&job.payload).ok()
    };
    let line = FiredLine {
        event: "fired",
        id: job.id.to_string(),
        due_ms: job.due_ms,
        fired_ms,
        attempt: job.attempt,
        payload: text,
        payload_b64: if text.is_none() {
            Some(BASE64.encode(&job.payload))
        } else {
            None
        },
    };
    to_line(&line)
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
        assert_eq!(p.request, Ok(Request::Fail(JobId(3), "boom".into(), None)));
        let p = parse(r#"{"op":"fail","id":"3","attempt":2}"#);
        assert_eq!(
            p.request,
            Ok(Request::Fail(JobId(3), String::new(), Some(2)))
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
            "ready_queue_depth",
            "overdue",
            "fired",
            "missed_at_open",
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
