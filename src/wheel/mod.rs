//! The in-memory hierarchical timing wheel: O(1) insert, cancel and fire for tens of millions
//! of pending timers, with millisecond precision and no idle ticking.
//!
//! ```
//! use timewheel::wheel::TimingWheel;
//!
//! let now_ms = 1_700_000_000_000; // ms since the Unix epoch
//! let mut wheel = TimingWheel::new(now_ms);
//! let reminder = wheel.insert(now_ms + 30 * 60_000, 42u64); // in 30 minutes
//! let _unpaid = wheel.insert(now_ms + 1_500, 7u64);
//! let expired = wheel.insert(now_ms - 5, 1u64); // already due: fires at the next poll
//!
//! assert_eq!(wheel.next_due(), Some(now_ms));
//! assert_eq!(wheel.poll(now_ms), Some((expired, now_ms - 5, 1)));
//! assert_eq!(wheel.poll(now_ms), None);
//!
//! assert_eq!(wheel.cancel(reminder), Some(42));
//! assert_eq!(wheel.cancel(reminder), None, "a stale key reaches nothing");
//!
//! // The timer thread sleeps until `next_due`, then polls until `None`.
//! assert_eq!(wheel.next_due(), Some(now_ms + 1_500));
//! let (_, due_ms, job) = wheel.poll(now_ms + 2_000).unwrap();
//! assert_eq!((due_ms, job), (now_ms + 1_500, 7));
//! assert!(wheel.is_empty());
//! ```
//!
//! # Structure
//!
//! Three calendar-aligned rings (see `level.rs`): millisecond slots of the current and the next
//! second, second slots of the current and the next minute, and minute slots grouped in 64 hour
//! buckets (an hour bucket is `due_ms / 3_600_000`, see [`hour_bucket`]). Timers beyond the
//! horizon wait in an overflow map keyed by minute, whose slots move whole into the minute ring
//! as the horizon reaches them.
//!
//! A key names an entry of a slab (`slab.rs`: generation, stamp, value; 16 bytes with a `u64`).
//! A slot holds *items* (`block.rs`: due time, entry, stamp; 16 bytes) in blocks of 256, so a
//! cascade is a sequential copy and a fire a pop (the millisecond ring's blocks, and the first
//! block of an overflow minute, start small and grow by doubling: those slots hold a few items
//! each). A cancel writes only the entry (its stamp
//! moves on), which turns the item into a *tombstone*: fires skip it, and a sweep that runs
//! in small steps reclaims tombstones far ahead once they outnumber the live timers (see
//! [`TimingWheel::tombstones`]). A fire reads the entries of the next 64 items to fire in one
//! tight loop, so that their cache misses overlap; [`TimingWheel::poll_many`] takes a whole
//! millisecond slot in one loop rather than one timer per call.
//!
//! A minute slot does not cascade into the second ring: while the wheel is in the minute
//! before, its items are sorted by due millisecond into the minute's *run* (`run.rs`, a
//! counting sort, each item moved once), and the fire takes each millisecond from the run's
//! cursor and from the millisecond slot. The second and millisecond rings hold only the timers
//! inserted (or moved) while their minute was the current or the next one.
//!
//! # Time
//!
//! The wheel has its own time, [`TimingWheel::now_ms`]: it starts at `new`'s `now_ms`, and
//! [`poll`](TimingWheel::poll) moves it forward, never back. A timer is *effectively* due at
//! `max(due_ms, now_ms())` as of its insert: one inserted in the past fires at the next poll,
//! before any timer due later. Timers fire in non-decreasing effective due order; timers with
//! the same due millisecond fire in no particular order. `poll(now_ms)` with `now_ms` before the
//! wheel's time fires nothing (the clock went backwards: hold).
//!
//! # Pauses
//!
//! The current second is always complete in the millisecond ring, and the current minute in
//! the run and the finer rings, so firing never has to wait for a cascade. The *next* second
//! is cascaded and the next minute's run sorted ahead of time, at most [`CASCADE_PER_POLL_MAX`]
//! timers per `poll` that returns `None`. A caller that polls at least
//! every few milliseconds while timers are pending (as a timer thread does when timers are due
//! every millisecond) therefore never meets a cascade at a boundary; one that slept through
//! a whole minute pays, in the poll that crosses into it, for the timers of that minute that the
//! look-ahead could not move (see [`WorkStats`]). The one other long call is a poll that meets
//! many tombstones in the millisecond ring (timers cancelled within the second before they were
//! due): it drops them all, a few nanoseconds each, paid for by their cancels.

mod block;
mod level;
mod run;
mod slab;

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;

use block::{BLOCK_ITEMS, Item, POOL_BLOCKS_AFTER_SWEEP, Pool, Slot};
use level::{
    Level, MINUTE_SLOTS, MS_PER_HOUR, MS_PER_MINUTE, MS_PER_SECOND, MS_SLOTS, SECOND_SLOTS, Tier,
    level_for, ring_distance, slot_for,
};
use run::{Build, Run};
use slab::{Fired, Slab};

pub use level::HORIZON_HOURS;

/// Timers cascaded ahead of time by one `poll` that returns `None` (or the same work in sorting
/// the next minute's run: it reads each item twice, counting then placing it).
///
/// At 10M timers spread over an hour, a minute holds about 170 000 timers and a second about
/// 2 800, so one poll per millisecond sorts the next minute within 0.4 s and the next second
/// within 3 ms. A burst of 1M timers due in one millisecond is moved during the second before
/// it. Each poll spends at most a few µs on it.
pub const CASCADE_PER_POLL_MAX: usize = 1024;

