//! The minute run: the timers a minute slot held when that minute became the next one, sorted
//! by due millisecond, fired by a cursor.
//!
//! A minute slot used to cascade into the second ring, and each second slot into the
//! millisecond ring: every timer moved twice, to slots scattered over two rings, and the fire
//! walked the millisecond slots' block lists. A run moves each timer once, by a counting sort
//! on its millisecond within the minute (60 000 counters: count, sum, place, clear), and the
//! fire reads it front to back, so the items to fire next are always the ones after the cursor
//! (the slab entries ahead are read side by side from there, see `mod.rs`).
//!
//! The sort is built in steps ([`Build::step`], a budget of work units per idle poll, as the
//! cascades are), while the wheel is in the minute before; the poll that enters the minute
//! finishes what the steps did not. Timers inserted while the minute is the current or the next
//! one never enter its run: they go to the second and millisecond rings, and the fire takes
//! each millisecond from both.

use super::block::{Item, Pool, Slot};
use super::level::MS_PER_MINUTE;

/// Milliseconds in a minute: one counter each.
const COUNTERS: usize = MS_PER_MINUTE as usize;
/// Counters one unit of budget pays for when summing or clearing them: each is a few cycles,
/// against a cache miss or two for an item moved.
const CHEAP_PER_UNIT: usize = 16;
/// Items of the output one unit of budget pays for when growing it: as many as an item moved,
/// since writing fresh memory takes a page fault every 256 items, a few µs each in a VM.
const GROW_PER_UNIT: usize = 1;
/// A minute with at most this many items is sorted by comparison in one step (the counters'
/// sum and clear would cost more than its sort).
const SMALL_RUN: usize = 256;
/// Items per chunk of a run's storage (1 MiB): a burst's storage goes back to the allocator a
/// chunk per step, not in one call (freeing 20 MB of touched pages at once takes 0.4-0.6 ms
/// here, a pause the look-ahead's budget is there to prevent).
const CHUNK_BITS: u32 = 16;
const CHUNK: usize = 1 << CHUNK_BITS;
/// Budget units a chunk given back costs (its 256 pages freed).
const UNITS_PER_CHUNK_FREED: usize = 256;

/// A run's storage: chunks of [`CHUNK`] items, every one full but the last.
pub(crate) struct Items<T> {
    chunks: Vec<Vec<Item<T>>>,
}

impl<T> Default for Items<T> {
    fn default() -> Self {
        Self { chunks: Vec::new() }
    }
}

impl<T: Copy> Items<T> {
    /// Items held (initialised; a run uses the first `len` of them).
    fn len(&self) -> usize {
        self.chunks
            .last()
            .map_or(0, |last| (self.chunks.len() - 1) * CHUNK + last.len())
    }

    #[inline]
    fn get(&self, at: usize) -> Item<T> {
        self.chunks[at >> CHUNK_BITS][at & (CHUNK - 1)]
    }

    #[inline]
    fn set(&mut self, at: usize, item: Item<T>) {
        self.chunks[at >> CHUNK_BITS][at & (CHUNK - 1)] = item;
    }

    /// The items from `at` up to `end` or the end of `at`'s chunk, whichever comes first.
    #[inline]
    fn within_chunk(&self, at: usize, end: usize) -> &[Item<T>] {
        let chunk = &self.chunks[at >> CHUNK_BITS];
        let from = at & (CHUNK - 1);
        &chunk[from..chunk.len().min(from + (end - at))]
    }

    /// Adds up to `n` copies of `filler` (writing them: their pages are faulted in here, not
    /// at random by the place pass, which overwrites them), never past the end of the last
    /// chunk; returns how many.
    fn grow(&mut self, n: usize, filler: Item<T>) -> usize {
        if self.chunks.last().is_none_or(|last| last.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let last = self.chunks.last_mut().expect("a chunk");
        let added = n.min(CHUNK - last.len());
        last.resize(last.len() + added, filler);
        added
    }

    /// Gives chunks beyond what `needed` items use (and one spare) back, one per call; whether
    /// it gave one.
    fn shed(&mut self, needed: usize) -> bool {
        if self.chunks.len() > needed.div_ceil(CHUNK) + 1 {
            self.chunks.pop();
            return true;
        }
        false
    }
}

/// The run being fired: items `cursor..len` are the minute's items not yet taken.
pub(crate) struct Run<T> {
    /// Only the first `len` are the run; the rest is room kept from a bigger minute.
    items: Items<T>,
    len: usize,
    cursor: usize,
    /// Items before this were read ahead (their slab entries), see `mod.rs`.
    touched_to: usize,
}

impl<T> Default for Run<T> {
    fn default() -> Self {
        Self {
            items: Items::default(),
            len: 0,
            cursor: 0,
            touched_to: 0,
        }
    }
}

impl<T: Copy> Run<T> {
    /// The next item to take (it may be a tombstone).
    #[inline]
    pub(crate) fn peek(&self) -> Option<Item<T>> {
        (self.cursor < self.len).then(|| self.items.get(self.cursor))
    }

