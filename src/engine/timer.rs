//! The timer thread: sleeps until the next deadline or until something earlier is scheduled,
//! then moves due job ids to the ready queue in bounded batches and expires leases.
//!
//! There is no idle ticking: with nothing due, the thread blocks on a condition variable until
//! the next deadline (or forever, with an empty wheel) and is woken only by a schedule that
//! needs an earlier wake-up, by a manual clock being moved, or by shutdown. It never writes to
//! the log and never waits on the disk: firing and lease expiry are not logged (see
//! `state.rs`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Shared;

/// How long a real-time timer thread steps aside between batches of a burst.
const BURST_PAUSE: Duration = Duration::from_micros(50);

/// Runs until shutdown.
pub(crate) fn run(shared: Arc<Shared>) {
    let max = shared.config.fires_per_advance_max;
    let realtime = shared.config.timer_realtime && raise_priority("timer thread");
    shared.timer_realtime.store(realtime, Ordering::Relaxed);
    let mut state = shared.lock_state();
    loop {
        // Each time round, the lock is this thread's again: a long piece of work that stepped
        // aside for it between two chunks may go on (`Shared::step_aside`).
        shared.timer_turns.fetch_add(1, Ordering::SeqCst);
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        let run = shared.run_timers_locked(&mut state);
        if run.hit_bound(max) {
            // A burst: let schedule and cancel calls in between batches. A real-time thread's
            // yield lets no normal thread run (it goes back to the head of its own queue), so
            // on one CPU it would keep every worker off until the burst is out: it sleeps a
            // moment instead.
            drop(state);
            if realtime {
                std::thread::sleep(BURST_PAUSE);
            } else {
                std::thread::yield_now();
            }
            state = shared.lock_state();
            continue;
        }
        let deadline = state.next_deadline();
        let wait = deadline.and_then(|due| shared.clock.real_wait(due));
        state.sleeping_until_ms = deadline.unwrap_or(u64::MAX);
        state = match wait {
            Some(d) if d.is_zero() => continue,
            Some(d) => {
                shared
                    .wake
                    .wait_timeout(state, d)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            None => shared.wake.wait(state).unwrap_or_else(|p| p.into_inner()),
        };
        state.sleeping_until_ms = u64::MAX;
    }
}

/// Asks for the lowest real-time priority for this thread; whether it was granted. On a
/// machine with fewer cores than busy threads, a normal thread woken at its deadline waits for
/// a CPU behind the running ones (milliseconds, measured with `perf sched timehist` in the
/// demo); a `SCHED_FIFO` thread preempts them at once. Priority 1 stays below every real-time
/// thread the system itself runs.
#[cfg(unix)]
pub(crate) fn raise_priority(thread: &str) -> bool {
    use thread_priority::{
        RealtimeThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
        set_thread_priority_and_policy, thread_native_id,
    };
    let policy = ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo);
    match set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, policy) {
        Ok(()) => {
            tracing::debug!("{thread}: real-time priority (SCHED_FIFO 1)");
            true
        }
        Err(e) => {
            tracing::info!(
                "{thread}: real-time priority refused ({e:?}); it runs as a normal thread"
            );
            false
        }
    }
}

#[cfg(not(unix))]
pub(crate) fn raise_priority(_thread: &str) -> bool {
    false
}
