"""Queues: create/destroy with recycling, sync, query, waits, host functions, async errors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ErrorCode, OffloadError
from ..plugins.common.resources import AsyncInfo, GenericEvent, running_host_function
from ..plugins.common.resources import host_function_thread as _host_function_thread
from ..types import QUEUE_INFO_KINDS, QueueInfo
from ._entry import adopt_entry_point, entry_point
from ._info import value_size
from ._state import STATE as _STATE
from ._state import Context, release_backend_queue, shut_down_meanwhile
from .handles import (
    Device,
    Event,
    Queue,
    bad_handle,
    enum_value,
    live_device,
    live_event,
    live_queue,
    refuse_in_host_function,
)

# Destroyed-but-busy backend queues a device keeps before olCreateQueue waits for the oldest.
PARKED_QUEUE_LIMIT = 64


def _take_parked(device: Device, gdev: Any, may_wait: bool) -> AsyncInfo | None:
    """A parked backend queue whose work has finished (newest first), or None.

    Finished parked queues that failed are destroyed on the way. When the device already
    parks ``PARKED_QUEUE_LIMIT`` busy queues, the oldest is taken and waited for, so the
    number of backend queues stays bounded however fast queues are destroyed; a host
    function (``may_wait`` False) never waits: the parked queue may be behind it.
    """
    failed: list[AsyncInfo] = []
    chosen: AsyncInfo | None = None
    must_wait = False
    with device.lock:
        parked = device.parked
        for index in range(len(parked) - 1, -1, -1):
            ai = parked[index]
            if gdev.has_pending_work(ai):
                continue
            del parked[index]
            if ai.failure is None:
                chosen = ai
                break
            failed.append(ai)
        if chosen is None and may_wait and len(parked) >= PARKED_QUEUE_LIMIT:
            chosen = parked.pop(0)
            must_wait = True
    for ai in failed:
        release_backend_queue(gdev, ai)
    if chosen is not None:
        try:
            gdev.synchronize(chosen, release=False)
        except OffloadError:
            if not must_wait:
                raise
            release_backend_queue(gdev, chosen)
            return None
    return chosen


def _create_queue(ctx: Context, device: Device) -> Queue:
    """A new in-order queue on ``device``; reuses a finished parked queue when there is one."""
    gdev = live_device(device)
    assert isinstance(device, Device)
    return _new_queue(device, gdev)


def _new_queue(device: Device, gdev: Any) -> Queue:
    ai = _take_parked(device, gdev, may_wait=running_host_function() is None) if device.parked else None
    if ai is None:
        ai = gdev.init_async_info()
    queue = Queue(device, ai)
    ai.owner = queue
    with device.lock:
        closed = device.closed
        if not closed:
            device.live_queues.add(queue)
    if closed:
        queue._ai = None
        release_backend_queue(gdev, ai)
        raise shut_down_meanwhile("olCreateQueue")
    return queue


_create_queue.__name__ = _create_queue.__qualname__ = "olCreateQueue"
_checked_create_queue = entry_point(_create_queue)


def olCreateQueue(device: Device) -> Queue:
    # The hot path: a live device, no tracing.
    ctx = _STATE.untraced
    if ctx is not None and type(device) is Device:
        gdev = device._gdev
        if gdev is not None:
            return _new_queue(device, gdev)
    return _checked_create_queue(device)  # type: ignore[no-any-return]


adopt_entry_point(olCreateQueue, _checked_create_queue)


def _destroy_queue(ctx: Context, queue: Queue) -> None:
    """Destroy ``queue`` without waiting: an idle backend queue goes back to the pool at once,
    a busy one is parked and its work still completes. Events of the queue stay valid."""
    live_queue(queue)
    assert isinstance(queue, Queue)
    device = queue.device
    gdev = live_device(device)
    _retire_queue(queue, device, gdev)


def _retire_queue(queue: Queue, device: Device, gdev: Any) -> None:
    with device.lock:  # claim the handle: of two racing destroys, one wins
        ai = queue._ai
        if ai is None:
            raise OffloadError(ErrorCode.INVALID_QUEUE, f"queue {queue!r} has been destroyed")
        queue._ai = None
        device.live_queues.discard(queue)
    if gdev.has_pending_work(ai):
        with device.lock:
            device.parked.append(ai)
        return
    if ai.failure is None:  # idle and healthy: back to the pool, without syncing it once more
        ai.owner = None
        gdev.queue_pool.release(ai)
        return
    release_backend_queue(gdev, ai)


_destroy_queue.__name__ = _destroy_queue.__qualname__ = "olDestroyQueue"
_checked_destroy_queue = entry_point(_destroy_queue)


def olDestroyQueue(queue: Queue) -> None:
    # The hot path: a live queue of a live device, no tracing.
    ctx = _STATE.untraced
    if ctx is not None and type(queue) is Queue and queue._ai is not None:
        device = queue.device
        gdev = device._gdev
        if gdev is not None:
            _retire_queue(queue, device, gdev)
            return
    _checked_destroy_queue(queue)


adopt_entry_point(olDestroyQueue, _checked_destroy_queue)


def _sync_queue(ctx: Context, queue: Queue) -> None:
    """Wait until all work on ``queue`` is done; ``QUEUE_ERROR`` at once if it failed.

    Not from a host function (``INVALID_ARGUMENT``): it could wait for itself.
    """
    ai = live_queue(queue)
    refuse_in_host_function("olSyncQueue")
    ai.device.synchronize(ai, False)  # type: ignore[attr-defined]


_sync_queue.__name__ = _sync_queue.__qualname__ = "olSyncQueue"
_checked_sync_queue = entry_point(_sync_queue)


def olSyncQueue(queue: Queue) -> None:
    # The hot path in one frame: a live queue, no tracing, not in a host function.
    ctx = _STATE.untraced
    if ctx is not None and type(queue) is Queue:
        ai = queue._ai
        if ai is not None and _host_function_thread.queue is None:
            ai.device.synchronize(ai, False)  # type: ignore[attr-defined]
            return
    _checked_sync_queue(queue)


adopt_entry_point(olSyncQueue, _checked_sync_queue)


@entry_point
def olQueryQueue(ctx: Context, queue: Queue) -> bool:
    """True when all work on ``queue`` is done; never blocks; ``QUEUE_ERROR`` if it failed."""
    ai = live_queue(queue)
    return bool(ai.device.query_async(ai))  # type: ignore[attr-defined]


@entry_point
def olWaitEvents(ctx: Context, queue: Queue, events: Sequence[Event]) -> None:
    """Make later work on ``queue`` wait for every event in ``events``.

    Events of ``queue`` itself are already ordered and skipped. If an event's queue fails,
    ``queue`` fails too, naming the queue that failed first; the call itself succeeds whatever
    the order of the events (only a queue that had failed before the call raises ``QUEUE_ERROR``).
    """
    ai = live_queue(queue)
    if events is None:
        raise OffloadError(ErrorCode.INVALID_NULL_POINTER, "events is None")
    try:
        items = list(events)
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"events must be a sequence of Event handles, got {type(events).__name__}") from None
    backend_events: list[tuple[Event, GenericEvent]] = []
    for index, event in enumerate(items):
        if event is None:
            raise OffloadError(ErrorCode.INVALID_NULL_HANDLE, f"events[{index}] is None")
        if type(event) is not Event:
            raise bad_handle(event, Event, f"events[{index}]")
        backend_events.append((event, live_event(event, f"events[{index}]")))
    assert isinstance(queue, Queue)
    gdev = ai.device
    if ai.failure is not None:
        raise ai.queue_error()
    for event, ev in backend_events:
        if event.queue is queue:
            continue
        if ai.failure is not None:
            break  # an earlier event's failure is the queue's now: waiting longer changes nothing
        if event.device is queue.device or ev.device.plugin is gdev.plugin:  # type: ignore[attr-defined]
            gdev.wait_event(ev, ai)  # type: ignore[attr-defined]
        else:
            _wait_foreign_event(gdev, ai, ev)


def _wait_foreign_event(gdev: Any, ai: AsyncInfo, ev: GenericEvent) -> None:
    """Wait for an event of another backend with a host function on the waiting queue."""

    def wait(_: object) -> None:
        try:
            ev.device.sync_event(ev)  # type: ignore[attr-defined]
        except OffloadError:
            if ev.failure is None:
                raise
            ai.adopt(ev.failure)

    gdev.enqueue_host_call(wait, None, ai)


def _queue_value(queue: object, requested: object) -> tuple[QueueInfo, Any]:
    ai = live_queue(queue)
    prop = enum_value(QueueInfo, requested, "queue info")
    assert isinstance(queue, Queue)
    if prop is QueueInfo.DEVICE:
        return prop, queue.device
    return prop, not ai.device.has_pending_work(ai)  # type: ignore[attr-defined]


@entry_point
def olGetQueueInfo(ctx: Context, queue: Queue, prop: QueueInfo) -> Any:
    """``DEVICE``: the queue's device; ``EMPTY``: True when no work is pending."""
    return _queue_value(queue, prop)[1]


