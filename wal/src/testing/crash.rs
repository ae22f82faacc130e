//! [`FaultDisk::crash`]: what a power cut (and, if asked, a bad disk) could leave behind.
//!
//! The order of events in one crash, each step drawing from the old disk's random stream:
//! 1. the directory: the durable names, plus a prefix of the unsynced operations;
//! 2. for each surviving file, in inode order: the durable image, plus each unsynced sector
//!    (or each page of them) with probability `keep_unsynced`;
//! 3. non-powersafe overwrite: whole sectors of pages being written back garbled; 4.
//!    misdirected writes; 5. bit flips in kept unsynced bytes; 6. bit flips in synced data.

use std::collections::BTreeMap;

use super::disk::{DiskState, FaultDisk};
use super::inode::{Inode, SECTORS_PER_PAGE};
use super::rng::SimRng;

/// What a crash may do to the data. Build one with [`CrashOptions::clean`],
/// [`CrashOptions::all_unsynced`], [`CrashOptions::random`], or `Default` (a typical power
/// cut) and struct update syntax.
///
/// The *power-cut* faults (`keep_unsynced`, `torn_pages`, `bit_flips_unsynced`,
/// `undo_dir_ops`) never touch a byte that was synced and not written since; nor does
/// `garbled_sectors`, except in a page that holds unsynced writes (storage without powersafe
/// overwrite): a correct log must recover every acknowledged record after them, which it can
/// only do if it never writes again into a page that holds acknowledged data. The *media* faults
/// (`bit_flips_synced`, `misdirected_writes`) can damage synced data: a correct log must
/// then report corruption (or still recover everything), never silently lose or invent data.
#[derive(Debug, Clone, PartialEq)]
pub struct CrashOptions {
    /// The probability that each unsynced 512-byte sector (or, without `torn_pages`, each
    /// page's unsynced sectors together) reaches the media. With `undo_dir_ops`, also the
    /// probability that each unsynced directory operation survives, in order: the first one
    /// lost ends the surviving prefix.
    pub keep_unsynced: f64,
    /// Decide each sector of a page on its own, so that a page can be half old, half new.
    pub torn_pages: bool,
    /// Bits to flip in bytes that were written, not synced, and kept by the crash (a torn
    /// write caught mid-sector). Skipped when there are none.
    pub bit_flips_unsynced: u32,
    /// Bits to flip in sectors that hold synced data (media corruption). Skipped when there
    /// are none.
    pub bit_flips_synced: u32,
    /// Unsynced sectors whose new content lands on another sector of the same file, while
    /// their own sector keeps its old content.
    pub misdirected_writes: u32,
    /// Lose a suffix of the unsynced directory operations (see `keep_unsynced`); otherwise
    /// all of them survive.
    pub undo_dir_ops: bool,
    /// Non-powersafe overwrite: this many sectors, each picked among *all* the sectors of the
    /// pages that hold unsynced writes (the page cache writes a dirty page back whole, so its
    /// unchanged sectors are rewritten too), are garbled whole by the power cut: random bytes,
    /// old or synced contents included. Skipped when no page holds unsynced writes.
    pub garbled_sectors: u32,
}

impl Default for CrashOptions {
    /// A typical power cut: half the unsynced sectors survive, pages tear, a suffix of the
    /// unsynced directory operations is lost; no corruption.
    fn default() -> CrashOptions {
        CrashOptions {
            keep_unsynced: 0.5,
            torn_pages: true,
            bit_flips_unsynced: 0,
            bit_flips_synced: 0,
            misdirected_writes: 0,
            undo_dir_ops: true,
            garbled_sectors: 0,
        }
    }
}

impl CrashOptions {
    /// Only what was synced survives: no unsynced data, no unsynced directory operation.
    pub fn clean() -> CrashOptions {
        CrashOptions {
            keep_unsynced: 0.0,
            torn_pages: false,
            undo_dir_ops: true,
            ..CrashOptions::default()
        }
    }

    /// Everything survives, as if the cache had been written back just in time: the crash
    /// image equals the live image.
    pub fn all_unsynced() -> CrashOptions {
        CrashOptions {
            keep_unsynced: 1.0,
            torn_pages: false,
            undo_dir_ops: false,
            ..CrashOptions::default()
        }
    }

    /// A random power cut (no media faults), covering the extremes often, on storage without
    /// powersafe overwrite (one or two garbled sectors in pages being written back).
    pub fn random(rng: &mut SimRng) -> CrashOptions {
        let keep_unsynced = match rng.below(4) {
            0 => 0.0,
            1 => 1.0,
            2 => 0.5,
            _ => rng.next_f64(),
        };
        let torn_pages = rng.chance(0.5);
        let bit_flips_unsynced = if rng.chance(0.25) {
            rng.between(1, 3) as u32
        } else {
            0
        };
        CrashOptions {
            keep_unsynced,
            torn_pages,
            bit_flips_unsynced,
            bit_flips_synced: 0,
            misdirected_writes: 0,
            undo_dir_ops: rng.chance(0.5),
            garbled_sectors: rng.between(1, 2) as u32,
        }
    }