    /// The due time of the next item to take.
    #[inline]
    pub(crate) fn next_due(&self) -> Option<u64> {
        self.peek().map(|item| item.due_ms)
    }

    /// The items not yet taken.
    pub(crate) fn rest(&self) -> impl Iterator<Item = Item<T>> + '_ {
        (self.cursor..self.len).map(|at| self.items.get(at))
    }

    /// The next items to take, up to the end of those read ahead; once those are used up,
    /// up to `n` new ones (within the next item's chunk), and `true`: the caller reads their
    /// slab entries side by side before it takes them.
    #[inline]
    pub(crate) fn window(&mut self, n: usize) -> (&[Item<T>], bool) {
        if self.cursor < self.touched_to {
            return (self.items.within_chunk(self.cursor, self.touched_to), false);
        }
        if self.cursor == self.len {
            return (&[], false);
        }
        let ahead = self
            .items
            .within_chunk(self.cursor, self.len.min(self.cursor + n));
        self.touched_to = self.cursor + ahead.len();
        (ahead, true)
    }

    /// Moves past the next `n` items.
    #[inline]
    pub(crate) fn skip(&mut self, n: usize) {
        assert!(self.cursor + n <= self.len, "skipping past the run");
        self.cursor += n;
    }

    pub(crate) fn is_exhausted(&self) -> bool {
        self.cursor == self.len
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No minute taken.
    Idle,
    /// Counting the items of each millisecond.
    Count,
    /// Making room for the items in the output.
    Grow,
    /// Turning the counts into the first place of each millisecond.
    Sum,
    /// Moving each item to its place.
    Place,
    /// Zeroing the counters for the next minute.
    Clear,
    /// Sorted, waiting for its minute.
    Done,
}

/// A minute's run being sorted.
pub(crate) struct Build<T> {
    phase: Phase,
    /// The absolute minute (`ms / 60 000`) being built.
    minute: u64,
    /// The minute slot's contents, taken out of the ring.
    source: Slot<T>,
    /// Where the phase stands: a block of `source` and an item in it, or a counter (or an
    /// item of `out` while growing).
    block: usize,
    at: usize,
    /// The items in `source` (known once counted).
    total: usize,
    /// The running sum while summing.
    sum: u32,
    counts: Vec<u32>,
    /// The sorted items, the first `total` of `out`; what lies beyond is room from a bigger
    /// minute.
    out: Items<T>,
    /// A small minute's items, sorted by comparison.
    small: Vec<Item<T>>,
}

/// What a step did: units of budget spent, and items moved (what the wheel counts as
/// cascaded).
pub(crate) struct Stepped {
    pub(crate) spent: usize,
    pub(crate) moved: usize,
}

impl<T: Copy> Build<T> {
    pub(crate) fn new() -> Self {
        Self {
            phase: Phase::Idle,
            minute: 0,
            source: Slot::default(),
            block: 0,
            at: 0,
            total: 0,
            sum: 0,
            counts: Vec::new(),
            out: Items::default(),
            small: Vec::new(),
        }
    }

    /// The minute taken, unless idle.
    pub(crate) fn minute(&self) -> Option<u64> {
        (self.phase != Phase::Idle).then_some(self.minute)
    }

    /// Whether a minute is taken and not sorted yet.
    pub(crate) fn is_busy(&self) -> bool {
        !matches!(self.phase, Phase::Idle | Phase::Done)
    }

    /// Takes minute `minute`'s slot contents to sort (the build is idle). A small minute is
    /// sorted here and now.
    pub(crate) fn start(&mut self, minute: u64, source: Slot<T>, pool: &mut Pool<T>) -> Stepped {
        assert_eq!(self.phase, Phase::Idle, "one minute is built at a time");
        self.minute = minute;
        self.source = source;
        self.total = self.source.blocks.iter().map(Vec::len).sum();
        if self.total > SMALL_RUN {
            self.seek(Phase::Count);
            return Stepped { spent: 1, moved: 0 };
        }
        self.small.clear();
        for block in self.source.blocks.drain(..) {
            self.small.extend_from_slice(&block);
            pool.put(block);
        }
        self.small.sort_unstable_by_key(|item| item.due_ms);
        if let Some(&filler) = self.small.first() {
            while self.out.len() < self.total {
                self.out.grow(self.total, filler);
            }
        }
        for (at, &item) in self.small.iter().enumerate() {
            self.out.set(at, item);
        }
        let shed = self.out.shed(self.total);
        self.phase = Phase::Done;
        Stepped {
            spent: self.total.max(1) + usize::from(shed) * UNITS_PER_CHUNK_FREED,
            moved: self.total,
        }
    }