/// Tombstones (cancelled or moved timers still in a slot) the wheel lets pile up before a sweep
/// reclaims them; a sweep also waits until they are at least as many as the live timers.
const SWEEP_TOMBSTONES_MIN: u64 = 1 << 16;
/// Items a sweep reads in one step: one step per idle `poll`, and one per
/// [`SWEEP_PLACEMENTS_PER_STEP`] inserts and reschedules while a sweep is running.
const SWEEP_ITEMS_PER_STEP: usize = 1024;
/// Placements between two sweep steps: a sweep reads four items per placement, so it always
/// outruns the items placed while it runs.
const SWEEP_PLACEMENTS_PER_STEP: u32 = 256;
/// Items `next_due` reads in the millisecond ring to step over tombstones.
const PEEK_ITEMS_MAX: usize = 64;
/// Items whose slab entries a fire reads ahead, side by side, so that their cache misses
/// overlap (see `touch_ahead`), and the most ms slots it looks into for them.
const TOUCH_ITEMS: u32 = 64;
const TOUCH_SLOTS_MAX: usize = 32;

const _: () = assert!(CASCADE_PER_POLL_MAX > 0 && SWEEP_ITEMS_PER_STEP >= BLOCK_ITEMS);
const _: () = assert!(TOUCH_ITEMS > 0);

/// The earlier of two times, either of which may be unknown.
fn earlier(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The start of the second after the one holding `ms`, or `u64::MAX` in the last second.
fn next_second_ms(ms: u64) -> u64 {
    (ms / MS_PER_SECOND + 1).saturating_mul(MS_PER_SECOND)
}

/// The hour bucket of a due time: hours since the Unix epoch, the number that also names the
/// bucket's files on disk once compaction folded its jobs out of the journal
/// (`bucket-{hour:010}-{generation:016}.run`, see docs/store-format.md).
pub fn hour_bucket(due_ms: u64) -> u64 {
    due_ms / MS_PER_HOUR
}

/// A handle to a pending timer, returned by [`TimingWheel::insert`].
///
/// Once the timer fired or was cancelled the key is stale: every method given it returns
/// `None` or `false`, even after its slab entry was reused by another timer.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct TimerKey {
    index: u32,
    /// Never 0: live generations are odd (see `slab.rs`). So an `Option<TimerKey>` takes no
    /// more room than a key (8 bytes in each job of the engine).
    generation: NonZeroU32,
}

/// The key of slab entry `index` at `generation`, which is live and hence odd.
fn key(index: u32, generation: u32) -> TimerKey {
    TimerKey {
        index,
        generation: NonZeroU32::new(generation).expect("live generations are odd"),
    }
}

impl TimerKey {
    /// The key as one `u64`, e.g. to store beside a job.
    pub fn to_u64(self) -> u64 {
        (u64::from(self.generation.get()) << 32) | u64::from(self.index)
    }

    /// The key that [`to_u64`](Self::to_u64) returned; any other number is a stale key.
    pub fn from_u64(raw: u64) -> Self {
        // Generation 0 is never live: an even one that is not 0 stands for it.
        const NEVER_LIVE: NonZeroU32 = NonZeroU32::new(2).expect("not 0");
        let generation = NonZeroU32::new((raw >> 32) as u32).unwrap_or(NEVER_LIVE);
        Self {
            index: raw as u32,
            generation,
        }
    }
}

/// Counters of cascading and sweeping work, to check the pause bound without a clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkStats {
    /// Items moved from a coarser ring to a finer one (or dropped there as tombstones), in total.
    pub cascaded_total: u64,
    /// The most items moved by a single `poll` or `poll_many` call.
    pub cascaded_per_poll_max: u64,
    /// Items read by sweeps, in total.
    pub swept_total: u64,
    /// Tombstones dropped, by cascades, fires and sweeps, in total.
    pub tombstones_dropped: u64,
}

/// Where the sweep stands: a pass over the minute ring and the overflow, slot by slot in due
/// order, dropping tombstones and merging the blocks they thinned.
#[derive(Debug)]
struct Sweep {
    active: bool,
    /// The absolute minute of the slot being swept.
    minute: u64,
    /// The next block of that slot to read.
    block: usize,
    /// The last non-empty block before it, which later blocks merge into while they fit.
    prev: Option<usize>,
    /// The tombstone count at which the next pass may start.
    trigger: u64,
    /// The fewest tombstones that start a pass ([`SWEEP_TOMBSTONES_MIN`]; lower in the unit
    /// tests, so that sweeps run all the time there).
    floor: u64,
    /// Placements since the last step.
    placements: u32,
}

impl Sweep {
    fn seek(&mut self, minute: u64) {
        self.minute = minute;
        self.block = 0;
        self.prev = None;
    }
}

/// Where the next timers to fire are: a millisecond slot, or the minute's run.
#[derive(Clone, Copy)]
enum Source {
    Ms(usize),
    Run,
}

/// A hierarchical timing wheel holding values of type `T`, each due at a millisecond.
///
/// See the [module documentation](self) for an example and the guarantees.
pub struct TimingWheel<T> {
    slab: Slab<T>,
    pool: Pool<T>,
    ms: Level<T>,
    seconds: Level<T>,
    minutes: Level<T>,
    /// Items beyond the resident horizon, keyed by due minute.
    overflow: BTreeMap<u64, Slot<T>>,
    /// The wheel's time: every pending timer is effectively due at or after it.
    now_ms: u64,
    /// No item is effectively due before this; lets an idle `poll` return at once.
    bound_ms: u64,
    /// The start of the second after the wheel's time: an idle poll before it only stores
    /// the time.
    next_second_ms: u64,
    /// Whether the next second or minute may still hold items to cascade ahead of time.
    look_ahead_pending: bool,
    /// The current minute's items that were in its minute slot, sorted by due (`run.rs`).
    run: Run<T>,
    /// The next minute's run, being sorted ahead of time.
    build: Build<T>,
    /// Items in slots whose timer was cancelled or moved since.
    tombstones: u64,
    sweep: Sweep,
    /// Items ahead of the next fire whose slab entries were read ahead.
    touched: u32,
    /// Where the reads ahead go, so that they happen.
    touch_sink: u64,
    stats: WorkStats,
}

