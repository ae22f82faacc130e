//! An operator's cut (`repair::plan_cut`, `repair::cut`): at every record boundary of a log
//! of several segments the cut leaves exactly the records before it, as a log that opens with
//! nothing to repair and no torn tail and takes appends again; every other offset is refused;
//! a cut at a damage that refuses the open makes it open; and a power cut at any point of a
//! cut leaves a directory on which the same cut, planned again, finishes.

use std::collections::BTreeSet;

use timewheel_wal::repair::{CutObserver, CutPoint, CutRecord, Refusal, cut, plan_cut};
use timewheel_wal::storage::Storage;
use timewheel_wal::testing::{CrashOptions, FaultDisk, SimRng, SyncFailure};
use timewheel_wal::{Error, Wal, WalOptions, segment_file_name};

const SEGMENT_BYTES: u64 = 16 << 10;

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: SEGMENT_BYTES,
        record_bytes_max: 1000,
        ..Default::default()
    }
}

/// A log of several segments: single records (a block each) and batches (several records in
/// one block), closed cleanly. Returns the records, LSN 1 first.
fn write_log(disk: &FaultDisk) -> Vec<(u8, Vec<u8>)> {
    let (wal, _) = Wal::open(disk.storage(), opts()).unwrap();
    let mut records = Vec::new();
    for i in 0..14u8 {
        if i % 3 == 0 {
            let batch: Vec<(u8, Vec<u8>)> = (0..4)
                .map(|j| (1 + j % 2, vec![i ^ j; 17 + 40 * j as usize]))
                .collect();
            wal.append_batch(batch.iter().map(|(t, b)| (*t, &b[..])))
                .unwrap();
            records.extend(batch);
        } else {
            let body = vec![i; 5 + 30 * (i as usize % 4)];
            wal.append(3, &body).unwrap();
            records.push((3, body));
        }
    }
    wal.close().unwrap();
    records
}

fn segment_ids(disk: &FaultDisk) -> Vec<u64> {
    let mut ids: Vec<u64> = disk
        .live_names()
        .iter()
        .filter_map(|n| timewheel_wal::parse_segment_file_name(n))
        .collect();
    ids.sort_unstable();
    ids
}

/// Opens the log on `disk` and checks that it holds exactly `expected`, cleanly.
fn check_prefix(disk: &FaultDisk, expected: &[(u8, Vec<u8>)], what: &str) {
    let (wal, report) = Wal::open(disk.storage(), opts()).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(report.last_lsn, expected.len() as u64, "{what}");
    assert!(report.torn_tail.is_none(), "{what}: {:?}", report.torn_tail);
    assert!(report.repaired_groups.is_empty(), "{what}");
    assert_eq!(report.damaged_mirrors, 0, "{what}");
    let found: Vec<(u8, Vec<u8>)> = wal
        .iter_from(1)
        .map(|r| r.map(|r| (r.record_type, r.body)))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(found, expected, "{what}");
    // Appends go on after the kept records.
    assert_eq!(
        wal.append(9, b"after").unwrap(),
        expected.len() as u64 + 1,
        "{what}"
    );
    wal.close().unwrap();
}

#[derive(Default)]
struct Seen(Vec<(u64, u8, Vec<u8>)>);

impl CutObserver for Seen {
    fn record(&mut self, r: &CutRecord<'_>) {
        self.0.push((r.lsn, r.record_type, r.body.to_vec()));
    }
}

