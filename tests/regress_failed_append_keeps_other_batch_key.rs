//! A batch whose append fails lets go of the idempotency keys of its own new jobs only. A spec
//! of that batch that named a key held by *another* batch's job (appended, not yet committed)
//! used to clear that job's claim on the key as well: the next schedule of the key then made a
//! second job with it, the first commit to come panicked in memory ("a new id is not in the
//! table"), and the log held two live jobs with one key, which replay refuses, so the
//! directory no longer opened.

mod common;

use std::sync::Arc;

use common::{T0, config, fill_until_no_space};
use timewheel::{Engine, Error, JobSpec, ManualClock};
use timewheel_wal::testing::FaultDisk;

#[test]
fn a_failed_append_leaves_another_batchs_pending_key_alone() {
    let disk = FaultDisk::new(7);
    let clock = ManualClock::new(T0);
    // No reserve and no back-off: every schedule meets the full disk in its own append.
    let cfg = config()
        .segment_bytes(16 << 10)
        .payload_bytes_max(1 << 10)
        .no_space_reserve_bytes(0)
        .no_space_retry_ms(0);
    let open = || Engine::open_on(disk.storage(), cfg.clone(), Arc::new(clock.clone()));
    let engine = open().expect("opens");
    let keyed = || JobSpec::at(T0 + 60_000).key(*b"order-42");

    // Batch A: appended, its key pending until A's commit.
    let (a_ids, a) = engine.schedule_batch_nowait([keyed()]).expect("appended");
    let x = a_ids[0];

    // Fill the log until it can not grow.
    disk.set_enospc(true);
    fill_until_no_space(&engine, 256, || {
        JobSpec::at(T0 + 3_600_000).payload([1u8; 512])
    });

    // Batch B names the key (A's job) and schedules one new job: its append fails.
    match engine.schedule_batch([keyed(), JobSpec::at(T0 + 120_000)]) {
        Err(Error::NoSpace { .. }) => {}
        other => panic!("expected NoSpace, got {other:?}"),
    }
    disk.set_enospc(false);

    // The key is still A's: a schedule naming it answers A's job.
    let c = engine.schedule(keyed()).expect("scheduled");
    assert_eq!(c, x, "the key names the job appended first");
    engine.commit(a).expect("A commits");
    assert_eq!(engine.get_by_key(b"order-42").map(|j| j.id), Some(x));

    // And the log opens again, with one job holding the key.
    engine.close().expect("closes");
    let engine = open().expect("the log opens again");
    assert_eq!(engine.get_by_key(b"order-42").map(|j| j.id), Some(x));
}
