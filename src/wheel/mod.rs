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
//! Every minute of due times has a *key space* (`spaces.rs`): a timer takes the next place in
//! the space of the minute it is effectively due in, and its key names that minute and that
//! place. The spaces of the 64 hours ahead (3 840 minutes, 64 hour buckets; an hour bucket is
//! `due_ms / 3_600_000`, see [`hour_bucket`]) sit in a calendar-aligned ring, later ones in an
//! overflow map keyed by minute, which moves them into the ring as the horizon reaches them.
//!
//! A timer inserted while its minute is at least two minutes ahead is *far*: its due time and
//! value are written once, at its place, and nowhere else (the due millisecond within its
//! minute and the value, packed: 10 bytes with a `u64` value). While
//! the wheel is in the minute before, the look-ahead sorts the space's far places by due
//! millisecond into the minute's *run* (`run.rs`: by second, then each second by millisecond,
//! two stable counting passes), and the fire takes each millisecond from the run's cursor. A
//! timer inserted later is *near*: its item (`block.rs`: due time, key, value) goes to the
//! millisecond ring of the current and the next second, or the second ring of the current and
//! the next minute, and cascades from the second ring to the millisecond ring ahead of its
//! second (see `level.rs`). The fire takes each millisecond from the millisecond slot first,
//! then from the run.
//!
//! A cancel sets the place's *gone* bit in its space, so its item (in a ring or the run) is a
//! *tombstone*, which the fire drops; a far minute's places compact once most of a chunk of
//! them are gone (see [`TimingWheel::tombstones`]). A fire checks and sets the gone bit of its
//! place in the space of the minute being fired: a few kilobytes of bits that the minute's fires
//! share, in cache, so a fire is a sequential read of the run and no read at random.
//! [`TimingWheel::poll_many`] takes a millisecond's timers in one loop rather than one per
//! call.
//!
//! # Time
//!
//! The wheel has its own time, [`TimingWheel::now_ms`]: it starts at `new`'s `now_ms`, and
//! [`poll`](TimingWheel::poll) moves it forward, never back. A timer is *effectively* due at
//! `max(due_ms, now_ms())` as of its insert: one inserted in the past fires at the next poll,
//! before any timer due later. Timers fire in non-decreasing effective due order; timers with
//! the same due millisecond fire in no particular order. `poll(now_ms)` with `now_ms` before the
//! wheel's time fires nothing (the clock went backwards: hold). The wheel's time stops at
//! [`TimingWheel::last_ms`], about 8 000 years after its creation, and later due times count as
//! that one.
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
//! many tombstones in the millisecond ring or the run (timers cancelled after their minute's run
//! was sorted): it drops them all, a few nanoseconds each, paid for by their cancels.

mod block;
mod level;
mod run;
mod spaces;

use std::fmt;
use std::num::NonZeroU32;

use block::{Item, Pool};
use level::{
    Level, MS_PER_HOUR, MS_PER_MINUTE, MS_PER_SECOND, MS_SLOTS, SECOND_SLOTS, Tier, level_for,
    ring_distance, slot_for,
};
use run::{Build, Run};
use spaces::Spaces;

pub use level::HORIZON_HOURS;

/// Timers cascaded ahead of time by one `poll` that returns `None` (or the same work in sorting
/// the next minute's run: it reads each item twice, counting then placing it).
///
/// At 10M timers spread over an hour, a minute holds about 170 000 timers and a second about
/// 2 800, so one poll per millisecond sorts the next minute within 0.4 s and the next second
/// within 3 ms. A burst of 1M timers due in one millisecond is moved during the second before
/// it. Each poll spends at most a few µs on it.
pub const CASCADE_PER_POLL_MAX: usize = 1024;

/// Items `next_due` reads in the millisecond ring to step over tombstones.
const PEEK_ITEMS_MAX: usize = 64;
/// Run items a fire takes in one loop.
const FIRE_BATCH: usize = 64;

