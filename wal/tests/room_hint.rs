//! `Wal::room_hint`, the bytes left read without the append lock, never promises more than
//! `Wal::room` says is left, whatever the appends, seals (a sync seals the open group: its
//! mirror and the padding to the next block) and rolls did since; and it is a useful bound,
//! not zero, once a segment has room.

use timewheel_wal::testing::FaultDisk;
use timewheel_wal::{Durability, Wal, WalOptions};

#[test]
fn the_hint_is_a_lower_bound_of_the_room_through_appends_seals_and_rolls() {
    let disk = FaultDisk::new(7);
    let opts = WalOptions {
        segment_bytes: 64 * 1024,
        record_bytes_max: 2048,
        durability: Durability::Buffered,
        ..Default::default()
    };
    let (wal, _) = Wal::open(disk.storage(), opts).unwrap();
    let (hint, (left, _)) = (wal.room_hint(), wal.room());
    assert!(
        hint > 0 && hint <= left,
        "at open: hint {hint}, room {left}"
    );
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut rolls, mut useful) = (0, 0);
    for i in 0..5_000 {
        let len = 1 + (next() % 1500) as usize;
        let segments = wal.segments().len();
        let lsn = wal.append_nowait(1, &vec![i as u8; len]).unwrap();
        rolls += usize::from(wal.segments().len() > segments);
        let (hint, (left, _)) = (wal.room_hint(), wal.room());
        assert!(hint <= left, "after append {i}: hint {hint} > room {left}");
        useful += usize::from(hint > 0);
        if next() % 4 == 0 {
            // Seals the open group: the room shrinks by its mirror and padding, and the hint
            // had counted them already.
            wal.wait_durable(lsn).unwrap();
            let (hint, (left, _)) = (wal.room_hint(), wal.room());
            assert!(hint <= left, "after sync {i}: hint {hint} > room {left}");
        }
    }
    assert!(rolls > 10, "the run crossed segments ({rolls} rolls)");
    assert!(
        useful > 4_000,
        "the hint said there was room {useful} times of 5,000"
    );
}
