"""The layer's share of the runtime: one ``olInit`` on first use, drained and released at exit.

The layer holds one reference of the reference-counted runtime (``olInit``/``olShutDown`` nest),
so it coexists with a program's own ``olInit``/``olShutDown`` pairs: neither ends the other's use.
Its exit handler is registered after its first ``olInit``; ``atexit`` runs handlers last-registered
first, so the layer drains its queues and gives its reference back before the runtime's own exit
check looks for queued work that will never run.
"""

from __future__ import annotations

import atexit
import os
import threading
import warnings
import weakref
from typing import TYPE_CHECKING

from .. import api
from ..errors import ErrorCode, OffloadError, OffloadWarning
from ..types import DeviceInfo, DeviceType, PlatformInfo
from . import _hostmem

if TYPE_CHECKING:
    from ._device import Device
    from ._queue import Event, Queue

_lock = threading.Lock()  # guards _current and _exit_registered
_current: Runtime | None = None
_exit_registered = False


class Runtime:
    """What one ``olInit`` of the layer owns: its devices and the queues it must drain."""

    def __init__(self) -> None:
        from ._device import Device

        self.closed = False
        self.live_queues: weakref.WeakSet[Queue] = weakref.WeakSet()  # open queues, synced at exit
        self.queues_lock = threading.Lock()  # guards live_queues and held
        # Host objects of closed queues' pending copies, each batch with the event after which it may
        # go (None: when the runtime ends); see Queue._hold.
        self.held: list[tuple[Event | None, list[list[object]]]] = []
        handles: list[api.Device] = []
        api.olIterateDevices(lambda handle, _: handles.append(handle))
        ordinals: dict[object, int] = {}
        self.devices: list[Device] = []
        for handle in handles:
            platform = api.olGetDeviceInfo(handle, DeviceInfo.PLATFORM)
            ordinal = ordinals.get(platform, 0)
            ordinals[platform] = ordinal + 1
            self.devices.append(Device(self, handle, api.olGetPlatformInfo(platform, PlatformInfo.BACKEND),
                                       api.olGetPlatformInfo(platform, PlatformInfo.NAME),
                                       api.olGetDeviceInfo(handle, DeviceInfo.TYPE), ordinal))
        self.host = next(d for d in self.devices if d.type == DeviceType.HOST)

    def add_queue(self, queue: Queue) -> None:
        with self.queues_lock:
            self.live_queues.add(queue)

    def drop_queue(self, queue: Queue) -> None:
        with self.queues_lock:
            self.live_queues.discard(queue)

    def hold(self, event: Event | None, objects: list[list[object]]) -> None:
        """Keep ``objects`` until ``event`` is complete (None: until the runtime ends), and let go of
        those held before whose event is complete now."""
        with self.queues_lock:
            held, self.held = self.held, []
        keep = [(event, objects)]
        for entry in held:
            earlier = entry[0]
            try:
                done = earlier is not None and earlier.done
            except OffloadError:
                done = False
            if done:
                earlier.close()  # type: ignore[union-attr]
            else:
                keep.append(entry)
        with self.queues_lock:
            self.held.extend(keep)

    def check(self) -> None:
        """``INVALID_DEVICE`` once this runtime was shut down (its objects are dead)."""
        if self.closed:
            raise stale()


def _drain_within(queues: list[Queue], timeout: float, unseen: list[str]) -> list[Queue]:
    """Drain ``queues`` on a helper thread for at most ``timeout`` seconds; the queues not drained by
    then (the thread goes on with them, and ends with the process)."""
    drained: list[Queue] = []
    finished = threading.Event()

    def drain() -> None:
        try:
            for queue in queues:
                failure = queue._drain()
                if failure is not None:
                    unseen.append(failure)
                drained.append(queue)
        finally:
            finished.set()

    try:
        threading.Thread(target=drain, name="offloadrt-exit-drain", daemon=True).start()
    except RuntimeError:  # no thread can start (out of memory or mappings): waiting could hang, so do not wait
        return list(queues)
    finished.wait(timeout)
    done = set(map(id, drained))
    return [queue for queue in queues if id(queue) not in done]


def stale() -> OffloadError:
    if _forked_from_runtime:
        return OffloadError(ErrorCode.INVALID_DEVICE, "this object belongs to the offloadrt runtime of the process "
                                                      "this one was forked from, which a forked child cannot use; "
                                                      "get new devices with offloadrt.devices() or offloadrt.device() "
                                                      "(the child's own runtime), or start child processes with "
                                                      "multiprocessing's 'spawn' or 'forkserver' method")
    return OffloadError(ErrorCode.INVALID_DEVICE, "this object belongs to an offloadrt runtime that was shut down; "
                                                  "get new devices with offloadrt.devices() or offloadrt.device()")


