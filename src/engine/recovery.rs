//! Rebuilding the engine's state from the log on open.
//!
//! The log has already been scanned and any torn tail cut off (`Wal::open`). Here every record
//! is replayed in log order into a plain map of live jobs, then the wheels are rebuilt:
//! - jobs whose due time passed while the engine was down (missed jobs) go into the wheel in
//!   due order, so they fire at once, in that order;
//! - jobs that were claimed but not finished lose their claim: they fire again, and the next
//!   claim gets attempt + 1;
//! - cancelled, completed and failed jobs are gone and never fire again.

use std::sync::Arc;
use std::time::Instant;

use timewheel_wal::storage::Storage;
use timewheel_wal::{RecoveryReport, Wal};

use super::state::{IdHasher, State};
use crate::error::{Error, Result};
use crate::job::JobId;
use crate::record::{Event, FLAG_BINARY_PAYLOAD};
use crate::stats::RecoveryStats;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

type ReplayMap = HashMap<JobId, Replayed, BuildHasherDefault<IdHasher>>;

struct Replayed {
    due_ms: u64,
    attempt: u32,
    claimed: bool,
    binary: bool,
    payload: Arc<[u8]>,
}

/// Replays the log. Returns the state, the next job id and what recovery found.
pub(super) fn replay<S: Storage>(
    wal: &Wal<S>,
    report: &RecoveryReport,
    now_ms: u64,
    ready: &crossbeam_channel::Sender<JobId>,
    empty_payload: &Arc<[u8]>,
) -> Result<(State, u64, RecoveryStats)> {
    let started = Instant::now();
    let mut live: ReplayMap = ReplayMap::default();
    let mut state_counters = super::state::Counters::default();
    let mut max_id = 0u64;
    let mut records = 0u64;
    for record in wal.iter_from(0) {
        let record = record?;
        records += 1;
        let bad = |reason: String| Error::UndecodableRecord {
            lsn: record.lsn,
            reason,
        };
        let event =
            Event::decode(record.record_type, &record.body).map_err(|e| bad(e.to_string()))?;
        let id = event.id();
        match event {
            Event::Schedule(s) => {
                max_id = max_id.max(id.0);
                let payload = if s.payload.is_empty() {
                    empty_payload.clone()
                } else {
                    Arc::from(s.payload)
                };
                let job = Replayed {
                    due_ms: s.due_ms,
                    attempt: 0,
                    claimed: false,
                    binary: s.flags & FLAG_BINARY_PAYLOAD != 0,
                    payload,
                };
                if live.insert(id, job).is_some() {
                    return Err(bad(format!("job {id} scheduled twice")));
                }
            }
            Event::Cancel { .. } => {
                live.remove(&id)
                    .ok_or_else(|| bad(format!("cancel of unknown job {id}")))?;
                state_counters.cancelled += 1;
            }
            Event::Reschedule { due_ms, .. } => {
                let job = live
                    .get_mut(&id)
                    .ok_or_else(|| bad(format!("reschedule of unknown job {id}")))?;
                job.due_ms = due_ms;
            }
            Event::Claim { attempt, .. } => {
                let job = live
                    .get_mut(&id)
                    .ok_or_else(|| bad(format!("claim of unknown job {id}")))?;
                job.attempt = attempt;
                job.claimed = true;
            }
            Event::Complete { .. } | Event::Fail { .. } => {
                live.remove(&id)
                    .ok_or_else(|| bad(format!("finish of unknown job {id}")))?;
                if matches!(event, Event::Complete { .. }) {
                    state_counters.completed += 1;
                } else {
                    state_counters.failed += 1;
                }
            }
        }
    }

    let mut state = State::new(now_ms, live.len());
    state.counters = state_counters;
    let mut missed = Vec::new();
    let mut interrupted = 0;
    let jobs = live.len() as u64;
    for (id, job) in live {
        interrupted += u64::from(job.claimed);
        if job.due_ms <= now_ms {
            missed.push((job.due_ms, id, job));
        } else {
            state.insert_scheduled(id, job.due_ms, job.payload, job.binary);
            state.jobs.get_mut(&id).expect("just inserted").attempt = job.attempt;
        }
    }
    // Missed jobs fire at once, in due order (ties in id order, which is schedule order): they
    // go straight to the ready queue, not through the wheel, which would see them all as due
    // "now" and keep no order among them.
    missed.sort_unstable_by_key(|(due, id, _)| (*due, *id));
    let missed_count = missed.len() as u64;
    for (due_ms, id, job) in missed {
        state.insert_ready(id, due_ms, job.attempt, job.payload, job.binary);
        ready.send(id).expect("the engine holds the receiver");
    }
    let recovery = RecoveryStats {
        records,
        segments: report.segments,
        bytes: report.bytes,
        elapsed: report.elapsed + started.elapsed(),
        jobs,
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
