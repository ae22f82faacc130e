//! The worker's side: take fired jobs (claim, with a lease), then complete or fail them.
//!
//! A claim is handed to the worker as soon as its record is appended, without waiting for a
//! sync: the time from due to the worker is the engine's, not the disk's. Its attempt number
//! (the fencing token) is still never handed out twice for one job, also across crashes: a
//! job is not claimed again while its newest record is not durable (so at most one of its
//! claims is ever unsynced), and after a run that crashed its next attempt skips the one a
//! cut claim may have used (the `Opened` records, [`crate::record`]). The worker's complete or
//! fail is durable when it returns, and with it the claim.

use std::time::{Duration, Instant};
use timewheel_wal::Lsn;

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::state::state_index;
use super::table::CallIdSet;
use super::{Engine, Shared};
use crate::error::{Error, Result};
use crate::job::{Claimed, JobId, JobState};
use crate::record::Event;

/// Items (claims, finishes, cancels) handled per hold of the state lock: a batch of thousands
/// is split, so that the timer thread waits for at most this many between two fires. On an
/// `Err` part-way, the chunks before it took effect (a claim then runs out its lease; a
/// complete or cancel tried again says `false` / `NotFound`).
pub(super) const LOCK_HOLD_ITEMS_MAX: usize = 256;

/// Records planned under the state lock, encoded end to end, to append in one batch.
#[derive(Default)]
pub(super) struct Plan {
    body: Vec<u8>,
    /// `(record type, end offset in body)`.
    ends: Vec<(u8, usize)>,
}

impl Plan {
    pub(super) fn push(&mut self, event: &Event<'_>) {
        event.encode(&mut self.body);
        self.ends.push((event.record_type(), self.body.len()));
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub(super) fn records(&self) -> impl Iterator<Item = (u8, &[u8])> {
        self.ends.iter().scan(0, |start, &(t, end)| {
            let r = (t, &self.body[*start..end]);
            *start = end;
            Some(r)
        })
    }
}

impl Engine {
    /// The ids of fired jobs, for workers that want the raw stream; most call
    /// [`Engine::next`] or [`Engine::claim_next`] instead, which take and claim in one step.
    /// Many workers may share the receiver; each id comes out once per firing (and again if
    /// nobody claims the job within `Config::lease_ms`). Claim each with [`Engine::claim`].
    /// The stream ends after [`Engine::drain`].
    pub fn ready(&self) -> Receiver<JobId> {
        self.shared.ready_rx.clone()
    }

    /// Waits up to `timeout` for a fired job and claims it: the worker's main call. `None`
    /// when nothing fired in time, or once a drain or shutdown ended the ready stream.
    pub fn next(&self, timeout: Duration) -> Result<Option<Claimed>> {
        Ok(self.claim_next(1, timeout)?.pop())
    }

    /// Waits up to `timeout` for fired jobs and claims up to `max` of them with one log
    /// append (fetch-and-lock). Empty when nothing fired in time or the stream ended.
    pub fn claim_next(&self, max: usize, timeout: Duration) -> Result<Vec<Claimed>> {
        let sh = &*self.shared;
        let deadline = Instant::now() + timeout;
        let mut ids = Vec::with_capacity(max.min(1024));
        loop {
            if sh.closed.load(std::sync::atomic::Ordering::Acquire) {
                return Ok(Vec::new()); // Shut down: the stream ended.
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match sh.ready_rx.recv_timeout(left) {
                Ok(id) => ids.push(id),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    return Ok(Vec::new());
                }
            }
            while ids.len() < max {
                match sh.ready_rx.try_recv() {
                    Ok(id) => ids.push(id),
                    Err(_) => break,
                }
            }
            let claimed: Vec<Claimed> = self.claim_batch(&ids)?.into_iter().flatten().collect();
            if !claimed.is_empty() {
                return Ok(claimed);
            }
            // Every id was stale (cancelled, rescheduled, claimed by another worker).
            ids.clear();
        }
    }

    /// Claims a fired job: re-reads its state and leases it to the caller for
    /// `Config::lease_ms`. `None` when the job was cancelled, rescheduled, claimed or finished
    /// after its id was queued. It returns without waiting for a sync (see the module docs:
    /// the attempt is unique all the same); the complete or fail that ends the attempt is
    /// durable when it returns, and with it the claim.
    pub fn claim(&self, id: JobId) -> Result<Option<Claimed>> {
        Ok(self.claim_batch(&[id])?.pop().flatten())
    }

