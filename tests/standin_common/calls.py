"""The shared half of the stand-ins' call wrappers, and the test controls every stand-in offers.

TEST DOUBLE, not NVIDIA or AMD code. Each vendor front end wraps its implementations in its own
decorator (argument conversion and result tuples as its bindings have them); the decorator
records the call and hands it to :meth:`Frontend.invoke`, which applies injected failures,
refuses calls made from a host function (both drivers document that host functions must not call
them), initialises, runs the implementation and turns a :class:`DriverError` into the status.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

from .controls import Controls, DriverError, in_host_function
from .engine import State


class Frontend:
    """One stand-in's bookkeeping: its :attr:`calls`, :attr:`diagnostics` and :attr:`controls`.

    ``host_function_refusal`` is the status its driver returns to a call from a host function;
    ``status`` turns a code into the vendor's status type.
    """

    def __init__(self, host_function_refusal: int, status: Callable[[int], Any]) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []  # every call: (name, arguments); appends are atomic
        self.diagnostics: list[str] = []  # why the stand-in failed a call, when the code alone would not say
        self.controls = Controls()
        self.refusal = host_function_refusal
        self.status = status

    def clear(self) -> None:
        """Forget calls, diagnostics, injected failures and kernel bodies (a reset)."""
        self.controls.clear()
        self.calls.clear()
        self.diagnostics.clear()

    def invoke(self, st: State, name: str, fn: Callable[..., tuple[Any, ...]], args: Sequence[Any],
               needs_init: bool, initialize: Callable[[State], None], failed: tuple[Any, ...]) -> tuple[Any, ...]:
        """Run the call ``name``: ``(status(0), *outputs)``, or ``(status(code), *failed)``."""
        code = self.controls.take_injection(name)
        if code is None and needs_init and getattr(in_host_function, "active", False):
            code = self.refusal
            self.diagnostics.append(f"{name} called from a host function")
        if code is None:
            try:
                if needs_init:
                    initialize(st)
                return (self.status(0), *fn(*args))
            except DriverError as failure:
                code = failure.code
                if failure.why:
                    self.diagnostics.append(failure.why)
        return (self.status(code), *failed)


# ---- test controls (each stand-in package documents them under its own names) ----------------------

def poison(st: State, device: int, code: int) -> None:
    """Put device ``device``'s context in the sticky error state ``code``, as if a kernel had faulted."""
    with st.cv:
        st.devices[device].context.sticky = int(code)
        st.cv.notify_all()


def read(st: State, address: int, size: int) -> bytes:
    """``size`` bytes at a (device) address; a registration's device address reads its host memory."""
    return ctypes.string_at(st.host_address(int(address)), size)


def write(st: State, address: int, data: bytes) -> None:
    """Store ``data`` at a (device) address; a registration's device address writes its host memory."""
    ctypes.memmove(st.host_address(int(address)), data, len(data))
