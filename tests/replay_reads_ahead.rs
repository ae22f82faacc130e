//! On real files, replay reads the journal ahead on a second thread while it applies the
//! records on its own: the open must rebuild exactly what reading on one thread rebuilds,
//! across many of the reader's batches, with records larger than a batch's bytes, with the
//! changes that follow a job's schedule (cancels, reschedules, claims, completions), and
//! after a crash. The fault disk reads on one thread unless a test allows it otherwise
//! (`FaultDisk::allow_parallel_reads`), so both ways run here on copies of one disk.

mod common;

use std::sync::Arc;

use common::{T0, config, view};
use timewheel::{Config, Engine, Error, JobId, JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SyncFailure};

const HOUR: u64 = 3_600_000;

fn cfg() -> Config {
    let mut c = config();
    c.payload_bytes_max = 128 << 10;
    c.segment_bytes = 4 << 20;
    // Every record stays in the journal: no pass folds it into bucket files.
    c.compact_interval_ms = 0;
    c
}

fn open(disk: &FaultDisk, clock: &ManualClock, read_ahead: bool) -> Engine {
    disk.allow_parallel_reads(read_ahead);
    Engine::open_on(disk.storage(), cfg(), Arc::new(clock.clone())).expect("the engine opens")
}

#[test]
fn reading_ahead_rebuilds_what_reading_on_one_thread_does() {
    let disk = FaultDisk::new(11);
    let clock = ManualClock::new(T0);
    let mut ids = Vec::new();
    {
        let engine = open(&disk, &clock, false);
        // About 20,000 records (several of the reader's batches), and 24 payloads of 100 KiB
        // (larger than a batch's bytes together: batches that end on size, not on count).
        for round in 0..20u64 {
            let specs = (0..1_000u64).map(|i| {
                let n = round * 1_000 + i;
                let len = if n % 829 == 1 {
                    100 << 10
                } else {
                    (n % 40) as usize
                };
                JobSpec::at(T0 + HOUR + (n * 7_919) % (3 * HOUR)).payload(vec![n as u8; len])
            });
            ids.extend(engine.schedule_batch(specs).expect("schedule"));
        }
        let cancel: Vec<JobId> = ids.iter().copied().step_by(7).collect();
        engine.cancel_batch(&cancel).expect("cancel");
        let moves: Vec<(JobId, u64)> = ids
            .iter()
            .skip(3)
            .step_by(11)
            .map(|&id| (id, T0 + 100))
            .collect();
        engine.reschedule_batch(&moves).expect("reschedule");
        // The moved jobs fire: some are claimed, half of those completed.
        clock.set(T0 + 200);
        engine.run_timers();
        let fired: Vec<JobId> = engine.ready().try_iter().take(500).collect();
        let claimed = engine.claim_batch(&fired).expect("claim");
        assert!(
            claimed.iter().all(Option::is_some),
            "every fired job is claimed"
        );
        for c in claimed.iter().flatten().step_by(2) {
            engine.complete(c).expect("complete");
        }
        // Abandoned, as in a crash: what was acknowledged is durable.
    }
    let disk = disk.crash(&CrashOptions::clean());
    let one = {
        let engine = open(&disk, &clock, false);
        let v = view(&engine, &ids);
        drop(engine);
        v
    };
    assert!(one.len() > 15_000, "most jobs are live: {}", one.len());
    assert!(one.values().any(|j| j.3.len() == 100 << 10));
    assert!(one.values().any(|j| j.2 == 1), "claims were replayed");
    for round in 0..2 {
        let engine = open(&disk, &clock, true);
        assert_eq!(view(&engine, &ids), one, "round {round}: read ahead");
        drop(engine);
    }
}

/// A read that fails while replay reads ahead ends the open with that I/O error, as it does
/// when replay reads on its own thread: never a panic, a hang, or an open that goes on without
/// the records it could not read. The last reads of an open are replay's, so failing the last
/// few fails the reader thread's.
#[test]
fn a_read_error_while_reading_ahead_fails_the_open() {
    let disk = FaultDisk::new(12);
    let clock = ManualClock::new(T0);
    {
        let engine = open(&disk, &clock, false);
        for round in 0..10u64 {
            let specs = (0..1_000u64)
                .map(|i| JobSpec::at(T0 + HOUR + round * 1_000 + i).payload(vec![i as u8; 20]));
            engine.schedule_batch(specs).expect("schedule");
        }
    }
    let base = disk.crash(&CrashOptions::clean());
    // How many reads a whole open makes, reading ahead (the same every time: nothing fails).
    let reads = {
        let d = base.crash(&CrashOptions::clean());
        let before = d.stats().reads;
        drop(open(&d, &clock, true));
        d.stats().reads - before
    };
    assert!(reads > 10, "an open reads: {reads}");
    for last in [1, 2, 3, 5, 8] {
        for read_ahead in [false, true] {
            let d = base.crash(&CrashOptions::clean());
            d.allow_parallel_reads(read_ahead);
            d.set_read_failure(SyncFailure::AlwaysAfterN(reads - last));
            let opened = Engine::open_on(d.storage(), cfg(), Arc::new(clock.clone()));
            match opened {
                Err(Error::Io(_)) => assert!(d.stats().failed_reads > 0),
                Err(e) => panic!("the last {last} reads failed: {e:?}, not an I/O error"),
                Ok(_) => panic!(
                    "the last {last} of {reads} reads failed (read ahead: {read_ahead}), \
                     and the open succeeded"
                ),
            }
        }
    }
}
