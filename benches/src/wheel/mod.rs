//! The timing wheel beside its peers: tokio-util's `DelayQueue` (on a paused tokio clock), a
//! `BinaryHeap` (cancel by a tombstone set) and a `BTreeMap`.
//!
//! N timers with a `u64` value, dues uniform over [`Shape::span_ms`] (one hour in the full run),
//! a virtual millisecond clock:
//! - W1 fill-drain: insert N, then advance 1 ms at a time, firing everything;
//! - W2 cancel-heavy: insert N, cancel 90% (in insertion order), drain the rest;
//! - W3 steady state: N pending; each ms fire what is due and insert as many new timers
//!   1 ms .. one span ahead, for [`Shape::steady_ms`];
//! - worst call: W3 again, timing every single call (insert, poll, and the clock advance of
//!   `DelayQueue`), kept apart so that reading the clock does not slow the above;
//! - bytes per timer: bytes allocated by the structure after W1's inserts, over N (needs the
//!   counting allocator of [`crate::alloc_count`] installed, else 0);
//! - W4 bulk load: N pending, then a sorted run of [`Shape::bulk_jobs`] due over one span two
//!   spans ahead (what loading a bucket file does), ns per insert.

pub mod structures;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::alloc_count::{allocated_bytes, allocated_since, set_counting};
use structures::{Dq, Heap, Timed, Timers, Tree, Wheel};

/// Not aligned to a second, minute or hour: the hour boundary is crossed mid-run.
const T0: u64 = 1_700_000_123_457;

/// The sizes of one wheel workload.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Timers pending (N).
    pub timers: usize,
    /// Dues are uniform over this span after the start.
    pub span_ms: u64,
    /// How long W3 runs, in virtual ms.
    pub steady_ms: u64,
    /// Timers in W4's sorted run.
    pub bulk_jobs: u64,
}

/// A timer structure the workloads run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Structure {
    /// `timewheel::wheel::TimingWheel`.
    TimingWheel,
    /// tokio-util's `DelayQueue`.
    DelayQueue,
    /// `BinaryHeap` with a tombstone set.
    BinaryHeap,
    /// `BTreeMap` keyed by due and sequence.
    BTreeMap,
}

impl Structure {
    /// All of them, the wheel first.
    pub const ALL: [Structure; 4] = [
        Structure::TimingWheel,
        Structure::DelayQueue,
        Structure::BinaryHeap,
        Structure::BTreeMap,
    ];

    /// The name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Structure::TimingWheel => "TimingWheel",
            Structure::DelayQueue => "DelayQueue",
            Structure::BinaryHeap => "BinaryHeap",
            Structure::BTreeMap => "BTreeMap",
        }
    }
}

/// One run of every wheel workload on one structure.
#[derive(Clone, Copy, Debug, Default)]
pub struct Figures {
    /// W1: ns per insert.
    pub insert_ns: f64,
    /// W1: drain time per timer fired, ns.
    pub fire_ns: f64,
    /// W2: ns per cancel.
    pub cancel_ns: f64,
    /// W2: drain time per timer fired, ns.
    pub w2_fire_ns: f64,
    /// W3: ns per fire plus insert.
    pub cycle_ns: f64,
    /// W4: ns per insert of the sorted run.
    pub bulk_ns: f64,
    /// W1: bytes allocated per timer after the inserts.
    pub bytes_per_timer: f64,
    /// W3 timed: the slowest single call, ns.
    pub worst_call_ns: u64,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What the W1 probes (`wheel_probe`, `wheel_run_sketch`) run: `[TIMERS] [ROUNDS]` from the
/// command line (default 10,000,000 timers over an hour, 3 rounds), the dues as `dues` draws
/// them, and the insert order the environment asks for: `WHEEL_PROBE_SORTED` in due order (the
/// keys' entries in fire order: a fire without its random read), `WHEEL_PROBE_MINUTES` by due
/// minute, in no order within it (what entries placed near their minute's would give).
pub fn probe_input() -> (Vec<u64>, usize) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args
        .first()
        .map_or(10_000_000, |a| a.parse().expect("TIMERS"));
    let rounds: usize = args.get(1).map_or(3, |a| a.parse().expect("ROUNDS"));
    let mut dues = dues(n, 3_600_000, 7);
    if std::env::var_os("WHEEL_PROBE_SORTED").is_some() {
        dues.sort_unstable();
    }
    if std::env::var_os("WHEEL_PROBE_MINUTES").is_some() {
        dues.sort_by_key(|&d| d / 60_000);
    }
    (dues, rounds)
}

/// `n` dues uniform over `span_ms` after the start, from `seed`.
pub fn dues(n: usize, span_ms: u64, seed: u64) -> Vec<u64> {
    let mut state = seed;
    (0..n)
        .map(|_| T0 + 1 + splitmix(&mut state) % span_ms)
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
        fired += timers.fire_due(now);
    }
    fired
}

