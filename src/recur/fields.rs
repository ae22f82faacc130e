//! The wall-clock search for cron expressions without `L`, `W` or `#`: each field as a bit
//! set, each step a `trailing_zeros`. croner's own search tests one value at a time through
//! checked lookups and recounts the fields on every call (some 2-3 µs a search); this one
//! takes tens of nanoseconds. Expressions with those modifiers keep croner's search
//! (`zoned.rs` picks); `tests/recur_model.rs` holds this one to croner's answers.
//!
//! The day rule is croner's (vixie cron's): with both day fields restricted a day matches
//! when either does (both, for the `+` prefix); a `*` field is ignored.

use chrono::{Datelike, NaiveDate, NaiveDateTime, Timelike};
use croner::Cron;

/// croner searches no further than this year; neither does this.
const YEAR_MAX: i32 = croner::YEAR_UPPER_LIMIT;

/// A cron expression as bit sets: bit `v` set when value `v` matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fields {
    seconds: u64,
    minutes: u64,
    hours: u64,
    /// Bits 1..=31.
    days: u64,
    /// Bits 1..=12.
    months: u64,
    /// Bits 0..=6, 0 = Sunday.
    weekdays: u64,
    day_rule: DayRule,
}

/// How the day-of-month and day-of-week fields combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DayRule {
    /// Both are `*`: every day.
    Every,
    /// Only the day of month is restricted.
    DayOfMonth,
    /// Only the day of week is restricted.
    Weekday,
    /// Both restricted: either matches.
    Either,
    /// Both restricted, with `+`: both must match.
    Both,
}

impl Fields {
    /// The bit sets of `cron`, or `None` if it uses a modifier whose match depends on the
    /// month's shape (`L`, `W`, `#`).
    pub(super) fn of(cron: &Cron) -> Option<Fields> {
        let pattern = &cron.pattern;
        let components = [
            &pattern.seconds,
            &pattern.minutes,
            &pattern.hours,
            &pattern.days,
            &pattern.months,
            &pattern.days_of_week,
        ];
        if components.iter().any(|component| component.has_modifiers()) {
            return None;
        }
        let bits = |component: &croner::CronComponent| {
            let values = component.values();
            assert!(values.iter().all(|&value| value < 64));
            values.iter().fold(0_u64, |bits, &value| bits | 1 << value)
        };
        // croner keeps 7 apart from 0 in some versions; both are Sunday.
        let weekdays = bits(&pattern.days_of_week);
        let weekdays = (weekdays | weekdays >> 7) & 0x7f;
        let day_rule = match (pattern.is_dom_wildcard(), pattern.is_dow_wildcard()) {
            (true, true) => DayRule::Every,
            (false, true) => DayRule::DayOfMonth,
            (true, false) => DayRule::Weekday,
            (false, false) if pattern.matches_dom_and_dow() => DayRule::Both,
            (false, false) => DayRule::Either,
        };
        Some(Fields {
            seconds: bits(&pattern.seconds),
            minutes: bits(&pattern.minutes),
            hours: bits(&pattern.hours),
            days: bits(&pattern.days),
            months: bits(&pattern.months),
            weekdays,
            day_rule,
        })
    }

    /// The first matching wall-clock second at or after `from` (its sub-second part
    /// dropped), or `None` past [`YEAR_MAX`] or when nothing matches.
    pub(super) fn next_at_or_after(&self, from: NaiveDateTime) -> Option<NaiveDateTime> {
        if self.seconds == 0 || self.minutes == 0 || self.hours == 0 || self.months == 0 {
            return None;
        }
        let (mut year, mut month, mut day) = (from.year(), from.month(), from.day());
        let mut time = Some((from.hour(), from.minute(), from.second()));
        // Each turn moves to a later month or returns: bounded by the months up to YEAR_MAX.
        while year <= YEAR_MAX {
            let Some(month_next) = next_bit(self.months, month) else {
                (year, month, day, time) = (year + 1, 1, 1, None);
                continue;
            };
            if month_next != month {
                (month, day, time) = (month_next, 1, None);
            }
            let days = self.day_mask(year, month)?;
            // The first matching day from `day` on that still has a matching time.
            let mut day_next = next_bit(days, day);
            while let Some(candidate) = day_next {
                let at = if candidate == day { time } else { None };
                if let Some((hour, minute, second)) = self.time_at_or_after(at) {
                    let date = NaiveDate::from_ymd_opt(year, month, candidate)?;
                    return date.and_hms_opt(hour, minute, second);
                }
                day_next = next_bit(days, candidate + 1);
            }
            (year, month, day, time) = if month == 12 {
                (year + 1, 1, 1, None)
            } else {
                (year, month + 1, 1, None)
            };
        }
        None
    }

