//! The keys and the far timers: each minute of effective due times has its own *key space*,
//! where a timer takes the next *place* when it is inserted (or moved) into that minute. A key
//! is the pair (minute, place), unique for the wheel's life: a minute's places are never
//! handed out twice, and a space is dropped only once its minute is over (then every key it
//! named is stale).
//!
//! A space holds, by place, each timer's due time and value, and a bit that says the place is
//! *gone* (fired, cancelled or moved). A timer inserted while its minute is at least two
//! minutes ahead is *far*: the space is its only home (one write per insert), until the minute
//! before its own, when the look-ahead sorts the space's far places by due millisecond into the
//! minute's run (`run.rs`). A timer inserted later is *near*: its item goes to the second or
//! millisecond ring (`block.rs`), naming its minute and place and carrying its value, and the
//! space keeps its value for `get` and `cancel`. Either way the fire checks and sets the
//! place's gone bit in the space of the minute being fired: a few kilobytes of bits that all of
//! the minute's fires share, in cache, where a slab entry per key (what this replaced) was a
//! random read across all
//! of the wheel's keys. A `set` marks its place in a second bitmap, so that the fire takes the
//! value from the space rather than from the item.
//!
//! A cancel sets the gone bit. Its far place keeps its memory until its chunk of
//! [`CHUNK`] places has few live ones left: then the chunk is *compacted*, keeping only its
//! live places (found by rank in a bitmap of the places kept), so that a space's memory stays
//! within a few times its live timers however many were cancelled (timeouts that almost all
//! get cancelled are the common case).

use std::collections::BTreeMap;

use super::level::{MINUTE_SLOTS, MS_PER_MINUTE, Occupancy};

/// Seconds in a minute.
pub(crate) const SECONDS: usize = 60;

/// Places per chunk of a space (a full chunk is never moved: a space of a million timers grows
/// without copying itself).
const CHUNK_BITS: u32 = 10;
pub(crate) const CHUNK: usize = 1 << CHUNK_BITS;
/// Words of a chunk's bitmaps.
const CHUNK_WORDS: usize = CHUNK / 64;
/// A far chunk is compacted once its live places are at most this share of the places it
/// holds (1 / `COMPACT_RATIO`), and at least [`COMPACT_MIN`] of those are gone: a compaction
/// reads the chunk's bitmap (16 words) and copies its live places, paid for by the cancels of
/// the places it drops.
const COMPACT_RATIO: u32 = 4;
const COMPACT_MIN: u16 = 64;
/// Whole chunks' storage the spaces keep from minutes that ended, for the chunks of minutes
/// being filled (256 chunks: 2.5 MiB with a `u64` value; at 10M timers an hour a minute takes
/// about 160). A minute ends as later ones fill, so in a steady state its storage is taken
/// again, touched and with no call to the allocator, where freeing and allocating it cost more
/// than the copies the storage's growth would have (measured: `docs/benchmarks.md`).
const SPARE_CHUNKS_MAX: usize = 256;
/// Key minutes a wheel spans, counted from the minute of its creation: the last one takes every
/// later due time. A key's generation is its minute plus one, so never 0, nor `u32::MAX`
/// (which `TimerKey::from_u64` gives a key whose generation is 0).
pub(crate) const KEY_MINUTES: u64 = u32::MAX as u64 - 1;

const _: () = assert!(CHUNK.is_multiple_of(64) && CHUNK <= u16::MAX as usize);

/// A place's due time and value. The due time is the millisecond of its minute (2 bytes, where
/// the time itself took 8), and the pair is packed, so a far timer costs 10 bytes with a `u64`
/// value (16 with the value aligned).
#[derive(Clone, Copy)]
#[repr(C, packed(2))]
pub(crate) struct Far<T> {
    /// A far place's due millisecond within its minute (a near place's is 0: its item in a
    /// ring carries its due time).
    pub(crate) offset: u16,
    pub(crate) value: T,
}

/// A chunk of [`CHUNK`] places' due times and values.
struct Chunk<T> {
    /// By place within the chunk, or, once compacted, the kept places in place order.
    items: Vec<Far<T>>,
    /// The places kept at the last compaction; `None` while the chunk was never compacted.
    kept: Option<Box<[u64; CHUNK_WORDS]>>,
    /// Places of the chunk not gone.
    live: u16,
    /// Places whose item the chunk holds (all of its places until compacted).
    held: u16,
}

