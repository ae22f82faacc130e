//! The async API (feature `async`, or `tokio`): the durable calls as futures, woken when group
//! commit makes their records durable, with no thread parked per waiting call; and the
//! worker's take as a future and a [`Stream`](futures_core::Stream).
//!
//! The futures need no particular runtime (the tests and the example use tokio). Two things
//! wake them:
//! - **Durability.** A call appends its records without waiting (the same code as the blocking
//!   call), then awaits their LSN. Durability threads, one per sync that may be in flight
//!   (`Config::syncs_in_flight`), started by the first async call, each take the highest LSN
//!   awaited that no other is already waiting for, wait for it (joining or leading group
//!   commit, as a blocking call would) and wake every future whose LSN is then acknowledged:
//!   while one thread's sync is in flight, the next can lead a sync of what was awaited since.
//!   Sixty-four tasks awaiting schedules cost one such thread (by default), and their records
//!   share the syncs.
//!   A failed sync poisons the log: every future awaiting then returns `Poisoned`, none is
//!   acknowledged.
//! - **Fired jobs.** The timer thread wakes the tasks waiting to take a job after it queues ids.
//! - **Rolls.** A durability thread rolls the log for the calls that found the segment nearly
//!   full, then wakes them (below).
//!
//! What the futures do besides waiting (check, append, apply) is what the blocking calls do, and
//! takes the same short locks. Not the log's rolls: a roll syncs the old segment's tail and
//! the new header under the append lock (docs/wal-format.md, "Rolls and the append lock"),
//! and a runtime worker must not wait for a sync. So a call that appends first looks at the
//! room left in the segment (one atomic read); when less than its records and a margin (a
//! sixteenth of `Config::segment_bytes`, at most 1 MiB) is left, it awaits a roll that a
//! durability thread does ahead of it, and appends into the new segment. Left to a worker
//! still: a batch bigger than a segment's room (its append rolls again); an append that meets
//! a roll a blocking call is doing (it waits for the append lock, as any appender does); and
//! an append a whole write reach (8 MiB) ahead of the syncs, which makes the blocks before it
//! durable first (docs/wal-format.md, the write bound: only batches that large in flight).
//!
//! A future dropped while it waits leaves no hole: a change was applied before the wait; a
//! schedule's batch goes back to the engine (`Pending`'s `Drop`), which makes it visible once
//! durable (after the sync the durability thread leads for it); a take hands plain claims out
//! before their sync and awaits one only for claims that must be durable first (of a job whose
//! lease ran out); dropped while it awaits, it hands them back at once, as a dropped stream does
//! the jobs it took and did not yield (their attempts end without a failure, and they fire again
//! with the next attempt). A call naming a job kept on disk beyond the horizon reads its bucket
//! file first, in the calling task, as the blocking call does.
//!
//! The crate docs carry the example.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;

use timewheel_wal::Lsn;

use super::{Engine, Shared, lock};
use crate::error::{Error, Result};
use crate::job::{Claimed, JobId, JobSpec, Outcome};
use crate::record::Event;

/// What wakes the futures; one per engine.
#[derive(Default)]
pub(crate) struct Wakers {
    durable: Mutex<DurableWaits>,
    durable_changed: Condvar,
    /// Tasks waiting for the ready queue, woken (all) when ids are queued or the stream ends.
    ready: Mutex<Vec<Waker>>,
    ready_waiting: AtomicBool,
}

#[derive(Default)]
struct DurableWaits {
    /// `(LSN, waker)` of every future waiting for its LSN to be acknowledged.
    pending: Vec<(Lsn, Waker)>,
    /// The highest LSN a durability thread has taken to wait for: another thread takes only a
    /// higher one.
    taken: Lsn,
    /// Durability threads waiting on `durable_changed` for something to await (not in a
    /// sync): only then does a new registration notify one (a notify is a system call, once
    /// per call).
    idle: usize,
    threads: Vec<JoinHandle<()>>,
    stop: bool,
    /// A future found the segment nearly full (`RollAhead`): a durability thread rolls the
    /// log if fewer bytes than this are left when it gets to it, then wakes `roll_waiters`.
    roll_below: u64,
    roll_waiters: Vec<Waker>,
    /// Rolls ahead done (or found needless): a future that asked before one ended goes on.
    rolls_done: u64,
}

