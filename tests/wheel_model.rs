//! The timing wheel against a plain model, a `BTreeMap<(due, seq), value>`: random sequences of
//! insert, cancel, reschedule, poll and `poll_many`, with time steps from 0 ms to days (and backwards),
//! far-future dues, bursts of thousands in one ms and stale keys. After every step the wheel
//! and the model must agree: the same timers fire, in due order, none early, none twice, none
//! lost; `next_due` never oversleeps, is exact within the current second, and polling at it
//! always makes progress.
//!
//! `PROPTEST_CASES` raises the number of cases (default 512, about 2 s in a debug build).

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use timewheel::wheel::{TimerKey, TimingWheel};

const T0: u64 = 1_700_000_000_000;
const HOUR: u64 = 3_600_000;
const DAY: u64 = 24 * HOUR;

/// A due time relative to the caller's clock.
#[derive(Clone, Debug)]
enum Due {
    Past(u64),
    Near(u64),
    Hours(u64),
    Days(u64),
    Far(u64),
    /// `k` whole seconds, minutes or hours ahead of the clock's, plus -1, 0 or 1 ms: the edges.
    Edge(u64, u64, i64),
    Max,
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Due),
    Burst(Due, u16),
    /// Cancels a timer picked, by `remove` (no value read) when the flag is set.
    Cancel(usize, bool),
    Reschedule(usize, Due),
    /// Gives a timer another value (`TimingWheel::set`): its top bit flips.
    Relabel(usize),
    /// Cancels every pending timer effectively due in the same minute as the timer picked
    /// (all but one in `keep_one` of them): a far minute's chunks compact down to nothing.
    CancelMinute(usize, bool),
    /// Moves the caller's clock (backwards when negative) and polls at most `polls` times.
    Advance(i64, u16),
    PollAtNextDue,
    /// Moves the caller's clock like `Advance` and takes at most `max` timers in one
    /// `poll_many`.
    PollMany(i64, u16),
}

fn due() -> impl Strategy<Value = Due> {
    prop_oneof![
        1 => (0..5_000u64).prop_map(Due::Past),
        4 => (0..3_000u64).prop_map(Due::Near),
        3 => (0..3 * HOUR).prop_map(Due::Hours),
        2 => (0..10 * DAY).prop_map(Due::Days),
        1 => (0..1u64 << 44).prop_map(Due::Far),
        3 => (prop_oneof![Just(1_000u64), Just(60_000), Just(HOUR)], 0..70u64, -1..=1i64)
            .prop_map(|(unit, k, d)| Due::Edge(unit, k, d)),
        1 => Just(Due::Max),
    ]
}

fn step() -> impl Strategy<Value = i64> {
    prop_oneof![
        2 => Just(0i64),
        4 => 0..50i64,
        3 => 0..120_000i64,
        2 => 0..(3 * HOUR as i64),
        1 => 0..(12 * DAY as i64),
        1 => -10_000..0i64,
        // A clock a millisecond or two behind the wheel, which must hold.
        1 => -2..0i64,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => due().prop_map(Op::Insert),
        1 => (due(), 1..3_000u16).prop_map(|(d, n)| Op::Burst(d, n)),
        4 => (any::<usize>(), any::<bool>()).prop_map(|(k, remove)| Op::Cancel(k, remove)),
        2 => (any::<usize>(), due()).prop_map(|(k, d)| Op::Reschedule(k, d)),
        1 => any::<usize>().prop_map(Op::Relabel),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(k, keep)| Op::CancelMinute(k, keep)),
        4 => (step(), prop_oneof![Just(u16::MAX), 1..500u16]).prop_map(|(s, p)| Op::Advance(s, p)),
        2 => Just(Op::PollAtNextDue),
        3 => (step(), prop_oneof![Just(u16::MAX), 0..500u16]).prop_map(|(s, m)| Op::PollMany(s, m)),
    ]
}

/// The reference: pending timers by (effective due, seq), where effective due is
/// `max(due, wheel time at insert)` and the seq is also the timer's value.
struct Model {
    wheel_now_ms: u64,
    pending: BTreeMap<(u64, u64), u64>,
    by_seq: HashMap<u64, (u64, TimerKey)>,
    /// The value of a pending timer given another one (`Op::Relabel`); the others have their seq.
    values: HashMap<u64, u64>,
}

/// The bit `Op::Relabel` flips in a timer's value (seqs stay far below it).
const RELABELED: u64 = 1 << 63;

