//! The WAL's pure decoders on arbitrary bytes: the segment header, the record header and the
//! record frame check never panic, and whatever decodes re-encodes to the same bytes.
//!
//! Input: `mode | salt u64 | offset u64 | bytes…`, like the start of a segment file: the
//! first 64 bytes are decoded as a segment header, the rest as a record at `offset` of a
//! segment with `salt` (and the whole as a file name). Mode bit 0 writes the correct record
//! crc first, bit 1 the correct header crc, so the fuzzer also explores what lies behind each
//! checksum instead of spending its time forging it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use timewheel_wal::format::{
    self, RECORD_ALIGN, RECORD_HEADER_BYTES, RecordMeta, SEGMENT_HEADER_BYTES,
};
use timewheel_wal::{parse_segment_file_name, segment_file_name};

const PREFIX_BYTES: usize = 1 + 8 + 8;
const FIX_RECORD_CRC: u8 = 1 << 0;
const FIX_HEADER_CRC: u8 = 1 << 1;
// Where the crc sits in each structure (see `timewheel_wal::format`).
const RECORD_CRC_AT: usize = 4;
const HEADER_CRC_AT: usize = SEGMENT_HEADER_BYTES - 4;
const HEADER_VERSION_AT: usize = 8;

fuzz_target!(|data: &[u8]| {
    if data.len() < PREFIX_BYTES {
        return;
    }
    let mode = data[0];
    let salt = u64::from_le_bytes(data[1..9].try_into().unwrap());
    // Any 8-aligned offset a segment of up to 1 TiB could hold.
    let offset = u64::from_le_bytes(data[9..17].try_into().unwrap()) & ((1 << 40) - 1) & !7;
    let bytes = &data[PREFIX_BYTES..];
    header(bytes, mode & FIX_HEADER_CRC != 0);
    let rest = bytes.get(SEGMENT_HEADER_BYTES..).unwrap_or_default();
    record(rest, salt, offset, mode & FIX_RECORD_CRC != 0);
    file_name(bytes);
});

fn header(bytes: &[u8], fix_crc: bool) {
    let Some(raw) = bytes.get(..SEGMENT_HEADER_BYTES) else {
        return;
    };
    let mut b: [u8; SEGMENT_HEADER_BYTES] = raw.try_into().unwrap();
    if fix_crc {
        let crc = crc32fast::hash(&b[..HEADER_CRC_AT]);
        b[HEADER_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    }
    let _ = format::raw_header_salt(&b);
    if let Ok(h) = format::decode_header(&b) {
        assert_eq!(format::raw_header_salt(&b), h.salt);
        let again = format::encode_header(&h);
        let version = u16::from_le_bytes([b[HEADER_VERSION_AT], b[HEADER_VERSION_AT + 1]]);
        if version == format::FORMAT_VERSION {
            assert_eq!(again, b, "a decoded header re-encodes identically");
        } else if h.segment_bytes > 0 {
            // An older header is written back in the current version, naming no less room (a
            // segment of no bytes has no bound to name: the file's length check refuses it).
            let h2 = format::decode_header(&again).expect("an encoded header decodes");
            assert_eq!(
                (h2.segment_id, h2.salt, h2.first_lsn, h2.segment_bytes),
                (h.segment_id, h.salt, h.first_lsn, h.segment_bytes)
            );
            // (Equal, unless the bound saturates the field: segments past 16 TiB.)
            let saturated = u64::from(u32::MAX) * format::WRITE_BOUND_UNIT;
            assert!(h2.write_bound == h.write_bound || h2.write_bound == saturated);
        }
    }
}

fn record(bytes: &[u8], salt: u64, offset: u64, fix_crc: bool) {
    if bytes.len() < RECORD_HEADER_BYTES {
        return;
    }
    let mut frame_buf = bytes.to_vec();
    let h = format::decode_record_header(&frame_buf);
    assert_eq!(
        h.is_zero(),
        bytes[..RECORD_HEADER_BYTES].iter().all(|&b| b == 0)
    );
    let frame_len = h.frame_bytes();
    assert!(frame_len >= RECORD_HEADER_BYTES as u64 && frame_len % RECORD_ALIGN as u64 == 0);
    assert!(h.vouched_lsn() <= h.lsn);
    // The bytes stand for the rest of a segment: the frame must fit in them.
    let room = bytes.len() as u64;
    if format::check_record_header(&h, room).is_err() {
        return;
    }
    assert!(frame_len <= room, "check_record_header bounds the frame");
    let frame_len = frame_len as usize;
    let seed = format::crc_seed(salt, offset);
    if fix_crc {
        let crc = format::record_crc(seed, &frame_buf[..frame_len]);
        frame_buf[RECORD_CRC_AT..RECORD_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let frame = &frame_buf[..frame_len];
    let h = format::decode_record_header(frame);
    if format::check_record_crc(&h, seed, frame).is_err() {
        return;
    }
    let _ = format::record_disposition(&h);
    // Re-encode what was decoded.
    let body_end = RECORD_HEADER_BYTES + h.len as usize;
    let meta = RecordMeta {
        lsn: h.lsn,
        record_type: h.record_type,
        flags: h.flags,
        durable_delta: h.durable_delta,
    };
    let mut out = Vec::new();
    format::encode_record(
        &mut out,
        salt,
        offset,
        meta,
        &frame[RECORD_HEADER_BYTES..body_end],
    );
    assert_eq!(out.len(), frame_len);
    if frame[body_end..].iter().all(|&b| b == 0) {
        assert_eq!(out, frame, "a valid record re-encodes identically");
    } else {
        // Padding is covered by the crc but not required to be zero (see the fuzz README):
        // everything but the padding and the crc must still match.
        assert_eq!(out[..RECORD_CRC_AT], frame[..RECORD_CRC_AT]);
        assert_eq!(
            out[RECORD_CRC_AT + 4..body_end],
            frame[RECORD_CRC_AT + 4..body_end]
        );
    }
}

fn file_name(bytes: &[u8]) {
    let Ok(name) = std::str::from_utf8(bytes) else {
        return;
    };
    if let Some(id) = parse_segment_file_name(name) {
        assert_eq!(
            segment_file_name(id),
            name,
            "a parsed segment name prints back identically"
        );
    }
}