impl Wakers {
    /// Wakes the tasks waiting to take a fired job.
    pub(crate) fn wake_ready(&self) {
        if self.ready_waiting.swap(false, Ordering::AcqRel) {
            for waker in lock(&self.ready).drain(..) {
                waker.wake();
            }
        }
    }

    /// Stops the durability thread (at shutdown); the futures still waiting see the engine
    /// closed.
    pub(crate) fn stop(&self) {
        let threads = {
            let mut waits = lock(&self.durable);
            waits.stop = true;
            std::mem::take(&mut waits.threads)
        };
        self.durable_changed.notify_all();
        for thread in threads {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
        self.wake_ready();
        let (pending, rolls) = {
            let mut waits = lock(&self.durable);
            (
                std::mem::take(&mut waits.pending),
                std::mem::take(&mut waits.roll_waiters),
            )
        };
        for (_, waker) in pending {
            waker.wake();
        }
        // A call that waited for a roll goes on, and finds the engine closed.
        for waker in rolls {
            waker.wake();
        }
    }
}

/// Starts the durability threads, at the first wait.
fn start_threads(sh: &Arc<Shared>, waits: &mut DurableWaits) -> Result<()> {
    if waits.threads.is_empty() {
        for _ in 0..sh.config.syncs_in_flight {
            let shared = Arc::clone(sh);
            let thread = std::thread::Builder::new()
                .name("timewheel-async-durable".into())
                .spawn(move || run(shared))
                .map_err(Error::Io)?;
            waits.threads.push(thread);
        }
    }
    Ok(())
}

/// Rolls the log ahead of need for the futures waiting in `RollAhead`, unless another roll
/// made room meanwhile.
fn roll_ahead(shared: &Shared, below: u64) {
    if shared.wal.room_hint() < below {
        match shared.wal.roll_now() {
            Ok(_) => shared.space_ok(),
            Err(e) => {
                // The futures go on to append, and meet the same error there (a full disk
                // refuses their schedules, with the usual back-off). Closing, or a failed
                // sync, said so already.
                let e = Error::from(e);
                if !matches!(e, Error::Closed | Error::Poisoned) {
                    shared.space_refused(&e, shared.clock.now_ms());
                    tracing::debug!(error = %e, "rolling the log ahead of the async calls failed");
                }
            }
        }
    }
}

/// A durability thread: takes the highest LSN any future awaits that no other thread has
/// taken, waits for it, then wakes every future whose LSN is acknowledged (all of them, after
/// a failure: they find the log poisoned).
fn run(shared: Arc<Shared>) {
    let wakers = &shared.wakers;
    let mut waits = lock(&wakers.durable);
    loop {
        if waits.stop {
            return;
        }
        if !waits.roll_waiters.is_empty() {
            let below = std::mem::take(&mut waits.roll_below);
            let waiters = std::mem::take(&mut waits.roll_waiters);
            drop(waits);
            roll_ahead(&shared, below);
            waits = lock(&wakers.durable);
            waits.rolls_done += 1;
            drop(waits);
            for waker in waiters {
                waker.wake();
            }
            waits = lock(&wakers.durable);
            continue;
        }
        let target = waits.pending.iter().map(|&(lsn, _)| lsn).max();
        let Some(target) = target.filter(|&t| t > waits.taken) else {
            // Nothing awaited, or all of it taken by another thread, whose sync is in flight.
            waits.idle += 1;
            waits = wakers
                .durable_changed
                .wait(waits)
                .expect("an engine lock poisoned by a panic");
            waits.idle -= 1;
            continue;
        };
        waits.taken = target;
        drop(waits);
        // Let the runtime's workers register what they are about to append before this
        // thread leads a sync: it syncs for every waiting task, so a bigger group is free.
        // (Group commit yields so for a leader only when the last sync released callers that
        // have not written since: never this thread's case, the futures are not callers.)
        std::thread::yield_now();
        let failed = shared.wait_acknowledged(target).is_err();
        // Batches whose futures were dropped while they waited: theirs is this sync too.
        shared.adopt_orphans();
        waits = lock(&wakers.durable);
        // Another thread's later sync may have ended first and made more durable; a failure
        // fails every future.
        let through = if failed {
            Lsn::MAX
        } else {
            shared.wal.durable_lsn().max(target)
        };
        // Woken after the lock is let go: the futures that register meanwhile (every call,
        // on the runtime's workers) do not wait for the wakes.
        let done: Vec<(Lsn, Waker)> = waits
            .pending
            .extract_if(.., |(lsn, _)| *lsn <= through)
            .collect();
        drop(waits);
        for (_, waker) in done {
            waker.wake();
        }
        waits = lock(&wakers.durable);
        if failed {
            // Poisoned: nothing is acknowledged from now on, and every future says so. The
            // other threads find the log poisoned too.
            wakers.durable_changed.notify_all();
            return;
        }
        // What was awaited meanwhile and no thread took, this one takes next.
    }
}

/// Resolves once `lsn` is acknowledged as the durability mode says; `Poisoned` (or `Closed`)
/// when it never will be.
struct Acknowledged<'a> {
    shared: &'a Arc<Shared>,
    lsn: Lsn,
}

