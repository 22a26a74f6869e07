"""Queues and events: :class:`Queue` (in-order work, kernel launches) and :class:`Event`."""

from __future__ import annotations

import struct
import threading
import warnings
from typing import TYPE_CHECKING, Any

from .. import api
from ..errors import ErrorCode, OffloadError, OffloadWarning
from ..types import EventFlags, EventInfo, PlatformBackend
from . import _args
from ._errors import NotAvailableError, with_context

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._device import Device
    from ._program import Kernel

_launch = api.olLaunchKernel
_PLAIN, _PROFILING = EventFlags.NONE, EventFlags.ENABLE_PROFILING
HOLD_BATCH = 64  # host objects of queued copies held per event (see Queue._hold)
_PACK_ERRORS = (struct.error, TypeError, AttributeError, OverflowError, ValueError)


def _call(call: tuple[Callable[..., object], tuple[Any, ...]]) -> None:
    function, args = call
    function(*args)


class Queue:
    """An in-order queue of work on one device: copies, fills, kernel launches, host functions.

    Work runs asynchronously, in the order it was given. Use a queue in a ``with`` block: at its
    end the queue waits for its work (:meth:`sync`) and is closed (without waiting when the block
    is left by a ``BaseException`` that is no ``Exception``, such as ``KeyboardInterrupt``). A kernel fault or a host
    function that raises puts the queue in the error state: later work does not run, and
    :meth:`sync` raises ``QUEUE_ERROR`` (``error`` tells the original failure). The error state is
    never cleared; make a new queue.

    Example::

        with device.queue() as queue:
            queue.launch(kernel, blocks, threads, x, y, numpy.uint32(n))
            queue.host_function(print, "launched")
    """

    __slots__ = ("_handle", "_device", "_device_handle", "_final_event", "_error_seen", "_held", "_sealed",
                 "_hold_lock", "__weakref__")

    def __init__(self, device: Device) -> None:
        device._runtime.check()
        try:
            handle = api.olCreateQueue(device.handle)
        except OffloadError as exc:
            raise with_context(exc, f"creating a queue on {device}") from exc
        self._handle: api.Queue | None = handle
        self._device = device
        self._device_handle = device.handle
        self._final_event: Event | None = None  # recorded when the queue was closed with work pending
        self._error_seen = False
        # Host objects that queued copies read or write later (see _hold): those given since the last
        # seal, and the sealed batches with the event after them, oldest first.
        self._held: list[object] = []
        self._sealed: list[tuple[api.Event, list[object]]] = []
        # Guards taking batches out of _held/_sealed (appending to _held needs no lock: list.append is
        # atomic, and an object appended to a batch being taken had its copy queued before the take).
        self._hold_lock = threading.Lock()
        device._runtime.add_queue(self)

    @property
    def device(self) -> Device:
        """The device the queue runs work on."""
        return self._device

    @property
    def handle(self) -> api.Queue:
        """The ``ol*`` API's queue."""
        return self._live()

    def _live(self) -> api.Queue:
        handle = self._handle
        if handle is None:
            raise OffloadError(ErrorCode.INVALID_QUEUE, f"{self!r} is closed; make a new queue with device.queue()")
        return handle

    # ---- waiting -------------------------------------------------------------------------------

    def sync(self) -> None:
        """Wait until all work given to the queue so far is done; ``QUEUE_ERROR`` if it failed.

        Not from a host function (``INVALID_ARGUMENT``): the work it would wait for may be behind it.
        """
        handle = self._live()
        taken = self._take_held() if self._held or self._sealed else None  # what the sync covers
        try:
            api.olSyncQueue(handle)
        except OffloadError as exc:
            self._error_seen = True
            if taken is not None:
                self._put_back_held(*taken)
            if exc.code == ErrorCode.QUEUE_ERROR:
                raise
            raise with_context(exc, f"syncing {self!r}") from exc
        if taken is not None:
            for event, _batch in taken[0]:
                _destroy_event(event)

    # ---- host objects of queued copies -----------------------------------------------------------

    def _hold(self, objects: object) -> None:
        """Keep ``objects`` (host memory a queued copy reads or writes later) alive until the queue's
        work given so far is done, without a host function per copy (a driver callback costs tens of
        microseconds on a GPU). They are held in batches of :data:`HOLD_BATCH`: each batch is sealed
        with a plain event recorded after it and let go once that event is complete (looked at when
        the next batch is sealed), or when a :meth:`sync` returns."""
        held = self._held
        held.append(objects)
        if len(held) >= HOLD_BATCH:
            self._seal()

    def _seal(self) -> None:
        if not self._hold_lock.acquire(blocking=False):
            return  # another thread seals: this batch goes into the next
        try:
            sealed = self._sealed
            while sealed:  # oldest first: let go of the batches whose work is done
                try:
                    done = api.olGetEventInfo(sealed[0][0], EventInfo.IS_COMPLETE)
                except OffloadError:
                    done = False
                if not done or api.olGetQueueError(self._live())[0] is not None:
                    break  # (on a failed queue a GPU may still run the work behind the failure: hold on)
                _destroy_event(sealed.pop(0)[0])
            batch, self._held = self._held, []  # every copy of these was queued before the event below
            try:
                event = api.olCreateEvent(self._live())
            except OffloadError:  # a failed or closed queue: hold on; closing hands everything over
                self._held = batch + self._held
                return
            sealed.append((event, batch))
        finally:
            self._hold_lock.release()

    def _take_held(self) -> tuple[list[tuple[api.Event, list[object]]], list[object]]:
        """Take every sealed batch and the held objects out of the queue (the caller holds them now)."""
        with self._hold_lock:
            taken = (self._sealed, self._held)
            self._sealed, self._held = [], []
        return taken

    def _put_back_held(self, sealed: list[tuple[api.Event, list[object]]], held: list[object]) -> None:
        with self._hold_lock:
            self._sealed = sealed + self._sealed
            self._held = held + self._held

    def _release_held(self) -> None:
        """The queue's work given before this call is done: let go of what it held."""
        sealed, _held = self._take_held()
        for event, _batch in sealed:
            _destroy_event(event)

    def _hand_over_held(self, final: Event | None) -> None:
        """The queue is closed: the runtime holds its objects until ``final`` is complete (None: until
        the runtime ends)."""
        sealed, held = self._take_held()
        for event, _batch in sealed:
            _destroy_event(event)
        self._device._runtime.hold(final, [batch for _event, batch in sealed] + [held])

    @property
    def done(self) -> bool:
        """Whether all work given so far is done (never waits); ``QUEUE_ERROR`` if the queue failed."""
        try:
            return bool(api.olQueryQueue(self._live()))
        except OffloadError:
            self._error_seen = True
            raise

    @property
    def error(self) -> tuple[OffloadError, api.Queue] | None:
        """``(error, failing ol* queue)`` once the queue is in the error state, else None. The failing
        queue is this one's handle, or that of a queue it waited on that failed first."""
        error, failing = api.olGetQueueError(self._live())
        if error is None:
            return None
        self._error_seen = True
        return error, failing

    # ---- ordering ------------------------------------------------------------------------------

    def record(self, timing: bool = False) -> Event:
        """An :class:`Event` at the current end of the queue's work.

        ``timing=True`` makes an event that takes a timestamp, so that ``end - start`` can measure
        the time between two such events. Plain events take none: on a GPU they cost a fraction of
        a timed one.
        """
        try:
            handle = api.olCreateEvent(self._live(), _PROFILING if timing else _PLAIN)
        except OffloadError as exc:
            raise with_context(exc, f"recording an event on {self!r}") from exc
        return Event(handle, self)

    def wait(self, *events: Event) -> None:
        """Make work given to this queue from now on wait until every one of ``events`` is complete
        (events of any queue or device). Does not wait itself."""
        handles = []
        for event in events:
            if not isinstance(event, Event):
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   f"Queue.wait takes offloadrt Events (queue.record()), got {type(event).__name__}")
            handles.append(event._live())
        try:
            api.olWaitEvents(self._live(), handles)
        except OffloadError as exc:
            raise with_context(exc, f"making {self!r} wait") from exc

    def host_function(self, function: Callable[..., object], *args: Any) -> None:
        """Call ``function(*args)`` in the queue's order, on a runtime thread.

        It starts after all earlier work is done, and later work starts after it returns. It may
        read and write memory, enqueue work, allocate and query, but it **must not wait**: calling
        :meth:`sync`, :meth:`Event.sync` or anything else that waits for queued work from a host
        function raises ``INVALID_ARGUMENT`` (the work may be behind the host function itself), and
        blocking on anything else blocks this queue and everything waiting on it. If it raises, the
        queue enters the error state with that exception as the cause.
        """
        if not callable(function):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"host_function needs a callable, got {type(function).__name__}")
        try:
            api.olLaunchHostFunction(self._live(), _call, (function, args))
        except OffloadError as exc:
            raise with_context(exc, f"adding a host function to {self!r}") from exc

    # ---- kernels -------------------------------------------------------------------------------

    def launch(self, kernel: Kernel, grid: int | tuple[int, ...], block: int | tuple[int, ...], *args: Any,
               shared_mem: int = 0) -> None:
        """Launch ``kernel`` over ``grid`` work-groups of ``block`` work-items each, in queue order.

        ``grid`` and ``block`` are an int or a tuple of up to 3 ints. ``shared_mem`` is the bytes of
        work-group (shared) memory each group gets. Arguments: a Buffer or Array becomes its device
        pointer; a NumPy scalar or ctypes instance its bytes; a plain Python int or float is packed
        as ``kernel.signature`` says (without a signature it is a ``TypeError``). Parameters are
        laid out with C alignment, the blob ending where the last one ends (as a GPU takes it).
        Buffers passed are not reused by the pool until this launch is done.
        """
        try:
            if kernel._fast(self, grid, block, shared_mem, args):
                return
        except OffloadError as exc:
            raise self._launch_error(exc, kernel) from exc
        except (TypeError, ValueError, AttributeError):
            pass  # another arity, an unhashable grid, not a Kernel: the slow path says what is wrong
        self._launch_slowly(kernel, grid, block, args, shared_mem)

    def _launch_slowly(self, kernel: Kernel, grid: Any, block: Any, args: tuple[Any, ...], shared_mem: Any) -> None:
        """A launch whose plan or sizes are not cached yet (or whose queue is closed): check everything,
        saying what is wrong, and cache what it built."""
        from ._program import Kernel

        handle = self._live()
        if not isinstance(kernel, Kernel):
            raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                               f"launch needs an offloadrt Kernel (program.kernel(name)), got {type(kernel).__name__}")
        if kernel._program._device is not self._device:
            raise OffloadError(ErrorCode.INVALID_DEVICE,
                               f"kernel '{kernel.name}' is loaded on {kernel._program._device}, but {self!r} runs on "
                               f"{self._device}; load the program on {self._device} or use one of its queues")
        sizes = _args.launch_sizes(grid, block, shared_mem)
        plan = _args.build_plan(kernel._params, args, kernel.name)
        try:
            blob = plan(self, *args)
        except _PACK_ERRORS as exc:
            raise _args.explain_failure(plan, args, kernel.name, exc) from None
        try:
            _launch(handle, self._device_handle, kernel.handle, blob, sizes)
        except OffloadError as exc:
            raise self._launch_error(exc, kernel) from exc
        try:
            kernel._fast = _args.build_fast_launch(plan, args, kernel._program._device.handle, kernel._handle,
                                                   (grid, block, shared_mem), sizes, _launch, kernel.name)
        except TypeError:
            pass  # an unhashable grid or block: this launch shape stays on the slow path

    def _launch_error(self, error: OffloadError, kernel: Kernel) -> OffloadError:
        if error.code == ErrorCode.QUEUE_ERROR:
            self._error_seen = True
        return with_context(error, f"launching kernel '{kernel.name}' on {self!r}")

    # ---- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the queue without waiting; work already given still runs. Closing twice is allowed."""
        handle = self._handle
        if handle is None:
            return
        self._device._runtime.drop_queue(self)
        if self._device._runtime.closed:
            self._handle = None
            return
        try:
            idle = api.olQueryQueue(handle)
        except OffloadError:
            idle = True  # failed: nothing more runs on it
        if not idle:
            try:
                self._final_event = Event(api.olCreateEvent(handle), self)
            except OffloadError:
                pass
        if self._held or self._sealed:
            if idle:
                self._release_held()
            else:
                self._hand_over_held(self._final_event)
        self._handle = None
        try:
            api.olDestroyQueue(handle)
        except OffloadError as exc:
            raise with_context(exc, f"closing {self!r}") from exc

    def _mark(self) -> Event | None | bool:
        """The pool's marker of "the work given so far": an event (None: nothing pending, False: the
        queue failed and its work may never be known to be done)."""
        handle = self._handle
        if handle is None:
            return self._final_event
        try:
            return Event(api.olCreateEvent(handle), self)
        except OffloadError:
            return False

    def _drain(self) -> str | None:
        """At shutdown: wait for the queue's work and close it; the failure nobody saw, if any."""
        handle = self._handle
        if handle is None:
            return None
        unseen = None
        try:
            api.olSyncQueue(handle)
        except OffloadError as exc:
            if not self._error_seen:
                unseen = f"{self!r} failed and nobody synced it: {exc.details}"
            self._hand_over_held(self._final_event)  # a GPU may still run work: held until the runtime ends
        else:
            self._release_held()
        self._handle = None
        try:
            api.olDestroyQueue(handle)
        except OffloadError:
            pass
        return unseen

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        seen = self._error_seen
        try:
            # Left by KeyboardInterrupt, SystemExit or another BaseException that is no Exception: the
            # user wants out, so do not wait for the work (close, which never waits, still runs).
            leaving = exc_type is not None and not (isinstance(exc_type, type) and issubclass(exc_type, Exception))
            if self._handle is not None and not leaving:
                try:
                    self.sync()
                except OffloadError as error:
                    # the body's own exception says more; a failure the body already saw is not news
                    if exc_type is None and not (seen and error.code == ErrorCode.QUEUE_ERROR):
                        raise
        finally:
            self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            try:
                self.close()
            except Exception as exc:  # noqa: BLE001  # a finaliser must not raise
                try:
                    warnings.warn(f"offloadrt: closing a garbage-collected queue failed: {exc}", OffloadWarning,
                                  stacklevel=2)
                except Exception:  # noqa: BLE001, S110  # interpreter shutdown
                    pass

    def __repr__(self) -> str:
        if self._handle is None:
            return f"<Queue on {self._device} (closed)>"
        return f"<Queue {str(self._handle).split(' on ')[0]} on {self._device}>"


