//! Round trip: random appends (single and batched, bodies from empty to the maximum, across
//! many segment rolls with a small segment size) survive close and reopen: every record comes
//! back, in order, with identical bytes, and reading can start at any LSN.

use proptest::prelude::*;
use timewheel_wal::{Durability, Record, Wal, WalOptions};

const SEGMENT_BYTES: u64 = 16384;
const RECORD_BYTES_MAX: u32 = 3000;

#[derive(Debug, Clone)]
enum Op {
    One(u8, Vec<u8>),
    Batch(Vec<(u8, Vec<u8>)>),
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    // Mostly small bodies, sometimes up to the limit, so batches both fit and straddle rolls.
    prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..64),
        1 => prop::collection::vec(any::<u8>(), 0..=RECORD_BYTES_MAX as usize),
        1 => Just(vec![0xA5; RECORD_BYTES_MAX as usize]),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u8..=0xEF, body()).prop_map(|(t, b)| Op::One(t, b)),
        1 => prop::collection::vec((1u8..=0xEF, body()), 0..12).prop_map(Op::Batch),
    ]
}

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![Just(Durability::Sync), Just(Durability::Buffered)]
}

fn read_all(wal: &Wal, from: u64) -> Vec<Record> {
    wal.iter_from(from)
        .collect::<Result<_, _>>()
        .expect("a clean log reads back")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn appends_survive_reopen(ops in prop::collection::vec(op(), 1..40), durability in durability(), start in 0u64..200) {
        let dir = tempfile::tempdir().unwrap();
        let opts = WalOptions { segment_bytes: SEGMENT_BYTES, record_bytes_max: RECORD_BYTES_MAX, durability, ..Default::default() };
        let mut expected: Vec<(u8, Vec<u8>)> = Vec::new();
        {
            let (wal, _) = Wal::open_dir(dir.path(), opts.clone()).unwrap();
            for op in &ops {
                match op {
                    Op::One(t, b) => {
                        let lsn = wal.append(*t, b).unwrap();
                        expected.push((*t, b.clone()));
                        prop_assert_eq!(lsn, expected.len() as u64);
                    }
                    Op::Batch(records) => {
                        let lsn = wal.append_batch(records.iter().map(|(t, b)| (*t, b.as_slice()))).unwrap();
                        expected.extend(records.iter().cloned());
                        prop_assert_eq!(lsn, expected.len() as u64);
                    }
                }
            }
            // Reading works before the reopen too.
            prop_assert_eq!(read_all(&wal, 1).len(), expected.len());
            wal.close().unwrap();
        }
        let (wal, report) = Wal::open_dir(dir.path(), opts).unwrap();
        prop_assert_eq!(report.last_lsn, expected.len() as u64);
        prop_assert!(report.torn_tail.is_none());
        let records = read_all(&wal, 1);
        prop_assert_eq!(records.len(), expected.len());
        for (i, (record, (t, b))) in records.iter().zip(&expected).enumerate() {
            prop_assert_eq!(record.lsn, i as u64 + 1);
            prop_assert_eq!(record.record_type, *t);
            prop_assert_eq!(&record.body, b);
        }
        let from = start.min(expected.len() as u64 + 1);
        let tail = read_all(&wal, from);
        prop_assert_eq!(tail.len() as u64, expected.len() as u64 + 1 - from.max(1));
        prop_assert!(tail.first().is_none_or(|r| r.lsn == from.max(1)));
        // Appends continue after the reopen.
        prop_assert_eq!(wal.append(7, b"after").unwrap(), expected.len() as u64 + 1);
    }
}
