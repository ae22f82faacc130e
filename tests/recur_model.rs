//! Model tests of `timewheel::recur` against croner and against a brute-force model of the
//! DST rules, over random expressions, zones and start times (half of them within hours of a
//! real 2026/2027 transition of the zone).

use std::sync::OnceLock;

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset, TimeDelta, TimeZone};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use proptest::prelude::*;
use timewheel::recur::{Every, RecurError, Recurrence};

const ZONES: [&str; 7] = [
    "UTC",
    "Asia/Kolkata",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Santiago",
];
/// 2026-01-01T00:00:00Z and 2028-01-01T00:00:00Z.
const FROM_S: i64 = 1_767_225_600;
const TO_S: i64 = 1_830_297_600;
const HOUR_MS: i64 = 3_600_000;
/// Occurrences followed along each chain.
const CHAIN_LEN: usize = 8;

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

/// One field: `*`, `*/step`, or a list of values, ranges and stepped ranges.
fn field(min: u32, max: u32) -> impl Strategy<Value = String> {
    let part = prop_oneof![
        (min..=max).prop_map(|v| v.to_string()),
        (min..=max, min..=max).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (min..=max, min..=max, 1..=max.max(2)).prop_map(|(a, b, step)| format!(
            "{}-{}/{step}",
            a.min(b),
            a.max(b)
        )),
    ];
    prop_oneof![
        1 => Just("*".to_owned()),
        1 => (1..=max.max(2)).prop_map(|step| format!("*/{step}")),
        3 => prop::collection::vec(part, 1..=3).prop_map(|parts| parts.join(",")),
    ]
}

/// A valid 5- or 6-field expression: ranges, steps, lists, names, now and then `+` (both day
/// fields must match) and croner's month-shaped modifiers (`L`, `W`, `#`), which take
/// croner's own search rather than the bit-set one.
fn expression() -> impl Strategy<Value = String> {
    let day = prop_oneof![
        8 => field(1, 31),
        1 => prop_oneof![Just("L".to_owned()), (1..=28_u32).prop_map(|d| format!("{d}W"))],
    ];
    let weekday = prop_oneof![
        8 => field(0, 7),
        1 => prop_oneof![Just("MON-FRI".to_owned()), Just("SAT,SUN".to_owned())],
        1 => prop_oneof![(0..=6_u32, 1..=5_u32).prop_map(|(w, n)| format!("{w}#{n}")), Just("5L".to_owned())],
    ];
    let second = prop_oneof![Just(None), field(0, 59).prop_map(Some)];
    (
        second,
        field(0, 59),
        field(0, 23),
        day,
        field(1, 12),
        weekday,
        any::<bool>(),
    )
        .prop_map(|(second, minute, hour, day, month, weekday, plus)| {
            let plus = if plus && day != "*" && weekday != "*" {
                "+"
            } else {
                ""
            };
            let tail = format!("{minute} {hour} {day} {month} {plus}{weekday}");
            second.map_or(tail.clone(), |second| format!("{second} {tail}"))
        })
}

fn offset_s(zone: Tz, at_s: i64) -> i32 {
    let at = DateTime::from_timestamp(at_s, 0).unwrap().naive_utc();
    zone.offset_from_utc_datetime(&at).fix().local_minus_utc()
}

/// The zone's transitions over 2026-2027, to the second, found by scanning and bisecting.
fn transitions(zone_index: usize) -> &'static [i64] {
    static ALL: OnceLock<Vec<Vec<i64>>> = OnceLock::new();
    &ALL.get_or_init(|| {
        ZONES
            .iter()
            .map(|name| {
                let zone: Tz = name.parse().unwrap();
                let mut found = Vec::new();
                let mut at_s = FROM_S;
                while at_s < TO_S {
                    if offset_s(zone, at_s) != offset_s(zone, at_s + 3600) {
                        let (mut lo, mut hi) = (at_s, at_s + 3600);
                        while hi - lo > 1 {
                            let mid = lo + (hi - lo) / 2;
                            if offset_s(zone, mid) == offset_s(zone, lo) {
                                lo = mid
                            } else {
                                hi = mid
                            }
                        }
                        found.push(hi);
                    }
                    at_s += 3600;
                }
                found
            })
            .collect()
    })[zone_index]
}

