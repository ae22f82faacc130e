"""Each request of the protocol through the client, blocking and as a Future, against the
real sidecar: what it returns, and what the jobs then do."""

import concurrent.futures
import unittest

from _support import HANG_S, SidecarTest, now_ms, results, timewheel, unique_decimal_ids

HOUR_MS = 3_600_000


class ScheduleTest(SidecarTest):
    def test_schedule_returns_decimal_string_ids_blocking_and_as_futures(self):
        # Ids are strings of digits (the protocol's rule), never repeated, from either form.
        c = self.client()
        blocking = [c.schedule(due_ms=int(now_ms()) + HOUR_MS) for _ in range(20)]
        futures = [c.schedule_async(delay_ms=HOUR_MS) for _ in range(20)]
        for f in futures:
            self.assertIsInstance(f, concurrent.futures.Future)
        unique_decimal_ids(self, blocking + [f.result(HANG_S) for f in futures])
        self.assertEqual(c.stats()["scheduled"], 40)

    def test_payloads_come_back_with_the_type_they_were_scheduled_with(self):
        # str goes as text, bytes as payload_b64; the fired Job gives back the same value.
        c = self.client(auto_complete=True)
        sent = {
            "text": "héllo ✓ \"quoted\"\nsecond line",
            "empty": "",
            "binary": bytes(range(256)) + b"\n\x00",
            "empty-bytes": b"",
        }
        ids = {c.schedule(delay_ms=20, payload=p): name for name, p in sent.items()}
        none_id = c.schedule(delay_ms=20)
        seen = self.collect(c, list(ids) + [none_id])
        for job_id, name in ids.items():
            got = seen[job_id][0].payload
            self.assertEqual(type(got), type(sent[name]), name)
            self.assertEqual(got, sent[name], name)
        self.assertEqual(seen[none_id][0].payload, "")

    def test_a_payload_of_another_type_is_refused_before_sending(self):
        c = self.client()
        with self.assertRaises(TypeError):
            c.schedule(delay_ms=1, payload=42)
        with self.assertRaises(TypeError):
            c.schedule(delay_ms=1, op="cancel")
        with self.assertRaises(ValueError):  # NaN is not JSON
            c.schedule(due_ms=float("nan"))
        self.assertEqual(c.stats()["scheduled"], 0)  # and the pipe is still in step


class CancelRescheduleTest(SidecarTest):
    def test_cancel_says_whether_it_took_effect_and_a_cancelled_job_never_fires(self):
        c = self.client(auto_complete=True)
        doomed = c.schedule(delay_ms=150, payload="doomed")
        witness = c.schedule(delay_ms=400, payload="witness")
        self.assertTrue(c.cancel(doomed))
        self.assertFalse(c.cancel(doomed))  # already cancelled
        self.assertFalse(c.cancel_async("987654321").result(HANG_S))  # unknown
        seen = self.collect(c, [witness])
        self.assertNotIn(doomed, seen)
        self.assertFalse(c.cancel(witness))  # fired and completed
        self.assertEqual(c.stats()["cancelled"], 1)

    def test_reschedule_moves_a_job_and_it_fires_at_its_new_time(self):
        c = self.client(auto_complete=True)
        job_id = c.schedule(delay_ms=HOUR_MS, payload="moved")
        new_due = int(now_ms()) + 200
        self.assertTrue(c.reschedule(job_id, new_due))
        job = self.collect(c, [job_id])[job_id][0]
        self.assertEqual(job.due_ms, new_due)
        self.assertGreaterEqual(job.received_ms, new_due)
        self.assertFalse(c.reschedule_async(job_id, new_due + HOUR_MS).result(HANG_S))
        self.assertFalse(c.reschedule("987654321", new_due))


class CompleteFailTest(SidecarTest):
    def test_complete_and_fail_finish_a_delivery_once(self):
        c = self.client()
        ok_id = c.schedule(delay_ms=10, payload="ok")
        bad_id = c.schedule(delay_ms=10, payload="bad")
        seen = self.collect(c, [ok_id, bad_id])
        seen[ok_id][0].complete()
        seen[bad_id][0].fail("boom")
        # A second finish of the same delivery finds nothing to finish.
        with self.assertRaises(timewheel.NotFound):
            seen[ok_id][0].complete()
        with self.assertRaises(timewheel.NotFound):
            c.fail(bad_id, "again")
        stats = c.stats()
        self.assertEqual((stats["completed"], stats["failed"], stats["running"]), (1, 1, 0))

    def test_the_attempt_fences_off_a_stale_delivery(self):
        # With a short lease, an unfinished job is delivered again with attempt + 1; the old
        # delivery's complete (which passes its attempt) is refused, the new one's is taken.
        c = self.client(lease_ms=300)
        job_id = c.schedule(delay_ms=10)
        jobs = []
        while len(jobs) < 2:
            job = c.next_fired(timeout=HANG_S)
            self.assertIsNotNone(job, "no redelivery")
            self.assertEqual(job.id, job_id)
            jobs.append(job)
        self.assertEqual([j.attempt for j in jobs], [1, 2])
        with self.assertRaises(timewheel.NotFound):
            jobs[0].complete()
        jobs[1].complete_async().result(HANG_S)
        self.assertEqual(c.stats()["completed"], 1)


class StatsAndGenericTest(SidecarTest):
    def test_stats_has_the_counts_by_state(self):
        c = self.client()
        c.schedule(delay_ms=HOUR_MS)
        stats = c.stats_async().result(HANG_S)
        for key in ("scheduled", "ready", "running", "completed", "cancelled", "failed"):
            self.assertIsInstance(stats[key], int, key)
        self.assertEqual(stats["scheduled"], 1)

    def test_request_sends_any_op_and_returns_the_whole_reply(self):
        c = self.client()
        reply = c.request("stats")
        self.assertEqual(set(reply), {"stats"})
        job_id = c.request("schedule", delay_ms=HOUR_MS, unknown_field=[1, 2])["id"]
        self.assertTrue(c.cancel(job_id))

    def test_futures_can_not_be_cancelled_once_sent(self):
        # The request is on its way; Future.cancel must not pretend otherwise.
        c = self.client()
        f = c.schedule_async(delay_ms=HOUR_MS)
        self.assertFalse(f.cancel())
        self.assertTrue(f.result(HANG_S).isdigit())

    def test_int_ids_are_sent_as_decimal_strings(self):
        c = self.client()
        job_id = c.schedule(delay_ms=HOUR_MS)
        self.assertTrue(c.cancel(int(job_id)))
        self.assertEqual(results([c.cancel_async(int(job_id))]), [False])


if __name__ == "__main__":
    unittest.main()
