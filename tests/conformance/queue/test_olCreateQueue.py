"""Port of offload/unittests/OffloadAPI/queue/olCreateQueue.cpp (fixture: OffloadDeviceTest).

Not ported (see tests/conformance/README.md): ``InvalidNullPointerQueue`` (the queue
is returned, there is no output pointer), the 2026 Context-API cases ``InvalidNullHandleContext``
and ``InvalidDeviceNotInContext`` and the plain ``AMDGPUQueueUserCount.*`` tests.
"""

from __future__ import annotations

from offloadrt import ErrorCode, api

from ..conftest import assert_error


def test_success(device: api.Device) -> None:
    queue = api.olCreateQueue(device)
    assert queue is not None
    assert isinstance(queue, api.Queue)
    api.olDestroyQueue(queue)  # the 2026 version destroys it; 2025 leaves it to shutdown


def test_invalid_null_handle_device(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olCreateQueue, None)
