//! Real crash rounds: `timewheel serve` is driven over pipes and killed with SIGKILL at a random
//! moment, again and again on the same directory; the oracle is checked from the outside.
//!
//! What must hold, whatever the moment of the kill:
//! - every schedule whose reply was received fires (again) after a restart, unless its cancel or
//!   its completion was acknowledged;
//! - no job fires after its cancel or its completion was acknowledged;
//! - nothing fires before its due time; no id is ever handed out twice.
//!
//! `cargo test` runs a few rounds; `KILL_ROUNDS=100 cargo test --release --test kill9_rounds`
//! runs a campaign (`KILL_SEED` picks the random stream). Timeouts only guard against hangs.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use timewheel_wal::testing::SimRng;

const GUARD: Duration = Duration::from_secs(30);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// What the client was told: the oracle.
#[derive(Default)]
struct Oracle {
    /// Acknowledged schedules: id -> due.
    scheduled: BTreeMap<u64, u64>,
    /// Acknowledged cancels and completions: the job must never fire again.
    finished: BTreeSet<u64>,
    /// Cancels and completions sent when the process was killed: their outcome is unknown, so
    /// the job may fire again or not.
    maybe_finished: BTreeSet<u64>,
    /// Every id ever handed out.
    ids: BTreeSet<u64>,
    /// Fired at least once (in any life).
    fired: BTreeSet<u64>,
    violations: Vec<String>,
}

impl Oracle {
    fn on_event(&mut self, ev: &Value) {
        let id: u64 = ev["id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("event id");
        let due = ev["due_ms"].as_u64().expect("due_ms");
        let fired_ms = ev["fired_ms"].as_u64().expect("fired_ms");
        if fired_ms < due {
            self.violations.push(format!(
                "job {id} fired at {fired_ms}, before its due {due}"
            ));
        }
        if self.finished.contains(&id) {
            self.violations.push(format!(
                "job {id} fired after its cancel/complete was acked"
            ));
        }
        self.fired.insert(id);
    }

    /// Jobs that must still fire.
    fn owed(&self) -> BTreeSet<u64> {
        self.scheduled
            .keys()
            .filter(|id| !self.finished.contains(id) && !self.maybe_finished.contains(id))
            .copied()
            .collect()
    }
}

struct Sidecar {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Sidecar {
    fn start(dir: &Path, auto_complete: bool) -> Sidecar {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_timewheel"));
        cmd.arg("serve")
            .arg("--dir")
            .arg(dir)
            .args(["--lease-ms", "60000"]);
        if auto_complete {
            cmd.arg("--auto-complete");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn timewheel serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(l) = line else { return };
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take().expect("stdin");
        Sidecar {
            child,
            stdin,
            lines,
        }
    }

    /// Sends a request and waits for its reply, feeding events to the oracle. `None` when the
    /// process died first (the request's outcome is then unknown).
    fn call(&mut self, oracle: &mut Oracle, mut req: Value, tag: u64) -> Option<Value> {
        req["req"] = json!(tag);
        let line = format!("{req}\n");
        if self
            .stdin
            .write_all(line.as_bytes())
            .and_then(|()| self.stdin.flush())
            .is_err()
        {
            return None;
        }
        let deadline = Instant::now() + GUARD;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let v: Value = serde_json::from_str(&l).expect("every stdout line is JSON");
                    if v.get("event").is_some() {
                        oracle.on_event(&v);
                    } else if v["req"] == json!(tag) {
                        return Some(v);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => panic!("no reply within the guard time"),
            }
        }
    }

