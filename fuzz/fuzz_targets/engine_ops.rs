//! Bounded sequences of engine operations on the fault-injecting disk with a manual clock,
//! checked after every step against the engine model shared with the simulation
//! (`tests/model/mod.rs`, included by path): every answer (claim, `cancel` and `reschedule`
//! `Outcome`s, complete, fail) is the model's; run_timers fires exactly the due jobs, the
//! expired leases and the ready jobs nobody claimed in time (none early, none cancelled or
//! finished, none before its commit); counts per state, finished and fired and the ready
//! channel's depth match after every step; after every reopen and crash the acknowledged jobs
//! are back with their due times, payloads and the attempt of their last durable claim, the
//! next claim's attempt the model's (one number skipped per crash a waiting job lived through)
//! and never one handed out before, missed and interrupted ones queued in due order,
//! nothing visible before it is durable (`schedule_batch_nowait` jobs appear only at `commit`;
//! uncommitted ones may vanish), and ids are never reused. The disk is healthy here: every
//! engine call must succeed, so the model is exact (its uncertainty is only that of an
//! unsynced append).
#![no_main]

use std::sync::{Arc, LazyLock};

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use timewheel::{
    Backoff, Claimed, Clock, Config, Engine, JobId, ManualClock, Pending, RetryPolicy,
};
use timewheel_wal::testing::{CrashOptions, FaultDisk};

#[path = "../../tests/model/mod.rs"]
mod model;

use model::{Ending, Gone, Model, REASONS, Spec, Violation};

/// Limits that keep one execution small.
const OPS_MAX: usize = 96;
const BATCH_JOBS_MAX: u8 = 8;
const PAYLOAD_BYTES_MAX: usize = 64;
/// Idempotency keys are `k0`..`k3`.
const KEYS: u8 = 4;
const LEASE_MS: u64 = 1_000;
const SEGMENT_BYTES: u64 = 8192;
/// A start far from the epoch, so dues in the past stay positive.
const T0_MS: u64 = 1_800_000_000_000;
const DAY_MS: u64 = 86_400_000;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum DueChoice {
    PastMs(u16),
    Now,
    SoonMs(u16),
    LaterSecs(u16),
    Days(u8),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Step {
    Ms(u8),
    Secs(u8),
    Hours(u8),
    Days(u8),
}

#[derive(Arbitrary, Debug)]
enum Op {
    Schedule {
        due: DueChoice,
        payload_len: u8,
        fill: u8,
        binary: bool,
    },
    Batch {
        n: u8,
        due: DueChoice,
        spread_ms: u8,
    },
    /// In the log, not acknowledged and not visible until `Sync` commits it: a crash may keep
    /// it or not.
    BatchNoWait {
        n: u8,
        due: DueChoice,
    },
    Sync,
    Cancel {
        pick: u16,
    },
    Reschedule {
        pick: u16,
        due: DueChoice,
    },
    Advance(Step),
    /// A clock stepped backwards a little; the engine holds its time.
    ClockBack {
        ms: u16,
    },
    RunTimers,
    Claim {
        pick: u16,
    },
    ClaimAllReady,
    Complete {
        pick: u16,
    },
    CompleteBatch {
        picks: Vec<u16>,
    },
    /// Ends a held attempt: `how % 4` is a retryable `fail`, `fail_permanently`, `retry_at`
    /// (`how` ms from now) or `extend_lease` (`how` ms; the claim stays held).
    Fail {
        pick: u16,
        how: u8,
        reason: u8,
    },
    Reopen,
    /// One compaction pass: invisible to the model (nothing the engine holds changes).
    Compact,
    Crash {
        keep_unsynced: u8,
        torn_pages: bool,
        bit_flips_unsynced: u8,
        undo_dir_ops: bool,
    },
    /// A schedule with an idempotency key (`k{key % KEYS}`), its own retry policy when `own`.
    KeyedSchedule {
        key: u8,
        due: DueChoice,
        own: bool,
    },
    CancelByKey {
        key: u8,
    },
    /// `requeue_dead` of a picked id (mostly dead ones).
    Requeue {
        pick: u16,
    },
    /// `purge_dead` of a picked id, or every dead job (`all`).
    Purge {
        pick: u16,
        all: bool,
    },
}

/// `Config::retry` of `config()`: few attempts, so that leases running out bury jobs.
const RETRY: RetryPolicy = RetryPolicy {
    max_attempts: 3,
    backoff: Backoff::new(10, 1_000),
};

/// How many ids a claim may be named by: old claims are kept only for stale completions.
const HELD_MAX: usize = 32;
/// `Config::id_block` of `config()` (the default).
const ID_BLOCK: u64 = 1 << 16;

/// `ENGINE_OPS_TRACE` set: print each operation (read once, not per operation).
static TRACE: LazyLock<bool> = LazyLock::new(|| std::env::var_os("ENGINE_OPS_TRACE").is_some());

struct Sim {
    disk: FaultDisk,
    clock: ManualClock,
    engine: Option<Engine>,
    model: Model,
    held: Vec<Claimed>,
    /// `BatchNoWait` batches not yet committed, with the model's mark of their append.
    pending: Vec<(Pending, Vec<JobId>, u64)>,
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(seed) = u64::arbitrary(&mut u) else {
        return;
    };
    let mut sim = Sim::new(seed);
    for op in u.arbitrary_iter::<Op>().unwrap().take(OPS_MAX) {
        let Ok(op) = op else { break };
        if *TRACE {
            eprintln!("{op:?}");
        }
        // A clock step calls nothing of the engine's: its counts cannot change (and `stats`
        // is what a step's check costs most).
        let calls_engine = !matches!(op, Op::Advance(_) | Op::ClockBack { .. });
        sim.step(op);
        if calls_engine {
            check(sim.model.check_counts(sim.engine()));
            check(sim.model.check_keys(sim.engine()));
        }
    }
    sim.reopen(None);
});

