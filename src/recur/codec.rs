//! The stored form of a [`Recurrence`]: a few little-endian bytes, written by hand.
//!
//! ```text
//! offset  size  field
//! 0       1     kind: 1 = cron, 2 = every
//! cron:
//! 1       2     expr_bytes (u16, <= CRON_EXPR_BYTES_MAX)
//! 3       n     expr, UTF-8
//! 3+n     2     zone_bytes (u16, <= ZONE_NAME_BYTES_MAX)
//! 5+n     m     zone name, UTF-8 (IANA)
//! every:
//! 1       8     interval_ms (u64)
//! 9       8     anchor_ms (u64)
//! ```
//!
//! Decoding takes exactly one recurrence: trailing bytes are refused, so is every truncation.
//! It never panics. A cron recurrence is parsed again on decode; a well-formed record whose
//! expression or zone this build refuses (another croner or tz database) is that typed error,
//! not [`RecurError::Undecodable`].

use super::{
    CRON_EXPR_BYTES_MAX, CronSchedule, Every, RecurError, Recurrence, ZONE_NAME_BYTES_MAX,
};

const KIND_CRON: u8 = 1;
const KIND_EVERY: u8 = 2;

const KIND_BYTES: usize = 1;
const STRING_LEN_BYTES: usize = 2;
const EVERY_INTERVAL_OFFSET: usize = KIND_BYTES;
const EVERY_ANCHOR_OFFSET: usize = EVERY_INTERVAL_OFFSET + 8;
const EVERY_BYTES: usize = EVERY_ANCHOR_OFFSET + 8;

/// The longest encoding of any recurrence, in bytes.
pub const RECURRENCE_BYTES_MAX: usize =
    KIND_BYTES + STRING_LEN_BYTES + CRON_EXPR_BYTES_MAX + STRING_LEN_BYTES + ZONE_NAME_BYTES_MAX;

// The lengths fit their u16 prefixes.
const _: () = assert!(CRON_EXPR_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(ZONE_NAME_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(EVERY_BYTES <= RECURRENCE_BYTES_MAX);

impl Recurrence {
    /// Appends the stored form (layout in `recur/codec.rs`) to `out`: at most
    /// [`RECURRENCE_BYTES_MAX`] bytes, exactly [`Recurrence::encoded_len`].
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        match self {
            Recurrence::Cron(cron) => {
                out.push(KIND_CRON);
                put_string(out, cron.expr(), CRON_EXPR_BYTES_MAX);
                put_string(out, cron.zone().name(), ZONE_NAME_BYTES_MAX);
            }
            Recurrence::Every(every) => {
                out.push(KIND_EVERY);
                out.extend_from_slice(&every.interval_ms().to_le_bytes());
                out.extend_from_slice(&every.anchor_ms().to_le_bytes());
            }
        }
        assert_eq!(out.len() - start, self.encoded_len());
    }

    /// The length of the stored form, in bytes.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        match self {
            Recurrence::Cron(cron) => {
                KIND_BYTES + 2 * STRING_LEN_BYTES + cron.expr().len() + cron.zone().name().len()
            }
            Recurrence::Every(_) => EVERY_BYTES,
        }
    }

    /// Reads back what [`Recurrence::encode`] wrote: all of `bytes`, nothing more or less.
    ///
    /// # Errors
    /// [`RecurError::Undecodable`] for bytes that are not one encoded recurrence; for a
    /// well-formed one, the error its constructor gives ([`RecurError::BadCron`],
    /// [`RecurError::UnknownZone`], [`RecurError::BadInterval`]).
    pub fn decode(bytes: &[u8]) -> Result<Self, RecurError> {
        let mut reader = Reader { bytes, offset: 0 };
        let recurrence = match reader.take(KIND_BYTES, "truncated kind")?[0] {
            KIND_CRON => {
                let expr = reader.string(CRON_EXPR_BYTES_MAX, &EXPR_REASONS)?;
                let zone = reader.string(ZONE_NAME_BYTES_MAX, &ZONE_REASONS)?;
                Recurrence::Cron(CronSchedule::new(expr, zone)?)
            }
            KIND_EVERY => {
                let interval_ms = reader.u64("truncated interval")?;
                let anchor_ms = reader.u64("truncated anchor")?;
                Recurrence::Every(Every::new(interval_ms, anchor_ms)?)
            }
            _ => return Err(undecodable(0, "unknown kind")),
        };
        if reader.offset != bytes.len() {
            return Err(undecodable(reader.offset, "trailing bytes"));
        }
        Ok(recurrence)
    }
}

