//! The minute run: a minute's far timers (see `spaces.rs`), sorted by due millisecond when
//! that minute became the next one, fired by a cursor.
//!
//! A minute slot used to cascade into the second ring, and each second slot into the
//! millisecond ring: every timer moved twice, to slots scattered over two rings, and the fire
//! walked the millisecond slots' block lists. A run moves each timer once, by a counting sort
//! on its millisecond within the minute (60 000 counters: count, sum, place, clear), and the
//! fire reads it front to back. A run's item is 16 bytes with a `u64` value: the value, the
//! timer's place in its minute's space and its millisecond within the minute.
//!
//! The sort is built in steps ([`Build::step`], a budget of work units per idle poll, as the
//! cascades are), while the wheel is in the minute before; the poll that enters the minute
//! finishes what the steps did not. Timers inserted while the minute is the current or the next
//! one never enter its run: they go to the second and millisecond rings, and the fire takes
//! each millisecond from both.

use super::level::MS_PER_MINUTE;
use super::spaces::{
    CHUNK as SPACE_CHUNK, Far, FarChunk, SECONDS, Space, bit, kept_place, second_of,
};

/// Counters one unit of budget pays for when summing or clearing them: each is a few cycles,
/// against a cache miss or two for an item moved.
const CHEAP_PER_UNIT: usize = 16;
/// Items of the output one unit of budget pays for when growing it: as many as an item moved,
/// since writing fresh memory takes a page fault every 256 items, a few µs each in a VM.
const GROW_PER_UNIT: usize = 1;
/// A minute with at most this many items is sorted by comparison in one step (the counters'
/// sum and clear would cost more than its sort).
const SMALL_RUN: usize = 256;
/// Items per chunk of a run's storage (1 MiB with a `u64` value): a burst's storage goes back
/// to the allocator a chunk per step, not in one call (freeing 20 MB of touched pages at once
/// takes 0.4-0.6 ms here, a pause the look-ahead's budget is there to prevent).
const CHUNK_BITS: u32 = 16;
const CHUNK: usize = 1 << CHUNK_BITS;
/// Budget units a chunk given back costs (its 256 pages freed).
const UNITS_PER_CHUNK_FREED: usize = 256;
/// Cache lines one unit of budget pays for reading ahead ([`Items::touch`]): reads front to
/// back, which the processor streams.
const LINES_PER_UNIT: usize = 4;
/// A minute's scratch is read ahead of the pass by second only up to this many items (16
/// MiB with a `u64` value): a bigger one does not stay in the cache until the pass writes it.
const TOUCH_SCRATCH_MAX: usize = 1 << 20;
/// A second's output is read ahead of its place pass only up to this many items (256 KiB):
/// what stays in the cache of a core until the pass writes it.
const TOUCH_SECOND_MAX: usize = 1 << 14;

const _: () = assert!(size_of::<Item<u64>>() == 16);

/// A far timer in its minute's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Item<T> {
    /// The value as of the sort (unless `set` replaced it since, see `spaces.rs`).
    pub(crate) value: T,
    /// Its place in the minute's space.
    pub(crate) place: u32,
    /// Its due millisecond within the minute.
    pub(crate) offset: u16,
}

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

    /// The items `from .. end`, if they lie in one chunk.
    #[inline]
    fn range_mut(&mut self, from: usize, end: usize) -> Option<&mut [Item<T>]> {
        if end == from || (from >> CHUNK_BITS) != ((end - 1) >> CHUNK_BITS) {
            return None;
        }
        let chunk = &mut self.chunks[from >> CHUNK_BITS];
        let at = from & (CHUNK - 1);
        Some(&mut chunk[at..at + (end - from)])
    }

    /// Items per cache line (at least one).
    const PER_LINE: usize = {
        let per = 64 / size_of::<Item<T>>();
        if per == 0 { 1 } else { per }
    };

    /// Reads a word of each cache line of the items `from .. end`, front to back, and returns
    /// the budget units that cost: the processor streams the lines into its cache ahead of the
    /// writes a pass then makes among them (60 streams by second, or at random within a
    /// second), which would otherwise wait on memory, each for its line. Measured: the sort's
    /// share of W1's profile fell by half (docs/benchmarks.md, thirty-ninth session).
    fn touch(&self, from: usize, end: usize) -> usize {
        let mut sum = 0u16;
        let mut at = from;
        while at < end {
            let items = self.within_chunk(at, end);
            for item in items.iter().step_by(Self::PER_LINE) {
                sum = sum.wrapping_add(item.offset);
            }
            at += items.len();
        }
        std::hint::black_box(sum);
        (end - from)
            .div_ceil(Self::PER_LINE * LINES_PER_UNIT)
            .max(1)
    }

    /// [`touch`](Self::touch) from `*at` on, as far as `budget` units pay for and at most to
    /// `end`; moves `*at` past what it read and returns the units spent.
    fn touch_on(&self, at: &mut usize, end: usize, budget: usize) -> usize {
        let span = budget.saturating_mul(LINES_PER_UNIT * Self::PER_LINE);
        let stop = end.min(at.saturating_add(span));
        let spent = self.touch(*at, stop);
        *at = stop;
        spent
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
    /// The due time of the item at the cursor, once `cursor < len`.
    next_ms: u64,
    /// The absolute minute of the run, its first millisecond, and its keys' generation.
    minute: u64,
    start_ms: u64,
    generation: u32,
}

