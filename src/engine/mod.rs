//! The engine: durable schedule, cancel and reschedule over the log; the timer thread that
//! fires due jobs into a queue of ids; claims with leases; recovery on open.
//!
//! Data flows one way (BRIEF.md section 3): a call appends its record to the log and applies
//! the change to the in-memory state under one lock, then waits (outside the lock) until its
//! record is durable, with group commit sharing each sync among concurrent callers. The timer
//! thread moves due ids to the ready channel; a worker `claim`s an id, which re-reads the
//! job's state, so a job cancelled after it was queued is skipped.

mod recovery;
mod state;
mod timer;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use timewheel_wal::storage::Storage;
use timewheel_wal::storage::mmap::MmapStorage;
use timewheel_wal::{Durability, Lsn, Wal, WalOptions};

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::{Claimed, Due, JobId, JobInfo, JobSpec, JobState};
use crate::record::{Event, FLAG_BINARY_PAYLOAD, ScheduleRecord};
use crate::stats::{RecoveryStats, StateView, Stats};
use state::{Payload, State};

/// The durable timer and job engine. See the crate docs for an example.
///
/// All methods take `&self`; share the engine between threads by reference or in an `Arc`.
pub struct Engine<S: Storage = MmapStorage> {
    shared: Arc<Shared<S>>,
    timer: Mutex<Option<JoinHandle<()>>>,
}

pub(crate) struct Shared<S: Storage> {
    wal: Wal<S>,
    state: Mutex<State>,
    /// Wakes the timer thread.
    wake: Condvar,
    clock: Arc<dyn Clock>,
    config: Config,
    next_id: AtomicU64,
    ready_tx: Sender<JobId>,
    ready_rx: Receiver<JobId>,
    stopping: AtomicBool,
    closed: AtomicBool,
    recovery: RecoveryStats,
}

impl Engine<MmapStorage> {
    /// Opens (or creates) the engine in `config.dir` on the system clock: locks the directory,
    /// recovers, and starts the timer thread.
    pub fn open(config: Config) -> Result<Self> {
        Self::open_with_clock(config, Arc::new(SystemClock))
    }

    /// Like [`Engine::open`], with another clock.
    pub fn open_with_clock(config: Config, clock: Arc<dyn Clock>) -> Result<Self> {
        config.validate()?;
        let storage = MmapStorage::open_dir(&config.dir)?;
        Engine::open_on(storage, config, clock)
    }
}

impl<S: Storage> Engine<S> {
    /// Opens the engine on any storage (the fault-injecting one in tests and the simulation).
    /// `config.dir` is not used.
    pub fn open_on(storage: S, config: Config, clock: Arc<dyn Clock>) -> Result<Self> {
        config.validate()?;
        let options = WalOptions {
            segment_bytes: config.segment_bytes,
            record_bytes_max: u32::try_from(crate::record::schedule_record_bytes_max(&config))
                .expect("validated"),
            durability: config.durability,
            recovery_mode: config.recovery_mode,
        };
        let (wal, report) = Wal::open(storage, options)?;
        let (ready_tx, ready_rx) = crossbeam_channel::unbounded();
        let now_ms = clock.now_ms();
        let (state, next_id, recovery) = recovery::replay(&wal, &report, now_ms, &ready_tx)?;
        let shared = Arc::new(Shared {
            wal,
            state: Mutex::new(state),
            wake: Condvar::new(),
            clock,
            config,
            next_id: AtomicU64::new(next_id),
            ready_tx,
            ready_rx,
            stopping: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            recovery,
        });
        let weak = Arc::downgrade(&shared);
        shared.clock.on_advance(Arc::new(move || {
            let Some(s) = weak.upgrade() else {
                return false;
            };
            let _guard = s.lock_state();
            s.wake.notify_all();
            true
        }));
        let timer = if shared.config.timer_thread {
            let s = shared.clone();
            let handle = std::thread::Builder::new()
                .name("timewheel-timer".into())
                .spawn(move || timer::run(s))?;
            Some(handle)
        } else {
            None
        };
        Ok(Engine {
            shared,
            timer: Mutex::new(timer),
        })
    }

