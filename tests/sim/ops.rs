//! What happens next in a simulated run: the user's calls, the clock, and the world's faults,
//! drawn with weights from the seed's one random stream.
//!
//! Generation only chooses; it never looks at the engine. Due times are chosen relative to the
//! clock's current reading, ids from the model's list (plus some that never existed).

use timewheel_wal::testing::{CrashOptions, SimRng, SyncFailure};

/// Where every run's clock starts: far from the epoch, so "a day ago" is still positive.
pub const T0_MS: u64 = 1_800_000_000_000;
/// Milliseconds in a day.
pub const DAY_MS: u64 = 86_400_000;
/// Largest payload the simulation schedules (the engine allows more, see `PAYLOAD_BYTES_MAX`).
pub const PAYLOAD_BYTES_SIM_MAX: u64 = 300;
/// The engine's payload limit in the simulation; one byte more is an invalid input.
pub const PAYLOAD_BYTES_MAX: usize = 512;
/// Largest `schedule_batch` the simulation sends.
pub const BATCH_JOBS_SIM_MAX: u64 = 64;
/// How far ahead a due time may be chosen: about four months.
pub const DUE_AHEAD_MS_SIM_MAX: u64 = 120 * DAY_MS;

/// One job to schedule, with an absolute due time (the model's own type).
pub use crate::model::Spec;

/// One step of a run.
#[derive(Debug, Clone)]
pub enum Op {
    Schedule(Spec),
    ScheduleBatch(Vec<Spec>),
    /// A payload one byte over the limit: refused, nothing written.
    ScheduleInvalid(Spec),
    Cancel(u64),
    Reschedule(u64, u64),
    /// `run_timers`, then drain `ready()` into the worker's backlog.
    RunTimers,
    /// Claim up to this many ids from the front of the backlog (some are skipped).
    Claim(usize),
    /// Complete the held claim at this index (modulo the held count).
    Complete(usize),
    /// Complete up to this many held claims in one `complete_batch`.
    CompleteBatch(usize),
    /// End the held claim at this index other than by completing it: the main stream draws
    /// this, the lifecycle stream makes it one of the four below (see [`Lifecycle::op`]).
    Fail(usize),
    /// `fail` (retryable) of the held claim at this index, with a `REASONS` index.
    FailRetryable(usize, u8),
    /// `fail_permanently` of the held claim at this index.
    FailPermanently(usize, u8),
    /// `retry_at` of the held claim at this index.
    RetryAt(usize, u64),
    /// `extend_lease` of the held claim at this index by this many ms (the claim stays held).
    ExtendLease(usize, u64),
    /// `requeue_dead` of these ids (mostly dead ones).
    RequeueDead(Vec<u64>),
    /// `purge_dead` of these ids.
    PurgeDead(Vec<u64>),
    /// `purge_dead_where(None)`: every dead job.
    PurgeAllDead,
    /// `cancel_by_key`.
    CancelByKey(Vec<u8>),
    /// `reschedule_by_key` to this due time.
    RescheduleByKey(Vec<u8>, u64),
    /// `pause_schedule` of this id (mostly a recurring job's).
    PauseSchedule(u64),
    /// `resume_schedule` of this id.
    ResumeSchedule(u64),
    /// `delete_schedule` of this id.
    DeleteSchedule(u64),
    /// Every job read back (`get`), then `schedules()` paged through, pages of this many.
    CheckSchedules(usize),
    /// Set the clock to this reading (forwards by 0 ms to days, or a little backwards).
    ClockSet(u64),
    /// Sync EIO from now on, as this policy says.
    ArmSyncFailure(SyncFailure),
    /// `create` fails with ENOSPC while on.
    ArmEnospc(bool),
    /// `close()`, then reopen on the same disk (no crash).
    CloseReopen,
    /// Drop the engine (its drop syncs, maybe into armed faults), reopen on the same disk.
    DropReopen,
    /// One compaction pass (`Engine::compact`): sealed segments folded into bucket files.
    Compact,
    /// A power cut with these faults, then recovery on the crashed disk.
    Crash {
        opts: CrashOptions,
        corrupt: bool,
    },
}