    fn kill(mut self) {
        self.child.kill().ok(); // SIGKILL
        self.child.wait().ok();
    }
}

fn id_of(v: &Value) -> u64 {
    v["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("a decimal-string id")
}

/// One life of the sidecar: random requests until a SIGKILL at a random moment.
fn life(dir: &Path, rng: &mut SimRng, oracle: &mut Oracle, tag: &mut u64) {
    let mut sc = Sidecar::start(dir, false);
    let pid = sc.child.id();
    let kill_after = Duration::from_millis(rng.below(400));
    let killer = std::thread::spawn(move || {
        std::thread::sleep(kill_after);
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .ok();
    });
    let mut held: Vec<u64> = Vec::new(); // fired in this life, not yet completed
    loop {
        *tag += 1;
        let op = rng.below(10);
        let req = if op < 6 || oracle.scheduled.is_empty() {
            json!({"op": "schedule", "due_ms": now_ms() + rng.below(600), "payload": "k"})
        } else if op < 8 {
            let owed: Vec<u64> = oracle.owed().into_iter().collect();
            if owed.is_empty() {
                continue;
            }
            let id = owed[rng.below(owed.len() as u64) as usize];
            json!({"op": "cancel", "id": id.to_string()})
        } else {
            held.retain(|id| !oracle.finished.contains(id));
            let fired_now: Vec<u64> = oracle
                .fired
                .iter()
                .copied()
                .filter(|id| !oracle.finished.contains(id))
                .collect();
            held.extend(fired_now);
            let Some(&id) = held.first() else { continue };
            json!({"op": "complete", "id": id.to_string()})
        };
        let kind = req["op"].as_str().expect("op").to_owned();
        let target = req
            .get("id")
            .and_then(|v| v.as_str())
            .and_then(|s| s.parse::<u64>().ok());
        let Some(reply) = sc.call(oracle, req.clone(), *tag) else {
            // Killed: this request's outcome is unknown.
            if let Some(id) = target {
                oracle.maybe_finished.insert(id);
            }
            break;
        };
        match kind.as_str() {
            "schedule" => {
                assert_eq!(reply["ok"], json!(true), "schedule: {reply}");
                let id = id_of(&reply);
                if !oracle.ids.insert(id) {
                    oracle.violations.push(format!("id {id} handed out twice"));
                }
                oracle
                    .scheduled
                    .insert(id, req["due_ms"].as_u64().expect("due"));
            }
            "cancel" => {
                if reply["cancelled"] == json!(true) {
                    oracle.finished.insert(target.expect("id"));
                }
            }
            _ => {
                if reply["ok"] == json!(true) {
                    oracle.finished.insert(target.expect("id"));
                }
                held.retain(|&h| Some(h) != target);
            }
        }
    }
    killer.join().ok();
    sc.kill();
}

fn run_campaign(seed: u64, rounds: u64) {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("timewheel-kill9-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut rng = SimRng::new(seed);
    let mut oracle = Oracle::default();
    let mut tag = 0;
    for _ in 0..rounds {
        life(&dir, &mut rng, &mut oracle, &mut tag);
    }
    // A last life that completes everything: every owed job must fire, the rest never.
    let mut sc = Sidecar::start(&dir, true);
    let owed = oracle.owed();
    let deadline = Instant::now() + GUARD;
    let mut fired_last: BTreeSet<u64> = BTreeSet::new();
    while !owed.is_subset(&fired_last) && Instant::now() < deadline {
        if let Ok(l) = sc.lines.recv_timeout(Duration::from_millis(200)) {
            let v: Value = serde_json::from_str(&l).expect("JSON line");
            if v.get("event").is_some() {
                oracle.on_event(&v);
                fired_last.insert(id_of(&v));
            }
        }
    }
    // Give any wrongly resurrected job (one due up to 600 ms ahead) time to show itself.
    let settle = Instant::now() + Duration::from_millis(700);
    while Instant::now() < settle {
        if let Ok(l) = sc.lines.recv_timeout(Duration::from_millis(50)) {
            let v: Value = serde_json::from_str(&l).expect("JSON line");
            if v.get("event").is_some() {
                oracle.on_event(&v);
            }
        }
    }
    drop(sc.stdin);
    sc.child.wait().ok();
    let missing: Vec<_> = owed.difference(&fired_last).collect();
    if !missing.is_empty() {
        oracle.violations.push(format!(
            "acknowledged jobs never fired after restart: {missing:?}"
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        oracle.violations.is_empty(),
        "kill -9 campaign seed {seed} ({rounds} rounds; replay with KILL_SEED={seed} KILL_ROUNDS={rounds}): {:#?}",
        oracle.violations
    );
    eprintln!(
        "kill -9 seed {seed}: {rounds} rounds, {} acked schedules, {} acked cancels/completions, all held",
        oracle.scheduled.len(),
        oracle.finished.len()
    );
}

#[test]
fn acknowledged_jobs_survive_sigkill_at_random_moments() {
    let rounds = std::env::var("KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let seed = std::env::var("KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    run_campaign(seed, rounds);
}
