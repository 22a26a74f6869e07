"""Kernel faults on GPU stand-ins, reported asynchronously as on a GPU: a non-sticky fault fails only
its queue; a sticky one poisons its device (every later call fails at once, saying so) until the
runtime is re-initialised, and never the other device."""

from __future__ import annotations

import gc
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _pytest.mark import ParameterSet
from gpu_fixtures import (
    KERNEL,
    WAIT,
    Runtime,
    expect,
    host_buffer,
    in_new_thread,
    launch_size,
    recorder,
    shut_down_fully,
    tag,
    wait_until_faulted,
)

import offloadrt
from offloadrt import AllocType, DeviceInfo, DeviceType, ErrorCode, EventInfo, OffloadError, api

from .vendors import Vendor, per_vendor


def launch_boom(vendor: Vendor, queue: api.Queue | None, gpu: api.Device, status: str = "ILLEGAL_ADDRESS") -> Any:
    """Launch the kernel ``boom``, which faults with ``status``; returns the vendor's status."""
    vendor.standin.register_kernel("boom", vendor.faulting_kernel(status))
    api.olLaunchKernel(queue, gpu, api.olGetSymbol(vendor.program(gpu), "boom", KERNEL), None, launch_size())
    return vendor.status(status)


def test_a_non_sticky_fault_fails_only_its_queue(vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[0]
    seen, body = recorder()
    vendor.standin.register_kernel("record", body)
    prog = vendor.program(gpu)
    queue, healthy = api.olCreateQueue(gpu), api.olCreateQueue(gpu)
    status = launch_boom(vendor, queue, gpu, "LAUNCH_OUT_OF_RESOURCES")
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    assert f"{vendor.call('stream_sync')}: {status.name}" in err.details, err
    error, origin = api.olGetQueueError(queue)
    assert origin is queue and error is not None and status.name in error.details
    assert vendor.poisoned not in error.details
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)  # the error state is never cleared
    expect(ErrorCode.QUEUE_ERROR, api.olMemFill, queue, api.olMemAlloc(gpu, AllocType.DEVICE, 8), b"\x00", 8)
    api.olLaunchKernel(healthy, gpu, api.olGetSymbol(prog, "record", KERNEL), tag(b"fine"), launch_size())
    in_new_thread(api.olSyncQueue, healthy)
    assert seen == [(tag(b"fine"), (1, 1, 1), (1, 1, 1), 0, 0)]
    api.olMemFree(api.olMemAlloc(gpu, AllocType.DEVICE, 64))
    streams = vendor.count("stream_create")
    destroyed = vendor.count("stream_destroy")
    api.olDestroyQueue(queue)  # a failed stream is destroyed, never pooled again
    assert vendor.count("stream_destroy") == destroyed + 1
    api.olDestroyQueue(api.olCreateQueue(gpu))
    assert vendor.count("stream_create") == streams + 1
    api.olDestroyQueue(healthy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        in_new_thread(shut_down_fully)


def sticky_faults(vendor: Vendor) -> Iterator[ParameterSet]:
    for status in vendor.sticky:
        yield pytest.param(status, id=status)


@pytest.mark.parametrize(("vendor", "status"), per_vendor(sticky_faults), indirect=["vendor"])
def test_a_sticky_fault_poisons_only_its_device_for_the_rest_of_the_process(vendor: Vendor, rt: Runtime,
                                                                            status: str) -> None:
    gpu0, gpu1 = rt.gpus
    prog = vendor.program(gpu0)
    record = api.olGetSymbol(prog, "record", KERNEL)
    pointer = api.olMemAlloc(gpu0, AllocType.DEVICE, 64)
    remote = api.olMemAlloc(gpu1, AllocType.DEVICE, 64)
    queue, bystander, elsewhere = api.olCreateQueue(gpu0), api.olCreateQueue(gpu0), api.olCreateQueue(gpu1)
    api.olDestroyQueue(api.olCreateQueue(gpu0))  # a pooled stream that a new queue would take
    gate = rt.gate(queue)
    name = launch_boom(vendor, queue, gpu0, status).name
    after = api.olCreateEvent(queue)
    ran = threading.Event()
    api.olLaunchHostFunction(queue, lambda _: ran.set())
    gate.open()
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    assert name in err.details
    error, origin = api.olGetQueueError(queue)
    assert origin is queue and isinstance(error, OffloadError)
    assert name in error.details and vendor.poisoned in error.details, error
    assert not ran.is_set()
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, after)  # its queue failed before reaching it
    assert name in err.details
    source, source_address = host_buffer(64)
    later_calls: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
        ("olMemAlloc", api.olMemAlloc, (gpu0, AllocType.DEVICE, 64)),
        ("olMemAlloc(HOST)", api.olMemAlloc, (gpu0, AllocType.HOST, 64)),
        ("olCreateQueue", api.olCreateQueue, (gpu0,)),
        ("olCreateProgram", api.olCreateProgram, (gpu0, vendor.image())),
        ("olGetSymbol", api.olGetSymbol, (prog, "other", KERNEL)),
        ("olLaunchKernel", api.olLaunchKernel, (None, gpu0, record, tag(0), launch_size())),
        ("olLaunchKernel(queue)", api.olLaunchKernel, (bystander, gpu0, record, tag(0), launch_size())),
        ("olMemcpy", api.olMemcpy, (None, pointer, gpu0, source_address, rt.host, 64)),
        ("olMemcpy(queue)", api.olMemcpy, (bystander, pointer, gpu0, source_address, rt.host, 64)),
        ("olMemcpy(peer)", api.olMemcpy, (None, remote, gpu1, pointer, gpu0, 64)),
        ("olMemFill", api.olMemFill, (None, pointer, b"\x01", 64)),
        ("olMemFill(queue)", api.olMemFill, (bystander, pointer, b"\x01", 64)),
        ("olCreateEvent", api.olCreateEvent, (bystander,)),
        ("olLaunchHostFunction", api.olLaunchHostFunction, (bystander, lambda _: None)),
        ("olCalculateOptimalOccupancy", api.olCalculateOptimalOccupancy, (gpu0, record, 0)),
    ]
    wrong: list[str] = []
    for call, fn, args in later_calls:
        try:
            in_new_thread(fn, *args)
            wrong.append(f"{call} succeeded")
        except OffloadError as exc:
            if exc.code != ErrorCode.BACKEND_FAILURE or vendor.poisoned not in exc.details:
                wrong.append(f"{call}: {exc!r}")
    assert not wrong, "\n".join(wrong)
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, bystander)  # its work is lost with the device
    assert vendor.poisoned in err.details
    assert api.olIsValidBinary(gpu0, vendor.image()) is True  # answered without the driver
    frees = vendor.count("free_device")
    api.olMemFree(pointer)  # quietly leaked: the driver reclaims a poisoned device's memory
    assert vendor.count("free_device") == frees
    # The other device keeps working.
    other = api.olMemAlloc(gpu1, AllocType.DEVICE, 64)
    api.olMemFill(elsewhere, other, b"\x42", 64)
    in_new_thread(api.olSyncQueue, elsewhere)
    assert vendor.standin.read(other, 64) == b"\x42" * 64
    # Shutting down a poisoned device is quiet; no driver call clears the fault (an H100 kept one
    # through a release, a reset and a retain of the primary context), so the platform does not
    # start again, saying why, and the host still does.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        in_new_thread(shut_down_fully)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        api.olInit(platforms=[vendor.backend])
    try:
        (reason,) = [p.reason for p in offloadrt.unavailable_platforms() if p.backend == vendor.backend]
        assert "restart the process" in reason and "device 0" in reason, reason
        assert vendor.status(status).name in reason, reason
        devices: list[api.Device] = []
        api.olIterateDevices(lambda device, _: devices.append(device))
        assert [api.olGetDeviceInfo(d, DeviceInfo.TYPE) for d in devices] == [DeviceType.HOST]
        assert not [w for w in caught if vendor.call("init") in str(w.message)]
    finally:
        api.olShutDown()


