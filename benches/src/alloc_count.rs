//! A global allocator that counts the bytes currently allocated, to measure what a data
//! structure costs per element: read [`allocated_bytes`] before and after filling it.
//!
//! A bench opts in with
//! `#[global_allocator] static ALLOC: CountingAlloc = CountingAlloc;`.
//!
//! # Ground rules
//!
//! The only unsafe code here is the `GlobalAlloc` impl, which is unsafe by definition. Every
//! method forwards its arguments unchanged to [`System`] and only adds to or subtracts from a
//! counter, so it upholds exactly the contract that `System` does.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// The system allocator plus a count of the bytes it currently has out.
pub struct CountingAlloc;

/// Bytes currently allocated through [`CountingAlloc`] (requested sizes, not pages).
pub fn allocated_bytes() -> usize {
    ALLOCATED.load(Ordering::Relaxed)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged (see the
// module's ground rules); the counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we pass on.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `System`, with this `layout`.
        unsafe { System.dealloc(ptr, layout) };
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds the rest.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
            ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        }
        new
    }
}
