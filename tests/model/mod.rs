//! The engine oracle, shared by the deterministic simulation (`tests/simulation.rs` with
//! `tests/sim/`) and the `engine_ops` fuzz target (`fuzz/fuzz_targets/engine_ops.rs`, which
//! includes this file by path). One model, so that a rule learned by one driver is checked by
//! both.
//!
//! It keeps two pictures of every job it has heard of:
//! - **the engine's memory** ([`Live`], and [`Job::dead`] for the dead-letter set): state, due
//!   time, attempt, failures, last error, whether the log holds its lease open, the deadline
//!   of its lease timer, when it entered the ready queue; and the idempotency keys held. It is
//!   exact: every call is predicted from it and the answer compared. When a call fails with an
//!   I/O error the model cannot know whether its append happened, so it looks at the engine
//!   (`get`, `dead_letter`) and accepts exactly the two pictures "applied" and "not applied";
//! - **what a recovery may show** ([`Job::may`], a small set of [`Alt`]ernatives: gone and why,
//!   present with due time (a range for a retry whose drawn wait is not known), attempt,
//!   lease, failures and last error, or dead with what its burial recorded). A call
//!   acknowledged after its sync makes everything appended before it durable: the set
//!   collapses to the one state the log ends in. An unsynced append (`schedule_batch_nowait`)
//!   or a call that failed with an I/O error (its records may be partly written and partly
//!   synced, a batch may straddle a roll) adds every state a prefix of its records leaves
//!   behind. A successful open must show one of them; the set is then resolved to what it
//!   showed, because what recovery serves is durable.
//!
//! The lifecycle (docs/lifecycle.md): a lease that ran out is a failure, counted by the
//! `Expire` the next claim, cancel or reschedule writes, or a `Bury` instead of the claim when
//! it was the last attempt allowed; a retryable `fail` waits a drawn time within the backoff's
//! ceiling for that failure (the engine shows it, and the model checks the bounds), or buries
//! at the last attempt; `fail_permanently` buries; `retry_at` waits without a failure;
//! `extend_lease` moves the lease timer; `requeue_dead` and `purge_dead` change dead jobs.
//! A key is held by a live or dead job; a schedule naming a held key returns its holder's id
//! and writes nothing.
//!
//! Jobs of a failed schedule call were never named to the caller: their specs are kept as
//! *phantoms*, and an open may show an unknown id only as one of them. The engine's ready
//! channel is modelled too (a FIFO of ids, stale ones included), because which ids a lease
//! requeue sends depends on how full it is.
//!
//! Each driver uses part of this file.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use timewheel::{
    Backoff, Claimed, DeadJob, DeadQuery, Engine, Error, JobId, JobInfo, JobSpec, JobState,
    Misfire, Outcome, PAUSED_DUE_MS, Recurrence,
};

/// An oracle violation: what went wrong, for the failure report.
#[derive(Debug, Clone)]
pub struct Violation(pub String);

macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(Violation(format!($($arg)*)))
    };
}

/// The failure reasons the drivers pass to `fail` and `fail_permanently`; the model names
/// them by index.
pub const REASONS: &[&str] = &[
    "simulated failure",
    "upstream said 503",
    "",
    "timed out after 30 s",
];
/// What the engine records as the reason of a burial because the lease ran out on the last
/// attempt allowed.
pub const EXPIRED_REASON: &str = "the lease ran out on the last attempt allowed";
/// [`Buried::reason`] of such a burial.
pub const REASON_EXPIRED: u8 = u8::MAX;

fn reason_text(r: u8) -> &'static str {
    if r == REASON_EXPIRED {
        EXPIRED_REASON
    } else {
        REASONS[usize::from(r)]
    }
}

/// What `JobInfo::last_error` shows for a last error (an empty reason is none).
fn error_text(e: Option<u8>) -> Option<&'static str> {
    e.map(reason_text).filter(|t| !t.is_empty())
}

/// One job to schedule, with an absolute due time.
#[derive(Clone, PartialEq, Eq)]
pub struct Spec {
    /// The due time; for a recurring job, its first occurrence after the clock's reading at
    /// the call (the model's own [`Recur::next_after`]: the engine computes it).
    pub due_ms: u64,
    pub payload: Vec<u8>,
    pub binary: bool,
    /// An idempotency key (`JobSpec::key`).
    pub key: Option<Vec<u8>>,
    /// The job's own retry policy (`JobSpec::max_attempts`, `JobSpec::backoff`); `None`: the
    /// engine's `Config::retry`.
    pub policy: Option<(u32, Backoff)>,
    /// Its tenant (`JobSpec::tenant`).
    pub tenant: u32,
    /// A recurring job (`JobSpec::recurring`, `JobSpec::misfire`).
    pub recur: Option<Recur>,
}

/// A recurring job's schedule as the model knows it: the occurrences and the misfire policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recur {
    pub kind: RecurKind,
    pub misfire: Misfire,
}

/// The occurrences of a recurring job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecurKind {
    /// `anchor_ms + k * interval_ms`, `k >= 0`.
    Every { interval_ms: u64, anchor_ms: u64 },
    /// A cron expression in a time zone; the model's next occurrence comes from the driver's
    /// [`CronNext`] (the simulation's asks croner directly).
    Cron {
        expr: &'static str,
        zone: &'static str,
    },
}

/// The driver's cron searches (the model has no cron parser of its own).
#[derive(Debug, Clone, Copy)]
pub struct CronNext {
    /// The first occurrence of an expression in a zone strictly after an instant (ms).
    pub next: fn(&'static str, &'static str, u64) -> Option<u64>,
    /// The last occurrence at or before an instant, where the driver can tell it cheaply
    /// (`None`: walk forward instead).
    pub prev: fn(&'static str, &'static str, u64) -> Option<u64>,
}

/// The most occurrences a `FireAll` misfire looks at (docs/lifecycle.md): a cron schedule that
/// missed more coalesces instead.
pub const MISFIRE_WALK_MAX: u64 = 100_000;

impl Recur {
    /// The recurrence as the engine's API builds it.
    pub fn recurrence(&self) -> Recurrence {
        match self.kind {
            RecurKind::Every {
                interval_ms,
                anchor_ms,
            } => Recurrence::every(interval_ms, anchor_ms).expect("a valid interval"),
            RecurKind::Cron { expr, zone } => {
                Recurrence::cron(expr, zone).expect("a valid expression")
            }
        }
    }

    /// The first occurrence strictly after `after_ms`: arithmetic for an interval, the
    /// driver's cron search for an expression.
    pub fn next_after(&self, after_ms: u64, cron: CronNext) -> u64 {
        match self.kind {
            RecurKind::Every {
                interval_ms,
                anchor_ms,
            } => {
                if after_ms < anchor_ms {
                    anchor_ms
                } else {
                    anchor_ms + ((after_ms - anchor_ms) / interval_ms + 1) * interval_ms
                }
            }
            RecurKind::Cron { expr, zone } => {
                (cron.next)(expr, zone, after_ms).expect("the simulation's crons always recur")
            }
        }
    }

    /// When the job is due next after its occurrence due at `prev_ms` ended (completed,
    /// failed for good, or skipped) at `now_ms`, as docs/lifecycle.md's misfire table says:
    /// `Coalesce` and `Skip` go on to the first occurrence after both; `FireAll { b }` to the
    /// first occurrence after `prev_ms` if it is still ahead, else to the earliest of the `b`
    /// most recent occurrences missed (those up to `now_ms`), older ones skipped; a cron
    /// schedule with more than [`MISFIRE_WALK_MAX`] missed coalesces. The second value tells
    /// whether occurrences after `prev_ms` were missed (passed over, or some for `FireAll`).
    pub fn next_due(&self, prev_ms: u64, now_ms: u64, cron: CronNext) -> (u64, u64) {
        let first = self.next_after(prev_ms, cron);
        match self.misfire {
            Misfire::Coalesce | Misfire::Skip => {
                let next = self.next_after(now_ms.max(prev_ms), cron);
                (next, u64::from(first <= now_ms))
            }
            Misfire::FireAll { backfill_max } => {
                if first > now_ms {
                    return (first, 0);
                }
                let b = u64::from(backfill_max);
                match self.kind {
                    RecurKind::Every {
                        interval_ms,
                        anchor_ms,
                    } => {
                        // Missed: occurrences k_first ..= k_last.
                        let k_first = (first - anchor_ms) / interval_ms;
                        let k_last = (now_ms - anchor_ms) / interval_ms;
                        let missed = k_last - k_first + 1;
                        if b == 0 {
                            return (self.next_after(now_ms, cron), missed);
                        }
                        let k = k_first.max((k_last + 1).saturating_sub(b));
                        (anchor_ms + k * interval_ms, k - k_first)
                    }
                    RecurKind::Cron { expr, zone } => {
                        // A five-field expression fires at most once a minute: fewer than the
                        // walk's limit missed, and the driver can search back, is found from
                        // `now_ms` backwards.
                        let five = expr.split_whitespace().count() == 5;
                        let few = (now_ms - first) / 60_000 < MISFIRE_WALK_MAX;
                        if five
                            && few
                            && b > 0
                            && let Some(last) = (cron.prev)(expr, zone, now_ms)
                        {
                            let mut earliest = last;
                            for _ in 1..b {
                                match (cron.prev)(expr, zone, earliest - 1) {
                                    Some(p) if p >= first => earliest = p,
                                    _ => break,
                                }
                            }
                            return (earliest.max(first), 1);
                        }
                        let mut missed = Vec::new();
                        let mut at = first;
                        while at <= now_ms {
                            if missed.len() as u64 == MISFIRE_WALK_MAX {
                                // Too many to walk: coalesced.
                                return (self.next_after(now_ms, cron), MISFIRE_WALK_MAX);
                            }
                            missed.push(at);
                            at = self.next_after(at, cron);
                        }
                        if b == 0 {
                            return (at, missed.len() as u64);
                        }
                        let i = missed.len().saturating_sub(b as usize);
                        (missed[i], i as u64)
                    }
                }
            }
        }
    }
}

impl Spec {
    /// A spec without a key, a policy, a tenant or a recurrence of its own.
    pub fn plain(due_ms: u64, payload: Vec<u8>, binary: bool) -> Spec {
        Spec {
            due_ms,
            payload,
            binary,
            key: None,
            policy: None,
            tenant: 0,
            recur: None,
        }
    }

    pub fn job_spec(&self) -> JobSpec {
        let mut s = match &self.recur {
            Some(r) => JobSpec::recurring(r.recurrence()).misfire(r.misfire),
            None => JobSpec::at(self.due_ms),
        };
        s = s
            .payload(self.payload.clone())
            .binary(self.binary)
            .tenant(self.tenant);
        if let Some(k) = &self.key {
            s = s.key(k.clone());
        }
        if let Some((max_attempts, backoff)) = self.policy {
            s = s.max_attempts(max_attempts).backoff(backoff);
        }
        s
    }
}

impl fmt::Debug for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Traces show the payload's size only: its bytes are checked, not read.
        write!(f, "due {} payload {}b", self.due_ms, self.payload.len())?;
        if self.binary {
            f.write_str(" binary")?;
        }
        if let Some(k) = &self.key {
            write!(f, " key {:?}", String::from_utf8_lossy(k))?;
        }
        if let Some((m, b)) = self.policy {
            write!(f, " attempts {m} backoff {}-{}", b.base_ms, b.cap_ms)?;
        }
        if self.tenant != 0 {
            write!(f, " tenant {}", self.tenant)?;
        }
        if let Some(r) = &self.recur {
            write!(f, " recurring {:?} {:?}", r.kind, r.misfire)?;
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
    /// The old `Fail` record (no engine writes it since the dead-letter set exists).
    Failed,
    /// Dead, then purged from the dead-letter set.
    Purged,
    /// Its schedule never became durable (or recovery showed it absent).
    Absent,
}

/// A job as the log holds it: what replay rebuilds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logged {
    /// The due time, within `due_ms ..= due_hi_ms` (a range only for a retry whose drawn wait
    /// the model does not know: its call failed before the engine showed it).
    pub due_ms: u64,
    pub due_hi_ms: u64,
    /// The newest claim's attempt (0: never claimed).
    pub attempt: u32,
    /// The crashed runs (`Stats::crashed_runs`) when `attempt` was last set (schedule,
    /// claim, requeue): the next claim skips one number for each crash since.
    pub crashes_seen: u32,
    /// The newest record is that claim (or an `Extend` of it): no `Expire`, retry, cancel,
    /// reschedule or finish after it.
    pub lease_open: bool,
    /// Failed attempts counted (`Expire`s and retryable failures since the schedule or the
    /// last requeue).
    pub failures: u32,
    /// The newest retryable failure's reason ([`REASONS`] index).
    pub last_error: Option<u8>,
}

