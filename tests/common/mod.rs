//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use timewheel::{Config, Engine, Error, JobId, JobSpec, ManualClock};
use timewheel_wal::testing::FaultDisk;

/// A point in time far from the epoch, so that "hours ago" is still positive.
pub const T0: u64 = 1_800_000_000_000;

/// A config for tests: small segments, no timer thread (the test fires timers itself).
pub fn config() -> Config {
    let mut c = Config::new("/nonexistent-unused");
    c.segment_bytes = 1 << 20;
    c.timer_thread = false;
    // The in-memory disk keeps two images of every file: no 8 MiB ballast in each test.
    c.disk_ballast_bytes = 0;
    c
}

/// An engine on a fault-injecting disk with a manual clock, timers driven by the test.
pub fn open_sim(disk: &FaultDisk, clock: &ManualClock) -> Engine {
    Engine::open_on(disk.storage(), config(), Arc::new(clock.clone())).expect("engine opens")
}

/// What a job looks like from outside: state, due time, attempt and payload.
pub type View = std::collections::BTreeMap<JobId, (timewheel::JobState, u64, u32, Vec<u8>)>;

/// The [`View`] of each of `ids` the engine still holds.
pub fn view(engine: &Engine, ids: &[JobId]) -> View {
    ids.iter()
        .filter_map(|&id| {
            engine
                .get(id)
                .map(|j| (id, (j.state, j.due_ms, j.attempt, j.payload.to_vec())))
        })
        .collect()
}

/// Runs the timers and drains the ready queue.
pub fn fire(engine: &Engine) -> Vec<JobId> {
    engine.run_timers();
    engine.ready().try_iter().collect()
}

/// Claims and completes each of `ids` (a worker doing its job; a fired job nobody claims is
/// queued again once `Config::lease_ms` passed).
pub fn finish_all(engine: &Engine, ids: &[JobId]) {
    for c in engine
        .claim_batch(ids)
        .expect("claim")
        .into_iter()
        .flatten()
    {
        assert!(engine.complete(&c).expect("complete"));
    }
}

/// Receives `n` ids, failing the test after a generous guard time.
pub fn recv_n(engine: &Engine, n: usize) -> Vec<JobId> {
    let ready = engine.ready();
    (0..n)
        .map(|_| {
            ready
                .recv_timeout(Duration::from_secs(20))
                .expect("a job fires (20 s guard)")
        })
        .collect()
}

