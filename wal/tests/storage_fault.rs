//! The fault-injecting disk (`timewheel_wal::testing`): that its crashes, failpoints and
//! corruptions behave as documented, since every crash-safety test of the log trusts them.
//! Randomized tests loop over seeds with `SimRng` and print the seed on failure.

use std::collections::BTreeSet;
use std::io::ErrorKind;

use timewheel_wal::storage::{Storage, StorageFile};
use timewheel_wal::testing::{
    CrashOptions, FaultDisk, FaultFile, FaultStorage, PAGE_BYTES, SECTOR_BYTES, SimRng, SyncFailure,
};

const FILE_BYTES: usize = 4 * PAGE_BYTES;

/// A disk holding one durable, empty file `f`, and an open handle on it.
fn disk_with_file(seed: u64) -> (FaultDisk, FaultStorage, FaultFile) {
    let disk = FaultDisk::new(seed);
    let storage = disk.storage();
    assert!(storage.try_lock().unwrap());
    let file = storage.create("f", FILE_BYTES as u64).unwrap();
    storage.sync_dir().unwrap();
    (disk, storage, file)
}

#[test]
fn synced_data_survives_every_power_cut() {
    // Random writes and syncs, then a random power cut: every byte whose last write was
    // followed by a covering sync reads back exactly (the model tracks those bytes).
    for seed in 0..300 {
        let mut rng = SimRng::new(seed);
        let (disk, _storage, file) = disk_with_file(seed);
        // None: written since the last covering sync; Some(b): acknowledged as b.
        let mut acked: Vec<Option<u8>> = vec![Some(0); FILE_BYTES];
        let mut live = vec![0u8; FILE_BYTES];
        for _ in 0..rng.between(1, 40) {
            if rng.chance(0.6) {
                let len = rng.between(1, 700) as usize;
                let offset = rng.below((FILE_BYTES - len) as u64) as usize;
                let mut data = vec![0u8; len];
                rng.fill(&mut data);
                file.write_at(offset as u64, &data).unwrap();
                live[offset..offset + len].copy_from_slice(&data);
                acked[offset..offset + len].fill(None);
            } else {
                let offset = rng.below(FILE_BYTES as u64) as usize;
                let len = rng.between(1, (FILE_BYTES - offset) as u64) as usize;
                file.sync_range(offset as u64, len as u64).unwrap();
                // The whole pages touched are written back.
                let start = offset / PAGE_BYTES * PAGE_BYTES;
                let end = (offset + len).div_ceil(PAGE_BYTES) * PAGE_BYTES;
                for b in start..end {
                    acked[b] = Some(live[b]);
                }
            }
        }
        // Powersafe overwrite here: garbling is checked on its own below.
        let opts = CrashOptions {
            garbled_sectors: 0,
            ..CrashOptions::random(&mut rng)
        };
        let image = disk.crash(&opts).durable_file("f").unwrap();
        for (b, want) in acked.iter().enumerate() {
            if let Some(want) = want {
                assert_eq!(image[b], *want, "seed {seed}, byte {b}, {opts:?}");
            }
        }
    }
}

#[test]
fn unsynced_data_may_vanish_or_survive() {
    // A clean crash loses every unsynced write, all_unsynced keeps all, and a half-chance
    // crash does each at some seed.
    let (mut lost, mut kept) = (0, 0);
    for seed in 0..50 {
        let (disk, _storage, file) = disk_with_file(seed);
        file.write_at(100, b"unsynced").unwrap();
        let clean = disk
            .crash(&CrashOptions::clean())
            .durable_file("f")
            .unwrap();
        assert_eq!(&clean[100..108], [0; 8], "seed {seed}");
        let all = disk.crash(&CrashOptions::all_unsynced());
        assert_eq!(all.durable_file("f"), disk.live_file("f"), "seed {seed}");
        let half = disk
            .crash(&CrashOptions::default())
            .durable_file("f")
            .unwrap();
        match &half[100..108] {
            b"unsynced" => kept += 1,
            [0, 0, 0, 0, 0, 0, 0, 0] => lost += 1,
            other => panic!("seed {seed}: a sector is atomic, got {other:?}"),
        }
    }
    assert!(lost > 0 && kept > 0, "lost {lost}, kept {kept}");
}