/// A dead job, as its burial recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buried {
    pub due_ms: u64,
    pub attempt: u32,
    pub failures: u32,
    pub died_at_ms: u64,
    /// Buried because the lease ran out on the last attempt allowed.
    pub expired: bool,
    /// [`REASONS`] index, or [`REASON_EXPIRED`].
    pub reason: u8,
}

/// One state a recovery may show for a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alt {
    Gone(Gone),
    Present(Logged),
    Dead(Buried),
}

/// A job in the engine's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    pub state: JobState,
    pub due_ms: u64,
    pub attempt: u32,
    /// As [`Logged::crashes_seen`].
    pub crashes_seen: u32,
    pub failures: u32,
    pub last_error: Option<u8>,
    /// Whether the log holds its lease open; `None` when an I/O error left that unknown and
    /// recovery could not tell (the next call that depends on it tells).
    pub lease_open: Option<bool>,
    /// `Ready`: when its id is queued again if nobody claims it. `Running`: when the lease
    /// runs out.
    pub deadline_ms: u64,
    /// `Running`: the other deadline the lease may have, after an `extend_lease` that failed
    /// with an I/O error (applied in memory or not); the next `run_timers` tells which.
    pub deadline_alt_ms: Option<u64>,
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
    /// In the engine's dead-letter set (memory), if it is there.
    pub dead: Option<Buried>,
    pub key: Option<Vec<u8>>,
    /// Its retry policy: its own, or the engine's default.
    pub max_attempts: u32,
    pub backoff: Backoff,
    /// `Bury` records of this job the log surely holds, and `Next` records of a failed
    /// occurrence (both count in `Stats::failed`).
    buries: u32,
    /// A `Bury` of it was appended by a call that failed: recovery tells whether it holds.
    bury_unsure: bool,
    /// Its tenant.
    pub tenant: u32,
    /// Its schedule, for a recurring job.
    pub recur: Option<Recur>,
    /// `Next` records of a completed occurrence the log surely holds (`Stats::completed`).
    occurrences_done: u32,
    /// `Next` records appended by a call that failed, with the state each leaves and whether
    /// it counts as failed (else completed): recovery tells whether it holds.
    next_unsure: Vec<(Alt, bool)>,
}

impl Job {
    fn ended(&self) -> bool {
        self.may
            .iter()
            .all(|a| matches!(a, Alt::Gone(g) if *g != Gone::Absent))
    }
}

/// The engine's counters the model follows exactly (`dedup_*`: a range).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counters {
    completed: u64,
    cancelled: u64,
    failed: u64,
    fired: u64,
    redelivered: u64,
    requeued: u64,
    retried: u64,
    dedup_lo: u64,
    dedup_hi: u64,
}

/// The attempt of `l`'s next claim once `crashes` runs crashed: its last one + 1, and, unless
/// the log holds its lease open (a claim after that is durable before it is handed out), one
/// more for each crash since its newest record (a claim the crash cut may have used it).
fn next_attempt(l: &Live, crashes: u32) -> u32 {
    if l.lease_open == Some(true) {
        l.attempt + 1
    } else {
        l.attempt + 1 + (crashes - l.crashes_seen)
    }
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

/// How a worker ends an attempt other than by completing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// `fail` (`retryable`) or `fail_permanently`, with a [`REASONS`] index.
    Fail { retryable: bool, reason: u8 },
    /// `retry_at(due_ms)`.
    RetryAt(u64),
}

/// A change of one job a call appends.
#[derive(Debug, Clone, Copy)]
enum Change {
    Cancel,
    Reschedule(u64),
    Claim {
        lease_until_ms: u64,
    },
    Complete,
    /// A `Retry` record: due within `due_ms ..= due_hi_ms`, a failure with this reason
    /// counted (`Some`) or not (`retry_at`).
    Retry {
        due_ms: u64,
        due_hi_ms: u64,
        failed: Option<u8>,
    },
    /// A `Bury` record.
    Bury {
        at_ms: u64,
        expired: bool,
        reason: u8,
    },
    /// A `Next` record: a recurring job's occurrence ended (`how`) and it waits for `due_ms`
    /// (for the tally: occurrences were passed over under `Coalesce`, or the next is a missed
    /// one under `FireAll`).
    Next {
        due_ms: u64,
        how: NextHow,
        coalesced: bool,
        backfill: bool,
    },
}

/// What a claim of a ready job may do: a change, with the state of the lease in the log it
/// needs (`None`: either).
type ClaimOption = (Option<bool>, Change);

/// Why a recurring job's occurrence ended (the `Next` record's flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextHow {
    /// Completed (no flag): counts in `Stats::completed`.
    Completed,
    /// Its last allowed attempt failed (`NEXT_FAILED`): counts in `Stats::failed`.
    Failed,
    /// Found too late at a claim under `Misfire::Skip` (`NEXT_SKIPPED`): not delivered.
    Skipped,
}

/// How a schedule treats one spec's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    New,
    /// The key is held by this job.
    Existing(u64),
    /// An earlier spec of the batch takes the key.
    SameAs(usize),
}

/// What a run did of the lifecycle, applied in the engine's memory (for a campaign's figures).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    /// Retries (`Retry` records: retryable failures and `retry_at`s).
    pub retries: u64,
    /// Burials: permanent failures, last allowed failures, leases run out at the last attempt.
    pub buries: u64,
    /// Of those, leases run out.
    pub expired_buries: u64,
    pub requeues: u64,
    pub purges: u64,
    pub extends: u64,
    /// Schedules that named a held key.
    pub deduplicated: u64,
    /// Recurring jobs' occurrences fired by the timers (scheduled to ready).
    pub occurrences_fired: u64,
    /// `Next` records applied: the next occurrence scheduled (completed, failed, skipped).
    pub nexts: u64,
    /// Of those: completions that passed over missed occurrences under `Coalesce`...
    pub misfire_coalesced: u64,
    /// ... occurrences skipped at a claim under `Skip` (`NEXT_SKIPPED`)...
    pub misfire_skipped: u64,
    /// ... and completions under `FireAll` whose next occurrence is a missed one (backfill).
    pub misfire_backfilled: u64,
    /// `pause_schedule`, `resume_schedule`, `delete_schedule` that took effect.
    pub pauses: u64,
    pub resumes: u64,
    pub deletes: u64,
    /// `reschedule_by_key` that took effect.
    pub reschedules_by_key: u64,
    /// Fairness: tenants left with ready jobs queued because they were at their running limit,
    /// counted at each feed of the ready channel.
    pub tenant_limited: u64,
    /// Fairness: ids fed into the ready channel.
    pub fed: u64,
    /// The memory check after compaction passes (`tests/sim/memory.rs`): passes checked...
    pub memory_checks: u64,
    /// ... of which skipped, their journal unreadable (media damage)...
    pub memory_unreadable: u64,
    /// ... and the far jobs memory held at them (each with a record the pass did not fold).
    pub far_held: u64,
    /// Journal segments a compaction pass sealed before they were full.
    pub early_seals: u64,
}

/// The oracle.
#[derive(Debug)]
pub struct Model {
    pub tally: Tally,
    pub jobs: BTreeMap<u64, Job>,
    /// Ids in the order learned, for picking.
    pub ids: Vec<u64>,
    pub lease_ms: u64,
    /// The engine's `Config::retry`: the policy of jobs without one of their own.
    pub default_policy: (u32, Backoff),
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
    phantom_residues: BTreeSet<u64>,
    /// The highest id durably used (acknowledged, or shown by an open): no id up to it is
    /// handed out again, since ids only grow and an open starts past every reservation.
    pub id_floor: u64,
    /// The highest id handed out since the open: ids grow.
    issued_max: u64,
    /// Runs of the engine that crashed, as the engine counts them (`Stats::crashed_runs`),
    /// learnt at each open: a job's next attempt skips one number per crash since its last.
    crashes: u32,
    /// The highest attempt handed to a worker per job, across every crash: the fencing token
    /// is never handed out twice (claims are handed out before they are durable, so a crash
    /// may cut one a worker saw; the model's exact prediction uses the engine's crash count,
    /// and this checks the outcome without it).
    handed: BTreeMap<u64, u32>,
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
    /// Jobs in the engine's dead-letter set.
    dead_count: u64,
    /// Idempotency keys the engine's memory holds, with their holders (live or dead).
    pub keys: BTreeMap<Vec<u8>, u64>,
    /// Every key any spec named, to ask the engine about.
    pub key_space: BTreeSet<Vec<u8>>,
    counters: Counters,
    /// Jobs whose `may` may collapse at the next sync.
    dirty: Vec<u64>,
    append_seq: u64,
    /// The cron search the driver gives (see [`Model::with_cron`]).
    cron_next: CronNext,
    /// With `Config::fair_tenants`: the tenants' queues (see [`Fair`]).
    pub fair: Option<Fair>,
    /// The engine's `Config::misfire_threshold_ms`.
    pub misfire_threshold_ms: u64,
}

fn no_cron(_: &'static str, _: &'static str, _: u64) -> Option<u64> {
    panic!("this driver has no cron model (Model::with_cron)")
}

const NO_CRON: CronNext = CronNext {
    next: no_cron,
    prev: no_cron,
};

/// The fairness rules of docs/lifecycle.md ("Tenant fairness"), as the model follows them.
///
/// A job that becomes ready (fired, its lease ran out, missed at an open) waits in its
/// tenant's queue, unless its id is there or in the channel already. The ready channel is fed
/// from the queues, a tenant's in its order, at most `depth` ids in the channel, and a tenant
/// with a running limit only while its running jobs plus its ids fed and not yet looked at by
/// a claim are below it. A fed id counts against its tenant until a claim looks at it, its job
/// stops being ready another way (cancelled, rescheduled, paused, finished by an older claim),
/// or, still ready and unclaimed, it was fed at least a lease ago when its claim deadline
/// comes (then it is queued again behind the tenant's others). The channel is fed where the
/// engine does it: each timer pass that made a job ready or requeued one, each claim call, and
/// each finish, cancel or reschedule that changed a job.
///
/// Exact but for two things the documentation leaves open, which the model follows as sets:
/// the order among jobs made ready by one timer pass (the wheel fires equal due times in no
/// particular order; the open's order is exact: due, then id), and which tenants are served
/// when the channel's depth, not their limits, stops the feeding. A queue also holds the ids
/// of jobs that stopped being ready until a feeding reaches them (dropped then): the model
/// keeps those as "maybe still there", known gone once a feeding emptied the queue.
#[derive(Debug, Clone)]
pub struct Fair {
    pub depth: usize,
    pub running_max: u32,
    pub limits: BTreeMap<u32, u32>,
    pub queues: BTreeMap<u32, TenantQueue>,
    /// The order of enqueues: one value per timer pass, one per job at an open.
    stamp: u64,
    /// A feeding is due at the end of the current call.
    refill_due: bool,
    /// A feeding may have happened in the current call (a failed call whose change, if
    /// applied, left the job as it was: whether it was applied, and fed, is not known).
    refill_maybe: bool,
}

/// One tenant's queue and its fed ids.
#[derive(Debug, Clone, Default)]
pub struct TenantQueue {
    /// Ready jobs waiting in the queue, with the stamp of their enqueue (0: a job whose id
    /// may still have sat in the queue from before: its place is not known).
    pub waiting: BTreeMap<u64, u64>,
    /// Ids of jobs no longer ready that may still sit in the queue.
    pub maybe: BTreeSet<u64>,
    /// Ids fed and not yet looked at by a claim, with the time they were fed.
    pub fed: BTreeMap<u64, u64>,
}

impl Fair {
    pub fn new(depth: usize, running_max: u32, limits: BTreeMap<u32, u32>) -> Fair {
        Fair {
            depth,
            running_max,
            limits,
            queues: BTreeMap::new(),
            stamp: 1,
            refill_due: false,
            refill_maybe: false,
        }
    }

