//! The sidecar's serving loop driven in-process (`timewheel::sidecar::serve`) on a manual
//! clock: scripted sessions give exactly predictable output, and the ways serving ends.

mod common;

use common::TempDir;
use std::io::{Cursor, Write};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use timewheel::sidecar::{ServeEnd, ServeOptions, serve};
use timewheel::{Config, Engine, Error, JobSpec, ManualClock};

const NOW_MS: u64 = 1_800_000_000_000;

fn open(dir: &TempDir) -> (Engine, Config, ManualClock) {
    let config = Config::new(&dir.0);
    let clock = ManualClock::new(NOW_MS);
    let engine = Engine::open_with_clock(config.clone(), Arc::new(clock.clone())).expect("open");
    (engine, config, clock)
}

fn script(lines: &[Value]) -> Cursor<Vec<u8>> {
    let mut input = Vec::new();
    for line in lines {
        writeln!(input, "{line}").expect("write to memory");
    }
    Cursor::new(input)
}

fn output_lines(output: &[u8]) -> Vec<Value> {
    output
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("every output line is JSON"))
        .collect()
}

/// The id the engine gives its `n`-th job, due at `due_ms` (accepted at `NOW_MS`): the
/// sequence number with the job's home hour in the low bits.
fn id(n: u64, due_ms: u64) -> String {
    let hour = due_ms.max(NOW_MS) / 3_600_000;
    ((n << timewheel::JobId::BUCKET_BITS) | (hour % (1 << timewheel::JobId::BUCKET_BITS)))
        .to_string()
}

#[test]
fn a_scripted_session_gets_exactly_these_replies_then_eof() {
    // Nothing fires (the clock stands still before every due time), so the output is exactly
    // the replies, in order; at EOF serve shuts the engine down.
    let dir = TempDir::new("script");
    let (engine, config, _clock) = open(&dir);
    let input = script(&[
        json!({"op":"schedule","req":1,"due_ms":NOW_MS + 10_000,"payload":"a"}),
        json!({"op":"schedule","req":2,"delay_ms":5_000}),
        json!({"op":"schedule","req":3,"due_ms":NOW_MS + 20_000,"payload_b64":"AA=="}),
        json!({"op":"cancel","req":4,"id":id(2, NOW_MS + 5_000)}),
        json!({"op":"reschedule","req":5,"id":id(1, NOW_MS + 10_000),"due_ms":NOW_MS + 30_000}),
        json!({"op":"complete","req":6,"id":id(1, NOW_MS + 10_000)}),
        json!({"op":"bogus","req":7}),
        json!({"op":"stats","req":8}),
    ]);
    let mut out = Vec::new();
    let end = serve(&engine, &config, input, &mut out, ServeOptions::default());
    assert_eq!(end.expect("serves"), ServeEnd::Eof);
    let lines = output_lines(&out);
    let not_found = &lines[5]["error"];
    let stats = lines[7]["stats"].clone();
    assert_eq!(
        lines[..5],
        [
            json!({"req":1,"ok":true,"id":id(1, NOW_MS + 10_000)}),
            json!({"req":2,"ok":true,"id":id(2, NOW_MS + 5_000)}),
            json!({"req":3,"ok":true,"id":id(3, NOW_MS + 20_000)}),
            json!({"req":4,"ok":true,"cancelled":true}),
            json!({"req":5,"ok":true,"rescheduled":true}),
        ]
    );
    assert_eq!(not_found["kind"], "not_found");
    assert_eq!(lines[6]["error"]["kind"], "bad_request");
    assert_eq!(lines.len(), 8);
    assert_eq!(stats["scheduled"], 2);
    assert_eq!(stats["cancelled"], 1);
    assert!(matches!(
        engine.schedule(JobSpec::at(NOW_MS)),
        Err(Error::Closed)
    ));
}