impl<T: Copy> Chunk<T> {
    /// Where place `at` (within the chunk) is in `items`, if the chunk holds it.
    #[inline]
    fn slot(&self, at: usize) -> Option<usize> {
        let Some(kept) = &self.kept else {
            return Some(at);
        };
        let (w, bit) = (at / 64, 1u64 << (at % 64));
        if kept[w] & bit == 0 {
            return None;
        }
        let before: u32 = kept[..w].iter().map(|k| k.count_ones()).sum();
        Some((before + (kept[w] & (bit - 1)).count_ones()) as usize)
    }
}

/// One minute's keys.
pub(crate) struct Space<T> {
    /// The absolute minute (`ms / 60 000`).
    minute: u64,
    /// Places handed out.
    next: u32,
    /// Places below this are far (the space is their item), the rest near.
    far_end: u32,
    /// Places not gone.
    live: u32,
    /// Whether a build took the far places (no compaction from then on: the run holds them).
    built: bool,
    /// A bit per place: fired, cancelled or moved.
    gone: Vec<u64>,
    /// The far places taken, by second of the minute they are due in, gone ones included (a
    /// cancel does not read its place's due time, a cache miss at random): room enough for the
    /// build's first pass to place each second's live timers together (see `run.rs`).
    far_seconds: [u32; SECONDS],
    /// Far places not gone (until the build takes them).
    far_live: u32,
    /// A bit per place whose value `set` replaced after its item was made; empty until the
    /// first `set`.
    set: Vec<u64>,
    chunks: Vec<Chunk<T>>,
}

/// Whether `place`'s bit is set in a bitmap of places.
#[inline]
pub(crate) fn bit(bits: &[u64], place: u32) -> bool {
    bits[(place / 64) as usize] & (1u64 << (place % 64)) != 0
}

/// The millisecond of `minute` a far place's due time is.
#[inline]
fn offset_in(minute: u64, due_ms: u64) -> u16 {
    let offset = due_ms.wrapping_sub(minute * MS_PER_MINUTE);
    assert!(
        offset < MS_PER_MINUTE,
        "a far place due at {due_ms} in the space of minute {minute}"
    );
    offset as u16
}

/// The second of its minute a far place's offset is in.
#[inline]
pub(crate) fn second_of(offset: u16) -> usize {
    usize::from(offset / 1_000)
}

/// A chunk's far places, as a build reads them.
pub(crate) struct FarChunk<'a, T> {
    /// The chunk's first place.
    pub(crate) first: u32,
    /// The items of its far places it holds, in place order.
    pub(crate) items: &'a [Far<T>],
    /// Which places those are, once compacted (else all of them, from `first` on).
    pub(crate) kept: Option<&'a [u64; CHUNK_WORDS]>,
}

/// What ending a place (a cancel or a move) left behind.
pub(crate) struct Ended {
    /// Tombstones the compaction it made dropped.
    pub(crate) dropped: u64,
    /// Places the compaction read.
    pub(crate) read: usize,
}

impl<T: Copy> Space<T> {
    fn new(minute: u64) -> Self {
        Self {
            minute,
            next: 0,
            far_end: 0,
            live: 0,
            built: false,
            gone: Vec::new(),
            far_seconds: [0; SECONDS],
            far_live: 0,
            set: Vec::new(),
            chunks: Vec::new(),
        }
    }

    /// How many far places were taken, by second of the minute, gone ones included.
    pub(crate) fn far_seconds(&self) -> [u32; SECONDS] {
        self.far_seconds
    }

    /// How many far places are live (as of the build's start, once it started).
    pub(crate) fn far_live(&self) -> u32 {
        self.far_live
    }

    /// The absolute minute.
    pub(crate) fn minute(&self) -> u64 {
        self.minute
    }

    /// The gone bits of the far places.
    pub(crate) fn far_gone(&self) -> &[u64] {
        &self.gone[..(self.far_end as usize).div_ceil(64)]
    }

    #[inline]
    fn is_live(&self, place: u32) -> bool {
        place < self.next && !bit(&self.gone, place)
    }

    /// Whether far places wait for a build.
    fn has_unbuilt_far(&self) -> bool {
        self.far_end > 0 && !self.built
    }

    /// The chunk of a held place, and where the place is in its arrays.
    #[inline]
    fn held(&self, place: u32) -> (usize, usize) {
        let c = (place >> CHUNK_BITS) as usize;
        let at = self.chunks[c].slot(place as usize % CHUNK);
        (c, at.expect("a held place"))
    }

