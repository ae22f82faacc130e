//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use timewheel::{Config, Engine, JobId, ManualClock};
use timewheel_wal::testing::FaultDisk;

/// A point in time far from the epoch, so that "hours ago" is still positive.
pub const T0: u64 = 1_800_000_000_000;

/// A config for tests: small segments, no timer thread (the test fires timers itself).
pub fn config() -> Config {
    let mut c = Config::new("/nonexistent-unused");
    c.segment_bytes = 1 << 20;
    c.timer_thread = false;
    c
}

/// An engine on a fault-injecting disk with a manual clock, timers driven by the test.
pub fn open_sim(disk: &FaultDisk, clock: &ManualClock) -> Engine {
    Engine::open_on(disk.storage(), config(), Arc::new(clock.clone())).expect("engine opens")
}

/// Runs the timers and drains the ready queue.
pub fn fire(engine: &Engine) -> Vec<JobId> {
    engine.run_timers();
    engine.ready().try_iter().collect()
}

/// Claims and completes each of `ids` (a worker doing its job; a fired job nobody claims is
/// queued again once `Config::lease_ms` passed).
pub fn finish_all(engine: &Engine, ids: &[JobId]) {
    for c in engine
        .claim_batch(ids)
        .expect("claim")
        .into_iter()
        .flatten()
    {
        assert!(engine.complete(&c).expect("complete"));
    }
}

/// Receives `n` ids, failing the test after a generous guard time.
pub fn recv_n(engine: &Engine, n: usize) -> Vec<JobId> {
    let ready = engine.ready();
    (0..n)
        .map(|_| {
            ready
                .recv_timeout(Duration::from_secs(20))
                .expect("a job fires (20 s guard)")
        })
        .collect()
}

/// A data directory removed when dropped (tests that need a real directory, e.g. for the
/// sidecar binary).
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// A fresh directory named after this test process and `name`.
    pub fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("timewheel-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
