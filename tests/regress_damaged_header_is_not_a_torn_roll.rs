//! Media damage to the header of the last segment, once records follow it, is corruption, not a
//! torn roll. Recovery used to look for records under the salt read from the damaged header;
//! with the salt itself damaged (a bit flip, or a misdirected write over sector 0) it found
//! none, deleted the segment as a roll that never finished, and silently lost every
//! acknowledged job in it. Found by the simulation (seeds 1687, 2828).

mod common;

use common::{T0, config, open_sim};
use std::sync::Arc;
use timewheel::{Engine, Error, JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk};

/// Byte offset of the salt in a segment header (docs/wal-format.md).
const SALT_OFFSET: u64 = 24;

#[test]
fn a_damaged_salt_in_the_last_header_is_reported_not_deleted() {
    let disk = FaultDisk::new(3);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    for i in 0..20 {
        engine
            .schedule(JobSpec::at(T0 + i).payload("x"))
            .expect("acked");
    }
    engine.abandon();
    let name = disk
        .durable_names()
        .into_iter()
        .next()
        .expect("one segment");
    disk.flip_bit(&name, SALT_OFFSET, 5);
    let disk = disk.crash(&CrashOptions::clean());
    let err = Engine::open_on(disk.storage(), config(), Arc::new(clock))
        .err()
        .expect("the open refuses a damaged header over acknowledged records");
    assert!(matches!(err, Error::Corrupted { .. }), "got {err:?}");
}

#[test]
fn a_torn_roll_with_nothing_after_its_header_is_still_removed() {
    let disk = FaultDisk::new(4);
    let clock = ManualClock::new(T0);
    // A fresh log whose first header never became durable: removed, and the log starts over.
    // (The log alone: an engine's open syncs its `Opened` record, so a header it leaves always
    // has a record after it.)
    let (wal, _) = timewheel_wal::Wal::open(
        disk.storage(),
        timewheel_wal::WalOptions {
            segment_bytes: config().segment_bytes,
            record_bytes_max: 4096,
            ..Default::default()
        },
    )
    .expect("a fresh log");
    wal.abandon();
    drop(wal);
    let name = disk
        .durable_names()
        .into_iter()
        .next()
        .expect("one segment");
    disk.flip_bit(&name, SALT_OFFSET, 5);
    let disk = disk.crash(&CrashOptions::clean());
    let engine = open_sim(&disk, &clock);
    engine
        .schedule(JobSpec::at(T0))
        .expect("the log works again");
}
