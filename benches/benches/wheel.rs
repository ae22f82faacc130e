//! The timing wheel beside its peers, in the same run: tokio-util's `DelayQueue` (on a paused
//! tokio clock), a `BinaryHeap` (cancel by a tombstone set) and a `BTreeMap`.
//!
//! N timers with a `u64` value, dues uniform over one hour, a virtual millisecond clock:
//! - W1 fill-drain: insert N, then advance 1 ms at a time, firing everything;
//! - W2 cancel-heavy: insert N, cancel 90% (in insertion order), drain the rest;
//! - W3 steady state: N pending; each ms fire what is due and insert as many new timers
//!   1 ms .. 1 h ahead, for ten virtual minutes;
//! - pauses: W1 and W3 again, timing every single call (insert, cancel, poll, and the clock
//!   advance of `DelayQueue`), kept apart so that reading the clock does not slow the above;
//! - bytes per timer: bytes allocated by the structure after W1's inserts, over N;
//! - W4 bulk load: N pending, then a sorted run of 1M due over one hour bucket two hours ahead
//!   (what loading a bucket file does), ns per insert.
//!
//! Figures are the best of `WHEEL_BENCH_RUNS` runs (default 3 at N <= 1M, 1 above).
//! `WHEEL_BENCH_N` (default `1000000,10000000`) picks the sizes; arguments that name structures
//! (`wheel`, `delayqueue`, `binaryheap`, `btreemap`) pick those only.
//!
//! `cargo bench -p timewheel-benches --bench wheel`

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashSet};
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use timewheel::wheel::{TimerKey, TimingWheel};
use timewheel_benches::alloc_count::{CountingAlloc, allocated_bytes};
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key as DqKey;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Not aligned to a second, minute or hour: the hour boundary is crossed mid-run.
const T0: u64 = 1_700_000_123_457;
const HOUR_MS: u64 = 3_600_000;
const STEADY_MS: u64 = 600_000;

/// What the workloads need of a timer structure.
trait Timers {
    type Key: Copy;
    fn new(start_ms: u64) -> Self;
    fn insert(&mut self, due_ms: u64, value: u64) -> Self::Key;
    fn cancel(&mut self, key: Self::Key) -> bool;
    /// Fires one timer due at `now_ms`, if any.
    fn poll(&mut self, now_ms: u64) -> Option<u64>;
    /// Moves the virtual clock to `now_ms` (only `DelayQueue` has a clock of its own).
    fn tick(&mut self, now_ms: u64) -> impl Future<Output = ()>;
    /// Forgets the pauses recorded so far (only [`Timed`] records any).
    fn reset_pauses(&mut self) {}
}

impl Timers for TimingWheel<u64> {
    type Key = TimerKey;
    fn new(start_ms: u64) -> Self {
        TimingWheel::new(start_ms)
    }
    #[inline]
    fn insert(&mut self, due_ms: u64, value: u64) -> TimerKey {
        TimingWheel::insert(self, due_ms, value)
    }
    #[inline]
    fn cancel(&mut self, key: TimerKey) -> bool {
        TimingWheel::cancel(self, key).is_some()
    }
    #[inline]
    fn poll(&mut self, now_ms: u64) -> Option<u64> {
        TimingWheel::poll(self, now_ms).map(|(_, _, v)| v)
    }
    fn tick(&mut self, _: u64) -> impl Future<Output = ()> {
        std::future::ready(())
    }
}

struct Dq {
    queue: DelayQueue<u64>,
    start_ms: u64,
    start: tokio::time::Instant,
    now_ms: u64,
}

