//! The manifest: which bucket runs are live, the journal LSN they cover, and what else an open
//! needs to start from them instead of from the first record ever written.
//!
//! It is one small file, `MANIFEST`, replaced atomically: written whole to `MANIFEST.tmp`,
//! synced, renamed over `MANIFEST`, and the directory synced. A crash leaves the old manifest
//! or the new one, never a mix; a `MANIFEST.tmp` found at open is a replacement that never
//! happened, and is removed.
//!
//! ```text
//!   0 magic "TWMANIFS" | 8 version u32 = 1 | 12 header_bytes u32 = 112
//!  16 generation u64 (replacements so far) | 24 covered_lsn u64 | 32 next_run u64
//!  40 ids_last u64 | 48 ids_reserved u64 | 56 completed u64 | 64 cancelled u64
//!  72 failed u64 | 80 buckets u32 | 84 moved u32 | 88 crashes u32 | 92 clean u8 (0 or 1)
//!  93 reserved [u8; 19] = 0
//! 112 buckets, ascending: bucket u64 | jobs u64 | min_due_ms u64 | runs u32 | keyed u32
//!     then `runs` times, oldest first: generation u64 | bytes u64 | records u64
//!     moved jobs, ascending by id: id u64 | bucket u64
//! end crc u32 (crc32 of every byte before it) | reserved u32 = 0
//! ```
//!
//! `ids_last` and `ids_reserved` are the id ledger's sequence numbers as of `covered_lsn`
//! (the journal records that reserved them may be deleted); `completed`, `cancelled` and
//! `failed` are the engine's counters as of that LSN. A *moved* job is one whose bucket is not
//! the home bucket its id names (it was rescheduled into another hour). `crashes` counts the
//! runs of the engine that crashed as of `covered_lsn` (see [`crate::record`]'s `Opened`),
//! and `clean` says that the record at
//! `covered_lsn` is a `Closed` (see [`crate::record`]): an open whose journal holds nothing
//! after `covered_lsn` reads from them whether the last run closed cleanly. Manifests written
//! before these fields read as 0 crashes, not clean.

use std::collections::BTreeMap;

use crate::job::JobId;
use crate::record::{put_u64, u32_at, u64_at};

/// The manifest's file name.
pub const MANIFEST_NAME: &str = "MANIFEST";
/// Where a new manifest is written before it replaces the old one.
pub const MANIFEST_TMP_NAME: &str = "MANIFEST.tmp";
/// The magic at the start of a manifest.
pub const MANIFEST_MAGIC: [u8; 8] = *b"TWMANIFS";
/// The manifest format version this engine writes and reads.
pub const MANIFEST_VERSION: u32 = 1;
const HEADER_BYTES: usize = 112;

/// One run file of a bucket, as the manifest names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRef {
    /// The run's generation (its file name holds it).
    pub generation: u64,
    /// The file's length.
    pub bytes: u64,
    /// Its records.
    pub records: u64,
}

/// One live bucket.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BucketEntry {
    /// Live jobs in it.
    pub jobs: u64,
    /// No job in it is due before this (a lower bound: exact after a merge).
    pub min_due_ms: u64,
    /// Its runs, oldest first.
    pub runs: Vec<RunRef>,
    /// Jobs with an idempotency key put into it (an upper bound: exact after a merge). An
    /// open reads the keys of a bucket beyond the horizon only when this is not 0.
    pub keyed: u32,
}

/// What the manifest says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Manifest {
    /// Replacements so far (0: the manifest of a directory never compacted).
    pub generation: u64,
    /// Every journal record up to this LSN is folded into the buckets.
    pub covered_lsn: u64,
    /// The generation the next run file gets.
    pub next_run: u64,
    /// The id ledger's newest scheduled sequence number as of `covered_lsn`.
    pub ids_last: u64,
    /// The id ledger's highest reserved sequence number as of `covered_lsn`.
    pub ids_reserved: u64,
    /// Jobs completed up to `covered_lsn`.
    pub completed: u64,
    /// Jobs cancelled up to `covered_lsn`.
    pub cancelled: u64,
    /// Jobs failed up to `covered_lsn`.
    pub failed: u64,
    /// Live buckets by hour.
    pub buckets: BTreeMap<u64, BucketEntry>,
    /// Jobs not in their home bucket: id to the bucket that holds them.
    pub moved: BTreeMap<JobId, u64>,
    /// Runs of the engine that had crashed, as of `covered_lsn`.
    pub crashes: u32,
    /// The record at `covered_lsn` is a `Closed`.
    pub clean: bool,
}

