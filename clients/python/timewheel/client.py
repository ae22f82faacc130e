"""The client: starts ``timewheel serve`` and speaks its protocol (docs/sidecar.md)."""

from __future__ import annotations

import base64
import logging
import os
import queue
import shutil
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence,
                    Union)

from ._session import Extract, Message, Session
from .errors import ClientClosed, ProtocolError, SidecarDied
from .job import Job, Payload, job_from_event

log = logging.getLogger("timewheel")

#: The environment variable naming the ``timewheel`` binary when ``binary=`` is not given.
BINARY_ENV = "TIMEWHEEL_BIN"

PathLike = Union[str, "os.PathLike[str]"]


class _End:
    """Marks, in the event queue, that a sidecar process ended (``death`` None: closed)."""

    __slots__ = ("generation", "death")

    def __init__(self, generation: int, death: Optional[SidecarDied]) -> None:
        self.generation = generation
        self.death = death


class _Stop:
    """Tells the callback dispatcher that the client is closed for good."""


def find_binary(binary: Optional[PathLike] = None) -> str:
    """The ``timewheel`` binary: ``binary`` if given, else ``$TIMEWHEEL_BIN``, else the first
    ``timewheel`` on ``PATH``."""
    if binary is not None:
        return os.fspath(binary)
    from_env = os.environ.get(BINARY_ENV)
    if from_env:
        return from_env
    found = shutil.which("timewheel")
    if found is None:
        raise FileNotFoundError(
            f"no timewheel binary: pass binary=..., set {BINARY_ENV}, or put timewheel on "
            "PATH (cargo build --release builds target/release/timewheel)")
    return found


def _id_of(reply: Dict[str, Any]) -> str:
    job_id = reply["id"]
    if not (isinstance(job_id, str) and job_id.isdigit()):
        raise ValueError(job_id)
    return job_id


def _flag(name: str) -> Extract:
    def extract(reply: Dict[str, Any]) -> bool:
        value = reply[name]
        if not isinstance(value, bool):
            raise ValueError(value)
        return value
    return extract


def _nothing(reply: Dict[str, Any]) -> None:
    return None


def _stats(reply: Dict[str, Any]) -> Dict[str, Any]:
    stats = reply["stats"]
    if not isinstance(stats, dict):
        raise ValueError(stats)
    return stats


def _whole(reply: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in reply.items() if k not in ("req", "ok")}


_ID_OF = _id_of
_CANCELLED = _flag("cancelled")
_RESCHEDULED = _flag("rescheduled")