impl Timers for Dq {
    type Key = DqKey;
    fn new(start_ms: u64) -> Self {
        let start = tokio::time::Instant::now();
        Self {
            queue: DelayQueue::new(),
            start_ms,
            start,
            now_ms: start_ms,
        }
    }
    #[inline]
    fn insert(&mut self, due_ms: u64, value: u64) -> DqKey {
        self.queue.insert_at(
            value,
            self.start + Duration::from_millis(due_ms - self.start_ms),
        )
    }
    #[inline]
    fn cancel(&mut self, key: DqKey) -> bool {
        self.queue.try_remove(&key).is_some()
    }
    #[inline]
    fn poll(&mut self, _: u64) -> Option<u64> {
        match self
            .queue
            .poll_expired(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(Some(expired)) => Some(expired.into_inner()),
            _ => None,
        }
    }
    fn tick(&mut self, now_ms: u64) -> impl Future<Output = ()> {
        let step = Duration::from_millis(now_ms - self.now_ms);
        self.now_ms = now_ms;
        tokio::time::advance(step)
    }
}

#[derive(Default)]
struct Heap {
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    tombstones: HashSet<u64>,
}

impl Timers for Heap {
    type Key = u64;
    fn new(_: u64) -> Self {
        Self::default()
    }
    #[inline]
    fn insert(&mut self, due_ms: u64, value: u64) -> u64 {
        self.heap.push(Reverse((due_ms, value)));
        value
    }
    #[inline]
    fn cancel(&mut self, key: u64) -> bool {
        self.tombstones.insert(key)
    }
    #[inline]
    fn poll(&mut self, now_ms: u64) -> Option<u64> {
        while let Some(&Reverse((due_ms, value))) = self.heap.peek() {
            if due_ms > now_ms {
                return None;
            }
            self.heap.pop();
            if !self.tombstones.remove(&value) {
                return Some(value);
            }
        }
        None
    }
    fn tick(&mut self, _: u64) -> impl Future<Output = ()> {
        std::future::ready(())
    }
}

#[derive(Default)]
struct Tree {
    map: BTreeMap<(u64, u64), u64>,
    seq: u64,
}

impl Timers for Tree {
    type Key = (u64, u64);
    fn new(_: u64) -> Self {
        Self::default()
    }
    #[inline]
    fn insert(&mut self, due_ms: u64, value: u64) -> (u64, u64) {
        self.seq += 1;
        self.map.insert((due_ms, self.seq), value);
        (due_ms, self.seq)
    }
    #[inline]
    fn cancel(&mut self, key: (u64, u64)) -> bool {
        self.map.remove(&key).is_some()
    }
    #[inline]
    fn poll(&mut self, now_ms: u64) -> Option<u64> {
        match self.map.first_key_value() {
            Some((&(due_ms, _), _)) if due_ms <= now_ms => self.map.pop_first().map(|(_, v)| v),
            _ => None,
        }
    }
    fn tick(&mut self, _: u64) -> impl Future<Output = ()> {
        std::future::ready(())
    }
}

/// The slowest single call of each kind, in ns.
#[derive(Default, Clone, Copy)]
struct Pauses {
    insert: u64,
    cancel: u64,
    poll: u64,
    tick: u64,
}

impl Pauses {
    fn max(&self) -> u64 {
        self.insert.max(self.cancel).max(self.poll).max(self.tick)
    }
}

/// Any structure, with every call timed.
struct Timed<T> {
    inner: T,
    pauses: Pauses,
}

fn record(slot: &mut u64, since: Instant) {
    *slot = (*slot).max(since.elapsed().as_nanos() as u64);
}

