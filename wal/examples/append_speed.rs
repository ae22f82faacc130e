//! Durable batch append speed of the log on real files, the engine's batch-schedule shape.
//!
//! `cargo run --release -p timewheel-wal --example append_speed [RECORDS] [BATCH] [BODY] [ROUNDS]
//! [fresh|reopened]`
//!
//! RECORDS (default 3,000,000) records of BODY bytes (default 48, about a schedule record with
//! a 16-byte payload) appended in `Durability::Sync` batches of BATCH (default 10,000) by one
//! thread, on a fresh log with default 64 MiB segments, ROUNDS times (default 3); prints each
//! round's records/s and MB/s of record bytes. The directory lives under `TMPDIR`. `reopened`:
//! the log first holds one record and is abandoned (a crash) and opened again, so that the
//! appends go into a segment found at open, whose unused bytes the log proves zero as it fills
//! it (docs/wal-format.md, "Write bound").

use std::time::Instant;

use timewheel_wal::{Wal, WalOptions};

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .map_or(default, |a| a.parse().expect("a number"))
}

fn main() {
    let (records, batch, body_len, rounds) =
        (arg(1, 3_000_000), arg(2, 10_000), arg(3, 48), arg(4, 3));
    let reopened = match std::env::args().nth(5).as_deref() {
        None | Some("fresh") => false,
        Some("reopened") => true,
        Some(other) => panic!("unknown mode {other:?}: fresh or reopened"),
    };
    let body: Vec<u8> = (0..body_len).map(|i| (i * 31 % 251) as u8 + 1).collect();
    for round in 0..rounds {
        let dir = std::env::temp_dir().join(format!(
            "timewheel-append-speed-{}-{round}",
            std::process::id()
        ));
        std::fs::remove_dir_all(&dir).ok();
        if reopened {
            let (wal, _) = Wal::open_dir(&dir, WalOptions::default()).expect("open");
            wal.append(1, &body).expect("append");
            wal.abandon();
        }
        let (wal, _) = Wal::open_dir(&dir, WalOptions::default()).expect("open");
        let t = Instant::now();
        let mut done = 0;
        while done < records {
            let n = batch.min(records - done);
            wal.append_batch((0..n).map(|_| (1u8, body.as_slice())))
                .expect("append");
            done += n;
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "round {round}: {:.0} records/s, {:.0} MB/s of bodies",
            records as f64 / secs,
            (records * body_len) as f64 / secs / 1e6
        );
        drop(wal);
        std::fs::remove_dir_all(&dir).ok();
    }
}
