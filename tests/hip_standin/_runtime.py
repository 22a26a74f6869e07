"""The HIP runtime behind the stand-in: its state, the call wrapper and lookups shared by the calls.

TEST DOUBLE, not AMD code. The simulation itself (memory, streams with worker threads, events,
sticky faults) is tests/standin_common's engine, given HIP's devices, its sticky codes and its own
diagnostics; this module adds what HIP does differently: a current *device* per thread (not a
context; a new thread starts at device 0), every device's context always active, the runtime
initialised implicitly by the first call, and hip-python's argument conversion and results.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

from standin_common import engine as e
from standin_common.calls import Frontend
from standin_common.controls import DriverError, fail

from ._convert import CONVERTERS, ENUM_PARAMETERS, enum_member
from ._devices import DeviceSpec, HipDevice
from ._types import hipError_t

# Faults that leave a device unusable (every later call touching it returns them):
# hipErrorIllegalAddress, hipErrorLaunchTimeOut, hipErrorAssert, hipErrorLaunchFailure, hipErrorECCNotCorrectable.
STICKY = frozenset({700, 702, 710, 719, 214})
LIBRARY_MISSING = ("failed to dlopen 'b'libamdhip64.so'': b'libamdhip64.so: cannot open shared object file: "
                   "No such file or directory'")
# hip-python's hipGetErrorName/String swallow the dlopen error ("Exception ignored") and return NULL.
QUIET_WHEN_MISSING = frozenset({"hipGetErrorName", "hipGetErrorString"})

NOT_SUPPORTED = 801  # what a call from a host function returns (HIP: "must not make any HIP API calls")


def status(code: int) -> Any:
    return hipError_t(code)


# Shared by every State of this stand-in; cleared in place by reset().
FRONT = Frontend(NOT_SUPPORTED, status)
calls = FRONT.calls  # every call: (function name, arguments as given)
diagnostics = FRONT.diagnostics  # why the stand-in failed a call, when the code alone would not say
CONTROLS = FRONT.controls  # injected failures and registered kernel bodies


def new_state(devices: list[DeviceSpec], driver_version: int, init_error: int | None,
              library_missing: bool) -> e.State:
    state = e.State(devices, driver_version, init_error, library_missing, make_device=HipDevice, sticky=STICKY,
                    diagnostics=diagnostics, label="hip-standin")
    for device in state.devices:
        device.context.active = True  # HIP has no context to retain: a device is always usable
    return state


STATE = new_state([DeviceSpec(), DeviceSpec()], 60342134, None, False)


def api(*failed: Any, needs_init: bool = True) -> Callable[[Callable[..., tuple[Any, ...]]], Any]:
    """Wrap an implementation as hip-python's function of the same name.

    The wrapper records the call, converts each argument as hip-python does (by the parameter's
    annotation, see ``_convert``), raises hip-python's dlopen error when the library is
    "missing", applies injected failures, initialises the runtime (or returns the init error),
    and returns ``(hipError_t, *outputs)``; a failure returns ``failed`` as the outputs (None for
    a pointer or handle, 0 for a number, as hip-python hands back what the C call left).
    """

    def wrap(fn: Callable[..., tuple[Any, ...]]) -> Callable[..., tuple[Any, ...]]:
        name = fn.__name__
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
        converters = []
        for parameter in signature.parameters:
            hint = hints.get(parameter)
            enum = ENUM_PARAMETERS.get(hint)
            converters.append(enum_member(enum, parameter) if enum is not None else CONVERTERS.get(hint))

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
            given = tuple(signature.bind(*args, **kwargs).arguments.values())
            calls.append((name, given))
            converted = [value if convert is None else convert(value) for convert, value in zip(converters, given)]
            st = STATE
            if st.library_missing:
                if name in QUIET_WHEN_MISSING:
                    return (status(0), None)
                raise RuntimeError(LIBRARY_MISSING)
            return FRONT.invoke(st, name, fn, converted, needs_init, initialize, failed)

        # hip-python's functions carry no annotations: neither does the stand-in's signature.
        bare = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
        call.__signature__ = signature.replace(parameters=bare,  # type: ignore[attr-defined]
                                               return_annotation=inspect.Signature.empty)
        call.__doc__ = (f"{name}{call.__signature__}\n\nhip_standin test double of hip-python's {name}: returns "  # type: ignore[attr-defined]
                        f"(hipError_t, *outputs); see tests/hip_standin/hip.py.")
        call.__hip_standin__ = True  # type: ignore[attr-defined]
        return call

    return wrap


def initialize(st: e.State) -> None:
    """HIP initialises itself on the first call: it fails with the init error, or without devices."""
    if st.init_error is not None:
        raise DriverError(st.init_error)
    if not st.devices:
        raise DriverError(100)  # hipErrorNoDevice
    st.initialized = True


def current_ordinal(st: e.State) -> int:
    return int(getattr(st.tls, "device", 0))


def device(st: e.State, ordinal: int) -> HipDevice:
    if not 0 <= ordinal < len(st.devices):
        raise fail(101, f"no device {ordinal} (there are {len(st.devices)})")  # hipErrorInvalidDevice
    found: HipDevice = st.devices[ordinal]
    return found


def usable(ctx: e.Context) -> e.Context:
    """``ctx``, unless a sticky fault poisoned its device."""
    if ctx.sticky is not None:
        raise DriverError(ctx.sticky)
    return ctx


def current(st: e.State) -> e.Context:
    """The context of the calling thread's current device (its sticky fault, if any, is raised)."""
    return usable(st.devices[current_ordinal(st)].context)


def stream(st: e.State, handle: int) -> tuple[e.Stream | None, e.Context]:
    """(stream, the context its work runs in); None for the null stream (the current device's)."""
    if handle == 0:
        return None, current(st)
    with st.lock:
        found = st.streams.get(handle)
    if found is None:  # HIP's check of a stream handle answers hipErrorContextIsDestroyed
        raise fail(709, f"unknown or destroyed stream {handle:#x}")
    return found, usable(found.ctx)


def lookup(table: dict[int, Any], handle: int, what: str) -> Any:
    with STATE.lock:
        found = table.get(handle)
    if found is None:
        raise fail(400, f"unknown or destroyed {what} {handle:#x}")  # hipErrorInvalidHandle
    return found