const _: () = assert!(CASCADE_PER_POLL_MAX > 0 && FIRE_BATCH > 0);

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
/// Once the timer fired, was cancelled or was moved the key is stale: every method given it
/// returns `None` or `false`. A key names the minute of the timer's effective due time and its
/// place among that minute's timers (see `spaces.rs`), and no key is handed out twice.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct TimerKey {
    /// The place in the minute's key space.
    index: u32,
    /// The minute, counted from the wheel's creation, plus one: never 0, so an
    /// `Option<TimerKey>` takes no more room than a key (8 bytes in each job of the engine).
    generation: NonZeroU32,
}

/// The key of place `index` in the key minute of `generation`.
#[inline]
fn key(index: u32, generation: u32) -> TimerKey {
    TimerKey {
        index,
        generation: NonZeroU32::new(generation).expect("key minutes count from 1"),
    }
}

impl TimerKey {
    /// The key as one `u64`, e.g. to store beside a job.
    pub fn to_u64(self) -> u64 {
        (u64::from(self.generation.get()) << 32) | u64::from(self.index)
    }

    /// The key that [`to_u64`](Self::to_u64) returned; any other number is a stale key.
    pub fn from_u64(raw: u64) -> Self {
        // Generation 0 is never handed out: the last one, which is never live (see
        // `spaces::KEY_MINUTES`), stands for it.
        const NEVER_LIVE: NonZeroU32 = NonZeroU32::new(u32::MAX).expect("not 0");
        let generation = NonZeroU32::new((raw >> 32) as u32).unwrap_or(NEVER_LIVE);
        Self {
            index: raw as u32,
            generation,
        }
    }
}

/// Counters of cascading and compacting work, to check the pause bound without a clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkStats {
    /// Items moved from a coarser ring to a finer one (or dropped there as tombstones), in total.
    pub cascaded_total: u64,
    /// The most items moved by a single `poll` or `poll_many` call.
    pub cascaded_per_poll_max: u64,
    /// Places read by compactions of far minutes' key spaces, in total.
    pub swept_total: u64,
    /// Tombstones dropped, by fires and compactions, in total.
    pub tombstones_dropped: u64,
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
    /// The keys, and the far timers' items (`spaces.rs`).
    spaces: Spaces<T>,
    /// The latest time the wheel keeps (see [`TimingWheel::last_ms`]).
    last_ms: u64,
    pool: Pool<T>,
    ms: Level<T>,
    seconds: Level<T>,
    /// The wheel's time: every pending timer is effectively due at or after it.
    now_ms: u64,
    /// No item is effectively due before this; lets an idle `poll` return at once.
    bound_ms: u64,
    /// The start of the second after the wheel's time: an idle poll before it only stores
    /// the time.
    next_second_ms: u64,
    /// Whether the next second or minute may still hold items to cascade ahead of time.
    look_ahead_pending: bool,
    /// The current minute's far timers, sorted by due (`run.rs`).
    run: Run<T>,
    /// The next minute's run, being sorted ahead of time.
    build: Build<T>,
    /// Items of cancelled or moved timers not reclaimed yet.
    tombstones: u64,
    stats: WorkStats,
}

