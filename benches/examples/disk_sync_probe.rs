//! What a durable commit costs on this disk, with no engine and no journal: a file written
//! with zeros one page at a time (as the journal prepares its segments), mapped, and small
//! writes into the map made durable.
//!
//! `cargo run --release -p timewheel-benches --example disk_sync_probe -- parts` times, per
//! 2,200-byte write (32 schedule records), `msync` (write back, wait, flush the device's
//! cache) against its two halves (`sync_file_range` to write back and wait, then `fdatasync`,
//! which only flushes), and an `msync` 60 µs after the write-back was started.
//!
//! `... -- loop msync|mirror|pipe [CALLERS]` is a closed loop (default 64 callers, 3 s): each
//! caller has one 70-byte record outstanding, two threads serve them, one thread makes them
//! durable. `msync`: each round syncs everything written so far. `mirror`: the same, each
//! round's bytes first copied after them from the next 512-byte boundary and the next round
//! started on a fresh page, as the journal seals a group (its mirror). `pipe`: each round ends the page
//! written to (the next record starts a fresh page), starts its write-back, and then syncs
//! the range whose write-back the round before started (long done: only the flush is left),
//! so a round costs one round trip to the device instead of two, and a record waits two
//! rounds.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use memmap2::MmapRaw;

const PAGE: usize = 4096;

/// A fresh file of `len` bytes, every page written with zeros one `pwrite` at a time and
/// synced, in single-page folios (`POSIX_FADV_RANDOM`, `MADV_RANDOM`), mapped.
fn prepared(path: &PathBuf, len: usize) -> (File, MmapRaw) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .expect("create the probe's file");
    // SAFETY: an advice on an open descriptor; it reads no memory of ours.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    let zeros = [0u8; PAGE];
    for page in 0..len / PAGE {
        file.write_all_at(&zeros, (page * PAGE) as u64)
            .expect("write zeros");
    }
    file.sync_all().expect("sync the zeros");
    let map = MmapRaw::map_raw(&file).expect("map the file");
    map.advise(memmap2::Advice::Random).expect("madvise");
    (file, map)
}

/// Writes `len` bytes of `byte` at `offset` of the map.
fn fill(map: &MmapRaw, offset: usize, len: usize, byte: u8) {
    assert!(offset + len <= map.len(), "inside the map");
    // SAFETY: in bounds (checked above) of a live shared mapping of a file that is never
    // truncated; the probe's threads write disjoint ranges (the caller reserved them).
    unsafe { std::ptr::write_bytes(map.as_mut_ptr().add(offset), byte, len) };
}

/// `msync(MS_SYNC)` of `start..end` (`start` rounded down to a page).
fn msync(map: &MmapRaw, start: usize, end: usize) {
    let start = start & !(PAGE - 1);
    map.flush_range(start, end - start).expect("msync");
}

fn sync_file_range(file: &File, start: usize, end: usize, flags: u32) {
    let start = start & !(PAGE - 1);
    // SAFETY: a system call on an open descriptor; it reads no memory of ours.
    let rc = unsafe {
        libc::sync_file_range(file.as_raw_fd(), start as i64, (end - start) as i64, flags)
    };
    assert_eq!(
        rc,
        0,
        "sync_file_range: {}",
        std::io::Error::last_os_error()
    );
}

fn parts(path: &PathBuf) {
    const WRITE: usize = 2_200;
    const N: usize = 3_000;
    let (file, map) = prepared(path, 64 << 20);
    let mut at = 0;
    let mut next = |bytes: &mut usize| {
        fill(&map, at, WRITE, 7);
        let range = (at, at + WRITE);
        at += WRITE;
        *bytes += WRITE;
        range
    };
    let (mut whole, mut write, mut flush, mut early) = (0.0, 0.0, 0.0, 0.0);
    let mut bytes = 0;
    for _ in 0..N {
        let (s, e) = next(&mut bytes);
        let t = Instant::now();
        msync(&map, s, e);
        whole += t.elapsed().as_secs_f64();
    }
    for _ in 0..N {
        let (s, e) = next(&mut bytes);
        let t = Instant::now();
        sync_file_range(
            &file,
            s,
            e,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        );
        write += t.elapsed().as_secs_f64();
        let t = Instant::now();
        file.sync_data().expect("fdatasync");
        flush += t.elapsed().as_secs_f64();
    }
    for _ in 0..N {
        let (s, e) = next(&mut bytes);
        sync_file_range(&file, s, e, libc::SYNC_FILE_RANGE_WRITE);
        let started = Instant::now();
        while started.elapsed() < Duration::from_micros(60) {
            std::hint::spin_loop();
        }
        let t = Instant::now();
        msync(&map, s, e);
        early += t.elapsed().as_secs_f64();
    }
    let us = |seconds: f64| seconds * 1e6 / N as f64;
    println!(
        "per {WRITE}-byte write: msync {:.1} µs; write back and wait {:.1} µs, then fdatasync {:.1} \
         µs; msync 60 µs after the write-back started {:.1} µs",
        us(whole),
        us(write),
        us(flush),
        us(early)
    );
}

