#!/usr/bin/env python3
"""What one small durable commit costs the disk, by how the file was prepared and written.

Spot checks behind the WAL storage's choices (wal/src/storage/mmap.rs, "Page-sized folios,
written blocks"). Standard library only; Linux; run from a directory on the disk to test:

    python3 benches/probes/writeback.py [DIR]

Each variant prepares a 64 MiB file, then commits 640 bytes into a fresh page 2,000 times,
each followed by a sync of that page, and prints the time per commit and the bytes and write
requests the device saw per commit (/sys/block/*/stat of the file's device). Then it times
syncs from 1 to 4 threads at once, to see whether the device overlaps them.
"""
import mmap
import os
import sys
import threading
import time

SIZE = 64 << 20
REC = 640
N = 2000
MADV_POPULATE_READ = 22
MADV_POPULATE_WRITE = 23


def device_stat(path):
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    for name in os.listdir("/sys/block"):
        for cand in [name] + [p for p in os.listdir(f"/sys/block/{name}") if p.startswith(name)]:
            base = f"/sys/block/{name}" + ("" if cand == name else f"/{cand}")
            try:
                if open(f"{base}/dev").read().strip() == f"{major}:{minor}":
                    return f"{base}/stat"
            except OSError:
                pass
    return None


def counters(stat):
    if stat is None:
        return (0, 0)
    f = open(stat).read().split()
    return int(f[4]), int(f[6])  # writes completed, sectors written


def prepared(path, how):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    if how == "fallocate":
        os.posix_fallocate(fd, 0, SIZE)
    else:
        chunk = 4096 if how == "zeros in pages" else 1 << 20
        z = b"\0" * chunk
        for off in range(0, SIZE, chunk):
            os.pwrite(fd, z, off)
    os.fsync(fd)
    return fd


def variant(path, stat, name, how, write, read_back=False, random=False):
    fd = prepared(path, how)
    if read_back:  # as recovery does after a restart: cache dropped, the file read back
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if random:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for off in range(0, SIZE, 1 << 20):
            os.pread(fd, 1 << 20, off)
    m = mmap.mmap(fd, SIZE)
    w0, s0 = counters(stat)
    t0 = time.perf_counter()
    for i in range(N):
        off = 4096 + i * 4096
        if write == "map":
            m[off : off + REC] = b"y" * REC
        else:
            os.pwrite(fd, b"y" * REC, off)
        m.flush(off, 4096)
    el = time.perf_counter() - t0
    w1, s1 = counters(stat)
    print(
        f"{name:<52} {el / N * 1e6:5.0f} us/commit  {(s1 - s0) / N / 2:7.1f} KiB and "
        f"{(w1 - w0) / N:.2f} writes per commit"
    )
    m.close()
    os.close(fd)
    os.unlink(path)


def parallel(path):
    fd = prepared(path, "zeros in pages")
    m = mmap.mmap(fd, SIZE)

    def worker(k, nt, n):
        for i in range(n):
            off = ((i * nt + k) % 16000) * 4096 + 4096
            m[off : off + REC] = b"x" * REC
            m.flush(off, 4096)

    for nt in (1, 2, 4):
        n = 1000
        ts = [threading.Thread(target=worker, args=(k, nt, n)) for k in range(nt)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        el = time.perf_counter() - t0
        print(f"syncs from {nt} thread(s) at once: {nt * n / el:6.0f} syncs/s in all")
    m.close()
    os.close(fd)
    os.unlink(path)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    path = os.path.join(d, f"writeback-probe-{os.getpid()}")
    open(path, "w").close()
    stat = device_stat(path)
    os.unlink(path)
    if stat is None:
        print("(no block device found for this directory: bytes not counted)")
    variant(path, stat, "fallocate, written through the map", "fallocate", "map")
    variant(path, stat, "fallocate, pwrite", "fallocate", "pwrite")
    variant(path, stat, "zeros in 1 MiB writes, written through the map", "zeros in MiB", "map")
    variant(path, stat, "zeros in 1 MiB writes, pwrite", "zeros in MiB", "pwrite")
    variant(path, stat, "zeros one page per write, through the map", "zeros in pages", "map")
    variant(path, stat, "...then cache dropped and read back, through the map", "zeros in pages", "map", True)
    variant(path, stat, "...the same read back with POSIX_FADV_RANDOM", "zeros in pages", "map", True, True)
    parallel(path)


if __name__ == "__main__":
    main()
