//! The engine oracle, shared by the deterministic simulation (`tests/simulation.rs` with
//! `tests/sim/`) and the `engine_ops` fuzz target (`fuzz/fuzz_targets/engine_ops.rs`, which
//! includes this file by path). One model, so that a rule learned by one driver is checked by
//! both.
//!
//! It keeps two pictures of every job it has heard of:
//! - **the engine's memory** ([`Live`]): state, due time, attempt, whether the log holds its
//!   lease open, the deadline of its lease timer, when it entered the ready queue. It is exact:
//!   every call is predicted from it and the answer compared. When a call fails with an I/O
//!   error the model cannot know whether its append happened, so it looks at the engine
//!   (`get`) and accepts exactly the two pictures "applied" and "not applied";
//! - **what a recovery may show** ([`Job::may`], a small set of [`Alt`]ernatives). A call
//!   acknowledged after its sync makes everything appended before it durable: the set
//!   collapses to the one state the log ends in. An unsynced append (`schedule_batch_nowait`)
//!   or a call that failed with an I/O error (its records may be partly written and partly
//!   synced, a batch may straddle a roll) adds every state a prefix of its records leaves
//!   behind. A successful open must show one of them; the set is then resolved to what it
//!   showed, because what recovery serves is durable.
//!
//! Jobs of a failed schedule call were never named to the caller: their specs are kept as
//! *phantoms*, and an open may show an unknown id only as one of them. The engine's ready
//! channel is modelled too (a FIFO of ids, stale ones included), because which ids a lease
//! requeue sends depends on how full it is.
//!
//! Each driver uses part of this file.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt;

use timewheel::{Claimed, Engine, Error, JobId, JobInfo, JobSpec, JobState, Outcome};

/// An oracle violation: what went wrong, for the failure report.
#[derive(Debug, Clone)]
pub struct Violation(pub String);

macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(Violation(format!($($arg)*)))
    };
}

/// One job to schedule, with an absolute due time.
#[derive(Clone, PartialEq, Eq)]
pub struct Spec {
    pub due_ms: u64,
    pub payload: Vec<u8>,
    pub binary: bool,
}

impl Spec {
    pub fn job_spec(&self) -> JobSpec {
        JobSpec::at(self.due_ms)
            .payload(self.payload.clone())
            .binary(self.binary)
    }
}

impl fmt::Debug for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Traces show the payload's size only: its bytes are checked, not read.
        write!(f, "due {} payload {}b", self.due_ms, self.payload.len())?;
        if self.binary {
            f.write_str(" binary")?;
        }
        Ok(())
    }
}

/// What an error says about whether a call took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `Closed` or `Poisoned`: refused before the call looked at anything (with one thread,
    /// `Poisoned` is only returned by the check at the start of a call; the call whose own
    /// sync fails gets `Io`).
    NotOpen,
    /// `InvalidInput` or `NoSpace`: refused, nothing written (a `NoSpace` append fails before
    /// it writes).
    NothingWritten,
    /// `Io` and the rest: the records may be partly or wholly written, and synced or not.
    Unknown,
}

/// Sorts an engine error for the model.
pub fn fault(e: &Error) -> Fault {
    match e {
        Error::Closed | Error::Poisoned => Fault::NotOpen,
        Error::InvalidInput { .. } | Error::NoSpace { .. } => Fault::NothingWritten,
        _ => Fault::Unknown,
    }
}

/// Why a job is not in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    Cancelled,
    Completed,
    Failed,
    /// Its schedule never became durable (or recovery showed it absent).
    Absent,
}

/// A job as the log holds it: what replay rebuilds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logged {
    pub due_ms: u64,
    /// The newest claim's attempt (0: never claimed).
    pub attempt: u32,
    /// The newest record is that claim: no `Expire`, cancel, reschedule or finish after it.
    pub lease_open: bool,
}

/// One state a recovery may show for a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alt {
    Gone(Gone),
    Present(Logged),
}

/// A job in the engine's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    pub state: JobState,
    pub due_ms: u64,
    pub attempt: u32,
    /// Whether the log holds its lease open; `None` when an I/O error left that unknown and
    /// recovery could not tell (only `complete` or `fail` of that attempt reveal it).
    pub lease_open: Option<bool>,
    /// `Ready`: when its id is queued again if nobody claims it. `Running`: when the lease
    /// runs out.
    pub deadline_ms: u64,
    /// `Ready`: when it entered the ready queue (fired, lease ran out, or the open).
    pub ready_at_ms: u64,
}

/// What the oracle knows of one job.
#[derive(Debug, Clone)]
pub struct Job {
    /// Every state a recovery may show; one when the log's state is durable.
    pub may: Vec<Alt>,
    /// The state after every record appended for it, when known.
    log: Option<Alt>,
    /// The append that made `log` (to collapse `may` only for syncs that cover it).
    log_seq: u64,
    /// In `Model::dirty`.
    dirty: bool,
    pub payload: Vec<u8>,
    /// `None` for a job learned from recovery until a claim shows it.
    pub binary: Option<bool>,
    /// A schedule (or commit) acknowledged this id.
    pub returned: bool,
    /// In the engine's memory, if it is visible there.
    pub live: Option<Live>,
}

impl Job {
    fn ended(&self) -> bool {
        self.may
            .iter()
            .all(|a| matches!(a, Alt::Gone(g) if *g != Gone::Absent))
    }
}

/// The engine's counters the model follows exactly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counters {
    completed: u64,
    cancelled: u64,
    failed: u64,
    fired: u64,
    redelivered: u64,
    requeued: u64,
}

