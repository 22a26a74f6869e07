"""Port of offload/unittests/OffloadAPI/event/olGetEventInfoSize.cpp (fixture: OffloadEventTest).

Not ported: ``InvalidNullPointer`` (the size is returned, there is no output pointer).
"""

from __future__ import annotations

from offloadrt import ErrorCode, EventInfo, api

from ..conftest import FORCE_UINT32, assert_error

HANDLE_SIZE = 8  # sizeof(ol_queue_handle_t)
BOOL_SIZE = 1  # sizeof(bool)


def test_success_queue(event: api.Event) -> None:
    assert api.olGetEventInfoSize(event, EventInfo.QUEUE) == HANDLE_SIZE


def test_success_is_complete(event: api.Event) -> None:
    assert api.olGetEventInfoSize(event, EventInfo.IS_COMPLETE) == BOOL_SIZE


def test_invalid_null_handle(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetEventInfoSize, None, EventInfo.QUEUE)


def test_invalid_event_info_enumeration(event: api.Event) -> None:
    assert_error(ErrorCode.INVALID_ENUMERATION, api.olGetEventInfoSize, event, FORCE_UINT32)
