//! WAL append throughput (`timewheel-wal`), with the plain disk measured beside it in the same
//! run.
//!
//! `cargo bench -p timewheel-benches --bench wal_append`
//!
//! - `sync`: `Durability::Sync` (every append returns once durable, group commit shares the
//!   msyncs), 40- and 256-byte bodies, batches of 1, 64 and 4096 records, 1, 8 and 64 appender
//!   threads. Each thread loops `append_batch` of its batch size (`append` for a batch of 1, the
//!   single-call API) on one shared log; the figure is the total records/s across threads.
//! - `disk`: the physical ceiling, one thread doing `pwrite` of `batch * size` bytes then
//!   `fdatasync`, on a file in the same directory preallocated by writing zeros (so the loop
//!   overwrites allocated blocks: no extent conversion, the disk's best case).
//! - `buffered`: `Durability::Buffered`, 1 thread, 40 B, batch 64: the cost of framing and
//!   copying into the map without waiting for syncs (a segment roll still syncs the segment).
//!
//! Each log is fresh (default 64 MiB segments) in a directory under `std::env::temp_dir()`,
//! removed after its cell; sealed segments are deleted between criterion's timed calls.
//! Throughput is in records (`Throughput::Elements`); MB/s of bodies = records/s * size.

use std::fs::{self, File};
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use timewheel_wal::{Durability, Wal, WalOptions};

const SIZES: [usize; 2] = [40, 256];
const BATCHES: [usize; 3] = [1, 64, 4096];
const THREADS: [usize; 3] = [1, 8, 64];
const RECORD_TYPE: u8 = 1;
/// Size of the baseline's preallocated file, the same as a WAL segment; writes wrap around.
const BASELINE_FILE_BYTES: u64 = WalOptions::SEGMENT_BYTES_DEFAULT;

/// Records each thread appends per criterion iteration: a whole number of batches, enough that
/// one iteration takes milliseconds (a batch of 1 costs a sync, about 0.1 ms, when alone).
fn records_per_thread(batch: usize) -> usize {
    match batch {
        1 => 64,
        64 => 1024,
        _ => batch,
    }
}

/// A body with no long runs of one byte.
fn body(size: usize, seed: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8 + 1)
        .collect()
}

fn bench_root() -> PathBuf {
    let root =
        std::env::temp_dir().join(format!("timewheel-wal-append-bench-{}", std::process::id()));
    fs::create_dir_all(&root).expect("create the benchmark directory");
    root
}

/// Fresh directory `name` under `root`, emptied if a previous run left it.
fn fresh_dir(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create a cell directory");
    dir
}

/// `threads` threads each append `records` records in batches of `batch`; returns the wall time
/// from the moment all are ready until the last one's last append is durable (per the mode).
fn run_appenders(wal: &Wal, body: &[u8], batch: usize, threads: usize, records: usize) -> Duration {
    let ready = Barrier::new(threads + 1);
    let start = thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let entries: Vec<(u8, &[u8])> = vec![(RECORD_TYPE, body); batch];
                ready.wait();
                for _ in 0..records / batch {
                    let lsn = if batch == 1 {
                        wal.append(RECORD_TYPE, body)
                    } else {
                        wal.append_batch(entries.iter().copied())
                    };
                    black_box(lsn.expect("append"));
                }
            });
        }
        ready.wait();
        Instant::now()
        // The scope joins every appender before it returns.
    });
    start.elapsed()
}

fn wal_cell(
    group: &mut BenchmarkGroup<'_, WallTime>,
    root: &Path,
    mode: &str,
    durability: Durability,
    (size, batch, threads): (usize, usize, usize),
) {
    let dir = fresh_dir(root, &format!("{mode}-{size}-{batch}-{threads}"));
    let opts = WalOptions {
        durability,
        ..WalOptions::default()
    };
    let (wal, _) = Wal::open_dir(&dir, opts).expect("open the WAL");
    let body = body(size, batch + threads);
    let per_thread = records_per_thread(batch);
    group.throughput(Throughput::Elements((per_thread * threads) as u64));
    group.bench_function(format!("{mode}/batch{batch}_threads{threads}"), |b| {
        b.iter_custom(|iters| {
            let records = per_thread * usize::try_from(iters).expect("iteration count");
            let elapsed = run_appenders(&wal, &body, batch, threads, records);
            // Untimed: start the next call with everything synced and only one segment on disk.
            wal.sync().expect("sync");
            wal.delete_segments_below(wal.last_lsn() + 1)
                .expect("delete sealed segments");
            elapsed
        });
    });
    wal.close().expect("close the WAL");
    fs::remove_dir_all(&dir).expect("remove the cell directory");
}

/// The physical ceiling: one thread, `pwrite(batch * size)` + `fdatasync`, over a preallocated
/// file, as many records per iteration as one WAL appender thread writes.
fn disk_cell(group: &mut BenchmarkGroup<'_, WallTime>, root: &Path, size: usize, batch: usize) {
    let dir = fresh_dir(root, &format!("disk-{size}-{batch}"));
    let path = dir.join("baseline.dat");
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .expect("create the baseline file");
    let zeros = vec![0u8; 1 << 20];
    for off in (0..BASELINE_FILE_BYTES).step_by(zeros.len()) {
        file.write_all_at(&zeros, off).expect("preallocate");
    }
    file.sync_all().expect("sync the preallocated file");
    let buf = body(size * batch, batch);
    let writes = records_per_thread(batch) / batch;
    let mut offset = 0u64;
    group.throughput(Throughput::Elements(records_per_thread(batch) as u64));
    group.bench_function(format!("disk_fdatasync/batch{batch}"), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters as usize * writes {
                if offset + buf.len() as u64 > BASELINE_FILE_BYTES {
                    offset = 0;
                }
                file.write_all_at(&buf, offset).expect("baseline write");
                file.sync_data().expect("baseline fdatasync");
                offset += buf.len() as u64;
            }
            start.elapsed()
        });
    });
    drop(file);
    fs::remove_dir_all(&dir).expect("remove the baseline directory");
}

fn wal_append(c: &mut Criterion) {
    let root = bench_root();
    for size in SIZES {
        let mut group = c.benchmark_group(format!("wal_append_{size}B"));
        // Iterations take milliseconds to a tenth of a second: equal-sized samples.
        group.sampling_mode(SamplingMode::Flat);
        // Each baseline right before its WAL cells: the disk's speed drifts when the machine is
        // shared, so neighbours in time compare best.
        for batch in BATCHES {
            disk_cell(&mut group, &root, size, batch);
            for threads in THREADS {
                wal_cell(
                    &mut group,
                    &root,
                    "sync",
                    Durability::Sync,
                    (size, batch, threads),
                );
            }
        }
        if size == 40 {
            wal_cell(
                &mut group,
                &root,
                "buffered",
                Durability::Buffered,
                (size, 64, 1),
            );
        }
        group.finish();
    }
    fs::remove_dir_all(&root).expect("remove the benchmark directory");
}

criterion_group! {
    name = benches;
    // Short, so the whole run (25 cells) stays within a few minutes on 2 cores.
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = wal_append
}
criterion_main!(benches);
