//! The driver: runs one seed's operations against the real engine on a `FaultDisk`, with a
//! `ManualClock` and no timer thread, and checks each result against the oracle.

use std::sync::Arc;

use timewheel::{Claimed, Clock, Config, Engine, Error, JobId, ManualClock, Outcome};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SimRng, SyncFailure};

use super::ops::{self, Op, Spec, T0_MS};
use super::trace::Trace;
use crate::model::{Ending, Fair, Fault, Gone, Model, REASONS, Violation, fault};
use crate::violation;

/// How a seed ended, when it passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Every operation ran and the final check passed.
    Completed,
    /// Media corruption was reported by an open (`Corrupted`): the run stops there.
    CorruptionReported,
}

/// What one seed did.
#[derive(Debug, Clone)]
pub struct Report {
    pub end: End,
    pub trace_hash: u64,
    /// See [`run_seed_with`].
    pub disk_hash: u64,
    pub ops: u64,
    pub crashes: u64,
    pub failed_opens: u64,
    pub jobs: u64,
    pub tally: crate::model::Tally,
    /// Run with `Config::fair_tenants`.
    pub fair: bool,
}

/// Everything about one run that is fixed by its seed.
struct Setup {
    ops: u64,
    lease_ms: u64,
    segment_bytes: u64,
    fires_per_advance_max: usize,
    corruption_chance: f64,
}

/// The engine of the current incarnation and what its worker holds.
struct Live {
    engine: Engine,
    /// Ids drained from `ready()`, not yet claimed.
    backlog: Vec<JobId>,
    /// Claims not yet completed or failed.
    held: Vec<Claimed>,
    /// The disk's failed syncs when this engine opened: any more, and nothing may be acked.
    failed_syncs_at_open: u64,
}

struct Sim {
    rng: SimRng,
    /// The lifecycle stream and settings (retries, dead letters, keys): see `ops::Lifecycle`.
    life: ops::Lifecycle,
    /// The feature stream and settings (recurring jobs, tenants, fairness): `ops::Features`.
    feat: ops::Features,
    disk: FaultDisk,
    clock: ManualClock,
    setup: Setup,
    model: Model,
    trace: Trace,
    /// Media faults hit the disk since the last successful open.
    corruption_pending: bool,
    /// How many (bit flips in synced data plus misdirected writes) since then.
    media_faults_pending: u32,
    /// An open failed part-way since then (its recovery report, torn tail and all, is lost).
    open_failed_pending: bool,
    crashes: u64,
    failed_opens: u64,
    /// With `hash_disks`: every file's checksums before and after each crash (a crash step,
    /// one in a failed open's recovery, the last one before the final recovery) and at the
    /// end, folded together (`disk_digest`); `None` without.
    disk_hash: Option<u64>,
}

/// Runs one seed. `Err` is an oracle violation; a panic propagates (the caller catches it).
pub fn run_seed(seed: u64, verbose: bool) -> Result<Report, Violation> {
    run_seed_with(seed, verbose, false)
}

/// Like [`run_seed`]; with `hash_disks`, the report's `disk_hash` (0 without) folds in every
/// file's bytes around each crash and at the end (slow: for determinism checks, not
/// campaigns).
pub fn run_seed_with(seed: u64, verbose: bool, hash_disks: bool) -> Result<Report, Violation> {
    let mut rng = SimRng::new(seed);
    let setup = Setup {
        ops: rng.between(150, 450),
        lease_ms: rng.between(50, 500),
        segment_bytes: *rng
            .pick(&[8 << 10, 16 << 10, 64 << 10, 1 << 20])
            .expect("sizes"),
        fires_per_advance_max: *rng.pick(&[1, 3, 64, 4096]).expect("limits"),
        corruption_chance: *rng.pick(&[0.0, 0.0, 0.03, 0.1]).expect("chances"),
    };
    let disk = FaultDisk::new(rng.next_u64());
    let lease_ms = setup.lease_ms;
    let life = ops::Lifecycle::new(seed);
    let retry = life.retry;
    let feat = ops::Features::new(seed);
    let mut model = Model::new(T0_MS, lease_ms, 1 + seed % 64)
        .with_retry(retry)
        .with_cron(ops::CRON)
        .with_misfire_threshold(feat.misfire_threshold_ms);
    if let Some(f) = &feat.fair {
        model = model.with_fair(Fair::new(f.depth, f.running_max, f.limits.clone()));
    }
    let mut sim = Sim {
        rng,
        life,
        feat,
        disk,
        clock: ManualClock::new(T0_MS),
        setup,
        // The id block comes from the seed, not the stream, so that every seed's operations
        // stay as they were.
        model,
        trace: Trace::new(verbose),
        corruption_pending: false,
        media_faults_pending: 0,
        open_failed_pending: false,
        crashes: 0,
        failed_opens: 0,
        disk_hash: hash_disks.then_some(0),
    };
    sim.trace.line(|| {
        format!(
            "seed {seed}: {} ops, lease {} ms, segments {} bytes, fires_per_advance_max {}, corruption {}; \
             retry {:?}, {} keys (chance {}), own policies {}; recurring {}, {} tenants, fair {:?}, \
             misfire threshold {} ms",
            sim.setup.ops,
            sim.setup.lease_ms,
            sim.setup.segment_bytes,
            sim.setup.fires_per_advance_max,
            sim.setup.corruption_chance,
            sim.life.retry,
            sim.life.keys,
            sim.life.key_chance,
            sim.life.policy_chance,
            sim.feat.recur_chance,
            sim.feat.tenants,
            sim.feat.fair,
            sim.feat.misfire_threshold_ms
        )
    });
    let end = sim.run()?;
    sim.hash_disk(None);
    Ok(Report {
        end,
        trace_hash: sim.trace.hash(),
        disk_hash: sim.disk_hash.unwrap_or(0),
        ops: sim.setup.ops,
        crashes: sim.crashes,
        failed_opens: sim.failed_opens,
        jobs: sim.model.jobs.len() as u64,
        tally: sim.model.tally,
        fair: sim.feat.fair.is_some(),
    })
}