impl Future for Acknowledged<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let sh = self.shared;
        let check = || {
            if sh.wal.is_poisoned() {
                Some(Err(Error::Poisoned))
            } else if sh.acknowledged_through(self.lsn) {
                Some(Ok(()))
            } else if sh.closed.load(Ordering::Acquire) {
                Some(Err(Error::Closed))
            } else {
                None
            }
        };
        if let Some(done) = check() {
            return Poll::Ready(done);
        }
        {
            let mut waits = lock(&sh.wakers.durable);
            if waits.stop {
                return Poll::Ready(Err(Error::Closed));
            }
            start_threads(sh, &mut waits)?;
            waits.pending.push((self.lsn, cx.waker().clone()));
            if waits.idle > 0 && self.lsn > waits.taken {
                sh.wakers.durable_changed.notify_one();
            }
        }
        // The thread may have acknowledged it between the check and the registration.
        match check() {
            Some(done) => Poll::Ready(done),
            None => Poll::Pending,
        }
    }
}

/// Resolves once the segment being appended to has room for `bytes` more (with a margin), so
/// that the call's append does not roll the log on the runtime's worker: a roll syncs the
/// old segment's tail and the new header, under the append lock. If it has not, a durability
/// thread rolls the log first, off the runtime. Resolves at the latest after that one roll
/// (a batch bigger than a segment's room still rolls it itself), at once if the engine is
/// closed or refusing schedules for a full disk.
struct RollAhead<'a> {
    shared: &'a Arc<Shared>,
    below: u64,
    /// No roll to ask for (the disk is full: the append refuses at once).
    skip: bool,
    /// `DurableWaits::rolls_done` when this asked: one more, and it goes on.
    asked: Option<u64>,
}

impl Future for RollAhead<'_> {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let sh = self.shared;
        if self.skip || sh.wal.room_hint() >= self.below || sh.closed.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        let mut waits = lock(&sh.wakers.durable);
        if waits.stop {
            return Poll::Ready(Ok(()));
        }
        // A roll that ended between the look and the lock published the room first.
        if sh.wal.room_hint() >= self.below
            || self.asked.is_some_and(|asked| waits.rolls_done > asked)
        {
            return Poll::Ready(Ok(()));
        }
        start_threads(sh, &mut waits)?;
        waits.roll_below = waits.roll_below.max(self.below);
        // Again after a poll that was not the roll's wake (a `select!` beside it): that one
        // wake is still owed, to this waker.
        waits.roll_waiters.push(cx.waker().clone());
        let done = waits.rolls_done;
        drop(waits);
        // Rare (once a segment): every thread looks, the first takes it.
        sh.wakers.durable_changed.notify_all();
        self.asked.get_or_insert(done);
        Poll::Pending
    }
}

