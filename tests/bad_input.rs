//! Bad input gets a typed `InvalidInput` error and writes nothing: the disk is byte-for-byte
//! what it was, and a batch with one bad job schedules none of them.

mod common;

use std::time::Duration;

use common::{T0, config, open_sim};
use timewheel::{Error, JobSpec, ManualClock};
use timewheel_wal::testing::FaultDisk;

fn disk_image(disk: &FaultDisk) -> Vec<(String, Vec<u8>)> {
    let mut names = disk.live_names();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let bytes = disk.live_file(&n).expect("listed");
            (n, bytes)
        })
        .collect()
}

#[test]
fn invalid_requests_are_refused_and_write_nothing() {
    let disk = FaultDisk::new(60);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let good = engine.schedule(JobSpec::at(T0 + 10)).expect("a valid job");
    let limits = config();
    let before = disk_image(&disk);

    let too_big = vec![0u8; limits.payload_bytes_max + 1];
    let cases: Vec<(&str, timewheel::Result<_>)> = vec![
        (
            "payload",
            engine
                .schedule(JobSpec::at(T0).payload(too_big.clone()))
                .map(|_| ()),
        ),
        (
            "due_ms",
            engine
                .schedule(JobSpec::at(T0 + limits.due_ahead_ms_max + 1))
                .map(|_| ()),
        ),
        (
            "delay",
            engine
                .schedule(JobSpec::after(Duration::from_millis(
                    limits.due_ahead_ms_max + 1,
                )))
                .map(|_| ()),
        ),
        (
            "payload",
            engine
                .schedule_batch(vec![JobSpec::at(T0), JobSpec::at(T0).payload(too_big)])
                .map(|_| ()),
        ),
        ("due_ms", engine.reschedule(good, u64::MAX).map(|_| ())),
    ];
    for (field, result) in cases {
        match result {
            Err(Error::InvalidInput { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected InvalidInput on {field}, got {other:?}"),
        }
    }
    assert_eq!(disk_image(&disk), before, "nothing was written");
    let stats = engine.stats();
    assert_eq!(stats.scheduled, 1, "the half-bad batch scheduled nothing");
    assert_eq!(engine.get(good).map(|j| j.due_ms), Some(T0 + 10));
}

#[test]
fn a_batch_over_its_limit_or_with_one_bad_job_is_refused_and_writes_nothing() {
    let disk = FaultDisk::new(61);
    let clock = ManualClock::new(T0);
    let mut c = config();
    c.batch_jobs_max = 8;
    let too_far = T0 + c.due_ahead_ms_max + 1;
    let engine = timewheel::Engine::open_on(disk.storage(), c, std::sync::Arc::new(clock.clone()))
        .expect("engine opens");
    engine.schedule(JobSpec::at(T0 + 10)).expect("a valid job");
    let before = disk_image(&disk);
    let jobs = |n: u64| (0..n).map(|i| JobSpec::at(T0 + 100 + i));
    // A batch whose length is known ahead, and one whose length is not (a filter): the same
    // error, naming how many jobs there were.
    let cases: Vec<timewheel::Result<_>> = vec![
        engine.schedule_batch(jobs(9).collect::<Vec<_>>()),
        engine.schedule_batch(jobs(20).filter(|_| true)),
        engine.schedule_batch_nowait(jobs(9)).map(|(ids, _)| ids),
        // A bad job last, after good ones that were encoded already.
        engine.schedule_batch(jobs(7).chain([JobSpec::at(too_far)])),
    ];
    for (i, result) in cases.into_iter().enumerate() {
        match result {
            Err(Error::InvalidInput { field, reason }) if i < 3 => {
                assert_eq!(field, "batch");
                let n = if i == 1 { 20 } else { 9 };
                assert!(
                    reason.starts_with(&format!("{n} jobs")),
                    "case {i}: {reason}"
                );
            }
            Err(Error::InvalidInput { field, .. }) if i == 3 => assert_eq!(field, "due_ms"),
            other => panic!("case {i}: expected InvalidInput, got {other:?}"),
        }
    }
    assert_eq!(disk_image(&disk), before, "nothing was written");
    assert_eq!(
        engine.stats().scheduled,
        1,
        "no job of a refused batch was scheduled"
    );
    // At the limit, a batch goes through.
    assert_eq!(engine.schedule_batch(jobs(8)).expect("8 jobs").len(), 8);
}

#[test]
fn an_oversized_failure_reason_is_refused() {
    let disk = FaultDisk::new(61);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let id = engine.schedule(JobSpec::at(T0)).expect("ok");
    engine.run_timers();
    let c = engine.claim(id).expect("claim").expect("ready");
    let before = disk_image(&disk);
    let reason = "x".repeat(config().fail_reason_bytes_max + 1);
    assert!(matches!(
        engine.fail(&c, &reason),
        Err(Error::InvalidInput { .. })
    ));
    assert_eq!(disk_image(&disk), before);
    assert!(engine.fail(&c, "short").expect("a short reason is fine"));
}

#[test]
fn a_bad_config_is_refused_before_touching_the_disk() {
    let disk = FaultDisk::new(62);
    let mut cfg = config();
    cfg.segment_bytes = 4096;
    let r = timewheel::Engine::open_on(
        disk.storage(),
        cfg,
        std::sync::Arc::new(ManualClock::new(T0)),
    );
    assert!(matches!(r, Err(Error::InvalidInput { .. })));
    assert!(disk.live_names().is_empty());
}

/// Opens a fresh fault disk with each config of `cases` (a value and the config holding it):
/// those marked valid open (and close); the others get a typed error naming `field`, and
/// nothing is written to the disk.
fn check_field(field: &str, cases: &[(u64, bool)], with: impl Fn(u64) -> timewheel::Config) {
    for &(value, valid) in cases {
        let disk = FaultDisk::new(64);
        let r = timewheel::Engine::open_on(
            disk.storage(),
            with(value),
            std::sync::Arc::new(ManualClock::new(T0)),
        );
        if valid {
            r.unwrap_or_else(|e| panic!("{field} = {value} is valid: {e}"))
                .close()
                .unwrap();
            continue;
        }
        assert!(
            matches!(&r, Err(Error::InvalidInput { field: f, .. }) if *f == field),
            "{field} = {value}: {:?}",
            r.err()
        );
        assert!(disk.live_names().is_empty());
    }
}

/// `Config::syncs_in_flight` outside 1..=8.
#[test]
fn syncs_in_flight_out_of_range_is_refused_before_touching_the_disk() {
    check_field(
        "syncs_in_flight",
        &[(0, false), (9, false), (1, true), (8, true)],
        |n| config().syncs_in_flight(n as usize),
    );
}

/// `Config::write_reach_bytes` that is zero or not a whole number of pages.
#[test]
fn a_write_reach_that_is_not_whole_pages_is_refused_before_touching_the_disk() {
    check_field(
        "write_reach_bytes",
        &[(0, false), (1000, false), (4097, false), (8192, true)],
        |bytes| config().write_reach_bytes(bytes),
    );
}

/// `Config::bucket_space_percent_max` under 100 (a bucket can not hold less than its live
/// jobs); 100 itself is accepted.
#[test]
fn a_bucket_space_bound_under_its_live_jobs_is_refused_before_touching_the_disk() {
    check_field(
        "bucket_space_percent_max",
        &[(0, false), (99, false), (100, true)],
        |percent| config().bucket_space_percent_max(percent as u32),
    );
}

/// `Config::seal_after_ms` between 0 and a second (a segment file started for every few
/// records); 0 (never) and 1000 are accepted.
#[test]
fn a_seal_bound_under_a_second_is_refused_before_touching_the_disk() {
    check_field(
        "seal_after_ms",
        &[(1, false), (999, false), (0, true), (1000, true)],
        |ms| config().seal_after_ms(ms),
    );
}

/// `Config::job_table_chunk_slots` that is not a power of two from 16 to 65,536.
#[test]
fn a_job_table_chunk_that_is_not_a_power_of_two_in_range_is_refused_before_touching_the_disk() {
    check_field(
        "job_table_chunk_slots",
        &[
            (0, false),
            (8, false),
            (100, false),
            (1 << 17, false),
            (16, true),
            (1 << 16, true),
        ],
        |slots| config().job_table_chunk_slots(slots as usize),
    );
}
