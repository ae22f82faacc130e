"""One sidecar process and the requests in flight to it.

A ``Client`` runs one ``Session`` at a time; ``Client.restart()`` ends one and starts the next.
Keeping each process's pending requests in its own session means a reader thread that is
still winding down after a death can never touch the requests of the process that replaced it.

Threads and locks:
- the caller's threads write requests under ``_write_lock``, and register them in
  ``_pending`` (under ``_state``) in the same order as they write them: the sidecar answers in
  request order, which is how a reply with ``"req":null`` (a line it could not read) is
  matched to the oldest request in flight;
- the *reader* thread reads stdout, takes replies out of ``_pending`` under ``_state`` only
  (never ``_write_lock``), so a writer blocked on a full stdin pipe can not stop the reader
  from draining stdout, which would deadlock both processes;
- the *stderr* thread drains stderr into a short tail (for ``SidecarDied`` messages) and the
  ``timewheel.sidecar`` logger, so that a chatty sidecar never blocks on a full stderr pipe.

A request is resolved by whoever removes it from ``_pending``: the reader for a reply, the
reader at EOF for a death, or a writer whose write failed. So each Future is settled exactly
once, whatever races.
"""

from __future__ import annotations

import collections
import json
import logging
import subprocess
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple, Union

from .errors import (ClientClosed, ProtocolError, SidecarDied, TimewheelError,
                     error_from_reply)
from .job import job_from_event

log = logging.getLogger("timewheel")
sidecar_log = logging.getLogger("timewheel.sidecar")

#: Turns an ok reply into the value of the request's Future.
Extract = Callable[[Dict[str, Any]], Any]
#: One request to send: its fields (without ``req``) and how to read its ok reply.
Message = Tuple[Dict[str, Any], Extract]

#: Requests registered and written at a time by one submit (see Session.submit).
WRITE_SLICE_REQUESTS = 1024
#: Compact, and refusing NaN and infinities, which are not JSON (json.dumps would write them).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)

#: Stderr lines kept for the message of a SidecarDied.
STDERR_TAIL_LINES = 40
#: How long the reader waits, after stdout ended, for the process to be gone. A process that
#: closed its stdout but lives on is of no use to the client, so it is killed then.
EXIT_AFTER_EOF_S = 5.0


class _One:
    """A request in flight whose answer settles its own Future."""

    __slots__ = ("future", "request", "extract")

    def __init__(self, future: Future, request: Dict[str, Any], extract: Extract) -> None:
        self.future = future
        self.request = request
        self.extract = extract

    def resolve(self, value: Any) -> None:
        self.future.set_result(value)

    def reject(self, exc: BaseException) -> None:
        self.future.set_exception(exc)


class _Together:
    """Requests sent together whose answers settle one Future, with a list of each one's value
    or exception, once all are in. Cheaper than a Future each (building one costs more than
    the rest of a request's work in this client), for callers that want them all anyway."""

    __slots__ = ("future", "results", "_left", "_lock")

    def __init__(self, n: int) -> None:
        self.future = _running_future()
        self.results: List[Any] = [None] * n
        self._left = n
        self._lock = threading.Lock()
        if n == 0:
            self.future.set_result(self.results)

    def settle(self, index: int, outcome: Any) -> None:
        self.results[index] = outcome
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self.future.set_result(self.results)


class _InTogether:
    """One request of a ``_Together``."""

    __slots__ = ("together", "index", "request", "extract")

    def __init__(self, together: _Together, index: int, request: Dict[str, Any],
                 extract: Extract) -> None:
        self.together = together
        self.index = index
        self.request = request
        self.extract = extract

    def resolve(self, value: Any) -> None:
        self.together.settle(self.index, value)

    def reject(self, exc: BaseException) -> None:
        self.together.settle(self.index, exc)


_Pending = Union[_One, _InTogether]


