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
//!
//! `SKETCH_KEYLESS=1` runs the same run and cursor with no slab (see `Keyless`): a key names
//! its minute and its place among the minute's inserts, a cancel sets a bit in the minute's
//! bitmap; with `SKETCH_W2=1` as well, nine timers in ten are cancelled before the drain (the
//! harness's W2), and the cancel's cost is printed too.

use std::hint::black_box;
use std::time::Instant;

use timewheel_benches::wheel::probe_input;

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

/// A minute's counting sort by due millisecond: `counts` and `starts` are the caller's, reused
/// from minute to minute.
struct Sort<'a> {
    base: u64,
    counts: &'a mut [u32],
    starts: &'a mut [u32],
}

impl Sort<'_> {
    /// Sorts `items` (each with its due time) into `run`; `starts[ms]` is where millisecond
    /// `ms` of the minute begins in it.
    fn run<I: Copy + Default>(
        self,
        items: impl Iterator<Item = (u64, I)> + Clone,
        run: &mut Vec<I>,
    ) {
        self.counts.fill(0);
        for (due_ms, _) in items.clone() {
            self.counts[(due_ms - self.base) as usize] += 1;
        }
        let mut at = 0u32;
        for (ms, &count) in self.counts.iter().enumerate() {
            self.starts[ms] = at;
            at += count;
        }
        self.starts[MINUTE_MS as usize] = at;
        run.clear();
        run.resize(at as usize, I::default());
        for (due_ms, item) in items {
            let ms = (due_ms - self.base) as usize;
            let to = self.starts[ms] + self.counts[ms] - 1;
            self.counts[ms] -= 1;
            run[to as usize] = item;
        }
    }
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
        let sort = Sort {
            base: minute * MINUTE_MS,
            counts: &mut self.counts,
            starts: &mut self.starts,
        };
        sort.run(items.iter().map(|i| (i.due_ms, *i)), &mut self.run);
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

/// The same run and cursor with no slab at all: a key names its timer's minute and its place
/// among that minute's inserts (never reused: minutes are absolute), a cancel sets the place's
/// bit in the minute's own bitmap, and the run carries each item's value and place. The fire
/// reads the run in order and the minute's bitmap (a bit per insert of that minute) and
/// nothing else; the sort drops what was cancelled before it.
struct Keyless {
    minutes: Vec<KeylessMinute>,
    first_minute: u64,
    run: Vec<KeylessItem>,
    starts: Vec<u32>,
    counts: Vec<u32>,
    cursor: usize,
    run_minute: Option<u64>,
}

#[derive(Default)]
struct KeylessMinute {
    items: Vec<KeylessItem>,
    cancelled: Vec<u64>,
}

#[derive(Clone, Copy, Default)]
struct KeylessItem {
    due_ms: u64,
    value: u64,
    place: u32,
}

impl Keyless {
    fn new(start_ms: u64, span_ms: u64) -> Self {
        let first_minute = start_ms / MINUTE_MS;
        let minutes = ((start_ms + span_ms) / MINUTE_MS - first_minute + 2) as usize;
        Self {
            minutes: (0..minutes).map(|_| KeylessMinute::default()).collect(),
            first_minute,
            run: Vec::new(),
            starts: vec![0; MINUTE_MS as usize + 1],
            counts: vec![0; MINUTE_MS as usize],
            cursor: 0,
            run_minute: None,
        }
    }

    fn insert(&mut self, due_ms: u64, value: u64) -> u64 {
        let minute = due_ms / MINUTE_MS - self.first_minute;
        let slot = &mut self.minutes[minute as usize];
        let place = slot.items.len() as u32;
        if place.is_multiple_of(64) {
            slot.cancelled.push(0);
        }
        slot.items.push(KeylessItem {
            due_ms,
            value,
            place,
        });
        (minute << 32) | u64::from(place)
    }

    fn cancel(&mut self, key: u64) -> bool {
        let slot = &mut self.minutes[(key >> 32) as usize];
        let place = key as u32 as usize;
        let word = &mut slot.cancelled[place / 64];
        let bit = 1u64 << (place % 64);
        let live = *word & bit == 0;
        *word |= bit;
        live
    }