fn config() -> Config {
    let mut c = Config::new("/nonexistent-unused");
    c.segment_bytes = SEGMENT_BYTES;
    c.payload_bytes_max = 256;
    c.fail_reason_bytes_max = 256;
    c.retry = RETRY;
    c.lease_ms = LEASE_MS;
    c.timer_thread = false;
    c.disk_ballast_bytes = 0;
    // A pass seals the segment appended to once it has held records a second (the least the
    // engine takes), so that most passes after a clock step seal one: a log rolled early,
    // folded at once, then crashed or reopened.
    c.seal_after_ms = 1_000;
    // The job table's smallest chunks: an input's few dozen jobs fill and give back chunks,
    // and jobs move between slots with their timers.
    c.job_table_chunk_slots = 16;
    assert_eq!(c.id_block, ID_BLOCK);
    c
}

/// A model violation is a crash.
fn check<T>(r: Result<T, Violation>) -> T {
    r.unwrap_or_else(|v| panic!("{}", v.0))
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let disk = FaultDisk::new(seed);
        let clock = ManualClock::new(T0_MS);
        let engine = Engine::open_on(disk.storage(), config(), Arc::new(clock.clone()))
            .expect("a fresh engine opens");
        let mut model = Model::new(T0_MS, LEASE_MS, ID_BLOCK).with_retry(RETRY);
        let wrong = check(model.opened(&engine));
        assert!(wrong.is_empty(), "a fresh engine: {wrong:?}");
        Sim {
            disk,
            clock,
            engine: Some(engine),
            model,
            held: Vec::new(),
            pending: Vec::new(),
        }
    }

    fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("open")
    }

    fn due(&self, d: DueChoice) -> u64 {
        let now = self.clock.now_ms();
        match d {
            DueChoice::PastMs(ms) => now.saturating_sub(u64::from(ms)),
            DueChoice::Now => now,
            DueChoice::SoonMs(ms) => now + u64::from(ms),
            DueChoice::LaterSecs(s) => now + u64::from(s) * 1_000,
            DueChoice::Days(d) => now + u64::from(d % 60) * DAY_MS,
        }
    }

    /// An id to act on: a job that may exist, a finished one, or one never handed out.
    fn pick_id(&self, pick: u16) -> JobId {
        let known = self.model.pick_order();
        let i = usize::from(pick) % (known.len() + 1);
        let max_known = known.iter().copied().max().unwrap_or(0);
        JobId(
            known
                .get(i)
                .copied()
                .unwrap_or(self.model.id_floor.max(max_known) + 1 + u64::from(pick % 3)),
        )
    }

    fn pick_held(&self, pick: u16) -> Option<Claimed> {
        if self.held.is_empty() {
            None
        } else {
            Some(self.held[usize::from(pick) % self.held.len()].clone())
        }
    }

    fn set_clock(&mut self, ms: u64) {
        self.clock.set(ms);
        self.model.set_clock(ms);
    }

    fn schedule(&mut self, specs: Vec<Spec>, wait: bool) {
        let js = specs.iter().map(Spec::job_spec);
        if wait {
            let ids = self
                .engine()
                .schedule_batch(js)
                .expect("schedule on a healthy disk");
            check(self.model.scheduled(&specs, Ok(ids)));
        } else {
            let (ids, pending) = self
                .engine()
                .schedule_batch_nowait(js)
                .expect("schedule on a healthy disk");
            let engine = self.engine.as_ref().expect("open");
            check(self.model.appended(&specs, &ids, engine));
            self.pending.push((pending, ids, self.model.append_mark()));
        }
    }

    /// Keeps a claim the engine handed out (the newest ones, for stale completions too).
    fn hold(&mut self, c: Claimed) {
        self.held.retain(|h| h.id != c.id || h.attempt != c.attempt);
        self.held.push(c);
        if self.held.len() > HELD_MAX {
            self.held.remove(0);
        }
    }

    fn claim(&mut self, ids: &[JobId]) {
        let got = self
            .engine()
            .claim_batch(ids)
            .expect("claim on a healthy disk");
        let engine = self.engine.as_ref().expect("open");
        check(self.model.claim(ids, Ok(got.clone()), engine));
        for c in got.into_iter().flatten() {
            self.hold(c);
        }
    }

    fn finish(&mut self, batch: &[Claimed], how: Gone, got: Vec<bool>) {
        let engine = self.engine.as_ref().expect("open");
        check(self.model.finish(batch, how, Ok(got.clone()), engine));
        for (c, ok) in batch.iter().zip(got) {
            if ok {
                self.held.retain(|h| h.id != c.id);
            }
        }
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Schedule {
                due,
                payload_len,
                fill,
                binary,
            } => {
                let payload = vec![fill; usize::from(payload_len) % (PAYLOAD_BYTES_MAX + 1)];
                let spec = Spec::plain(self.due(due), payload, binary);
                self.schedule(vec![spec], true);
            }
            Op::Batch { n, due, spread_ms } => {
                let first = self.due(due);
                let specs = (0..1 + n % BATCH_JOBS_MAX)
                    .map(|i| {
                        Spec::plain(first + u64::from(i) * u64::from(spread_ms), vec![i], false)
                    })
                    .collect();
                self.schedule(specs, true);
            }
            Op::BatchNoWait { n, due } => {
                let first = self.due(due);
                let specs = (0..1 + n % BATCH_JOBS_MAX)
                    .map(|i| Spec::plain(first + u64::from(i), Vec::new(), false))
                    .collect();
                self.schedule(specs, false);
            }
            Op::Sync => {
                self.engine().sync().expect("sync on a healthy disk");
                self.model.synced(Ok(()));
                for (pending, ids, mark) in std::mem::take(&mut self.pending) {
                    self.engine()
                        .commit(pending)
                        .expect("commit on a healthy disk");
                    self.model.committed(&ids, mark, Ok(()));
                }
            }
            Op::Cancel { pick } => {
                let id = self.pick_id(pick);
                let got = self.engine().cancel(id).expect("cancel on a healthy disk");
                let engine = self.engine.as_ref().expect("open");
                check(self.model.cancel(id.0, Ok(got), engine));
            }
            Op::Reschedule { pick, due } => {
                let id = self.pick_id(pick);
                let due_ms = self.due(due);
                let got = self
                    .engine()
                    .reschedule(id, due_ms)
                    .expect("reschedule on a healthy disk");
                let engine = self.engine.as_ref().expect("open");
                check(self.model.reschedule(id.0, due_ms, Ok(got), engine));
            }
            Op::Advance(step) => {
                let ms = match step {
                    Step::Ms(n) => u64::from(n),
                    Step::Secs(n) => u64::from(n) * 1_000,
                    Step::Hours(n) => u64::from(n % 48) * 3_600_000,
                    Step::Days(n) => u64::from(n % 40) * DAY_MS,
                };
                self.set_clock(self.clock.now_ms() + ms);
            }
            Op::ClockBack { ms } => {
                let now = self.clock.now_ms();
                self.set_clock(now.saturating_sub(u64::from(ms)).max(T0_MS));
            }
            Op::RunTimers => {
                let engine = self.engine.as_ref().expect("open");
                engine.run_timers();
                let fired: Vec<JobId> = engine.ready().try_iter().collect();
                check(self.model.run_timers(&fired));
                check(self.model.check_live(engine));
            }
            Op::Claim { pick } => {
                let id = self.pick_id(pick);
                self.claim(&[id]);
            }
            Op::ClaimAllReady => {
                let ready = self.model.ready_ids();
                self.claim(&ready);
            }
            Op::Complete { pick } => {
                let Some(c) = self.pick_held(pick) else {
                    return;
                };
                let got = self
                    .engine()
                    .complete(&c)
                    .expect("complete on a healthy disk");
                self.finish(&[c], Gone::Completed, vec![got]);
            }
            Op::CompleteBatch { picks } => {
                let batch: Vec<Claimed> = picks
                    .iter()
                    .take(6)
                    .filter_map(|&p| self.pick_held(p))
                    .collect();
                let got = self
                    .engine()
                    .complete_batch(&batch)
                    .expect("complete_batch on a healthy disk");
                self.finish(&batch, Gone::Completed, got);
            }
            Op::Fail { pick, how, reason } => {
                let Some(c) = self.pick_held(pick) else {
                    return;
                };
                let reason = reason % REASONS.len() as u8;
                let text = REASONS[usize::from(reason)];
                let engine = self.engine.as_ref().expect("open");
                let ms = u64::from(how);
                let (ending, got) = match how % 4 {
                    0 | 1 => {
                        let retryable = how % 4 == 0;
                        let got = if retryable {
                            engine.fail(&c, text)
                        } else {
                            engine.fail_permanently(&c, text)
                        };
                        (Ending::Fail { retryable, reason }, got)
                    }
                    2 => {
                        let due = self.clock.now_ms() + ms;
                        (Ending::RetryAt(due), engine.retry_at(&c, due))
                    }
                    _ => {
                        let lease = std::time::Duration::from_millis(ms.max(1));
                        let got = engine
                            .extend_lease(&c, lease)
                            .expect("extend on a healthy disk");
                        check(self.model.extended(&c, ms.max(1), Ok(got)));
                        return;
                    }
                };
                let got = got.expect("fail or retry_at on a healthy disk");
                check(self.model.ended_attempt(&c, ending, Ok(got), engine));
                if got {
                    self.held.retain(|h| h.id != c.id);
                }
            }
            Op::KeyedSchedule { key, due, own } => {
                let mut spec = Spec::plain(self.due(due), vec![key], false);
                spec.key = Some(format!("k{}", key % KEYS).into_bytes());
                if own {
                    spec.policy = Some((1 + u32::from(key % 4), Backoff::new(5, 50)));
                    spec.payload.push(0xFF); // a policy of its own shows in the payload
                }
                self.schedule(vec![spec], true);
            }
            Op::CancelByKey { key } => {
                let key = format!("k{}", key % KEYS).into_bytes();
                let engine = self.engine.as_ref().expect("open");
                let got = engine
                    .cancel_by_key(&key)
                    .expect("cancel on a healthy disk");
                check(self.model.cancel_by_key(&key, Ok(got), engine));
            }
            Op::Requeue { pick } | Op::Purge { pick, all: false } => {
                let dead = self.model.dead_ids();
                let id = match dead.get(usize::from(pick) % (dead.len() + 1)) {
                    Some(&id) => JobId(id),
                    None => self.pick_id(pick),
                };
                let requeue = matches!(op, Op::Requeue { .. });
                let engine = self.engine.as_ref().expect("open");
                let got = if requeue {
                    engine.requeue_dead(&[id])
                } else {
                    engine.purge_dead(&[id])
                }
                .expect("dead letters on a healthy disk");
                check(self.model.dead_changed(&[id], requeue, Ok(got), engine));
                check(self.model.check_dead(engine));
            }
            Op::Purge { all: true, .. } => {
                let engine = self.engine.as_ref().expect("open");
                let got = engine
                    .purge_dead_where(None)
                    .expect("purge on a healthy disk");
                check(self.model.purged_all(Ok(got), engine));
                check(self.model.check_dead(engine));
            }
            Op::Reopen => self.reopen(None),
            Op::Compact => {
                self.engine().compact().expect("compact on a healthy disk");
            }
            Op::Crash {
                keep_unsynced,
                torn_pages,
                bit_flips_unsynced,
                undo_dir_ops,
            } => {
                // Power-cut faults only: synced data is never touched, so nothing
                // acknowledged may be lost and the engine must open.
                let opts = CrashOptions {
                    keep_unsynced: f64::from(keep_unsynced) / 255.0,
                    torn_pages,
                    bit_flips_unsynced: u32::from(bit_flips_unsynced % 4),
                    bit_flips_synced: 0,
                    misdirected_writes: 0,
                    undo_dir_ops,
                    ..CrashOptions::default()
                };
                self.reopen(Some(opts));
            }
        }
    }

    /// Closes cleanly (`None`) or crashes, reopens, and checks the recovered state.
    fn reopen(&mut self, crash: Option<CrashOptions>) {
        let engine = self.engine.take().expect("open");
        // Uncommitted batches stay invisible in this incarnation; what of them is durable
        // comes back after the open.
        self.pending.clear();
        match &crash {
            None => {
                engine.close().expect("close on a healthy disk");
                self.model.engine_gone(Some(Ok(())));
            }
            Some(opts) => {
                // The media as a power cut leaves it; the old engine goes with the old disk.
                let after = self.disk.crash(opts);
                drop(engine);
                self.disk = after;
                self.model.engine_gone(None);
            }
        }
        let engine = Engine::open_on(self.disk.storage(), config(), Arc::new(self.clock.clone()))
            .unwrap_or_else(|e| panic!("reopen after {crash:?}: {e}"));
        let wrong = check(self.model.opened(&engine));
        assert!(wrong.is_empty(), "after reopen ({crash:?}): {wrong:?}");
        // The missed and interrupted jobs are in the ready queue at once, each once, in due
        // order.
        let queued: Vec<JobId> = engine.ready().try_iter().collect();
        check(self.model.drain(&queued));
        self.engine = Some(engine);
    }
}
