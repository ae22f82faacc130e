//! Nothing is visible before it is durable, and nothing handed out is handed out again:
//! a job whose schedule failed to sync never fires nor can be claimed; ids handed out by a
//! schedule whose records a crash then cut are never given to another job; and the attempt
//! a worker held (the fencing token) is never repeated after a crash, though claims are handed
//! out before their sync (`tests/claims_off_the_sync_path.rs` has the rules).

mod common;

use std::collections::BTreeSet;

use common::{T0, fire, open_sim};
use timewheel::{JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SyncFailure};

#[test]
fn a_schedule_that_failed_to_sync_never_fires_or_is_claimed() {
    let disk = FaultDisk::new(60);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let (ids, pending) = engine
        .schedule_batch_nowait([JobSpec::at(T0), JobSpec::at(T0 + 1)])
        .expect("appended");
    assert!(engine.get(ids[0]).is_none(), "not visible before commit");
    clock.set(T0 + 10);
    assert!(fire(&engine).is_empty(), "nothing fires before commit");
    disk.set_sync_failure(SyncFailure::Next);
    assert!(engine.commit(pending).is_err(), "the sync failed");
    assert!(engine.get(ids[0]).is_none() && engine.get(ids[1]).is_none());
    assert!(
        fire(&engine).is_empty(),
        "a job whose schedule failed never fires"
    );
    assert!(
        engine.claim(ids[0]).is_err(),
        "and can not be claimed (the engine is poisoned)"
    );
}

#[test]
fn ids_of_a_cut_tail_are_never_handed_out_again() {
    let mut disk = FaultDisk::new(61);
    let clock = ManualClock::new(T0);
    let mut handed_out = BTreeSet::new();
    for round in 0..4 {
        let engine = open_sim(&disk, &clock);
        let acked = engine.schedule(JobSpec::at(T0 + 1_000)).expect("durable");
        assert!(handed_out.insert(acked), "round {round}: {acked} reused");
        // Ids handed out, then the records lost: the sync fails and the crash keeps nothing
        // unsynced, so recovery cuts them off the log.
        let (lost, pending) = engine
            .schedule_batch_nowait((0..5).map(|_| JobSpec::at(T0)))
            .expect("appended");
        for id in &lost {
            assert!(handed_out.insert(*id), "round {round}: {id} reused");
        }
        disk.set_sync_failure(SyncFailure::Next);
        assert!(engine.commit(pending).is_err());
        engine.abandon();
        disk = disk.crash(&CrashOptions::clean());
        for id in &lost {
            let reopened = open_sim(&disk, &clock);
            assert!(reopened.get(*id).is_none(), "the cut job is gone");
            drop(reopened);
        }
    }
    let engine = open_sim(&disk, &clock);
    for id in engine
        .schedule_batch((0..50).map(|_| JobSpec::at(T0)))
        .expect("ok")
    {
        assert!(handed_out.insert(id), "{id} was handed out before");
    }
}

#[test]
fn the_attempt_a_worker_held_is_never_handed_out_again_after_a_crash() {
    let mut disk = FaultDisk::new(62);
    let clock = ManualClock::new(T0);
    let mut id = None;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let engine = open_sim(&disk, &clock);
        let id = *id.get_or_insert_with(|| engine.schedule(JobSpec::at(T0)).expect("durable"));
        assert_eq!(fire(&engine), vec![id]);
        let claimed = engine.claim(id).expect("claim").expect("ready");
        assert!(
            !seen.contains(&claimed.attempt),
            "attempt {} again",
            claimed.attempt
        );
        seen.push(claimed.attempt);
        // A crash that keeps nothing unsynced: the claim, handed out before its sync, is cut;
        // the next run skips the number it may have used.
        engine.abandon();
        disk = disk.crash(&CrashOptions::clean());
    }
    assert_eq!(seen, [1, 2, 3]);
}

