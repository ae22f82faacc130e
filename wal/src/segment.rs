//! Segment files: names, creation (with the header made durable), and chunked reading.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::Lsn;
use crate::error::Error;
use crate::format::{
    FIRST_BLOCK_OFFSET, SEGMENT_HEADER_BYTES, SegmentHeader, encode_header, write_bound_after,
};
use crate::storage::{Storage, StorageFile};

/// Suffix of segment files.
pub const SEGMENT_SUFFIX: &str = ".wal";
/// Suffix of the spares of format 2's first release (a preallocated next segment, renamed into
/// place by a roll). No longer written: the next segment is now created under its own name,
/// header-less. Recovery removes any it finds.
pub const SPARE_SUFFIX: &str = ".wal.spare";
const ID_DIGITS: usize = 16;

/// The file name of segment `id`: 16 zero-padded decimal digits and `.wal`.
pub fn segment_file_name(id: u64) -> String {
    format!("{id:016}{SEGMENT_SUFFIX}")
}

/// The file name of the spare that would have become segment `id` (format 2's first release).
#[cfg(test)]
pub(crate) fn spare_file_name(id: u64) -> String {
    format!("{id:016}{SPARE_SUFFIX}")
}

fn parse_id(name: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != ID_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The segment id of a segment file name, or `None` for any other file.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    parse_id(name, SEGMENT_SUFFIX)
}

/// Whether `name` is a spare segment file.
pub(crate) fn is_spare_file_name(name: &str) -> bool {
    parse_id(name, SPARE_SUFFIX).is_some()
}

/// Suffix of the fresh copy that recovery writes of a segment before renaming it into place.
pub const COPY_SUFFIX: &str = ".wal.copy";

/// The file name of recovery's copy of segment `id`.
pub(crate) fn copy_file_name(id: u64) -> String {
    format!("{id:016}{COPY_SUFFIX}")
}

/// Whether `name` is a leftover of recovery's copy (removed on open, like spares).
pub(crate) fn is_copy_file_name(name: &str) -> bool {
    parse_id(name, COPY_SUFFIX).is_some()
}

/// A new random salt. Only uniqueness matters (a stale record must not validate), not secrecy:
/// std's randomly keyed hasher, a clock and a counter suffice without a `rand` dependency.
pub(crate) fn random_salt() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// One segment as the log keeps it in memory.
#[derive(Debug)]
pub(crate) struct Segment<F> {
    pub(crate) id: u64,
    pub(crate) salt: u64,
    pub(crate) first_lsn: Lsn,
    pub(crate) file: Arc<F>,
    pub(crate) file_bytes: u64,
    /// Offset just past the last byte written: the end of the open group's frames, or, when no
    /// group is open, the start of the next block (a page boundary).
    pub(crate) end: u64,
    /// LSN of the last record in it, `first_lsn - 1` when it has none.
    pub(crate) last_lsn: Lsn,
    /// The highest write bound that its header or a durable block names: the log writes
    /// nothing at or after it (docs/wal-format.md, "Write bound"). Raised as blocks become
    /// durable.
    pub(crate) write_bound: u64,
    /// Where the bytes of the file start that nothing has proven zero (`file_bytes`: none).
    /// Past its write bound, a segment found at open was never read: bytes that something
    /// other than the log wrote there (a misdirected write) would surface once appends raise
    /// the bound over them, so the log proves them zero (see [`zero_stray`]) before a block
    /// names a bound past this.
    pub(crate) unchecked_from: u64,
}

/// Chunks of [`zero_stray`]'s reads.
const STRAY_CHUNK_BYTES: usize = 256 << 10;

