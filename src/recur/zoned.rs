//! A cron expression's next occurrence in a time zone, under the rules in the module docs of
//! `recur/mod.rs`: a skipped wall-clock time fires at the first valid instant after its gap,
//! a repeated one once, at its first pass.
//!
//! The search runs on the naive wall clock (`NaiveDateTime`), where every time happens exactly
//! once: the bit-set search of `fields.rs`, or croner's for expressions it does not cover.
//! [`instant_of`] maps a wall-clock match to its one instant. That map never goes
//! backwards (later wall-clock times never map to earlier instants), so the next occurrence
//! after an instant is the map of the first match at or after the first wall-clock time that
//! maps past it. That time is the instant's own wall clock, except on the second pass of a
//! repeated range, whose wall-clock times all belong to the first pass (already behind).

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeDelta, TimeZone, Timelike};
use chrono_tz::Tz;

use super::{CronSchedule, ParsedExpr};

/// The longest run of skipped or repeated wall-clock time searched for, in seconds: twice the
/// longest transition in the tz database (Pacific/Apia skipped 30 December 2011, a whole day).
const TRANSITION_SECONDS_MAX: i64 = 2 * 86_400;

/// The first occurrence of `schedule` strictly after `after_ms`.
pub(super) fn next_after(schedule: &CronSchedule, after_ms: u64) -> Option<u64> {
    let zone = schedule.zone;
    let after_ms = i64::try_from(after_ms).ok()?;
    let after = DateTime::from_timestamp_millis(after_ms)?;
    // From the next whole second: matches fall on whole seconds, strictly after `after`.
    let wall = after
        .with_timezone(&zone)
        .naive_local()
        .with_nanosecond(0)?;
    let mut wall_match = first_match(
        &schedule.parsed,
        wall.checked_add_signed(TimeDelta::seconds(1))?,
    )?;
    let mut next_ms = instant_of(zone, wall_match)?;
    if next_ms <= after_ms {
        // `after` is on the second pass of a repeated range and the match lies in that range:
        // its firing, on the first pass, is behind. Go on from the end of the range.
        assert!(
            is_repeated(zone, wall_match),
            "only a repeated time maps behind"
        );
        let range_end = run_end(wall_match, |wall| is_repeated(zone, wall))?;
        wall_match = first_match(&schedule.parsed, range_end)?;
        next_ms = instant_of(zone, wall_match)?;
    }
    assert!(next_ms > after_ms, "{next_ms} <= {after_ms}");
    u64::try_from(next_ms).ok()
}

/// The first wall-clock second at or after `from` that the expression matches.
/// (Searches end at the year 5000, as croner's do.)
pub(super) fn first_match(expr: &ParsedExpr, from: NaiveDateTime) -> Option<NaiveDateTime> {
    match &expr.fields {
        Some(fields) => fields.next_at_or_after(from),
        None => expr.cron.find_next_occurrence(&from, true).ok(),
    }
}

/// The one instant a wall-clock time fires at, in milliseconds since the epoch: its own, the
/// first pass of a repeated one, or the end of the gap of a skipped one.
fn instant_of(zone: Tz, wall: NaiveDateTime) -> Option<i64> {
    let instant = match zone.from_local_datetime(&wall) {
        LocalResult::Single(instant) | LocalResult::Ambiguous(instant, _) => instant,
        LocalResult::None => {
            let gap_end = run_end(wall, |wall| is_skipped(zone, wall))?;
            match zone.from_local_datetime(&gap_end) {
                // A gap and a repeated range never touch in a real zone; either way, the
                // first instant.
                LocalResult::Single(instant) | LocalResult::Ambiguous(instant, _) => instant,
                LocalResult::None => unreachable!("run_end returns a time outside the gap"),
            }
        }
    };
    Some(instant.timestamp_millis())
}

fn is_skipped(zone: Tz, wall: NaiveDateTime) -> bool {
    matches!(zone.from_local_datetime(&wall), LocalResult::None)
}

fn is_repeated(zone: Tz, wall: NaiveDateTime) -> bool {
    matches!(zone.from_local_datetime(&wall), LocalResult::Ambiguous(..))
}

/// The first whole wall-clock second after `start` that is not `inside` a run (a gap or a
/// repeated range) that `start` is inside: doubling steps until one lands outside, then a
/// bisection back to the edge. About 2 * 17 zone lookups, paid once per transition.
///
/// A doubling step overshoots the edge by less than the run is long, and real zones keep
/// months between transitions, so the step never lands in the next run.
fn run_end(start: NaiveDateTime, inside: impl Fn(NaiveDateTime) -> bool) -> Option<NaiveDateTime> {
    let start = start.with_nanosecond(0)?;
    let at = |seconds: i64| start.checked_add_signed(TimeDelta::try_seconds(seconds)?);
    assert!(inside(start));
    let (mut inside_s, mut outside_s) = (0, 1);
    while inside(at(outside_s)?) {
        inside_s = outside_s;
        outside_s *= 2;
        if outside_s > 2 * TRANSITION_SECONDS_MAX {
            return None;
        }
    }
    while outside_s - inside_s > 1 {
        let middle_s = inside_s + (outside_s - inside_s) / 2;
        if inside(at(middle_s)?) {
            inside_s = middle_s;
        } else {
            outside_s = middle_s;
        }
    }
    at(outside_s)
}