/// Resolves to up to `max` ids taken off the ready queue; empty once the stream ended.
struct TakeIds<'a> {
    shared: &'a Shared,
    max: usize,
}

impl Future for TakeIds<'_> {
    type Output = Vec<JobId>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<JobId>> {
        let sh = self.shared;
        let take = || {
            if sh.closed.load(Ordering::Acquire) {
                return Some(Vec::new());
            }
            let mut ids = Vec::new();
            while ids.len() < self.max {
                match sh.ready_rx.try_recv() {
                    Ok(id) => ids.push(id),
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    // A drain ended the stream.
                    Err(crossbeam_channel::TryRecvError::Disconnected) => {
                        return Some(ids);
                    }
                }
            }
            (!ids.is_empty()).then_some(ids)
        };
        if let Some(ids) = take() {
            return Poll::Ready(ids);
        }
        lock(&sh.wakers.ready).push(cx.waker().clone());
        sh.wakers.ready_waiting.store(true, Ordering::Release);
        // An id may have been queued between the look and the registration.
        match take() {
            Some(ids) => Poll::Ready(ids),
            None => Poll::Pending,
        }
    }
}

impl Engine {
    /// What an async call that appends about `bytes` awaits first: room in the segment, so
    /// that its append does not roll the log on the runtime's worker ([`RollAhead`]). The
    /// margin is a sixteenth of a segment, at most 1 MiB: a roll a little early.
    fn room_for(&self, bytes: u64) -> RollAhead<'_> {
        let margin = (self.shared.config.segment_bytes / 16).min(1 << 20);
        RollAhead {
            shared: &self.shared,
            below: margin.saturating_add(bytes),
            // A full disk: the append refuses at once, with no roll tried.
            skip: self.shared.refusing_schedules(),
            asked: None,
        }
    }

    fn acknowledged(&self, lsn: Option<Lsn>) -> Acknowledged<'_> {
        Acknowledged {
            shared: &self.shared,
            // Nothing was appended: nothing to wait for (LSN 0 is always acknowledged).
            lsn: lsn.unwrap_or(0),
        }
    }

    /// [`schedule`](Engine::schedule), as a future: resolves once the job is durable (and
    /// visible).
    pub async fn schedule_async(&self, spec: JobSpec) -> Result<JobId> {
        Ok(self.schedule_batch_async(std::iter::once(spec)).await?[0])
    }

    /// [`schedule_batch`](Engine::schedule_batch), as a future.
    pub async fn schedule_batch_async(
        &self,
        specs: impl IntoIterator<Item = JobSpec>,
    ) -> Result<Vec<JobId>> {
        let specs: Vec<JobSpec> = specs.into_iter().collect();
        // A rough size of the batch's records (the frame and the fixed fields, the payload,
        // the key).
        let bytes = specs
            .iter()
            .map(|s| 96 + s.payload.len() + s.key.as_ref().map_or(0, |k| k.len()))
            .sum::<usize>() as u64;
        self.room_for(bytes).await?;
        let (ids, mut pending) = self.schedule_batch_nowait(specs)?;
        // Waits as `Engine::commit` does: also when a key named a job another caller appended
        // and nothing new was, since the id acknowledges that job.
        if pending.must_wait() {
            // Dropped while it waits here, `pending` goes back to the engine, which makes the
            // jobs visible once durable (cancel safety).
            let acknowledged = self.acknowledged(Some(pending.lsn)).await;
            pending.owner = None;
            acknowledged?;
            if !pending.ends.is_empty() {
                self.shared.make_visible(pending);
                self.shared.adopt_orphans();
            }
        }
        Ok(ids)
    }

    /// [`cancel`](Engine::cancel), as a future.
    pub async fn cancel_async(&self, id: JobId) -> Result<Outcome> {
        Ok(self.cancel_batch_async(&[id]).await?[0])
    }

    /// [`cancel_batch`](Engine::cancel_batch), as a future.
    pub async fn cancel_batch_async(&self, ids: &[JobId]) -> Result<Vec<Outcome>> {
        let items: Vec<(JobId, ())> = ids.iter().map(|&id| (id, ())).collect();
        self.room_for(64 * ids.len() as u64).await?;
        let (out, lsn) = self
            .shared
            .change_batch_nowait(&items, |id, ()| Event::Cancel { id })?;
        self.acknowledged(lsn).await?;
        Ok(out)
    }

    /// [`reschedule`](Engine::reschedule), as a future.
    pub async fn reschedule_async(&self, id: JobId, due_ms: u64) -> Result<Outcome> {
        let sh = &*self.shared;
        sh.check_open()?;
        sh.validate_due(due_ms, sh.clock.now_ms())?;
        self.room_for(64).await?;
        let (out, lsn) = sh.change_batch_nowait(&[(id, due_ms)], |id, due_ms| {
            Event::Reschedule { id, due_ms }
        })?;
        self.acknowledged(lsn).await?;
        if out[0].is_done() {
            let state = sh.lock_state();
            if due_ms < state.sleeping_until_ms {
                sh.wake.notify_all();
            }
        }
        Ok(out[0])
    }

    /// [`complete`](Engine::complete), as a future.
    pub async fn complete_async(&self, claimed: &Claimed) -> Result<bool> {
        self.room_for(64).await?;
        let (done, lsn) = self
            .shared
            .finish_batch_nowait(std::slice::from_ref(claimed), super::worker::completion)?;
        self.acknowledged(lsn).await?;
        Ok(done[0])
    }

    /// [`fail`](Engine::fail), as a future.
    pub async fn fail_async(&self, claimed: &Claimed, reason: &str) -> Result<bool> {
        self.room_for(64 + reason.len() as u64).await?;
        let (done, lsn) = self.shared.end_attempts_nowait(&[(
            claimed,
            super::worker::Ending::Failed {
                reason,
                retryable: true,
            },
        )])?;
        self.acknowledged(lsn).await?;
        Ok(done[0])
    }

    /// [`next`](Engine::next), as a future with no timeout (wrap it in your runtime's timeout):
    /// the next fired job, claimed. `None` once a drain or shutdown ended the ready stream.
    pub async fn next_async(&self) -> Result<Option<Claimed>> {
        Ok(self.claim_next_async(1).await?.pop())
    }

    /// [`claim_next`](Engine::claim_next), as a future with no timeout: up to `max` fired jobs
    /// claimed with one append. Empty once the ready stream ended.
    pub async fn claim_next_async(&self, max: usize) -> Result<Vec<Claimed>> {
        loop {
            let mut ids = TakeIds {
                shared: &self.shared,
                max: max.max(1),
            }
            .await;
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            // Plain claims are handed out without waiting for a sync (see `Engine::claim`);
            // what must be durable first is awaited, not waited for on this thread.
            {
                // Dropped while it waits for the roll, the ids go back to the ready queue.
                let waiting = GiveBack {
                    shared: &self.shared,
                    ids,
                };
                self.room_for(64 * waiting.ids.len() as u64).await?;
                ids = std::mem::take(&mut { waiting }.ids);
            }
            let mut round = self.shared.claim_round(&ids)?;
            while !round.deferred.is_empty() {
                // Dropped while it waits to claim them, the ids go back to the ready queue.
                let waiting = GiveBack {
                    shared: &self.shared,
                    ids: round.deferred_ids(),
                };
                self.acknowledged(Some(round.covers)).await?;
                let again = self
                    .shared
                    .claim_round(&std::mem::take(&mut { waiting }.ids))?;
                round.merge(again);
            }
            // Dropped (or failed) while it waits, the claims go back: nobody got them.
            let mut held = HandBack {
                shared: &self.shared,
                claimed: round.claimed.into_iter().flatten().collect(),
            };
            self.acknowledged(round.sync).await?;
            let claimed = std::mem::take(&mut held.claimed);
            if !claimed.is_empty() {
                return Ok(claimed);
            }
            // Every id was stale (cancelled, rescheduled, claimed by another worker).
        }
    }

    /// The fired jobs as a [`Stream`](futures_core::Stream) of claimed jobs, taken up to
    /// `batch` at a time (one append per batch); it ends once a drain or shutdown
    /// ended the ready stream.
    pub fn claimed_stream(&self, batch: usize) -> ClaimedStream<'_> {
        ClaimedStream {
            engine: self,
            batch: batch.max(1),
            buffer: VecDeque::new(),
            taking: None,
        }
    }
}

