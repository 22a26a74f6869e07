"""Port of offload/unittests/OffloadAPI/queue/olWaitEvents.cpp.

Fixture ``olWaitEventsTest``: OffloadProgramTest with program "sequence", its kernel
"sequence" and 1x1x1 launches. ``sequence(idx, mem)`` is a Fibonacci step, so the results are
right only if launch i ran after launch i-1: the waits must order the queues.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from offloadrt import AllocType, ErrorCode, SymbolKind, api

from ..conftest import assert_error, u32_array
from ._helpers import launch_size, sequence_args, within

NUM_KERNELS = 16


@pytest.fixture
def sequence(program_for: Callable[[str], api.Program]) -> api.Symbol:
    return api.olGetSymbol(program_for("sequence"), "sequence", SymbolKind.KERNEL)


@pytest.fixture
def mem(device: api.Device) -> Iterator[int]:
    ptr = api.olMemAlloc(device, AllocType.MANAGED, NUM_KERNELS * 4)
    yield ptr
    api.olMemFree(ptr)


def check_fibonacci(mem: int) -> None:
    data = list(u32_array(mem, NUM_KERNELS))
    for i in range(2, NUM_KERNELS):
        assert data[i] == data[i - 1] + data[i - 2], f"Data[{i}] out of order: {data}"


def test_success(device: api.Device, sequence: api.Symbol, mem: int) -> None:
    queues: list[api.Queue] = []
    events: list[api.Event] = []
    for i in range(NUM_KERNELS):
        queues.append(api.olCreateQueue(device))
        if i > 0:
            api.olWaitEvents(queues[i], [events[i - 1]])
        api.olLaunchKernel(queues[i], device, sequence, sequence_args(i, mem), launch_size(1))
        events.append(api.olCreateEvent(queues[i]))

    within(api.olSyncEvent, events[NUM_KERNELS - 1])
    check_fibonacci(mem)


def test_success_single_queue(device: api.Device, sequence: api.Symbol, mem: int) -> None:
    queue = api.olCreateQueue(device)
    events: list[api.Event] = []
    for i in range(NUM_KERNELS):
        if i > 0:
            api.olWaitEvents(queue, [events[i - 1]])
        api.olLaunchKernel(queue, device, sequence, sequence_args(i, mem), launch_size(1))
        events.append(api.olCreateEvent(queue))

    within(api.olSyncEvent, events[NUM_KERNELS - 1])
    check_fibonacci(mem)


def test_success_multiple_events(device: api.Device, sequence: api.Symbol, mem: int) -> None:
    queues: list[api.Queue] = []
    events: list[api.Event] = []
    for i in range(NUM_KERNELS):
        queues.append(api.olCreateQueue(device))
        if i > 0:
            api.olWaitEvents(queues[i], events[:i])
        api.olLaunchKernel(queues[i], device, sequence, sequence_args(i, mem), launch_size(1))
        events.append(api.olCreateEvent(queues[i]))

    within(api.olSyncEvent, events[NUM_KERNELS - 1])
    check_fibonacci(mem)


def test_invalid_null_queue(device: api.Device, sequence: api.Symbol) -> None:
    # Upstream passes an (unset) event array of one; here a real event, so that the null
    # queue is the only thing wrong with the call.
    other = api.olCreateQueue(device)
    event = api.olCreateEvent(other)
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olWaitEvents, None, [event])


def test_invalid_null_event(device: api.Device, sequence: api.Symbol) -> None:
    queue = api.olCreateQueue(device)
    assert_error(ErrorCode.INVALID_NULL_POINTER, api.olWaitEvents, queue, None)


def test_invalid_null_inner_event(device: api.Device, sequence: api.Symbol) -> None:
    queue = api.olCreateQueue(device)
    assert_error(ErrorCode.INVALID_NULL_HANDLE, api.olWaitEvents, queue, [None])
