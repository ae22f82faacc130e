"""CPU and wall time to write zeros over a fresh fallocated 64 MiB file, two ways: 16 KiB
buffered pwrites written back a MiB at a time (then populated for reading), and O_DIRECT
writes of 1 MiB then MADV_POPULATE_READ. docs/benchmarks.md, "schedule_batch across the
project's history". Usage: python3 benches/probes/zero_cost.py [DIR] (default: the current
directory; the file DIR/zerocost.tmp is removed at the end)."""
import os, mmap, resource, time, sys, ctypes
libc = ctypes.CDLL(None, use_errno=True)
def sfr(fd, off, n, fl):
    if libc.sync_file_range(fd, ctypes.c_longlong(off), ctypes.c_longlong(n), fl) != 0: raise OSError(ctypes.get_errno(), 'sfr')
SIZE = 64 << 20
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
def fresh(path):
    try: os.unlink(path)
    except FileNotFoundError: pass
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, SIZE)
    os.fsync(fd)
    return fd
def buffered(path):
    fd = fresh(path)
    z = bytes(16384)
    t, c = time.time(), cpu()
    for off in range(0, SIZE, 16384):
        os.pwrite(fd, z, off)
        if (off + 16384) % (1 << 20) == 0:
            sfr(fd, off + 16384 - (1 << 20), 1 << 20, 1 | 2 | 4)
    os.fdatasync(fd)
    m = mmap.mmap(fd, SIZE)
    m.madvise(22)  # MADV_POPULATE_READ (pages already cached)
    r = time.time() - t, cpu() - c
    m.close(); os.close(fd); return r
def direct(path):
    fd0 = fresh(path); os.close(fd0)
    fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    buf = mmap.mmap(-1, 1 << 20)  # page aligned zeros
    t, c = time.time(), cpu()
    for off in range(0, SIZE, 1 << 20):
        os.pwritev(fd, [buf], off)
    os.fdatasync(fd)
    os.close(fd)
    fd = os.open(path, os.O_RDWR)
    m = mmap.mmap(fd, SIZE)
    m.madvise(22)
    r = time.time() - t, cpu() - c
    m.close(); os.close(fd); return r
target = os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "zerocost.tmp")
for i in range(3):
    for name, f in (("buffered", buffered), ("direct+populate", direct)):
        wall, c = f(target)
        print(f"{name}: {wall*1e3:.0f} ms wall, {c*1e3:.0f} ms CPU")
os.unlink(target)
