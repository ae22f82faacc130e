//! The rings of the wheel, their slot arithmetic and their occupancy bitmaps.
//!
//! Each tier is calendar-aligned on absolute time (a slot's index depends only on the due
//! time, never on when the timer was inserted):
//!
//! | tier | slot | held in | window, with the wheel at second `S`, minute `M` |
//! |---|---|---|---|
//! | [`Tier::Ms`] | 1 ms | a ring of 2 000 slots | seconds `S` and `S + 1` |
//! | [`Tier::Second`] | 1 s | a ring of 120 slots | minutes `M` and `M + 1` |
//! | [`Tier::Minute`] | 1 min | key spaces in a ring of 3 840 = 64 hour buckets of 60 | minutes `M + 2 .. M + 3840` |
//! | [`Tier::Overflow`] | 1 min | key spaces in a `BTreeMap` | beyond |
//!
//! The two rings of items ([`Level`]) span one period more than the "current" one so that the
//! next period can be filled ahead of time (look-ahead cascading, see `mod.rs`): the slots of
//! the next second are the slots of the previous one, which are empty by then. The minute
//! tiers hold far timers in their minutes' key spaces (`spaces.rs`), sorted into a run a minute
//! ahead (`run.rs`).
//!
//! Every slot of a ring is a list of blocks of items (`block.rs`). A bit per slot says whether
//! it holds a block, and a summary bit per 64-slot word says whether the word is non-zero
//! ([`Occupancy`], which the key spaces' ring uses too), so the first occupied slot of a ring is
//! found with at most four word reads, however many slots are empty.

use std::mem::ManuallyDrop;

#[cfg(doc)]
use super::block::SMALL_BLOCK_ITEMS;
use super::block::{Item, Pool, Slot};

/// Milliseconds in a second.
pub(crate) const MS_PER_SECOND: u64 = 1_000;
/// Milliseconds in a minute.
pub(crate) const MS_PER_MINUTE: u64 = 60 * MS_PER_SECOND;
/// Milliseconds in an hour: the width of an hour bucket.
pub(crate) const MS_PER_HOUR: u64 = 60 * MS_PER_MINUTE;

/// Slots of the millisecond ring: the current second and the next one.
pub(crate) const MS_SLOTS: usize = 2 * MS_PER_SECOND as usize;
/// Slots of the second ring: the current minute and the next one.
pub(crate) const SECOND_SLOTS: usize = 2 * 60;
/// Hour buckets resident in the minute ring; later timers wait in the overflow.
pub const HORIZON_HOURS: usize = 64;
/// Slots of the minute ring: 60 minute slots for each resident hour bucket.
pub(crate) const MINUTE_SLOTS: usize = HORIZON_HOURS * 60;

// A ring is a whole number of periods of the tier above it, so that ring index and calendar agree.
const _: () = assert!((MS_SLOTS as u64).is_multiple_of(MS_PER_SECOND));
const _: () = assert!(SECOND_SLOTS.is_multiple_of(60));
const _: () = assert!(MINUTE_SLOTS.is_multiple_of(60));
// Look-ahead needs room for the next period beside the current one.
const _: () = assert!(MS_SLOTS as u64 >= 2 * MS_PER_SECOND);
const _: () = assert!(SECOND_SLOTS >= 2 * 60);
const _: () = assert!(MINUTE_SLOTS >= 2 * 60);
// One summary word covers a ring: at most 64 words of 64 slots.
const _: () = assert!(MS_SLOTS <= 64 * 64 && SECOND_SLOTS <= 64 * 64 && MINUTE_SLOTS <= 64 * 64);

/// The tier a timer lives in, coarser from top to bottom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tier {
    /// Exact millisecond slots of the current and the next second.
    Ms,
    /// Second slots of the current and the next minute.
    Second,
    /// Minute slots of the resident hour buckets.
    Minute,
    /// Beyond the resident horizon.
    Overflow,
}