/// A weighted choice among `weights.len()` options.
pub fn weighted(rng: &mut SimRng, weights: &[u64]) -> usize {
    let total: u64 = weights.iter().sum();
    let mut x = rng.below(total);
    for (i, &w) in weights.iter().enumerate() {
        if x < w {
            return i;
        }
        x -= w;
    }
    unreachable!("x < total")
}

/// A due time around `now_ms`: from a day in the past to months ahead, mostly soon.
pub fn due_ms(rng: &mut SimRng, now_ms: u64) -> u64 {
    match weighted(rng, &[2, 2, 6, 4, 2, 1]) {
        0 => now_ms - rng.between(1, DAY_MS),
        1 => now_ms,
        2 => now_ms + rng.between(1, 1_000),
        3 => now_ms + rng.between(1_000, 3_600_000),
        4 => now_ms + rng.between(3_600_000, 7 * DAY_MS),
        _ => now_ms + rng.between(7 * DAY_MS, DUE_AHEAD_MS_SIM_MAX),
    }
}

fn payload(rng: &mut SimRng) -> Vec<u8> {
    let len = match weighted(rng, &[3, 4, 2]) {
        0 => 0,
        1 => rng.between(1, 24),
        _ => rng.between(25, PAYLOAD_BYTES_SIM_MAX),
    };
    let mut p = vec![0u8; len as usize];
    rng.fill(&mut p);
    p
}

fn spec(rng: &mut SimRng, now_ms: u64) -> Spec {
    let due_ms = due_ms(rng, now_ms);
    spec_at(rng, due_ms)
}

fn spec_at(rng: &mut SimRng, due_ms: u64) -> Spec {
    Spec::plain(due_ms, payload(rng), rng.chance(0.3))
}

/// A sync failure policy, mostly one that strikes within the next few syncs.
pub fn sync_failure(rng: &mut SimRng) -> SyncFailure {
    match weighted(rng, &[3, 2, 1, 3, 3]) {
        0 => SyncFailure::Next,
        1 => SyncFailure::Always,
        2 => SyncFailure::Never,
        3 => SyncFailure::AfterN(rng.below(6)),
        _ => SyncFailure::AlwaysAfterN(rng.below(6)),
    }
}

/// The crash faults: power-cut faults mostly, media corruption sometimes.
pub fn crash(rng: &mut SimRng, corruption_chance: f64) -> Op {
    let corrupt = rng.chance(corruption_chance);
    let opts = if corrupt {
        CrashOptions::random_with_corruption(rng)
    } else {
        CrashOptions::random(rng)
    };
    Op::Crash { opts, corrupt }
}

/// What the oracle lets generation see.
pub struct View<'a> {
    pub now_ms: u64,
    pub lease_ms: u64,
    /// Every id the oracle knows, in the order it learned them.
    pub ids: &'a [u64],
    /// One past the highest id sequence number that could exist.
    pub id_end: u64,
    pub backlog: usize,
    pub held: usize,
    pub corruption_chance: f64,
}