class Session:
    """A running ``timewheel serve`` and its threads. Created by ``Client``."""

    def __init__(self, argv: Sequence[str], *, env: Optional[Dict[str, str]], generation: int,
                 on_event: Callable[[Dict[str, Any], float, int], None],
                 on_end: Callable[["Session", Optional[SidecarDied]], None]) -> None:
        self.generation = generation
        self._on_event = on_event
        self._on_end = on_end
        self._write_lock = threading.Lock()
        self._state = threading.Lock()
        self._pending: Dict[int, _Pending] = {}
        self._next_req = 1
        # "running" -> "closing" (we asked it to stop) -> "closed"; or "running" -> "dead".
        self._status = "running"
        self._death: Optional[SidecarDied] = None
        self._fatal: Optional[str] = None  # a protocol violation that made us kill it
        self._stderr_tail: Deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env,
            # Its own session: a Ctrl-C meant for this Python program does not stop the
            # sidecar behind the client's back; the client closes it (EOF) on the way out,
            # and if this process dies the pipe closes and the sidecar exits by itself.
            start_new_session=True)
        self._stderr_thread = threading.Thread(
            target=self._drain_stderr, name=f"timewheel-stderr-{self.proc.pid}", daemon=True)
        self._reader = threading.Thread(
            target=self._read, name=f"timewheel-reader-{self.proc.pid}", daemon=True)
        self._stderr_thread.start()
        self._reader.start()

    # ---- requests ---------------------------------------------------------------------------

    def submit(self, messages: Sequence[Message]) -> List[Future]:
        """Sends the requests and returns one Future each, in order. Never raises for the
        sidecar's state: a closed or dead session gives failed Futures."""
        futures: List[Future] = []

        def entry(i: int, fields: Dict[str, Any], extract: Extract) -> _Pending:
            fut = _running_future()
            futures.append(fut)
            return _One(fut, fields, extract)

        self._send_all(messages, entry)
        return futures

    def submit_together(self, messages: Sequence[Message]) -> Future:
        """Sends the requests; one Future for all, whose value is the list of each one's value
        or exception (an instance, not raised), in order."""
        together = _Together(len(messages))
        self._send_all(messages, lambda i, fields, extract: _InTogether(together, i, fields,
                                                                         extract))
        return together.future

    def _send_all(self, messages: Sequence[Message],
                  entry: Callable[[int, Dict[str, Any], Extract], _Pending]) -> None:
        # Encoded before anything is registered, so a value JSON can not carry (NaN, an
        # object) raises here and leaves nothing in flight.
        encode = _ENCODER.encode
        bodies = [encode(fields) for fields, _ in messages]
        # Many requests go in slices, each registered and written before the next is built:
        # the sidecar starts on the first while this thread prepares the rest, and a slice is
        # about what it takes as one batch anyway.
        for lo in range(0, len(messages), WRITE_SLICE_REQUESTS):
            hi = min(lo + WRITE_SLICE_REQUESTS, len(messages))
            self._send(lo, messages[lo:hi], bodies[lo:hi], entry)

    def _send(self, offset: int, messages: Sequence[Message], bodies: Sequence[str],
              entry: Callable[[int, Dict[str, Any], Extract], _Pending]) -> None:
        # Built outside the state lock, which the reader needs for every reply.
        entries = [entry(offset + i, fields, extract)
                   for i, (fields, extract) in enumerate(messages)]
        with self._write_lock:
            with self._state:
                refusal = self._refusal_locked()
                if refusal is None:
                    first_req = self._next_req
                    self._next_req += len(messages)
                    pending = self._pending
                    parts = []
                    req = first_req
                    for e, body in zip(entries, bodies):
                        pending[req] = e
                        # The client owns "req": spliced in front of the fields (which always
                        # hold "op", so the object is never empty).
                        parts.append(f'{{"req":{req},{body[1:]}\n')
                        req += 1
            if refusal is not None:
                for e in entries:
                    e.reject(refusal(e.request))
                return
            data = "".join(parts).encode("utf-8")
            try:
                stdin = self.proc.stdin
                assert stdin is not None
                stdin.write(data)
                stdin.flush()
            except OSError as e:
                # EPIPE: the sidecar no longer reads, so it is exiting; its stdout ends with it
                # and the reader settles these requests then, as SidecarDied with the exit
                # status and stderr (known only once the process is gone) or ClientClosed.
                log.debug("timewheel: writing to the sidecar failed: %s", e)
            except ValueError:
                # stdin closed under us; close() takes the write lock first, so this is a bug.
                self._fail_unanswered(range(first_req, first_req + len(messages)))
                raise

    def _refusal_locked(self) -> Optional[Callable[[Dict[str, Any]], TimewheelError]]:
        if self._status == "running":
            return None
        if self._status == "dead" and self._death is not None:
            death = self._death
            return lambda fields: SidecarDied(death.message, returncode=death.returncode,
                                              stderr=death.stderr, request=fields)
        return lambda fields: ClientClosed("the client is closed", request=fields)

    def _fail_unanswered(self, reqs: range) -> None:
        with self._state:
            taken = [self._pending.pop(r) for r in reqs if r in self._pending]
        for p in taken:
            p.reject(ClientClosed("the client was closed while sending", request=p.request))

    # ---- the reader -------------------------------------------------------------------------

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            for line in stdout:
                received_ms = time.time() * 1000.0
                try:
                    obj = json.loads(line)
                except ValueError:
                    self._violation(f"a stdout line that is not JSON: {line[:200]!r}")
                    continue
                if not isinstance(obj, dict):
                    self._violation(f"a stdout line that is not an object: {line[:200]!r}")
                elif "event" in obj:
                    self._on_event(obj, received_ms, self.generation)
                else:
                    self._answer(obj)
        except Exception:  # noqa: BLE001 - whatever broke, the requests must not hang
            log.exception("timewheel: the reader thread failed; killing the sidecar")
            self.kill()
        finally:
            stdout.close()
            self._ended()

    def _answer(self, reply: Dict[str, Any]) -> None:
        req = reply.get("req")
        with self._state:
            if req is None:
                # A line the sidecar could not read (too long): replies come in request order,
                # so it answers the oldest request in flight.
                key = next(iter(self._pending), None)
                pending = self._pending.pop(key) if key is not None else None
            else:
                pending = self._pending.pop(req, None) if isinstance(req, int) else None
            if (pending is not None and pending.request.get("op") == "shutdown"
                    and reply.get("ok") is True and self._status == "running"):
                # The sidecar exits right after this reply: that EOF is not a death.
                self._status = "closing"
        if pending is None:
            self._violation(f"a reply to no request in flight: {reply!r}")
            return
        ok = reply.get("ok")
        if ok is True:
            try:
                value = pending.extract(reply)
            except (KeyError, TypeError, ValueError):
                pending.reject(ProtocolError(
                    f"reply without its result: {reply!r}", request=pending.request))
                return
            pending.resolve(value)
        elif ok is False:
            pending.reject(error_from_reply(reply.get("error"), pending.request))
        else:
            pending.reject(ProtocolError(
                f"reply without a boolean ok: {reply!r}", request=pending.request))

    def _violation(self, what: str) -> None:
        # Once the stream breaks the protocol, which reply answers which request is no longer
        # known: end the process, so every request fails loudly rather than wrongly.
        log.error("timewheel: the sidecar wrote %s; killing it", what)
        with self._state:
            if self._fatal is None:
                self._fatal = what
        self.kill()

    def _ended(self) -> None:
        """stdout ended: the process is gone (or going). Settles everything in flight."""
        try:
            returncode = self.proc.wait(EXIT_AFTER_EOF_S)
        except subprocess.TimeoutExpired:
            self.kill()
            returncode = self.proc.wait()
        # The stderr pipe ends with the process; its last lines explain the death.
        self._stderr_thread.join(1.0)
        stderr = "\n".join(self._stderr_tail)
        with self._state:
            expected = self._status in ("closing", "closed")
            death = None
            if not expected:
                self._status = "dead"
                death = self._death = SidecarDied(
                    _death_message(self.proc.pid, returncode, self._fatal, stderr),
                    returncode=returncode, stderr=stderr)
            taken = list(self._pending.values())
            self._pending.clear()
        for p in taken:
            if death is not None:
                exc: TimewheelError = SidecarDied(death.message, returncode=returncode,
                                                  stderr=stderr, request=p.request)
            else:
                exc = ClientClosed("the sidecar stopped before answering (the client was "
                                   "closed, or a shutdown was answered first)",
                                   request=p.request)
            p.reject(exc)
        self._on_end(self, death)

    def _drain_stderr(self) -> None:
        stderr = self.proc.stderr
        assert stderr is not None
        with stderr:
            for raw in stderr:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self._stderr_tail.append(line)
                sidecar_log.warning("%s", line)

    # ---- lifecycle --------------------------------------------------------------------------

    @property
    def status(self) -> str:
        with self._state:
            return self._status

    @property
    def death(self) -> Optional[SidecarDied]:
        with self._state:
            return self._death

    def close(self, timeout: float) -> Optional[int]:
        """EOF on stdin (the sidecar flushes and exits 0), waits up to ``timeout`` seconds,
        kills it otherwise. Returns the exit status."""
        with self._state:
            if self._status == "running":
                self._status = "closing"
        # A writer blocked on a full pipe (a stopped sidecar) holds the write lock: give it
        # the timeout, then kill, which makes its write fail and lets go of the lock.
        if not self._write_lock.acquire(timeout=timeout):
            self.kill()
            self._write_lock.acquire()
        try:
            if self.proc.stdin is not None:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass  # already gone
        finally:
            self._write_lock.release()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("timewheel: the sidecar did not exit within %.1f s of EOF; killing it",
                        timeout)
            self.kill()
            self.proc.wait()
        if threading.current_thread() is not self._reader:
            self._reader.join(EXIT_AFTER_EOF_S + 2.0)
        with self._state:
            if self._status == "closing":
                self._status = "closed"
        return self.proc.returncode

    def wait_ended(self, timeout: Optional[float]) -> None:
        """Waits until the reader has settled everything (after a death or a close)."""
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout)

    def kill(self) -> None:
        """SIGKILL, ignoring a process already gone."""
        try:
            self.proc.kill()
        except OSError:
            pass


def _death_message(pid: int, returncode: int, fatal: Optional[str], stderr: str) -> str:
    if fatal is not None:
        how = f"was killed by the client: it wrote {fatal}"
    elif returncode < 0:
        how = f"was killed by signal {-returncode}"
    else:
        how = f"exited with status {returncode}"
    msg = f"the timewheel sidecar (pid {pid}) {how}"
    if stderr:
        msg += "; its stderr ended with:\n" + stderr
    return msg


def _running_future() -> Future:
    fut: Future = Future()
    # Running from the start: the request is on its way and can not be taken back, so
    # Future.cancel() must say False rather than pretend.
    fut.set_running_or_notify_cancel()
    return fut