    pub fn limit(&self, tenant: u32) -> u32 {
        self.limits
            .get(&tenant)
            .copied()
            .unwrap_or(self.running_max)
    }

    /// A job of `tenant` became ready, in the enqueue order `stamp`.
    fn enqueue(&mut self, tenant: u32, id: u64, stamp: u64) {
        let q = self.queues.entry(tenant).or_default();
        if q.fed.contains_key(&id) || q.waiting.contains_key(&id) {
            return;
        }
        // Still in the queue (then at its old place) or dropped (then at the back).
        let stamp = if q.maybe.remove(&id) { 0 } else { stamp };
        q.waiting.insert(id, stamp);
    }

    /// A ready job of `tenant` stopped being ready: a claim took it, or something else.
    fn left(&mut self, tenant: u32, id: u64) {
        let q = self.queues.entry(tenant).or_default();
        q.fed.remove(&id);
        if q.waiting.remove(&id).is_some() {
            q.maybe.insert(id);
        }
    }

    fn next_stamp(&mut self) -> u64 {
        self.stamp += 1;
        self.stamp
    }
}

impl Model {
    pub fn new(start_ms: u64, lease_ms: u64, id_block: u64) -> Model {
        let d = timewheel::RetryPolicy::default();
        Model {
            tally: Tally::default(),
            jobs: BTreeMap::new(),
            ids: Vec::new(),
            lease_ms,
            default_policy: (d.max_attempts, d.backoff),
            id_block,
            id_skips: 0,
            failed_specs: 0,
            max_returned_id: 0,
            phantoms: Vec::new(),
            phantom_residues: Default::default(),
            id_floor: 0,
            issued_max: 0,
            crashes: 0,
            handed: BTreeMap::new(),
            clock_ms: start_ms,
            max_clock_ms: start_ms,
            engine_now_ms: start_ms,
            queue: Vec::new(),
            in_state: [0; 3],
            dead_count: 0,
            keys: BTreeMap::new(),
            key_space: BTreeSet::new(),
            counters: Counters::default(),
            dirty: Vec::new(),
            append_seq: 0,
            cron_next: NO_CRON,
            fair: None,
            misfire_threshold_ms: 60_000,
        }
    }

    /// Cron schedules' occurrences come from `cron` (the model itself has no cron parser).
    pub fn with_cron(mut self, cron: CronNext) -> Model {
        self.cron_next = cron;
        self
    }

    /// The engine runs with `Config::fair_tenants` (`fair`'s depth and limits).
    pub fn with_fair(mut self, fair: Fair) -> Model {
        self.fair = Some(fair);
        self
    }

    /// The engine's `Config::misfire_threshold_ms`.
    pub fn with_misfire_threshold(mut self, ms: u64) -> Model {
        self.misfire_threshold_ms = ms;
        self
    }

    /// The engine's `Config::retry` is `policy` (the default is `RetryPolicy::default()`).
    pub fn with_retry(mut self, policy: timewheel::RetryPolicy) -> Model {
        self.default_policy = (policy.max_attempts, policy.backoff);
        self
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

    /// The time a call that does not move the engine's time uses (a finish, a retry).
    fn peek_now(&self) -> u64 {
        self.engine_now_ms.max(self.clock_ms)
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
            Some(old) => assert!(
                old.live.is_none() && old.dead.is_none(),
                "a reissued id had no visible job"
            ),
        }
        if let Some(l) = &self.jobs[&id].live {
            self.in_state[state_index(l.state)] += 1;
        }
    }

    /// Replaces a job's picture in memory, keeping the counts per state.
    fn set_live(&mut self, id: u64, new: Option<Live>) {
        let job = self.jobs.get_mut(&id).expect("a known job");
        let was_ready = job
            .live
            .as_ref()
            .is_some_and(|l| l.state == JobState::Ready);
        let is_ready = new.as_ref().is_some_and(|l| l.state == JobState::Ready);
        if was_ready
            && !is_ready
            && let Some(fair) = self.fair.as_mut()
        {
            fair.left(job.tenant, id);
        }
        if let Some(l) = &job.live {
            self.in_state[state_index(l.state)] -= 1;
        }
        if let Some(l) = &new {
            self.in_state[state_index(l.state)] += 1;
        }
        job.live = new;
    }

    /// Puts a job into the dead-letter set in memory, or takes it out.
    fn set_dead(&mut self, id: u64, new: Option<Buried>) {
        let job = self.jobs.get_mut(&id).expect("a known job");
        self.dead_count -= u64::from(job.dead.is_some());
        self.dead_count += u64::from(new.is_some());
        job.dead = new;
    }

