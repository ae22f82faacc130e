//! `MmapStorage` against real files in a temporary directory: the storage contract the log
//! relies on (roundtrip across reopen, exclusive creation, the directory lock, bounds).

use std::io::ErrorKind;

use timewheel_wal::storage::mmap::MmapStorage;
use timewheel_wal::storage::{Storage, StorageFile};

const FILE_BYTES: u64 = 64 * 1024;

#[test]
fn write_sync_read_survives_reopen() {
    // Bytes written and synced through one storage read back through a fresh one.
    let dir = tempfile::tempdir().unwrap();
    {
        let storage = MmapStorage::open_dir(dir.path().join("data")).unwrap();
        assert!(storage.try_lock().unwrap());
        let file = storage.create("0000000000000001", FILE_BYTES).unwrap();
        assert_eq!(file.len_bytes(), FILE_BYTES);
        let mut zeros = vec![1u8; 4096];
        file.read_at(FILE_BYTES - 4096, &mut zeros).unwrap();
        assert!(zeros.iter().all(|&b| b == 0), "a new file reads as zeros");
        file.write_at(5000, b"hello, wal").unwrap();
        file.write_at(FILE_BYTES - 3, b"end").unwrap();
        file.sync_range(5000, 10).unwrap();
        file.sync_range(FILE_BYTES - 3, 3).unwrap();
        storage.sync_dir().unwrap();
    }
    let storage = MmapStorage::open_dir(dir.path().join("data")).unwrap();
    assert!(storage.try_lock().unwrap());
    assert_eq!(storage.list().unwrap(), vec!["0000000000000001".to_owned()]);
    let file = storage.open("0000000000000001").unwrap();
    assert_eq!(file.len_bytes(), FILE_BYTES);
    let mut got = [0u8; 10];
    file.read_at(5000, &mut got).unwrap();
    assert_eq!(&got, b"hello, wal");
    let mut end = [0u8; 3];
    file.read_at(FILE_BYTES - 3, &mut end).unwrap();
    assert_eq!(&end, b"end");
}

#[test]
fn create_refuses_an_existing_name() {
    // create is create_new: an existing segment is never silently reused or truncated.
    let dir = tempfile::tempdir().unwrap();
    let storage = MmapStorage::open_dir(dir.path()).unwrap();
    let first = storage.create("seg", 4096).unwrap();
    first.write_at(0, b"keep").unwrap();
    let err = storage.create("seg", 8192).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    let mut got = [0u8; 4];
    storage.open("seg").unwrap().read_at(0, &mut got).unwrap();
    assert_eq!(&got, b"keep");
    assert_eq!(storage.open("seg").unwrap().len_bytes(), 4096);
}

#[test]
fn second_storage_can_not_lock_until_first_is_dropped() {
    // The directory lock is exclusive between storages, even in one process.
    let dir = tempfile::tempdir().unwrap();
    let first = MmapStorage::open_dir(dir.path()).unwrap();
    assert!(first.try_lock().unwrap());
    assert!(first.try_lock().unwrap(), "the holder may ask again");
    let second = MmapStorage::open_dir(dir.path()).unwrap();
    assert!(!second.try_lock().unwrap());
    drop(first);
    assert!(second.try_lock().unwrap());
}

#[test]
fn out_of_bounds_access_is_an_error() {
    // Bad offsets come back as errors; nothing panics and nothing past the end is touched.
    let dir = tempfile::tempdir().unwrap();
    let storage = MmapStorage::open_dir(dir.path()).unwrap();
    let file = storage.create("f", 4096).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(
        file.read_at(4090, &mut buf).unwrap_err().kind(),
        ErrorKind::UnexpectedEof
    );
    assert_eq!(
        file.read_at(u64::MAX - 2, &mut buf).unwrap_err().kind(),
        ErrorKind::UnexpectedEof
    );
    assert!(file.write_at(4089, &buf).is_err());
    assert!(file.write_at(u64::MAX, &buf).is_err());
    assert!(file.sync_range(4000, 97).is_err());
    assert!(file.sync_range(u64::MAX, 2).is_err());
    // The boundary itself is fine.
    file.write_at(4088, &buf).unwrap();
    file.read_at(4088, &mut buf).unwrap();
    file.read_at(4096, &mut []).unwrap();
}

