//! The `timewheel serve` binary driven over pipes, as a client in another language would:
//! every rule of the sidecar protocol (BRIEF.md section 4) that a client can observe.
//!
//! Timeouts here only guard against hangs; no test asserts how long anything took.

mod common;

use common::TempDir;
use common::sidecar::{SEEN_MS, Sidecar, id_of, now_ms};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

const HOUR_MS: u64 = 3_600_000;

#[test]
fn a_scheduled_job_fires_once_and_is_completed() {
    // Schedule, see the event with the job's due time and payload, complete it: the counts
    // follow, and a second complete of the same job finds nothing.
    let dir = TempDir::new("fire");
    let mut s = Sidecar::start(&dir.0, &[]);
    let due_ms = now_ms() + 50;
    let id = s.schedule(json!({"due_ms": due_ms, "payload": "hello"}));
    let ev = s.fired(&id, 1);
    assert_eq!(ev["due_ms"], due_ms);
    assert_eq!(ev["payload"], "hello");
    assert!(ev.get("payload_b64").is_none());
    // Never early, by the test's clock when it read the line (the helper checks every
    // event so) and by the sidecar's own report.
    assert!(ev[SEEN_MS].as_u64().expect("stamped") >= due_ms, "{ev}");
    assert!(
        ev["fired_ms"].as_u64().expect("number") >= due_ms,
        "never early: {ev}"
    );
    assert_eq!(s.stats()["running"], 1);
    s.ok(json!({"op": "complete", "id": id}));
    assert_eq!(
        s.error_kind(json!({"op": "complete", "id": id})),
        "not_found"
    );
    let st = s.stats();
    assert_eq!(
        (st["completed"].as_u64(), st["running"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(st["fired"], 1);
    assert!(s.finish().success());
}

#[test]
fn cancel_is_true_once_and_false_after_or_for_unknown_ids() {
    // A pending job cancels once; the second cancel and an id never issued answer false.
    let dir = TempDir::new("cancel");
    let mut s = Sidecar::start(&dir.0, &[]);
    let id = s.schedule(json!({"delay_ms": HOUR_MS}));
    let other = s.schedule(json!({"delay_ms": HOUR_MS}));
    assert_eq!(s.ok(json!({"op": "cancel", "id": id}))["cancelled"], true);
    assert_eq!(s.ok(json!({"op": "cancel", "id": id}))["cancelled"], false);
    let unknown = json!({"op": "cancel", "id": "987654321"});
    assert_eq!(s.ok(unknown)["cancelled"], false);
    let st = s.stats();
    assert_eq!(
        (st["cancelled"].as_u64(), st["scheduled"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        s.ok(json!({"op": "cancel", "id": other}))["cancelled"],
        true
    );
    assert!(s.finish().success());
}

#[test]
fn reschedule_moves_a_pending_job() {
    // A job due in an hour, moved to now, fires with its new due time; unknown ids answer
    // false.
    let dir = TempDir::new("reschedule");
    let mut s = Sidecar::start(&dir.0, &["--auto-complete"]);
    let id = s.schedule(json!({"delay_ms": HOUR_MS, "payload": "moved"}));
    let due_ms = now_ms();
    let reply = s.ok(json!({"op": "reschedule", "id": id, "due_ms": due_ms}));
    assert_eq!(reply["rescheduled"], true);
    let ev = s.fired(&id, 1);
    assert_eq!(
        (ev["due_ms"].as_u64(), ev["payload"].as_str()),
        (Some(due_ms), Some("moved"))
    );
    let unknown = json!({"op": "reschedule", "id": "424242", "due_ms": due_ms});
    assert_eq!(s.ok(unknown)["rescheduled"], false);
    assert!(s.finish().success());
}

#[test]
fn fail_finishes_a_delivered_job_and_needs_a_delivery() {
    // fail of a delivered job is ok and counted; fail or complete of a job that was not
    // delivered (pending, unknown, already failed) is not_found.
    let dir = TempDir::new("fail");
    let mut s = Sidecar::start(&dir.0, &[]);
    let pending = s.schedule(json!({"delay_ms": HOUR_MS}));
    let id = s.schedule(json!({"delay_ms": 0}));
    s.fired(&id, 1);
    s.ok(json!({"op": "fail", "id": id, "error": "webhook said 500"}));
    for request in [
        json!({"op": "fail", "id": id, "error": "again"}),
        json!({"op": "complete", "id": id}),
        json!({"op": "complete", "id": pending}),
        json!({"op": "fail", "id": "77777", "error": "x"}),
    ] {
        assert_eq!(s.error_kind(request), "not_found");
    }
    let st = s.stats();
    assert_eq!(
        (st["failed"].as_u64(), st["scheduled"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(s.finish().success());
}

#[test]
fn retryable_fails_are_retried_until_dead_then_listed_requeued_and_purged() {
    // A job with 2 attempts and a short backoff: two retryable fails make it dead; dlq_list
    // shows it with its error; a restart keeps it; dlq_requeue delivers it again; extend and
    // retry act on the held delivery; dlq_purge forgets dead jobs.
    let dir = TempDir::new("dlq");
    let mut s = Sidecar::start(&dir.0, &[]);
    let id = s.schedule(json!({"delay_ms": 0, "payload": "order 7", "tenant": 5,
                               "max_attempts": 2, "backoff": {"base_ms": 10, "cap_ms": 20}}));
    s.fired(&id, 1);
    s.ok(json!({"op": "fail", "id": id, "error": "503", "retryable": true}));
    s.fired(&id, 2);
    s.ok(json!({"op": "fail", "id": id, "error": "still 503", "retryable": true}));
    let listed = s.ok(json!({"op": "dlq_list", "tenant": 5}));
    let jobs = listed["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 1, "{listed}");
    assert_eq!(jobs[0]["id"], json!(id));
    assert_eq!(jobs[0]["error"], json!("still 503"));
    assert_eq!(
        (jobs[0]["attempt"].as_u64(), jobs[0]["failures"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(jobs[0]["payload"], json!("order 7"));
    assert!(listed.get("next_after").is_none());
    let other = s.ok(json!({"op": "dlq_list", "tenant": 6}));
    assert_eq!(other["jobs"], json!([]));
    let st = s.stats();
    assert_eq!(
        (st["dead"].as_u64(), st["retried"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(s.finish().success());

    let mut s = Sidecar::start(&dir.0, &[]);
    assert_eq!(
        s.stats()["dead"].as_u64(),
        Some(1),
        "dead letters survive a restart"
    );
    assert_eq!(
        s.ok(json!({"op": "dlq_requeue", "id": id}))["requeued"].as_u64(),
        Some(1)
    );
    s.fired(&id, 3);
    let extended = s.ok(json!({"op": "extend", "id": id, "lease_ms": 60_000}));
    assert!(extended["lease_until_ms"].as_u64().expect("lease_until_ms") > now_ms());
    s.ok(json!({"op": "retry", "id": id, "delay_ms": 0}));
    s.fired(&id, 4);
    // Without `retryable`, as before retries: dead at once.
    s.ok(json!({"op": "fail", "id": id, "error": "bad card"}));
    assert_eq!(
        s.ok(json!({"op": "dlq_purge", "all": true}))["purged"].as_u64(),
        Some(1)
    );
    assert_eq!(s.stats()["dead"].as_u64(), Some(0));
    assert_eq!(
        s.error_kind(json!({"op": "extend", "id": id, "lease_ms": 5})),
        "not_found"
    );
    assert!(s.finish().success());
}

#[test]
fn recurring_jobs_fire_again_after_each_complete_and_can_be_paused_and_deleted() {
    let dir = TempDir::new("recurring");
    let mut s = Sidecar::start(&dir.0, &[]);
    let id = s.schedule(json!({"every_ms": 200, "payload": "tick", "misfire": "skip"}));
    for attempt in 1..=3 {
        s.fired(&id, attempt);
        s.ok(json!({"op": "complete", "id": id}));
    }
    let listed = s.ok(json!({"op": "schedules_list"}));
    let list = listed["schedules"].as_array().expect("schedules");
    assert_eq!(list.len(), 1, "{listed}");
    assert_eq!(
        (&list[0]["id"], &list[0]["every_ms"], &list[0]["misfire"]),
        (&json!(id), &json!(200), &json!("skip"))
    );
    assert_eq!(
        s.ok(json!({"op": "schedule_pause", "id": id}))["done"],
        json!(true)
    );
    let paused = s.ok(json!({"op": "schedules_list"}));
    assert_eq!(paused["schedules"][0]["paused"], json!(true));
    assert_eq!(
        s.ok(json!({"op": "schedule_delete", "id": id}))["done"],
        json!(true)
    );
    assert_eq!(
        s.ok(json!({"op": "schedules_list"}))["schedules"],
        json!([])
    );
    // A bad expression or zone is refused and schedules nothing.
    for bad in [
        json!({"op": "schedule", "cron": "61 * * * *"}),
        json!({"op": "schedule", "cron": "0 2 * * *", "tz": "Mars/Base"}),
        json!({"op": "schedule", "cron": "0 2 * * *", "every_ms": 5}),
    ] {
        assert_eq!(s.error_kind(bad), "bad_request");
    }
    let cron = s.schedule(json!({"cron": "0 2 * * *", "tz": "Europe/Berlin"}));
    let listed = s.ok(json!({"op": "schedules_list"}));
    assert_eq!(listed["schedules"][0]["id"], json!(cron));
    assert_eq!(listed["schedules"][0]["tz"], json!("Europe/Berlin"));
    assert!(listed["schedules"][0]["due_ms"].as_u64().expect("due") > now_ms());
    assert!(s.finish().success());
}

#[test]
fn malformed_lines_get_error_replies_and_serving_continues() {
    // Each bad line is answered, in order, with req echoed when it could be read, and nothing
    // is scheduled by any of them; a good request afterwards still works.
    let dir = TempDir::new("malformed");
    let mut s = Sidecar::start(&dir.0, &["--max-line-bytes", "200"]);
    let long = format!(
        r#"{{"op":"schedule","req":"long","delay_ms":1,"payload":"{}"}}"#,
        "x".repeat(300)
    );
    // Unreadable lines: the reply's req is null.
    let unreadable: [&[u8]; 6] = [
        b"not json at all",
        b"",
        b"[1,2,3]",
        b"\"just a string\"",
        b"{\"op\":\"stats\",\xff}",
        long.as_bytes(),
    ];
    // Readable, with a bad op or field: the req, R here, is echoed.
    let readable = [
        r#"{"op":"frobnicate","req":R}"#,
        r#"{"req":R}"#,
        r#"{"op":5,"req":R}"#,
        r#"{"op":"schedule","req":R}"#,
        r#"{"op":"schedule","req":R,"due_ms":"soon"}"#,
        r#"{"op":"schedule","req":R,"due_ms":-5}"#,
        r#"{"op":"schedule","req":R,"due_ms":1.5}"#,
        r#"{"op":"schedule","req":R,"due_ms":1,"delay_ms":1}"#,
        r#"{"op":"schedule","req":R,"delay_ms":1,"payload":"a","payload_b64":"YQ=="}"#,
        r#"{"op":"schedule","req":R,"delay_ms":1,"payload_b64":"%%%"}"#,
        r#"{"op":"schedule","req":R,"delay_ms":1,"payload":7}"#,
        r#"{"op":"cancel","req":R,"id":5}"#,
        r#"{"op":"cancel","req":R,"id":"five"}"#,
        r#"{"op":"cancel","req":R}"#,
        r#"{"op":"reschedule","req":R,"id":"1"}"#,
        r#"{"op":"complete","req":R,"id":"-1"}"#,
        r#"{"op":"fail","req":R,"id":"+1"}"#,
    ];
    let mut cases: Vec<(Vec<u8>, Value, &str)> = Vec::new();
    for line in unreadable {
        cases.push((line.to_vec(), Value::Null, "bad_request"));
    }
    for (i, line) in readable.iter().enumerate() {
        let line = line.replace('R', &i.to_string());
        cases.push((line.into_bytes(), json!(i), "bad_request"));
    }
    // Well formed, but refused by the engine: a due time past Config::due_ahead_ms_max.
    let far = json!({"op": "schedule", "req": "far", "due_ms": u64::MAX});
    cases.push((far.to_string().into_bytes(), json!("far"), "invalid_input"));
    for (line, _, _) in &cases {
        s.send_raw(line);
    }
    for (line, req, kind) in &cases {
        let reply = s.next_reply();
        let what = String::from_utf8_lossy(line);
        assert_eq!(reply["ok"], false, "{what} -> {reply}");
        assert_eq!(&reply["req"], req, "{what} -> {reply}");
        assert_eq!(reply["error"]["kind"], *kind, "{what} -> {reply}");
        assert!(reply["error"]["message"].is_string(), "{what} -> {reply}");
    }
    let st = s.stats();
    assert_eq!(st["scheduled"], 0, "bad input writes nothing");
    s.schedule(json!({"delay_ms": HOUR_MS}));
    assert_eq!(s.stats()["scheduled"], 1);
    assert!(s.finish().success());
}

#[test]
fn req_is_echoed_whatever_its_json_value() {
    // Objects, arrays, numbers, strings, booleans and null come back as sent; an absent req
    // comes back as null.
    let dir = TempDir::new("req");
    let mut s = Sidecar::start(&dir.0, &[]);
    for req in [
        json!({"trace": [1, {"deep": null}], "n": "x"}),
        json!([1, "two"]),
        json!(12.5),
        json!(-3),
        json!(18446744073709551615u64),
        json!("s"),
        json!(true),
        Value::Null,
    ] {
        s.send(&json!({"op": "stats", "req": req}));
        let reply = s.next_reply();
        assert_eq!(reply["req"], req);
        assert_eq!(reply["ok"], true);
    }
    s.send(&json!({"op": "stats"}));
    let reply = s.next_reply();
    assert_eq!(reply.get("req"), Some(&Value::Null));
    s.send(&json!({"op": "nope"}));
    assert_eq!(s.next_reply().get("req"), Some(&Value::Null));
    assert!(s.finish().success());
}

#[test]
fn payloads_roundtrip_as_text_or_base64() {
    // Text comes back as payload, bytes sent as payload_b64 (not UTF-8 here) come back as
    // payload_b64, byte for byte; a job without payload fires with an empty text payload.
    let dir = TempDir::new("payload");
    let mut s = Sidecar::start(&dir.0, &["--auto-complete"]);
    let text = "héllo ✓ \"quoted\"\nnew line\t\u{0}";
    let bytes: Vec<u8> = vec![0, 0xff, 0xfe, b'\n', b'\r', 0x80, b'"'];
    let t = s.schedule(json!({"delay_ms": 0, "payload": text}));
    let b = s.schedule(json!({"delay_ms": 0, "payload_b64": BASE64.encode(&bytes)}));
    let e = s.schedule(json!({"delay_ms": 0, "payload_b64": ""}));
    let n = s.schedule(json!({"delay_ms": 0}));
    let ev = s.fired(&t, 1);
    assert_eq!(ev["payload"], text);
    assert!(ev.get("payload_b64").is_none());
    let ev = s.fired(&b, 1);
    assert!(ev.get("payload").is_none());
    let got = BASE64
        .decode(ev["payload_b64"].as_str().expect("base64 string"))
        .expect("valid");
    assert_eq!(got, bytes);
    assert_eq!(s.fired(&e, 1)["payload_b64"], "");
    assert_eq!(s.fired(&n, 1)["payload"], "");
    assert!(s.finish().success());
}

#[test]
fn a_delivery_not_finished_within_the_lease_fires_again_with_the_next_attempt() {
    // Without --auto-complete, a job left alone past --lease-ms is delivered again with
    // attempt 2; completing the first delivery by its attempt is refused, the newest is ok.
    let dir = TempDir::new("lease");
    let mut s = Sidecar::start(&dir.0, &["--lease-ms", "300"]);
    let id = s.schedule(json!({"delay_ms": 0, "payload": "p"}));
    s.fired(&id, 1);
    let ev = s.fired(&id, 2);
    assert_eq!(ev["payload"], "p");
    // The first delivery is over: naming it finishes nothing.
    let stale = json!({"op": "complete", "id": id, "attempt": 1});
    assert_eq!(s.error_kind(stale), "not_found");
    s.ok(json!({"op": "complete", "id": id}));
    let st = s.stats();
    assert_eq!(st["completed"], 1);
    assert!(st["redelivered"].as_u64().expect("number") >= 1);
    assert!(s.finish().success());
}

#[test]
fn shutdown_replies_then_exits_zero_with_nothing_after() {
    // The shutdown reply is the last line; the process exits 0 and ignores later requests.
    let dir = TempDir::new("shutdown");
    let mut s = Sidecar::start(&dir.0, &[]);
    s.schedule(json!({"delay_ms": HOUR_MS}));
    // Both lines in one write: the process may exit right after the shutdown reply, and a
    // second write could then fail with a broken pipe.
    s.send_raw(
        format!(
            "{}\n{}",
            json!({"op": "shutdown", "req": {"bye": true}}),
            json!({"op": "stats", "req": "too late"})
        )
        .as_bytes(),
    );
    let reply = s.next_reply();
    assert_eq!(reply, json!({"req": {"bye": true}, "ok": true}));
    assert!(s.wait().success());
    assert_eq!(s.next_line(), None, "nothing after the shutdown reply");
}

#[test]
fn sigterm_flushes_and_exits_zero() {
    // SIGTERM stops serving like EOF does, with exit status 0; the job survives it.
    let dir = TempDir::new("sigterm");
    let mut s = Sidecar::start(&dir.0, &[]);
    let id = s.schedule(json!({"delay_ms": 0, "payload": "kept"}));
    s.fired(&id, 1);
    let pid = s.child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("run kill");
    assert!(killed.success());
    assert!(s.wait().success());
    drop(s);
    // The delivery was never finished: it comes again, with the next attempt.
    let mut s = Sidecar::start(&dir.0, &["--auto-complete"]);
    let ev = s.fired(&id, 2);
    assert_eq!(ev["payload"], "kept");
    assert!(s.finish().success());
}

#[test]
fn pending_jobs_fire_after_a_restart_on_the_same_directory() {
    // After EOF and a restart: a pending job fires (missed or on time), a cancelled one stays
    // cancelled, a delivered but unfinished one comes again with attempt 2.
    let dir = TempDir::new("restart");
    let mut s = Sidecar::start(&dir.0, &[]);
    let later = s.schedule(json!({"delay_ms": 300, "payload": "later"}));
    let cancelled = s.schedule(json!({"delay_ms": 300}));
    assert_eq!(
        s.ok(json!({"op": "cancel", "id": cancelled}))["cancelled"],
        true
    );
    let unfinished = s.schedule(json!({"delay_ms": 0, "payload_b64": "AAE="}));
    s.fired(&unfinished, 1);
    assert!(s.finish().success());

    let mut s = Sidecar::start(&dir.0, &[]);
    let ev = s.fired(&unfinished, 2);
    assert_eq!(ev["payload_b64"], "AAE=");
    s.ok(json!({"op": "complete", "id": unfinished}));
    // `later` may have been delivered before the first EOF; then this is its second attempt.
    let ev = s.fired_where(|e| {
        assert_ne!(e["id"], cancelled, "a cancelled job never fires: {e}");
        e["id"] == later
    });
    assert_eq!(ev["payload"], "later");
    s.ok(json!({"op": "complete", "id": later}));
    let st = s.stats();
    assert_eq!(
        (st["scheduled"].as_u64(), st["running"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(st["cancelled"], 1);
    // A new id never reuses an old one.
    let fresh = s.schedule(json!({"delay_ms": HOUR_MS}));
    for old in [&later, &cancelled, &unfinished] {
        assert!(fresh.parse::<u64>().unwrap() > old.parse::<u64>().unwrap());
    }
    assert!(s.finish().success());
}

#[test]
fn a_burst_is_answered_in_order_and_no_event_precedes_its_reply() {
    // Hundreds of requests written at once (so the sidecar batches the schedules), with an
    // invalid schedule and other ops among them: replies come in order, each job's event comes
    // after its schedule reply, and the invalid one alone is refused.
    let dir = TempDir::new("burst");
    let mut s = Sidecar::start(&dir.0, &["--auto-complete"]);
    let n = 600;
    let mut burst = Vec::new();
    for i in 0..n {
        let request = match i {
            250 => json!({"op": "schedule", "req": i, "due_ms": u64::MAX}),
            400 => json!({"op": "stats", "req": i}),
            _ => {
                json!({"op": "schedule", "req": i, "delay_ms": i % 7, "payload": format!("job {i}")})
            }
        };
        burst.extend_from_slice(request.to_string().as_bytes());
        burst.push(b'\n');
    }
    let stdin = s.stdin.as_mut().expect("stdin open");
    stdin.write_all(&burst).expect("write the burst");
    stdin.flush().expect("flush");

    let mut acknowledged = HashMap::new();
    let mut fired = 0;
    let mut next_req = 0;
    while next_req < n || fired < n - 2 {
        let v = s.next_line().expect("output before stdout closes");
        if v.get("event").is_some() {
            let id = v["id"].as_str().expect("string id");
            let i = acknowledged
                .get(id)
                .unwrap_or_else(|| panic!("event before its reply: {v}"));
            assert_eq!(v["payload"], format!("job {i}"));
            fired += 1;
            continue;
        }
        assert_eq!(v["req"], next_req, "in order: {v}");
        match next_req {
            250 => assert_eq!(v["error"]["kind"], "invalid_input", "{v}"),
            400 => assert_eq!(v["ok"], true, "{v}"),
            _ => {
                let id = v["id"].as_str().expect("string id").to_owned();
                assert!(
                    acknowledged.insert(id, next_req).is_none(),
                    "ids are unique"
                );
            }
        }
        next_req += 1;
    }
    assert_eq!(fired, n - 2);
    assert!(s.finish().success());
}

/// Writes `requests` in one write, each with `req` set to its index plus `first_req`.
fn send_burst(s: &mut Sidecar, first_req: u64, requests: &[Value]) {
    let mut bytes = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        let mut request = request.clone();
        request["req"] = json!(first_req + i as u64);
        bytes.extend_from_slice(format!("{request}\n").as_bytes());
    }
    assert!(s.try_write(&bytes), "write the burst");
}

#[test]
fn pipelined_completes_and_cancels_are_answered_in_order_and_durable() {
    // Hundreds of completes and cancels written at once (the sidecar serves each run of them
    // with one batch and one sync), with duplicates, unknown ids, a stale attempt, runs of
    // fails and reschedules among them: every reply comes in order with what it would have
    // said alone.
    // Then SIGKILL, no flush: after a restart nothing acknowledged comes back.
    let dir = TempDir::new("pipelined");
    let mut s = Sidecar::start(&dir.0, &[]);
    let (n_now, n_later) = (300, 300);
    let mut schedules = Vec::new();
    for i in 0..n_now {
        schedules.push(json!({"op": "schedule", "delay_ms": 0, "payload": format!("now {i}")}));
    }
    for i in 0..n_later {
        schedules
            .push(json!({"op": "schedule", "delay_ms": HOUR_MS, "payload": format!("later {i}")}));
    }
    send_burst(&mut s, 0, &schedules);
    let mut ids = Vec::new();
    for i in 0..schedules.len() {
        let reply = s.next_reply();
        assert_eq!(reply["req"], i, "in order: {reply}");
        ids.push(reply["id"].as_str().expect("id").to_owned());
    }
    let (now, later) = ids.split_at(n_now);
    for id in now {
        assert_eq!(s.fired(id, 1)["attempt"], 1);
    }
    // (request, expected reply body)
    let mut plan: Vec<(Value, Value)> = Vec::new();
    let done = json!({"ok": true});
    let not_found = json!({"ok": false, "kind": "not_found"});
    for id in &now[..200] {
        plan.push((json!({"op": "complete", "id": id}), done.clone()));
    }
    // In the same run: a second complete of a job, an unknown id, a stale attempt.
    plan.push((json!({"op": "complete", "id": now[0]}), not_found.clone()));
    plan.push((
        json!({"op": "complete", "id": "987654321"}),
        not_found.clone(),
    ));
    plan.push((
        json!({"op": "complete", "id": now[200], "attempt": 2}),
        not_found.clone(),
    ));
    for id in later {
        plan.push((
            json!({"op": "cancel", "id": id}),
            json!({"cancelled": true}),
        ));
    }
    // In the same run: a second cancel, a running job, an unknown id.
    plan.push((
        json!({"op": "cancel", "id": later[0]}),
        json!({"cancelled": false}),
    ));
    plan.push((
        json!({"op": "cancel", "id": now[250]}),
        json!({"cancelled": false}),
    ));
    plan.push((
        json!({"op": "cancel", "id": "987654321"}),
        json!({"cancelled": false}),
    ));
    // A run of fails (one batch), with a second fail of one job and an unknown id.
    for id in &now[200..230] {
        plan.push((
            json!({"op": "fail", "id": id, "error": "boom"}),
            done.clone(),
        ));
    }
    plan.push((
        json!({"op": "fail", "id": now[200], "error": "again"}),
        not_found.clone(),
    ));
    plan.push((
        json!({"op": "fail", "id": "987654321", "error": "x"}),
        not_found.clone(),
    ));
    // A run of reschedules (one batch): cancelled, running and unknown jobs do not move.
    for id in [&later[1], &later[2], &now[240], &"987654321".to_owned()] {
        plan.push((
            json!({"op": "reschedule", "id": id, "due_ms": now_ms()}),
            json!({"rescheduled": false}),
        ));
    }
    for id in &now[230..] {
        plan.push((
            json!({"op": "complete", "id": id, "attempt": 1}),
            done.clone(),
        ));
    }
    let first_req = 10_000;
    let requests: Vec<Value> = plan.iter().map(|(r, _)| r.clone()).collect();
    send_burst(&mut s, first_req, &requests);
    for (i, (request, want)) in plan.iter().enumerate() {
        let reply = s.next_reply();
        assert_eq!(reply["req"], first_req + i as u64, "in order: {reply}");
        let what = format!("{request} -> {reply}");
        if let Some(kind) = want.get("kind") {
            assert_eq!(reply["ok"], false, "{what}");
            assert_eq!(&reply["error"]["kind"], kind, "{what}");
        } else {
            assert_eq!(reply["ok"], true, "{what}");
            for (k, v) in want.as_object().expect("object") {
                assert_eq!(&reply[k], v, "{what}");
            }
        }
    }
    let st = s.stats();
    assert_eq!(
        [&st["completed"], &st["failed"], &st["cancelled"]],
        [n_now as u64 - 30, 30, n_later as u64],
        "{st}"
    );
    assert_eq!(
        [&st["scheduled"], &st["ready"], &st["running"]],
        [0, 0, 0],
        "{st}"
    );
    assert!(s.take_events().is_empty(), "every job fired once");
    // No flush: what was acknowledged is in the log already. (A kill cannot tell written
    // from synced, as the page cache outlives the process; the engine's fault-disk tests
    // check that an acknowledgement waits for the sync.)
    s.kill();
    let mut s = Sidecar::start(&dir.0, &[]);
    let st = s.stats();
    assert_eq!(
        [&st["scheduled"], &st["ready"], &st["running"]],
        [0, 0, 0],
        "nothing acknowledged came back: {st}"
    );
    assert!(s.take_events().is_empty());
    assert!(s.finish().success());
}

#[test]
fn auto_complete_delivers_each_of_many_jobs_exactly_once() {
    // Thousands of jobs due within a quarter second, with --auto-complete: each is reported
    // fired exactly once, with attempt 1, after its schedule reply; all end completed, none
    // is delivered again, and none comes back after a restart.
    let dir = TempDir::new("auto-many");
    let mut s = Sidecar::start(&dir.0, &["--auto-complete"]);
    let n: u64 = 5000;
    let start_ms = now_ms();
    let requests: Vec<Value> = (0..n)
        .map(|i| json!({"op": "schedule", "due_ms": start_ms + i % 250, "payload": format!("{i}")}))
        .collect();
    send_burst(&mut s, 0, &requests);
    let mut acknowledged: HashMap<u64, u64> = HashMap::new();
    let mut fired: HashSet<u64> = HashSet::new();
    let mut next_req = 0;
    while next_req < n || (fired.len() as u64) < n {
        let v = s.next_line().expect("output before stdout closes");
        if v.get("event").is_some() {
            let id = id_of(&v);
            let i = acknowledged
                .get(&id)
                .unwrap_or_else(|| panic!("event before its reply: {v}"));
            assert_eq!(v["payload"], i.to_string(), "{v}");
            assert_eq!(v["attempt"], 1, "{v}");
            assert!(fired.insert(id), "delivered twice: {v}");
            continue;
        }
        assert_eq!(v["req"], next_req, "in order: {v}");
        assert!(acknowledged.insert(id_of(&v), next_req).is_none());
        next_req += 1;
    }
    // The completes are the sidecar's own: wait (with a guard) until stats shows them all.
    let guard = Instant::now() + Duration::from_secs(30);
    loop {
        let st = s.stats();
        if st["completed"] == n {
            assert_eq!([&st["fired"], &st["redelivered"]], [n, 0], "{st}");
            assert_eq!([&st["scheduled"], &st["ready"], &st["running"]], [0, 0, 0]);
            break;
        }
        assert!(Instant::now() < guard, "auto-completes not all done: {st}");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(s.take_events().is_empty(), "no job delivered twice");
    assert!(s.finish().success());
    let mut s = Sidecar::start(&dir.0, &["--auto-complete"]);
    let st = s.stats();
    assert_eq!(
        [&st["scheduled"], &st["ready"], &st["running"]],
        [0, 0, 0],
        "{st}"
    );
    assert!(s.take_events().is_empty());
    assert!(s.finish().success());
}

#[test]
fn engine_options_are_taken_and_a_bad_one_is_refused_before_the_directory_is_made() {
    // The compaction and horizon options reach the engine: a value it refuses ends the
    // process with a message naming the option's field, and nothing is created.
    let dir = TempDir::new("options");
    let data = dir.0.join("never-made");
    for (flag, value, field) in [
        ("--seal-after-ms", "5", "seal_after_ms"),
        ("--horizon-ms", "1000", "horizon_ms"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_timewheel"))
            .args(["serve", "--dir"])
            .arg(&data)
            .args([flag, value])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run timewheel serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} {value}: {stderr}");
        assert!(stderr.contains(field), "{flag} {value}: {stderr}");
        assert!(!data.exists(), "{flag} {value} made the directory");
    }
    // Valid ones serve as usual.
    let mut s = Sidecar::start(
        &data,
        &[
            "--seal-after-ms",
            "1000",
            "--compact-interval-ms",
            "100",
            "--horizon-ms",
            &HOUR_MS.to_string(),
        ],
    );
    let due_ms = now_ms() + 20;
    let id = s.schedule(json!({"due_ms": due_ms}));
    s.fired(&id, 1);
}