impl<T> Default for Run<T> {
    fn default() -> Self {
        Self {
            items: Items::default(),
            len: 0,
            cursor: 0,
            next_ms: u64::MAX,
            minute: 0,
            start_ms: 0,
            generation: 0,
        }
    }
}

impl<T: Copy> Run<T> {
    /// The absolute minute the run's timers are due in.
    pub(crate) fn minute(&self) -> u64 {
        self.minute
    }

    /// The generation of the keys of the run's timers.
    #[inline]
    pub(crate) fn generation(&self) -> u32 {
        self.generation
    }

    /// The due time of an item of the run.
    #[inline]
    pub(crate) fn due_ms(&self, item: &Item<T>) -> u64 {
        self.start_ms + u64::from(item.offset)
    }

    /// The next item to take (it may be a tombstone).
    #[inline]
    pub(crate) fn peek(&self) -> Option<Item<T>> {
        (self.cursor < self.len).then(|| self.items.get(self.cursor))
    }

    /// The due time of the next item to take.
    #[inline]
    pub(crate) fn next_due(&self) -> Option<u64> {
        (self.cursor < self.len).then_some(self.next_ms)
    }

    fn seek_next(&mut self) {
        if let Some(item) = self.peek() {
            self.next_ms = self.due_ms(&item);
        }
    }

    /// The items not yet taken.
    pub(crate) fn rest(&self) -> impl Iterator<Item = Item<T>> + '_ {
        (self.cursor..self.len).map(|at| self.items.get(at))
    }

    /// Up to `n` of the next items to take (within the next item's chunk).
    #[inline]
    pub(crate) fn ahead(&self, n: usize) -> &[Item<T>] {
        if self.cursor == self.len {
            return &[];
        }
        self.items
            .within_chunk(self.cursor, self.len.min(self.cursor + n))
    }

    /// Moves past the next `n` items.
    #[inline]
    pub(crate) fn skip(&mut self, n: usize) {
        assert!(self.cursor + n <= self.len, "skipping past the run");
        self.cursor += n;
        self.seek_next();
    }

    pub(crate) fn is_exhausted(&self) -> bool {
        self.cursor == self.len
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No minute taken.
    Idle,
    /// Making room for the items in the output and the scratch.
    Grow,
    /// Reading the scratch ahead of the pass by second ([`Items::touch`]).
    TouchScratch,
    /// Moving each far place's item to the scratch, among its second's.
    Scatter,
    /// Reading second `second`'s part of the output ahead of its place pass.
    TouchOut,
    /// Counting the items of each millisecond of second `second` in the scratch.
    Count,
    /// Moving each item of second `second` from the scratch to its place in the output.
    Place,
    /// Sorted, waiting for its minute.
    Done,
}

