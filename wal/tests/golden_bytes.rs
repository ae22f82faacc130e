//! Golden bytes: the segment header and record framing are pinned byte for byte, so the
//! on-disk format can not drift silently; and the log writes exactly what the encoder says.

use timewheel_wal::format::{
    FLAG_SKIPPABLE, RecordMeta, SEGMENT_HEADER_BYTES, SegmentHeader, decode_header, encode_header,
    encode_record,
};
use timewheel_wal::{Wal, WalOptions};

const SALT: u64 = 0x0123_4567_89AB_CDEF;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn segment_header_bytes() {
    let header = SegmentHeader {
        segment_id: 1,
        salt: SALT,
        first_lsn: 1,
        segment_bytes: 0x1_0000,
    };
    let bytes = encode_header(&header);
    let expected = concat!(
        "545757414c534547",         // magic "TWWALSEG"
        "0100",                     // format version 1
        "01",                       // checksum kind 1: salted crc32
        "00",                       // header flags
        "00000000",                 // reserved
        "0100000000000000",         // segment id 1
        "efcdab8967452301",         // salt
        "0100000000000000",         // first LSN 1
        "0000010000000000",         // segment bytes 65536
        "000000000000000000000000", // reserved
        "b1e2d69a",                 // header crc = crc32(bytes 0..60)
    );
    assert_eq!(hex(&bytes), expected);
    assert_eq!(decode_header(&bytes), Ok(header));
    assert_eq!(bytes.len(), SEGMENT_HEADER_BYTES);
}

fn three_records(salt: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let meta = |lsn, record_type, flags| RecordMeta {
        lsn,
        record_type,
        flags,
        durable_delta: 1,
    };
    encode_record(&mut out, salt, 64, meta(1, 1, 0), b"hello");
    encode_record(&mut out, salt, 96, meta(2, 0x20, FLAG_SKIPPABLE), b"");
    let body: Vec<u8> = (0..16).collect();
    encode_record(&mut out, salt, 120, meta(3, 0xEF, 0), &body);
    out
}

#[test]
fn record_bytes() {
    let bytes = three_records(SALT);
    let expected = concat!(
        // offset 64: len 5 | crc | type 1 | flags 0 | reserved | lsn 1 | delta 1 | "hello" | pad 3
        "05000000",
        "6d7fef30",
        "01",
        "00",
        "0000",
        "0100000000000000",
        "01000000",
        "68656c6c6f",
        "000000",
        // offset 96: len 0 | crc | type 0x20 | skippable | reserved | lsn 2 | delta 1
        "00000000",
        "ea672acc",
        "20",
        "01",
        "0000",
        "0200000000000000",
        "01000000",
        // offset 120: len 16 | crc | type 0xEF | flags 0 | reserved | lsn 3 | delta 1 | 0..16
        "10000000",
        "d38b14b2",
        "ef",
        "00",
        "0000",
        "0300000000000000",
        "01000000",
        "000102030405060708090a0b0c0d0e0f",
    );
    assert_eq!(hex(&bytes), expected);
}

#[test]
fn the_log_writes_what_the_encoder_says() {
    let dir = tempfile::tempdir().unwrap();
    let opts = WalOptions {
        segment_bytes: 0x1_0000,
        record_bytes_max: 1024,
        ..Default::default()
    };
    let (wal, _) = Wal::open_dir(dir.path(), opts).unwrap();
    wal.append(1, b"hello").unwrap();
    wal.append_with_flags(0x20, FLAG_SKIPPABLE, b"").unwrap();
    wal.append(0xEF, &(0..16).collect::<Vec<u8>>()).unwrap();
    wal.close().unwrap();

    let file = std::fs::read(dir.path().join("0000000000000001.wal")).unwrap();
    assert_eq!(file.len(), 0x1_0000);
    let header = decode_header(file[..SEGMENT_HEADER_BYTES].try_into().unwrap()).unwrap();
    assert_eq!(
        (header.segment_id, header.first_lsn, header.segment_bytes),
        (1, 1, 0x1_0000)
    );
    let records = three_records(header.salt);
    assert_eq!(hex(&file[64..64 + records.len()]), hex(&records));
    assert!(
        file[64 + records.len()..].iter().all(|&b| b == 0),
        "zero fill after the log"
    );
}
