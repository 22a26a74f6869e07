"""Events: record, sync, query, elapsed time."""

from __future__ import annotations

import operator
from typing import Any

from ..errors import ErrorCode, OffloadError
from ..plugins.common.gpu.streams import GpuEvent as _GpuEvent
from ..plugins.common.resources import host_function_thread as _host_function_thread
from ..types import EVENT_INFO_KINDS, EventFlags, EventInfo
from ._entry import adopt_entry_point, entry_point
from ._info import value_size
from ._state import STATE as _STATE
from ._state import Context
from .handles import Event, Queue, enum_value, live_event, live_queue, refuse_in_host_function

# Each call below has a hot path in one frame, for plain right handles with no tracing: it makes
# the checks of its checked entry point (made by entry_point), in the same order where one can
# fail, and calls the device; anything else takes the checked entry point, which reports it.

def _create_event(ctx: Context, queue: Queue, flags: EventFlags = EventFlags.NONE) -> Event:
    """An event that completes once all work enqueued on ``queue`` before it is done.

    ``flags`` (upstream's ``ol_event_flags_t``, after LLVM 22): ``EventFlags.ENABLE_PROFILING``
    makes an event that takes a timestamp, which ``olGetEventElapsedTime`` needs; a plain event
    (``NONE``, the default and what LLVM 22's two-argument call makes) takes none and costs less.
    """
    ai = live_queue(queue)
    timed = _timed(flags)
    assert isinstance(queue, Queue)
    return Event(queue, ai.device.create_event(ai, timed))  # type: ignore[attr-defined]


def _timed(flags: object) -> bool:
    """Whether ``flags`` (an ``EventFlags`` value) asks for a timestamp; unknown bits are ``INVALID_ENUMERATION``."""
    try:
        value = operator.index(flags)  # type: ignore[arg-type]
    except TypeError:
        value = -1
    if value & ~_KNOWN_FLAGS or value < 0:
        raise OffloadError(ErrorCode.INVALID_ENUMERATION, f"event flags {flags!r} are not a valid EventFlags "
                                                          f"(NONE or ENABLE_PROFILING)")
    return bool(value & _PROFILING)


_NO_FLAGS = EventFlags.NONE
_KNOWN_FLAGS = int(EventFlags.ENABLE_PROFILING)
_PROFILING = int(EventFlags.ENABLE_PROFILING)
_create_event.__name__ = _create_event.__qualname__ = "olCreateEvent"
_checked_create_event = entry_point(_create_event)


def olCreateEvent(queue: Queue, flags: EventFlags = EventFlags.NONE) -> Event:
    ctx = _STATE.untraced
    if ctx is not None and type(queue) is Queue and flags is _NO_FLAGS:
        ai = queue._ai
        if ai is not None:
            return Event(queue, ai.device.create_event(ai))  # type: ignore[attr-defined]
    return _checked_create_event(queue, flags)  # type: ignore[no-any-return]


adopt_entry_point(olCreateEvent, _checked_create_event)


def _destroy_event(ctx: Context, event: Event) -> None:
    """Release ``event``; it does not wait, and the work before the event goes on. Using the
    handle afterwards is ``INVALID_EVENT``."""
    live_event(event)
    assert isinstance(event, Event)
    with event.device.lock:  # claim the handle: of two racing destroys, one wins
        ev = event._ev
        if ev is None or not _claimed(ev):
            raise OffloadError(ErrorCode.INVALID_EVENT, f"event {event!r} has been destroyed")
        event._ev = None
    ev.device.destroy_event(ev)  # type: ignore[attr-defined]


def _claimed(ev: object) -> bool:
    """Whether this caller won a GPU event's claim (see ``GpuEvent.claim``; the hot path of
    olDestroyEvent claims one without the device's lock); any other event needs none."""
    if type(ev) is not _GpuEvent:
        return True
    try:
        ev.claim.pop()
    except IndexError:
        return False
    return True


_destroy_event.__name__ = _destroy_event.__qualname__ = "olDestroyEvent"
_checked_destroy_event = entry_point(_destroy_event)


def olDestroyEvent(event: Event) -> None:
    ctx = _STATE.untraced
    if ctx is not None and type(event) is Event:
        ev = event._ev
        if type(ev) is _GpuEvent:
            if event.device._gdev is not None:
                # Claim the event: of racing destroys (this hot path or the checked one), the one
                # that pops the claim wins and clears the handle; the others find it destroyed.
                try:
                    ev.claim.pop()
                except IndexError:
                    pass  # lost the race: the checked path reports the destroyed event
                else:
                    event._ev = None
                    ev.device.destroy_event(ev)  # type: ignore[attr-defined]
                    return
        elif ev is not None and event.device._gdev is not None:
            device = event.device
            with device.lock:  # claim the handle: of two racing destroys, one wins
                ev = event._ev
                event._ev = None
            if ev is not None:
                ev.device.destroy_event(ev)  # type: ignore[attr-defined]
                return
    _checked_destroy_event(event)


adopt_entry_point(olDestroyEvent, _checked_destroy_event)


def _sync_event(ctx: Context, event: Event) -> None:
    """Wait for ``event``; ``QUEUE_ERROR`` if its queue failed before reaching it.

    Not from a host function (``INVALID_ARGUMENT``): the event may be behind it.
    """
    ev = live_event(event)
    refuse_in_host_function("olSyncEvent")
    ev.device.sync_event(ev)  # type: ignore[attr-defined]


_sync_event.__name__ = _sync_event.__qualname__ = "olSyncEvent"
_checked_sync_event = entry_point(_sync_event)


def olSyncEvent(event: Event) -> None:
    ctx = _STATE.untraced
    if ctx is not None and type(event) is Event:
        ev = event._ev
        if ev is not None and event.device._gdev is not None and _host_function_thread.queue is None:
            ev.device.sync_event(ev)  # type: ignore[attr-defined]
            return
    _checked_sync_event(event)


adopt_entry_point(olSyncEvent, _checked_sync_event)


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
    """Milliseconds from ``start`` to ``end``, two events of one device, both created with
    ``EventFlags.ENABLE_PROFILING`` (else ``INVALID_ARGUMENT``); waits for both (so not from a
    host function: ``INVALID_ARGUMENT``)."""
    start_ev = live_event(start, "start")
    end_ev = live_event(end, "end")
    assert isinstance(start, Event) and isinstance(end, Event)
    if start.device is not end.device:
        raise OffloadError(ErrorCode.INVALID_DEVICE,
                           f"start is on {start.device!r} but end is on {end.device!r}; both must be on one device")
    untimed = [f"{name} ({event!r})" for name, event, ev in (("start", start, start_ev), ("end", end, end_ev))
               if not ev.timed]
    if untimed:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"{' and '.join(untimed)} took no timestamp: create both events with "
                           f"olCreateEvent(queue, EventFlags.ENABLE_PROFILING) to measure the time between them")
    refuse_in_host_function("olGetEventElapsedTime")
    return float(start_ev.device.get_event_elapsed_time(start_ev, end_ev))  # type: ignore[attr-defined]