fn short(e: &Error) -> &'static str {
    match e {
        Error::InvalidInput { .. } => "invalid",
        Error::Closed => "closed",
        Error::Poisoned => "poisoned",
        Error::Io(_) => "io",
        Error::NoSpace { .. } => "nospace",
        Error::Corrupted { .. }
        | Error::CorruptedStore { .. }
        | Error::UndecodableRecord { .. } => "corrupted",
        Error::Locked => "locked",
        _ => "other",
    }
}

impl Sim {
    fn config(&self) -> Config {
        let mut c = Config::new("/unused-by-the-simulation");
        c.timer_thread = false;
        c.segment_bytes = self.setup.segment_bytes;
        // The smallest reach: groups capped at 4 KiB, the reach one whole block (12 KiB), so
        // that segments of 16 KiB and more have write bounds short of their end, and recovery
        // proves zeros only up to them.
        c.write_reach_bytes = 4096;
        c.payload_bytes_max = ops::PAYLOAD_BYTES_MAX;
        c.fail_reason_bytes_max = 256;
        // A small policy per seed (1-5 attempts, waits of ms to a second): jobs retry and die
        // within a run, also by leases that run out.
        c.retry = self.life.retry;
        c.retry_seed = self.life.retry_seed;
        c.lease_ms = self.setup.lease_ms;
        c.fires_per_advance_max = self.setup.fires_per_advance_max;
        c.id_block = self.model.id_block;
        // Media damage in a bucket beyond the horizon is found at open, where the oracle looks
        // for it (the engine's default finds it when the bucket is read).
        c.verify_buckets_at_open = true;
        // No ballast: an open on a disk armed with ENOSPC must fail (the oracle's rule), and a
        // ballast is made at open, where it may not fail an open (see tests/compaction.rs).
        c.disk_ballast_bytes = 0;
        // From the model's id block (the seed), not the stream: an hour (most jobs beyond it,
        // kept on disk once compacted), the default, or a year (everything resident).
        c.horizon_ms = match self.model.id_block % 3 {
            0 => 3_600_000,
            1 => 3 * 3_600_000,
            _ => 366 * ops::DAY_MS,
        };
        // Also from the id block: segments sealed only when full, or also once they have held
        // records a second (nearly every pass after a clock step seals), or ten minutes.
        c.seal_after_ms = match (self.model.id_block / 3) % 3 {
            0 => 0,
            1 => 1_000,
            _ => 600_000,
        };
        c.misfire_threshold_ms = self.feat.misfire_threshold_ms;
        // The job table's smallest chunks in about three seeds of four, so that a few hundred jobs
        // fill and give back many chunks, and jobs move between slots with their timers (the
        // default's 1,024-slot chunks are given back only past 2,048 free slots).
        c.job_table_chunk_slots = if (self.model.id_block / 9).is_multiple_of(4) {
            1024
        } else {
            16
        };
        if let Some(f) = &self.feat.fair {
            c.fair_tenants = true;
            c.ready_channel_depth = f.depth;
            c.tenant_running_max = f.running_max;
            c.tenant_running_limits = f.limits.clone();
        }
        c
    }

    fn run(&mut self) -> Result<End, Violation> {
        let mut live = match self.recover(false)? {
            Ok(live) => live,
            Err(end) => return Ok(end),
        };
        for step in 0..self.setup.ops {
            let dead = self.model.dead_ids();
            let life_view = ops::LifeView {
                now_ms: self.clock.now_ms(),
                lease_ms: self.setup.lease_ms,
                dead: &dead,
                held: live.held.len(),
            };
            if let Some(op) = self.life.extra(&life_view) {
                self.trace.line(|| format!("{step}: {op:?}"));
                live = match self.apply(live, op)? {
                    Ok(live) => live,
                    Err(end) => return Ok(end),
                };
                self.model.check_counts(&live.engine)?;
                self.model.check_keys(&live.engine)?;
            }
            let recurring = self.model.recurring_ids();
            let feat_view = ops::FeatView {
                now_ms: self.clock.now_ms(),
                recurring: &recurring,
                ids: &self.model.ids,
                keys: self.life.keys,
                key_chance: self.life.key_chance,
            };
            if let Some(op) = self.feat.extra(&feat_view) {
                self.trace.line(|| format!("{step}: {op:?}"));
                live = match self.apply(live, op)? {
                    Ok(live) => live,
                    Err(end) => return Ok(end),
                };
                self.model.check_counts(&live.engine)?;
                self.model.check_keys(&live.engine)?;
            }
            let op = {
                let view = ops::View {
                    now_ms: self.clock.now_ms(),
                    lease_ms: self.setup.lease_ms,
                    ids: &self.model.ids,
                    id_end: self.model.id_end(),
                    backlog: live.backlog.len(),
                    held: live.held.len(),
                    corruption_chance: self.setup.corruption_chance,
                };
                let op = ops::next(&mut self.rng, &view);
                let dead = self.model.dead_ids();
                let life_view = ops::LifeView {
                    now_ms: self.clock.now_ms(),
                    lease_ms: self.setup.lease_ms,
                    dead: &dead,
                    held: live.held.len(),
                };
                let op = self.life.op(op, &life_view);
                self.feat.op(op, self.clock.now_ms())
            };
            self.trace.line(|| format!("{step}: {op:?}"));
            // A clock step or a failpoint armed calls nothing of the engine's: its counts
            // cannot change (and `stats` is what a step's check costs most).
            let calls_engine = !matches!(
                op,
                Op::ClockSet(_) | Op::ArmSyncFailure(_) | Op::ArmEnospc(_)
            );
            live = match self.apply(live, op)? {
                Ok(live) => live,
                Err(end) => return Ok(end),
            };
            // The counts per state, finished and fired, and the ready channel's depth, after
            // every step that called the engine.
            if calls_engine {
                self.model.check_counts(&live.engine)?;
                self.model.check_keys(&live.engine)?;
            }
        }
        self.finish(live)
    }