/// Claimed jobs nobody will get (a take dropped while it awaited the sync of claims that must
/// be durable first, a stream dropped with jobs it took in a batch and did not yield).
/// Dropped, it ends their attempts at once, without a failure, so that the jobs fire again
/// now with the next attempt instead of when their leases run out. Nothing is waited for: the
/// records share the next sync, and if they are lost (a failed sync, a crash) the leases still
/// run out as before.
struct HandBack<'a> {
    shared: &'a Shared,
    claimed: Vec<Claimed>,
}

impl Drop for HandBack<'_> {
    fn drop(&mut self) {
        if self.claimed.is_empty() || self.shared.wal.is_poisoned() {
            return;
        }
        let items: Vec<_> = self
            .claimed
            .iter()
            .map(|c| {
                let due_ms = c.due_ms;
                (c, super::worker::Ending::RetryAt { due_ms })
            })
            .collect();
        if let Err(e) = self.shared.end_attempts_nowait(&items) {
            tracing::debug!(error = %e, "claims of a dropped take were not handed back");
        }
    }
}

/// Ids taken off the ready queue that a take waits to claim. Dropped with any left (the take
/// was dropped while it waited), it puts those still ready back into the queue.
struct GiveBack<'a> {
    shared: &'a Shared,
    ids: Vec<JobId>,
}

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        if !self.ids.is_empty() {
            self.shared.lock_state().give_back(&self.ids);
        }
    }
}

