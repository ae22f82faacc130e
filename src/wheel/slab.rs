//! The slab: one entry per timer key, addressed by a `u32` index and reused through a free
//! list, guarded by a generation so that a stale key never reaches the entry's next occupant.
//!
//! An entry has two parts kept apart. The *cold* part (generation and value; 16 bytes with a
//! `u64` value) is what a key reaches: `cancel`, `get`, `set` and `reschedule` read it, and an
//! insert writes it. The *hot* part is two bits of state in a dense bitmap (2.5 MB at 10M
//! keys, where the cold parts take 160 MB): what a fire reads and writes. The item in the slot
//! (see `block.rs`) carries its key and its value, so a fire checks two bits and never reads
//! the cold part: at millions of timers that part is a cache miss per fire at random, the
//! state bitmap stays in cache.
//!
//! An entry's item is in the wheel from its placement until it fires or, once its timer was
//! cancelled or moved, until the wheel drops it as a *tombstone*; only then does the entry go
//! back to the free list. So an entry never has two items, and its state alone says whether
//! its item is live: [`State::Live`] (or [`State::LiveSet`] once `set` replaced the value the
//! item carries, which the fire then reads from the cold part), [`State::Gone`] (cancelled or
//! moved: the item is a tombstone), or [`State::Free`] (no item, on the free list). A move
//! (`reschedule`) therefore takes a new entry and a new key.
//!
//! Cold parts live in chunks of 131 072 rather than one `Vec`, so growing never copies the
//! entries already there (no pause of a 160 MB `realloc` at 10M timers). The first chunk is a
//! `Vec` that grows by doubling (a small wheel stays small); the others are [`HugeVec`]s,
//! advised for huge pages (see `timewheel-mem`). Each chunk has its 32 KiB of state beside it.

use timewheel_mem::HugeVec;

/// Entries the slab can hold.
pub(crate) const ENTRIES_MAX: usize = 1 << 31;

const CHUNK_BITS: u32 = 17;
const CHUNK_LEN: usize = 1 << CHUNK_BITS;
const CHUNK_MASK: u32 = (CHUNK_LEN - 1) as u32;
/// Entries whose states share one `u64`.
const STATES_PER_WORD: u32 = 32;

const _: () = assert!(ENTRIES_MAX.is_multiple_of(CHUNK_LEN));
const _: () = assert!(CHUNK_LEN.is_multiple_of(STATES_PER_WORD as usize));
// The budget: a key with a `u64` value costs 16 bytes here, and its item 24 more in a slot.
const _: () = assert!(size_of::<Cold<u64>>() == 16);

/// What an entry's item is, in two bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum State {
    /// No item: the entry is on the free list (or was never used).
    Free = 0b00,
    /// Its item is live and carries the value.
    Live = 0b01,
    /// Its item is a tombstone: the timer was cancelled or moved.
    Gone = 0b10,
    /// Its item is live, but `set` replaced the value since it was placed: the value is the
    /// cold part's.
    LiveSet = 0b11,
}

impl State {
    #[inline]
    fn from_bits(bits: u64) -> Self {
        match bits & 0b11 {
            0b00 => Self::Free,
            0b01 => Self::Live,
            0b10 => Self::Gone,
            _ => Self::LiveSet,
        }
    }

    #[inline]
    pub(crate) fn is_live(self) -> bool {
        matches!(self, Self::Live | Self::LiveSet)
    }
}

#[derive(Clone, Copy)]
struct Cold<T> {
    /// Odd; moved on by 2 each time the entry is taken again, so that keys of former
    /// occupants no longer match.
    generation: u32,
    /// The value of the live key; stale (but initialised) otherwise.
    value: T,
}

/// A freshly occupied entry: its key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Taken {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// What a fire found in an item's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fired<T> {
    /// The item was a tombstone; dropped.
    Tombstone,
    /// The item is live and fired; the value `set` gave it since it was placed, if any.
    Live(Option<T>),
}

