"""Error replies become typed exceptions: one class per kind of docs/sidecar.md, all under
TimewheelError, each carrying its kind, message and the request it refused."""

import unittest

from _support import HANG_S, SidecarTest, now_ms, results, timewheel

HOUR_MS = 3_600_000


class LiveErrorsTest(SidecarTest):
    def assert_refused(self, cls, call, *args, **kwargs):
        with self.assertRaises(cls) as caught:
            call(*args, **kwargs)
        e = caught.exception
        self.assertIsInstance(e, timewheel.TimewheelError)
        self.assertEqual(e.kind, cls.kind)
        self.assertTrue(e.message)
        return e

    def test_bad_requests(self):
        # What the sidecar can not read is bad_request, and serving goes on.
        c = self.client()
        e = self.assert_refused(timewheel.BadRequest, c.schedule, due_ms=-1)
        self.assertEqual(e.request["op"], "schedule")
        self.assertEqual(e.request["due_ms"], -1)
        self.assert_refused(timewheel.BadRequest, c.schedule, due_ms=1.5)
        self.assert_refused(timewheel.BadRequest, c.schedule, due_ms="5")
        self.assert_refused(timewheel.BadRequest, c.schedule)  # neither due_ms nor delay_ms
        self.assert_refused(timewheel.BadRequest, c.schedule, due_ms=1, delay_ms=1)
        self.assert_refused(timewheel.BadRequest, c.request, "frobnicate")
        self.assert_refused(timewheel.BadRequest, c.cancel, "abc")
        self.assert_refused(timewheel.BadRequest, c.cancel, "-5")
        self.assert_refused(timewheel.BadRequest, c.cancel, None)
        self.assert_refused(timewheel.BadRequest, c.reschedule, "1", -3)
        self.assert_refused(timewheel.BadRequest, c.complete, "1", attempt=-1)
        self.assertEqual(c.stats()["scheduled"], 0, "a refused request wrote something")

    def test_invalid_input(self):
        # Values the engine refuses write nothing.
        c = self.client()
        self.assert_refused(timewheel.InvalidInput, c.schedule, due_ms=int(now_ms()) + 10**15)
        self.assert_refused(timewheel.InvalidInput, c.schedule, delay_ms=HOUR_MS,
                            payload=b"x" * (100 << 10))  # over the 64 KiB default
        job_id = c.schedule(delay_ms=HOUR_MS)
        self.assert_refused(timewheel.InvalidInput, c.reschedule, job_id, 10**18)
        self.assertEqual(c.stats()["scheduled"], 1)

    def test_not_found(self):
        c = self.client()
        self.assert_refused(timewheel.NotFound, c.complete, "12345")
        self.assert_refused(timewheel.NotFound, c.fail, "12345", "why")
        job_id = c.schedule(delay_ms=HOUR_MS)
        self.assert_refused(timewheel.NotFound, c.complete, job_id)  # not delivered yet

    def test_refusals_in_a_pipeline_each_answer_their_own_request(self):
        # Good and bad requests in one write: the sidecar batches the schedules, and the
        # client must hand each Future its own answer.
        c = self.client()
        far = int(now_ms()) + HOUR_MS
        jobs = [{"due_ms": far}, {"due_ms": -1}, {"due_ms": far},
                {"due_ms": far + 10**15}, {"delay_ms": 5, "due_ms": 5}, {"due_ms": far}]
        got = results(c.schedule_many_async(jobs))
        self.assertTrue(got[0].isdigit() and got[2].isdigit() and got[5].isdigit(), got)
        self.assertIsInstance(got[1], timewheel.BadRequest)
        self.assertIsInstance(got[3], timewheel.InvalidInput)
        self.assertIsInstance(got[4], timewheel.BadRequest)
        self.assertEqual(got[3].request["due_ms"], far + 10**15)
        self.assertEqual(c.stats()["scheduled"], 3)
        with self.assertRaises(timewheel.BadRequest):
            c.schedule_many(jobs)

    def test_a_line_too_long_is_matched_by_order(self):
        # The sidecar answers an over-long line with "req": null; replies come in request
        # order, so it belongs to the oldest request in flight, and the ones behind it still
        # get their own replies.
        c = self.client(max_line_bytes=200)
        futures = [
            c.schedule_async(delay_ms=HOUR_MS, payload="short"),
            c.schedule_async(delay_ms=HOUR_MS, payload="y" * 300),
            c.schedule_async(delay_ms=HOUR_MS, payload="short too"),
            c.stats_async(),
        ]
        got = results(futures)
        self.assertTrue(got[0].isdigit(), got)
        self.assertIsInstance(got[1], timewheel.BadRequest)
        self.assertTrue(got[2].isdigit(), got)
        self.assertEqual(got[3]["scheduled"], 2)


class MappingTest(unittest.TestCase):
    def test_every_kind_of_the_protocol_has_its_class(self):
        # The kinds docs/sidecar.md lists; the io/corrupted/poisoned/... ones can not be made
        # to happen from here, so their mapping is checked on its own.
        kinds = ["bad_request", "invalid_input", "not_found", "no_space", "io", "corrupted",
                 "poisoned", "closed", "locked"]
        self.assertEqual(sorted(timewheel.KINDS), sorted(kinds))
        classes = set()
        for kind in kinds:
            e = timewheel.error_from_reply({"kind": kind, "message": "m"}, {"op": "x"})
            self.assertIs(type(e), timewheel.KINDS[kind])
            self.assertIsInstance(e, timewheel.TimewheelError)
            self.assertEqual((e.kind, e.message, e.request), (kind, "m", {"op": "x"}))
            classes.add(type(e))
        self.assertEqual(len(classes), len(kinds))

    def test_an_unknown_kind_is_still_a_timewheel_error(self):
        e = timewheel.error_from_reply({"kind": "from_the_future", "message": "m"})
        self.assertIs(type(e), timewheel.TimewheelError)
        self.assertEqual(e.kind, "from_the_future")
        self.assertIsInstance(timewheel.error_from_reply("nonsense"), timewheel.ProtocolError)

    def test_client_errors_share_the_base(self):
        for cls in (timewheel.SidecarDied, timewheel.ClientClosed, timewheel.ProtocolError):
            self.assertTrue(issubclass(cls, timewheel.TimewheelError))
            self.assertNotIn(cls.kind, timewheel.KINDS)


if __name__ == "__main__":
    unittest.main()