fn state_index(s: JobState) -> usize {
    match s {
        JobState::Scheduled => 0,
        JobState::Ready => 1,
        JobState::Running => 2,
    }
}

/// What the model predicts a finish answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Yes,
    No,
    /// The lease's state in the log is unknown: either answer, and it tells which.
    Either,
}

/// A change of one job a call appends.
#[derive(Debug, Clone, Copy)]
enum Change {
    Cancel,
    Reschedule(u64),
    Claim { lease_until_ms: u64 },
    Finish(Gone),
}

/// The oracle.
#[derive(Debug)]
pub struct Model {
    pub jobs: BTreeMap<u64, Job>,
    /// Ids in the order learned, for picking.
    pub ids: Vec<u64>,
    pub lease_ms: u64,
    /// The engine's `Config::id_block`: each open and each failed schedule call may skip up to
    /// this many ids (reserved, never handed out).
    pub id_block: u64,
    /// Opens so far, and failed schedule calls: each may have skipped a block of ids.
    pub id_skips: u64,
    /// Jobs in every failed schedule call (their ids were used up unseen).
    pub failed_specs: u64,
    pub max_returned_id: u64,
    /// Specs of failed, ambiguous schedule calls since the last open: what an unknown id may
    /// turn up as.
    phantoms: Vec<Spec>,
    /// The home-bucket bits ([`JobId::BUCKET_BITS`]) the phantoms' ids would carry.
    phantom_residues: std::collections::BTreeSet<u64>,
    /// The highest id durably used (acknowledged, or shown by an open): no id up to it is
    /// handed out again, since ids only grow and an open starts past every reservation.
    pub id_floor: u64,
    /// The highest id handed out since the open: ids grow.
    issued_max: u64,
    /// The clock's reading now.
    pub clock_ms: u64,
    /// The highest clock reading ever set: nothing may fire with a later due time.
    pub max_clock_ms: u64,
    /// The engine's time: the highest clock reading it observed since it opened.
    engine_now_ms: u64,
    /// The ready channel: ids sent and not yet drained, in order.
    queue: Vec<u64>,
    /// Jobs per state in the engine's memory.
    in_state: [u64; 3],
    counters: Counters,
    /// Jobs whose `may` may collapse at the next sync.
    dirty: Vec<u64>,
    append_seq: u64,
}

impl Model {
    pub fn new(start_ms: u64, lease_ms: u64, id_block: u64) -> Model {
        Model {
            jobs: BTreeMap::new(),
            ids: Vec::new(),
            lease_ms,
            id_block,
            id_skips: 0,
            failed_specs: 0,
            max_returned_id: 0,
            phantoms: Vec::new(),
            phantom_residues: Default::default(),
            id_floor: 0,
            issued_max: 0,
            clock_ms: start_ms,
            max_clock_ms: start_ms,
            engine_now_ms: start_ms,
            queue: Vec::new(),
            in_state: [0; 3],
            counters: Counters::default(),
            dirty: Vec::new(),
            append_seq: 0,
        }
    }

    /// The clock now reads `ms` (forwards or back).
    pub fn set_clock(&mut self, ms: u64) {
        self.clock_ms = ms;
        self.max_clock_ms = self.max_clock_ms.max(ms);
    }

    /// The engine reads the clock and holds the highest reading.
    fn observe(&mut self) -> u64 {
        self.engine_now_ms = self.engine_now_ms.max(self.clock_ms);
        self.engine_now_ms
    }

    pub fn engine_now_ms(&self) -> u64 {
        self.engine_now_ms
    }

    /// One past the highest id sequence number ([`JobId::BUCKET_BITS`] and up) that could
    /// exist.
    pub fn id_end(&self) -> u64 {
        (self.max_returned_id >> JobId::BUCKET_BITS)
            + self.failed_specs
            + 2
            + self.id_block * (self.id_skips + 1)
    }

    fn learn(&mut self, id: u64, job: Job) {
        let old = self.jobs.insert(id, job);
        match old {
            None => self.ids.push(id),
            Some(old) => assert!(old.live.is_none(), "a reissued id had no visible job"),
        }
        if let Some(l) = &self.jobs[&id].live {
            self.in_state[state_index(l.state)] += 1;
        }
    }

    /// Replaces a job's picture in memory, keeping the counts per state.
    fn set_live(&mut self, id: u64, new: Option<Live>) {
        let job = self.jobs.get_mut(&id).expect("a known job");
        if let Some(l) = &job.live {
            self.in_state[state_index(l.state)] -= 1;
        }
        if let Some(l) = &new {
            self.in_state[state_index(l.state)] += 1;
        }
        job.live = new;
    }

    fn live(&self, id: u64) -> Option<&Live> {
        self.jobs.get(&id).and_then(|j| j.live.as_ref())
    }

    /// Records appended for `id`, leaving the log in each of `alts` in turn. `complete`: the
    /// append happened in full (the engine applied it), else it may have happened in part.
    fn appended_records(&mut self, id: u64, alts: &[Alt], complete: bool) {
        self.append_seq += 1;
        let seq = self.append_seq;
        let job = self.jobs.get_mut(&id).expect("a known job");
        for a in alts {
            if !job.may.contains(a) {
                job.may.push(*a);
            }
        }
        job.log = if complete { alts.last().copied() } else { None };
        job.log_seq = seq;
        if !job.dirty {
            job.dirty = true;
            self.dirty.push(id);
        }
    }

    /// A call returned after a sync that covered every append so far.
    fn synced_all(&mut self) {
        self.synced_up_to(u64::MAX);
    }