#[cfg(test)]
mod tests {
    use super::super::Recurrence;
    use chrono::{NaiveDate, TimeZone, Utc};

    /// Milliseconds since the epoch of a UTC time.
    fn utc_ms(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> u64 {
        let ms = Utc
            .with_ymd_and_hms(y, mo, d, h, mi, 0)
            .unwrap()
            .timestamp_millis();
        u64::try_from(ms).unwrap()
    }

    /// The first `n` occurrences after `from_ms`, each as a UTC `HH:MM` (dates are checked by
    /// the start times, which sit on the transition day).
    fn chain(expr: &str, zone: &str, from_ms: u64, n: usize) -> Vec<String> {
        let recurrence = Recurrence::cron(expr, zone).unwrap();
        let mut at_ms = from_ms;
        (0..n)
            .map(|_| {
                let next_ms = recurrence.next_after(at_ms).unwrap();
                assert!(next_ms > at_ms);
                at_ms = next_ms;
                let utc = chrono::DateTime::from_timestamp_millis(next_ms as i64).unwrap();
                utc.format("%d %H:%M").to_string()
            })
            .collect()
    }

    // Europe/Berlin, 2026-03-29 01:00 UTC: 02:00 CET becomes 03:00 CEST. A fixed time in the
    // gap fires at the gap's end; stepped times in it collapse into the one firing there.
    #[test]
    fn berlin_spring_forward() {
        let from = utc_ms(2026, 3, 28, 12, 0);
        // 02:30 local is skipped: 03:00 CEST = 01:00 UTC; the next day 02:30 CEST = 00:30 UTC.
        assert_eq!(
            chain("30 2 * * *", "Europe/Berlin", from, 2),
            ["29 01:00", "30 00:30"]
        );
        // 01:30 CET, then 02:00 and 02:30 (skipped) and 03:00 CEST in one, then 03:30 CEST.
        let start = utc_ms(2026, 3, 29, 0, 0);
        assert_eq!(
            chain("*/30 * * * *", "Europe/Berlin", start, 3),
            ["29 00:30", "29 01:00", "29 01:30"]
        );
        // Hourly at :30 with seconds: 01:30:00 CET, then 02:30 (skipped) at 03:00 CEST, 03:30.
        assert_eq!(
            chain("0 30 * * * *", "Europe/Berlin", start, 3),
            ["29 00:30", "29 01:00", "29 01:30"]
        );
    }

    // Europe/Berlin, 2026-10-25 01:00 UTC: 03:00 CEST becomes 02:00 CET, 02:xx happens twice.
    // Every repeated time fires once, on the first pass, also for stepped expressions.
    #[test]
    fn berlin_fall_back() {
        let from = utc_ms(2026, 10, 24, 12, 0);
        // 02:30 CEST = 00:30 UTC, once; the next day 02:30 CET = 01:30 UTC.
        assert_eq!(
            chain("30 2 * * *", "Europe/Berlin", from, 2),
            ["25 00:30", "26 01:30"]
        );
        // 02:00 and 02:30 CEST (00:00, 00:30 UTC), then 03:00 CET (02:00 UTC).
        let start = utc_ms(2026, 10, 24, 23, 45);
        assert_eq!(
            chain("*/30 * * * *", "Europe/Berlin", start, 3),
            ["25 00:00", "25 00:30", "25 02:00"]
        );
        // Starting on the second pass (02:10 CET = 01:10 UTC): the repeated times are behind.
        let second_pass = utc_ms(2026, 10, 25, 1, 10);
        assert_eq!(
            chain("*/30 * * * *", "Europe/Berlin", second_pass, 1),
            ["25 02:00"]
        );
        assert_eq!(
            chain("* * * * * *", "Europe/Berlin", second_pass, 1),
            ["25 02:00"]
        );
        // And from the first pass, the rest of the first pass.
        let first_pass = utc_ms(2026, 10, 25, 0, 10);
        assert_eq!(
            chain("*/30 * * * *", "Europe/Berlin", first_pass, 2),
            ["25 00:30", "25 02:00"]
        );
    }

    // America/New_York 2026: 03-08 02:00 EST -> 03:00 EDT (07:00 UTC); 11-01 02:00 EDT ->
    // 01:00 EST (06:00 UTC), so 01:xx repeats.
    #[test]
    fn new_york_both_transitions() {
        let spring = utc_ms(2026, 3, 7, 12, 0);
        // 02:15 skipped: fires at 03:00 EDT = 07:00 UTC; then 02:15 EDT = 06:15 UTC.
        assert_eq!(
            chain("15 2 * * *", "America/New_York", spring, 2),
            ["08 07:00", "09 06:15"]
        );
        let fall = utc_ms(2026, 10, 31, 12, 0);
        // 01:30 EDT = 05:30 UTC once; the next day 01:30 EST = 06:30 UTC.
        assert_eq!(
            chain("30 1 * * *", "America/New_York", fall, 2),
            ["01 05:30", "02 06:30"]
        );
        // Stepped across the fall-back: 01:40, 01:50 EDT, then 02:00 EST.
        let before = utc_ms(2026, 11, 1, 5, 35);
        assert_eq!(
            chain("*/10 * * * *", "America/New_York", before, 3),
            ["01 05:40", "01 05:50", "01 07:00"]
        );
    }

    // Australia/Lord_Howe moves by 30 minutes. 2026-04-05 02:00 +11 -> 01:30 +1030 (15:00 UTC
    // on 04-04): 01:30-02:00 repeats. 2026-10-04 02:00 +1030 -> 02:30 +11 (15:30 UTC 10-03):
    // 02:00-02:30 is skipped.
    #[test]
    fn lord_howe_half_hour_transitions() {
        let fall = utc_ms(2026, 4, 4, 12, 0);
        // 01:45 +11 = 14:45 UTC once; the next day 01:45 +1030 = 15:15 UTC.
        assert_eq!(
            chain("45 1 * * *", "Australia/Lord_Howe", fall, 2),
            ["04 14:45", "05 15:15"]
        );
        let spring = utc_ms(2026, 10, 3, 12, 0);
        // 02:15 skipped: fires at 02:30 +11 = 15:30 UTC; the next day 02:15 +11 = 15:15 UTC.
        assert_eq!(
            chain("15 2 * * *", "Australia/Lord_Howe", spring, 2),
            ["03 15:30", "04 15:15"]
        );
        // */10 across the gap: 01:50 +1030 (15:20 UTC), then 02:00..02:20 and 02:30 in one.
        let before = utc_ms(2026, 10, 3, 15, 15);
        assert_eq!(
            chain("*/10 * * * *", "Australia/Lord_Howe", before, 3),
            ["03 15:20", "03 15:30", "03 15:40"]
        );
    }

    // Asia/Kolkata (+05:30, no DST) and UTC: plain arithmetic all year, across the dates the
    // other zones change on.
    #[test]
    fn zones_without_dst() {
        let from = utc_ms(2026, 3, 28, 12, 0);
        // 02:30 IST = 21:00 UTC the day before.
        assert_eq!(
            chain("30 2 * * *", "Asia/Kolkata", from, 3),
            ["28 21:00", "29 21:00", "30 21:00"]
        );
        assert_eq!(
            chain("30 2 * * *", "UTC", from, 2),
            ["29 02:30", "30 02:30"]
        );
        let fall = utc_ms(2027, 10, 30, 12, 0);
        assert_eq!(
            chain("0 0 9 * * MON-FRI", "UTC", fall, 2),
            ["01 09:00", "02 09:00"]
        );
    }

    // 2027 transitions too, and the weekday fields agree with the local date, not UTC's.
    #[test]
    fn transitions_in_2027() {
        // Berlin 2027-03-28 (a Sunday) 02:00 CET -> 03:00 CEST.
        let from = utc_ms(2027, 3, 27, 12, 0);
        assert_eq!(
            chain("30 2 * * SUN", "Europe/Berlin", from, 2),
            ["28 01:00", "04 00:30"]
        );
        // New York 2027-11-07 01:00-02:00 repeats; 01:30 EDT = 05:30 UTC.
        let fall = utc_ms(2027, 11, 6, 12, 0);
        assert_eq!(
            chain("30 1 * * *", "America/New_York", fall, 2),
            ["07 05:30", "08 06:30"]
        );
    }

    // The gap's end is found to the second, in a zone that skips a whole day.
    #[test]
    fn samoa_skipped_a_day() {
        let zone: chrono_tz::Tz = "Pacific/Apia".parse().unwrap();
        let skipped = NaiveDate::from_ymd_opt(2011, 12, 30)
            .unwrap()
            .and_hms_opt(12, 0, 0)
            .unwrap();
        let instant_ms = super::instant_of(zone, skipped).unwrap();
        // 2011-12-31 00:00 +14 = 2011-12-30 10:00 UTC.
        assert_eq!(
            instant_ms,
            Utc.with_ymd_and_hms(2011, 12, 30, 10, 0, 0)
                .unwrap()
                .timestamp_millis()
        );
    }
}
