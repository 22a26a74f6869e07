"""The runtime's global context: reference-counted init and shutdown, platforms, the exit check.

What one init/shutdown cycle owns is a :class:`Context`; ``STATE`` holds the current one and the
reference count under one lock. The entry points are made in :mod:`._entry`.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import ErrorCode, OffloadError, OffloadWarning
from ..plugins import create_plugins
from ..plugins.common import resources
from ..plugins.host import memory as host_memory
from ..types import PlatformBackend, UnavailablePlatform
from . import _trace
from ._allocations import AllocationMap
from .handles import FORK_ADVICE, Device, Platform, forked_away

_FAILED_TO_START = "initialisation failed"


class Context:
    """What one init/shutdown cycle owns."""

    def __init__(self, platforms: Iterable[PlatformBackend] | None, trace: bool, validate: bool):
        self.trace = trace
        self.validate = validate
        self.allocations = AllocationMap()
        self.platforms: list[Platform] = []
        self.not_started: list[UnavailablePlatform] = []  # platforms without devices, and why
        self.devices: list[Device] = []
        for plugin in create_plugins(platforms):
            try:
                plugin.init()
            except OffloadError as exc:
                plugin.unavailable_reason = f"{_FAILED_TO_START}: {exc}"
                warnings.warn(f"offloadrt: the {plugin.name} plugin failed to start: {exc}", OffloadWarning,
                              stacklevel=4)
                for error in plugin.deinit():
                    warnings.warn(f"offloadrt: while stopping {plugin.name}: {error}", OffloadWarning, stacklevel=4)
                self.not_started.append(UnavailablePlatform(plugin.name, plugin.backend, plugin.unavailable_reason))
                continue
            if not plugin.devices:
                self.not_started.append(UnavailablePlatform(plugin.name, plugin.backend,
                                                            plugin.unavailable_reason or "no devices"))
                for error in plugin.deinit():
                    warnings.warn(f"offloadrt: while stopping {plugin.name} (no devices): {error}", OffloadWarning,
                                  stacklevel=4)
                continue
            platform = Platform(plugin)
            platform.devices = [Device(platform, gdev) for gdev in plugin.devices]
            self.platforms.append(platform)
            self.devices.extend(platform.devices)
        self.host_device = next(d for d in self.devices if d.is_host)
        if platforms is not None:
            self._warn_about_missing(platforms)

    @property
    def unavailable(self) -> list[tuple[str, str]]:
        """(plugin name, reason) of the platforms that did not start."""
        return [(p.name, p.reason) for p in self.not_started]

    def _warn_about_missing(self, requested: Iterable[PlatformBackend]) -> None:
        """One warning for each platform ``olInit(platforms=...)`` asked for that did not start."""
        started = {platform.backend for platform in self.platforms}
        reasons = {p.backend: p for p in self.not_started}
        for backend in dict.fromkeys(requested):
            if backend in started or backend is PlatformBackend.HOST:
                continue
            known = reasons.get(backend)
            if known is not None and known.reason.startswith(_FAILED_TO_START):
                continue  # its failure was a warning already
            why = (f"the {known.name} platform did not start: {known.reason.rstrip('.')}" if known is not None
                   else "offloadrt has no plugin for it")
            warnings.warn(f"offloadrt: olInit was asked for {backend.name}, but {why}; only "
                          f"{', '.join(p._plugin.name for p in self.platforms)} started. "
                          f"offloadrt.unavailable_platforms() lists what did not start and why.",
                          OffloadWarning, stacklevel=5)

    def shut_down(self) -> list[OffloadError]:
        """Drain every queue, unload every program, free every allocation, stop every plugin."""
        errors: list[OffloadError] = []
        for device in self.devices:
            errors.extend(_drain_device(device))
        for alloc in self.allocations.drain():
            gdev = alloc.device._gdev
            if gdev is None:
                continue
            try:
                gdev.data_delete(alloc.base, alloc.kind)
            except OffloadError as exc:
                errors.append(exc)
        for platform in self.platforms:
            errors.extend(platform._plugin.deinit())
            for device in platform.devices:
                device._gdev = None
        return errors


def _drain_device(device: Device) -> list[OffloadError]:
    gdev = device._gdev
    assert gdev is not None
    errors: list[OffloadError] = []
    with device.lock:
        device.closed = True
        queues = list(device.live_queues)
        device.live_queues.clear()
        parked = device.parked
        device.parked = []
        programs = list(device.programs)
        device.programs.clear()
    backend_queues = []
    for queue in queues:
        ai, queue._ai = queue._ai, None
        if ai is not None:
            backend_queues.append(ai)
    for ai in backend_queues + parked:
        release_backend_queue(gdev, ai)
    for program in programs:
        image, program._image = program._image, None
        if image is not None:
            try:
                gdev.unload_binary(image)
            except OffloadError as exc:
                errors.append(exc)
    return errors


def keep_past_shutdown(base: int) -> Callable[[int], None] | None:
    """Take the allocation at ``base`` out of the runtime's hands: the last ``olShutDown`` will not free
    it, and the caller frees it later with the function returned. Only host device memory (plain
    libc memory) can outlive its plugin; for other memory, or an address that is not an allocation,
    None (nothing changes)."""
    with STATE.lock:
        context = STATE.context
        if context is None:
            return None
        alloc = context.allocations.find(base)
        if alloc is None or alloc.base != base or not alloc.device.is_host:
            return None
        context.allocations.remove(base)
    return host_memory.free


def release_backend_queue(gdev: Any, ai: Any) -> None:
    """Sync ``ai`` and give it back to its pool; a failure nobody saw becomes a warning."""
    seen = ai.failure is not None and ai.failure.observed
    try:
        gdev.synchronize(ai, release=True)
    except OffloadError:
        failure = ai.failure
        if failure is not None and not seen:
            warnings.warn(f"offloadrt: a destroyed queue failed and nobody synced it: {failure.error}",
                          OffloadWarning, stacklevel=3)


class _GlobalState:
    """The one lock and reference count behind olInit/olShutDown."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards refcount and context
        self.refcount = 0
        self.context: Context | None = None
        # the context while it runs untraced, else None: the hot paths' one test for "no checked path needed"
        self.untraced: Context | None = None
        self.exit_check_registered = False
        self.forked = False  # this process is a child forked while its parent's runtime ran