    /// Claims many fired jobs with one log append; for each id, what [`Engine::claim`] would
    /// return.
    pub fn claim_batch(&self, ids: &[JobId]) -> Result<Vec<Option<Claimed>>> {
        let round = self.shared.claim_round(ids)?;
        self.shared.finish_round(round)
    }

    /// Completes a claimed job, durably. Returns `false` when the claim is no longer the
    /// job's newest (its lease ran out and another worker claimed it) or the job is gone.
    pub fn complete(&self, claimed: &Claimed) -> Result<bool> {
        Ok(self.complete_batch(std::slice::from_ref(claimed))?[0])
    }

    /// Completes many claimed jobs with one log append and one durability wait: how a busy
    /// worker keeps up with a burst. Returns, for each, what [`Engine::complete`] would.
    pub fn complete_batch(&self, claimed: &[Claimed]) -> Result<Vec<bool>> {
        self.shared.finish_batch(claimed, completion)
    }

    /// The first half of [`Engine::complete_batch`], for a pipeline that answers in order
    /// (the sidecar): appends the completes and returns what each did, with the LSN that must
    /// be acknowledged ([`Engine::wait_acknowledged`]) before any of them is reported done.
    #[cfg(feature = "sidecar")]
    pub(crate) fn complete_batch_nowait(
        &self,
        claimed: &[Claimed],
    ) -> Result<(Vec<bool>, Option<Lsn>)> {
        self.shared.finish_batch_nowait(claimed, completion)
    }

    /// Waits until `lsn` is acknowledged as the durability mode says: the second half of
    /// [`Engine::complete_batch_nowait`].
    #[cfg(feature = "sidecar")]
    pub(crate) fn wait_acknowledged(&self, lsn: Lsn) -> Result<()> {
        self.shared.wait_acknowledged(lsn)
    }

    /// Whether `lsn` is acknowledged already: [`Engine::wait_acknowledged`] would not wait.
    #[cfg(feature = "sidecar")]
    pub(crate) fn is_acknowledged(&self, lsn: Lsn) -> bool {
        self.shared.acknowledged_through(lsn)
    }

    /// Completes `done` and claims up to `max` fired jobs, sharing one sync between the two:
    /// a busy worker's loop, with one durability wait per round instead of two. The
    /// completions are durable when this returns, like [`Engine::complete_batch`]'s (whether
    /// each counted is not reported: a claim whose lease ran out completes nothing). If no
    /// job is waiting once the completions are appended, it waits for them to be durable,
    /// then waits up to `timeout` as [`Engine::claim_next`] does. An error of the claim is
    /// returned once the completions are durable (an error of their sync instead, if that
    /// fails). Fairness
    /// (`Config::fair_tenants`) sees the completions before the claim: a tenant at its running
    /// limit may run the next of its jobs in the same round.
    ///
    /// Its claims come back only once the completions are durable, so a worker looping on it
    /// sees jobs late by about a sync. For the lowest fire lateness, claim on the worker's
    /// thread ([`Engine::claim_next`], which does not wait for the disk) and complete on
    /// another (docs/benchmarks.md, `lateness`: p99 0.6 ms that way, 4.9 ms in rounds, in
    /// the same run).
    ///
    /// ```
    /// # fn main() -> timewheel::Result<()> {
    /// # let dir = std::env::temp_dir().join(format!("timewheel-doc-cacn-{}", std::process::id()));
    /// use std::time::Duration;
    /// use timewheel::{Config, Engine, JobSpec};
    ///
    /// let engine = Engine::open(Config::new(&dir))?;
    /// engine.schedule_batch((0..10).map(|_| JobSpec::after(Duration::ZERO)))?;
    /// let mut held = engine.claim_next(4, Duration::from_secs(5))?;
    /// let mut handled = 0;
    /// while handled < 10 {
    ///     handled += held.len(); // ... each job's work, then:
    ///     held = engine.complete_and_claim_next(&held, 4, Duration::from_millis(200))?;
    /// }
    /// assert_eq!(engine.stats().completed, 10);
    /// # drop(engine);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok(())
    /// # }
    /// ```
    pub fn complete_and_claim_next(
        &self,
        done: &[Claimed],
        max: usize,
        timeout: Duration,
    ) -> Result<Vec<Claimed>> {
        let sh = &*self.shared;
        let (_, completed) = sh.finish_batch_nowait(done, completion)?;
        let mut ids = Vec::with_capacity(max.min(1024));
        while ids.len() < max {
            match sh.ready_rx.try_recv() {
                Ok(id) => ids.push(id),
                Err(_) => break,
            }
        }
        if !ids.is_empty() {
            let round = sh.claim_round(&ids);
            // The completions are owed their durability, claims or not; the sync also takes
            // the claims appended after them along.
            if let Some(lsn) = completed {
                sh.wait_acknowledged(lsn)?;
            }
            let claimed: Vec<Claimed> = sh.finish_round(round?)?.into_iter().flatten().collect();
            if !claimed.is_empty() {
                return Ok(claimed);
            }
        } else if let Some(lsn) = completed {
            sh.wait_acknowledged(lsn)?;
        }
        self.claim_next(max, timeout)
    }