    /// A sync covered every append up to `seq`: what those left in the log is durable.
    fn synced_up_to(&mut self, seq: u64) {
        let mut keep = Vec::new();
        for id in std::mem::take(&mut self.dirty) {
            let job = self.jobs.get_mut(&id).expect("a known job");
            if job.log_seq > seq {
                keep.push(id);
                continue;
            }
            job.dirty = false;
            // An append that failed part-way stays uncertain until an open shows its outcome.
            if let Some(alt) = job.log {
                job.may = vec![alt];
                if alt != Alt::Gone(Gone::Absent) {
                    self.id_floor = self.id_floor.max(id);
                }
            }
        }
        self.dirty = keep;
    }

    /// The records a change of a job in memory as `l` appends, and the states they leave.
    fn records(l: &Live, change: Change) -> Vec<Alt> {
        let mut alts = Vec::with_capacity(2);
        // A lease that ran out in memory (or whose state is unknown) is closed by an `Expire`
        // written first; a crash may keep it without the record after it.
        let expire = l.lease_open != Some(false) && !matches!(change, Change::Finish(_));
        if expire {
            alts.push(Alt::Present(Logged {
                due_ms: l.due_ms,
                attempt: l.attempt,
                lease_open: false,
            }));
        }
        alts.push(match change {
            Change::Cancel => Alt::Gone(Gone::Cancelled),
            Change::Finish(g) => Alt::Gone(g),
            Change::Reschedule(due_ms) => Alt::Present(Logged {
                due_ms,
                attempt: l.attempt,
                lease_open: false,
            }),
            Change::Claim { .. } => Alt::Present(Logged {
                due_ms: l.due_ms,
                attempt: l.attempt + 1,
                lease_open: true,
            }),
        });
        alts
    }

    /// Applies a change the engine made in memory (`applied`) or may have written
    /// (`!applied` after an I/O error).
    fn change(&mut self, id: u64, change: Change, applied: bool, fault: Option<Fault>) {
        let l = self.live(id).cloned().expect("a change of a visible job");
        let alts = Self::records(&l, change);
        if applied || fault == Some(Fault::Unknown) {
            self.appended_records(id, &alts, applied);
        }
        if !applied {
            return;
        }
        let next = match change {
            Change::Cancel => {
                self.counters.cancelled += 1;
                None
            }
            Change::Finish(g) => {
                match g {
                    Gone::Completed => self.counters.completed += 1,
                    Gone::Failed => self.counters.failed += 1,
                    _ => unreachable!("a finish completes or fails"),
                }
                None
            }
            Change::Reschedule(due_ms) => Some(Live {
                state: JobState::Scheduled,
                due_ms,
                lease_open: Some(false),
                ..l
            }),
            Change::Claim { lease_until_ms } => Some(Live {
                state: JobState::Running,
                attempt: l.attempt + 1,
                lease_open: Some(true),
                deadline_ms: lease_until_ms,
                ..l
            }),
        };
        self.set_live(id, next);
    }

    // ---- schedule -------------------------------------------------------------------------

    /// Checks ids a schedule returned for `n` specs: new, growing, never durably used.
    fn check_new_ids(&mut self, ids: &[JobId], n: usize) -> Result<(), Violation> {
        if ids.len() != n {
            bail!("schedule of {n} jobs returned {} ids", ids.len());
        }
        for id in ids {
            let id = id.0;
            if let Some(old) = self.jobs.get(&id) {
                if old.returned {
                    bail!("id {id} returned by schedule twice");
                }
                if old.may != [Alt::Gone(Gone::Absent)] {
                    bail!("id {id} reused: a job with it may exist ({:?})", old.may);
                }
            }
            if id <= self.id_floor {
                bail!(
                    "id {id} handed out again: {} was durably used, and ids only grow",
                    self.id_floor
                );
            }
            if id <= self.issued_max {
                bail!(
                    "id {id} is not newer than {} handed out before",
                    self.issued_max
                );
            }
            self.issued_max = id;
        }
        Ok(())
    }

    fn new_job(spec: &Spec, may: Vec<Alt>, returned: bool, live: Option<Live>) -> Job {
        Job {
            log: may.last().copied(),
            may,
            log_seq: 0,
            dirty: false,
            payload: spec.payload.clone(),
            binary: Some(spec.binary),
            returned,
            live,
        }
    }

    fn scheduled_live(due_ms: u64) -> Live {
        Live {
            state: JobState::Scheduled,
            due_ms,
            attempt: 0,
            lease_open: Some(false),
            deadline_ms: 0,
            ready_at_ms: 0,
        }
    }

    fn fresh(due_ms: u64) -> Alt {
        Alt::Present(Logged {
            due_ms,
            attempt: 0,
            lease_open: false,
        })
    }

    /// `schedule` or `schedule_batch` of `specs` returned `r`.
    pub fn scheduled(
        &mut self,
        specs: &[Spec],
        r: Result<Vec<JobId>, Fault>,
    ) -> Result<(), Violation> {
        match r {
            Ok(ids) => {
                self.check_new_ids(&ids, specs.len())?;
                if !ids.is_empty() {
                    self.observe(); // the commit reads the clock
                }
                for (id, spec) in ids.iter().zip(specs) {
                    self.max_returned_id = self.max_returned_id.max(id.0);
                    let live = Self::scheduled_live(spec.due_ms);
                    let job = Self::new_job(spec, vec![Self::fresh(spec.due_ms)], true, Some(live));
                    self.learn(id.0, job);
                    self.id_floor = self.id_floor.max(id.0);
                }
                self.synced_all();
            }
            Err(f) => {
                self.failed_specs += specs.len() as u64;
                self.id_skips += 1;
                if f == Fault::Unknown {
                    // The engine names a job's home bucket in its id: the hour it is due, or
                    // the hour of the clock reading the call took if it was due already.
                    for spec in specs {
                        let hour = spec.due_ms.max(self.clock_ms) / 3_600_000;
                        self.phantom_residues
                            .insert(hour % (1 << JobId::BUCKET_BITS));
                    }
                    self.phantoms.extend(specs.iter().cloned());
                }
            }
        }
        Ok(())
    }