/// A start instant in ms: anywhere in 2026-2027, or within 3 hours of one of the zone's
/// transitions.
fn start_ms(zone_index: usize, near: Option<(usize, i64)>, anywhere_ms: i64) -> u64 {
    let transitions = transitions(zone_index);
    let ms = match near {
        Some((pick, offset_ms)) if !transitions.is_empty() => {
            transitions[pick % transitions.len()] * 1000 + offset_ms
        }
        _ => anywhere_ms,
    };
    u64::try_from(ms).unwrap()
}

/// The brute-force model: the one instant a wall-clock time fires at. A skipped time fires at
/// the first valid wall-clock second after it (found a minute, then a second at a time), a
/// repeated one at its first pass.
fn model_instant_ms(zone: Tz, wall: NaiveDateTime) -> i64 {
    let resolve = |wall: NaiveDateTime| match zone.from_local_datetime(&wall) {
        LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => Some(at.timestamp_millis()),
        LocalResult::None => None,
    };
    if let Some(ms) = resolve(wall) {
        return ms;
    }
    let mut probe = wall;
    while resolve(probe).is_none() {
        probe += TimeDelta::minutes(1);
    }
    probe -= TimeDelta::minutes(1);
    while resolve(probe).is_none() {
        probe += TimeDelta::seconds(1);
    }
    resolve(probe).unwrap()
}

/// The model's next occurrence: croner's own iteration over the naive wall clock from 3
/// hours before `after`'s wall time, each match mapped by the model, the least instant past
/// `after` among all matches up to 3 wall-clock hours beyond the first such one.
fn model_next_after(cron: &Cron, zone: Tz, after_ms: u64) -> Option<u64> {
    let after_ms = i64::try_from(after_ms).unwrap();
    let after = DateTime::from_timestamp_millis(after_ms)
        .unwrap()
        .with_timezone(&zone);
    let from = after.naive_local() - TimeDelta::hours(3);
    let mut best: Option<(i64, NaiveDateTime)> = None;
    for wall in cron.iter_from(from, croner::Direction::Forward) {
        if best.is_some_and(|(_, first_wall)| wall > first_wall + TimeDelta::hours(3)) {
            break;
        }
        let ms = model_instant_ms(zone, wall);
        if ms > after_ms && best.is_none_or(|(best_ms, _)| ms < best_ms) {
            best = Some((ms, best.map_or(wall, |(_, first_wall)| first_wall)));
        }
    }
    best.map(|(ms, _)| u64::try_from(ms).unwrap())
}

/// Whether croner treats `cron` as fixed-time (one second, one minute, one hour).
fn fixed_time(cron: &Cron) -> bool {
    cron.determine_job_type() == croner::JobType::FixedTime
}

