//! The slab: one 16-byte entry per timer key (with a `u64` value), addressed by a `u32` index,
//! reused through a free list, and guarded by a generation so that a stale key never reaches the
//! entry's next occupant.
//!
//! The entry does not say where its timer sits in the wheel: the slot holds an [`Item`] naming
//! the entry and the *stamp* it had when the item was placed. Every placement (insert or
//! reschedule) and every removal (cancel or fire) moves the entry's stamp on, so exactly one
//! item per entry, the latest placed while the key is live, carries the current stamp; all
//! others are tombstones, dropped when the wheel next touches them. That is what makes cancel
//! one write to one entry, and cascades sequential copies of items.
//!
//! Entries live in chunks of 131 072 (2 MiB with a `u64` value) rather than one `Vec`, so growing
//! never copies the entries already there (no pause of a 160 MB `realloc` at 10M timers). The
//! first chunk is a `Vec` that grows by doubling (a small wheel stays small); the others are
//! [`HugeVec`]s, advised for huge pages: a fire reads entries at random, and on 4 KiB pages
//! that is a TLB miss each at millions of timers (see `timewheel-mem`).
//!
//! [`Item`]: super::block::Item

/// Entries the slab can hold.
pub(crate) const ENTRIES_MAX: usize = 1 << 31;

const CHUNK_BITS: u32 = 17;
const CHUNK_LEN: usize = 1 << CHUNK_BITS;
const CHUNK_MASK: u32 = (CHUNK_LEN - 1) as u32;

const _: () = assert!(ENTRIES_MAX.is_multiple_of(CHUNK_LEN));
// The budget: a key with a `u64` value costs 16 bytes here, and its item 16 more in a slot.
const _: () = assert!(size_of::<Entry<u64>>() == 16);

#[derive(Clone, Copy)]
struct Entry<T> {
    /// Odd while the key is live, even while the entry is free: bumped at insert and at
    /// removal, so keys of former occupants no longer match.
    generation: u32,
    /// Bumped at every placement and removal; the live item carries the current value.
    stamp: u32,
    /// The value of the live key; stale (but initialised) while the entry is free.
    value: T,
}

/// A freshly occupied entry: where its key and its first item come from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Taken {
    pub(crate) index: u32,
    pub(crate) generation: u32,
    pub(crate) stamp: u32,
}

/// Chunked storage of the keys.
pub(crate) struct Slab<T> {
    /// Entries `0 .. CHUNK_LEN`.
    first: Vec<Entry<T>>,
    /// Chunk `i` holds entries `(i + 1) * CHUNK_LEN ..`; every one is allocated whole.
    chunks: Vec<HugeVec<Entry<T>>>,
    /// Entries ever created (occupied or free); the next fresh index.
    created: u32,
    free: FreeList,
    len: usize,
}

/// A stack of free entry indices in chunks, so that it never copies itself to grow.
#[derive(Default)]
struct FreeList {
    /// Every chunk but the top one is full.
    chunks: Vec<Vec<u32>>,
    /// An emptied chunk kept for the next push past a full top, so that pushes and pops at a
    /// chunk's edge do not allocate and free in turn.
    spare: Option<Vec<u32>>,
}

impl FreeList {
    #[inline]
    fn push(&mut self, index: u32) {
        match self.chunks.last_mut() {
            Some(top) if top.len() < CHUNK_LEN => top.push(index),
            _ => {
                let mut top = self
                    .spare
                    .take()
                    .unwrap_or_else(|| Vec::with_capacity(CHUNK_LEN));
                top.push(index);
                self.chunks.push(top);
            }
        }
    }

    #[inline]
    fn pop(&mut self) -> Option<u32> {
        let top = self.chunks.last_mut()?;
        let index = top.pop();
        if top.is_empty() {
            self.spare = self.chunks.pop();
        }
        index
    }
}

use timewheel_mem::HugeVec;

