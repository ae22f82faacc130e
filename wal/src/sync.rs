//! The synchronization primitives of the group commit, behind one name.
//!
//! `commit.rs` takes its `Mutex`, atomics and thread parking from here and nowhere else, so that the
//! loom model (`commit::loom_model`, built with `RUSTFLAGS="--cfg loom"`) swaps in `loom::sync`
//! here without touching the protocol it checks.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread::{Thread, current, park};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
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
