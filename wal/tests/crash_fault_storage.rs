//! Crashes on the fault-injecting disk: a seeded workload (singles, batches, no-wait appends,
//! syncs, segment rolls when full and when asked, and deletes) runs for several lives, each ended by a random power cut
//! while the log is still open. After every crash, recovery must keep every record that was
//! acknowledged durable, return a gap-free prefix of what was written, and never bring back a
//! stale record from an earlier life of a segment (bodies are unique per life). With media
//! faults (flips and misdirected writes in synced data) it may refuse with `Corrupted`, but
//! must never panic nor return a record that was not written there. Failures print the seed.

use timewheel_wal::testing::{CrashOptions, FaultDisk, FaultStorage, SimRng};
use timewheel_wal::{Durability, Error, Wal, WalOptions};

const LIVES: usize = 5;

fn opts(rng: &mut SimRng) -> WalOptions {
    let durability = match rng.below(3) {
        0 => Durability::Sync,
        _ => Durability::Buffered,
    };
    WalOptions {
        segment_bytes: 16384,
        record_bytes_max: 600,
        durability,
        ..Default::default()
    }
}

fn body(rng: &mut SimRng, life: usize, n: usize) -> Vec<u8> {
    let mut b = format!("life {life} record {n} ").into_bytes();
    let extra = if rng.chance(0.1) {
        rng.below(500)
    } else {
        rng.below(40)
    };
    b.extend((0..extra).map(|i| (i as u8) ^ (life as u8)));
    b
}

/// Checks the recovered log against `written` (the body of every LSN, as last written) and
/// truncates `written` to what survived. Returns an error text on a violation.
fn check(
    wal: &Wal<FaultStorage>,
    written: &mut Vec<Vec<u8>>,
    acked: u64,
    media_faults: bool,
) -> Result<(), String> {
    let last = wal.last_lsn();
    if !media_faults && last < acked {
        return Err(format!(
            "acknowledged LSN {acked} lost: recovered up to {last}"
        ));
    }
    if last > written.len() as u64 {
        return Err(format!(
            "recovered LSN {last}, but only {} were written",
            written.len()
        ));
    }
    let mut expected_lsn = wal.first_lsn();
    for record in wal.iter_from(0) {
        let record = record.map_err(|e| format!("reading back: {e}"))?;
        if record.lsn != expected_lsn {
            return Err(format!(
                "gap: LSN {} where {expected_lsn} was expected",
                record.lsn
            ));
        }
        if record.body != written[(record.lsn - 1) as usize] {
            return Err(format!("LSN {} holds a stale or invented body", record.lsn));
        }
        expected_lsn += 1;
    }
    if expected_lsn != last + 1 {
        return Err(format!(
            "read up to {}, last_lsn is {last}",
            expected_lsn - 1
        ));
    }
    written.truncate(last as usize);
    Ok(())
}

/// One life: random operations on an open log. Returns the highest LSN acknowledged durable.
fn live(wal: &Wal<FaultStorage>, rng: &mut SimRng, life: usize, written: &mut Vec<Vec<u8>>) -> u64 {
    let mut acked = wal.durable_lsn();
    for _ in 0..rng.between(0, 40) {
        match rng.below(11) {
            0..=4 => {
                let b = body(rng, life, written.len());
                let lsn = wal.append(1, &b).unwrap();
                written.push(b);
                assert_eq!(lsn, written.len() as u64);
                if wal.options().durability == Durability::Sync {
                    acked = lsn;
                }
            }
            5 => {
                let b = body(rng, life, written.len());
                wal.append_nowait(2, &b).unwrap();
                written.push(b);
            }
            6 | 7 => {
                let bodies: Vec<Vec<u8>> = (0..rng.between(1, 8))
                    .map(|i| body(rng, life, written.len() + i as usize))
                    .collect();
                let last = wal
                    .append_batch(bodies.iter().map(|b| (3u8, b.as_slice())))
                    .unwrap();
                written.extend(bodies);
                assert_eq!(last, written.len() as u64);
                if wal.options().durability == Durability::Sync {
                    acked = last;
                }
            }
            8 => acked = wal.sync().unwrap(),
            9 => {
                // A segment sealed before it is full (or none, when the one appended to is
                // empty): either way everything written is durable after.
                wal.roll_now().unwrap();
                acked = written.len() as u64;
                assert_eq!(wal.durable_lsn(), acked, "a roll leaves nothing unsynced");
            }
            _ => {
                let below = rng.between(0, written.len() as u64 + 1);
                wal.delete_segments_below(below).unwrap();
            }
        }
    }
    acked.max(wal.durable_lsn())
}

fn run(seed: u64, media_faults: bool) -> Result<(), String> {
    let mut rng = SimRng::new(seed);
    let mut disk = FaultDisk::new(seed);
    let mut written: Vec<Vec<u8>> = Vec::new();
    let mut acked = 0;
    for life in 0..LIVES {
        let opts = opts(&mut rng);
        let wal = match Wal::open(disk.storage(), opts) {
            Ok((wal, _)) => wal,
            Err(Error::Corrupted { .. }) if media_faults && life > 0 => return Ok(()),
            Err(e) => return Err(format!("life {life}: open failed: {e}")),
        };
        if life > 0 {
            check(&wal, &mut written, acked, media_faults)
                .map_err(|e| format!("life {life}: {e}"))?;
        }
        acked = live(&wal, &mut rng, life, &mut written);
        let mut crash = CrashOptions::random(&mut rng);
        if media_faults {
            crash.bit_flips_synced = rng.below(3) as u32;
            crash.misdirected_writes = rng.below(2) as u32;
        }
        // The power fails while the log is still open; its drop afterwards touches only the
        // old disk.
        disk = disk.crash(&crash);
        drop(wal);
    }
    Ok(())
}