    /// Whether the disk saw a failed sync since this engine opened: then nothing may be
    /// acknowledged.
    fn poisoned(&self, live: &Live) -> bool {
        self.disk.stats().failed_syncs > live.failed_syncs_at_open
    }

    /// Sorts a result for the model, checking the poisoning rule on `Ok`.
    fn sort<T: std::fmt::Debug>(
        &mut self,
        live: &Live,
        what: &str,
        r: timewheel::Result<T>,
    ) -> Result<Result<T, Fault>, Violation> {
        match r {
            Ok(v) => {
                if self.poisoned(live) {
                    return violation!("{what} returned Ok({v:?}) after a failed sync");
                }
                Ok(Ok(v))
            }
            Err(e) => {
                self.trace.event(&[71, fault(&e) as u64]);
                self.trace.line(|| format!("   {what}: {}", short(&e)));
                Ok(Err(fault(&e)))
            }
        }
    }

    /// With fairness on, after every engine call: what the call fed into the ready channel is
    /// drained into the worker's backlog and checked (the model follows every feeding).
    fn after_call(&mut self, live: &mut Live) -> Result<(), Violation> {
        if self.model.fair.is_none() {
            return Ok(());
        }
        let drained: Vec<JobId> = live.engine.ready().try_iter().collect();
        if !drained.is_empty() {
            self.trace.event(&[25, drained.len() as u64]);
            self.trace.line(|| format!("   fed {drained:?}"));
        }
        self.model.fed(&drained, &live.engine)?;
        live.backlog.extend(drained);
        Ok(())
    }

    /// Runs one operation. Returns the engine to go on with, or how the run ended.
    fn apply(&mut self, live: Live, op: Op) -> Result<Result<Live, End>, Violation> {
        let calls_engine = !matches!(
            op,
            Op::ClockSet(_) | Op::ArmSyncFailure(_) | Op::ArmEnospc(_)
        );
        let mut live = match self.apply_op(live, op)? {
            Ok(live) => live,
            Err(end) => return Ok(Err(end)),
        };
        if calls_engine {
            self.after_call(&mut live)?;
        }
        Ok(Ok(live))
    }

    /// A schedule call (`what`) of `id` returned `r`: sorted like any call when `id` recurs,
    /// else a `NotFound` that looked at nothing else (also on an engine that refuses calls).
    fn schedule_call(
        &mut self,
        live: &Live,
        what: &str,
        id: u64,
        r: timewheel::Result<Outcome>,
    ) -> Result<Result<Outcome, Fault>, Violation> {
        let r = if self.model.recurring(id) {
            self.sort(live, what, r)?
        } else {
            r.map_err(|e| fault(&e))
        };
        if let Ok(o) = r {
            self.trace.event(&[79, id, u64::from(o.is_done())]);
        }
        Ok(r)
    }

