"""What every test file shares: the package on sys.path, the binary, a temporary directory per
test and clients that are always closed.

Timeouts here only guard against hangs; no test compares a duration with a fixed time.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
import unittest
from typing import Dict, Iterable, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
# The source tree under test, ahead of any installed copy.
if sys.path[:1] != [PACKAGE_ROOT]:
    sys.path.insert(0, PACKAGE_ROOT)

import timewheel  # noqa: E402

# The client logs a sidecar's death and its stderr as warnings; here deaths are on purpose.
# TIMEWHEEL_TEST_LOG=1 shows them.
if not os.environ.get("TIMEWHEEL_TEST_LOG"):
    logging.getLogger("timewheel").setLevel(logging.CRITICAL)


def binary() -> str:
    """The binary under test: $TIMEWHEEL_BIN, else timewheel on PATH. No binary is a failure,
    not a skip, so that a CI that forgot to build can not pass."""
    path = os.environ.get("TIMEWHEEL_BIN") or shutil.which("timewheel")
    if not path or not os.access(path, os.X_OK):
        raise RuntimeError("set TIMEWHEEL_BIN to the timewheel binary (cargo build, then "
                           "TIMEWHEEL_BIN=$PWD/target/debug/timewheel)")
    return path


#: Generous: only there so that a bug hangs no test run.
HANG_S = 30.0


def now_ms() -> float:
    """The test's own clock, in the unit of the protocol."""
    return time.time() * 1000.0


class SidecarTest(unittest.TestCase):
    """A fresh data directory per test; ``client()`` starts clients closed at the end."""

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="tw-py-")
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name
        self.data_dir = os.path.join(self.tmp, "data")

    def client(self, **options) -> timewheel.Client:
        options.setdefault("binary", binary())
        options.setdefault("request_timeout", HANG_S)
        options.setdefault("close_timeout", HANG_S)
        c = timewheel.Client(dir=options.pop("dir", self.data_dir), **options)
        self.addCleanup(c.close)
        return c

    def collect(self, client: timewheel.Client, ids: Iterable[str], *,
                complete: bool = False) -> Dict[str, List[timewheel.Job]]:
        """Reads fired jobs until every id in ``ids`` was seen at least once; returns all jobs
        read by id (others included). Checks each against the test's clock: never early."""
        want = set(ids)
        seen: Dict[str, List[timewheel.Job]] = {}
        deadline = time.monotonic() + HANG_S
        while want - seen.keys():
            left = deadline - time.monotonic()
            if left <= 0:
                self.fail(f"{len(want - seen.keys())} of {len(want)} jobs never fired, "
                          f"e.g. {sorted(want - seen.keys())[:5]}")
            job = client.next_fired(timeout=left)
            if job is None:
                continue
            self.check_not_early(job)
            seen.setdefault(job.id, []).append(job)
            if complete:
                job.complete_async()
        return seen

    def check_not_early(self, job: timewheel.Job) -> None:
        self.assertGreaterEqual(job.received_ms, job.due_ms, f"read before due: {job}")
        self.assertGreaterEqual(job.fired_ms, job.due_ms, f"fired before due: {job}")

    def drain(self, client: timewheel.Client, quiet_s: float) -> List[timewheel.Job]:
        """The jobs that fire until none has for ``quiet_s`` seconds."""
        jobs = []
        while True:
            job = client.next_fired(timeout=quiet_s)
            if job is None:
                return jobs
            self.check_not_early(job)
            jobs.append(job)


def wait_for(predicate, what: str, timeout: float = HANG_S, step: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step)


def results(futures) -> List[object]:
    """Each Future's value, or its exception."""
    out: List[object] = []
    for f in futures:
        exc = f.exception(HANG_S)
        out.append(exc if exc is not None else f.result())
    return out


def unique_decimal_ids(test: unittest.TestCase, ids: Iterable[object]) -> List[str]:
    ids = list(ids)
    for i in ids:
        test.assertIsInstance(i, str)
        test.assertTrue(i.isdigit(), i)
    test.assertEqual(len(set(ids)), len(ids), "an id was handed out twice")
    return ids  # type: ignore[return-value]


__all__ = ["binary", "now_ms", "SidecarTest", "HANG_S", "wait_for", "results",
           "unique_decimal_ids", "timewheel", "Optional"]