/// Why a manifest did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at offset {offset}: {what}")]
pub struct ManifestError {
    /// Byte offset in the file.
    pub offset: u64,
    /// What was wrong.
    pub what: &'static str,
}

impl Manifest {
    /// Bytes of all the live runs.
    pub fn run_bytes(&self) -> u64 {
        self.buckets
            .values()
            .flat_map(|b| &b.runs)
            .map(|r| r.bytes)
            .sum()
    }

    /// Jobs in all the live buckets.
    pub fn jobs(&self) -> u64 {
        self.buckets.values().map(|b| b.jobs).sum()
    }

    /// Encodes the whole file.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + 64 * self.buckets.len());
        out.extend_from_slice(&MANIFEST_MAGIC);
        out.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
        out.extend_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
        for v in [
            self.generation,
            self.covered_lsn,
            self.next_run,
            self.ids_last,
            self.ids_reserved,
            self.completed,
            self.cancelled,
            self.failed,
        ] {
            put_u64(&mut out, v);
        }
        let count = |n: usize| u32::try_from(n).expect("fewer than 2^32 buckets and moved jobs");
        out.extend_from_slice(&count(self.buckets.len()).to_le_bytes());
        out.extend_from_slice(&count(self.moved.len()).to_le_bytes());
        out.extend_from_slice(&self.crashes.to_le_bytes());
        out.push(u8::from(self.clean));
        out.extend_from_slice(&[0; 19]);
        debug_assert_eq!(out.len(), HEADER_BYTES);
        for (&bucket, entry) in &self.buckets {
            put_u64(&mut out, bucket);
            put_u64(&mut out, entry.jobs);
            put_u64(&mut out, entry.min_due_ms);
            out.extend_from_slice(&count(entry.runs.len()).to_le_bytes());
            out.extend_from_slice(&entry.keyed.to_le_bytes());
            for run in &entry.runs {
                put_u64(&mut out, run.generation);
                put_u64(&mut out, run.bytes);
                put_u64(&mut out, run.records);
            }
        }
        for (&id, &bucket) in &self.moved {
            put_u64(&mut out, id.0);
            put_u64(&mut out, bucket);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out
    }

