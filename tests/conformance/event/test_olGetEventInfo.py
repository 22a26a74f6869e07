"""Port of offload/unittests/OffloadAPI/event/olGetEventInfo.cpp (fixture: OffloadEventTest).

Not ported (outputs are returned, there is no PropSize or PropValue): ``InvalidSizeZero``,
``InvalidSizeSmall``, ``InvalidNullPointerPropValue``.
"""

from __future__ import annotations

import time

import pytest

from offloadrt import ErrorCode, EventInfo, api

from ..conftest import FORCE_UINT32, assert_error
from ..queue._helpers import TIMEOUT


def test_success_queue(queue: api.Queue, event: api.Event) -> None:
    assert api.olGetEventInfo(event, EventInfo.QUEUE) == queue


def test_success_is_complete(event: api.Event) -> None:
    complete = False
    deadline = time.monotonic() + TIMEOUT  # upstream polls without limit
    while not complete:
        complete = api.olGetEventInfo(event, EventInfo.IS_COMPLETE)
        assert isinstance(complete, bool)
        if not complete and time.monotonic() > deadline:
            pytest.fail(f"the event of a synced queue was not complete after {TIMEOUT} s")
    assert complete is True


def test_invalid_null_handle(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetEventInfo, None, EventInfo.QUEUE)


def test_invalid_event_info_enumeration(event: api.Event) -> None:
    assert_error(ErrorCode.INVALID_ENUMERATION, api.olGetEventInfo, event, FORCE_UINT32)
