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
fn u64_max_is_a_valid_due_time() {
    let mut wheel = TimingWheel::new(T0);
    wheel.insert(u64::MAX, 1);
    wheel.insert(u64::MAX - 1, 2);
    assert_eq!(drain(&mut wheel, u64::MAX - 2), vec![]);
    assert_eq!(
        drain(&mut wheel, u64::MAX),
        vec![(u64::MAX - 1, 2), (u64::MAX, 1)]
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

/// Random inserts, cancels, reschedules and clock steps against a `BTreeMap` model, with the
/// sweep's floor at 4 tombstones so that passes run all the time (the public floor, 65 536, is
/// beyond what a model test reaches): every live timer fires once, in effective due order,
/// never early; no cancelled or moved-away item ever fires; tombstones stay bounded.
#[test]
fn sweeping_all_the_time_keeps_the_model() {
    use std::collections::{BTreeMap, HashMap};
    fn splitmix(s: &mut u64) -> u64 {
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let mut swept_seeds = 0;
    for seed in 0..40u64 {
        let mut rng = seed;
        let mut wheel = TimingWheel::new(T0);
        wheel.set_sweep_floor(4);
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
            assert!(
                wheel.tombstones() <= 4 * (model.len() as u64 + 64),
                "tombstones {} for {} live",
                wheel.tombstones(),
                model.len()
            );
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
        swept_seeds += u32::from(wheel.work_stats().swept_total > 0);
    }
    assert!(
        swept_seeds >= 30,
        "the sweep ran in only {swept_seeds} of 40 seeds"
    );
}

#[test]
fn sparse_far_minutes_hold_small_blocks_and_dense_ones_whole_blocks() {
    // Jobs spread over the coming weeks: a few in each of thousands of minutes beyond the
    // minute ring. A whole block per minute (256 items) made 4 KiB for each; the first block
    // of an overflow minute starts small and grows.
    let mut wheel = TimingWheel::new(T0);
    let far = T0 + 100 * crate::config::HOUR_MS;
    let minutes = 5_000u64;
    for m in 0..minutes {
        for k in 0..3 {
            wheel.insert(far + m * 60_000 + k, m);
        }
    }
    let capacity = wheel.overflow_capacity();
    assert!(
        capacity <= 4 * 3 * minutes as usize,
        "{capacity} items of room for {} far timers",
        3 * minutes
    );
    // A dense far minute grows to whole blocks: no more than one block's slack.
    let dense = far + minutes * 60_000;
    for k in 0..10_000u64 {
        wheel.insert(dense + k % 60_000, k);
    }
    let dense_capacity = wheel.overflow_capacity() - capacity;
    assert!(
        (10_000..10_000 + BLOCK_ITEMS).contains(&dense_capacity),
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

/// A wheel left idle after most of its timers were cancelled asks to be polled
/// (`look_ahead_due` the next millisecond) until its sweep reclaimed them, then gives the
/// blocks the sweep emptied back to the allocator, but for a few it keeps.
#[test]
fn an_idle_wheel_sweeps_its_tombstones_when_woken_and_gives_the_blocks_back() {
    let mut wheel = TimingWheel::new(T0);
    // Due over the hour after the next minute: where sweeps read.
    let keys: Vec<TimerKey> = (0..300_000u64)
        .map(|k| wheel.insert(T0 + 120_000 + (k * 7_919) % 3_000_000, k))
        .collect();
    for (k, &key) in keys.iter().enumerate() {
        if k % 10 != 0 {
            assert!(wheel.cancel(key).is_some());
        }
    }
    assert_eq!(wheel.len(), 30_000);
    assert!(wheel.tombstones() >= 270_000);
    // A timer thread sleeps until the earlier of `next_due` and `look_ahead_due`.
    let mut now_ms = T0;
    let mut wakes = 0;
    while wheel.tombstones() > 0 {
        let wake = wheel
            .look_ahead_due()
            .expect("work ahead while tombstones are left");
        assert!(
            wake <= now_ms + 1,
            "woken at once while sweeping, not at {wake}"
        );
        now_ms = wake;
        assert_eq!(wheel.poll(now_ms), None, "nothing is due for two minutes");
        wakes += 1;
        assert!(
            wakes < 1_000,
            "the sweep ends: {} tombstones left",
            wheel.tombstones()
        );
    }
    assert!(
        wheel.look_ahead_due().is_none_or(|at| at > now_ms + 1),
        "no more wakes for the sweep once it is done"
    );
    assert!(
        wheel.pool.free_blocks() <= block::POOL_BLOCKS_AFTER_SWEEP,
        "{} empty blocks kept",
        wheel.pool.free_blocks()
    );
    assert_eq!(wheel.len(), 30_000);
}