    fn open_minute(&mut self, minute: u64) {
        let slot = &mut self.minutes[(minute - self.first_minute) as usize];
        let items = std::mem::take(&mut slot.items);
        let cancelled = &slot.cancelled;
        let live = |item: &&KeylessItem| {
            cancelled[item.place as usize / 64] & (1 << (item.place % 64)) == 0
        };
        let sort = Sort {
            base: minute * MINUTE_MS,
            counts: &mut self.counts,
            starts: &mut self.starts,
        };
        sort.run(
            items.iter().filter(live).map(|i| (i.due_ms, *i)),
            &mut self.run,
        );
        self.cursor = 0;
        self.run_minute = Some(minute);
    }

    fn fire(&mut self, now_ms: u64, out: &mut Vec<(u64, u64, u64)>) -> usize {
        let minute = now_ms / MINUTE_MS;
        if self.run_minute != Some(minute) {
            self.open_minute(minute);
        }
        let rel = minute - self.first_minute;
        let cancelled = &self.minutes[rel as usize].cancelled;
        let end = self.starts[(now_ms - minute * MINUTE_MS) as usize + 1] as usize;
        let mut fired = 0;
        for item in &self.run[self.cursor..end] {
            // A cancel after the sort.
            if cancelled[item.place as usize / 64] & (1 << (item.place % 64)) == 0 {
                out.push(((rel << 32) | u64::from(item.place), item.due_ms, item.value));
                fired += 1;
            }
        }
        self.cursor = end;
        fired
    }
}

/// W1's drain, 1 ms at a time over the hour: how many fired, and ns per timer fired.
fn drain(mut fire: impl FnMut(u64, &mut Vec<(u64, u64, u64)>) -> usize) -> (usize, f64) {
    let start = Instant::now();
    let mut out = Vec::with_capacity(4096);
    let mut fired = 0;
    for now in T0 + 1..=T0 + HOUR_MS + 1 {
        out.clear();
        fired += fire(now, &mut out);
        black_box(&out);
    }
    (
        fired,
        start.elapsed().as_nanos() as f64 / fired.max(1) as f64,
    )
}

fn keyless(dues: &[u64], rounds: usize) {
    let n = dues.len();
    let cancel_most = std::env::var_os("SKETCH_W2").is_some();
    for round in 1..=rounds {
        let start = Instant::now();
        let mut sketch = Keyless::new(T0, HOUR_MS + 1);
        let keys: Vec<u64> = dues
            .iter()
            .enumerate()
            .map(|(i, &due)| sketch.insert(due, i as u64))
            .collect();
        let insert_ns = start.elapsed().as_nanos() as f64 / n as f64;
        let mut cancel_ns = 0.0;
        let mut expected = n;
        if cancel_most {
            // W2: nine in ten cancelled, in insert order.
            let start = Instant::now();
            let mut cancelled = 0;
            for (i, &key) in keys.iter().enumerate() {
                if i % 10 != 0 {
                    assert!(sketch.cancel(key));
                    cancelled += 1;
                }
            }
            cancel_ns = start.elapsed().as_nanos() as f64 / cancelled as f64;
            expected -= cancelled;
        }
        let (fired, fire_ns) = drain(|now, out| sketch.fire(now, out));
        assert_eq!(fired, expected);
        println!(
            "round {round}: {n} timers, keyless: insert {insert_ns:.1} ns, cancel {cancel_ns:.1} \
             ns, fire {fire_ns:.1} ns per timer fired"
        );
    }
}

fn main() {
    let (dues, rounds) = probe_input();
    let n = dues.len();
    if std::env::var_os("SKETCH_KEYLESS").is_some() {
        keyless(&dues, rounds);
        return;
    }
    for round in 1..=rounds {
        let start = Instant::now();
        let mut sketch = Sketch::new(T0, HOUR_MS + 1);
        for (i, &due) in dues.iter().enumerate() {
            sketch.insert(due, i as u64);
        }
        let insert_ns = start.elapsed().as_nanos() as f64 / n as f64;
        let (fired, fire_ns) = drain(|now, out| sketch.fire(now, out));
        assert_eq!(fired, n);
        black_box(sketch.sink);
        println!("round {round}: {n} timers, insert {insert_ns:.1} ns, fire {fire_ns:.1} ns");
    }
}