#[test]
fn every_boundary_cuts_to_exactly_the_records_before_it_and_nothing_else_is_a_boundary() {
    let disk = FaultDisk::new(11);
    let records = write_log(&disk);
    let ids = segment_ids(&disk);
    assert!(ids.len() >= 3, "several segments: {ids:?}");
    let n = records.len() as u64;

    let mut cuts = BTreeSet::new();
    let (mut inside, mut at_zero) = (0, 0);
    for &id in &ids {
        for offset in (0..=SEGMENT_BYTES).step_by(8) {
            let at = CutPoint {
                segment: id,
                offset,
            };
            let copy = disk.crash(&CrashOptions::clean());
            let storage = copy.storage();
            assert!(storage.try_lock().unwrap());
            let mut seen = Seen::default();
            let (survey, verdict) = plan_cut(&storage, at, &[], &mut seen).unwrap();
            assert!(survey.damage.is_none());
            assert_eq!((survey.first_lsn, survey.last_lsn), (1, n));
            let plan = match verdict {
                Ok(plan) => plan,
                Err(Refusal::NotABoundary { before, after }) => {
                    assert!(
                        before.is_some_and(|b| b < offset) || after.is_some_and(|a| a > offset),
                        "{at}"
                    );
                    continue;
                }
                Err(Refusal::WholeLog { segment }) => {
                    assert_eq!((segment, offset), (1, 0));
                    continue;
                }
                Err(Refusal::BeyondEnd { end }) => {
                    assert_eq!(end.segment, *ids.last().unwrap(), "{at}");
                    assert!(offset > end.offset, "{at}");
                    continue;
                }
                Err(other) => panic!("{at}: {other}"),
            };
            if offset == 0 {
                at_zero += 1;
            } else {
                inside += 1;
            }
            cuts.insert(plan.first_lsn_cut);
            let kept = (plan.first_lsn_cut - 1) as usize;
            // What it would cut is exactly the records after it.
            assert_eq!(plan.records, n - kept as u64, "{at}");
            let cut_records: Vec<(u8, Vec<u8>)> =
                seen.0.iter().map(|(_, t, b)| (*t, b.clone())).collect();
            assert_eq!(cut_records, records[kept..], "{at}");
            assert!(
                seen.0.iter().map(|r| r.0).eq(plan.first_lsn_cut..=n),
                "{at}"
            );
            assert!(plan.unreadable.is_empty());
            assert_eq!(
                plan.nothing_to_do,
                plan.first_lsn_cut == n + 1 && plan.removed.is_empty(),
                "{at}"
            );
            let before: BTreeSet<String> = copy.live_names().into_iter().collect();
            cut(&storage, &plan).unwrap();
            drop(storage);
            let after: BTreeSet<String> = copy.live_names().into_iter().collect();
            let removed: BTreeSet<String> = before.difference(&after).cloned().collect();
            assert_eq!(removed, plan.removed.iter().cloned().collect(), "{at}");
            check_prefix(&copy, &records[..kept], &format!("cut at {at}"));
        }
    }
    assert_eq!(
        cuts,
        (1..=n + 1).collect(),
        "every record starts a boundary"
    );
    assert!(
        inside as u64 > n + ids.len() as u64,
        "a boundary per record, per block end and per segment end: {inside}"
    );
    assert_eq!(
        at_zero,
        ids.len() - 1,
        "every segment but the first can go whole"
    );
}

#[test]
fn refusals_name_the_place() {
    let disk = FaultDisk::new(12);
    write_log(&disk);
    let ids = segment_ids(&disk);
    let storage = disk.storage();
    assert!(storage.try_lock().unwrap());
    let plan = |segment, offset| {
        plan_cut(&storage, CutPoint { segment, offset }, &[], &mut ())
            .unwrap()
            .1
    };
    assert_eq!(plan(0, 4096), Err(Refusal::NoSuchSegment { segment: 0 }));
    assert_eq!(plan(1, 0), Err(Refusal::WholeLog { segment: 1 }));
    assert_eq!(
        plan(1, 4100),
        Err(Refusal::NotABoundary {
            before: Some(4096),
            after: Some(4096 + 48),
        }),
        "the batch's first record has 17 bytes: a frame of 48 (24 + 17 + pad)"
    );
    assert!(matches!(
        plan(1, 2048),
        Err(Refusal::NotABoundary {
            before: None,
            after: Some(4096)
        })
    ));
    let last = *ids.last().unwrap();
    assert!(matches!(
        plan(last, SEGMENT_BYTES - 8),
        Err(Refusal::BeyondEnd { .. })
    ));
    assert!(matches!(
        plan(last + 5, 4096),
        Err(Refusal::BeyondEnd { .. })
    ));
    assert!(plan(1, 4096).is_ok());
    // Nothing changed.
    drop(storage);
    let (_, report) = Wal::open(disk.storage(), opts()).unwrap();
    assert_eq!(
        report.segments_copied, 0,
        "the clean close's marker is still there"
    );
}

/// Plans at `at` on a clean copy of `disk` and returns the first LSN cut.
fn first_cut(disk: &FaultDisk, at: CutPoint) -> u64 {
    let copy = disk.crash(&CrashOptions::clean());
    let storage = copy.storage();
    assert!(storage.try_lock().unwrap());
    plan_cut(&storage, at, &[], &mut ())
        .unwrap()
        .1
        .unwrap()
        .first_lsn_cut
}

#[test]
fn a_cut_at_damage_that_refuses_the_open_makes_it_open() {
    let mut rng = SimRng::new(5);
    let noise: Vec<u8> = (0..4096).map(|_| rng.next_u64() as u8).collect();
    for garbage in [vec![0xA5; 4096], noise] {
        cut_at_damage(&garbage);
    }
}

