//! The log's options: every limit has a name, a unit and a default.

use std::time::Duration;

use crate::error::Error;
use crate::format::{FIRST_BLOCK_OFFSET, frame_bytes, sealed_end};

/// How an append becomes durable before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `append` returns only once its record is synced (group commit shares the syncs).
    #[default]
    Sync,
    /// `append` returns at once; a background thread syncs every interval (like Redis
    /// `everysec`). A crash can lose up to one interval of acknowledged-by-return records.
    Periodic(Duration),
    /// `append` returns at once; syncs happen only on `sync`, `wait_durable`, a segment roll and
    /// `close`. For tests, benchmarks and bulk loads.
    Buffered,
}

/// What recovery on open does with damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Cut off a torn tail (damage that nothing acknowledged depends on) and continue; refuse
    /// damage to acknowledged data with `Error::Corrupted`.
    #[default]
    TolerateTornTail,
    /// Refuse any damage, torn tail included, with `Error::Corrupted`. Nothing is modified.
    Absolute,
}

/// Options of a [`Wal`](crate::Wal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalOptions {
    /// Size of every new segment file, in bytes. A multiple of 4096 (mapped files are paged),
    /// at least [`WalOptions::SEGMENT_BYTES_MIN`] (the header has the first page to itself). Existing segments keep their size.
    pub segment_bytes: u64,
    /// The largest record body accepted by append, in bytes. A frame of this size, with its
    /// mirror, must fit in an empty segment: about `(segment_bytes - 4096 - 600) / 2`.
    pub record_bytes_max: u32,
    /// When appends are durable.
    pub durability: Durability,
    /// What recovery does with damage.
    pub recovery_mode: RecoveryMode,
    /// How many group-commit syncs may be in flight at once, 1 (the default) to
    /// [`WalOptions::SYNCS_IN_FLIGHT_MAX`]. With 2, a waiter whose record came after a sync
    /// started syncs it at once, beside that sync, where with 1 it waits for that sync to end
    /// first: more syncs, each of fewer records, which pays on a disk that serves overlapping
    /// flushes and with few callers (see `docs/design.md`, "Two syncs in flight").
    /// Acknowledgements stay in LSN order either way.
    pub syncs_in_flight: usize,
    /// How far past the next block each commit block's write bound reaches (a multiple of
    /// 4096; raised to one whole block if smaller, see [`crate::format::write_reach`]).
    /// Recovery proves zeros only this far past the last block instead of to the end of the
    /// file; the writer that runs this far ahead of its last durable block (large unsynced
    /// batches) waits for a sync first. A reach under 4 MiB also caps each commit block's
    /// group at a quarter of it (at least 4 KiB; [`WalOptions::group_limit`]). Default
    /// [`WalOptions::WRITE_REACH_DEFAULT`].
    pub write_reach_bytes: u64,
}

impl WalOptions {
    /// Default segment size: 64 MiB.
    pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;
    /// Smallest segment size accepted: two pages (the header's and one commit block).
    pub const SEGMENT_BYTES_MIN: u64 = 8192;
    /// Largest segment size accepted: 1 TiB (offsets stay far from overflow).
    pub const SEGMENT_BYTES_MAX: u64 = 1 << 40;
    /// Default write reach: 8 MiB.
    pub const WRITE_REACH_DEFAULT: u64 = 8 << 20;
    /// Default record body limit: 1 MiB.
    pub const RECORD_BYTES_MAX_DEFAULT: u32 = 1 << 20;
    /// Default number of syncs in flight at once.
    pub const SYNCS_IN_FLIGHT_DEFAULT: usize = 1;
    /// Largest number of syncs in flight at once accepted.
    pub const SYNCS_IN_FLIGHT_MAX: usize = 8;

    /// How far past the next block's start each block's write bound reaches (see
    /// [`crate::format::write_reach`]): `write_reach_bytes`, raised to one whole block.
    pub fn write_reach(&self) -> u64 {
        crate::format::write_reach(self.record_bytes_max, self.write_reach_bytes)
    }

    /// The cap on a group's frames (see [`crate::format::group_limit`]): 1 MiB unless the
    /// write reach is under 4 MiB.
    pub fn group_limit(&self) -> u64 {
        crate::format::group_limit(self.write_reach_bytes)
    }

    /// The most bytes one commit block spans with these options.
    pub fn block_span_max(&self) -> u64 {
        crate::format::block_span_max(self.record_bytes_max, self.group_limit())
    }

