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
    let finer = wheel.next_due().unwrap();
    assert!(finer > bound && finer <= due);
    assert_eq!(wheel.poll(finer), None);
    assert_eq!(wheel.next_due(), Some(due));
}

#[test]
fn stale_keys_never_reach_another_timer() {
    let mut wheel = TimingWheel::new(T0);
    let a = wheel.insert(T0 + 5, 1);
    assert_eq!(wheel.cancel(a), Some(1));
    let b = wheel.insert(T0 + 5, 2);
    assert_eq!(wheel.cancel(a), None);
    assert!(!wheel.reschedule(a, T0));
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
    assert!(wheel.reschedule(key, T0 + 3));
    assert_eq!(wheel.next_due(), Some(T0 + 3));
    assert!(wheel.reschedule(key, T0 + 90_000));
    assert_eq!(drain(&mut wheel, T0 + 89_999), vec![]);
    assert_eq!(drain(&mut wheel, T0 + 90_000), vec![(T0 + 90_000, 1)]);
}