    /// Decodes a manifest file. Never panics, whatever the bytes.
    pub fn decode(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let err = |offset: usize, what| ManifestError {
            offset: offset as u64,
            what,
        };
        if bytes.len() < HEADER_BYTES + 8 {
            return Err(err(0, "file shorter than a manifest"));
        }
        if bytes[..8] != MANIFEST_MAGIC {
            return Err(err(0, "not a manifest (bad magic)"));
        }
        let crc_at = bytes.len() - 8;
        if crc32fast::hash(&bytes[..crc_at]) != u32_at(bytes, crc_at)
            || u32_at(bytes, crc_at + 4) != 0
        {
            return Err(err(crc_at, "manifest checksum mismatch"));
        }
        if u32_at(bytes, 8) != MANIFEST_VERSION {
            return Err(err(8, "unknown manifest version"));
        }
        if u32_at(bytes, 12) as usize != HEADER_BYTES
            || bytes[92] > 1
            || bytes[93..HEADER_BYTES].iter().any(|&b| b != 0)
        {
            return Err(err(12, "unexpected manifest header layout"));
        }
        let mut m = Manifest {
            generation: u64_at(bytes, 16),
            covered_lsn: u64_at(bytes, 24),
            next_run: u64_at(bytes, 32),
            ids_last: u64_at(bytes, 40),
            ids_reserved: u64_at(bytes, 48),
            completed: u64_at(bytes, 56),
            cancelled: u64_at(bytes, 64),
            failed: u64_at(bytes, 72),
            crashes: u32_at(bytes, 88),
            clean: bytes[92] == 1,
            ..Manifest::default()
        };
        if m.ids_last > m.ids_reserved {
            return Err(err(40, "more ids scheduled than reserved"));
        }
        let (buckets, moved) = (u32_at(bytes, 80), u32_at(bytes, 84));
        let mut at = HEADER_BYTES;
        let take = |at: &mut usize, n: usize| -> Result<usize, ManifestError> {
            let start = *at;
            if crc_at - start < n {
                return Err(err(start, "manifest cut short"));
            }
            *at += n;
            Ok(start)
        };
        let mut last_bucket = None;
        for _ in 0..buckets {
            let s = take(&mut at, 32)?;
            let bucket = u64_at(bytes, s);
            if last_bucket.is_some_and(|b| b >= bucket) {
                return Err(err(s, "buckets out of order"));
            }
            last_bucket = Some(bucket);
            let runs = u32_at(bytes, s + 24);
            if runs == 0 {
                return Err(err(s, "bucket with no runs"));
            }
            let mut entry = BucketEntry {
                jobs: u64_at(bytes, s + 8),
                min_due_ms: u64_at(bytes, s + 16),
                runs: Vec::new(),
                keyed: u32_at(bytes, s + 28),
            };
            if u64::from(entry.keyed) > entry.jobs.max(u64::from(u32::MAX)) {
                return Err(err(s, "more keyed jobs than jobs"));
            }
            for _ in 0..runs {
                let r = take(&mut at, 24)?;
                let run = RunRef {
                    generation: u64_at(bytes, r),
                    bytes: u64_at(bytes, r + 8),
                    records: u64_at(bytes, r + 16),
                };
                if run.generation >= m.next_run
                    || entry
                        .runs
                        .last()
                        .is_some_and(|p| p.generation >= run.generation)
                {
                    return Err(err(r, "run generation out of order"));
                }
                entry.runs.push(run);
            }
            m.buckets.insert(bucket, entry);
        }
        let mut last_id = None;
        for _ in 0..moved {
            let s = take(&mut at, 16)?;
            let id = JobId(u64_at(bytes, s));
            if last_id.is_some_and(|l| l >= id) {
                return Err(err(s, "moved jobs out of order"));
            }
            last_id = Some(id);
            let bucket = u64_at(bytes, s + 8);
            if !m.buckets.contains_key(&bucket) {
                return Err(err(s, "moved job in a bucket that is not live"));
            }
            m.moved.insert(id, bucket);
        }
        if at != crc_at {
            return Err(err(at, "bytes after the last entry"));
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        let mut m = Manifest {
            generation: 3,
            covered_lsn: 1000,
            next_run: 9,
            ids_last: 40,
            ids_reserved: 64,
            completed: 5,
            cancelled: 6,
            failed: 7,
            ..Manifest::default()
        };
        m.buckets.insert(
            491_234,
            BucketEntry {
                jobs: 12,
                keyed: 0,
                min_due_ms: 1_768_442_400_000,
                runs: vec![
                    RunRef {
                        generation: 2,
                        bytes: 800,
                        records: 12,
                    },
                    RunRef {
                        generation: 8,
                        bytes: 100,
                        records: 1,
                    },
                ],
            },
        );
        m.moved.insert(JobId(77), 491_234);
        m
    }

    #[test]
    fn golden_bytes() {
        let bytes = sample().encode();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let expected = concat!(
            "54574d414e494653",
            "01000000",
            "70000000",
            "0300000000000000",
            "e803000000000000",
            "0900000000000000",
            "2800000000000000",
            "4000000000000000",
            "0500000000000000",
            "0600000000000000",
            "0700000000000000",
            "01000000",
            "01000000",
            "000000000000000000000000000000000000000000000000",
            // bucket
            "e27e070000000000",
            "0c00000000000000",
            "008d61bf9b010000",
            "02000000",
            "00000000",
            "0200000000000000",
            "2003000000000000",
            "0c00000000000000",
            "0800000000000000",
            "6400000000000000",
            "0100000000000000",
            // moved
            "4d00000000000000",
            "e27e070000000000",
            // crc
            "cd211eda",
            "00000000",
        );
        assert_eq!(hex, expected);
        assert_eq!(Manifest::decode(&bytes), Ok(sample()));
    }

    #[test]
    fn every_flipped_byte_and_every_cut_is_refused() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            assert!(Manifest::decode(&b).is_err(), "flip at {i} went unnoticed");
        }
        for cut in 0..bytes.len() {
            assert!(Manifest::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let empty = Manifest::default().encode();
        assert_eq!(Manifest::decode(&empty), Ok(Manifest::default()));
    }
}
