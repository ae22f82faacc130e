//! Group commit: which LSNs are written, which are durable, who syncs, and poisoning.
//!
//! The protocol, kept apart from the log so a loom model can drive it with a fake file type:
//!
//! - Appenders, in LSN order (the log calls [`GroupCommit::publish_written`] while it holds its
//!   append lock), record the byte range that holds each batch. Adjacent ranges of one segment
//!   merge, so one sync covers many batches.
//! - A waiter whose LSN is not durable may become the **leader** if no sync is in flight: it
//!   takes the log's append lock, closes the group (the log writes the group's mirror) and,
//!   still under that lock, [takes](GroupCommit::try_take) every pending range and the written
//!   LSN as its target. It syncs with no lock held, re-locks, publishes `durable = target` and
//!   wakes everyone. Others wait on the condvar; a sync covers every record published before
//!   it started, so followers are usually done when it ends. Leadership is only ever taken
//!   under the append lock, so a thread that holds that lock (a roll) can wait for the leader
//!   in flight without a deadlock: no new leader can appear meanwhile.
//! - A failed sync **poisons**: the leader gets the I/O error, everyone else (now and later)
//!   gets `Poisoned`, and `durable` never moves again. The failed ranges are not retried: after
//!   a failed fsync the kernel may have dropped the dirty pages, so a retry that "succeeds"
//!   proves nothing (fsyncgate). A failed write or directory sync elsewhere poisons too, also
//!   while a leader syncs: that leader's sync then acknowledges nothing, even if it succeeded
//!   (`durable` never moves after the poisoning).

use std::io;
use std::mem;
use std::sync::Arc;

use crate::Lsn;
use crate::sync::{AtomicBool, AtomicU64, Condvar, Mutex, Ordering, lock};

/// Dirty ranges of one segment closer than this merge into one (see `add_dirty`).
const MERGE_GAP_BYTES: u64 = 4096;

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
    /// This caller's own write or sync failed (it was the leader); the log is now poisoned.
    SyncFailed(io::Error),
    /// The log was poisoned by an earlier (or a concurrent) failure.
    Poisoned,
}

/// What a leader took to sync: every dirty range, and the LSN that becomes durable once they
/// are all synced.
#[derive(Debug)]
pub(crate) struct Taken<F> {
    pub(crate) target: Lsn,
    pub(crate) ranges: Vec<DirtyRange<F>>,
}

struct State<F> {
    written_lsn: Lsn,
    durable_lsn: Lsn,
    /// A leader has taken the dirty ranges and is syncing them. Only one at a time, and it is
    /// set only by [`GroupCommit::try_take`], whose callers hold the log's append lock.
    syncing: bool,
    poisoned: bool,
    dirty: Vec<DirtyRange<F>>,
    /// Callers blocked in [`GroupCommit::wait_durable`] until a sync ends.
    waiting: u32,
    /// Of the callers the last sync released, how many have not published a write since: the
    /// appenders a new leader expects soon (see `wait_durable`). Counted down once per published
    /// write, so a batch written in pieces counts more than once: it errs toward not yielding.
    released: u32,
}

/// The shared group-commit state of one log.
pub(crate) struct GroupCommit<F> {
    state: Mutex<State<F>>,
    durable_changed: Condvar,
    // Mirrors of the locked fields, so the getters never wait behind a leader's bookkeeping.
    written_lsn: AtomicU64,
    durable_lsn: AtomicU64,
    /// Set (after the locked field) when the log is poisoned; never cleared. Read by every
    /// poll of an async caller, so it takes no lock.
    poisoned: AtomicBool,
}