/// A key taken by a schedule that is appended and not committed names its job to a second
/// schedule of the same key (which returns that id and schedules nothing), but to no lookup:
/// `id_by_key`, `get_by_key` and `cancel_by_key` see it only once its commit made it
/// visible. Batches longer than one commit chunk become visible whole, and two batches in
/// flight at once each on their own commit.
#[test]
fn a_key_taken_by_an_uncommitted_schedule_is_seen_only_after_its_commit() {
    let disk = FaultDisk::new(62);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let key = |b: u32, i: u32| format!("order-{b}-{i}").into_bytes();
    let batch = |b: u32, n: u32| (0..n).map(move |i| JobSpec::at(T0 + 5_000).key(key(b, i)));
    let (first, p1) = engine.schedule_batch_nowait(batch(1, 3000)).expect("1");
    let (second, p2) = engine.schedule_batch_nowait(batch(2, 10)).expect("2");
    let again = engine.schedule(JobSpec::at(T0 + 9_000).key(key(1, 2999)));
    assert_eq!(again.expect("names the pending job"), first[2999]);
    for (b, ids) in [(1, &first), (2, &second)] {
        for i in [0, ids.len() as u32 - 1] {
            let k = key(b, i);
            assert_eq!(engine.id_by_key(&k), None, "batch {b}: not visible yet");
            assert!(engine.get_by_key(&k).is_none());
            assert_eq!(
                engine.cancel_by_key(&k).expect("cancel"),
                timewheel::Outcome::NotFound
            );
        }
    }
    engine.commit(p2).expect("2 durable");
    assert_eq!(engine.id_by_key(&key(2, 9)), Some(second[9]));
    assert_eq!(
        engine.id_by_key(&key(1, 0)),
        None,
        "batch 1 still uncommitted"
    );
    engine.commit(p1).expect("1 durable");
    for i in [0, 1023, 1024, 2047, 2048, 2999] {
        assert_eq!(engine.id_by_key(&key(1, i)), Some(first[i as usize]));
    }
    assert_eq!(
        engine.cancel_by_key(&key(1, 5)).expect("cancel"),
        timewheel::Outcome::Done
    );
    assert_eq!(
        engine.id_by_key(&key(1, 5)),
        None,
        "cancelling frees the key"
    );
    let fresh = engine
        .schedule(JobSpec::at(T0 + 5_000).key(key(1, 5)))
        .expect("a new job takes the freed key");
    assert!(!first.contains(&fresh));
    assert_eq!(engine.id_by_key(&key(1, 5)), Some(fresh));
}

/// A batch whose `Pending` is dropped uncommitted (what an async schedule's future dropped
/// while it waits for its sync leaves behind) is not hidden until the next open: the next sync
/// that covers it makes it visible, key included, and its jobs fire. Dropped once durable, it
/// is visible at once; after a failed sync, never.
#[test]
fn a_dropped_pending_batch_becomes_visible_once_a_sync_covers_it() {
    let disk = FaultDisk::new(63);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let (ids, pending) = engine
        .schedule_batch_nowait([JobSpec::at(T0 + 100).key("order-9"), JobSpec::at(T0 + 200)])
        .expect("appended");
    drop(pending);
    assert!(engine.get(ids[0]).is_none(), "not durable yet: not visible");
    assert_eq!(engine.id_by_key(b"order-9"), None);
    // Another call's commit syncs the log, and with it the dropped batch.
    let other = engine.schedule(JobSpec::at(T0 + 300)).expect("durable");
    assert!(engine.get(ids[0]).is_some() && engine.get(ids[1]).is_some());
    assert_eq!(engine.id_by_key(b"order-9"), Some(ids[0]));
    let again = engine.schedule(JobSpec::at(T0 + 999).key("order-9"));
    assert_eq!(again.expect("the key's job"), ids[0]);
    clock.set(T0 + 300);
    let fired: BTreeSet<_> = fire(&engine).into_iter().collect();
    assert_eq!(fired, BTreeSet::from([ids[0], ids[1], other]));

    let (late, pending) = engine
        .schedule_batch_nowait([JobSpec::at(T0 + 500)])
        .expect("appended");
    engine.sync().expect("sync");
    drop(pending);
    assert!(
        engine.get(late[0]).is_some(),
        "durable when dropped: visible"
    );

    let (lost, pending) = engine
        .schedule_batch_nowait([JobSpec::at(T0 + 600)])
        .expect("appended");
    drop(pending);
    disk.set_sync_failure(SyncFailure::Next);
    assert!(
        engine.schedule(JobSpec::at(T0 + 700)).is_err(),
        "the sync failed"
    );
    assert!(
        engine.get(lost[0]).is_none(),
        "never visible after a failed sync"
    );
}
