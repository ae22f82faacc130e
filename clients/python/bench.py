#!/usr/bin/env python3
"""The sidecar as a Python caller sees it, through this client: two figures.

1. Pipelined schedule throughput: N durable schedules in flight at once (far-future jobs, so
   nothing fires meanwhile), from the first request written to the last id received. Twice:
   one ``schedule_async`` call per job, and ``schedule_many`` (one write for all).
2. Fire-to-callback lateness: jobs due at a steady rate; for each, the client's clock when the
   ``on_fired`` callback runs minus the job's due time. Each job is completed from the
   callback (``complete_async``) unless --auto-complete. Also counts jobs seen early (before
   their due time by this clock; must be 0).

Command (from the repository root, after ``cargo build``; clients/python/README.md has the
figures it printed):

    TIMEWHEEL_BIN=$PWD/target/debug/timewheel python3 clients/python/bench.py

(``cargo build --release`` and target/release/timewheel for the release binary.)

Options: --jobs N (throughput, default 100000), --fire-jobs M (default 5000), --rate R
(fires per second, default 1000), --auto-complete, --dir DIR (default: a temporary
directory, removed afterwards; put it on the disk you want measured).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timewheel import Client  # noqa: E402

HOUR_MS = 3_600_000


def percentile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[i]


def throughput(data_dir: str, n: int) -> None:
    with Client(dir=data_dir) as c:
        far = int(time.time() * 1000) + HOUR_MS
        start = time.perf_counter()
        futures = [c.schedule_async(due_ms=far) for _ in range(n)]
        for f in futures:
            f.result()
        one_by_one_s = time.perf_counter() - start

        start = time.perf_counter()
        c.schedule_many({"due_ms": far} for _ in range(n))
        many_s = time.perf_counter() - start
    print(f"pipelined schedule_async: {n} durable schedules in {one_by_one_s:.2f} s = "
          f"{n / one_by_one_s:,.0f} jobs/s")
    print(f"schedule_many:            {n} durable schedules in {many_s:.2f} s = "
          f"{n / many_s:,.0f} jobs/s")


def lateness(data_dir: str, m: int, rate: float, auto_complete: bool) -> None:
    late_ms = []
    read_ms = []  # when the reader thread read the event: the pipe's share of the lateness
    early = 0
    done = threading.Event()
    lock = threading.Lock()

    def on_fired(job):
        nonlocal early
        now = time.time() * 1000.0
        with lock:
            late_ms.append(now - job.due_ms)
            read_ms.append(job.received_ms - job.due_ms)
            if now < job.due_ms:
                early += 1
            if len(late_ms) == m:
                done.set()
        if not auto_complete:
            job.complete_async()

    with Client(dir=data_dir, on_fired=on_fired, auto_complete=auto_complete) as c:
        # Due times start a little ahead, so that scheduling them all is done before the first
        # fires, and then follow at the rate asked.
        start_ms = int(time.time() * 1000) + 1000
        step_ms = 1000.0 / rate
        c.schedule_many({"due_ms": start_ms + int(i * step_ms)} for i in range(m))
        if not done.wait(60 + m / rate):
            print(f"only {len(late_ms)} of {m} jobs fired in time", file=sys.stderr)
        stats = c.stats()
    late_ms.sort()
    read_ms.sort()
    mode = "--auto-complete" if auto_complete else "complete_async from the callback"
    print(f"fire-to-callback lateness, {len(late_ms)} jobs at {rate:g}/s ({mode}): "
          f"p50 {percentile(late_ms, 0.5):.2f} ms, p99 {percentile(late_ms, 0.99):.2f} ms, "
          f"p99.9 {percentile(late_ms, 0.999):.2f} ms, max {late_ms[-1]:.2f} ms, "
          f"early {early}")
    print(f"  due -> read by the client's reader thread (the rest is the callback hop): p50 "
          f"{percentile(read_ms, 0.5):.2f} ms, p99 {percentile(read_ms, 0.99):.2f} ms, "
          f"max {read_ms[-1]:.2f} ms")
    print(f"  (the sidecar's own due-to-ready-queue lateness: p99 "
          f"{stats['lateness_us_p99'] / 1000:.2f} ms, max {stats['lateness_us_max'] / 1000:.2f} ms)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--fire-jobs", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--auto-complete", action="store_true")
    ap.add_argument("--dir")
    args = ap.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="tw-py-bench-")
    try:
        print(f"python {sys.version.split()[0]}, data in {root}")
        throughput(os.path.join(root, "throughput"), args.jobs)
        lateness(os.path.join(root, "lateness"), args.fire_jobs, args.rate, args.auto_complete)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