_forked_from_runtime = False  # this process is a child forked while the layer's runtime ran


def _after_fork_in_child() -> None:
    """The parent's runtime is gone in a forked child (see api/_state.py): its objects are stale, the
    child starts its own on first use, and its exit waits for nothing of the parent's."""
    global _current, _lock, _forked_from_runtime
    _lock = threading.Lock()
    current, _current = _current, None
    if current is None:
        return
    _forked_from_runtime = True
    current.closed = True
    current.queues_lock = threading.Lock()
    current.live_queues = weakref.WeakSet()
    current.held = []
    for device in current.devices:
        if device._pool is not None:
            device._pool._abandon_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def runtime() -> Runtime:
    """The layer's running runtime, started (``olInit``) on first use."""
    current = _current
    if current is not None:
        return current
    return _start()


def _start() -> Runtime:
    global _current, _exit_registered
    with _lock:
        if _current is not None:
            return _current
        api.olInit()
        try:
            started = Runtime()
        except BaseException:
            api.olShutDown()
            raise
        if not _exit_registered:  # after olInit: runs before the runtime's own exit check
            atexit.register(_at_exit)
            _exit_registered = True
        _current = started
        return started


EXIT_TIMEOUT = 5.0  # seconds the exit handler waits for queued work (OFFLOADRT_EXIT_TIMEOUT)


def exit_timeout() -> float:
    """``OFFLOADRT_EXIT_TIMEOUT`` in seconds (a number >= 0), else :data:`EXIT_TIMEOUT` (with a warning
    when the variable is set to something else)."""
    text = os.environ.get("OFFLOADRT_EXIT_TIMEOUT")
    if text is None:
        return EXIT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < float("inf"):
        warnings.warn(f"offloadrt: OFFLOADRT_EXIT_TIMEOUT={text!r} is not a number of seconds >= 0; waiting "
                      f"{EXIT_TIMEOUT:g} s", OffloadWarning, stacklevel=2)
        return EXIT_TIMEOUT
    return value


def _at_exit() -> None:
    try:
        shutdown(timeout=exit_timeout())
    except OffloadError as exc:
        warnings.warn(f"offloadrt: releasing the Python layer's runtime at exit failed: {exc}", OffloadWarning,
                      stacklevel=1)


def discard(dead: Runtime) -> None:
    """Forget ``dead``, a runtime that ended under the layer (a program's extra ``olShutDown``), without
    giving back a reference it no longer holds; the next use starts afresh."""
    global _current
    with _lock:
        if _current is dead:
            _current = None
    dead.closed = True
    for device in dead.devices:
        if device._pool is not None:
            device._pool._abandon()


def shutdown(timeout: float | None = None) -> None:
    """Drain the layer's queues and give its runtime reference back (``olShutDown``).

    Objects made before become stale: using them raises ``INVALID_DEVICE`` (or the stale-handle
    error of the ``ol*`` call). The next use of the layer starts a fresh runtime. Called at exit,
    with ``timeout``: the queues' work is waited for that many seconds at most; what has not
    finished by then is left to end with the process (a warning says which queues), and the
    runtime reference is not given back (its own exit check warns about the operations left).
    Tests call it to leave no runtime behind.
    """
    global _current
    with _lock:
        current, _current = _current, None
    if current is None:
        return
    current.closed = True
    with current.queues_lock:
        queues = list(current.live_queues)
        current.live_queues.clear()
    unseen: list[str] = []
    if timeout is None:
        for queue in queues:
            failure = queue._drain()
            if failure is not None:
                unseen.append(failure)
    else:
        left = _drain_within(queues, timeout, unseen)
        if left:
            names = ", ".join(repr(queue) for queue in left[:8]) + (", ..." if len(left) > 8 else "")
            warnings.warn(f"offloadrt: the interpreter is exiting and {len(left)} queue(s) still have work after "
                          f"{timeout:g} s (OFFLOADRT_EXIT_TIMEOUT): {names}; that work will not finish",
                          OffloadWarning, stacklevel=2)
            return  # the work ends with the process; olShutDown would wait for it
    lost = _hostmem.keep_exported(current.devices)
    if lost:
        unseen.append(f"{len(lost)} buffer(s) of GPU memory are still exported (a NumPy view, memoryview or "
                      f"DLPack tensor: {', '.join(repr(b) for b in lost[:4])}{', ...' if len(lost) > 4 else ''}); "
                      f"GPU memory goes with its driver context at this shutdown, so nothing may read them any more")
    for device in current.devices:
        pool = device._pool
        if pool is not None:
            pool._abandon()
    for text in unseen:
        warnings.warn(f"offloadrt: {text}", OffloadWarning, stacklevel=2)
    api.olShutDown()
    with current.queues_lock:
        current.held.clear()  # the runtime's work is over
