//! The log opens over [`ReadOnlyStorage`] exactly as it would for real (the same records, the
//! same verdict on damage) and leaves every byte and every name of the directory as it was.

use std::collections::BTreeMap;
use std::path::Path;

use timewheel_wal::storage::readonly::ReadOnlyStorage;
use timewheel_wal::{Durability, Error, Wal, WalOptions};

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: 64 << 10,
        record_bytes_max: 1000,
        durability: Durability::Sync,
        ..Default::default()
    }
}

/// Every file of the directory and its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// Every record: LSN and body.
type Records = Vec<(u64, Vec<u8>)>;

fn records<S: timewheel_wal::Storage>(wal: &Wal<S>) -> Records {
    wal.iter_from(1)
        .map(|r| {
            let r = r.unwrap();
            (r.lsn, r.body.to_vec())
        })
        .collect()
}

/// A log of several segments whose process died: no close marker, a file made ahead.
fn crashed_log(dir: &Path) {
    let (wal, _) = Wal::open_dir(dir, opts()).unwrap();
    for i in 0..3000u32 {
        let body = i.to_le_bytes().repeat(1 + (i % 7) as usize);
        if i % 10 == 0 {
            wal.append(1, &body).unwrap();
        } else {
            wal.append_nowait(1, &body).unwrap();
        }
    }
    wal.sync().unwrap();
    wal.abandon();
}

#[test]
fn a_crashed_log_reads_as_a_real_open_reads_it_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    crashed_log(dir.path());
    let before = snapshot(dir.path());
    assert!(before.len() >= 3, "several segments: {:?}", before.keys());

    let (ro, report) = Wal::open(ReadOnlyStorage::open_dir(dir.path()).unwrap(), opts()).unwrap();
    let seen = records(&ro);
    assert_eq!(seen.len(), 3000);
    assert_eq!(report.records, 3000);
    drop(ro);
    assert_eq!(snapshot(dir.path()), before, "the directory is untouched");

    let (real, real_report) = Wal::open_dir(dir.path(), opts()).unwrap();
    assert_eq!(records(&real), seen, "the same records as a real open");
    assert_eq!(real_report.segments, report.segments);
    real.close().unwrap();
}

#[test]
fn damage_gets_the_verdict_a_real_open_gives() {
    let dir = tempfile::tempdir().unwrap();
    crashed_log(dir.path());
    // Flip a byte inside the first record of the first (sealed) segment.
    let first = dir.path().join(timewheel_wal::segment_file_name(1));
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[4096 + 30] ^= 0x40;
    std::fs::write(&first, &bytes).unwrap();
    let before = snapshot(dir.path());

    // What each open concludes: the records it serves, or where it refuses.
    fn verdict<S: timewheel_wal::Storage>(
        r: Result<(Wal<S>, timewheel_wal::RecoveryReport), Error>,
    ) -> Result<(Records, usize), (u64, u64)> {
        match r {
            Ok((wal, report)) => Ok((records(&wal), report.repaired_groups.len())),
            Err(Error::Corrupted {
                segment, offset, ..
            }) => Err((segment, offset)),
            Err(e) => panic!("unexpected error {e:?}"),
        }
    }
    let ro = verdict(Wal::open(
        ReadOnlyStorage::open_dir(dir.path()).unwrap(),
        opts(),
    ));
    assert_eq!(snapshot(dir.path()), before, "the directory is untouched");
    let real = verdict(Wal::open_dir(dir.path(), opts()));
    assert_eq!(ro, real, "the same verdict");
    assert!(
        matches!(ro, Ok((_, 1))),
        "the mirror repairs one damaged copy: {ro:?}"
    );
}

#[test]
fn a_running_log_refuses_the_read_only_open() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open_dir(dir.path(), opts()).unwrap();
    wal.append(1, b"x").unwrap();
    let ro = Wal::open(ReadOnlyStorage::open_dir(dir.path()).unwrap(), opts());
    assert!(matches!(ro, Err(Error::Locked)), "{:?}", ro.err());
    wal.close().unwrap();
}
