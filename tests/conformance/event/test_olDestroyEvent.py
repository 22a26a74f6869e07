"""Port of offload/unittests/OffloadAPI/event/olDestroyEvent.cpp (fixture: OffloadQueueTest)."""

from __future__ import annotations

from offloadrt import ErrorCode, api

from ..conftest import assert_error
from ..queue._helpers import within


def test_success(queue: api.Queue) -> None:
    event = api.olCreateEvent(queue)
    assert event is not None
    within(api.olSyncQueue, queue)
    api.olDestroyEvent(event)


def test_invalid_null_event(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olDestroyEvent, None)
