"""Backend queues, events, queue failures and the per-device resource pools.

These are the generic halves of a backend's queue and event objects: a backend subclasses
:class:`AsyncInfo` and :class:`GenericEvent` and adds its driver handles.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Generic, NoReturn, TypeVar

from ...errors import ErrorCode, OffloadError, OffloadWarning


class QueueFailure:
    """Why a queue entered the error state, and which queue failed first.

    ``origin`` is the owner tag (the api's queue handle) of the queue whose own work failed;
    queues that fail by waiting on it share the same failure object.
    """

    __slots__ = ("error", "origin", "observed")

    def __init__(self, error: OffloadError, origin: object):
        self.error = error
        self.origin = origin
        self.observed = False

    def queue_error(self, owner: object = None) -> OffloadError:
        """The ``QUEUE_ERROR`` a call on a failed queue raises; marks the failure as seen.

        ``owner`` is the queue the call was made on: when it is not the queue that failed
        first, the message says that it failed by waiting on that one.
        """
        self.observed = True
        if owner is not None and self.origin is not None and owner is not self.origin:
            text = (f"the queue is in the error state because it waited (olWaitEvents) on {self.origin}, "
                    f"which failed: {self.error}")
        else:
            text = f"the queue is in the error state: {self.error}"
        err = OffloadError(ErrorCode.QUEUE_ERROR, text)
        err.__cause__ = self.error
        return err


# The backend queue whose host functions the current thread runs (a host queue's worker thread, or a
# GPU driver's callback thread while it runs one); see running_host_function. The class attribute is
# what a thread that never ran one reads: a plain attribute read, where getattr with a default on a
# missing attribute of a threading.local costs an AttributeError raised and caught (about 0.6 us).
class HostFunctionThread(threading.local):
    """``queue``: the backend queue whose host function runs on this thread, or None. The hot paths
    of the calls that wait read it in their own frame (``host_function_thread.queue``)."""

    queue: AsyncInfo | None = None


host_function_thread = HostFunctionThread()


def set_host_function_queue(queue: AsyncInfo | None) -> None:
    """Mark the calling thread as running the host functions of ``queue`` (None: no longer)."""
    host_function_thread.queue = queue


def running_host_function() -> AsyncInfo | None:
    """The backend queue whose host function is running on this thread, or None."""
    return host_function_thread.queue


#: Called as ``failure_hook(owner, failure)`` when a queue enters the error state (set by the API
#: layer while OFFLOAD_TRACE is on, to report the failure when it happens); it must not raise.
failure_hook: Callable[[object, QueueFailure], None] | None = None


def report_failure(owner: object, failure: QueueFailure) -> None:
    """Tell the failure hook, if any, that the queue ``owner`` just failed."""
    hook = failure_hook
    if hook is not None:
        try:
            hook(owner, failure)
        except Exception as exc:  # noqa: BLE001  # a trace must never break the queue that failed
            warnings.warn(f"offloadrt: reporting a queue failure failed: {exc!r}", OffloadWarning, stacklevel=2)


class AsyncInfo:
    """A backend queue: work submitted to it runs in order, asynchronously from the caller.

    ``owner`` is set by whoever holds the queue (the api's queue handle) and is what a
    failure names as its origin. ``failure`` is ``None`` until the queue fails; it is never
    cleared, and a failed backend queue is destroyed instead of being pooled again.
    """

    __slots__ = ("device", "owner", "failure", "__weakref__")

    def __init__(self, device: object):
        self.device = device
        self.owner: object = None
        self.failure: QueueFailure | None = None

    def fail(self, error: OffloadError) -> QueueFailure:
        """Put the queue in the error state with ``error``, unless it already failed."""
        failure = self.failure
        if failure is None:
            failure = QueueFailure(error, self.owner)
            report_failure(self.owner, failure)  # first: whoever sees the failure sees it after the report
            self.failure = failure
        return failure

    def native_handle(self) -> int:
        """The driver's handle of this queue as an integer (0 where there is no driver queue)."""
        return 0

    def queue_error(self) -> OffloadError:
        """The ``QUEUE_ERROR`` for a call on this (failed) queue; says if it failed by waiting on another."""
        failure = self.failure
        assert failure is not None
        return failure.queue_error(self.owner)

    def adopt(self, failure: QueueFailure) -> None:
        """Fail because work this queue waited on failed; keeps the first queue as origin."""
        if self.failure is None:
            report_failure(self.owner, failure)
            self.failure = failure


class GenericEvent:
    """A point in a queue's work. ``failure`` is set when the queue failed before reaching it;
    ``timed``: the event takes a timestamp (only timed events measure elapsed time)."""

    __slots__ = ("device", "failure", "timed", "__weakref__")

    def __init__(self, device: object, timed: bool = False):
        self.device = device
        self.failure: QueueFailure | None = None
        self.timed = timed


R = TypeVar("R")


def _closed_pool(name: str) -> OffloadError:
    return OffloadError(ErrorCode.UNINITIALIZED, f"the device was de-initialised (olShutDown) while a {name} was "
                                                 f"being created")


class ResourcePool(Generic[R]):
    """A LIFO pool of backend resources (queues, events) that grows on demand.

    ``acquire`` hands out a pooled resource or creates one; ``release`` puts it back;
    ``discard`` destroys one that must not be reused. ``deinit`` destroys what is pooled and
    warns about resources never returned (they are leaked, never freed while in use), unless
    ``warn_missing`` is off for resources that die with their device anyway. After ``deinit``
    the pool is closed: a resource released later is destroyed, and ``acquire`` fails, so a
    call racing the last ``olShutDown`` cannot leave a resource (a queue thread) behind.

    Taking a pooled resource and putting one back take no lock (``list.pop`` and ``append`` are
    atomic): each pooled resource is popped by exactly one taker, ``deinit`` included, and both
    look at ``closed`` after their pop or append, so one that raced ``deinit`` destroys what it
    holds itself. The lock guards ``live`` and the moment ``closed`` is set.
    """

    def __init__(self, name: str, create: Callable[[], R], destroy: Callable[[R], None], warn_missing: bool = True):
        self.name = name
        self.warn_missing = warn_missing
        self._create = create
        self._destroy = destroy
        # The pooled resources: one list for the pool's life (see above). Hot paths may take from
        # it and put back into it themselves, in this protocol: pop, then test closed (closed:
        # reject()); append, then test closed (closed: reap()).
        self.free: list[R] = []
        self._lock = threading.Lock()  # guards live and the setting of closed
        self.live = 0  # resources that exist: pooled plus handed out
        self.closed = False  # set by deinit: later releases destroy, acquires fail

    def acquire(self) -> R:
        free = self.free
        if free:
            try:
                resource = free.pop()
            except IndexError:  # another thread took the last one meanwhile
                pass
            else:
                if not self.closed:
                    return resource
                self.reject(resource)  # deinit began meanwhile
        if self.closed:
            raise _closed_pool(self.name)
        resource = self._create()
        with self._lock:
            if not self.closed:
                self.live += 1
                return resource
        self._destroy(resource)  # the device was de-initialised while this one was made
        raise _closed_pool(self.name)

    def release(self, resource: R) -> None:
        """Pool ``resource`` again; once the pool is closed (the device de-initialised), destroy it."""
        if not self.closed:
            self.free.append(resource)
            if not self.closed:
                return
            self.reap()  # deinit began meanwhile and may have drained the pool before the append
            return
        self._destroy_late(resource)

    def reject(self, resource: R) -> NoReturn:
        """A resource popped from ``free`` after ``deinit`` began: destroy it, and fail as ``acquire`` does."""
        self._destroy_late(resource)
        raise _closed_pool(self.name)

    def _destroy_late(self, resource: R) -> None:
        """Destroy a resource of a closed pool."""
        with self._lock:
            self.live -= 1
        self._destroy(resource)

    def reap(self) -> None:
        """Destroy whatever is pooled in a closed pool (after an append to ``free`` that found it closed)."""
        free = self.free
        while free:
            try:
                resource = free.pop()
            except IndexError:
                return
            self._destroy_late(resource)

    def discard(self, resource: R) -> None:
        with self._lock:
            self.live -= 1
        self._destroy(resource)

    @property
    def pooled(self) -> int:
        return len(self.free)

    def deinit(self) -> list[OffloadError]:
        """Destroy every pooled resource; return the errors instead of stopping at the first."""
        with self._lock:
            self.closed = True
        errors: list[OffloadError] = []
        free = self.free
        while free:
            try:
                resource = free.pop()
            except IndexError:  # a racing acquire or release took the last one
                break
            with self._lock:
                self.live -= 1
            try:
                self._destroy(resource)
            except OffloadError as exc:
                errors.append(exc)
        with self._lock:
            missing = self.live
        if missing and self.warn_missing:
            warnings.warn(
                f"{missing} {self.name}(s) were never returned to the pool; leaking them",
                OffloadWarning,
                stacklevel=2,
            )
        return errors
