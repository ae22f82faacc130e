"""Fired events: every due job arrives, once, never before its due time by this test's own
clock, decoded; and the ways of waiting for them end as they say."""

import os
import stat
import sys
import textwrap
import unittest

from _support import HANG_S, SidecarTest, now_ms, timewheel


class FiredTest(SidecarTest):
    def test_due_jobs_fire_once_and_never_early_by_the_tests_clock(self):
        # Due times spread over most of a second from now, as the test reads its clock; each
        # event is checked on arrival (collect) against the due time the test chose.
        c = self.client(auto_complete=True)
        t0 = int(now_ms())
        want = {}
        for i in range(400):
            due = t0 + 50 + (i * 7919) % 800  # scattered, not in schedule order
            want[c.schedule_async(due_ms=due, payload=f"p{i}")] = (due, f"p{i}")
        want = {f.result(HANG_S): v for f, v in want.items()}
        seen = self.collect(c, want)
        for job_id, (due, payload) in want.items():
            (job,) = seen[job_id]
            self.assertEqual((job.due_ms, job.payload, job.attempt), (due, payload, 1))
            self.assertGreaterEqual(job.received_ms, due)
        # And nothing more comes (auto-complete: no redelivery).
        self.assertEqual(self.drain(c, 0.3), [])

    def test_a_future_job_is_not_delivered_while_its_time_has_not_come(self):
        # Watch the stream until the job arrives: every read before the due time must be
        # empty-handed (collect's check does the rest).
        c = self.client(auto_complete=True)
        due = int(now_ms()) + 500
        job_id = c.schedule(due_ms=due)
        while True:
            job = c.next_fired(timeout=0.02)
            if job is not None:
                self.assertEqual(job.id, job_id)
                self.assertGreaterEqual(job.received_ms, due)
                break
            self.assertLess(now_ms(), due + HANG_S * 1000, "never fired")  # no hang

    def test_fired_with_a_timeout_ends_when_nothing_comes(self):
        c = self.client()
        c.schedule(delay_ms=3_600_000)
        self.assertEqual(list(c.fired(timeout=0.2)), [])
        self.assertIsNone(c.next_fired(timeout=0))

    def test_job_fields_and_extra(self):
        c = self.client()
        job_id = c.schedule(delay_ms=5, payload="x")
        job = self.collect(c, [job_id])[job_id][0]
        self.assertEqual(job.extra, {})
        self.assertEqual(job.generation, 1)
        self.assertIn(job_id, repr(job))
        job.complete()


FAKE = textwrap.dedent("""\
    import json, sys
    # A sidecar that answers the client's first request, then breaks the protocol.
    first = json.loads(sys.stdin.readline())
    print(json.dumps({"req": first["req"], "ok": True, "stats": {}}), flush=True)
    line = sys.stdin.readline()
    print(MODE, flush=True)
    sys.stdin.read()
""")


class ProtocolViolationTest(SidecarTest):
    """Against a fake sidecar: a stream that breaks the protocol must end in errors, never in a
    reply handed to the wrong request or a hang."""

    def fake(self, mode: str) -> str:
        path = os.path.join(self.tmp, f"fake-{len(mode)}.py")
        with open(path, "w") as f:
            f.write(f"#!{sys.executable}\nMODE = {mode!r}\n" + FAKE)
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        return path

    def test_a_line_that_is_not_json_kills_the_sidecar_and_fails_the_requests(self):
        c = self.client(binary=self.fake("garbage"))
        with self.assertRaises(timewheel.SidecarDied) as caught:
            c.schedule(delay_ms=1)
        self.assertIn("not JSON", caught.exception.message)

    def test_a_reply_to_no_request_kills_the_sidecar(self):
        c = self.client(binary=self.fake('{"req": 999, "ok": true, "id": "1"}'))
        with self.assertRaises(timewheel.SidecarDied) as caught:
            c.schedule(delay_ms=1)
        self.assertIn("no request", caught.exception.message)

    def test_a_reply_without_its_field_is_a_protocol_error(self):
        c = self.client(binary=self.fake('{"req": 2, "ok": true}'))
        with self.assertRaises(timewheel.ProtocolError):
            c.schedule(delay_ms=1)


if __name__ == "__main__":
    unittest.main()
