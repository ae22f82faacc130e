//! The timing wheel's pause bound, checked as work rather than time: the wheel counts the
//! timers it cascades, in total and in its busiest single `poll`. A caller that polls every
//! millisecond must never meet a cascade bigger than the per-poll budget, even at 10M timers
//! in one hour or 1M timers due in the same millisecond, and no timer may cascade more than
//! twice.

use timewheel::wheel::{CASCADE_PER_POLL_MAX, TimingWheel};

/// Not aligned to a second, minute or hour, so every kind of boundary is crossed.
const T0: u64 = 1_700_000_123_457;
const HOUR: u64 = 3_600_000;

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn timers() -> u64 {
    std::env::var("WHEEL_WORK_TIMERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000_000)
}

#[test]
fn ten_million_in_one_hour_polled_every_ms_stay_within_the_budget() {
    let n = timers();
    let mut wheel = TimingWheel::with_capacity(T0, n as usize);
    let mut seed = 1;
    for i in 0..n {
        wheel.insert(T0 + 1 + splitmix(&mut seed) % HOUR, i);
    }
    let (mut fired, mut last_due) = (0u64, 0u64);
    for now in T0..=T0 + HOUR + 1 {
        while let Some((_, due, _)) = wheel.poll(now) {
            assert!(due <= now && due >= last_due, "in due order, never early");
            last_due = due;
            fired += 1;
        }
    }
    assert_eq!(fired, n);
    let stats = wheel.work_stats();
    assert!(
        stats.cascaded_per_poll_max <= CASCADE_PER_POLL_MAX as u64,
        "{stats:?}"
    );
    assert!(
        stats.cascaded_total <= 2 * n,
        "at most two cascades per timer: {stats:?}"
    );
}

#[test]
fn a_million_due_in_one_ms_are_cascaded_ahead_and_fired_in_batches() {
    let burst_ms = T0 + 90_000;
    let mut wheel = TimingWheel::new(T0);
    let burst: Vec<_> = (0..1_000_000u64)
        .map(|i| wheel.insert(burst_ms, i))
        .collect();
    let mut now = T0;
    while now + 1 < burst_ms {
        now += 1;
        assert_eq!(wheel.poll(now), None);
    }
    now = burst_ms;
    let ahead = wheel.work_stats();
    assert!(
        ahead.cascaded_per_poll_max <= CASCADE_PER_POLL_MAX as u64,
        "{ahead:?}"
    );

    // Fire in batches while schedule and cancel keep flowing.
    let (mut fired, mut cancelled, mut seed) = (0u64, 0u64, 7);
    let mut later = Vec::new();
    while let Some((_, due, _)) = wheel.poll(now) {
        assert_eq!(due, burst_ms);
        fired += 1;
        if fired % 10_000 == 0 {
            later.push(wheel.insert(now + 1 + splitmix(&mut seed) % 5_000, 0));
            let victim = burst[(splitmix(&mut seed) % burst.len() as u64) as usize];
            cancelled += u64::from(wheel.cancel(victim).is_some());
        }
    }
    assert_eq!(fired + cancelled, 1_000_000);
    assert_eq!(wheel.len(), later.len());
    assert_eq!(
        wheel.work_stats().cascaded_per_poll_max,
        ahead.cascaded_per_poll_max
    );
}

#[test]
fn a_jump_over_days_cascades_each_timer_at_most_twice() {
    let n = 200_000u64;
    let mut wheel = TimingWheel::new(T0);
    let mut seed = 3;
    for i in 0..n {
        wheel.insert(T0 + splitmix(&mut seed) % (200 * HOUR), i);
    }
    let mut last_due = 0;
    let mut fired = 0;
    while let Some((_, due, _)) = wheel.poll(T0 + 300 * HOUR) {
        assert!(due >= last_due);
        last_due = due;
        fired += 1;
    }
    assert_eq!(fired, n);
    assert!(wheel.work_stats().cascaded_total <= 2 * n);
}

/// A caller that sleeps until the earlier of `next_due` and `look_ahead_due` (as the engine's
/// timer thread does) meets no cascade bigger than the budget, even for a burst of 500 000
/// timers in one millisecond, though it does not poll every millisecond.
#[test]
fn waking_at_look_ahead_due_keeps_a_sleeping_caller_within_the_budget() {
    let burst_ms = T0 + 5 * 60_000 + 30_000;
    let mut wheel = TimingWheel::new(T0);
    for i in 0..500_000u64 {
        wheel.insert(burst_ms, i);
    }
    for i in 0..1_000u64 {
        wheel.insert(T0 + 1 + i * 997, i);
    }
    let (mut polls, mut fired) = (0u64, 0u64);
    let mut now = T0;
    loop {
        let wake = match (wheel.next_due(), wheel.look_ahead_due()) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, _) => break,
        };
        assert!(wake >= now, "never a wake-up in the past");
        now = wake;
        polls += 1;
        while let Some((_, due, _)) = wheel.poll(now) {
            assert!(due <= now);
            fired += 1;
        }
    }
    assert_eq!(fired, 501_000);
    let stats = wheel.work_stats();
    assert!(
        stats.cascaded_per_poll_max <= CASCADE_PER_POLL_MAX as u64,
        "{stats:?}"
    );
    assert!(
        polls < 10_000,
        "woken {polls} times: about one per cascade step and per due time"
    );
}