    fn seek(&mut self, phase: Phase) {
        self.phase = phase;
        self.block = 0;
        self.at = 0;
    }

    /// The counter of an item's millisecond within the minute.
    #[inline]
    fn counter(&self, item: &Item<T>) -> usize {
        let offset = item.due_ms - self.minute * MS_PER_MINUTE;
        assert!(
            offset < MS_PER_MINUTE,
            "item due at {} in the slot of minute {}",
            item.due_ms,
            self.minute
        );
        offset as usize
    }

    /// Sorts on for about `budget` units; stops early once done.
    pub(crate) fn step(&mut self, budget: usize, pool: &mut Pool<T>) -> Stepped {
        let mut stepped = Stepped { spent: 0, moved: 0 };
        while stepped.spent < budget && self.is_busy() {
            let left = budget - stepped.spent;
            match self.phase {
                Phase::Count => {
                    if self.counts.is_empty() {
                        self.counts = vec![0; COUNTERS];
                    }
                    let Some(block) = self.source.blocks.get(self.block) else {
                        self.seek(Phase::Grow);
                        continue;
                    };
                    let end = block.len().min(self.at.saturating_add(left));
                    for item in &block[self.at..end] {
                        let counter = self.counter(item);
                        self.counts[counter] += 1;
                    }
                    stepped.spent += end - self.at;
                    self.at = end;
                    if self.at == block.len() {
                        self.block += 1;
                        self.at = 0;
                    }
                }
                Phase::Grow => {
                    if self.out.shed(self.total) {
                        stepped.spent += UNITS_PER_CHUNK_FREED;
                        continue;
                    }
                    let room = self.out.len();
                    if room >= self.total {
                        self.sum = 0;
                        self.seek(Phase::Sum);
                        continue;
                    }
                    let filler = self.source.blocks.iter().flatten().next();
                    let filler = *filler.expect("a minute of more than SMALL_RUN items");
                    let grown = self.out.grow(
                        (self.total - room).min(left.saturating_mul(GROW_PER_UNIT)),
                        filler,
                    );
                    stepped.spent += grown.div_ceil(GROW_PER_UNIT);
                }
                Phase::Sum => {
                    let end =
                        COUNTERS.min(self.at.saturating_add(left.saturating_mul(CHEAP_PER_UNIT)));
                    for count in &mut self.counts[self.at..end] {
                        let first = self.sum;
                        self.sum += *count;
                        *count = first;
                    }
                    stepped.spent += (end - self.at).div_ceil(CHEAP_PER_UNIT);
                    self.at = end;
                    if self.at == COUNTERS {
                        self.seek(Phase::Place);
                    }
                }
                Phase::Place => {
                    if self.block == self.source.blocks.len() {
                        self.source.blocks.clear();
                        self.seek(Phase::Clear);
                        continue;
                    }
                    let block = std::mem::take(&mut self.source.blocks[self.block]);
                    let end = block.len().min(self.at.saturating_add(left));
                    for &item in &block[self.at..end] {
                        let counter = self.counter(&item);
                        let place = &mut self.counts[counter];
                        self.out.set(*place as usize, item);
                        *place += 1;
                    }
                    stepped.spent += end - self.at;
                    stepped.moved += end - self.at;
                    self.at = end;
                    if self.at == block.len() {
                        pool.put(block);
                        self.block += 1;
                        self.at = 0;
                    } else {
                        self.source.blocks[self.block] = block;
                    }
                }
                Phase::Clear => {
                    let end =
                        COUNTERS.min(self.at.saturating_add(left.saturating_mul(CHEAP_PER_UNIT)));
                    self.counts[self.at..end].fill(0);
                    stepped.spent += (end - self.at).div_ceil(CHEAP_PER_UNIT);
                    self.at = end;
                    if self.at == COUNTERS {
                        self.phase = Phase::Done;
                    }
                }
                Phase::Idle | Phase::Done => unreachable!("a busy build"),
            }
        }
        stepped
    }