/// For each sector of page 0: `Some(true)` if the crash kept the new content, `Some(false)`
/// if the old, `None` if a mix (which a sector must never be).
fn sector_outcomes(image: &[u8]) -> Vec<Option<bool>> {
    image[..PAGE_BYTES]
        .chunks(SECTOR_BYTES)
        .map(|sector| match sector {
            s if s.iter().all(|&b| b == 0xAB) => Some(true),
            s if s.iter().all(|&b| b == 0) => Some(false),
            _ => None,
        })
        .collect()
}

#[test]
fn torn_pages_tear_at_sector_granularity() {
    // An unsynced full page: with torn_pages its sectors survive independently (so some
    // crash mixes them), without it the page survives or vanishes whole.
    let mut torn_seen = false;
    for seed in 0..50 {
        let (disk, _storage, file) = disk_with_file(seed);
        file.write_at(0, &[0xAB; PAGE_BYTES]).unwrap();
        let torn = CrashOptions {
            torn_pages: true,
            ..CrashOptions::default()
        };
        let outcomes = sector_outcomes(&disk.crash(&torn).durable_file("f").unwrap());
        assert!(outcomes.iter().all(Option::is_some), "seed {seed}");
        torn_seen |= outcomes.iter().collect::<BTreeSet<_>>().len() > 1;
        let whole = CrashOptions {
            torn_pages: false,
            ..CrashOptions::default()
        };
        let outcomes = sector_outcomes(&disk.crash(&whole).durable_file("f").unwrap());
        assert_eq!(
            outcomes.iter().collect::<BTreeSet<_>>().len(),
            1,
            "seed {seed}"
        );
    }
    assert!(torn_seen, "no crash tore the page");
}

#[test]
fn dir_ops_are_undone_unless_synced() {
    // Unsynced create/rename/remove: a clean crash undoes them all (the removed file comes
    // back with its durable data, the created one vanishes with its data), all_unsynced keeps
    // them all, and a random crash keeps a prefix of them.
    let (disk, storage, old) = disk_with_file(1);
    old.write_at(0, b"old").unwrap();
    old.sync_range(0, 3).unwrap();
    let new = storage.create("g", 4096).unwrap();
    new.write_at(0, b"new").unwrap();
    new.sync_range(0, 3).unwrap();
    storage.rename("g", "h").unwrap();
    storage.remove("f").unwrap();
    assert_eq!(disk.pending_dir_ops(), 3);
    assert_eq!(disk.live_names(), ["h"]);
    assert_eq!(disk.durable_names(), ["f"]);

    let clean = disk.crash(&CrashOptions::clean());
    assert_eq!(clean.live_names(), ["f"]);
    assert_eq!(&clean.durable_file("f").unwrap()[..3], b"old");
    let all = disk.crash(&CrashOptions::all_unsynced());
    assert_eq!(all.live_names(), ["h"]);
    assert_eq!(&all.durable_file("h").unwrap()[..3], b"new");

    let prefixes: [&[&str]; 4] = [&["f"], &["f", "g"], &["f", "h"], &["h"]];
    let mut seen = BTreeSet::new();
    for _ in 0..64 {
        let names = disk.crash(&CrashOptions::default()).live_names();
        let i = prefixes.iter().position(|p| *p == names.as_slice());
        seen.insert(i.unwrap_or_else(|| panic!("{names:?} is not a prefix state")));
    }
    assert_eq!(seen.len(), 4, "every prefix shows up: {seen:?}");

    storage.sync_dir().unwrap();
    assert_eq!(disk.pending_dir_ops(), 0);
    assert_eq!(disk.crash(&CrashOptions::clean()).live_names(), ["h"]);
    // The removed file's handle still works: files are inodes.
    let mut buf = [0u8; 3];
    old.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf, b"old");
}

