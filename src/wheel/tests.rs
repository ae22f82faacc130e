//! Unit tests of the wheel through its public API, one behaviour each.

use super::*;

const T0: u64 = 1_700_000_000_000;

fn drain(wheel: &mut TimingWheel<u64>, now_ms: u64) -> Vec<(u64, u64)> {
    std::iter::from_fn(|| wheel.poll(now_ms).map(|(_, due, v)| (due, v))).collect()
}

#[test]
fn fires_each_timer_at_its_millisecond_in_every_tier() {
    let mut wheel = TimingWheel::new(T0);
    let offsets = [
        0,
        1,
        999,
        1_000,
        1_999,
        2_500,
        59_999,
        61_000,
        3_600_000,
        200 * 3_600_000,
    ];
    for (i, off) in offsets.iter().enumerate() {
        wheel.insert(T0 + off, i as u64);
    }
    for (i, &off) in offsets.iter().enumerate() {
        let due = T0 + off;
        if off > 0 {
            assert_eq!(
                drain(&mut wheel, due - 1),
                vec![],
                "nothing early (timer {i})"
            );
        }
        assert_eq!(wheel.next_due(), Some(due), "exact within the second");
        assert_eq!(drain(&mut wheel, due), vec![(due, i as u64)]);
    }
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_due(), None);
}

#[test]
fn next_due_is_a_coarse_lower_bound_for_far_timers() {
    let mut wheel = TimingWheel::new(T0);
    let due = T0 + 10 * 3_600_000 + 123_456;
    wheel.insert(due, 1);
    let bound = wheel.next_due().unwrap();
    assert!(bound <= due && bound % MS_PER_MINUTE == 0);
    assert_eq!(wheel.poll(bound), None);
    assert_eq!(
        wheel.next_due(),
        Some(due),
        "exact once its minute is sorted into the run"
    );
    assert_eq!(wheel.poll(due - 1), None);
    assert_eq!(wheel.poll(due).map(|(_, d, v)| (d, v)), Some((due, 1)));
}

#[test]
fn stale_keys_never_reach_another_timer() {
    let mut wheel = TimingWheel::new(T0);
    let a = wheel.insert(T0 + 5, 1);
    assert_eq!(wheel.cancel(a), Some(1));
    let b = wheel.insert(T0 + 5, 2);
    assert_eq!(wheel.cancel(a), None);
    assert_eq!(wheel.reschedule(a, T0), None);
    assert_eq!(wheel.get(b), Some(2));
    assert_eq!(wheel.get(a), None);
    let (fired, _, _) = wheel.poll(T0 + 5).unwrap();
    assert_eq!(fired, b);
    assert!(!wheel.contains(b));
    assert_eq!(TimerKey::from_u64(b.to_u64()), b);
    assert_eq!(wheel.cancel(TimerKey::from_u64(u64::MAX)), None);
}

#[test]
fn clock_going_backwards_is_held() {
    let mut wheel = TimingWheel::new(T0);
    wheel.insert(T0 + 10, 1);
    assert_eq!(drain(&mut wheel, T0 + 5), vec![]);
    assert_eq!(drain(&mut wheel, T0 - 1_000_000), vec![]);
    assert_eq!(wheel.now_ms(), T0 + 5);
    assert_eq!(drain(&mut wheel, T0 + 10), vec![(T0 + 10, 1)]);
}

#[test]
fn u64_max_is_a_valid_due_time_and_counts_as_the_last_one_kept() {
    let mut wheel = TimingWheel::new(T0);
    let last = wheel.last_ms();
    assert!(
        last > T0 + 8_000 * 365 * 86_400_000,
        "about 8,000 years ahead"
    );
    wheel.insert(u64::MAX, 1);
    wheel.insert(last - 1, 2);
    wheel.insert(last, 3);
    assert_eq!(drain(&mut wheel, last - 2), vec![]);
    let mut fired = drain(&mut wheel, u64::MAX);
    assert_eq!(wheel.now_ms(), last, "the wheel's time stops there");
    fired[1..].sort_unstable();
    assert_eq!(fired, vec![(last - 1, 2), (last, 1), (last, 3)]);
    // A wheel created at the end of time keeps its last minute.
    let mut end = TimingWheel::new(u64::MAX - 5);
    assert_eq!(end.last_ms(), u64::MAX);
    end.insert(u64::MAX, 7);
    end.insert(u64::MAX - 9, 8);
    assert_eq!(
        drain(&mut end, u64::MAX),
        vec![(u64::MAX - 9, 8), (u64::MAX, 7)]
    );
    // And a far timer due at its very last millisecond fires from its minute's run.
    let mut end = TimingWheel::new(u64::MAX - 5 * 60_000);
    end.insert(u64::MAX, 9);
    end.insert(u64::MAX - 1, 10);
    assert_eq!(drain(&mut end, u64::MAX - 2), vec![]);
    assert_eq!(
        drain(&mut end, u64::MAX),
        vec![(u64::MAX - 1, 10), (u64::MAX, 9)]
    );
}

