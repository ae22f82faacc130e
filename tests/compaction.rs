//! Compaction folds sealed journal segments into hour-bucket files and deletes the segments;
//! what the engine holds never changes because of it, through reopens and through crashes at
//! every step of a pass.
//!
//! The expectation is the engine's own view before the pass (every live job with its due time,
//! attempt and payload), compared with the view after the pass and after each reopen.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{T0, config, fire};
use timewheel::{Clock, Config, Engine, JobId, JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SimRng, SyncFailure};

const HOUR: u64 = 3_600_000;

/// Every live job: due, attempt, payload.
type View = BTreeMap<JobId, (u64, u32, Vec<u8>)>;

fn view(engine: &Engine, ids: &[JobId]) -> View {
    ids.iter()
        .filter_map(|&id| {
            engine
                .get(id)
                .map(|j| (id, (j.due_ms, j.attempt, j.payload.to_vec())))
        })
        .collect()
}

fn small_segments() -> Config {
    let mut c = config();
    c.segment_bytes = 64 << 10;
    c.bucket_runs_max = 3;
    c.payload_bytes_max = 1024;
    c
}

fn open(disk: &FaultDisk, clock: &ManualClock) -> timewheel::Result<Engine> {
    Engine::open_on(disk.storage(), small_segments(), Arc::new(clock.clone()))
}

/// A workload across many hours: jobs scheduled, some cancelled, some moved to another hour,
/// some fired, claimed and completed, some left claimed (leased) or fired and unclaimed.
fn churn(engine: &Engine, clock: &ManualClock, rng: &mut SimRng, ids: &mut Vec<JobId>) {
    for round in 0..6 {
        let specs: Vec<JobSpec> = (0..400)
            .map(|i| {
                let due = clock.now_ms() + rng.between(0, 30 * HOUR);
                let payload = vec![(i % 251) as u8; (i % 40) as usize];
                JobSpec::at(due).payload(payload)
            })
            .collect();
        let new = engine.schedule_batch(specs).expect("schedule");
        ids.extend(&new);
        let cancel: Vec<JobId> = new.iter().copied().step_by(5).collect();
        engine.cancel_batch(&cancel).expect("cancel");
        let moves: Vec<(JobId, u64)> = new
            .iter()
            .skip(1)
            .step_by(7)
            .map(|&id| (id, clock.now_ms() + rng.between(0, 40 * HOUR)))
            .collect();
        engine.reschedule_batch(&moves).expect("reschedule");
        clock.advance(HOUR * (round % 3));
        let fired = fire(engine);
        for (i, c) in engine
            .claim_batch(&fired)
            .expect("claim")
            .into_iter()
            .flatten()
            .enumerate()
        {
            // Most complete; some stay running (leased in the bucket files).
            if i % 4 != 0 {
                assert!(engine.complete(&c).expect("complete"));
            }
        }
    }
}

fn compact_all(engine: &Engine) -> u64 {
    let mut records = 0;
    loop {
        let r = engine.compact().expect("compact");
        if r.records == 0 {
            return records;
        }
        records += r.records;
    }
}

