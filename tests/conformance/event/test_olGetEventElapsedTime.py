"""Port of offload/unittests/OffloadAPI/event/olGetEventElapsedTime.cpp.

Fixture ``olGetEventElapsedTimeTest``: OffloadQueueTest plus program "foo", kernel "foo",
launches of 1 group of 64 and a MANAGED buffer of 64 uint32 for ``foo``'s output.

The cases come from every upstream version of the file: the five of the first version
(Mar 2026) and those added later for AMDGPU's signal recycling (``BackToBack*``,
``*Fallback``, ``MemcpyPriorOpRecyclesAsyncCopy``, ``MultipleKernelsBetweenEvents``), which
state backend-independent expectations, with their events created with
``OL_EVENT_FLAGS_ENABLE_PROFILING`` as upstream's do since events became untimed by default
(``EventFlags.ENABLE_PROFILING`` here). ``InvalidNonProfilingEvent``: start, end or both plain
events are ``INVALID_ARGUMENT``. Not ported: ``InvalidNullElapsedTime`` (the time is returned,
there is no output pointer).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator

import pytest

from offloadrt import AllocType, ErrorCode, EventFlags, api

from ..conftest import assert_error
from ..queue._helpers import foo_args, launch_size, within

PROFILING = EventFlags.ENABLE_PROFILING
GROUP_SIZE = 64
NEAR_MS = 0.05  # upstream's ASSERT_NEAR tolerance for two events with no work between them


@pytest.fixture
def mem(device: api.Device) -> Iterator[int]:
    ptr = api.olMemAlloc(device, AllocType.MANAGED, GROUP_SIZE * 4)
    yield ptr
    api.olMemFree(ptr)


@pytest.fixture
def launch_foo(device: api.Device, queue: api.Queue, kernel: api.Symbol, mem: int) -> Callable[[], None]:
    def launch() -> None:
        api.olLaunchKernel(queue, device, kernel, foo_args(mem), launch_size(GROUP_SIZE))

    return launch


def elapsed(start: api.Event, end: api.Event) -> float:
    value = within(api.olGetEventElapsedTime, start, end)
    assert isinstance(value, float)
    return value


def test_success(queue: api.Queue, launch_foo: Callable[[], None]) -> None:
    start = api.olCreateEvent(queue, PROFILING)
    assert start is not None
    launch_foo()
    end = api.olCreateEvent(queue, PROFILING)
    assert end is not None
    within(api.olSyncEvent, end)

    assert elapsed(start, end) >= 0.0

    api.olDestroyEvent(start)
    api.olDestroyEvent(end)


def test_success_multiple_calls(queue: api.Queue, launch_foo: Callable[[], None]) -> None:
    start = api.olCreateEvent(queue, PROFILING)
    assert start is not None
    launch_foo()
    end = api.olCreateEvent(queue, PROFILING)
    assert end is not None
    within(api.olSyncEvent, end)

    a = elapsed(start, end)
    b = elapsed(start, end)
    assert a >= 0.0
    assert b >= 0.0

    api.olDestroyEvent(start)
    api.olDestroyEvent(end)


def test_invalid_null_start_event(queue: api.Queue, launch_foo: Callable[[], None]) -> None:
    end = api.olCreateEvent(queue, PROFILING)
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetEventElapsedTime, None, end)
    api.olDestroyEvent(end)


def test_invalid_null_end_event(queue: api.Queue, launch_foo: Callable[[], None]) -> None:
    start = api.olCreateEvent(queue, PROFILING)
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olGetEventElapsedTime, start, None)
    api.olDestroyEvent(start)


def test_back_to_back_events_share_dispatch_signal(queue: api.Queue, launch_foo: Callable[[], None]) -> None:
    start = api.olCreateEvent(queue, PROFILING)
    launch_foo()
    mid_a = api.olCreateEvent(queue, PROFILING)
    mid_b = api.olCreateEvent(queue, PROFILING)
    within(api.olSyncEvent, mid_b)

    delta_a = elapsed(start, mid_a)
    delta_b = elapsed(start, mid_b)
    assert delta_a >= 0.0
    assert delta_b >= 0.0
    assert delta_a == pytest.approx(delta_b, abs=NEAR_MS)

    for event in (start, mid_a, mid_b):
        api.olDestroyEvent(event)


def test_empty_queue_leading_event_fallback(queue: api.Queue, launch_foo: Callable[[], None]) -> None:
    start = api.olCreateEvent(queue, PROFILING)
    launch_foo()
    end = api.olCreateEvent(queue, PROFILING)
    within(api.olSyncEvent, end)

    assert elapsed(start, end) >= 0.0

    api.olDestroyEvent(start)
    api.olDestroyEvent(end)


def _memcpy_to_device(queue: api.Queue, device: api.Device, host: api.Device, dev_buf: int,
                      host_buf: ctypes.Array) -> None:
    api.olMemcpy(queue, dev_buf, device, ctypes.addressof(host_buf), host, len(host_buf))


def test_non_kernel_prior_op_fallback(device: api.Device, host: api.Device, queue: api.Queue,
                                      launch_foo: Callable[[], None]) -> None:
    copy_size = 1024
    dev_buf = api.olMemAlloc(device, AllocType.DEVICE, copy_size)
    host_buf = (ctypes.c_uint8 * copy_size)(*([0x5A] * copy_size))

    launch_foo()
    _memcpy_to_device(queue, device, host, dev_buf, host_buf)
    start = api.olCreateEvent(queue, PROFILING)
    launch_foo()
    end = api.olCreateEvent(queue, PROFILING)
    within(api.olSyncEvent, end)

    assert elapsed(start, end) > 0.0  # strictly: a kernel ran between the two events

    api.olDestroyEvent(start)
    api.olDestroyEvent(end)
    api.olMemFree(dev_buf)


def test_memcpy_prior_op_recycles_async_copy(device: api.Device, host: api.Device, queue: api.Queue,
                                             launch_foo: Callable[[], None]) -> None:
    copy_size = 1024
    dev_buf = api.olMemAlloc(device, AllocType.DEVICE, copy_size)
    host_buf = (ctypes.c_uint8 * copy_size)(*([0x5A] * copy_size))

    launch_foo()
    _memcpy_to_device(queue, device, host, dev_buf, host_buf)
    start = api.olCreateEvent(queue, PROFILING)
    launch_foo()
    end = api.olCreateEvent(queue, PROFILING)
    within(api.olSyncEvent, end)

    assert elapsed(start, end) > 0.0  # strictly: the second kernel ended after the copy

    api.olDestroyEvent(start)
    api.olDestroyEvent(end)
    api.olMemFree(dev_buf)


def test_back_to_back_events_share_async_copy_signal(device: api.Device, host: api.Device, queue: api.Queue,
                                                     launch_foo: Callable[[], None]) -> None:
    copy_size = 4096
    dev_buf = api.olMemAlloc(device, AllocType.DEVICE, copy_size)
    host_buf = (ctypes.c_uint8 * copy_size)(*([0x33] * copy_size))

    launch_foo()
    start = api.olCreateEvent(queue, PROFILING)
    _memcpy_to_device(queue, device, host, dev_buf, host_buf)
    mid_a = api.olCreateEvent(queue, PROFILING)
    mid_b = api.olCreateEvent(queue, PROFILING)
    within(api.olSyncEvent, mid_b)

    delta_a = elapsed(start, mid_a)
    delta_b = elapsed(start, mid_b)
    assert delta_a >= 0.0
    assert delta_b >= 0.0
    assert delta_a == pytest.approx(delta_b, abs=NEAR_MS)

    for event in (start, mid_a, mid_b):
        api.olDestroyEvent(event)
    api.olMemFree(dev_buf)


def test_event_after_queue_sync_fallback(queue: api.Queue, launch_foo: Callable[[], None]) -> None:
    launch_foo()
    start = api.olCreateEvent(queue, PROFILING)
    within(api.olSyncQueue, queue)
    launch_foo()
    end = api.olCreateEvent(queue, PROFILING)
    within(api.olSyncEvent, end)

    assert elapsed(start, end) >= 0.0

    api.olDestroyEvent(start)
    api.olDestroyEvent(end)


def test_multiple_kernels_between_events(queue: api.Queue, launch_foo: Callable[[], None]) -> None:
    launch_foo()
    start = api.olCreateEvent(queue, PROFILING)
    for _ in range(8):
        launch_foo()
    end = api.olCreateEvent(queue, PROFILING)
    within(api.olSyncEvent, end)

    assert elapsed(start, end) >= 0.0

    api.olDestroyEvent(start)
    api.olDestroyEvent(end)


@pytest.mark.parametrize("timed", ["start", "end", "neither"])
def test_invalid_non_profiling_event(queue: api.Queue, timed: str) -> None:
    start = api.olCreateEvent(queue, PROFILING if timed == "start" else EventFlags.NONE)
    end = api.olCreateEvent(queue, PROFILING if timed == "end" else EventFlags.NONE)
    within(api.olSyncEvent, end)
    assert_error(ErrorCode.INVALID_ARGUMENT, api.olGetEventElapsedTime, start, end)
    assert elapsed(api.olCreateEvent(queue, PROFILING), api.olCreateEvent(queue, PROFILING)) >= 0.0
