//! One simulated file (an inode): its live and durable images, tracked per 512-byte sector.

use std::ops::Range;

/// The unit a disk writes atomically: a sector either holds its old or its new content.
pub(crate) const SECTOR_BYTES: usize = 512;
/// The unit of the page cache: syncs are widened to whole pages, and without torn pages a
/// crash keeps or loses a page's unsynced sectors together.
pub(crate) const PAGE_BYTES: usize = 4096;
/// Sectors per page.
pub(crate) const SECTORS_PER_PAGE: usize = PAGE_BYTES / SECTOR_BYTES;
const _: () = assert!(PAGE_BYTES.is_multiple_of(SECTOR_BYTES));

/// A file's contents on the simulated disk. Its length is fixed at creation.
#[derive(Debug, Clone)]
pub(crate) struct Inode {
    /// What reads see: every write, synced or not.
    pub(crate) live: Vec<u8>,
    /// What the media holds: only what a successful sync persisted (plus test edits).
    pub(crate) durable: Vec<u8>,
    /// Per sector: written since it was last persisted (or dropped by a failed sync).
    pub(crate) dirty: Vec<bool>,
    /// Per sector: holds data that reached the media (a successful sync, or an unsynced write
    /// that a crash kept). Bit flips "in synced data" aim here, not at never-written zeros.
    pub(crate) synced: Vec<bool>,
    /// Per sector: unreadable (a media error): every read that touches it fails with `EIO`.
    /// A property of the media, so it survives crashes.
    pub(crate) bad: Vec<bool>,
    /// Open handles on this inode; it outlives its names while this is non-zero.
    pub(crate) open_handles: usize,
}

impl Inode {
    /// A new file of `len_bytes` zeros, nothing dirty.
    pub(crate) fn new(len_bytes: usize) -> Inode {
        let sectors = len_bytes.div_ceil(SECTOR_BYTES);
        Inode {
            live: vec![0; len_bytes],
            durable: vec![0; len_bytes],
            dirty: vec![false; sectors],
            synced: vec![false; sectors],
            bad: vec![false; sectors],
            open_handles: 0,
        }
    }

    /// A file whose media holds `image` and nothing else (what a crash leaves).
    pub(crate) fn from_image(image: Vec<u8>, synced: Vec<bool>) -> Inode {
        assert_eq!(synced.len(), image.len().div_ceil(SECTOR_BYTES));
        Inode {
            live: image.clone(),
            durable: image,
            dirty: vec![false; synced.len()],
            bad: vec![false; synced.len()],
            synced,
            open_handles: 0,
        }
    }

    pub(crate) fn len_bytes(&self) -> usize {
        self.live.len()
    }

    pub(crate) fn sector_count(&self) -> usize {
        self.dirty.len()
    }

    /// The byte range of sector `s` (the last one may be short).
    pub(crate) fn sector_bytes(&self, s: usize) -> Range<usize> {
        let start = s * SECTOR_BYTES;
        start..(start + SECTOR_BYTES).min(self.len_bytes())
    }

    /// Whether a read of `range` touches a bad sector.
    pub(crate) fn reads_bad(&self, range: &Range<usize>) -> bool {
        Self::sectors_of(range).any(|s| self.bad[s])
    }

    /// Marks the sectors that `range` touches bad (or good again).
    pub(crate) fn set_bad(&mut self, range: &Range<usize>, bad: bool) {
        for s in Self::sectors_of(range) {
            self.bad[s] = bad;
        }
    }

    /// The sectors that `range` touches.
    fn sectors_of(range: &Range<usize>) -> Range<usize> {
        if range.is_empty() {
            return 0..0;
        }
        range.start / SECTOR_BYTES..range.end.div_ceil(SECTOR_BYTES)
    }

    /// The sectors of the whole pages that `range` touches, clipped to the file: what one
    /// msync of `range` writes back.
    fn page_sectors_of(&self, range: &Range<usize>) -> Range<usize> {
        if range.is_empty() {
            return 0..0;
        }
        let first_page = range.start / PAGE_BYTES;
        let end_page = range.end.div_ceil(PAGE_BYTES);
        let end = (end_page * SECTORS_PER_PAGE).min(self.sector_count());
        first_page * SECTORS_PER_PAGE..end
    }

