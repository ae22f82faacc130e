"""Starting and stopping: the context manager, close (EOF, then a kill if it hangs),
shutdown, restart of a running sidecar, and what requests get after the end."""

import os
import signal
import threading
import unittest

from _support import HANG_S, SidecarTest, binary, now_ms, timewheel


class LifecycleTest(SidecarTest):
    def test_with_closes_cleanly_and_the_jobs_stay(self):
        with timewheel.Client(dir=self.data_dir, binary=binary()) as c:
            job_id = c.schedule(delay_ms=3_600_000)
            self.assertTrue(c.alive)
        self.assertFalse(c.alive)
        self.assertEqual(c.returncode, 0)
        with self.assertRaises(timewheel.ClientClosed):
            c.schedule(delay_ms=1)
        self.assertIsNone(c.next_fired(timeout=HANG_S))  # ends, does not wait
        self.assertEqual(list(c.fired()), [])
        self.assertEqual(c.close(), 0)  # idempotent
        with timewheel.Client(dir=self.data_dir, binary=binary()) as d:
            self.assertTrue(d.cancel(job_id))

    def test_close_answers_what_was_sent_first(self):
        # EOF comes after the requests already written, so they are answered, not dropped.
        c = self.client()
        futures = c.schedule_many_async({"delay_ms": 3_600_000} for _ in range(2000))
        self.assertEqual(c.close(), 0)
        self.assertTrue(all(f.result(HANG_S).isdigit() for f in futures))

    def test_close_kills_a_sidecar_that_does_not_exit(self):
        c = self.client()
        os.kill(c.pid, signal.SIGSTOP)
        self.assertEqual(c.close(timeout=0.5), -signal.SIGKILL)
        self.assertFalse(c.alive)

    def test_shutdown_op_flushes_and_ends_the_client(self):
        c = self.client()
        job_id = c.schedule(delay_ms=3_600_000)
        c.shutdown()
        self.assertEqual(c.returncode, 0)
        with self.assertRaises(timewheel.ClientClosed):
            c.stats()
        d = self.client()
        self.assertTrue(d.cancel(job_id))

    def test_restart_of_a_running_sidecar_keeps_a_fired_iterator_going(self):
        # An iterator started before restart() keeps reading across it; the restart's clean
        # stop of the old process is not an end.
        c = self.client(auto_complete=True)
        got = set()
        done = threading.Event()
        ids = []

        def iterate():
            for job in c.fired():
                got.add(job.id)
                if len(ids) == 2 and got >= set(ids):
                    done.set()
                    return

        t = threading.Thread(target=iterate, daemon=True)
        t.start()
        ids.append(c.schedule(delay_ms=10))
        c.restart()
        # Due a little later, so the iterator sees it after ids is complete.
        ids.append(c.schedule(due_ms=int(now_ms()) + 200))
        self.assertTrue(done.wait(HANG_S))
        self.assertEqual(got, set(ids))
        self.assertEqual(c.generation, 2)

    def test_callback_mode_delivers_on_its_own_thread(self):
        # The callback calls the client (a blocking complete): it must not run on the reader
        # thread, which would then wait for its own reply.
        got = []
        all_in = threading.Event()
        c = None

        def on_fired(job):
            job.complete()
            got.append(job)
            if len(got) == 50:
                all_in.set()

        c = self.client(on_fired=on_fired)
        ids = c.schedule_many({"delay_ms": 20, "payload": str(i)} for i in range(50))
        self.assertTrue(all_in.wait(HANG_S))
        self.assertEqual(sorted(j.id for j in got), sorted(ids))
        for job in got:
            self.check_not_early(job)
        self.assertEqual(c.stats()["completed"], 50)
        with self.assertRaises(RuntimeError):
            c.next_fired(timeout=0)

    def test_binary_from_the_environment(self):
        old = os.environ.get(timewheel.BINARY_ENV)
        os.environ[timewheel.BINARY_ENV] = binary()
        try:
            with timewheel.Client(dir=self.data_dir) as c:
                self.assertEqual(c.binary, binary())
            os.environ[timewheel.BINARY_ENV] = os.path.join(self.tmp, "no-such-binary")
            with self.assertRaises(FileNotFoundError):
                timewheel.Client(dir=self.data_dir)
        finally:
            if old is None:
                del os.environ[timewheel.BINARY_ENV]
            else:
                os.environ[timewheel.BINARY_ENV] = old


if __name__ == "__main__":
    unittest.main()
