//! A design probe, not the wheel: what W1's fire would cost if a minute's timers were
//! counting-sorted into one contiguous run by due millisecond when the minute begins (one move
//! per timer instead of the wheel's two cascades, minute to second to millisecond), and the
//! fire were a cursor over that run, reading the slab entries a fixed distance ahead.
//!
//! `cargo run --release -p timewheel-benches --example wheel_run_sketch -- [TIMERS] [ROUNDS]`
//! (default 10,000,000 timers uniform over an hour, as `wheel_probe` and the harness's
//! `wheel-10m`; `WHEEL_PROBE_SORTED=1` inserts them in due order, `WHEEL_PROBE_MINUTES=1` in
//! due minute order, in no order within a minute). It keeps what a keyed wheel
//! must do per timer: a slab entry per key (generation, stamp, value; 16 bytes), an item per
//! placement (due, entry, stamp), the entry's stamp checked and its generation moved on at the
//! fire (so that the key goes stale), the entry's index pushed on a free list, and a
//! `(key, due, value)` handed out. It leaves out what the wheel also does (the rings beyond an
//! hour, inserts into the current minute, cancels, sweeps, the pause bound on the sort): the
//! figure is a floor for the design, to decide whether the rebuild is worth it.

use std::hint::black_box;
use std::time::Instant;

use timewheel_benches::wheel::dues;

const T0: u64 = 1_700_000_123_457;
const HOUR_MS: u64 = 3_600_000;
const MINUTE_MS: u64 = 60_000;
/// Entries read ahead of the fire.
const AHEAD: usize = 64;

#[derive(Clone, Copy)]
struct Entry {
    generation: u32,
    stamp: u32,
    value: u64,
}

#[derive(Clone, Copy, Default)]
struct Item {
    due_ms: u64,
    index: u32,
    stamp: u32,
}

struct Sketch {
    entries: Vec<Entry>,
    free: Vec<u32>,
    /// Items by due minute, from the start's minute on.
    minutes: Vec<Vec<Item>>,
    first_minute: u64,
    /// The current minute's items in due order, and where each of its milliseconds starts.
    run: Vec<Item>,
    starts: Vec<u32>,
    counts: Vec<u32>,
    cursor: usize,
    run_minute: Option<u64>,
    sink: u32,
    ahead: usize,
}

impl Sketch {
    fn new(start_ms: u64, span_ms: u64) -> Self {
        let first_minute = start_ms / MINUTE_MS;
        let minutes = ((start_ms + span_ms) / MINUTE_MS - first_minute + 2) as usize;
        Self {
            entries: Vec::new(),
            free: Vec::new(),
            minutes: (0..minutes).map(|_| Vec::new()).collect(),
            first_minute,
            run: Vec::new(),
            starts: vec![0; MINUTE_MS as usize + 1],
            counts: vec![0; MINUTE_MS as usize],
            cursor: 0,
            run_minute: None,
            sink: 0,
            ahead: std::env::var("SKETCH_AHEAD")
                .map_or(AHEAD, |a| a.parse().expect("SKETCH_AHEAD")),
        }
    }

    fn insert(&mut self, due_ms: u64, value: u64) -> u64 {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.entries.push(Entry {
                    generation: 0,
                    stamp: 0,
                    value,
                });
                (self.entries.len() - 1) as u32
            }
        };
        let e = &mut self.entries[index as usize];
        e.generation += 1;
        e.stamp += 1;
        e.value = value;
        let minute = (due_ms / MINUTE_MS - self.first_minute) as usize;
        self.minutes[minute].push(Item {
            due_ms,
            index,
            stamp: e.stamp,
        });
        (u64::from(e.generation) << 32) | u64::from(index)
    }

    /// Sorts minute `minute`'s items into the run by due millisecond.
    fn open_minute(&mut self, minute: u64) {
        let items = std::mem::take(&mut self.minutes[(minute - self.first_minute) as usize]);
        let base = minute * MINUTE_MS;
        self.counts.fill(0);
        for item in &items {
            self.counts[(item.due_ms - base) as usize] += 1;
        }
        let mut at = 0u32;
        for (ms, &count) in self.counts.iter().enumerate() {
            self.starts[ms] = at;
            at += count;
        }
        self.starts[MINUTE_MS as usize] = at;
        self.run.clear();
        self.run.resize(items.len(), Item::default());
        for item in &items {
            let ms = (item.due_ms - base) as usize;
            let to = self.starts[ms] + self.counts[ms] - 1;
            self.counts[ms] -= 1;
            self.run[to as usize] = *item;
        }
        self.cursor = 0;
        self.run_minute = Some(minute);
    }

    /// Fires every timer due at `now_ms` into `out`.
    fn fire(&mut self, now_ms: u64, out: &mut Vec<(u64, u64, u64)>) -> usize {
        let minute = now_ms / MINUTE_MS;
        if self.run_minute != Some(minute) {
            self.open_minute(minute);
        }
        let end = self.starts[(now_ms - minute * MINUTE_MS) as usize + 1] as usize;
        let mut fired = 0;
        while self.cursor < end {
            if let Some(ahead) = self.run.get(self.cursor + self.ahead) {
                self.sink ^= self.entries[ahead.index as usize].stamp;
            }
            let item = self.run[self.cursor];
            self.cursor += 1;
            let e = &mut self.entries[item.index as usize];
            if e.stamp == item.stamp {
                e.stamp += 1;
                let generation = e.generation;
                e.generation += 1;
                out.push((
                    (u64::from(generation) << 32) | u64::from(item.index),
                    item.due_ms,
                    e.value,
                ));
                self.free.push(item.index);
                fired += 1;
            }
        }
        fired
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args
        .first()
        .map_or(10_000_000, |a| a.parse().expect("TIMERS"));
    let rounds: usize = args.get(1).map_or(3, |a| a.parse().expect("ROUNDS"));
    let mut dues = dues(n, HOUR_MS, 7);
    if std::env::var_os("WHEEL_PROBE_SORTED").is_some() {
        dues.sort_unstable();
    }
    if std::env::var_os("WHEEL_PROBE_MINUTES").is_some() {
        // Slab entries grouped by due minute, in no order within it (as `wheel_probe`).
        dues.sort_by_key(|&d| d / MINUTE_MS);
    }
    for round in 1..=rounds {
        let start = Instant::now();
        let mut sketch = Sketch::new(T0, HOUR_MS + 1);
        for (i, &due) in dues.iter().enumerate() {
            sketch.insert(due, i as u64);
        }
        let insert_ns = start.elapsed().as_nanos() as f64 / n as f64;
        let start = Instant::now();
        let mut out = Vec::with_capacity(4096);
        let mut fired = 0;
        for now in T0 + 1..=T0 + HOUR_MS + 1 {
            out.clear();
            fired += sketch.fire(now, &mut out);
            black_box(&out);
        }
        let fire_ns = start.elapsed().as_nanos() as f64 / fired as f64;
        assert_eq!(fired, n);
        black_box(sketch.sink);
        println!("round {round}: {n} timers, insert {insert_ns:.1} ns, fire {fire_ns:.1} ns");
    }
}
