"""The CUDA driver behind the stand-in: its state, the call wrapper and the lookups its calls share.

TEST DOUBLE, not NVIDIA code. The simulation itself (memory, streams with worker threads, events,
sticky faults) is tests/standin_common's engine, given CUDA's devices, its sticky codes and its
own diagnostics; this module adds what the CUDA driver does its own way: ``cuInit`` first, a
current *context* per thread (CUDA_ERROR_INVALID_CONTEXT without one), the legacy stream handles,
and the bindings' ``(CUresult, *outputs)`` results.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from standin_common import engine as e
from standin_common import operations as ops
from standin_common.calls import Frontend
from standin_common.controls import DriverError, fail

from . import _types as t
from ._convert import as_int
from ._devices import Device, DeviceSpec

# Faults the driver documents as leaving the context unusable ("inconsistent state"), plus ASSERT.
STICKY = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719, 721, 226, 911})
LEGACY_STREAMS = (0, 1, 2)  # NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: all run synchronously here
NOT_PERMITTED = 800  # what a call from a host function returns ("may return CUDA_ERROR_NOT_PERMITTED")

FRONT = Frontend(NOT_PERMITTED, t.result)  # calls, diagnostics, injections and kernel bodies
calls = FRONT.calls
diagnostics = FRONT.diagnostics
CONTROLS = FRONT.controls


class CudaState(e.State):
    """The engine's state with what only the CUDA driver has: names for cubin/fatbin images."""

    def __init__(self, devices: list[DeviceSpec], driver_version: int, init_error: int | None,
                 library_missing: bool) -> None:
        super().__init__(devices, driver_version, init_error, library_missing, make_device=Device, sticky=STICKY,
                         diagnostics=diagnostics, label="cuda-standin")
        self.binary_kernels: dict[str, Any] = {}  # names for cubin/fatbin images (set_binary_symbols)
        self.binary_globals: dict[str, int] = {}

    def current(self, allow_sticky: bool = False) -> e.Context:
        """The calling thread's current, active context (INVALID_CONTEXT otherwise); its sticky
        fault, if it has one, even once it was released."""
        ctx = getattr(self.tls, "ctx", None)
        if ctx is None:
            raise DriverError(201)
        if ctx.sticky is not None and (not allow_sticky or not ctx.active):
            raise DriverError(ctx.sticky)
        if not ctx.active:
            raise DriverError(201)
        return ctx


STATE = CudaState([DeviceSpec(), DeviceSpec()], 12040, None, False)


def _initialized(st: e.State) -> None:
    if not st.initialized:
        raise DriverError(3)  # CUDA_ERROR_NOT_INITIALIZED


def api(outputs: int = 0, needs_init: bool = True) -> Callable[[Callable[..., tuple[Any, ...]]], Any]:
    """Wrap an implementation: record the call, honour the library-missing switch and injected
    failures, require cuInit, and build the bindings' result tuple."""

    def wrap(fn: Callable[..., tuple[Any, ...]]) -> Callable[..., tuple[Any, ...]]:
        name = fn.__name__
        failed = (None,) * outputs

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
            calls.append((name, args + tuple(kwargs.values())))
            st = STATE
            if st.library_missing:
                raise t.DynamicLibNotFoundError(
                    '"cuda" (libcuda.so.1) not found: the NVIDIA driver is not installed (cuda_standin simulation)')
            return FRONT.invoke(st, name, functools.partial(fn, **kwargs), args, needs_init, _initialized, failed)

        parameters = ", ".join(inspect.signature(fn).parameters)
        call.__doc__ = (f"{name}({parameters})\n\ncuda_standin test double of the driver call of that name: "
                        f"returns (CUresult, *outputs) as the bindings do; see tests/cuda_standin/driver.py.")
        return call

    return wrap


# ---- lookups the calls share --------------------------------------------------------------------

def device(st: e.State, dev: Any) -> Device:
    ordinal = as_int(dev)
    if not 0 <= ordinal < len(st.devices):
        raise fail(101, f"no device {ordinal}")
    found: Device = st.devices[ordinal]
    return found


def stream(st: e.State, handle: Any, ctx: e.Context) -> tuple[e.Stream | None, e.Context]:
    """(stream, the context its work runs in); None for the legacy default stream."""
    value = as_int(handle)
    if value in LEGACY_STREAMS:
        return None, ctx
    with st.lock:
        found = st.streams.get(value)
    if found is None:
        raise fail(400, f"unknown or destroyed stream {value:#x}")
    if found.ctx.sticky is not None:
        raise DriverError(found.ctx.sticky)
    return found, found.ctx


def lookup(table: dict[int, Any], handle: Any, what: str) -> Any:
    """The live object ``handle`` names in ``table`` (call with the lock held); INVALID_HANDLE."""
    found = table.get(as_int(handle))
    if found is None:
        raise fail(400, f"unknown or destroyed {what} {as_int(handle):#x}")
    return found


def check_range(st: e.State, ptr: int, size: int, what: str) -> int:
    """The host address a device-side access of ``[ptr, +size)`` touches (an allocation, or
    registered host memory at its host or device address); INVALID_VALUE for anything else."""
    return ops.device_range(st, ptr, size, what, "a driver allocation")[0]
