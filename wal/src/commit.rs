//! Group commit: which LSNs are written, which are durable, who syncs, and poisoning.
//!
//! The protocol, kept apart from the log so a loom model can drive it with a fake file type:
//!
//! - Appenders, in LSN order (the log calls [`GroupCommit::publish_written`] while it holds its
//!   append lock), record the byte range that holds each batch. Adjacent ranges of one segment
//!   merge, so one sync covers many batches.
//! - A waiter whose LSN is not durable, and not covered by a sync in flight, may become a
//!   **leader** if fewer than `syncs_max` syncs are in flight: it takes the log's append lock,
//!   closes the group (the log writes the group's mirror, and the next group starts on a fresh
//!   page) and, still under that lock, [takes](GroupCommit::try_take) every pending range and
//!   the written LSN as its target. It syncs with no lock held, re-locks, marks its sync
//!   finished and wakes whom it concerns. Others park; a sync covers every record published
//!   before it started, so followers are usually done when it ends. Each parked caller is
//!   woken alone: when its LSN is durable, or (one at a time) when it may lead the next sync,
//!   or when the log is poisoned. (Woken all at once, 64 callers cost 3.7 context switches per
//!   call: every sync woke them all, and most went back to sleep.) Leadership is
//!   only ever taken under the append lock, so a thread that holds that lock (a roll) can wait
//!   for the leaders in flight without a deadlock: no new leader can appear meanwhile.
//! - **Two syncs in flight** (`syncs_max` = 2; the default is 1, see
//!   `WalOptions::syncs_in_flight`): a second leader takes what was written after the first
//!   took its own. Their ranges never share a page (every take
//!   closes the group first). `durable` moves only over a *prefix* of finished syncs: a second
//!   sync that ends first acknowledges nothing until the first has ended too. Recovery needs
//!   nothing new: a record of the second group was written before the first was durable, so it
//!   never vouches for the first (see `docs/wal-format.md`, "Vouching").
//! - A failed sync **poisons**: the leader gets the I/O error, everyone else (now and later)
//!   gets `Poisoned`, and `durable` never moves again, not even for a sync in flight beside it
//!   that succeeds. The failed ranges are not retried: after a failed fsync the kernel may have
//!   dropped the dirty pages, so a retry that "succeeds" proves nothing (fsyncgate). A failed
//!   write or directory sync elsewhere poisons too, also while leaders sync: their syncs then
//!   acknowledge nothing, even if they succeeded (`durable` never moves after the poisoning).

use std::collections::VecDeque;
use std::io;
use std::mem;
use std::sync::Arc;

use crate::Lsn;
use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering, Thread, current, lock, park};

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

/// A caller parked until its LSN is durable (or it may lead).
struct Waiter {
    lsn: Lsn,
    /// It holds the lock that orders writers (a roll waits so): of the callers that may lead,
    /// it is the one woken, since no other can take that lock to lead until it returns.
    holds_writers: bool,
    woken: AtomicBool,
    thread: Thread,
}

/// One leader's sync, from its take to its finish.
#[derive(Debug)]
struct InFlight {
    /// The written LSN when it took: durable once this sync and every earlier one succeeded.
    target: Lsn,
    /// Its sync succeeded; `durable` waits for the earlier ones.
    done: bool,
}

struct State<F> {
    written_lsn: Lsn,
    durable_lsn: Lsn,
    /// The syncs taken and not yet moved into `durable`, in take order (so by target): at most
    /// `syncs_max`. Pushed only by [`GroupCommit::try_take`], whose callers hold the log's
    /// append lock.
    in_flight: VecDeque<InFlight>,
    poisoned: bool,
    dirty: Vec<DirtyRange<F>>,
    /// Callers parked in [`GroupCommit::wait_durable`] until a sync ends: each is woken alone,
    /// when its LSN became durable, when it may lead the next sync, or when the log is
    /// poisoned (see `wake`), not all of them at every sync's end.
    waiters: Vec<Arc<Waiter>>,
    /// Of the callers the last sync released, how many have not published a write since: the
    /// appenders a new leader expects soon (see `wait_durable`). Counted down once per published
    /// write, so a batch written in pieces counts more than once: it errs toward not yielding.
    released: u32,
}

/// The shared group-commit state of one log.
pub(crate) struct GroupCommit<F> {
    state: Mutex<State<F>>,
    /// How many syncs may be in flight at once (1 or more).
    syncs_max: usize,
    // Mirrors of the locked fields, so the getters never wait behind a leader's bookkeeping.
    written_lsn: AtomicU64,
    durable_lsn: AtomicU64,
    /// Set (after the locked field) when the log is poisoned; never cleared. Read by every
    /// poll of an async caller, so it takes no lock.
    poisoned: AtomicBool,
}