    /// A write: live only, its sectors become dirty.
    pub(crate) fn write(&mut self, offset: usize, data: &[u8]) {
        let range = offset..offset + data.len();
        self.live[range.clone()].copy_from_slice(data);
        for s in Self::sectors_of(&range) {
            self.dirty[s] = true;
        }
    }

    /// A successful sync of `range`: the dirty sectors of its pages reach the media. Returns
    /// how many sectors were written back.
    pub(crate) fn sync(&mut self, range: &Range<usize>) -> usize {
        let mut persisted = 0;
        for s in self.page_sectors_of(range) {
            if self.dirty[s] {
                let bytes = self.sector_bytes(s);
                self.durable[bytes.clone()].copy_from_slice(&self.live[bytes]);
                self.dirty[s] = false;
                self.synced[s] = true;
                persisted += 1;
            }
        }
        persisted
    }

    /// A failed sync of `range`, as Linux does it: the write-back error is reported once and
    /// the pages are marked clean *without* reaching the media. The live image still shows the
    /// data, but no later sync will persist it and a crash loses it. Returns how many sectors
    /// were dropped.
    pub(crate) fn fail_sync(&mut self, range: &Range<usize>) -> usize {
        let mut dropped = 0;
        for s in self.page_sectors_of(range) {
            if self.dirty[s] {
                self.dirty[s] = false;
                dropped += 1;
            }
        }
        dropped
    }

    /// A test's direct edit: into the live image, and also onto the media if `durable`
    /// (dirty marks are left alone: other bytes of those sectors may still be unsynced).
    pub(crate) fn write_raw(&mut self, offset: usize, data: &[u8], durable: bool) {
        let range = offset..offset + data.len();
        if durable {
            self.live[range.clone()].copy_from_slice(data);
            self.durable[range.clone()].copy_from_slice(data);
            for s in Self::sectors_of(&range) {
                self.synced[s] = true;
            }
        } else {
            self.write(offset, data);
        }
    }

    /// Media corruption: flips one bit in both images.
    pub(crate) fn flip_bit(&mut self, byte: usize, bit: u8) {
        assert!(bit < 8, "bit {bit} is not a bit of a byte");
        self.live[byte] ^= 1 << bit;
        self.durable[byte] ^= 1 << bit;
    }

    /// The indexes of the dirty sectors, in order.
    pub(crate) fn dirty_sectors(&self) -> impl Iterator<Item = usize> + '_ {
        self.dirty
            .iter()
            .enumerate()
            .filter(|(_, d)| **d)
            .map(|(s, _)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_widens_to_pages_and_clips_to_the_file() {
        let mut inode = Inode::new(PAGE_BYTES + 700);
        inode.write(10, b"a"); // page 0, sector 0
        inode.write(4000, b"b"); // page 0, sector 7
        inode.write(PAGE_BYTES + 600, b"c"); // page 1, last (short) sector
        assert_eq!(inode.dirty_sectors().collect::<Vec<_>>(), [0, 7, 9]);
        assert_eq!(inode.sync(&(100..101)), 2, "the whole first page");
        assert_eq!(inode.durable[4000], b'b');
        assert_eq!(inode.durable[PAGE_BYTES + 600], 0);
        assert_eq!(inode.sync(&(PAGE_BYTES..PAGE_BYTES + 1)), 1);
        assert_eq!(inode.durable, inode.live);
        assert_eq!(inode.sync(&(0..0)), 0);
    }

    #[test]
    fn failed_sync_drops_without_persisting() {
        let mut inode = Inode::new(PAGE_BYTES);
        inode.write(0, b"lost");
        assert_eq!(inode.fail_sync(&(0..4)), 1);
        assert_eq!(&inode.live[..4], b"lost");
        assert_eq!(&inode.durable[..4], [0; 4]);
        assert_eq!(inode.sync(&(0..4)), 0, "a retry persists nothing");
    }

    #[test]
    fn write_straddling_sectors_dirties_both() {
        let mut inode = Inode::new(2 * SECTOR_BYTES);
        inode.write(SECTOR_BYTES - 1, b"xy");
        assert_eq!(inode.dirty_sectors().count(), 2);
        inode.write(0, b"");
        assert_eq!(inode.dirty_sectors().count(), 2);
    }
}