struct Harness {
    wheel: TimingWheel<u64>,
    model: Model,
    clock_ms: u64,
    /// Every key ever issued, with its seq: the stale ones included.
    keys: Vec<(TimerKey, u64)>,
    next_seq: u64,
}

impl Harness {
    fn new() -> Self {
        Self {
            wheel: TimingWheel::new(T0),
            model: Model {
                wheel_now_ms: T0,
                pending: BTreeMap::new(),
                by_seq: HashMap::new(),
                values: HashMap::new(),
            },
            clock_ms: T0,
            keys: Vec::new(),
            next_seq: 0,
        }
    }

    /// The due time the wheel keeps for `due` (past its last time, its last time).
    fn due_ms(&self, due: &Due) -> u64 {
        self.asked_ms(due).min(self.wheel.last_ms())
    }

    fn asked_ms(&self, due: &Due) -> u64 {
        match *due {
            Due::Past(d) => self.clock_ms.saturating_sub(d),
            Due::Near(d) | Due::Hours(d) | Due::Days(d) | Due::Far(d) => {
                self.clock_ms.saturating_add(d)
            }
            Due::Edge(unit, k, d) => (self.clock_ms / unit + k)
                .saturating_mul(unit)
                .saturating_add_signed(d),
            Due::Max => u64::MAX,
        }
    }

    fn insert(&mut self, due_ms: u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let key = self.wheel.insert(due_ms, seq);
        let effective = due_ms.max(self.model.wheel_now_ms);
        self.model.pending.insert((effective, seq), due_ms);
        self.model.by_seq.insert(seq, (effective, key));
        self.keys.push((key, seq));
    }

    fn pick(&self, k: usize) -> Option<(TimerKey, u64)> {
        (!self.keys.is_empty()).then(|| self.keys[k % self.keys.len()])
    }

    /// Whether `key` is the current key of pending timer `seq` (a reschedule gives it a new
    /// one).
    fn is_live(&self, key: TimerKey, seq: u64) -> bool {
        self.model.by_seq.get(&seq).is_some_and(|&(_, k)| k == key)
    }

    /// One poll, checked against the model; returns whether it fired.
    fn poll(&mut self, now_ms: u64) -> bool {
        let fired = self.wheel.poll(now_ms);
        let progress = self.check_poll(fired, now_ms);
        assert_eq!(self.wheel.now_ms(), self.model.wheel_now_ms);
        progress
    }

    /// One `poll_many`, checked timer by timer as that many polls would be, then (if it
    /// stopped short of `max`) as the poll that found nothing due.
    fn poll_many(&mut self, now_ms: u64, max: usize) {
        let mut out = vec![(TimerKey::from_u64(0), 0, 0)];
        let fired = self.wheel.poll_many(now_ms, max, &mut out);
        assert_eq!(fired, out.len() - 1, "appends what it counts");
        assert!(fired <= max);
        for &timer in &out[1..] {
            assert!(self.check_poll(Some(timer), now_ms));
        }
        if fired < max {
            self.check_poll(None, now_ms);
        }
        assert_eq!(self.wheel.now_ms(), self.model.wheel_now_ms);
    }