impl<T: Copy> TimingWheel<T> {
    /// An empty wheel whose time is `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self::with_capacity(now_ms, 0)
    }

    /// An empty wheel whose time is `now_ms`. `capacity` is a hint of the timers it will
    /// hold, which it has no use for today: its keys live in per-minute spaces that grow as
    /// their minutes fill.
    pub fn with_capacity(now_ms: u64, capacity: usize) -> Self {
        let _ = capacity;
        let spaces = Spaces::new(now_ms);
        let last_ms = spaces.last_ms();
        let now_ms = now_ms.min(last_ms);
        Self {
            spaces,
            last_ms,
            pool: Pool::default(),
            ms: Level::new(MS_SLOTS, true),
            seconds: Level::new(SECOND_SLOTS, false),
            now_ms,
            bound_ms: u64::MAX,
            next_second_ms: next_second_ms(now_ms),
            look_ahead_pending: false,
            run: Run::default(),
            build: Build::new(),
            tombstones: 0,
            stats: WorkStats::default(),
        }
    }

    /// Pending timers.
    pub fn len(&self) -> usize {
        self.spaces.len()
    }

    /// Whether no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.spaces.len() == 0
    }

    /// The latest time the wheel keeps, about 8 000 years after its creation: a timer due
    /// later counts as due then (and reports that as its due time), and a poll later than it
    /// polls at it.
    pub fn last_ms(&self) -> u64 {
        self.last_ms
    }

    /// The wheel's time: the latest `now_ms` it was polled at (or created with), held when the
    /// clock goes backwards, or the due time of the timer it fired last if that is earlier.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Cascading and compacting work done so far.
    pub fn work_stats(&self) -> WorkStats {
        self.stats
    }

    /// Cancelled or rescheduled timers whose item is not reclaimed yet. A cancel only marks
    /// its timer's place gone; a fire drops the item when it meets it, and a far minute's
    /// chunk of places is compacted once three in four of its places are gone, so that this
    /// stays within about three times the live timers (plus the items of the next two
    /// minutes).
    pub fn tombstones(&self) -> u64 {
        self.tombstones
    }

    /// Adds a timer due at `due_ms` and returns its key. A due time at or before the wheel's
    /// time fires at the next poll. Any `due_ms` is accepted, `u64::MAX` included (one after
    /// [`last_ms`](Self::last_ms) counts as that).
    ///
    /// # Panics
    ///
    /// When 2^32 - 1 timers were inserted into one minute.
    pub fn insert(&mut self, due_ms: u64, value: T) -> TimerKey {
        let due_ms = due_ms.min(self.last_ms);
        let effective_ms = due_ms.max(self.now_ms);
        let minute = effective_ms / MS_PER_MINUTE;
        let now_minute = self.now_ms / MS_PER_MINUTE;
        let tier = level_for(self.now_ms, effective_ms);
        let far = matches!(tier, Tier::Minute | Tier::Overflow);
        let place = self.spaces.insert(minute, now_minute, due_ms, value, far);
        let generation = self.spaces.generation(minute);
        self.bound_ms = self.bound_ms.min(effective_ms);
        if !far {
            let item = Item {
                due_ms,
                index: place,
                generation,
                value,
            };
            self.push(effective_ms, item);
        }
        key(place, generation)
    }

    /// Removes a pending timer and returns its value; `None` if the key is stale.
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        let value = self.get(key)?;
        assert!(self.remove(key), "a key read live ends");
        Some(value)
    }

    /// Removes a pending timer, as [`cancel`](Self::cancel) does, without reading its value:
    /// `false` if the key is stale. The cheaper call when the value is not needed: it touches
    /// only the bits and counters of the timer's minute, not where the timer's value lies.
    ///
    /// ```
    /// use timewheel::wheel::TimingWheel;
    ///
    /// let mut wheel = TimingWheel::new(0);
    /// let key = wheel.insert(60 * 60_000, "in an hour");
    /// assert!(wheel.remove(key));
    /// assert!(!wheel.remove(key), "a stale key reaches nothing");
    /// assert!(wheel.is_empty());
    /// ```
    pub fn remove(&mut self, key: TimerKey) -> bool {
        // The place is gone, and its item a tombstone (or compacted away).
        let minute = self.spaces.minute_of(key.generation.get());
        let Some(ended) = self.spaces.end(minute, key.index) else {
            return false;
        };
        self.tombstones += 1;
        self.tombstones -= ended.dropped;
        self.stats.tombstones_dropped += ended.dropped;
        self.stats.swept_total += ended.read as u64;
        true
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
        let value = self.cancel(key)?;
        Some(self.insert(due_ms, value))
    }

    /// Whether the key names a pending timer.
    pub fn contains(&self, key: TimerKey) -> bool {
        let minute = self.spaces.minute_of(key.generation.get());
        self.spaces.is_live(minute, key.index)
    }

    /// The value of a pending timer; `None` if the key is stale.
    pub fn get(&self, key: TimerKey) -> Option<T> {
        let minute = self.spaces.minute_of(key.generation.get());
        self.spaces.value(minute, key.index)
    }

    /// Replaces the value of a pending timer, which keeps its due time and key; `false` if the
    /// key is stale.
    pub fn set(&mut self, key: TimerKey, value: T) -> bool {
        let minute = self.spaces.minute_of(key.generation.get());
        self.spaces.set(minute, key.index, value)
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
    /// the next one. `None` when there is nothing to do ahead.
    ///
    /// A caller that sleeps until [`next_due`](Self::next_due) polls at a slot's start and
    /// pays there for moving the whole slot, in one call; one that also wakes at this time
    /// moves it [`CASCADE_PER_POLL_MAX`] items per poll, ahead of time. A timer thread sleeps
    /// until the earlier of the two.
    pub fn look_ahead_due(&self) -> Option<u64> {
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
        if let Some(far) = self.spaces.first_far(minute)
            && far >= minute + 2
        {
            let at = (far - 1) * MS_PER_MINUTE;
            due = Some(due.map_or(at, |d| d.min(at)));
        }
        due
    }

    /// Fires the earliest timer due at or before `now_ms`: returns its key, its due time as
    /// inserted, and its value. `None` when nothing is due at `now_ms`.
    ///
    /// Call it until it returns `None`; each call does a bounded amount of work, except the
    /// first call after a jump, which cascades what the look-ahead could not (see the
    /// module docs). Timers come out in non-decreasing effective due order.
    #[inline]
    pub fn poll(&mut self, now_ms: u64) -> Option<(TimerKey, u64, T)> {
        let now_ms = now_ms.min(self.last_ms);
        if self.quiet(now_ms) {
            return None;
        }
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
    #[inline]
    pub fn poll_many(
        &mut self,
        now_ms: u64,
        max: usize,
        out: &mut Vec<(TimerKey, u64, T)>,
    ) -> usize {
        let now_ms = now_ms.min(self.last_ms);
        if max == 0 || self.quiet(now_ms) {
            return 0;
        }
        self.poll_many_inner(now_ms, max, out)
    }

    /// Whether a poll at `now_ms` (at most [`last_ms`](Self::last_ms)) has nothing to do but
    /// store the time: nothing is due (tombstones included), the second has not ended, and
    /// nothing waits to be cascaded or sorted ahead of time. If so, it stores the time: the
    /// whole of such a poll, inlined into the caller (a timer thread polls every millisecond,
    /// and most of them are quiet when timers are sparse).
    #[inline]
    fn quiet(&mut self, now_ms: u64) -> bool {
        let quiet =
            now_ms < self.bound_ms && now_ms < self.next_second_ms && !self.look_ahead_pending;
        if quiet && now_ms > self.now_ms {
            self.now_ms = now_ms;
        }
        quiet
    }

    fn poll_many_inner(
        &mut self,
        now_ms: u64,
        max: usize,
        out: &mut Vec<(TimerKey, u64, T)>,
    ) -> usize {
        let before = self.stats.cascaded_total;
        let mut fired = 0;
        while fired < max {
            fired += match self.due_source(now_ms) {
                Some(Source::Ms(slot)) => {
                    let n = self.fire_many(slot, max - fired, out);
                    if self.ms.is_empty_slot(slot) {
                        self.raise_bound();
                    }
                    n
                }
                Some(Source::Run) => {
                    let n = self.fire_run_many(max - fired, out);
                    self.raise_bound();
                    n
                }
                None => break,
            };
        }
        let moved = self.stats.cascaded_total - before;
        self.stats.cascaded_per_poll_max = self.stats.cascaded_per_poll_max.max(moved);
        fired
    }

    /// Once the ms slot of the wheel's time is empty: nothing is pending before the run's
    /// next item or the next millisecond, whichever is earlier (the ms ring's other items,
    /// the second ring's and the far ones are all later), so a poll at the wheel's time
    /// returns at its first test, not after looking for the next due time. (A fire from the
    /// run leaves the ms slot as it found it: empty, or the slot would have fired first.)
    #[inline]
    fn raise_bound(&mut self) {
        let next = self.run.next_due().unwrap_or(u64::MAX);
        let bound = next.min(self.now_ms.saturating_add(1));
        debug_assert!(bound >= self.bound_ms, "a bound only rises here");
        self.bound_ms = bound;
    }

    /// Fires up to `max` live items of ms slot `slot` (the slot of the wheel's time) into
    /// `out`, dropping the tombstones among them; returns how many fired. One loop over the
    /// slot's blocks from their tail.
    fn fire_many(&mut self, slot: usize, max: usize, out: &mut Vec<(TimerKey, u64, T)>) -> usize {
        let (mut fired, mut dropped) = (0, 0u64);
        let (spaces, ms, pool) = (&mut self.spaces, &mut self.ms, &mut self.pool);
        while fired < max {
            let contents = ms.slot_mut(slot);
            let Some(block) = contents.blocks.last_mut() else {
                break;
            };
            let take = block.len().min(max - fired);
            let from = block.len() - take;
            for &item in block[from..].iter().rev() {
                match fire_item(spaces, item) {
                    Some(timer) => {
                        out.push(timer);
                        fired += 1;
                    }
                    None => dropped += 1,
                }
            }
            block.truncate(from);
            if block.is_empty() {
                pool.put(contents.blocks.pop().expect("the tail block"));
            }
        }
        self.ms.settle(slot);
        self.tombstones -= dropped;
        self.stats.tombstones_dropped += dropped;
        fired
    }

    /// Fires up to `max` live items of the run due at the wheel's time into `out`, dropping
    /// the tombstones among them; returns how many fired.
    fn fire_run_many(&mut self, max: usize, out: &mut Vec<(TimerKey, u64, T)>) -> usize {
        let (mut fired, mut dropped) = (0, 0u64);
        let now_ms = self.now_ms;
        let generation = self.run.generation();
        let space = self
            .spaces
            .space_mut(self.run.minute())
            .expect("the space of the run's minute");
        while fired < max {
            let window = self.run.ahead(FIRE_BATCH);
            let mut taken = 0;
            for item in window {
                let due_ms = self.run.due_ms(item);
                if due_ms > now_ms || fired == max {
                    break;
                }
                taken += 1;
                match space.fire(item.place) {
                    Some(set) => {
                        let value = set.unwrap_or(item.value);
                        out.push((key(item.place, generation), due_ms, value));
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
        self.spaces.fired(fired);
        self.tombstones -= dropped;
        self.stats.tombstones_dropped += dropped;
        fired
    }

    /// Fires the run's next live item due at the wheel's time, dropping the tombstones before
    /// it; `None` once no item is due there.
    fn fire_run(&mut self) -> Option<(TimerKey, u64, T)> {
        let minute = self.run.minute();
        while let Some(item) = self.run.peek() {
            let due_ms = self.run.due_ms(&item);
            if due_ms > self.now_ms {
                break;
            }
            self.run.skip(1);
            if let Some(set) = self.spaces.fire(minute, item.place) {
                let key = key(item.place, self.run.generation());
                return Some((key, due_ms, set.unwrap_or(item.value)));
            }
            self.tombstones -= 1;
            self.stats.tombstones_dropped += 1;
        }
        None
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
        if now_ms < self.bound_ms {
            // Nothing is due (tombstones included): only move the wheel's time (if the clock
            // did not go back) and use the idle call to cascade the next second and minute
            // ahead of time. The one test most polls make (a timer thread polls every
            // millisecond, and most milliseconds are empty when timers are sparse).
            if now_ms >= self.next_second_ms {
                self.advance(now_ms);
            } else if now_ms > self.now_ms {
                self.now_ms = now_ms;
            }
            self.idle_work();
            return None;
        }
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

    /// What a poll that fires nothing does with its time: cascade and sort ahead.
    #[inline]
    fn idle_work(&mut self) {
        self.look_ahead();
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
        let minute = self.run.minute();
        let run = self.run.rest().enumerate().find_map(|(read, item)| {
            (self.spaces.is_live(minute, item.place) || read + 1 == PEEK_ITEMS_MAX)
                .then(|| self.run.due_ms(&item))
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
                let minute = self.spaces.minute_of(item.generation);
                if self.spaces.is_live(minute, item.index) {
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

    /// A lower bound of the items in the second ring and the far places: the start
    /// of the earliest occupied slot of each.
    fn coarse_bound_ms(&self) -> Option<u64> {
        let mut bound: Option<u64> = None;
        let mut lower = |b: u64| bound = Some(bound.map_or(b, |a| a.min(b)));
        let second = self.now_ms / MS_PER_SECOND;
        let from = slot_for(Tier::Second, self.now_ms) as usize;
        if let Some(slot) = self.seconds.first_from(from) {
            lower((second + ring_distance(from, slot, SECOND_SLOTS)) * MS_PER_SECOND);
        }
        if let Some(minute) = self.spaces.first_far(self.now_ms / MS_PER_MINUTE) {
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
            self.spaces.enter_minute(new_minute);
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
        self.build_step(usize::MAX);
        self.build
            .finish_into(&mut self.run, self.spaces.generation(minute));
    }

    /// Sorts the build's minute on for about `budget` units.
    fn build_step(&mut self, budget: usize) -> usize {
        let Some(minute) = self.build.minute() else {
            return 0;
        };
        let space = self.spaces.space(minute).expect("the space being built");
        let stepped = self.build.step(budget, space);
        self.stats.cascaded_total += stepped.moved as u64;
        stepped.spent
    }

    /// Takes minute `minute`'s far timers into the (idle) build; returns the budget units it
    /// spent, `None` if the minute has none.
    fn start_build(&mut self, minute: u64) -> Option<usize> {
        if !self.spaces.has_far(minute) {
            return None;
        }
        let (started, dropped) = self.build.start(self.spaces.take_far(minute));
        self.stats.cascaded_total += started.moved as u64;
        self.tombstones -= dropped as u64;
        self.stats.tombstones_dropped += dropped as u64;
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
            None => self
                .next_minute()
                .is_some_and(|minute| self.spaces.has_far(minute)),
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
            self.build_step(CASCADE_PER_POLL_MAX - spent);
        }
    }

    /// Moves up to `budget` items out of second slot `slot` into the ring their due time now
    /// belongs to (the millisecond ring, but at the end of time); returns how many it moved.
    ///
    /// A sequential copy: tombstones move along unread (the fire drops them).
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

    /// Appends a near timer's item to the slot of `effective_ms` (at or after the wheel's
    /// time, within the next minute).
    #[inline]
    fn push(&mut self, effective_ms: u64, item: Item<T>) {
        let tier = level_for(self.now_ms, effective_ms);
        let slot = slot_for(tier, effective_ms) as usize;
        match tier {
            Tier::Ms => self.ms.push(slot, item, &mut self.pool),
            Tier::Second => self.seconds.push(slot, item, &mut self.pool),
            Tier::Minute | Tier::Overflow => unreachable!("far timers live in their key space"),
        }
    }

    /// Takes the items of ms slot `slot` out one by one, dropping tombstones, and hands out
    /// the first live one; `None` once the slot is empty.
    #[inline]
    fn fire(&mut self, slot: usize) -> Option<(TimerKey, u64, T)> {
        loop {
            let item = self.ms.pop(slot, &mut self.pool)?;
            if let Some(timer) = fire_item(&mut self.spaces, item) {
                return Some(timer);
            }
            self.tombstones -= 1;
            self.stats.tombstones_dropped += 1;
        }
    }
}

/// The timer a near item fires, its place marked gone; `None` for a tombstone.
#[inline]
fn fire_item<T: Copy>(spaces: &mut Spaces<T>, item: Item<T>) -> Option<(TimerKey, u64, T)> {
    let minute = spaces.minute_of(item.generation);
    let set = spaces.fire(minute, item.index)?;
    Some((
        key(item.index, item.generation),
        item.due_ms,
        set.unwrap_or(item.value),
    ))
}

#[cfg(test)]
impl<T: Copy> TimingWheel<T> {
    /// Items the key spaces' chunks have room for: the memory their timers hold.
    pub(crate) fn spaces_capacity(&self) -> usize {
        self.spaces.capacity()
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
