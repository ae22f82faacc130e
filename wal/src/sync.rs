//! The synchronization primitives of the group commit and the zero proof, behind one name.
//!
//! `commit.rs` and `zero.rs` take their `Mutex`, `Condvar`, atomics and thread parking from here
//! and nowhere else, so that their loom models (built with `RUSTFLAGS="--cfg loom"`) swap in
//! `loom::sync` here without touching the protocols they check.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread::{Thread, current, park};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread::{Thread, current, park};

/// Locks `mutex`. A poisoned std mutex means another thread panicked while it held the lock,
/// i.e. an invariant broke mid-update: continuing could write a torn state to disk, so this
/// panics too.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .expect("a WAL thread panicked while holding a lock")
}