/// The tier of a timer due at `due_ms` when the wheel stands at `now_ms` (`due_ms >= now_ms`).
///
/// The finest ring whose window holds `due_ms` wins, which keeps cascades to at most two per
/// timer (minute to second, second to millisecond).
pub(crate) fn level_for(now_ms: u64, due_ms: u64) -> Tier {
    debug_assert!(due_ms >= now_ms);
    if due_ms / MS_PER_SECOND <= now_ms / MS_PER_SECOND + 1 {
        Tier::Ms
    } else if due_ms / MS_PER_MINUTE <= now_ms / MS_PER_MINUTE + 1 {
        Tier::Second
    } else if due_ms / MS_PER_MINUTE < now_ms / MS_PER_MINUTE + MINUTE_SLOTS as u64 {
        Tier::Minute
    } else {
        Tier::Overflow
    }
}

/// The ring slot of `due_ms` in `tier`: absolute time modulo the ring, so calendar-aligned.
///
/// For [`Tier::Overflow`] this is the due minute (the overflow map's key), not a ring index.
pub(crate) fn slot_for(tier: Tier, due_ms: u64) -> u64 {
    match tier {
        Tier::Ms => due_ms % MS_SLOTS as u64,
        Tier::Second => (due_ms / MS_PER_SECOND) % SECOND_SLOTS as u64,
        Tier::Minute => (due_ms / MS_PER_MINUTE) % MINUTE_SLOTS as u64,
        Tier::Overflow => due_ms / MS_PER_MINUTE,
    }
}

/// How many slots lie from ring slot `from` forward to ring slot `to`, wrapping around.
pub(crate) fn ring_distance(from: usize, to: usize, slots: usize) -> u64 {
    debug_assert!(from < slots && to < slots);
    ((to + slots - from) % slots) as u64
}

/// One ring: its slots plus a two-level occupancy bitmap.
pub(crate) struct Level<T> {
    /// Allocated at the first write: until then every slot is empty. A wheel that never
    /// uses a ring costs neither its allocation nor a pass over its slots when dropped (an
    /// engine opens a fresh wheel at every open, and the simulation and the fuzzer open
    /// thousands).
    ///
    /// `ManuallyDrop`: dropping the ring drops only the slots `owned` names (a pass over every
    /// slot of every ring was a twentieth of a small engine's open and close).
    slots: Vec<ManuallyDrop<Slot<T>>>,
    /// Where [`Level::slot`] points for a ring whose slots are not allocated yet.
    no_slot: Slot<T>,
    /// How many slots the ring has.
    len: usize,
    /// Whether new blocks start small and grow (see [`SMALL_BLOCK_ITEMS`]).
    small_blocks: bool,
    occupied: Occupancy,
    /// Slots that may hold an allocation (written since they were last taken out): a slot
    /// emptied by pops keeps its list of blocks for the next item.
    owned: Box<[u64]>,
}

impl<T> Drop for Level<T> {
    fn drop(&mut self) {
        for (w, &word) in self.owned.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let slot = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                drop(std::mem::take(&mut *self.slots[slot]));
            }
        }
    }
}

impl<T: Copy> Level<T> {
    /// An empty ring of `slots` slots, whose new blocks start small if `small_blocks`.
    pub(crate) fn new(slots: usize, small_blocks: bool) -> Self {
        assert!(slots > 0 && slots <= 64 * 64);
        Self {
            slots: Vec::new(),
            no_slot: Slot::default(),
            len: slots,
            small_blocks,
            occupied: Occupancy::new(slots),
            owned: vec![0; slots.div_ceil(64)].into_boxed_slice(),
        }
    }

    /// The slots, allocated now if they were not.
    #[inline]
    fn slots_mut(&mut self) -> &mut [ManuallyDrop<Slot<T>>] {
        if self.slots.is_empty() {
            self.allocate();
        }
        &mut self.slots
    }

    #[cold]
    #[inline(never)]
    fn allocate(&mut self) {
        self.slots = (0..self.len)
            .map(|_| ManuallyDrop::new(Slot::default()))
            .collect();
    }

    #[inline]
    fn mark(&mut self, slot: usize) {
        // Every slot that gets contents may own an allocation from then on.
        self.owned[slot / 64] |= 1u64 << (slot % 64);
        self.occupied.mark(slot);
    }

    #[inline]
    fn unmark(&mut self, slot: usize) {
        self.occupied.unmark(slot);
    }

    /// Appends an item to `slot`.
    #[inline]
    pub(crate) fn push(&mut self, slot: usize, item: Item<T>, pool: &mut Pool<T>) {
        if self.slots.is_empty() {
            self.allocate();
        }
        if self.slots[slot].is_empty() {
            self.mark(slot);
        }
        self.slots[slot].push(item, pool, self.small_blocks);
    }

