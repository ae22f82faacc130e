//! The worker's side: take fired jobs (claim, with a lease), then complete or fail them.
//!
//! A claim is durable before the worker gets it, so its attempt number (the fencing token) is
//! never handed out twice for one job, also across crashes: after a crash the next claim gets
//! the durable attempt + 1. Claims made together share one sync (`claim_batch`,
//! `claim_next`).

use std::time::{Duration, Instant};
use timewheel_wal::Lsn;

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::state::state_index;
use super::table::IdSet;
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
    /// append and one sync (fetch-and-lock). Empty when nothing fired in time or the stream
    /// ended.
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
    /// after its id was queued. The claim is durable when this returns.
    pub fn claim(&self, id: JobId) -> Result<Option<Claimed>> {
        Ok(self.claim_batch(&[id])?.pop().flatten())
    }

    /// Claims many fired jobs with one log append and one sync; for each id, what
    /// [`Engine::claim`] would return.
    pub fn claim_batch(&self, ids: &[JobId]) -> Result<Vec<Option<Claimed>>> {
        let (claimed, lsn) = self.shared.claim_batch_nowait(ids)?;
        if let Some(lsn) = lsn {
            self.shared.wait_acknowledged(lsn)?;
        }
        Ok(claimed)
    }

    /// Completes a claimed job, durably. Returns `false` when the claim is no longer the
    /// job's newest (its lease ran out and another worker claimed it) or the job is gone.
    pub fn complete(&self, claimed: &Claimed) -> Result<bool> {
        Ok(self.complete_batch(std::slice::from_ref(claimed))?[0])
    }

    /// Completes many claimed jobs with one log append and one durability wait: how a busy
    /// worker keeps up with a burst. Returns, for each, what [`Engine::complete`] would.
    pub fn complete_batch(&self, claimed: &[Claimed]) -> Result<Vec<bool>> {
        self.shared.finish_batch(claimed, |c| Event::Complete {
            id: c.id,
            attempt: c.attempt,
        })
    }

    /// Records that a claimed job failed, durably, and finishes it. Returns `false` like
    /// [`Engine::complete`]. (Retries with backoff and dead letters come later.)
    pub fn fail(&self, claimed: &Claimed, reason: &str) -> Result<bool> {
        let sh = &*self.shared;
        sh.check_reason(reason)?;
        Ok(
            sh.finish_batch(std::slice::from_ref(claimed), |c| Event::Fail {
                id: c.id,
                attempt: c.attempt,
                reason,
            })?[0],
        )
    }
}

impl Engine {
    /// Records that many claimed jobs failed, with one log append and one durability wait;
    /// for each, what [`Engine::fail`] would return. A reason over the limit refuses the whole
    /// batch and writes nothing.
    pub fn fail_batch(&self, failed: &[(Claimed, String)]) -> Result<Vec<bool>> {
        let sh = &*self.shared;
        for (_, reason) in failed {
            sh.check_reason(reason)?;
        }
        let claimed: Vec<Claimed> = failed.iter().map(|(c, _)| c.clone()).collect();
        let reasons: std::collections::HashMap<(JobId, u32), &str> = failed
            .iter()
            .map(|(c, r)| ((c.id, c.attempt), r.as_str()))
            .collect();
        sh.finish_batch(&claimed, |c| Event::Fail {
            id: c.id,
            attempt: c.attempt,
            reason: reasons[&(c.id, c.attempt)],
        })
    }
}

impl Shared {
    /// Claims like [`Engine::claim_batch`], without waiting: also returns the LSN that must be
    /// acknowledged (durable) before the claims may be handed out.
    pub(crate) fn claim_batch_nowait(
        &self,
        ids: &[JobId],
    ) -> Result<(Vec<Option<Claimed>>, Option<Lsn>)> {
        let sh = self;
        sh.check_open()?;
        let mut seen = IdSet::with_capacity_and_hasher(ids.len(), Default::default());
        let mut claimed = Vec::with_capacity(ids.len());
        let mut last_lsn = None;
        // A bounded number per hold of the state lock, so the timer thread gets it in between.
        for chunk in ids.chunks(LOCK_HOLD_ITEMS_MAX) {
            let mut plan = Plan::default();
            let mut ready_at = Vec::with_capacity(chunk.len());
            let mut marked = Vec::with_capacity(chunk.len());
            let mut state = sh.settle(sh.lock_state(), chunk.iter().copied());
            let now_ms = state.observe_time(sh.clock.now_ms());
            let lease_until_ms = now_ms.saturating_add(sh.config.lease_ms);
            for &id in chunk {
                let job = match state.can_claim(id) {
                    Some(job) if seen.insert(id) => job,
                    _ => {
                        ready_at.push(None);
                        continue;
                    }
                };
                if job.lease_open {
                    plan.push(&Event::Expire {
                        id,
                        attempt: job.attempt,
                    });
                }
                plan.push(&Event::Claim {
                    id,
                    attempt: job.attempt + 1,
                    lease_until_ms,
                });
                ready_at.push(Some(job.at_ms));
                marked.push(id);
            }
            if !plan.is_empty() {
                let (appended, relocked) = sh.append_apply(state, &plan, &marked);
                state = relocked;
                last_lsn = Some(appended?);
                if lease_until_ms < state.sleeping_until_ms {
                    sh.wake.notify_all();
                }
            }
            claimed.extend(
                chunk
                    .iter()
                    .zip(&ready_at)
                    .map(|(&id, at)| at.map(|at| state.claimed(id, at))),
            );
        }
        Ok((claimed, last_lsn))
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

    fn finish_batch<'r>(
        &self,
        claimed: &[Claimed],
        event: impl Fn(&Claimed) -> Event<'r>,
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
        event: impl Fn(&Claimed) -> Event<'r>,
    ) -> Result<(Vec<bool>, Option<Lsn>)> {
        self.check_open()?;
        // A batch may name a job twice; only the first finish counts.
        let mut seen = IdSet::with_capacity_and_hasher(claimed.len(), Default::default());
        let mut done = Vec::with_capacity(claimed.len());
        let mut last_lsn = None;
        for chunk in claimed.chunks(LOCK_HOLD_ITEMS_MAX) {
            let mut plan = Plan::default();
            let mut marked = Vec::with_capacity(chunk.len());
            let state = self.settle(self.lock_state(), chunk.iter().map(|c| c.id));
            for c in chunk {
                let ok = state.can_finish(c.id, c.attempt) && seen.insert(c.id);
                if ok {
                    plan.push(&event(c));
                    marked.push(c.id);
                }
                done.push(ok);
            }
            if plan.is_empty() {
                continue;
            }
            let (appended, state) = self.append_apply(state, &plan, &marked);
            last_lsn = Some(appended?);
            if state.draining && state.in_state[state_index(JobState::Running)] == 0 {
                self.finished.notify_all();
            }
        }
        Ok((done, last_lsn))
    }
}