impl<T: Copy> TimingWheel<T> {
    /// An empty wheel whose time is `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self::with_capacity(now_ms, 0)
    }

    /// An empty wheel whose time is `now_ms`, with room for `capacity` timers' keys before it
    /// allocates.
    pub fn with_capacity(now_ms: u64, capacity: usize) -> Self {
        Self {
            slab: Slab::with_capacity(capacity),
            pool: Pool::default(),
            ms: Level::new(MS_SLOTS, true),
            seconds: Level::new(SECOND_SLOTS, false),
            minutes: Level::new(MINUTE_SLOTS, false),
            overflow: BTreeMap::new(),
            now_ms,
            bound_ms: u64::MAX,
            next_second_ms: next_second_ms(now_ms),
            look_ahead_pending: false,
            run: Run::default(),
            build: Build::new(),
            tombstones: 0,
            sweep: Sweep {
                active: false,
                minute: 0,
                block: 0,
                prev: None,
                trigger: SWEEP_TOMBSTONES_MIN,
                floor: SWEEP_TOMBSTONES_MIN,
                placements: 0,
            },
            touched: 0,
            touch_sink: 0,
            stats: WorkStats::default(),
        }
    }

    /// Pending timers.
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// Whether no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.slab.len() == 0
    }

    /// Timers whose keys the wheel holds without allocating again.
    pub fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// The wheel's time: the latest `now_ms` it was polled at (or created with), held when the
    /// clock goes backwards, or the due time of the timer it fired last if that is earlier.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Cascading and sweeping work done so far.
    pub fn work_stats(&self) -> WorkStats {
        self.stats
    }

    /// Cancelled or rescheduled timers whose old place in a slot is not reclaimed yet. A
    /// cancel only marks its timer's entry; the item in the slot is dropped when a cascade, a
    /// fire or a sweep next reads it. Sweeps keep this at most about the number of live timers
    /// (or 65 536).
    pub fn tombstones(&self) -> u64 {
        self.tombstones
    }

    /// Adds a timer due at `due_ms` and returns its key. A due time at or before the wheel's
    /// time fires at the next poll. Any `due_ms` is accepted, `u64::MAX` included.
    ///
    /// # Panics
    ///
    /// When 2^31 timers are already pending.
    pub fn insert(&mut self, due_ms: u64, value: T) -> TimerKey {
        let taken = self.slab.insert(value);
        self.place(Item {
            due_ms,
            index: taken.index,
            generation: taken.generation,
            value,
        });
        key(taken.index, taken.generation)
    }

    /// Removes a pending timer and returns its value; `None` if the key is stale.
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        if !self.slab.is_live(key.index, key.generation.get()) {
            return None;
        }
        let value = self.slab.remove(key.index);
        self.tombstones += 1;
        self.maybe_start_sweep();
        Some(value)
    }

    /// Moves a pending timer to `due_ms` with its value, and returns its new key (the old
    /// one is stale from now on, as after a cancel); `None` if the key is stale.
    ///
    /// ```
    /// use timewheel::wheel::TimingWheel;
    ///
    /// let mut wheel = TimingWheel::new(0);
    /// let key = wheel.insert(500, 'a');
    /// let moved = wheel.reschedule(key, 100).expect("pending");
    /// assert!(!wheel.contains(key) && wheel.get(moved) == Some('a'));
    /// assert_eq!(wheel.reschedule(key, 900), None, "the old key is stale");
    /// assert_eq!(wheel.poll(1_000), Some((moved, 100, 'a')));
    /// assert_eq!(wheel.poll(1_000), None, "fired once");
    /// ```
    pub fn reschedule(&mut self, key: TimerKey, due_ms: u64) -> Option<TimerKey> {
        if !self.slab.is_live(key.index, key.generation.get()) {
            return None;
        }
        let value = self.slab.remove(key.index);
        self.tombstones += 1;
        let moved = self.insert(due_ms, value);
        self.maybe_start_sweep();
        Some(moved)
    }

    /// Whether the key names a pending timer.
    pub fn contains(&self, key: TimerKey) -> bool {
        self.slab.is_live(key.index, key.generation.get())
    }

    /// The value of a pending timer; `None` if the key is stale.
    pub fn get(&self, key: TimerKey) -> Option<T> {
        self.contains(key).then(|| self.slab.value(key.index))
    }

    /// Replaces the value of a pending timer, which keeps its due time and key; `false` if the
    /// key is stale.
    pub fn set(&mut self, key: TimerKey, value: T) -> bool {
        let live = self.contains(key);
        if live {
            self.slab.set_value(key.index, value);
        }
        live
    }

    /// When the timer thread should wake up and poll: never later than the effective due time
    /// of the earliest pending timer, and exactly that time when the timer is due within the
    /// wheel's current second or was in its minute's slot when the minute began (unless more
    /// than a few dozen cancelled timers lie before it, which makes it earlier: polling there
    /// drops them). Otherwise it is the start of the
    /// second, minute or (beyond the horizon) minute of the earliest occupied coarser slot:
    /// polling there costs one extra wake-up per ring and moves `next_due` strictly forward.
    /// `None` when the wheel is empty.
    pub fn next_due(&self) -> Option<u64> {
        if self.is_empty() {
            return None;
        }
        earlier(self.first_live_ms(), self.coarse_bound_ms())
    }

    /// When a poll would find cascading to do ahead of time: the next millisecond while the
    /// next second or minute still holds items to move, else the start of the second (or
    /// minute) before the earliest occupied second (or minute) slot, where that slot becomes
    /// the next one. Also the next millisecond while a sweep is under way, so that a caller
    /// with no timer due for a while still reclaims the tombstones (and their blocks) step by
    /// step. `None` when there is nothing to do ahead.
    ///
    /// A caller that sleeps until [`next_due`](Self::next_due) polls at a slot's start and
    /// pays there for moving the whole slot, in one call; one that also wakes at this time
    /// moves it [`CASCADE_PER_POLL_MAX`] items per poll, ahead of time. A timer thread sleeps
    /// until the earlier of the two.
    pub fn look_ahead_due(&self) -> Option<u64> {
        if self.sweep.active {
            return Some(self.now_ms.saturating_add(1));
        }
        if self.is_empty() {
            return None;
        }
        let next_second = slot_for(Tier::Second, self.now_ms.saturating_add(MS_PER_SECOND));
        if self.look_ahead_pending
            && (!self.seconds.is_empty_slot(next_second as usize) || self.build_pending())
        {
            return Some(self.now_ms.saturating_add(1));
        }
        // Inserts never go to the next second's or minute's slot (they go to the finer ring),
        // so the occupied slots found here are at least two periods ahead.
        let mut due: Option<u64> = None;
        let second = self.now_ms / MS_PER_SECOND;
        let from = slot_for(Tier::Second, self.now_ms) as usize;
        if let Some(slot) = self.seconds.first_from(from) {
            let ahead = ring_distance(from, slot, SECOND_SLOTS);
            if ahead >= 2 {
                due = Some((second + ahead - 1) * MS_PER_SECOND);
            }
        }
        let minute = self.now_ms / MS_PER_MINUTE;
        let from = slot_for(Tier::Minute, self.now_ms) as usize;
        if let Some(slot) = self.minutes.first_from(from) {
            let ahead = ring_distance(from, slot, MINUTE_SLOTS);
            if ahead >= 2 {
                let at = (minute + ahead - 1) * MS_PER_MINUTE;
                due = Some(due.map_or(at, |d| d.min(at)));
            }
        }
        due
    }

    /// Fires the earliest timer due at or before `now_ms`: returns its key, its due time as
    /// inserted, and its value. `None` when nothing is due at `now_ms`.
    ///
    /// Call it until it returns `None`; each call does a bounded amount of work, except the
    /// first call after a jump, which cascades what the look-ahead could not (see the
    /// module docs). Timers come out in non-decreasing effective due order.
    pub fn poll(&mut self, now_ms: u64) -> Option<(TimerKey, u64, T)> {
        let before = self.stats.cascaded_total;
        let fired = self.poll_inner(now_ms);
        let moved = self.stats.cascaded_total - before;
        self.stats.cascaded_per_poll_max = self.stats.cascaded_per_poll_max.max(moved);
        fired
    }

    /// Fires up to `max` timers due at or before `now_ms`, appending each (key, due time as
    /// inserted, value) to `out` in the order [`poll`](Self::poll) would hand them out; returns
    /// how many it appended. The same as calling `poll` until it returns `None` or `max` timers
    /// fired, at a fraction of the cost per timer: the timers of one millisecond slot are taken
    /// in one loop.
    ///
    /// ```
    /// use timewheel::wheel::TimingWheel;
    ///
    /// let mut wheel = TimingWheel::new(0);
    /// for i in 0..10u64 {
    ///     wheel.insert(5 + i % 3, i);
    /// }
    /// let mut fired = Vec::new();
    /// assert_eq!(wheel.poll_many(6, 4, &mut fired), 4); // at most 4
    /// assert_eq!(wheel.poll_many(6, 100, &mut fired), 3); // the rest due by 6
    /// assert!(fired.windows(2).all(|w| w[0].1 <= w[1].1), "in due order");
    /// assert_eq!(wheel.len(), 3); // due at 7
    /// ```
    pub fn poll_many(
        &mut self,
        now_ms: u64,
        max: usize,
        out: &mut Vec<(TimerKey, u64, T)>,
    ) -> usize {
        let before = self.stats.cascaded_total;
        let mut fired = 0;
        while fired < max {
            fired += match self.due_source(now_ms) {
                Some(Source::Ms(slot)) => self.fire_many(slot, max - fired, out),
                Some(Source::Run) => self.fire_run_many(max - fired, out),
                None => break,
            };
        }
        let moved = self.stats.cascaded_total - before;
        self.stats.cascaded_per_poll_max = self.stats.cascaded_per_poll_max.max(moved);
        fired
    }

    /// Fires up to `max` live items of ms slot `slot` (the slot of the wheel's time) into
    /// `out`, dropping the tombstones among them; returns how many fired. One loop over the
    /// slot's blocks from their tail, the slab entries of the items ahead read side by side
    /// first (`touch_ahead`, which looks past this slot into the next ones).
    fn fire_many(&mut self, slot: usize, max: usize, out: &mut Vec<(TimerKey, u64, T)>) -> usize {
        let (mut fired, mut dropped) = (0, 0u64);
        while fired < max {
            if self.touched == 0 {
                self.touch_ahead(slot);
            }
            let contents = self.ms.slot_mut(slot);
            let Some(block) = contents.blocks.last_mut() else {
                break;
            };
            let take = block.len().min(max - fired).min(self.touched as usize);
            let from = block.len() - take;
            for &item in block[from..].iter().rev() {
                match take_fired(&mut self.slab, item) {
                    Some(timer) => {
                        out.push(timer);
                        fired += 1;
                    }
                    None => dropped += 1,
                }
            }
            self.touched -= take as u32;
            block.truncate(from);
            if block.is_empty() {
                self.pool
                    .put(contents.blocks.pop().expect("the tail block"));
            }
        }
        self.ms.settle(slot);
        self.tombstones -= dropped;
        self.stats.tombstones_dropped += dropped;
        fired
    }

    /// Fires up to `max` live items of the run due at the wheel's time into `out`, dropping
    /// the tombstones among them; returns how many fired. The slab entries of the next
    /// [`TOUCH_ITEMS`] items are read side by side before they fire, as `touch_ahead` does
    /// for the millisecond ring.
    fn fire_run_many(&mut self, max: usize, out: &mut Vec<(TimerKey, u64, T)>) -> usize {
        let (mut fired, mut dropped) = (0, 0u64);
        let now_ms = self.now_ms;
        while fired < max {
            let (window, fresh) = self.run.window(TOUCH_ITEMS as usize);
            if fresh {
                self.touch_sink ^= read_entries(&self.slab, window);
            }
            let mut taken = 0;
            for &item in window {
                if item.due_ms > now_ms || fired == max {
                    break;
                }
                taken += 1;
                match take_fired(&mut self.slab, item) {
                    Some(timer) => {
                        out.push(timer);
                        fired += 1;
                    }
                    None => dropped += 1,
                }
            }
            let whole = taken > 0 && taken == window.len();
            self.run.skip(taken);
            if !whole {
                break;
            }
        }
        self.tombstones -= dropped;
        self.stats.tombstones_dropped += dropped;
        fired
    }

    /// Fires the run's next live item due at the wheel's time, dropping the tombstones before
    /// it; `None` once no item is due there.
    fn fire_run(&mut self) -> Option<(TimerKey, u64, T)> {
        while let Some(item) = self.run_take() {
            if let Some(timer) = take_fired(&mut self.slab, item) {
                return Some(timer);
            }
            self.tombstones -= 1;
            self.stats.tombstones_dropped += 1;
        }
        None
    }

    /// Takes the run's next item if it is due at the wheel's time, having read the slab
    /// entries of the items ahead of it side by side when the last such read is used up.
    #[inline]
    fn run_take(&mut self) -> Option<Item<T>> {
        let item = self.run.peek()?;
        if item.due_ms > self.now_ms {
            return None;
        }
        let (window, fresh) = self.run.window(TOUCH_ITEMS as usize);
        if fresh {
            self.touch_sink ^= read_entries(&self.slab, window);
        }
        self.run.skip(1);
        Some(item)
    }

    fn poll_inner(&mut self, now_ms: u64) -> Option<(TimerKey, u64, T)> {
        loop {
            let fired = match self.due_source(now_ms)? {
                Source::Ms(slot) => self.fire(slot),
                Source::Run => self.fire_run(),
            };
            if fired.is_some() {
                return fired;
            }
            // Only tombstones were due there.
        }
    }

    /// Moves the wheel's time to the earliest due time at or before `now_ms` that an
    /// occupied millisecond slot or the run holds, and says which (the ms slot first; either
    /// may hold only tombstones); `None` when nothing is due at `now_ms`, after using the call
    /// to move the wheel's time and to work ahead.
    fn due_source(&mut self, now_ms: u64) -> Option<Source> {
        if now_ms >= self.now_ms {
            // The ms slot of the wheel's time holds the timers effectively due at exactly that
            // time, the earliest any pending timer can be, and so does the run's next item if
            // it is due then: the calls after the first in one millisecond fire from them
            // without looking again.
            let slot = slot_for(Tier::Ms, self.now_ms) as usize;
            if !self.ms.is_empty_slot(slot) {
                return Some(Source::Ms(slot));
            }
            if self.run.next_due() == Some(self.now_ms) {
                return Some(Source::Run);
            }
        }
        if now_ms < self.bound_ms {
            // Nothing is due: only move the wheel's time (if the clock did not go back) and
            // use the idle call to cascade the next second and minute ahead of time.
            if now_ms >= self.next_second_ms {
                self.advance(now_ms);
            } else if now_ms > self.now_ms {
                self.now_ms = now_ms;
            }
            self.idle_work();
            return None;
        }
        loop {
            let first = self.first_ms();
            if let Some(due_ms) = first
                && due_ms / MS_PER_SECOND == self.now_ms / MS_PER_SECOND
            {
                // The current second is complete in the ms ring, so this is the earliest timer.
                if due_ms > now_ms {
                    self.now_ms = self.now_ms.max(now_ms);
                    self.bound_ms = due_ms;
                    self.idle_work();
                    return None;
                }
                self.now_ms = due_ms;
                let slot = slot_for(Tier::Ms, due_ms) as usize;
                return Some(if self.ms.is_empty_slot(slot) {
                    Source::Run
                } else {
                    Source::Ms(slot)
                });
            }
            // Nothing left in this second: everything pending is at or after `bound`, which is
            // in a later second.
            let bound = earlier(first, self.coarse_bound_ms());
            match bound {
                Some(bound_ms) if bound_ms <= now_ms => self.advance(bound_ms),
                _ => {
                    if now_ms > self.now_ms {
                        self.advance(now_ms);
                    }
                    self.bound_ms = bound.unwrap_or(u64::MAX);
                    self.idle_work();
                    return None;
                }
            }
        }
    }

    /// What a poll that fires nothing does with its time: cascade ahead, then sweep.
    #[inline]
    fn idle_work(&mut self) {
        self.look_ahead();
        if self.sweep.active {
            self.sweep_step(SWEEP_ITEMS_PER_STEP);
        }
    }

    /// The effective due time of the earliest occupied slot of the ms ring or of the run's
    /// next item, whichever is earlier (exact, but it may be a tombstone's).
    #[inline]
    fn first_ms(&self) -> Option<u64> {
        let from = slot_for(Tier::Ms, self.now_ms) as usize;
        let ring = self
            .ms
            .first_from(from)
            .map(|slot| self.now_ms + ring_distance(from, slot, MS_SLOTS));
        earlier(ring, self.run.next_due())
    }

    /// Like [`first_ms`](Self::first_ms), stepping over tombstones while it has read fewer
    /// than [`PEEK_ITEMS_MAX`] items in each of the ring and the run; `None` if neither holds
    /// a live item.
    fn first_live_ms(&self) -> Option<u64> {
        // The run is sorted: the item where the budget ran out bounds the live ones after it.
        let run = self.run.rest().enumerate().find_map(|(read, item)| {
            (self.slab.state(item.index).is_live() || read + 1 == PEEK_ITEMS_MAX)
                .then_some(item.due_ms)
        });
        earlier(self.first_live_in_ring(), run)
    }

    /// [`first_live_ms`](Self::first_live_ms) in the ms ring alone.
    fn first_live_in_ring(&self) -> Option<u64> {
        let from = slot_for(Tier::Ms, self.now_ms) as usize;
        let mut budget = PEEK_ITEMS_MAX;
        let mut distance = 0;
        loop {
            let at = (from + distance as usize) % MS_SLOTS;
            let slot = self.ms.first_from(at)?;
            let found = ring_distance(from, slot, MS_SLOTS);
            if found < distance {
                return None; // came around the ring: no live item in it
            }
            let mut live = false;
            for item in self.ms.slot(slot).blocks.iter().flatten() {
                if budget == 0 {
                    break;
                }
                budget -= 1;
                if self.slab.state(item.index).is_live() {
                    live = true;
                    break;
                }
            }
            if live || budget == 0 {
                return Some(self.now_ms + found);
            }
            distance = found + 1;
            if distance >= MS_SLOTS as u64 {
                return None;
            }
        }
    }

    /// A lower bound of the items in the second and minute rings and the overflow: the start
    /// of the earliest occupied slot of each.
    fn coarse_bound_ms(&self) -> Option<u64> {
        let mut bound: Option<u64> = None;
        let mut lower = |b: u64| bound = Some(bound.map_or(b, |a| a.min(b)));
        let second = self.now_ms / MS_PER_SECOND;
        let from = slot_for(Tier::Second, self.now_ms) as usize;
        if let Some(slot) = self.seconds.first_from(from) {
            lower((second + ring_distance(from, slot, SECOND_SLOTS)) * MS_PER_SECOND);
        }
        let minute = self.now_ms / MS_PER_MINUTE;
        let from = slot_for(Tier::Minute, self.now_ms) as usize;
        if let Some(slot) = self.minutes.first_from(from) {
            lower((minute + ring_distance(from, slot, MINUTE_SLOTS)) * MS_PER_MINUTE);
        }
        if let Some((&minute, _)) = self.overflow.first_key_value() {
            lower(minute * MS_PER_MINUTE);
        }
        if let Some(minute) = self.build.minute() {
            lower(minute * MS_PER_MINUTE);
        }
        bound
    }

    /// Moves the wheel's time forward to `to_ms`, when no item is effectively due before it,
    /// and completes the new second and minute in the finer rings.
    fn advance(&mut self, to_ms: u64) {
        assert!(to_ms > self.now_ms, "the wheel's time only moves forward");
        let (second, minute) = (self.now_ms / MS_PER_SECOND, self.now_ms / MS_PER_MINUTE);
        self.now_ms = to_ms;
        let (new_second, new_minute) = (to_ms / MS_PER_SECOND, to_ms / MS_PER_MINUTE);
        if new_minute != minute {
            self.pull_overflow(new_minute);
            self.enter_minute(new_minute);
        }
        if new_second != second {
            self.next_second_ms = next_second_ms(to_ms);
            // Only a new second (or minute) brings new items to cascade ahead of time: inserts
            // never go to the look-ahead slots, which are cascaded into finer rings.
            self.look_ahead_pending = true;
            let slot = slot_for(Tier::Second, to_ms) as usize;
            self.cascade(slot, usize::MAX);
        }
    }

    /// The wheel's time entered minute `minute` (the run of the minute before is fired):
    /// its run becomes the one to fire, sorted now as far as the look-ahead did not.
    fn enter_minute(&mut self, minute: u64) {
        if self.build.minute() != Some(minute) {
            assert_eq!(
                self.build.minute(),
                None,
                "the wheel entered minute {minute} past a sorted one"
            );
            if self.start_build(minute).is_none() {
                return;
            }
        }
        let stepped = self.build.step(usize::MAX, &mut self.pool);
        self.stats.cascaded_total += stepped.moved as u64;
        self.build.finish_into(&mut self.run);
    }

    /// Takes minute `minute`'s slot out of the minute ring into the (idle) build; returns the
    /// budget units it spent, `None` if the slot is empty.
    fn start_build(&mut self, minute: u64) -> Option<usize> {
        let slot = slot_for(Tier::Minute, minute * MS_PER_MINUTE) as usize;
        if self.minutes.is_empty_slot(slot) {
            return None;
        }
        let started = self
            .build
            .start(minute, self.minutes.take(slot), &mut self.pool);
        self.stats.cascaded_total += started.moved as u64;
        Some(started.spent)
    }

    /// The next minute (unless it is past the end of time), whose run the look-ahead sorts.
    fn next_minute(&self) -> Option<u64> {
        let minute = self.now_ms / MS_PER_MINUTE + 1;
        (minute <= u64::MAX / MS_PER_MINUTE).then_some(minute)
    }

    /// Whether the look-ahead has a run to start or to sort on.
    fn build_pending(&self) -> bool {
        match self.build.minute() {
            Some(_) => self.build.is_busy(),
            None => self.next_minute().is_some_and(|minute| {
                !self
                    .minutes
                    .is_empty_slot(slot_for(Tier::Minute, minute * MS_PER_MINUTE) as usize)
            }),
        }
    }

    /// Cascades part of the next second (second ring to ms ring) and, with what is left of the
    /// budget, sorts on the next minute's run, so that the boundary finds them done.
    #[inline]
    fn look_ahead(&mut self) {
        if !self.look_ahead_pending {
            return;
        }
        let next_second = slot_for(Tier::Second, self.now_ms.saturating_add(MS_PER_SECOND));
        if self.seconds.is_empty_slot(next_second as usize) && !self.build_pending() {
            self.look_ahead_pending = false;
            return;
        }
        let mut spent = self.cascade(next_second as usize, CASCADE_PER_POLL_MAX);
        if spent < CASCADE_PER_POLL_MAX && self.build.minute().is_none() {
            match self
                .next_minute()
                .and_then(|minute| self.start_build(minute))
            {
                Some(started) => spent += started,
                None => return,
            }
        }
        if spent < CASCADE_PER_POLL_MAX {
            let stepped = self
                .build
                .step(CASCADE_PER_POLL_MAX - spent, &mut self.pool);
            self.stats.cascaded_total += stepped.moved as u64;
        }
    }

    /// Moves up to `budget` items out of second slot `slot` into the ring their due time now
    /// belongs to (the millisecond ring, but at the end of time); returns how many it moved.
    ///
    /// A sequential copy: tombstones move along unread (reading their slab entries here would
    /// cost a cache miss each, long before the fire that must read them anyway).
    fn cascade(&mut self, slot: usize, budget: usize) -> usize {
        if budget == 0 || self.seconds.is_empty_slot(slot) {
            return 0;
        }
        let mut contents = self.seconds.take(slot);
        let mut moved = 0;
        while moved < budget {
            let Some(mut block) = contents.blocks.pop() else {
                break;
            };
            let start = block.len() - (budget - moved).min(block.len());
            self.scatter(&block[start..]);
            moved += block.len() - start;
            block.truncate(start);
            if block.is_empty() {
                self.pool.put(block);
            } else {
                contents.blocks.push(block);
            }
        }
        if !contents.is_empty() {
            self.seconds.put(slot, contents);
        }
        self.stats.cascaded_total += moved as u64;
        moved
    }

    /// Places items cascaded out of a second or minute slot: each goes to the millisecond ring
    /// if due within the wheel's second or the next, else to the second ring (a cascaded slot
    /// is the current or the next one of its ring, so nothing goes further but at the end of
    /// time). The tier test is two comparisons against bounds computed once, not
    /// [`level_for`]'s divisions.
    #[inline]
    fn scatter(&mut self, items: &[Item<T>]) {
        let now_ms = self.now_ms;
        let ms_end = (now_ms / MS_PER_SECOND + 2).saturating_mul(MS_PER_SECOND);
        let second_end = (now_ms / MS_PER_MINUTE + 2).saturating_mul(MS_PER_MINUTE);
        for &item in items {
            assert!(
                item.due_ms >= now_ms,
                "cascading a timer due before the wheel's time"
            );
            if item.due_ms < ms_end {
                let slot = (item.due_ms % MS_SLOTS as u64) as usize;
                self.ms.push(slot, item, &mut self.pool);
            } else if item.due_ms < second_end {
                let slot = ((item.due_ms / MS_PER_SECOND) % SECOND_SLOTS as u64) as usize;
                self.seconds.push(slot, item, &mut self.pool);
            } else {
                // Only at the end of time, where the bounds saturate.
                self.push(item.due_ms, item);
            }
        }
    }

    /// Moves the overflow slots that the horizon now reaches into the minute ring, whole.
    fn pull_overflow(&mut self, minute: u64) {
        let horizon = minute + MINUTE_SLOTS as u64;
        while let Some(entry) = self.overflow.first_entry() {
            if *entry.key() >= horizon {
                break;
            }
            let (due_minute, contents) = entry.remove_entry();
            // Its ring slot last held a minute before the wheel's time, so it is empty.
            self.minutes
                .put((due_minute % MINUTE_SLOTS as u64) as usize, contents);
        }
    }

    /// Places a new item at its effective due time.
    #[inline]
    fn place(&mut self, item: Item<T>) {
        let effective_ms = item.due_ms.max(self.now_ms);
        self.bound_ms = self.bound_ms.min(effective_ms);
        self.push(effective_ms, item);
        if self.sweep.active {
            self.sweep.placements += 1;
            if self.sweep.placements >= SWEEP_PLACEMENTS_PER_STEP {
                self.sweep.placements = 0;
                self.sweep_step(SWEEP_ITEMS_PER_STEP);
            }
        }
    }

    /// Appends an item to the slot of `effective_ms` (at or after the wheel's time).
    #[inline]
    fn push(&mut self, effective_ms: u64, item: Item<T>) {
        let tier = level_for(self.now_ms, effective_ms);
        let slot = slot_for(tier, effective_ms);
        match tier {
            Tier::Ms => self.ms.push(slot as usize, item, &mut self.pool),
            Tier::Second => self.seconds.push(slot as usize, item, &mut self.pool),
            Tier::Minute => self.minutes.push(slot as usize, item, &mut self.pool),
            Tier::Overflow => {
                // A far minute's first block starts small and grows by doubling, later ones are
                // whole: jobs spread over the coming weeks touch tens of thousands of minutes a
                // few items each, and a whole block for each (4 KiB) made up three quarters of
                // a reopened engine's heap (177 MB for 325 k jobs over 30 days).
                let contents = self.overflow.entry(slot).or_default();
                let first = contents.is_empty();
                contents.push(item, &mut self.pool, first);
            }
        }
    }

    /// Takes the items of ms slot `slot` out one by one, dropping tombstones, and hands out
    /// the first live one; `None` once the slot is empty.
    #[inline]
    fn fire(&mut self, slot: usize) -> Option<(TimerKey, u64, T)> {
        loop {
            if self.touched == 0 {
                self.touch_ahead(slot);
            }
            let item = self.ms.pop(slot, &mut self.pool)?;
            self.touched = self.touched.saturating_sub(1);
            if let Some(timer) = take_fired(&mut self.slab, item) {
                return Some(timer);
            }
            self.tombstones -= 1;
            self.stats.tombstones_dropped += 1;
        }
    }

    /// Reads the slab entries of the next [`TOUCH_ITEMS`] items to fire (in the order `fire`
    /// takes them: this slot from its tail, then the next occupied slots of the ms ring) in
    /// one tight loop. Their entries were last read long ago and are out of cache; read here
    /// side by side, their misses overlap, and the fires that follow find them in cache.
    fn touch_ahead(&mut self, slot: usize) {
        // First the indices (the items are near in memory), then the entries in a loop short
        // enough that all of its reads are in flight at once.
        let mut indices = [0u32; TOUCH_ITEMS as usize];
        let mut n = 0;
        let mut at = slot;
        'slots: for _ in 0..TOUCH_SLOTS_MAX {
            for block in self.ms.slot(at).blocks.iter().rev() {
                for item in block.iter().rev() {
                    if n == indices.len() {
                        break 'slots;
                    }
                    indices[n] = item.index;
                    n += 1;
                }
            }
            match self.ms.first_from((at + 1) % MS_SLOTS) {
                Some(next) if next != slot => at = next,
                _ => break,
            }
        }
        let mut sink = 0u64;
        for &index in &indices[..n] {
            sink ^= self.slab.touch(index);
        }
        // Stored, so that the reads are not optimised away.
        self.touch_sink ^= sink;
        self.touched = (n as u32).max(1);
    }

    /// Starts a sweep once tombstones outnumber the live timers (and the floor), and enough
    /// of them came since the last pass to pay for a new one.
    #[inline]
    fn maybe_start_sweep(&mut self) {
        if !self.sweep.active
            && self.tombstones >= self.sweep.trigger
            && self.tombstones >= self.slab.len() as u64
        {
            self.sweep.active = true;
            self.sweep.placements = 0;
            self.sweep.seek(0);
        }
    }

    /// One step of the sweep: reads about `budget` items of the minute ring (beyond the next
    /// minute, which cascades soon anyway) and of the overflow, in due order, keeping the live
    /// ones. Slots nearer than that are left to their cascade.
    fn sweep_step(&mut self, budget: usize) {
        let mut read = 0;
        while read < budget {
            let minute_now = self.now_ms / MS_PER_MINUTE;
            let near_end = minute_now + 2;
            let ring_end = minute_now + MINUTE_SLOTS as u64;
            if self.sweep.minute < near_end {
                self.sweep.seek(near_end);
            }
            let (contents, ring_slot) = if self.sweep.minute < ring_end {
                let from = (self.sweep.minute % MINUTE_SLOTS as u64) as usize;
                let found = self
                    .minutes
                    .first_from(from)
                    .map(|s| self.sweep.minute + ring_distance(from, s, MINUTE_SLOTS))
                    .filter(|&m| m < ring_end);
                let Some(minute) = found else {
                    self.sweep.seek(ring_end);
                    continue;
                };
                if minute != self.sweep.minute {
                    self.sweep.seek(minute);
                }
                let slot = (minute % MINUTE_SLOTS as u64) as usize;
                (self.minutes.slot_mut(slot), Some(slot))
            } else {
                let Some((&minute, contents)) = self.overflow.range_mut(self.sweep.minute..).next()
                else {
                    self.finish_sweep();
                    return;
                };
                if minute != self.sweep.minute {
                    self.sweep.seek(minute);
                }
                (contents, None)
            };
            let outcome = sweep_slot(
                contents,
                &mut self.slab,
                &mut self.pool,
                &mut self.sweep,
                budget - read,
            );
            let emptied = contents.is_empty();
            read += outcome.read;
            self.tombstones -= outcome.dropped;
            self.stats.tombstones_dropped += outcome.dropped;
            self.stats.swept_total += outcome.read as u64;
            if outcome.done {
                match ring_slot {
                    Some(slot) => self.minutes.settle(slot),
                    None if emptied => {
                        self.overflow.remove(&self.sweep.minute);
                    }
                    None => {}
                }
                let next = self.sweep.minute + 1;
                self.sweep.seek(next);
            }
        }
    }

    fn finish_sweep(&mut self) {
        self.pool.trim(POOL_BLOCKS_AFTER_SWEEP);
        self.sweep.active = false;
        self.sweep.trigger = self.tombstones + (self.slab.len() as u64).max(self.sweep.floor) / 2;
    }
}

