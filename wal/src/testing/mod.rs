//! Fault-injecting in-memory storage.
