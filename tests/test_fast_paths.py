"""The GPU path's hot paths (olMemcpy between host memory and a GPU, event create/sync/destroy,
queue create/destroy and sync) do what their checked paths do: every check, every error code,
the async-error semantics, on both GPU plugins over their driver stand-ins; and the resource
pools, which take and return without a lock, destroy each resource exactly once when a device
is de-initialised under them."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from gpu_fixtures import Runtime, host_buffer
from gpu_plugins.vendors import VENDORS, Vendor

from offloadrt import AllocType, Dimensions, ErrorCode, KernelLaunchSizeArgs, OffloadError, SymbolKind, api
from offloadrt.plugins.common.resources import ResourcePool


@pytest.fixture(params=VENDORS, ids=[vendor.name for vendor in VENDORS])
def vendor(request: pytest.FixtureRequest) -> Vendor:
    chosen: Vendor = request.param
    return chosen


@pytest.fixture
def rt(vendor: Vendor, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    with vendor.runtime(monkeypatch, devices=2) as runtime:
        yield runtime


def expect(code: ErrorCode, fn: Any, *args: Any) -> OffloadError:
    """``fn(*args)`` raises ``code``, called on this thread (where the GPU is current after a first
    call, so the plugins' hot paths are the ones tried)."""
    with pytest.raises(OffloadError) as info:
        fn(*args)
    assert info.value.code == code, f"expected {code.name}, got {info.value!r}"
    return info.value


def _fail(queue: api.Queue) -> None:
    """Put ``queue`` in the error state (a host function that raises) and see it fail."""
    def boom(_: object) -> None:
        raise RuntimeError("boom")

    api.olLaunchHostFunction(queue, boom, None)
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)


# ---- olMemcpy ------------------------------------------------------------------------------------

def test_queued_copies_move_the_bytes_both_ways(rt: Runtime) -> None:
    gpu, host = rt.gpus[0], rt.host
    queue = api.olCreateQueue(gpu)
    device = api.olMemAlloc(gpu, AllocType.DEVICE, 64)
    pinned = api.olMemAlloc(gpu, AllocType.HOST, 64)
    source, src = host_buffer(bytes(range(64)))
    target, dst = host_buffer(64)
    api.olMemcpy(queue, device, gpu, src, host, 64)
    api.olMemcpy(queue, device + 16, gpu, src + 40, host, 8)  # interior addresses on both sides
    api.olMemcpy(queue, pinned, host, device, gpu, 64)  # host memory that olMemAlloc made
    api.olMemcpy(queue, dst, host, pinned, gpu, 64)
    api.olMemcpy(queue, np.int64(dst), host, np.uint64(device), gpu, np.int32(4))  # type: ignore[arg-type]  # the checked path
    api.olSyncQueue(queue)
    expected = bytearray(range(64))
    expected[16:24] = bytes(range(40, 48))
    assert target.raw == bytes(expected)
    assert source.raw == bytes(range(64))
    api.olDestroyQueue(queue)
    api.olMemFree(pinned)
    api.olMemFree(device)


def test_queued_copies_keep_every_check(rt: Runtime) -> None:
    gpu, other, host = rt.gpus[0], rt.gpus[1], rt.host
    queue = api.olCreateQueue(gpu)
    device = api.olMemAlloc(gpu, AllocType.DEVICE, 64)
    elsewhere = api.olMemAlloc(other, AllocType.DEVICE, 64)
    _buffer, hptr = host_buffer(64)
    checks: list[tuple[ErrorCode, tuple[Any, ...]]] = [
        (ErrorCode.INVALID_SIZE, (queue, device + 60, gpu, hptr, host, 8)),  # past the allocation's end
        (ErrorCode.INVALID_SIZE, (queue, hptr, host, device + 63, gpu, 2)),
        (ErrorCode.INVALID_ARGUMENT, (queue, device, gpu, elsewhere, host, 8)),  # GPU memory named as host memory
        (ErrorCode.INVALID_DEVICE, (api.olCreateQueue(other), device, gpu, hptr, host, 8)),  # the other GPU's queue
        (ErrorCode.INVALID_NULL_POINTER, (queue, 0, gpu, hptr, host, 8)),
        (ErrorCode.INVALID_ARGUMENT, (queue, -8, gpu, hptr, host, 8)),
        (ErrorCode.INVALID_SIZE, (queue, device, gpu, hptr, host, -1)),
        (ErrorCode.INVALID_ARGUMENT, (queue, device, gpu, 1 << 64, host, 8)),
        (ErrorCode.INVALID_NULL_HANDLE, (queue, device, gpu, hptr, None, 8)),
        (ErrorCode.INVALID_ARGUMENT, (queue, device, gpu, hptr, "host", 8)),
        (ErrorCode.INVALID_ARGUMENT, ("queue", device, gpu, hptr, host, 8)),
    ]
    for code, arguments in checks:
        expect(code, api.olMemcpy, *arguments)
    api.olMemcpy(queue, device, gpu, hptr, host, 0)  # nothing to copy: nothing checked past the handles
    api.olSyncQueue(queue)
    _fail(queue)
    expect(ErrorCode.QUEUE_ERROR, api.olMemcpy, queue, device, gpu, hptr, host, 8)
    expect(ErrorCode.QUEUE_ERROR, api.olMemcpy, queue, hptr, host, device, gpu, 8)
    api.olDestroyQueue(queue)
    expect(ErrorCode.INVALID_QUEUE, api.olMemcpy, queue, device, gpu, hptr, host, 8)
    api.olMemFree(device)
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemcpy, None, device, gpu, elsewhere, other, 8)
    api.olMemFree(elsewhere)