    /// The job no longer holds its key (it completed, was cancelled or purged).
    fn release_key(&mut self, id: u64) {
        if let Some(k) = self.jobs.get(&id).and_then(|j| j.key.clone())
            && self.keys.get(&k) == Some(&id)
        {
            self.keys.remove(&k);
        }
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
    /// With the lease's state in the log unknown (`l.lease_open == None`), both the states with
    /// and without the `Expire` are listed (a caller that saw the change applied resolves the
    /// lease first).
    fn records(l: &Live, change: Change, crashes: u32) -> Vec<Alt> {
        let mut alts = Vec::with_capacity(3);
        // A lease that ran out in memory (or whose state is unknown) is closed by an `Expire`
        // written first, counting a failure; a crash may keep it without the record after it.
        let expire = l.lease_open != Some(false)
            && matches!(
                change,
                Change::Cancel | Change::Reschedule(_) | Change::Claim { .. }
            );
        // The records that set the job's count of crashes (`Event::sets_crashes_seen`): all
        // but a reschedule, cancel or skipped occurrence of a waiting job. After an `Expire`
        // (failures one up) the count is set.
        let seen = |f: u32| {
            if f > l.failures {
                crashes
            } else {
                l.crashes_seen
            }
        };
        let present = |due_ms: u64, attempt: u32, lease_open: bool, failures: u32| {
            Alt::Present(Logged {
                due_ms,
                due_hi_ms: due_ms,
                attempt,
                crashes_seen: seen(failures),
                lease_open,
                failures,
                last_error: l.last_error,
            })
        };
        if expire {
            alts.push(present(l.due_ms, l.attempt, false, l.failures + 1));
        }
        // The failures after the `Expire`, if any: both counts when it is unknown.
        let after: Vec<u32> = match l.lease_open {
            None if expire => vec![l.failures, l.failures + 1],
            Some(true) if expire => vec![l.failures + 1],
            _ => vec![l.failures],
        };
        for f in after {
            alts.push(match change {
                Change::Cancel => Alt::Gone(Gone::Cancelled),
                Change::Complete => Alt::Gone(Gone::Completed),
                Change::Reschedule(due_ms) => present(due_ms, l.attempt, false, f),
                Change::Claim { .. } => Alt::Present(Logged {
                    due_ms: l.due_ms,
                    due_hi_ms: l.due_ms,
                    // After an `Expire` the lease was open: no number was skipped.
                    attempt: if f > l.failures {
                        l.attempt + 1
                    } else {
                        l.attempt + 1 + (crashes - l.crashes_seen)
                    },
                    crashes_seen: crashes,
                    lease_open: true,
                    failures: f,
                    last_error: l.last_error,
                }),
                Change::Retry {
                    due_ms,
                    due_hi_ms,
                    failed,
                } => Alt::Present(Logged {
                    due_ms,
                    due_hi_ms,
                    attempt: l.attempt,
                    crashes_seen: crashes,
                    lease_open: false,
                    failures: f + u32::from(failed.is_some()),
                    last_error: failed.or(l.last_error),
                }),
                Change::Bury {
                    at_ms,
                    expired,
                    reason,
                } => Alt::Dead(Buried {
                    due_ms: l.due_ms,
                    attempt: l.attempt,
                    failures: f + 1,
                    died_at_ms: at_ms,
                    expired,
                    reason,
                }),
                Change::Next { due_ms, how, .. } => Alt::Present(Logged {
                    due_ms,
                    due_hi_ms: due_ms,
                    attempt: l.attempt,
                    crashes_seen: if how == NextHow::Skipped {
                        l.crashes_seen
                    } else {
                        crashes
                    },
                    lease_open: false,
                    failures: 0,
                    last_error: None,
                }),
            });
        }
        alts.dedup();
        alts
    }

    /// Applies a change the engine made in memory (`applied`) or may have written
    /// (`!applied` after an I/O error).
    fn change(&mut self, id: u64, change: Change, applied: bool, fault: Option<Fault>) {
        let l = self.live(id).cloned().expect("a change of a visible job");
        let alts = Self::records(&l, change, self.crashes);
        if applied || fault == Some(Fault::Unknown) {
            self.appended_records(id, &alts, applied);
        }
        if let Change::Bury { .. } = change {
            let job = self.jobs.get_mut(&id).expect("known");
            if applied && fault.is_none() {
                job.buries += 1;
            } else if fault == Some(Fault::Unknown) {
                job.bury_unsure = true;
            }
        }
        if let Change::Next { how, .. } = change
            && how != NextHow::Skipped
        {
            let job = self.jobs.get_mut(&id).expect("known");
            let failed = how == NextHow::Failed;
            if applied && fault.is_none() {
                if failed {
                    job.buries += 1;
                } else {
                    job.occurrences_done += 1;
                }
            } else if fault == Some(Fault::Unknown) {
                let alt = *alts.last().expect("a Next leaves one state");
                job.next_unsure.push((alt, failed));
            }
        }
        if !applied {
            return;
        }
        assert!(
            l.lease_open.is_some() || matches!(change, Change::Cancel | Change::Complete),
            "a change applied with its lease unknown ({change:?} of job {id})"
        );
        let expired = l.lease_open == Some(true)
            && matches!(
                change,
                Change::Cancel | Change::Reschedule(_) | Change::Claim { .. }
            );
        let failures = l.failures + u32::from(expired);
        let next = match change {
            Change::Cancel => {
                self.counters.cancelled += 1;
                self.release_key(id);
                None
            }
            Change::Complete => {
                self.counters.completed += 1;
                self.release_key(id);
                None
            }
            Change::Reschedule(due_ms) => Some(Live {
                state: JobState::Scheduled,
                due_ms,
                failures,
                lease_open: Some(false),
                deadline_alt_ms: None,
                ..l
            }),
            Change::Claim { lease_until_ms } => Some(Live {
                state: JobState::Running,
                attempt: next_attempt(&l, self.crashes),
                crashes_seen: self.crashes,
                failures,
                lease_open: Some(true),
                deadline_ms: lease_until_ms,
                deadline_alt_ms: None,
                ..l
            }),
            Change::Retry {
                due_ms,
                due_hi_ms,
                failed,
            } => {
                assert_eq!(due_ms, due_hi_ms, "an applied retry's due time is known");
                self.counters.retried += 1;
                self.tally.retries += 1;
                Some(Live {
                    state: JobState::Scheduled,
                    due_ms,
                    failures: l.failures + u32::from(failed.is_some()),
                    last_error: failed.or(l.last_error),
                    lease_open: Some(false),
                    deadline_alt_ms: None,
                    ..l
                })
            }
            Change::Bury {
                at_ms,
                expired,
                reason,
            } => {
                self.counters.failed += 1;
                self.tally.buries += 1;
                self.tally.expired_buries += u64::from(expired);
                self.set_dead(
                    id,
                    Some(Buried {
                        due_ms: l.due_ms,
                        attempt: l.attempt,
                        failures: l.failures + 1,
                        died_at_ms: at_ms,
                        expired,
                        reason,
                    }),
                );
                None
            }
            Change::Next {
                due_ms,
                how,
                coalesced,
                backfill,
            } => {
                self.tally.misfire_coalesced += u64::from(coalesced);
                self.tally.misfire_backfilled += u64::from(backfill);
                match how {
                    NextHow::Completed => self.counters.completed += 1,
                    NextHow::Failed => self.counters.failed += 1,
                    NextHow::Skipped => self.tally.misfire_skipped += 1,
                }
                self.tally.nexts += 1;
                Some(Live {
                    state: JobState::Scheduled,
                    due_ms,
                    failures: 0,
                    last_error: None,
                    lease_open: Some(false),
                    deadline_alt_ms: None,
                    ..l
                })
            }
        };
        // The records that set the job's count of crashes (`Event::sets_crashes_seen`).
        let sets = match change {
            Change::Reschedule(_) | Change::Cancel | Change::Complete => expired,
            Change::Next { how, .. } => how != NextHow::Skipped,
            Change::Claim { .. } | Change::Retry { .. } | Change::Bury { .. } => true,
        };
        let crashes = self.crashes;
        self.set_live(
            id,
            next.map(|n| Live {
                crashes_seen: if sets { crashes } else { l.crashes_seen },
                ..n
            }),
        );
    }

    /// The lease of a job in memory whose log state was unknown is told by the failures the
    /// engine shows after a change that wrote the `Expire` if the lease was open.
    fn learn_lease(&mut self, id: u64, info: Option<&JobInfo>) -> Result<(), Violation> {
        let Some(l) = self.jobs.get_mut(&id).and_then(|j| j.live.as_mut()) else {
            return Ok(());
        };
        if l.lease_open.is_some() {
            return Ok(());
        }
        let Some(i) = info else {
            return Ok(());
        };
        if i.failures == l.failures + 1 {
            l.lease_open = Some(true);
        } else if i.failures == l.failures {
            l.lease_open = Some(false);
        } else {
            bail!(
                "job {id} shows {} failures after a change; the model says {} or one more",
                i.failures,
                l.failures
            );
        }
        Ok(())
    }

    // ---- schedule -------------------------------------------------------------------------

    /// Checks ids a schedule returned for new jobs: new, growing, never durably used.
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

    fn new_job(&self, spec: &Spec, may: Vec<Alt>, returned: bool, live: Option<Live>) -> Job {
        let (max_attempts, backoff) = spec.policy.unwrap_or(self.default_policy);
        Job {
            log: may.last().copied(),
            may,
            log_seq: 0,
            dirty: false,
            payload: spec.payload.clone(),
            binary: Some(spec.binary),
            returned,
            live,
            dead: None,
            key: spec.key.clone(),
            max_attempts,
            backoff,
            buries: 0,
            bury_unsure: false,
            tenant: spec.tenant,
            recur: spec.recur.clone(),
            occurrences_done: 0,
            next_unsure: Vec::new(),
        }
    }

    fn scheduled_live(&self, due_ms: u64) -> Live {
        Live {
            state: JobState::Scheduled,
            due_ms,
            attempt: 0,
            crashes_seen: self.crashes,
            failures: 0,
            last_error: None,
            lease_open: Some(false),
            deadline_ms: 0,
            deadline_alt_ms: None,
            ready_at_ms: 0,
        }
    }

    fn fresh(due_ms: u64, crashes: u32) -> Alt {
        Alt::Present(Logged {
            due_ms,
            due_hi_ms: due_ms,
            attempt: 0,
            crashes_seen: crashes,
            lease_open: false,
            failures: 0,
            last_error: None,
        })
    }

    /// How a schedule of `specs` treats each one's key, from the keys held in memory.
    fn name_keys(&self, specs: &[Spec]) -> Vec<Named> {
        let mut first: BTreeMap<&[u8], usize> = BTreeMap::new();
        specs
            .iter()
            .enumerate()
            .map(|(i, s)| match &s.key {
                None => Named::New,
                Some(k) => match self.keys.get(k) {
                    Some(&holder) => Named::Existing(holder),
                    None => match first.get(&k[..]) {
                        Some(&j) => Named::SameAs(j),
                        None => {
                            first.insert(k, i);
                            Named::New
                        }
                    },
                },
            })
            .collect()
    }

    /// `schedule` or `schedule_batch` of `specs` returned `r`.
    pub fn scheduled(
        &mut self,
        specs: &[Spec],
        r: Result<Vec<JobId>, Fault>,
    ) -> Result<(), Violation> {
        for s in specs {
            if let Some(k) = &s.key {
                self.key_space.insert(k.clone());
            }
        }
        let named = self.name_keys(specs);
        let deduplicated = named.iter().filter(|n| **n != Named::New).count() as u64;
        match r {
            Ok(ids) => {
                if ids.len() != specs.len() {
                    bail!(
                        "schedule of {} jobs returned {} ids",
                        specs.len(),
                        ids.len()
                    );
                }
                for (i, n) in named.iter().enumerate() {
                    let want = match *n {
                        Named::New => continue,
                        Named::Existing(h) => h,
                        Named::SameAs(j) => ids[j].0,
                    };
                    if ids[i].0 != want {
                        bail!(
                            "schedule naming key {:?} returned {}; the key is held by {want}",
                            specs[i].key,
                            ids[i]
                        );
                    }
                }
                let fresh: Vec<(JobId, &Spec)> = ids
                    .iter()
                    .zip(specs)
                    .zip(&named)
                    .filter(|(_, n)| **n == Named::New)
                    .map(|((id, s), _)| (*id, s))
                    .collect();
                let new_ids: Vec<JobId> = fresh.iter().map(|(id, _)| *id).collect();
                self.check_new_ids(&new_ids, fresh.len())?;
                if !fresh.is_empty() {
                    self.observe(); // the commit reads the clock
                }
                for (id, spec) in fresh {
                    self.max_returned_id = self.max_returned_id.max(id.0);
                    let live = self.scheduled_live(spec.due_ms);
                    let job = self.new_job(
                        spec,
                        vec![Self::fresh(spec.due_ms, self.crashes)],
                        true,
                        Some(live),
                    );
                    self.learn(id.0, job);
                    if let Some(k) = &spec.key {
                        self.keys.insert(k.clone(), id.0);
                    }
                    self.id_floor = self.id_floor.max(id.0);
                }
                self.counters.dedup_lo += deduplicated;
                self.tally.deduplicated += deduplicated;
                self.counters.dedup_hi += deduplicated;
                self.synced_all();
            }
            Err(f) => {
                self.failed_specs += specs.len() as u64;
                self.id_skips += 1;
                if f == Fault::Unknown {
                    // Counted once the append succeeded, before the sync that failed.
                    self.counters.dedup_hi += deduplicated;
                    // The engine names a job's home bucket in its id: the hour it is due, or
                    // the hour of the clock reading the call took if it was due already.
                    for (spec, n) in specs.iter().zip(&named) {
                        if *n != Named::New {
                            continue; // it named a job that exists: nothing written for it
                        }
                        let hour = spec.due_ms.max(self.clock_ms) / 3_600_000;
                        self.phantom_residues
                            .insert(hour % (1 << JobId::BUCKET_BITS));
                        self.phantoms.push(spec.clone());
                    }
                }
            }
        }
        Ok(())
    }

    /// `schedule_batch_nowait` of `specs` returned `ids`: appended, not durable, not visible.
    /// (The model does not follow keys of unsynced schedules: specs here have none.)
    pub fn appended(
        &mut self,
        specs: &[Spec],
        ids: &[JobId],
        engine: &Engine,
    ) -> Result<(), Violation> {
        assert!(
            specs.iter().all(|s| s.key.is_none()),
            "keyed schedules without a wait are not modelled"
        );
        self.check_new_ids(ids, specs.len())?;
        for (id, spec) in ids.iter().zip(specs) {
            if engine.get(*id).is_some() {
                bail!("job {id} visible before its commit");
            }
            let fresh = Self::fresh(spec.due_ms, self.crashes);
            let job = self.new_job(spec, vec![Alt::Gone(Gone::Absent)], false, None);
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
            self.set_live(id.0, Some(self.scheduled_live(due)));
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
        engine: &Engine,
        applied: impl FnOnce(Option<&JobInfo>) -> bool,
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
                    let info = engine.get(JobId(id));
                    self.learn_lease(id, info.as_ref())?;
                    self.change(id, change, true, None);
                    self.synced_all();
                    self.refill_due();
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
                // A reschedule of a waiting job to its own due time looks applied either way.
                let noop = self.live(id).is_some_and(|l| {
                    l.state == JobState::Scheduled
                        && matches!(change, Change::Reschedule(d) if d == l.due_ms)
                });
                let info = engine.get(JobId(id));
                // `NoSpace` wrote nothing, so applied nothing (the job may look as if: a resume
                // of a job already at its next occurrence).
                let applied = f != Fault::NothingWritten && applied(info.as_ref());
                if applied {
                    self.learn_lease(id, info.as_ref())?;
                    if noop {
                        if let Some(fair) = self.fair.as_mut() {
                            fair.refill_maybe = true;
                        }
                    } else {
                        self.refill_due();
                    }
                }
                self.change(id, change, applied, Some(f));
            }
        }
        Ok(())
    }

    /// Whether `id` is a recurring job in the engine's memory.
    pub fn recurring(&self, id: u64) -> bool {
        self.jobs
            .get(&id)
            .is_some_and(|j| j.live.is_some() && j.recur.is_some())
    }

    /// Ids of the recurring jobs in memory, in id order.
    pub fn recurring_ids(&self) -> Vec<u64> {
        self.jobs
            .iter()
            .filter(|(_, j)| j.live.is_some() && j.recur.is_some())
            .map(|(&id, _)| id)
            .collect()
    }

    /// A schedule call (`pause_schedule`, `resume_schedule`, `delete_schedule`) of a job that
    /// does not recur: `NotFound`, without a look at anything else (also on an engine that
    /// refuses calls).
    fn not_recurring(
        &self,
        what: &str,
        id: u64,
        r: &Result<Outcome, Fault>,
    ) -> Result<(), Violation> {
        match r {
            Ok(Outcome::NotFound) => Ok(()),
            other => bail!("{what} of job {id}, which does not recur, returned {other:?}"),
        }
    }

    /// `pause_schedule(id)` returned `r`: a reschedule to `PAUSED_DUE_MS`.
    pub fn pause(
        &mut self,
        id: u64,
        r: Result<Outcome, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        if !self.recurring(id) {
            return self.not_recurring("pause_schedule", id, &r);
        }
        self.tally.pauses += u64::from(matches!(r, Ok(Outcome::Done)));
        self.reschedule(id, PAUSED_DUE_MS, r, engine)
    }

    /// `resume_schedule(id)` returned `r`: a reschedule to the first occurrence after the
    /// clock's reading (missed ones are not fired), paused or not.
    pub fn resume(
        &mut self,
        id: u64,
        r: Result<Outcome, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        if !self.recurring(id) {
            return self.not_recurring("resume_schedule", id, &r);
        }
        let recur = self.jobs[&id].recur.clone().expect("recurring");
        let next = recur.next_after(self.clock_ms, self.cron_next);
        self.tally.resumes += u64::from(matches!(r, Ok(Outcome::Done)));
        self.reschedule(id, next, r, engine)
    }

    /// `delete_schedule(id)` returned `r`: a cancel.
    pub fn delete(
        &mut self,
        id: u64,
        r: Result<Outcome, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        if !self.recurring(id) {
            return self.not_recurring("delete_schedule", id, &r);
        }
        self.tally.deletes += u64::from(matches!(r, Ok(Outcome::Done)));
        self.cancel(id, r, engine)
    }

    /// `reschedule_by_key(key, due_ms)` returned `r`: a reschedule of the key's holder, or
    /// `NotFound` (without a look at anything else) when no job holds it.
    pub fn reschedule_by_key(
        &mut self,
        key: &[u8],
        due_ms: u64,
        r: Result<Outcome, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        self.key_space.insert(key.to_vec());
        match self.keys.get(key) {
            Some(&id) => {
                self.tally.reschedules_by_key += u64::from(matches!(r, Ok(Outcome::Done)));
                self.reschedule(id, due_ms, r, engine)
            }
            None => match r {
                Ok(Outcome::NotFound) => Ok(()),
                other => bail!("reschedule_by_key of a key no job holds returned {other:?}"),
            },
        }
    }

    /// `cancel(id)` returned `r`.
    pub fn cancel(
        &mut self,
        id: u64,
        r: Result<Outcome, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        self.changed("cancel", id, Change::Cancel, r, engine, |i| i.is_none())
    }

    /// `cancel_by_key(key)` returned `r`: a cancel of the key's holder, or `NotFound` (without
    /// a look at anything else, also on an engine that refuses calls) when no job holds it.
    pub fn cancel_by_key(
        &mut self,
        key: &[u8],
        r: Result<Outcome, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        self.key_space.insert(key.to_vec());
        match self.keys.get(key) {
            Some(&id) => self.cancel(id, r, engine),
            None => match r {
                Ok(Outcome::NotFound) => Ok(()),
                other => bail!("cancel_by_key of a key no job holds returned {other:?}"),
            },
        }
    }

