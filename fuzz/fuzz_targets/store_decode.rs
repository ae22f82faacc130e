//! The store's decoders on arbitrary bytes: `timewheel::store::bucket::decode_run` and
//! `timewheel::store::manifest::Manifest::decode` never panic, and whatever decodes re-encodes
//! to exactly the same bytes (every byte of both formats is covered by a checksum or checked,
//! so nothing that decodes can have been altered); a run of an older version re-encodes, in
//! the current one, to the same contents.
//!
//! Input: `selector | bytes…` (even selector: a run file; odd: a manifest).
#![no_main]

use libfuzzer_sys::fuzz_target;
use timewheel::store::bucket::{RUN_VERSION, decode_run, encode_run};
use timewheel::store::manifest::Manifest;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, bytes)) = data.split_first() else {
        return;
    };
    if selector % 2 == 0 {
        if let Ok((header, entries)) = decode_run(bytes) {
            let again = encode_run(
                header.bucket,
                header.generation,
                header.covered_lsn,
                header.crashes,
                &entries,
            );
            if bytes[8..12] == RUN_VERSION.to_le_bytes() {
                assert_eq!(again, bytes, "encode(decode(run)) == run");
            } else {
                // An older version reads, and is written again in the current one.
                let (h, e) = decode_run(&again).expect("a re-encoded run decodes");
                assert_eq!((h.crashes, e), (header.crashes, entries));
            }
        }
    } else if let Ok(manifest) = Manifest::decode(bytes) {
        assert_eq!(
            manifest.encode(),
            bytes,
            "encode(decode(manifest)) == manifest"
        );
        assert_eq!(Manifest::decode(&manifest.encode()), Ok(manifest));
    }
});
