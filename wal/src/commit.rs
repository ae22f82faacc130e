//! Group commit: which LSNs are written, which are durable, who syncs, and poisoning.
//!
//! The protocol, kept apart from the log so a loom model can drive it with a fake file type:
//!
//! - Appenders, in LSN order (the log calls [`GroupCommit::publish_written`] while it holds its
//!   append lock), record the byte range that holds each batch. Adjacent ranges of one segment
//!   merge, so one sync covers many batches.
//! - A waiter whose LSN is not durable becomes the **leader** if no sync is in flight: it takes
//!   every pending range and the written LSN as its target, releases the lock, syncs, re-locks,
//!   publishes `durable = target` and wakes everyone. Others wait on the condvar; a sync covers
//!   every record published before it started, so followers are usually done when it ends.
//! - A failed sync **poisons**: the leader gets the I/O error, everyone else (now and later)
//!   gets `Poisoned`, and `durable` never moves again. The failed ranges are not retried: after
//!   a failed fsync the kernel may have dropped the dirty pages, so a retry that "succeeds"
//!   proves nothing (fsyncgate).

use std::io;
use std::mem;
use std::sync::Arc;

use crate::Lsn;
use crate::sync::{AtomicU64, Condvar, Mutex, Ordering, lock};

/// Bytes `start..end` of segment `segment_id` hold records written but maybe not durable.
#[derive(Debug)]
pub(crate) struct DirtyRange<F> {
    pub(crate) segment_id: u64,
    pub(crate) file: Arc<F>,
    pub(crate) start: u64,
    pub(crate) end: u64,
}

/// Why a wait for durability failed.
#[derive(Debug)]
pub(crate) enum CommitError {
    /// This caller's own sync failed (it was the leader); the log is now poisoned.
    SyncFailed(io::Error),
    /// The log was poisoned by an earlier failure.
    Poisoned,
}

struct State<F> {
    written_lsn: Lsn,
    durable_lsn: Lsn,
    leader_active: bool,
    poisoned: bool,
    dirty: Vec<DirtyRange<F>>,
}

/// The shared group-commit state of one log.
pub(crate) struct GroupCommit<F> {
    state: Mutex<State<F>>,
    durable_changed: Condvar,
    // Mirrors of the locked fields, so the getters never wait behind a leader's bookkeeping.
    written_lsn: AtomicU64,
    durable_lsn: AtomicU64,
}

impl<F> GroupCommit<F> {
    /// Starts with everything up to `durable_lsn` written and durable.
    pub(crate) fn new(durable_lsn: Lsn) -> Self {
        Self {
            state: Mutex::new(State {
                written_lsn: durable_lsn,
                durable_lsn,
                leader_active: false,
                poisoned: false,
                dirty: Vec::new(),
            }),
            durable_changed: Condvar::new(),
            written_lsn: AtomicU64::new(durable_lsn),
            durable_lsn: AtomicU64::new(durable_lsn),
        }
    }

    /// The highest LSN known durable.
    pub(crate) fn durable_lsn(&self) -> Lsn {
        self.durable_lsn.load(Ordering::Acquire)
    }

    /// The highest LSN written into the storage.
    pub(crate) fn written_lsn(&self) -> Lsn {
        self.written_lsn.load(Ordering::Acquire)
    }

    /// Whether a write or sync failed.
    pub(crate) fn is_poisoned(&self) -> bool {
        lock(&self.state).poisoned
    }

    /// Publishes that every LSN up to `lsn` is written, the newest of them in `range`. Callers
    /// must publish in LSN order, with ranges that cover every byte written since the last one.
    pub(crate) fn publish_written(&self, lsn: Lsn, range: DirtyRange<F>) {
        assert!(range.start < range.end);
        let mut st = lock(&self.state);
        assert!(lsn > st.written_lsn, "LSNs are published in order");
        st.written_lsn = lsn;
        self.written_lsn.store(lsn, Ordering::Release);
        match st.dirty.last_mut() {
            Some(last) if last.segment_id == range.segment_id && last.end == range.start => {
                last.end = range.end;
            }
            _ => st.dirty.push(range),
        }
    }