    /// Records that a claimed job's attempt failed, durably, with a reason (at most
    /// `Config::fail_reason_bytes_max` bytes). The failure is retryable: if the job's retry
    /// policy (its own, or `Config::retry`) allows another attempt, the job waits for its
    /// backoff and fires again; after its last allowed attempt it is dead, in the dead-letter
    /// set ([`Engine::dead_letters`]). The failure and the retry (or the burial) are one
    /// record. Returns `false` like [`Engine::complete`].
    ///
    /// ```
    /// # fn main() -> timewheel::Result<()> {
    /// # let dir = std::env::temp_dir().join(format!("timewheel-doc-fail-{}", std::process::id()));
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use timewheel::{Backoff, Config, Engine, JobSpec, ManualClock};
    ///
    /// let clock = Arc::new(ManualClock::new(1_000_000));
    /// let engine = Engine::open_with_clock(Config::new(&dir), clock.clone())?;
    /// let id = engine.schedule(
    ///     JobSpec::at(1_000_000)
    ///         .max_attempts(2)
    ///         .backoff(Backoff::new(100, 1_000)),
    /// )?;
    /// let job = engine.next(Duration::from_secs(5))?.expect("due now");
    /// assert!(engine.fail(&job, "upstream said 503")?);
    /// // Tried again within the backoff's first ceiling (100 ms, full jitter).
    /// let info = engine.get(id).expect("still live");
    /// assert!(info.due_ms <= 1_000_100);
    /// assert_eq!(info.failures, 1);
    /// clock.advance(100);
    /// let again = engine.next(Duration::from_secs(5))?.expect("retried");
    /// assert_eq!(again.attempt, 2);
    /// // The second failure was the last allowed: dead, and kept.
    /// assert!(engine.fail(&again, "still 503")?);
    /// assert!(engine.get(id).is_none());
    /// let dead = engine.dead_letter(id).expect("in the dead-letter set");
    /// assert_eq!((dead.failures, &*dead.reason), (2, "still 503"));
    /// # drop(engine);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok(())
    /// # }
    /// ```
    pub fn fail(&self, claimed: &Claimed, reason: &str) -> Result<bool> {
        self.end_attempts(&[(
            claimed,
            Ending::Failed {
                reason,
                retryable: true,
            },
        )])
        .map(|v| v[0])
    }

    /// Records that a claimed job failed in a way no retry can mend: it goes straight to the
    /// dead-letter set with `reason`, whatever attempts it had left. Returns `false` like
    /// [`Engine::complete`].
    pub fn fail_permanently(&self, claimed: &Claimed, reason: &str) -> Result<bool> {
        self.end_attempts(&[(
            claimed,
            Ending::Failed {
                reason,
                retryable: false,
            },
        )])
        .map(|v| v[0])
    }

    /// Ends a claimed job's attempt without a failure and has it fire again at `due_ms` (a
    /// worker that finds it is too early: "try again in ten minutes"). It does not count
    /// against `max_attempts`; the next delivery is attempt + 1. Returns `false` like
    /// [`Engine::complete`].
    pub fn retry_at(&self, claimed: &Claimed, due_ms: u64) -> Result<bool> {
        self.shared
            .validate_due(due_ms, self.shared.clock.now_ms())?;
        self.end_attempts(&[(claimed, Ending::RetryAt { due_ms })])
            .map(|v| v[0])
    }

