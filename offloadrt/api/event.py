"""Events: record, sync, query, elapsed time."""

from __future__ import annotations

from typing import Any

from ..errors import ErrorCode, OffloadError
from ..types import EVENT_INFO_KINDS, EventInfo
from ._entry import entry_point
from ._info import value_size
from ._state import Context
from .handles import Event, Queue, enum_value, live_event, live_queue, refuse_in_host_function


@entry_point
def olCreateEvent(ctx: Context, queue: Queue) -> Event:
    """An event that completes once all work enqueued on ``queue`` before it is done."""
    ai = live_queue(queue)
    assert isinstance(queue, Queue)
    return Event(queue, ai.device.create_event(ai))  # type: ignore[attr-defined]


@entry_point
def olDestroyEvent(ctx: Context, event: Event) -> None:
    """Release ``event``; it does not wait, and the work before the event goes on. Using the
    handle afterwards is ``INVALID_EVENT``."""
    live_event(event)
    assert isinstance(event, Event)
    with event.device.lock:  # claim the handle: of two racing destroys, one wins
        ev = event._ev
        if ev is None:
            raise OffloadError(ErrorCode.INVALID_EVENT, f"event {event!r} has been destroyed")
        event._ev = None
    ev.device.destroy_event(ev)  # type: ignore[attr-defined]


@entry_point
def olSyncEvent(ctx: Context, event: Event) -> None:
    """Wait for ``event``; ``QUEUE_ERROR`` if its queue failed before reaching it.

    Not from a host function (``INVALID_ARGUMENT``): the event may be behind it.
    """
    ev = live_event(event)
    refuse_in_host_function("olSyncEvent")
    ev.device.sync_event(ev)  # type: ignore[attr-defined]


def _event_value(event: object, requested: object) -> tuple[EventInfo, Any]:
    ev = live_event(event)
    prop = enum_value(EventInfo, requested, "event info")
    assert isinstance(event, Event)
    if prop is EventInfo.QUEUE:
        return prop, event.queue
    return prop, bool(ev.device.is_event_complete(ev))  # type: ignore[attr-defined]


@entry_point
def olGetEventInfo(ctx: Context, event: Event, prop: EventInfo) -> Any:
    """``QUEUE``: the queue it was created on (even if destroyed since); ``IS_COMPLETE``."""
    return _event_value(event, prop)[1]


@entry_point
def olGetEventInfoSize(ctx: Context, event: Event, prop: EventInfo) -> int:
    """The byte size the C API reports for ``prop`` (8 for ``QUEUE``, 1 for ``IS_COMPLETE``)."""
    prop, value = _event_value(event, prop)
    return value_size(EVENT_INFO_KINDS[prop], value)


@entry_point
def olGetEventElapsedTime(ctx: Context, start: Event, end: Event) -> float:
    """Milliseconds from ``start`` to ``end``, two events of one device; waits for both (so not
    from a host function: ``INVALID_ARGUMENT``)."""
    start_ev = live_event(start, "start")
    end_ev = live_event(end, "end")
    assert isinstance(start, Event) and isinstance(end, Event)
    if start.device is not end.device:
        raise OffloadError(ErrorCode.INVALID_DEVICE,
                           f"start is on {start.device!r} but end is on {end.device!r}; both must be on one device")
    refuse_in_host_function("olGetEventElapsedTime")
    return float(start_ev.device.get_event_elapsed_time(start_ev, end_ev))  # type: ignore[attr-defined]
