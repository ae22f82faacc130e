//! `timewheel::record::Event::decode` on arbitrary bytes: never panics, and whatever decodes
//! re-encodes to the same bytes and decodes again to the same event.
//!
//! Input: `record_type | body…`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use timewheel::record::Event;

fuzz_target!(|data: &[u8]| {
    let Some((&record_type, body)) = data.split_first() else {
        return;
    };
    let Ok(event) = Event::decode(record_type, body) else {
        return;
    };
    assert_eq!(event.record_type(), record_type);
    let mut out = Vec::new();
    event.encode(&mut out);
    assert_eq!(
        Event::decode(record_type, &out).as_ref(),
        Ok(&event),
        "decode(encode(e)) == e"
    );
    // Reserved words must be zero on decode (regression: fuzz/regressions/job_record_decode),
    // so what decodes re-encodes byte for byte.
    assert_eq!(out, body, "encode(decode(b)) == b for type {record_type}");
});