    /// The value of a held place.
    #[inline]
    fn value(&self, place: u32) -> T {
        let (c, at) = self.held(place);
        self.chunks[c].items[at].value
    }

    /// Takes the next place, for a timer due at `due_ms` (far or near), its storage from
    /// `spare` if it opens a chunk after the first.
    #[inline]
    fn push(&mut self, due_ms: u64, value: T, far: bool, spare: &mut Vec<Vec<Far<T>>>) -> u32 {
        let place = self.next;
        assert!(place < u32::MAX, "key space of minute {} full", self.minute);
        let mut offset = 0;
        if far {
            assert_eq!(self.far_end, place, "far places come before near ones");
            assert!(
                !self.built,
                "a far place in minute {} once built",
                self.minute
            );
            self.far_end = place + 1;
            offset = offset_in(self.minute, due_ms);
            self.far_seconds[second_of(offset)] += 1;
            self.far_live += 1;
        }
        if place.is_multiple_of(64) {
            self.gone.push(0);
            if !self.set.is_empty() {
                self.set.push(0);
            }
        }
        if (place as usize).is_multiple_of(CHUNK) {
            // A minute's first chunk grows as it fills (a minute of a few timers stays small);
            // a minute that filled one is a big one, and its later chunks are taken whole, with
            // no copies on the way.
            let items = if place == 0 {
                Vec::new()
            } else {
                let mut items = spare.pop().unwrap_or_else(|| Vec::with_capacity(CHUNK));
                // Written through once, in one sequential pass, so that its lines are in the
                // cache when this minute's inserts store into them, one at a time among the
                // stores of every other minute (a cold line per six inserts otherwise).
                items.resize(CHUNK, Far { offset: 0, value });
                items.clear();
                items
            };
            self.chunks.push(Chunk {
                items,
                kept: None,
                live: 0,
                held: 0,
            });
        }
        let chunk = self.chunks.last_mut().expect("a chunk");
        if let Some(kept) = &mut chunk.kept {
            // A compacted chunk takes new places at its end, kept.
            let at = place as usize % CHUNK;
            kept[at / 64] |= 1u64 << (at % 64);
        }
        if chunk.items.len() == chunk.items.capacity() {
            // Double it, but never past a full chunk: a far minute of a few timers stays small.
            let target = (chunk.items.capacity() * 2).clamp(4, CHUNK);
            chunk.items.reserve_exact(target - chunk.items.len());
        }
        chunk.items.push(Far { offset, value });
        chunk.live += 1;
        chunk.held += 1;
        self.next += 1;
        self.live += 1;
        place
    }

    /// Marks a live place gone (a cancel or a move), compacting its chunk if few live places
    /// are left in it. It reads no place's item: only the space's bits and counters, which
    /// stay in cache where the items (10 bytes a timer) do not.
    fn end(&mut self, place: u32) -> Ended {
        let c = (place >> CHUNK_BITS) as usize;
        self.gone[(place / 64) as usize] |= 1u64 << (place % 64);
        if place < self.far_end && !self.built {
            // The build sorts the far places live when it starts.
            self.far_live -= 1;
        }
        self.live -= 1;
        self.chunks[c].live -= 1;
        let chunk = &self.chunks[c];
        // Only far places may go: a near place's item is in a ring, which drops it. Near places
        // come after every far one, so a space with none yet has only far places.
        let far_only = self.next == self.far_end;
        let (mut dropped, mut read) = (0, 0);
        if far_only
            && !self.built
            && chunk.held - chunk.live >= COMPACT_MIN
            && u32::from(chunk.live) * COMPACT_RATIO <= u32::from(chunk.held)
        {
            read = usize::from(chunk.held);
            dropped = u64::from(chunk.held - chunk.live);
            self.compact(c);
        }
        Ended { dropped, read }
    }

    /// Keeps only the live places of chunk `c`.
    fn compact(&mut self, c: usize) {
        let first = c * CHUNK;
        let places = (self.next as usize - first).min(CHUNK);
        let words = places.div_ceil(64);
        let gone = &self.gone[first / 64..first / 64 + words];
        let chunk = &mut self.chunks[c];
        let mut kept = Box::new([0u64; CHUNK_WORDS]);
        let mut items = Vec::with_capacity(usize::from(chunk.live));
        for (w, &gone) in gone.iter().enumerate() {
            let held = match &chunk.kept {
                Some(k) => k[w],
                None if (w + 1) * 64 <= places => !0,
                None => (1u64 << (places % 64)) - 1,
            };
            let mut live = held & !gone;
            kept[w] = live;
            while live != 0 {
                let at = w * 64 + live.trailing_zeros() as usize;
                live &= live - 1;
                let slot = chunk.slot(at).expect("a live place is held");
                items.push(chunk.items[slot]);
            }
        }
        assert_eq!(
            items.len(),
            usize::from(chunk.live),
            "chunk {c}'s live places"
        );
        chunk.items = items;
        chunk.kept = Some(kept);
        chunk.held = chunk.live;
    }