/// A minute's run being sorted, from the far places of its space (which stay where they are:
/// the space still answers `get` and `cancel` for them), in two stable passes: by second into
/// a scratch, 60 streams of writes (the space counts its far places by second as they come, so
/// each second has room for every far place taken in it, gone ones included: a cancel does
/// not read the place's due time), then each second by millisecond into the output, within the
/// few tens of kilobytes a second's timers take. One pass by millisecond wrote at random over
/// the whole minute's items (2.7 MB at 10M timers an hour), a cache miss each.
pub(crate) struct Build<T> {
    phase: Phase,
    /// The absolute minute (`ms / 60 000`) being built.
    minute: u64,
    /// Where the phase stands: a chunk of the space and an item in it (scattering), or an item
    /// of the second's range (counting, placing), or of `out` (growing).
    chunk: usize,
    at: usize,
    /// The second being sorted by millisecond.
    second: usize,
    /// The live far places of the space: the run's items.
    total: usize,
    /// The far places the space took, gone ones included: the scratch's room.
    room: usize,
    /// Where each second's room starts in the scratch; where its next item goes while
    /// scattering, then where its items end.
    starts: [u32; SECONDS + 1],
    next: [u32; SECONDS],
    /// Where each second's items start in the output (once scattered).
    placed: [u32; SECONDS + 1],
    /// Items of each millisecond of the second being sorted; then where the next one goes.
    counts: Box<[u32; 1_000]>,
    /// The sorted items, the first `total` of `out`; what lies beyond is room from a bigger
    /// minute.
    out: Items<T>,
    /// The items by second, before each second is sorted by millisecond.
    scratch: Items<T>,
    /// A small minute's items, sorted by comparison.
    small: Vec<Item<T>>,
    /// The far places' gone bits when the build started: those gone then are left out (their
    /// timers were cancelled or moved), those gone since are sorted in (the run drops them).
    gone: Vec<u64>,
}

/// What a step did: units of budget spent, and items moved (what the wheel counts as
/// cascaded).
pub(crate) struct Stepped {
    pub(crate) spent: usize,
    pub(crate) moved: usize,
}

/// Calls `f` with each far place of `space`'s chunk `c` from its `at`-th held one on, at most
/// `n` of them (place, due offset in the minute, value); returns how many it called it with
/// and whether it reached the chunk's end.
#[inline]
fn for_far<T: Copy>(
    space: &Space<T>,
    c: usize,
    at: usize,
    n: usize,
    mut f: impl FnMut(u32, u16, T),
) -> (usize, bool) {
    let Some(FarChunk { first, items, kept }) = space.far_chunk(c) else {
        return (0, true);
    };
    let end = items.len().min(at.saturating_add(n));
    match kept {
        None => {
            for (i, &Far { offset, value }) in items[at..end].iter().enumerate() {
                f(first + (at + i) as u32, offset, value);
            }
        }
        // A compacted chunk may keep no place at all.
        Some(kept) if end > at => {
            let mut place = kept_place(kept, at);
            for (i, &Far { offset, value }) in items[at..end].iter().enumerate() {
                if i > 0 {
                    place = next_kept(kept, place);
                }
                f(first + place, offset, value);
            }
        }
        Some(_) => {}
    }
    (end - at, end == items.len())
}

/// The kept place after `place` in a compacted chunk.
fn next_kept(kept: &[u64; SPACE_CHUNK / 64], place: u32) -> u32 {
    let mut w = (place / 64) as usize;
    let mut bits = kept[w] & (!1u64 << (place % 64));
    while bits == 0 {
        w += 1;
        bits = kept[w];
    }
    (w * 64) as u32 + bits.trailing_zeros()
}

