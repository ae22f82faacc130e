//! Recovery's segment scans on two threads, for a storage whose reads may run in parallel
//! (real files; [`Storage::parallel_reads`]).
//!
//! Recovery's loop takes the segments in id order and decides about each (check its header
//! against the one before, cut a torn tail, copy the last one). The scan of a segment, the
//! bulk of the work (every record's crc, every group against its mirror), only reads that
//! segment and depends on nothing the loop decided: what the loop writes (the copy of a
//! segment) is never a later segment. So the scans of the next segments can run while the loop
//! is busy with one: a helper thread and the loop itself, whenever it would otherwise wait,
//! scan the segments that come next, at most [`LEAD`] ahead of the one the loop takes.
//!
//! A scan made ahead counts into its own report, added to recovery's when the loop takes it,
//! so the report is what a serial scan makes. Its header is read without the check against
//! the previous segment; the loop reads the header itself, checks it as it always does, and
//! uses the scan only if the header is the same. Errors of a scan made ahead (an I/O error)
//! are returned when the loop reaches that segment, never before: a refused open names the
//! same first damage as a serial one.
//!
//! A storage that wants its calls in a deterministic order (the simulation's fault disk) says
//! no to parallel reads, and recovery scans every segment in the loop, as before.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::error::Error;
use crate::format::SegmentHeader;
use crate::options::WalOptions;
use crate::recovery::{RecoveryReport, SCAN_CHUNK_BYTES, Scan, read_header, scan_segment};
use crate::segment::{Window, segment_file_name};
use crate::storage::Storage;

/// How many segments past the one the loop takes may be scanned ahead (each scan kept costs
/// its list of blocks, a few bytes per commit).
const LEAD: usize = 2;

/// A scan made ahead of the loop.
pub(crate) struct Scanned {
    /// The header it was made under (read without the check against the previous segment).
    pub(crate) header: SegmentHeader,
    pub(crate) scan: Scan,
    /// What the scan counted (records, bytes, types, repaired groups, damaged mirrors).
    pub(crate) report: RecoveryReport,
}

/// One segment's place in the queue.
enum Slot {
    /// Nobody scans it yet.
    Free,
    /// A thread is scanning it.
    Scanning,
    /// Scanned: `None` if its header did not check out (the loop finds out itself).
    Done(Result<Option<Box<Scanned>>, Error>),
    /// The loop has it.
    Taken,
    /// Its scan panicked (a broken invariant): the loop panics too when it gets there, rather
    /// than wait for it forever.
    Panicked,
}

struct Queue {
    slots: Vec<Slot>,
    /// The index the loop takes next (or is taking).
    taking: usize,
    /// The loop ended (done, or returned early): the helper stops.
    stop: bool,
}

/// The scans of `ids`' segments, shared by the loop and the helper thread.
pub(crate) struct Ahead<'a, S: Storage> {
    storage: &'a S,
    ids: &'a [u64],
    opts: &'a WalOptions,
    queue: Mutex<Queue>,
    changed: Condvar,
}

/// What the loop gets for a segment.
pub(crate) enum Taken {
    /// Nobody scanned it: the loop scans it itself.
    Scan,
    /// Scanned ahead (or its header or an I/O error stopped the scan).
    Ahead(Result<Option<Box<Scanned>>, Error>),
}

impl<'a, S: Storage> Ahead<'a, S> {
    pub(crate) fn new(storage: &'a S, ids: &'a [u64], opts: &'a WalOptions) -> Self {
        Ahead {
            storage,
            ids,
            opts,
            queue: Mutex::new(Queue {
                slots: ids.iter().map(|_| Slot::Free).collect(),
                taking: 0,
                stop: false,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue holds no invariant a panicking scan could break halfway: a thread that
        // panicked leaves its slot `Scanning`, and the scope re-raises its panic.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lowest segment nobody scans yet, within the lead, claimed.
    fn claim(&self, q: &mut Queue) -> Option<usize> {
        let end = self.ids.len().min(q.taking + LEAD + 1);
        let i = (q.taking..end).find(|&i| matches!(q.slots[i], Slot::Free))?;
        q.slots[i] = Slot::Scanning;
        Some(i)
    }

    /// Scans segment `i` with `window` and files the result.
    fn scan_into_slot(&self, i: usize, window: &mut Window) {
        let scanned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scan_one(self.storage, self.ids[i], self.opts, window)
        }));
        let (slot, panic) = match scanned {
            Ok(result) => (Slot::Done(result), None),
            Err(payload) => (Slot::Panicked, Some(payload)),
        };
        self.lock().slots[i] = slot;
        self.changed.notify_all();
        if let Some(payload) = panic {
            std::panic::resume_unwind(payload);
        }
    }

    /// The helper thread's loop: scans the next segments until the loop stops it or none is
    /// left.
    pub(crate) fn help(&self) {
        let mut window = Window::new(SCAN_CHUNK_BYTES);
        window.parallel = true;
        loop {
            let i = {
                let mut q = self.lock();
                loop {
                    if q.stop || q.taking >= self.ids.len() {
                        return;
                    }
                    if let Some(i) = self.claim(&mut q) {
                        break i;
                    }
                    q = self.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
                }
            };
            self.scan_into_slot(i, &mut window);
        }
    }

    /// The loop takes segment `i` (in order). While the helper is still scanning it, the loop
    /// scans the next free segment itself rather than wait, with `window`.
    pub(crate) fn take(&self, i: usize, window: &mut Window) -> Taken {
        loop {
            let j = {
                let mut q = self.lock();
                q.taking = i;
                match std::mem::replace(&mut q.slots[i], Slot::Taken) {
                    Slot::Free => {
                        drop(q);
                        // The lead moved: the helper may claim the next one.
                        self.changed.notify_all();
                        return Taken::Scan;
                    }
                    Slot::Done(result) => {
                        drop(q);
                        self.changed.notify_all();
                        return Taken::Ahead(result);
                    }
                    Slot::Taken => unreachable!("segment {i} taken twice"),
                    Slot::Panicked => panic!("the scan of segment {} panicked", self.ids[i]),
                    Slot::Scanning => {
                        q.slots[i] = Slot::Scanning;
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
            self.scan_into_slot(j, window);
        }
    }

    /// The loop is over: the helper stops at its next look at the queue.
    pub(crate) fn stop(&self) {
        self.lock().stop = true;
        self.changed.notify_all();
    }
}

/// Stops the helper when the loop ends, however it ends.
pub(crate) struct StopOnDrop<'r, 'a, S: Storage>(pub(crate) &'r Ahead<'a, S>);

impl<S: Storage> Drop for StopOnDrop<'_, '_, S> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Scans segment `id` from its own handle: `None` if its header does not check out.
fn scan_one<S: Storage>(
    storage: &S,
    id: u64,
    opts: &WalOptions,
    window: &mut Window,
) -> Result<Option<Box<Scanned>>, Error> {
    let file = storage.open(&segment_file_name(id))?;
    window.reset();
    let Ok(header) = read_header(&file, id, None)? else {
        return Ok(None);
    };
    let mut report = RecoveryReport::empty();
    let scan = scan_segment(&file, &header, window, &mut report, opts)?;
    Ok(Some(Box::new(Scanned {
        header,
        scan,
        report,
    })))
}
