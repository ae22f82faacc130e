"""kill -9 of the sidecar: requests in flight fail promptly with SidecarDied, the client can be
restarted (or a new one opened on the directory), and every acknowledged change survives."""

import os
import signal
import threading
import time
import unittest

from _support import HANG_S, SidecarTest, now_ms, results, timewheel, unique_decimal_ids


class KillTest(SidecarTest):
    def test_acknowledged_changes_survive_kill_9_and_restart(self):
        # Before the kill: jobs completed, jobs cancelled, jobs pending, and a burst of
        # schedules in flight at the moment of the kill. After restart(): every acknowledged
        # pending job fires (never early), no completed or cancelled one does, and no id is
        # handed out again.
        c = self.client()
        t0 = int(now_ms())
        early = c.schedule_many({"due_ms": t0 + 50, "payload": f"early {i}"} for i in range(200))
        cancelled = c.schedule_many({"due_ms": t0 + 900} for _ in range(100))
        late = c.schedule_many({"due_ms": t0 + 1200, "payload": f"late {i}"} for i in range(2000))
        self.assertTrue(all(c.cancel_async(i).result(HANG_S) for i in cancelled))
        for jobs in self.collect(c, early).values():
            jobs[0].complete()
        burst = c.schedule_many_async({"delay_ms": 300, "payload": f"burst {i}"}
                                      for i in range(1000))
        os.kill(c.pid, signal.SIGKILL)
        acked = []
        for outcome in results(burst):
            if isinstance(outcome, str):
                acked.append(outcome)
            else:
                self.assertIsInstance(outcome, timewheel.SidecarDied)
        self.assertEqual(c.returncode, -signal.SIGKILL)
        # Events the first sidecar printed before it died (late jobs, on a slow machine):
        # read and dropped, so that what follows is only what the second one delivers. The
        # read ends with the death.
        with self.assertRaises(timewheel.SidecarDied):
            while c.next_fired(timeout=HANG_S) is not None:
                pass
            self.fail("the events of the killed sidecar ended without SidecarDied")

        c.restart()
        self.assertTrue(c.alive)
        self.assertEqual(c.generation, 2)
        seen = self.collect(c, late + acked)
        self.assertEqual({j.generation for js in seen.values() for j in js}, {2})
        for i, job_id in enumerate(late):
            self.assertEqual(seen[job_id][-1].payload, f"late {i}")
        # The cancelled ones were due before the late ones, which all fired: they would have.
        for job_id in early + cancelled:
            self.assertNotIn(job_id, seen)
        fresh = c.schedule_many({"delay_ms": 3_600_000} for _ in range(100))
        unique_decimal_ids(self, early + cancelled + late + acked + fresh)

    def test_a_new_client_on_the_same_directory_finds_the_jobs(self):
        c = self.client()
        ids = c.schedule_many({"delay_ms": 200, "payload": str(i)} for i in range(500))
        os.kill(c.pid, signal.SIGKILL)
        c.close()
        d = self.client()
        seen = self.collect(d, ids, complete=True)
        self.assertEqual(sorted(seen[i][0].payload for i in ids),
                         sorted(str(i) for i in range(500)))

    def test_requests_in_flight_fail_promptly_with_sidecar_died(self):
        # A stopped sidecar holds the requests unanswered in its pipe; the kill must fail every
        # one of them, wake an iterator waiting for events, and refuse later requests at once.
        c = self.client()
        os.kill(c.pid, signal.SIGSTOP)
        futures = c.schedule_many_async({"delay_ms": 100} for _ in range(300))
        futures.append(c.stats_async())
        futures.append(c.cancel_async("1"))
        time.sleep(0.1)
        self.assertFalse(any(f.done() for f in futures))
        iterated = []

        def iterate():
            try:
                for job in c.fired():
                    iterated.append(job)
            except BaseException as e:
                iterated.append(e)

        t = threading.Thread(target=iterate)
        t.start()
        os.kill(c.pid, signal.SIGKILL)
        for outcome in results(futures):
            self.assertIsInstance(outcome, timewheel.SidecarDied)
            self.assertEqual(outcome.returncode, -signal.SIGKILL)
        t.join(HANG_S)
        self.assertFalse(t.is_alive())
        self.assertEqual(len(iterated), 1)
        self.assertIsInstance(iterated[0], timewheel.SidecarDied)
        self.assertFalse(c.alive)
        with self.assertRaises(timewheel.SidecarDied):
            c.schedule(delay_ms=10)
        with self.assertRaises(timewheel.SidecarDied):
            c.next_fired(timeout=HANG_S)
        c.restart()
        job_id = c.schedule(delay_ms=10)
        self.assertEqual(self.collect(c, [job_id])[job_id][0].id, job_id)

    def test_on_died_is_told(self):
        died = []
        event = threading.Event()

        def on_died(e):
            died.append(e)
            event.set()

        c = self.client(on_died=on_died)
        os.kill(c.pid, signal.SIGKILL)
        self.assertTrue(event.wait(HANG_S))
        self.assertIsInstance(died[0], timewheel.SidecarDied)

    def test_a_locked_directory_fails_the_start_with_the_reason(self):
        self.client()
        with self.assertRaises(timewheel.SidecarDied) as caught:
            self.client()
        self.assertEqual(caught.exception.returncode, 1)
        self.assertIn("locked", caught.exception.stderr)


if __name__ == "__main__":
    unittest.main()