def test_a_copy_that_the_driver_refuses_raises_its_error(vendor: Vendor, rt: Runtime) -> None:
    gpu, host = rt.gpus[0], rt.host
    queue = api.olCreateQueue(gpu)
    device = api.olMemAlloc(gpu, AllocType.DEVICE, 64)
    _buffer, hptr = host_buffer(64)
    api.olMemcpy(queue, device, gpu, hptr, host, 8)  # the device is current on this thread: the hot path
    vendor.inject("memcpy_htod", "INVALID_VALUE")
    err = expect(ErrorCode.INVALID_ARGUMENT, api.olMemcpy, queue, device, gpu, hptr, host, 8)
    assert vendor.call("memcpy_htod") in str(err)
    api.olSyncQueue(queue)  # a refused enqueue does not fail the queue
    api.olDestroyQueue(queue)
    api.olMemFree(device)


def test_copies_after_shutdown_are_uninitialized(vendor: Vendor, monkeypatch: pytest.MonkeyPatch) -> None:
    with vendor.runtime(monkeypatch) as runtime:
        gpu, host = runtime.gpus[0], runtime.host
        queue = api.olCreateQueue(gpu)
        device = api.olMemAlloc(gpu, AllocType.DEVICE, 64)
        _buffer, hptr = host_buffer(64)
        api.olMemcpy(queue, device, gpu, hptr, host, 8)
        api.olSyncQueue(queue)
    expect(ErrorCode.UNINITIALIZED, api.olMemcpy, queue, device, gpu, hptr, host, 8)


def test_the_cached_span_pair_keeps_the_allocation_checks(rt: Runtime) -> None:
    """The hot path's span pair (the last passing copy's GPU side and host side) serves copies each
    way between the same buffers, and never lets through what the checked path refuses."""
    gpu, host = rt.gpus[0], rt.host
    queue = api.olCreateQueue(gpu)
    device = api.olMemAlloc(gpu, AllocType.DEVICE, 64)
    _buffer, hptr = host_buffer(64)
    api.olMemcpy(queue, device, gpu, hptr, host, 8)  # fills the pair
    api.olMemcpy(queue, hptr, host, device + 8, gpu, 8)  # the other way: the same pair
    # the sides swapped: the GPU's memory named as host memory, the host buffer as the GPU's
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemcpy, queue, device, host, hptr, gpu, 8)
    expect(ErrorCode.INVALID_SIZE, api.olMemcpy, queue, device + 60, gpu, hptr, host, 8)
    api.olMemFree(device)
    smaller = api.olMemAlloc(gpu, AllocType.DEVICE, 16)  # the map changed: the pair is stale
    expect(ErrorCode.INVALID_SIZE, api.olMemcpy, queue, smaller, gpu, hptr, host, 32)
    expect(ErrorCode.INVALID_SIZE, api.olMemcpy, queue, hptr, host, smaller + 8, gpu, 16)
    api.olMemcpy(queue, hptr, host, smaller, gpu, 16)
    api.olSyncQueue(queue)
    api.olDestroyQueue(queue)
    api.olMemFree(smaller)


def _allocation(base: int, size: int, device: Any, kind: AllocType = AllocType.DEVICE) -> Any:
    from offloadrt.api._allocations import Allocation
    return Allocation(base, size, device, kind)


class _Side:
    def __init__(self, is_host: bool) -> None:
        self.is_host = is_host