    /// `schedule_batch_nowait` of `specs` returned `ids`: appended, not durable, not visible.
    pub fn appended(
        &mut self,
        specs: &[Spec],
        ids: &[JobId],
        engine: &Engine,
    ) -> Result<(), Violation> {
        self.check_new_ids(ids, specs.len())?;
        for (id, spec) in ids.iter().zip(specs) {
            if engine.get(*id).is_some() {
                bail!("job {id} visible before its commit");
            }
            let fresh = Self::fresh(spec.due_ms);
            let job = Self::new_job(spec, vec![Alt::Gone(Gone::Absent)], false, None);
            self.learn(id.0, job);
            self.appended_records(id.0, &[fresh], true);
        }
        Ok(())
    }

    /// A token for the appends so far: a commit syncs up to its batch.
    pub fn append_mark(&self) -> u64 {
        self.append_seq
    }

    /// `commit` of the batch appended as `ids` (with `mark` taken right after) returned `r`.
    pub fn committed(&mut self, ids: &[JobId], mark: u64, r: Result<(), Fault>) {
        if r.is_err() || ids.is_empty() {
            return; // nothing made visible; what is durable shows at the next open
        }
        self.synced_up_to(mark);
        self.observe();
        for id in ids {
            let Some(job) = self.jobs.get_mut(&id.0) else {
                continue;
            };
            job.returned = true;
            let due = match job.log {
                Some(Alt::Present(l)) => l.due_ms,
                other => panic!("committed job {id} logged as {other:?}"),
            };
            self.max_returned_id = self.max_returned_id.max(id.0);
            self.set_live(id.0, Some(Self::scheduled_live(due)));
        }
    }

    /// `sync` returned `r`.
    pub fn synced(&mut self, r: Result<(), Fault>) {
        if r.is_ok() {
            self.synced_all();
        }
    }

    // ---- cancel and reschedule ------------------------------------------------------------

    /// What `cancel` or `reschedule` of `id` answers.
    pub fn change_outcome(&self, id: u64) -> Outcome {
        match self.live(id) {
            Some(l) if l.state == JobState::Running => Outcome::Running,
            Some(_) => Outcome::Done,
            None => Outcome::NotFound,
        }
    }

    /// A change (cancel or reschedule) of `id` returned `r`; `applied` tells from the engine's
    /// memory whether a failed one took effect there.
    fn changed(
        &mut self,
        what: &str,
        id: u64,
        change: Change,
        r: Result<Outcome, Fault>,
        applied: impl FnOnce() -> bool,
    ) -> Result<(), Violation> {
        let expect = self.change_outcome(id);
        match r {
            Ok(got) => {
                if got != expect {
                    bail!(
                        "{what} of job {id} answered {got:?}; the model says {expect:?} ({:?})",
                        self.jobs.get(&id).map(|j| (&j.may, &j.live))
                    );
                }
                if got.is_done() {
                    self.change(id, change, true, None);
                    self.synced_all();
                }
            }
            Err(Fault::NotOpen) => {}
            Err(f) => {
                if expect != Outcome::Done {
                    if f == Fault::Unknown {
                        bail!("{what} of job {id} ({expect:?}) writes nothing, yet failed: {f:?}");
                    }
                    return Ok(());
                }
                let applied = applied();
                self.change(id, change, applied, Some(f));
            }
        }
        Ok(())
    }

    /// `cancel(id)` returned `r`.
    pub fn cancel(
        &mut self,
        id: u64,
        r: Result<Outcome, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        self.changed("cancel", id, Change::Cancel, r, || {
            engine.get(JobId(id)).is_none()
        })
    }

    /// `reschedule(id, due_ms)` returned `r`.
    pub fn reschedule(
        &mut self,
        id: u64,
        due_ms: u64,
        r: Result<Outcome, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        self.changed("reschedule", id, Change::Reschedule(due_ms), r, || {
            engine
                .get(JobId(id))
                .is_some_and(|i| i.state == JobState::Scheduled && i.due_ms == due_ms)
        })
    }

    // ---- claims and finishes --------------------------------------------------------------

    /// Ids of the jobs ready in memory, in id order.
    pub fn ready_ids(&self) -> Vec<JobId> {
        self.jobs
            .iter()
            .filter(|(_, j)| j.live.as_ref().is_some_and(|l| l.state == JobState::Ready))
            .map(|(&id, _)| JobId(id))
            .collect()
    }