impl<T: Copy> Build<T> {
    pub(crate) fn new() -> Self {
        Self {
            phase: Phase::Idle,
            minute: 0,
            chunk: 0,
            at: 0,
            second: 0,
            total: 0,
            room: 0,
            starts: [0; SECONDS + 1],
            next: [0; SECONDS],
            placed: [0; SECONDS + 1],
            counts: Box::new([0; 1_000]),
            out: Items::default(),
            scratch: Items::default(),
            small: Vec::new(),
            gone: Vec::new(),
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

    /// The item of a far place, its offset checked: the space checked it at the insert, but
    /// the sort indexes its counters by it (a second, then a millisecond within it), where an
    /// offset past the minute would stop at a bare index out of bounds that names neither the
    /// place nor the minute. One comparison an item.
    #[inline]
    fn item(place: u32, offset: u16, value: T) -> Item<T> {
        assert!(
            u64::from(offset) < MS_PER_MINUTE,
            "place {place} due at {offset} ms into its minute"
        );
        Item {
            value,
            place,
            offset,
        }
    }

    /// Takes minute `minute`'s live far places to sort (the build is idle; the space's far
    /// places are frozen from now on). A small minute (its gone places included) is sorted
    /// here and now. Returns the work done, and how many gone far places it leaves out
    /// (tombstones dropped).
    pub(crate) fn start(&mut self, space: &Space<T>) -> (Stepped, usize) {
        assert_eq!(self.phase, Phase::Idle, "one minute is built at a time");
        self.minute = space.minute();
        self.gone.clear();
        self.gone.extend_from_slice(space.far_gone());
        let held: usize = (0..)
            .map_while(|c| space.far_chunk(c))
            .map(|chunk| chunk.items.len())
            .sum();
        let seconds = space.far_seconds();
        let mut sum = 0;
        for (second, &n) in seconds.iter().enumerate() {
            self.starts[second] = sum;
            sum += n;
        }
        self.starts[SECONDS] = sum;
        self.next.copy_from_slice(&self.starts[..SECONDS]);
        self.room = sum as usize;
        self.total = space.far_live() as usize;
        assert!(
            self.total <= held && held <= self.room,
            "minute {}: {} live far places, {held} held, {} taken",
            self.minute,
            self.total,
            self.room
        );
        let dropped = held - self.total;
        let copied = self.gone.len() / CHEAP_PER_UNIT;
        if held > SMALL_RUN {
            self.seek(Phase::Grow);
            return (
                Stepped {
                    spent: 1 + copied,
                    moved: 0,
                },
                dropped,
            );
        }
        let mut small = std::mem::take(&mut self.small);
        small.clear();
        for c in 0.. {
            if space.far_chunk(c).is_none() {
                break;
            }
            // Gone places too (the run drops them): the order a sort by comparison gives
            // timers due in the same millisecond depends on every item it sorts, and so does
            // the simulation's trace.
            for_far(space, c, 0, usize::MAX, |place, offset, value| {
                small.push(Self::item(place, offset, value));
            });
        }
        assert_eq!(small.len(), held, "the far places the chunks hold");
        self.total = held;
        small.sort_unstable_by_key(|item| item.offset);
        if let Some(&filler) = small.first() {
            while self.out.len() < self.total {
                self.out.grow(self.total, filler);
            }
        }
        for (at, &item) in small.iter().enumerate() {
            self.out.set(at, item);
        }
        self.small = small;
        let shed = self.out.shed(self.total);
        self.phase = Phase::Done;
        let stepped = Stepped {
            spent: held.max(1) + usize::from(shed) * UNITS_PER_CHUNK_FREED,
            moved: held,
        };
        (stepped, 0)
    }

    fn seek(&mut self, phase: Phase) {
        self.phase = phase;
        self.chunk = 0;
        self.at = 0;
    }

    /// Starts second `second`'s sort by millisecond: reads its part of the output ahead
    /// unless it is too big to stay in the cache, then counts.
    fn start_second(&mut self) {
        let (first, last) = (self.placed[self.second], self.placed[self.second + 1]);
        if (last - first) as usize <= TOUCH_SECOND_MAX {
            self.phase = Phase::TouchOut;
            self.at = first as usize;
        } else {
            self.phase = Phase::Count;
            self.at = self.starts[self.second] as usize;
        }
    }

    /// The first far place's item, to fill fresh room with.
    fn filler(space: &Space<T>) -> Item<T> {
        (0..)
            .map_while(|c| space.far_chunk(c))
            .find_map(|chunk| {
                let &Far { offset, value } = chunk.items.first()?;
                let at = chunk.kept.map_or(0, |k| kept_place(k, 0));
                Some(Self::item(chunk.first + at, offset, value))
            })
            .expect("a minute of more than SMALL_RUN items")
    }

    /// Sorts on for about `budget` units; stops early once done. `space` is the minute's.
    pub(crate) fn step(&mut self, budget: usize, space: &Space<T>) -> Stepped {
        assert!(
            !self.is_busy() || space.minute() == self.minute,
            "the space of the minute being built"
        );
        let mut stepped = Stepped { spent: 0, moved: 0 };
        while stepped.spent < budget && self.is_busy() {
            let left = budget - stepped.spent;
            match self.phase {
                Phase::Grow => {
                    let shed = self.out.shed(self.total) || self.scratch.shed(self.room);
                    if shed {
                        stepped.spent += UNITS_PER_CHUNK_FREED;
                        continue;
                    }
                    let (items, needed) = match self.out.len() < self.total {
                        true => (&mut self.out, self.total),
                        false => (&mut self.scratch, self.room),
                    };
                    if items.len() >= needed {
                        // A minute mostly cancelled is not read ahead: most of its room in
                        // the scratch is never written, and reading it costs more than it
                        // saves.
                        let dense = self.total * 2 >= self.room;
                        self.seek(match dense && self.room <= TOUCH_SCRATCH_MAX {
                            true => Phase::TouchScratch,
                            false => Phase::Scatter,
                        });
                        continue;
                    }
                    let filler = Self::filler(space);
                    let n = (needed - items.len()).min(left.saturating_mul(GROW_PER_UNIT));
                    stepped.spent += items.grow(n, filler).div_ceil(GROW_PER_UNIT);
                }
                Phase::TouchScratch => {
                    stepped.spent += self.scratch.touch_on(&mut self.at, self.room, left);
                    if self.at == self.room {
                        self.seek(Phase::Scatter);
                    }
                }
                Phase::Scatter => {
                    if space.far_chunk(self.chunk).is_none() {
                        let mut sum = 0;
                        for second in 0..SECONDS {
                            assert!(self.next[second] <= self.starts[second + 1]);
                            self.placed[second] = sum;
                            sum += self.next[second] - self.starts[second];
                        }
                        self.placed[SECONDS] = sum;
                        assert_eq!(sum as usize, self.total, "every live far place scattered");
                        self.second = 0;
                        self.start_second();
                        continue;
                    }
                    let (scratch, next, gone) = (&mut self.scratch, &mut self.next, &self.gone);
                    let (walked, done) =
                        for_far(space, self.chunk, self.at, left, |place, offset, value| {
                            if bit(gone, place) {
                                return;
                            }
                            let at = &mut next[second_of(offset)];
                            scratch.set(*at as usize, Self::item(place, offset, value));
                            *at += 1;
                        });
                    stepped.spent += walked.max(1);
                    if done {
                        self.chunk += 1;
                        self.at = 0;
                    } else {
                        self.at += walked;
                    }
                }
                Phase::TouchOut => {
                    let last = self.placed[self.second + 1] as usize;
                    stepped.spent += self.out.touch_on(&mut self.at, last, left);
                    if self.at == last {
                        self.phase = Phase::Count;
                        self.at = self.starts[self.second] as usize;
                    }
                }
                Phase::Count => {
                    let end = self.next[self.second] as usize;
                    let stop = end.min(self.at.saturating_add(left));
                    let base = (self.second * 1_000) as u16;
                    let mut i = self.at;
                    while i < stop {
                        let items = self.scratch.within_chunk(i, stop);
                        for item in items {
                            self.counts[usize::from(item.offset - base)] += 1;
                        }
                        i += items.len();
                    }
                    stepped.spent += (stop - self.at).max(1);
                    self.at = stop;
                    if self.at == end {
                        // The counts become where each millisecond's items go.
                        let mut sum = self.placed[self.second];
                        for count in self.counts.iter_mut() {
                            let first = sum;
                            sum += *count;
                            *count = first;
                        }
                        stepped.spent += 1_000 / CHEAP_PER_UNIT;
                        self.phase = Phase::Place;
                        self.at = self.starts[self.second] as usize;
                    }
                }
                Phase::Place => {
                    let end = self.next[self.second] as usize;
                    let stop = end.min(self.at.saturating_add(left));
                    let base = (self.second * 1_000) as u16;
                    let first = self.placed[self.second] as usize;
                    let last = self.placed[self.second + 1] as usize;
                    // A second's items mostly lie in one chunk of the output: then they are
                    // placed through one slice.
                    let (scratch, counts) = (&self.scratch, &mut self.counts);
                    let mut i = self.at;
                    match self.out.range_mut(first, last) {
                        Some(region) => {
                            while i < stop {
                                let items = scratch.within_chunk(i, stop);
                                for &item in items {
                                    let at = &mut counts[usize::from(item.offset - base)];
                                    region[*at as usize - first] = item;
                                    *at += 1;
                                }
                                i += items.len();
                            }
                        }
                        None => {
                            for i in self.at..stop {
                                let item = scratch.get(i);
                                let at = &mut counts[usize::from(item.offset - base)];
                                self.out.set(*at as usize, item);
                                *at += 1;
                            }
                        }
                    }
                    stepped.spent += (stop - self.at).max(1);
                    stepped.moved += stop - self.at;
                    self.at = stop;
                    if self.at == end {
                        self.counts.fill(0);
                        stepped.spent += 1_000 / CHEAP_PER_UNIT;
                        self.second += 1;
                        if self.second == SECONDS {
                            self.phase = Phase::Done;
                        } else {
                            self.start_second();
                        }
                    }
                }
                Phase::Idle | Phase::Done => unreachable!("a busy build"),
            }
        }
        stepped
    }

    /// Hands the sorted minute to `run` (whose items are all taken) and takes its storage
    /// back for the next minute (which gives what it does not need back a chunk per step).
    pub(crate) fn finish_into(&mut self, run: &mut Run<T>, generation: u32) {
        assert_eq!(self.phase, Phase::Done, "the minute is sorted");
        assert!(run.is_exhausted(), "the last minute's run is fired");
        std::mem::swap(&mut run.items, &mut self.out);
        run.len = self.total;
        run.cursor = 0;
        run.minute = self.minute;
        run.start_ms = self.minute * MS_PER_MINUTE;
        run.generation = generation;
        run.seek_next();
        self.phase = Phase::Idle;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted_by_steps(minute: u64, dues: &[u64], budget: usize) -> (Vec<u64>, usize) {
        let space = Space::for_test(minute, dues, &[]);
        let mut build = Build::new();
        let mut steps = 1;
        let mut moved = build.start(&space).0.moved;
        while build.is_busy() {
            let stepped = build.step(budget, &space);
            assert!(
                stepped.spent <= budget.saturating_add(2 * 1_000 / CHEAP_PER_UNIT),
                "a step keeps its budget"
            );
            moved += stepped.moved;
            steps += 1;
        }
        let mut run = Run::default();
        build.finish_into(&mut run, 1);
        assert_eq!(moved, dues.len(), "each item moved once");
        let sorted: Vec<u64> = run.rest().map(|i| run.due_ms(&i)).collect();
        let mut places: Vec<u32> = run.rest().map(|i| i.place).collect();
        places.sort_unstable();
        assert!(
            places.iter().enumerate().all(|(i, &p)| p as usize == i),
            "every place once"
        );
        (sorted, steps)
    }

    fn dues(minute: u64, n: usize, seed: u64) -> Vec<u64> {
        let start = minute * MS_PER_MINUTE;
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                start + (state >> 33) % MS_PER_MINUTE
            })
            .collect()
    }

    #[test]
    fn a_minute_comes_out_sorted_by_due_whatever_the_budget() {
        let minute = 28_333_335;
        let dues = dues(minute, 5_000, 9);
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
    fn a_compacted_space_sorts_its_kept_places_with_their_own_places() {
        let minute = 28_333_335;
        let dues = dues(minute, 5_000, 11);
        // Cancel three in four of the first four chunks' places, which compacts them, and two
        // places of a later chunk, which does not: the build leaves all of them out.
        let cancel: Vec<u32> = (0..4 * SPACE_CHUNK as u32)
            .filter(|p| p % 4 != 1)
            .chain([4_100, 4_200])
            .collect();
        let space = Space::for_test(minute, &dues, &cancel);
        // Each second's room in the scratch counts its gone places too: the run has none of
        // them, whatever the budget of the steps.
        for budget in [1, 7, 1024, usize::MAX] {
            let mut build = Build::new();
            let (_, dropped) = build.start(&space);
            assert_eq!(dropped, 2, "the two gone places the chunks still held");
            while build.is_busy() {
                build.step(budget, &space);
            }
            let mut run = Run::default();
            build.finish_into(&mut run, 1);
            check_kept(&run, &dues, &cancel);
        }
    }

    fn check_kept(run: &Run<u64>, dues: &[u64], cancel: &[u32]) {
        let mut got: Vec<(u64, u32)> = run.rest().map(|i| (run.due_ms(&i), i.place)).collect();
        let mut expected: Vec<(u64, u32)> = (0..dues.len() as u32)
            .filter(|p| !cancel.contains(p))
            .map(|p| (dues[p as usize], p))
            .collect();
        assert!(
            run.rest().all(|i| i.value == u64::from(i.place)),
            "values by place"
        );
        assert!(
            run.rest()
                .zip(run.rest().skip(1))
                .all(|(a, b)| a.offset <= b.offset)
        );
        got.sort_unstable();
        expected.sort_unstable();
        assert_eq!(got, expected, "the kept places and no other");
    }

    /// Found by the simulation (seeds 481,280,000-481,299,999): a chunk compacted down to no
    /// place at all, in a minute then sorted (by comparison, as a small one, or by counting).
    #[test]
    fn a_chunk_compacted_to_nothing_sorts_as_empty() {
        let minute = 1_000;
        let start = minute * MS_PER_MINUTE;
        for n in [100usize, 1_500] {
            let dues: Vec<u64> = (0..n as u64).map(|i| start + i % 60_000).collect();
            // Every place of the first chunk (or of the whole minute) cancelled: compacted away.
            let chunk = n.min(SPACE_CHUNK) as u32;
            let cancel: Vec<u32> = (0..chunk).collect();
            let space = Space::for_test(minute, &dues, &cancel);
            let mut build = Build::new();
            let (_, dropped) = build.start(&space);
            build.step(usize::MAX, &space);
            let mut run = Run::default();
            build.finish_into(&mut run, 1);
            let left: Vec<u32> = run
                .rest()
                .filter(|i| !cancel.contains(&i.place))
                .map(|i| i.place)
                .collect();
            assert_eq!(left.len(), n - chunk as usize, "{n} places");
            assert!(run.rest().count() + dropped <= n);
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
        let mut build = Build::new();
        let mut run = Run::default();
        let burst = 5 * CHUNK;
        for (minute, n) in [(1u64, burst), (2, 1_000), (3, 1_000), (4, 100)] {
            let space = Space::for_test(minute, &vec![minute * MS_PER_MINUTE + 7; n], &[]);
            build.start(&space);
            while build.is_busy() {
                let stepped = build.step(1024, &space);
                assert!(stepped.spent <= 1024 + UNITS_PER_CHUNK_FREED);
            }
            run.cursor = run.len;
            build.finish_into(&mut run, 1);
            assert_eq!(run.rest().count(), n);
            assert!(
                run.rest()
                    .all(|item| run.due_ms(&item) == minute * MS_PER_MINUTE + 7)
            );
        }
        let chunks = run.items.chunks.len() + build.out.chunks.len();
        assert!(chunks <= 3, "{chunks} chunks kept after the burst's five");
    }

    #[test]
    fn a_run_hands_out_its_items_ahead_within_a_chunk() {
        let space = Space::for_test(1, &vec![MS_PER_MINUTE; CHUNK + 10], &[]);
        let mut build = Build::new();
        build.start(&space);
        build.step(usize::MAX, &space);
        let mut run = Run::default();
        build.finish_into(&mut run, 1);
        assert_eq!(run.ahead(64).len(), 64);
        run.skip(60);
        let expected = run.items.chunks[0][60..124].to_vec();
        assert_eq!(run.ahead(64), &expected[..]);
        run.skip(CHUNK - 3 - 60);
        assert_eq!(run.ahead(64).len(), 3, "to the end of its chunk");
        run.skip(3);
        let expected = run.items.chunks[1][..10].to_vec();
        assert_eq!(run.ahead(64), &expected[..]);
        run.skip(10);
        assert!(run.ahead(64).is_empty() && run.is_exhausted());
    }
}