    fn apply_op(&mut self, mut live: Live, op: Op) -> Result<Result<Live, End>, Violation> {
        match op {
            Op::Schedule(spec) => {
                let r = live.engine.schedule(spec.job_spec()).map(|id| vec![id]);
                self.schedule_result(&live, r, &[spec])?;
            }
            Op::ScheduleBatch(specs) => {
                let r = live.engine.schedule_batch(specs.iter().map(Spec::job_spec));
                self.schedule_result(&live, r, &specs)?;
            }
            Op::ScheduleInvalid(spec) => {
                let r = live.engine.schedule(spec.job_spec()).map(|id| vec![id]);
                match r {
                    Ok(ids) => return violation!("oversized payload accepted as {ids:?}"),
                    Err(e) => {
                        self.trace.event(&[10, fault(&e) as u64]);
                        if !matches!(e, Error::InvalidInput { .. } | Error::Poisoned) {
                            return violation!("oversized payload refused with {e:?}");
                        }
                    }
                }
            }
            Op::Cancel(id) => {
                let r = live.engine.cancel(JobId(id));
                let r = self.sort(&live, "cancel", r)?;
                if let Ok(o) = r {
                    self.trace.event(&[70, u64::from(o.is_done())]);
                }
                self.model.cancel(id, r, &live.engine)?;
            }
            Op::Reschedule(id, due_ms) => {
                let r = live.engine.reschedule(JobId(id), due_ms);
                let r = self.sort(&live, "reschedule", r)?;
                if let Ok(o) = r {
                    self.trace.event(&[70, u64::from(o.is_done())]);
                }
                self.model.reschedule(id, due_ms, r, &live.engine)?;
            }
            Op::RunTimers => {
                let moved = live.engine.run_timers();
                let drained: Vec<JobId> = live.engine.ready().try_iter().collect();
                self.trace.event(&[20, moved as u64, drained.len() as u64]);
                self.trace.line(|| format!("   fired {drained:?}"));
                // Exactly the due jobs, expired leases and unclaimed ready jobs, none early
                // (with fairness on: what the tenants' queues feed); then every job's state,
                // due time and attempt as modelled.
                self.model.run_timers_on(&drained, Some(&live.engine))?;
                self.model.check_live(&live.engine)?;
                live.backlog.extend(drained);
            }
            Op::Claim(n) => {
                let n = n.min(live.backlog.len());
                let ids: Vec<JobId> = live.backlog.drain(..n).collect();
                for id in ids {
                    if self.rng.chance(0.15) {
                        continue; // a worker that dropped this one
                    }
                    let r = live.engine.claim(id);
                    let r = self.sort(&live, "claim", r)?;
                    match &r {
                        Ok(Some(c)) => {
                            self.trace.event(&[30, id.0, u64::from(c.attempt)]);
                            self.trace
                                .line(|| format!("   claimed {id} attempt {}", c.attempt));
                        }
                        Ok(None) => self.trace.event(&[31, id.0]),
                        Err(f) => self.trace.event(&[32, id.0, *f as u64]),
                    }
                    let claimed = r.as_ref().ok().and_then(|c| c.clone());
                    self.model.claim(&[id], r.map(|c| vec![c]), &live.engine)?;
                    live.held.extend(claimed);
                    self.after_call(&mut live)?;
                }
            }
            Op::Complete(i) if !live.held.is_empty() => {
                let c = live.held.remove(i % live.held.len());
                let r = live.engine.complete(&c);
                let r = self.sort(&live, "complete", r)?;
                if let Ok(b) = r {
                    self.trace.event(&[70, u64::from(b)]);
                }
                self.model
                    .finish(&[c], Gone::Completed, r.map(|b| vec![b]), &live.engine)?;
            }
            Op::FailRetryable(i, reason) | Op::FailPermanently(i, reason)
                if !live.held.is_empty() =>
            {
                let c = live.held.remove(i % live.held.len());
                let retryable = matches!(op, Op::FailRetryable(..));
                let text = REASONS[usize::from(reason)];
                let r = if retryable {
                    live.engine.fail(&c, text)
                } else {
                    live.engine.fail_permanently(&c, text)
                };
                let r = self.sort(&live, "fail", r)?;
                if let Ok(b) = r {
                    self.trace.event(&[72, u64::from(b), u64::from(retryable)]);
                }
                let ending = Ending::Fail { retryable, reason };
                self.model.ended_attempt(&c, ending, r, &live.engine)?;
                if let Some(i) = live.engine.get(c.id) {
                    self.trace.event(&[73, i.due_ms, u64::from(i.failures)]);
                    self.trace.line(|| {
                        format!("   job {} due {} failures {}", c.id, i.due_ms, i.failures)
                    });
                }
            }
            Op::RetryAt(i, due_ms) if !live.held.is_empty() => {
                let c = live.held.remove(i % live.held.len());
                let r = live.engine.retry_at(&c, due_ms);
                let r = self.sort(&live, "retry_at", r)?;
                if let Ok(b) = r {
                    self.trace.event(&[74, u64::from(b)]);
                }
                self.model
                    .ended_attempt(&c, Ending::RetryAt(due_ms), r, &live.engine)?;
            }
            Op::ExtendLease(i, lease_ms) if !live.held.is_empty() => {
                let c = live.held[i % live.held.len()].clone();
                let r = live
                    .engine
                    .extend_lease(&c, std::time::Duration::from_millis(lease_ms));
                let r = self.sort(&live, "extend_lease", r)?;
                if let Ok(u) = r {
                    self.trace.event(&[75, u.unwrap_or(0)]);
                }
                self.model.extended(&c, lease_ms, r)?;
            }
            Op::RequeueDead(ref ids) | Op::PurgeDead(ref ids) => {
                let requeue = matches!(op, Op::RequeueDead(_));
                let ids: Vec<JobId> = ids.iter().copied().map(JobId).collect();
                let r = if requeue {
                    live.engine.requeue_dead(&ids)
                } else {
                    live.engine.purge_dead(&ids)
                };
                let r = self.sort(&live, "dead letters", r)?;
                if let Ok(done) = &r {
                    self.trace
                        .event(&[76, done.iter().filter(|d| **d).count() as u64]);
                }
                self.model.dead_changed(&ids, requeue, r, &live.engine)?;
                self.model.check_dead(&live.engine)?;
            }
            Op::PurgeAllDead => {
                let r = live.engine.purge_dead_where(None);
                let r = self.sort(&live, "purge_dead_where", r)?;
                if let Ok(n) = r {
                    self.trace.event(&[77, n]);
                }
                self.model.purged_all(r, &live.engine)?;
                self.model.check_dead(&live.engine)?;
            }
            Op::CancelByKey(key) => {
                let held = live.engine.id_by_key(&key).is_some();
                let r = live.engine.cancel_by_key(&key);
                // A key no job holds is `NotFound` without a look at anything else, also on a
                // poisoned engine (a read of memory, like `get`).
                let r = if held {
                    self.sort(&live, "cancel_by_key", r)?
                } else {
                    r.map_err(|e| fault(&e))
                };
                if let Ok(o) = r {
                    self.trace.event(&[78, u64::from(o.is_done())]);
                }
                self.model.cancel_by_key(&key, r, &live.engine)?;
            }
            Op::RescheduleByKey(key, due_ms) => {
                let held = live.engine.id_by_key(&key).is_some();
                let r = live.engine.reschedule_by_key(&key, due_ms);
                let r = if held {
                    self.sort(&live, "reschedule_by_key", r)?
                } else {
                    r.map_err(|e| fault(&e))
                };
                if let Ok(o) = r {
                    self.trace.event(&[78, u64::from(o.is_done()), due_ms]);
                }
                self.model
                    .reschedule_by_key(&key, due_ms, r, &live.engine)?;
            }
            Op::PauseSchedule(id) => {
                let r = live.engine.pause_schedule(JobId(id));
                let r = self.schedule_call(&live, "pause_schedule", id, r)?;
                self.model.pause(id, r, &live.engine)?;
            }
            Op::ResumeSchedule(id) => {
                let r = live.engine.resume_schedule(JobId(id));
                let r = self.schedule_call(&live, "resume_schedule", id, r)?;
                self.model.resume(id, r, &live.engine)?;
            }
            Op::DeleteSchedule(id) => {
                let r = live.engine.delete_schedule(JobId(id));
                let r = self.schedule_call(&live, "delete_schedule", id, r)?;
                self.model.delete(id, r, &live.engine)?;
            }
            Op::CheckSchedules(page) => {
                // `check_live` reads every job back (one kept on disk is listed only then).
                self.model.check_live(&live.engine)?;
                self.model.check_schedules(&live.engine, page)?;
            }
            Op::CompleteBatch(n) if !live.held.is_empty() => {
                let n = n.min(live.held.len());
                let batch: Vec<Claimed> = live.held.drain(..n).collect();
                let r = live.engine.complete_batch(&batch);
                let r = self.sort(&live, "complete_batch", r)?;
                match &r {
                    Ok(done) => self
                        .trace
                        .event(&[40, done.iter().filter(|d| **d).count() as u64]),
                    Err(f) => self.trace.event(&[41, *f as u64]),
                }
                self.model
                    .finish(&batch, Gone::Completed, r, &live.engine)?;
            }
            Op::Complete(_)
            | Op::FailRetryable(..)
            | Op::FailPermanently(..)
            | Op::RetryAt(..)
            | Op::ExtendLease(..)
            | Op::CompleteBatch(_) => {}
            Op::Fail(_) => unreachable!("the lifecycle stream says how an attempt ends"),
            Op::ClockSet(ms) => {
                self.clock.set(ms);
                self.model.set_clock(ms);
                self.trace.event(&[50, ms]);
            }
            Op::Compact => {
                // Invisible to the model: what the engine holds and reports must not change,
                // whether the pass succeeds or a fault stops it part-way (the oracle checks
                // both after this step, and after every later crash and reopen).
                let before = live.engine.store_stats();
                let passes_before = before.compactions;
                let r = live.engine.compact();
                self.model.tally.early_seals +=
                    live.engine.store_stats().segments_sealed_early - before.segments_sealed_early;
                self.trace
                    .event(&[80, r.as_ref().map_or(u64::MAX, |c| c.records)]);
                if r.is_ok()
                    && live.engine.store_stats().compactions > passes_before
                    && !self.poisoned(&live)
                {
                    // Memory after the pass: no far job whose records it folded (a pass that
                    // found nothing sealed sweeps nothing, so only after one that ran).
                    self.check_memory(&live.engine, "pass")?;
                }
                match r {
                    Ok(c) => self.trace.line(|| {
                        let s = live.engine.store_stats();
                        format!(
                            "   compacted {} records: {} runs written, {} segments deleted, {} buckets dropped; \
                             {} jobs kept on disk only ({} evicted, {} loaded since open)",
                            c.records,
                            c.runs_written,
                            c.segments_deleted,
                            c.buckets_dropped,
                            s.non_resident,
                            s.evicted,
                            s.loaded
                        )
                    }),
                    Err(e) => self.trace.line(|| format!("   compact: {}", short(&e))),
                }
            }
            Op::ArmSyncFailure(f) => self.disk.set_sync_failure(f),
            Op::ArmEnospc(on) => self.disk.set_enospc(on),
            Op::CloseReopen | Op::DropReopen => {
                let failed_before = self.disk.stats().failed_syncs;
                let poisoned = self.poisoned(&live);
                if matches!(op, Op::CloseReopen) {
                    let r = live.engine.close();
                    let failed_syncs = self.disk.stats().failed_syncs;
                    self.trace.event(&[60, u64::from(r.is_ok())]);
                    if r.is_ok() && failed_syncs > live.failed_syncs_at_open {
                        return violation!("close returned Ok after a failed sync");
                    }
                    if let Err(e) = &r
                        && !poisoned
                        && failed_syncs == failed_before
                    {
                        return violation!("close failed without a fault: {e:?}");
                    }
                    self.model.engine_gone(Some(r.map_err(|e| fault(&e))));
                } else {
                    drop(live.engine);
                    self.model.engine_gone(None);
                }
                // The old engine's claims die with it, mostly; a stale one tests fencing.
                let held = self.keep_some(live.held);
                return self.reopen(held);
            }
            Op::Crash { mut opts, corrupt } => {
                // One media fault at a time: a fault is repaired (from the group's mirror) or
                // reported by the next successful open, before another may land. Two faults
                // that hit both copies of the newest group are the log's documented residual
                // limit (docs/wal-format.md), outside what the oracle accepts.
                if self.media_faults_pending > 0 {
                    opts.bit_flips_synced = 0;
                    opts.misdirected_writes = 0;
                } else if opts.bit_flips_synced + opts.misdirected_writes > 1 {
                    opts.misdirected_writes = u32::from(opts.bit_flips_synced == 0);
                    opts.bit_flips_synced = u32::from(opts.bit_flips_synced > 0);
                }
                self.crashes += 1;
                self.trace.line(|| format!("   crash {opts:?}"));
                self.trace
                    .line(|| format!("   disk before the crash: {}", disk_digest(&self.disk)));
                let crashed = self.crash_disk(&opts);
                self.trace
                    .line(|| format!("   disk after the crash: {}", disk_digest(&crashed)));
                if self.rng.chance(0.5) {
                    live.engine.abandon();
                } else {
                    drop(live.engine); // its drop syncs the old disk: too late to matter
                }
                self.model.engine_gone(None);
                self.disk = crashed;
                self.corruption_pending |= corrupt;
                self.media_faults_pending += opts.bit_flips_synced + opts.misdirected_writes;
                let held = self.keep_some(live.held);
                return self.reopen(held);
            }
        }
        Ok(Ok(live))
    }

