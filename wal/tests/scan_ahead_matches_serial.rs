//! Recovery scans the next segments ahead on a second thread over real files
//! (`Storage::parallel_reads`). Whatever the log holds and whatever damage it took (bit flips
//! in records, in mirrors, in headers, in sealed segments or the last one, a crash with
//! unsynced appends), an open that scans ahead must reach the serial open's verdict: the same
//! refusal (segment and offset), or the same report, the same records and the same files.
//! An open that hands its records to a follower as it accepts them (`Wal::open_following`)
//! reaches that verdict too, and what it handed over is a prefix of the opened log's records:
//! all of them when nothing needed a repair.

use std::fs;
use std::io;
use std::path::Path;

use proptest::prelude::*;
use timewheel_wal::storage::Storage;
use timewheel_wal::storage::mmap::{MmapFile, MmapStorage};
use timewheel_wal::{Durability, Error, Follow, RecordRef, RecoveryReport, Wal, WalOptions};

const SEGMENT_BYTES: u64 = 8 * 4096;

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: SEGMENT_BYTES,
        record_bytes_max: 1024,
        durability: Durability::Sync,
        ..Default::default()
    }
}

/// Real files, read one at a time: recovery's loop scans every segment itself.
struct Serial(MmapStorage);

impl Storage for Serial {
    type File = MmapFile;
    fn try_lock(&self) -> io::Result<bool> {
        self.0.try_lock()
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.0.list()
    }
    fn create(&self, name: &str, len_bytes: u64) -> io::Result<MmapFile> {
        self.0.create(name, len_bytes)
    }
    fn open(&self, name: &str) -> io::Result<MmapFile> {
        self.0.open(name)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.0.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.0.rename(from, to)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.0.sync_dir()
    }
    fn prepare_in_background(&self) -> bool {
        self.0.prepare_in_background()
    }
    fn parallel_reads(&self) -> bool {
        false
    }
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// The directory's files and their bytes, in name order; not the all-zero files the log makes
/// ahead of need on a thread of its own (whether one is there yet at close is timing).
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                fs::read(e.path()).unwrap(),
            )
        })
        .filter(|(name, bytes)| !name.ends_with(".wal") || bytes.iter().any(|&b| b != 0))
        .collect();
    out.sort();
    out
}

/// Every record of a log: LSN, type, body.
type Records = Vec<(u64, u8, Vec<u8>)>;

/// What an open found: the error, or the report (its time zeroed) and every record.
fn verdict<S: Storage>(storage: S) -> Result<(String, Records), String> {
    verdict_of(Wal::open(storage, opts()))
}

fn verdict_of<S: Storage>(
    opened: Result<(Wal<S>, RecoveryReport), Error>,
) -> Result<(String, Records), String> {
    match opened {
        Err(e @ Error::Corrupted { .. }) => Err(e.to_string()),
        Err(e) => panic!("not a verdict on the log: {e}"),
        Ok((wal, mut report)) => {
            report.elapsed = Default::default();
            let records = wal
                .iter_from(wal.first_lsn())
                .map(|r| {
                    let r = r.unwrap();
                    (r.lsn, r.record_type, r.body)
                })
                .collect();
            wal.close().unwrap();
            Ok((format!("{report:?}"), records))
        }
    }
}

#[derive(Debug, Clone)]
struct Case {
    /// Appends: how many records each, and their body length.
    appends: Vec<(u8, u16)>,
    /// Closed cleanly, or dropped with the last appends unsynced.
    crash: bool,
    /// Bit flips: (segment index from the first, byte offset, bit).
    flips: Vec<(usize, u32, u8)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((1u8..6, 1u16..400), 10..60),
        any::<bool>(),
        prop::collection::vec((0usize..12, 0u32..SEGMENT_BYTES as u32, 0u8..8), 0..4),
    )
        .prop_map(|(appends, crash, flips)| Case {
            appends,
            crash,
            flips,
        })
}

fn write(dir: &Path, case: &Case) {
    let (wal, _) = Wal::open_dir(dir, opts()).unwrap();
    let last = case.appends.len().saturating_sub(3);
    for (i, &(n, len)) in case.appends.iter().enumerate() {
        let body = vec![i as u8; usize::from(len)];
        let batch: Vec<(u8, &[u8])> = (0..n).map(|_| (1u8, body.as_slice())).collect();
        if case.crash && i >= last {
            wal.append_batch_nowait(batch.iter().copied()).unwrap();
        } else {
            wal.append_batch(batch.iter().copied()).unwrap();
        }
    }
    if case.crash {
        wal.abandon();
    } else {
        wal.close().unwrap();
    }
}