def _destroy_event(event: api.Event) -> None:
    try:
        api.olDestroyEvent(event)
    except OffloadError:
        pass  # the runtime was shut down meanwhile: the event is gone with it


class CudaQueue(Queue):
    """A :class:`Queue` of a CUDA device: also a CUDA stream (``__cuda_stream__``)."""

    __slots__ = ()

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol: ``(0, the address of the queue's CUstream)``."""
        return 0, native_stream(self._live())


def native_stream(handle: api.Queue) -> int:
    """The address of the driver stream behind a GPU queue (``api.Queue.native_handle``)."""
    stream = handle.native_handle
    if not stream:
        raise NotAvailableError(ErrorCode.UNSUPPORTED, f"{handle} has no driver stream")
    return stream


def check(queue: object, device: Device, what: str) -> Queue:
    """``queue`` must be an open offloadrt Queue of ``device`` (the device that does the work)."""
    if not isinstance(queue, Queue):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"queue must be an offloadrt Queue (device.queue()) or None, got {type(queue).__name__}")
    queue._live()
    if queue._device is not device:
        raise OffloadError(ErrorCode.INVALID_DEVICE,
                           f"cannot {what} a queue of {queue._device}: the work runs on {device}; pass a queue of "
                           f"{device} (device.queue()), or none")
    return queue


