//! The slab: every pending timer is one 32-byte entry (with a `u64` value), addressed by a `u32`
//! index, reused through a free list, and guarded by a generation so that a stale key never
//! reaches the entry's next occupant.
//!
//! Entries live in chunks of 65 536 (2 MiB with a `u64` value) rather than one `Vec`, so growing
//! never copies the timers already there (no pause of a 300 MB `realloc` at 10M timers) and never
//! leaves half of a doubled capacity unused.
//!
//! Each occupied entry is a node of the doubly linked list of one wheel slot. `prev` is the
//! previous node, or, for the head of a list, [`HEAD`] plus the slot id, so that unlinking any
//! node, the head included, needs no search and no per-entry slot field.

use std::num::NonZeroU32;

/// "No entry": the end of a list, an empty slot, an empty free list.
pub(crate) const NIL: u32 = u32::MAX - 1;
/// Flag in `prev` marking a list head; the low bits are then the slot id.
pub(crate) const HEAD: u32 = 1 << 31;
/// Entries the slab can hold: indices stay below [`HEAD`] so that `prev` stays unambiguous.
pub(crate) const ENTRIES_MAX: usize = HEAD as usize;

const CHUNK_BITS: u32 = 16;
const CHUNK_LEN: usize = 1 << CHUNK_BITS;
const CHUNK_MASK: u32 = (CHUNK_LEN - 1) as u32;

const _: () = assert!(NIL > HEAD && NIL != u32::MAX);
const _: () = assert!(ENTRIES_MAX.is_multiple_of(CHUNK_LEN));
// The budget the issue sets: a timer with a `u64` value costs 32 bytes.
const _: () = assert!(size_of::<Entry<u64>>() == 32);

/// A `next` link stored inverted, so that the all-zero pattern is free to tell a vacant entry
/// from an occupied one at no cost in size (the enum below fits in 24 bytes, not 32).
#[derive(Clone, Copy)]
struct Next(NonZeroU32);

impl Next {
    #[inline]
    fn new(index: u32) -> Self {
        Self(NonZeroU32::new(!index).expect("u32::MAX is never a link"))
    }

    #[inline]
    fn get(self) -> u32 {
        !self.0.get()
    }
}

/// A pending timer.
pub(crate) struct Occupied<T> {
    /// The due time the caller asked for (never clamped).
    pub(crate) due_ms: u64,
    pub(crate) value: T,
    prev: u32,
    next: Next,
}

enum Slot<T> {
    Occupied(Occupied<T>),
    Vacant { next_free: u32 },
}

struct Entry<T> {
    /// Bumped each time the entry is freed, so keys of former occupants no longer match.
    generation: u32,
    slot: Slot<T>,
}

/// Chunked storage of the timers.
pub(crate) struct Slab<T> {
    chunks: Vec<Vec<Entry<T>>>,
    /// Entries ever created (occupied or vacant); the next fresh index.
    created: u32,
    free_head: u32,
    len: usize,
}

