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
//! horizon wait in an overflow map keyed by minute, whose lists are spliced whole into the minute
//! ring as the horizon moves. Entries live in a slab (`slab.rs`).
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
//! The current second and minute are always complete in the finer ring, so firing never has to
//! wait for a cascade. The *next* second and minute are cascaded ahead of time, at most
//! [`CASCADE_PER_POLL_MAX`] timers per `poll` that returns `None`. A caller that polls at least
//! every few milliseconds while timers are pending (as a timer thread does when timers are due
//! every millisecond) therefore never meets a cascade at a boundary; one that slept through
//! a whole minute pays, in the poll that crosses into it, for the timers of that minute that the
//! look-ahead could not move (see [`WorkStats`]).

mod level;
mod slab;

use std::collections::BTreeMap;
use std::fmt;

use level::{
    LANES_MAX, Level, MINUTE_LANES, MINUTE_SLOTS, MS_PER_HOUR, MS_PER_MINUTE, MS_PER_SECOND,
    MS_SLOTS, SECOND_LANES, SECOND_SLOTS, Tier, decode_list_id, level_for, list_id, ring_distance,
    slot_for,
};
use slab::{HEAD, NIL, Slab};

pub use level::HORIZON_HOURS;

/// Timers cascaded ahead of time by one `poll` that returns `None`.
///
/// At 10M timers spread over an hour, a minute holds about 170 000 timers and a second about
/// 2 800, so one poll per millisecond moves the next minute within 0.2 s and the next second
/// within 3 ms. A burst of 1M timers due in one millisecond is moved during the second before
/// it. Each poll spends at most about 10 µs on it.
pub const CASCADE_PER_POLL_MAX: usize = 1024;

const _: () = assert!(CASCADE_PER_POLL_MAX > 0);

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
    generation: u32,
}

impl TimerKey {
    /// The key as one `u64`, e.g. to store beside a job.
    pub fn to_u64(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// The key that [`to_u64`](Self::to_u64) returned; any other number is a stale key.
    pub fn from_u64(raw: u64) -> Self {
        Self {
            index: raw as u32,
            generation: (raw >> 32) as u32,
        }
    }
}

/// Counters of cascading work, to check the pause bound without a clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkStats {
    /// Timers moved from a coarser ring to a finer one, in total.
    pub cascaded_total: u64,
    /// The most timers moved by a single `poll` call.
    pub cascaded_per_poll_max: u64,
}

/// A hierarchical timing wheel holding values of type `T`, each due at a millisecond.
///
/// See the [module documentation](self) for an example and the guarantees.
pub struct TimingWheel<T> {
    slab: Slab<T>,
    ms: Level,
    seconds: Level,
    minutes: Level,
    /// Lists of timers beyond the resident horizon, keyed by due minute.
    overflow: BTreeMap<u64, u32>,
    /// The wheel's time: every pending timer is effectively due at or after it.
    now_ms: u64,
    /// No pending timer is effectively due before this; lets an idle `poll` return at once.
    bound_ms: u64,
    /// The start of the second after the wheel's time: an idle poll before it only stores
    /// the time.
    next_second_ms: u64,
    /// Whether the next second or minute may still hold timers to cascade ahead of time.
    look_ahead_pending: bool,
    stats: WorkStats,
}

