//! The oracle: a plain model of what the engine acknowledged, checked against what it does.
//!
//! Each job is `Yes` (its schedule was acknowledged and nothing that ends it was attempted),
//! `No` (an end was acknowledged, or recovery showed it absent) or `Maybe` (an operation on it
//! failed with an I/O error or `Poisoned`: either outcome is allowed). Possible due times are
//! kept as a list: a failed reschedule adds its due time to it. Every successful recovery
//! resolves the unknowns to what it shows, because what recovery serves must be durable: from
//! then on the resolved state is checked like an acknowledged one.

use std::collections::{BTreeMap, BTreeSet};

use timewheel::{Claimed, Engine, JobId, JobState};

/// An oracle violation: what went wrong, for the failure report.
#[derive(Debug, Clone)]
pub struct Violation(pub String);

/// `Err(Violation)` from a format string.
#[macro_export]
macro_rules! violation {
    ($($arg:tt)*) => {
        Err($crate::sim::model::Violation(format!($($arg)*)))
    };
}

/// Why a job is gone for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    Cancelled,
    Completed,
    Failed,
    /// Never acknowledged, and recovery showed it absent (or its schedule wrote nothing).
    Absent,
}

/// Whether a job exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    Yes,
    No(Gone),
    Maybe,
}

/// What the oracle knows of one job.
#[derive(Debug, Clone)]
pub struct Job {
    pub presence: Presence,
    /// Every due time it may have; one when known.
    pub dues: Vec<u64>,
    /// `None` for a job learned from recovery (its schedule failed) until a claim shows it.
    pub payload: Option<(Vec<u8>, bool)>,
    /// A schedule call returned this id.
    pub returned: bool,
}

impl Job {
    fn due_max(&self) -> u64 {
        *self.dues.iter().max().expect("a job has a due time")
    }
}

/// The oracle.
#[derive(Debug, Default)]
pub struct Model {
    pub jobs: BTreeMap<u64, Job>,
    /// Ids in the order learned, for picking.
    pub ids: Vec<u64>,
    /// Jobs in failed, ambiguous schedule calls: how many unknown jobs may still turn up.
    pub phantom_budget: u64,
    /// Jobs in every failed schedule call (their ids were used up unseen).
    pub failed_specs: u64,
    pub max_returned_id: u64,
    /// The engine's `Config::id_block`: each open and each failed schedule call may skip up to
    /// this many ids (reserved, never handed out).
    pub id_block: u64,
    /// Opens so far, and failed schedule calls: each may have skipped a block of ids.
    pub id_skips: u64,
    /// The highest clock reading ever set: nothing may fire with a later due time.
    pub max_clock_ms: u64,
    /// The jobs of the latest durable changes, one entry per call (or per recovery that made
    /// unacknowledged records durable), newest last, at most `RECENT_UNITS_MAX`. Media
    /// corruption can lose these silently (see `run.rs`).
    pub recent_units: Vec<Vec<u64>>,
    /// The jobs the current call changed, acknowledged; becomes a unit when the call is done.
    pub unit: Vec<u64>,
}

/// How many recent durable changes the oracle remembers.
pub const RECENT_UNITS_MAX: usize = 32;

/// What a call returned, as the oracle sorts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An error that promises nothing was written (`InvalidInput`, `NoSpace`, `Closed`).
    Refused,
    /// `Io` or `Poisoned`: it may or may not have happened.
    Unknown,
}

impl Model {
    pub fn new(start_ms: u64) -> Model {
        Model {
            max_clock_ms: start_ms,
            ..Model::default()
        }
    }

    /// Ends the current call's unit of durable change.
    pub fn close_unit(&mut self) {
        if self.unit.is_empty() {
            return;
        }
        if self.recent_units.len() == RECENT_UNITS_MAX {
            self.recent_units.remove(0);
        }
        let unit = std::mem::take(&mut self.unit);
        self.recent_units.push(unit);
    }

    /// One past the highest id that could exist.
    pub fn id_end(&self) -> u64 {
        self.max_returned_id + self.failed_specs + 2 + self.id_block * (self.id_skips + 1)
    }

    fn learn(&mut self, id: u64, job: Job) {
        if self.jobs.insert(id, job).is_none() {
            self.ids.push(id);
        }
    }

