//! A full disk on a real file system: a size-limited tmpfs mounted for the test (skipped, with
//! a message, where the test may not mount one). Schedules fill it until the log can not grow;
//! from then on a schedule is refused with `NoSpace` saying why, at once (no allocation per
//! request: a flood of them costs nothing), cancels still go through into the reserve kept for
//! them, and once space is freed schedules work again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use timewheel::{Config, Engine, Error, JobSpec};

struct Mount(PathBuf);

impl Mount {
    fn tmpfs(size_mib: u64) -> Option<Mount> {
        let dir = std::env::temp_dir().join(format!("timewheel-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(&dir)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(Mount(dir))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Schedules and cancels at once (history the journal keeps until compaction folds it), with
/// a few jobs kept live, until the log can not grow.
fn fill_with_history(engine: &Engine) -> (Vec<timewheel::JobId>, Error) {
    let mut live = Vec::new();
    let due = 4_102_444_800_000; // 2100: nothing fires
    loop {
        match engine.schedule_batch((0..1_000).map(|_| JobSpec::at(due).payload(vec![7u8; 200]))) {
            Ok(new) => {
                live.push(new[0]);
                if let Err(e) = engine.cancel_batch(&new[1..]) {
                    return (live, e);
                }
            }
            Err(e) => return (live, e),
        }
    }
}

#[test]
fn a_full_tmpfs_refuses_schedules_at_once_keeps_room_for_cancels_and_compaction_frees_it() {
    let Some(mount) = Mount::tmpfs(48) else {
        eprintln!("skipped: could not mount a size-limited tmpfs here (needs root)");
        return;
    };
    let dir: &Path = &mount.0;
    let config = Config::new(dir.join("data"))
        .segment_bytes(8 << 20)
        .compact_interval_ms(0);
    let engine = Engine::open(config.clone()).expect("opens");
    let (live, e) = fill_with_history(&engine);
    assert!(
        live.len() > 50,
        "the disk held some jobs first: {}",
        live.len()
    );
    let Error::NoSpace { .. } = e else {
        panic!("a full disk is NoSpace, got {e:?}");
    };
    eprintln!("full with {} live jobs: {e}", live.len());

    // A flood of schedules: each refused at once, none written.
    let started = Instant::now();
    let mut refused = 0;
    for _ in 0..2_000 {
        match engine.schedule(JobSpec::at(4_102_444_800_000)) {
            Err(Error::NoSpace { .. }) => refused += 1,
            Ok(_) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    eprintln!(
        "2,000 schedules on the full disk took {:?}",
        started.elapsed()
    );
    assert!(
        refused > 1_900,
        "schedules are refused while the disk is full: {refused}"
    );

    // Cancels still go through: the reserve holds them.
    let (gone, kept) = live.split_at(live.len() / 2);
    for &id in gone {
        assert!(
            engine
                .cancel(id)
                .expect("a cancel fits the reserve")
                .is_done()
        );
    }

    // Compaction frees the journal's history: it gives up the ballast to write what it must
    // first, then deletes the folded segments.
    let mut deleted = 0;
    loop {
        let r = engine.compact().expect("compaction runs on the full disk");
        if r.records == 0 {
            break;
        }
        deleted += r.segments_deleted;
    }
    let store = engine.store_stats();
    eprintln!("compacted: {deleted} segments deleted, {store:?}");
    assert!(deleted > 0 && store.ballast_released >= 1, "{store:?}");
    // Past the back-off, schedules work again.
    std::thread::sleep(Duration::from_millis(200));
    engine
        .schedule(JobSpec::at(4_102_444_800_000))
        .expect("space is back");
    engine.close().expect("close");
    let engine = Engine::open(config).expect("reopens");
    assert!(
        kept.iter().all(|&id| engine.get(id).is_some()),
        "acknowledged jobs stay"
    );
    assert!(
        gone.iter().all(|&id| engine.get(id).is_none()),
        "cancelled ones stay cancelled"
    );
}