impl<T> TimingWheel<T> {
    /// An empty wheel whose time is `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self::with_capacity(now_ms, 0)
    }

    /// An empty wheel whose time is `now_ms`, with room for `capacity` timers before it
    /// allocates.
    pub fn with_capacity(now_ms: u64, capacity: usize) -> Self {
        Self {
            slab: Slab::with_capacity(capacity),
            ms: Level::new(MS_SLOTS, 1),
            seconds: Level::new(SECOND_SLOTS, SECOND_LANES),
            minutes: Level::new(MINUTE_SLOTS, MINUTE_LANES),
            overflow: BTreeMap::new(),
            now_ms,
            bound_ms: u64::MAX,
            next_second_ms: next_second_ms(now_ms),
            look_ahead_pending: false,
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

    /// Timers the wheel holds without allocating again.
    pub fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// The wheel's time: the latest `now_ms` it was polled at (or created with), held when the
    /// clock goes backwards, or the due time of the timer it fired last if that is earlier.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Cascading work done so far.
    pub fn work_stats(&self) -> WorkStats {
        self.stats
    }

    /// Adds a timer due at `due_ms` and returns its key. A due time at or before the wheel's
    /// time fires at the next poll. Any `due_ms` is accepted, `u64::MAX` included.
    ///
    /// # Panics
    ///
    /// When 2^31 timers are already pending.
    pub fn insert(&mut self, due_ms: u64, value: T) -> TimerKey {
        let (index, generation) = self.slab.insert(due_ms, value);
        self.link(index, due_ms);
        TimerKey { index, generation }
    }

    /// Removes a pending timer and returns its value; `None` if the key is stale.
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        if !self.slab.contains(key.index, key.generation) {
            return None;
        }
        self.unlink(key.index);
        Some(self.slab.remove(key.index).1)
    }

    /// Moves a pending timer to `due_ms`, keeping its key; `false` if the key is stale.
    pub fn reschedule(&mut self, key: TimerKey, due_ms: u64) -> bool {
        if !self.slab.contains(key.index, key.generation) {
            return false;
        }
        self.unlink(key.index);
        self.slab.set_due_ms(key.index, due_ms);
        self.link(key.index, due_ms);
        true
    }

    /// Whether the key names a pending timer.
    pub fn contains(&self, key: TimerKey) -> bool {
        self.slab.contains(key.index, key.generation)
    }

    /// The due time and value of a pending timer; `None` if the key is stale.
    pub fn get(&self, key: TimerKey) -> Option<(u64, &T)> {
        self.contains(key).then(|| {
            let o = self.slab.get(key.index);
            (o.due_ms, &o.value)
        })
    }

    /// When the timer thread should wake up and poll: never later than the effective due time
    /// of the earliest pending timer, and exactly that time when the timer is due within the
    /// wheel's current second. Otherwise it is the start of the second, minute or (beyond the
    /// horizon) minute of the earliest occupied coarser slot: polling there costs one extra
    /// wake-up per ring and moves `next_due` strictly forward. `None` when the wheel is empty.
    pub fn next_due(&self) -> Option<u64> {
        let exact = self.first_ms();
        match (exact, self.coarse_bound_ms()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
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

    fn poll_inner(&mut self, now_ms: u64) -> Option<(TimerKey, u64, T)> {
        if now_ms < self.bound_ms {
            // Nothing is due: only move the wheel's time (if the clock did not go back) and
            // use the idle call to cascade the next second and minute ahead of time.
            if now_ms >= self.next_second_ms {
                self.advance(now_ms);
            } else if now_ms > self.now_ms {
                self.now_ms = now_ms;
            }
            self.look_ahead();
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
                    self.look_ahead();
                    return None;
                }
                self.now_ms = due_ms;
                return Some(self.fire(slot_for(Tier::Ms, due_ms) as usize));
            }
            // Nothing left in this second: everything pending is at or after `bound`, which is
            // in a later second.
            let bound = match (first, self.coarse_bound_ms()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match bound {
                Some(bound_ms) if bound_ms <= now_ms => self.advance(bound_ms),
                _ => {
                    if now_ms > self.now_ms {
                        self.advance(now_ms);
                    }
                    self.bound_ms = bound.unwrap_or(u64::MAX);
                    self.look_ahead();
                    return None;
                }
            }
        }
    }

    /// The effective due time of the earliest timer in the ms ring (exact).
    #[inline]
    fn first_ms(&self) -> Option<u64> {
        let from = slot_for(Tier::Ms, self.now_ms) as usize;
        let slot = self.ms.first_from(from)?;
        Some(self.now_ms + ring_distance(from, slot, MS_SLOTS))
    }

    /// A lower bound of the timers in the second and minute rings and the overflow: the start
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
        bound
    }

    /// Moves the wheel's time forward to `to_ms`, when no timer is effectively due before it,
    /// and completes the new second and minute in the finer rings.
    fn advance(&mut self, to_ms: u64) {
        assert!(to_ms > self.now_ms, "the wheel's time only moves forward");
        let (second, minute) = (self.now_ms / MS_PER_SECOND, self.now_ms / MS_PER_MINUTE);
        self.now_ms = to_ms;
        let (new_second, new_minute) = (to_ms / MS_PER_SECOND, to_ms / MS_PER_MINUTE);
        if new_minute != minute {
            self.pull_overflow(new_minute);
            let slot = slot_for(Tier::Minute, to_ms) as usize;
            self.cascade(Tier::Minute, slot, usize::MAX);
        }
        if new_second != second {
            self.next_second_ms = next_second_ms(to_ms);
            // Only a new second (or minute) brings new timers to cascade ahead of time: inserts
            // never go to the look-ahead slots, which are cascaded into finer rings.
            self.look_ahead_pending = true;
            let slot = slot_for(Tier::Second, to_ms) as usize;
            self.cascade(Tier::Second, slot, usize::MAX);
        }
    }

    /// Cascades part of the next second (second ring to ms ring) and, with what is left of the
    /// budget, of the next minute (minute ring to second ring), so that the boundary finds
    /// them done.
    #[inline]
    fn look_ahead(&mut self) {
        if !self.look_ahead_pending {
            return;
        }
        let next_second = slot_for(Tier::Second, self.now_ms.saturating_add(MS_PER_SECOND));
        let next_minute = slot_for(Tier::Minute, self.now_ms.saturating_add(MS_PER_MINUTE));
        if self.seconds.is_empty_slot(next_second as usize)
            && self.minutes.is_empty_slot(next_minute as usize)
        {
            self.look_ahead_pending = false;
            return;
        }
        let moved = self.cascade(Tier::Second, next_second as usize, CASCADE_PER_POLL_MAX);
        self.cascade(
            Tier::Minute,
            next_minute as usize,
            CASCADE_PER_POLL_MAX - moved,
        );
    }

    /// Moves up to `budget` timers out of ring slot `slot` of `tier` into the ring their due
    /// time now belongs to (always a finer one); returns how many moved.
    ///
    /// A slot cascaded ahead of time was filled long ago and its entries are scattered over
    /// the slab, so each costs a cache miss. Two things keep those misses from queueing up:
    /// the lanes are walked side by side, one timer per lane per round, with the entries of a
    /// round read before any is moved (their misses overlap); and the lists are detached
    /// first, so moving a timer never writes to the next one (which would be one more miss,
    /// in the middle of a round). What the budget leaves is attached again at the end.
    fn cascade(&mut self, tier: Tier, slot: usize, budget: usize) -> usize {
        if budget == 0 || self.ring(tier).is_empty_slot(slot) {
            return 0;
        }
        let lanes = self.ring(tier).lanes();
        let mut rest = [NIL; LANES_MAX];
        for (lane, rest) in rest.iter_mut().enumerate().take(lanes) {
            *rest = self.ring(tier).head(slot * lanes + lane);
            self.ring(tier).set_head(slot * lanes + lane, NIL);
        }
        let mut moved = 0;
        let mut round = [(NIL, 0u64); LANES_MAX];
        while moved < budget {
            let mut taken = 0;
            for rest in rest.iter_mut().take(lanes) {
                if *rest != NIL && moved + taken < budget {
                    let (_, next) = self.slab.links(*rest);
                    round[taken] = (*rest, self.slab.due_ms(*rest));
                    *rest = next;
                    taken += 1;
                }
            }
            if taken == 0 {
                break;
            }
            for &(index, due_ms) in &round[..taken] {
                assert!(
                    due_ms >= self.now_ms,
                    "cascading a timer due before the wheel's time"
                );
                self.link(index, due_ms);
            }
            moved += taken;
        }
        for (lane, &rest) in rest.iter().enumerate().take(lanes) {
            if rest != NIL {
                let list = slot * lanes + lane;
                self.ring(tier).set_head(list, rest);
                self.slab.set_prev(rest, HEAD | list_id(tier, list));
            }
        }
        self.stats.cascaded_total += moved as u64;
        moved
    }

    /// Splices the overflow lists that the horizon now reaches into the minute ring, whole.
    fn pull_overflow(&mut self, minute: u64) {
        let horizon = minute + MINUTE_SLOTS as u64;
        while let Some(entry) = self.overflow.first_entry() {
            if *entry.key() >= horizon {
                break;
            }
            let (due_minute, head) = entry.remove_entry();
            let slot = (due_minute % MINUTE_SLOTS as u64) as usize;
            // Its slot last held a minute before the wheel's time, so it is empty.
            assert!(
                self.minutes.is_empty_slot(slot),
                "overflow splice onto an occupied slot"
            );
            let list = slot * MINUTE_LANES;
            self.minutes.set_head(list, head);
            self.slab.set_prev(head, HEAD | list_id(Tier::Minute, list));
        }
    }

    fn ring(&mut self, tier: Tier) -> &mut Level {
        match tier {
            Tier::Ms => &mut self.ms,
            Tier::Second => &mut self.seconds,
            Tier::Minute => &mut self.minutes,
            Tier::Overflow => unreachable!("the overflow is not a ring"),
        }
    }

    /// Links the unlinked entry `index` at the head of the slot of its effective due time.
    #[inline]
    fn link(&mut self, index: u32, due_ms: u64) {
        let effective_ms = due_ms.max(self.now_ms);
        self.bound_ms = self.bound_ms.min(effective_ms);
        let tier = level_for(self.now_ms, effective_ms);
        let slot = slot_for(tier, effective_ms);
        let (list, head) = match tier {
            Tier::Overflow => {
                let head = self.overflow.entry(slot).or_insert(NIL);
                (0, std::mem::replace(head, index))
            }
            _ => {
                let ring = self.ring(tier);
                let lanes = ring.lanes();
                let list = slot as usize * lanes + (index as usize & (lanes - 1));
                let head = ring.head(list);
                ring.set_head(list, index);
                (list, head)
            }
        };
        self.slab.set_links(index, HEAD | list_id(tier, list), head);
        if head != NIL {
            self.slab.set_prev(head, index);
        }
    }

    /// Takes the linked entry `index` out of its list.
    #[inline]
    fn unlink(&mut self, index: u32) {
        let (prev, next) = self.slab.links(index);
        if prev & HEAD == 0 {
            self.slab.set_next(prev, next);
        } else {
            match decode_list_id(prev & !HEAD) {
                (Tier::Overflow, _) => {
                    let minute = slot_for(Tier::Overflow, self.slab.due_ms(index));
                    if next == NIL {
                        self.overflow.remove(&minute);
                    } else {
                        *self
                            .overflow
                            .get_mut(&minute)
                            .expect("overflow list of a head") = next;
                    }
                }
                (tier, list) => self.ring(tier).set_head(list, next),
            }
        }
        if next != NIL {
            self.slab.set_prev(next, prev);
        }
    }

    /// Removes the head of ms slot `slot` and hands it out.
    #[inline]
    fn fire(&mut self, slot: usize) -> (TimerKey, u64, T) {
        let index = self.ms.head(slot);
        self.unlink(index);
        let (due_ms, value, generation) = self.slab.remove(index);
        (TimerKey { index, generation }, due_ms, value)
    }
}

impl<T> fmt::Debug for TimingWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimingWheel")
            .field("len", &self.len())
            .field("now_ms", &self.now_ms)
            .field("next_due", &self.next_due())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