    /// `claim_batch(ids)` (or `claim` of one) returned `r`.
    pub fn claim(
        &mut self,
        ids: &[JobId],
        r: Result<Vec<Option<Claimed>>, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        if matches!(r, Err(Fault::NotOpen)) {
            return Ok(()); // refused before it read the clock
        }
        if ids.is_empty() {
            return match r {
                Ok(v) if v.is_empty() => Ok(()),
                other => bail!("claim of no ids returned {other:?}"),
            };
        }
        // The claim reads the clock, found job or not: the engine holds that time from now on.
        let now = self.observe();
        let lease_until_ms = now.saturating_add(self.lease_ms);
        // A job named twice is claimed the first time only (checked against the state before).
        let mut seen = std::collections::BTreeSet::new();
        let expect: Vec<bool> = ids
            .iter()
            .map(|id| {
                self.live(id.0).is_some_and(|l| l.state == JobState::Ready) && seen.insert(id.0)
            })
            .collect();
        let change = Change::Claim { lease_until_ms };
        match r {
            Ok(got) => {
                if got.len() != ids.len() {
                    bail!("claim of {} ids returned {} answers", ids.len(), got.len());
                }
                let mut any = false;
                for ((id, c), want) in ids.iter().zip(&got).zip(&expect) {
                    match (c, want) {
                        (None, false) => {}
                        (Some(c), true) => {
                            self.check_claimed(id.0, c, lease_until_ms)?;
                            self.change(id.0, change, true, None);
                            any = true;
                        }
                        (c, _) => bail!(
                            "claim of job {id} returned {:?}; the model has {:?}",
                            c.as_ref().map(|c| c.attempt),
                            self.jobs.get(&id.0).map(|j| (&j.may, &j.live))
                        ),
                    }
                }
                if any {
                    self.synced_all();
                }
            }
            Err(f) => {
                for (id, want) in ids.iter().zip(&expect) {
                    if !want {
                        continue;
                    }
                    let attempt = self.live(id.0).expect("ready").attempt;
                    let applied = engine
                        .get(*id)
                        .is_some_and(|i| i.state == JobState::Running && i.attempt == attempt + 1);
                    self.change(id.0, change, applied, Some(f));
                }
            }
        }
        Ok(())
    }

    /// Checks what a claim handed out against the job in memory.
    fn check_claimed(
        &mut self,
        id: u64,
        c: &Claimed,
        lease_until_ms: u64,
    ) -> Result<(), Violation> {
        let max_clock = self.max_clock_ms;
        // Never early, whatever the model's picture: the first delivery entered the ready
        // queue at or after its due time, and no later than the clock ever read (a redelivery
        // may come after a reopen whose clock stepped back: its first delivery was the firing).
        if (c.attempt == 1 && c.due_ms > c.ready_at_ms) || c.ready_at_ms > max_clock {
            bail!(
                "job {id} due {} entered the ready queue at {} (clock never past {max_clock})",
                c.due_ms,
                c.ready_at_ms
            );
        }
        if c.due_ms > max_clock {
            bail!(
                "job {id} fired early: due {} but the clock never passed {max_clock}",
                c.due_ms
            );
        }
        let job = self.jobs.get_mut(&id).expect("claimable");
        let l = job.live.as_ref().expect("claimable");
        let want = (id, l.attempt + 1, l.due_ms, l.ready_at_ms, lease_until_ms);
        let got = (c.id.0, c.attempt, c.due_ms, c.ready_at_ms, c.lease_until_ms);
        if got != want {
            bail!(
                "claim of job {id}: (id, attempt, due, ready at, lease until) {got:?}, the model \
                 says {want:?}"
            );
        }
        if c.payload[..] != job.payload[..] {
            bail!("job {id} fired with a different payload");
        }
        match job.binary {
            Some(b) if b != c.binary => bail!("job {id} fired with another binary flag"),
            Some(_) => {}
            None => job.binary = Some(c.binary),
        }
        Ok(())
    }

    /// Whether a finish of `c` applies: the claim is the job's newest and the log holds it.
    fn can_finish(&self, c: &Claimed) -> Answer {
        let Some(l) = self.live(c.id.0) else {
            return Answer::No;
        };
        if l.attempt != c.attempt || l.state == JobState::Scheduled {
            return Answer::No;
        }
        match l.lease_open {
            Some(true) => Answer::Yes,
            Some(false) => Answer::No,
            None => Answer::Either,
        }
    }

    /// `complete_batch` (`how` = `Completed`), `complete` or `fail` (`Failed`) of `claims`
    /// returned `r`.
    pub fn finish(
        &mut self,
        claims: &[Claimed],
        how: Gone,
        r: Result<Vec<bool>, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        if matches!(r, Err(Fault::NotOpen)) {
            return Ok(());
        }
        // Checked against the state before the call; a job named twice finishes once.
        let mut seen = std::collections::BTreeSet::new();
        let expect: Vec<Answer> = claims
            .iter()
            .map(|c| match self.can_finish(c) {
                Answer::No => Answer::No,
                _ if seen.contains(&c.id.0) => Answer::No,
                a => {
                    seen.insert(c.id.0);
                    a
                }
            })
            .collect();
        match r {
            Ok(got) => {
                if got.len() != claims.len() {
                    bail!(
                        "finish of {} claims returned {} answers",
                        claims.len(),
                        got.len()
                    );
                }
                let mut any = false;
                for ((c, &ok), want) in claims.iter().zip(&got).zip(&expect) {
                    match (ok, want) {
                        (false, Answer::No) => {}
                        (false, Answer::Either) => {
                            let job = self.jobs.get_mut(&c.id.0).expect("visible");
                            job.live.as_mut().expect("visible").lease_open = Some(false);
                        }
                        (true, Answer::Yes | Answer::Either) => {
                            self.change(c.id.0, Change::Finish(how), true, None);
                            any = true;
                        }
                        (ok, want) => bail!(
                            "{how:?} of job {} attempt {} answered {ok}; the model says {want:?} \
                             ({:?})",
                            c.id,
                            c.attempt,
                            self.jobs.get(&c.id.0).map(|j| (&j.may, &j.live))
                        ),
                    }
                }
                if any {
                    self.synced_all();
                }
            }
            Err(f) => {
                for (c, want) in claims.iter().zip(&expect) {
                    if *want == Answer::No {
                        continue;
                    }
                    let applied = engine.get(c.id).is_none();
                    self.change(c.id.0, Change::Finish(how), applied, Some(f));
                }
            }
        }
        Ok(())
    }