fn start() -> impl Strategy<Value = (usize, u64)> {
    (
        0..ZONES.len(),
        prop::option::of((any::<usize>(), -3 * HOUR_MS..3 * HOUR_MS)),
        FROM_S * 1000..TO_S * 1000,
    )
        .prop_map(|(zone_index, near, anywhere_ms)| {
            (zone_index, start_ms(zone_index, near, anywhere_ms))
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    // Along a chain of occurrences each next_after is strictly later than what it was given,
    // equals the brute-force model, and where croner's rules are ours (a zone without DST,
    // or a fixed-time expression) equals croner's own search in that zone.
    #[test]
    fn next_after_matches_the_models(expr in expression(), (zone_index, start_ms) in start()) {
        let zone_name = ZONES[zone_index];
        let zone: Tz = zone_name.parse().unwrap();
        let cron = parser().parse(&expr).unwrap();
        let recurrence = match Recurrence::cron(&expr, zone_name) {
            Ok(recurrence) => recurrence,
            Err(RecurError::BadCron { reason, .. }) => {
                // Refused only when it matches no date at all.
                prop_assert_eq!(reason, "it matches no date");
                prop_assert!(cron.find_next_occurrence(&DateTime::UNIX_EPOCH.naive_utc(), true).is_err());
                return Ok(());
            }
            Err(other) => return Err(TestCaseError::fail(format!("{other}"))),
        };
        let croner_agrees = zone_name == "UTC" || zone_name == "Asia/Kolkata" || fixed_time(&cron);
        let mut at_ms = start_ms;
        for _ in 0..CHAIN_LEN {
            let next_ms = recurrence.next_after(at_ms);
            prop_assert_eq!(next_ms, model_next_after(&cron, zone, at_ms), "{} {} after {}", expr, zone_name, at_ms);
            if croner_agrees {
                let at = DateTime::from_timestamp_millis(at_ms as i64).unwrap().with_timezone(&zone);
                let croner_ms = cron.find_next_occurrence(&at, false).ok().map(|t| t.timestamp_millis() as u64);
                prop_assert_eq!(next_ms, croner_ms, "croner: {} {} after {}", expr, zone_name, at_ms);
            }
            let Some(next_ms) = next_ms else { break };
            prop_assert!(next_ms > at_ms);
            prop_assert_eq!(next_ms % 1000, 0, "whole seconds");
            at_ms = next_ms;
        }
    }

    // Every: the first anchor + k * interval (k >= 0) strictly after, along a chain.
    #[test]
    fn every_is_anchor_plus_whole_intervals(
        interval_ms in prop_oneof![1..100_u64, 1..timewheel::recur::INTERVAL_MS_MAX],
        anchor_ms in 0..u64::MAX / 2,
        after_ms in 0..u64::MAX / 2,
    ) {
        let every = Every::new(interval_ms, anchor_ms).unwrap();
        let mut at_ms = after_ms;
        for _ in 0..CHAIN_LEN {
            let next_ms = every.next_after(at_ms).unwrap();
            prop_assert!(next_ms > at_ms && next_ms >= anchor_ms);
            prop_assert_eq!((next_ms - anchor_ms) % interval_ms, 0);
            // None skipped: the one before is not after `at_ms`, or there is none.
            prop_assert!(next_ms == anchor_ms || next_ms - interval_ms <= at_ms);
            at_ms = next_ms;
        }
    }

    // encode then decode gives the value back; every truncation, and any byte more, is refused.
    #[test]
    fn encode_decode_round_trip(
        recurrence in prop_oneof![
            (expression(), 0..ZONES.len()).prop_filter_map("matches no date", |(expr, zone)| {
                Recurrence::cron(&expr, ZONES[zone]).ok()
            }),
            (1..=timewheel::recur::INTERVAL_MS_MAX, any::<u64>())
                .prop_map(|(interval, anchor)| Recurrence::every(interval, anchor).unwrap()),
        ],
        extra in any::<u8>(),
    ) {
        let mut bytes = vec![0xAA]; // encode appends
        recurrence.encode(&mut bytes);
        let bytes = &bytes[1..];
        prop_assert_eq!(bytes.len(), recurrence.encoded_len());
        prop_assert!(bytes.len() <= timewheel::recur::RECURRENCE_BYTES_MAX);
        prop_assert_eq!(&Recurrence::decode(bytes).unwrap(), &recurrence);
        for len in 0..bytes.len() {
            let refused = Recurrence::decode(&bytes[..len]);
            let undecodable = matches!(refused, Err(RecurError::Undecodable { .. }));
            prop_assert!(undecodable, "{}: {:?}", len, refused);
        }
        let mut longer = bytes.to_vec();
        longer.push(extra);
        let undecodable = matches!(Recurrence::decode(&longer), Err(RecurError::Undecodable { .. }));
        prop_assert!(undecodable);
    }

    // Arbitrary bytes never panic the decoder.
    #[test]
    fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64), kind in 0..4_u8) {
        let mut bytes = bytes;
        if let Some(first) = bytes.first_mut() {
            *first = kind;
        }
        let _ = Recurrence::decode(&bytes);
    }

    // Garbage expressions are BadCron or valid, never a panic or another error; names not in
    // the database are UnknownZone.
    #[test]
    fn bad_input_is_typed(expr in "[0-9*/,\\-LW#? A-Z]{0,24}", zone in "[A-Za-z_/]{0,20}") {
        match Recurrence::cron(&expr, "UTC") {
            Ok(_) | Err(RecurError::BadCron { .. }) => {}
            Err(other) => return Err(TestCaseError::fail(format!("{expr:?}: {other}"))),
        }
        if zone.parse::<Tz>().is_err() {
            prop_assert_eq!(
                Recurrence::cron("* * * * *", &zone),
                Err(RecurError::UnknownZone { zone: zone.clone() })
            );
        }
    }
}

// The transitions the generator aims at are there: two a year in the DST zones, none in the
// others (a test of the test).
#[test]
fn transitions_are_found() {
    let counts: Vec<usize> = (0..ZONES.len())
        .map(|zone| transitions(zone).len())
        .collect();
    assert_eq!(counts, [0, 0, 4, 4, 4, 4, 4]);
}