/// Draws the next operation.
pub fn next(rng: &mut SimRng, v: &View<'_>) -> Op {
    let weights = [
        20, // schedule
        6,  // schedule_batch
        1,  // invalid schedule
        8,  // cancel
        6,  // reschedule
        16, // run timers
        if v.backlog > 0 { 14 } else { 1 },
        if v.held > 0 { 8 } else { 0 },
        if v.held > 0 { 2 } else { 0 },
        if v.held > 0 { 4 } else { 0 },
        14, // clock
        2,  // arm sync failure
        1,  // arm or clear ENOSPC
        2,  // close + reopen
        1,  // drop + reopen
        4,  // crash
        4,  // compact
    ];
    match weighted(rng, &weights) {
        0 => Op::Schedule(spec(rng, v.now_ms)),
        1 => {
            let n = match weighted(rng, &[3, 2, 1]) {
                0 => rng.between(1, 4),
                1 => rng.between(5, 16),
                _ => rng.between(17, BATCH_JOBS_SIM_MAX),
            };
            // Half the batches are bursts: every job due in the same millisecond.
            let burst = rng.chance(0.5).then(|| due_ms(rng, v.now_ms));
            let specs = (0..n)
                .map(|_| {
                    let due = burst.unwrap_or_else(|| due_ms(rng, v.now_ms));
                    spec_at(rng, due)
                })
                .collect();
            Op::ScheduleBatch(specs)
        }
        2 => {
            let mut s = spec(rng, v.now_ms);
            s.payload = vec![7; PAYLOAD_BYTES_MAX + 1];
            Op::ScheduleInvalid(s)
        }
        3 => Op::Cancel(pick_id(rng, v)),
        4 => Op::Reschedule(pick_id(rng, v), due_ms(rng, v.now_ms)),
        5 => Op::RunTimers,
        6 => Op::Claim(rng.between(1, 8) as usize),
        7 => Op::Complete(rng.below(v.held.max(1) as u64) as usize),
        8 => Op::CompleteBatch(rng.between(1, 6) as usize),
        9 => Op::Fail(rng.below(v.held.max(1) as u64) as usize),
        10 => Op::ClockSet(clock_step(rng, v.now_ms, v.lease_ms)),
        11 => Op::ArmSyncFailure(sync_failure(rng)),
        12 => Op::ArmEnospc(rng.chance(0.5)),
        13 => Op::CloseReopen,
        14 => Op::DropReopen,
        15 => crash(rng, v.corruption_chance),
        _ => Op::Compact,
    }
}

/// A known id mostly; sometimes one that never existed (or not yet).
fn pick_id(rng: &mut SimRng, v: &View<'_>) -> u64 {
    match rng.pick(v.ids) {
        Some(&id) if rng.chance(0.9) => id,
        // A sequence number that may not exist yet, in the home bucket of a known id.
        known => {
            let residue = known.map_or(0, |&id| id % (1 << timewheel::JobId::BUCKET_BITS));
            (rng.between(1, v.id_end + 3) << timewheel::JobId::BUCKET_BITS) | residue
        }
    }
}

/// The clock's next reading: still, a little, about a lease, seconds to days ahead, or a
/// small step backwards.
fn clock_step(rng: &mut SimRng, now_ms: u64, lease_ms: u64) -> u64 {
    match weighted(rng, &[2, 4, 4, 3, 2, 1, 1]) {
        0 => now_ms,
        1 => now_ms + rng.between(1, 20),
        2 => now_ms + rng.between(lease_ms / 2, lease_ms * 2),
        3 => now_ms + rng.between(1_000, 120_000),
        4 => now_ms + rng.between(3_600_000, DAY_MS),
        5 => now_ms + rng.between(DAY_MS, 30 * DAY_MS),
        _ => now_ms.saturating_sub(rng.between(1, 5_000)),
    }
}

// ---- the lifecycle stream ------------------------------------------------------------------
//
// Retries, dead letters and keys are drawn from a second stream of the seed (`Lifecycle`): it
// decorates what the main stream drew and adds operations of its own between its steps, so
// the main stream draws as it did before they existed (a run still diverges from its old one
// once the engine holds something else: a claim draws per id of its backlog).

/// What the lifecycle stream sees besides [`View`].
pub struct LifeView<'a> {
    pub now_ms: u64,
    pub lease_ms: u64,
    /// The dead-letter set, in id order.
    pub dead: &'a [u64],
    pub held: usize,
}

