"""olInit and olShutDown: reference-counted, thread-safe start and stop of the runtime."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from ..errors import ErrorCode, OffloadError
from ..types import CodeLocation, PlatformBackend
from . import _state
from .handles import enum_value


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
    _state.init(backends)
    ctx = _state.STATE.context
    if ctx is not None and ctx.trace:
        print(f"---> olInit(platforms={backends!r})-> OL_SUCCESS", file=sys.stderr, flush=True)


def olInitWithCodeLoc(code_location: CodeLocation | None = None, *,
                      platforms: Iterable[PlatformBackend] | None = None) -> None:
    """olInit with the caller's source location (shown by OFFLOAD_TRACE); ``code_location`` is an
    :class:`offloadrt.CodeLocation` or None. ``platforms`` is offloadrt's extension, as for olInit."""
    location = _state.code_location(code_location)
    olInit(platforms)
    ctx = _state.STATE.context
    if location is not None and ctx is not None and ctx.trace:
        print(f"     (olInit was called at {location})", file=sys.stderr, flush=True)


@_state.entry_point
def olShutDown(ctx: _state.Context) -> None:
    """Release one user of the runtime; the last one drains queues, unloads programs, frees
    memory and stops every plugin, raising one error that carries every failure."""
    _state.shut_down()