#[test]
fn failed_sync_returns_eio_and_loses_the_dirty_pages() {
    // fsyncgate: after an EIO the live image still shows the data, a retry "succeeds", and
    // yet a crash (even one that keeps every unsynced sector) has lost it.
    let (disk, storage, file) = disk_with_file(7);
    file.write_at(0, b"doomed").unwrap();
    disk.set_sync_failure(SyncFailure::Next);
    let err = file.sync_range(0, 6).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(5));
    assert_eq!(&disk.live_file("f").unwrap()[..6], b"doomed");
    assert_eq!(disk.dirty_sectors("f"), Some(0));
    file.sync_range(0, 6).unwrap();
    let after = disk.crash(&CrashOptions::all_unsynced());
    assert_eq!(&after.durable_file("f").unwrap()[..6], [0; 6]);

    disk.set_sync_failure(SyncFailure::AfterN(2));
    file.sync_range(0, 1).unwrap();
    storage.sync_dir().unwrap();
    assert_eq!(storage.sync_dir().unwrap_err().raw_os_error(), Some(5));
    storage.sync_dir().unwrap();

    disk.set_sync_failure(SyncFailure::Always);
    storage.create("g", 512).unwrap();
    for _ in 0..3 {
        assert!(storage.sync_dir().is_err());
        assert!(file.sync_range(0, 1).is_err());
    }
    assert_eq!(
        disk.pending_dir_ops(),
        1,
        "a failed dir sync persists nothing"
    );
    let stats = disk.stats();
    assert_eq!(stats.failed_syncs, 8);
    assert_eq!(stats.sectors_dropped, 1);
    assert_eq!(
        disk.crash(&CrashOptions::clean()).stats().crashes,
        1,
        "stats carry over"
    );
}

#[test]
fn enospc_leaves_no_file() {
    // A create on a full disk fails with StorageFull (ENOSPC) and changes nothing.
    let disk = FaultDisk::new(3);
    let storage = disk.storage();
    disk.set_enospc(true);
    let err = storage.create("f", 4096).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StorageFull);
    assert_eq!(err.raw_os_error(), Some(28));
    assert!(storage.list().unwrap().is_empty());
    assert_eq!(disk.pending_dir_ops(), 0);
    disk.set_enospc(false);
    storage.create("f", 4096).unwrap();

    disk.set_capacity_bytes(Some(3 * 4096));
    storage.create("g", 8192).unwrap();
    assert_eq!(
        storage.create("h", 1).unwrap_err().kind(),
        ErrorKind::StorageFull
    );
    assert_eq!(disk.live_names(), ["f", "g"]);
    assert_eq!(disk.stats().enospc_failures, 2);
}

/// A fixed history on a disk of `seed`, then a crash with random options: the images.
fn history_then_crash(seed: u64) -> Vec<(String, Vec<u8>)> {
    let disk = FaultDisk::new(seed);
    let storage = disk.storage();
    let a = storage.create("a", 3 * 4096).unwrap();
    storage.sync_dir().unwrap();
    let b = storage.create("b", 4096).unwrap();
    for i in 0..24u8 {
        a.write_at(u64::from(i) * 500, &[i + 1; 300]).unwrap();
        if i % 5 == 0 {
            a.sync_range(0, 4096).unwrap();
        }
    }
    b.write_at(0, &[9; 4096]).unwrap();
    storage.rename("b", "c").unwrap();
    let opts = CrashOptions {
        bit_flips_unsynced: 2,
        bit_flips_synced: 1,
        misdirected_writes: 1,
        ..CrashOptions::default()
    };
    let after = disk.crash(&opts);
    after
        .live_names()
        .into_iter()
        .map(|n| {
            let image = after.durable_file(&n).unwrap();
            (n, image)
        })
        .collect()
}

#[test]
fn same_seed_and_history_give_the_same_crash() {
    // Determinism: a seed reproduces the crash image byte for byte; seeds do matter.
    let images: Vec<_> = (0..8).map(history_then_crash).collect();
    for seed in 0..8 {
        assert_eq!(
            history_then_crash(seed),
            images[seed as usize],
            "seed {seed}"
        );
    }
    assert!(images.windows(2).any(|w| w[0] != w[1]));
}

#[test]
fn flip_bit_is_visible_everywhere() {
    // Media corruption of synced data shows in reads, both images and after a crash.
    let (disk, _storage, file) = disk_with_file(5);
    file.write_at(10, &[0b1010]).unwrap();
    file.sync_range(10, 1).unwrap();
    disk.flip_bit("f", 10, 0);
    let mut byte = [0u8];
    file.read_at(10, &mut byte).unwrap();
    assert_eq!(byte, [0b1011]);
    assert_eq!(disk.live_file("f").unwrap()[10], 0b1011);
    assert_eq!(disk.durable_file("f").unwrap()[10], 0b1011);
    let after = disk.crash(&CrashOptions::clean());
    assert_eq!(after.durable_file("f").unwrap()[10], 0b1011);
    disk.write_raw("f", 0, b"raw", true);
    assert_eq!(&disk.durable_file("f").unwrap()[..3], b"raw");
}