@entry_point
def olGetQueueInfoSize(ctx: Context, queue: Queue, prop: QueueInfo) -> int:
    """The byte size the C API reports for ``prop`` (8 for ``DEVICE``, 1 for ``EMPTY``)."""
    prop, value = _queue_value(queue, prop)
    return value_size(QUEUE_INFO_KINDS[prop], value)


@entry_point
def olLaunchHostFunction(ctx: Context, queue: Queue, callback: Callable[[Any], object], user_data: Any = None) -> None:
    """Run ``callback(user_data)`` in queue order, after earlier work and before later work.

    If it raises, the queue enters the error state with that exception as the cause. It runs
    in the queue's order on a runtime thread, so it must not wait for queued work: the calls
    that wait (``olSyncQueue``, ``olSyncEvent``, ``olGetEventElapsedTime``, ``olShutDown``)
    raise ``INVALID_ARGUMENT`` there, and so does any call that reaches a GPU driver (drivers
    forbid calls from their callback thread). Enqueueing work on host queues, allocating,
    freeing, creating queues and events, and queries are allowed.
    """
    ai = live_queue(queue)
    if callback is None:
        raise OffloadError(ErrorCode.INVALID_NULL_POINTER, "callback is None")
    if not callable(callback):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"callback must be callable, got {type(callback).__name__}")
    ai.device.enqueue_host_call(callback, user_data, ai)  # type: ignore[attr-defined]


@entry_point
def olGetQueueError(ctx: Context, queue: Queue) -> tuple[OffloadError | None, Queue | None]:
    """``(error, failing_queue)``: the original error and the queue that failed first, or
    ``(None, None)`` while the queue is healthy. The error state is never cleared."""
    ai = live_queue(queue)
    if ai.failure is None:
        ai.device.has_pending_work(ai)  # type: ignore[attr-defined]  # lets a backend notice a fault
    failure = ai.failure
    if failure is None:
        return None, None
    failure.observed = True
    return failure.error, failure.origin  # type: ignore[return-value]