    /// Poisons without a sync (a write into the storage failed).
    pub(crate) fn poison(&self) {
        let mut st = lock(&self.state);
        st.poisoned = true;
        self.durable_changed.notify_all();
    }

    /// Blocks until `lsn` is durable, syncing as the leader when no sync is in flight. `sync`
    /// must make every given range durable, or fail.
    pub(crate) fn wait_durable(
        &self,
        lsn: Lsn,
        mut sync: impl FnMut(&[DirtyRange<F>]) -> io::Result<()>,
    ) -> Result<(), CommitError> {
        let mut st = lock(&self.state);
        assert!(
            lsn <= st.written_lsn,
            "only written LSNs can become durable"
        );
        loop {
            if st.durable_lsn >= lsn {
                return Ok(());
            }
            if st.poisoned {
                return Err(CommitError::Poisoned);
            }
            if st.leader_active {
                st = self
                    .durable_changed
                    .wait(st)
                    .expect("a WAL thread panicked");
                continue;
            }
            st.leader_active = true;
            // Let appenders that are ready to run add their records first: a sync costs the
            // same for one record or a thousand, and the caller that woke first would
            // otherwise sync little more than its own record while the others are still being
            // scheduled (on few cores, with many appenders, that halves the throughput).
            drop(st);
            std::thread::yield_now();
            st = lock(&self.state);
            let target = st.written_lsn;
            let ranges = mem::take(&mut st.dirty);
            assert!(!ranges.is_empty(), "LSNs above durable have dirty bytes");
            drop(st);
            let result = sync(&ranges);
            st = lock(&self.state);
            st.leader_active = false;
            self.durable_changed.notify_all();
            match result {
                Ok(()) => {
                    assert!(target > st.durable_lsn && !st.poisoned);
                    st.durable_lsn = target;
                    self.durable_lsn.store(target, Ordering::Release);
                }
                Err(e) => {
                    st.poisoned = true;
                    return Err(CommitError::SyncFailed(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::thread;

    fn range(segment_id: u64, start: u64, end: u64) -> DirtyRange<()> {
        DirtyRange {
            segment_id,
            file: Arc::new(()),
            start,
            end,
        }
    }

    #[test]
    fn adjacent_ranges_merge_and_one_sync_covers_them() {
        let gc = GroupCommit::new(0);
        gc.publish_written(1, range(1, 64, 96));
        gc.publish_written(3, range(1, 96, 160));
        gc.publish_written(4, range(2, 64, 88));
        let mut seen = Vec::new();
        gc.wait_durable(1, |r| {
            seen.extend(r.iter().map(|r| (r.segment_id, r.start, r.end)));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [(1, 64, 160), (2, 64, 88)]);
        assert_eq!(gc.durable_lsn(), 4);
    }

    #[test]
    fn failed_sync_poisons_for_good() {
        let gc = GroupCommit::new(0);
        gc.publish_written(1, range(1, 64, 96));
        let err = gc.wait_durable(1, |_| Err(io::Error::other("EIO")));
        assert!(matches!(err, Err(CommitError::SyncFailed(_))));
        gc.publish_written(2, range(1, 96, 128));
        let err = gc.wait_durable(2, |_| Ok(()));
        assert!(matches!(err, Err(CommitError::Poisoned)));
        assert_eq!(gc.durable_lsn(), 0);
    }

    #[test]
    fn concurrent_waiters_share_syncs() {
        let gc = Arc::new(GroupCommit::new(0));
        let publish = Arc::new(Mutex::new(0u64));
        let syncs = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (gc, publish, syncs) = (gc.clone(), publish.clone(), syncs.clone());
                thread::spawn(move || {
                    for _ in 0..200 {
                        let lsn = {
                            let mut next = lock(&publish);
                            *next += 1;
                            gc.publish_written(*next, range(1, *next * 8, *next * 8 + 8));
                            *next
                        };
                        gc.wait_durable(lsn, |_| {
                            syncs.fetch_add(1, Ordering::Relaxed);
                            Ok(())
                        })
                        .unwrap();
                        assert!(gc.durable_lsn() >= lsn);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(gc.durable_lsn(), 1600);
        assert!(syncs.load(Ordering::Relaxed) <= 1600);
    }
}

/// The loom model of the hand-off between appenders, the leader that syncs, and poisoning.
/// Run with `RUSTFLAGS="--cfg loom" cargo test -p timewheel-wal --lib --release loom_`.
#[cfg(all(test, loom))]
mod loom_model {
    use super::*;
    use loom::sync::atomic::AtomicUsize;
    use loom::thread;

    fn range(start: u64) -> DirtyRange<()> {
        DirtyRange {
            segment_id: 1,
            file: Arc::new(()),
            start,
            end: start + 8,
        }
    }

    /// Appends one record under the append lock (which orders LSNs) and returns its LSN.
    fn append(gc: &GroupCommit<()>, next: &Mutex<u64>) -> Lsn {
        let mut n = lock(next);
        *n += 1;
        gc.publish_written(*n, range(*n * 8));
        *n
    }

    #[test]
    fn loom_every_acknowledged_lsn_is_covered_by_a_successful_sync() {
        loom::model(|| {
            let gc = Arc::new(GroupCommit::new(0));
            let next = Arc::new(Mutex::new(0u64));
            // The highest LSN a successful sync covered: an Ok above it is a lie.
            let synced = Arc::new(AtomicU64::new(0));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (gc, next, synced) = (gc.clone(), next.clone(), synced.clone());
                    thread::spawn(move || {
                        let lsn = append(&gc, &next);
                        gc.wait_durable(lsn, |ranges| {
                            // Record `n` lives at bytes n*8 .. n*8+8.
                            let covered = ranges.iter().map(|r| r.end / 8 - 1).max();
                            synced.fetch_max(covered.unwrap_or(0), Ordering::SeqCst);
                            Ok(())
                        })
                        .expect("no failure injected");
                        assert!(gc.durable_lsn() >= lsn);
                        assert!(
                            synced.load(Ordering::SeqCst) >= lsn,
                            "acknowledged only after a sync that covered it"
                        );
                        lsn
                    })
                })
                .collect();
            for t in threads {
                let lsn = t.join().expect("thread");
                assert!(gc.durable_lsn() >= lsn);
            }
            assert_eq!(gc.durable_lsn(), 2);
        });
    }

    #[test]
    fn loom_a_failed_sync_is_never_followed_by_an_acknowledgement() {
        loom::model(|| {
            let gc = Arc::new(GroupCommit::new(0));
            let next = Arc::new(Mutex::new(0u64));
            let syncs = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (gc, next, syncs) = (gc.clone(), next.clone(), syncs.clone());
                    thread::spawn(move || {
                        let lsn = append(&gc, &next);
                        // The first sync fails; any later one would "succeed" — and must never
                        // be believed, because nothing may be acknowledged after a failure.
                        gc.wait_durable(lsn, |_| {
                            if syncs.fetch_add(1, Ordering::SeqCst) == 0 {
                                Err(io::Error::other("EIO"))
                            } else {
                                Ok(())
                            }
                        })
                    })
                })
                .collect();
            let results: Vec<_> = threads
                .into_iter()
                .map(|t| t.join().expect("thread"))
                .collect();
            assert!(
                results.iter().all(|r| r.is_err()),
                "the first sync failed, so nothing is acknowledged"
            );
            assert_eq!(
                syncs.load(Ordering::SeqCst),
                1,
                "a failed sync is never retried"
            );
            assert_eq!(gc.durable_lsn(), 0);
            assert!(gc.is_poisoned());
            assert_eq!(
                results
                    .iter()
                    .filter(|r| matches!(r, Err(CommitError::SyncFailed(_))))
                    .count(),
                1,
                "exactly the leader sees the I/O error; the others see Poisoned"
            );
        });
    }
}