/// Reads the states of `items`' slab entries in one tight loop, so that their cache misses
/// overlap; returns what the caller stores so that the reads are not optimised away.
#[inline]
fn read_entries<T: Copy>(slab: &Slab<T>, items: &[Item<T>]) -> u64 {
    items
        .iter()
        .fold(0, |sink, item| sink ^ slab.touch(item.index))
}

/// The timer an item fires, its slab entry released; `None` for a tombstone (whose entry is
/// released too).
#[inline(always)]
fn take_fired<T: Copy>(slab: &mut Slab<T>, item: Item<T>) -> Option<(TimerKey, u64, T)> {
    match slab.fire(item.index) {
        Fired::Tombstone => None,
        Fired::Live(set) => Some((
            key(item.index, item.generation),
            item.due_ms,
            set.unwrap_or(item.value),
        )),
    }
}

/// What one sweep step did in one slot.
struct Swept {
    read: usize,
    dropped: u64,
    /// Whether the slot is swept to its end (and its emptied blocks gone).
    done: bool,
}

/// Sweeps `contents` from the sweep's block on, reading about `budget` items: drops tombstones
/// block by block, and merges each thinned block into the previous non-empty one while both fit
/// in one block, so that a swept slot's blocks are on average more than half full.
fn sweep_slot<T: Copy>(
    contents: &mut Slot<T>,
    slab: &mut Slab<T>,
    pool: &mut Pool<T>,
    cursor: &mut Sweep,
    budget: usize,
) -> Swept {
    let (mut read, mut dropped) = (0, 0);
    while cursor.block < contents.blocks.len() {
        if read >= budget {
            return Swept {
                read,
                dropped,
                done: false,
            };
        }
        let i = cursor.block;
        let before = contents.blocks[i].len();
        contents.blocks[i].retain(|item| !slab.drop_if_gone(item.index));
        let after = contents.blocks[i].len();
        read += before;
        dropped += (before - after) as u64;
        match cursor.prev {
            Some(p) if contents.blocks[p].len() + after <= BLOCK_ITEMS => {
                let (left, right) = contents.blocks.split_at_mut(i);
                left[p].extend_from_slice(&right[0]);
                right[0].clear();
            }
            _ if after > 0 => cursor.prev = Some(i),
            _ => {}
        }
        cursor.block += 1;
    }
    contents.blocks.retain_mut(|block| {
        if block.is_empty() {
            pool.put(std::mem::take(block));
            false
        } else {
            true
        }
    });
    Swept {
        read,
        dropped,
        done: true,
    }
}

#[cfg(test)]
impl<T: Copy> TimingWheel<T> {
    /// Lowers the sweep's floor, so that a test with few timers sweeps all the time.
    pub(crate) fn set_sweep_floor(&mut self, floor: u64) {
        self.sweep.floor = floor;
        self.sweep.trigger = floor;
    }

    /// Items the overflow's blocks have room for: the memory far timers hold in it.
    pub(crate) fn overflow_capacity(&self) -> usize {
        self.overflow
            .values()
            .flat_map(|slot| &slot.blocks)
            .map(Vec::capacity)
            .sum()
    }
}

impl<T: Copy> fmt::Debug for TimingWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimingWheel")
            .field("len", &self.len())
            .field("now_ms", &self.now_ms)
            .field("next_due", &self.next_due())
            .field("tombstones", &self.tombstones)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