    // ---- timers ---------------------------------------------------------------------------

    /// `run_timers` ran, then every id was drained from the ready channel: `drained`.
    ///
    /// The engine fires every scheduled job due by its time, makes every running job whose
    /// lease ran out ready again, and queues again every ready job nobody claimed by its
    /// deadline, if the channel holds fewer ids than there are ready jobs (a requeue that would
    /// not fit is skipped, so a slow backlog does not double). Fires and expiries add one id
    /// and one ready job each, so the requeues sent are the first `ready - queued` of them,
    /// counted before the run.
    pub fn run_timers(&mut self, drained: &[JobId]) -> Result<(), Violation> {
        let now = self.observe();
        let lease = self.lease_ms;
        let room =
            self.in_state[state_index(JobState::Ready)].saturating_sub(self.queue.len() as u64);
        let mut sent = Vec::new();
        let mut requeues = Vec::new();
        for (&id, job) in self.jobs.iter_mut() {
            let Some(l) = job.live.as_mut() else {
                continue;
            };
            match l.state {
                JobState::Scheduled if l.due_ms <= now => {
                    self.in_state[state_index(JobState::Scheduled)] -= 1;
                    self.in_state[state_index(JobState::Ready)] += 1;
                    l.state = JobState::Ready;
                    l.ready_at_ms = now;
                    l.deadline_ms = now + lease;
                    self.counters.fired += 1;
                    sent.push(id);
                }
                JobState::Running if l.deadline_ms <= now => {
                    self.in_state[state_index(JobState::Running)] -= 1;
                    self.in_state[state_index(JobState::Ready)] += 1;
                    l.state = JobState::Ready;
                    l.ready_at_ms = now;
                    l.deadline_ms = now + lease;
                    self.counters.redelivered += 1;
                    sent.push(id);
                }
                JobState::Ready if l.deadline_ms <= now => {
                    l.deadline_ms = now + lease;
                    self.counters.requeued += 1;
                    requeues.push(id);
                }
                _ => {}
            }
        }
        let sends = requeues.len().min(room as usize);
        // The channel is FIFO: what it held comes out first, in order.
        let queued = std::mem::take(&mut self.queue);
        let drained: Vec<u64> = drained.iter().map(|id| id.0).collect();
        if drained.len() < queued.len() || drained[..queued.len()] != queued[..] {
            bail!(
                "the ready channel gave {:?} first; it held {queued:?}",
                &drained[..queued.len().min(drained.len())]
            );
        }
        let mut got = drained[queued.len()..].to_vec();
        got.sort_unstable();
        let mut want = sent;
        if sends == requeues.len() {
            want.extend(&requeues);
            want.sort_unstable();
            if got != want {
                bail!("at {now} run_timers queued {got:?}; the model says {want:?}");
            }
        } else {
            // Which requeues fit depends on the lease wheel's order: any `sends` of them.
            want.sort_unstable();
            let mut rest = Vec::new();
            let mut w = want.iter().peekable();
            for id in &got {
                if w.peek() == Some(&id) {
                    w.next();
                } else {
                    rest.push(*id);
                }
            }
            let fits = rest.len() == sends
                && rest.windows(2).all(|p| p[0] < p[1])
                && rest.iter().all(|id| requeues.contains(id));
            if w.next().is_some() || !fits {
                bail!(
                    "at {now} run_timers queued {got:?}; the model says {want:?} and {sends} of \
                     {requeues:?}"
                );
            }
        }
        // Never early, checked as a job fires, against the highest clock reading so far.
        for id in &drained {
            if let Some(l) = self.live(*id)
                && l.state == JobState::Ready
                && l.due_ms > self.max_clock_ms
            {
                bail!(
                    "job {id} fired early: due {} at clock {}",
                    l.due_ms,
                    self.max_clock_ms
                );
            }
        }
        Ok(())
    }

    /// Every id was drained from the ready channel (without a `run_timers`): `drained`.
    pub fn drain(&mut self, drained: &[JobId]) -> Result<(), Violation> {
        let queued = std::mem::take(&mut self.queue);
        if drained.len() != queued.len() || drained.iter().zip(&queued).any(|(a, b)| a.0 != *b) {
            bail!("the ready channel held {drained:?}; the model says {queued:?}");
        }
        Ok(())
    }

    // ---- close, crash, open ---------------------------------------------------------------

    /// The engine went away: `close` returned `r` (`Some`), or it was dropped or abandoned, or
    /// the disk crashed (`None`).
    pub fn engine_gone(&mut self, close: Option<Result<(), Fault>>) {
        if let Some(Ok(())) = close {
            self.synced_all(); // a clean close syncs everything
        }
        for job in self.jobs.values_mut() {
            job.live = None;
        }
        self.in_state = [0; 3];
        self.queue.clear();
    }

