//! Where time comes from: the system clock in production, a manual clock in tests and in the
//! simulation.
//!
//! All engine times are `u64` milliseconds since the Unix epoch, UTC. The engine never trusts a
//! clock to be monotonic: it keeps the highest time it has seen and holds there when the clock
//! goes backwards (nothing is un-fired, nothing fires early).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A callback the engine registers so that a clock moved by hand can wake its timer thread.
/// It returns `false` once its engine is gone, and the clock then forgets it.
pub type AdvanceHook = Arc<dyn Fn() -> bool + Send + Sync>;

/// A source of wall-clock time for the engine.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch, UTC.
    fn now_ms(&self) -> u64;

    /// Microseconds since the Unix epoch, for lateness measurements. Defaults to `now_ms`
    /// scaled, for clocks without finer resolution.
    fn now_us(&self) -> u64 {
        self.now_ms().saturating_mul(1000)
    }

    /// How long, in real time, the timer thread may block while waiting for `due_ms`.
    /// `None` means "until woken": a clock that only moves by hand calls the hooks registered
    /// with [`Clock::on_advance`] instead.
    fn real_wait(&self, due_ms: u64) -> Option<Duration>;

    /// Registers a hook run each time the clock is moved by something other than the passing
    /// of real time. The system clock ignores it.
    fn on_advance(&self, hook: AdvanceHook) {
        let _ = hook;
    }
}

/// The operating system's real-time clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        self.now_us() / 1000
    }

    fn now_us(&self) -> u64 {
        // A clock set before 1970 reads as the epoch; the engine holds time steady anyway.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }

    fn real_wait(&self, due_ms: u64) -> Option<Duration> {
        // Wake exactly at the start of the due millisecond: sleeping "due - now" from the
        // current microsecond never wakes early enough to need a second wait in the common case,
        // and a wake-up that comes early is simply re-checked.
        let now_us = self.now_us();
        let due_us = due_ms.saturating_mul(1000);
        Some(Duration::from_micros(due_us.saturating_sub(now_us)))
    }
}

/// A clock that only moves when told to; for tests and the deterministic simulation.
///
/// Clones share the same time.
#[derive(Clone, Default)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Default)]
struct ManualInner {
    now_ms: AtomicU64,
    hooks: Mutex<Vec<AdvanceHook>>,
}

impl std::fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManualClock")
            .field("now_ms", &self.now_ms())
            .finish()
    }
}

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        let clock = Self::default();
        clock.inner.now_ms.store(now_ms, Ordering::SeqCst);
        clock
    }

    /// Moves the clock forward by `ms` and wakes whoever waits on it.
    pub fn advance(&self, ms: u64) {
        self.inner.now_ms.fetch_add(ms, Ordering::SeqCst);
        self.notify();
    }

    /// Sets the clock to `now_ms`, which may be earlier than the current reading (a clock
    /// stepped backwards); the engine holds its time steady in that case.
    pub fn set(&self, now_ms: u64) {
        self.inner.now_ms.store(now_ms, Ordering::SeqCst);
        self.notify();
    }

    fn notify(&self) {
        let hooks = self
            .inner
            .hooks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let dead: Vec<_> = hooks.iter().filter(|hook| !hook()).cloned().collect();
        if !dead.is_empty() {
            let mut live = self.inner.hooks.lock().unwrap_or_else(|p| p.into_inner());
            live.retain(|h| !dead.iter().any(|d| Arc::ptr_eq(d, h)));
        }
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.inner.now_ms.load(Ordering::SeqCst)
    }

    fn real_wait(&self, _due_ms: u64) -> Option<Duration> {
        None
    }

    fn on_advance(&self, hook: AdvanceHook) {
        self.inner
            .hooks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(hook);
    }
}

/// Converts a UTC date-time to engine milliseconds; times before the epoch are refused.
pub fn ms_from_datetime(at: chrono::DateTime<chrono::Utc>) -> Option<u64> {
    u64::try_from(at.timestamp_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn manual_clock_moves_only_by_hand_and_runs_hooks() {
        let clock = ManualClock::new(1_000);
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        clock.on_advance(Arc::new(move || h.fetch_add(1, Ordering::SeqCst) < 1));
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance(5);
        clock.set(900);
        assert_eq!(clock.now_ms(), 900);
        clock.advance(1);
        // The hook said it was done after its first call: it ran twice, then was dropped.
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        assert!(clock.inner.hooks.lock().expect("lock").is_empty());
        assert_eq!(clock.real_wait(2_000), None);
    }

    #[test]
    fn system_clock_waits_until_the_due_millisecond() {
        let c = SystemClock;
        let now = c.now_ms();
        assert_eq!(c.real_wait(now.saturating_sub(10)), Some(Duration::ZERO));
        // Only bounds that hold however long this thread is descheduled between the two reads.
        let w = c
            .real_wait(now + 50)
            .expect("system clock always has a wait");
        assert!(w <= Duration::from_millis(50));
        let far = c.real_wait(now + 3_600_000).expect("a wait");
        assert!(
            far > Duration::from_secs(60),
            "a due an hour ahead is a long wait"
        );
    }

    #[test]
    fn datetimes_before_the_epoch_are_refused() {
        let before = chrono::DateTime::from_timestamp_millis(-1).expect("valid");
        assert_eq!(ms_from_datetime(before), None);
        let at = chrono::DateTime::from_timestamp_millis(1_700_000_000_123).expect("valid");
        assert_eq!(ms_from_datetime(at), Some(1_700_000_000_123));
    }
}