    /// Marks place `place` of an item being fired gone: `None` if it was gone already (the
    /// item is a tombstone), else the value `set` gave it since its item was made, if any.
    #[inline]
    pub(crate) fn fire(&mut self, place: u32) -> Option<Option<T>> {
        let (word, bit) = ((place / 64) as usize, 1u64 << (place % 64));
        if self.gone[word] & bit != 0 {
            return None;
        }
        self.gone[word] |= bit;
        self.live -= 1;
        let set = self.set.get(word).is_some_and(|w| w & bit != 0);
        Some(set.then(|| self.value(place)))
    }

    /// The far places a build sorts, chunk by chunk: the places each chunk holds below
    /// `far_end`, with their items (gone ones included: the run drops them when it meets
    /// them).
    pub(crate) fn far_chunk(&self, c: usize) -> Option<FarChunk<'_, T>> {
        let chunk = self.chunks.get(c)?;
        let first = (c * CHUNK) as u32;
        if first >= self.far_end {
            return None;
        }
        let far = (self.far_end - first) as usize;
        let (far, kept) = match &chunk.kept {
            None => (far.min(chunk.items.len()), None),
            // The kept places below `far_end` (near ones may follow them).
            Some(kept) => (rank_before(kept, far), Some(&**kept)),
        };
        Some(FarChunk {
            first,
            items: &chunk.items[..far],
            kept,
        })
    }
}

#[cfg(test)]
impl Space<u64> {
    /// A built-to-be space of `minute` whose far places are due at `dues` (values: their
    /// places), with places `cancel` cancelled (compacting what that compacts).
    pub(crate) fn for_test(minute: u64, dues: &[u64], cancel: &[u32]) -> Self {
        let mut space = Self::new(minute);
        for (place, &due_ms) in dues.iter().enumerate() {
            assert_eq!(
                space.push(due_ms, place as u64, true, &mut Vec::new()),
                place as u32
            );
        }
        for &place in cancel {
            assert_eq!(space.value(place), u64::from(place));
            space.end(place);
        }
        space
    }
}

/// How many kept places of a compacted chunk lie below place `end` (within the chunk).
fn rank_before(kept: &[u64; CHUNK_WORDS], end: usize) -> usize {
    let end = end.min(CHUNK);
    let whole: u32 = kept[..end / 64].iter().map(|k| k.count_ones()).sum();
    let part = if end.is_multiple_of(64) {
        0
    } else {
        (kept[end / 64] & ((1u64 << (end % 64)) - 1)).count_ones()
    };
    (whole + part) as usize
}

/// The place within a compacted chunk of its `rank`-th kept place.
pub(crate) fn kept_place(kept: &[u64; CHUNK_WORDS], rank: usize) -> u32 {
    let mut left = rank as u32;
    for (w, &word) in kept.iter().enumerate() {
        let ones = word.count_ones();
        if left < ones {
            let mut bits = word;
            for _ in 0..left {
                bits &= bits - 1;
            }
            return (w * 64) as u32 + bits.trailing_zeros();
        }
        left -= ones;
    }
    panic!("rank {rank} past the chunk's kept places");
}

/// Every minute's key space: a ring of the [`MINUTE_SLOTS`] minutes from the wheel's
/// (calendar-aligned, as the minute ring was), and a map for later ones.
pub(crate) struct Spaces<T> {
    /// The absolute minute of the wheel's creation: key minute 0.
    base: u64,
    /// The last absolute minute a key can name.
    last: u64,
    /// `ring[minute % MINUTE_SLOTS]` holds minute `minute`'s space while it is within the
    /// ring's window; allocated at the first insert.
    ring: Vec<Option<Box<Space<T>>>>,
    /// Ring slots holding a space.
    held: Occupancy,
    /// Ring slots whose space has far places not built yet.
    far: Occupancy,
    /// Spaces of minutes beyond the ring's window.
    overflow: BTreeMap<u64, Box<Space<T>>>,
    /// Live keys, all spaces together.
    live: usize,
    /// Empty storage of whole chunks, from minutes that ended (see [`SPARE_CHUNKS_MAX`]).
    spare: Vec<Vec<Far<T>>>,
}

