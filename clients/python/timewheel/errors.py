"""Exceptions: one class per error kind of the sidecar protocol, under one base.

The kinds are the ones docs/sidecar.md ("Errors") lists. A kind this client does not know yet
(a newer sidecar) still raises a ``TimewheelError`` whose ``kind`` says what it was, so that
callers catching the base class keep working.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class TimewheelError(Exception):
    """Base class of every error this package raises about the sidecar.

    ``kind`` is the protocol's error kind (``"bad_request"``, ...), or a name of this client's
    own for the errors that are not replies (``"sidecar_died"``, ``"client_closed"``,
    ``"protocol"``). ``message`` is the sidecar's text, for humans. ``request`` is the request
    that was refused, as sent (without the ``req`` field), when there was one.
    """

    kind: str = "unknown"

    def __init__(self, message: str, *, kind: Optional[str] = None,
                 request: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.message = message
        if kind is not None:
            self.kind = kind
        self.request = request

    def __str__(self) -> str:
        op = self.request.get("op") if isinstance(self.request, dict) else None
        where = f" ({op})" if op else ""
        return f"{self.kind}{where}: {self.message}"


class BadRequest(TimewheelError):
    """The sidecar could not read the request: unknown op, missing or ill-typed field (a
    negative or fractional time, an id that is not a decimal string), both or neither of
    ``due_ms``/``delay_ms``, a line longer than ``--max-line-bytes``."""

    kind = "bad_request"


class InvalidInput(TimewheelError):
    """The engine refused the values (payload too large, due too far ahead, ...). Nothing was
    written."""

    kind = "invalid_input"


class NotFound(TimewheelError):
    """``complete``/``fail`` of a job this sidecar does not hold: never delivered, already
    finished, its lease ran out (it was delivered again), or a stale ``attempt``."""

    kind = "not_found"


class NoSpace(TimewheelError):
    """The disk is full. Nothing was written; the request may be retried once space is
    freed."""

    kind = "no_space"


class Io(TimewheelError):
    """An I/O error in the engine (protocol kind ``io``)."""

    kind = "io"


class Corrupted(TimewheelError):
    """The engine found damage to acknowledged data."""

    kind = "corrupted"


class Poisoned(TimewheelError):
    """A sync failed earlier; the engine's log refuses all further writes."""

    kind = "poisoned"


class Closed(TimewheelError):
    """The engine is shutting down (protocol kind ``closed``)."""

    kind = "closed"


class Locked(TimewheelError):
    """The data directory is locked by another engine (protocol kind ``locked``)."""

    kind = "locked"


class SidecarDied(TimewheelError):
    """The sidecar process ended while this client still needed it (killed, crashed, or
    exited during start). Every request in flight fails with it, and so does every request
    until ``Client.restart()``.

    ``returncode`` is the process's exit status (negative: killed by that signal) and
    ``stderr`` the last lines it wrote to stderr.
    """

    kind = "sidecar_died"

    def __init__(self, message: str, *, returncode: Optional[int] = None, stderr: str = "",
                 request: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message, request=request)
        self.returncode = returncode
        self.stderr = stderr


class ClientClosed(TimewheelError):
    """The client was closed (``close()``, ``shutdown()`` or the end of a ``with`` block)
    before this request could be answered, or the request was made after that."""

    kind = "client_closed"


class ProtocolError(TimewheelError):
    """The sidecar wrote something the protocol does not allow (not JSON, a reply to no
    request, a reply without its field). A bug on one side or the other, never bad input."""

    kind = "protocol"


#: The protocol's error kinds and their classes.
KINDS: Dict[str, Type[TimewheelError]] = {
    cls.kind: cls
    for cls in (BadRequest, InvalidInput, NotFound, NoSpace, Io, Corrupted, Poisoned, Closed,
                Locked)
}


def error_from_reply(error: Any, request: Optional[Dict[str, Any]] = None) -> TimewheelError:
    """The exception for the ``error`` object of an ``"ok":false`` reply."""
    if not isinstance(error, dict):
        return ProtocolError(f"error reply without an error object: {error!r}", request=request)
    kind = error.get("kind")
    message = error.get("message")
    message = message if isinstance(message, str) else repr(message)
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        # A kind from a newer sidecar: still a TimewheelError, with the kind it named.
        return TimewheelError(message, kind=str(kind), request=request)
    return cls(message, request=request)
