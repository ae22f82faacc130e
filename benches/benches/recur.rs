//! Next-fire computation of `timewheel::recur` (`Recurrence::next_after`), beside croner's own
//! search in the same zone (`Cron::find_next_occurrence` on a `chrono_tz` `DateTime`), in the
//! same run.
//!
//! `cargo bench -p timewheel-benches --bench recur`
//!
//! Expressions: `*/5 * * * *` in UTC, `0 2 * * *` in Europe/Berlin, `0 0 9 * * MON-FRI` (with
//! seconds) in America/New_York, `0 9 * * 5L` (last Friday: a modifier, so croner's search
//! rather than the bit sets of `src/recur/fields.rs`) in Europe/Berlin, and `Every` 5 s. Two
//! workloads, 1000 calls per iteration (`Throughput::Elements`, so criterion prints next-fire
//! computations per second):
//! - `chain`: each call starts from the previous occurrence, as a recurring job does when it
//!   schedules its next run (the Berlin chain crosses both 2026 transitions);
//! - `scattered`: 1000 fixed pseudo-random start instants over 2026-2027, sub-second parts
//!   included.
//!
//! The goal is >= 1M computations per second on one core.

use std::hint::black_box;
use std::time::Duration;

use chrono::DateTime;
use chrono_tz::Tz;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use croner::parser::{CronParser, Seconds, Year};
use timewheel::recur::Recurrence;

const CALLS: usize = 1000;
/// 2026-01-01T00:00:00.123Z.
const START_MS: u64 = 1_767_225_600_123;
const TWO_YEARS_MS: u64 = 2 * 365 * 86_400_000;

const CASES: [(&str, &str, &str); 4] = [
    ("every_5_min_utc", "*/5 * * * *", "UTC"),
    ("daily_0200_berlin", "0 2 * * *", "Europe/Berlin"),
    (
        "weekdays_0900_seconds_new_york",
        "0 0 9 * * MON-FRI",
        "America/New_York",
    ),
    // A modifier (`L`): croner's own search, not the bit-set one.
    ("last_friday_0900_berlin", "0 9 * * 5L", "Europe/Berlin"),
];

/// Fixed start instants, spread over two years by a small xorshift.
fn scattered_starts() -> Vec<u64> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    (0..CALLS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            START_MS + state % TWO_YEARS_MS
        })
        .collect()
}

fn chain(recurrence: &Recurrence) -> u64 {
    let mut at_ms = START_MS;
    for _ in 0..CALLS {
        at_ms = recurrence
            .next_after(black_box(at_ms))
            .expect("a next occurrence");
    }
    at_ms
}

fn croner_chain(cron: &croner::Cron, zone: Tz) -> i64 {
    let start = DateTime::from_timestamp_millis(START_MS as i64)
        .unwrap()
        .with_timezone(&zone);
    let mut at = start;
    for _ in 0..CALLS {
        at = cron
            .find_next_occurrence(black_box(&at), false)
            .expect("a next occurrence");
    }
    at.timestamp_millis()
}

fn recur(c: &mut Criterion) {
    let starts = scattered_starts();
    let parser = CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build();
    let mut group = c.benchmark_group("recur");
    group.throughput(Throughput::Elements(CALLS as u64));
    for (name, expr, zone) in CASES {
        let recurrence = Recurrence::cron(expr, zone).expect("a valid schedule");
        let cron = parser.parse(expr).expect("a valid expression");
        let tz: Tz = zone.parse().expect("a known zone");
        group.bench_function(format!("chain/{name}"), |b| b.iter(|| chain(&recurrence)));
        group.bench_function(format!("chain/{name}/croner"), |b| {
            b.iter(|| croner_chain(&cron, tz))
        });
        group.bench_function(format!("scattered/{name}"), |b| {
            b.iter(|| {
                for &at_ms in &starts {
                    black_box(recurrence.next_after(black_box(at_ms)));
                }
            })
        });
        group.bench_function(format!("scattered/{name}/croner"), |b| {
            b.iter(|| {
                for &at_ms in &starts {
                    let at = DateTime::from_timestamp_millis(at_ms as i64).unwrap();
                    black_box(
                        cron.find_next_occurrence(&at.with_timezone(&tz), false)
                            .ok(),
                    );
                }
            })
        });
    }
    let every = Recurrence::every(5_000, 1_000).expect("a valid interval");
    group.bench_function("chain/every_5_s", |b| b.iter(|| chain(&every)));
    group.bench_function("scattered/every_5_s", |b| {
        b.iter(|| {
            for &at_ms in &starts {
                black_box(every.next_after(black_box(at_ms)));
            }
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = recur
}
criterion_main!(benches);
