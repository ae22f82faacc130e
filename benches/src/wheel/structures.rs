//! The timer structures the wheel workloads run: [`TimingWheel`] and its peers, behind one
//! trait ([`Timers`]), plus [`Timed`], which times every call of any of them.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashSet};
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use timewheel::wheel::{TimerKey, TimingWheel};
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key as DqKey;

/// What the workloads need of a timer structure.
pub trait Timers {
    /// What `insert` hands back, for `cancel`.
    type Key: Copy;
    /// An empty structure whose clock starts at `start_ms`.
    fn new(start_ms: u64) -> Self;
    /// Adds a timer due at `due_ms` carrying `value`.
    fn insert(&mut self, due_ms: u64, value: u64) -> Self::Key;
    /// Cancels a pending timer; false if it was not pending.
    fn cancel(&mut self, key: Self::Key) -> bool;
    /// Fires one timer due at `now_ms`, if any.
    fn poll(&mut self, now_ms: u64) -> Option<u64>;
    /// Fires every timer due at `now_ms`; returns how many. Each structure's fastest way:
    /// [`TimingWheel::poll_many`] for the wheel, `poll` until `None` for the others.
    fn fire_due(&mut self, now_ms: u64) -> usize {
        let mut fired = 0;
        while let Some(v) = self.poll(now_ms) {
            std::hint::black_box(v);
            fired += 1;
        }
        fired
    }
    /// Moves the virtual clock to `now_ms` (only `DelayQueue` has a clock of its own).
    fn tick(&mut self, now_ms: u64) -> impl Future<Output = ()>;
    /// Forgets the pauses recorded so far (only [`Timed`] records any).
    fn reset_pauses(&mut self) {}
}

/// The timing wheel with the buffer its fires go to, as a timer thread holds one (the engine's
/// does): the buffer is the caller's, not the wheel's.
pub struct Wheel {
    wheel: TimingWheel<u64>,
    out: Vec<(TimerKey, u64, u64)>,
}

/// Timers taken per `poll_many`.
const BATCH: usize = 1024;

impl Timers for Wheel {
    type Key = TimerKey;
    fn new(start_ms: u64) -> Self {
        Self {
            wheel: TimingWheel::new(start_ms),
            out: Vec::with_capacity(BATCH),
        }
    }
    #[inline]
    fn insert(&mut self, due_ms: u64, value: u64) -> TimerKey {
        self.wheel.insert(due_ms, value)
    }
    #[inline]
    fn cancel(&mut self, key: TimerKey) -> bool {
        self.wheel.remove(key)
    }
    #[inline]
    fn poll(&mut self, now_ms: u64) -> Option<u64> {
        self.wheel.poll(now_ms).map(|(_, _, v)| v)
    }
    fn fire_due(&mut self, now_ms: u64) -> usize {
        let mut fired = 0;
        loop {
            self.out.clear();
            let n = self.wheel.poll_many(now_ms, BATCH, &mut self.out);
            std::hint::black_box(&self.out);
            fired += n;
            if n < BATCH {
                return fired;
            }
        }
    }
    fn tick(&mut self, _: u64) -> impl Future<Output = ()> {
        std::future::ready(())
    }
}

/// tokio-util's `DelayQueue` on a paused tokio clock.
pub struct Dq {
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

/// A `BinaryHeap` of `(due, value)`, cancelled by a tombstone set.
#[derive(Default)]
pub struct Heap {
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

/// A `BTreeMap` keyed by `(due, sequence)`.
#[derive(Default)]
pub struct Tree {
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
pub struct Pauses {
    /// The slowest insert.
    pub insert: u64,
    /// The slowest cancel.
    pub cancel: u64,
    /// The slowest poll.
    pub poll: u64,
    /// The slowest clock advance.
    pub tick: u64,
}

impl Pauses {
    /// The slowest call of any kind.
    pub fn max(&self) -> u64 {
        self.insert.max(self.cancel).max(self.poll).max(self.tick)
    }
}

/// Any structure, with every call timed.
pub struct Timed<T> {
    inner: T,
    /// The slowest calls so far.
    pub pauses: Pauses,
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
