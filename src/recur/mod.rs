//! Recurring schedules: when does a recurring job fire next?
//!
//! A [`Recurrence`] is either a cron expression in an IANA time zone ([`CronSchedule`]) or a
//! fixed interval from an anchor ([`Every`]). Both answer one question, [`Recurrence::next_after`]:
//! the first occurrence strictly after a given instant, in milliseconds since the Unix epoch
//! (UTC). This module is pure: no clock, no I/O, no engine state. It also carries the small
//! byte layout a recurrence is stored in ([`Recurrence::encode`], [`Recurrence::decode`]).
//!
//! ```
//! use timewheel::recur::Recurrence;
//!
//! # fn main() -> Result<(), timewheel::recur::RecurError> {
//! // Every day at 02:00 in Berlin: 2026-01-10T01:00:00Z is 02:00 CET.
//! let nightly = Recurrence::cron("0 2 * * *", "Europe/Berlin")?;
//! let midnight_utc_ms = 1_767_916_800_000; // 2026-01-09T00:00:00Z
//! assert_eq!(nightly.next_after(midnight_utc_ms), Some(midnight_utc_ms + 3_600_000));
//!
//! // Every 5 seconds from an anchor: anchor + k * interval, the first one strictly after.
//! let poll = Recurrence::every(5_000, 1_000)?;
//! assert_eq!(poll.next_after(0), Some(1_000));
//! assert_eq!(poll.next_after(1_000), Some(6_000));
//!
//! // Stored as a few bytes, and read back.
//! let mut bytes = Vec::new();
//! nightly.encode(&mut bytes);
//! assert_eq!(Recurrence::decode(&bytes)?, nightly);
//!
//! // A bad expression or zone is a typed error.
//! assert!(Recurrence::cron("61 * * * *", "UTC").is_err());
//! assert!(Recurrence::cron("* * * * *", "Mars/Olympus_Mons").is_err());
//! # Ok(())
//! # }
//! ```
//!
//! # Cron expressions
//!
//! Parsed once by the `croner` crate, with 5 fields (`minute hour day-of-month month
//! day-of-week`) or 6 (a leading `second`). Ranges, steps, lists, names (`MON-FRI`, `JAN`),
//! `L`, `W`, `#` and the `@daily` style nicknames work as croner documents them; a
//! day-of-month and a day-of-week both restricted match when *either* does (vixie cron). There
//! is no year field. An expression that matches no date at all (`0 0 30 2 *`) is refused
//! when it is built, so that `next_after` never searches in vain. Occurrences fall on whole
//! seconds.
//!
//! # Time zones and daylight saving time
//!
//! An expression is matched against the zone's wall clock, and each wall-clock time that
//! matches is turned into **one** instant:
//!
//! - A wall-clock time that happens once fires at that instant.
//! - A wall-clock time **skipped** by a forward transition (spring forward) fires at the first
//!   valid instant after the gap: `30 2 * * *` in Europe/Berlin on 2026-03-29, when the clocks
//!   jump from 02:00 to 03:00, fires at 03:00 CEST (01:00 UTC). Several skipped times collapse
//!   into that one firing, which is also the firing of a match on the gap's end itself (03:00).
//! - A wall-clock time **repeated** by a backward transition (fall back) fires once, at its
//!   first pass: `30 2 * * *` in Europe/Berlin on 2026-10-25 fires at 02:30 CEST (00:30 UTC),
//!   not again at 02:30 CET.
//!
//! These rules hold for every expression, stepped or not. So `*/15 * * * *` in Europe/Berlin
//! fires at 01:45 CET and then 03:00 CEST on the spring-forward day, and on the fall-back day
//! at 02:00, 02:15, 02:30 and 02:45 CEST and then 03:00 CET: nothing during the repeated
//! hour's second pass, 75 real minutes without a firing. A job that must run every 15 real
//! minutes is an [`Every`], or a cron expression in UTC.
//!
//! croner 4 applies the same two rules only to *fixed-time* expressions (one second, one
//! minute and one hour). For the others it follows vixie cron: a skipped time does not fire at
//! all, and a repeated one fires on both passes. To have one rule for all expressions, this
//! module searches the naive wall clock (where nothing is skipped or repeated) and maps the
//! wall-clock match to an instant itself (`zoned.rs`).
//!
//! Zones come from the IANA database compiled into `chrono-tz`; names are case-sensitive
//! (`Europe/Berlin`, `UTC`).
//!
//! # Speed
//!
//! The wall-clock search of an expression without `L`, `W` or `#` runs on bit sets built
//! once (`fields.rs`: some 200-250 ns a `next_after`, the zone conversions included);
//! expressions with those modifiers use croner's own search, some 1-2 µs.

mod codec;
mod fields;
mod zoned;

pub use codec::RECURRENCE_BYTES_MAX;

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};

