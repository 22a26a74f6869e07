"""``OFFLOAD_TRACE``: a line on stderr for every call, every result and every asynchronous failure.

Every line has the same shape, so tools can parse it::

    [offloadrt +<seconds> <thread>] <event>

``<seconds>`` is monotonic time since the first traced line (microsecond resolution) and
``<thread>`` the calling thread's name. The events are:

- ``-> olName(arg=value, ...)``: a call, with ``at file:line:col (function)`` after it for an
  ``olNameWithCodeLoc`` call;
- ``<- olName: OL_SUCCESS`` or ``<- olName = value``: its result;
- ``<- olName: OL_ERRC_<CODE>: details``: its error;
- ``!! Queue#4 on host:0 failed: <CODE>: details``: a queue entering the error state, printed
  when it happens (on the thread that ran the failing work), not when a later call reports it.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from ..errors import OffloadError
from ..types import CodeLocation

_lock = threading.Lock()  # guards _start and keeps lines from different threads whole
_start: float | None = None


def emit(event: str) -> None:
    global _start
    now = time.monotonic()
    with _lock:
        if _start is None:
            _start = now
        line = f"[offloadrt +{now - _start:.6f} {threading.current_thread().name}] {event}\n"
        sys.stderr.write(line)
        sys.stderr.flush()


def format_value(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0xFFFF and type(value) is int:
        return hex(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    if callable(value) and not isinstance(value, type):
        return getattr(value, "__qualname__", None) or repr(value)
    return repr(value)


_ADDRESSES = frozenset({"address", "ptr", "dst", "src"})


def call(name: str, names: tuple[str, ...], args: tuple[Any, ...], location: CodeLocation | None = None) -> None:
    shown = ", ".join(f"{n}={hex(v) if n in _ADDRESSES and type(v) is int else format_value(v)}"
                      for n, v in zip(names, args))
    where = f" at {location}" if location is not None else ""
    emit(f"-> {name}({shown}){where}")


def result(name: str, value: Any) -> None:
    emit(f"<- {name}: OL_SUCCESS" if value is None else f"<- {name} = {format_value(value)}")


def error(name: str, exc: OffloadError) -> None:
    emit(f"<- {name}: OL_ERRC_{exc.code.name}: {exc.details}")


def queue_failed(owner: object, failure: Any) -> None:
    """The hook the plugin layer calls when a queue enters the error state."""
    if owner is None:
        return  # a runtime-internal queue (a temporary one): its caller reports the error
    waited = failure.origin is not None and failure.origin is not owner
    how = f" (it waited on {failure.origin})" if waited else ""
    emit(f"!! {owner} failed{how}: {failure.error}")