impl<F> GroupCommit<F> {
    /// Starts with everything up to `durable_lsn` written and durable.
    pub(crate) fn new(durable_lsn: Lsn) -> Self {
        Self {
            state: Mutex::new(State {
                written_lsn: durable_lsn,
                durable_lsn,
                syncing: false,
                poisoned: false,
                dirty: Vec::new(),
                waiting: 0,
                released: 0,
            }),
            durable_changed: Condvar::new(),
            written_lsn: AtomicU64::new(durable_lsn),
            durable_lsn: AtomicU64::new(durable_lsn),
            poisoned: AtomicBool::new(false),
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
        // `durable` never moves once the log is poisoned, so a reader that sees it unpoisoned
        // a moment late and then finds its LSN durable is still right to acknowledge.
        self.poisoned.load(Ordering::Acquire)
    }

    /// Publishes that every LSN up to `lsn` is written, the newest of them in `range`. Callers
    /// must publish in LSN order, with ranges that cover every byte written since the last one.
    pub(crate) fn publish_written(&self, lsn: Lsn, range: DirtyRange<F>) {
        let mut st = lock(&self.state);
        assert!(lsn > st.written_lsn, "LSNs are published in order");
        st.written_lsn = lsn;
        st.released = st.released.saturating_sub(1);
        self.written_lsn.store(lsn, Ordering::Release);
        Self::add_dirty(&mut st, range);
    }

    /// Publishes bytes written that carry no new LSN (the log's own records: a group's mirror),
    /// so that the next sync covers them too.
    pub(crate) fn publish_dirty(&self, range: DirtyRange<F>) {
        Self::add_dirty(&mut lock(&self.state), range);
    }

    /// Whether [`Self::try_take`]`(lsn)` would take now (the same caller lock applies).
    pub(crate) fn would_lead(&self, lsn: Lsn) -> bool {
        let st = lock(&self.state);
        st.durable_lsn < lsn && !st.poisoned && !st.syncing
    }

    fn add_dirty(st: &mut State<F>, range: DirtyRange<F>) {
        assert!(range.start < range.end);
        // Ranges of one segment less than a page apart merge: the gap is a block's padding,
        // never written, so syncing it costs nothing, and one msync beats two.
        match st.dirty.last_mut() {
            Some(last)
                if last.segment_id == range.segment_id
                    && range.start >= last.end
                    && range.start - last.end < MERGE_GAP_BYTES =>
            {
                last.end = range.end;
            }
            _ => st.dirty.push(range),
        }
    }

    /// Poisons without a sync (a write into the storage, or a directory sync, failed). A sync
    /// in flight meanwhile does not make anything durable any more (see [`Self::finish`]).
    pub(crate) fn poison(&self) {
        let mut st = lock(&self.state);
        st.poisoned = true;
        self.poisoned.store(true, Ordering::Release);
        self.durable_changed.notify_all();
    }

    /// Becomes the leader for `lsn` if no sync is in flight and `lsn` is not durable yet:
    /// takes every dirty range and the written LSN as the target. `Ok(None)` means "not now"
    /// (durable already, or another leader is syncing). The caller must hold the lock that
    /// orders writers (the log's append lock), so that nobody can become leader while it holds
    /// that lock: which is what lets a roll wait for durability under it without a deadlock.
    pub(crate) fn try_take(&self, lsn: Lsn) -> Result<Option<Taken<F>>, CommitError> {
        let mut st = lock(&self.state);
        if st.durable_lsn >= lsn {
            return Ok(None);
        }
        if st.poisoned {
            return Err(CommitError::Poisoned);
        }
        if st.syncing {
            return Ok(None);
        }
        st.syncing = true;
        let target = st.written_lsn;
        let ranges = mem::take(&mut st.dirty);
        assert!(!ranges.is_empty(), "LSNs above durable have dirty bytes");
        Ok(Some(Taken { target, ranges }))
    }

    /// Ends the leader's sync of everything up to `target`. Durability advances only if the
    /// sync succeeded **and** nobody poisoned the log meanwhile: a write or directory sync may
    /// fail in another thread while this sync runs, and after that nothing is acknowledged.
    fn finish(&self, target: Lsn, result: io::Result<()>) -> Result<(), CommitError> {
        let mut st = lock(&self.state);
        st.syncing = false;
        st.released = st.waiting;
        self.durable_changed.notify_all();
        match result {
            Ok(()) if st.poisoned => Err(CommitError::Poisoned),
            Ok(()) => {
                // One leader at a time, and only `finish` moves `durable`: it only grows.
                assert!(target > st.durable_lsn, "a sync covers something new");
                st.durable_lsn = target;
                self.durable_lsn.store(target, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                st.poisoned = true;
                self.poisoned.store(true, Ordering::Release);
                Err(CommitError::SyncFailed(e))
            }
        }
    }

    /// Blocks until `lsn` is durable, syncing as the leader when no sync is in flight.
    ///
    /// `lead` is called with no lock held when this caller may lead: it must take the lock that
    /// orders writers, do whatever closes the group (the log writes its mirror), and return
    /// [`Self::try_take`]`(lsn)`. `sync` must make every taken range durable, or fail.
    pub(crate) fn wait_durable(
        &self,
        lsn: Lsn,
        mut lead: impl FnMut() -> Result<Option<Taken<F>>, CommitError>,
        mut sync: impl FnMut(&[DirtyRange<F>]) -> io::Result<()>,
    ) -> Result<(), CommitError> {
        loop {
            let appenders_expected = {
                let mut st = lock(&self.state);
                assert!(
                    lsn <= st.written_lsn,
                    "only written LSNs can become durable"
                );
                if st.durable_lsn >= lsn {
                    return Ok(());
                }
                if st.poisoned {
                    return Err(CommitError::Poisoned);
                }
                if st.syncing {
                    st.waiting += 1;
                    st = self
                        .durable_changed
                        .wait(st)
                        .expect("a WAL thread panicked");
                    st.waiting -= 1;
                    drop(st);
                    continue;
                }
                st.released > 0
            };
            // Let appenders that are ready to run add their records first: a sync costs the
            // same for one record or a thousand, and the caller that woke first would
            // otherwise sync little more than its own record while the others are still being
            // scheduled (on few cores, with many appenders, that halves the throughput). Only
            // when the last sync released callers that have not written since, though: a
            // yield hands the CPU to whatever else is runnable for a whole slice (3.6 ms on
            // average, at most 33 ms, for two workers beside a busy thread), which a lone
            // appender pays for nothing.
            if appenders_expected {
                yield_now();
            }
            if let Some(taken) = lead()? {
                let result = sync(&taken.ranges);
                self.finish(taken.target, result)?;
            }
        }
    }
}

#[cfg(not(loom))]
fn yield_now() {
    std::thread::yield_now();
}

#[cfg(loom)]
fn yield_now() {
    loom::thread::yield_now();
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
        gc.wait_durable(
            1,
            || gc.try_take(1),
            |r| {
                seen.extend(r.iter().map(|r| (r.segment_id, r.start, r.end)));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(seen, [(1, 64, 160), (2, 64, 88)]);
        assert_eq!(gc.durable_lsn(), 4);
    }

    #[test]
    fn failed_sync_poisons_for_good() {
        let gc = GroupCommit::new(0);
        gc.publish_written(1, range(1, 64, 96));
        let err = gc.wait_durable(1, || gc.try_take(1), |_| Err(io::Error::other("EIO")));
        assert!(matches!(err, Err(CommitError::SyncFailed(_))));
        gc.publish_written(2, range(1, 96, 128));
        let err = gc.wait_durable(2, || gc.try_take(2), |_| Ok(()));
        assert!(matches!(err, Err(CommitError::Poisoned)));
        assert_eq!(gc.durable_lsn(), 0);
    }

    /// Defect 6: a write or directory sync that fails in another thread while the leader's
    /// sync runs poisons the log; the leader's successful sync must then acknowledge nothing.
    /// (The old code asserted `!poisoned` after the sync and panicked here.)
    #[test]
    fn poison_during_a_successful_sync_acknowledges_nothing() {
        let gc = GroupCommit::new(0);
        gc.publish_written(1, range(1, 64, 96));
        let err = gc.wait_durable(
            1,
            || gc.try_take(1),
            |_| {
                gc.poison(); // as a concurrent failed directory sync would
                Ok(())
            },
        );
        assert!(matches!(err, Err(CommitError::Poisoned)), "{err:?}");
        assert_eq!(
            gc.durable_lsn(),
            0,
            "nothing is durable after the poisoning"
        );
        assert!(gc.is_poisoned());
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
                        let lead = || {
                            let _writers = lock(&publish);
                            gc.try_take(lsn)
                        };
                        gc.wait_durable(lsn, lead, |_| {
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

    /// The leader's part: under the append lock (nothing to seal in the model), take.
    fn lead<'a>(
        gc: &'a GroupCommit<()>,
        next: &'a Mutex<u64>,
        lsn: Lsn,
    ) -> impl FnMut() -> Result<Option<Taken<()>>, CommitError> + 'a {
        move || {
            let _writers = lock(next);
            gc.try_take(lsn)
        }
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
                        gc.wait_durable(lsn, lead(&gc, &next, lsn), |ranges| {
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
                        gc.wait_durable(lsn, lead(&gc, &next, lsn), |_| {
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

    /// Defect 6: a failure elsewhere (a write into the storage, a directory sync) poisons the
    /// log at any moment, also while a leader syncs. Whatever the interleaving: nothing is
    /// acknowledged after the poisoning (durable never moves once it is set), and no assertion
    /// fires.
    #[test]
    fn loom_poison_during_a_sync_acknowledges_nothing_after_it() {
        loom::model(|| {
            let gc = Arc::new(GroupCommit::new(0));
            let next = Arc::new(Mutex::new(0u64));
            let appender = {
                let (gc, next) = (gc.clone(), next.clone());
                thread::spawn(move || {
                    let lsn = append(&gc, &next);
                    let result = gc.wait_durable(lsn, lead(&gc, &next, lsn), |_| Ok(()));
                    (lsn, result)
                })
            };
            let poisoner = {
                let gc = gc.clone();
                thread::spawn(move || {
                    gc.poison();
                    gc.durable_lsn()
                })
            };
            let (lsn, result) = appender.join().expect("appender");
            let durable_at_poison = poisoner.join().expect("poisoner");
            assert_eq!(
                gc.durable_lsn(),
                durable_at_poison,
                "durable moved after the poisoning"
            );
            match result {
                Ok(()) => assert!(gc.durable_lsn() >= lsn),
                Err(CommitError::Poisoned) => assert!(gc.durable_lsn() < lsn),
                Err(CommitError::SyncFailed(e)) => panic!("no sync failed: {e}"),
            }
        });
    }
}