impl<T: Timers> Timers for Timed<T> {
    type Key = T::Key;
    fn new(start_ms: u64) -> Self {
        Self {
            inner: T::new(start_ms),
            pauses: Pauses::default(),
        }
    }
    fn insert(&mut self, due_ms: u64, value: u64) -> T::Key {
        let t = Instant::now();
        let key = self.inner.insert(due_ms, value);
        record(&mut self.pauses.insert, t);
        key
    }
    fn cancel(&mut self, key: T::Key) -> bool {
        let t = Instant::now();
        let done = self.inner.cancel(key);
        record(&mut self.pauses.cancel, t);
        done
    }
    fn poll(&mut self, now_ms: u64) -> Option<u64> {
        let t = Instant::now();
        let fired = self.inner.poll(now_ms);
        record(&mut self.pauses.poll, t);
        fired
    }
    async fn tick(&mut self, now_ms: u64) {
        let t = Instant::now();
        self.inner.tick(now_ms).await;
        record(&mut self.pauses.tick, t);
    }
    fn reset_pauses(&mut self) {
        self.pauses = Pauses::default();
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn dues(n: usize, seed: u64) -> Vec<u64> {
    let mut state = seed;
    (0..n)
        .map(|_| T0 + 1 + splitmix(&mut state) % HOUR_MS)
        .collect()
}

fn ns_per(elapsed: Duration, ops: usize) -> f64 {
    elapsed.as_nanos() as f64 / ops.max(1) as f64
}

/// Advances 1 ms at a time to `end_ms`, firing everything; returns how many fired.
async fn drain<T: Timers>(timers: &mut T, end_ms: u64) -> usize {
    let mut fired = 0;
    for now in T0 + 1..=end_ms {
        timers.tick(now).await;
        while let Some(v) = timers.poll(now) {
            black_box(v);
            fired += 1;
        }
    }
    fired
}

struct W1 {
    insert_ns: f64,
    fire_ns: f64,
    bytes_per_timer: f64,
}

async fn w1<T: Timers>(dues: &[u64]) -> (W1, T) {
    let bytes = allocated_bytes();
    let start = Instant::now();
    let mut timers = T::new(T0);
    for (i, &due) in dues.iter().enumerate() {
        timers.insert(due, i as u64);
    }
    let insert_ns = ns_per(start.elapsed(), dues.len());
    let bytes_per_timer = (allocated_bytes() - bytes) as f64 / dues.len() as f64;
    let start = Instant::now();
    let fired = drain(&mut timers, T0 + HOUR_MS + 1).await;
    let fire_ns = ns_per(start.elapsed(), fired);
    assert_eq!(fired, dues.len());
    (
        W1 {
            insert_ns,
            fire_ns,
            bytes_per_timer,
        },
        timers,
    )
}

struct W2 {
    cancel_ns: f64,
    fire_ns: f64,
}

async fn w2<T: Timers>(dues: &[u64]) -> (W2, T) {
    let mut timers = T::new(T0);
    let keys: Vec<T::Key> = dues
        .iter()
        .enumerate()
        .map(|(i, &due)| timers.insert(due, i as u64))
        .collect();
    let start = Instant::now();
    let mut cancelled = 0;
    for (i, &key) in keys.iter().enumerate() {
        if i % 10 != 0 {
            assert!(timers.cancel(key));
            cancelled += 1;
        }
    }
    let cancel_ns = ns_per(start.elapsed(), cancelled);
    let start = Instant::now();
    let fired = drain(&mut timers, T0 + HOUR_MS + 1).await;
    let fire_ns = ns_per(start.elapsed(), fired);
    assert_eq!(fired, dues.len() - cancelled);
    (W2 { cancel_ns, fire_ns }, timers)
}

struct W3 {
    /// One fire plus one insert, with the idle polls and clock advances in between.
    cycle_ns: f64,
}

async fn w3<T: Timers>(dues: &[u64]) -> (W3, T) {
    let mut timers = T::new(T0);
    for (i, &due) in dues.iter().enumerate() {
        timers.insert(due, i as u64);
    }
    timers.reset_pauses();
    let (mut next_value, mut seed, mut cycles) = (dues.len() as u64, 99u64, 0usize);
    let start = Instant::now();
    for now in T0 + 1..=T0 + STEADY_MS {
        timers.tick(now).await;
        let mut fired = 0;
        while let Some(v) = timers.poll(now) {
            black_box(v);
            fired += 1;
        }
        for _ in 0..fired {
            timers.insert(now + 1 + splitmix(&mut seed) % HOUR_MS, next_value);
            next_value += 1;
        }
        cycles += fired;
    }
    (
        W3 {
            cycle_ns: ns_per(start.elapsed(), cycles),
        },
        timers,
    )
}

/// Jobs in the sorted run of W4: one hour bucket's worth, as a bucket file holds.
const BULK_JOBS: u64 = 1_000_000;

/// W4 bulk load: N pending, then one hour bucket's run of [`BULK_JOBS`] sorted by due, two
/// hours ahead, inserted in order (what loading a bucket file does); ns per insert of the run.
async fn w4<T: Timers>(dues: &[u64]) -> (f64, T) {
    let mut timers = T::new(T0);
    for (i, &due) in dues.iter().enumerate() {
        timers.insert(due, i as u64);
    }
    let bucket_ms = T0 + 2 * HOUR_MS;
    let start = Instant::now();
    for k in 0..BULK_JOBS {
        timers.insert(bucket_ms + k * HOUR_MS / BULK_JOBS, k);
    }
    (ns_per(start.elapsed(), BULK_JOBS as usize), timers)
}

/// Runs a workload to completion: on a paused tokio runtime for `DelayQueue`, else by polling
/// once (nothing else ever waits).
fn run<F: Future>(tokio_clock: bool, future: F) -> F::Output {
    if tokio_clock {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("tokio runtime");
        return runtime.block_on(future);
    }
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("only DelayQueue waits"),
    }
}

#[derive(Clone, Copy)]
struct Row {
    insert_ns: f64,
    fire_ns: f64,
    cancel_ns: f64,
    w2_fire_ns: f64,
    cycle_ns: f64,
    pause_w1: Pauses,
    pause_w3: Pauses,
    bytes_per_timer: f64,
    bulk_ns: f64,
}

fn measure<T: Timers>(dues: &[u64], runs: usize, tokio_clock: bool) -> Row {
    let mut row = Row {
        insert_ns: f64::MAX,
        fire_ns: f64::MAX,
        cancel_ns: f64::MAX,
        w2_fire_ns: f64::MAX,
        cycle_ns: f64::MAX,
        pause_w1: Pauses::default(),
        pause_w3: Pauses::default(),
        bytes_per_timer: 0.0,
        bulk_ns: f64::MAX,
    };
    for _ in 0..runs {
        let (w, timers) = run(tokio_clock, w1::<T>(dues));
        drop(timers);
        row.insert_ns = row.insert_ns.min(w.insert_ns);
        row.fire_ns = row.fire_ns.min(w.fire_ns);
        row.bytes_per_timer = w.bytes_per_timer;
        let (w, timers) = run(tokio_clock, w2::<T>(dues));
        drop(timers);
        row.cancel_ns = row.cancel_ns.min(w.cancel_ns);
        row.w2_fire_ns = row.w2_fire_ns.min(w.fire_ns);
        let (w, timers) = run(tokio_clock, w3::<T>(dues));
        drop(timers);
        row.cycle_ns = row.cycle_ns.min(w.cycle_ns);
        let (bulk_ns, timers) = run(tokio_clock, w4::<T>(dues));
        drop(timers);
        row.bulk_ns = row.bulk_ns.min(bulk_ns);
    }
    let (_, timed) = run(tokio_clock, w1::<Timed<T>>(dues));
    row.pause_w1 = timed.pauses;
    drop(timed);
    let (_, timed) = run(tokio_clock, w3::<Timed<T>>(dues));
    row.pause_w3 = timed.pauses;
    row
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1_000.0)
}