#[test]
fn media_faults_damage_exactly_what_they_say() {
    // One synced bit flip changes one bit of synced data; one misdirected write puts a dirty
    // sector's content on another sector and leaves its own sector old.
    let (disk, _storage, file) = disk_with_file(11);
    file.write_at(0, &[0x5A; FILE_BYTES]).unwrap();
    file.sync_range(0, FILE_BYTES as u64).unwrap();
    let flip = CrashOptions {
        bit_flips_synced: 1,
        ..CrashOptions::clean()
    };
    let image = disk.crash(&flip).durable_file("f").unwrap();
    let diff_bits: u32 = image.iter().map(|b| (b ^ 0x5A).count_ones()).sum();
    assert_eq!(diff_bits, 1);

    file.write_at(SECTOR_BYTES as u64, &[0xC3; SECTOR_BYTES])
        .unwrap();
    let misdirect = CrashOptions {
        misdirected_writes: 1,
        ..CrashOptions::clean()
    };
    let image = disk.crash(&misdirect).durable_file("f").unwrap();
    let sectors: Vec<&[u8]> = image.chunks(SECTOR_BYTES).collect();
    assert!(
        sectors[1].iter().all(|&b| b == 0x5A),
        "its own sector is old"
    );
    let landed: Vec<usize> = (0..sectors.len())
        .filter(|&s| sectors[s].iter().all(|&b| b == 0xC3))
        .collect();
    assert_eq!(landed.len(), 1);
    assert_ne!(landed[0], 1);
}

#[test]
fn lock_and_handles_follow_their_disk() {
    // One storage holds the lock at a time; a crashed disk starts unlocked, and handles on
    // the old disk never write into the new one.
    let (disk, storage, file) = disk_with_file(2);
    let second = disk.storage();
    assert!(!second.try_lock().unwrap());
    let after = disk.crash(&CrashOptions::clean());
    assert!(after.storage().try_lock().unwrap());
    file.write_at(0, b"old").unwrap();
    file.sync_range(0, 3).unwrap();
    assert_eq!(&after.durable_file("f").unwrap()[..3], [0; 3]);
    drop(storage);
    assert!(second.try_lock().unwrap());
}

#[test]
fn bounds_and_names_are_checked() {
    // The same errors as MmapStorage: out of bounds is an error, bad names are refused.
    let (_disk, storage, file) = disk_with_file(4);
    let mut buf = [0u8; 8];
    assert_eq!(
        file.read_at(FILE_BYTES as u64 - 4, &mut buf)
            .unwrap_err()
            .kind(),
        ErrorKind::UnexpectedEof
    );
    assert!(file.write_at(u64::MAX, &buf).is_err());
    assert!(file.sync_range(1, FILE_BYTES as u64).is_err());
    assert_eq!(
        storage.create("f", 1).unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    assert_eq!(
        storage.create("LOCK", 1).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        storage.open("nope").unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        storage.rename("nope", "x").unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn non_powersafe_garbling_hits_only_pages_being_written_back_and_all_of_their_sectors() {
    // Page 0 is synced and then rewritten in one sector; page 2 is synced and left alone.
    // A garbled sector may be any sector of page 0 (synced bytes included), never of page 2.
    let mut hit_synced_sector = false;
    for seed in 0..200 {
        let (disk, _storage, file) = disk_with_file(seed);
        file.write_at(0, &[0x11; PAGE_BYTES]).unwrap();
        file.write_at(2 * PAGE_BYTES as u64, &[0x22; PAGE_BYTES])
            .unwrap();
        file.sync_range(0, FILE_BYTES as u64).unwrap();
        file.write_at(100, b"rewrite").unwrap();
        let opts = CrashOptions {
            garbled_sectors: 1,
            ..CrashOptions::clean()
        };
        let image = disk.crash(&opts).durable_file("f").unwrap();
        assert_eq!(
            &image[2 * PAGE_BYTES..3 * PAGE_BYTES],
            [0x22; PAGE_BYTES],
            "seed {seed}"
        );
        // Sectors 1..8 of page 0 were not written since the sync.
        if image[SECTOR_BYTES..PAGE_BYTES].iter().any(|&b| b != 0x11) {
            hit_synced_sector = true;
        }
    }
    assert!(
        hit_synced_sector,
        "unchanged sectors of a dirty page can be garbled"
    );
}