#[test]
fn compaction_keeps_every_job_and_deletes_the_folded_journal() {
    let disk = FaultDisk::new(11);
    let clock = ManualClock::new(T0);
    let mut rng = SimRng::new(5);
    let mut ids = Vec::new();
    let engine = open(&disk, &clock).unwrap();
    churn(&engine, &clock, &mut rng, &mut ids);
    let before = view(&engine, &ids);
    let journal_before = engine.store_stats().journal_segments;
    assert!(journal_before > 3, "the workload fills several segments");
    let folded = compact_all(&engine);
    assert!(folded > 0);
    let s = engine.store_stats();
    assert!(
        s.segments_deleted > 0 && s.journal_segments < journal_before,
        "{s:?}"
    );
    assert!(s.buckets > 1 && s.bucket_jobs > 0, "{s:?}");
    assert_eq!(
        view(&engine, &ids),
        before,
        "compaction changes nothing the engine holds"
    );
    let stats_before = engine.stats();
    engine.close().unwrap();

    let engine = open(&disk, &clock).unwrap();
    let r = engine.recovery().clone();
    assert!(r.covered_lsn > 0 && r.bucket_jobs > 0, "{r:?}");
    assert_eq!(
        view(&engine, &ids),
        before,
        "reopened from the buckets and the journal tail"
    );
    let stats = engine.stats();
    assert_eq!(
        (
            stats.completed,
            stats.cancelled,
            stats.running + stats.ready + stats.scheduled
        ),
        (
            stats_before.completed,
            stats_before.cancelled,
            stats_before.running + stats_before.ready + stats_before.scheduled
        )
    );

    // More churn on top of the buckets, compacted again: patches, deletes, merges.
    churn(&engine, &clock, &mut rng, &mut ids);
    let before = view(&engine, &ids);
    compact_all(&engine);
    assert_eq!(view(&engine, &ids), before);
    engine.close().unwrap();
    let engine = open(&disk, &clock).unwrap();
    assert_eq!(view(&engine, &ids), before);

    // Finish everything: the buckets are dropped whole.
    let live: Vec<JobId> = before.keys().copied().collect();
    engine.cancel_batch(&live).unwrap();
    clock.advance(60 * HOUR);
    // Running jobs come back after their lease; claim and complete them.
    for _ in 0..3 {
        let fired = fire(&engine);
        for c in engine.claim_batch(&fired).unwrap().into_iter().flatten() {
            engine.complete(&c).unwrap();
        }
        clock.advance(60_000);
    }
    assert_eq!(view(&engine, &ids), View::new(), "every job finished");
    // The finishes must be in sealed segments for a pass to fold them: fill the current
    // segment with jobs scheduled and cancelled at once, until a roll lands after a cancel
    // (then nothing live is left in a sealed segment).
    let mut s = engine.store_stats();
    for _ in 0..2_000 {
        let id = engine
            .schedule(JobSpec::at(T0).payload(vec![0; 200]))
            .unwrap();
        assert!(engine.cancel(id).unwrap().is_done());
        compact_all(&engine);
        s = engine.store_stats();
        if s.buckets == 0 {
            break;
        }
    }
    assert_eq!(
        (s.buckets, s.bucket_files, s.bucket_jobs),
        (0, 0, 0),
        "{s:?}"
    );
    assert!(s.buckets_dropped > 0);
    engine.close().unwrap();
    let engine = open(&disk, &clock).unwrap();
    assert_eq!(engine.stats().scheduled + engine.stats().ready, 0);
    let names = disk.live_names();
    assert!(
        !names.iter().any(|n| n.ends_with(".run")),
        "no bucket file is left: {names:?}"
    );
}

/// A crash at each step of a pass: the k-th sync of the pass fails (so the pass stops right
/// there), the engine is abandoned, and the disk loses a random part of what was not synced.
/// The reopened engine holds exactly what it held before the pass.
#[test]
fn a_crash_at_any_step_of_a_pass_loses_nothing() {
    let mut passes_completed = 0;
    for k in (0..30u64).chain([45, 70, 120, 400]) {
        let disk = FaultDisk::new(100 + k);
        let clock = ManualClock::new(T0);
        let mut rng = SimRng::new(k);
        let mut ids = Vec::new();
        let engine = open(&disk, &clock).unwrap();
        churn(&engine, &clock, &mut rng, &mut ids);
        // One pass first, so the failing pass also merges and patches existing runs.
        engine.compact().unwrap();
        churn(&engine, &clock, &mut rng, &mut ids);
        let before = view(&engine, &ids);
        disk.set_sync_failure(SyncFailure::AfterN(k));
        let r = engine.compact();
        passes_completed += u64::from(r.is_ok());
        if r.is_err() {
            assert!(
                engine.schedule(JobSpec::at(T0)).is_err(),
                "a failed sync during compaction poisons: nothing more is acknowledged"
            );
        }
        engine.abandon();
        disk.set_sync_failure(SyncFailure::Never);
        let crashed = disk.crash(&CrashOptions::random(&mut rng));
        let engine = open(&crashed, &clock).unwrap_or_else(|e| panic!("k={k}: {e}"));
        assert_eq!(view(&engine, &ids), before, "k={k}");
        // And the store is usable: the next pass succeeds and changes nothing.
        compact_all(&engine);
        assert_eq!(view(&engine, &ids), before, "k={k}, after the next pass");
    }
    assert!(
        passes_completed > 0,
        "some k is past the last sync of a pass"
    );
}

/// Ids name their home hour bucket, so that a job on disk is found from its id alone.
#[test]
fn ids_grow_and_name_their_hour() {
    let disk = FaultDisk::new(3);
    let clock = ManualClock::new(T0);
    let engine = open(&disk, &clock).unwrap();
    let a = engine.schedule(JobSpec::at(T0 + 5 * HOUR)).unwrap();
    let b = engine.schedule(JobSpec::at(T0 - 9 * HOUR)).unwrap();
    assert!(b > a);
    let residue = |ms: u64| (ms / HOUR) % (1 << JobId::BUCKET_BITS);
    assert_eq!(a.0 % (1 << JobId::BUCKET_BITS), residue(T0 + 5 * HOUR));
    assert_eq!(
        b.0 % (1 << JobId::BUCKET_BITS),
        residue(T0),
        "a job due already is kept in the hour it was accepted"
    );
}