/// The longest cron expression accepted, in bytes. Real ones are a few dozen; the limit keeps
/// a stored recurrence small.
pub const CRON_EXPR_BYTES_MAX: usize = 256;

/// The longest time zone name accepted, in bytes (the longest IANA name has 32).
pub const ZONE_NAME_BYTES_MAX: usize = 64;

/// The longest interval of an [`Every`]: ten years of 366 days, in milliseconds.
pub const INTERVAL_MS_MAX: u64 = 10 * 366 * 24 * 3_600 * 1_000;

/// Why a recurrence could not be built or read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecurError {
    /// The cron expression does not parse, is too long, or matches no date at all.
    #[error("bad cron expression {expr:?}: {reason}")]
    BadCron {
        /// The expression as given.
        expr: String,
        /// Why: croner's message, or ours.
        reason: String,
    },
    /// The time zone name is not in the IANA database compiled into `chrono-tz`.
    #[error("unknown time zone {zone:?}")]
    UnknownZone {
        /// The name as given.
        zone: String,
    },
    /// The interval is 0 or longer than [`INTERVAL_MS_MAX`].
    #[error("bad interval {interval_ms} ms: it must be 1..={INTERVAL_MS_MAX} ms")]
    BadInterval {
        /// The interval as given.
        interval_ms: u64,
    },
    /// The bytes are not an encoded recurrence (truncated, trailing bytes, unknown kind,
    /// a length over its limit, or a string that is not UTF-8).
    #[error("undecodable recurrence at byte {offset}: {reason}")]
    Undecodable {
        /// Where in the input the problem was found.
        offset: usize,
        /// What was wrong.
        reason: &'static str,
    },
}

/// A recurring schedule: when a recurring job fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recurrence {
    /// A cron expression in a time zone.
    Cron(CronSchedule),
    /// A fixed interval from an anchor.
    Every(Every),
}

impl Recurrence {
    /// A cron expression (5 fields, or 6 with leading seconds) in an IANA time zone.
    ///
    /// # Errors
    /// [`RecurError::BadCron`] for an expression croner refuses, one longer than
    /// [`CRON_EXPR_BYTES_MAX`] or one that matches no date; [`RecurError::UnknownZone`] for a
    /// zone name that is not in the database.
    pub fn cron(expr: &str, zone: &str) -> Result<Self, RecurError> {
        CronSchedule::new(expr, zone).map(Recurrence::Cron)
    }

    /// Every `interval_ms` milliseconds: at `anchor_ms`, `anchor_ms + interval_ms`, ...
    ///
    /// # Errors
    /// [`RecurError::BadInterval`] unless `1 <= interval_ms <= INTERVAL_MS_MAX`.
    pub fn every(interval_ms: u64, anchor_ms: u64) -> Result<Self, RecurError> {
        Every::new(interval_ms, anchor_ms).map(Recurrence::Every)
    }

    /// The first occurrence strictly after `after_ms` (milliseconds since the Unix epoch,
    /// UTC), or `None` if there is none that a `u64` of milliseconds (or croner's search,
    /// which ends at the year 5000) can hold.
    #[must_use]
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        match self {
            Recurrence::Cron(cron) => cron.next_after(after_ms),
            Recurrence::Every(every) => every.next_after(after_ms),
        }
    }
}

/// A parsed cron expression in a time zone. Built by [`Recurrence::cron`] or
/// [`CronSchedule::new`]; the expression is parsed once, here, and the parse is shared: by
/// clones, and through a small process-wide cache by every schedule built from the same text
/// (a recovery decodes the same few expressions in every recurring job's records).
#[derive(Clone)]
pub struct CronSchedule {
    zone: Tz,
    parsed: Arc<ParsedExpr>,
}

/// What a cron expression's text parses to; the same in every zone.
struct ParsedExpr {
    text: Box<str>,
    /// croner's bit fields: some 300 bytes, behind the `Arc` (an `Every` is 16).
    cron: croner::Cron,
    /// The fast search's bit sets, for an expression without `L`, `W` or `#`.
    fields: Option<fields::Fields>,
}

/// Distinct expressions the parse cache keeps; past it the cache starts over (a cache, not a
/// registry: any expression still parses, only again).
const PARSE_CACHE_ENTRIES_MAX: usize = 1024;

/// Parses that succeeded, by expression text.
static PARSE_CACHE: Mutex<Option<HashMap<Box<str>, Arc<ParsedExpr>>>> = Mutex::new(None);