/// The per-seed lifecycle settings and its stream.
pub struct Lifecycle {
    pub rng: SimRng,
    /// `Config::retry` of the seed.
    pub retry: timewheel::RetryPolicy,
    pub retry_seed: u64,
    /// Keys are `k0`..`k{keys-1}`.
    pub keys: u64,
    /// The chance that a spec has a key, and that it has a policy of its own.
    pub key_chance: f64,
    pub policy_chance: f64,
}

/// A short backoff: waits of a few ms to a second, so retries fire within the run.
fn backoff(rng: &mut SimRng) -> timewheel::Backoff {
    let base = rng.below(60) as u32;
    let cap = (base + rng.below(1_000) as u32).max(1);
    timewheel::Backoff::new(base, cap)
}

impl Lifecycle {
    pub fn new(seed: u64) -> Lifecycle {
        let mut rng = SimRng::new(seed ^ 0x6c69_6665_6379_636c);
        let retry = timewheel::RetryPolicy {
            max_attempts: rng.between(1, 5) as u32,
            backoff: backoff(&mut rng),
        };
        Lifecycle {
            retry,
            retry_seed: rng.next_u64(),
            keys: rng.between(2, 8),
            key_chance: *rng.pick(&[0.0, 0.2, 0.5]).expect("chances"),
            policy_chance: *rng.pick(&[0.0, 0.3, 0.7]).expect("chances"),
            rng,
        }
    }

    fn key(&mut self) -> Vec<u8> {
        format!("k{}", self.rng.below(self.keys)).into_bytes()
    }

    fn decorate(&mut self, spec: &mut Spec) {
        if self.rng.chance(self.key_chance) {
            spec.key = Some(self.key());
        }
        if self.rng.chance(self.policy_chance) {
            let (m, b) = (self.rng.between(1, 4) as u32, backoff(&mut self.rng));
            spec.policy = Some((m, b));
            // The payload names the policy, so that a job recovered from a failed schedule
            // call (whose policy `get` does not show) is told apart from its look-alikes.
            spec.payload.push(m as u8);
            spec.payload.extend(b.base_ms.to_le_bytes());
            spec.payload.extend(b.cap_ms.to_le_bytes());
        }
    }

    /// Gives keys and policies to the specs the main stream drew, and makes a drawn `Fail` one
    /// of the ways to end an attempt.
    pub fn op(&mut self, op: Op, v: &LifeView<'_>) -> Op {
        match op {
            Op::Schedule(mut s) => {
                self.decorate(&mut s);
                Op::Schedule(s)
            }
            Op::ScheduleBatch(mut specs) => {
                for s in &mut specs {
                    self.decorate(s);
                }
                Op::ScheduleBatch(specs)
            }
            Op::Fail(i) => {
                let reason = self.rng.below(crate::model::REASONS.len() as u64) as u8;
                match weighted(&mut self.rng, &[10, 3, 4, 3]) {
                    0 => Op::FailRetryable(i, reason),
                    1 => Op::FailPermanently(i, reason),
                    2 => {
                        let due = match self.rng.below(3) {
                            0 => v.now_ms,
                            1 => v.now_ms + self.rng.between(1, 2_000),
                            _ => due_ms(&mut self.rng, v.now_ms),
                        };
                        Op::RetryAt(i, due)
                    }
                    _ => Op::ExtendLease(i, self.rng.between(1, v.lease_ms * 4)),
                }
            }
            op => op,
        }
    }

