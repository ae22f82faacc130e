//! The near rings' slot contents, stored contiguously: a slot is a list of blocks of up to
//! [`BLOCK_ITEMS`] items, and an item names its due time (as inserted) and its timer's key
//! (place and minute, see `spaces.rs`) and carries its value (24 bytes with a `u64` value), so
//! that a fire reads the item and its place's gone bit only.
//!
//! A cascade reads a slot's blocks front to back and appends each item to the tail block of its
//! new slot, so moving a minute of timers is a sequential scan, not a walk over a linked list
//! scattered through memory. A block never holds more than [`BLOCK_ITEMS`], so no push ever
//! copies more than one block (a burst of a million timers in one slot grows by blocks, never by
//! reallocating a 16 MB vector). Emptied blocks go back to a [`Pool`] and are reused.
//!
//! Within a slot, items are in no particular order; the millisecond ring's slots hold one due
//! millisecond each, so order there does not matter either.

/// Items per block: 6 KiB of items with a `u64` value.
pub(crate) const BLOCK_ITEMS: usize = 256;

/// Items a small block starts with room for. The millisecond ring's slots hold a few items each
/// (2 800 a second at 10M timers an hour spread over 1 000 slots), so a full block per slot
/// would spread them over 4 MB; blocks there grow by doubling instead. So does the first block
/// of a minute in the overflow (jobs weeks ahead touch a minute or two each).
pub(crate) const SMALL_BLOCK_ITEMS: usize = 4;

/// Empty blocks the pool keeps for reuse (16 MiB); more go back to the allocator.
const POOL_BLOCKS_MAX: usize = 4096;

const _: () = assert!(size_of::<Item<u64>>() == 24);

/// One placement of a timer in a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Item<T> {
    /// The due time the caller asked for (never clamped).
    pub(crate) due_ms: u64,
    /// The timer's place in its minute's key space: the item is live while the place is not
    /// gone.
    pub(crate) index: u32,
    /// Its key's generation: the minute, counted from the wheel's creation, plus one.
    pub(crate) generation: u32,
    /// The value as of the placement (unless `set` replaced it since, see `spaces.rs`).
    pub(crate) value: T,
}

/// A list of blocks; empty when it has no block.
///
/// A block may be empty (a fire emptied it); every reader takes that in its stride.
pub(crate) struct Slot<T> {
    pub(crate) blocks: Vec<Vec<Item<T>>>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self { blocks: Vec::new() }
    }
}

impl<T: Copy> Slot<T> {
    /// Whether the slot has no block (and so no item).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Appends an item to the tail block, starting a new block when it is full (or the slot has
    /// none): a small one that grows by doubling up to a whole one when `small`, else a whole
    /// one from the pool.
    #[inline]
    pub(crate) fn push(&mut self, item: Item<T>, pool: &mut Pool<T>, small: bool) {
        match self.blocks.last_mut() {
            Some(tail) if tail.len() < BLOCK_ITEMS => tail.push(item),
            _ => {
                let mut block = if small {
                    pool.take_small()
                } else {
                    pool.take()
                };
                block.push(item);
                self.blocks.push(block);
            }
        }
    }

    /// Takes the last item out (the slot shrinks from its tail); `None` when no item is left,
    /// and then the slot has no block either.
    #[inline]
    pub(crate) fn pop(&mut self, pool: &mut Pool<T>) -> Option<Item<T>> {
        loop {
            let tail = self.blocks.last_mut()?;
            if let Some(item) = tail.pop() {
                if tail.is_empty() {
                    pool.put(self.blocks.pop().expect("the tail block"));
                }
                return Some(item);
            }
            pool.put(self.blocks.pop().expect("the tail block"));
        }
    }

    /// Gives every block back to the pool.
    #[cfg(test)]
    pub(crate) fn clear(&mut self, pool: &mut Pool<T>) {
        for block in self.blocks.drain(..) {
            pool.put(block);
        }
    }
}

/// Empty blocks for reuse: whole ones, and the small ones of the millisecond ring.
pub(crate) struct Pool<T> {
    free: Vec<Vec<Item<T>>>,
    small: Vec<Vec<Item<T>>>,
}

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Self {
            free: Vec::new(),
            small: Vec::new(),
        }
    }
}

impl<T> Pool<T> {
    /// Empty full-size blocks kept for reuse.
    #[cfg(test)]
    pub(crate) fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// An empty block with room for [`BLOCK_ITEMS`].
    #[inline]
    pub(crate) fn take(&mut self) -> Vec<Item<T>> {
        self.free
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BLOCK_ITEMS))
    }

    /// An empty block with room for at least [`SMALL_BLOCK_ITEMS`].
    #[inline]
    pub(crate) fn take_small(&mut self) -> Vec<Item<T>> {
        self.small
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(SMALL_BLOCK_ITEMS))
    }

    /// Takes a block back, emptied.
    #[inline]
    pub(crate) fn put(&mut self, mut block: Vec<Item<T>>) {
        let list = if block.capacity() >= BLOCK_ITEMS {
            &mut self.free
        } else if block.capacity() >= SMALL_BLOCK_ITEMS {
            &mut self.small
        } else {
            return;
        };
        if list.len() < POOL_BLOCKS_MAX {
            block.clear();
            list.push(block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(i: u32) -> Item<u64> {
        Item {
            due_ms: u64::from(i),
            index: i,
            generation: 1,
            value: u64::from(i),
        }
    }

    #[test]
    fn a_slot_grows_by_whole_blocks_and_gives_them_back() {
        let (mut slot, mut pool) = (Slot::default(), Pool::default());
        for i in 0..(2 * BLOCK_ITEMS as u32 + 1) {
            slot.push(item(i), &mut pool, false);
        }
        assert_eq!(slot.blocks.len(), 3);
        assert!(slot.blocks.iter().all(|b| b.capacity() == BLOCK_ITEMS));
        assert_eq!(
            slot.blocks.iter().map(Vec::len).sum::<usize>(),
            2 * BLOCK_ITEMS + 1
        );
        let mut seen = 0;
        while let Some(it) = slot.pop(&mut pool) {
            assert!(it.index < 2 * BLOCK_ITEMS as u32 + 1);
            seen += 1;
        }
        assert_eq!(seen, 2 * BLOCK_ITEMS + 1);
        assert!(slot.is_empty());
        assert_eq!(pool.free_blocks(), 3, "every block went back to the pool");
        slot.push(item(1), &mut pool, false);
        assert_eq!(pool.free_blocks(), 2, "and is reused");
        let mut small = Slot::default();
        for i in 0..BLOCK_ITEMS as u32 + 1 {
            small.push(item(i), &mut pool, true);
        }
        assert_eq!(
            small.blocks[0].len(),
            BLOCK_ITEMS,
            "a small block grows to a whole one"
        );
        assert_eq!(small.blocks[1].capacity(), SMALL_BLOCK_ITEMS);
    }

    #[test]
    fn pop_steps_over_empty_blocks() {
        let (mut slot, mut pool) = (Slot::default(), Pool::default());
        slot.blocks.push(vec![item(1)]);
        slot.blocks.push(Vec::with_capacity(BLOCK_ITEMS));
        slot.blocks.push(Vec::new());
        slot.blocks.push(Vec::new());
        assert_eq!(slot.pop(&mut pool), Some(item(1)));
        assert_eq!(slot.pop(&mut pool), None);
        assert!(slot.is_empty());
    }
}