    /// The first matching time of day at or after `(hour, minute, second)` (`None`: from
    /// midnight).
    fn time_at_or_after(&self, at: Option<(u32, u32, u32)>) -> Option<(u32, u32, u32)> {
        let first = |bits: u64| bits.trailing_zeros();
        let Some((hour, minute, second)) = at else {
            return Some((first(self.hours), first(self.minutes), first(self.seconds)));
        };
        if self.hours & 1 << hour != 0 {
            if self.minutes & 1 << minute != 0
                && let Some(second) = next_bit(self.seconds, second)
            {
                return Some((hour, minute, second));
            }
            if let Some(minute) = next_bit(self.minutes, minute + 1) {
                return Some((hour, minute, first(self.seconds)));
            }
        }
        let hour = next_bit(self.hours, hour + 1)?;
        Some((hour, first(self.minutes), first(self.seconds)))
    }

    /// The days of `month` that match both day fields, as bits 1..=31.
    fn day_mask(&self, year: i32, month: u32) -> Option<u64> {
        let first = NaiveDate::from_ymd_opt(year, month, 1)?;
        let length = u32::from(first.num_days_in_month());
        let in_month = ((1_u64 << length) - 1) << 1;
        let by_day = self.days & in_month;
        // Bit d of the weekdays, rotated so that bit 0 is day 1's weekday, then repeated
        // every 7 days: days whose weekday matches.
        let weekday_1 = first.weekday().num_days_from_sunday();
        let rotated = (self.weekdays >> weekday_1 | self.weekdays << (7 - weekday_1)) & 0x7f;
        let weekly = rotated | rotated << 7 | rotated << 14 | rotated << 21 | rotated << 28;
        let by_weekday = (weekly << 1) & in_month;
        Some(match self.day_rule {
            DayRule::Every => in_month,
            DayRule::DayOfMonth => by_day,
            DayRule::Weekday => by_weekday,
            DayRule::Either => by_day | by_weekday,
            DayRule::Both => by_day & by_weekday,
        })
    }
}

/// The lowest set bit of `bits` at or above `from`.
fn next_bit(bits: u64, from: u32) -> Option<u32> {
    let above = bits.checked_shr(from)?.checked_shl(from)?;
    (above != 0).then(|| above.trailing_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(expr: &str) -> Cron {
        super::super::parser().parse(expr).unwrap()
    }

    // Modifiers keep croner's search.
    #[test]
    fn modifiers_have_no_fields() {
        for expr in ["0 0 L * *", "0 0 15W * *", "0 0 * * 5#2", "0 0 * * 5L"] {
            assert_eq!(Fields::of(&parse(expr)), None, "{expr}");
        }
        assert!(Fields::of(&parse("0 0 9 * * MON-FRI")).is_some());
    }

    // Leap days, month ends and the year's last second.
    #[test]
    fn calendar_edges() {
        let at = |s: &str| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap();
        let leap = Fields::of(&parse("0 12 29 2 *")).unwrap();
        assert_eq!(
            leap.next_at_or_after(at("2097-03-01 00:00:00")),
            Some(at("2104-02-29 12:00:00"))
        );
        let end = Fields::of(&parse("59 59 23 31 12 *")).unwrap();
        assert_eq!(
            end.next_at_or_after(at("2026-12-31 23:59:59")),
            Some(at("2026-12-31 23:59:59"))
        );
        assert_eq!(
            end.next_at_or_after(at("2027-01-01 00:00:00")),
            Some(at("2027-12-31 23:59:59"))
        );
        assert_eq!(next_bit(1 << 63, 63), Some(63));
        assert_eq!(next_bit(u64::MAX, 64), None);
    }
}