def test_after_a_sticky_fault_the_hot_paths_of_a_thread_that_used_the_device_refuse_too(vendor: Vendor,
                                                                                        rt: Runtime) -> None:
    # The thread that used the device has it current, so its calls take the hot paths (which test
    # only that the device is current here); poisoning replaces the device's token, so they miss
    # and the checked paths raise the sticky error.
    gpu = rt.gpus[0]
    vendor.standin.register_kernel("record", recorder()[1])
    record = api.olGetSymbol(vendor.program(gpu), "record", KERNEL)
    pointer = api.olMemAlloc(gpu, AllocType.DEVICE, 64)
    queue, bystander = api.olCreateQueue(gpu), api.olCreateQueue(gpu)
    _, address = host_buffer(64)
    api.olMemcpy(bystander, pointer, gpu, address, rt.host, 64)
    api.olLaunchKernel(bystander, gpu, record, tag(0), launch_size())
    api.olSyncEvent(api.olCreateEvent(bystander))
    api.olSyncQueue(bystander)
    gdev = gpu._gdev
    assert gdev.thread_state.cell.token is gdev.current_token  # this thread takes the hot paths
    launch_boom(vendor, queue, gpu)
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    assert gdev.thread_state.cell.token is not gdev.current_token
    roles = ("memcpy_htod", "memcpy_dtoh", "launch", "event_record")
    before = {role: vendor.count(role) for role in roles}
    for call, fn, args in [
        ("olMemcpy H2D", api.olMemcpy, (bystander, pointer, gpu, address, rt.host, 64)),
        ("olMemcpy D2H", api.olMemcpy, (bystander, address, rt.host, pointer, gpu, 64)),
        ("olLaunchKernel", api.olLaunchKernel, (bystander, gpu, record, tag(0), launch_size())),
        ("olCreateEvent", api.olCreateEvent, (bystander,)),
        ("olCreateQueue", api.olCreateQueue, (gpu,)),
    ]:
        err = expect(ErrorCode.BACKEND_FAILURE, fn, *args)
        assert vendor.poisoned in err.details, f"{call}: {err!r}"
    assert {role: vendor.count(role) for role in roles} == before  # refused before reaching the driver
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, bystander)
    assert vendor.poisoned in err.details
    api.olMemFree(pointer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shut_down_fully()


@pytest.mark.parametrize("first", ["olSyncEvent", "olQueryQueue", "olGetQueueError", "olGetEventInfo"])
def test_a_sticky_fault_is_reported_by_whatever_call_sees_it_first(vendor: Vendor, rt: Runtime, first: str) -> None:
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    gate = rt.gate(queue)
    name = launch_boom(vendor, queue, gpu).name
    event = api.olCreateEvent(queue)
    gate.open()
    if first == "olSyncEvent":
        expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, event)
    else:
        wait_until_faulted(vendor.standin, 0)  # a query reports the fault once it has happened on the driver's thread
        if first == "olQueryQueue":
            expect(ErrorCode.QUEUE_ERROR, api.olQueryQueue, queue)
        elif first == "olGetQueueError":
            error, origin = api.olGetQueueError(queue)
            assert origin is queue and error is not None and name in error.details
        else:
            assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True  # never reached: nothing pending
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    assert name in err.details
    expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, event)
    assert vendor.poisoned in expect(ErrorCode.BACKEND_FAILURE, api.olMemAlloc, gpu, AllocType.DEVICE, 8).details