/// A key minute's generation (minute plus one: never 0) and back.
#[inline]
pub(crate) fn generation(base: u64, minute: u64) -> u32 {
    u32::try_from(minute - base + 1).expect("a key minute within the wheel's span")
}

impl<T: Copy> Spaces<T> {
    /// No key yet; key minute 0 is the minute of `now_ms`.
    pub(crate) fn new(now_ms: u64) -> Self {
        let base = now_ms / MS_PER_MINUTE;
        Self {
            base,
            last: base.saturating_add(KEY_MINUTES - 1),
            ring: Vec::new(),
            held: Occupancy::new(MINUTE_SLOTS),
            far: Occupancy::new(MINUTE_SLOTS),
            overflow: BTreeMap::new(),
            live: 0,
            spare: Vec::new(),
        }
    }

    /// The latest millisecond the wheel's keys can name: later due times count as this one.
    pub(crate) fn last_ms(&self) -> u64 {
        (self.last + 1)
            .checked_mul(MS_PER_MINUTE)
            .map_or(u64::MAX, |end| end - 1)
    }

    /// The absolute minute of a key's generation.
    #[inline]
    pub(crate) fn minute_of(&self, generation: u32) -> u64 {
        self.base + u64::from(generation) - 1
    }

    #[inline]
    pub(crate) fn generation(&self, minute: u64) -> u32 {
        generation(self.base, minute)
    }

    /// Live keys.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Whether `minute` is held in the ring (rather than the overflow), the wheel standing in
    /// minute `now_minute`.
    #[inline]
    fn in_ring(minute: u64, now_minute: u64) -> bool {
        minute < now_minute + MINUTE_SLOTS as u64
    }

    #[inline]
    fn ring_slot(minute: u64) -> usize {
        (minute % MINUTE_SLOTS as u64) as usize
    }

    #[inline]
    pub(crate) fn space(&self, minute: u64) -> Option<&Space<T>> {
        if let Some(Some(space)) = self.ring.get(Self::ring_slot(minute))
            && space.minute == minute
        {
            return Some(space);
        }
        self.overflow.get(&minute).map(|space| &**space)
    }

    #[inline]
    pub(crate) fn space_mut(&mut self, minute: u64) -> Option<&mut Space<T>> {
        if let Some(Some(space)) = self.ring.get_mut(Self::ring_slot(minute))
            && space.minute == minute
        {
            // Reborrowed: the borrow checker does not see that the branch returns.
            let slot = Self::ring_slot(minute);
            return self.ring[slot].as_deref_mut();
        }
        self.overflow.get_mut(&minute).map(|space| &mut **space)
    }

    /// A new place in `minute`'s space (the wheel standing in `now_minute`, at most
    /// `minute`), far or near; returns it.
    #[inline]
    pub(crate) fn insert(
        &mut self,
        minute: u64,
        now_minute: u64,
        due_ms: u64,
        value: T,
        far: bool,
    ) -> u32 {
        debug_assert!(minute >= now_minute && minute <= self.last);
        self.live += 1;
        if !Self::in_ring(minute, now_minute) {
            return self
                .overflow
                .entry(minute)
                .or_insert_with(|| Box::new(Space::new(minute)))
                .push(due_ms, value, far, &mut self.spare);
        }
        if self.ring.is_empty() {
            self.ring = (0..MINUTE_SLOTS).map(|_| None).collect();
        }
        let slot = Self::ring_slot(minute);
        let space = self.ring[slot].get_or_insert_with(|| Box::new(Space::new(minute)));
        assert_eq!(space.minute, minute, "ring slot {slot} holds one minute");
        self.held.mark(slot);
        if far {
            self.far.mark(slot);
        }
        space.push(due_ms, value, far, &mut self.spare)
    }

    /// Whether key (`minute`, `place`) is live.
    #[inline]
    pub(crate) fn is_live(&self, minute: u64, place: u32) -> bool {
        self.space(minute).is_some_and(|s| s.is_live(place))
    }

    /// The value of a live key.
    pub(crate) fn value(&self, minute: u64, place: u32) -> Option<T> {
        let space = self.space(minute)?;
        space.is_live(place).then(|| space.value(place))
    }