    fn keep_some(&mut self, held: Vec<Claimed>) -> Vec<Claimed> {
        if self.rng.chance(0.2) {
            held
        } else {
            Vec::new()
        }
    }

    fn reopen(&mut self, held: Vec<Claimed>) -> Result<Result<Live, End>, Violation> {
        Ok(self.recover(true)?.map(|mut live| {
            live.held = held;
            live
        }))
    }

    fn schedule_result(
        &mut self,
        live: &Live,
        r: timewheel::Result<Vec<JobId>>,
        specs: &[Spec],
    ) -> Result<(), Violation> {
        match r {
            Ok(ids) => {
                if self.poisoned(live) {
                    return violation!("schedule returned Ok({ids:?}) after a failed sync");
                }
                self.trace
                    .event(&[80, ids.first().map_or(0, |id| id.0), ids.len() as u64]);
                self.trace.line(|| format!("   ids {ids:?}"));
                self.model.scheduled(specs, Ok(ids))
            }
            Err(e) => {
                self.trace.event(&[81, fault(&e) as u64]);
                self.trace.line(|| format!("   schedule: {}", short(&e)));
                if matches!(e, Error::InvalidInput { .. }) {
                    return violation!("valid schedule refused: {e:?}");
                }
                self.model.scheduled(specs, Err(fault(&e)))
            }
        }
    }