/// Proves bytes `from..to` of `file` zero (both page aligned), writing zeros over (and
/// syncing) every chunk that is not. Returns how many non-zero bytes it found. The log wrote nothing there:
/// whatever it finds, something else wrote.
pub(crate) fn zero_stray<F: StorageFile>(file: &F, from: u64, to: u64) -> io::Result<u64> {
    let mut buf = vec![0u8; STRAY_CHUNK_BYTES.min(to.saturating_sub(from) as usize)];
    let mut at = from;
    let mut stray = 0u64;
    while at < to {
        let piece = &mut buf[..STRAY_CHUNK_BYTES.min((to - at) as usize)];
        file.read_at(at, piece)?;
        if !all_zero(piece) {
            stray += piece.iter().filter(|&&b| b != 0).count() as u64;
            piece.fill(0);
            file.write_at(at, piece)?;
            file.sync_range(at, piece.len() as u64)?;
        }
        at += piece.len() as u64;
    }
    Ok(stray)
}

/// Maps a storage error from preallocating segment `id` to the crate error.
pub(crate) fn create_error(id: u64, e: io::Error) -> Error {
    if e.kind() == io::ErrorKind::StorageFull || e.raw_os_error() == Some(28) {
        Error::NoSpace {
            segment: id,
            source: e,
        }
    } else {
        Error::Io(e)
    }
}

/// Creates the file of segment `id` ahead of need: preallocated, all zero, with no header (so
/// recovery treats it as a segment that never started), its pages pre-faulted
/// ([`StorageFile::prefault`]) and its directory entry durable. A roll later writes its header
/// (see [`start_segment`]). A leftover file of the same name is replaced only if the caller
/// knows it is not a segment (recovery removed every trailing all-zero file).
pub(crate) fn create_next<S: Storage>(storage: &S, id: u64, bytes: u64) -> Result<S::File, Error> {
    let name = segment_file_name(id);
    let file = storage
        .create(&name, bytes)
        .map_err(|e| create_error(id, e))?;
    let made = file.prefault().and_then(|()| storage.sync_dir());
    match made {
        Ok(()) => Ok(file),
        Err(e) => {
            drop(file);
            let _ = storage.remove(&name);
            Err(Error::Io(e))
        }
    }
}

/// Turns a file made by [`create_next`] into segment `id`: its header written and synced. The
/// caller made sure the predecessor is durable first (invariant 3 of docs/wal-format.md).
pub(crate) fn start_segment<F: StorageFile>(
    file: Arc<F>,
    id: u64,
    first_lsn: Lsn,
    (bytes, reach): (u64, u64),
) -> Result<Segment<F>, Error> {
    let file_bytes = file.len_bytes();
    assert_eq!(
        file_bytes, bytes,
        "storage created a file of the asked length"
    );
    let header = SegmentHeader {
        segment_id: id,
        salt: file.new_salt(),
        first_lsn,
        segment_bytes: bytes,
        write_bound: write_bound_after(FIRST_BLOCK_OFFSET, reach, bytes),
    };
    file.write_at(0, &encode_header(&header))?;
    file.sync_range(0, SEGMENT_HEADER_BYTES as u64)?;
    Ok(Segment {
        id,
        salt: header.salt,
        first_lsn,
        file,
        file_bytes,
        end: FIRST_BLOCK_OFFSET,
        last_lsn: first_lsn - 1,
        write_bound: header.write_bound,
        // A file made by `create_next` (all zero by `Storage::create`) or one found at open
        // and proven zero since.
        unchecked_from: file_bytes,
    })
}

/// Creates segment `id` from nothing (a fresh log): file, header synced, directory synced.
/// Its pages are not prepared here as a segment made ahead is ([`StorageFile::prefault`]):
/// that writes the whole file, which would make a fresh log's first open wait for 64 MiB of
/// zeros (108-140 ms measured; a client that times its first reply saw it). The preparing
/// thread writes them instead, ahead of the appender ([`StorageFile::prepare_in_use`]).
pub(crate) fn install_segment<S: Storage>(
    storage: &S,
    id: u64,
    first_lsn: Lsn,
    (bytes, reach): (u64, u64),
) -> Result<Segment<S::File>, Error> {
    let file = storage
        .create(&segment_file_name(id), bytes)
        .map_err(|e| create_error(id, e))?;
    let segment = start_segment(Arc::new(file), id, first_lsn, (bytes, reach))?;
    storage.sync_dir()?;
    Ok(segment)
}