/// A data directory removed when dropped (tests that need a real directory, e.g. for the
/// sidecar binary).
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// A fresh directory named after this test process and `name`.
    pub fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("timewheel-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Drives the `timewheel serve` binary over pipes, as a client in another language would:
/// the one helper for every test that needs the sidecar process (`sidecar_pipes`,
/// `kill9_rounds`).
///
/// Every `fired` event read through it gets [`sidecar::SEEN_MS`], the wall clock of the test
/// process at the moment it read the line, and is checked never to be early by that clock
/// (not by the `fired_ms` the sidecar reports).
#[cfg(feature = "cli")]
pub mod sidecar {
    use std::io::{BufRead, BufReader, Write};
    use std::path::Path;
    use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
    use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use serde_json::{Value, json};

    /// Longest wait for any one line: generous, only a guard against a hung sidecar.
    pub const LINE_TIMEOUT: Duration = Duration::from_secs(30);

    /// The field added to each event: the test's clock (ms since the epoch) when it read the
    /// line.
    pub const SEEN_MS: &str = "test_seen_ms";

    /// The test process's wall clock, in ms since the Unix epoch.
    pub fn now_ms() -> u64 {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970");
        u64::try_from(since.as_millis()).expect("fits")
    }

    /// The id of a reply or event, as a number.
    pub fn id_of(v: &Value) -> u64 {
        v["id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("a decimal-string id: {v}"))
    }

    /// A running sidecar with its stdout read line by line on a thread.
    pub struct Sidecar {
        pub child: Child,
        pub stdin: Option<ChildStdin>,
        /// Each stdout line with the test's clock when it was read.
        lines: Receiver<(u64, String)>,
        /// Events read while looking for a reply, kept for `fired`/`take_events`.
        pub events: Vec<Value>,
        next_req: u64,
    }

    impl Sidecar {
        /// Starts `timewheel serve --dir DIR ARGS`, its stderr on the test's.
        pub fn start(dir: &Path, args: &[&str]) -> Self {
            Self::start_with(dir, args, Stdio::inherit())
        }

        /// Like `start`, with the sidecar's stderr discarded (for processes killed at random).
        pub fn start_quiet(dir: &Path, args: &[&str]) -> Self {
            Self::start_with(dir, args, Stdio::null())
        }

        fn start_with(dir: &Path, args: &[&str], stderr: Stdio) -> Self {
            let mut child = Command::new(env!("CARGO_BIN_EXE_timewheel"))
                .arg("serve")
                .arg("--dir")
                .arg(dir)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(stderr)
                .spawn()
                .expect("spawn timewheel serve");
            let stdout = child.stdout.take().expect("piped stdout");
            let (tx, lines) = channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { return };
                    // Stamped here, as soon as the test can see the line: the strictest
                    // clock for "never early".
                    if tx.send((now_ms(), line)).is_err() {
                        return;
                    }
                }
            });
            Sidecar {
                stdin: child.stdin.take(),
                child,
                lines,
                events: Vec::new(),
                next_req: 0,
            }
        }

        pub fn pid(&self) -> u32 {
            self.child.id()
        }

        /// Writes `bytes` as they are (one or many lines) and flushes; `false` when the
        /// process is gone (broken pipe).
        pub fn try_write(&mut self, bytes: &[u8]) -> bool {
            let stdin = self.stdin.as_mut().expect("stdin open");
            stdin.write_all(bytes).and_then(|()| stdin.flush()).is_ok()
        }

        /// Writes one line (a newline is added).
        pub fn send_raw(&mut self, line: &[u8]) {
            let mut bytes = line.to_vec();
            bytes.push(b'\n');
            assert!(self.try_write(&bytes), "write a request");
        }

        pub fn send(&mut self, request: &Value) {
            self.send_raw(request.to_string().as_bytes());
        }

        /// The next stdout line as JSON: `Ok(None)` once stdout closed, `Err(())` when
        /// nothing came within `timeout`. Every line must be one object; an event gets
        /// [`SEEN_MS`] and must not be early by the test's clock.
        pub fn next_line_within(&mut self, timeout: Duration) -> Result<Option<Value>, ()> {
            let (seen_ms, line) = match self.lines.recv_timeout(timeout) {
                Ok(l) => l,
                Err(RecvTimeoutError::Disconnected) => return Ok(None),
                Err(RecvTimeoutError::Timeout) => return Err(()),
            };
            let mut v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
            assert!(v.is_object(), "stdout line is not an object: {line}");
            if v.get("event").is_some() {
                let due_ms = v["due_ms"].as_u64().expect("an event has due_ms");
                assert!(
                    seen_ms >= due_ms,
                    "fired early: read at {seen_ms} by the test's clock, due at {due_ms}: {line}"
                );
                v[SEEN_MS] = json!(seen_ms);
            }
            Ok(Some(v))
        }

        /// The next stdout line; `None` once stdout closed. Panics after [`LINE_TIMEOUT`].
        pub fn next_line(&mut self) -> Option<Value> {
            self.next_line_within(LINE_TIMEOUT)
                .unwrap_or_else(|()| panic!("no output within {LINE_TIMEOUT:?}"))
        }

        /// The next reply, keeping the events that come before it; `None` when stdout closed
        /// first (the process died).
        pub fn try_reply(&mut self) -> Option<Value> {
            loop {
                let v = self.next_line()?;
                if v.get("event").is_some() {
                    self.events.push(v);
                } else {
                    assert!(v["ok"].is_boolean(), "a reply has ok: {v}");
                    assert!(v.get("req").is_some(), "a reply always has req: {v}");
                    return Some(v);
                }
            }
        }

        /// The next reply, keeping the events that come before it.
        pub fn next_reply(&mut self) -> Value {
            self.try_reply().expect("a reply before stdout closed")
        }

        /// Sends `request` with a fresh req and returns its reply; `None` when the process
        /// died before replying (the request's outcome is then unknown).
        pub fn try_call(&mut self, mut request: Value) -> Option<Value> {
            self.next_req += 1;
            let req = json!(format!("r{}", self.next_req));
            request["req"] = req.clone();
            if !self.try_write(format!("{request}\n").as_bytes()) {
                return None;
            }
            let reply = self.try_reply()?;
            assert_eq!(reply["req"], req, "replies come in request order");
            Some(reply)
        }

        /// Sends `request` with a fresh req and returns its reply.
        pub fn call(&mut self, request: Value) -> Value {
            self.try_call(request)
                .expect("a reply before stdout closed")
        }

        pub fn ok(&mut self, request: Value) -> Value {
            let reply = self.call(request);
            assert_eq!(reply["ok"], true, "{reply}");
            reply
        }

        pub fn error_kind(&mut self, request: Value) -> String {
            let reply = self.call(request);
            assert_eq!(reply["ok"], false, "{reply}");
            let error = &reply["error"];
            assert!(error["message"].is_string(), "{reply}");
            error["kind"].as_str().expect("kind is a string").to_owned()
        }

        pub fn schedule(&mut self, mut request: Value) -> String {
            request["op"] = json!("schedule");
            let reply = self.ok(request);
            let id = reply["id"].as_str().expect("id is a string").to_owned();
            assert!(
                !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
                "{id}"
            );
            id
        }

        /// The first fired event for `id` with `attempt`, from the kept events or the stream.
        pub fn fired(&mut self, id: &str, attempt: u64) -> Value {
            self.fired_where(|e| e["id"] == id && e["attempt"] == attempt)
        }

        /// The first fired event that `matches`, from the kept events or the stream.
        pub fn fired_where(&mut self, matches: impl Fn(&Value) -> bool) -> Value {
            let matches = |e: &Value| e["event"] == "fired" && matches(e);
            if let Some(i) = self.events.iter().position(matches) {
                return self.events.remove(i);
            }
            loop {
                let v = self.next_line().expect("the event before stdout closed");
                assert!(
                    v.get("event").is_some(),
                    "no request pending, so no reply: {v}"
                );
                if matches(&v) {
                    return v;
                }
                self.events.push(v);
            }
        }

        /// The events kept so far, oldest first.
        pub fn take_events(&mut self) -> Vec<Value> {
            std::mem::take(&mut self.events)
        }

        pub fn stats(&mut self) -> Value {
            let reply = self.ok(json!({"op": "stats"}));
            reply["stats"].clone()
        }

        /// Closes stdin (EOF) and waits for the exit.
        pub fn finish(mut self) -> ExitStatus {
            drop(self.stdin.take());
            self.wait()
        }

        pub fn wait(&mut self) -> ExitStatus {
            let deadline = Instant::now() + LINE_TIMEOUT;
            loop {
                if let Some(status) = self.child.try_wait().expect("try_wait") {
                    return status;
                }
                if Instant::now() > deadline {
                    let _ = self.child.kill();
                    panic!("the sidecar did not exit");
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }

        /// SIGKILL, then reap.
        pub fn kill(mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    impl Drop for Sidecar {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Schedules `spec()` until the log can not grow (the test has made the disk refuse to
/// allocate, `FaultDisk::set_enospc(true)`): returns the ids scheduled before the first
/// `NoSpace`. Panics on any other error, or if `tries` schedules all fit.
pub fn fill_until_no_space(
    engine: &Engine,
    tries: usize,
    spec: impl Fn() -> JobSpec,
) -> Vec<JobId> {
    let mut ids = Vec::new();
    for _ in 0..tries {
        match engine.schedule(spec()) {
            Ok(id) => ids.push(id),
            Err(Error::NoSpace { .. }) => return ids,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    panic!("{tries} schedules fit: the log never filled up");
}

/// A schedule refused at once while the back-off after a failed allocation lasts
/// (`Config::no_space_retry_ms`): `NoSpace`, saying so.
pub fn assert_refused_by_back_off<T: std::fmt::Debug>(result: timewheel::Result<T>) {
    match result {
        Err(Error::NoSpace { source, .. }) => {
            assert!(source.to_string().contains("refused"), "{source}")
        }
        other => panic!("expected NoSpace, got {other:?}"),
    }
}

/// The end of an oracle run (`threads_oracle`, `async_oracle`): a power cut that keeps only
/// what was synced, a reopen, and the check that every acknowledged job (with its due time,
/// where the oracle knows it) is back unless its end was acknowledged, and that the engine
/// holds no job the oracle never heard of.
pub fn check_after_power_cut(
    engine: Engine,
    disk: &FaultDisk,
    config: Config,
    clock: Arc<dyn timewheel::Clock>,
    acked: impl IntoIterator<Item = (JobId, Option<u64>)>,
    ended: impl Fn(&JobId) -> bool,
) {
    engine.abandon();
    let disk = disk.crash(&timewheel_wal::testing::CrashOptions::clean());
    let engine = Engine::open_on(disk.storage(), config, clock).expect("reopens");
    let mut live = 0u64;
    for (id, due) in acked {
        let info = engine.get(id);
        if ended(&id) {
            assert!(
                info.is_none(),
                "job {id} came back after its acknowledged end"
            );
        } else {
            let info = info.unwrap_or_else(|| panic!("acknowledged job {id} lost"));
            if let Some(due) = due {
                assert_eq!(info.due_ms, due, "job {id}'s due time");
            }
            live += 1;
        }
    }
    let s = engine.stats();
    assert_eq!(
        s.scheduled + s.ready + s.running,
        live,
        "no job the oracle never heard of"
    );
}

/// A claim as an oracle sees it: not before the job's due time by the test's own clock
/// (`now_ms`, read after the claim returned), not before the job was ready, and not after its
/// cancel or completion was acknowledged.
pub fn check_claim(
    c: &timewheel::Claimed,
    now_ms: u64,
    cancelled: &std::collections::HashSet<JobId>,
    completed: &std::collections::HashSet<JobId>,
) {
    assert!(
        c.due_ms <= now_ms,
        "job {} due {} claimed at {now_ms}",
        c.id,
        c.due_ms
    );
    assert!(c.ready_at_ms >= c.due_ms && c.ready_at_ms <= now_ms);
    assert!(
        !cancelled.contains(&c.id),
        "job {} claimed after its cancel",
        c.id
    );
    assert!(
        !completed.contains(&c.id),
        "job {} claimed after completion",
        c.id
    );
}

/// An acknowledged completion of `c` (`done`: what `complete` returned): no (job, attempt) is
/// delivered twice, and with a lease far longer than the run, every completion takes.
pub fn record_completion(
    c: &timewheel::Claimed,
    done: bool,
    claims: &mut std::collections::HashSet<(JobId, u32)>,
    completed: &mut std::collections::HashSet<JobId>,
) {
    assert!(
        claims.insert((c.id, c.attempt)),
        "attempt {} of {} twice",
        c.attempt,
        c.id
    );
    assert!(done, "a lease of 60 s does not run out here");
    completed.insert(c.id);
}

/// Acknowledged cancels (`out`, what `cancel_batch` returned for `ids`): a job is cancelled
/// once, and never after its completion was acknowledged.
pub fn record_cancels(
    ids: &[JobId],
    out: Vec<timewheel::Outcome>,
    cancelled: &mut std::collections::HashSet<JobId>,
    completed: &std::collections::HashSet<JobId>,
) {
    for (id, o) in ids.iter().zip(out) {
        if o == timewheel::Outcome::Done {
            assert!(
                !completed.contains(id),
                "cancelled {id} after its completion"
            );
            assert!(cancelled.insert(*id), "cancelled {id} twice");
        }
    }
}