#[test]
fn fired_events_carry_the_engine_clock_and_follow_their_replies() {
    // Jobs already due fire at once; each event comes after its schedule reply, with fired_ms
    // read from the engine's (manual) clock.
    let dir = TempDir::new("fired");
    let (engine, config, _clock) = open(&dir);
    let (reader, mut writer) = std::io::pipe().expect("pipe");
    let reader = std::io::BufReader::new(reader);
    let lines = std::thread::scope(|scope| {
        let mut out = Vec::new();
        let server = scope.spawn(|| {
            let options = ServeOptions {
                auto_complete: true,
                ..ServeOptions::default()
            };
            let end = serve(&engine, &config, reader, &mut out, options);
            (end.expect("serves"), out)
        });
        for i in 0..3 {
            let line = json!({"op":"schedule","req":i,"due_ms":NOW_MS - 5,"payload":"p"});
            writeln!(writer, "{line}").expect("write");
        }
        // The EOF only once all three were delivered: auto-complete completes a job after
        // its event is written, so three completions mean three events are out.
        let guard = std::time::Instant::now() + Duration::from_secs(30);
        while engine.stats().completed < 3 {
            assert!(
                std::time::Instant::now() < guard,
                "the jobs were not delivered"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        drop(writer);
        let (end, out) = server.join().expect("no panic");
        assert_eq!(end, ServeEnd::Eof);
        output_lines(&out)
    });
    let mut replied = Vec::new();
    let mut fired = 0;
    for line in &lines {
        if line["event"] == "fired" {
            fired += 1;
            assert!(
                replied.contains(&line["id"]),
                "event before its reply: {line}"
            );
            assert_eq!(line["fired_ms"], NOW_MS);
            assert_eq!(line["due_ms"], NOW_MS - 5);
            assert_eq!(line["attempt"], 1);
        } else {
            replied.push(line["id"].clone());
        }
    }
    assert_eq!(replied.len(), 3);
    assert_eq!(fired, 3, "every job's event is checked");
}

#[test]
fn stop_ends_serving_while_the_input_stays_open() {
    // A stop message ends serving (SIGTERM in the binary) although no EOF came.
    let dir = TempDir::new("stop");
    let (engine, config, _clock) = open(&dir);
    let (reader, mut writer) = std::io::pipe().expect("pipe");
    let (stop_tx, stop_rx) = crossbeam_channel::bounded(1);
    let mut out = Vec::new();
    writeln!(writer, "{}", json!({"op":"stats","req":"s"})).expect("write");
    stop_tx.send(()).expect("send stop");
    let options = ServeOptions {
        stop: Some(stop_rx),
        ..ServeOptions::default()
    };
    let end = serve(
        &engine,
        &config,
        std::io::BufReader::new(reader),
        &mut out,
        options,
    );
    assert_eq!(end.expect("serves"), ServeEnd::Stopped);
    drop(writer);
}

#[test]
fn shutdown_is_the_last_reply_and_later_requests_are_ignored() {
    // Requests after shutdown are not served; the reply to shutdown is the last line.
    let dir = TempDir::new("shutdown");
    let (engine, config, _clock) = open(&dir);
    let input = script(&[
        json!({"op":"schedule","req":1,"due_ms":NOW_MS + 10_000}),
        json!({"op":"shutdown","req":"bye"}),
        json!({"op":"schedule","req":3,"due_ms":NOW_MS + 10_000}),
    ]);
    let mut out = Vec::new();
    let end = serve(&engine, &config, input, &mut out, ServeOptions::default());
    assert_eq!(end.expect("serves"), ServeEnd::Shutdown);
    let lines = output_lines(&out);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1], json!({"req":"bye","ok":true}));
    drop(engine);
    let (engine, _, _) = open(&dir);
    assert_eq!(
        engine.stats().scheduled,
        1,
        "only the first schedule was served"
    );
}

/// An output the test can read while `serve` writes to it.
#[derive(Clone, Default)]
struct SharedOut(Arc<std::sync::Mutex<Vec<u8>>>);

impl Write for SharedOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SharedOut {
    fn lines(&self) -> Vec<Value> {
        output_lines(&self.0.lock().expect("not poisoned"))
    }
}

/// Waits, with a generous deadline (a guard, not a timing assertion), until `cond` holds.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// An engine on the fault-injecting disk (seeded `seed`), its timers driven by nobody: the
/// disk, the engine and its config.
fn open_on_fault_disk(seed: u64) -> (timewheel_wal::testing::FaultDisk, Engine, Config) {
    let disk = timewheel_wal::testing::FaultDisk::new(seed);
    let config = common::config();
    let clock = Arc::new(ManualClock::new(NOW_MS));
    let engine = Engine::open_on(disk.storage(), config.clone(), clock).expect("open");
    (disk, engine, config)
}