def test_the_span_pair_is_always_true_of_the_map() -> None:
    """AllocationMap.pair, which olMemcpy's hot path trusts without a version check: every writer
    resets it, a lookup racing a writer never leaves its pair behind, and its spans lie within
    [1, 2**64) (so a copy inside them passes the pointer and size range checks too)."""
    from offloadrt.api._allocations import _NO_PAIR, AllocationMap

    gpu, host = _Side(False), _Side(True)
    amap = AllocationMap()
    amap.add(_allocation(0x10000, 0x100, gpu))
    assert amap.copy_fits(0x10000, 0x50000, 8, True)
    assert amap.pair == (0x10000, 0x10100, 0x10100, 1 << 64)  # the device allocation; the host gap after it
    amap.add(_allocation(0x60000, 0x100, host, AllocType.HOST))  # any change of the map resets the pair
    assert amap.pair == _NO_PAIR  # (which no copy fits)
    assert amap.copy_fits(0x60010, 0x10000, 8, False)  # host side inside a host allocation
    assert amap.pair == (0x10000, 0x10100, 0x60000, 0x60100)
    amap.remove(0x60000)
    assert amap.pair == _NO_PAIR
    assert amap.copy_fits(0x10000, 0x8, 8, True)  # a host gap below every allocation starts at 1
    assert amap.pair[2:] == (1, 0x10000)
    assert not amap.copy_fits(0x10000, (1 << 64) - 4, 8, True)  # past the last address: the checked path
    assert not amap.copy_fits(0x10000, 0, 8, True)
    assert not amap.copy_fits(0x10000, -8, 8, True)
    amap.drain()
    assert amap.pair == _NO_PAIR

    # A writer that changes the map while a lookup computes its spans: the lookup fails (the
    # caller takes the checked path) and leaves no pair of the old map.
    amap = AllocationMap()
    amap.add(_allocation(0x10000, 0x100, gpu))
    real_span = amap._span

    def span_then_write(address: int, version: int) -> Any:
        found = real_span(address, version)
        if address == 0x50000:
            amap.remove(0x10000)
            amap.add(_allocation(0x10000, 0x10, gpu))  # the same base, smaller
        return found

    amap._span = span_then_write  # type: ignore[method-assign]
    assert not amap.copy_fits(0x10000, 0x50000, 0x80, True)
    assert amap.pair == _NO_PAIR
    amap._span = real_span  # type: ignore[method-assign]
    assert not amap.copy_fits(0x10000, 0x50000, 0x80, True)  # runs past the new allocation's end


# ---- events ------------------------------------------------------------------------------------

