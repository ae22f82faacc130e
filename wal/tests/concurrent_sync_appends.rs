//! Group commit under contention: many threads append in `Sync` mode (singles and batches);
//! every acknowledged record comes back after reopen, once, with its own body, and LSNs are
//! gap-free; with one sync in flight at a time and with two. Syncs are shared, so far fewer syncs than appends would be needed.

use std::collections::HashSet;
use std::sync::Arc;
use std::thread;

use timewheel_wal::{Wal, WalOptions};

#[test]
fn every_acknowledged_record_comes_back() {
    every_acknowledged_record_comes_back_with(1);
}

/// The same with two syncs in flight at once.
#[test]
fn every_acknowledged_record_comes_back_with_two_syncs_in_flight() {
    every_acknowledged_record_comes_back_with(2);
}

fn every_acknowledged_record_comes_back_with(syncs_in_flight: usize) {
    const THREADS: u32 = 16;
    const PER_THREAD: u32 = 200;
    let dir = tempfile::tempdir().unwrap();
    let opts = WalOptions {
        segment_bytes: 64 << 10,
        record_bytes_max: 256,
        syncs_in_flight,
        ..Default::default()
    };
    let (wal, _) = Wal::open_dir(dir.path(), opts.clone()).unwrap();
    let wal = Arc::new(wal);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let wal = Arc::clone(&wal);
            thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0..PER_THREAD {
                    let body = format!("{t}:{i}").into_bytes();
                    let lsn = if i % 10 == 0 {
                        let second = format!("{t}:{i}b").into_bytes();
                        let last = wal
                            .append_batch([(2, &body[..]), (2, &second[..])])
                            .unwrap();
                        acked.push((last - 1, body));
                        (last, second)
                    } else {
                        (wal.append(1, &body).unwrap(), body)
                    };
                    assert!(wal.durable_lsn() >= lsn.0, "acknowledged means durable");
                    acked.push(lsn);
                }
                acked
            })
        })
        .collect();
    let acked: Vec<(u64, Vec<u8>)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let total = u64::from(THREADS * PER_THREAD + THREADS * PER_THREAD / 10);
    assert_eq!(acked.len() as u64, total);
    assert_eq!(wal.last_lsn(), total);
    let figures = wal.stats();
    assert_eq!(figures.records, total);
    assert!(
        figures.bytes >= total * 32,
        "a frame is at least a header: {figures:?}"
    );
    assert!(
        figures.syncs >= 1 && figures.syncs < total,
        "shared syncs: {figures:?}"
    );
    assert!(figures.sync_seconds_buckets.is_sorted(), "cumulative");
    assert_eq!(figures.sync_seconds_buckets.last(), Some(&figures.syncs));
    assert!(figures.rolls >= 1, "{figures:?}");
    Arc::into_inner(wal).unwrap().close().unwrap();

    let (wal, report) = Wal::open_dir(dir.path(), opts).unwrap();
    assert_eq!(report.last_lsn, total);
    assert!(report.segments > 1, "the test crosses segment rolls");
    let records: Vec<_> = wal.iter_from(1).map(|r| r.unwrap()).collect();
    assert_eq!(records.len() as u64, total);
    let mut seen = HashSet::new();
    for (lsn, body) in acked {
        let record = &records[(lsn - 1) as usize];
        assert_eq!((record.lsn, &record.body), (lsn, &body));
        assert!(seen.insert(lsn));
    }
}