#[test]
fn power_cuts_keep_acknowledged_records_and_nothing_stale() {
    for seed in 0..300 {
        if let Err(e) = run(seed, false) {
            panic!("seed {seed}: {e}");
        }
    }
}

#[test]
fn media_faults_are_refused_or_harmless_never_invented() {
    for seed in 1000..1200 {
        if let Err(e) = run(seed, true) {
            panic!("seed {seed}: {e}");
        }
    }
}

#[test]
fn stale_records_of_a_reused_segment_do_not_come_back() {
    // Life 1 syncs 3 records (the block at 4096), then leaves 20 more unsynced (the open block
    // at 8192); the crash keeps them all, but record 8 is damaged, so valid old records 9..
    // follow a hole, and the block has no mirror. Recovery cuts at record 8. Life 2 writes a
    // different record 8 and syncs it. The old record 9 (same segment, same salt, right LSN)
    // must not come back.
    let disk = FaultDisk::new(9);
    let opts = WalOptions {
        segment_bytes: 32768,
        record_bytes_max: 600,
        durability: Durability::Buffered,
        ..Default::default()
    };
    let name = timewheel_wal::segment_file_name(1);
    let (wal, _) = Wal::open(disk.storage(), opts.clone()).unwrap();
    let old: Vec<[u8; 100]> = (0..23u8).map(|i| [i; 100]).collect();
    wal.append_batch(old[..3].iter().map(|b| (1, &b[..])))
        .unwrap();
    wal.sync().unwrap();
    wal.append_batch(old[3..].iter().map(|b| (1, &b[..])))
        .unwrap();
    // Frames are 128 bytes from offset 8192 (record 4): record 8 starts at 8192 + 4 * 128.
    disk.write_raw(&name, 8704 + 40, &[0xFF; 8], false);
    let disk = disk.crash(&CrashOptions::all_unsynced());
    drop(wal);

    let (wal, report) = Wal::open(disk.storage(), opts.clone()).unwrap();
    let torn = report.torn_tail.expect("record 8 is a torn tail");
    assert_eq!((torn.segment, torn.offset, torn.expected_lsn), (1, 8704, 8));
    assert_eq!(wal.last_lsn(), 7);
    assert_eq!(wal.append(1, &[0xEE; 100]).unwrap(), 8);
    wal.sync().unwrap();
    let disk = disk.crash(&CrashOptions::clean());
    drop(wal);

    let (wal, report) = Wal::open(disk.storage(), opts).unwrap();
    assert!(report.torn_tail.is_none(), "{report:?}");
    let bodies: Vec<Vec<u8>> = wal.iter_from(1).map(|r| r.unwrap().body).collect();
    let mut expected: Vec<Vec<u8>> = old[..7].iter().map(|b| b.to_vec()).collect();
    expected.push(vec![0xEE; 100]);
    assert!(
        bodies == expected,
        "old records must not follow the new record 8: got {} records",
        bodies.len()
    );
}

#[test]
fn abandon_syncs_nothing_more() {
    // `abandon` is how a simulation stops a log like a crash: unsynced records stay unsynced,
    // even through the drop, and later calls are refused.
    let disk = FaultDisk::new(11);
    let opts = WalOptions {
        segment_bytes: 8192,
        durability: Durability::Buffered,
        record_bytes_max: 600,
        ..Default::default()
    };
    let (wal, _) = Wal::open(disk.storage(), opts.clone()).unwrap();
    wal.append(1, b"synced").unwrap();
    wal.sync().unwrap();
    wal.append(1, b"not synced").unwrap();
    wal.abandon();
    assert!(matches!(wal.append(1, b"refused"), Err(Error::Closed)));
    drop(wal);
    let (wal, report) = Wal::open(disk.crash(&CrashOptions::clean()).storage(), opts).unwrap();
    assert_eq!(report.last_lsn, 1);
    assert_eq!(wal.iter_from(1).next().unwrap().unwrap().body, b"synced");
}

/// Every file's bytes on `disk`, by name.
fn image(disk: &FaultDisk) -> Vec<(String, Option<Vec<u8>>)> {
    let mut names = disk.live_names();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let bytes = disk.live_file(&name);
            (name, bytes)
        })
        .collect()
}

/// One seed and one history of calls write the same bytes, down to each segment's salt: a
/// crash's injected damage is then judged on the same bytes every run. (With a random salt,
/// the bytes a crash counts as changed, and so where a bit flip lands, varied from run to run,
/// and about one simulation seed run in 20,000 recovered differently.)
#[test]
fn one_seed_writes_the_same_bytes_every_run() {
    let run = || {
        let disk = FaultDisk::new(31);
        let opts = WalOptions {
            segment_bytes: 32768,
            record_bytes_max: 600,
            ..Default::default()
        };
        let (wal, _) = Wal::open(disk.storage(), opts.clone()).unwrap();
        for i in 0..40u8 {
            wal.append(1, &[i; 300]).unwrap(); // several segments
        }
        wal.abandon();
        let crashed = disk.crash(&CrashOptions::clean());
        let (wal, _) = Wal::open(crashed.storage(), opts).unwrap();
        wal.append(1, &[7; 100]).unwrap();
        wal.abandon();
        (image(&disk), image(&crashed))
    };
    let first = run();
    assert!(first.0.len() > 1, "the records fill more than one segment");
    assert!(
        first == run(),
        "a second run of the same seed wrote other bytes"
    );
}
