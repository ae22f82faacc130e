//! A global allocator that counts the bytes currently allocated, to measure what a data
//! structure costs per element: read [`allocated_bytes`] before and after filling it.
//!
//! A binary opts in with
//! `#[global_allocator] static ALLOC: CountingAlloc = CountingAlloc;`, and counts only while
//! [`set_counting`] is on (so that threads of other workloads do not contend on the counter).
//! Read the figure as a difference: [`allocated_since`].
//!
//! # Ground rules
//!
//! The only unsafe code here is the `GlobalAlloc` impl, which is unsafe by definition. Every
//! method forwards its arguments unchanged to [`System`] and only adds to or subtracts from a
//! counter, so it upholds exactly the contract that `System` does.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);

/// The system allocator plus a count of the bytes it currently has out.
pub struct CountingAlloc;

/// Bytes currently allocated through [`CountingAlloc`] while counting was on (requested
/// sizes, not pages). Frees of blocks allocated while it was off make it wrap: use it only
/// through [`allocated_since`].
pub fn allocated_bytes() -> usize {
    ALLOCATED.load(Ordering::Relaxed)
}

/// Bytes allocated and not freed since `before` (an [`allocated_bytes`] reading taken with
/// counting on), as a signed difference.
pub fn allocated_since(before: usize) -> isize {
    allocated_bytes().wrapping_sub(before) as isize
}

/// Turns counting on or off for every thread. Off by default: each allocation then costs one
/// relaxed load more than `System`'s.
pub fn set_counting(on: bool) {
    COUNTING.store(on, Ordering::SeqCst);
}

fn counting() -> bool {
    COUNTING.load(Ordering::Relaxed)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged (see the
// module's ground rules); the counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we pass on.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() && counting() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() && counting() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `System`, with this `layout`.
        unsafe { System.dealloc(ptr, layout) };
        if counting() {
            ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds the rest.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() && counting() {
            ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
            ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        }
        new
    }
}