fn put_string(out: &mut Vec<u8>, value: &str, bytes_max: usize) {
    // The constructors refuse longer strings.
    assert!(value.len() <= bytes_max);
    let len = u16::try_from(value.len()).expect("bytes_max fits a u16");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(value.as_bytes());
}

fn undecodable(offset: usize, reason: &'static str) -> RecurError {
    RecurError::Undecodable { offset, reason }
}

/// A cursor over the input that refuses to read past its end.
struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize, reason: &'static str) -> Result<&'a [u8], RecurError> {
        let end = self
            .offset
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len());
        let end = end.ok_or(undecodable(self.offset, reason))?;
        let taken = &self.bytes[self.offset..end];
        self.offset = end;
        Ok(taken)
    }

    fn u64(&mut self, reason: &'static str) -> Result<u64, RecurError> {
        let bytes = self.take(8, reason)?;
        Ok(u64::from_le_bytes(bytes.try_into().expect("took 8 bytes")))
    }

    /// A u16 length, at most `bytes_max`, then that many bytes of UTF-8.
    fn string(&mut self, bytes_max: usize, why: &StringReasons) -> Result<&'a str, RecurError> {
        let len_offset = self.offset;
        let len_bytes = self.take(STRING_LEN_BYTES, why.truncated_len)?;
        let len = usize::from(u16::from_le_bytes([len_bytes[0], len_bytes[1]]));
        if len > bytes_max {
            return Err(undecodable(len_offset, why.over_limit));
        }
        let string_offset = self.offset;
        let bytes = self.take(len, why.truncated)?;
        std::str::from_utf8(bytes).map_err(|_| undecodable(string_offset, why.not_utf8))
    }
}

/// What can be wrong with one string field, named for it (static, so nothing is allocated).
struct StringReasons {
    truncated_len: &'static str,
    over_limit: &'static str,
    truncated: &'static str,
    not_utf8: &'static str,
}

const EXPR_REASONS: StringReasons = StringReasons {
    truncated_len: "truncated expression length",
    over_limit: "expression length over its limit",
    truncated: "truncated expression",
    not_utf8: "expression not UTF-8",
};

const ZONE_REASONS: StringReasons = StringReasons {
    truncated_len: "truncated zone name length",
    over_limit: "zone name length over its limit",
    truncated: "truncated zone name",
    not_utf8: "zone name not UTF-8",
};

#[cfg(test)]
mod tests {
    use super::*;

    // The layout is the documented one, byte for byte.
    #[test]
    fn layout_is_as_documented() {
        let mut out = Vec::new();
        Recurrence::cron("0 2 * * *", "UTC")
            .unwrap()
            .encode(&mut out);
        assert_eq!(out, b"\x01\x09\x000 2 * * *\x03\x00UTC");
        out.clear();
        Recurrence::every(0x0102, 0x0304).unwrap().encode(&mut out);
        assert_eq!(
            out,
            [
                2, 0x02, 0x01, 0, 0, 0, 0, 0, 0, 0x04, 0x03, 0, 0, 0, 0, 0, 0
            ]
        );
    }

    // Structural damage is Undecodable, at the byte where it was found.
    #[test]
    fn damage_is_undecodable_where_found() {
        let cases: [(&[u8], usize, &str); 6] = [
            (b"", 0, "truncated kind"),
            (b"\x07", 0, "unknown kind"),
            (b"\x01\xff\x7f", 1, "expression length over its limit"),
            (b"\x01\x01\x00\xff\x03\x00UTC", 3, "expression not UTF-8"),
            (b"\x01\x01\x00*\x03\x00UT", 6, "truncated zone name"),
            (
                b"\x02\x01\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
                17,
                "trailing bytes",
            ),
        ];
        for (bytes, offset, reason) in cases {
            assert_eq!(
                Recurrence::decode(bytes),
                Err(RecurError::Undecodable { offset, reason }),
                "{bytes:?}"
            );
        }
    }

    // A well-formed record with a value the constructors refuse is their typed error.
    #[test]
    fn well_formed_but_refused_values_keep_their_error() {
        let zero_interval = [2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            Recurrence::decode(&zero_interval),
            Err(RecurError::BadInterval { interval_ms: 0 })
        );
        assert!(matches!(
            Recurrence::decode(b"\x01\x01\x00*\x03\x00UTC"),
            Err(RecurError::BadCron { .. })
        ));
        assert!(matches!(
            Recurrence::decode(b"\x01\x09\x000 2 * * *\x03\x00XYZ"),
            Err(RecurError::UnknownZone { .. })
        ));
    }
}