    /// Right after a successful open (the clock read `clock_ms` throughout): compares every job
    /// with what recovery rebuilt, then resolves every uncertainty to it and takes the
    /// engine's memory as the open leaves it (missed and interrupted jobs ready and queued in
    /// due order, the rest scheduled). Returns the jobs found wrong, with why, and leaves the
    /// model untouched if there are any.
    pub fn opened(&mut self, engine: &Engine) -> Result<Vec<(u64, String)>, Violation> {
        self.id_skips += 1;
        let now = self.clock_ms;
        let mut wrong = Vec::new();
        let mut resolved: Vec<(u64, Vec<Alt>)> = Vec::with_capacity(self.jobs.len());
        for (&id, job) in &self.jobs {
            let info = engine.get(JobId(id));
            let fits: Vec<Alt> = job
                .may
                .iter()
                .copied()
                .filter(|a| shows(a, info.as_ref(), now))
                .collect();
            if fits.is_empty() {
                wrong.push((id, why_wrong(job, info.as_ref())));
            } else if let Some(info) = &info
                && info.payload[..] != job.payload[..]
            {
                wrong.push((id, "recovered with another payload".to_owned()));
            } else {
                resolved.push((id, fits));
            }
        }
        if !wrong.is_empty() {
            return Ok(wrong);
        }
        // Jobs the model never heard of: only a failed schedule may have written them.
        let mut phantoms = Vec::new();
        if !self.phantoms.is_empty() {
            let candidates: Vec<u64> = (1..self.id_end())
                .flat_map(|seq| {
                    self.phantom_residues
                        .iter()
                        .map(move |r| (seq << JobId::BUCKET_BITS) | r)
                })
                .collect();
            for id in candidates {
                if self.jobs.contains_key(&id) {
                    continue;
                }
                let Some(info) = engine.get(JobId(id)) else {
                    continue;
                };
                let matching =
                    |s: &Spec| s.due_ms == info.due_ms && s.payload[..] == info.payload[..];
                let Some(at) = self.phantoms.iter().position(matching) else {
                    bail!(
                        "recovery shows job {id} (due {}, {} bytes) that no schedule call could \
                         have written",
                        info.due_ms,
                        info.payload.len()
                    );
                };
                let spec = self.phantoms.remove(at);
                let alt = Self::fresh(spec.due_ms);
                if info.attempt != 0 || !shows(&alt, Some(&info), now) {
                    bail!("recovery shows never-acknowledged job {id} as {info:?}");
                }
                // Two failed specs alike but for the flag: the claim tells which.
                let binary = (!self
                    .phantoms
                    .iter()
                    .any(|s| matching(s) && s.binary != spec.binary))
                .then_some(spec.binary);
                phantoms.push((id, spec, binary));
            }
        }
        // What recovery did not show of the failed schedules is gone: it served a durable log.
        self.phantoms.clear();
        self.phantom_residues.clear();
        // Leases: the log's `Expire` decides whether a due job's lease is open, which the job's
        // state does not show; recovery's count of interrupted jobs may.
        let leased = |fits: &[Alt], open: bool| {
            fits.iter()
                .any(|a| matches!(a, Alt::Present(l) if l.lease_open == open))
        };
        let sure = resolved
            .iter()
            .filter(|(_, f)| leased(f, true) && !leased(f, false))
            .count() as u64;
        let unsure = resolved
            .iter()
            .filter(|(_, f)| leased(f, true) && leased(f, false))
            .count() as u64;
        let interrupted = engine.recovery().interrupted;
        if interrupted < sure || interrupted > sure + unsure {
            bail!(
                "recovery found {interrupted} interrupted jobs; the model says {sure} to {}",
                sure + unsure
            );
        }
        let decided = if interrupted == sure {
            Some(false)
        } else if interrupted == sure + unsure {
            Some(true)
        } else {
            None
        };
        // The finished counts over the directory's life, from what the log holds.
        let s = engine.stats();
        let ended = |kind: Gone| {
            let mut range = (0, 0);
            for (_, fits) in &resolved {
                let is = |a: &Alt| *a == Alt::Gone(kind);
                range.0 += u64::from(fits.iter().all(is));
                range.1 += u64::from(fits.iter().any(is));
            }
            range
        };
        for (kind, got) in [
            (Gone::Completed, s.completed),
            (Gone::Cancelled, s.cancelled),
            (Gone::Failed, s.failed),
        ] {
            let (lo, hi) = ended(kind);
            if got < lo || got > hi {
                bail!("recovery counts {got} jobs {kind:?}; the model says {lo} to {hi}");
            }
        }
        // Resolved: the engine's memory is what the open made of the log.
        self.engine_now_ms = now;
        self.in_state = [0; 3];
        self.queue.clear();
        self.dirty.clear();
        self.issued_max = 0;
        let lease = self.lease_ms;
        let mut missed = Vec::new();
        for (id, mut fits) in resolved {
            if fits.len() > 1
                && let Some(open) = decided
            {
                fits.retain(|a| !matches!(a, Alt::Present(l) if l.lease_open != open));
            }
            let job = self.jobs.get_mut(&id).expect("listed");
            job.log = (fits.len() == 1).then(|| fits[0]);
            job.dirty = false;
            job.live = match fits[0] {
                Alt::Gone(_) => None,
                Alt::Present(l) => {
                    // Differing leases only match a job due by now: ready either way.
                    let ready = l.due_ms <= now || l.lease_open;
                    let lease_open = (fits.len() == 1).then_some(l.lease_open);
                    if ready {
                        missed.push((l.due_ms, id));
                    }
                    Some(Live {
                        state: if ready {
                            JobState::Ready
                        } else {
                            JobState::Scheduled
                        },
                        due_ms: l.due_ms,
                        attempt: l.attempt,
                        lease_open,
                        deadline_ms: now + lease,
                        ready_at_ms: now,
                    })
                }
            };
            if fits.iter().any(|a| *a != Alt::Gone(Gone::Absent)) {
                self.id_floor = self.id_floor.max(id);
            }
            job.may = fits;
            if let Some(l) = &job.live {
                self.in_state[state_index(l.state)] += 1;
            }
        }
        for (id, spec, binary) in phantoms {
            let alt = Self::fresh(spec.due_ms);
            let ready = spec.due_ms <= now;
            if ready {
                missed.push((spec.due_ms, id));
            }
            let live = Live {
                state: if ready {
                    JobState::Ready
                } else {
                    JobState::Scheduled
                },
                deadline_ms: now + lease,
                ready_at_ms: now,
                ..Self::scheduled_live(spec.due_ms)
            };
            let mut job = Self::new_job(&spec, vec![alt], false, Some(live));
            job.binary = binary;
            self.learn(id, job);
            self.id_floor = self.id_floor.max(id);
        }
        // Missed jobs go to the ready channel at once, in due order (ties in id order).
        missed.sort_unstable();
        self.queue = missed.iter().map(|&(_, id)| id).collect();
        if engine.recovery().missed != missed.len() as u64 {
            bail!(
                "recovery found {} missed jobs; the model says {}",
                engine.recovery().missed,
                missed.len()
            );
        }
        self.counters = Counters {
            completed: s.completed,
            cancelled: s.cancelled,
            failed: s.failed,
            fired: missed.len() as u64,
            redelivered: interrupted,
            requeued: 0,
        };
        self.check_counts(engine)?;
        Ok(Vec::new())
    }