    /// A schedule returned `ids` for `specs`.
    pub fn scheduled(
        &mut self,
        ids: &[JobId],
        specs: &[super::ops::Spec],
    ) -> Result<(), Violation> {
        if ids.len() != specs.len() {
            return violation!(
                "schedule of {} jobs returned {} ids",
                specs.len(),
                ids.len()
            );
        }
        for (id, spec) in ids.iter().zip(specs) {
            if let Some(old) = self.jobs.get(&id.0) {
                if old.returned {
                    return violation!("id {id} returned by schedule twice");
                }
                if old.presence == Presence::Yes {
                    return violation!("id {id} reused: recovery had shown a job with it");
                }
            }
            self.max_returned_id = self.max_returned_id.max(id.0);
            self.learn(
                id.0,
                Job {
                    presence: Presence::Yes,
                    dues: vec![spec.due_ms],
                    payload: Some((spec.payload.clone(), spec.binary)),
                    returned: true,
                },
            );
        }
        self.unit.extend(ids.iter().map(|id| id.0));
        Ok(())
    }

    /// A schedule of `n` jobs failed.
    pub fn schedule_failed(&mut self, n: u64, outcome: Outcome) {
        self.failed_specs += n;
        self.id_skips += 1;
        if outcome == Outcome::Unknown {
            self.phantom_budget += n;
        }
    }

    /// A cancel, complete or fail of `id` returned; `before` is the engine's view just before.
    pub fn ended(
        &mut self,
        id: u64,
        how: Gone,
        before: Option<JobState>,
        result: Result<bool, Outcome>,
    ) -> Result<(), Violation> {
        let job = self.jobs.get_mut(&id);
        match result {
            Ok(true) => {
                let Some(job) = job else {
                    return violation!("{how:?} of job {id} acknowledged, but no such job exists");
                };
                if let Presence::No(g) = job.presence {
                    return violation!("{how:?} of job {id} acknowledged after {g:?}");
                }
                if how == Gone::Cancelled
                    && !matches!(before, Some(JobState::Scheduled | JobState::Ready))
                {
                    return violation!("cancel of job {id} in state {before:?} succeeded");
                }
                job.presence = Presence::No(how);
                self.unit.push(id);
            }
            Ok(false) => {
                if how == Gone::Cancelled
                    && matches!(before, Some(JobState::Scheduled | JobState::Ready))
                {
                    return violation!("cancel of job {id} in state {before:?} returned false");
                }
            }
            Err(Outcome::Unknown) => {
                if let Some(job) = job
                    && job.presence == Presence::Yes
                {
                    job.presence = Presence::Maybe;
                }
            }
            Err(_) => {}
        }
        Ok(())
    }

    /// A reschedule of `id` to `due_ms` returned.
    pub fn rescheduled(
        &mut self,
        id: u64,
        due_ms: u64,
        before: Option<JobState>,
        result: Result<bool, Outcome>,
    ) -> Result<(), Violation> {
        let movable = matches!(before, Some(JobState::Scheduled | JobState::Ready));
        let job = self.jobs.get_mut(&id);
        match result {
            Ok(true) => {
                let Some(job) = job else {
                    return violation!("reschedule of unknown job {id} acknowledged");
                };
                if !movable {
                    return violation!("reschedule of job {id} in state {before:?} succeeded");
                }
                if let Presence::No(g) = job.presence {
                    return violation!("reschedule of job {id} acknowledged after {g:?}");
                }
                job.dues = vec![due_ms];
                self.unit.push(id);
            }
            Ok(false) if movable => {
                return violation!("reschedule of job {id} in state {before:?} returned false");
            }
            Ok(false) => {}
            Err(Outcome::Unknown) => {
                if let Some(job) = job
                    && !job.dues.contains(&due_ms)
                {
                    job.dues.push(due_ms);
                }
            }
            Err(_) => {}
        }
        Ok(())
    }

    /// A claim handed out `c`: the job fired. Checks that it may fire.
    pub fn claimed(&mut self, c: &Claimed) -> Result<(), Violation> {
        let id = c.id;
        // A first delivery entered the ready queue at or after its due time (a redelivery may
        // come after a reopen whose clock stepped back: its first delivery was the firing).
        if (c.attempt == 1 && c.due_ms > c.ready_at_ms) || c.ready_at_ms > self.max_clock_ms {
            return violation!(
                "job {id} due {} entered the ready queue at {} (clock never past {})",
                c.due_ms,
                c.ready_at_ms,
                self.max_clock_ms
            );
        }
        if c.due_ms > self.max_clock_ms {
            return violation!(
                "job {id} fired early: due {} but the clock never passed {}",
                c.due_ms,
                self.max_clock_ms
            );
        }
        let Some(job) = self.jobs.get_mut(&id.0) else {
            return violation!("job {id} fired, but no schedule could have made it");
        };
        if let Presence::No(g) = job.presence {
            return violation!("job {id} fired after {g:?}");
        }
        if !job.dues.contains(&c.due_ms) {
            return violation!("job {id} fired with due {} not in {:?}", c.due_ms, job.dues);
        }
        let got = (c.payload.to_vec(), c.binary);
        match &job.payload {
            Some(p) if *p != got => return violation!("job {id} fired with a different payload"),
            Some(_) => {}
            None => job.payload = Some(got),
        }
        Ok(())
    }

