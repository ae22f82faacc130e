//! The synchronization primitives of the group commit, behind one name.
//!
//! `commit.rs` takes its `Mutex`, `Condvar` and atomics from here and nowhere else, so that a
//! loom model can later swap in `loom::sync` with one `#[cfg(loom)]` arm in this file (and a
//! `loom` dev-dependency) without touching the protocol it checks.

pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

/// Locks `mutex`. A poisoned std mutex means another thread panicked while it held the lock,
/// i.e. an invariant broke mid-update: continuing could write a torn state to disk, so this
/// panics too.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .expect("a WAL thread panicked while holding a lock")
}