/// A window of a file held in one reusable buffer, so scanning a segment reads it in big
/// chunks and allocates nothing per record. The buffer never exceeds `max(chunk, largest
/// request)`, and requests are bounded by the file (or the caller's limit).
pub(crate) struct Window {
    buf: Vec<u8>,
    start: u64,
    len: usize,
    chunk_bytes: usize,
    /// Long checks of a file (recovery's zero checks) may use a second thread: only for a
    /// storage whose I/O order does not have to be deterministic (real files).
    pub(crate) parallel: bool,
}

impl Window {
    pub(crate) fn new(chunk_bytes: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            len: 0,
            chunk_bytes,
            parallel: false,
        }
    }

    /// Forgets the contents (the next request reads the file again).
    pub(crate) fn reset(&mut self) {
        self.len = 0;
    }

    /// Bytes `offset .. offset + len` of `file`, reading at most up to `limit` (which must not
    /// exceed the file length). The caller guarantees `offset + len <= limit`.
    pub(crate) fn get<F: StorageFile>(
        &mut self,
        file: &F,
        limit: u64,
        offset: u64,
        len: usize,
    ) -> io::Result<&[u8]> {
        self.get_keeping(file, limit, offset, offset, len)
    }

    /// Bytes `offset .. offset + len` if the window holds them (as the last requests left
    /// them), without reading anything.
    pub(crate) fn held(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len as u64)?;
        (offset >= self.start && end <= self.start + self.len as u64).then(|| {
            let at = (offset - self.start) as usize;
            &self.buf[at..at + len]
        })
    }

    /// Like [`Window::get`], for a caller that will come back to `keep` (`<= offset`): the
    /// start of the record or group it is reading. When the request is not in the buffer and
    /// `keep` is, the buffer goes on from `keep`: the bytes it holds from there are kept (moved
    /// to its front) and only the rest is read, so a scan that reads a group record by record
    /// and then compares the group with its mirror, or a record whose header and frame fall on
    /// two sides of a chunk's end, reads each byte of the file once. A hint only: whatever
    /// `keep` is, the bytes returned are the file's at `offset`.
    #[inline]
    pub(crate) fn get_keeping<F: StorageFile>(
        &mut self,
        file: &F,
        limit: u64,
        keep: u64,
        offset: u64,
        len: usize,
    ) -> io::Result<&[u8]> {
        let end = offset + len as u64;
        assert!(keep <= offset && end <= limit);
        // Held already (a scan asks for the same bytes several times: a record's header, its
        // frame, the header at the next sector boundary): no read, no call into the file.
        if offset < self.start || end > self.start + self.len as u64 {
            self.fill(file, limit, keep, offset, end)?;
        }
        let at = (offset - self.start) as usize;
        Ok(&self.buf[at..at + len])
    }

    /// Reads what [`Window::get_keeping`] asked for and did not hold: bytes `offset .. end`,
    /// from `keep` on if the buffer holds it.
    fn fill<F: StorageFile>(
        &mut self,
        file: &F,
        limit: u64,
        keep: u64,
        offset: u64,
        end: u64,
    ) -> io::Result<()> {
        assert!(limit <= file.len_bytes());
        let held_end = self.start + self.len as u64;
        // From `keep` if the buffer holds it (then also what follows it in the buffer),
        // else from `offset`.
        let (from, have) = if keep >= self.start && keep < held_end {
            let at = (keep - self.start) as usize;
            (keep, self.len - at)
        } else {
            (offset, 0)
        };
        let span = (end - from) as usize;
        let read = (limit - from).min(self.chunk_bytes.max(span) as u64) as usize;
        // An earlier request's limit may have been further.
        let have = have.min(read);
        if self.buf.len() < read {
            self.buf.resize(read, 0);
        }
        if have > 0 {
            let at = (from - self.start) as usize;
            self.buf.copy_within(at..at + have, 0);
        }
        self.len = 0;
        file.read_at(from + have as u64, &mut self.buf[have..read])?;
        self.start = from;
        self.len = read;
        Ok(())
    }
}