    // ---- whole-state checks ---------------------------------------------------------------

    /// The engine's counts (per state, finished, fired, the ready channel's depth) are the
    /// model's.
    pub fn check_counts(&self, engine: &Engine) -> Result<(), Violation> {
        let s = engine.stats();
        let got = [s.scheduled, s.ready, s.running];
        if got != self.in_state {
            bail!(
                "jobs (scheduled, ready, running): the engine has {got:?}, the model {:?}",
                self.in_state
            );
        }
        let c = &self.counters;
        let got = (s.completed, s.cancelled, s.failed);
        let want = (c.completed, c.cancelled, c.failed);
        if got != want {
            bail!("(completed, cancelled, failed): the engine counts {got:?}, the model {want:?}");
        }
        let got = (s.fired, s.redelivered, s.requeued);
        let want = (c.fired, c.redelivered, c.requeued);
        if got != want {
            bail!("(fired, redelivered, requeued): the engine counts {got:?}, the model {want:?}");
        }
        if s.ready_queue_depth != self.queue.len() {
            bail!(
                "the ready channel holds {} ids; the model says {}",
                s.ready_queue_depth,
                self.queue.len()
            );
        }
        Ok(())
    }

    /// Every job the model knows is in the engine's memory exactly as modelled.
    pub fn check_live(&self, engine: &Engine) -> Result<(), Violation> {
        for (&id, job) in &self.jobs {
            let info = engine.get(JobId(id));
            match (&job.live, &info) {
                (None, None) => {}
                (Some(l), Some(i))
                    if (l.state, l.due_ms, l.attempt) == (i.state, i.due_ms, i.attempt) => {}
                (l, i) => bail!(
                    "job {id}: the engine has {:?}, the model {:?}",
                    i.as_ref().map(|i| (i.state, i.due_ms, i.attempt)),
                    l.as_ref().map(|l| (l.state, l.due_ms, l.attempt))
                ),
            }
        }
        Ok(())
    }

    /// The latest due time of any job visible in the engine's memory.
    pub fn due_max(&self) -> u64 {
        self.jobs
            .values()
            .filter_map(|j| j.live.as_ref().map(|l| l.due_ms))
            .max()
            .unwrap_or(0)
    }

    /// The ids of the jobs visible in the engine's memory.
    pub fn live_ids(&self) -> std::collections::BTreeSet<u64> {
        self.jobs
            .iter()
            .filter(|(_, j)| j.live.is_some())
            .map(|(&id, _)| id)
            .collect()
    }

    /// Ids of jobs that may exist, then of finished ones, each in id order (the fuzz target's
    /// picking order).
    pub fn pick_order(&self) -> Vec<u64> {
        let may_exist = self.jobs.iter().filter(|(_, j)| {
            j.may.iter().any(|a| matches!(a, Alt::Present(_))) || j.live.is_some()
        });
        let ended = self
            .jobs
            .iter()
            .filter(|(_, j)| j.ended() && j.live.is_none());
        may_exist.chain(ended).map(|(&id, _)| id).collect()
    }
}

/// Whether recovery showing `info` for a job is the state `alt` (the clock read `now_ms` at
/// the open: a job due by then, or whose lease the log holds open, is ready).
fn shows(alt: &Alt, info: Option<&JobInfo>, now_ms: u64) -> bool {
    match (alt, info) {
        (Alt::Gone(_), None) => true,
        (Alt::Present(l), Some(i)) => {
            let state = if l.due_ms <= now_ms || l.lease_open {
                JobState::Ready
            } else {
                JobState::Scheduled
            };
            (l.due_ms, l.attempt, state) == (i.due_ms, i.attempt, i.state)
        }
        _ => false,
    }
}

fn why_wrong(job: &Job, info: Option<&JobInfo>) -> String {
    let gone = job.may.iter().find_map(|a| match a {
        Alt::Gone(g) => Some(*g),
        Alt::Present(_) => None,
    });
    match (info, gone) {
        (None, _) => format!("acknowledged job lost (the log may hold {:?})", job.may),
        (Some(_), Some(g)) if job.may.iter().all(|a| matches!(a, Alt::Gone(_))) => {
            format!("job came back after {g:?}")
        }
        (Some(i), _) => format!(
            "recovered {:?} due {} attempt {}, not one of {:?}",
            i.state, i.due_ms, i.attempt, job.may
        ),
    }
}
