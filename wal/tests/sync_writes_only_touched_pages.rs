//! A commit writes back the pages it touched, not the large folios around them.
//!
//! Linux keeps file pages in folios of up to 2 MiB where it can (readahead, large writes), and
//! an `msync` writes back every folio a mapped write dirtied, whole. Before the storage asked
//! for single-page folios, lone durable records wrote 100 KB to 1 MB each on this project's
//! machine (ext4, kernel 6.18): the first segment's pages came in through readahead. This test
//! counts the bytes the process sent to the disk (`/proc/thread-self/io`, Linux only) while it commits
//! records one at a time, in a fresh log and again after a reopen whose recovery read the
//! segment back (with the page cache dropped in between, as after a restart). A byte count,
//! not a time: it does not depend on the machine's load.

use std::os::fd::AsRawFd as _;
use std::path::Path;

use timewheel_wal::{Wal, WalOptions};

const COMMITS: u64 = 600;

/// Bytes this thread has caused to be written to storage, or `None` where that is not known.
fn written_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
}

/// Drops the clean cached pages of every file in `dir`, as a restart would find them.
fn drop_page_cache(dir: &Path) {
    for entry in std::fs::read_dir(dir).expect("list") {
        let path = entry.expect("entry").path();
        let file = std::fs::File::open(&path).expect("open");
        file.sync_all().expect("sync");
        // SAFETY: posix_fadvise reads no user memory; the descriptor is open.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// Commits `COMMITS` records one at a time from this thread (which leads each commit, so its
/// `msync` runs here) and returns the bytes this thread wrote per commit. The log's background
/// preparer writes the zeros of the next segment's file meanwhile, in its own thread: not
/// counted.
fn per_commit(wal: &Wal) -> Option<u64> {
    let before = written_bytes()?;
    for i in 0..COMMITS {
        wal.append(1, &i.to_le_bytes().repeat(60)).expect("append");
    }
    Some((written_bytes()? - before) / COMMITS)
}

#[test]
fn lone_commits_write_a_few_pages_each() {
    if written_bytes().is_none_or(|_| !cfg!(target_os = "linux")) {
        eprintln!("skipped: /proc/thread-self/io is not available here");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = WalOptions::default();
    let (wal, _) = Wal::open_dir(dir.path(), opts.clone()).expect("open");
    let fresh = per_commit(&wal).expect("counted");
    drop(wal);
    drop_page_cache(dir.path());
    let (wal, _) = Wal::open_dir(dir.path(), opts).expect("reopen");
    let reopened = per_commit(&wal).expect("counted");
    drop(wal);
    if fresh == 0 && reopened == 0 {
        eprintln!("skipped: this file system reports no writes (tmpfs?)");
        return;
    }
    // A commit of one 480-byte record writes its block: one page (two where a commit seals a
    // block into its mirror). Before the fix, after a reopen: 16 KiB per commit here.
    eprintln!("bytes per commit: fresh {fresh}, after a reopen {reopened}");
    for (when, bytes) in [("fresh", fresh), ("after a reopen", reopened)] {
        assert!(
            bytes <= 8 << 10,
            "{when}: each lone commit wrote {bytes} bytes to the disk"
        );
    }
}