def test_a_device_poisoned_outside_a_queue_fails_the_next_call_and_stays_poisoned(vendor: Vendor, rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    status = vendor.status("ILLEGAL_ADDRESS")
    vendor.standin.poison(0, status)
    err = expect(ErrorCode.BACKEND_FAILURE, api.olMemAlloc, gpu0, AllocType.DEVICE, 8)
    assert f"{vendor.call('alloc_device')}: {status.name}" in err.details and vendor.poisoned in err.details, err
    calls = len(vendor.standin.calls)
    err = expect(ErrorCode.BACKEND_FAILURE, api.olCreateQueue, gpu0)
    assert f"{vendor.label} device 0 hit a sticky error ({status.name}" in err.details, err
    assert len(vendor.standin.calls) == calls  # refused without asking the driver
    api.olMemFree(api.olMemAlloc(gpu1, AllocType.DEVICE, 8))


def test_a_sync_waiting_when_the_fault_happens_returns_promptly(vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    gate = rt.gate(queue)
    launch_boom(vendor, queue, gpu)
    blocked = threading.Event()
    api.olLaunchHostFunction(queue, lambda _: blocked.wait(3 * WAIT))  # never runs: the device is dead
    outcome: dict[str, BaseException | None] = {}

    def sync() -> None:
        try:
            api.olSyncQueue(queue)
            outcome["sync"] = None
        except BaseException as exc:  # noqa: BLE001  # checked in the test's thread
            outcome["sync"] = exc

    syncer = threading.Thread(target=sync, daemon=True)
    syncer.start()
    gate.wait_entered()
    gate.open()
    syncer.join(WAIT)
    blocked.set()
    assert not syncer.is_alive(), "olSyncQueue hung after a sticky fault"
    assert isinstance(outcome["sync"], OffloadError) and outcome["sync"].code == ErrorCode.QUEUE_ERROR


def test_a_host_function_skipped_by_a_sticky_fault_is_released_at_shutdown(vendor: Vendor, rt: Runtime) -> None:
    """The driver never calls a host function queued behind a sticky fault; olShutDown must still
    let go of its callback and user data instead of keeping them for the life of the process."""
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    gate = rt.gate(queue)
    launch_boom(vendor, queue, gpu)

    class Payload:
        pass

    payload = Payload()
    alive = weakref.ref(payload)
    api.olLaunchHostFunction(queue, lambda _: None, payload)
    del payload
    gate.open()
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    in_new_thread(shut_down_fully)
    gc.collect()
    assert alive() is None, "the skipped host function's user data outlived olShutDown"


def test_a_queue_waiting_on_a_faulting_queue_of_another_device_fails_too(vendor: Vendor, rt: Runtime) -> None:
    """olWaitEvents spreads a failure that happens after the wait was enqueued ("now or later", as
    the plugin interface requires of _wait_event_impl), naming the queue that failed first; the
    waiting queue's own device is healthy, so nothing else would ever report it."""
    gpu0, gpu1 = rt.gpus
    producer, consumer = api.olCreateQueue(gpu0), api.olCreateQueue(gpu1)
    gate = rt.gate(producer)
    name = launch_boom(vendor, producer, gpu0).name
    event = api.olCreateEvent(producer)
    api.olWaitEvents(consumer, [event])  # the producer has not failed yet
    gate.open()
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, consumer)
    error, origin = api.olGetQueueError(consumer)
    assert origin is producer and error is not None and name in error.details, (error, origin)
    api.olMemFree(api.olMemAlloc(gpu1, AllocType.DEVICE, 64))  # gpu1 itself still works
    late = api.olCreateQueue(gpu1)  # a queue that waits on the failed queue's event now fails at once
    api.olWaitEvents(late, [event])
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, late)
    assert api.olGetQueueError(late)[1] is producer


@pytest.mark.parametrize("status", ["ILLEGAL_ADDRESS", "LAUNCH_OUT_OF_RESOURCES"], ids=["sticky", "non-sticky"])
def test_a_faulting_launch_without_a_queue_raises_the_drivers_error(vendor: Vendor, rt: Runtime, status: str) -> None:
    gpu = rt.gpus[0]
    vendor.standin.register_kernel("boom", vendor.faulting_kernel(status))
    boom = api.olGetSymbol(vendor.program(gpu), "boom", KERNEL)
    err = expect(ErrorCode.BACKEND_FAILURE, api.olLaunchKernel, None, gpu, boom, None, launch_size())
    assert vendor.status(status).name in err.details and "(running kernel 'boom')" in err.details, err
    if int(vendor.status(status)) in vendor.standin.STICKY:
        assert vendor.poisoned in expect(ErrorCode.BACKEND_FAILURE, api.olMemAlloc, gpu, AllocType.DEVICE, 8).details
    else:
        api.olMemFree(api.olMemAlloc(gpu, AllocType.DEVICE, 8))