    fn check_poll(&mut self, fired: Option<(TimerKey, u64, u64)>, now_ms: u64) -> bool {
        let first = self.model.pending.keys().next().copied();
        match fired {
            Some((key, due_ms, value)) => {
                let seq = value & !RELABELED;
                assert_eq!(
                    value,
                    self.model.values.remove(&seq).unwrap_or(seq),
                    "fires with its newest value"
                );
                let (effective, model_key) = self
                    .model
                    .by_seq
                    .remove(&seq)
                    .expect("fired a pending timer, once");
                assert_eq!(key, model_key);
                assert_eq!(
                    first.map(|f| f.0),
                    Some(effective),
                    "fires in effective due order"
                );
                assert_eq!(self.model.pending.remove(&(effective, seq)), Some(due_ms));
                assert!(due_ms <= now_ms && effective <= now_ms, "never early");
                self.model.wheel_now_ms = effective;
            }
            None => {
                if let Some((effective, seq)) = first {
                    assert!(
                        effective > now_ms,
                        "timer {seq} due at {effective} lost at {now_ms}"
                    );
                }
                let now_ms = now_ms.min(self.wheel.last_ms());
                self.model.wheel_now_ms = self.model.wheel_now_ms.max(now_ms);
            }
        }
        fired.is_some()
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Insert(due) => self.insert(self.due_ms(due)),
            Op::Burst(due, n) => {
                let due_ms = self.due_ms(due);
                for _ in 0..*n {
                    self.insert(due_ms);
                }
            }
            Op::Cancel(k, remove) => {
                if let Some((key, seq)) = self.pick(*k) {
                    if !self.is_live(key, seq) {
                        match remove {
                            true => assert!(!self.wheel.remove(key), "a stale key"),
                            false => assert_eq!(self.wheel.cancel(key), None, "a stale key"),
                        }
                        return self.check();
                    }
                    let (effective, _) = self.model.by_seq.remove(&seq).expect("live");
                    self.model.pending.remove(&(effective, seq));
                    let value = self.model.values.remove(&seq).unwrap_or(seq);
                    match remove {
                        true => assert!(self.wheel.remove(key)),
                        false => assert_eq!(self.wheel.cancel(key), Some(value)),
                    }
                }
            }
            Op::Reschedule(k, due) => {
                if let Some((key, seq)) = self.pick(*k) {
                    let due_ms = self.due_ms(due);
                    let pending = self.is_live(key, seq);
                    let moved = self.wheel.reschedule(key, due_ms);
                    assert_eq!(moved.is_some(), pending);
                    if let Some(moved) = moved {
                        assert!(!self.wheel.contains(key), "the old key is stale");
                        let (old, _) = self.model.by_seq[&seq];
                        self.model.pending.remove(&(old, seq));
                        let effective = due_ms.max(self.model.wheel_now_ms);
                        self.model.pending.insert((effective, seq), due_ms);
                        self.model.by_seq.insert(seq, (effective, moved));
                        self.keys.push((moved, seq));
                    }
                }
            }
            Op::CancelMinute(k, keep_one) => {
                if let Some((_, seq)) = self.pick(*k)
                    && let Some(&(effective, _)) = self.model.by_seq.get(&seq)
                {
                    let minute = effective / 60_000;
                    let mut doomed: Vec<(u64, u64, TimerKey)> = self
                        .model
                        .by_seq
                        .iter()
                        .filter(|(_, (e, _))| e / 60_000 == minute)
                        .map(|(&s, &(e, key))| (s, e, key))
                        .collect();
                    doomed.sort_unstable_by_key(|&(s, _, _)| s);
                    if *keep_one {
                        doomed.pop();
                    }
                    for (s, e, key) in doomed {
                        let value = self.model.values.remove(&s).unwrap_or(s);
                        self.model.by_seq.remove(&s);
                        self.model.pending.remove(&(e, s));
                        // Half by `remove`, which reads no value.
                        match s % 2 {
                            0 => assert!(self.wheel.remove(key)),
                            _ => assert_eq!(self.wheel.cancel(key), Some(value)),
                        }
                    }
                }
            }
            Op::Relabel(k) => {
                if let Some((key, seq)) = self.pick(*k) {
                    let pending = self.is_live(key, seq);
                    let value = self.model.values.get(&seq).copied().unwrap_or(seq) ^ RELABELED;
                    assert_eq!(self.wheel.set(key, value), pending);
                    if pending {
                        self.model.values.insert(seq, value);
                        assert_eq!(self.wheel.get(key), Some(value));
                    } else {
                        assert_eq!(self.wheel.get(key), None);
                    }
                }
            }
            Op::Advance(step, polls) => {
                self.clock_ms = self.clock_ms.saturating_add_signed(*step);
                for _ in 0..*polls {
                    if !self.poll(self.clock_ms) {
                        break;
                    }
                }
            }
            Op::PollMany(step, max) => {
                self.clock_ms = self.clock_ms.saturating_add_signed(*step);
                self.poll_many(self.clock_ms, usize::from(*max));
            }
            Op::PollAtNextDue => {
                if let Some(next_ms) = self.wheel.next_due() {
                    self.clock_ms = self.clock_ms.max(next_ms);
                    if !self.poll(next_ms) {
                        let after = self.wheel.next_due();
                        assert!(
                            after.is_none_or(|a| a > next_ms),
                            "no progress at {next_ms}"
                        );
                    }
                }
            }
        }
        self.check();
    }

    fn check(&self) {
        if let Some(at) = self.wheel.look_ahead_due() {
            assert!(
                at > self.model.wheel_now_ms,
                "look-ahead due {at} is not ahead"
            );
        }
        assert_eq!(self.wheel.len(), self.model.pending.len());
        assert_eq!(self.wheel.is_empty(), self.model.pending.is_empty());
        let next = self.wheel.next_due();
        match self.model.pending.keys().next() {
            None => assert_eq!(next, None),
            Some(&(first, _)) => {
                let next = next.expect("next_due while timers are pending");
                assert!(
                    next <= first,
                    "next_due {next} later than the earliest {first}"
                );
                assert!(next >= self.model.wheel_now_ms);
                // Exact within the current second, unless 64 tombstones or more lie before the
                // earliest (`next_due` reads at most 64 items to step over them).
                if first / 1000 == self.model.wheel_now_ms / 1000 && self.wheel.tombstones() < 64 {
                    assert_eq!(next, first, "exact within the current second");
                }
            }
        }
    }

    /// Drains everything: nothing may be left behind.
    fn finish(&mut self) {
        while let Some(next_ms) = self.wheel.next_due() {
            self.clock_ms = self.clock_ms.max(next_ms);
            while self.poll(self.clock_ms) {}
            self.check();
        }
        assert!(self.model.pending.is_empty());
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(512)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn wheel_matches_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        let mut h = Harness::new();
        for op in &ops {
            h.apply(op);
        }
        h.finish();
    }
}