    /// Opens the engine on the current disk, injecting faults into recovery itself when
    /// `faults`: a sync failure or ENOSPC that makes the open fail part-way, after which the
    /// disk either crashes or is reopened as it is. Checks the oracle after the open succeeds.
    fn recover(&mut self, faults: bool) -> Result<Result<Live, End>, Violation> {
        const ATTEMPTS_MAX: u32 = 4;
        for attempt in 0..=ATTEMPTS_MAX {
            let armed = faults && attempt < ATTEMPTS_MAX && self.rng.chance(0.25);
            if armed {
                let kind = self.rng.below(10);
                if kind < 5 {
                    let f = match self.rng.below(3) {
                        0 => SyncFailure::Next,
                        1 => SyncFailure::AfterN(self.rng.below(4)),
                        _ => SyncFailure::AlwaysAfterN(self.rng.below(4)),
                    };
                    self.disk.set_sync_failure(f);
                } else if kind < 7 {
                    self.disk.set_enospc(true);
                } else {
                    // A media read error while recovery reads the log: `Io`, never a panic
                    // (a SIGBUS through the map) or `Corrupted`.
                    let f = SyncFailure::AfterN(self.rng.below(6));
                    self.disk.set_read_failure(f);
                }
            } else if attempt == ATTEMPTS_MAX || !faults || self.rng.chance(0.8) {
                // Failpoints armed before a close stay armed across it, sometimes.
                self.disk.set_sync_failure(SyncFailure::Never);
                self.disk.set_enospc(false);
                self.disk.set_read_failure(SyncFailure::Never);
            }
            let failed_before = self.disk.stats().failed_syncs;
            let enospc_before = self.disk.stats().enospc_failures;
            let reads_failed_before = self.disk.stats().failed_reads;
            let r = Engine::open_on(
                self.disk.storage(),
                self.config(),
                Arc::new(self.clock.clone()),
            );
            let stats = self.disk.stats();
            let faulted = stats.failed_syncs > failed_before
                || stats.enospc_failures > enospc_before
                || stats.failed_reads > reads_failed_before;
            // An armed read failure that did not fire stays off for the engine's life.
            self.disk.set_read_failure(SyncFailure::Never);
            match r {
                Ok(engine) => {
                    self.trace.event(&[90, attempt.into()]);
                    if faulted {
                        return violation!(
                            "open succeeded although a sync, create or read failed in it"
                        );
                    }
                    return self.check_recovered(engine);
                }
                Err(
                    e @ (Error::Corrupted { .. }
                    | Error::CorruptedStore { .. }
                    | Error::UndecodableRecord { .. }),
                ) => {
                    self.trace.line(|| format!("   open: {e}"));
                    if self.corruption_pending {
                        self.trace.event(&[91]);
                        return Ok(Err(End::CorruptionReported));
                    }
                    return violation!("open failed with {e:?} after power-cut faults only");
                }
                Err(e) => {
                    self.failed_opens += 1;
                    self.open_failed_pending = true;
                    self.trace.event(&[92, attempt.into()]);
                    self.trace.line(|| format!("   open failed: {e}"));
                    if !faulted {
                        return violation!("open failed without an injected fault: {e:?}");
                    }
                    if self.rng.chance(0.6) {
                        // A crash in the middle of recovery: its unsynced work may be lost.
                        let opts = CrashOptions::random(&mut self.rng);
                        self.disk = self.crash_disk(&opts);
                        self.crashes += 1;
                    }
                }
            }
        }
        unreachable!("the last attempt is made without faults")
    }

