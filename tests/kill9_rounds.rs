//! Real crash rounds: `timewheel serve` is driven over pipes and killed with SIGKILL at a random
//! moment, again and again on the same directory; the oracle is checked from the outside.
//!
//! What must hold, whatever the moment of the kill:
//! - every schedule whose reply was received fires (again) after a restart, unless its cancel or
//!   its completion was acknowledged;
//! - no job fires after its cancel or its completion was acknowledged;
//! - each delivery of a job has a higher attempt than every earlier one, across crashes too (the
//!   claim is durable before its event is printed);
//! - nothing fires before its due time, by the test's own clock when it reads the event (not
//!   the `fired_ms` the sidecar reports); no id is ever handed out twice.
//!
//! Requests go one at a time and, now and then, as a burst of completes and cancels written at
//! once, which the sidecar serves as batches with one sync each. A quarter of the lives run
//! longer, with the compactor every 100 ms and `--seal-after-ms 1000`: their journal segment
//! is sealed and folded into bucket files while they run, so the kill lands before, during or
//! after a seal and a compaction pass too.
//!
//! `cargo test` runs a few rounds; `KILL_ROUNDS=100 cargo test --release --test kill9_rounds`
//! runs a campaign (`KILL_SEED` picks the random stream). Timeouts only guard against hangs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::sidecar::{SEEN_MS, Sidecar, id_of, now_ms};
use serde_json::{Value, json};
use timewheel_wal::testing::SimRng;

const GUARD: Duration = Duration::from_secs(30);

/// The options of every life: a lease longer than the test, so a delivery is never repeated
/// within a life.
const LEASE: [&str; 2] = ["--lease-ms", "60000"];

/// The options added for a sealing life: the compactor every 100 ms, and the segment sealed
/// once it has held records for a second.
const SEALING: [&str; 4] = ["--compact-interval-ms", "100", "--seal-after-ms", "1000"];

/// What the client was told: the oracle.
#[derive(Default)]
struct Oracle {
    /// Acknowledged schedules: id -> due.
    scheduled: BTreeMap<u64, u64>,
    /// Acknowledged cancels and completions: the job must never fire again.
    finished: BTreeMap<u64, String>,
    /// The life now running (1 for the first), for the messages.
    life: u64,
    /// Cancels and completions sent when the process was killed: their outcome is unknown, so
    /// the job may fire again or not.
    maybe_finished: BTreeSet<u64>,
    /// Every id ever handed out.
    ids: BTreeSet<u64>,
    /// Fired at least once (in any life).
    fired: BTreeSet<u64>,
    /// The highest attempt seen in an event of each job: a claim is durable before its event
    /// is printed, so after a crash the job comes back with a higher one (the fencing token
    /// is never handed out twice).
    attempts: BTreeMap<u64, u64>,
    /// Deliveries of a job seen delivered before.
    redeliveries: u64,
    violations: Vec<String>,
    /// Lives run with early seals and frequent compaction.
    sealing_lives: u64,
    /// The highest journal segment id seen in the directory after a life: above 1 once a
    /// segment was sealed (the rounds never fill one).
    last_segment: u64,
}

impl Oracle {
    /// Checks an event against what the client was told. "Never early" is judged by the
    /// test's own clock when it read the line, not by the `fired_ms` the sidecar reports.
    fn on_event(&mut self, ev: &Value) {
        let id = id_of(ev);
        let due = ev["due_ms"].as_u64().expect("due_ms");
        let seen_ms = ev[SEEN_MS].as_u64().expect("stamped by the helper");
        if seen_ms < due {
            self.violations.push(format!(
                "job {id} read at {seen_ms} by the test's clock, before its due {due}"
            ));
        }
        if let Some(&acked_due) = self.scheduled.get(&id)
            && acked_due != due
        {
            self.violations.push(format!(
                "job {id} fired with due {due}, scheduled for {acked_due}"
            ));
        }
        if let Some(how) = self.finished.get(&id) {
            self.violations.push(format!(
                "job {id} fired (attempt {}, life {}) after its {how}",
                ev["attempt"], self.life
            ));
        }
        let attempt = ev["attempt"].as_u64().expect("attempt");
        let before = self.attempts.insert(id, attempt).unwrap_or(0);
        self.redeliveries += u64::from(before > 0);
        if attempt <= before {
            self.violations.push(format!(
                "job {id} delivered with attempt {attempt} after attempt {before} was seen"
            ));
        }
        self.fired.insert(id);
    }

    fn take_events(&mut self, sc: &mut Sidecar) {
        for ev in sc.take_events() {
            self.on_event(&ev);
        }
    }

    /// Jobs that must still fire.
    fn owed(&self) -> BTreeSet<u64> {
        self.scheduled
            .keys()
            .filter(|id| !self.finished.contains_key(id) && !self.maybe_finished.contains(id))
            .copied()
            .collect()
    }
}

/// The id a cancel or complete names.
fn target(req: &Value) -> Option<u64> {
    req.get("id")
        .and_then(|v| v.as_str())
        .and_then(|s| s.parse().ok())
}