type Taking<'a> = Pin<Box<dyn Future<Output = Result<Vec<Claimed>>> + Send + 'a>>;

/// See [`Engine::claimed_stream`].
#[must_use = "a stream does nothing unless polled"]
pub struct ClaimedStream<'a> {
    engine: &'a Engine,
    batch: usize,
    buffer: VecDeque<Claimed>,
    taking: Option<Taking<'a>>,
}

impl Drop for ClaimedStream<'_> {
    /// Claimed jobs taken in a batch and not yet yielded go back at once, like a dropped take's.
    fn drop(&mut self) {
        drop(HandBack {
            shared: &self.engine.shared,
            claimed: self.buffer.drain(..).collect(),
        });
    }
}

impl futures_core::Stream for ClaimedStream<'_> {
    type Item = Result<Claimed>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Claimed>>> {
        if let Some(job) = self.buffer.pop_front() {
            return Poll::Ready(Some(Ok(job)));
        }
        let (engine, batch) = (self.engine, self.batch);
        let taking = self
            .taking
            .get_or_insert_with(|| Box::pin(engine.claim_next_async(batch)));
        match taking.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(result) => {
                self.taking = None;
                match result {
                    Err(e) => Poll::Ready(Some(Err(e))),
                    Ok(jobs) if jobs.is_empty() => Poll::Ready(None),
                    Ok(jobs) => {
                        self.buffer.extend(jobs);
                        Poll::Ready(self.buffer.pop_front().map(Ok))
                    }
                }
            }
        }
    }
}