impl<T> Slab<T> {
    /// An empty slab with room for `capacity` timers before it allocates again.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let mut slab = Self {
            chunks: Vec::new(),
            created: 0,
            free_head: NIL,
            len: 0,
        };
        let capacity = capacity.min(ENTRIES_MAX);
        let mut left = capacity;
        while left > 0 {
            let n = left.min(CHUNK_LEN);
            // Only the first chunk may be short, and it grows (up to a full chunk) when filled.
            let n = if slab.chunks.is_empty() { n } else { CHUNK_LEN };
            slab.chunks.push(Vec::with_capacity(n));
            left = left.saturating_sub(n);
        }
        slab
    }

    /// Occupied entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Timers the slab holds without allocating.
    pub(crate) fn capacity(&self) -> usize {
        match self.chunks.len() {
            0 => 0,
            // Chunk 0 is full before chunk 1 exists, and later chunks are allocated whole.
            1 => self.chunks[0].capacity(),
            n => n * CHUNK_LEN,
        }
    }

    #[inline]
    fn entry(&self, index: u32) -> &Entry<T> {
        &self.chunks[(index >> CHUNK_BITS) as usize][(index & CHUNK_MASK) as usize]
    }

    #[inline]
    fn entry_mut(&mut self, index: u32) -> &mut Entry<T> {
        &mut self.chunks[(index >> CHUNK_BITS) as usize][(index & CHUNK_MASK) as usize]
    }

    /// The pending timer at `index`; the caller knows it is occupied.
    #[inline]
    pub(crate) fn get(&self, index: u32) -> &Occupied<T> {
        match &self.entry(index).slot {
            Slot::Occupied(o) => o,
            Slot::Vacant { .. } => panic!("slab entry {index} is vacant"),
        }
    }

    #[inline]
    fn get_mut(&mut self, index: u32) -> &mut Occupied<T> {
        match &mut self.entry_mut(index).slot {
            Slot::Occupied(o) => o,
            Slot::Vacant { .. } => panic!("slab entry {index} is vacant"),
        }
    }

    /// Whether `index` holds a pending timer of generation `generation`.
    #[inline]
    pub(crate) fn contains(&self, index: u32, generation: u32) -> bool {
        if index >= self.created {
            return false;
        }
        let entry = self.entry(index);
        entry.generation == generation && matches!(entry.slot, Slot::Occupied(_))
    }

    /// Stores a timer, unlinked; returns its index and generation.
    pub(crate) fn insert(&mut self, due_ms: u64, value: T) -> (u32, u32) {
        let occupied = Slot::Occupied(Occupied {
            due_ms,
            value,
            prev: NIL,
            next: Next::new(NIL),
        });
        self.len += 1;
        if self.free_head != NIL {
            let index = self.free_head;
            let entry = self.entry_mut(index);
            let Slot::Vacant { next_free } = entry.slot else {
                panic!("free list reached occupied entry {index}");
            };
            entry.slot = occupied;
            let generation = entry.generation;
            self.free_head = next_free;
            return (index, generation);
        }
        assert!(
            (self.created as usize) < ENTRIES_MAX,
            "timing wheel full: {ENTRIES_MAX} timers"
        );
        let index = self.created;
        let chunk = (index >> CHUNK_BITS) as usize;
        if chunk == self.chunks.len() {
            self.chunks
                .push(Vec::with_capacity(if chunk == 0 { 16 } else { CHUNK_LEN }));
        }
        let entries = &mut self.chunks[chunk];
        if entries.len() == entries.capacity() {
            // Only chunk 0 starts short; double it, but never past a full chunk.
            let target = (entries.capacity() * 2).clamp(16, CHUNK_LEN);
            entries.reserve_exact(target - entries.len());
        }
        entries.push(Entry {
            generation: 0,
            slot: occupied,
        });
        self.created += 1;
        (index, 0)
    }

    /// Frees the timer at `index` (which must be unlinked by the caller); returns its due time,
    /// value and the generation its key carried.
    pub(crate) fn remove(&mut self, index: u32) -> (u64, T, u32) {
        let next_free = self.free_head;
        let entry = self.entry_mut(index);
        let Slot::Occupied(o) = std::mem::replace(&mut entry.slot, Slot::Vacant { next_free })
        else {
            panic!("removing vacant slab entry {index}");
        };
        let generation = entry.generation;
        entry.generation = generation.wrapping_add(1);
        self.free_head = index;
        self.len -= 1;
        (o.due_ms, o.value, generation)
    }

    /// The due time of the pending timer at `index`.
    #[inline]
    pub(crate) fn due_ms(&self, index: u32) -> u64 {
        self.get(index).due_ms
    }

    /// Sets the due time of the pending timer at `index`.
    #[inline]
    pub(crate) fn set_due_ms(&mut self, index: u32, due_ms: u64) {
        self.get_mut(index).due_ms = due_ms;
    }

    /// The `(prev, next)` links of the pending timer at `index`.
    #[inline]
    pub(crate) fn links(&self, index: u32) -> (u32, u32) {
        let o = self.get(index);
        (o.prev, o.next.get())
    }

    /// Sets both links of the pending timer at `index`.
    #[inline]
    pub(crate) fn set_links(&mut self, index: u32, prev: u32, next: u32) {
        let o = self.get_mut(index);
        o.prev = prev;
        o.next = Next::new(next);
    }

    #[inline]
    pub(crate) fn set_prev(&mut self, index: u32, prev: u32) {
        self.get_mut(index).prev = prev;
    }

    #[inline]
    pub(crate) fn set_next(&mut self, index: u32, next: u32) {
        self.get_mut(index).next = Next::new(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_entries_are_reused_with_a_new_generation() {
        let mut slab = Slab::with_capacity(0);
        let (a, ga) = slab.insert(10, "a");
        let (b, _) = slab.insert(20, "b");
        assert_eq!(slab.len(), 2);
        assert!(slab.contains(a, ga));
        assert_eq!(slab.remove(a), (10, "a", ga));
        assert!(!slab.contains(a, ga), "a stale key no longer matches");
        let (c, gc) = slab.insert(30, "c");
        assert_eq!(c, a, "the free list reuses the entry");
        assert_ne!(gc, ga);
        assert!(slab.contains(c, gc) && !slab.contains(c, ga));
        assert_eq!(slab.due_ms(b), 20);
        assert!(!slab.contains(99, 0), "never created");
    }

    #[test]
    fn links_round_trip_including_nil() {
        let mut slab = Slab::with_capacity(4);
        let (a, _) = slab.insert(1, ());
        assert_eq!(slab.links(a), (NIL, NIL));
        slab.set_links(a, HEAD | 5, 3);
        assert_eq!(slab.links(a), (HEAD | 5, 3));
        slab.set_next(a, NIL);
        slab.set_prev(a, 0);
        assert_eq!(slab.links(a), (0, NIL));
    }

    #[test]
    fn grows_across_chunks_without_moving_entries() {
        let mut slab = Slab::with_capacity(10);
        for i in 0..(CHUNK_LEN as u64 + 10) {
            let (index, _) = slab.insert(i, i);
            assert_eq!(index as u64, i);
        }
        assert_eq!(slab.chunks[0].capacity(), CHUNK_LEN);
        assert_eq!(slab.chunks.len(), 2);
        assert_eq!(slab.due_ms(CHUNK_LEN as u32 + 3), CHUNK_LEN as u64 + 3);
        assert!(slab.capacity() >= slab.len());
    }

    #[test]
    fn with_capacity_preallocates_whole_chunks() {
        let slab: Slab<u64> = Slab::with_capacity(3 * CHUNK_LEN + 1);
        assert_eq!(slab.chunks.len(), 4);
        assert_eq!(slab.capacity(), 4 * CHUNK_LEN);
    }
}
