//! On the fault-injecting disk, whatever a crash leaves behind, every acknowledged schedule that
//! was not acknowledged-cancelled or completed comes back, with its due time and payload, and
//! nothing acknowledged as cancelled or completed comes back. Records that were written but
//! not acknowledged may or may not survive.

mod common;

use std::collections::BTreeMap;

use common::{T0, fire, open_sim};
use timewheel::{Error, JobId, JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk, SimRng};

#[derive(Debug, Clone, PartialEq)]
struct Expect {
    due_ms: u64,
    payload: Vec<u8>,
}

fn run_seed(seed: u64) {
    let mut rng = SimRng::new(seed);
    let mut disk = FaultDisk::new(seed);
    let clock = ManualClock::new(T0);
    let mut acked: BTreeMap<JobId, Expect> = BTreeMap::new();
    // Written to the log but not acknowledged: allowed to survive or vanish.
    let mut maybe: BTreeMap<JobId, Expect> = BTreeMap::new();
    for _round in 0..4 {
        let engine = open_sim(&disk, &clock);
        // What recovery brought back: every acked job, perhaps some unacked ones.
        for (id, e) in &acked {
            let info = engine
                .get(*id)
                .unwrap_or_else(|| panic!("seed {seed}: acked job {id} lost"));
            assert_eq!(info.due_ms, e.due_ms, "seed {seed}: job {id} due");
        }
        let survivors: Vec<JobId> = maybe
            .keys()
            .copied()
            .filter(|id| engine.get(*id).is_some())
            .collect();
        for id in survivors {
            let e = maybe.remove(&id).expect("listed");
            acked.insert(id, e);
        }
        maybe.clear();
        for _ in 0..rng.below(60) {
            match rng.below(10) {
                0..=4 => {
                    let due_ms = T0 + 1_000 + rng.below(100_000);
                    let payload = vec![rng.below(256) as u8; rng.below(300) as usize];
                    let id = engine
                        .schedule(JobSpec::at(due_ms).payload(payload.clone()))
                        .expect("schedule");
                    acked.insert(id, Expect { due_ms, payload });
                }
                5 => {
                    let n = 1 + rng.below(50);
                    let specs: Vec<_> = (0..n).map(|i| JobSpec::at(T0 + 2_000 + i)).collect();
                    let (ids, _lsn) = engine.schedule_batch_nowait(specs).expect("nowait");
                    for (i, id) in ids.into_iter().enumerate() {
                        let e = Expect {
                            due_ms: T0 + 2_000 + i as u64,
                            payload: Vec::new(),
                        };
                        maybe.insert(id, e);
                    }
                }
                6 | 7 => {
                    if let Some((&id, _)) = acked
                        .iter()
                        .nth(rng.below(acked.len().max(1) as u64) as usize)
                    {
                        assert!(
                            engine.cancel(id).expect("cancel").is_done(),
                            "seed {seed}: cancel {id}"
                        );
                        acked.remove(&id);
                    }
                }
                _ => {
                    if let Some((&id, _)) = acked
                        .iter()
                        .nth(rng.below(acked.len().max(1) as u64) as usize)
                    {
                        let due = T0 + rng.below(500);
                        assert!(engine.reschedule(id, due).expect("reschedule").is_done());
                        acked.get_mut(&id).expect("acked").due_ms = due;
                    }
                }
            }
        }
        engine.abandon();
        let opts = CrashOptions {
            bit_flips_synced: 0,
            misdirected_writes: 0,
            ..CrashOptions::random(&mut rng)
        };
        disk = disk.crash(&opts);
    }
    // Finally: everything acked fires once its time comes, with its payload.
    let engine = open_sim(&disk, &clock);
    clock.set(T0 + 1_000_000);
    let fired = fire(&engine);
    for (id, e) in &acked {
        assert!(
            fired.contains(id),
            "seed {seed}: acked job {id} did not fire"
        );
        let c = engine.claim(*id).expect("claim").expect("ready");
        assert_eq!(
            &c.payload[..],
            &e.payload[..],
            "seed {seed}: payload of {id}"
        );
    }
}

#[test]
fn acknowledged_jobs_survive_any_crash() {
    for seed in 0..40 {
        run_seed(seed);
    }
}

#[test]
fn damage_to_synced_data_is_repaired_or_reported_never_dropped() {
    let disk = FaultDisk::new(99);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let ids: Vec<_> = (0..50)
        .map(|i| {
            engine
                .schedule(JobSpec::at(T0 + i).payload("x"))
                .expect("ok")
        })
        .collect();
    engine.abandon();
    let name = disk.durable_names().into_iter().next().expect("a segment");
    // Each commit is a block of its own from the page after the header (WAL format 2): its
    // records, then at the next 512-byte boundary their mirror. Damage to the records of the
    // tenth commit alone is repaired from the mirror ...
    let block = 10 * 4096;
    disk.flip_bit(&name, block + 30, 3);
    let disk = disk.crash(&CrashOptions::clean());
    let engine = open_sim(&disk, &clock);
    for id in &ids {
        assert!(
            engine.get(*id).is_some(),
            "job {id} lost to repairable damage"
        );
    }
    engine.abandon();
    // ... and damage to both copies, which later commits vouch for, refuses the open.
    let name = disk.durable_names().into_iter().next().expect("a segment");
    let block = 12 * 4096;
    disk.flip_bit(&name, block + 30, 3);
    disk.flip_bit(&name, block + 512 + 30, 3);
    let disk = disk.crash(&CrashOptions::clean());
    let storage = disk.storage();
    let err = timewheel::Engine::open_on(storage, common::config(), std::sync::Arc::new(clock))
        .err()
        .expect("the open refuses damaged acknowledged data");
    assert!(matches!(err, Error::Corrupted { .. }), "got {err:?}");
}
