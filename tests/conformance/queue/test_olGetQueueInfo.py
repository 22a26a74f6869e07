"""Port of offload/unittests/OffloadAPI/queue/olGetQueueInfo.cpp (fixture: OffloadQueueTest).

Not ported (outputs are returned, there is no PropSize or PropValue): ``InvalidSizeZero``,
``InvalidSizeSmall``, ``InvalidNullPointerPropValue``.
"""

from __future__ import annotations

from offloadrt import ErrorCode, QueueInfo, api

from ..conftest import FORCE_UINT32, assert_error


def test_success_device(device: api.Device, queue: api.Queue) -> None:
    assert api.olGetQueueInfo(queue, QueueInfo.DEVICE) == device


def test_success_empty(queue: api.Queue) -> None:
    assert isinstance(api.olGetQueueInfo(queue, QueueInfo.EMPTY), bool)


def test_invalid_null_handle(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetQueueInfo, None, QueueInfo.DEVICE)


def test_invalid_queue_info_enumeration(queue: api.Queue) -> None:
    assert_error(ErrorCode.INVALID_ENUMERATION, api.olGetQueueInfo, queue, FORCE_UINT32)
