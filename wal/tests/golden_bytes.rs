//! Golden bytes: the segment header and record framing are pinned byte for byte, so the
//! on-disk format can not drift silently; and the log writes exactly what the encoder says.

use timewheel_wal::format::{
    FLAG_SKIPPABLE, MirrorPrefix, RecordMeta, SEGMENT_HEADER_BYTES, SegmentHeader, decode_header,
    encode_close, encode_header, encode_mirror, encode_record,
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
        write_bound: 0x9000,
    };
    let bytes = encode_header(&header);
    let expected = concat!(
        "545757414c534547", // magic "TWWALSEG"
        "0300",             // format version 3
        "01",               // checksum kind 1: salted crc32
        "00",               // header flags
        "00000000",         // reserved
        "0100000000000000", // segment id 1
        "efcdab8967452301", // salt
        "0100000000000000", // first LSN 1
        "0000010000000000", // segment bytes 65536
        "09000000",         // write bound: 9 pages (36864)
        "0000000000000000", // reserved
        "3a20e6d4",         // header crc = crc32(bytes 0..60)
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
    encode_record(&mut out, salt, 4096, meta(1, 1, 0), b"hello");
    encode_record(&mut out, salt, 4128, meta(2, 0x20, FLAG_SKIPPABLE), b"");
    let body: Vec<u8> = (0..16).collect();
    encode_record(&mut out, salt, 4152, meta(3, 0xEF, 0), &body);
    out
}

/// The mirror of the three records (one group at 4096, 96 bytes of frames), at the next
/// sector boundary, 4608.
fn mirror(salt: u64) -> Vec<u8> {
    let group = three_records(salt);
    let mut out = Vec::new();
    let prefix = MirrorPrefix {
        group_start: 4096,
        first_lsn: 1,
        count: 3,
        write_bound: 0x80_1000,
    };
    encode_mirror(&mut out, salt, 4608, prefix, &group);
    out
}

#[test]
fn record_bytes() {
    let bytes = three_records(SALT);
    let expected = concat!(
        // offset 4096: len 5 | crc | type 1 | flags 0 | reserved | lsn 1 | delta 1 | "hello" | pad 3
        "05000000",
        "5c84e17d",
        "01",
        "00",
        "0000",
        "0100000000000000",
        "01000000",
        "68656c6c6f",
        "000000",
        // offset 4128: len 0 | crc | type 0x20 | skippable | reserved | lsn 2 | delta 1
        "00000000",
        "c3e83fb4",
        "20",
        "01",
        "0000",
        "0200000000000000",
        "01000000",
        // offset 4152: len 16 | crc | type 0xEF | flags 0 | reserved | lsn 3 | delta 1 | 0..16
        "10000000",
        "0ef24f8e",
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
        (
            header.segment_id,
            header.first_lsn,
            header.segment_bytes,
            header.write_bound
        ),
        (1, 1, 0x1_0000, 0x1_0000)
    );
    assert!(file[64..4096].iter().all(|&b| b == 0), "the header page");
    // Three synced appends: three commit blocks, one page each, each record with its mirror
    // at the next sector boundary; then the close marker at the next block.
    let mut expected = vec![0u8; 0x1_0000];
    expected[..64].copy_from_slice(&file[..64]);
    let records = three_records(header.salt);
    let frames = [(4096usize, 0..32), (8192, 32..56), (12288, 56..96)];
    for (i, (block, range)) in frames.into_iter().enumerate() {
        let frame = &records[range];
        // Each record alone in its block: re-encode it at its block's start.
        let h = timewheel_wal::format::decode_record_header(frame);
        let body = &frame[24..24 + h.len as usize];
        let meta = RecordMeta {
            lsn: h.lsn,
            record_type: h.record_type,
            flags: h.flags,
            durable_delta: 1,
        };
        let mut rec = Vec::new();
        encode_record(&mut rec, header.salt, block as u64, meta, body);
        expected[block..block + rec.len()].copy_from_slice(&rec);
        let mut m = Vec::new();
        let prefix = MirrorPrefix {
            group_start: block as u64,
            first_lsn: i as u64 + 1,
            count: 1,
            // A 64 KiB segment: every bound is its end.
            write_bound: 0x1_0000,
        };
        encode_mirror(&mut m, header.salt, block as u64 + 512, prefix, &rec);
        expected[block + 512..block + 512 + m.len()].copy_from_slice(&m);
    }
    let mut close = Vec::new();
    encode_close(&mut close, header.salt, 16384, 3);
    expected[16384..16384 + close.len()].copy_from_slice(&close);
    assert_eq!(hex(&file), hex(&expected));
}

#[test]
fn mirror_and_close_bytes() {
    let m = mirror(SALT);
    let expected_head = concat!(
        // len 24 + 96 | crc | type 0xF1 | skippable | reserved | lsn 3 (the group's last) |
        // delta none
        "78000000",
        "beb5297c",
        "f1",
        "01",
        "0000",
        "0300000000000000",
        "ffffffff",
        // group_start 4096 | first_lsn 1 | count 3 | write bound 2049 pages (8 MiB + 4096)
        "0010000000000000",
        "0100000000000000",
        "03000000",
        "01080000",
    );
    assert_eq!(hex(&m[..48]), expected_head);
    assert_eq!(&m[48..], &three_records(SALT)[..], "the frames, verbatim");
    let mut close = Vec::new();
    encode_close(&mut close, SALT, 8192, 3);
    // len 0 | crc | type 0xF2 | skippable | reserved | lsn 3 (the last) | delta none
    assert_eq!(
        hex(&close),
        concat!(
            "00000000",
            "4fdf9053",
            "f2",
            "01",
            "0000",
            "0300000000000000",
            "ffffffff"
        )
    );
}