    /// A random power cut that may also corrupt synced data (flips, misdirected writes).
    pub fn random_with_corruption(rng: &mut SimRng) -> CrashOptions {
        let mut opts = CrashOptions::random(rng);
        opts.bit_flips_synced = rng.below(3) as u32;
        opts.misdirected_writes = rng.below(2) as u32;
        opts
    }
}

/// A sector of a surviving file: (inode, sector index).
type SectorId = (u64, usize);

impl FaultDisk {
    /// A power cut. Returns a *new*, independent disk holding what the media could hold
    /// afterwards, unlocked, with no failpoints armed and nothing unsynced (its live image is
    /// its durable image). This disk is not changed, except that its random stream moves on:
    /// handles on it stay valid and keep seeing the old state, so a test can drop the old
    /// engine after the crash. Deterministic for a seed and a history of calls.
    pub fn crash(&self, opts: &CrashOptions) -> FaultDisk {
        assert!(
            (0.0..=1.0).contains(&opts.keep_unsynced),
            "keep_unsynced {} is not a probability",
            opts.keep_unsynced
        );
        let mut old = self.lock();
        let names = surviving_names(&mut old, opts);

        let mut images: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let mut synced: BTreeMap<u64, Vec<bool>> = BTreeMap::new();
        let mut dirty_all: Vec<SectorId> = Vec::new();
        let mut kept: Vec<SectorId> = Vec::new();
        let inos: Vec<u64> = {
            let mut v: Vec<u64> = names.values().copied().collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let DiskState { inodes, rng, .. } = &mut *old;
        for &ino in &inos {
            let inode = &inodes[&ino];
            let mut image = inode.durable.clone();
            let mut on_media = inode.synced.clone();
            let mut page_kept: Option<(usize, bool)> = None;
            for s in inode.dirty_sectors() {
                dirty_all.push((ino, s));
                let keep = if opts.torn_pages {
                    rng.chance(opts.keep_unsynced)
                } else {
                    // One draw per page, shared by the page's dirty sectors.
                    let page = s / SECTORS_PER_PAGE;
                    match page_kept {
                        Some((p, keep)) if p == page => keep,
                        _ => {
                            let keep = rng.chance(opts.keep_unsynced);
                            page_kept = Some((page, keep));
                            keep
                        }
                    }
                };
                if keep {
                    let bytes = inode.sector_bytes(s);
                    image[bytes.clone()].copy_from_slice(&inode.live[bytes]);
                    on_media[s] = true;
                    kept.push((ino, s));
                }
            }
            images.insert(ino, image);
            synced.insert(ino, on_media);
        }

        if opts.garbled_sectors > 0 {
            let candidates = sectors_of_dirty_pages(inodes, &dirty_all);
            for _ in 0..opts.garbled_sectors {
                garble(rng, inodes, &candidates, &mut images, &mut synced);
            }
        }
        for _ in 0..opts.misdirected_writes {
            misdirect(rng, inodes, &dirty_all, &mut images, &mut synced);
        }
        for _ in 0..opts.bit_flips_unsynced {
            flip_unsynced(rng, inodes, &kept, &mut images);
        }
        for _ in 0..opts.bit_flips_synced {
            flip_synced(rng, inodes, &synced, &mut images);
        }

        let mut stats = old.stats;
        stats.crashes += 1;
        let mut new = DiskState::new(old.seed, old.rng.fork(), stats);
        for (ino, image) in images {
            let on_media = synced.remove(&ino).expect("one per image");
            let mut inode = Inode::from_image(image, on_media);
            inode.bad.clone_from(&old.inodes[&ino].bad); // the media keeps its bad sectors
            new.inodes.insert(ino, inode);
        }
        new.next_ino = old.next_ino;
        new.durable_names = names.clone();
        new.live_names = names;
        // Files the crash left unnamed go now: a handle's drop only collects its own file.
        new.collect_garbage();
        FaultDisk::from_state(new)
    }
}

/// The directory after the crash: durable names, then unsynced operations in order while
/// each survives its draw (all of them without `undo_dir_ops`).
fn surviving_names(old: &mut DiskState, opts: &CrashOptions) -> BTreeMap<String, u64> {
    let mut names = old.durable_names.clone();
    for op in &old.pending {
        if opts.undo_dir_ops && !old.rng.chance(opts.keep_unsynced) {
            break;
        }
        op.apply(&mut names);
    }
    names
}

/// Every sector of every page that holds a dirty sector: what a write-back rewrites.
fn sectors_of_dirty_pages(inodes: &BTreeMap<u64, Inode>, dirty_all: &[SectorId]) -> Vec<SectorId> {
    let mut pages: Vec<(u64, usize)> = dirty_all
        .iter()
        .map(|&(ino, s)| (ino, s / SECTORS_PER_PAGE))
        .collect();
    pages.dedup();
    pages
        .into_iter()
        .flat_map(|(ino, page)| {
            let end = ((page + 1) * SECTORS_PER_PAGE).min(inodes[&ino].sector_count());
            (page * SECTORS_PER_PAGE..end).map(move |s| (ino, s))
        })
        .collect()
}

/// One sector of a page being written back, garbled whole (random bytes).
fn garble(
    rng: &mut SimRng,
    inodes: &BTreeMap<u64, Inode>,
    candidates: &[SectorId],
    images: &mut BTreeMap<u64, Vec<u8>>,
    synced: &mut BTreeMap<u64, Vec<bool>>,
) {
    let Some(&(ino, s)) = rng.pick(candidates) else {
        return;
    };
    let bytes = inodes[&ino].sector_bytes(s);
    let image = images.get_mut(&ino).expect("surviving inode");
    rng.fill(&mut image[bytes]);
    synced.get_mut(&ino).expect("surviving inode")[s] = true;
}

/// One misdirected write: an unsynced sector's new content lands on another sector of its
/// file (which then holds it, on the media), and its own sector keeps its durable content.
fn misdirect(
    rng: &mut SimRng,
    inodes: &BTreeMap<u64, Inode>,
    dirty_all: &[SectorId],
    images: &mut BTreeMap<u64, Vec<u8>>,
    synced: &mut BTreeMap<u64, Vec<bool>>,
) {
    let Some(&(ino, from)) = rng.pick(dirty_all) else {
        return;
    };
    let inode = &inodes[&ino];
    let sectors = inode.sector_count() as u64;
    if sectors < 2 {
        return;
    }
    // Any sector but its own.
    let mut to = rng.below(sectors - 1) as usize;
    if to >= from {
        to += 1;
    }
    let (src, dst) = (inode.sector_bytes(from), inode.sector_bytes(to));
    let n = src.len().min(dst.len());
    let image = images.get_mut(&ino).expect("surviving inode");
    image[src.clone()].copy_from_slice(&inode.durable[src.clone()]);
    image[dst.start..dst.start + n].copy_from_slice(&inode.live[src.start..src.start + n]);
    synced.get_mut(&ino).expect("surviving inode")[to] = true;
}

/// One bit flip in a byte that a kept unsynced sector changed (never in bytes it left as
/// they were on the media, which may be synced data sharing the sector).
fn flip_unsynced(
    rng: &mut SimRng,
    inodes: &BTreeMap<u64, Inode>,
    kept: &[SectorId],
    images: &mut BTreeMap<u64, Vec<u8>>,
) {
    let changed_in = |&(ino, s): &SectorId| {
        let inode = &inodes[&ino];
        inode
            .sector_bytes(s)
            .filter(move |&b| inode.live[b] != inode.durable[b])
    };
    // Pick a sector with changed bytes, then one of them (without listing every byte: a
    // crash of a large file must stay cheap).
    let sectors: Vec<SectorId> = kept
        .iter()
        .filter(|id| changed_in(id).next().is_some())
        .copied()
        .collect();
    let Some(id) = rng.pick(&sectors) else {
        return;
    };
    let bytes: Vec<usize> = changed_in(id).collect();
    let byte = *rng.pick(&bytes).expect("chosen for having changed bytes");
    let bit = rng.below(8);
    images.get_mut(&id.0).expect("surviving inode")[byte] ^= 1 << bit;
}

/// One bit flip anywhere in a sector that holds data that reached the media.
fn flip_synced(
    rng: &mut SimRng,
    inodes: &BTreeMap<u64, Inode>,
    synced: &BTreeMap<u64, Vec<bool>>,
    images: &mut BTreeMap<u64, Vec<u8>>,
) {
    let candidates: Vec<SectorId> = synced
        .iter()
        .flat_map(|(&ino, on_media)| {
            on_media
                .iter()
                .enumerate()
                .filter(|(_, on)| **on)
                .map(move |(s, _)| (ino, s))
        })
        .collect();
    if let Some(&(ino, s)) = rng.pick(&candidates) {
        let bytes = inodes[&ino].sector_bytes(s);
        let byte = bytes.start + rng.below(bytes.len() as u64) as usize;
        let bit = rng.below(8);
        images.get_mut(&ino).expect("surviving inode")[byte] ^= 1 << bit;
    }
}
