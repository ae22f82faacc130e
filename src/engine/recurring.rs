//! Recurring jobs as schedules: list them, pause, resume and delete them. A recurring job is
//! one job (one id) that the completion of each occurrence moves on to the next (the `Next`
//! record); see `JobSpec::recurring`.

use std::sync::Arc;

use super::Engine;
use crate::error::Result;
use crate::job::{JobId, JobState, Outcome, PAUSED_DUE_MS, Recurring};

/// A recurring job, as [`Engine::schedules`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// The job.
    pub id: JobId,
    /// Its recurrence and misfire policy.
    pub recurring: Arc<Recurring>,
    /// When its current occurrence is due (`PAUSED_DUE_MS` while paused).
    pub due_ms: u64,
    /// Paused: it does not fire until resumed.
    pub paused: bool,
    /// Where its current occurrence is.
    pub state: JobState,
    /// Deliveries so far, over all occurrences.
    pub attempt: u32,
    /// Its tenant.
    pub tenant: u32,
}

impl Engine {
    /// The recurring jobs in memory, in id order, `limit` (1 to `Config::page_jobs_max`) after
    /// `after`. (A recurring job whose next occurrence is beyond the resident horizon, kept on
    /// disk only, is listed once a call or its bucket's load reads it back.)
    pub fn schedules(&self, after: Option<JobId>, limit: usize) -> Result<Vec<ScheduleInfo>> {
        let sh = &*self.shared;
        sh.check_page(limit)?;
        let state = sh.lock_state();
        let mut ids: Vec<JobId> = state
            .extra
            .iter()
            .filter(|(id, e)| e.recurring.is_some() && after.is_none_or(|a| **id > a))
            .map(|(&id, _)| id)
            .filter(|id| state.jobs.contains_key(id))
            .collect();
        ids.sort_unstable();
        ids.truncate(limit);
        Ok(ids
            .into_iter()
            .map(|id| {
                let job = &state.jobs[&id];
                let extra = &state.extra[&id];
                ScheduleInfo {
                    id,
                    recurring: extra.recurring.clone().expect("filtered"),
                    due_ms: job.due_ms,
                    paused: job.due_ms == PAUSED_DUE_MS,
                    state: job.state,
                    attempt: job.attempt,
                    tenant: extra.tenant,
                }
            })
            .collect())
    }

    /// Pauses a recurring job: its waiting occurrence does not fire until
    /// [`resume_schedule`](Engine::resume_schedule). `Running` while an occurrence is being
    /// delivered (pause it after), `NotFound` for a job that does not recur.
    pub fn pause_schedule(&self, id: JobId) -> Result<Outcome> {
        if self.recurring_of(id).is_none() {
            return Ok(Outcome::NotFound);
        }
        self.shared
            .change_batch(&[(id, PAUSED_DUE_MS)], |id, due_ms| {
                crate::record::Event::Reschedule { id, due_ms }
            })
            .map(|o| o[0])
    }

    /// Resumes a paused recurring job at its next occurrence after now (missed ones are not
    /// fired). Also moves a job that is not paused to its next occurrence after now.
    pub fn resume_schedule(&self, id: JobId) -> Result<Outcome> {
        let Some(r) = self.recurring_of(id) else {
            return Ok(Outcome::NotFound);
        };
        let now = self.shared.clock.now_ms();
        let Some(next) = r.recurrence.next_after(now) else {
            return Ok(Outcome::NotFound);
        };
        self.reschedule(id, next)
    }

    /// Deletes a recurring job (its schedule and waiting occurrence): a cancel.
    pub fn delete_schedule(&self, id: JobId) -> Result<Outcome> {
        if self.recurring_of(id).is_none() {
            return Ok(Outcome::NotFound);
        }
        self.cancel(id)
    }

    fn recurring_of(&self, id: JobId) -> Option<Arc<Recurring>> {
        let _ = self.get(id)?; // Read back from disk if kept there.
        let state = self.shared.lock_state();
        state.extra.get(&id)?.recurring.clone()
    }
}