def test_racing_destroys_of_one_event_release_it_once(rt: Runtime) -> None:
    """olDestroyEvent's hot path claims a GPU event without the device's lock: of racing destroys
    (hot or checked path), exactly one wins and the driver event goes back to the pool once."""
    from offloadrt.api.event import _checked_destroy_event  # noqa: PLC0415

    queue = api.olCreateQueue(rt.gpus[0])
    pool_free = rt.gpus[0]._gdev.event_pool.free
    rounds = 60
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def destroy(fn: Callable[[Any], None], event: Any) -> None:
        barrier.wait()
        try:
            fn(event)
            outcomes.append("ok")
        except OffloadError as exc:
            outcomes.append(exc.code.name)

    for index in range(rounds):
        event = api.olCreateEvent(queue)
        second = api.olDestroyEvent if index % 2 else _checked_destroy_event
        threads = [threading.Thread(target=destroy, args=(fn, event)) for fn in (api.olDestroyEvent, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        expect(ErrorCode.INVALID_EVENT, api.olDestroyEvent, event)
    assert outcomes.count("ok") == rounds and outcomes.count("INVALID_EVENT") == rounds
    assert len({id(ev) for ev in pool_free}) == len(pool_free)  # no driver event pooled twice
    api.olDestroyQueue(queue)



def test_event_calls_keep_their_checks_and_the_queue_failure(vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    event = api.olCreateEvent(queue)
    api.olSyncEvent(event)
    api.olDestroyEvent(event)
    expect(ErrorCode.INVALID_EVENT, api.olSyncEvent, event)
    expect(ErrorCode.INVALID_EVENT, api.olDestroyEvent, event)
    expect(ErrorCode.INVALID_NULL_HANDLE, api.olSyncEvent, None)
    expect(ErrorCode.INVALID_ARGUMENT, api.olDestroyEvent, queue)
    expect(ErrorCode.INVALID_ARGUMENT, api.olCreateEvent, event)

    before = api.olCreateEvent(queue)
    _fail(queue)
    api.olSyncEvent(before)  # recorded before the failure: it completes
    expect(ErrorCode.QUEUE_ERROR, api.olCreateEvent, queue)
    api.olDestroyEvent(before)

    healthy = api.olCreateQueue(gpu)
    event = api.olCreateEvent(healthy)
    vendor.inject("event_sync", "ILLEGAL_ADDRESS")  # a fault: the event's queue failed before reaching it
    err = expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, event)
    assert isinstance(err.__cause__, OffloadError)
    expect(ErrorCode.QUEUE_ERROR, api.olSyncEvent, event)  # and stays failed
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, healthy)
    api.olDestroyEvent(event)


def test_a_refused_record_returns_the_driver_event_to_the_pool(vendor: Vendor, rt: Runtime) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    api.olDestroyEvent(api.olCreateEvent(queue))
    created = vendor.count("event_create")
    vendor.inject("event_record", "INVALID_VALUE")
    expect(ErrorCode.INVALID_ARGUMENT, api.olCreateEvent, queue)
    for _ in range(3):
        api.olDestroyEvent(api.olCreateEvent(queue))
    assert vendor.count("event_create") == created  # the one driver event, reused throughout


def test_waits_from_a_host_function_are_refused(rt: Runtime) -> None:
    queue = api.olCreateQueue(rt.gpus[0])
    event = api.olCreateEvent(queue)
    seen: list[ErrorCode] = []

    def waits(_: object) -> None:
        calls: list[Callable[[], None]] = [lambda: api.olSyncEvent(event), lambda: api.olSyncQueue(queue)]
        for call in calls:
            try:
                call()
            except OffloadError as exc:
                seen.append(exc.code)

    api.olLaunchHostFunction(queue, waits, None)
    api.olSyncQueue(queue)
    assert seen == [ErrorCode.INVALID_ARGUMENT, ErrorCode.INVALID_ARGUMENT]
    api.olDestroyEvent(event)


# ---- queues ------------------------------------------------------------------------------------

def test_an_idle_destroyed_queue_is_pooled_without_another_sync(vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[0]
    api.olDestroyQueue(api.olCreateQueue(gpu))
    streams, syncs = vendor.count("stream_create"), vendor.count("stream_sync")
    for _ in range(5):
        api.olDestroyQueue(api.olCreateQueue(gpu))
    assert vendor.count("stream_create") == streams
    assert vendor.count("stream_sync") == syncs


def test_a_failed_queue_is_not_pooled_again(vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    _fail(queue)
    expect(ErrorCode.QUEUE_ERROR, api.olSyncQueue, queue)  # every time
    destroyed = vendor.count("stream_destroy")
    api.olDestroyQueue(queue)
    assert vendor.count("stream_destroy") == destroyed + 1
    expect(ErrorCode.INVALID_QUEUE, api.olDestroyQueue, queue)
    expect(ErrorCode.INVALID_QUEUE, api.olSyncQueue, queue)
    fresh = api.olCreateQueue(gpu)
    api.olSyncQueue(fresh)
    api.olDestroyQueue(fresh)


def test_a_stream_query_fault_fails_the_destroyed_queue(vendor: Vendor, rt: Runtime) -> None:
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    vendor.inject("stream_query", "ILLEGAL_ADDRESS")
    with pytest.warns(Warning, match="nobody synced"):
        api.olDestroyQueue(queue)  # the fault is nobody's now: a warning, not a pooled broken stream


# ---- pools -------------------------------------------------------------------------------------

def _close_under_racing_users() -> None:
    made = iter(range(1_000_000))
    destroyed: list[int] = []
    lock = threading.Lock()

    def destroy(resource: int) -> None:
        with lock:
            destroyed.append(resource)

    pool: ResourcePool[int] = ResourcePool("thing", lambda: next(made), destroy, warn_missing=False)
    held = [pool.acquire() for _ in range(32)]
    for resource in held:
        pool.release(resource)
    start = threading.Barrier(5)

    def churn() -> None:
        start.wait()
        for _ in range(200):
            try:
                resource = pool.acquire()
            except OffloadError as exc:
                assert exc.code == ErrorCode.UNINITIALIZED
                return
            pool.release(resource)

    workers = [threading.Thread(target=churn) for _ in range(4)]
    for worker in workers:
        worker.start()
    start.wait()
    assert pool.deinit() == []
    for worker in workers:
        worker.join()
    assert len(destroyed) == len(set(destroyed)), "a resource was destroyed twice"
    assert pool.pooled == 0 and pool.live == 0
    expect(ErrorCode.UNINITIALIZED, pool.acquire)


def test_pools_destroy_each_resource_once_when_closed_under_racing_users() -> None:
    for _ in range(20):
        _close_under_racing_users()


def _launch_sizes_case(queue: api.Queue, device: api.Device, kernel: api.Symbol, blob: bytes | None,
                       seen: list[Any]) -> None:
    """A launch size object remembered by the hot path: writes to it (or to its Dimensions) are seen,
    and an object that only looks like one is refused as the checked path refuses it."""
    sizes = KernelLaunchSizeArgs(1, Dimensions(2, 1, 1), Dimensions(4, 1, 1))
    for _ in range(3):
        api.olLaunchKernel(queue, device, kernel, blob, sizes)
    sizes.num_groups.x = 3  # in place, in the Dimensions the hot path read
    api.olLaunchKernel(queue, device, kernel, blob, sizes)
    sizes.group_size = Dimensions(0, 1, 1)
    expect(ErrorCode.INVALID_SIZE, api.olLaunchKernel, queue, device, kernel, blob, sizes)
    sizes.group_size = Dimensions(8, 1, 1)
    api.olLaunchKernel(queue, device, kernel, blob, sizes)
    lookalike = SimpleNamespace(dimensions=1, num_groups=Dimensions(2, 1, 1), group_size=Dimensions(4, 1, 1),
                                dyn_shared_memory=0)
    err = expect(ErrorCode.INVALID_ARGUMENT, api.olLaunchKernel, queue, device, kernel, blob, lookalike)
    assert "KernelLaunchSizeArgs" in err.details
    api.olSyncQueue(queue)
    assert [(groups, items) for groups, items in seen] == [(2, 4)] * 3 + [(3, 4), (3, 8)]


def test_the_launch_hot_path_sees_every_write_to_a_launch_size_on_a_gpu(vendor: Vendor, rt: Runtime) -> None:
    seen: list[Any] = []
    vendor.standin.register_kernel("record", lambda params, grid, block, *_: seen.append((grid[0], block[0])))
    gpu = rt.gpus[0]
    kernel = api.olGetSymbol(vendor.program(gpu), "record", SymbolKind.KERNEL)
    queue = api.olCreateQueue(gpu)
    _launch_sizes_case(queue, gpu, kernel, bytes(8), seen)
    api.olDestroyQueue(queue)


def test_the_launch_hot_path_sees_every_write_to_a_launch_size_on_the_host(build: Any) -> None:
    api.olInit()
    try:
        devices: list[api.Device] = []
        api.olIterateDevices(lambda device, _: devices.append(device))
        host = devices[-1]
        program = api.olCreateProgram(host, build("basic"))
        kernel = api.olGetSymbol(program, "foo", SymbolKind.KERNEL)
        out = (ctypes.c_uint32 * 64)()
        queue = api.olCreateQueue(host)
        seen: list[Any] = []

        def filled() -> None:  # how many items the last launch wrote, as (groups, items) per group of 4/8
            count = sum(1 for value in out[1:] if value) + 1
            out[:] = [0] * 64
            seen.append(count)

        blob = ctypes.c_uint64(ctypes.addressof(out))
        sizes = KernelLaunchSizeArgs(1, Dimensions(2, 1, 1), Dimensions(4, 1, 1))
        for _ in range(2):
            api.olLaunchKernel(queue, host, kernel, bytes(blob), sizes)
            api.olSyncQueue(queue)
            filled()
        sizes.num_groups.x = 3
        api.olLaunchKernel(queue, host, kernel, bytes(blob), sizes)
        api.olSyncQueue(queue)
        filled()
        sizes.group_size = Dimensions(0, 1, 1)
        expect(ErrorCode.INVALID_SIZE, api.olLaunchKernel, queue, host, kernel, bytes(blob), sizes)
        lookalike = SimpleNamespace(dimensions=1, num_groups=Dimensions(2, 1, 1), group_size=Dimensions(4, 1, 1),
                                    dyn_shared_memory=0)
        err = expect(ErrorCode.INVALID_ARGUMENT, api.olLaunchKernel, queue, host, kernel, bytes(blob), lookalike)
        assert "KernelLaunchSizeArgs" in err.details
        assert seen == [8, 8, 12]
        api.olDestroyQueue(queue)
        api.olDestroyProgram(program)
    finally:
        api.olShutDown()
