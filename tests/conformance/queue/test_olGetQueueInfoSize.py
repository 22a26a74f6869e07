"""Port of offload/unittests/OffloadAPI/queue/olGetQueueInfoSize.cpp (fixture: OffloadQueueTest).

Not ported: ``InvalidNullPointer`` (the size is returned, there is no output pointer).
"""

from __future__ import annotations

from offloadrt import ErrorCode, QueueInfo, api

from ..conftest import FORCE_UINT32, assert_error

HANDLE_SIZE = 8  # sizeof(ol_device_handle_t)
BOOL_SIZE = 1  # sizeof(bool)


def test_success_device(queue: api.Queue) -> None:
    assert api.olGetQueueInfoSize(queue, QueueInfo.DEVICE) == HANDLE_SIZE


def test_success_empty(queue: api.Queue) -> None:
    assert api.olGetQueueInfoSize(queue, QueueInfo.EMPTY) == BOOL_SIZE


def test_invalid_null_handle(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetQueueInfoSize, None, QueueInfo.DEVICE)


def test_invalid_queue_info_enumeration(queue: api.Queue) -> None:
    assert_error(ErrorCode.INVALID_ENUMERATION, api.olGetQueueInfoSize, queue, FORCE_UINT32)