    /// Takes the last item out of `slot`, keeping the bitmap in step.
    #[inline]
    pub(crate) fn pop(&mut self, slot: usize, pool: &mut Pool<T>) -> Option<Item<T>> {
        if self.slots.is_empty() {
            return None;
        }
        let item = self.slots[slot].pop(pool);
        if self.slots[slot].is_empty() {
            self.unmark(slot);
        }
        item
    }

    /// Takes the whole contents of `slot` out.
    #[inline]
    pub(crate) fn take(&mut self, slot: usize) -> Slot<T> {
        self.unmark(slot);
        if self.slots.is_empty() {
            return Slot::default();
        }
        self.owned[slot / 64] &= !(1u64 << (slot % 64));
        std::mem::take(&mut *self.slots[slot])
    }

    /// Puts contents into the empty `slot`.
    pub(crate) fn put(&mut self, slot: usize, contents: Slot<T>) {
        assert!(self.slot(slot).is_empty(), "put onto occupied slot {slot}");
        if contents.is_empty() {
            return;
        }
        self.mark(slot);
        *self.slots_mut()[slot] = contents;
    }

    /// The contents of `slot`, to read or to fire from; [`settle`](Self::settle) after a fire
    /// may have emptied it.
    #[inline]
    pub(crate) fn slot(&self, slot: usize) -> &Slot<T> {
        match self.slots.get(slot) {
            Some(contents) => contents,
            None => {
                assert!(slot < self.len, "slot {slot} of a ring of {}", self.len);
                &self.no_slot
            }
        }
    }

    #[inline]
    pub(crate) fn slot_mut(&mut self, slot: usize) -> &mut Slot<T> {
        &mut self.slots_mut()[slot]
    }

    /// Brings the bitmap in step after [`slot_mut`](Self::slot_mut) changed `slot`.
    pub(crate) fn settle(&mut self, slot: usize) {
        if self.slot(slot).is_empty() {
            self.unmark(slot);
        } else {
            self.mark(slot);
        }
    }

    /// Whether `slot` holds no timer.
    #[inline]
    pub(crate) fn is_empty_slot(&self, slot: usize) -> bool {
        !self.occupied.is_set(slot)
    }

    /// The first occupied slot at or after `from`, going around the ring once.
    #[inline]
    pub(crate) fn first_from(&self, from: usize) -> Option<usize> {
        self.occupied.first_from(from)
    }
}

/// A bit per slot of a ring of at most 64 × 64 slots, and a summary bit per 64-slot word that
/// says whether the word is non-zero: the first set bit from anywhere is at most four word
/// reads away, however many are clear.
pub(crate) struct Occupancy {
    words: Box<[u64]>,
    /// Bit `w` is set when `words[w] != 0`.
    summary: u64,
}

impl Occupancy {
    pub(crate) fn new(slots: usize) -> Self {
        assert!(slots > 0 && slots <= 64 * 64);
        Self {
            words: vec![0; slots.div_ceil(64)].into_boxed_slice(),
            summary: 0,
        }
    }

    #[inline]
    pub(crate) fn mark(&mut self, slot: usize) {
        self.words[slot / 64] |= 1u64 << (slot % 64);
        self.summary |= 1u64 << (slot / 64);
    }

    #[inline]
    pub(crate) fn unmark(&mut self, slot: usize) {
        let w = slot / 64;
        self.words[w] &= !(1u64 << (slot % 64));
        if self.words[w] == 0 {
            self.summary &= !(1u64 << w);
        }
    }

    #[inline]
    pub(crate) fn is_set(&self, slot: usize) -> bool {
        // The summary first: an empty ring (the millisecond ring, when every timer is in the
        // minute's run) answers without a read of its words.
        self.summary & (1u64 << (slot / 64)) != 0
            && self.words[slot / 64] & (1u64 << (slot % 64)) != 0
    }