    /// Replaces the value of a live key; `false` if the key is not live.
    pub(crate) fn set(&mut self, minute: u64, place: u32, value: T) -> bool {
        let Some(space) = self.space_mut(minute).filter(|s| s.is_live(place)) else {
            return false;
        };
        let (c, at) = space.held(place);
        space.chunks[c].items[at].value = value;
        if space.set.is_empty() {
            space.set = vec![0; space.gone.len()];
        }
        space.set[(place / 64) as usize] |= 1u64 << (place % 64);
        true
    }

    /// Ends a live key by a cancel or a move, reading no place's item; `None` if the key is
    /// not live.
    pub(crate) fn end(&mut self, minute: u64, place: u32) -> Option<Ended> {
        let space = self.space_mut(minute).filter(|s| s.is_live(place))?;
        let ended = space.end(place);
        self.live -= 1;
        Some(ended)
    }

    /// Marks the place of an item being fired gone (see [`Space::fire`]); `None` (a
    /// tombstone) too if its space is gone.
    #[inline]
    pub(crate) fn fire(&mut self, minute: u64, place: u32) -> Option<Option<T>> {
        let fired = self.space_mut(minute)?.fire(place);
        if fired.is_some() {
            self.live -= 1;
        }
        fired
    }

    /// Counts fires done through a space borrowed whole (see `mod.rs`).
    pub(crate) fn fired(&mut self, n: usize) {
        self.live -= n;
    }

    /// The first minute at or after `now_minute` whose far places are not built yet.
    pub(crate) fn first_far(&self, now_minute: u64) -> Option<u64> {
        let from = Self::ring_slot(now_minute);
        let ring = self
            .far
            .first_from(from)
            .map(|slot| now_minute + super::level::ring_distance(from, slot, MINUTE_SLOTS));
        super::earlier(ring, self.overflow.first_key_value().map(|(&m, _)| m))
    }

    /// Whether `minute`'s space has far places not built yet.
    pub(crate) fn has_far(&self, minute: u64) -> bool {
        self.space(minute).is_some_and(Space::has_unbuilt_far)
    }

    /// Marks `minute`'s far places as taken by a build (it is the next minute, so in the
    /// ring) and returns its space.
    pub(crate) fn take_far(&mut self, minute: u64) -> &Space<T> {
        let slot = Self::ring_slot(minute);
        self.far.unmark(slot);
        let space = self.ring[slot].as_mut().expect("a space to build");
        assert_eq!(space.minute, minute);
        space.built = true;
        space
    }

    /// The wheel entered minute `now_minute`: drops the spaces of the minutes before it (every
    /// timer of theirs fired or gone), and moves the overflow's spaces that the ring now
    /// reaches into it.
    pub(crate) fn enter_minute(&mut self, now_minute: u64) {
        let mut slot = self.held.first_from(0);
        while let Some(s) = slot {
            let space = self.ring[s].as_ref().expect("a held slot");
            if space.minute < now_minute {
                assert_eq!(
                    space.live, 0,
                    "minute {} left with live timers",
                    space.minute
                );
                let space = self.ring[s].take().expect("a held slot");
                self.keep_spare(*space);
                self.held.unmark(s);
                self.far.unmark(s);
            }
            slot = (s + 1 < MINUTE_SLOTS)
                .then(|| self.held.first_from(s + 1))
                .flatten()
                .filter(|&next| next > s);
        }
        while let Some(entry) = self.overflow.first_entry() {
            if !Self::in_ring(*entry.key(), now_minute) {
                break;
            }
            let (minute, space) = entry.remove_entry();
            if self.ring.is_empty() {
                self.ring = (0..MINUTE_SLOTS).map(|_| None).collect();
            }
            let slot = Self::ring_slot(minute);
            assert!(self.ring[slot].is_none(), "ring slot {slot} is free");
            self.held.mark(slot);
            if space.has_unbuilt_far() {
                self.far.mark(slot);
            }
            self.ring[slot] = Some(space);
        }
    }

    /// Keeps the whole chunks' storage of an ended minute's space for later chunks, up to
    /// [`SPARE_CHUNKS_MAX`].
    fn keep_spare(&mut self, space: Space<T>) {
        for chunk in space.chunks {
            if self.spare.len() >= SPARE_CHUNKS_MAX {
                break;
            }
            if chunk.items.capacity() >= CHUNK {
                let mut items = chunk.items;
                items.clear();
                self.spare.push(items);
            }
        }
    }

    /// Items the spaces' chunks have room for: the memory their timers hold.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        let ring = self.ring.iter().flatten();
        ring.chain(self.overflow.values())
            .flat_map(|s| &s.chunks)
            .map(|c| c.items.capacity())
            .sum()
    }
}