/// The block at 8192 of segment 2 overwritten with `garbage`, then cut there.
fn cut_at_damage(garbage: &[u8]) {
    let disk = FaultDisk::new(13);
    let records = write_log(&disk);
    let n = records.len() as u64;
    let two = segment_file_name(2);
    let block = CutPoint {
        segment: 2,
        offset: 8192,
    };
    let next = CutPoint {
        segment: 2,
        offset: 12288,
    };
    let (lost_from, lost_to) = (first_cut(&disk, block), first_cut(&disk, next));
    assert!(lost_from < lost_to, "segment 2 holds a block at 8192");

    // The block at 8192 of the sealed segment 2, group and mirror, overwritten.
    disk.write_raw(&two, 8192, garbage, true);
    match Wal::open(disk.storage(), opts()) {
        Err(Error::Corrupted {
            segment: 2,
            offset: 8192,
            ..
        }) => {}
        other => panic!("the open must refuse: {:?}", other.map(|(_, r)| r)),
    }
    let storage = disk.storage();
    assert!(storage.try_lock().unwrap());
    for later in [
        CutPoint {
            segment: 2,
            offset: 12288,
        },
        CutPoint {
            segment: 3,
            offset: 4096,
        },
    ] {
        let (survey, verdict) = plan_cut(&storage, later, &[], &mut ()).unwrap();
        let damage = survey.damage.unwrap();
        assert_eq!(damage.at(), block);
        assert_eq!(verdict, Err(Refusal::BeyondDamage(damage)));
    }
    let mut seen = Seen::default();
    let (survey, verdict) = plan_cut(&storage, block, &[lost_from, n], &mut seen).unwrap();
    let plan = verdict.unwrap();
    assert_eq!(
        survey.located,
        vec![(lost_from, block)],
        "LSN {n} is past the damage"
    );
    assert_eq!(plan.first_lsn_cut, lost_from);
    assert_eq!(plan.rewritten.as_deref(), Some(two.as_str()));
    assert_eq!(plan.unreadable.len(), 1);
    assert_eq!(
        (plan.unreadable[0].segment, plan.unreadable[0].offset),
        (2, 8192)
    );
    assert_eq!(
        plan.unreadable[0].bytes, 4096,
        "reading resumed at the next block"
    );
    // The records after the damaged block, in it and in later segments, are read for the
    // report.
    assert_eq!(plan.records, n - lost_to + 1);
    assert_eq!(plan.last_lsn_cut, n);
    assert!(seen.0.iter().map(|r| r.0).eq(lost_to..=n));
    cut(&storage, &plan).unwrap();
    drop(storage);
    check_prefix(
        &disk,
        &records[..lost_from as usize - 1],
        "cut at the damage",
    );
}

#[test]
fn a_group_repaired_from_its_mirror_before_the_cut_is_written_whole_again() {
    let disk = FaultDisk::new(14);
    let records = write_log(&disk);
    // A flipped bit in the first record of segment 1 (its mirror is intact).
    disk.flip_bit(&segment_file_name(1), 4096 + 30, 2);
    let (_, report) = Wal::open(disk.crash(&CrashOptions::clean()).storage(), opts()).unwrap();
    assert_eq!(report.repaired_groups.len(), 1, "recovery would repair it");
    let at = CutPoint {
        segment: 1,
        offset: 12288,
    };
    let storage = disk.storage();
    assert!(storage.try_lock().unwrap());
    let plan = plan_cut(&storage, at, &[], &mut ()).unwrap().1.unwrap();
    assert!(plan.rewritten.is_some());
    cut(&storage, &plan).unwrap();
    drop(storage);
    check_prefix(
        &disk,
        &records[..plan.first_lsn_cut as usize - 1],
        "repaired, then cut",
    );
}

#[test]
fn a_power_cut_during_the_cut_leaves_a_cut_that_can_be_made_again() {
    let base = FaultDisk::new(15);
    let records = write_log(&base);
    // Damage in segment 2; the cut between two records of the block before it, if it holds
    // several (a new mirror), else at its start.
    let inner = (4104..8192).step_by(8).find(|&offset| {
        let copy = base.crash(&CrashOptions::clean());
        let storage = copy.storage();
        assert!(storage.try_lock().unwrap());
        plan_cut(&storage, CutPoint { segment: 2, offset }, &[], &mut ())
            .unwrap()
            .1
            .is_ok()
    });
    let at = CutPoint {
        segment: 2,
        offset: inner.unwrap_or(4096),
    };
    base.write_raw(&segment_file_name(2), 8192, &[0x5A; 4096], true);
    let mut rng = SimRng::new(77);
    let mut expected_first = None;
    for k in 0..16u64 {
        let disk = base.crash(&CrashOptions::clean());
        let storage = disk.storage();
        assert!(storage.try_lock().unwrap());
        let plan = plan_cut(&storage, at, &[], &mut ()).unwrap().1.unwrap();
        assert_eq!(
            *expected_first.get_or_insert(plan.first_lsn_cut),
            plan.first_lsn_cut
        );
        disk.set_sync_failure(SyncFailure::AlwaysAfterN(k));
        let result = cut(&storage, &plan);
        drop(storage);
        let after = disk.crash(&CrashOptions::random(&mut rng));
        let storage = after.storage();
        assert!(storage.try_lock().unwrap());
        let again = plan_cut(&storage, at, &[], &mut ())
            .unwrap()
            .1
            .unwrap_or_else(|r| panic!("k = {k} ({result:?}): {r}"));
        assert_eq!(again.first_lsn_cut, plan.first_lsn_cut, "k = {k}");
        cut(&storage, &again).unwrap();
        drop(storage);
        check_prefix(
            &after,
            &records[..plan.first_lsn_cut as usize - 1],
            &format!("k = {k}"),
        );
    }
}