    /// Extends the lease of a running job to `lease` from now, durably: a worker on a long
    /// job calls it before `lease_until_ms`, so that the job is not delivered again meanwhile.
    /// Returns the new `lease_until_ms`, or `None` when the claim is no longer the job's
    /// newest, or its lease ran out already (then the job may be delivered again: finish it if
    /// you can, `complete` still takes it until someone claims it).
    pub fn extend_lease(&self, claimed: &Claimed, lease: Duration) -> Result<Option<u64>> {
        let sh = &*self.shared;
        sh.check_open()?;
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        if lease_ms == 0 || lease_ms > sh.config.due_ahead_ms_max {
            return Err(Error::invalid(
                "lease",
                "from 1 ms to Config::due_ahead_ms_max",
            ));
        }
        let state = sh.settle(sh.lock_state(), std::iter::once(claimed.id));
        let running = state.jobs.get(&claimed.id).is_some_and(|j| {
            j.state == JobState::Running && j.lease_open && j.attempt == claimed.attempt
        });
        if !running {
            return Ok(None);
        }
        let until = state.now_ms.max(sh.clock.now_ms()).saturating_add(lease_ms);
        let mut plan = Plan::default();
        plan.push(&Event::Extend {
            id: claimed.id,
            attempt: claimed.attempt,
            lease_until_ms: until,
        });
        let (appended, _state) = sh.append_apply(state, &plan, &[claimed.id]);
        let lsn = appended?;
        sh.wait_acknowledged(lsn)?;
        Ok(Some(until))
    }