/// One life of the sidecar: random requests until a SIGKILL at a random moment. Some steps
/// write a burst of completes and cancels at once, so that the kill also lands in the middle
/// of batches the sidecar serves with one sync.
fn life(dir: &Path, rng: &mut SimRng, oracle: &mut Oracle, tag: &mut u64) {
    oracle.life += 1;
    let sealing = rng.chance(0.25);
    let mut args = LEASE.to_vec();
    let kill_after = if sealing {
        oracle.sealing_lives += 1;
        args.extend(SEALING);
        Duration::from_millis(1_300 + rng.below(1_000))
    } else {
        Duration::from_millis(rng.below(400))
    };
    let mut sc = Sidecar::start_quiet(dir, &args);
    let pid = sc.pid();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(kill_after);
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .ok();
    });
    'life: loop {
        // Fired in some life and not finished: this life may hold them (or deliver them
        // soon); completing one it does not hold is answered not_found, which is fine.
        let held: Vec<u64> = oracle
            .fired
            .iter()
            .copied()
            .filter(|id| !oracle.finished.contains_key(id) && !oracle.maybe_finished.contains(id))
            .collect();
        let owed: Vec<u64> = oracle.owed().into_iter().collect();
        let pick = |rng: &mut SimRng, from: &[u64]| from[rng.below(from.len() as u64) as usize];
        let op = rng.below(10);
        let requests: Vec<Value> = if op < 6 || owed.is_empty() {
            vec![json!({"op": "schedule", "due_ms": now_ms() + rng.below(600), "payload": "k"})]
        } else if op < 8 {
            vec![json!({"op": "cancel", "id": pick(rng, &owed).to_string()})]
        } else if op < 9 {
            let Some(&id) = held.first() else { continue };
            vec![json!({"op": "complete", "id": id.to_string()})]
        } else {
            // A burst: completes of what may be held, then cancels of what is owed.
            let mut burst: Vec<Value> = held
                .iter()
                .take(20)
                .map(|id| json!({"op": "complete", "id": id.to_string()}))
                .collect();
            for _ in 0..rng.below(6) {
                burst.push(json!({"op": "cancel", "id": pick(rng, &owed).to_string()}));
            }
            burst
        };
        let first_tag = *tag + 1;
        let mut bytes = Vec::new();
        for request in &requests {
            *tag += 1;
            let mut request = request.clone();
            request["req"] = json!(*tag);
            bytes.extend_from_slice(format!("{request}\n").as_bytes());
        }
        if !sc.try_write(&bytes) {
            // Killed before reading any: their outcomes are unknown.
            oracle
                .maybe_finished
                .extend(requests.iter().filter_map(target));
            break;
        }
        for (i, request) in requests.iter().enumerate() {
            let reply = sc.try_reply();
            oracle.take_events(&mut sc);
            let Some(reply) = reply else {
                // Killed: this request's outcome, and the later ones', are unknown.
                oracle
                    .maybe_finished
                    .extend(requests[i..].iter().filter_map(target));
                break 'life;
            };
            assert_eq!(
                reply["req"],
                json!(first_tag + i as u64),
                "in order: {reply}"
            );
            match request["op"].as_str().expect("op") {
                "schedule" => {
                    assert_eq!(reply["ok"], json!(true), "schedule: {reply}");
                    let id = id_of(&reply);
                    if !oracle.ids.insert(id) {
                        oracle.violations.push(format!("id {id} handed out twice"));
                    }
                    oracle
                        .scheduled
                        .insert(id, request["due_ms"].as_u64().expect("due"));
                }
                "cancel" => {
                    if reply["cancelled"] == json!(true) {
                        let how = format!(
                            "cancel was acked in life {} ({} of {})",
                            oracle.life,
                            i + 1,
                            requests.len()
                        );
                        oracle.finished.insert(target(request).expect("id"), how);
                    }
                }
                _ => {
                    if reply["ok"] == json!(true) {
                        let how = format!(
                            "complete was acked in life {} ({} of {})",
                            oracle.life,
                            i + 1,
                            requests.len()
                        );
                        oracle.finished.insert(target(request).expect("id"), how);
                    }
                }
            }
        }
    }
    killer.join().ok();
    sc.kill();
    let newest = std::fs::read_dir(dir)
        .expect("the directory lists")
        .filter_map(|e| {
            timewheel_wal::parse_segment_file_name(&e.ok()?.file_name().to_string_lossy())
        })
        .max()
        .unwrap_or(0);
    oracle.last_segment = oracle.last_segment.max(newest);
}

fn run_campaign(seed: u64, rounds: u64) {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("timewheel-kill9-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("kill -9 campaign: KILL_SEED={seed} KILL_ROUNDS={rounds}");
    let mut rng = SimRng::new(seed);
    let mut oracle = Oracle::default();
    let mut tag = 0;
    for _ in 0..rounds {
        life(&dir, &mut rng, &mut oracle, &mut tag);
    }
    // A last life that completes everything: every owed job must fire, the rest never.
    oracle.life += 1;
    let mut sc = Sidecar::start_quiet(&dir, &["--auto-complete", LEASE[0], LEASE[1]]);
    let owed = oracle.owed();
    let deadline = Instant::now() + GUARD;
    let mut fired_last: BTreeSet<u64> = BTreeSet::new();
    let watch = |sc: &mut Sidecar, oracle: &mut Oracle, fired_last: &mut BTreeSet<u64>| {
        if let Ok(Some(v)) = sc.next_line_within(Duration::from_millis(50))
            && v.get("event").is_some()
        {
            oracle.on_event(&v);
            fired_last.insert(id_of(&v));
        }
    };
    while !owed.is_subset(&fired_last) && Instant::now() < deadline {
        watch(&mut sc, &mut oracle, &mut fired_last);
    }
    // Give any wrongly resurrected job (one due up to 600 ms ahead) time to show itself.
    let settle = Instant::now() + Duration::from_millis(700);
    while Instant::now() < settle {
        watch(&mut sc, &mut oracle, &mut fired_last);
    }
    assert!(sc.finish().success(), "the last life exits 0");
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
        "kill -9 seed {seed}: {rounds} rounds ({} with early seals, journal segment ids up to {}), {} acked schedules, {} acked cancels/completions, {} redeliveries with a higher attempt, all held",
        oracle.sealing_lives,
        oracle.last_segment,
        oracle.scheduled.len(),
        oracle.finished.len(),
        oracle.redeliveries
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
