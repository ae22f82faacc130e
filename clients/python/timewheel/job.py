"""A fired job, as the sidecar's ``fired`` event describes it."""

from __future__ import annotations

import base64
import binascii
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Dict, Optional, Union

from .errors import ProtocolError

if TYPE_CHECKING:
    from .client import Client

Payload = Union[str, bytes]


class Job:
    """One delivery of a fired job.

    - ``id``: the job id, a string of decimal digits (as the protocol sends it).
    - ``due_ms``, ``fired_ms``: when it was due and when it entered the ready queue, in ms
      since the Unix epoch by the sidecar's clock.
    - ``attempt``: the delivery number, the fencing token; ``complete()``/``fail()`` pass it,
      so they finish this delivery only, never a newer one.
    - ``payload``: ``str`` for a job scheduled with a text payload, ``bytes`` for one scheduled
      with bytes (sent as ``payload_b64``).
    - ``received_ms``: when this client read the event, by the client's clock (``time.time()``
      in ms, a float): the figure to compare with ``due_ms`` for the lateness a caller sees.
    - ``extra``: fields of the event this client does not know (a newer sidecar).
    - ``generation``: which sidecar process of the client delivered it (``Client.restart()``
      starts a new one; a job delivered by an earlier one is no longer held by the sidecar,
      which delivers it again after its restart, with ``attempt`` + 1).
    """

    __slots__ = ("id", "due_ms", "fired_ms", "attempt", "payload", "received_ms", "extra",
                 "generation", "_client")

    def __init__(self, *, id: str, due_ms: int, fired_ms: int, attempt: int, payload: Payload,
                 received_ms: float, extra: Dict[str, Any], generation: int,
                 client: Optional["Client"]) -> None:
        self.id = id
        self.due_ms = due_ms
        self.fired_ms = fired_ms
        self.attempt = attempt
        self.payload = payload
        self.received_ms = received_ms
        self.extra = extra
        self.generation = generation
        self._client = client

    def complete(self, timeout: Optional[float] = None) -> None:
        """Completes this delivery (blocking until durable). ``NotFound`` if the sidecar no
        longer holds it (lease ran out, ``--auto-complete``, a restart since)."""
        self._bound().complete(self.id, attempt=self.attempt, timeout=timeout)

    def complete_async(self) -> "Future[None]":
        """``complete()`` as a Future."""
        return self._bound().complete_async(self.id, attempt=self.attempt)

    def fail(self, error: str = "", timeout: Optional[float] = None) -> None:
        """Fails this delivery with a reason (blocking until durable)."""
        self._bound().fail(self.id, error, attempt=self.attempt, timeout=timeout)

    def fail_async(self, error: str = "") -> "Future[None]":
        """``fail()`` as a Future."""
        return self._bound().fail_async(self.id, error, attempt=self.attempt)

    def _bound(self) -> "Client":
        if self._client is None:
            raise RuntimeError("this Job is not bound to a Client")
        return self._client

    def __repr__(self) -> str:
        return (f"Job(id={self.id!r}, due_ms={self.due_ms}, fired_ms={self.fired_ms}, "
                f"attempt={self.attempt}, payload={self.payload!r})")


_KNOWN = frozenset(("event", "id", "due_ms", "fired_ms", "attempt", "payload", "payload_b64"))


def job_from_event(event: Dict[str, Any], *, received_ms: float, generation: int,
                   client: Optional["Client"]) -> Job:
    """Decodes a ``fired`` event. Text payloads stay ``str``, ``payload_b64`` becomes
    ``bytes``: the same types the job was scheduled with."""
    try:
        job_id = event["id"]
        due_ms = event["due_ms"]
        fired_ms = event["fired_ms"]
        attempt = event["attempt"]
    except KeyError as e:
        raise ProtocolError(f"fired event without {e.args[0]!r}: {event!r}") from None
    if not (isinstance(job_id, str) and job_id.isdigit()):
        raise ProtocolError(f"fired event with an id that is not a decimal string: {event!r}")
    for name, value in (("due_ms", due_ms), ("fired_ms", fired_ms), ("attempt", attempt)):
        # bool is an int in Python; the protocol never sends one here.
        if not isinstance(value, int) or isinstance(value, bool):
            raise ProtocolError(f"fired event with a non-integer {name}: {event!r}")
    payload: Payload
    if "payload_b64" in event:
        try:
            payload = base64.b64decode(event["payload_b64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise ProtocolError(f"fired event with bad payload_b64: {event!r}") from None
    else:
        text = event.get("payload", "")
        if not isinstance(text, str):
            raise ProtocolError(f"fired event with a non-string payload: {event!r}")
        payload = text
    extra = {k: v for k, v in event.items() if k not in _KNOWN}
    return Job(id=job_id, due_ms=due_ms, fired_ms=fired_ms, attempt=attempt, payload=payload,
               received_ms=received_ms, extra=extra, generation=generation, client=client)
