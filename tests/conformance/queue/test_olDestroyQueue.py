"""Port of offload/unittests/OffloadAPI/queue/olDestroyQueue.cpp (fixture: OffloadQueueTest)."""

from __future__ import annotations

from offloadrt import ErrorCode, api

from ..conftest import ManuallyTriggeredTask, assert_error
from ._helpers import within


def test_success(queue: api.Queue) -> None:
    api.olDestroyQueue(queue)


def test_success_delayed_resolution(queue: api.Queue) -> None:
    """Destroying a queue whose work is still blocked is legal; the work still completes."""
    manual = ManuallyTriggeredTask()
    manual.enqueue(queue)
    # A destroy that waited for the task would outlast its 1 s block: trigger() then fails.
    within(api.olDestroyQueue, queue)
    within(manual.trigger)


def test_invalid_null_handle(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olDestroyQueue, None)