/// Whether every byte is zero; written to vectorize, as recovery runs it over whole segments.
pub(crate) fn all_zero(bytes: &[u8]) -> bool {
    let mut chunks = bytes.chunks_exact(64);
    for c in &mut chunks {
        if c.iter().fold(0u8, |acc, &b| acc | b) != 0 {
            return false;
        }
    }
    chunks.remainder().iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip_and_reject_others() {
        assert_eq!(segment_file_name(1), "0000000000000001.wal");
        assert_eq!(parse_segment_file_name("0000000000000001.wal"), Some(1));
        assert_eq!(parse_segment_file_name("000000000000001.wal"), None);
        assert_eq!(parse_segment_file_name("000000000000000a.wal"), None);
        assert_eq!(parse_segment_file_name("0000000000000001.wal.spare"), None);
        assert!(is_spare_file_name(&spare_file_name(12)));
        assert_eq!(parse_segment_file_name("LOCK"), None);
    }

    #[test]
    fn zero_check() {
        let mut b = vec![0u8; 200];
        assert!(all_zero(&b));
        b[199] = 1;
        assert!(!all_zero(&b));
        b[199] = 0;
        b[3] = 1;
        assert!(!all_zero(&b));
    }

    /// A file in memory that counts the bytes read from it.
    struct Counted {
        bytes: Vec<u8>,
        read: std::sync::atomic::AtomicU64,
    }

    impl StorageFile for Counted {
        fn len_bytes(&self) -> u64 {
            self.bytes.len() as u64
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            let at = offset as usize;
            buf.copy_from_slice(&self.bytes[at..at + buf.len()]);
            self.read.fetch_add(buf.len() as u64, Ordering::Relaxed);
            Ok(())
        }
        fn write_at(&self, _: u64, _: &[u8]) -> io::Result<()> {
            unreachable!("read only")
        }
        fn sync_range(&self, _: u64, _: u64) -> io::Result<()> {
            unreachable!("read only")
        }
    }

    fn counted(len: usize) -> Counted {
        Counted {
            bytes: (0..len).map(|i| (i * 31 % 251) as u8).collect(),
            read: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whatever the requests and the kept offsets, a window answers the file's bytes.
    #[test]
    fn a_window_answers_the_files_bytes() {
        let file = counted(100_000);
        let mut w = Window::new(4096);
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = (next() % 9000) as usize;
            let offset = next() % (100_000 - len as u64 + 1);
            let keep = offset - next() % (offset + 1).min(20_000);
            let limit = offset + len as u64 + next() % (100_000 - offset - len as u64 + 1);
            let got = w
                .get_keeping(&file, limit, keep, offset, len)
                .expect("read");
            assert_eq!(got, &file.bytes[offset as usize..offset as usize + len]);
        }
    }

    /// A scan that reads a group record by record, keeping its start, then the group with its
    /// copy after it (recovery's mirror check), reads each byte of the file once. Without the
    /// kept start, 1.5 times here; the open of a log of 1M schedules read 947 MB with `pread`
    /// where it now reads 365 MB (the recovery scan and the replay each read the log once).
    #[test]
    fn a_scan_that_keeps_its_group_reads_each_byte_once() {
        let (group, records) = (300_000u64, 1000u64);
        let file = counted((8 * group) as usize);
        let mut w = Window::new(64 << 10);
        let mut b = 0;
        while b + 2 * group <= file.len_bytes() {
            for r in 0..records {
                let off = b + r * (group / records);
                w.get_keeping(&file, file.len_bytes(), b, off, 16)
                    .expect("header");
                w.get_keeping(&file, file.len_bytes(), b, off, (group / records) as usize)
                    .expect("frame");
            }
            w.get_keeping(&file, file.len_bytes(), b, b + group, 64)
                .expect("the copy's header");
            let span = w.get(&file, file.len_bytes(), b, (2 * group) as usize);
            assert_eq!(span.expect("group and copy").len() as u64, 2 * group);
            b += 2 * group;
        }
        assert_eq!(file.read.load(Ordering::Relaxed), file.len_bytes());
    }

    #[test]
    fn salts_differ() {
        assert_ne!(random_salt(), random_salt());
    }
}
