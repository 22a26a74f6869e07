"""Port of offload/unittests/OffloadAPI/queue/olLaunchHostFunction.cpp.

Fixtures: ``olLaunchHostFunctionTest`` (OffloadQueueTest) and ``olLaunchHostFunctionKernelTest``
(OffloadKernelTest: program "foo", kernel "foo") for ``SuccessBlocking``.
"""

from __future__ import annotations

import ctypes
import time

from offloadrt import AllocType, ErrorCode, api

from ..conftest import assert_error, u32_array
from ._helpers import TIMEOUT, foo_args, launch_size, within


def test_success(queue: api.Queue) -> None:
    api.olLaunchHostFunction(queue, lambda _: None, None)


def test_success_sequence(queue: api.Queue) -> None:
    buff = (ctypes.c_uint32 * 16)(1, 1)

    def step(index: int) -> None:  # user data: the element to compute (upstream: a pointer to it)
        buff[index] = buff[index - 1] + buff[index - 2]

    for index in range(2, 16):
        api.olLaunchHostFunction(queue, step, index)

    within(api.olSyncQueue, queue)

    for i in range(2, 16):
        assert buff[i] == buff[i - 1] + buff[i - 2], list(buff)


def test_success_blocking(device: api.Device, kernel: api.Symbol) -> None:
    """A host function that blocks holds back the kernel enqueued after it."""
    args = launch_size(64)
    queue = api.olCreateQueue(device)
    mem = api.olMemAlloc(device, AllocType.MANAGED, args.group_size.x * 4)
    data = u32_array(mem, 64)
    for i in range(64):
        data[i] = 0

    block = [True]

    def spin(state: list[bool]) -> None:
        deadline = time.monotonic() + TIMEOUT  # never spin for good, even if the test dies
        while state[0] and time.monotonic() < deadline:
            time.sleep(0)  # upstream's busy spin, yielding the GIL

    api.olLaunchHostFunction(queue, spin, block)
    try:
        api.olLaunchKernel(queue, device, kernel, foo_args(mem), args)

        time.sleep(0.5)  # upstream's 500 ms: time for a wrongly ordered kernel to run (not a wait for work)
        assert list(data) == [0] * 64, "the kernel ran before the blocking host function returned"
    finally:
        block[0] = False
    within(api.olSyncQueue, queue)

    assert list(data) == list(range(64))

    api.olDestroyQueue(queue)
    api.olMemFree(mem)


def test_invalid_null_callback(queue: api.Queue) -> None:
    assert_error(ErrorCode.INVALID_NULL_POINTER, api.olLaunchHostFunction, queue, None, None)


def test_invalid_null_queue(device: api.Device) -> None:
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olLaunchHostFunction, None, lambda _: None, None)