/// The parse of `expr`, from the cache or parsed now; an error for an expression croner
/// refuses or one that matches no date (errors are not cached).
fn parse_expr(expr: &str) -> Result<Arc<ParsedExpr>, String> {
    // A poisoned cache only means a panic elsewhere while it was held; its entries are whole.
    let hit = (PARSE_CACHE.lock().unwrap_or_else(PoisonError::into_inner))
        .as_ref()
        .and_then(|cache| cache.get(expr).cloned());
    if let Some(hit) = hit {
        return Ok(hit);
    }
    let cron = parser().parse(expr).map_err(|error| error.to_string())?;
    let parsed = Arc::new(ParsedExpr {
        text: expr.into(),
        fields: fields::Fields::of(&cron),
        cron,
    });
    // Without a year field an expression repeats every 400 years (a Gregorian cycle is a
    // whole number of weeks), so one with no match from the epoch on has none at all.
    if zoned::first_match(&parsed, chrono::DateTime::UNIX_EPOCH.naive_utc()).is_none() {
        return Err("it matches no date".to_owned());
    }
    let mut cache = PARSE_CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    let cache = cache.get_or_insert_with(HashMap::new);
    if cache.len() >= PARSE_CACHE_ENTRIES_MAX {
        cache.clear();
    }
    cache.insert(expr.into(), Arc::clone(&parsed));
    Ok(parsed)
}

impl CronSchedule {
    /// Parses `expr` and looks up `zone`; see [`Recurrence::cron`].
    ///
    /// # Errors
    /// As [`Recurrence::cron`].
    pub fn new(expr: &str, zone: &str) -> Result<Self, RecurError> {
        let bad = |reason: String| RecurError::BadCron {
            expr: expr.to_owned(),
            reason,
        };
        if expr.len() > CRON_EXPR_BYTES_MAX {
            return Err(bad(format!("longer than {CRON_EXPR_BYTES_MAX} bytes")));
        }
        let parsed = parse_expr(expr).map_err(bad)?;
        let zone = Tz::from_str(zone).map_err(|_| RecurError::UnknownZone {
            zone: zone.to_owned(),
        })?;
        Ok(CronSchedule { zone, parsed })
    }

    /// The expression, as given.
    #[must_use]
    pub fn expr(&self) -> &str {
        &self.parsed.text
    }

    /// The time zone.
    #[must_use]
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The first occurrence strictly after `after_ms`, under the rules in the
    /// [module docs](self); see [`Recurrence::next_after`].
    #[must_use]
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        zoned::next_after(self, after_ms)
    }
}

/// The one parser configuration: seconds optional (5 or 6 fields), no year field, the
/// POSIX weekday numbering and day-of-month OR day-of-week.
fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        // The parsed form follows from the expression.
        self.expr() == other.expr() && self.zone == other.zone
    }
}

impl Eq for CronSchedule {}

impl fmt::Debug for CronSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CronSchedule")
            .field("expr", &self.expr())
            .field("zone", &self.zone.name())
            .finish()
    }
}

/// A fixed interval from an anchor: the occurrences are `anchor_ms + k * interval_ms` for
/// every `k >= 0`. Built by [`Recurrence::every`] or [`Every::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Every {
    interval_ms: u64,
    anchor_ms: u64,
}

impl Every {
    /// See [`Recurrence::every`].
    ///
    /// # Errors
    /// As [`Recurrence::every`].
    pub fn new(interval_ms: u64, anchor_ms: u64) -> Result<Self, RecurError> {
        if !(1..=INTERVAL_MS_MAX).contains(&interval_ms) {
            return Err(RecurError::BadInterval { interval_ms });
        }
        Ok(Every {
            interval_ms,
            anchor_ms,
        })
    }

    /// The interval, in milliseconds.
    #[must_use]
    pub fn interval_ms(&self) -> u64 {
        self.interval_ms
    }

    /// The first occurrence, in milliseconds since the epoch.
    #[must_use]
    pub fn anchor_ms(&self) -> u64 {
        self.anchor_ms
    }

