//! Shared by the log's integration tests.

use timewheel_wal::{Durability, WalOptions};

/// Small segments (so tests roll often), records of up to 1000 bytes, every append synced.
pub fn sync_opts(segment_bytes: u64) -> WalOptions {
    WalOptions {
        segment_bytes,
        record_bytes_max: 1000,
        durability: Durability::Sync,
        ..Default::default()
    }
}