    /// The oracle on memory (`super::memory`), after a compaction pass (`when`): the far jobs
    /// memory holds all have a record the bucket files do not cover. (Not after every open: an
    /// open's check, tried, slowed the simulation by a fifth, reading the journal at each of
    /// a seed's dozens of opens; what the open loads is counted by `non_resident` instead.)
    fn check_memory(&mut self, engine: &Engine, when: &str) -> Result<(), Violation> {
        let config = self.config();
        // The first hour bucket no horizon of this run has reached.
        let far_from_ms = (self.model.max_clock_ms.saturating_add(config.horizon_ms) / 3_600_000)
            .saturating_add(1)
            .saturating_mul(3_600_000);
        let held = super::memory::check_after_pass(engine, when, &self.disk, &config, far_from_ms)?;
        self.trace
            .line(|| format!("   far jobs in memory after the {when}: {held:?}"));
        let t = &mut self.model.tally;
        t.memory_checks += 1;
        match held {
            Some(n) => t.far_held += n as u64,
            None => t.memory_unreadable += 1,
        }
        Ok(())
    }

    /// The disk a crash with `opts` leaves, folded with the disk before it into `disk_hash`
    /// (if asked for).
    fn crash_disk(&mut self, opts: &CrashOptions) -> FaultDisk {
        let crashed = self.disk.crash(opts);
        self.hash_disk(Some(&crashed));
        crashed
    }

    /// Folds the disk (and `crashed`, the disk a crash left) into `disk_hash`, if asked for.
    fn hash_disk(&mut self, crashed: Option<&FaultDisk>) {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let Some(folded) = self.disk_hash else {
            return;
        };
        let mut h = DefaultHasher::new();
        folded.hash(&mut h);
        disk_digest(&self.disk).hash(&mut h);
        crashed.map(disk_digest).hash(&mut h);
        self.disk_hash = Some(h.finish());
    }

    fn check_recovered(&mut self, engine: Engine) -> Result<Result<Live, End>, Violation> {
        self.trace.line(|| {
            let r = engine.recovery();
            format!(
                "   recovered: {} records, {} segments, {} jobs, torn tail {:?}; disk {:?}",
                r.records,
                r.segments,
                r.jobs,
                r.torn_tail,
                self.disk.live_names()
            )
        });
        let wrong = self.model.opened(&engine)?;
        let mut live = Live {
            engine,
            backlog: Vec::new(),
            held: Vec::new(),
            failed_syncs_at_open: self.disk.stats().failed_syncs,
        };
        if !wrong.is_empty() {
            // No tail exemption: damage to the newest acknowledged group is repaired from its
            // mirror or refused as corruption, never cut silently.
            let (id, why) = &wrong[0];
            return violation!(
                "after recovery: job {id}: {why} ({} jobs wrong; corruption injected: {})",
                wrong.len(),
                self.corruption_pending
            );
        }
        self.corruption_pending = false;
        self.media_faults_pending = 0;
        self.open_failed_pending = false;
        self.trace.event(&[94, self.model.live_ids().len() as u64]);
        if self.model.fair.is_some() {
            // What the open fed, exactly (missed jobs in due order, within the limits).
            let drained: Vec<JobId> = live.engine.ready().try_iter().collect();
            self.model.drain(&drained)?;
            self.model.fed(&[], &live.engine)?;
            live.backlog.extend(drained);
        }
        Ok(Ok(live))
    }

