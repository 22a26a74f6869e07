"""Port of offload/unittests/OffloadAPI/event/olCreateEvent.cpp (fixture: OffloadQueueTest).

Not ported: ``InvalidNullDest`` (the event is returned, there is no output pointer).
"""

from __future__ import annotations

from offloadrt import ErrorCode, api

from ..conftest import assert_error


def test_success(queue: api.Queue) -> None:
    event = api.olCreateEvent(queue)
    assert event is not None
    assert isinstance(event, api.Event)


def test_invalid_null_queue(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olCreateEvent, None)
