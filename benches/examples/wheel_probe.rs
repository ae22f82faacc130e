//! W1 (fill, then drain 1 ms at a time) on the timing wheel alone, for profiling its fire path.
//!
//! `cargo run --release -p timewheel-benches --example wheel_probe -- [TIMERS] [ROUNDS]`
//! (default 10,000,000 timers due over an hour, 3 rounds): prints ns per insert and per fire.
//! `WHEEL_PROBE_CANCEL=1` removes nine in ten in insert order before the drain (W2's cancels).

use std::hint::black_box;
use std::time::Instant;

use timewheel::wheel::TimingWheel;
use timewheel_benches::wheel::probe_input;

/// The wheel benchmark's start: not aligned to a second, minute or hour.
const T0: u64 = 1_700_000_123_457;
const HOUR_MS: u64 = 3_600_000;

fn main() {
    let (dues, rounds) = probe_input();
    let n = dues.len();
    for round in 1..=rounds {
        let start = Instant::now();
        let mut wheel = TimingWheel::new(T0);
        let keys: Vec<_> = dues
            .iter()
            .enumerate()
            .map(|(i, &due)| wheel.insert(due, i as u64))
            .collect();
        let insert_ns = start.elapsed().as_nanos() as f64 / n as f64;
        let mut expected = n;
        if std::env::var_os("WHEEL_PROBE_CANCEL").is_some() {
            // W2's cancels: nine in ten, in insert order.
            let start = Instant::now();
            for (i, &key) in keys.iter().enumerate() {
                if i % 10 != 0 {
                    assert!(wheel.remove(key));
                    expected -= 1;
                }
            }
            let cancel_ns = start.elapsed().as_nanos() as f64 / (n - expected) as f64;
            println!("round {round}: cancel {cancel_ns:.1} ns");
        }
        let start = Instant::now();
        let mut fired = 0usize;
        let many = std::env::var_os("WHEEL_PROBE_MANY").is_some();
        let mut out = Vec::with_capacity(4096);
        for now in T0 + 1..=T0 + HOUR_MS + 1 {
            if many {
                loop {
                    out.clear();
                    let n = wheel.poll_many(now, 4096, &mut out);
                    black_box(&out);
                    fired += n;
                    if n < 4096 {
                        break;
                    }
                }
                continue;
            }
            while let Some(v) = wheel.poll(now) {
                black_box(v);
                fired += 1;
            }
        }
        let fire_ns = start.elapsed().as_nanos() as f64 / fired as f64;
        assert_eq!(fired, expected);
        println!("round {round}: {n} timers, insert {insert_ns:.1} ns, fire {fire_ns:.1} ns");
    }
}