/// A fixed scenario the random one may take long to find: a burst drained in batches while
/// inserts and cancels keep flowing, then a jump of days over every tier.
#[test]
fn burst_drained_in_batches_while_inserts_and_cancels_flow() {
    let mut h = Harness::new();
    for _ in 0..5_000 {
        h.insert(T0 + 1_500);
    }
    for i in 0..200u64 {
        h.insert(T0 + (i * 7_777_777) % (5 * DAY));
    }
    h.clock_ms = T0 + 2_000;
    for round in 0..100usize {
        for _ in 0..40 {
            h.poll(h.clock_ms);
        }
        h.apply(&Op::Insert(Due::Near((round as u64 * 37) % 3_000)));
        h.apply(&Op::Cancel(round * 101, round % 2 == 0));
        h.check();
    }
    h.apply(&Op::Advance(6 * DAY as i64, u16::MAX));
    h.finish();
}

/// Cancels and reschedules of far timers: their minutes' key spaces compact as the cancels
/// come, and every live timer still fires in order, none early.
#[test]
fn mass_cancels_are_compacted_while_the_rest_fire_in_order() {
    let mut h = Harness::new();
    let n = 150_000usize;
    for i in 0..n as u64 {
        h.insert(T0 + 1 + (i * 7_919) % (3 * HOUR));
    }
    for k in (0..n).filter(|k| k % 10 != 0) {
        h.apply(&Op::Cancel(k, k % 3 == 0));
    }
    for k in (0..n).step_by(30) {
        h.apply(&Op::Reschedule(k, Due::Hours((k as u64 * 13) % (3 * HOUR))));
    }
    let stats = h.wheel.work_stats();
    assert!(stats.swept_total >= 100_000, "{stats:?}");
    // Each chunk keeps at most four times its live places, the minute's timers two minutes
    // ahead and nearer excepted (their items are in the rings, which drop them).
    let live = h.wheel.len() as u64;
    assert!(
        h.wheel.tombstones() <= 3 * live + 2 * 1_000,
        "{} tombstones for {live} live timers",
        h.wheel.tombstones()
    );
    for round in 0..2_000u64 {
        h.apply(&Op::Advance(((round * 7_777) % 20_000) as i64, u16::MAX));
        if round % 3 == 0 {
            h.apply(&Op::Insert(Due::Hours((round * 1_234_567) % (3 * HOUR))));
            h.apply(&Op::Cancel(round as usize * 977, round % 2 == 1));
        }
    }
    h.finish();
}

/// A caller that schedules and cancels far-future timers and never polls (the wheel's time
/// stands still) must not grow the wheel without bound: placements drive the sweep.
#[test]
fn churn_without_polls_keeps_tombstones_bounded() {
    let mut wheel = TimingWheel::new(T0);
    let keep: Vec<TimerKey> = (0..10_000u64)
        .map(|i| wheel.insert(T0 + HOUR + i, i))
        .collect();
    let mut most = 0;
    for i in 0..2_000_000u64 {
        let key = wheel.insert(T0 + 2 * HOUR + i % (10 * HOUR), i);
        assert_eq!(wheel.cancel(key), Some(i));
        most = most.max(wheel.tombstones());
    }
    assert!(most <= 200_000, "tombstones peaked at {most}");
    assert_eq!(wheel.len(), keep.len());
    let mut fired = 0;
    while let Some(next) = wheel.next_due() {
        while let Some((_, due, v)) = wheel.poll(next) {
            assert_eq!(due, T0 + HOUR + v, "only the kept timers fire");
            fired += 1;
        }
    }
    assert_eq!(fired, keep.len());
}
