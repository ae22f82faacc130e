//! Job ids are never reused within a data directory, also across restarts and after the jobs
//! that had them are finished.

mod common;

use std::collections::BTreeSet;

use common::{T0, fire, open_sim};
use timewheel::{JobSpec, ManualClock};
use timewheel_wal::testing::{CrashOptions, FaultDisk};

#[test]
fn ids_stay_unique_across_restarts() {
    let mut disk = FaultDisk::new(50);
    let clock = ManualClock::new(T0);
    let mut seen = BTreeSet::new();
    for round in 0..5 {
        let engine = open_sim(&disk, &clock);
        for _ in 0..20 {
            let id = engine.schedule(JobSpec::at(T0)).expect("scheduled");
            assert!(seen.insert(id), "id {id} reused in round {round}");
        }
        // Finish all of them: the highest id must still not come back.
        for id in fire(&engine) {
            let c = engine.claim(id).expect("claim").expect("ready");
            assert!(engine.complete(&c).expect("complete"));
        }
        if round % 2 == 0 {
            engine.close().expect("close");
            disk = disk.crash(&CrashOptions::clean());
        } else {
            engine.abandon();
            disk = disk.crash(&CrashOptions::clean());
        }
    }
    assert_eq!(seen.len(), 100);
}
