"""Helpers shared by the queue/ and event/ conformance modules.

``within`` guards a call that could hang (a sync on a queue whose work never finishes) with a
timeout, so a runtime bug fails the test instead of hanging the suite. The other helpers build
the launch arguments upstream's tests use.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import pytest

from offloadrt import Dimensions, KernelLaunchSizeArgs

TIMEOUT = 10.0  # seconds: far above what any call here needs on a working runtime


def within(fn: Callable[..., Any], *args: Any, timeout: float = TIMEOUT) -> Any:
    """``fn(*args)`` run on a helper thread; fail the test if it has not returned in ``timeout`` s."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001  # re-raised in the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True, name=f"within-{getattr(fn, '__name__', fn)}")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)} did not return within {timeout} s (hang)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def launch_size(group_x: int) -> KernelLaunchSizeArgs:
    """Upstream's ``LaunchArgs``: Dimensions 1, NumGroups {1,1,1}, GroupSize {group_x,1,1}, no shared memory."""
    return KernelLaunchSizeArgs(dimensions=1, num_groups=Dimensions(1, 1, 1),
                                group_size=Dimensions(group_x, 1, 1), dyn_shared_memory=0)


class SequenceArgs(ctypes.Structure):
    """``struct { uint32_t Idx; void *Mem; }``: the arguments of ``sequence``."""

    _fields_ = [("idx", ctypes.c_uint32), ("mem", ctypes.c_void_p)]


def sequence_args(idx: int, mem: int) -> bytes:
    return bytes(SequenceArgs(idx, mem))


def foo_args(mem: int) -> bytes:
    """``struct { void *Mem; }``: the arguments of ``foo``."""
    return bytes(ctypes.c_void_p(mem))