#[test]
fn list_hides_the_lock_file() {
    // LOCK is the storage's own business: never listed, never usable as a name.
    let dir = tempfile::tempdir().unwrap();
    let storage = MmapStorage::open_dir(dir.path()).unwrap();
    assert!(storage.try_lock().unwrap());
    assert!(dir.path().join("LOCK").exists());
    assert!(storage.list().unwrap().is_empty());
    storage.create("a", 4096).unwrap();
    storage.create("b", 4096).unwrap();
    let mut names = storage.list().unwrap();
    names.sort();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(
        storage.create("LOCK", 4096).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        storage.open("../x").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
}

#[test]
fn rename_and_remove_keep_open_handles_valid() {
    // Files are inodes: rename keeps the data, an open handle outlives remove.
    let dir = tempfile::tempdir().unwrap();
    let storage = MmapStorage::open_dir(dir.path()).unwrap();
    let file = storage.create("tmp", 4096).unwrap();
    file.write_at(0, b"manifest").unwrap();
    file.sync_range(0, 8).unwrap();
    storage.create("current", 4096).unwrap();
    storage.rename("tmp", "current").unwrap();
    storage.sync_dir().unwrap();
    assert_eq!(storage.list().unwrap(), ["current"]);
    let mut got = [0u8; 8];
    storage
        .open("current")
        .unwrap()
        .read_at(0, &mut got)
        .unwrap();
    assert_eq!(&got, b"manifest");
    storage.remove("current").unwrap();
    assert_eq!(
        storage.open("current").unwrap_err().kind(),
        ErrorKind::NotFound
    );
    file.write_at(0, b"MANIFEST").unwrap();
    file.read_at(0, &mut got).unwrap();
    assert_eq!(&got, b"MANIFEST");
    assert_eq!(
        storage.remove("current").unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn one_writer_and_readers_run_concurrently() {
    // The `&self` contract: an appender writes while readers read, from several threads.
    let dir = tempfile::tempdir().unwrap();
    let storage = MmapStorage::open_dir(dir.path()).unwrap();
    let file = storage.create("f", 1 << 16).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..1024u64 {
                file.write_at(i * 64, &[(i % 251) as u8 + 1; 64]).unwrap();
            }
        });
        for _ in 0..2 {
            s.spawn(|| {
                let mut buf = [0u8; 64];
                for i in 0..1024u64 {
                    file.read_at(i * 64, &mut buf).unwrap();
                    // Each 64-byte record is written under one lock: all old or all new.
                    assert!(buf.iter().all(|&b| b == buf[0]));
                }
            });
        }
    });
    file.sync_range(0, 1 << 16).unwrap();
}

#[test]
fn zero_length_file_is_allowed() {
    // Degenerate but legal: an empty file can be created, opened and synced.
    let dir = tempfile::tempdir().unwrap();
    let storage = MmapStorage::open_dir(dir.path()).unwrap();
    let file = storage.create("empty", 0).unwrap();
    assert_eq!(file.len_bytes(), 0);
    file.sync_range(0, 0).unwrap();
    assert!(file.write_at(0, b"x").is_err());
    assert_eq!(storage.open("empty").unwrap().len_bytes(), 0);
}

#[test]
fn direct_reads_see_what_a_sync_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let storage = MmapStorage::open_dir(dir.path()).unwrap();
    let file = storage.create("d", 3 * 4096).unwrap();
    file.write_at(4096, b"on the medium").unwrap();
    file.sync_range(4096, 4096).unwrap();
    let mut medium = vec![0u8; 8192];
    // Refused only where the file system has no O_DIRECT (tmpfs) or the platform is unknown.
    if file.read_durable(4096, &mut medium).unwrap() {
        assert_eq!(&medium[..13], b"on the medium");
        assert!(medium[13..].iter().all(|&b| b == 0));
    }
    // Unaligned requests and reads past the end are errors, not partial reads.
    assert_eq!(
        file.read_durable(1, &mut medium[..4096])
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput
    );
    assert!(file.read_durable(8192, &mut medium).is_err());
}
