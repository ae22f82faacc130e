//! An open of a data directory whose store (manifest and bucket runs) holds arbitrary bytes.
//!
//! A real directory is built on the fault-injecting disk first: jobs scheduled across hours,
//! some cancelled, rescheduled, claimed and completed, compacted into bucket runs (so the
//! fuzzer starts past every checksum). Then the input edits it: bytes written into the
//! manifest or a run, files cut short, removed, or added with arbitrary contents. `Engine::open`
//! must return `Ok` or a typed `Err` (never panic or hang); after `Ok`, a compaction pass and
//! a reopen work, and without edits the reopened engine holds exactly the jobs it held.
#![no_main]

use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use timewheel::{Config, Engine, JobId, JobSpec, ManualClock};
use timewheel_wal::storage::{Storage, StorageFile};
use timewheel_wal::testing::FaultDisk;

const T0: u64 = 1_800_000_000_000;
const HOUR: u64 = 3_600_000;
const EDITS_MAX: usize = 8;
const EDIT_BYTES_MAX: usize = 64;

#[derive(Arbitrary, Debug)]
enum Edit {
    /// Write bytes into the `file`-th store file (by name order) at `offset` (modulo its length).
    Write {
        file: u8,
        offset: u32,
        bytes: Vec<u8>,
    },
    /// Cut the file to `len` bytes (modulo its length).
    Cut {
        file: u8,
        len: u32,
    },
    Remove {
        file: u8,
    },
    /// A file with this name pattern and contents: 0 a manifest, 1 a temporary manifest, 2 a run.
    Add {
        kind: u8,
        bucket: u32,
        generation: u8,
        bytes: Vec<u8>,
    },
}

fn config() -> Config {
    let mut c = Config::new("/unused");
    c.timer_thread = false;
    c.segment_bytes = 16 << 10;
    c.payload_bytes_max = 256;
    c.bucket_runs_max = 2;
    c.disk_ballast_bytes = 0;
    c
}

fn open(disk: &FaultDisk) -> timewheel::Result<Engine> {
    Engine::open_on(disk.storage(), config(), Arc::new(ManualClock::new(T0)))
}

/// Replaces `name` with a durable file holding `bytes` (at least one byte).
fn put_file(disk: &FaultDisk, name: &str, bytes: &[u8]) {
    let storage = disk.storage();
    let _ = storage.remove(name);
    if !bytes.is_empty() {
        let file = storage.create(name, bytes.len() as u64).expect("create");
        file.write_at(0, bytes).expect("write");
        file.sync_range(0, bytes.len() as u64).expect("sync");
    }
    storage.sync_dir().expect("sync_dir");
}

fn view(engine: &Engine, ids: &[JobId]) -> Vec<(JobId, u64, u32, Vec<u8>)> {
    ids.iter()
        .filter_map(|&id| {
            engine
                .get(id)
                .map(|j| (id, j.due_ms, j.attempt, j.payload.to_vec()))
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(seed) = u.arbitrary::<u8>() else {
        return;
    };
    let disk = FaultDisk::new(u64::from(seed));
    let engine = open(&disk).expect("a fresh directory opens");
    let mut ids = Vec::new();
    for round in 0..4u64 {
        let specs = (0..40u64).map(|i| {
            JobSpec::at(T0 + (i * 7 + round * 13 + u64::from(seed)) % 9 * HOUR)
                .payload(vec![i as u8; (i % 30) as usize])
        });
        let new = engine.schedule_batch(specs).expect("schedule");
        let cancel: Vec<JobId> = new.iter().copied().step_by(3).collect();
        engine.cancel_batch(&cancel).expect("cancel");
        let moves: Vec<(JobId, u64)> = new
            .iter()
            .skip(1)
            .step_by(4)
            .map(|&id| (id, T0 + 11 * HOUR))
            .collect();
        engine.reschedule_batch(&moves).expect("reschedule");
        ids.extend(new);
        while engine.compact().expect("compact").records > 0 {}
    }
    let before = view(&engine, &ids);
    engine.close().expect("close");

    let edits: Vec<Edit> = (0..EDITS_MAX).map_while(|_| u.arbitrary().ok()).collect();
    let store_files = |disk: &FaultDisk| -> Vec<String> {
        disk.live_names()
            .into_iter()
            .filter(|n| n.starts_with("MANIFEST") || n.ends_with(".run"))
            .collect()
    };
    let edited = !edits.is_empty();
    for edit in edits {
        let files = store_files(&disk);
        let pick = |i: u8| (!files.is_empty()).then(|| files[usize::from(i) % files.len()].clone());
        match edit {
            Edit::Write {
                file,
                offset,
                mut bytes,
            } => {
                let Some(name) = pick(file) else { continue };
                let len = disk.live_file(&name).map_or(0, |b| b.len());
                if len == 0 {
                    continue;
                }
                bytes.truncate(EDIT_BYTES_MAX);
                let at = offset as usize % len;
                bytes.truncate(len - at);
                disk.write_raw(&name, at as u64, &bytes, true);
            }
            Edit::Cut { file, len } => {
                let Some(name) = pick(file) else { continue };
                let Some(old) = disk.live_file(&name) else {
                    continue;
                };
                let keep = if old.is_empty() {
                    0
                } else {
                    len as usize % old.len()
                };
                put_file(&disk, &name, &old[..keep]);
            }
            Edit::Remove { file } => {
                let Some(name) = pick(file) else { continue };
                put_file(&disk, &name, &[]);
            }
            Edit::Add {
                kind,
                bucket,
                generation,
                mut bytes,
            } => {
                bytes.truncate(4 * EDIT_BYTES_MAX);
                let name = match kind % 3 {
                    0 => "MANIFEST".to_owned(),
                    1 => "MANIFEST.tmp".to_owned(),
                    _ => format!("bucket-{:010}-{:016}.run", bucket, generation),
                };
                put_file(&disk, &name, &bytes);
            }
        }
    }
    match open(&disk) {
        Ok(engine) => {
            if !edited {
                assert_eq!(
                    view(&engine, &ids),
                    before,
                    "an unedited directory reopens as it was"
                );
            }
            let _ = engine.compact();
            drop(engine);
            let _ = open(&disk);
        }
        Err(_) => assert!(edited, "an unedited directory opens"),
    }
});