fn fill<T: Timers>(dues: &[u64]) -> T {
    let mut timers = T::new(T0);
    for (i, &due) in dues.iter().enumerate() {
        timers.insert(due, i as u64);
    }
    timers
}

async fn w1<T: Timers>(dues: &[u64], span_ms: u64, f: &mut Figures) -> T {
    set_counting(true);
    let bytes = allocated_bytes();
    let start = Instant::now();
    let mut timers = fill::<T>(dues);
    f.insert_ns = ns_per(start.elapsed(), dues.len());
    f.bytes_per_timer = allocated_since(bytes) as f64 / dues.len().max(1) as f64;
    set_counting(false);
    let start = Instant::now();
    let fired = drain(&mut timers, T0 + span_ms + 1).await;
    f.fire_ns = ns_per(start.elapsed(), fired);
    assert_eq!(fired, dues.len());
    timers
}

async fn w2<T: Timers>(dues: &[u64], span_ms: u64, f: &mut Figures) -> T {
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
    f.cancel_ns = ns_per(start.elapsed(), cancelled);
    let start = Instant::now();
    let fired = drain(&mut timers, T0 + span_ms + 1).await;
    f.w2_fire_ns = ns_per(start.elapsed(), fired);
    assert_eq!(fired, dues.len() - cancelled);
    timers
}

/// W3; returns ns per fire plus insert (with the idle polls and clock advances in between).
async fn w3<T: Timers>(timers: &mut T, n: usize, shape: &Shape) -> f64 {
    timers.reset_pauses();
    let (mut next_value, mut seed, mut cycles) = (n as u64, 99u64, 0usize);
    let start = Instant::now();
    for now in T0 + 1..=T0 + shape.steady_ms {
        timers.tick(now).await;
        let fired = timers.fire_due(now);
        for _ in 0..fired {
            timers.insert(now + 1 + splitmix(&mut seed) % shape.span_ms, next_value);
            next_value += 1;
        }
        cycles += fired;
    }
    ns_per(start.elapsed(), cycles)
}

/// W4 on N pending; ns per insert of the sorted run.
fn w4<T: Timers>(timers: &mut T, shape: &Shape) -> f64 {
    let bucket_ms = T0 + 2 * shape.span_ms;
    let start = Instant::now();
    for k in 0..shape.bulk_jobs {
        timers.insert(bucket_ms + k * shape.span_ms / shape.bulk_jobs, k);
    }
    ns_per(start.elapsed(), shape.bulk_jobs as usize)
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

fn measure_one<T: Timers>(dues: &[u64], shape: &Shape, tokio_clock: bool) -> Figures {
    let mut f = Figures::default();
    drop(run(tokio_clock, w1::<T>(dues, shape.span_ms, &mut f)));
    drop(run(tokio_clock, w2::<T>(dues, shape.span_ms, &mut f)));
    let n = dues.len();
    f.cycle_ns = run(tokio_clock, async {
        let mut timers = fill::<T>(dues);
        w3(&mut timers, n, shape).await
    });
    f.bulk_ns = run(tokio_clock, async {
        let mut timers = fill::<T>(dues);
        w4(&mut timers, shape)
    });
    f.worst_call_ns = run(tokio_clock, async {
        let mut timers = fill::<Timed<T>>(dues);
        w3(&mut timers, n, shape).await;
        timers.pauses.max()
    });
    f
}

/// One run of W1-W4 and W3's worst call on `structure`, over `dues` (from [`dues`]).
pub fn measure(structure: Structure, dues: &[u64], shape: &Shape) -> Figures {
    match structure {
        Structure::TimingWheel => measure_one::<Wheel>(dues, shape, false),
        Structure::DelayQueue => measure_one::<Dq>(dues, shape, true),
        Structure::BinaryHeap => measure_one::<Heap>(dues, shape, false),
        Structure::BTreeMap => measure_one::<Tree>(dues, shape, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every structure fires every timer of a small run (the asserts inside the workloads would
    /// panic otherwise) and reports a positive cost for each workload.
    #[test]
    fn every_structure_runs_every_workload() {
        let shape = Shape {
            timers: 2_000,
            span_ms: 2_000,
            steady_ms: 500,
            bulk_jobs: 1_000,
        };
        let dues = dues(shape.timers, shape.span_ms, 7);
        for s in Structure::ALL {
            let f = measure(s, &dues, &shape);
            assert!(f.insert_ns > 0.0 && f.fire_ns > 0.0, "{s:?}: {f:?}");
            assert!(f.cancel_ns > 0.0 && f.bulk_ns > 0.0, "{s:?}: {f:?}");
        }
    }
}