    /// After `run_timers`: every job certainly live and due by `now_ms` has fired.
    pub fn check_fired(&self, engine: &Engine, now_ms: u64) -> Result<(), Violation> {
        for (&id, job) in &self.jobs {
            if job.presence != Presence::Yes || job.due_max() > now_ms {
                continue;
            }
            match engine.get(JobId(id)) {
                None => return violation!("live job {id} is missing from the engine"),
                Some(info) if info.state == JobState::Scheduled => {
                    return violation!(
                        "job {id} due {} has not fired at {now_ms} after run_timers",
                        info.due_ms
                    );
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Right after a successful open: compares every job with what recovery rebuilt, then
    /// resolves the unknowns to it. Returns the ids of the acknowledged jobs found wrong, with
    /// why, and leaves the model untouched if there are any.
    pub fn recovered(&mut self, engine: &Engine) -> Result<Vec<(u64, String)>, Violation> {
        self.id_skips += 1;
        let mut wrong = Vec::new();
        let mut resolved = Vec::new();
        for (&id, job) in &self.jobs {
            let info = engine.get(JobId(id));
            match (job.presence, &info) {
                (Presence::Yes, None) => wrong.push((id, "acknowledged job lost".to_owned())),
                (Presence::No(g), Some(_)) => {
                    wrong.push((id, format!("job came back after {g:?}")));
                }
                (_, Some(info)) if !job.dues.contains(&info.due_ms) => wrong.push((
                    id,
                    format!("recovered with due {} not in {:?}", info.due_ms, job.dues),
                )),
                (Presence::Maybe, None) => resolved.push((id, None)),
                (_, Some(info)) => resolved.push((id, Some(info.due_ms))),
                (Presence::No(_), None) => {}
            }
        }
        if !wrong.is_empty() {
            return Ok(wrong);
        }
        for (id, due) in resolved {
            let job = self.jobs.get_mut(&id).expect("listed");
            // Recovery made these records durable: an end whose outcome was unknown, or a
            // reschedule that failed yet took effect. They are now the newest records.
            let end_written = job.presence == Presence::Maybe && due.is_none();
            let moved = due.is_some_and(|d| job.dues.len() > 1 && d != job.dues[0]);
            if end_written || moved {
                self.unit.push(id);
            }
            match due {
                Some(due) => {
                    job.presence = Presence::Yes;
                    job.dues = vec![due];
                }
                None => job.presence = Presence::No(Gone::Absent),
            }
        }
        // Jobs the model never heard of: only a failed schedule may have written them.
        for id in 1..self.id_end() {
            if self.jobs.contains_key(&id) {
                continue;
            }
            let Some(info) = engine.get(JobId(id)) else {
                continue;
            };
            if self.phantom_budget == 0 {
                return violation!(
                    "recovery shows job {id} that no schedule call could have written"
                );
            }
            self.phantom_budget -= 1;
            self.unit.push(id);
            self.learn(
                id,
                Job {
                    presence: Presence::Yes,
                    dues: vec![info.due_ms],
                    payload: None,
                    returned: false,
                },
            );
        }
        let live = self
            .jobs
            .values()
            .filter(|j| j.presence == Presence::Yes)
            .count() as u64;
        let s = engine.stats();
        let engine_live = s.scheduled + s.ready + s.running;
        if engine_live != live {
            return violation!("recovery rebuilt {engine_live} live jobs, the oracle knows {live}");
        }
        self.close_unit();
        Ok(Vec::new())
    }

    /// The latest due time of any job that may be live.
    pub fn due_max(&self) -> u64 {
        self.jobs
            .values()
            .filter(|j| j.presence != Presence::No(Gone::Absent))
            .map(Job::due_max)
            .max()
            .unwrap_or(0)
    }

    /// The ids of the jobs certainly live.
    pub fn live_ids(&self) -> BTreeSet<u64> {
        self.jobs
            .iter()
            .filter(|(_, j)| j.presence == Presence::Yes)
            .map(|(&id, _)| id)
            .collect()
    }
}
