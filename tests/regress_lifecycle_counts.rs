//! Regressions the simulation found in what the lifecycle reports.
//!
//! `Stats::retried` counts the retries since open: replay applies the log's `Retry` records
//! with the live engine's transition function, and used to count them again, so a reopen
//! showed the retries of earlier lives (and `retry_at`s) as if they had just happened. Found by
//! the simulation once its model followed the counter (seed 0 of the fast batch, among many).

mod common;

use common::{T0, fire, open_sim};
use timewheel::{Backoff, JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk};

#[test]
fn a_reopen_counts_no_retries() {
    let disk = FaultDisk::new(7);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let a = engine
        .schedule(
            JobSpec::at(T0)
                .max_attempts(5)
                .backoff(Backoff::new(10, 100)),
        )
        .expect("acked");
    let b = engine.schedule(JobSpec::at(T0)).expect("acked");
    let mut fired = fire(&engine);
    fired.sort_unstable();
    let mut want = vec![a, b];
    want.sort_unstable();
    assert_eq!(fired, want);
    let ca = engine.claim(a).expect("claim").expect("ready");
    let cb = engine.claim(b).expect("claim").expect("ready");
    assert!(engine.fail(&ca, "503").expect("fail"), "retried");
    assert!(engine.retry_at(&cb, T0 + 1_000).expect("retry_at"));
    assert_eq!(engine.stats().retried, 2);
    engine.close().expect("close");

    let engine = open_sim(&disk, &clock);
    assert_eq!(engine.get(a).expect("waits").failures, 1, "replayed");
    assert_eq!(engine.stats().retried, 0, "no retry since this open");
    engine.abandon();

    let disk = disk.crash(&CrashOptions::clean());
    let engine = open_sim(&disk, &clock);
    assert_eq!(
        engine.stats().retried,
        0,
        "no retry since this open (after a crash)"
    );
}

/// A retryable failure with an empty reason leaves no last error, whether `get` reads memory,
/// a replayed log or a bucket file (compaction keeps an empty reason as "no error"; memory used
/// to show `Some("")` until a pass and a reopen showed `None`). Found by the simulation.
#[test]
fn an_empty_reason_is_no_last_error() {
    let disk = FaultDisk::new(8);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let a = engine
        .schedule(JobSpec::at(T0).max_attempts(5))
        .expect("acked");
    assert_eq!(fire(&engine), [a]);
    let c = engine.claim(a).expect("claim").expect("ready");
    assert!(engine.fail(&c, "").expect("fail"));
    let info = engine.get(a).expect("waits");
    assert_eq!((info.failures, info.last_error), (1, None));
}
