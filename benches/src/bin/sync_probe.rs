//! What a small durable write costs the disk and the CPU, two ways: a store into a shared
//! file mapping + `msync` of its page (what the log does), and `pwrite` + `fdatasync`; each
//! with the other CPU idle or busy with a thread of this process. A thread of the same
//! process on the other CPU is what makes `msync`'s write-protect of the page send a TLB
//! shootdown there.
//!
//! `cargo run --release -p timewheel-benches --bin sync-probe -- [DIR] [SYNCS] [ROUNDS]`
//! (`DIR` on the disk to measure; default the system temp dir, which must not be tmpfs).
//! Prints syncs/s and the process's CPU per sync, the busy thread's own time taken out; then
//! syncs/s of 1, 2 and 4 threads syncing their own pages at once (does the disk take syncs in
//! parallel, as two group commits in flight would ask of it?).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use memmap2::{Advice, MmapMut};
use timewheel_benches::cpu::process_cpu_seconds;

/// The file's size: a log segment's.
const FILE_BYTES: u64 = 64 << 20;
/// Bytes per write: a small record.
const WRITE_BYTES: usize = 100;
/// The page size the log's files are zeroed in (single-page folios, as the storage does).
const PAGE_BYTES: u64 = 4096;

/// A file of `FILE_BYTES`, written with zeros one page per write and synced: as a prepared
/// log segment is.
fn prepared_file(path: &PathBuf) -> File {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .expect("create the probe file");
    let zeros = vec![0u8; PAGE_BYTES as usize];
    for page in 0..FILE_BYTES / PAGE_BYTES {
        file.write_all_at(&zeros, page * PAGE_BYTES)
            .expect("zero a page");
    }
    file.sync_all().expect("sync the zeros");
    file
}

/// Syncs/s and CPU seconds per sync of `syncs` small writes the way `mode` says.
fn measure(path: &PathBuf, mapped: bool, syncs: usize) -> (f64, f64) {
    let file = prepared_file(path);
    // SAFETY: the file is this probe's own, created above at its full length, and nothing
    // else truncates it while it is mapped.
    let mut map = unsafe { MmapMut::map_mut(&file) }.expect("map the probe file");
    map.advise(Advice::Random).expect("madvise");
    let record = [7u8; WRITE_BYTES];
    let (cpu0, t0) = (process_cpu_seconds(), Instant::now());
    for i in 0..syncs {
        let offset = i * WRITE_BYTES;
        if mapped {
            map[offset..offset + WRITE_BYTES].copy_from_slice(&record);
            let page = offset & !(PAGE_BYTES as usize - 1);
            map.flush_range(page, offset + WRITE_BYTES - page)
                .expect("msync");
        } else {
            file.write_all_at(&record, offset as u64).expect("pwrite");
            file.sync_data().expect("fdatasync");
        }
    }
    let (wall, cpu) = (t0.elapsed().as_secs_f64(), process_cpu_seconds() - cpu0);
    drop(map);
    std::fs::remove_file(path).expect("remove the probe file");
    (syncs as f64 / wall, cpu / syncs as f64)
}

/// Syncs/s of `threads` threads syncing at once, each its own pages (as page-aligned commit
/// blocks of two groups in flight would be): does the disk take two syncs in parallel?
fn measure_concurrent(path: &PathBuf, threads: usize, syncs_each: usize) -> f64 {
    let file = prepared_file(path);
    // Each thread writes only its own pages, through raw pointers into this raw mapping of
    // the probe's own file (created above at full length, never truncated while mapped).
    let map = memmap2::MmapRaw::map_raw(&file).expect("map the probe file");
    let base = map.as_mut_ptr() as usize;
    let len = map.len();
    let t0 = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let map = &map;
            scope.spawn(move || {
                for i in 0..syncs_each {
                    let page = (i * threads + t) * PAGE_BYTES as usize;
                    assert!(page + WRITE_BYTES <= len);
                    // SAFETY: in bounds (checked above); no other thread writes this page.
                    unsafe {
                        std::ptr::write_bytes((base + page) as *mut u8, 7, WRITE_BYTES);
                    }
                    map.flush_range(page, WRITE_BYTES).expect("msync");
                }
            });
        }
    });
    let wall = t0.elapsed().as_secs_f64();
    drop(map);
    std::fs::remove_file(path).expect("remove the probe file");
    (threads * syncs_each) as f64 / wall
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args.first().map_or_else(std::env::temp_dir, PathBuf::from);
    let syncs: usize = args.get(1).map_or(3000, |a| a.parse().expect("SYNCS"));
    let rounds: usize = args.get(2).map_or(2, |a| a.parse().expect("ROUNDS"));
    let path = dir.join(format!("timewheel-sync-probe-{}", std::process::id()));
    for round in 1..=rounds {
        for busy in [false, true] {
            let stop = Arc::new(AtomicBool::new(false));
            let spinner = busy.then(|| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n = std::hint::black_box(n.wrapping_add(1));
                    }
                })
            });
            for mapped in [true, false] {
                let (rate, cpu_per_sync) = measure(&path, mapped, syncs);
                // The busy thread burns one CPU through the timed loop: take it out (an
                // estimate: it may have been off its CPU for moments).
                let spin_per_sync = if busy { 1.0 / rate } else { 0.0 };
                println!(
                    "round {round}: {:<18} other CPU {:<22} {rate:>6.0} syncs/s, {:>5.0} µs CPU per sync",
                    if mapped {
                        "store + msync"
                    } else {
                        "pwrite + fdatasync"
                    },
                    if busy { "busy with our thread" } else { "idle" },
                    (cpu_per_sync - spin_per_sync).max(0.0) * 1e6
                );
            }
            stop.store(true, Ordering::Relaxed);
            if let Some(spinner) = spinner {
                spinner.join().expect("spinner");
            }
        }
        for threads in [1, 2, 4] {
            let rate = measure_concurrent(&path, threads, syncs / threads);
            println!(
                "round {round}: store + msync, {threads} thread(s) at once, own pages {rate:>6.0} syncs/s"
            );
        }
    }
}