    /// Schedules one job. Returns once it is durable (under the configured durability).
    pub fn schedule(&self, spec: JobSpec) -> Result<JobId> {
        let ids = self.schedule_batch(std::iter::once(spec))?;
        Ok(ids[0])
    }

    /// Schedules many jobs with one log append and one durability wait. Either every job is
    /// accepted or, on bad input, none is and nothing is written.
    pub fn schedule_batch(&self, specs: impl IntoIterator<Item = JobSpec>) -> Result<Vec<JobId>> {
        let (ids, lsn) = self.schedule_batch_nowait(specs)?;
        self.wait_acknowledged(lsn)?;
        Ok(ids)
    }

    /// Like [`Engine::schedule_batch`], but returns as soon as the jobs are in the log, with
    /// the position to pass to [`Engine::wait_durable`]. The jobs may fire before they are
    /// durable; a caller must not report them accepted before that wait returns.
    pub fn schedule_batch_nowait(
        &self,
        specs: impl IntoIterator<Item = JobSpec>,
    ) -> Result<(Vec<JobId>, Lsn)> {
        let sh = &*self.shared;
        sh.check_open()?;
        let specs: Vec<JobSpec> = specs.into_iter().collect();
        if specs.is_empty() {
            return Ok((Vec::new(), sh.wal.last_lsn()));
        }
        if specs.len() > sh.config.batch_jobs_max {
            return Err(Error::invalid(
                "batch",
                format!("{} jobs; at most {}", specs.len(), sh.config.batch_jobs_max),
            ));
        }
        let now_ms = sh.clock.now_ms();
        let mut dues = Vec::with_capacity(specs.len());
        for spec in &specs {
            dues.push(sh.validate(spec, now_ms)?);
        }
        // Everything is valid: nothing below refuses input.
        let first = sh.next_id.fetch_add(specs.len() as u64, Ordering::Relaxed);
        let mut body = Vec::with_capacity(specs.len() * 48);
        let mut ends = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            Event::Schedule(ScheduleRecord {
                id: JobId(first + i as u64),
                due_ms: dues[i],
                created_ms: now_ms,
                tenant: 0,
                shard: 0,
                flags: if spec.binary { FLAG_BINARY_PAYLOAD } else { 0 },
                max_attempts: 0,
                payload: &spec.payload,
            })
            .encode(&mut body);
            ends.push(body.len());
        }
        let records = ends.iter().scan(0, |start, &end| {
            let r = (crate::record::TYPE_SCHEDULE, &body[*start..end]);
            *start = end;
            Some(r)
        });
        let mut ids = Vec::with_capacity(specs.len());
        let mut earliest = u64::MAX;
        let lsn = {
            let mut state = sh.lock_state();
            let lsn = sh.wal.append_batch_nowait(records)?;
            for (i, spec) in specs.into_iter().enumerate() {
                let id = JobId(first + i as u64);
                state.insert_scheduled(id, dues[i], Payload::new(&spec.payload), spec.binary);
                earliest = earliest.min(dues[i]);
                ids.push(id);
            }
            if earliest < state.sleeping_until_ms {
                sh.wake.notify_all();
            }
            lsn
        };
        Ok((ids, lsn))
    }

    /// Cancels a job that has not started. Returns `false` for an unknown, running or finished
    /// job. A job already in the ready queue is cancelled too: its `claim` returns `None`.
    pub fn cancel(&self, id: JobId) -> Result<bool> {
        self.change(
            id,
            Event::Cancel { id },
            |s| s.can_cancel(id),
            |s| s.cancel(id),
        )
    }

    /// Moves a job that has not started to a new due time. Returns `false` for an unknown,
    /// running or finished job.
    pub fn reschedule(&self, id: JobId, due_ms: u64) -> Result<bool> {
        let sh = &*self.shared;
        sh.check_open()?;
        sh.validate_due(due_ms, sh.clock.now_ms())?;
        let wake = &sh.wake;
        self.change(
            id,
            Event::Reschedule { id, due_ms },
            |s| s.can_reschedule(id),
            |s| {
                s.reschedule(id, due_ms);
                if due_ms < s.sleeping_until_ms {
                    wake.notify_all();
                }
            },
        )
    }

    /// The ids of fired jobs. Many workers may share the receiver; each id comes out once per
    /// firing. Claim each with [`Engine::claim`].
    pub fn ready(&self) -> Receiver<JobId> {
        self.shared.ready_rx.clone()
    }

    /// Claims a fired job: re-reads its state and leases it to the caller for
    /// `Config::lease_ms`. Returns `None` when the job was cancelled, rescheduled, claimed or
    /// finished after its id was queued.
    ///
    /// The claim is appended to the log but not waited for: it becomes durable with the next
    /// sync, at the latest with this worker's `complete` or `fail`. After a crash a job whose
    /// claim was lost is delivered again with the same attempt number; the worker that held
    /// that attempt died with the process.
    pub fn claim(&self, id: JobId) -> Result<Option<Claimed>> {
        let sh = &*self.shared;
        sh.check_open()?;
        let mut state = sh.lock_state();
        let now_ms = state.observe_time(sh.clock.now_ms());
        let lease_until_ms = now_ms.saturating_add(sh.config.lease_ms);
        let Some(claimed) = state.claim(id, lease_until_ms) else {
            return Ok(None);
        };
        let event = Event::Claim {
            id,
            attempt: claimed.attempt,
            lease_until_ms,
        };
        let mut body = Vec::with_capacity(24);
        event.encode(&mut body);
        sh.wal.append_nowait(event.record_type(), &body)?;
        if lease_until_ms < state.sleeping_until_ms {
            sh.wake.notify_all();
        }
        Ok(Some(claimed))
    }

    /// Completes a claimed job, durably. Returns `false` when the claim is no longer the
    /// job's newest (its lease ran out and another worker claimed it) or the job is gone.
    pub fn complete(&self, claimed: &Claimed) -> Result<bool> {
        let (id, attempt) = (claimed.id, claimed.attempt);
        self.change(
            id,
            Event::Complete { id, attempt },
            |s| s.can_finish(id, attempt),
            |s| s.finish(id, attempt, true),
        )
    }

    /// Completes many claimed jobs with one log append and one durability wait: how a busy
    /// worker keeps up with a burst. Returns, for each, what [`Engine::complete`] would.
    pub fn complete_batch(&self, claimed: &[Claimed]) -> Result<Vec<bool>> {
        let sh = &*self.shared;
        sh.check_open()?;
        let mut body = Vec::with_capacity(claimed.len() * 16);
        let mut ends = Vec::with_capacity(claimed.len());
        let mut done = Vec::with_capacity(claimed.len());
        // A batch may name a job twice; only the first completion counts.
        let mut seen = state::IdSet::with_capacity_and_hasher(claimed.len(), Default::default());
        let lsn = {
            let mut state = sh.lock_state();
            for c in claimed {
                let ok = state.can_finish(c.id, c.attempt) && seen.insert(c.id);
                if ok {
                    Event::Complete {
                        id: c.id,
                        attempt: c.attempt,
                    }
                    .encode(&mut body);
                    ends.push(body.len());
                }
                done.push(ok);
            }
            if ends.is_empty() {
                return Ok(done);
            }
            let records = ends.iter().scan(0, |start, &end| {
                let r = (crate::record::TYPE_COMPLETE, &body[*start..end]);
                *start = end;
                Some(r)
            });
            let lsn = sh.wal.append_batch_nowait(records)?;
            for (c, &ok) in claimed.iter().zip(&done) {
                if ok {
                    state.finish(c.id, c.attempt, true);
                }
            }
            lsn
        };
        self.wait_acknowledged(lsn)?;
        Ok(done)
    }

    /// Records that a claimed job failed, durably, and finishes it. Returns `false` like
    /// [`Engine::complete`]. (Retries with backoff and dead letters come later.)
    pub fn fail(&self, claimed: &Claimed, reason: &str) -> Result<bool> {
        let sh = &*self.shared;
        if reason.len() > sh.config.fail_reason_bytes_max {
            return Err(Error::invalid(
                "reason",
                format!(
                    "{} bytes; at most {}",
                    reason.len(),
                    sh.config.fail_reason_bytes_max
                ),
            ));
        }
        let (id, attempt) = (claimed.id, claimed.attempt);
        self.change(
            id,
            Event::Fail {
                id,
                attempt,
                reason,
            },
            |s| s.can_finish(id, attempt),
            |s| s.finish(id, attempt, false),
        )
    }

    /// A snapshot of a live job; `None` for unknown or finished jobs.
    pub fn get(&self, id: JobId) -> Option<JobInfo> {
        self.shared.lock_state().info(id)
    }

    /// Counts, queue depth and fire lateness.
    pub fn stats(&self) -> Stats {
        let sh = &*self.shared;
        let state = sh.lock_state();
        let now_ms = state.now_ms.max(sh.clock.now_ms());
        let view = StateView {
            scheduled: state.in_state[state::state_index(JobState::Scheduled)],
            ready: state.in_state[state::state_index(JobState::Ready)],
            running: state.in_state[state::state_index(JobState::Running)],
            completed: state.counters.completed,
            cancelled: state.counters.cancelled,
            failed: state.counters.failed,
            fired: state.counters.fired,
            redelivered: state.counters.redelivered,
            scheduled_overdue: u64::from(state.due.next_due().is_some_and(|d| d < now_ms)),
            lateness_us: &state.lateness_us,
        };
        Stats::collect(&view, sh.ready_rx.len(), &sh.recovery)
    }

    /// What recovery found when this engine opened.
    pub fn recovery(&self) -> &RecoveryStats {
        &self.shared.recovery
    }

    /// Waits until everything appended up to `lsn` is durable.
    pub fn wait_durable(&self, lsn: Lsn) -> Result<()> {
        Ok(self.shared.wal.wait_durable(lsn)?)
    }

    /// Makes everything appended so far durable, whatever the durability mode.
    pub fn sync(&self) -> Result<()> {
        self.shared.wal.sync()?;
        Ok(())
    }

    /// Fires what is due now and expires leases, in the caller's thread. For engines opened
    /// with `Config::timer_thread` off (the simulation); harmless otherwise. Returns how many
    /// ids were queued.
    pub fn run_timers(&self) -> usize {
        let sh = &*self.shared;
        let mut state = sh.lock_state();
        let mut total = 0;
        loop {
            let (moved, _) = sh.run_timers_locked(&mut state, sh.config.fires_per_advance_max);
            total += moved;
            if moved < sh.config.fires_per_advance_max {
                return total;
            }
        }
    }

    /// The next time something is due (a job or a lease deadline).
    pub fn next_deadline(&self) -> Option<u64> {
        self.shared.lock_state().next_deadline()
    }

    /// Stops the timer thread and makes everything durable; later calls fail with `Closed`.
    /// The directory stays locked until the engine is dropped.
    pub fn shutdown(&self) -> Result<()> {
        let sh = &*self.shared;
        sh.closed.store(true, Ordering::Release);
        self.stop_timer();
        if sh.wal.is_poisoned() {
            return Err(Error::Poisoned);
        }
        sh.wal.sync()?;
        Ok(())
    }

    /// Flushes, stops the threads and releases the directory lock. Dropping the engine does
    /// the same, ignoring errors.
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    /// Stops the engine the way a crash would: the timer thread stops and the lock is
    /// released, but nothing is synced. Acknowledged jobs are durable already.
    pub fn abandon(self) {
        self.shared.closed.store(true, Ordering::Release);
        self.stop_timer();
        self.shared.wal.abandon();
    }

    fn stop_timer(&self) {
        let sh = &*self.shared;
        {
            let _state = sh.lock_state();
            sh.stopping.store(true, Ordering::Release);
            sh.wake.notify_all();
        }
        let handle = self.timer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle {
            // A timer thread that panicked broke an invariant; surface it.
            if let Err(panic) = h.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }

    /// Appends one state change and applies it under the lock, then waits for durability.
    fn change(
        &self,
        id: JobId,
        event: Event<'_>,
        allowed: impl FnOnce(&State) -> bool,
        apply: impl FnOnce(&mut State),
    ) -> Result<bool> {
        let sh = &*self.shared;
        sh.check_open()?;
        debug_assert_eq!(event.id(), id);
        let mut body = Vec::with_capacity(32);
        event.encode(&mut body);
        let lsn = {
            let mut state = sh.lock_state();
            if !allowed(&state) {
                return Ok(false);
            }
            let lsn = sh.wal.append_nowait(event.record_type(), &body)?;
            apply(&mut state);
            lsn
        };
        self.wait_acknowledged(lsn)?;
        Ok(true)
    }

    /// Waits as long as the durability mode says an acknowledgement must.
    fn wait_acknowledged(&self, lsn: Lsn) -> Result<()> {
        match self.shared.config.durability {
            Durability::Sync => self.wait_durable(lsn),
            _ => Ok(()),
        }
    }
}