    /// The first `anchor_ms + k * interval_ms` strictly after `after_ms`, or `None` past
    /// `u64::MAX`.
    #[must_use]
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        let Some(since_anchor_ms) = after_ms.checked_sub(self.anchor_ms) else {
            return Some(self.anchor_ms);
        };
        let k = since_anchor_ms / self.interval_ms + 1;
        let next_ms = self
            .anchor_ms
            .checked_add(k.checked_mul(self.interval_ms)?)?;
        assert!(next_ms > after_ms && next_ms - after_ms <= self.interval_ms);
        Some(next_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each bad input is its own typed error, and nothing is built.
    #[test]
    fn bad_input_is_a_typed_error() {
        for expr in [
            "",
            "61 * * * *",
            "* * * *",
            "* * * * * * *",
            "a b c d e",
            "*/0 * * * *",
        ] {
            assert!(
                matches!(
                    Recurrence::cron(expr, "UTC"),
                    Err(RecurError::BadCron { .. })
                ),
                "{expr:?}"
            );
        }
        let long = "0 ".repeat(CRON_EXPR_BYTES_MAX);
        assert!(matches!(
            Recurrence::cron(&long, "UTC"),
            Err(RecurError::BadCron { .. })
        ));
        // Parses, but no 30 February and no 31 April ever come.
        for expr in ["0 0 30 2 *", "0 0 31 4,6,9,11 *"] {
            let Err(RecurError::BadCron { reason, .. }) = Recurrence::cron(expr, "UTC") else {
                panic!("{expr:?} was accepted");
            };
            assert_eq!(reason, "it matches no date");
        }
        for zone in [
            "",
            "Europe/Berlinn",
            "europe/berlin",
            "CEST",
            "Mars/Olympus_Mons",
        ] {
            assert_eq!(
                Recurrence::cron("* * * * *", zone),
                Err(RecurError::UnknownZone {
                    zone: zone.to_owned()
                })
            );
        }
        for interval_ms in [0, INTERVAL_MS_MAX + 1, u64::MAX] {
            assert_eq!(
                Recurrence::every(interval_ms, 0),
                Err(RecurError::BadInterval { interval_ms })
            );
        }
        assert!(Recurrence::every(1, 0).is_ok() && Recurrence::every(INTERVAL_MS_MAX, 0).is_ok());
    }

    // croner's own message reaches the caller.
    #[test]
    fn bad_cron_carries_the_croner_message() {
        let Err(error) = Recurrence::cron("61 * * * *", "UTC") else {
            panic!()
        };
        assert_eq!(
            error.to_string(),
            "bad cron expression \"61 * * * *\": Component error: Number out of bounds."
        );
    }

    // The parse cache serves each text its own parse, also past its size, when it starts
    // over, and a refused text is refused again (errors are not cached).
    #[test]
    fn shared_parses_answer_for_their_own_expression() {
        let day_ms = 86_400_000;
        let texts: Vec<(String, u64)> = (0..24u64)
            .flat_map(|h| {
                (0..60u64).map(move |m| (format!("{m} {h} * * *"), (h * 60 + m) * 60_000))
            })
            .collect();
        assert!(texts.len() > PARSE_CACHE_ENTRIES_MAX);
        // Strictly after `day_ms`: a match exactly at it is the next day's.
        let next_from = |of_day_ms: u64| day_ms + if of_day_ms == 0 { day_ms } else { of_day_ms };
        for round in 0..2 {
            for (text, offset_ms) in &texts {
                let cron = Recurrence::cron(text, "UTC").expect("a valid expression");
                assert_eq!(
                    cron.next_after(day_ms),
                    Some(next_from(*offset_ms)),
                    "{text}, round {round}"
                );
                // The zone is the schedule's, not the parse's: Tokyo is UTC+9 all year, so
                // local h:m is (h - 9):m UTC.
                let utc_of_day_ms = (offset_ms + day_ms - 9 * 3_600_000) % day_ms;
                let in_tokyo = Recurrence::cron(text, "Asia/Tokyo").expect("a valid expression");
                assert_eq!(
                    in_tokyo.next_after(day_ms),
                    Some(next_from(utc_of_day_ms)),
                    "{text} in Tokyo, round {round}"
                );
            }
        }
        for _ in 0..2 {
            assert!(matches!(
                Recurrence::cron("0 0 30 2 *", "UTC"),
                Err(RecurError::BadCron { .. })
            ));
        }
    }

    // Every: the anchor itself first, then whole intervals, and None rather than a wrap.
    #[test]
    fn every_steps_from_the_anchor() {
        let every = Every::new(10, 100).unwrap();
        assert_eq!(every.next_after(0), Some(100));
        assert_eq!(every.next_after(99), Some(100));
        assert_eq!(every.next_after(100), Some(110));
        assert_eq!(every.next_after(109), Some(110));
        assert_eq!(every.next_after(110), Some(120));
        let near_end = Every::new(INTERVAL_MS_MAX, u64::MAX - 5).unwrap();
        assert_eq!(near_end.next_after(0), Some(u64::MAX - 5));
        assert_eq!(near_end.next_after(u64::MAX - 5), None);
    }

    // Seconds are optional: 5 fields fire at second 0, 6 fields at the given second.
    #[test]
    fn five_and_six_fields() {
        let five = Recurrence::cron("*/5 * * * *", "UTC").unwrap();
        let six = Recurrence::cron("30 */5 * * * *", "UTC").unwrap();
        assert_eq!(five.next_after(1), Some(300_000));
        assert_eq!(six.next_after(1), Some(30_000));
        assert_eq!(six.next_after(30_000), Some(330_000));
        // Sub-second start times: strictly after, at a whole second.
        assert_eq!(five.next_after(299_999), Some(300_000));
        assert_eq!(five.next_after(300_000), Some(600_000));
    }
}