def make_queue(device: Device) -> Queue:
    return CudaQueue(device) if device.backend == PlatformBackend.CUDA else Queue(device)


class Event:
    """A point in a queue's work (:meth:`Queue.record`): complete once the work before it is done.

    ``end - start`` is the time between two events in milliseconds (it waits for both). Pass
    events to :meth:`Queue.wait` to order work across queues and devices.
    """

    __slots__ = ("_handle", "_queue", "_device")

    def __init__(self, handle: api.Event, queue: Queue) -> None:
        self._handle: api.Event | None = handle
        self._queue = queue
        self._device = queue._device

    @property
    def handle(self) -> api.Event:
        """The ``ol*`` API's event."""
        return self._live()

    def _live(self) -> api.Event:
        handle = self._handle
        if handle is None:
            raise OffloadError(ErrorCode.INVALID_EVENT, "the event is closed")
        return handle

    @property
    def done(self) -> bool:
        """Whether the work before the event is done (also True if its queue failed before it)."""
        return bool(api.olGetEventInfo(self._live(), EventInfo.IS_COMPLETE))

    def sync(self) -> None:
        """Wait until the event is complete; ``QUEUE_ERROR`` if its queue failed before reaching it."""
        try:
            api.olSyncEvent(self._live())
        except OffloadError as exc:
            if exc.code == ErrorCode.QUEUE_ERROR:
                self._queue._error_seen = True
                raise
            raise with_context(exc, "syncing an event") from exc

    def __sub__(self, start: Event) -> float:
        """``end - start``: milliseconds between the two events (both on one device, both recorded
        with ``timing=True``); waits for both."""
        if not isinstance(start, Event):
            return NotImplemented
        try:
            return float(api.olGetEventElapsedTime(start._live(), self._live()))
        except OffloadError as exc:
            if exc.code == ErrorCode.INVALID_ARGUMENT and "took no timestamp" in exc.details:
                raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                                   "measuring the time between two events needs events that take a timestamp: "
                                   "record both with queue.record(timing=True)") from exc
            raise with_context(exc, "measuring the time between two events") from exc

    def close(self) -> None:
        """Release the event (work before it goes on); closing twice is allowed."""
        handle, self._handle = self._handle, None
        if handle is not None and not self._device._runtime.closed:
            try:
                api.olDestroyEvent(handle)
            except OffloadError as exc:
                raise with_context(exc, "closing an event") from exc

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            try:
                self.close()
            except Exception:  # noqa: BLE001, S110  # a finaliser must not raise; a stale event is gone anyway
                pass

    def __repr__(self) -> str:
        return f"<Event of {self._queue!r}{' (closed)' if self._handle is None else ''}>"
