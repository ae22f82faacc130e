//! Work done ahead of a loop that takes its items in order, on a helper thread and on the
//! loop's own thread whenever it would otherwise wait: recovery's segment scans on two
//! threads, for a storage whose reads may run in parallel (real files;
//! [`Storage::parallel_reads`](crate::storage::Storage::parallel_reads)).
//!
//! Recovery's loop takes the segments in id order and decides about each (check its header
//! against the one before, cut a torn tail, copy the last one). The scan of a segment, the
//! bulk of the work (every record's crc, every group against its mirror), only reads that
//! segment and depends on nothing the loop decided: what the loop writes (the copy of a
//! segment) is never a later segment. So the scans of the next segments can run while the loop
//! is busy with one, at most [`LEAD`] ahead of the one it takes. What a scan is, and what the
//! loop does with one made ahead, is recovery's (`recovery::scan_ahead_of_loop`); this module
//! only keeps the order: each item's result is handed to the loop when it reaches that item,
//! never before (recovery scans a segment again itself when the scan made ahead met an error,
//! so a real error surfaces where a serial loop would meet it).
//!
//! A storage that wants its calls in a deterministic order (the simulation's fault disk) says
//! no to parallel reads, and recovery does every scan in its loop, as before.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::segment::Window;

/// How many items past the one the loop takes may be done ahead (each result kept costs
/// memory: for a segment's scan, its list of blocks, a few bytes per commit).
const LEAD: usize = 2;

/// One item's place in the queue.
enum Slot<T> {
    /// Nobody works on it yet.
    Free,
    /// A thread is working on it.
    Working,
    /// Done, waiting for the loop.
    Done(T),
    /// The loop has it.
    Taken,
    /// Its work panicked (a broken invariant): the loop panics too when it gets there, rather
    /// than wait for it forever.
    Panicked,
}

struct Queue<T> {
    slots: Vec<Slot<T>>,
    /// The index the loop takes next (or is taking).
    taking: usize,
    /// The loop ended (done, or returned early): the helper stops.
    stop: bool,
}

/// What the loop gets for an item.
pub(crate) enum Taken<T> {
    /// Nobody did it: the loop does it itself.
    Free,
    /// Done ahead.
    Ahead(T),
}

/// The work on `items` items, shared by the loop and the helper thread. `work(i, window)` does
/// item `i` with a thread's own window (a fresh one of `window_bytes` per thread).
pub(crate) struct Ahead<T, W> {
    items: usize,
    window_bytes: usize,
    work: W,
    queue: Mutex<Queue<T>>,
    changed: Condvar,
}

impl<T: Send, W: Fn(usize, &mut Window) -> T + Sync> Ahead<T, W> {
    pub(crate) fn new(items: usize, window_bytes: usize, work: W) -> Self {
        Ahead {
            items,
            window_bytes,
            work,
            queue: Mutex::new(Queue {
                slots: (0..items).map(|_| Slot::Free).collect(),
                taking: 0,
                stop: false,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue<T>> {
        // The queue holds no invariant a panicking worker could break halfway: its slot is
        // marked `Panicked` (see `work_into_slot`).
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lowest item nobody works on yet, within the lead, claimed.
    fn claim(&self, q: &mut Queue<T>) -> Option<usize> {
        let end = self.items.min(q.taking + LEAD + 1);
        let i = (q.taking..end).find(|&i| matches!(q.slots[i], Slot::Free))?;
        q.slots[i] = Slot::Working;
        Some(i)
    }

    /// Does item `i` with `window` and files the result.
    fn work_into_slot(&self, i: usize, window: &mut Window) {
        let done =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.work)(i, window)));
        let (slot, panic) = match done {
            Ok(result) => (Slot::Done(result), None),
            Err(payload) => (Slot::Panicked, Some(payload)),
        };
        self.lock().slots[i] = slot;
        self.changed.notify_all();
        if let Some(payload) = panic {
            std::panic::resume_unwind(payload);
        }
    }

    /// The helper thread's loop: does the next items until the loop stops it or none is left.
    pub(crate) fn help(&self) {
        let mut window = Window::new(self.window_bytes);
        window.parallel = true;
        loop {
            let i = {
                let mut q = self.lock();
                loop {
                    if q.stop || q.taking >= self.items {
                        return;
                    }
                    if let Some(i) = self.claim(&mut q) {
                        break i;
                    }
                    q = self.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
                }
            };
            self.work_into_slot(i, &mut window);
        }
    }

    /// The loop takes item `i` (in order). While the helper is still working on it, the loop
    /// does the next free item itself rather than wait, with `window`.
    pub(crate) fn take(&self, i: usize, window: &mut Window) -> Taken<T> {
        loop {
            let j = {
                let mut q = self.lock();
                q.taking = i;
                match std::mem::replace(&mut q.slots[i], Slot::Taken) {
                    Slot::Free => {
                        drop(q);
                        // The lead moved: the helper may claim the next one.
                        self.changed.notify_all();
                        return Taken::Free;
                    }
                    Slot::Done(result) => {
                        drop(q);
                        self.changed.notify_all();
                        return Taken::Ahead(result);
                    }
                    Slot::Taken => unreachable!("item {i} taken twice"),
                    Slot::Panicked => panic!("the work on item {i} done ahead panicked"),
                    Slot::Working => {
                        q.slots[i] = Slot::Working;
                        match self.claim(&mut q) {
                            Some(j) => j,
                            None => {
                                let _q =
                                    self.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
                                continue;
                            }
                        }
                    }
                }
            };
            window.reset();
            self.work_into_slot(j, window);
        }
    }

    /// The loop is over: the helper stops at its next look at the queue.
    pub(crate) fn stop(&self) {
        self.lock().stop = true;
        self.changed.notify_all();
    }
}

/// Stops the helper when the loop ends, however it ends.
pub(crate) struct StopOnDrop<'r, T: Send, W: Fn(usize, &mut Window) -> T + Sync>(
    pub(crate) &'r Ahead<T, W>,
);

impl<T: Send, W: Fn(usize, &mut Window) -> T + Sync> Drop for StopOnDrop<'_, T, W> {
    fn drop(&mut self) {
        self.0.stop();
    }
}
