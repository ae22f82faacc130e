//! Rebuilding the engine's state from the log on open.
//!
//! The log has already been scanned and any torn tail cut off (`Wal::open`). Here every record
//! is replayed in log order straight into the job table (borrowed from the log's read buffer:
//! no allocation per record, one hash map), then the timers are rebuilt:
//! - jobs whose due time passed while the engine was down (missed jobs) go to the ready queue
//!   at once, in due order;
//! - jobs that were claimed but not finished lose their claim: they fire again, and the next
//!   claim gets attempt + 1;
//! - cancelled, completed and failed jobs are gone and never fire again.

use std::time::Instant;

use crossbeam_channel::Sender;
use timewheel_wal::storage::Storage;
use timewheel_wal::{RecoveryReport, Wal};

use super::state::{Counters, Job, Payload, State};
use crate::error::{Error, Result};
use crate::job::{JobId, JobState};
use crate::record::{Event, FLAG_BINARY_PAYLOAD};
use crate::stats::RecoveryStats;

/// Replays the log. Returns the state, the next job id and what recovery found.
pub(super) fn replay<S: Storage>(
    wal: &Wal<S>,
    report: &RecoveryReport,
    now_ms: u64,
    ready: &Sender<JobId>,
) -> Result<(State, u64, RecoveryStats)> {
    let started = Instant::now();
    let mut state = State::new(now_ms, 0);
    // Replayed jobs sit in the table without timers; a claimed one is marked `Running`.
    let jobs = &mut state.jobs;
    let mut counters = Counters::default();
    let mut max_id = 0u64;
    let mut records = 0u64;
    let mut iter = wal.iter_from(0);
    while let Some(record) = iter.next_ref() {
        let record = record?;
        records += 1;
        let bad = |reason: String| Error::UndecodableRecord {
            lsn: record.lsn,
            reason,
        };
        let event =
            Event::decode(record.record_type, record.body).map_err(|e| bad(e.to_string()))?;
        let id = event.id();
        match event {
            Event::Schedule(s) => {
                max_id = max_id.max(id.0);
                let job = Job {
                    due_ms: s.due_ms,
                    attempt: 0,
                    state: JobState::Scheduled,
                    binary: s.flags & FLAG_BINARY_PAYLOAD != 0,
                    payload: Payload::new(s.payload),
                    timer: None,
                    lease_until_ms: 0,
                };
                if jobs.insert(id, job).is_some() {
                    return Err(bad(format!("job {id} scheduled twice")));
                }
            }
            Event::Cancel { .. } => {
                jobs.remove(&id)
                    .ok_or_else(|| bad(format!("cancel of unknown job {id}")))?;
                counters.cancelled += 1;
            }
            Event::Reschedule { due_ms, .. } => {
                let job = jobs
                    .get_mut(&id)
                    .ok_or_else(|| bad(format!("reschedule of unknown job {id}")))?;
                job.due_ms = due_ms;
                job.state = JobState::Scheduled;
            }
            Event::Claim { attempt, .. } => {
                let job = jobs
                    .get_mut(&id)
                    .ok_or_else(|| bad(format!("claim of unknown job {id}")))?;
                job.attempt = attempt;
                job.state = JobState::Running;
            }
            Event::Complete { .. } | Event::Fail { .. } => {
                jobs.remove(&id)
                    .ok_or_else(|| bad(format!("finish of unknown job {id}")))?;
                if matches!(event, Event::Complete { .. }) {
                    counters.completed += 1;
                } else {
                    counters.failed += 1;
                }
            }
        }
    }
    drop(iter);

    state.counters = counters;
    let live = state.jobs.len() as u64;
    let mut missed = Vec::new();
    let mut interrupted = 0;
    let ids: Vec<(JobId, u64, JobState)> = state
        .jobs
        .iter()
        .map(|(&id, j)| (id, j.due_ms, j.state))
        .collect();
    for (id, due_ms, job_state) in ids {
        interrupted += u64::from(job_state == JobState::Running);
        if due_ms <= now_ms {
            missed.push((due_ms, id));
        } else {
            state.arm_recovered(id);
        }
    }
    // Missed jobs fire at once, in due order (ties in id order, which is schedule order): they
    // go straight to the ready queue, not through the wheel, which would see them all as due
    // "now" and keep no order among them.
    missed.sort_unstable();
    let missed_count = missed.len() as u64;
    for (_, id) in missed {
        state.ready_recovered(id);
        ready.send(id).expect("the engine holds the receiver");
    }
    let recovery = RecoveryStats {
        records,
        segments: report.segments,
        bytes: report.bytes,
        elapsed: report.elapsed + started.elapsed(),
        jobs: live,
        missed: missed_count,
        interrupted,
        torn_tail: report.torn_tail.as_ref().map(|t| (t.segment, t.offset)),
    };
    if recovery.missed > 0 || recovery.interrupted > 0 {
        tracing::info!(
            missed = recovery.missed,
            interrupted = recovery.interrupted,
            "recovered jobs that were due or running while the engine was down"
        );
    }
    Ok((state, max_id + 1, recovery))
}