impl<T: Copy> Slab<T> {
    /// An empty slab with room for `capacity` keys before it allocates again.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let mut slab = Self {
            first: Vec::with_capacity(capacity.clamp(16, CHUNK_LEN)),
            chunks: Vec::new(),
            created: 0,
            free: FreeList::default(),
            len: 0,
        };
        let mut left = capacity.min(ENTRIES_MAX).saturating_sub(CHUNK_LEN);
        while left > 0 {
            slab.chunks.push(HugeVec::with_capacity(CHUNK_LEN));
            left = left.saturating_sub(CHUNK_LEN);
        }
        slab
    }

    /// Live keys.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Keys the slab holds without allocating.
    pub(crate) fn capacity(&self) -> usize {
        // The first chunk is full before the second is used, and later ones are whole.
        match self.chunks.len() {
            0 => self.first.capacity(),
            n => (n + 1) * CHUNK_LEN,
        }
    }

    #[inline]
    fn entry(&self, index: u32) -> &Entry<T> {
        match (index >> CHUNK_BITS) as usize {
            0 => &self.first[index as usize],
            chunk => &self.chunks[chunk - 1][(index & CHUNK_MASK) as usize],
        }
    }

    #[inline]
    fn entry_mut(&mut self, index: u32) -> &mut Entry<T> {
        match (index >> CHUNK_BITS) as usize {
            0 => &mut self.first[index as usize],
            chunk => &mut self.chunks[chunk - 1][(index & CHUNK_MASK) as usize],
        }
    }

    /// Whether the key `(index, generation)` is live.
    #[inline]
    pub(crate) fn is_live(&self, index: u32, generation: u32) -> bool {
        // Live generations are odd, so a free entry never matches a key.
        index < self.created && self.entry(index).generation == generation
    }

    /// The stamp of entry `index`, read to bring its cache line in ahead of a fire.
    #[inline]
    pub(crate) fn stamp(&self, index: u32) -> u32 {
        self.entry(index).stamp
    }

    /// Whether an item of entry `index` placed with `stamp` is the live one.
    #[inline]
    pub(crate) fn is_current(&self, index: u32, stamp: u32) -> bool {
        self.entry(index).stamp == stamp
    }

    /// The value of the live entry `index`.
    #[inline]
    pub(crate) fn value(&self, index: u32) -> T {
        self.entry(index).value
    }

    /// Replaces the value of the live entry `index`.
    #[inline]
    pub(crate) fn set_value(&mut self, index: u32, value: T) {
        self.entry_mut(index).value = value;
    }

    /// Occupies an entry with `value` for its first placement.
    pub(crate) fn insert(&mut self, value: T) -> Taken {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let entry = self.entry_mut(index);
            assert!(
                entry.generation & 1 == 0,
                "free list reached live entry {index}"
            );
            entry.generation = entry.generation.wrapping_add(1);
            entry.stamp = entry.stamp.wrapping_add(1);
            entry.value = value;
            return Taken {
                index,
                generation: entry.generation,
                stamp: entry.stamp,
            };
        }
        assert!(
            (self.created as usize) < ENTRIES_MAX,
            "timing wheel full: {ENTRIES_MAX} timers"
        );
        let index = self.created;
        let entry = Entry {
            generation: 1,
            stamp: 0,
            value,
        };
        match (index >> CHUNK_BITS) as usize {
            0 => {
                if self.first.len() == self.first.capacity() {
                    // Double it, but never past a full chunk.
                    let target = (self.first.capacity() * 2).clamp(16, CHUNK_LEN);
                    self.first.reserve_exact(target - self.first.len());
                }
                self.first.push(entry);
            }
            chunk => {
                if chunk > self.chunks.len() {
                    self.chunks.push(HugeVec::with_capacity(CHUNK_LEN));
                }
                self.chunks[chunk - 1].push(entry);
            }
        }
        self.created += 1;
        Taken {
            index,
            generation: 1,
            stamp: 0,
        }
    }

    /// A new placement of the live entry `index`: its earlier item becomes a tombstone. Returns
    /// the stamp for the new item.
    #[inline]
    pub(crate) fn replace(&mut self, index: u32) -> u32 {
        let entry = self.entry_mut(index);
        entry.stamp = entry.stamp.wrapping_add(1);
        entry.stamp
    }

    /// Frees the live entry `index` (its item, if still in a slot, becomes a tombstone);
    /// returns its value and the generation its key carried.
    #[inline]
    pub(crate) fn remove(&mut self, index: u32) -> (T, u32) {
        let entry = self.entry_mut(index);
        let generation = entry.generation;
        assert!(generation & 1 == 1, "removing free entry {index}");
        entry.generation = generation.wrapping_add(1);
        entry.stamp = entry.stamp.wrapping_add(1);
        let value = entry.value;
        self.free.push(index);
        self.len -= 1;
        (value, generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_entries_are_reused_with_a_new_generation_and_stamp() {
        let mut slab = Slab::with_capacity(0);
        let a = slab.insert(10u64);
        let b = slab.insert(20);
        assert_eq!(slab.len(), 2);
        assert!(slab.is_live(a.index, a.generation));
        assert!(slab.is_current(a.index, a.stamp));
        assert_eq!(slab.remove(a.index), (10, a.generation));
        assert!(
            !slab.is_live(a.index, a.generation),
            "a stale key no longer matches"
        );
        assert!(
            !slab.is_current(a.index, a.stamp),
            "its item is a tombstone"
        );
        let c = slab.insert(30);
        assert_eq!(c.index, a.index, "the free list reuses the entry");
        assert_ne!(c.generation, a.generation);
        assert!(slab.is_current(c.index, c.stamp) && !slab.is_current(c.index, a.stamp));
        assert!(slab.is_live(c.index, c.generation) && !slab.is_live(c.index, a.generation));
        assert_eq!(slab.value(b.index), 20);
        assert!(!slab.is_live(99, 1), "never created");
    }

    #[test]
    fn a_replacement_makes_the_earlier_item_a_tombstone_and_keeps_the_key() {
        let mut slab = Slab::with_capacity(1);
        let a = slab.insert(1u64);
        let stamp = slab.replace(a.index);
        assert!(!slab.is_current(a.index, a.stamp));
        assert!(slab.is_current(a.index, stamp));
        assert!(slab.is_live(a.index, a.generation));
    }

    #[test]
    fn grows_across_chunks_without_moving_entries() {
        let mut slab = Slab::with_capacity(10);
        for i in 0..(CHUNK_LEN as u64 + 10) {
            assert_eq!(slab.insert(i).index as u64, i);
        }
        assert_eq!(slab.first.capacity(), CHUNK_LEN);
        assert_eq!(slab.chunks.len(), 1);
        assert_eq!(slab.value(CHUNK_LEN as u32 + 3), CHUNK_LEN as u64 + 3);
        assert!(slab.capacity() >= slab.len());
    }

    #[test]
    fn the_free_list_spans_chunks_and_keeps_one_spare() {
        let mut free = FreeList::default();
        for i in 0..(CHUNK_LEN as u32 + 3) {
            free.push(i);
        }
        assert_eq!(free.chunks.len(), 2);
        for i in (0..(CHUNK_LEN as u32 + 3)).rev() {
            assert_eq!(free.pop(), Some(i));
        }
        assert_eq!(free.pop(), None);
        assert!(
            free.chunks.is_empty() && free.spare.is_some(),
            "one chunk kept"
        );
        free.push(7);
        assert!(free.spare.is_none(), "and reused");
        assert_eq!(free.pop(), Some(7));
    }

    #[test]
    fn with_capacity_preallocates_whole_chunks() {
        let slab: Slab<u64> = Slab::with_capacity(3 * CHUNK_LEN + 1);
        assert_eq!(slab.chunks.len(), 3);
        assert_eq!(slab.capacity(), 4 * CHUNK_LEN);
    }
}