    fn end_attempts(&self, items: &[(&Claimed, Ending<'_>)]) -> Result<Vec<bool>> {
        let (done, lsn) = self.shared.end_attempts_nowait(items)?;
        if let Some(lsn) = lsn {
            self.shared.wait_acknowledged(lsn)?;
        }
        Ok(done)
    }
}

#[cfg(feature = "sidecar")]
impl Engine {
    /// Fails many claimed jobs, each retryable or not, with one durability wait (the
    /// sidecar's runs of `fail`).
    pub(crate) fn fail_each(&self, items: &[(Claimed, &str, bool)]) -> Result<Vec<bool>> {
        let items: Vec<(&Claimed, Ending<'_>)> = items
            .iter()
            .map(|(c, reason, retryable)| {
                (
                    c,
                    Ending::Failed {
                        reason,
                        retryable: *retryable,
                    },
                )
            })
            .collect();
        self.end_attempts(&items)
    }

    /// The engine's clock (the sidecar's `delay_ms`).
    pub(crate) fn clock_now_ms(&self) -> u64 {
        self.shared.clock.now_ms()
    }
}

/// The record that completes claim `c`: a `Complete`, or for a recurring job with a next
/// occurrence, the `Next` that schedules it (one record: the completion and the next
/// occurrence are durable together).
pub(crate) fn completion<'r>(c: &Claimed, state: &super::state::State, now_ms: u64) -> Event<'r> {
    match next_occurrence(state, c.id, now_ms) {
        Some(due_ms) => Event::Next {
            id: c.id,
            attempt: c.attempt,
            flags: 0,
            due_ms,
        },
        None => Event::Complete {
            id: c.id,
            attempt: c.attempt,
        },
    }
}

/// A recurring job's next due time after its current occurrence, under its misfire policy.
fn next_occurrence(state: &super::state::State, id: JobId, now_ms: u64) -> Option<u64> {
    let r = state.extra.get(&id)?.recurring.as_ref()?;
    r.next_due(state.jobs.get(&id)?.due_ms, now_ms)
}

/// How a worker ends an attempt other than by completing it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ending<'a> {
    /// It failed: retried if `retryable` and the policy allows, dead otherwise.
    Failed { reason: &'a str, retryable: bool },
    /// Fire again at `due_ms`, not counted as a failure.
    RetryAt { due_ms: u64 },
}

impl Engine {
    /// Records that many claimed jobs failed (retryable, as [`Engine::fail`]), with one log
    /// append and one durability wait; for each, what [`Engine::fail`] would return. A reason
    /// over the limit refuses the whole batch and writes nothing.
    pub fn fail_batch(&self, failed: &[(Claimed, String)]) -> Result<Vec<bool>> {
        let items: Vec<(&Claimed, Ending<'_>)> = failed
            .iter()
            .map(|(c, r)| {
                (
                    c,
                    Ending::Failed {
                        reason: r.as_str(),
                        retryable: true,
                    },
                )
            })
            .collect();
        self.end_attempts(&items)
    }
}

/// What one pass of claims did, and what must be waited for before its claims are handed out.
pub(crate) struct ClaimRound {
    /// For each id, its claim (`None`: not claimed, or deferred).
    pub claimed: Vec<Option<Claimed>>,
    /// An LSN that must be acknowledged before `claimed` is handed out: the round wrote more
    /// than plain claims of waiting jobs (an `Expire` and the claim after it, a burial, a
    /// skipped occurrence), which are durable before anyone sees them (`state::next_attempt`).
    pub sync: Option<Lsn>,
    /// Jobs whose newest record was not durable yet (their last claim, a pipelined
    /// reschedule): claimed in another round once `covers` is acknowledged, so that no job has
    /// two claims unsynced at once. By their place in `claimed`.
    pub deferred: Vec<(usize, JobId)>,
    pub covers: Lsn,
}

impl ClaimRound {
    /// The ids to claim again once `covers` is acknowledged.
    pub(crate) fn deferred_ids(&self) -> Vec<JobId> {
        self.deferred.iter().map(|&(_, id)| id).collect()
    }

    /// Takes in the round that claimed `deferred_ids()`: its claims in their places, and what
    /// it deferred again.
    pub(crate) fn merge(&mut self, again: ClaimRound) {
        for (&(at, _), c) in self.deferred.iter().zip(again.claimed) {
            self.claimed[at] = c;
        }
        let places: Vec<usize> = self.deferred.iter().map(|&(at, _)| at).collect();
        self.deferred = again
            .deferred
            .into_iter()
            .map(|(i, id)| (places[i], id))
            .collect();
        self.covers = again.covers;
        self.sync = again.sync.max(self.sync);
    }
}

impl Shared {
    /// Claims a round, waiting on the disk as the round says, and returns the claims.
    pub(crate) fn finish_round(&self, mut round: ClaimRound) -> Result<Vec<Option<Claimed>>> {
        while !round.deferred.is_empty() {
            self.wait_acknowledged(round.covers)?;
            let again = self.claim_round(&round.deferred_ids())?;
            round.merge(again);
        }
        if let Some(lsn) = round.sync {
            self.wait_acknowledged(lsn)?;
        }
        Ok(round.claimed)
    }

    /// One round of claims like [`Engine::claim_batch`], without waiting: see [`ClaimRound`]
    /// for what the caller must wait for before it hands the claims out.
    pub(crate) fn claim_round(&self, ids: &[JobId]) -> Result<ClaimRound> {
        let sh = self;
        sh.check_open()?;
        let mut seen = CallIdSet::with_capacity_and_hasher(ids.len(), Default::default());
        let mut claimed = Vec::with_capacity(ids.len());
        let mut last_lsn = None;
        // Jobs to claim after a sync, by their place in `ids`, and the LSN it must cover.
        let mut deferred: Vec<(usize, JobId)> = Vec::new();
        let mut covers = 0;
        // A claim of a job whose lease the log holds open (it ran out) is durable before it
        // is handed out: its number is then never skipped after a crash (`next_attempt`). So
        // is whatever else a claim writes (a burial, a recurring job's skipped occurrence):
        // only plain claims of waiting jobs are handed out unsynced.
        let mut must_sync = false;
        // A bounded number per hold of the state lock, so the timer thread gets it in between.
        for chunk in ids.chunks(LOCK_HOLD_ITEMS_MAX) {
            let mut plan = Plan::default();
            let mut ready_at = Vec::with_capacity(chunk.len());
            let mut marked = Vec::with_capacity(chunk.len());
            let mut state = sh.settle(sh.lock_state(), chunk.iter().copied());
            let now_ms = state.observe_time(sh.clock.now_ms());
            let lease_until_ms = now_ms.saturating_add(sh.config.lease_ms);
            // Ids looked at and not claimed (stale, or buried): fairness's channel slots free.
            let mut unclaimed = Vec::new();
            for &id in chunk {
                let job = match state.can_claim(id) {
                    Some(job) if seen.insert(id) => job,
                    _ => {
                        ready_at.push(None);
                        unclaimed.push(id);
                        continue;
                    }
                };
                if job.lsn > 0 && !sh.acknowledged_through(job.lsn) {
                    deferred.push((claimed.len() + ready_at.len(), id));
                    covers = covers.max(job.lsn);
                    ready_at.push(None);
                    continue;
                }
                let attempt = super::state::next_attempt(job, state.crashes)
                    .expect("fewer than 2^32 attempts of a job");
                // The lease ran out on the last attempt the job's policy allows: that failure
                // makes it dead instead of delivered again.
                if job.lease_open
                    && job.failures.saturating_add(1)
                        >= state.policy(id, sh.config.retry).max_attempts
                {
                    plan.push(&match next_occurrence(&state, id, now_ms) {
                        Some(next) => Event::Next {
                            id,
                            attempt: job.attempt,
                            flags: crate::record::NEXT_FAILED,
                            due_ms: next,
                        },
                        None => Event::Bury {
                            id,
                            attempt: job.attempt,
                            flags: crate::record::BURY_EXPIRED,
                            at_ms: now_ms,
                            reason: "the lease ran out on the last attempt allowed",
                        },
                    });
                    ready_at.push(None);
                    marked.push(id);
                    unclaimed.push(id);
                    must_sync = true;
                    continue;
                }
                // A recurring job's occurrence found too late, whose policy skips misfires.
                if !job.lease_open
                    && job.due_ms.saturating_add(sh.config.misfire_threshold_ms) < now_ms
                    && let Some(r) = state.extra.get(&id).and_then(|e| e.recurring.clone())
                    && r.misfire == crate::job::Misfire::Skip
                    && let Some(next) = r.next_due(job.due_ms, now_ms)
                {
                    plan.push(&Event::Next {
                        id,
                        attempt: job.attempt,
                        flags: crate::record::NEXT_SKIPPED,
                        due_ms: next,
                    });
                    ready_at.push(None);
                    marked.push(id);
                    unclaimed.push(id);
                    must_sync = true;
                    continue;
                }
                if job.lease_open {
                    plan.push(&Event::Expire {
                        id,
                        attempt: job.attempt,
                    });
                    must_sync = true;
                }
                plan.push(&Event::Claim {
                    id,
                    attempt,
                    lease_until_ms,
                });
                ready_at.push(Some(job.at_ms));
                marked.push(id);
            }
            if !plan.is_empty() {
                let (appended, relocked) = sh.append_apply(state, &plan, &marked);
                state = relocked;
                last_lsn = Some(appended?);
                // A skipped or failed occurrence's next one may be due before the lease.
                if lease_until_ms < state.sleeping_until_ms || !unclaimed.is_empty() {
                    sh.wake.notify_all();
                }
            }
            if state.fair.is_some() {
                for id in unclaimed {
                    state.taken(id, false);
                }
                // A deferred job still waits in its tenant's queue: fed now, its id would
                // stand in the channel beside the claim the next round makes of it. That
                // round feeds the channel instead.
                if deferred.is_empty() {
                    state.refill();
                }
            }
            claimed.extend(
                chunk
                    .iter()
                    .zip(&ready_at)
                    .map(|(&id, at)| at.map(|at| state.claimed(id, at))),
            );
        }
        Ok(ClaimRound {
            claimed,
            sync: last_lsn.filter(|_| must_sync),
            deferred,
            covers,
        })
    }

    /// A failure reason within `Config::fail_reason_bytes_max`.
    pub(super) fn check_reason(&self, reason: &str) -> Result<()> {
        let max = self.config.fail_reason_bytes_max;
        if reason.len() > max {
            return Err(Error::invalid(
                "reason",
                format!("{} bytes; at most {max}", reason.len()),
            ));
        }
        Ok(())
    }

    /// Ends attempts like [`Engine::fail`], [`Engine::fail_permanently`] and
    /// [`Engine::retry_at`], without waiting: also returns the LSN to acknowledge.
    pub(crate) fn end_attempts_nowait(
        &self,
        items: &[(&Claimed, Ending<'_>)],
    ) -> Result<(Vec<bool>, Option<Lsn>)> {
        for (_, ending) in items {
            if let Ending::Failed { reason, .. } = ending {
                self.check_reason(reason)?;
            }
        }
        let seed = self.config.retry_seed;
        let default = self.config.retry;
        let claimed: Vec<Claimed> = items.iter().map(|(c, _)| (*c).clone()).collect();
        let endings: std::collections::HashMap<(JobId, u32), Ending<'_>> =
            items.iter().map(|(c, e)| ((c.id, c.attempt), *e)).collect();
        self.finish_batch_nowait(&claimed, |c, state, now_ms| {
            match endings[&(c.id, c.attempt)] {
                Ending::RetryAt { due_ms } => Event::Retry {
                    id: c.id,
                    attempt: c.attempt,
                    flags: 0,
                    due_ms,
                    reason: "",
                },
                Ending::Failed { reason, retryable } => {
                    let failures = state.jobs[&c.id].failures.saturating_add(1);
                    let policy = state.policy(c.id, default);
                    let retry = retryable && failures < policy.max_attempts;
                    if !retry && let Some(next) = next_occurrence(state, c.id, now_ms) {
                        // A recurring job is never dead: on to its next occurrence.
                        return Event::Next {
                            id: c.id,
                            attempt: c.attempt,
                            flags: crate::record::NEXT_FAILED,
                            due_ms: next,
                        };
                    }
                    if retry {
                        let wait = policy.backoff.delay_ms(failures, c.id.0, seed);
                        Event::Retry {
                            id: c.id,
                            attempt: c.attempt,
                            flags: crate::record::RETRY_FAILED,
                            due_ms: now_ms.saturating_add(wait),
                            reason,
                        }
                    } else {
                        Event::Bury {
                            id: c.id,
                            attempt: c.attempt,
                            flags: 0,
                            at_ms: now_ms,
                            reason,
                        }
                    }
                }
            }
        })
    }

    fn finish_batch<'r>(
        &self,
        claimed: &[Claimed],
        event: impl Fn(&Claimed, &super::state::State, u64) -> Event<'r>,
    ) -> Result<Vec<bool>> {
        let (done, lsn) = self.finish_batch_nowait(claimed, event)?;
        if let Some(lsn) = lsn {
            self.wait_acknowledged(lsn)?;
        }
        Ok(done)
    }

    /// Finishes like `finish_batch`, without waiting: also returns the LSN to acknowledge.
    pub(crate) fn finish_batch_nowait<'r>(
        &self,
        claimed: &[Claimed],
        event: impl Fn(&Claimed, &super::state::State, u64) -> Event<'r>,
    ) -> Result<(Vec<bool>, Option<Lsn>)> {
        self.check_open()?;
        // A batch may name a job twice; only the first finish counts.
        let mut seen = CallIdSet::with_capacity_and_hasher(claimed.len(), Default::default());
        let mut done = Vec::with_capacity(claimed.len());
        let mut last_lsn = None;
        for chunk in claimed.chunks(LOCK_HOLD_ITEMS_MAX) {
            let mut plan = Plan::default();
            let mut marked = Vec::with_capacity(chunk.len());
            let state = self.settle(self.lock_state(), chunk.iter().map(|c| c.id));
            // The time of a retry or burial; a finish does not move the engine's time (only
            // the calls that arm timers do).
            let now_ms = state.now_ms.max(self.clock.now_ms());
            // The earliest retry planned: the timer thread may sleep past it.
            let mut earliest = u64::MAX;
            for c in chunk {
                let ok = state.can_finish(c.id, c.attempt) && seen.insert(c.id);
                if ok {
                    let e = event(c, &state, now_ms);
                    if let Event::Retry { due_ms, .. } | Event::Next { due_ms, .. } = e {
                        earliest = earliest.min(due_ms);
                    }
                    plan.push(&e);
                    marked.push(c.id);
                }
                done.push(ok);
            }
            if plan.is_empty() {
                continue;
            }
            let (appended, mut state) = self.append_apply(state, &plan, &marked);
            last_lsn = Some(appended?);
            if earliest < state.sleeping_until_ms {
                self.wake.notify_all();
            }
            // A tenant at its running limit may run another now.
            state.refill();
            if state.draining && state.in_state[state_index(JobState::Running)] == 0 {
                self.finished.notify_all();
            }
        }
        Ok((done, last_lsn))
    }
}
