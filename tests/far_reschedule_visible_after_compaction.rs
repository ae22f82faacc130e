//! A job rescheduled into an hour beyond the resident horizon stays visible to `get`,
//! `cancel` and `reschedule` after compaction passes evict it to its new bucket.
//!
//! A regression (found by the `engine_ops` fuzz target): the first pass folded the journal up to
//! the second reschedule, put the job's copy into the far bucket, and memory let the job go
//! because it looked the same (due T0 + 15 d): but two later reschedules (back to T0, then to
//! T0 + 15 d again) were not folded yet. The next pass moved the copy into the near bucket,
//! which is resident and never loaded again: `get` showed `None` and `reschedule` (and so
//! `cancel`) answered `NotFound` for an acknowledged job until a reopen, and a caller told
//! `NotFound` by a cancel would have seen the job fire. Memory now lets a job go only when no
//! record after the pass's fold point changed it (`Job::lsn`).

mod common;

use common::T0;
use std::sync::Arc;
use timewheel::{Config, Engine, JobSpec, ManualClock, Outcome};
use timewheel_wal::testing::FaultDisk;

const DAY_MS: u64 = 86_400_000;

fn config() -> Config {
    let mut c = Config::new("/nonexistent-unused");
    c.segment_bytes = 8192;
    c.payload_bytes_max = 256;
    c.fail_reason_bytes_max = 256;
    c.lease_ms = 1000;
    c.timer_thread = false;
    c.disk_ballast_bytes = 0;
    c
}

#[test]
fn a_job_moved_beyond_the_horizon_is_found_after_compaction() {
    let disk = FaultDisk::new(1);
    let clock = ManualClock::new(T0);
    let e = Engine::open_on(disk.storage(), config(), Arc::new(clock.clone())).expect("opens");
    let a = e
        .schedule(JobSpec::at(T0 - 4883).payload(vec![19; 19]))
        .expect("acked");
    e.sync().expect("sync");
    e.schedule(JobSpec::at(T0 - 2313).payload(vec![9; 9]))
        .expect("acked");
    for due in [T0, T0 + 15 * DAY_MS, T0, T0 + 15 * DAY_MS] {
        assert_eq!(e.reschedule(a, due).expect("reschedule"), Outcome::Done);
    }
    for _ in 0..4 {
        e.compact().expect("compact");
    }
    let info = e.get(a).expect("an acknowledged job is visible");
    assert_eq!(info.due_ms, T0 + 15 * DAY_MS);
    assert_eq!(
        e.reschedule(a, T0 + 16 * DAY_MS).expect("reschedule"),
        Outcome::Done
    );
}