    /// An operation of its own before the main stream's next one, sometimes.
    pub fn extra(&mut self, v: &LifeView<'_>) -> Option<Op> {
        if !self.rng.chance(0.15) {
            return None;
        }
        let some_dead = |rng: &mut SimRng| -> Vec<u64> {
            let n = rng.between(1, 3);
            (0..n)
                .map(|_| match rng.pick(v.dead) {
                    Some(&id) if rng.chance(0.9) => id,
                    _ => rng.between(1, 1 << 30), // never dead (most likely never existed)
                })
                .collect()
        };
        let weights = [
            if v.dead.is_empty() { 0 } else { 5 },
            if v.dead.is_empty() { 0 } else { 3 },
            if v.dead.is_empty() { 0 } else { 1 },
            if self.key_chance > 0.0 { 4 } else { 0 },
            if v.held > 0 { 4 } else { 0 },
            1,
        ];
        Some(match weighted(&mut self.rng, &weights) {
            0 => Op::RequeueDead(some_dead(&mut self.rng)),
            1 => Op::PurgeDead(some_dead(&mut self.rng)),
            2 => Op::PurgeAllDead,
            3 => Op::CancelByKey(self.key()),
            4 => {
                let i = self.rng.below(v.held as u64) as usize;
                self.op(Op::Fail(i), v)
            }
            _ => Op::RequeueDead(vec![self.rng.between(1, 1 << 30)]),
        })
    }
}

// ---- the feature stream ------------------------------------------------------------------
//
// Recurring jobs, tenants and fairness, and `reschedule_by_key` are drawn from a third stream
// of the seed (`Features`), decorating specs and adding operations of its own, like the
// lifecycle stream.

use std::collections::BTreeMap;

use crate::model::{CronNext, Recur, RecurKind};
use timewheel::Misfire;

/// Cron schedules the simulation uses: any expression in zones without daylight saving time
/// (UTC, Asia/Kolkata), fixed-time ones (one second, minute and hour) in zones with it, where
/// croner's own rules for skipped and repeated wall-clock times are the engine's (see
/// `src/recur/mod.rs`), so the model can ask croner directly. None finer than five minutes
/// but the one with seconds, which never goes with `FireAll` (the model would walk a month of
/// half-minutes at each completion).
pub const CRONS: &[(&str, &str)] = &[
    ("*/5 * * * *", "UTC"),
    ("0 * * * *", "UTC"),
    ("0 0 1 * *", "UTC"),
    ("*/15 * * * *", "Asia/Kolkata"),
    ("0 */6 * * *", "Asia/Kolkata"),
    // The spring gap (2027-03-28) moves it to 03:00 CEST; an ordinary nightly job.
    ("30 2 * * *", "Europe/Berlin"),
    ("0 2 * * *", "Europe/Berlin"),
    // Repeated at the fall back (2027-11-07): fires at the first pass.
    ("30 1 * * *", "America/New_York"),
    ("0 9 * * 1-5", "America/New_York"),
    ("*/30 * * * * *", "UTC"),
];
/// The index in [`CRONS`] of the expression with seconds.
const CRON_SECONDS: usize = CRONS.len() - 1;

/// With `Config::fair_tenants`: the channel's depth and the running limits.
#[derive(Debug, Clone)]
pub struct FairSetup {
    pub depth: usize,
    pub running_max: u32,
    pub limits: BTreeMap<u32, u32>,
}

/// What the feature stream sees.
pub struct FeatView<'a> {
    pub now_ms: u64,
    /// Recurring jobs in the engine's memory.
    pub recurring: &'a [u64],
    /// Every id the oracle knows.
    pub ids: &'a [u64],
    /// Keys are `k0`..`k{keys-1}` (the lifecycle stream's), when specs get keys.
    pub keys: u64,
    pub key_chance: f64,
}

/// The per-seed feature settings and their stream.
pub struct Features {
    pub rng: SimRng,
    /// The chance that a spec recurs.
    pub recur_chance: f64,
    /// Tenants are `0..tenants`.
    pub tenants: u32,
    pub fair: Option<FairSetup>,
    /// `Config::misfire_threshold_ms`.
    pub misfire_threshold_ms: u64,
}

