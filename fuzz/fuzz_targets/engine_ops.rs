//! Bounded sequences of engine operations on the fault-injecting disk with a manual clock,
//! checked after every step against a plain model (`BTreeMap` of live jobs): acknowledged
//! live jobs come back with their due time after every reopen and crash, cancelled and
//! finished jobs never fire or come back, nothing fires before its due, everything due fires,
//! claims and completions answer as the model says, ids are never reused, nothing is visible
//! before it is durable (`schedule_batch_nowait` jobs appear only at `commit`), a fired job
//! nobody claims comes back after the lease, and the attempt of a claim (the fencing token)
//! survives every crash exactly (claims are durable before the worker gets them).
#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use timewheel::{
    Claimed, Clock, Config, Engine, JobId, JobSpec, JobState, ManualClock, Outcome, Pending,
};
use timewheel_wal::testing::{CrashOptions, FaultDisk};

/// Limits that keep one execution small.
const OPS_MAX: usize = 96;
const BATCH_JOBS_MAX: u8 = 8;
const PAYLOAD_BYTES_MAX: usize = 64;
const REASON_BYTES_MAX: usize = 32;
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
    Fail {
        pick: u16,
        reason_len: u8,
    },
    Reopen,
    Crash {
        keep_unsynced: u8,
        torn_pages: bool,
        bit_flips_unsynced: u8,
        undo_dir_ops: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MState {
    Scheduled,
    Ready,
    Running,
}

#[derive(Debug, Clone)]
struct MJob {
    due_ms: u64,
    state: MState,
    /// The newest claim's attempt: durable as soon as the claim returned.
    attempt: u32,
    /// The log's last word is the claim of `attempt` (no expiry written since).
    lease_open: bool,
    /// `Running`: when the lease runs out. `Ready`: when the id is queued again if nobody
    /// claims it.
    deadline_ms: u64,
    payload: Vec<u8>,
    binary: bool,
    /// Whether its schedule record is durable (false only for `BatchNoWait` before a sync).
    durable: bool,
    /// Whether the engine shows it (false only for `BatchNoWait` before its commit).
    visible: bool,
}

struct Sim {
    disk: FaultDisk,
    clock: ManualClock,
    engine: Option<Engine>,
    jobs: BTreeMap<JobId, MJob>,
    /// Jobs whose cancel, completion or failure was acknowledged.
    gone: BTreeSet<JobId>,
    /// Ids that may never be handed out again (acknowledged at some point).
    id_floor: u64,
    held: Vec<Claimed>,
    /// `BatchNoWait` batches not yet committed.
    pending: Vec<(Pending, Vec<JobId>)>,
    /// The engine's time: the highest clock reading it has observed since it opened.
    engine_now_ms: u64,
    completed: u64,
    cancelled: u64,
    failed: u64,
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(seed) = u64::arbitrary(&mut u) else {
        return;
    };
    let mut sim = Sim::new(seed);
    for op in u.arbitrary_iter::<Op>().unwrap().take(OPS_MAX) {
        let Ok(op) = op else { break };
        if std::env::var_os("ENGINE_OPS_TRACE").is_some() {
            eprintln!("{op:?}");
        }
        sim.step(op);
        sim.check_counts();
    }
    sim.reopen(None);
});