/// Chunked storage of the keys.
pub(crate) struct Slab<T> {
    /// Cold parts of entries `0 .. CHUNK_LEN`.
    first: Vec<Cold<T>>,
    /// Chunk `i` holds entries `(i + 1) * CHUNK_LEN ..`; every one is allocated whole.
    chunks: Vec<HugeVec<Cold<T>>>,
    /// The states of chunk `i`'s entries: two bits each, [`STATES_PER_WORD`] to a word.
    states: Vec<Vec<u64>>,
    /// Entries ever created (occupied or free); the next fresh index.
    created: u32,
    free: FreeList,
    /// Live keys.
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

impl<T: Copy> Slab<T> {
    /// An empty slab with room for `capacity` keys before it allocates again.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let mut slab = Self {
            first: Vec::with_capacity(capacity.clamp(16, CHUNK_LEN)),
            chunks: Vec::new(),
            states: vec![Vec::new()],
            created: 0,
            free: FreeList::default(),
            len: 0,
        };
        let mut left = capacity.min(ENTRIES_MAX).saturating_sub(CHUNK_LEN);
        while left > 0 {
            slab.add_chunk();
            left = left.saturating_sub(CHUNK_LEN);
        }
        slab
    }

    fn add_chunk(&mut self) {
        self.chunks.push(HugeVec::with_capacity(CHUNK_LEN));
        self.states
            .push(vec![0; CHUNK_LEN / STATES_PER_WORD as usize]);
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
    fn cold(&self, index: u32) -> &Cold<T> {
        match (index >> CHUNK_BITS) as usize {
            0 => &self.first[index as usize],
            chunk => &self.chunks[chunk - 1][(index & CHUNK_MASK) as usize],
        }
    }

    #[inline]
    fn cold_mut(&mut self, index: u32) -> &mut Cold<T> {
        match (index >> CHUNK_BITS) as usize {
            0 => &mut self.first[index as usize],
            chunk => &mut self.chunks[chunk - 1][(index & CHUNK_MASK) as usize],
        }
    }

    /// The word holding entry `index`'s state, and the state's shift within it.
    #[inline]
    fn state_word(&self, index: u32) -> (&u64, u32) {
        let word = &self.states[(index >> CHUNK_BITS) as usize]
            [((index & CHUNK_MASK) / STATES_PER_WORD) as usize];
        (word, (index % STATES_PER_WORD) * 2)
    }

    #[inline]
    pub(crate) fn state(&self, index: u32) -> State {
        let (word, shift) = self.state_word(index);
        State::from_bits(*word >> shift)
    }

    #[inline]
    fn set_state(&mut self, index: u32, state: State) {
        let shift = (index % STATES_PER_WORD) * 2;
        let word = &mut self.states[(index >> CHUNK_BITS) as usize]
            [((index & CHUNK_MASK) / STATES_PER_WORD) as usize];
        *word = (*word & !(0b11 << shift)) | ((state as u64) << shift);
    }

    /// The word holding entry `index`'s state, read to bring its cache line in ahead of a
    /// fire.
    #[inline]
    pub(crate) fn touch(&self, index: u32) -> u64 {
        *self.state_word(index).0
    }

    /// Whether the key `(index, generation)` is live.
    #[inline]
    pub(crate) fn is_live(&self, index: u32, generation: u32) -> bool {
        index < self.created
            && self.state(index).is_live()
            && self.cold(index).generation == generation
    }

    /// The value of the live entry `index`.
    #[inline]
    pub(crate) fn value(&self, index: u32) -> T {
        self.cold(index).value
    }

    /// Replaces the value of the live entry `index` (the fire reads it here from now on).
    #[inline]
    pub(crate) fn set_value(&mut self, index: u32, value: T) {
        self.cold_mut(index).value = value;
        self.set_state(index, State::LiveSet);
    }

    /// Occupies an entry with `value`; its item is to be placed now.
    pub(crate) fn insert(&mut self, value: T) -> Taken {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            assert_eq!(
                self.state(index),
                State::Free,
                "free list reached entry {index}"
            );
            self.set_state(index, State::Live);
            let cold = self.cold_mut(index);
            cold.generation = cold.generation.wrapping_add(2);
            cold.value = value;
            return Taken {
                index,
                generation: cold.generation,
            };
        }
        assert!(
            (self.created as usize) < ENTRIES_MAX,
            "timing wheel full: {ENTRIES_MAX} timers"
        );
        let index = self.created;
        let cold = Cold {
            generation: 1,
            value,
        };
        match (index >> CHUNK_BITS) as usize {
            0 => {
                if self.first.len() == self.first.capacity() {
                    // Double it, but never past a full chunk.
                    let target = (self.first.capacity() * 2).clamp(16, CHUNK_LEN);
                    self.first.reserve_exact(target - self.first.len());
                }
                self.first.push(cold);
                if index.is_multiple_of(STATES_PER_WORD) {
                    self.states[0].push(0);
                }
            }
            chunk => {
                if chunk > self.chunks.len() {
                    self.add_chunk();
                }
                self.chunks[chunk - 1].push(cold);
            }
        }
        self.created += 1;
        self.set_state(index, State::Live);
        Taken {
            index,
            generation: 1,
        }
    }

    /// Ends the live entry `index` by a cancel or a move: its item becomes a tombstone (the
    /// entry is freed once the wheel drops it). Returns its value.
    #[inline]
    pub(crate) fn remove(&mut self, index: u32) -> T {
        assert!(self.state(index).is_live(), "removing entry {index}, not live");
        self.set_state(index, State::Gone);
        self.len -= 1;
        self.cold(index).value
    }

    /// The fire of entry `index`'s item: a live one's entry is freed (its key stale), so is
    /// a tombstone's.
    #[inline(always)]
    pub(crate) fn fire(&mut self, index: u32) -> Fired<T> {
        let state = self.state(index);
        let fired = match state {
            State::Live => Fired::Live(None),
            State::LiveSet => Fired::Live(Some(self.cold(index).value)),
            State::Gone => Fired::Tombstone,
            State::Free => panic!("entry {index} fired with no item"),
        };
        if state.is_live() {
            self.len -= 1;
        }
        self.set_state(index, State::Free);
        self.free.push(index);
        fired
    }

    /// Frees the entry of a tombstone the wheel dropped; `false` (and nothing changes) if the
    /// item is live.
    #[inline]
    pub(crate) fn drop_if_gone(&mut self, index: u32) -> bool {
        if self.state(index) != State::Gone {
            return false;
        }
        self.set_state(index, State::Free);
        self.free.push(index);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_reused_only_once_its_tombstone_is_dropped() {
        let mut slab = Slab::with_capacity(0);
        let a = slab.insert(10u64);
        let b = slab.insert(20);
        assert_eq!(slab.len(), 2);
        assert!(slab.is_live(a.index, a.generation));
        assert_eq!(slab.remove(a.index), 10);
        assert_eq!(slab.len(), 1);
        assert!(!slab.is_live(a.index, a.generation), "a cancelled key is stale");
        assert_eq!(slab.state(a.index), State::Gone, "its item is a tombstone");
        let c = slab.insert(30);
        assert_ne!(c.index, a.index, "not reused while its item is in the wheel");
        assert_eq!(slab.fire(a.index), Fired::Tombstone);
        let d = slab.insert(40);
        assert_eq!(d.index, a.index, "reused once dropped");
        assert_ne!(d.generation, a.generation);
        assert!(slab.is_live(d.index, d.generation) && !slab.is_live(d.index, a.generation));
        assert_eq!(slab.value(b.index), 20);
        assert!(!slab.is_live(99, 1), "never created");
    }

    #[test]
    fn a_fire_frees_its_entry_and_reads_a_set_value_from_the_cold_part() {
        let mut slab = Slab::with_capacity(1);
        let a = slab.insert(1u64);
        let b = slab.insert(2u64);
        slab.set_value(b.index, 7);
        assert_eq!(slab.value(b.index), 7);
        assert_eq!(slab.fire(a.index), Fired::Live(None), "the item carries it");
        assert_eq!(slab.fire(b.index), Fired::Live(Some(7)));
        assert_eq!(slab.len(), 0);
        assert!(!slab.is_live(a.index, a.generation) && !slab.is_live(b.index, b.generation));
        assert!(!slab.drop_if_gone(a.index), "a free entry is not a tombstone");
        let c = slab.insert(3);
        assert_eq!(slab.state(c.index), State::Live, "a new occupant starts live");
        assert!(!slab.drop_if_gone(c.index), "a live item stays");
    }

    #[test]
    #[should_panic(expected = "fired with no item")]
    fn firing_a_free_entry_is_a_broken_invariant() {
        let mut slab = Slab::with_capacity(1);
        let a = slab.insert(1u64);
        slab.fire(a.index);
        slab.fire(a.index);
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
        assert_eq!(slab.state(CHUNK_LEN as u32 + 9), State::Live);
        assert_eq!(slab.state(CHUNK_LEN as u32 - 1), State::Live);
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
        assert_eq!(slab.states.len(), 4);
        assert_eq!(slab.capacity(), 4 * CHUNK_LEN);
    }
}