impl Features {
    pub fn new(seed: u64) -> Features {
        let mut rng = SimRng::new(seed ^ 0x7265_6375_7266_6169);
        let recur_chance = *rng.pick(&[0.0, 0.1, 0.25, 0.4]).expect("chances");
        let tenants = rng.between(1, 4) as u32;
        let fair = rng.chance(0.4).then(|| {
            let depth = *rng.pick(&[2, 8, 1024, 1024]).expect("depths");
            let running_max = rng.below(4) as u32;
            let mut limits = BTreeMap::new();
            for t in 0..tenants {
                if rng.chance(0.3) {
                    limits.insert(t, rng.below(4) as u32);
                }
            }
            FairSetup {
                depth,
                running_max,
                limits,
            }
        });
        let misfire_threshold_ms = *rng.pick(&[1_000, 60_000]).expect("thresholds");
        Features {
            rng,
            recur_chance,
            tenants,
            fair,
            misfire_threshold_ms,
        }
    }

    fn recur(&mut self, now_ms: u64) -> Recur {
        let rng = &mut self.rng;
        let kind = if rng.chance(0.6) {
            let interval_ms = match weighted(rng, &[3, 2, 2, 1]) {
                0 => rng.between(50, 2_000),
                1 => rng.between(2_000, 60_000),
                2 => rng.between(60_000, 3_600_000),
                _ => rng.between(3_600_000, DAY_MS),
            };
            let anchor_ms = if rng.chance(0.7) {
                now_ms.saturating_sub(rng.between(0, 3 * interval_ms))
            } else {
                now_ms + rng.between(0, interval_ms)
            };
            RecurKind::Every {
                interval_ms,
                anchor_ms,
            }
        } else {
            let (expr, zone) = *rng.pick(CRONS).expect("crons");
            RecurKind::Cron { expr, zone }
        };
        let seconds = matches!(kind, RecurKind::Cron { expr, .. } if expr == CRONS[CRON_SECONDS].0);
        let misfire = match weighted(rng, &[4, if seconds { 0 } else { 3 }, 3]) {
            0 => Misfire::Coalesce,
            1 => Misfire::FireAll {
                backfill_max: rng.below(5) as u32,
            },
            _ => Misfire::Skip,
        };
        Recur { kind, misfire }
    }

    /// Gives a spec its tenant and, sometimes, a recurrence (due then at its first occurrence
    /// after now); both are written into the payload too, so that a job recovered from a
    /// failed schedule call is told apart from look-alikes.
    fn decorate(&mut self, spec: &mut Spec, now_ms: u64) {
        spec.tenant = self.rng.below(u64::from(self.tenants)) as u32;
        if self.rng.chance(self.recur_chance) {
            let r = self.recur(now_ms);
            spec.due_ms = r.next_after(now_ms, CRON);
            spec.payload.push(0xEC);
            match r.kind {
                RecurKind::Every {
                    interval_ms,
                    anchor_ms,
                } => {
                    spec.payload.extend(interval_ms.to_le_bytes());
                    spec.payload.extend(anchor_ms.to_le_bytes());
                }
                RecurKind::Cron { expr, .. } => {
                    let i = CRONS.iter().position(|c| c.0 == expr).expect("listed");
                    spec.payload.push(i as u8);
                }
            }
            spec.payload.extend(format!("{:?}", r.misfire).as_bytes());
            spec.recur = Some(r);
        }
        if spec.tenant != 0 {
            spec.payload.extend([0x7E, spec.tenant as u8]);
        }
    }

    /// Decorates the specs the other streams drew.
    pub fn op(&mut self, op: Op, now_ms: u64) -> Op {
        match op {
            Op::Schedule(mut s) => {
                self.decorate(&mut s, now_ms);
                Op::Schedule(s)
            }
            Op::ScheduleBatch(mut specs) => {
                for s in &mut specs {
                    self.decorate(s, now_ms);
                }
                Op::ScheduleBatch(specs)
            }
            op => op,
        }
    }