    /// The end of a run: a clean crash and recovery, then the clock past every due time and
    /// lease: every live job fires, is claimed and completed (in rounds, with fairness on, as
    /// the limits and the channel's depth let them through; a recurring job's completion
    /// schedules its next occurrence, and a backfilled one fires again), then the recurring
    /// jobs are deleted, and nothing fires again.
    fn finish(&mut self, live: Live) -> Result<End, Violation> {
        const ROUNDS_MAX: usize = 100_000;
        let opts = CrashOptions::random(&mut self.rng);
        let crashed = self.crash_disk(&opts);
        live.engine.abandon();
        self.model.engine_gone(None);
        self.disk = crashed;
        let mut live = match self.recover(false)? {
            Ok(live) => live,
            Err(end) => return Ok(end),
        };
        let lease = self.setup.lease_ms;
        let now = self.model.due_max().max(self.model.max_clock_ms) + 1;
        self.clock.set(now);
        self.model.set_clock(now);
        let waiting: Vec<u64> = self
            .model
            .live_ids()
            .into_iter()
            .filter(|&id| self.model.live_due(id) != Some(timewheel::PAUSED_DUE_MS))
            .collect();
        let mut pending: Vec<JobId> = std::mem::take(&mut live.backlog);
        let mut claimed = std::collections::BTreeSet::new();
        let mut rounds = 0;
        let mut claims_total = 0;
        loop {
            live.engine.run_timers();
            let drained: Vec<JobId> = live.engine.ready().try_iter().collect();
            self.model.run_timers_on(&drained, Some(&live.engine))?;
            pending.extend(drained);
            let mut ids = std::mem::take(&mut pending);
            ids.sort_unstable();
            ids.dedup();
            if ids.is_empty() {
                break;
            }
            rounds += 1;
            if rounds > ROUNDS_MAX {
                return violation!("the final rounds do not end: {ids:?} keep coming");
            }
            let mut claims = Vec::new();
            for id in ids {
                let r = live
                    .engine
                    .claim(id)
                    .map_err(|e| Violation(format!("final claim: {e:?}")))?;
                self.model.claim(&[id], Ok(vec![r.clone()]), &live.engine)?;
                self.after_call(&mut live)?;
                if let Some(c) = r {
                    claimed.insert(id.0);
                    claims.push(c);
                }
            }
            pending.append(&mut live.backlog);
            claims_total += claims.len();
            let done = live
                .engine
                .complete_batch(&claims)
                .map_err(|e| Violation(format!("final complete: {e:?}")))?;
            if !done.iter().all(|d| *d) {
                return violation!("a final completion was refused");
            }
            self.model
                .finish(&claims, Gone::Completed, Ok(done), &live.engine)?;
            self.after_call(&mut live)?;
            pending.append(&mut live.backlog);
        }
        // Every job fired: a plain one was claimed (and completed) or buried at its claim; a
        // recurring one waits for an occurrence after now.
        for id in waiting {
            match self.model.live_due(id) {
                None => {}
                Some(due) if self.model.recurring(id) && due > now => {}
                Some(due) => {
                    return violation!(
                        "live job {id} (due {due}, claimed: {}) did not fire and end once the \
                         clock passed its due time",
                        claimed.contains(&id)
                    );
                }
            }
        }
        // (Not counted as the run's deletes.)
        let deletes = self.model.tally.deletes;
        for id in self.model.recurring_ids() {
            let r = live
                .engine
                .delete_schedule(JobId(id))
                .map_err(|e| Violation(format!("final delete: {e:?}")))?;
            self.model.delete(id, Ok(r), &live.engine)?;
            self.after_call(&mut live)?;
        }
        self.model.tally.deletes = deletes;
        if let Some(id) = self.model.live_ids().into_iter().next() {
            return violation!("job {id} is live after every job ended");
        }
        self.clock.set(now + 2 * lease + 1);
        self.model.set_clock(now + 2 * lease + 1);
        live.engine.run_timers();
        let again: Vec<JobId> = live.engine.ready().try_iter().collect();
        if !again.is_empty() {
            return violation!("completed jobs fired again: {again:?}");
        }
        self.model.run_timers_on(&again, Some(&live.engine))?;
        self.model.check_counts(&live.engine)?;
        self.model.check_dead(&live.engine)?;
        // Every dead job purged: then no key is held any more.
        let purged = live
            .engine
            .purge_dead_where(None)
            .map_err(|e| Violation(format!("final purge: {e:?}")))?;
        self.model.purged_all(Ok(purged), &live.engine)?;
        self.model.check_counts(&live.engine)?;
        self.model.check_keys(&live.engine)?;
        if !self.model.keys.is_empty() {
            return violation!("keys held after every job ended: {:?}", self.model.keys);
        }
        self.trace
            .event(&[99, claims_total as u64, purged, rounds as u64]);
        live.engine
            .close()
            .map_err(|e| Violation(format!("final close: {e:?}")))?;
        Ok(End::Completed)
    }
}

/// Each live file's name, length and checksums of its live and durable bytes: two traces of
/// one seed that differ show here whether the disk differed before a crash or only the open
/// after.
fn disk_digest(disk: &FaultDisk) -> String {
    let mut out = String::new();
    for name in disk.live_names() {
        let bytes = disk.live_file(&name).unwrap_or_default();
        let durable = disk.durable_file(&name).map(|b| crc32fast::hash(&b));
        out.push_str(&format!(
            "{name} {} live {:08x} durable {durable:08x?}; ",
            bytes.len(),
            crc32fast::hash(&bytes),
        ));
    }
    out
}