impl<F> GroupCommit<F> {
    /// Starts with everything up to `durable_lsn` written and durable, with at most
    /// `syncs_max` syncs in flight.
    pub(crate) fn new(durable_lsn: Lsn, syncs_max: usize) -> Self {
        assert!(syncs_max >= 1, "at least one sync can be in flight");
        Self {
            syncs_max,
            state: Mutex::new(State {
                written_lsn: durable_lsn,
                durable_lsn,
                in_flight: VecDeque::with_capacity(syncs_max),
                poisoned: false,
                dirty: Vec::new(),
                waiters: Vec::new(),
                released: 0,
            }),
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
        !st.poisoned && self.may_take(&st, lsn)
    }

    /// Whether a leader for `lsn` may take now: `lsn` is neither durable nor covered by a sync
    /// in flight, and a sync may start.
    fn may_take(&self, st: &State<F>, lsn: Lsn) -> bool {
        lsn > Self::covered(st) && st.in_flight.len() < self.syncs_max
    }

    /// The highest LSN that is durable or will be once the syncs in flight succeed.
    fn covered(st: &State<F>) -> Lsn {
        st.in_flight.back().map_or(st.durable_lsn, |t| t.target)
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
        let woken = self.wake(&mut st);
        drop(st);
        unpark(woken);
    }

    /// Takes out of `waiters` those who can go on now: every one after a poisoning; else those
    /// whose LSN is durable, and, when a sync may start, the parked caller with the lowest LSN
    /// that no sync covers (it leads, and its sync covers the others written by then; a caller
    /// that holds the writers' lock comes first, as no other could lead). The caller unparks
    /// them once the lock is released.
    fn wake(&self, st: &mut State<F>) -> Vec<Arc<Waiter>> {
        let (poisoned, durable) = (st.poisoned, st.durable_lsn);
        let mut woken: Vec<Arc<Waiter>> = Vec::new();
        st.waiters.retain(|w| {
            let go = poisoned || w.lsn <= durable;
            if go {
                woken.push(Arc::clone(w));
            }
            !go
        });
        if !poisoned && st.in_flight.len() < self.syncs_max {
            let covered = Self::covered(st);
            if let Some(at) = st
                .waiters
                .iter()
                .enumerate()
                .filter(|(_, w)| w.lsn > covered)
                .min_by_key(|(_, w)| (!w.holds_writers, w.lsn))
                .map(|(at, _)| at)
            {
                woken.push(st.waiters.swap_remove(at));
            }
        }
        woken
    }

    /// Becomes a leader for `lsn` if `lsn` is neither durable nor covered by a sync in flight
    /// and fewer than `syncs_max` syncs are in flight: takes every dirty range and the written
    /// LSN as the target. `Ok(None)` means "not now" (durable already, covered by a sync in
    /// flight, or no sync may start). The caller must hold the lock that orders writers (the
    /// log's append lock), so that nobody can become leader while it holds that lock: which is
    /// what lets a roll wait for durability under it without a deadlock.
    pub(crate) fn try_take(&self, lsn: Lsn) -> Result<Option<Taken<F>>, CommitError> {
        let mut st = lock(&self.state);
        if st.durable_lsn >= lsn {
            return Ok(None);
        }
        if st.poisoned {
            return Err(CommitError::Poisoned);
        }
        if !self.may_take(&st, lsn) {
            return Ok(None);
        }
        let target = st.written_lsn;
        let ranges = mem::take(&mut st.dirty);
        assert!(
            !ranges.is_empty(),
            "LSNs above those covered have dirty bytes"
        );
        st.in_flight.push_back(InFlight {
            target,
            done: false,
        });
        Ok(Some(Taken { target, ranges }))
    }

    /// Ends the leader's sync of everything up to `target`. Durability advances only over
    /// syncs that succeeded with every earlier one, **and** only while nobody has poisoned the
    /// log: a write or directory sync may fail in another thread while this sync runs, and
    /// after that nothing is acknowledged. `Ok` says only that this sync succeeded: `target`
    /// is durable once the syncs taken before it have ended too.
    fn finish(&self, target: Lsn, result: io::Result<()>) -> Result<(), CommitError> {
        let mut st = lock(&self.state);
        let result = self.finish_locked(&mut st, target, result);
        let woken = self.wake(&mut st);
        st.released = u32::try_from(woken.len()).unwrap_or(u32::MAX);
        drop(st);
        unpark(woken);
        result
    }

    fn finish_locked(
        &self,
        st: &mut State<F>,
        target: Lsn,
        result: io::Result<()>,
    ) -> Result<(), CommitError> {
        let at = st
            .in_flight
            .iter()
            .position(|t| t.target == target)
            .expect("a finished sync was in flight");
        if let Err(e) = result {
            st.in_flight.remove(at);
            st.poisoned = true;
            self.poisoned.store(true, Ordering::Release);
            return Err(CommitError::SyncFailed(e));
        }
        if st.poisoned {
            st.in_flight.remove(at);
            return Err(CommitError::Poisoned);
        }
        st.in_flight[at].done = true;
        while st.in_flight.front().is_some_and(|t| t.done) {
            let first = st.in_flight.pop_front().expect("a front");
            // Only `finish` moves `durable`, over takes in target order: it only grows.
            assert!(first.target > st.durable_lsn, "a sync covers something new");
            st.durable_lsn = first.target;
            self.durable_lsn.store(first.target, Ordering::Release);
        }
        Ok(())
    }

    /// Blocks until `lsn` is durable, syncing as a leader when no sync in flight covers it and
    /// one may start.
    ///
    /// `lead` is called with no lock held when this caller may lead: it must take the lock that
    /// orders writers, do whatever closes the group (the log writes its mirror), and return
    /// [`Self::try_take`]`(lsn)`. `sync` must make every taken range durable, or fail.
    pub(crate) fn wait_durable(
        &self,
        lsn: Lsn,
        lead: impl FnMut() -> Result<Option<Taken<F>>, CommitError>,
        sync: impl FnMut(&[DirtyRange<F>]) -> io::Result<()>,
    ) -> Result<(), CommitError> {
        self.wait_durable_as(lsn, false, lead, sync)
    }

    /// [`Self::wait_durable`] for a caller that already holds the lock that orders writers
    /// (`lead` then takes no lock).
    pub(crate) fn wait_durable_holding_writers(
        &self,
        lsn: Lsn,
        lead: impl FnMut() -> Result<Option<Taken<F>>, CommitError>,
        sync: impl FnMut(&[DirtyRange<F>]) -> io::Result<()>,
    ) -> Result<(), CommitError> {
        self.wait_durable_as(lsn, true, lead, sync)
    }

    fn wait_durable_as(
        &self,
        lsn: Lsn,
        holds_writers: bool,
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
                if !self.may_take(&st, lsn) {
                    // Covered by a sync in flight, or as many in flight as may be: parked
                    // until `wake` picks this caller.
                    let me = Arc::new(Waiter {
                        lsn,
                        holds_writers,
                        woken: AtomicBool::new(false),
                        thread: current(),
                    });
                    st.waiters.push(Arc::clone(&me));
                    drop(st);
                    while !me.woken.load(Ordering::Acquire) {
                        park();
                    }
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

/// Unparks callers taken out of the waiters (after the lock is released: a woken caller
/// takes the lock at once).
fn unpark(woken: Vec<Arc<Waiter>>) {
    for w in woken {
        w.woken.store(true, Ordering::Release);
        w.thread.unpark();
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
        let gc = GroupCommit::new(0, 2);
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
        let gc = GroupCommit::new(0, 2);
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
        let gc = GroupCommit::new(0, 2);
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

    /// Two syncs in flight: the second may end first, and then acknowledges nothing until the
    /// first has ended; a third may not start; a waiter already covered does not lead.
    #[test]
    fn durable_moves_over_a_prefix_of_finished_syncs() {
        let gc = GroupCommit::new(0, 2);
        gc.publish_written(1, range(1, 64, 96));
        let first = gc.try_take(1).unwrap().expect("leads");
        assert_eq!(first.target, 1);
        assert!(!gc.would_lead(1), "covered by the sync in flight");
        gc.publish_written(2, range(1, 4096, 4128));
        let second = gc.try_take(2).unwrap().expect("a second leader");
        assert_eq!(second.target, 2);
        assert_eq!(
            second
                .ranges
                .iter()
                .map(|r| (r.start, r.end))
                .collect::<Vec<_>>(),
            [(4096, 4128)],
            "only what was written after the first take"
        );
        gc.publish_written(3, range(1, 8192, 8224));
        assert!(gc.try_take(3).unwrap().is_none(), "two in flight at most");
        gc.finish(2, Ok(())).unwrap();
        assert_eq!(gc.durable_lsn(), 0, "the first sync has not ended");
        gc.finish(1, Ok(())).unwrap();
        assert_eq!(gc.durable_lsn(), 2);
        let third = gc.try_take(3).unwrap().expect("room again");
        gc.finish(third.target, Ok(())).unwrap();
        assert_eq!(gc.durable_lsn(), 3);
    }

    /// With one sync in flight at most, a second leader waits for the first.
    #[test]
    fn one_sync_in_flight_when_so_configured() {
        let gc = GroupCommit::new(0, 1);
        gc.publish_written(1, range(1, 64, 96));
        let first = gc.try_take(1).unwrap().expect("leads");
        gc.publish_written(2, range(1, 4096, 4128));
        assert!(!gc.would_lead(2));
        assert!(gc.try_take(2).unwrap().is_none());
        gc.finish(first.target, Ok(())).unwrap();
        assert_eq!(gc.durable_lsn(), 1);
        assert!(gc.would_lead(2));
    }

    /// A later sync that succeeds beside an earlier one that fails acknowledges nothing, and
    /// nor does one that succeeds after it.
    #[test]
    fn a_failed_sync_stops_the_one_beside_it() {
        for later_ends_first in [true, false] {
            let gc = GroupCommit::new(0, 2);
            gc.publish_written(1, range(1, 64, 96));
            let first = gc.try_take(1).unwrap().expect("leads");
            gc.publish_written(2, range(1, 4096, 4128));
            let second = gc.try_take(2).unwrap().expect("a second leader");
            if later_ends_first {
                gc.finish(second.target, Ok(())).unwrap();
                let err = gc.finish(first.target, Err(io::Error::other("EIO")));
                assert!(matches!(err, Err(CommitError::SyncFailed(_))));
            } else {
                let err = gc.finish(first.target, Err(io::Error::other("EIO")));
                assert!(matches!(err, Err(CommitError::SyncFailed(_))));
                let err = gc.finish(second.target, Ok(()));
                assert!(matches!(err, Err(CommitError::Poisoned)));
            }
            assert_eq!(gc.durable_lsn(), 0);
            assert!(gc.is_poisoned());
            assert!(matches!(gc.try_take(2), Err(CommitError::Poisoned)));
        }
    }

    #[test]
    fn concurrent_waiters_share_syncs() {
        let gc = Arc::new(GroupCommit::new(0, 2));
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

    /// Every `Ok` comes after successful syncs of every LSN up to the caller's: with one sync
    /// in flight, and with two, where the second may end first and must then wait for the
    /// first.
    #[test]
    fn loom_every_acknowledged_lsn_is_covered_by_successful_syncs() {
        for syncs_max in [1, 2] {
            loom::model(move || {
                let gc = Arc::new(GroupCommit::new(0, syncs_max));
                let next = Arc::new(Mutex::new(0u64));
                // Bit `n` is set once a sync that covered LSN `n` succeeded.
                let synced = Arc::new(AtomicU64::new(0));
                let threads: Vec<_> = (0..2)
                    .map(|_| {
                        let (gc, next, synced) = (gc.clone(), next.clone(), synced.clone());
                        thread::spawn(move || {
                            let lsn = append(&gc, &next);
                            gc.wait_durable(lsn, lead(&gc, &next, lsn), |ranges| {
                                // Record `n` lives at bytes n*8 .. n*8+8.
                                for r in ranges {
                                    for n in r.start / 8..r.end / 8 {
                                        synced.fetch_or(1 << n, Ordering::SeqCst);
                                    }
                                }
                                Ok(())
                            })
                            .expect("no failure injected");
                            assert!(gc.durable_lsn() >= lsn);
                            let all = (2u64 << lsn) - 2; // bits 1..=lsn
                            assert_eq!(
                                synced.load(Ordering::SeqCst) & all,
                                all,
                                "acknowledged only after syncs that covered it and all before it"
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
    }

    /// The first sync to run fails. Its ranges are never synced again (a retry that
    /// "succeeds" proves nothing), exactly its leader sees the I/O error, and an `Ok` comes
    /// only for an LSN that successful syncs covered with all before it: with one sync in
    /// flight, none at all; with two, the other sync's, if it ended first.
    #[test]
    fn loom_a_failed_sync_is_never_followed_by_an_acknowledgement() {
        for syncs_max in [1, 2] {
            loom::model(move || {
                let gc = Arc::new(GroupCommit::new(0, syncs_max));
                let next = Arc::new(Mutex::new(0u64));
                let syncs = Arc::new(AtomicUsize::new(0));
                // Bit `n`: LSN `n` was in the failed sync / in a successful one.
                let failed = Arc::new(AtomicU64::new(0));
                let synced = Arc::new(AtomicU64::new(0));
                let threads: Vec<_> = (0..2)
                    .map(|_| {
                        let (gc, next, syncs) = (gc.clone(), next.clone(), syncs.clone());
                        let (failed, synced) = (failed.clone(), synced.clone());
                        thread::spawn(move || {
                            let lsn = append(&gc, &next);
                            let result = gc.wait_durable(lsn, lead(&gc, &next, lsn), |ranges| {
                                // Record `n` lives at bytes n*8 .. n*8+8.
                                let bits = ranges
                                    .iter()
                                    .flat_map(|r| r.start / 8..r.end / 8)
                                    .fold(0u64, |b, n| b | 1 << n);
                                assert_eq!(
                                    bits & failed.load(Ordering::SeqCst),
                                    0,
                                    "a failed sync's range is never synced again"
                                );
                                if syncs.fetch_add(1, Ordering::SeqCst) == 0 {
                                    failed.fetch_or(bits, Ordering::SeqCst);
                                    Err(io::Error::other("EIO"))
                                } else {
                                    synced.fetch_or(bits, Ordering::SeqCst);
                                    Ok(())
                                }
                            });
                            (lsn, result)
                        })
                    })
                    .collect();
                let results: Vec<_> = threads
                    .into_iter()
                    .map(|t| t.join().expect("thread"))
                    .collect();
                for (lsn, result) in &results {
                    if result.is_ok() {
                        let all = (2u64 << lsn) - 2; // bits 1..=lsn
                        assert_eq!(
                            synced.load(Ordering::SeqCst) & all,
                            all,
                            "LSN {lsn} acknowledged without successful syncs of it and all before"
                        );
                        assert!(
                            syncs_max > 1,
                            "one in flight: the failed sync was the first"
                        );
                    }
                }
                let durable = gc.durable_lsn();
                let all = (2u64 << durable) - 2;
                assert_eq!(synced.load(Ordering::SeqCst) & all, all);
                assert!(gc.is_poisoned());
                assert_eq!(
                    results
                        .iter()
                        .filter(|(_, r)| matches!(r, Err(CommitError::SyncFailed(_))))
                        .count(),
                    1,
                    "exactly the leader sees the I/O error; the others see Poisoned"
                );
            });
        }
    }

    /// A roll waits for durability while it holds the writers' lock, so no other caller can
    /// lead meanwhile: when a sync ends, the parked caller woken to lead must be the roll, or
    /// nobody ever syncs its record (a deadlock loom would report). Also with a third caller
    /// parked before it, whose LSN is lower. (Explored with at most two preemptions.)
    #[test]
    fn loom_a_caller_holding_the_writers_lock_is_woken_to_lead() {
        // Three threads: bounded, or the model runs for hours.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(2);
        model.check(|| {
            let gc = Arc::new(GroupCommit::new(0, 1));
            let next = Arc::new(Mutex::new(0u64));
            let plain: Vec<_> = (0..2)
                .map(|_| {
                    let (gc, next) = (gc.clone(), next.clone());
                    thread::spawn(move || {
                        let lsn = append(&gc, &next);
                        gc.wait_durable(lsn, lead(&gc, &next, lsn), |_| Ok(()))
                            .expect("no failure injected");
                        lsn
                    })
                })
                .collect();
            let roll = {
                let (gc, next) = (gc.clone(), next.clone());
                thread::spawn(move || {
                    let mut writers = lock(&next);
                    *writers += 1;
                    let lsn = *writers;
                    gc.publish_written(lsn, range(lsn * 8));
                    gc.wait_durable_holding_writers(lsn, || gc.try_take(lsn), |_| Ok(()))
                        .expect("no failure injected");
                    drop(writers);
                    lsn
                })
            };
            for t in plain {
                t.join().expect("thread");
            }
            roll.join().expect("roll");
            assert_eq!(gc.durable_lsn(), 3);
        });
    }

    /// Defect 6: a failure elsewhere (a write into the storage, a directory sync) poisons the
    /// log at any moment, also while a leader syncs. Whatever the interleaving: nothing is
    /// acknowledged after the poisoning (durable never moves once it is set), and no assertion
    /// fires.
    #[test]
    fn loom_poison_during_a_sync_acknowledges_nothing_after_it() {
        loom::model(|| {
            let gc = Arc::new(GroupCommit::new(0, 1));
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