    /// Checks that the options are consistent.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |why: String| Err(Error::InvalidOptions(why));
        if self.segment_bytes < Self::SEGMENT_BYTES_MIN
            || self.segment_bytes > Self::SEGMENT_BYTES_MAX
            || !self.segment_bytes.is_multiple_of(4096)
        {
            return bad(format!(
                "segment_bytes = {} must be a multiple of 4096 in {}..={}",
                self.segment_bytes,
                Self::SEGMENT_BYTES_MIN,
                Self::SEGMENT_BYTES_MAX
            ));
        }
        let frame = frame_bytes(self.record_bytes_max as usize) as u64;
        if sealed_end(FIRST_BLOCK_OFFSET, frame) > self.segment_bytes {
            return bad(format!(
                "record_bytes_max = {} does not fit in a segment of {} bytes",
                self.record_bytes_max, self.segment_bytes
            ));
        }
        if self.write_reach_bytes == 0 || !self.write_reach_bytes.is_multiple_of(4096) {
            return bad(format!(
                "write_reach_bytes = {} must be a positive multiple of 4096",
                self.write_reach_bytes
            ));
        }
        if self.syncs_in_flight == 0 || self.syncs_in_flight > Self::SYNCS_IN_FLIGHT_MAX {
            return bad(format!(
                "syncs_in_flight = {} must be in 1..={}",
                self.syncs_in_flight,
                Self::SYNCS_IN_FLIGHT_MAX
            ));
        }
        if let Durability::Periodic(interval) = self.durability
            && interval.is_zero()
        {
            return bad("Durability::Periodic needs a non-zero interval".to_owned());
        }
        Ok(())
    }
}

impl Default for WalOptions {
    fn default() -> Self {
        Self {
            segment_bytes: Self::SEGMENT_BYTES_DEFAULT,
            record_bytes_max: Self::RECORD_BYTES_MAX_DEFAULT,
            durability: Durability::default(),
            recovery_mode: RecoveryMode::default(),
            syncs_in_flight: Self::SYNCS_IN_FLIGHT_DEFAULT,
            write_reach_bytes: Self::WRITE_REACH_DEFAULT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_limits_checked() {
        assert!(WalOptions::default().validate().is_ok());
        let small = WalOptions {
            segment_bytes: 8192,
            record_bytes_max: 1500,
            ..Default::default()
        };
        assert!(small.validate().is_ok());
        let too_big = WalOptions {
            record_bytes_max: 2100,
            ..small.clone()
        };
        assert!(matches!(too_big.validate(), Err(Error::InvalidOptions(_))));
        let unaligned = WalOptions {
            segment_bytes: 9000,
            ..small.clone()
        };
        assert!(unaligned.validate().is_err());
        let one_page = WalOptions {
            segment_bytes: 4096,
            record_bytes_max: 100,
            ..small.clone()
        };
        assert!(one_page.validate().is_err());
        for (syncs, ok) in [(0, false), (1, true), (8, true), (9, false)] {
            let opts = WalOptions {
                syncs_in_flight: syncs,
                ..small.clone()
            };
            assert_eq!(opts.validate().is_ok(), ok, "syncs_in_flight = {syncs}");
        }
        for (reach, ok) in [(0, false), (1000, false), (4096, true), (8 << 20, true)] {
            let opts = WalOptions {
                write_reach_bytes: reach,
                ..small.clone()
            };
            assert_eq!(opts.validate().is_ok(), ok, "write_reach_bytes = {reach}");
        }
    }

    #[test]
    fn the_reach_holds_one_whole_block_and_small_reaches_cap_groups() {
        let small = WalOptions {
            record_bytes_max: 1024,
            write_reach_bytes: 4096,
            ..Default::default()
        };
        // Groups of at most 4 KiB; a block of 4 KiB of frames and its mirror spans 3 pages.
        assert_eq!(small.group_limit(), 4096);
        assert_eq!(small.block_span_max(), 12288);
        assert_eq!(small.write_reach(), 12288);
        // The default: 1 MiB groups, an 8 MiB reach that holds a block of the largest record.
        let default = WalOptions::default();
        assert_eq!(default.group_limit(), 1 << 20);
        assert!(default.block_span_max() > 2 << 20 && default.block_span_max() < 3 << 20);
        assert_eq!(default.write_reach(), 8 << 20);
        // A reach smaller than the largest block is raised to it.
        let big_records = WalOptions {
            record_bytes_max: 4 << 20,
            segment_bytes: 64 << 20,
            write_reach_bytes: 4096,
            ..Default::default()
        };
        assert_eq!(big_records.write_reach(), big_records.block_span_max());
        assert!(big_records.write_reach() > 8 << 20);
    }
}
