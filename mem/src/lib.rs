//! Memory for timewheel's big in-memory tables: [`HugeVec`], a vector of fixed capacity in an
//! anonymous mapping that the kernel is asked to back with transparent huge pages.
//!
//! At ten million timers the wheel's key table is 160 MB read at random: on 4 KiB pages each
//! read is likely a TLB miss whose page walk costs more than the read, and each first write of
//! a page is a page fault. On 2 MiB pages the table is 80 TLB entries and 80 faults. The
//! kernel honours the advice when transparent huge pages are `always` or `madvise` (see
//! `/sys/kernel/mm/transparent_hugepage/enabled`); otherwise the mapping is plain memory and
//! works the same, only slower.
//!
//! This crate holds the only `unsafe` code of timewheel's in-memory side (the journal's
//! mapping is in `timewheel-wal`): the view of the mapping's initialised prefix as `[T]`.
//!
//! ```
//! use timewheel_mem::HugeVec;
//!
//! let mut table: HugeVec<u64> = HugeVec::with_capacity(1 << 18);
//! for i in 0..1000 {
//!     table.push(i * 2);
//! }
//! table[7] = 1;
//! assert_eq!((table.len(), table[7], table[999]), (1000, 1, 1998));
//! assert!(table.capacity() >= 1 << 18);
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

use std::alloc::{Layout, handle_alloc_error};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

use memmap2::MmapMut;

/// The size of a transparent huge page on x86-64 and (usually) aarch64: mappings are rounded
/// up to a multiple of it, so that every page of a mapping can be a huge one.
pub const HUGE_PAGE: usize = 2 << 20;

/// Bytes mapped by every live [`HugeVec`] of the process.
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// Bytes currently mapped by [`HugeVec`]s, the process's whole: memory that a counting global
/// allocator does not see (benchmarks add it to the heap's figure). Untouched pages of a
/// mapping are counted too, as a `Vec`'s spare capacity would be.
pub fn mapped_bytes() -> usize {
    MAPPED.load(Ordering::Relaxed)
}

/// The page alignment an anonymous mapping has at least; `T` may not ask for more.
const PAGE: usize = 4096;

/// A vector whose capacity is fixed at creation, in memory advised for huge pages.
///
/// Only the first [`len`](Self::len) elements are ever read; the rest of the mapping is
/// untouched (and so costs no memory) until pushed into. Only `T: Copy` values go in (so
/// nothing needs dropping).
/// Mapping fails only when the address space or the kernel's overcommit limit is exhausted;
/// that is out of memory, handled as the standard collections do ([`handle_alloc_error`]).
pub struct HugeVec<T> {
    map: MmapMut,
    len: usize,
    capacity: usize,
    _values: PhantomData<T>,
}

impl<T: Copy> HugeVec<T> {
    /// An empty vector with room for at least `capacity` elements (the mapping is rounded up
    /// to whole huge pages, and the extra room is usable).
    pub fn with_capacity(capacity: usize) -> Self {
        assert!(size_of::<T>() > 0, "HugeVec holds sized values");
        assert!(align_of::<T>() <= PAGE, "HugeVec aligns to a page at most");
        let layout = Layout::array::<T>(capacity.max(1)).expect("HugeVec capacity overflows");
        let bytes = layout.size().div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let map = MmapMut::map_anon(bytes).unwrap_or_else(|_| handle_alloc_error(layout));
        // Advice only: without transparent huge pages the mapping still works.
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        MAPPED.fetch_add(bytes, Ordering::Relaxed);
        Self {
            map,
            len: 0,
            capacity: bytes / size_of::<T>(),
            _values: PhantomData,
        }
    }

    /// Elements pushed.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was pushed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements the vector holds at most.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends `value`. Panics when full: the capacity is fixed, and outgrowing it is the
    /// caller's broken invariant.
    #[inline]
    pub fn push(&mut self, value: T) {
        assert!(self.len < self.capacity, "HugeVec full: {}", self.capacity);
        let slot = self.map.as_mut_ptr().cast::<T>().wrapping_add(self.len);
        // SAFETY: `len < capacity`, so the slot is inside the mapping, and it is aligned: the
        // mapping starts on a page boundary and `align_of::<T>()` divides the page size.
        unsafe { slot.write(value) };
        self.len += 1;
    }
}

impl<T> Drop for HugeVec<T> {
    fn drop(&mut self) {
        MAPPED.fetch_sub(self.map.len(), Ordering::Relaxed);
    }
}

impl<T> Deref for HugeVec<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: the first `len` elements were written by `push` (and only through `&mut`
        // since), the pointer is aligned (see `push`), and the mapping lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast::<T>(), self.len) }
    }
}

impl<T> DerefMut for HugeVec<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the view unique.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().cast::<T>(), self.len) }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for HugeVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_what_was_pushed_up_to_its_rounded_capacity() {
        let mut v: HugeVec<[u32; 3]> = HugeVec::with_capacity(10);
        assert!(v.is_empty());
        let cap = v.capacity();
        assert_eq!(cap, HUGE_PAGE / 12, "rounded up to a whole huge page");
        for i in 0..cap as u32 {
            v.push([i, i + 1, i + 2]);
        }
        assert_eq!(v.len(), cap);
        assert_eq!(v[cap - 1], [cap as u32 - 1, cap as u32, cap as u32 + 1]);
        v[0][1] = 99;
        assert_eq!(
            v.iter().take(2).collect::<Vec<_>>(),
            [&[0, 99, 2], &[1, 2, 3]]
        );
    }

    #[test]
    #[should_panic(expected = "HugeVec full")]
    fn pushing_past_the_capacity_is_a_broken_invariant() {
        let mut v: HugeVec<u64> = HugeVec::with_capacity(HUGE_PAGE / 8);
        for i in 0..=(HUGE_PAGE / 8) as u64 {
            v.push(i);
        }
    }

    #[test]
    fn an_untouched_capacity_costs_no_memory_until_pushed_into() {
        // 1 GiB of capacity maps, lazily; only the pushed page is ever touched.
        let mut v: HugeVec<u64> = HugeVec::with_capacity(1 << 27);
        v.push(1);
        assert_eq!(v[..], [1]);
        // The process's count (the other tests map and unmap beside this one): at least this.
        assert!(mapped_bytes() >= 1 << 30, "counted while mapped");
        drop(v);
    }
}