    /// Hands the sorted minute to `run` (whose items are all taken) and takes its storage
    /// back for the next minute (which gives what it does not need back a chunk per step).
    pub(crate) fn finish_into(&mut self, run: &mut Run<T>) {
        assert_eq!(self.phase, Phase::Done, "the minute is sorted");
        assert!(run.is_exhausted(), "the last minute's run is fired");
        std::mem::swap(&mut run.items, &mut self.out);
        run.len = self.total;
        run.cursor = 0;
        run.touched_to = 0;
        self.phase = Phase::Idle;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_of(dues: &[u64]) -> (Slot<u64>, Pool<u64>) {
        let mut pool = Pool::default();
        let mut slot = Slot::default();
        for (i, &due_ms) in dues.iter().enumerate() {
            let item = Item {
                due_ms,
                index: i as u32,
                generation: 1,
                value: i as u64,
            };
            slot.push(item, &mut pool, false);
        }
        (slot, pool)
    }

    fn sorted_by_steps(minute: u64, dues: &[u64], budget: usize) -> (Vec<u64>, usize) {
        let (slot, mut pool) = slot_of(dues);
        let mut build = Build::new();
        let mut steps = 1;
        let mut moved = build.start(minute, slot, &mut pool).moved;
        while build.is_busy() {
            let stepped = build.step(budget, &mut pool);
            assert!(
                stepped.spent <= budget.saturating_add(CHEAP_PER_UNIT),
                "a step keeps its budget"
            );
            moved += stepped.moved;
            steps += 1;
        }
        let mut run = Run::default();
        build.finish_into(&mut run);
        assert_eq!(moved, dues.len(), "each item moved once");
        (run.rest().map(|i| i.due_ms).collect(), steps)
    }

    #[test]
    fn a_minute_comes_out_sorted_by_due_whatever_the_budget() {
        let minute = 28_333_335;
        let start = minute * MS_PER_MINUTE;
        let mut state = 9u64;
        let dues: Vec<u64> = (0..5_000)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                start + (state >> 33) % MS_PER_MINUTE
            })
            .collect();
        let mut expected = dues.clone();
        expected.sort_unstable();
        for budget in [1, 7, 1024, usize::MAX] {
            let (sorted, steps) = sorted_by_steps(minute, &dues, budget);
            assert_eq!(sorted, expected, "budget {budget}");
            if budget == 1024 {
                assert!(steps > 10, "a big minute takes several steps: {steps}");
            }
        }
    }

    #[test]
    fn a_small_minute_is_sorted_at_once_and_an_empty_one_is_empty() {
        let start = 60 * MS_PER_MINUTE;
        let (sorted, steps) = sorted_by_steps(60, &[start + 5, start, start + 59_999], 1024);
        assert_eq!(sorted, [start, start + 5, start + 59_999]);
        assert_eq!(steps, 1);
        assert_eq!(sorted_by_steps(60, &[], 1024).0, Vec::<u64>::new());
    }

    #[test]
    fn the_room_of_a_burst_is_given_back_a_chunk_per_step() {
        let mut pool = Pool::default();
        let mut build = Build::new();
        let mut run = Run::default();
        let burst = 5 * CHUNK;
        for (minute, n) in [(1u64, burst), (2, 1_000), (3, 1_000), (4, 100)] {
            let (slot, _) = slot_of(&vec![minute * MS_PER_MINUTE + 7; n]);
            build.start(minute, slot, &mut pool);
            while build.is_busy() {
                let stepped = build.step(1024, &mut pool);
                assert!(stepped.spent <= 1024 + UNITS_PER_CHUNK_FREED);
            }
            run.cursor = run.len;
            build.finish_into(&mut run);
            assert_eq!(run.rest().count(), n);
            assert!(
                run.rest()
                    .all(|item| item.due_ms == minute * MS_PER_MINUTE + 7)
            );
        }
        let chunks = run.items.chunks.len() + build.out.chunks.len();
        assert!(chunks <= 3, "{chunks} chunks kept after the burst's five");
    }

    #[test]
    fn a_run_reads_ahead_within_a_chunk_and_only_once_used_up() {
        let (slot, mut pool) = slot_of(&vec![MS_PER_MINUTE; CHUNK + 10]);
        let mut build = Build::new();
        build.start(1, slot, &mut pool);
        build.step(usize::MAX, &mut pool);
        let mut run = Run::default();
        build.finish_into(&mut run);
        assert_eq!(run.window(64).0.len(), 64);
        run.skip(60);
        let (window, fresh) = run.window(64);
        assert_eq!((window.len(), fresh), (4, false), "the rest read ahead");
        run.skip(4);
        let expected = run.items.chunks[0][64..128].to_vec();
        assert_eq!(run.window(64), (&expected[..], true));
        run.skip(CHUNK - 3 - 64);
        assert_eq!(run.window(64).0.len(), 3, "to the end of its chunk");
        run.skip(3);
        let expected = run.items.chunks[1][..10].to_vec();
        assert_eq!(run.window(64), (&expected[..], true));
        run.skip(10);
        assert!(run.window(64).0.is_empty() && run.is_exhausted());
    }
}
