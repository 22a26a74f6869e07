"""Host functions on GPU streams: one C trampoline the driver calls with an integer key.

The key finds the Python callback. The trampoline holds the GIL only while the callback runs, and
the bindings release the GIL in their calls, so a thread waiting in a stream synchronise never
blocks a host function. While a host function runs, its vendor's per-thread device token is
:data:`IN_HOST_FUNCTION`, which makes ``GpuDeviceCore.enter`` refuse calls into that driver (the
drivers forbid them from their callback thread).
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Callable
from typing import Any

from ....errors import ErrorCode, OffloadError
from ..resources import set_host_function_queue
from .streams import GpuStream

_HOST_FN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
host_calls: dict[int, tuple[Callable[[Any], object], Any, GpuStream, int]] = {}
host_keys = itertools.count(1)


def _run_host_call(key: int | None) -> None:
    entry = host_calls.pop(key or 0, None)
    if entry is None:
        return
    callback, user_data, queue, position = entry
    device: Any = queue.device
    if queue.waits:  # no driver call may be made from here (query=False)
        device._settle_waits(queue, upto=position, query=False)
    if queue.failure is not None:
        return  # the queue failed before this point: later host work does not run
    # The driver forbids calls into itself from its callback thread: GpuDeviceCore.enter refuses them
    # while the vendor's token says a host function runs here (the fast path sees a mismatch).
    cell = type(device).thread_state.cell
    token = cell.token
    cell.token = IN_HOST_FUNCTION
    set_host_function_queue(queue)
    try:
        callback(user_data)
    except BaseException as exc:  # noqa: BLE001  # the queue fails; the driver thread goes on
        err = OffloadError(ErrorCode.UNKNOWN, f"host function raised {type(exc).__name__}: {exc}")
        if isinstance(exc, OffloadError):
            err = exc
        else:
            err.__cause__ = exc
        queue.fail(err, at=position)
    else:
        if queue.failure is not None:  # adopted by the callback (a wait on another backend's event)
            queue.move_failure_to(position)
    finally:
        set_host_function_queue(None)
        cell.token = token


IN_HOST_FUNCTION = object()  # a vendor's thread token while a host function of its runs on the thread


_HOST_TRAMPOLINE = _HOST_FN_TYPE(_run_host_call)
HOST_TRAMPOLINE_ADDRESS: int = ctypes.cast(_HOST_TRAMPOLINE, ctypes.c_void_p).value or 0