#[test]
fn a_jump_of_days_fires_in_due_order() {
    let mut wheel = TimingWheel::new(T0);
    let mut dues: Vec<u64> = (0..5_000u64)
        .map(|i| T0 + (i * 7_919_993) % (9 * 86_400_000))
        .collect();
    for (i, &due) in dues.iter().enumerate() {
        wheel.insert(due, i as u64);
    }
    dues.sort_unstable();
    let fired: Vec<u64> = drain(&mut wheel, T0 + 10 * 86_400_000)
        .iter()
        .map(|f| f.0)
        .collect();
    assert_eq!(fired, dues);
}

#[test]
fn reschedule_moves_between_tiers() {
    let mut wheel = TimingWheel::new(T0);
    let key = wheel.insert(T0 + 100 * 3_600_000, 1);
    let key = wheel.reschedule(key, T0 + 3).expect("pending");
    assert_eq!(wheel.next_due(), Some(T0 + 3));
    assert!(wheel.reschedule(key, T0 + 90_000).is_some());
    assert_eq!(drain(&mut wheel, T0 + 89_999), vec![]);
    assert_eq!(drain(&mut wheel, T0 + 90_000), vec![(T0 + 90_000, 1)]);
}

/// Random inserts, cancels, reschedules and clock steps against a `BTreeMap` model: every live
/// timer fires once, in effective due order, never early; no cancelled or moved-away item ever
/// fires; every tombstone is dropped by the end.
#[test]
fn cancels_and_moves_in_every_tier_keep_the_model() {
    use std::collections::{BTreeMap, HashMap};
    fn splitmix(s: &mut u64) -> u64 {
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    for seed in 0..40u64 {
        let mut rng = seed;
        let mut wheel = TimingWheel::new(T0);
        // (effective due, value) -> key; value -> (effective due, key)
        let mut model: BTreeMap<(u64, u64), TimerKey> = BTreeMap::new();
        let mut by_value: HashMap<u64, (u64, TimerKey)> = HashMap::new();
        let (mut clock, mut next_value) = (T0, 0u64);
        for _ in 0..4_000 {
            let far = |rng: &mut u64| match splitmix(rng) % 4 {
                0 => splitmix(rng) % 3_000,
                1 => splitmix(rng) % (3 * MS_PER_HOUR),
                2 => splitmix(rng) % (100 * MS_PER_HOUR),
                _ => 2 * MS_PER_MINUTE + splitmix(rng) % MS_PER_MINUTE,
            };
            match splitmix(&mut rng) % 10 {
                0..=2 => {
                    let due = clock + far(&mut rng);
                    let key = wheel.insert(due, next_value);
                    let effective = due.max(wheel.now_ms());
                    model.insert((effective, next_value), key);
                    by_value.insert(next_value, (effective, key));
                    next_value += 1;
                }
                3..=5 if !by_value.is_empty() => {
                    let v = splitmix(&mut rng) % next_value;
                    if let Some((effective, key)) = by_value.remove(&v) {
                        model.remove(&(effective, v));
                        assert_eq!(wheel.cancel(key), Some(v));
                    }
                }
                6 if !by_value.is_empty() => {
                    let v = splitmix(&mut rng) % next_value;
                    if let Some((effective, key)) = by_value.get(&v).copied() {
                        let due = clock + far(&mut rng);
                        let key = wheel.reschedule(key, due).expect("pending");
                        model.remove(&(effective, v));
                        let effective = due.max(wheel.now_ms());
                        model.insert((effective, v), key);
                        by_value.insert(v, (effective, key));
                    }
                }
                _ => {
                    clock += match splitmix(&mut rng) % 3 {
                        0 => 1,
                        1 => splitmix(&mut rng) % 2_000,
                        _ => splitmix(&mut rng) % (2 * MS_PER_HOUR),
                    };
                    while let Some((key, due, v)) = wheel.poll(clock) {
                        let first = model.keys().next().copied().expect("a model timer");
                        let (effective, model_key) = by_value.remove(&v).expect("fires once");
                        assert_eq!((first.0, key), (effective, model_key), "due order");
                        assert!(due <= clock && effective <= clock, "never early");
                        model.remove(&(effective, v));
                    }
                    if let Some(&(first, _)) = model.keys().next() {
                        assert!(first > clock, "timer due {first} lost at {clock}");
                    }
                }
            }
            assert_eq!(wheel.len(), model.len());
        }
        while let Some(next) = wheel.next_due() {
            clock = clock.max(next);
            while let Some((_, _, v)) = wheel.poll(clock) {
                let (effective, _) = by_value.remove(&v).expect("fires once");
                model.remove(&(effective, v));
            }
        }
        assert!(
            model.is_empty(),
            "seed {seed}: {} timers never fired",
            model.len()
        );
        assert_eq!(
            wheel.tombstones(),
            0,
            "seed {seed}: every tombstone dropped"
        );
    }
}

#[test]
fn sparse_far_minutes_hold_small_chunks_and_dense_ones_whole_chunks() {
    // Jobs spread over the coming weeks: a few in each of thousands of minutes beyond the
    // minute ring. A whole chunk per minute (1,024 places) would make 16 KiB for each; the
    // first chunk of a space starts small and grows.
    let mut wheel = TimingWheel::new(T0);
    let far = T0 + 100 * crate::config::HOUR_MS;
    let minutes = 5_000u64;
    for m in 0..minutes {
        for k in 0..3 {
            wheel.insert(far + m * 60_000 + k, m);
        }
    }
    let capacity = wheel.spaces_capacity();
    assert!(
        capacity <= 4 * 3 * minutes as usize,
        "{capacity} items of room for {} far timers",
        3 * minutes
    );
    // A dense far minute grows to whole chunks: no more than one chunk's slack.
    let dense = far + minutes * 60_000;
    for k in 0..10_000u64 {
        wheel.insert(dense + k % 60_000, k);
    }
    let dense_capacity = wheel.spaces_capacity() - capacity;
    assert!(
        (10_000..10_000 + spaces::CHUNK).contains(&dense_capacity),
        "{dense_capacity} items of room for 10000 timers in one minute"
    );
    // Every timer still fires at its millisecond.
    let mut fired = 0;
    let mut last = 0;
    while let Some(next) = wheel.next_due() {
        while let Some((_, due, _)) = wheel.poll(next) {
            assert!(
                due >= last && due <= next,
                "fired {due} at {next} after {last}"
            );
            last = due;
            fired += 1;
        }
    }
    assert_eq!(fired, 3 * minutes + 10_000);
}

/// Cancelling most far timers (timeouts that almost all get cancelled) gives their memory
/// back as the cancels come: a far minute's full chunks are compacted to their live places,
/// with no pass to wait for.
#[test]
fn cancelling_most_far_timers_compacts_their_chunks_as_it_goes() {
    let mut wheel = TimingWheel::new(T0);
    // Due over the hour after the next minute: far, in about 50 minutes' spaces.
    let keys: Vec<TimerKey> = (0..300_000u64)
        .map(|k| wheel.insert(T0 + 120_000 + (k * 7_919) % 3_000_000, k))
        .collect();
    let full = wheel.spaces_capacity();
    assert!(full >= 300_000);
    for (k, &key) in keys.iter().enumerate() {
        if k % 10 != 0 {
            assert_eq!(wheel.cancel(key), Some(k as u64));
        }
    }
    assert_eq!(wheel.len(), 30_000);
    // A full chunk keeps at most four times its live places; each minute's last chunk is
    // not full and keeps all of its places.
    let slack = 52 * spaces::CHUNK;
    let capacity = wheel.spaces_capacity();
    assert!(
        capacity <= 4 * 30_000 + slack,
        "{capacity} places kept of {full}"
    );
    assert!(
        wheel.tombstones() <= 3 * 30_000 + slack as u64,
        "{}",
        wheel.tombstones()
    );
    assert!(wheel.work_stats().swept_total > 0);
    for (k, &key) in keys.iter().enumerate() {
        assert_eq!(wheel.get(key), (k % 10 == 0).then_some(k as u64), "key {k}");
    }
    // Every live one fires once, at its time, and every tombstone goes.
    let mut fired = 0;
    let mut now_ms = T0;
    while let Some(next) = wheel.next_due() {
        now_ms = now_ms.max(next);
        while let Some((key, due, v)) = wheel.poll(now_ms) {
            assert_eq!(v % 10, 0);
            assert_eq!(keys[v as usize], key);
            assert_eq!(due, T0 + 120_000 + (v * 7_919) % 3_000_000);
            fired += 1;
        }
    }
    assert_eq!(fired, 30_000);
    assert_eq!(wheel.tombstones(), 0);
}

/// A far minute whose timers are all cancelled compacts its chunks to nothing, and its sort
/// (by comparison for a small minute, by counting for a big one) finds no place in them: the
/// simulation found the sort asking a chunk compacted to nothing for its first place (seed
/// 481,284,260).
#[test]
fn a_far_minute_cancelled_whole_sorts_as_empty() {
    for n in [64u64, 80, 1_024, 1_100, 3_000] {
        let mut wheel = TimingWheel::new(T0);
        let far = T0 + 10 * 60_000;
        let keys: Vec<TimerKey> = (0..n).map(|i| wheel.insert(far + i % 7, i)).collect();
        let kept = wheel.insert(far + 20 * 60_000, n);
        for &key in &keys {
            assert!(wheel.cancel(key).is_some());
        }
        assert!(wheel.work_stats().swept_total > 0, "{n}: compacted");
        assert_eq!(
            drain(&mut wheel, T0 + 3_600_000),
            vec![(far + 20 * 60_000, n)]
        );
        assert!(!wheel.contains(kept));
        assert_eq!(wheel.tombstones(), 0, "{n}");
    }
}