    /// `reschedule(id, due_ms)` returned `r`.
    pub fn reschedule(
        &mut self,
        id: u64,
        due_ms: u64,
        r: Result<Outcome, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        self.changed(
            "reschedule",
            id,
            Change::Reschedule(due_ms),
            r,
            engine,
            |i| i.is_some_and(|i| i.state == JobState::Scheduled && i.due_ms == due_ms),
        )
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

    /// A recurring job's `Next` after its occurrence ended at `now` (`how`).
    fn next_change(&self, id: u64, now: u64, how: NextHow) -> Change {
        let job = &self.jobs[&id];
        let r = job.recur.as_ref().expect("a recurring job");
        let l = job.live.as_ref().expect("live");
        let (due_ms, passed) = r.next_due(l.due_ms, now, self.cron_next);
        Change::Next {
            due_ms,
            how,
            coalesced: r.misfire == Misfire::Coalesce && passed > 0,
            backfill: matches!(r.misfire, Misfire::FireAll { .. }) && due_ms <= now,
        }
    }

    /// What a claim at `now` does to a ready job whose lease the log holds open (`open`) or
    /// not: the last attempt allowed ran out (a burial, or for a recurring job its next
    /// occurrence, as a failed one); an occurrence found more than the misfire threshold late
    /// under `Misfire::Skip` (skipped to the next); else a claim (an `Expire` first if open).
    fn claim_change(&self, id: u64, open: bool, now: u64, lease_until_ms: u64) -> Change {
        let job = &self.jobs[&id];
        let l = job.live.as_ref().expect("ready");
        if open && l.failures + 1 >= job.max_attempts {
            return match job.recur {
                Some(_) => self.next_change(id, now, NextHow::Failed),
                None => Change::Bury {
                    at_ms: now,
                    expired: true,
                    reason: REASON_EXPIRED,
                },
            };
        }
        if !open
            && job
                .recur
                .as_ref()
                .is_some_and(|r| r.misfire == Misfire::Skip)
            && l.due_ms.saturating_add(self.misfire_threshold_ms) < now
        {
            return self.next_change(id, now, NextHow::Skipped);
        }
        Change::Claim { lease_until_ms }
    }

    /// What a claim of a ready job may do: one change per state its lease may have in the log
    /// (a claim whatever the lease is listed once, with the lease unknown).
    fn claim_options(&self, id: u64, now: u64, lease_until_ms: u64) -> Vec<ClaimOption> {
        let l = self.live(id).expect("ready");
        let opens: &[bool] = match l.lease_open {
            Some(true) => &[true],
            Some(false) => &[false],
            None => &[true, false],
        };
        let mut out: Vec<ClaimOption> = Vec::new();
        for &open in opens {
            let change = self.claim_change(id, open, now, lease_until_ms);
            if matches!(change, Change::Claim { .. }) {
                if !out.iter().any(|(_, c)| matches!(c, Change::Claim { .. })) {
                    out.push((l.lease_open, change));
                }
            } else {
                out.push((Some(open), change));
            }
        }
        out
    }

    /// Which of a claim's non-claim options (a burial, a next occurrence) the engine shows
    /// applied, if any.
    fn unclaimed_option(
        &self,
        id: u64,
        options: &[ClaimOption],
        engine: &Engine,
    ) -> Option<ClaimOption> {
        let l = self.live(id).expect("ready");
        let info = engine.get(JobId(id));
        let dead = engine.dead_letter(JobId(id)).is_some();
        let matching: Vec<ClaimOption> = options
            .iter()
            .filter(|(_, c)| match *c {
                Change::Bury { .. } => info.is_none() && dead,
                Change::Next { due_ms, .. } => info.as_ref().is_some_and(|i| {
                    (i.state, i.due_ms, i.attempt, i.failures)
                        == (JobState::Scheduled, due_ms, l.attempt, 0)
                }),
                _ => false,
            })
            .copied()
            .collect();
        match matching.len() {
            0 => None,
            1 => Some(matching[0]),
            _ => {
                // A failed occurrence or a skipped one, due alike: the failed one counts.
                let failed = engine.stats().failed > self.counters.failed;
                matching.into_iter().find(|(_, c)| {
                    matches!(c, Change::Next { how, .. } if (*how == NextHow::Failed) == failed)
                })
            }
        }
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
        let mut seen = BTreeSet::new();
        let options: Vec<Option<Vec<ClaimOption>>> = ids
            .iter()
            .map(|id| {
                (self.live(id.0).is_some_and(|l| l.state == JobState::Ready) && seen.insert(id.0))
                    .then(|| self.claim_options(id.0, now, lease_until_ms))
            })
            .collect();
        match r {
            Ok(got) => {
                if got.len() != ids.len() {
                    bail!("claim of {} ids returned {} answers", ids.len(), got.len());
                }
                // Whether the engine synced before it returned: it does when it wrote more than
                // plain claims of waiting jobs (an `Expire`, a burial, a skipped occurrence).
                let mut synced = false;
                for ((id, c), opts) in ids.iter().zip(&got).zip(&options) {
                    let claims = opts
                        .as_ref()
                        .is_some_and(|o| o.iter().any(|(_, c)| matches!(c, Change::Claim { .. })));
                    match (c, opts) {
                        (None, None) => {}
                        (Some(c), Some(_)) if claims => {
                            let info = engine.get(*id);
                            self.learn_lease(id.0, info.as_ref())?;
                            self.check_claimed(id.0, c, lease_until_ms)?;
                            synced |= self.live(id.0).and_then(|l| l.lease_open) == Some(true);
                            self.change(id.0, Change::Claim { lease_until_ms }, true, None);
                        }
                        (None, Some(o)) => {
                            let Some((open, change)) = self.unclaimed_option(id.0, o, engine)
                            else {
                                bail!(
                                    "claim of job {id} returned None; the model says {o:?} ({:?})",
                                    self.jobs.get(&id.0).map(|j| (&j.may, &j.live))
                                );
                            };
                            self.set_lease(id.0, open);
                            self.change(id.0, change, true, None);
                            synced = true;
                        }
                        (c, _) => bail!(
                            "claim of job {id} returned {:?}; the model has {:?} (options {opts:?})",
                            c.as_ref().map(|c| c.attempt),
                            self.jobs
                                .get(&id.0)
                                .map(|j| (&j.may, &j.live, j.max_attempts))
                        ),
                    }
                }
                // Plain claims are handed out without a sync: what they appended stays unsure
                // until a later sync (a claim that waited for an earlier record's sync is not
                // counted on either).
                if synced {
                    self.synced_all();
                }
                self.refill_due();
            }
            Err(f) => {
                let mut applied = false;
                for (id, opts) in ids.iter().zip(&options) {
                    let Some(opts) = opts else {
                        continue;
                    };
                    let l = self.live(id.0).expect("ready");
                    // With the lease's state in the log unknown, either rule may have applied.
                    let attempts = [
                        l.attempt + 1,
                        l.attempt + 1 + (self.crashes - l.crashes_seen),
                    ];
                    let attempts = match l.lease_open {
                        Some(true) => &attempts[..1],
                        Some(false) => &attempts[1..],
                        None => &attempts[..],
                    };
                    let info = engine.get(*id);
                    let claimed = info.as_ref().is_some_and(|i| {
                        i.state == JobState::Running && attempts.contains(&i.attempt)
                    });
                    if claimed {
                        self.learn_lease(id.0, info.as_ref())?;
                        self.change(id.0, Change::Claim { lease_until_ms }, true, Some(f));
                        applied = true;
                    } else if let Some((open, change)) = self.unclaimed_option(id.0, opts, engine) {
                        self.set_lease(id.0, open);
                        self.change(id.0, change, true, Some(f));
                        applied = true;
                    } else {
                        for &(_, change) in opts {
                            self.change(id.0, change, false, Some(f));
                        }
                    }
                }
                if applied {
                    self.refill_due();
                } else if let Some(fair) = self.fair.as_mut() {
                    // A claim may fail waiting for the sync of an earlier record of its job
                    // (no job has two claims unsynced), after the engine fed the channel for
                    // the ids it looked at.
                    fair.refill_maybe = true;
                }
            }
        }
        Ok(())
    }

    /// The engine feeds the ready channel at the end of this call (with fairness on).
    fn refill_due(&mut self) {
        if let Some(f) = self.fair.as_mut() {
            f.refill_due = true;
        }
    }

    fn set_lease(&mut self, id: u64, open: Option<bool>) {
        if let Some(l) = self.jobs.get_mut(&id).and_then(|j| j.live.as_mut()) {
            l.lease_open = open;
        }
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
        let first = !self.handed.contains_key(&id);
        if (first && c.due_ms > c.ready_at_ms) || c.ready_at_ms > max_clock {
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
        if let Some(&before) = self.handed.get(&id)
            && c.attempt <= before
        {
            bail!(
                "job {id} claimed with attempt {} after attempt {before} was handed out: a \
                 fencing token handed out twice (or going back)",
                c.attempt
            );
        }
        self.handed.insert(id, c.attempt);
        let crashes = self.crashes;
        let job = self.jobs.get_mut(&id).expect("claimable");
        let l = job.live.as_ref().expect("claimable");
        let want = (
            id,
            next_attempt(l, crashes),
            l.due_ms,
            l.ready_at_ms,
            lease_until_ms,
        );
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

    /// `complete_batch` or `complete` of `claims` returned `r` (`how` is `Completed`; a
    /// permanent failure is [`Model::ended_attempt`]).
    pub fn finish(
        &mut self,
        claims: &[Claimed],
        how: Gone,
        r: Result<Vec<bool>, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        assert_eq!(how, Gone::Completed, "finish completes");
        if matches!(r, Err(Fault::NotOpen)) {
            return Ok(());
        }
        // Checked against the state before the call; a job named twice finishes once.
        let mut seen = BTreeSet::new();
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
        // A recurring job's completion is its `Next`; a finish does not move the engine's time.
        let now = self.peek_now();
        let completion = |m: &Model, id: u64| match m.jobs[&id].recur {
            Some(_) => m.next_change(id, now, NextHow::Completed),
            None => Change::Complete,
        };
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
                        (false, Answer::Either) => self.set_lease(c.id.0, Some(false)),
                        (true, Answer::Yes | Answer::Either) => {
                            self.set_lease(c.id.0, Some(true));
                            let change = completion(self, c.id.0);
                            self.change(c.id.0, change, true, None);
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
                    self.refill_due();
                }
            }
            Err(f) => {
                let mut any = false;
                for (c, want) in claims.iter().zip(&expect) {
                    if *want == Answer::No {
                        continue;
                    }
                    let change = completion(self, c.id.0);
                    let info = engine.get(c.id);
                    let applied = match change {
                        Change::Next { due_ms, .. } => info.is_some_and(|i| {
                            (i.state, i.due_ms, i.attempt)
                                == (JobState::Scheduled, due_ms, c.attempt)
                        }),
                        _ => info.is_none(),
                    };
                    if applied {
                        self.set_lease(c.id.0, Some(true));
                        any = true;
                    }
                    self.change(c.id.0, change, applied, Some(f));
                }
                if any {
                    self.refill_due();
                }
            }
        }
        Ok(())
    }

    /// `fail`, `fail_permanently` or `retry_at` (`ending`) of `c` returned `r`.
    pub fn ended_attempt(
        &mut self,
        c: &Claimed,
        ending: Ending,
        r: Result<bool, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        if matches!(r, Err(Fault::NotOpen)) {
            return Ok(());
        }
        let want = self.can_finish(c);
        let id = c.id.0;
        // A finish does not move the engine's time; it uses the later of it and the clock.
        let t = self.peek_now();
        let change = (want != Answer::No).then(|| {
            let job = &self.jobs[&id];
            let l = job.live.as_ref().expect("finishable");
            let n = l.failures + 1;
            match ending {
                Ending::RetryAt(due_ms) => Change::Retry {
                    due_ms,
                    due_hi_ms: due_ms,
                    failed: None,
                },
                Ending::Fail { retryable, reason } if retryable && n < job.max_attempts => {
                    Change::Retry {
                        due_ms: t,
                        due_hi_ms: t.saturating_add(job.backoff.ceiling_ms(n)),
                        failed: Some(reason),
                    }
                }
                // A recurring job is never dead: its next occurrence, as a failed one.
                Ending::Fail { .. } if job.recur.is_some() => {
                    self.next_change(id, t, NextHow::Failed)
                }
                Ending::Fail { reason, .. } => Change::Bury {
                    at_ms: t,
                    expired: false,
                    reason,
                },
            }
        });
        // The engine's memory after the call shows whether it applied, and a retry's draw.
        let seen = |engine: &Engine, change: Change| -> Result<Option<Change>, Violation> {
            let info = engine.get(c.id);
            Ok(match change {
                Change::Retry {
                    due_ms,
                    due_hi_ms,
                    failed,
                } => match info {
                    Some(i) if i.state == JobState::Scheduled && i.attempt == c.attempt => {
                        if i.due_ms < due_ms || i.due_ms > due_hi_ms {
                            bail!(
                                "job {id} retries at {}, outside {due_ms}..={due_hi_ms} (the \
                                 backoff's ceiling for this failure)",
                                i.due_ms
                            );
                        }
                        Some(Change::Retry {
                            due_ms: i.due_ms,
                            due_hi_ms: i.due_ms,
                            failed,
                        })
                    }
                    _ => None,
                },
                Change::Bury { .. } => {
                    (info.is_none() && engine.dead_letter(c.id).is_some()).then_some(change)
                }
                Change::Next { due_ms, .. } => info
                    .is_some_and(|i| {
                        (i.state, i.due_ms, i.attempt, i.failures)
                            == (JobState::Scheduled, due_ms, c.attempt, 0)
                    })
                    .then_some(change),
                _ => unreachable!("an ending retries, buries or moves on"),
            })
        };
        match r {
            Ok(ok) => match (ok, want) {
                (false, Answer::No) => {}
                (false, Answer::Either) => self.set_lease(id, Some(false)),
                (true, Answer::Yes | Answer::Either) => {
                    self.set_lease(id, Some(true));
                    let change = change.expect("finishable");
                    let Some(applied) = seen(engine, change)? else {
                        bail!(
                            "{ending:?} of job {id} answered true, but the engine shows {:?} / \
                             {:?}; the model expects {change:?}",
                            engine.get(c.id),
                            engine.dead_letter(c.id)
                        );
                    };
                    self.change(id, applied, true, None);
                    self.synced_all();
                    self.refill_due();
                }
                (ok, want) => bail!(
                    "{ending:?} of job {id} attempt {} answered {ok}; the model says {want:?} \
                     ({:?})",
                    c.attempt,
                    self.jobs.get(&id).map(|j| (&j.may, &j.live))
                ),
            },
            Err(f) => {
                let Some(change) = change else {
                    return Ok(());
                };
                match seen(engine, change)? {
                    Some(applied) => {
                        self.set_lease(id, Some(true));
                        self.change(id, applied, true, Some(f));
                        self.refill_due();
                    }
                    None => self.change(id, change, false, Some(f)),
                }
            }
        }
        Ok(())
    }

    /// `extend_lease(c, lease_ms)` returned `r`.
    pub fn extended(
        &mut self,
        c: &Claimed,
        lease_ms: u64,
        r: Result<Option<u64>, Fault>,
    ) -> Result<(), Violation> {
        let id = c.id.0;
        let until = self.peek_now().saturating_add(lease_ms);
        let want = self.live(id).is_some_and(|l| {
            l.state == JobState::Running && l.lease_open == Some(true) && l.attempt == c.attempt
        });
        match r {
            Err(Fault::NotOpen | Fault::NothingWritten) => {}
            Ok(None) if !want => {}
            Ok(Some(got)) if want => {
                if got != until {
                    bail!(
                        "extend_lease of job {id} moved the lease to {got}; the model says {until}"
                    );
                }
                // The `Extend` leaves the log as it was: the lease open by this attempt.
                let l = self
                    .jobs
                    .get_mut(&id)
                    .and_then(|j| j.live.as_mut())
                    .expect("running");
                l.deadline_ms = until;
                l.deadline_alt_ms = None;
                self.tally.extends += 1;
                self.synced_all();
            }
            Err(Fault::Unknown) if want => {
                let l = self
                    .jobs
                    .get_mut(&id)
                    .and_then(|j| j.live.as_mut())
                    .expect("running");
                l.deadline_alt_ms = Some(until);
            }
            other => bail!(
                "extend_lease of job {id} attempt {} returned {other:?}; the model says {}",
                c.attempt,
                if want {
                    "it extends"
                } else {
                    "it writes nothing"
                }
            ),
        }
        Ok(())
    }

    // ---- the dead-letter set --------------------------------------------------------------

    /// Ids of the jobs in the dead-letter set in memory, in id order.
    pub fn dead_ids(&self) -> Vec<u64> {
        self.jobs
            .iter()
            .filter(|(_, j)| j.dead.is_some())
            .map(|(&id, _)| id)
            .collect()
    }

    /// `requeue_dead(ids)` (`requeue`) or `purge_dead(ids)` returned `r`.
    pub fn dead_changed(
        &mut self,
        ids: &[JobId],
        requeue: bool,
        r: Result<Vec<bool>, Fault>,
        engine: &Engine,
    ) -> Result<(), Violation> {
        if matches!(r, Err(Fault::NotOpen)) || ids.is_empty() {
            return Ok(());
        }
        let now = self.observe();
        let mut seen = BTreeSet::new();
        let expect: Vec<bool> = ids
            .iter()
            .map(|id| self.jobs.get(&id.0).is_some_and(|j| j.dead.is_some()) && seen.insert(id.0))
            .collect();
        match r {
            Ok(got) => {
                if got != expect {
                    bail!(
                        "{} of {ids:?} answered {got:?}; the model says {expect:?}",
                        if requeue {
                            "requeue_dead"
                        } else {
                            "purge_dead"
                        }
                    );
                }
                for (id, _) in ids.iter().zip(&expect).filter(|(_, w)| **w) {
                    self.dead_change(id.0, requeue, now, true, None);
                }
                if expect.iter().any(|w| *w) {
                    self.synced_all();
                }
            }
            Err(f) => {
                for (id, _) in ids.iter().zip(&expect).filter(|(_, w)| **w) {
                    let applied = if requeue {
                        engine.get(*id).is_some()
                    } else {
                        engine.dead_letter(*id).is_none()
                    };
                    self.dead_change(id.0, requeue, now, applied, Some(f));
                }
            }
        }
        Ok(())
    }

    /// `purge_dead_where(None)` returned `r`: every dead job purged, page by page.
    pub fn purged_all(&mut self, r: Result<u64, Fault>, engine: &Engine) -> Result<(), Violation> {
        let dead = self.dead_ids();
        match r {
            Ok(n) => {
                if n != dead.len() as u64 {
                    bail!(
                        "purge_dead_where purged {n}; the model has {} dead",
                        dead.len()
                    );
                }
                if !dead.is_empty() {
                    self.observe();
                }
                let now = self.engine_now_ms;
                for id in &dead {
                    self.dead_change(*id, false, now, true, None);
                }
                if !dead.is_empty() {
                    self.synced_all(); // nothing to purge: nothing written, nothing waited for
                }
            }
            Err(Fault::NotOpen) => {}
            Err(f) => {
                // A page purged before a failed one took effect; the failed one may have.
                if !dead.is_empty() {
                    self.observe();
                }
                let now = self.engine_now_ms;
                for id in dead {
                    let applied = engine.dead_letter(JobId(id)).is_none();
                    self.dead_change(id, false, now, applied, Some(f));
                }
            }
        }
        Ok(())
    }

    /// A `Requeue` (due `now`) or `Purge` of dead job `id`, applied in memory or not.
    fn dead_change(
        &mut self,
        id: u64,
        requeue: bool,
        now: u64,
        applied: bool,
        fault: Option<Fault>,
    ) {
        let b = self.jobs[&id].dead.expect("dead");
        let alt = if requeue {
            Alt::Present(Logged {
                due_ms: now,
                due_hi_ms: now,
                attempt: b.attempt,
                crashes_seen: self.crashes,
                lease_open: false,
                failures: 0,
                last_error: None,
            })
        } else {
            Alt::Gone(Gone::Purged)
        };
        if applied || fault == Some(Fault::Unknown) {
            self.appended_records(id, &[alt], applied);
        }
        if !applied {
            return;
        }
        self.set_dead(id, None);
        if requeue {
            self.tally.requeues += 1;
        } else {
            self.tally.purges += 1;
        }
        if requeue {
            self.set_live(
                id,
                Some(Live {
                    attempt: b.attempt,
                    ..self.scheduled_live(now)
                }),
            );
        } else {
            self.release_key(id);
        }
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
        self.run_timers_on(drained, None)
    }

    /// [`Model::run_timers`]; with fairness on, `engine` shows which of two possible lease
    /// deadlines held (the ready channel no longer does) and the tenants' figures.
    pub fn run_timers_on(
        &mut self,
        drained: &[JobId],
        engine: Option<&Engine>,
    ) -> Result<(), Violation> {
        let now = self.observe();
        let lease = self.lease_ms;
        let room =
            self.in_state[state_index(JobState::Ready)].saturating_sub(self.queue.len() as u64);
        // A lease whose extension failed with an I/O error runs out at one of two deadlines:
        // whether its id came out tells which (a running job is sent only by its expiry);
        // with fairness on, whether the engine shows it ready.
        let fair = self.fair.is_some();
        let sent_now: BTreeSet<u64> = if fair {
            let engine = engine.expect("fairness needs the engine's view");
            self.jobs
                .iter()
                .filter(|(_, j)| j.live.as_ref().is_some_and(|l| l.deadline_alt_ms.is_some()))
                .filter(|&(&id, _)| {
                    engine
                        .get(JobId(id))
                        .is_some_and(|i| i.state == JobState::Ready)
                })
                .map(|(&id, _)| id)
                .collect()
        } else {
            drained
                .iter()
                .skip(self.queue.len())
                .map(|id| id.0)
                .collect()
        };
        for (&id, job) in self.jobs.iter_mut() {
            let Some(l) = job.live.as_mut() else {
                continue;
            };
            let Some(alt) = l.deadline_alt_ms else {
                continue;
            };
            if l.state != JobState::Running {
                l.deadline_alt_ms = None;
                continue;
            }
            let (a, b) = (l.deadline_ms.min(alt), l.deadline_ms.max(alt));
            if sent_now.contains(&id) {
                l.deadline_ms = a; // expired: the earlier one had passed at least
                l.deadline_alt_ms = None;
            } else if a <= now {
                l.deadline_ms = b; // not expired: the later one, if it is still ahead
                l.deadline_alt_ms = None;
            }
        }
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
                    self.tally.occurrences_fired += u64::from(job.recur.is_some());
                    sent.push(id);
                }
                JobState::Running if l.deadline_ms <= now => {
                    self.in_state[state_index(JobState::Running)] -= 1;
                    self.in_state[state_index(JobState::Ready)] += 1;
                    l.state = JobState::Ready;
                    l.ready_at_ms = now;
                    l.deadline_ms = now + lease;
                    l.deadline_alt_ms = None;
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
        if fair {
            return self.fair_timers(&sent, &requeues, drained, engine.expect("checked"));
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

    /// The fair half of `run_timers`: the jobs made ready (`sent`) join their tenants' queues,
    /// the ready ones whose claim deadline came (`requeues`) are queued again if fed at least
    /// a lease ago, and the channel is fed if any of that happened.
    fn fair_timers(
        &mut self,
        sent: &[u64],
        requeues: &[u64],
        drained: &[JobId],
        engine: &Engine,
    ) -> Result<(), Violation> {
        let now = self.engine_now_ms;
        let lease = self.lease_ms;
        let tenants: Vec<(u64, u32)> = sent
            .iter()
            .chain(requeues)
            .map(|&id| (id, self.jobs[&id].tenant))
            .collect();
        let fair = self.fair.as_mut().expect("fair");
        let stamp = fair.next_stamp();
        for &(id, tenant) in &tenants[..sent.len()] {
            fair.enqueue(tenant, id, stamp);
        }
        for &(id, tenant) in &tenants[sent.len()..] {
            let q = fair.queues.entry(tenant).or_default();
            if let Some(&at) = q.fed.get(&id)
                && now.saturating_sub(at) >= lease
            {
                // Whoever took its id did not claim it: queued again.
                q.fed.remove(&id);
                fair.enqueue(tenant, id, stamp);
            }
        }
        fair.refill_due |= !tenants.is_empty();
        self.fed(drained, engine)?;
        // Never early, checked as a job fires, against the highest clock reading so far.
        for id in drained {
            if let Some(l) = self.live(id.0)
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

    /// Running jobs per tenant in the engine's memory.
    fn running_by_tenant(&self) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        for j in self.jobs.values() {
            if j.live
                .as_ref()
                .is_some_and(|l| l.state == JobState::Running)
            {
                *out.entry(j.tenant).or_default() += 1;
            }
        }
        out
    }

    /// With fairness on, after every call: the ids the call fed into the ready channel
    /// (`drained`, all of it) are what the feeding rules allow, and the tenants' figures
    /// (`Engine::tenant_stats`) are the model's. Without fairness, nothing.
    pub fn fed(&mut self, drained: &[JobId], engine: &Engine) -> Result<(), Violation> {
        if self.fair.is_none() {
            return Ok(());
        }
        let now = self.engine_now_ms;
        let running = self.running_by_tenant();
        let tenant_of: Vec<(u64, u32)> = drained
            .iter()
            .map(|id| (id.0, self.jobs.get(&id.0).map_or(u32::MAX, |j| j.tenant)))
            .collect();
        let fair = self.fair.as_mut().expect("fair");
        let maybe = std::mem::take(&mut fair.refill_maybe);
        let due = std::mem::take(&mut fair.refill_due) || (maybe && !drained.is_empty());
        if !due && !drained.is_empty() {
            bail!("the ready channel was fed {drained:?} by a call that feeds nothing");
        }
        if due {
            // Per tenant: the room its limit leaves, and what may be fed.
            let mut plan: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
            for (&t, q) in &fair.queues {
                let limit = u64::from(fair.limit(t));
                let room = if limit == 0 {
                    u64::MAX
                } else {
                    limit.saturating_sub(running.get(&t).copied().unwrap_or(0) + q.fed.len() as u64)
                };
                plan.insert(t, (room, room.min(q.waiting.len() as u64)));
            }
            let total: u64 = plan.values().map(|p| p.1).sum();
            // The channel was empty when the call began (the drivers drain it after each).
            let binds = total > fair.depth as u64;
            let mut got: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
            for &(id, t) in &tenant_of {
                if !fair
                    .queues
                    .get(&t)
                    .is_some_and(|q| q.waiting.contains_key(&id))
                {
                    bail!(
                        "the ready channel was fed job {id} (tenant {t}), which is not waiting in \
                         its tenant's queue ({:?})",
                        fair.queues.get(&t)
                    );
                }
                got.entry(t).or_default().push(id);
            }
            if binds && drained.len() != fair.depth {
                bail!(
                    "the ready channel was fed {} ids; {total} could go and it holds {}",
                    drained.len(),
                    fair.depth
                );
            }
            for (&t, &(room, n)) in &plan {
                let ids = got.remove(&t).unwrap_or_default();
                let k = ids.len() as u64;
                if (!binds && k != n) || k > n {
                    bail!(
                        "tenant {t} (limit {}, running {}, fed {}) was fed {ids:?}; the model \
                         says {n}{} of its {} waiting",
                        fair.limit(t),
                        running.get(&t).copied().unwrap_or(0),
                        fair.queues[&t].fed.len(),
                        if binds { " at most" } else { "" },
                        fair.queues[&t].waiting.len()
                    );
                }
                let q = fair.queues.get_mut(&t).expect("planned");
                // Its queue's order: none left waiting was queued before one fed.
                let fed_last = ids.iter().map(|id| q.waiting[id]).filter(|&s| s > 0).max();
                let left_first = q
                    .waiting
                    .iter()
                    .filter(|(id, _)| !ids.contains(id))
                    .map(|(_, &s)| s)
                    .filter(|&s| s > 0)
                    .min();
                if let (Some(a), Some(b)) = (fed_last, left_first)
                    && a > b
                {
                    bail!(
                        "tenant {t}: fed {ids:?} ahead of jobs queued before them ({:?})",
                        q.waiting
                    );
                }
                for id in &ids {
                    q.waiting.remove(id);
                    q.fed.insert(*id, now);
                }
                // Fed less than its room, the channel not filled: the queue was emptied,
                // stale ids and all.
                if drained.len() < fair.depth && k < room {
                    q.maybe.clear();
                }
            }
            if let Some((t, ids)) = got.into_iter().next() {
                bail!("tenant {t} was fed {ids:?} with nothing queued");
            }
            self.tally.fed += drained.len() as u64;
            let fair = self.fair.as_ref().expect("fair");
            self.tally.tenant_limited += fair
                .queues
                .iter()
                .filter(|&(&t, q)| {
                    let limit = u64::from(fair.limit(t));
                    !q.waiting.is_empty()
                        && limit > 0
                        && running.get(&t).copied().unwrap_or(0) + q.fed.len() as u64 >= limit
                })
                .count() as u64;
        }
        self.check_fair(engine)
    }

    /// Every ready job waits in its tenant's queue or is fed, and the engine's figures per
    /// tenant are the model's (a queue's stale ids within what may be left of them).
    fn check_fair(&mut self, engine: &Engine) -> Result<(), Violation> {
        let running = self.running_by_tenant();
        let fair = self.fair.as_mut().expect("fair");
        for (&id, j) in &self.jobs {
            if j.live.as_ref().is_some_and(|l| l.state == JobState::Ready) {
                let q = fair.queues.get(&j.tenant);
                if !q.is_some_and(|q| q.waiting.contains_key(&id) || q.fed.contains_key(&id)) {
                    bail!(
                        "ready job {id} is neither in tenant {}'s queue nor fed (model)",
                        j.tenant
                    );
                }
            }
        }
        let stats = engine.tenant_stats();
        let mut listed = BTreeSet::new();
        for t in &stats {
            listed.insert(t.tenant);
            let empty = TenantQueue::default();
            let q = fair.queues.get(&t.tenant).unwrap_or(&empty);
            let (lo, hi) = (
                q.waiting.len() as u64,
                (q.waiting.len() + q.maybe.len()) as u64,
            );
            let want_running = running.get(&t.tenant).copied().unwrap_or(0);
            if t.running != want_running
                || t.in_channel != q.fed.len() as u64
                || t.queued < lo
                || t.queued > hi
                || t.running_max != fair.limit(t.tenant)
            {
                bail!(
                    "tenant {}: the engine shows {t:?}; the model has {want_running} running, {} \
                     fed ({:?}), {lo} to {hi} queued ({:?}, maybe {:?}), limit {}",
                    t.tenant,
                    q.fed.len(),
                    q.fed,
                    q.waiting,
                    q.maybe,
                    fair.limit(t.tenant)
                );
            }
            if t.queued == lo
                && let Some(q) = fair.queues.get_mut(&t.tenant)
            {
                q.maybe.clear();
            }
        }
        for (&t, q) in &fair.queues {
            let busy = !q.waiting.is_empty() || !q.fed.is_empty() || running.contains_key(&t);
            if busy && !listed.contains(&t) {
                bail!("tenant {t} has jobs queued, fed or running, but the engine lists none");
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
            job.dead = None;
        }
        self.in_state = [0; 3];
        self.dead_count = 0;
        self.keys.clear();
        self.queue.clear();
        if let Some(f) = self.fair.as_mut() {
            f.queues.clear();
            f.refill_due = false;
            f.refill_maybe = false;
        }
    }

    /// Right after a successful open (the clock read `clock_ms` throughout): compares every job
    /// with what recovery rebuilt, then resolves every uncertainty to it and takes the
    /// engine's memory as the open leaves it (missed and interrupted jobs ready and queued in
    /// due order, the rest scheduled, dead ones in the dead-letter set). Returns the jobs found
    /// wrong, with why, and leaves the model untouched if there are any.
    pub fn opened(&mut self, engine: &Engine) -> Result<Vec<(u64, String)>, Violation> {
        self.id_skips += 1;
        let now = self.clock_ms;
        let mut wrong = Vec::new();
        let mut resolved: Vec<(u64, Vec<Alt>)> = Vec::with_capacity(self.jobs.len());
        for (&id, job) in &self.jobs {
            let info = engine.get(JobId(id));
            let dead = engine.dead_letter(JobId(id));
            let mut fits: Vec<Alt> = job
                .may
                .iter()
                .filter(|a| shows(a, info.as_ref(), dead.as_ref(), now))
                .map(|a| match (a, &info) {
                    // A retry's range resolves to the due time recovery shows.
                    (Alt::Present(l), Some(i)) => Alt::Present(Logged {
                        due_ms: i.due_ms,
                        due_hi_ms: i.due_ms,
                        ..*l
                    }),
                    _ => *a,
                })
                .collect();
            fits.dedup();
            let key = |k: Option<&[u8]>| k != job.key.as_deref();
            let tenant = info
                .as_ref()
                .map(|i| i.tenant)
                .or(dead.as_ref().map(|d| d.tenant));
            if fits.is_empty() {
                wrong.push((id, why_wrong(job, info.as_ref(), dead.as_ref())));
            } else if tenant.is_some_and(|t| t != job.tenant) {
                wrong.push((
                    id,
                    format!("recovered in tenant {tenant:?}, not {}", job.tenant),
                ));
            } else if let Some(info) = &info
                && info.payload[..] != job.payload[..]
            {
                wrong.push((id, "recovered with another payload".to_owned()));
            } else if let Some(d) = &dead
                && d.payload[..] != job.payload[..]
            {
                wrong.push((id, "dead with another payload".to_owned()));
            } else if info.as_ref().is_some_and(|i| key(i.key.as_deref()))
                || dead.as_ref().is_some_and(|d| key(d.key.as_deref()))
            {
                wrong.push((
                    id,
                    format!("recovered with another key (not {:?})", job.key),
                ));
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
                // The tenant too: a spec of another tenant alike in the rest is not this job.
                let matching = |s: &Spec| {
                    s.due_ms == info.due_ms
                        && s.payload[..] == info.payload[..]
                        && s.key.as_deref() == info.key.as_deref()
                        && s.tenant == info.tenant
                };
                let Some(at) = self.phantoms.iter().position(matching) else {
                    bail!(
                        "recovery shows job {id} (due {}, {} bytes) that no schedule call could \
                         have written",
                        info.due_ms,
                        info.payload.len()
                    );
                };
                let spec = self.phantoms.remove(at);
                let alt = Self::fresh(spec.due_ms, self.crashes);
                if info.attempt != 0 || !shows(&alt, Some(&info), None, now) {
                    bail!("recovery shows never-acknowledged job {id} as {info:?}");
                }
                // Two failed specs alike but for the flag or policy: the claim tells which
                // flag; the policies must agree for the model to follow it. (Seed 210,175,330
                // failed two tenants' specs alike in due and payload: the tenant, which `get`
                // shows, now tells them apart above.)
                let alike: Vec<&Spec> = self.phantoms.iter().filter(|s| matching(s)).collect();
                let binary =
                    (!alike.iter().any(|s| s.binary != spec.binary)).then_some(spec.binary);
                if alike
                    .iter()
                    .any(|s| (s.policy, &s.recur) != (spec.policy, &spec.recur))
                {
                    bail!(
                        "phantom job {id}: two failed specs alike but for their retry policy \
                         (the drivers do not make such): {spec:?} and {alike:?}, shown as {info:?}"
                    );
                }
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
        // A recurring job's completed occurrences (its `Next` records) count too, and so do
        // its failed ones (with the burials); one of a failed call holds exactly when recovery
        // shows the state it leaves.
        let mut occurrences = 0u64;
        for (id, fits) in &resolved {
            let job = self.jobs.get_mut(id).expect("listed");
            for (alt, failed) in std::mem::take(&mut job.next_unsure) {
                if fits.contains(&alt) {
                    if failed {
                        job.buries += 1;
                    } else {
                        job.occurrences_done += 1;
                    }
                }
            }
            occurrences += u64::from(job.occurrences_done);
        }
        for (kind, got) in [
            (Gone::Completed, s.completed),
            (Gone::Cancelled, s.cancelled),
        ] {
            let (mut lo, mut hi) = ended(kind);
            if kind == Gone::Completed {
                lo += occurrences;
                hi += occurrences;
            }
            if got < lo || got > hi {
                bail!("recovery counts {got} jobs {kind:?}; the model says {lo} to {hi}");
            }
        }
        // Burials: every `Bury` the log holds counts once (a requeued job may die again). One
        // of a failed call holds exactly when recovery shows the job dead.
        let mut buries = 0u64;
        for (id, fits) in &resolved {
            let job = self.jobs.get_mut(id).expect("listed");
            if job.bury_unsure {
                job.bury_unsure = false;
                job.buries += u32::from(matches!(fits[0], Alt::Dead(_)));
            }
            buries += u64::from(job.buries);
        }
        if s.failed != buries {
            bail!(
                "recovery counts {} jobs failed (buried); the log holds {buries} burials",
                s.failed
            );
        }
        // Resolved: the engine's memory is what the open made of the log.
        self.engine_now_ms = now;
        self.in_state = [0; 3];
        self.dead_count = 0;
        self.keys.clear();
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
            job.dead = None;
            job.live = match fits[0] {
                Alt::Gone(_) => None,
                Alt::Dead(b) => {
                    job.dead = Some(b);
                    None
                }
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
                        crashes_seen: l.crashes_seen,
                        failures: l.failures,
                        last_error: l.last_error,
                        lease_open,
                        deadline_ms: now + lease,
                        deadline_alt_ms: None,
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
            if job.live.is_some() || job.dead.is_some() {
                self.dead_count += u64::from(job.dead.is_some());
                if let Some(k) = &job.key {
                    self.keys.insert(k.clone(), id);
                }
            }
        }
        for (id, spec, binary) in phantoms {
            let alt = Self::fresh(spec.due_ms, self.crashes);
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
                ..self.scheduled_live(spec.due_ms)
            };
            let mut job = self.new_job(&spec, vec![alt], false, Some(live));
            job.binary = binary;
            if let Some(k) = &spec.key {
                self.keys.insert(k.clone(), id);
            }
            self.learn(id, job);
            self.id_floor = self.id_floor.max(id);
        }
        // Missed jobs go to the ready channel at once, in due order (ties in id order); with
        // fairness on, into their tenants' queues in that order, each fed at once if its
        // tenant's limit and the channel's depth leave room (nothing runs yet).
        missed.sort_unstable();
        self.queue = missed.iter().map(|&(_, id)| id).collect();
        if let Some(f) = self.fair.as_mut() {
            f.queues.clear();
            f.refill_due = false;
            f.refill_maybe = false;
            let mut channel = Vec::new();
            for &(_, id) in &missed {
                let t = self.jobs[&id].tenant;
                let stamp = f.next_stamp();
                f.enqueue(t, id, stamp);
                let limit = f.limit(t) as usize;
                let q = f.queues.get_mut(&t).expect("enqueued");
                if channel.len() < f.depth && (limit == 0 || q.fed.len() < limit) {
                    q.waiting.remove(&id);
                    q.fed.insert(id, now);
                    channel.push(id);
                }
            }
            self.tally.fed += channel.len() as u64;
            self.queue = channel;
        }
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
            retried: 0,
            dedup_lo: 0,
            dedup_hi: 0,
        };
        let crashes = engine.stats().crashed_runs;
        if crashes < u64::from(self.crashes) {
            bail!(
                "the engine counts {crashes} crashed runs after {} before",
                self.crashes
            );
        }
        self.crashes = crashes as u32;
        self.check_counts(engine)?;
        self.check_keys(engine)?;
        self.check_dead(engine)?;
        Ok(Vec::new())
    }

    // ---- whole-state checks ---------------------------------------------------------------

    /// The engine's counts (per state, finished, dead, retried, deduplicated, fired, the ready
    /// channel's depth) are the model's.
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
        let got = (s.completed, s.cancelled, s.failed, s.dead);
        let want = (c.completed, c.cancelled, c.failed, self.dead_count);
        if got != want {
            bail!(
                "(completed, cancelled, failed, dead): the engine counts {got:?}, the model \
                 {want:?}"
            );
        }
        let got = (s.fired, s.redelivered, s.requeued, s.retried);
        let want = (c.fired, c.redelivered, c.requeued, c.retried);
        if got != want {
            bail!(
                "(fired, redelivered, requeued, retried): the engine counts {got:?}, the model \
                 {want:?}"
            );
        }
        if s.deduplicated < c.dedup_lo || s.deduplicated > c.dedup_hi {
            bail!(
                "the engine counts {} deduplicated schedules; the model {} to {}",
                s.deduplicated,
                c.dedup_lo,
                c.dedup_hi
            );
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

    /// Every key any spec named is held by the job the model says (`id_by_key`).
    pub fn check_keys(&self, engine: &Engine) -> Result<(), Violation> {
        for k in &self.key_space {
            let got = engine.id_by_key(k).map(|id| id.0);
            let want = self.keys.get(k).copied();
            if got != want {
                bail!(
                    "key {:?} is held by {got:?}; the model says {want:?}",
                    String::from_utf8_lossy(k)
                );
            }
        }
        Ok(())
    }

    /// The dead-letter set, paged through in id order, is the model's, job by job.
    pub fn check_dead(&self, engine: &Engine) -> Result<(), Violation> {
        let mut listed = Vec::new();
        let mut q = Some(DeadQuery::default().limit(7));
        while let Some(query) = q {
            let page = engine
                .dead_letters(&query)
                .map_err(|e| Violation(format!("dead_letters: {e:?}")))?;
            listed.extend(page.jobs);
            q = page.next;
        }
        let want = self.dead_ids();
        let got: Vec<u64> = listed.iter().map(|d| d.id.0).collect();
        if got != want {
            bail!("the dead-letter set lists {got:?}; the model has {want:?}");
        }
        for d in &listed {
            let job = &self.jobs[&d.id.0];
            let b = job.dead.expect("listed");
            if !dead_is(&b, d)
                || d.payload[..] != job.payload[..]
                || d.key.as_deref() != job.key.as_deref()
            {
                bail!("dead job {}: the engine lists {d:?}, the model {b:?}", d.id);
            }
        }
        Ok(())
    }

    /// Every job the model knows is in the engine's memory exactly as modelled.
    pub fn check_live(&self, engine: &Engine) -> Result<(), Violation> {
        for (&id, job) in &self.jobs {
            let info = engine.get(JobId(id));
            let le = error_text;
            match (&job.live, &info) {
                (None, None) => {}
                (Some(l), Some(i))
                    if (l.state, l.due_ms, l.attempt, l.failures, job.tenant)
                        == (i.state, i.due_ms, i.attempt, i.failures, i.tenant)
                        && le(l.last_error) == i.last_error.as_deref() => {}
                (l, i) => bail!(
                    "job {id}: the engine has {:?}, the model {:?}",
                    i.as_ref()
                        .map(|i| (i.state, i.due_ms, i.attempt, i.failures, &i.last_error)),
                    l.as_ref().map(|l| (
                        l.state,
                        l.due_ms,
                        l.attempt,
                        l.failures,
                        le(l.last_error)
                    ))
                ),
            }
            if let Some(b) = &job.dead {
                match engine.dead_letter(JobId(id)) {
                    Some(d) if dead_is(b, &d) => {}
                    other => bail!("dead job {id}: the engine has {other:?}, the model {b:?}"),
                }
            }
        }
        Ok(())
    }

    /// The latest due time of any job visible in the engine's memory (paused ones aside).
    pub fn due_max(&self) -> u64 {
        self.jobs
            .values()
            .filter_map(|j| j.live.as_ref().map(|l| l.due_ms))
            .filter(|&d| d != PAUSED_DUE_MS)
            .max()
            .unwrap_or(0)
    }

    /// `Engine::schedules`, paged through (pages of `page`), lists exactly the recurring jobs
    /// in memory, each with its recurrence, misfire policy, due time, pause, state, attempt
    /// and tenant. (The caller has every job read back into memory first, e.g. by
    /// [`Model::check_live`]: one kept on disk beyond the horizon is not listed.)
    pub fn check_schedules(&self, engine: &Engine, page: usize) -> Result<(), Violation> {
        let mut listed = Vec::new();
        let mut after = None;
        loop {
            let got = engine
                .schedules(after, page)
                .map_err(|e| Violation(format!("schedules: {e:?}")))?;
            let n = got.len();
            after = got.last().map(|s| s.id);
            listed.extend(got);
            if n < page {
                break;
            }
        }
        let want = self.recurring_ids();
        let got: Vec<u64> = listed.iter().map(|s| s.id.0).collect();
        if got != want {
            bail!("schedules lists {got:?}; the model has {want:?}");
        }
        for s in &listed {
            let job = &self.jobs[&s.id.0];
            let l = job.live.as_ref().expect("listed");
            let r = job.recur.as_ref().expect("recurring");
            let recurring = timewheel::Recurring {
                recurrence: r.recurrence(),
                misfire: r.misfire,
            };
            if *s.recurring != recurring
                || (s.due_ms, s.paused, s.state, s.attempt, s.tenant)
                    != (
                        l.due_ms,
                        l.due_ms == PAUSED_DUE_MS,
                        l.state,
                        l.attempt,
                        job.tenant,
                    )
            {
                bail!(
                    "schedule {}: the engine lists {s:?}; the model has {:?} due {} {:?} attempt \
                     {} tenant {}",
                    s.id,
                    r,
                    l.due_ms,
                    l.state,
                    l.attempt,
                    job.tenant
                );
            }
        }
        Ok(())
    }

    /// The due time of job `id` in the engine's memory, if it is there.
    pub fn live_due(&self, id: u64) -> Option<u64> {
        self.live(id).map(|l| l.due_ms)
    }

    /// The ids of the jobs visible in the engine's memory.
    pub fn live_ids(&self) -> BTreeSet<u64> {
        self.jobs
            .iter()
            .filter(|(_, j)| j.live.is_some())
            .map(|(&id, _)| id)
            .collect()
    }

    /// Ids of jobs that may exist (live or dead), then of finished ones, each in id order
    /// (the fuzz target's picking order).
    pub fn pick_order(&self) -> Vec<u64> {
        let may_exist = self.jobs.iter().filter(|(_, j)| {
            j.may
                .iter()
                .any(|a| matches!(a, Alt::Present(_) | Alt::Dead(_)))
                || j.live.is_some()
                || j.dead.is_some()
        });
        let ended = self
            .jobs
            .iter()
            .filter(|(_, j)| j.ended() && j.live.is_none() && j.dead.is_none());
        may_exist.chain(ended).map(|(&id, _)| id).collect()
    }
}

/// Whether the engine's dead-letter entry `d` is the burial `b`.
fn dead_is(b: &Buried, d: &DeadJob) -> bool {
    (d.due_ms, d.attempt, d.failures, d.died_at_ms, d.expired)
        == (b.due_ms, b.attempt, b.failures, b.died_at_ms, b.expired)
        && &*d.reason == reason_text(b.reason)
}

/// Whether recovery showing `info` (live) and `dead` (in the dead-letter set) for a job is the
/// state `alt` (the clock read `now_ms` at the open: a job due by then, or whose lease the log
/// holds open, is ready).
fn shows(alt: &Alt, info: Option<&JobInfo>, dead: Option<&DeadJob>, now_ms: u64) -> bool {
    match (alt, info, dead) {
        (Alt::Gone(_), None, None) => true,
        (Alt::Present(l), Some(i), None) => {
            let state = if i.due_ms <= now_ms || l.lease_open {
                JobState::Ready
            } else {
                JobState::Scheduled
            };
            (l.due_ms..=l.due_hi_ms).contains(&i.due_ms)
                && (l.attempt, l.failures, state) == (i.attempt, i.failures, i.state)
                && error_text(l.last_error) == i.last_error.as_deref()
        }
        (Alt::Dead(b), None, Some(d)) => dead_is(b, d),
        _ => false,
    }
}

fn why_wrong(job: &Job, info: Option<&JobInfo>, dead: Option<&DeadJob>) -> String {
    let gone = job.may.iter().find_map(|a| match a {
        Alt::Gone(g) => Some(*g),
        _ => None,
    });
    match (info, dead, gone) {
        (None, None, _) => format!("acknowledged job lost (the log may hold {:?})", job.may),
        (_, _, Some(g)) if job.may.iter().all(|a| matches!(a, Alt::Gone(_))) => {
            format!("job came back after {g:?}")
        }
        (Some(i), _, _) => format!(
            "recovered {:?} due {} attempt {} failures {} error {:?}, not one of {:?}",
            i.state, i.due_ms, i.attempt, i.failures, i.last_error, job.may
        ),
        (None, Some(d), _) => format!("recovered dead as {d:?}, not one of {:?}", job.may),
    }
}