fn closed_loop(path: &PathBuf, pipe: bool, mirror: bool, callers: usize) {
    const RECORD: usize = 70;
    let len = 512 << 20;
    let (file, map) = prepared(path, len);
    let map = Arc::new(map);
    // The end of what was written; the end of what is durable.
    let tail = Arc::new(Mutex::new(0usize));
    let durable = Arc::new(AtomicUsize::new(0));
    let woken = Arc::new((Mutex::new(()), Condvar::new()));
    let (done, rounds) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let full = Arc::new(AtomicBool::new(false));

    let servers: Vec<_> = (0..2)
        .map(|w| {
            let (map, tail, durable, woken, done, stop, full) = (
                map.clone(),
                tail.clone(),
                durable.clone(),
                woken.clone(),
                done.clone(),
                stop.clone(),
                full.clone(),
            );
            std::thread::spawn(move || {
                let append = || {
                    let mut t = tail.lock().expect("not poisoned");
                    if *t + RECORD + PAGE > len {
                        full.store(true, Ordering::Relaxed);
                        return usize::MAX;
                    }
                    fill(&map, *t, RECORD, 7 + w as u8);
                    *t += RECORD;
                    *t
                };
                let mut awaited: Vec<usize> = (0..callers / 2).map(|_| append()).collect();
                while !stop.load(Ordering::Relaxed) && !full.load(Ordering::Relaxed) {
                    let through = durable.load(Ordering::Acquire);
                    let mut served = 0;
                    for end in awaited.iter_mut().filter(|end| **end <= through) {
                        *end = append();
                        served += 1;
                    }
                    if served > 0 {
                        done.fetch_add(served, Ordering::Relaxed);
                        continue;
                    }
                    let guard = woken.0.lock().expect("not poisoned");
                    if durable.load(Ordering::Acquire) == through {
                        let _ = woken
                            .1
                            .wait_timeout(guard, Duration::from_millis(5))
                            .expect("not poisoned");
                    }
                }
            })
        })
        .collect();

    let syncer = {
        let (map, tail, durable, woken, rounds, stop, full) = (
            map.clone(),
            tail.clone(),
            durable.clone(),
            woken.clone(),
            rounds.clone(),
            stop.clone(),
            full.clone(),
        );
        std::thread::spawn(move || {
            let (mut synced, mut started) = (0usize, 0usize);
            let publish = |end: usize| {
                durable.store(end, Ordering::Release);
                let _guard = woken.0.lock().expect("not poisoned");
                woken.1.notify_all();
            };
            while !stop.load(Ordering::Relaxed) && !full.load(Ordering::Relaxed) {
                if !pipe {
                    let end = {
                        let mut t = tail.lock().expect("not poisoned");
                        let end = *t;
                        if mirror && end > synced {
                            // As the journal seals a group: a copy of it from the next
                            // 512-byte boundary, and the next group on a fresh page.
                            let at = end.next_multiple_of(512);
                            let copy = end - synced;
                            fill(&map, at, copy, 9);
                            *t = (at + copy).next_multiple_of(PAGE);
                            at + copy
                        } else {
                            end
                        }
                    };
                    if end == synced {
                        std::thread::yield_now();
                        continue;
                    }
                    msync(&map, synced, end);
                    synced = end;
                    publish(end);
                } else {
                    // End the page written to: what follows starts a fresh one, so the range
                    // whose write-back starts now is never written again.
                    let end = {
                        let mut t = tail.lock().expect("not poisoned");
                        let end = *t;
                        if end > started {
                            *t = end.next_multiple_of(PAGE);
                        }
                        end
                    };
                    let before = started;
                    if end > started {
                        sync_file_range(&file, started, end, libc::SYNC_FILE_RANGE_WRITE);
                        started = end.next_multiple_of(PAGE);
                    }
                    if before > synced {
                        msync(&map, synced, before);
                        synced = before;
                        publish(before);
                    } else if end <= before {
                        std::thread::yield_now();
                        continue;
                    }
                }
                rounds.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let t = Instant::now();
    let deadline = t + Duration::from_secs(3);
    while Instant::now() < deadline && !full.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (records, elapsed) = (done.load(Ordering::Relaxed), t.elapsed().as_secs_f64());
    stop.store(true, Ordering::Relaxed);
    woken.1.notify_all();
    for s in servers {
        s.join().expect("a server thread");
    }
    syncer.join().expect("the syncing thread");
    let rounds = rounds.load(Ordering::Relaxed).max(1) as f64;
    let written = *tail.lock().expect("not poisoned");
    println!(
        "{} {callers} callers: {:.0} records/s, {:.1} records per round, {:.0} µs per round, \
         {:.0} bytes of file per record",
        if pipe {
            "pipe"
        } else if mirror {
            "mirror"
        } else {
            "msync"
        },
        records as f64 / elapsed,
        records as f64 / rounds,
        elapsed * 1e6 / rounds,
        written as f64 / records.max(1) as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = std::env::temp_dir().join(format!("disk_sync_probe.{}", std::process::id()));
    match args.first().map(String::as_str) {
        Some("parts") | None => parts(&path),
        Some("loop") => {
            let (pipe, mirror) = match args.get(1).map_or("msync", String::as_str) {
                "msync" => (false, false),
                "mirror" => (false, true),
                "pipe" => (true, false),
                other => panic!("unknown mode {other:?}: msync, mirror or pipe"),
            };
            let callers = args.get(2).map_or(64, |a| a.parse().expect("CALLERS"));
            closed_loop(&path, pipe, mirror, callers);
        }
        Some(other) => panic!("unknown command {other:?}: parts or loop"),
    }
    std::fs::remove_file(&path).expect("remove the probe's file");
}