fn config() -> Config {
    let mut c = Config::new("/nonexistent-unused");
    c.segment_bytes = SEGMENT_BYTES;
    c.payload_bytes_max = 256;
    c.lease_ms = LEASE_MS;
    c.timer_thread = false;
    c
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let disk = FaultDisk::new(seed);
        let clock = ManualClock::new(T0_MS);
        let engine = Engine::open_on(disk.storage(), config(), Arc::new(clock.clone()))
            .expect("a fresh engine opens");
        Sim {
            disk,
            clock,
            engine: Some(engine),
            jobs: BTreeMap::new(),
            gone: BTreeSet::new(),
            id_floor: 0,
            held: Vec::new(),
            pending: Vec::new(),
            engine_now_ms: T0_MS,
            completed: 0,
            cancelled: 0,
            failed: 0,
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

    /// An id to act on: a live job, a finished one, or one never handed out.
    fn pick_id(&self, pick: u16) -> JobId {
        let known: Vec<JobId> = self.jobs.keys().chain(self.gone.iter()).copied().collect();
        let i = usize::from(pick) % (known.len() + 1);
        known.get(i).copied().unwrap_or(JobId(
            self.id_floor.max(self.max_known()) + 1 + u64::from(pick % 3),
        ))
    }

    fn max_known(&self) -> u64 {
        let live = self.jobs.keys().next_back().map_or(0, |id| id.0);
        let gone = self.gone.iter().next_back().map_or(0, |id| id.0);
        live.max(gone)
    }

    /// An acknowledged write synced everything before it.
    fn all_durable(&mut self) {
        for j in self.jobs.values_mut() {
            j.durable = true;
        }
        self.id_floor = self.id_floor.max(self.max_known());
    }

    fn new_ids(&mut self, ids: &[JobId], n: usize) {
        assert_eq!(ids.len(), n);
        for (i, id) in ids.iter().enumerate() {
            assert!(
                id.0 > self.id_floor,
                "id {id} reused (floor {})",
                self.id_floor
            );
            assert!(
                !self.jobs.contains_key(id) && !self.gone.contains(id),
                "id {id} reused"
            );
            if i > 0 {
                assert!(ids[i - 1] < *id, "ids of a batch increase");
            }
        }
    }

    fn schedule(&mut self, specs: Vec<(u64, Vec<u8>, bool)>, wait: bool) {
        let n = specs.len();
        let js = specs
            .iter()
            .map(|(due, p, b)| JobSpec::at(*due).payload(p.clone()).binary(*b));
        let ids = if wait {
            let ids = self
                .engine()
                .schedule_batch(js)
                .expect("schedule on a healthy disk");
            // The commit reads the clock.
            self.engine_now_ms = self.engine_now_ms.max(self.clock.now_ms());
            ids
        } else {
            let (ids, pending) = self
                .engine()
                .schedule_batch_nowait(js)
                .expect("schedule on a healthy disk");
            for id in &ids {
                assert!(self.engine().get(*id).is_none(), "job {id} visible before commit");
            }
            self.pending.push((pending, ids.clone()));
            ids
        };
        self.new_ids(&ids, n);
        for (id, (due_ms, payload, binary)) in ids.into_iter().zip(specs) {
            let job = MJob {
                due_ms,
                state: MState::Scheduled,
                attempt: 0,
                lease_open: false,
                deadline_ms: 0,
                payload,
                binary,
                durable: false,
                visible: wait,
            };
            self.jobs.insert(id, job);
        }
        if wait {
            self.all_durable();
        }
    }

    fn can_finish(&self, c: &Claimed) -> bool {
        self.jobs.get(&c.id).is_some_and(|j| {
            j.visible
                && j.lease_open
                && j.attempt == c.attempt
                && matches!(j.state, MState::Running | MState::Ready)
        })
    }

    /// What a cancel or reschedule of `id` does.
    fn change_outcome(&self, id: JobId) -> Outcome {
        match self.jobs.get(&id) {
            Some(j) if j.visible && j.state == MState::Running => Outcome::Running,
            Some(j) if j.visible => Outcome::Done,
            _ => Outcome::NotFound,
        }
    }

    fn finish(&mut self, c: &Claimed, completed: bool) {
        self.jobs.remove(&c.id).expect("checked");
        self.gone.insert(c.id);
        self.held.retain(|h| h.id != c.id);
        if completed {
            self.completed += 1;
        } else {
            self.failed += 1;
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
                self.schedule(vec![(self.due(due), payload, binary)], true);
            }
            Op::Batch { n, due, spread_ms } => {
                let first = self.due(due);
                let specs = (0..1 + n % BATCH_JOBS_MAX)
                    .map(|i| (first + u64::from(i) * u64::from(spread_ms), vec![i], false))
                    .collect();
                self.schedule(specs, true);
            }
            Op::BatchNoWait { n, due } => {
                let first = self.due(due);
                let specs = (0..1 + n % BATCH_JOBS_MAX)
                    .map(|i| (first + u64::from(i), Vec::new(), false))
                    .collect();
                self.schedule(specs, false);
            }
            Op::Sync => {
                self.engine().sync().expect("sync on a healthy disk");
                self.all_durable();
                for (pending, ids) in std::mem::take(&mut self.pending) {
                    self.engine().commit(pending).expect("commit on a healthy disk");
                    self.engine_now_ms = self.engine_now_ms.max(self.clock.now_ms());
                    for id in ids {
                        if let Some(j) = self.jobs.get_mut(&id) {
                            j.visible = true;
                        }
                    }
                }
            }
            Op::Cancel { pick } => {
                let id = self.pick_id(pick);
                let expect = self.change_outcome(id);
                let got = self.engine().cancel(id).expect("cancel on a healthy disk");
                assert_eq!(got, expect, "cancel({id}) of {:?}", self.jobs.get(&id));
                if got.is_done() {
                    self.jobs.remove(&id);
                    self.gone.insert(id);
                    self.cancelled += 1;
                    self.all_durable();
                }
            }
            Op::Reschedule { pick, due } => {
                let id = self.pick_id(pick);
                let due_ms = self.due(due);
                let expect = self.change_outcome(id);
                let got = self
                    .engine()
                    .reschedule(id, due_ms)
                    .expect("reschedule on a healthy disk");
                assert_eq!(got, expect, "reschedule({id}) of {:?}", self.jobs.get(&id));
                if got.is_done() {
                    let j = self.jobs.get_mut(&id).expect("live");
                    j.due_ms = due_ms;
                    j.state = MState::Scheduled;
                    // An expiry was written in front of it, if the lease was open.
                    j.lease_open = false;
                    self.all_durable();
                }
            }
            Op::Advance(step) => {
                let ms = match step {
                    Step::Ms(n) => u64::from(n),
                    Step::Secs(n) => u64::from(n) * 1_000,
                    Step::Hours(n) => u64::from(n % 48) * 3_600_000,
                    Step::Days(n) => u64::from(n % 40) * DAY_MS,
                };
                self.clock.advance(ms);
            }
            Op::ClockBack { ms } => {
                let now = self.clock.now_ms();
                self.clock.set(now.saturating_sub(u64::from(ms)).max(T0_MS));
            }
            Op::RunTimers => self.run_timers(),
            Op::Claim { pick } => {
                let id = self.pick_id(pick);
                self.claim(id);
            }
            Op::ClaimAllReady => {
                let ready: Vec<JobId> = self
                    .jobs
                    .iter()
                    .filter(|(_, j)| j.state == MState::Ready)
                    .map(|(id, _)| *id)
                    .collect();
                let got = self
                    .engine()
                    .claim_batch(&ready)
                    .expect("claim_batch on a healthy disk");
                self.engine_now_ms = self.engine_now_ms.max(self.clock.now_ms());
                for (id, c) in ready.into_iter().zip(got) {
                    self.claimed(id, c);
                }
            }
            Op::Complete { pick } => {
                let Some(c) = self.pick_held(pick) else {
                    return;
                };
                let expect = self.can_finish(&c);
                let got = self
                    .engine()
                    .complete(&c)
                    .expect("complete on a healthy disk");
                assert_eq!(
                    got,
                    expect,
                    "complete({}, attempt {}) of {:?}",
                    c.id,
                    c.attempt,
                    self.jobs.get(&c.id)
                );
                if got {
                    self.finish(&c, true);
                    self.all_durable();
                }
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
                assert_eq!(got.len(), batch.len());
                let mut any = false;
                for (c, ok) in batch.iter().zip(got) {
                    let expect = self.can_finish(c);
                    assert_eq!(
                        ok,
                        expect,
                        "complete_batch: {}, attempt {} of {:?}",
                        c.id,
                        c.attempt,
                        self.jobs.get(&c.id)
                    );
                    if ok {
                        self.finish(c, true);
                        any = true;
                    }
                }
                if any {
                    self.all_durable();
                }
            }
            Op::Fail { pick, reason_len } => {
                let Some(c) = self.pick_held(pick) else {
                    return;
                };
                let reason = "r".repeat(usize::from(reason_len) % (REASON_BYTES_MAX + 1));
                let expect = self.can_finish(&c);
                let got = self
                    .engine()
                    .fail(&c, &reason)
                    .expect("fail on a healthy disk");
                assert_eq!(
                    got,
                    expect,
                    "fail({}, attempt {}) of {:?}",
                    c.id,
                    c.attempt,
                    self.jobs.get(&c.id)
                );
                if got {
                    self.finish(&c, false);
                    self.all_durable();
                }
            }
            Op::Reopen => self.reopen(None),
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

    fn pick_held(&self, pick: u16) -> Option<Claimed> {
        if self.held.is_empty() {
            None
        } else {
            Some(self.held[usize::from(pick) % self.held.len()].clone())
        }
    }

    fn claim(&mut self, id: JobId) {
        let got = self.engine().claim(id).expect("claim on a healthy disk");
        // A claim reads the clock, found job or not: the engine's time is held there from now
        // on, even if the clock later steps back (found by the campaign: crash-9e0a441c...).
        self.engine_now_ms = self.engine_now_ms.max(self.clock.now_ms());
        self.claimed(id, got);
    }

    /// Checks what a claim of `id` returned against the model.
    fn claimed(&mut self, id: JobId, got: Option<Claimed>) {
        let expect = self
            .jobs
            .get(&id)
            .is_some_and(|j| j.visible && j.state == MState::Ready);
        assert_eq!(
            got.is_some(),
            expect,
            "claim({id}) of {:?}",
            self.jobs.get(&id)
        );
        let Some(c) = got else { return };
        let j = self.jobs.get_mut(&id).expect("live");
        assert_eq!(c.id, id);
        assert_eq!(c.attempt, j.attempt + 1, "attempts count deliveries");
        assert_eq!(c.due_ms, j.due_ms);
        assert_eq!(&c.payload[..], &j.payload[..]);
        assert_eq!(c.binary, j.binary);
        assert_eq!(c.lease_until_ms, self.engine_now_ms + LEASE_MS);
        assert!(c.ready_at_ms <= self.engine_now_ms);
        j.attempt = c.attempt;
        j.lease_open = true;
        j.state = MState::Running;
        j.deadline_ms = c.lease_until_ms;
        self.held.retain(|h| h.id != id || h.attempt != c.attempt);
        self.held.push(c);
        // Bounded: keep the newest claims (old ones are only for stale completions).
        if self.held.len() > 32 {
            self.held.remove(0);
        }
    }

    fn run_timers(&mut self) {
        let engine = self.engine();
        engine.run_timers();
        let fired: Vec<JobId> = engine.ready().try_iter().collect();
        self.engine_now_ms = self.engine_now_ms.max(self.clock.now_ms());
        let now = self.engine_now_ms;
        let fired_set: BTreeSet<JobId> = fired.iter().copied().collect();
        assert_eq!(
            fired_set.len(),
            fired.len(),
            "an id fires once per run: {fired:?}"
        );
        for id in &fired {
            assert!(
                !self.gone.contains(id),
                "job {id} fired after its cancel or finish was acknowledged"
            );
            let j = self
                .jobs
                .get(id)
                .unwrap_or_else(|| panic!("unknown job {id} fired"));
            assert!(j.visible, "job {id} fired before its commit");
            match j.state {
                MState::Scheduled => {
                    assert!(j.due_ms <= now, "job {id} due {} fired at {now}", j.due_ms)
                }
                MState::Running => {
                    assert!(j.deadline_ms <= now, "lease of job {id} expired early")
                }
                MState::Ready => {
                    assert!(j.deadline_ms <= now, "job {id} queued again before its deadline")
                }
            }
        }
        for (id, j) in &self.jobs {
            let due = j.visible
                && match j.state {
                    MState::Scheduled => j.due_ms <= now,
                    MState::Running | MState::Ready => j.deadline_ms <= now,
                };
            assert!(
                !due || fired_set.contains(id),
                "job {id} ({j:?}) was due at {now} and did not fire"
            );
        }
        for id in fired {
            let j = self.jobs.get_mut(&id).expect("checked");
            j.state = MState::Ready;
            j.deadline_ms = now + LEASE_MS;
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
                self.all_durable();
            }
            Some(opts) => {
                // The media as a power cut leaves it; the old engine goes with the old disk.
                let after = self.disk.crash(opts);
                drop(engine);
                self.disk = after;
            }
        }
        let engine = Engine::open_on(self.disk.storage(), config(), Arc::new(self.clock.clone()))
            .unwrap_or_else(|e| panic!("reopen after {crash:?}: {e}"));
        self.engine_now_ms = self.clock.now_ms();
        let mut lost = Vec::new();
        for (id, j) in self.jobs.iter_mut() {
            let Some(info) = engine.get(*id) else {
                assert!(
                    !j.durable,
                    "acknowledged job {id} lost after {crash:?}: {j:?}"
                );
                lost.push(*id);
                continue;
            };
            assert_eq!(info.due_ms, j.due_ms, "job {id} came back with another due");
            // Missed jobs (due by now) and interrupted ones (claimed) come back ready, already
            // queued; the rest wait.
            let want = if j.due_ms <= self.engine_now_ms || (j.visible && j.lease_open) {
                JobState::Ready
            } else {
                JobState::Scheduled
            };
            assert_eq!(
                info.state, want,
                "job {id} due {} came back {:?}",
                j.due_ms, info.state
            );
            assert_eq!(
                info.attempt, j.attempt,
                "job {id} came back with another attempt: claims are durable when they return"
            );
            assert_eq!(&info.payload[..], &j.payload[..], "job {id}'s payload");
            j.state = if want == JobState::Ready {
                MState::Ready
            } else {
                MState::Scheduled
            };
            j.visible = true;
            j.deadline_ms = self.engine_now_ms + LEASE_MS;
        }
        for id in lost {
            self.jobs.remove(&id);
        }
        // The missed jobs are in the ready queue at once, each once, in due order.
        let queued: Vec<JobId> = engine.ready().try_iter().collect();
        let mut missed: Vec<(u64, JobId)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.state == MState::Ready)
            .map(|(id, j)| (j.due_ms, *id))
            .collect();
        missed.sort();
        let queued_dues: Vec<u64> = queued
            .iter()
            .map(|id| self.jobs.get(id).map_or(u64::MAX, |j| j.due_ms))
            .collect();
        assert!(
            queued_dues.is_sorted(),
            "missed jobs are queued in due order"
        );
        let mut queued_sorted = queued.clone();
        queued_sorted.sort();
        let mut missed_ids: Vec<JobId> = missed.iter().map(|&(_, id)| id).collect();
        missed_ids.sort();
        assert_eq!(
            queued_sorted, missed_ids,
            "exactly the missed jobs are queued at open"
        );
        for id in &self.gone {
            assert!(
                engine.get(*id).is_none(),
                "job {id} came back after its cancel or finish was acknowledged"
            );
        }
        self.engine = Some(engine);
        // What survived is durable now (recovery synced it).
        self.all_durable();
        let s = self.engine().stats();
        assert_eq!(
            (s.completed, s.cancelled, s.failed),
            (self.completed, self.cancelled, self.failed),
            "finished counts over the directory's life"
        );
        self.check_counts();
    }

    fn check_counts(&self) {
        let s = self.engine().stats();
        let count = |st| {
            self.jobs
                .values()
                .filter(|j| j.visible && j.state == st)
                .count() as u64
        };
        assert_eq!(
            (s.scheduled, s.ready, s.running),
            (
                count(MState::Scheduled),
                count(MState::Ready),
                count(MState::Running)
            ),
            "jobs per state"
        );
    }
}