STATE = _GlobalState()
UNINITIALIZED_MESSAGE = "offloadrt has not been initialized - call olInit before using this API"


def uninitialized() -> OffloadError:
    if STATE.forked:
        return OffloadError(ErrorCode.UNINITIALIZED, f"{UNINITIALIZED_MESSAGE}; {FORK_ADVICE}")
    return OffloadError(ErrorCode.UNINITIALIZED, UNINITIALIZED_MESSAGE)


def _after_fork_in_child() -> None:
    """In a child forked while a runtime ran: that runtime is gone (no worker thread carried over, and
    its locks may be held forever), so the child starts with none, and every handle of the parent's
    refuses its calls at once, saying so, instead of waiting for threads that do not exist."""
    context = STATE.context
    STATE.lock = threading.Lock()
    STATE.refcount = 0
    STATE.context = STATE.untraced = None
    resources.failure_hook = None
    if context is None:
        return
    STATE.forked = True
    for device in context.devices:
        device.lock = threading.Lock()
        device._gdev = None
        device.closed = True
        for queue in list(device.live_queues):
            queue._ai = None
        device.live_queues.clear()
        device.parked = []
        for program in list(device.programs):
            program._image = None
        device.programs.clear()
        forked_away.add(device)


os.register_at_fork(after_in_child=_after_fork_in_child)


def shut_down_meanwhile(call: str) -> OffloadError:
    """The error of a call that raced the last olShutDown and lost: what it made was undone."""
    return OffloadError(ErrorCode.UNINITIALIZED, f"{call}: the runtime was shut down (olShutDown) while this call "
                                                 f"ran; what it created has been released")


def init(platforms: Iterable[PlatformBackend] | None) -> None:
    with STATE.lock:
        if STATE.refcount:
            STATE.refcount += 1
            return
        trace = "OFFLOAD_TRACE" in os.environ
        if trace:
            resources.failure_hook = _trace.queue_failed
            if not faulthandler.is_enabled():  # a crash in native code shows where it happened
                faulthandler.enable()
        STATE.context = Context(platforms, trace=trace, validate="OFFLOAD_DISABLE_VALIDATION" not in os.environ)
        STATE.untraced = None if trace else STATE.context
        STATE.refcount = 1
        if not STATE.exit_check_registered:
            atexit.register(warn_about_work_dropped_at_exit)
            STATE.exit_check_registered = True


def pending_work(context: Context) -> list[tuple[str, int | None]]:
    """(queue, operations not yet done; None where the backend cannot count them) of every busy queue."""
    busy: list[tuple[str, int | None]] = []
    for device in context.devices:
        gdev = device._gdev
        if gdev is None:
            continue
        with device.lock:
            queues = [(str(queue), queue._ai) for queue in device.live_queues]
            queues += [(f"a destroyed queue on {device.label}", ai) for ai in device.parked]
        for name, ai in queues:
            if ai is None or ai.failure is not None or not gdev.has_pending_work(ai):
                continue
            items = getattr(ai, "_items", None)  # a host queue counts what it holds
            busy.append((name, len(items) if items is not None else None))
    return busy


def warn_about_work_dropped_at_exit() -> None:
    """At interpreter exit without the last olShutDown: say what queued work will never run.

    offloadrt does not drain at exit (a host function waiting for something that will never
    happen would hang the exit); it warns once, so nothing is dropped silently.
    """
    context = STATE.context
    if context is None:
        return
    try:
        busy = pending_work(context)
    except Exception as exc:  # noqa: BLE001  # an exit hook must not raise; say what went wrong
        warnings.warn(f"offloadrt: could not check for queued work at exit: {exc!r}", OffloadWarning, stacklevel=1)
        return
    if not busy:
        return
    counted = sum(count or 0 for _, count in busy)
    where = ", ".join(f"{name} ({count if count is not None else 'unknown number of'} operation"
                      f"{'' if count == 1 else 's'})" for name, count in busy)
    total = f"{counted} queued operation{'' if counted == 1 else 's'}" if all(c is not None for _, c in busy) \
        else "queued operations"
    warnings.warn(f"offloadrt: the interpreter is exiting without olShutDown; {total} will not finish, on "
                  f"{where}. Call olSyncQueue or olShutDown before exiting to finish them.",
                  OffloadWarning, stacklevel=1)


def shut_down() -> None:
    with STATE.lock:
        if not STATE.refcount:
            raise uninitialized()
        STATE.refcount -= 1
        if STATE.refcount:
            return
        STATE.untraced = None
        context, STATE.context = STATE.context, None
        assert context is not None
        errors = context.shut_down()
        resources.failure_hook = None
    if errors:
        raise OffloadError.join(errors, "olShutDown: releasing the runtime failed")