    /// An operation of its own before the main stream's next one, sometimes.
    pub fn extra(&mut self, v: &FeatView<'_>) -> Option<Op> {
        if !self.rng.chance(0.12) {
            return None;
        }
        let rng = &mut self.rng;
        let some = !v.recurring.is_empty();
        let keyed = v.key_chance > 0.0;
        let weights = [
            if some { 3 } else { 0 }, // pause
            if some { 3 } else { 0 }, // resume
            if some { 1 } else { 0 }, // delete
            if some { 2 } else { 0 }, // check the listing
            if keyed { 3 } else { 0 },
            1, // a schedule call of any id (mostly one that does not recur)
        ];
        if weights.iter().all(|w| *w == 0) {
            return None;
        }
        let recurring = |rng: &mut SimRng| *rng.pick(v.recurring).expect("some");
        Some(match weighted(rng, &weights) {
            0 => Op::PauseSchedule(recurring(rng)),
            1 => Op::ResumeSchedule(recurring(rng)),
            2 => Op::DeleteSchedule(recurring(rng)),
            3 => Op::CheckSchedules(rng.between(1, 5) as usize),
            4 => {
                let key = format!("k{}", rng.below(v.keys.max(1))).into_bytes();
                Op::RescheduleByKey(key, due_ms(rng, v.now_ms))
            }
            _ => {
                let id = rng.pick(v.ids).copied().unwrap_or(1);
                match rng.below(3) {
                    0 => Op::PauseSchedule(id),
                    1 => Op::ResumeSchedule(id),
                    _ => Op::DeleteSchedule(id),
                }
            }
        })
    }
}

/// The model's cron searches: croner's own (see [`CRONS`] for why croner's rules are the
/// engine's for these).
pub const CRON: CronNext = CronNext {
    next: cron_next,
    prev: cron_prev,
};

/// croner's next occurrence of `expr` in `zone` strictly after `after_ms` (remembered: a
/// `FireAll` completion walks the chain of occurrences the previous one walked).
pub fn cron_next(expr: &'static str, zone: &'static str, after_ms: u64) -> Option<u64> {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::hash::{BuildHasherDefault, Hasher};
    /// The answers are keyed by the strings' addresses and lengths (they are `'static`: those
    /// name one text for good) and the instant, hashed by one multiplication: a walk of thousands
    /// of occurrences spent most of its time hashing the strings.
    #[derive(Default)]
    struct Mix(u64);
    impl Hasher for Mix {
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.write_u64(u64::from(b));
            }
        }
        fn write_u64(&mut self, n: u64) {
            self.0 = (self.0 ^ n)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(29);
        }
        fn write_usize(&mut self, n: usize) {
            self.write_u64(n as u64);
        }
        fn finish(&self) -> u64 {
            self.0
        }
    }
    type Known = HashMap<([usize; 4], u64), Option<u64>, BuildHasherDefault<Mix>>;
    thread_local! {
        static KNOWN: RefCell<Known> = RefCell::new(Known::default());
        static CHAINS: RefCell<HashMap<[usize; 4], Chain>> = RefCell::new(HashMap::new());
    }
    let text = |s: &str| [s.as_ptr() as usize, s.len()];
    let ([e, el], [z, zl]) = (text(expr), text(zone));
    let key = ([e, el, z, zl], after_ms);
    if let Some(next) = CHAINS.with(|c| {
        c.borrow_mut()
            .entry(key.0)
            .or_default()
            .next_after(after_ms, |at| {
                with_cron(expr, zone, at, |cron, at| {
                    cron.find_next_occurrence(at, false).ok()
                })
            })
    }) {
        return Some(next);
    }
    if let Some(next) = KNOWN.with(|k| k.borrow().get(&key).copied()) {
        return next;
    }
    let next = with_cron(expr, zone, after_ms, |cron, at| {
        cron.find_next_occurrence(at, false).ok()
    });
    KNOWN.with(|k| {
        let mut k = k.borrow_mut();
        if k.len() >= 1 << 20 {
            k.clear();
        }
        k.insert(key, next);
    });
    next
}