    /// The first set slot at or after `from`, going around the ring once.
    #[inline]
    pub(crate) fn first_from(&self, from: usize) -> Option<usize> {
        if self.summary == 0 {
            return None;
        }
        let (w, b) = (from / 64, from % 64);
        let here = self.words[w] & (!0u64 << b);
        if here != 0 {
            return Some(w * 64 + here.trailing_zeros() as usize);
        }
        // Later words, then (wrapping) earlier words, then the low bits of word `w`.
        let later = if w + 1 < 64 {
            self.summary & (!0u64 << (w + 1))
        } else {
            0
        };
        let earlier = self.summary & ((1u64 << w) - 1);
        for candidates in [later, earlier] {
            if candidates != 0 {
                let w2 = candidates.trailing_zeros() as usize;
                return Some(w2 * 64 + self.words[w2].trailing_zeros() as usize);
            }
        }
        let low = self.words[w] & ((1u64 << b) - 1);
        (low != 0).then(|| w * 64 + low.trailing_zeros() as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_for_picks_the_finest_ring_holding_the_due_time() {
        let now = 7 * MS_PER_HOUR + 59 * MS_PER_MINUTE + 58_500; // 07:59:58.500
        assert_eq!(level_for(now, now), Tier::Ms);
        assert_eq!(level_for(now, now + 1_499), Tier::Ms); // 07:59:59.999
        assert_eq!(level_for(now, now + 1_500), Tier::Second); // 08:00:00.000
        assert_eq!(level_for(now, now + 61_499), Tier::Second); // 08:00:59.999
        assert_eq!(level_for(now, now + 61_500), Tier::Minute); // 08:01:00.000
        let horizon_start = (now / MS_PER_MINUTE + MINUTE_SLOTS as u64) * MS_PER_MINUTE;
        assert_eq!(level_for(now, horizon_start - 1), Tier::Minute);
        assert_eq!(level_for(now, horizon_start), Tier::Overflow);
        assert_eq!(level_for(now, u64::MAX), Tier::Overflow);
        assert_eq!(level_for(u64::MAX, u64::MAX), Tier::Ms);
    }

    #[test]
    fn slot_for_is_calendar_aligned() {
        let hour = 3 * MS_PER_HOUR;
        assert_eq!(slot_for(Tier::Ms, hour + 1_234), 1_234);
        assert_eq!(slot_for(Tier::Ms, hour + 2_001), 1);
        assert_eq!(slot_for(Tier::Second, hour + 61_000), 61);
        assert_eq!(slot_for(Tier::Second, hour + 121_000), 1);
        // The minute ring is 64 hour buckets of 60 minute slots: bucket (hour % 64) * 60 + minute.
        assert_eq!(slot_for(Tier::Minute, hour + 5 * MS_PER_MINUTE), 3 * 60 + 5);
        assert_eq!(
            slot_for(Tier::Minute, 67 * MS_PER_HOUR + 5 * MS_PER_MINUTE),
            3 * 60 + 5
        );
        assert_eq!(slot_for(Tier::Overflow, u64::MAX), u64::MAX / MS_PER_MINUTE);
    }

    #[test]
    fn ring_distance_wraps() {
        assert_eq!(ring_distance(5, 5, 10), 0);
        assert_eq!(ring_distance(5, 7, 10), 2);
        assert_eq!(ring_distance(7, 5, 10), 8);
    }

    fn item() -> Item<u64> {
        Item {
            due_ms: 0,
            index: 0,
            generation: 1,
            value: 0,
        }
    }

    #[test]
    fn a_ring_allocates_its_slots_at_its_first_write_only() {
        let (mut level, mut pool) = (Level::new(MINUTE_SLOTS, false), Pool::default());
        // Reads, takes, pops and empty puts of a fresh ring see empty slots, allocate nothing.
        assert!(level.slot(MINUTE_SLOTS - 1).is_empty());
        assert!(level.take(7).is_empty());
        assert_eq!(level.pop(7, &mut pool), None);
        level.put(9, Slot::default());
        level.settle(9);
        assert_eq!(level.first_from(0), None);
        assert!(
            level.slots.is_empty(),
            "nothing written: no slots allocated"
        );
        level.push(3_000, item(), &mut pool);
        assert_eq!(level.slots.len(), MINUTE_SLOTS);
        assert_eq!(level.first_from(0), Some(3_000));
        assert_eq!(level.pop(3_000, &mut pool), Some(item()));
        assert_eq!(level.first_from(0), None);
    }

    /// Dropping a ring drops only the slots `owned` names, so every slot holding an
    /// allocation must be named there, through pushes, pops, takes and puts.
    #[test]
    fn every_slot_holding_an_allocation_is_owned() {
        let (mut level, mut pool) = (Level::new(MS_SLOTS, true), Pool::default());
        let check = |level: &Level<u64>| {
            for (slot, contents) in level.slots.iter().enumerate() {
                let owned = level.owned[slot / 64] & (1u64 << (slot % 64)) != 0;
                if contents.blocks.capacity() > 0 {
                    assert!(owned, "slot {slot} holds blocks and is not owned");
                }
            }
        };
        let mut seed = 7u64;
        for step in 0..20_000u32 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let slot = (seed >> 33) as usize % MS_SLOTS;
            match (seed >> 60) % 4 {
                0 | 1 => level.push(slot, item(), &mut pool),
                2 => {
                    level.pop(slot, &mut pool);
                }
                _ => {
                    let taken = level.take(slot);
                    let back = (slot + 1) % MS_SLOTS;
                    if level.slot(back).is_empty() {
                        level.put(back, taken);
                    } else {
                        drop(taken);
                    }
                }
            }
            if step % 1_000 == 0 {
                check(&level);
            }
        }
        check(&level);
    }

    #[test]
    #[should_panic(expected = "of a ring of")]
    fn a_slot_past_the_ring_is_refused_before_the_first_write_too() {
        Level::<u64>::new(SECOND_SLOTS, false).slot(SECOND_SLOTS);
    }

    #[test]
    fn first_from_finds_the_next_occupied_slot_around_the_ring() {
        let (mut level, mut pool) = (Level::new(MS_SLOTS, true), Pool::default());
        assert_eq!(level.first_from(0), None);
        level.push(1_999, item(), &mut pool);
        level.push(64, item(), &mut pool);
        level.push(3, item(), &mut pool);
        assert_eq!(level.first_from(0), Some(3));
        assert_eq!(level.first_from(3), Some(3));
        assert_eq!(level.first_from(4), Some(64));
        assert_eq!(level.first_from(65), Some(1_999));
        assert_eq!(level.first_from(1_999), Some(1_999));
        assert_eq!(level.pop(1_999, &mut pool), Some(item()));
        assert_eq!(level.first_from(65), Some(3), "wraps to the start");
        level.take(3).clear(&mut pool);
        assert_eq!(
            level.first_from(65),
            Some(64),
            "wraps to the low bits of the same word"
        );
        assert_eq!(level.pop(64, &mut pool), Some(item()));
        assert_eq!(level.pop(64, &mut pool), None);
        assert_eq!(level.occupied.summary, 0);
        assert_eq!(level.first_from(65), None);
    }

    #[test]
    fn a_slot_stays_occupied_while_it_holds_a_block() {
        let (mut level, mut pool) = (Level::new(SECOND_SLOTS, false), Pool::default());
        level.push(5, item(), &mut pool);
        level.push(5, item(), &mut pool);
        assert!(!level.is_empty_slot(5));
        level.pop(5, &mut pool);
        assert!(!level.is_empty_slot(5));
        assert_eq!(level.first_from(0), Some(5));
        level.slot_mut(5).blocks[0].clear();
        level.settle(5);
        assert!(
            !level.is_empty_slot(5),
            "an empty block still counts until it is dropped"
        );
        level.slot_mut(5).clear(&mut pool);
        level.settle(5);
        assert!(level.is_empty_slot(5));
        assert_eq!(level.first_from(0), None);
    }

    #[test]
    fn first_from_matches_a_linear_scan() {
        let (mut level, mut pool) = (Level::new(SECOND_SLOTS, false), Pool::default());
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let slot = (seed % SECOND_SLOTS as u64) as usize;
            if level.is_empty_slot(slot) {
                level.push(slot, item(), &mut pool);
            } else {
                level.take(slot).clear(&mut pool);
            }
            let from = ((seed >> 32) % SECOND_SLOTS as u64) as usize;
            let scan = (0..SECOND_SLOTS)
                .map(|d| (from + d) % SECOND_SLOTS)
                .find(|&s| !level.is_empty_slot(s));
            assert_eq!(level.first_from(from), scan);
        }
    }
}
