"""olInit and olShutDown: reference-counted, thread-safe start and stop of the runtime."""

from __future__ import annotations

import os
from collections.abc import Iterable

from ..errors import ErrorCode, OffloadError
from ..types import CodeLocation, PlatformBackend
from . import _entry, _state, _trace
from .handles import enum_value, refuse_in_host_function


def olInit(platforms: Iterable[PlatformBackend] | None = None) -> None:
    """Start the runtime, or count one more user of a running one.

    ``platforms`` limits which plugins start (the host always does); it is honoured by the
    call that actually starts the runtime, and later nested calls only count. Every
    ``olInit`` needs one ``olShutDown``; after the last one, ``olInit`` starts afresh.
    """
    backends = None
    if platforms is not None:
        if isinstance(platforms, (str, bytes)) or not hasattr(platforms, "__iter__"):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"platforms must be a sequence of PlatformBackend, got {type(platforms).__name__}")
        backends = [enum_value(PlatformBackend, p, "platform") for p in platforms]
    traced = "OFFLOAD_TRACE" in os.environ
    if traced:
        _trace.call("olInit", ("platforms",), (backends,))
    _state.init(backends)
    if traced:
        _trace.result("olInit", None)


def olInitWithCodeLoc(code_location: CodeLocation | None = None, *,
                      platforms: Iterable[PlatformBackend] | None = None) -> None:
    """olInit with the caller's source location (shown by OFFLOAD_TRACE); ``code_location`` is an
    :class:`offloadrt.CodeLocation` or None. ``platforms`` is offloadrt's extension, as for olInit."""
    location = _entry.code_location(code_location)
    if location is not None and "OFFLOAD_TRACE" in os.environ:
        _trace.emit(f"-- the next olInit is called at {location}")
    olInit(platforms)


@_entry.entry_point
def olShutDown(ctx: _state.Context) -> None:
    """Release one user of the runtime; the last one drains queues, unloads programs, frees
    memory and stops every plugin, raising one error that carries every failure. Not from a
    host function (``INVALID_ARGUMENT``): draining would wait for the host function itself."""
    refuse_in_host_function("olShutDown")
    _state.shut_down()