/// Consecutive occurrences of one cron schedule, `occ[i + 1]` croner's next after `occ[i]`:
/// nothing occurs strictly between two neighbours, so the next occurrence after any instant
/// from the first to the last is found here, and a walk along the chain (a `FireAll`
/// completion walks thousands) reads one vector in order instead of a hash map entry per step
/// (a cache miss each: a fifth of a campaign's time).
#[derive(Default)]
struct Chain {
    occ: Vec<u64>,
    /// Where the last answer was: a walk asks for the next after it.
    hint: usize,
}

impl Chain {
    /// At most this many occurrences, then the chain starts again.
    const LEN_MAX: usize = 1 << 22;
    /// A query this many occurrences beyond the end is left to the map (the chain grows only
    /// by walks).
    const GROW_MAX: usize = 64;

    /// The next occurrence strictly after `t`, if the chain covers `t` or can be grown to it
    /// in a few steps of `next` (croner's search); `None`: ask elsewhere.
    fn next_after(&mut self, t: u64, next: impl Fn(u64) -> Option<u64>) -> Option<u64> {
        if self.occ.is_empty() || self.occ.len() >= Self::LEN_MAX {
            self.occ.clear();
            self.hint = 0;
            let first = next(t)?;
            self.occ.push(first);
            return Some(first);
        }
        if t < self.occ[0] {
            return None;
        }
        let h = self.hint;
        if h + 1 < self.occ.len() && self.occ[h] <= t && t < self.occ[h + 1] {
            self.hint = h + 1;
            return Some(self.occ[h + 1]);
        }
        let i = self.occ.partition_point(|&c| c <= t);
        if i < self.occ.len() {
            self.hint = i;
            return Some(self.occ[i]);
        }
        for _ in 0..Self::GROW_MAX {
            let last = *self.occ.last().expect("not empty");
            let n = next(last)?;
            assert!(n > last, "croner's next occurrence is later");
            self.occ.push(n);
            if n > t {
                self.hint = self.occ.len() - 1;
                return Some(n);
            }
        }
        None
    }
}

/// croner's last occurrence at or before `at_ms`, in the zones without daylight saving time
/// (elsewhere `None`: the model walks forward).
pub fn cron_prev(expr: &'static str, zone: &'static str, at_ms: u64) -> Option<u64> {
    if !matches!(zone, "UTC" | "Asia/Kolkata") {
        return None;
    }
    with_cron(expr, zone, at_ms, |cron, at| {
        cron.find_previous_occurrence(at, true).ok()
    })
}

fn with_cron(
    expr: &str,
    zone: &str,
    at_ms: u64,
    search: impl FnOnce(
        &croner::Cron,
        &chrono::DateTime<chrono_tz::Tz>,
    ) -> Option<chrono::DateTime<chrono_tz::Tz>>,
) -> Option<u64> {
    use std::cell::RefCell;
    use std::collections::HashMap;
    thread_local! {
        static PARSED: RefCell<HashMap<String, croner::Cron>> = RefCell::new(HashMap::new());
    }
    let tz: chrono_tz::Tz = zone.parse().expect("a known zone");
    let at =
        chrono::DateTime::from_timestamp_millis(i64::try_from(at_ms).ok()?)?.with_timezone(&tz);
    PARSED.with(|p| {
        let mut p = p.borrow_mut();
        if !p.contains_key(expr) {
            let cron = croner::parser::CronParser::builder()
                .seconds(croner::parser::Seconds::Optional)
                .year(croner::parser::Year::Disallowed)
                .build()
                .parse(expr)
                .expect("a valid expression");
            p.insert(expr.to_owned(), cron);
        }
        let found = search(&p[expr], &at)?;
        u64::try_from(found.timestamp_millis()).ok()
    })
}