#[test]
fn a_pipeline_is_appended_while_a_sync_is_held_and_answered_only_once_durable() {
    // The server appends the next run while the previous one waits for its sync, so one sync
    // carries both; no reply is written before its records are durable, and all come in
    // request order.
    let (disk, engine, config) = open_on_fault_disk(71);
    let records_at_start = engine.log_stats().records;
    let (reader, mut writer) = std::io::pipe().expect("pipe");
    let out = SharedOut::default();
    let schedule = |req: u64| json!({"op":"schedule","req":req,"due_ms":NOW_MS + 60_000});
    // Released on every way out, a failed assertion included, so the server can finish.
    struct Release<'a>(&'a timewheel_wal::testing::FaultDisk);
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            self.0.hold_syncs(false);
        }
    }
    disk.hold_syncs(true);
    let release = Release(&disk);
    let end = std::thread::scope(|scope| {
        let server = {
            let (engine, config, out) = (&engine, &config, out.clone());
            let reader = std::io::BufReader::new(reader);
            scope.spawn(move || serve(engine, config, reader, out, ServeOptions::default()))
        };
        // One write (under the pipe's atomic size): one chunk, in three runs.
        let mut burst = Vec::new();
        for req in 0..3 {
            writeln!(burst, "{}", schedule(req)).expect("write to memory");
        }
        writeln!(burst, "{}", json!({"op":"complete","req":3,"id":"12345"})).expect("write");
        for req in 4..7 {
            writeln!(burst, "{}", schedule(req)).expect("write to memory");
        }
        writer.write_all(&burst).expect("write");
        assert_eq!(
            disk.wait_for_held_syncs(1, Duration::from_secs(60)),
            1,
            "the first run waits for its sync"
        );
        eventually(
            "the last run was not appended while the first one's sync was held",
            || engine.log_stats().records >= records_at_start + 6,
        );
        assert_eq!(out.lines(), Vec::<Value>::new(), "a reply before its sync");
        drop(release);
        drop(writer);
        server.join().expect("no panic")
    });
    assert_eq!(end.expect("serves"), ServeEnd::Eof);
    let lines = out.lines();
    assert_eq!(lines.len(), 7, "{lines:?}");
    assert_eq!(lines[3]["error"]["kind"], "not_found", "{}", lines[3]);
    for (req, n) in [(0u64, 1u64), (1, 2), (2, 3), (4, 4), (5, 5), (6, 6)] {
        let expected = json!({"req":req,"ok":true,"id":id(n, NOW_MS + 60_000)});
        assert_eq!(lines[req as usize], expected);
    }
}

#[test]
fn a_failed_sync_answers_each_pipelined_request_with_the_error_in_order() {
    // Schedules appended behind a sync that fails are answered with the error, each in its
    // place; a complete of a job this sidecar never delivered is not_found; none of the jobs
    // exists afterwards (nothing was acknowledged).
    let (disk, engine, config) = open_on_fault_disk(72);
    disk.set_sync_failure(timewheel_wal::testing::SyncFailure::Always);
    let input = script(&[
        json!({"op":"schedule","req":1,"due_ms":NOW_MS - 1}),
        json!({"op":"schedule","req":2,"due_ms":NOW_MS - 1}),
        json!({"op":"complete","req":3,"id":"12345"}),
        json!({"op":"schedule","req":4,"due_ms":NOW_MS - 1}),
        json!({"op":"stats","req":5}),
    ]);
    let out = SharedOut::default();
    let end = serve(
        &engine,
        &config,
        input,
        out.clone(),
        ServeOptions::default(),
    );
    assert!(end.is_err(), "the final flush fails: {end:?}");
    let lines = out.lines();
    let reqs: Vec<&Value> = lines.iter().map(|l| &l["req"]).collect();
    assert_eq!(
        reqs,
        [&json!(1), &json!(2), &json!(3), &json!(4), &json!(5)]
    );
    for line in &lines[..2] {
        assert_eq!(line["ok"], false, "{line}");
    }
    assert_eq!(lines[2]["error"]["kind"], "not_found");
    assert_eq!(lines[3]["ok"], false, "{}", lines[3]);
    assert!(
        lines.iter().all(|l| l["event"].is_null()),
        "nothing fired: {lines:?}"
    );
    assert_eq!(engine.stats().scheduled, 0, "no job became visible");
}

#[test]
fn a_failed_write_of_the_replies_ends_serving_with_the_error() {
    // The client is gone (its end of the output is closed): serve returns the write error
    // instead of serving on, or hanging, with replies nobody reads.
    struct Gone;
    impl Write for Gone {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let dir = TempDir::new("gone");
    let (engine, config, _clock) = open(&dir);
    let (reader, mut writer) = std::io::pipe().expect("pipe");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let (engine, config) = (&engine, &config);
        scope.spawn(move || {
            let end = serve(
                engine,
                config,
                std::io::BufReader::new(reader),
                Gone,
                ServeOptions::default(),
            );
            done_tx.send(end).expect("the test waits");
        });
        for req in 0..100 {
            let line = json!({"op":"schedule","req":req,"due_ms":NOW_MS + 60_000});
            writeln!(writer, "{line}").expect("write");
        }
        // The input stays open: only the failed write can end serving.
        let end = done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("serving ended after the failed write");
        match end {
            Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}"),
            other => panic!("a failed write is an I/O error, not {other:?}"),
        }
        drop(writer);
    });
}