fn flip(dir: &Path, flips: &[(usize, u32, u8)]) {
    let mut segments: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    segments.sort();
    for &(index, offset, bit) in flips {
        let Some(path) = segments.get(index % segments.len().max(1)) else {
            continue;
        };
        let mut bytes = fs::read(path).unwrap();
        let at = offset as usize % bytes.len();
        bytes[at] ^= 1 << bit;
        fs::write(path, bytes).unwrap();
    }
}

/// Takes what an open hands over, and checks the calls come in the promised order.
#[derive(Default)]
struct Taker {
    expected: Option<u64>,
    records: Records,
}

impl Follow for Taker {
    fn expect(&mut self, records: u64) {
        assert!(self.expected.is_none(), "expect is called once");
        assert!(self.records.is_empty(), "expect comes before any record");
        self.expected = Some(records);
    }

    fn record(&mut self, r: RecordRef<'_>) {
        assert!(self.expected.is_some(), "expect comes first");
        if let Some(&(last, _, _)) = self.records.last() {
            assert!(r.lsn > last, "records come in LSN order");
        }
        self.records.push((r.lsn, r.record_type, r.body.to_vec()));
    }
}

/// [`verdict`] of an open that hands its records over as it goes, and what it handed over.
fn verdict_following<S: Storage>(storage: S) -> (Result<(String, Records), String>, Taker) {
    let mut taker = Taker::default();
    let verdict = verdict_of(Wal::open_following(storage, opts(), &mut taker));
    (verdict, taker)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_followed_open_hands_over_a_prefix_of_the_log(case in case()) {
        let root = tempfile::tempdir().unwrap();
        let written = root.path().join("written");
        write(&written, &case);
        flip(&written, &case.flips);
        let (serial, followed) = (root.path().join("serial"), root.path().join("followed"));
        copy_dir(&written, &serial);
        copy_dir(&written, &followed);
        let serial_verdict = verdict(Serial(MmapStorage::open_dir(&serial).unwrap()));
        let (followed_verdict, taker) =
            verdict_following(MmapStorage::open_dir(&followed).unwrap());
        prop_assert_eq!(&followed_verdict, &serial_verdict);
        if let Ok((report, records)) = &followed_verdict {
            prop_assert!(taker.records.len() <= records.len());
            prop_assert_eq!(&taker.records[..], &records[..taker.records.len()]);
            let whole = !report.contains("torn_tail: Some")
                && report.contains("repaired_groups: []")
                && report.contains("damaged_mirrors: 0");
            if whole {
                prop_assert_eq!(taker.records.len(), records.len(), "{}", report);
            }
        }
    }

    #[test]
    fn scanning_ahead_reaches_the_serial_verdict(case in case()) {
        let root = tempfile::tempdir().unwrap();
        let written = root.path().join("written");
        write(&written, &case);
        flip(&written, &case.flips);
        let (serial, ahead) = (root.path().join("serial"), root.path().join("ahead"));
        copy_dir(&written, &serial);
        copy_dir(&written, &ahead);
        let serial_verdict = verdict(Serial(MmapStorage::open_dir(&serial).unwrap()));
        let storage = MmapStorage::open_dir(&ahead).unwrap();
        prop_assert!(storage.parallel_reads());
        let ahead_verdict = verdict(storage);
        prop_assert_eq!(&ahead_verdict, &serial_verdict);
        // Repairs and cuts wrote the same files (salts of copies are random: lengths and
        // names only for files the open rewrote).
        let (s, a) = (files(&serial), files(&ahead));
        prop_assert_eq!(
            s.iter().map(|(n, b)| (n, b.len())).collect::<Vec<_>>(),
            a.iter().map(|(n, b)| (n, b.len())).collect::<Vec<_>>()
        );
    }
}

/// The cases above span a few segments; this one many, so that the helper and the loop both
/// scan, and the loop takes scans made ahead in order.
#[test]
fn many_segments_scanned_ahead_read_back_whole() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let case = Case {
        appends: (0..600)
            .map(|i| (1 + (i % 5) as u8, 50 + (i * 37 % 300) as u16))
            .collect(),
        crash: false,
        flips: Vec::new(),
    };
    write(&dir, &case);
    let serial = root.path().join("serial");
    copy_dir(&dir, &serial);
    let (report_serial, records_serial) =
        verdict(Serial(MmapStorage::open_dir(&serial).unwrap())).unwrap();
    let (report, records) = verdict(MmapStorage::open_dir(&dir).unwrap()).unwrap();
    assert!(report.contains("segments: "), "{report}");
    assert_eq!(report, report_serial);
    assert_eq!(records, records_serial);
    let expected: usize = case.appends.iter().map(|&(n, _)| usize::from(n)).sum();
    assert_eq!(records.len(), expected);
}