/// A full disk: compaction must write its new files before it may delete the old ones, so the
/// engine keeps a ballast file and gives it up to a pass that finds no room; the pass then frees
/// the journal, schedules work again, and the ballast comes back.
#[test]
fn a_full_disk_gives_up_the_ballast_so_compaction_can_free_space() {
    let disk = FaultDisk::new(77);
    let clock = ManualClock::new(T0);
    let mut c = small_segments();
    c.disk_ballast_bytes = 256 << 10;
    c.no_space_retry_ms = 0;
    let engine = Engine::open_on(disk.storage(), c, Arc::new(clock.clone())).unwrap();
    assert!(disk.live_names().iter().any(|n| n == "BALLAST"));
    // Fill a disk of 1 MiB (the ballast and about 11 segments) with jobs.
    disk.set_capacity_bytes(Some(1 << 20));
    let mut ids = Vec::new();
    loop {
        match engine.schedule_batch((0..50).map(|_| JobSpec::at(T0 + HOUR).payload(vec![1; 200]))) {
            Ok(new) => ids.extend(new),
            Err(timewheel::Error::NoSpace { .. }) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(ids.len() > 1_000, "{}", ids.len());
    // Cancels go into the reserve kept for them, until even that is full.
    let mut cancelled = 0;
    for chunk in ids.chunks(20) {
        match engine.cancel_batch(chunk) {
            Ok(_) => cancelled += chunk.len(),
            Err(timewheel::Error::NoSpace { .. }) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    // The reserve is a quarter segment (16 KiB here), and each synced batch of cancels starts
    // on a page of its own: at least three batches of 20 fit whatever page the last schedule
    // left the log on (the `Opened` record of the open moved that page and this count from
    // 100 to 80).
    assert!(
        cancelled >= 60,
        "the reserve held some cancels: {cancelled}"
    );
    let before = engine.store_stats();
    let r = engine
        .compact()
        .expect("the pass runs once the ballast is given up");
    assert!(r.segments_deleted > 0, "{r:?}");
    let after = engine.store_stats();
    assert_eq!(
        after.ballast_released, 1,
        "the pass found no room at first: {after:?}"
    );
    assert!(after.journal_segments < before.journal_segments);
    engine
        .schedule(JobSpec::at(T0 + HOUR))
        .expect("schedules work again");
    assert!(
        disk.live_names().iter().any(|n| n == "BALLAST"),
        "the ballast is made again once there is room"
    );
}

/// Schedules and cancels throwaway jobs, compacting after each, until the buckets hold
/// `jobs` jobs: the records before them are then in sealed segments, folded.
fn fold_until(engine: &Engine, jobs: u64) -> timewheel::StoreStats {
    for _ in 0..5_000 {
        let id = engine
            .schedule(JobSpec::at(T0).payload(vec![0; 200]))
            .unwrap();
        assert!(engine.cancel(id).unwrap().is_done());
        compact_all(engine);
        let s = engine.store_stats();
        if s.bucket_jobs == jobs {
            return s;
        }
    }
    panic!(
        "the buckets never held {jobs} jobs: {:?}",
        engine.store_stats()
    );
}

/// A bucket whose jobs are mostly finished is rewritten to the jobs left, not kept (and
/// loaded at every open) whole with the finishes stacked on it: the deletes are a few bytes
/// each, so the runs' sizes alone would never call for a merge.
#[test]
fn a_mostly_finished_bucket_is_rewritten_to_its_live_jobs() {
    let disk = FaultDisk::new(12);
    let clock = ManualClock::new(T0);
    let mut config = small_segments();
    config.bucket_runs_max = 16;
    // The bucket within the horizon: the reopen loads it.
    config.horizon_ms = 10 * HOUR;
    let engine = Engine::open_on(disk.storage(), config.clone(), Arc::new(clock.clone())).unwrap();
    let due = T0 + 5 * HOUR;
    let ids = engine
        .schedule_batch((0..2_000u64).map(|i| JobSpec::at(due + i).payload([7u8; 32])))
        .unwrap();
    let full = fold_until(&engine, 2_000);
    assert_eq!(full.buckets, 1, "{full:?}");

    let (keep, finish) = ids.split_at(20);
    engine.cancel_batch(finish).unwrap();
    let before = view(&engine, &ids);
    assert_eq!(before.len(), keep.len());
    let s = fold_until(&engine, keep.len() as u64);
    assert_eq!(
        (s.buckets, s.bucket_files),
        (1, 1),
        "the finishes are merged away, not stacked: {s:?}"
    );
    // What is left is the live jobs' bytes, within the merge rule's factor (125 %).
    let per_job = full.bucket_bytes / 2_000;
    assert_eq!(config.bucket_space_percent_max, 125);
    assert!(
        s.bucket_bytes * 4 <= 5 * per_job * keep.len() as u64 + 4 * per_job,
        "{} bytes for {} jobs of about {per_job} bytes: {s:?}",
        s.bucket_bytes,
        keep.len()
    );
    assert_eq!(view(&engine, &ids), before);
    engine.close().unwrap();

    let engine = Engine::open_on(disk.storage(), config, Arc::new(clock.clone())).unwrap();
    assert_eq!(view(&engine, &ids), before, "reopened from the merged run");
    assert_eq!(engine.recovery().bucket_jobs, keep.len() as u64);
}

/// A segment that fills slowly is sealed by the first pass after it has held records for
/// `Config::seal_after_ms`, so the jobs its records finish leave the bucket files, and the
/// next open replays nothing of them, without waiting for it to fill. With 0 they wait.
#[test]
fn a_slowly_filled_segment_is_sealed_after_its_bound_and_its_finishes_folded() {
    for seal_after_ms in [0, 60_000] {
        let disk = FaultDisk::new(13);
        let clock = ManualClock::new(T0);
        let mut config = small_segments();
        config.seal_after_ms = seal_after_ms;
        config.horizon_ms = 10 * HOUR;
        let engine =
            Engine::open_on(disk.storage(), config.clone(), Arc::new(clock.clone())).unwrap();
        let due = T0 + 5 * HOUR;
        let ids = engine
            .schedule_batch((0..200u64).map(|i| JobSpec::at(due + i).payload([7u8; 32])))
            .unwrap();
        let (keep, finish) = ids.split_at(20);
        engine.cancel_batch(finish).unwrap();
        let before = view(&engine, &ids);
        // The first pass sees the segment hold records; the bound counts from there.
        assert_eq!(compact_all(&engine), 0);
        clock.advance(seal_after_ms.max(1) - 1);
        assert_eq!(compact_all(&engine), 0, "sealed before its bound");
        clock.advance(1);
        let folded = compact_all(&engine);
        let s = engine.store_stats();
        if seal_after_ms == 0 {
            assert_eq!((folded, s.bucket_jobs, s.segments_sealed_early), (0, 0, 0));
        } else {
            assert!(folded > ids.len() as u64, "{folded} records folded");
            assert_eq!(s.segments_sealed_early, 1, "{s:?}");
            assert_eq!(s.bucket_jobs, keep.len() as u64, "{s:?}");
            assert_eq!(
                s.journal_segments, 1,
                "the sealed segment is deleted: {s:?}"
            );
            // Nothing new since: the empty segment is not sealed again.
            clock.advance(10 * seal_after_ms);
            assert_eq!(compact_all(&engine), 0);
            assert_eq!(engine.store_stats().segments_sealed_early, 1);
        }
        assert_eq!(view(&engine, &ids), before);
        engine.close().unwrap();

        let engine = Engine::open_on(disk.storage(), config, Arc::new(clock.clone())).unwrap();
        assert_eq!(view(&engine, &ids), before);
        let r = engine.recovery();
        if seal_after_ms == 0 {
            assert!(r.records > ids.len() as u64, "{r:?}");
        } else {
            // Only the close's own record is replayed.
            assert_eq!((r.bucket_jobs, r.records), (keep.len() as u64, 1), "{r:?}");
        }
        engine.close().unwrap();
    }
}

/// A seal the disk has no room for (the next segment's file can not be made) puts the seal
/// off: the pass neither fails nor writes anything, and the first pass once there is room
/// seals and folds.
#[test]
fn a_seal_on_a_full_disk_waits_for_room() {
    let disk = FaultDisk::new(14);
    let clock = ManualClock::new(T0);
    let mut config = small_segments();
    config.seal_after_ms = 1_000;
    let engine = Engine::open_on(disk.storage(), config, Arc::new(clock.clone())).unwrap();
    let ids = engine
        .schedule_batch((0..50u64).map(|i| JobSpec::at(T0 + 5 * HOUR + i)))
        .unwrap();
    engine.cancel_batch(&ids[10..]).unwrap();
    assert_eq!(
        compact_all(&engine),
        0,
        "the first pass only starts the count"
    );
    clock.advance(1_000);
    disk.set_enospc(true);
    let names = disk.live_names();
    assert_eq!(compact_all(&engine), 0);
    let s = engine.store_stats();
    assert_eq!(
        (s.segments_sealed_early, &s.compaction_error),
        (0, &None),
        "{s:?}"
    );
    assert_eq!(disk.live_names(), names, "nothing made");
    disk.set_enospc(false);
    assert!(compact_all(&engine) > 0);
    let s = engine.store_stats();
    assert_eq!((s.segments_sealed_early, s.bucket_jobs), (1, 10), "{s:?}");
    engine.close().unwrap();
}