fn print_table(n: usize, runs: usize, rows: &[(&str, Row)]) {
    println!("\n### N = {n} (best of {runs})\n");
    println!(
        "| structure | W1 insert ns | W1 fire ns | W2 cancel ns | W2 fire ns | W3 fire+insert ns \
         | worst call W1 µs | worst call W3 µs | bytes/timer |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, r) in rows {
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {:.1} |",
            r.insert_ns,
            r.fire_ns,
            r.cancel_ns,
            r.w2_fire_ns,
            r.cycle_ns,
            us(r.pause_w1.max()),
            us(r.pause_w3.max()),
            r.bytes_per_timer
        );
    }
    println!(
        "\nW4, a sorted run of {BULK_JOBS} (one hour bucket, 2 h ahead) loaded into {n} pending:\n"
    );
    println!("| structure | ns per insert | M inserts/s |");
    println!("|---|---:|---:|");
    for (name, r) in rows {
        println!("| {name} | {:.1} | {:.1} |", r.bulk_ns, 1e3 / r.bulk_ns);
    }
    println!("\nWorst single call by kind, µs (W1 / W3):\n");
    println!("| structure | insert | poll | clock advance |");
    println!("|---|---:|---:|---:|");
    for (name, r) in rows {
        let (a, b) = (r.pause_w1, r.pause_w3);
        println!(
            "| {name} | {} / {} | {} / {} | {} / {} |",
            us(a.insert),
            us(b.insert),
            us(a.poll),
            us(b.poll),
            us(a.tick),
            us(b.tick)
        );
    }
    if let Some((_, wheel)) = rows.iter().find(|(name, _)| *name == "TimingWheel") {
        println!("\nRatios, peer / TimingWheel (higher is better for the wheel):\n");
        println!("| peer | insert | fire | cancel | W2 fire | W3 cycle | worst call W1 | bytes |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|");
        for (name, r) in rows.iter().filter(|(name, _)| *name != "TimingWheel") {
            println!(
                "| {name} | {:.1}x | {:.1}x | {:.1}x | {:.1}x | {:.1}x | {:.1}x | {:.2}x |",
                r.insert_ns / wheel.insert_ns,
                r.fire_ns / wheel.fire_ns,
                r.cancel_ns / wheel.cancel_ns,
                r.w2_fire_ns / wheel.w2_fire_ns,
                r.cycle_ns / wheel.cycle_ns,
                r.pause_w1.max() as f64 / wheel.pause_w1.max().max(1) as f64,
                r.bytes_per_timer / wheel.bytes_per_timer
            );
        }
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::var("WHEEL_BENCH_N")
        .unwrap_or_else(|_| "1000000,10000000".into())
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .expect("WHEEL_BENCH_N: comma-separated sizes")
        })
        .collect();
    let names = ["wheel", "delayqueue", "binaryheap", "btreemap"];
    let picked: Vec<String> = std::env::args()
        .skip(1)
        .map(|a| a.to_lowercase())
        .filter(|a| names.contains(&a.as_str()))
        .collect();
    let wanted = |name: &str| picked.is_empty() || picked.iter().any(|p| p == name);
    println!("Timing wheel and peers: dues uniform over one hour, virtual 1 ms clock.");
    for n in sizes {
        let runs = std::env::var("WHEEL_BENCH_RUNS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(if n <= 1_000_000 { 3 } else { 1 });
        let dues = dues(n, 42);
        let mut rows = Vec::new();
        let started = Instant::now();
        if wanted("wheel") {
            rows.push((
                "TimingWheel",
                measure::<TimingWheel<u64>>(&dues, runs, false),
            ));
        }
        if wanted("delayqueue") {
            rows.push(("DelayQueue", measure::<Dq>(&dues, runs, true)));
        }
        if wanted("binaryheap") {
            rows.push(("BinaryHeap", measure::<Heap>(&dues, runs, false)));
        }
        if wanted("btreemap") {
            rows.push(("BTreeMap", measure::<Tree>(&dues, runs, false)));
        }
        print_table(n, runs, &rows);
        eprintln!("(N = {n} took {:.0} s)", started.elapsed().as_secs_f64());
    }
}
