//! `timewheel::record::Event::decode` on arbitrary bytes: never panics, and whatever decodes
//! re-encodes to the same bytes and decodes again to the same event.
//!
//! Input: `record_type | body…`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use timewheel::record::{Event, TYPE_CLAIM, TYPE_COMPLETE};

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
    assert_eq!(Event::decode(record_type, &out).as_ref(), Ok(&event), "decode(encode(e)) == e");
    if out != body {
        // Known gap (see fuzz/README.md, finding 1): the `reserved u32` of claim and complete
        // bodies (bytes 12..16) is written as zero but not checked on decode. Everything else
        // must match byte for byte.
        let reserved = 12..16;
        let known = matches!(record_type, TYPE_CLAIM | TYPE_COMPLETE)
            && out.len() == body.len()
            && out.iter().zip(body).enumerate().all(|(i, (a, b))| a == b || reserved.contains(&i));
        assert!(known, "encode(decode(b)) != b for type {record_type}: {out:?} vs {body:?}");
    }
});