class Client:
    """A ``timewheel serve --dir DIR`` child process and the protocol over its pipes.

    Every request exists blocking (``schedule``) and as a ``concurrent.futures.Future``
    (``schedule_async``). Requests may be pipelined: any number in flight from any threads;
    each reply settles exactly its request's Future. A blocking call waits for its reply, which
    the sidecar sends once the change is durable.

    Fired jobs come as ``Job`` objects, through ``fired()`` (an iterator) or, when
    ``on_fired`` is given, through that callback, called on a thread of its own (so it may call
    the client, blocking ones included).

    Options:
    - ``dir``: the data directory (created if missing; locked while the sidecar runs).
    - ``binary``: the ``timewheel`` binary (default: ``$TIMEWHEEL_BIN``, then ``PATH``).
    - ``auto_complete``, ``lease_ms``, ``max_line_bytes``: the ``serve`` options of those names.
    - ``extra_args``: more arguments for ``timewheel serve``; ``env``: its environment.
    - ``on_fired(job)``: the callback for fired jobs (then ``fired()`` is not available).
    - ``on_died(exc)``: called (on a short-lived thread) when the sidecar dies unasked.
    - ``request_timeout``: default timeout in seconds of the blocking calls (None: wait).
    - ``start_timeout``: how long the start may take (opening runs recovery); ``close_timeout``:
      how long ``close()`` waits for the exit before it kills.
    """

    def __init__(self, dir: PathLike, *, binary: Optional[PathLike] = None,
                 auto_complete: bool = False, lease_ms: Optional[int] = None,
                 max_line_bytes: Optional[int] = None, extra_args: Sequence[str] = (),
                 env: Optional[Mapping[str, str]] = None,
                 on_fired: Optional[Callable[[Job], Any]] = None,
                 on_died: Optional[Callable[[SidecarDied], Any]] = None,
                 request_timeout: Optional[float] = None, start_timeout: float = 60.0,
                 close_timeout: float = 10.0) -> None:
        self.dir = os.fspath(dir)
        self.binary = find_binary(binary)
        argv = [self.binary, "serve", "--dir", self.dir]
        if auto_complete:
            argv.append("--auto-complete")
        if lease_ms is not None:
            argv += ["--lease-ms", str(int(lease_ms))]
        if max_line_bytes is not None:
            argv += ["--max-line-bytes", str(int(max_line_bytes))]
        argv += [str(a) for a in extra_args]
        self.argv: List[str] = argv
        self._env = dict(env) if env is not None else None
        self.auto_complete = auto_complete
        self.request_timeout = request_timeout
        self.start_timeout = start_timeout
        self.close_timeout = close_timeout
        self._on_fired = on_fired
        self._on_died = on_died
        # Events of every generation, in the order the sidecars printed them, with an _End
        # after each process's last one.
        self._events: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._life = threading.RLock()  # start, close, restart
        self._session: Optional[Session] = None
        self._closed = False
        self._generation = 1
        self._dispatcher: Optional[threading.Thread] = None
        if on_fired is not None:
            self._dispatcher = threading.Thread(target=self._dispatch, daemon=True,
                                                name="timewheel-on-fired")
            self._dispatcher.start()
        try:
            self._start()
        except BaseException:
            self._close_for_good()
            raise

    # ---- lifecycle --------------------------------------------------------------------------

    def _start(self) -> None:
        with self._life:
            try:
                session = Session(self.argv, env=self._env, generation=self._generation,
                                  on_event=self._event, on_end=self._session_ended)
            except FileNotFoundError as e:
                raise FileNotFoundError(f"can not start {self.binary!r}: {e}") from e
            self._session = session
        # The first reply proves the engine opened (recovery done, directory locked); a
        # sidecar that can not open exits, and this raises SidecarDied with its stderr.
        try:
            session.submit([({"op": "stats"}, _stats)])[0].result(self.start_timeout)
        except FutureTimeout:  # not the builtin TimeoutError before Python 3.11
            session.kill()
            session.close(self.close_timeout)
            raise SidecarDied(f"the sidecar did not answer within {self.start_timeout} s of "
                              "its start; killed it", returncode=session.proc.returncode)
        except BaseException:
            session.close(self.close_timeout)  # its pipes, and the process if it lives on
            raise

    def restart(self) -> None:
        """Starts a new sidecar on the same directory: after a ``SidecarDied``, or to stop a
        running one (closed cleanly first). Requests still in flight to the old one fail
        (``SidecarDied`` or ``ClientClosed``); every acknowledged job is still there, and jobs
        the old process had delivered but nobody finished are delivered again."""
        with self._life:
            if self._closed:
                raise ClientClosed("the client is closed; make a new one")
            old = self._session
            # The new generation counts from before the old process is stopped, so the end of
            # the old one reads as stale to fired() and an iterator carries on across it.
            self._generation += 1
            if old is not None:
                # Also after a death: that closes the dead process's stdin pipe.
                old.close(self.close_timeout)
                old.wait_ended(self.close_timeout)
            self._start()

    def close(self, timeout: Optional[float] = None) -> Optional[int]:
        """Closes stdin (the sidecar answers what it has read, flushes, exits 0), waits up to
        ``timeout`` (default ``close_timeout``) seconds, kills the process otherwise. Returns
        its exit status. Idempotent."""
        with self._life:
            session = self._session
            returncode = None
            if session is not None:
                returncode = session.close(self.close_timeout if timeout is None else timeout)
            self._close_for_good()
            return returncode

    def shutdown(self, timeout: Optional[float] = None) -> None:
        """The protocol's ``shutdown``: the sidecar flushes, answers, exits 0; then the client
        is closed. Raises what the reply says (e.g. ``Io`` if the final flush failed)."""
        fut = self.request_async("shutdown")
        try:
            fut.result(self._timeout(timeout))
        finally:
            self.close(timeout)

    def _close_for_good(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._dispatcher is not None:
            self._events.put(_Stop())
            if threading.current_thread() is not self._dispatcher:
                self._dispatcher.join(self.close_timeout)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def pid(self) -> Optional[int]:
        """The sidecar's process id (of the current generation)."""
        return self._session.proc.pid if self._session is not None else None

    @property
    def returncode(self) -> Optional[int]:
        """The sidecar's exit status once it ended, else None."""
        return self._session.proc.poll() if self._session is not None else None

    @property
    def generation(self) -> int:
        """How many sidecar processes this client started (1 before any restart)."""
        return self._generation

    @property
    def alive(self) -> bool:
        """True while requests can be made: started, not closed, not dead."""
        s = self._session
        return s is not None and not self._closed and s.status == "running"

    # ---- requests ---------------------------------------------------------------------------

    def _submit(self, messages: Sequence[Message]) -> List[Future]:
        session = self._session
        if session is None or self._closed:
            return [_failed(ClientClosed("the client is closed", request=m[0]))
                    for m in messages]
        return session.submit(messages)

    def _timeout(self, timeout: Optional[float]) -> Optional[float]:
        return self.request_timeout if timeout is None else timeout

    def request_async(self, op: str, **fields: Any) -> "Future[Dict[str, Any]]":
        """Any op, with the fields given as is; the Future's value is the whole ok reply
        without ``req``/``ok``. For ops this client has no method for (a newer sidecar)."""
        return self._submit([(_fields(op, fields), _whole)])[0]

    def request(self, op: str, timeout: Optional[float] = None, **fields: Any) -> Dict[str, Any]:
        """``request_async(...)``, blocking."""
        return self.request_async(op, **fields).result(self._timeout(timeout))

    def schedule_async(self, due_ms: Optional[int] = None, *, delay_ms: Optional[int] = None,
                       payload: Optional[Payload] = None, **fields: Any) -> "Future[str]":
        """Schedules a job at ``due_ms`` (ms since the Unix epoch) or after ``delay_ms``; the
        Future's value is its id (a string of decimal digits), set once the job is durable.

        ``payload``: ``str`` (sent as text) or ``bytes`` (sent as ``payload_b64``); the fired
        event gives it back with the same type. More ``fields`` are sent as they are (the
        sidecar ignores fields it does not know). The values are checked by the sidecar, not
        here: what it refuses raises ``BadRequest`` or ``InvalidInput``.
        """
        return self._submit([(_schedule_fields(due_ms, delay_ms, payload, fields), _ID_OF)])[0]

    def schedule(self, due_ms: Optional[int] = None, *, delay_ms: Optional[int] = None,
                 payload: Optional[Payload] = None, timeout: Optional[float] = None,
                 **fields: Any) -> str:
        """``schedule_async(...)``, blocking: returns the id once the job is durable."""
        fut = self.schedule_async(due_ms, delay_ms=delay_ms, payload=payload, **fields)
        return fut.result(self._timeout(timeout))

    def schedule_many_async(self, jobs: Iterable[Mapping[str, Any]]) -> "List[Future[str]]":
        """Schedules many jobs, pipelined: each a mapping of ``schedule``'s keyword arguments
        (``due_ms`` or ``delay_ms``, ``payload``, ...). One Future per job, in order.

        The protocol has no batch op: these are separate requests, written together, which
        the sidecar commits together (one sync for a run of schedules that arrived together).
        Each succeeds or fails on its own; none waits for another.
        """
        return self._submit([_schedule_message(job) for job in jobs])

    def schedule_many(self, jobs: Iterable[Mapping[str, Any]],
                      timeout: Optional[float] = None) -> List[str]:
        """``schedule_many_async(...)``, blocking: the ids in order. If any job was refused,
        raises the first refusal once all are answered (the others are scheduled: use
        ``schedule_many_async`` to know each one's outcome). Cheaper per job than the async
        form: one Future for all, not one each."""
        messages = [_schedule_message(job) for job in jobs]
        session = self._session
        if session is None or self._closed:
            raise ClientClosed("the client is closed")
        outcomes = session.submit_together(messages).result(self._timeout(timeout))
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return outcomes

    def cancel_async(self, job_id: str) -> "Future[bool]":
        """Cancels a scheduled or fired-but-unclaimed job: True if it is now cancelled
        (durably), False if unknown, running or done."""
        return self._submit([({"op": "cancel", "id": _id_arg(job_id)}, _CANCELLED)])[0]

    def cancel(self, job_id: str, timeout: Optional[float] = None) -> bool:
        """``cancel_async(...)``, blocking."""
        return self.cancel_async(job_id).result(self._timeout(timeout))

    def reschedule_async(self, job_id: str, due_ms: int) -> "Future[bool]":
        """Moves a scheduled job to ``due_ms``: True if moved (durably), False if it is not
        scheduled (unknown, fired, done)."""
        fields = {"op": "reschedule", "id": _id_arg(job_id), "due_ms": due_ms}
        return self._submit([(fields, _RESCHEDULED)])[0]

    def reschedule(self, job_id: str, due_ms: int, timeout: Optional[float] = None) -> bool:
        """``reschedule_async(...)``, blocking."""
        return self.reschedule_async(job_id, due_ms).result(self._timeout(timeout))

    def complete_async(self, job_id: str, attempt: Optional[int] = None) -> "Future[None]":
        """Completes a delivered job (``Job.complete()`` passes its attempt, so only that
        delivery is finished). ``NotFound`` if this sidecar does not hold it."""
        fields: Dict[str, Any] = {"op": "complete", "id": _id_arg(job_id)}
        if attempt is not None:
            fields["attempt"] = attempt
        return self._submit([(fields, _nothing)])[0]

    def complete(self, job_id: str, attempt: Optional[int] = None,
                 timeout: Optional[float] = None) -> None:
        """``complete_async(...)``, blocking until durable."""
        self.complete_async(job_id, attempt).result(self._timeout(timeout))

    def fail_async(self, job_id: str, error: str = "",
                   attempt: Optional[int] = None) -> "Future[None]":
        """Fails a delivered job with a reason. ``NotFound`` as for ``complete``."""
        fields: Dict[str, Any] = {"op": "fail", "id": _id_arg(job_id), "error": error}
        if attempt is not None:
            fields["attempt"] = attempt
        return self._submit([(fields, _nothing)])[0]

    def fail(self, job_id: str, error: str = "", attempt: Optional[int] = None,
             timeout: Optional[float] = None) -> None:
        """``fail_async(...)``, blocking until durable."""
        self.fail_async(job_id, error, attempt).result(self._timeout(timeout))

    def stats_async(self) -> "Future[Dict[str, Any]]":
        """The engine's counters (jobs by state, lateness percentiles, ...: docs/sidecar.md)."""
        return self._submit([({"op": "stats"}, _stats)])[0]

    def stats(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """``stats_async()``, blocking."""
        return self.stats_async().result(self._timeout(timeout))

    # ---- fired events -----------------------------------------------------------------------

    def fired(self, timeout: Optional[float] = None) -> Iterator[Job]:
        """Fired jobs, in the order the sidecar printed them. Ends when the client is closed,
        or after ``timeout`` seconds without an event (None: no such end); raises
        ``SidecarDied`` when the sidecar died (after the events it printed before dying).
        Several threads may iterate at once; each job goes to one of them."""
        while True:
            job = self.next_fired(timeout)
            if job is None:
                return
            yield job

    def next_fired(self, timeout: Optional[float] = None) -> Optional[Job]:
        """The next fired job, or None after ``timeout`` seconds or once the client is
        closed. Raises ``SidecarDied`` if the sidecar died and was not restarted."""
        if self._on_fired is not None:
            raise RuntimeError("this client delivers fired jobs to its on_fired callback")
        while True:
            try:
                item = self._events.get(timeout=timeout)
            except queue.Empty:
                return None
            if isinstance(item, Job):
                return item
            if isinstance(item, _End) and item.generation == self._generation:
                # Put back, so that every iterator (and the next call) sees the end too.
                self._events.put(item)
                if item.death is not None:
                    raise SidecarDied(item.death.message, returncode=item.death.returncode,
                                      stderr=item.death.stderr)
                return None
            # An _End of a generation since restarted: stale, dropped.

    def _event(self, event: Dict[str, Any], received_ms: float, generation: int) -> None:
        if event.get("event") != "fired":
            log.debug("timewheel: ignoring an event this client does not know: %r", event)
            return
        try:
            job = job_from_event(event, received_ms=received_ms, generation=generation,
                                 client=self)
        except ProtocolError as e:
            log.error("timewheel: %s", e)
            return
        self._events.put(job)

    def _session_ended(self, session: Session, death: Optional[SidecarDied]) -> None:
        self._events.put(_End(session.generation, death))
        if death is not None:
            log.warning("timewheel: %s", death.message)
            if self._on_died is not None:
                threading.Thread(target=self._on_died, args=(death,), daemon=True,
                                 name="timewheel-on-died").start()

    def _dispatch(self) -> None:
        assert self._on_fired is not None
        while True:
            item = self._events.get()
            if isinstance(item, _Stop):
                return
            if isinstance(item, Job):
                try:
                    self._on_fired(item)
                except Exception:  # noqa: BLE001 - one bad job must not stop the others
                    log.exception("timewheel: on_fired raised for %r", item)


def _fields(op: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    if "req" in fields or "op" in fields:
        raise TypeError("req and op are set by the client")
    out = {"op": op}
    out.update(fields)
    return out


def _schedule_fields(due_ms: Optional[int], delay_ms: Optional[int], payload: Optional[Payload],
                     extra: Mapping[str, Any]) -> Dict[str, Any]:
    fields = _fields("schedule", dict(extra))
    if due_ms is not None:
        fields["due_ms"] = due_ms
    if delay_ms is not None:
        fields["delay_ms"] = delay_ms
    if payload is not None:
        if isinstance(payload, str):
            fields["payload"] = payload
        elif isinstance(payload, (bytes, bytearray, memoryview)):
            fields["payload_b64"] = base64.b64encode(bytes(payload)).decode("ascii")
        else:
            raise TypeError(f"payload must be str or bytes, not {type(payload).__name__}")
    return fields


def _schedule_message(job: Mapping[str, Any]) -> Message:
    spec = dict(job)
    due_ms = spec.pop("due_ms", None)
    delay_ms = spec.pop("delay_ms", None)
    payload = spec.pop("payload", None)
    return (_schedule_fields(due_ms, delay_ms, payload, spec), _ID_OF)


def _id_arg(job_id: Any) -> Any:
    # Ids travel as strings; an int is a convenience accepted here and sent as its digits.
    # Anything else goes as it is, for the sidecar to judge (a BadRequest).
    if isinstance(job_id, int) and not isinstance(job_id, bool):
        return str(job_id)
    return job_id


def _failed(exc: BaseException) -> Future:
    fut: Future = Future()
    fut.set_running_or_notify_cancel()
    fut.set_exception(exc)
    return fut
