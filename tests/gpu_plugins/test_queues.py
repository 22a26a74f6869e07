"""Queues, events and host functions on GPU streams: per-device stream and event pools, queue
recycling, emptiness and completion as the driver reports them, cross-stream waits, elapsed time,
and host functions run in stream order on the driver's thread."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import pytest
from gpu_fixtures import (
    KERNEL,
    WAIT,
    Runtime,
    expect,
    gpu_device,
    host_buffer,
    in_new_thread,
    launch_size,
    shut_down_fully,
    spin,
    tag,
)

from offloadrt import AllocType, ErrorCode, EventFlags, EventInfo, OffloadError, QueueInfo, api
from offloadrt.plugins.common.gpu import HOST_TRAMPOLINE_ADDRESS

from .vendors import Vendor

# ---- pools and queue recycling -------------------------------------------------------------------


def test_streams_and_events_come_from_per_device_pools(vendor: Vendor, rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    streams, events = vendor.count("stream_create"), vendor.count("event_create")
    for _ in range(25):
        api.olDestroyQueue(api.olCreateQueue(gpu0))
    assert vendor.count("stream_create") == streams + 1  # one stream, reused
    live = [api.olCreateQueue(gpu0) for _ in range(3)]  # the pool grows on demand
    assert vendor.count("stream_create") == streams + 3
    for queue in live:
        api.olDestroyQueue(queue)
    live = [api.olCreateQueue(gpu0) for _ in range(3)]
    assert vendor.count("stream_create") == streams + 3
    for _ in range(25):
        api.olDestroyEvent(api.olCreateEvent(live[0]))
    assert vendor.count("event_create") == events + 1
    held = [api.olCreateEvent(queue) for queue in live]
    assert vendor.count("event_create") == events + 3
    api.olDestroyQueue(api.olCreateQueue(gpu1))  # gpu1 has its own pool
    assert vendor.count("stream_create") == streams + 4
    assert {int(args[0]) for args in vendor.calls_of("stream_create")} == {vendor.nonblocking_stream}
    # Plain events take no timestamp (cheaper on every driver); timed ones come from a pool of their own.
    assert {int(args[0]) for args in vendor.calls_of("event_create")} == {vendor.untimed_event}
    for _ in range(5):
        api.olDestroyEvent(api.olCreateEvent(live[0], EventFlags.ENABLE_PROFILING))
    assert vendor.count("event_create") == events + 4
    assert [int(args[0]) for args in vendor.calls_of("event_create")][-1] == vendor.default_event
    api.olDestroyEvent(held.pop())
    api.olDestroyEvent(api.olCreateEvent(live[0]))  # a plain event takes the pooled plain one
    assert vendor.count("event_create") == events + 4
    state = vendor.standin.state()
    assert sorted(s.ctx.device.ordinal for s in state.streams.values()) == [0, 0, 0, 1]
    for event in held:
        api.olDestroyEvent(event)
    shut_down_fully()
    # De-init destroys every pooled stream and event.
    assert vendor.count("stream_destroy") == vendor.count("stream_create") == streams + 4
    assert vendor.count("event_destroy") == vendor.count("event_create") == events + 4
    assert vendor.standin.state().streams == {} and vendor.standin.state().events == {}


def test_a_destroyed_busy_queue_is_parked_its_work_completes_and_its_stream_is_reused(
        vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[0]
    source, source_address = host_buffer(b"parked queue data")
    pointer = api.olMemAlloc(gpu, AllocType.DEVICE, 32)
    queue = api.olCreateQueue(gpu)
    gate = rt.gate(queue)
    api.olMemcpy(queue, pointer, gpu, source_address, rt.host, len(source.raw))
    done = threading.Event()
    api.olLaunchHostFunction(queue, lambda _: done.set())
    last = api.olCreateEvent(queue)  # events outlive their queue
    gate.wait_entered()
    busy_stream = vendor.calls_of("host_func")[-1][0]
    streams = vendor.count("stream_create")
    api.olDestroyQueue(queue)  # returns at once: the stream is parked
    assert not done.is_set()
    other = api.olCreateQueue(gpu)  # the parked stream is busy: a new one
    assert vendor.count("stream_create") == streams + 1
    gate.open()
    in_new_thread(api.olSyncEvent, last)  # the parked stream has drained
    assert done.is_set(), "the parked queue's work never completed"
    assert vendor.standin.read(pointer, len(source.raw)) == source.raw
    reused = api.olCreateQueue(gpu)  # the parked stream has finished: it is taken again
    assert vendor.count("stream_create") == streams + 1
    api.olLaunchHostFunction(reused, lambda _: None)
    assert vendor.calls_of("host_func")[-1][0] == busy_stream
    in_new_thread(api.olSyncQueue, reused)
    api.olDestroyQueue(reused)
    api.olDestroyQueue(other)


def test_queue_emptiness_follows_the_drivers_stream_query(vendor: Vendor, rt: Runtime) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is True
    gate = rt.gate(queue)
    gate.wait_entered()
    queries = vendor.count("stream_query")
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is False
    assert api.olQueryQueue(queue) is False
    assert vendor.count("stream_query") == queries + 2
    gate.open()
    in_new_thread(api.olSyncQueue, queue)
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is True
    vendor.inject("stream_query", "NOT_READY", times=2)  # the driver says: still busy
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is False
    assert api.olQueryQueue(queue) is False
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY) is True
    assert api.olQueryQueue(queue) is True
    api.olDestroyQueue(queue)


def test_a_queue_native_handle_is_its_stream(vendor: Vendor, rt: Runtime) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    stream = queue.native_handle
    assert stream and stream == int(queue._ai.stream)  # type: ignore[union-attr]
    assert vendor.stream_is_idle(stream)  # the driver knows it by that handle
    gate = rt.gate(queue)
    gate.wait_entered()
    assert not vendor.stream_is_idle(stream)
    gate.open()
    in_new_thread(api.olSyncQueue, queue)
    api.olDestroyQueue(queue)


# ---- events ---------------------------------------------------------------------------------------

def test_elapsed_time_between_two_events(vendor: Vendor, rt: Runtime) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    start = api.olCreateEvent(queue, EventFlags.ENABLE_PROFILING)
    api.olLaunchHostFunction(queue, lambda _: spin(0.03))
    end = api.olCreateEvent(queue, EventFlags.ENABLE_PROFILING)
    elapsed = in_new_thread(api.olGetEventElapsedTime, start, end)
    assert isinstance(elapsed, float) and 25.0 <= elapsed < 10_000.0, elapsed
    assert vendor.count("event_elapsed") == 1
    api.olDestroyQueue(queue)


@pytest.mark.parametrize("cross_device", [False, True], ids=["same-device", "cross-device"])
def test_wait_events_orders_work_across_streams(vendor: Vendor, rt: Runtime, cross_device: bool) -> None:
    gpu0, gpu1 = rt.gpus
    producer = api.olCreateQueue(gpu0)
    consumer = api.olCreateQueue(gpu1 if cross_device else gpu0)
    order: list[str] = []
    gate = rt.gate(producer)
    api.olLaunchHostFunction(producer, lambda _: order.append("producer"))
    event = api.olCreateEvent(producer)
    api.olWaitEvents(consumer, [event])
    assert vendor.calls_of("stream_wait_event") == [
        (consumer._ai.stream, event._ev.event, 0)]  # type: ignore[union-attr]
    api.olLaunchHostFunction(consumer, lambda _: order.append("consumer"))
    gate.wait_entered()
    assert api.olQueryQueue(consumer) is False and order == []  # the consumer waits for the producer
    gate.open()
    in_new_thread(api.olSyncQueue, consumer)
    assert order == ["producer", "consumer"]
    api.olDestroyQueue(consumer)
    api.olDestroyQueue(producer)


def test_wait_events_on_events_of_both_devices(rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    producers = [api.olCreateQueue(gpu) for gpu in (gpu0, gpu1)]
    consumer = api.olCreateQueue(gpu0)
    order: list[str] = []
    gates = [rt.gate(queue) for queue in producers]
    for name, queue in zip(("p0", "p1"), producers):
        api.olLaunchHostFunction(queue, lambda _, name=name: order.append(name))  # type: ignore[misc]
    api.olWaitEvents(consumer, [api.olCreateEvent(queue) for queue in producers])
    api.olLaunchHostFunction(consumer, lambda _: order.append("consumer"))
    gates[1].open()
    in_new_thread(api.olSyncQueue, producers[1])
    assert api.olQueryQueue(consumer) is False and order == ["p1"]
    gates[0].open()
    in_new_thread(api.olSyncQueue, consumer)
    assert order == ["p1", "p0", "consumer"]
    for queue in (*producers, consumer):
        api.olDestroyQueue(queue)


def test_event_completion_follows_the_drivers_event_query(vendor: Vendor, rt: Runtime) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    gate = rt.gate(queue)
    event = api.olCreateEvent(queue)
    queries = vendor.count("event_query")
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is False
    assert vendor.count("event_query") == queries + 1
    gate.open()
    in_new_thread(api.olSyncEvent, event)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True
    vendor.inject("event_query", "NOT_READY")
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is False
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True
    api.olDestroyQueue(queue)


# ---- host functions -------------------------------------------------------------------------------

def test_host_functions_run_in_stream_order_on_the_drivers_thread(vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[0]
    order: list[Any] = []
    threads: list[str] = []
    vendor.standin.register_kernel("record", lambda params, *_: order.append(("kernel", params)))
    kernel = api.olGetSymbol(vendor.program(gpu), "record", KERNEL)
    source, source_address = host_buffer(b"copied first")
    pointer = api.olMemAlloc(gpu, AllocType.DEVICE, 16)
    queue = api.olCreateQueue(gpu)

    def host(tag: Any) -> None:
        threads.append(threading.current_thread().name)
        order.append(("host", tag))

    gate = rt.gate(queue)
    api.olLaunchHostFunction(queue, host, "a")
    api.olMemcpy(queue, pointer, gpu, source_address, rt.host, 12)
    api.olLaunchHostFunction(queue, lambda _: order.append(("copy done", vendor.standin.read(pointer, 12))))
    api.olLaunchKernel(queue, gpu, kernel, tag(b"k1"), launch_size())
    api.olLaunchHostFunction(queue, host, {"b": 2})
    api.olLaunchKernel(queue, gpu, kernel, tag(b"k2"), launch_size())
    api.olLaunchHostFunction(queue, host, None)
    gate.wait_entered()
    assert order == []
    gate.open()
    in_new_thread(api.olSyncQueue, queue)
    assert order == [("host", "a"), ("copy done", b"copied first"), ("kernel", tag(b"k1")), ("host", {"b": 2}),
                     ("kernel", tag(b"k2")), ("host", None)]
    assert len(set(threads)) == 1 and threads[0].startswith(vendor.stream_thread)  # the driver's thread
    assert {int(args[1]) for args in vendor.calls_of("host_func")} == {HOST_TRAMPOLINE_ADDRESS}  # one trampoline
    api.olDestroyQueue(queue)


def test_a_raising_host_function_fails_its_queue(rt: Runtime) -> None:
    gpu = rt.gpus[0]
    queue, healthy = api.olCreateQueue(gpu), api.olCreateQueue(gpu)
    later = threading.Event()

    def boom(_: object) -> None:
        raise ValueError("boom-4711")

    api.olLaunchHostFunction(queue, boom)
    api.olLaunchHostFunction(queue, lambda _: later.set())
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)
    assert "boom-4711" in err.details
    error, origin = api.olGetQueueError(queue)
    assert origin is queue and isinstance(error, OffloadError)
    assert "host function raised ValueError: boom-4711" in error.details, error
    assert isinstance(error.__cause__, ValueError)
    assert not later.is_set(), "a host function after the failure ran"
    expect(ErrorCode.QUEUE_ERROR, api.olLaunchHostFunction, queue, lambda _: None)
    api.olLaunchHostFunction(healthy, lambda _: later.set())
    in_new_thread(api.olSyncQueue, healthy)
    assert later.is_set() and api.olGetQueueError(healthy) == (None, None)
    api.olDestroyQueue(queue)
    api.olDestroyQueue(healthy)


def test_sync_from_another_thread_while_a_host_function_blocks_cannot_deadlock(
        vendor: Vendor, rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    in_sync = threading.Event()
    device = gpu_device(rt.gpus[0])
    real_sync = device.drv_stream_sync

    def watched_sync(stream: Any) -> Any:
        in_sync.set()
        return real_sync(stream)

    # The plugin binds its driver functions when the device starts: watch the device's binding.
    monkeypatch.setattr(device, "drv_stream_sync", watched_sync)
    running, released, finished = threading.Event(), threading.Event(), threading.Event()

    def blocking(_: object) -> None:
        running.set()
        assert released.wait(3 * WAIT)
        finished.set()

    api.olLaunchHostFunction(queue, blocking)
    outcome: dict[str, BaseException | None] = {}

    def sync() -> None:
        try:
            api.olSyncQueue(queue)
            outcome["sync"] = None
        except BaseException as exc:  # noqa: BLE001  # checked in the test's thread
            outcome["sync"] = exc

    syncer = threading.Thread(target=sync, daemon=True)
    syncer.start()
    assert running.wait(WAIT), "the host function never started"
    assert in_sync.wait(WAIT), f"the other thread never reached {vendor.call('stream_sync')}"
    assert syncer.is_alive() and not finished.is_set()  # both wait: the sync for the host function
    released.set()  # from the main thread, while the other one is inside olSyncQueue
    syncer.join(WAIT)
    assert not syncer.is_alive(), "olSyncQueue never returned: deadlock"
    assert finished.wait(WAIT) and outcome == {"sync": None}
    api.olDestroyQueue(queue)


def test_a_host_function_cannot_call_into_the_driver_but_may_use_the_host_device(
        vendor: Vendor, rt: Runtime) -> None:
    """Both drivers forbid calls into themselves from their callback thread: offloadrt refuses them
    there (the queue fails with a message that says why) instead of letting the driver deadlock or
    fail obscurely."""
    gpu = rt.gpus[0]
    pointer = api.olMemAlloc(gpu, AllocType.DEVICE, 16)
    source, source_address = host_buffer(b"0123456789abcdef")
    seen: list[BaseException] = []
    host_copies: list[bytes] = []

    def body(_: object) -> None:
        target = ctypes.create_string_buffer(16)
        api.olMemcpy(None, ctypes.addressof(target), rt.host, source_address, rt.host, 16)  # the host device: fine
        host_copies.append(target.raw)
        try:
            api.olMemcpy(None, pointer, gpu, source_address, rt.host, 16)  # a copy by the driver: refused
        except BaseException as exc:  # noqa: BLE001  # inspected below
            seen.append(exc)
            raise

    queue = api.olCreateQueue(gpu)
    api.olLaunchHostFunction(queue, body)
    err = expect(ErrorCode.QUEUE_ERROR, in_new_thread, api.olSyncQueue, queue)
    assert host_copies == [b"0123456789abcdef"]
    assert len(seen) == 1 and isinstance(seen[0], OffloadError) and seen[0].code == ErrorCode.INVALID_ARGUMENT
    assert "cannot be called from a host function" in seen[0].details and str(queue) in seen[0].details
    assert f"reaches the {vendor.driver_class.vendor} driver" in seen[0].details, seen[0]
    assert "cannot be called from a host function" in err.details
    api.olMemcpy(None, pointer, gpu, source_address, rt.host, 16)  # outside a host function it works
    assert vendor.standin.read(pointer, 16) == b"0123456789abcdef"
    api.olDestroyQueue(queue)
    api.olMemFree(pointer)
