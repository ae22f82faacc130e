"""Many requests in flight at once: every reply settles exactly its own request.

The proof of the matching is end to end: each job carries its own index as payload, so a
reply handed to the wrong Future would show as an id whose fired payload is another index.
"""

import threading
import unittest

from _support import HANG_S, SidecarTest, now_ms, unique_decimal_ids

N = 10_000


class PipeliningTest(SidecarTest):
    def test_ten_thousand_schedules_in_flight_each_get_their_own_id(self):
        c = self.client(auto_complete=True)
        due = int(now_ms()) + 1500
        futures = [c.schedule_async(due_ms=due + i % 500, payload=str(i)) for i in range(N)]
        ids = unique_decimal_ids(self, [f.result(HANG_S) for f in futures])
        seen = self.collect(c, ids)
        for i, job_id in enumerate(ids):
            (job,) = seen[job_id]  # exactly once: auto-complete, no redelivery
            self.assertEqual(job.payload, str(i))
            self.assertEqual(job.due_ms, due + i % 500)
        self.assertEqual(len(seen), N)

    def test_schedule_many_sends_one_write_and_keeps_the_order(self):
        c = self.client(auto_complete=True)
        due = int(now_ms()) + 300
        ids = unique_decimal_ids(self, c.schedule_many(
            {"due_ms": due, "payload": f"m{i}"} for i in range(N)))
        seen = self.collect(c, ids)
        for i, job_id in enumerate(ids):
            self.assertEqual([j.payload for j in seen[job_id]], [f"m{i}"])

    def test_threads_pipelining_at_once(self):
        # Four threads, each with many requests in flight of several kinds.
        c = self.client()
        far = int(now_ms()) + 3_600_000
        errors = []
        per_thread = {}

        def work(t):
            try:
                futs = [c.schedule_async(due_ms=far + t, payload=f"{t}") for _ in range(500)]
                ids = [f.result(HANG_S) for f in futs]
                cancels = [c.cancel_async(i) for i in ids[::2]]
                stats = c.stats_async()
                self.assertTrue(all(f.result(HANG_S) for f in cancels))
                self.assertIsInstance(stats.result(HANG_S)["scheduled"], int)
                per_thread[t] = ids
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(HANG_S)
        self.assertEqual(errors, [])
        unique_decimal_ids(self, [i for ids in per_thread.values() for i in ids])
        stats = c.stats()
        self.assertEqual((stats["scheduled"], stats["cancelled"]), (1000, 1000))


if __name__ == "__main__":
    unittest.main()
