//! The dead-letter set: jobs whose last attempt failed for good. They stay, with their last
//! error, until purged; a requeue schedules one again with no failures counted. Both are
//! durable records (`Requeue`, `Purge`) applied by the one transition function.

use timewheel_wal::Lsn;

use super::worker::{LOCK_HOLD_ITEMS_MAX, Plan};
use super::{Engine, Shared};
use crate::error::Result;
use crate::job::{DeadJob, DeadPage, DeadQuery, JobId};
use crate::record::Event;

impl Engine {
    /// A job of the dead-letter set, with its last error; `None` for any other id.
    pub fn dead_letter(&self, id: JobId) -> Option<DeadJob> {
        self.shared.lock_state().dead_info(id)
    }

    /// One page of the dead-letter set, in id order (oldest jobs first), with the query for the
    /// next page.
    ///
    /// ```
    /// # fn main() -> timewheel::Result<()> {
    /// # let dir = std::env::temp_dir().join(format!("timewheel-doc-dlq-{}", std::process::id()));
    /// use std::time::Duration;
    /// use timewheel::{Config, DeadQuery, Engine, JobSpec};
    ///
    /// let engine = Engine::open(Config::new(&dir))?;
    /// let now = timewheel::Clock::now_ms(&timewheel::SystemClock);
    /// engine.schedule_batch((0..3).map(|i| JobSpec::at(now).tenant(i % 2)))?;
    /// for _ in 0..3 {
    ///     let job = engine.next(Duration::from_secs(5))?.expect("due now");
    ///     engine.fail_permanently(&job, "bad payload")?;
    /// }
    /// let page = engine.dead_letters(&DeadQuery::default().tenant(0))?;
    /// assert_eq!(page.jobs.len(), 2);
    /// // Try one again, and drop the rest.
    /// assert_eq!(engine.requeue_dead(&[page.jobs[0].id])?, [true]);
    /// assert_eq!(engine.purge_dead_where(None)?, 2);
    /// assert_eq!(engine.stats().dead, 0);
    /// # drop(engine);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok(())
    /// # }
    /// ```
    pub fn dead_letters(&self, query: &DeadQuery) -> Result<DeadPage> {
        let sh = &*self.shared;
        sh.check_page(query.limit)?;
        let state = sh.lock_state();
        let from = query
            .after
            .map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        let mut jobs: Vec<DeadJob> = state
            .dead
            .range((from, std::ops::Bound::Unbounded))
            .filter(|(_, d)| query.tenant.is_none_or(|t| t == d.extra.tenant))
            .take(query.limit + 1)
            .map(|(&id, _)| state.dead_info(id).expect("listed"))
            .collect();
        let more = jobs.len() > query.limit;
        jobs.truncate(query.limit);
        let next = more.then(|| DeadQuery {
            after: jobs.last().map(|j| j.id),
            ..*query
        });
        Ok(DeadPage { jobs, next })
    }

    /// Schedules dead jobs again, due now, with no failures counted (their attempt numbers go
    /// on: the next delivery is attempt + 1). Durable when it returns; for each id, whether it
    /// was in the dead-letter set.
    pub fn requeue_dead(&self, ids: &[JobId]) -> Result<Vec<bool>> {
        let sh = &*self.shared;
        let (done, lsn) =
            sh.dead_change_nowait(ids, |id, now_ms| Event::Requeue { id, due_ms: now_ms })?;
        if let Some(lsn) = lsn {
            sh.wait_acknowledged(lsn)?;
            let _state = sh.lock_state();
            sh.wake.notify_all();
        }
        Ok(done)
    }

    /// Forgets dead jobs, durably; for each id, whether it was in the dead-letter set.
    pub fn purge_dead(&self, ids: &[JobId]) -> Result<Vec<bool>> {
        let sh = &*self.shared;
        let (done, lsn) = sh.dead_change_nowait(ids, |id, _| Event::Purge { id })?;
        if let Some(lsn) = lsn {
            sh.wait_acknowledged(lsn)?;
        }
        Ok(done)
    }

    /// Forgets every dead job of `tenant` (`None`: of every tenant), durably; returns how many.
    pub fn purge_dead_where(&self, tenant: Option<u32>) -> Result<u64> {
        let mut purged = 0;
        let mut query = Some(DeadQuery {
            tenant,
            after: None,
            limit: self.shared.config.page_jobs_max,
        });
        while let Some(q) = query {
            let page = self.dead_letters(&q)?;
            let ids: Vec<JobId> = page.jobs.iter().map(|j| j.id).collect();
            purged += self.purge_dead(&ids)?.into_iter().filter(|&p| p).count() as u64;
            query = page.next;
        }
        Ok(purged)
    }
}

impl Shared {
    /// Requeues or purges dead jobs: check, append, apply, like the live changes.
    pub(crate) fn dead_change_nowait(
        &self,
        ids: &[JobId],
        event: impl Fn(JobId, u64) -> Event<'static>,
    ) -> Result<(Vec<bool>, Option<Lsn>)> {
        self.check_open()?;
        let mut seen =
            super::table::CallIdSet::with_capacity_and_hasher(ids.len(), Default::default());
        let mut done = Vec::with_capacity(ids.len());
        let mut last_lsn = None;
        for chunk in ids.chunks(LOCK_HOLD_ITEMS_MAX) {
            let mut plan = Plan::default();
            let mut marked = Vec::with_capacity(chunk.len());
            let mut state = self.settle(self.lock_state(), chunk.iter().copied());
            let now_ms = state.observe_time(self.clock.now_ms());
            for &id in chunk {
                let ok = state.dead.contains_key(&id) && seen.insert(id);
                if ok {
                    plan.push(&event(id, now_ms));
                    marked.push(id);
                }
                done.push(ok);
            }
            if !plan.is_empty() {
                last_lsn = Some(self.append_apply(state, &plan, &marked).0?);
            }
        }
        Ok((done, last_lsn))
    }
}
