#!/usr/bin/env python3
"""Writes the small seed corpora in fuzz/corpus/<target>/ (deterministic; rerun after changing
an input type or a format). Run from anywhere: python3 fuzz/make_seeds.py

The structured targets (wal_open, engine_ops) decode their input with `arbitrary` 1.x; `A`
below writes bytes by the same rules: integers little-endian, bool = low bit of a byte, enum =
u32 variant v with (v * n) >> 32 = index, Option = bool then value, Vec = a continue byte (1)
before each element and a 0 after the last. The raw targets get hand-built byte layouts from
timewheel_wal::format and timewheel::record.
"""
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


class A:
    def __init__(self):
        self.b = bytearray()

    def u8(self, v):
        self.b += struct.pack("<B", v)
        return self

    def bool(self, v):
        return self.u8(1 if v else 0)

    def u16(self, v):
        self.b += struct.pack("<H", v)
        return self

    def u64(self, v):
        self.b += struct.pack("<Q", v)
        return self

    def enum(self, index, count):
        self.b += struct.pack("<I", ((index << 32) + count - 1) // count)
        return self

    def vec(self, items, put):
        for item in items:
            self.u8(1)
            put(item)
        return self.u8(0)

    def bytes_vec(self, data):
        return self.vec(data, self.u8)


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(bytes(data))


# ---- wal_record_decode: mode | salt | offset | segment header (64) | record frame ----------
def segment_header(segment_id, salt, first_lsn, segment_bytes):
    h = bytearray(64)
    h[0:8] = b"TWWALSEG"
    h[8:10] = struct.pack("<H", 1)
    h[10] = 1  # checksum kind: crc32 salted
    h[16:48] = struct.pack("<QQQQ", segment_id, salt, first_lsn, segment_bytes)
    h[60:64] = struct.pack("<I", zlib.crc32(bytes(h[:60])))
    return h


def crc_seed(salt, offset):
    x = salt ^ ((offset * 0x9E3779B97F4A7C15) & (2**64 - 1))
    return (x & 0xFFFFFFFF) ^ (x >> 32)


def record(salt, offset, lsn, record_type, flags, durable_delta, body):
    frame_len = (24 + len(body) + 7) & ~7
    f = bytearray(frame_len)
    f[0:4] = struct.pack("<I", len(body))
    f[8] = record_type
    f[9] = flags
    f[12:24] = struct.pack("<QI", lsn, durable_delta)
    f[24 : 24 + len(body)] = body
    crc = zlib.crc32(bytes(f[8:]), zlib.crc32(bytes(f[0:4]), crc_seed(salt, offset)))
    f[4:8] = struct.pack("<I", crc)
    return f


def wal_record_decode():
    salt = 0x1234_5678_9ABC_DEF0
    prefix = lambda mode, off: struct.pack("<BQQ", mode, salt, off)
    head = segment_header(1, salt, 1, 4096)
    write("wal_record_decode", "valid-record", prefix(0, 64) + head + record(salt, 64, 1, 1, 0, 1, b"schedule job 7"))
    write("wal_record_decode", "valid-empty-body", prefix(0, 64) + head + record(salt, 64, 5, 0xEF, 0, 2, b""))
    write("wal_record_decode", "skippable-reserved-type", prefix(0, 64) + head + record(salt, 64, 9, 0xF3, 1, 0xFFFFFFFF, b"future"))
    stale = record(salt ^ 1, 64, 1, 1, 0, 1, b"stale incarnation")
    write("wal_record_decode", "fix-crc-mode", prefix(3, 4096) + bytearray(64) + stale)
    write("wal_record_decode", "zero-fill", prefix(0, 128) + head + bytearray(48))
    write("wal_record_decode", "segment-name", prefix(0, 0) + b"0000000000000042.wal")


# ---- job_record_decode: type | body (layouts in src/record.rs) ----------------------------
def job_record_decode():
    sched = struct.pack("<QQQIHHII", 7, 1_800_000_060_000, 1_800_000_000_000, 0, 0, 1, 0, 5) + b"\x00\xffhi!"
    write("job_record_decode", "schedule", b"\x01" + sched)
    write("job_record_decode", "schedule-empty", b"\x01" + struct.pack("<QQQIHHII", 1, 0, 0, 0, 0, 0, 3, 0))
    write("job_record_decode", "cancel", b"\x02" + struct.pack("<Q", 7))
    write("job_record_decode", "reschedule", b"\x03" + struct.pack("<QQ", 7, 1_800_000_120_000))
    write("job_record_decode", "claim", b"\x04" + struct.pack("<QIIQ", 7, 1, 0, 1_800_000_030_000))
    write("job_record_decode", "complete", b"\x05" + struct.pack("<QII", 7, 1, 0))
    reason = "timeout ✓".encode()
    write("job_record_decode", "fail", b"\x06" + struct.pack("<QII", 7, 2, len(reason)) + reason)


# ---- wal_open ------------------------------------------------------------------------------
ONE, BATCH, NOWAIT, SYNC = range(4)
FLIP, WRITE, ZERO, ZERO_TAIL, COPY, COPY_ACROSS, REMOVE, RENAME, CREATE = range(9)
SEGMENT, SPARE, COPY_FILE, OTHER = range(4)
CLOSE, ABANDON, POWER_CUT = range(3)
SEGMENT_BYTES, TWO_PAGE_SEGMENT_BYTES = 8192, 16384


def wal_input(seed, appends, end=(CLOSE,), edits=(), two_pages=False, absolute=False):
    """end: (CLOSE,), (ABANDON, failed_sync, len) or (POWER_CUT, keep_unsynced, torn_pages,
    bit_flips_unsynced, bit_flips_synced, misdirected_writes, undo_dir_ops, garbled_sectors)."""
    a = A().u64(seed).bool(two_pages).bool(absolute)

    def put_append(x):
        kind, *f = x
        a.enum(kind, 4)
        if kind == ONE:
            t, skippable, length, fill = f
            a.u8(t).bool(skippable).u16(length).u8(fill)
        elif kind == BATCH:
            n, length, fill = f
            a.u8(n).u8(length).u8(fill)
        elif kind == NOWAIT:
            length, fill = f
            a.u8(length).u8(fill)

    a.vec(appends, put_append)
    kind, *f = end
    a.enum(kind, 3)
    if kind == ABANDON:
        failed_sync, length = f
        a.bool(failed_sync).u8(length)
    elif kind == POWER_CUT:
        keep, torn, flips_unsynced, flips_synced, misdirected, undo, garbled = f
        a.u8(keep).bool(torn).u8(flips_unsynced).u8(flips_synced).u8(misdirected).bool(undo)
        a.u8(garbled)

    def put_name(n):
        kind, *f = n
        a.enum(kind, 4)
        if kind != OTHER:
            a.u8(f[0])

    def put_edit(e):
        kind, *f = e
        a.enum(kind, 9)
        if kind == FLIP:
            a.u8(f[0]).u16(f[1]).u8(f[2])
        elif kind == WRITE:
            a.u8(f[0]).u16(f[1]).bytes_vec(f[2])
        elif kind == ZERO:
            a.u8(f[0]).u16(f[1]).u16(f[2])
        elif kind == ZERO_TAIL:
            a.u8(f[0]).u16(f[1])
        elif kind == COPY:
            a.u8(f[0]).u16(f[1]).u16(f[2]).u8(f[3])
        elif kind == COPY_ACROSS:
            a.u8(f[0]).u8(f[1]).u16(f[2]).u8(f[3])
        elif kind == REMOVE:
            a.u8(f[0])
        elif kind == RENAME:
            a.u8(f[0])
            put_name(f[1])
        elif kind == CREATE:
            put_name(f[0])
            a.u16(f[1]).bytes_vec(f[2])

    a.vec(edits, put_edit)
    return a.b


def wal_open():
    """Seeds for format 2: commit blocks from offset 4096 (one per 4 KiB page; an 8 KiB segment
    holds one), a mirror at the next 512 boundary after each group, a close marker after a
    clean close, the next segment's file made ahead all zero and header-less, recovery's
    `.wal.copy`. File index 0 is segment 1 (names are listed in order)."""
    # Enough records to roll an 8 KiB segment (one block each) many times.
    many = [(ONE, 1 + i % 5, i % 7 == 0, 40 + 13 * i, i) for i in range(20)] + [(BATCH, 7, 60, 3), (SYNC,)]
    small = [(ONE, 1, False, 40, i) for i in range(6)]  # 64-byte frames: mirror at 4096 + 512
    write("wal_open", "clean-close-rolls", wal_input(1, many))
    write("wal_open", "power-cut-torn", wal_input(
        2, many[:10] + [(NOWAIT, 200, 9)] * 6, end=(POWER_CUT, 128, True, 1, 0, 0, True, 1)))
    write("wal_open", "media-faults", wal_input(
        3, many, end=(POWER_CUT, 255, False, 0, 2, 1, False, 0), two_pages=True))
    # A process crash: the cache holds everything, the medium too (found durable, not copied).
    write("wal_open", "process-crash", wal_input(7, many + [(NOWAIT, 90, 4)] * 3, end=(ABANDON, False, 0)))
    # A process crash right after a failed sync: in the cache, not on the medium: copied.
    write("wal_open", "failed-sync-crash", wal_input(8, small, end=(ABANDON, True, 120), two_pages=True))
    # small in two-page segments: 3 blocks per 16 KiB segment, so segments 1 and 2 (+ the
    # prepared file of segment 3 made at the roll, when the fault storage makes it).
    # A record of segment 1's first block damaged, its mirror intact: repaired.
    write("wal_open", "edits-group", wal_input(4, small, two_pages=True, edits=[(FLIP, 0, 4096 + 30, 3)]))
    # The mirror of an intact group damaged, the next block confirms it: ignored.
    write("wal_open", "edits-mirror", wal_input(12, small, two_pages=True, edits=[(FLIP, 0, 4096 + 512 + 40, 5)]))
    write("wal_open", "edits-mirror-sector", wal_input(9, small, two_pages=True, end=(ABANDON, False, 0),
                                                      edits=[(ZERO, 1, 4096 + 512, 512)]))
    # Segment 2's last block cut to zeros after a process crash: a torn tail of the last
    # segment (nothing vouches for it).
    write("wal_open", "edits-tail", wal_input(13, small, two_pages=True, end=(ABANDON, False, 0),
                                             edits=[(ZERO_TAIL, 1, 3 * 4096)]))
    # A clean close's marker damaged (after 2 blocks of a two-page segment it is at 12288).
    write("wal_open", "edits-close-marker", wal_input(10, small[:2], two_pages=True, edits=[
        (FLIP, 0, 3 * 4096 + 12, 1)]))
    # Extra files around a two-segment log: a header-less prepared segment 3 (all zero,
    # segment length), a leftover copy, a spare of format 2's first release, a stray file.
    files = [(CREATE, (SEGMENT, 3), TWO_PAGE_SEGMENT_BYTES, b""), (CREATE, (COPY_FILE, 2), 4096, b"TWWALSEG"),
             (CREATE, (SPARE, 3), 4096, b""), (CREATE, (OTHER,), 100, b"manifest")]
    write("wal_open", "edits-files", wal_input(5, small, two_pages=True, edits=files))
    write("wal_open", "prepared-next-crash", wal_input(11, small, two_pages=True, end=(ABANDON, False, 0),
                                                      edits=files[:1]))
    write("wal_open", "prepared-wrong-length", wal_input(14, small, two_pages=True, end=(ABANDON, False, 0),
                                                        edits=[(CREATE, (SEGMENT, 3), 8192, b"")]))
    # A stray segment 0, a rename out of order, stale and misplaced records: refused or cut.
    write("wal_open", "edits-stray", wal_input(15, many, edits=[
        (CREATE, (SEGMENT, 0), 100, b"TWWALSEG"), (RENAME, 1, (SEGMENT, 5)),
        (COPY, 0, 512, 576, 6), (COPY_ACROSS, 0, 1, 512 + 4, 4)]))
    write("wal_open", "absolute-write", wal_input(6, many[:12], end=(POWER_CUT, 200, True, 0, 0, 0, True, 0),
                                                 edits=[(WRITE, 0, 4096 + 8, b"\x18\x00\x00\x00"), (REMOVE, 2)],
                                                 absolute=True))


# ---- engine_ops ----------------------------------------------------------------------------
(SCHEDULE, OP_BATCH, BATCH_NOWAIT, OP_SYNC, CANCEL, RESCHEDULE, ADVANCE, CLOCK_BACK, RUN_TIMERS,
 CLAIM, CLAIM_ALL, COMPLETE, COMPLETE_BATCH, FAIL, REOPEN, CRASH) = range(16)
PAST, NOW, SOON, LATER, DAYS = range(5)
MS, SECS, HOURS, STEP_DAYS = range(4)


def engine_input(seed, ops):
    a = A().u64(seed)

    def due(d):
        kind, *f = d
        a.enum(kind, 5)
        if kind in (PAST, SOON, LATER):
            a.u16(f[0])
        elif kind == DAYS:
            a.u8(f[0])

    def put_op(op):
        kind, *f = op
        a.enum(kind, 16)
        if kind == SCHEDULE:
            due(f[0])
            a.u8(f[1]).u8(f[2]).bool(f[3])
        elif kind == OP_BATCH:
            a.u8(f[0])
            due(f[1])
            a.u8(f[2])
        elif kind == BATCH_NOWAIT:
            a.u8(f[0])
            due(f[1])
        elif kind in (CANCEL, CLAIM, COMPLETE):
            a.u16(f[0])
        elif kind == RESCHEDULE:
            a.u16(f[0])
            due(f[1])
        elif kind == ADVANCE:
            a.enum(f[0], 4).u8(f[1])
        elif kind == CLOCK_BACK:
            a.u16(f[0])
        elif kind == COMPLETE_BATCH:
            a.vec(f[0], a.u16)
        elif kind == FAIL:
            a.u16(f[0]).u8(f[1])
        elif kind == CRASH:
            a.u8(f[0]).bool(f[1]).u8(f[2]).bool(f[3])

    a.vec(ops, put_op)
    return a.b


def engine_ops():
    work = [(SCHEDULE, (SOON, 500), 10, 7, False), (SCHEDULE, (PAST, 100), 0, 0, True),
            (OP_BATCH, 5, (LATER, 3), 100), (SCHEDULE, (DAYS, 3), 64, 1, False)]
    fire = [(ADVANCE, SECS, 5), (RUN_TIMERS,), (CLAIM_ALL,)]
    write("engine_ops", "lifecycle", engine_input(1, work + fire + [
        (COMPLETE, 0), (FAIL, 1, 12), (COMPLETE_BATCH, [2, 3, 3]), (CANCEL, 5), (RESCHEDULE, 4, (NOW,)),
        (RUN_TIMERS,), (REOPEN,), (RUN_TIMERS,), (CLAIM_ALL,), (COMPLETE, 0)]))
    write("engine_ops", "crash-unsynced", engine_input(2, work + [
        (BATCH_NOWAIT, 6, (SOON, 10)), (ADVANCE, SECS, 1), (RUN_TIMERS,), (CLAIM_ALL,),
        (CRASH, 128, True, 1, True), (RUN_TIMERS,), (CLAIM, 0), (COMPLETE, 0), (CRASH, 255, False, 0, False)]))
    write("engine_ops", "leases-expire", engine_input(3, work + fire + [
        (ADVANCE, SECS, 2), (RUN_TIMERS,), (CLAIM_ALL,), (COMPLETE, 0), (COMPLETE, 1),
        (ADVANCE, HOURS, 2), (RUN_TIMERS,), (CANCEL, 1), (SYNC,), (REOPEN,)]))
    write("engine_ops", "clock-steps", engine_input(4, work + [
        (ADVANCE, STEP_DAYS, 4), (CLOCK_BACK, 3000), (RUN_TIMERS,), (RESCHEDULE, 0, (PAST, 5)),
        (RUN_TIMERS,), (CRASH, 0, False, 0, True), (RUN_TIMERS,), (CLAIM_ALL,), (REOPEN,)]))
    write("engine_ops", "rolls", engine_input(5, [(SCHEDULE, (SOON, i * 37), 64, i, i % 2 == 0) for i in range(30)]
                                            + [(REOPEN,), (ADVANCE, SECS, 2), (RUN_TIMERS,), (CLAIM_ALL,)]))


if __name__ == "__main__":
    wal_record_decode()
    job_record_decode()
    wal_open()
    engine_ops()
