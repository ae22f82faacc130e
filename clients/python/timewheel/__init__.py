"""A Python client for the timewheel sidecar (``timewheel serve``), standard library only.

```python
from timewheel import Client

with Client(dir="/tmp/tw-data") as tw:
    job_id = tw.schedule(delay_ms=500, payload="hello")   # returns once durable
    for job in tw.fired(timeout=5):
        print(job.id, job.payload)
        job.complete()
        break
```

The protocol itself is described in the timewheel repository, docs/sidecar.md.
"""

from .client import BINARY_ENV, Client, find_binary
from .errors import (KINDS, BadRequest, ClientClosed, Closed, Corrupted, InvalidInput, Io,
                     Locked, NoSpace, NotFound, Poisoned, ProtocolError, SidecarDied,
                     TimewheelError, error_from_reply)
from .job import Job

__version__ = "0.1.0"

__all__ = [
    "BINARY_ENV", "Client", "find_binary", "Job",
    "TimewheelError", "BadRequest", "InvalidInput", "NotFound", "NoSpace", "Io", "Corrupted",
    "Poisoned", "Closed", "Locked", "SidecarDied", "ClientClosed", "ProtocolError", "KINDS",
    "error_from_reply",
]