impl<S: Storage> Drop for Engine<S> {
    fn drop(&mut self) {
        if !self.shared.stopping.load(Ordering::Acquire)
            && let Err(e) = self.shutdown()
        {
            tracing::warn!(error = %e, "closing the engine on drop failed");
        }
    }
}

impl<S: Storage> Shared<S> {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A panic under the lock broke an invariant; the state can not be trusted.
        self.state
            .lock()
            .expect("engine state lock poisoned by a panic")
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if self.wal.is_poisoned() {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    /// Checks a spec against the limits; returns its due time.
    fn validate(&self, spec: &JobSpec, now_ms: u64) -> Result<u64> {
        if spec.payload.len() > self.config.payload_bytes_max {
            return Err(Error::invalid(
                "payload",
                format!(
                    "{} bytes; at most {}",
                    spec.payload.len(),
                    self.config.payload_bytes_max
                ),
            ));
        }
        let due_ms = match spec.due {
            Due::At(ms) => ms,
            Due::After(d) => {
                let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                if ms > self.config.due_ahead_ms_max {
                    return Err(Error::invalid("delay", "beyond Config::due_ahead_ms_max"));
                }
                now_ms.saturating_add(ms)
            }
        };
        self.validate_due(due_ms, now_ms)?;
        Ok(due_ms)
    }

    fn validate_due(&self, due_ms: u64, now_ms: u64) -> Result<()> {
        if due_ms > now_ms.saturating_add(self.config.due_ahead_ms_max) {
            return Err(Error::invalid(
                "due_ms",
                format!(
                    "{due_ms} is more than Config::due_ahead_ms_max ({} ms) ahead",
                    self.config.due_ahead_ms_max
                ),
            ));
        }
        Ok(())
    }

    /// Fires due jobs and expires leases, at most `max` of each. Returns how many moved.
    fn run_timers_locked(&self, state: &mut State, max: usize) -> (usize, usize) {
        state.observe_time(self.clock.now_ms());
        let now_us = self.clock.now_us();
        let fired = state.fire_due(now_us, max, &self.ready_tx);
        let expired = state.expire_leases(max, &self.ready_tx);
        (fired.max(expired), fired + expired)
    }
}

#[allow(dead_code)]
fn assert_engine_is_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Engine>();
}
