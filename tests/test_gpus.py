"""The GPU plugins on real GPUs: what the CUDA and AMDGPU plugins offer alike, on every GPU present.

Each test runs once per NVIDIA GPU (marked ``cuda``) and once per AMD GPU (marked ``amdgpu``),
through the vendor table of ``gpu_devices``; a vendor without GPUs, drivers or compilers is
skipped with the reason. Programs are built at test time for the device (NVRTC, hiprtc). What
only one vendor has (program formats, platform facts, kernel faults, ...) is in
tests/test_cuda_gpu.py and tests/test_amdgpu_gpu.py. CI covers the plugins on driver stand-ins
instead (tests/gpu_plugins).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator

import pytest
from conftest import call_with_timeout
from gpu_devices import (
    RealGpu,
    SpinArgs,
    assert_same_bytes,
    devices_of,
    gpu_params,
    host_device,
    kernel,
    one_d,
    page_buffer,
    read_back,
    read_u32,
    running,
)

from offloadrt import (
    AllocType,
    DeviceInfo,
    DeviceType,
    Dimensions,
    ErrorCode,
    EventFlags,
    EventInfo,
    MemInfo,
    OffloadError,
    QueueInfo,
    SymbolInfo,
    SymbolKind,
    api,
)


@pytest.fixture(params=gpu_params())
def card(request: pytest.FixtureRequest) -> tuple[RealGpu, int]:
    """(vendor, ordinal among the vendor's GPUs) of each GPU present."""
    chosen: tuple[RealGpu, int] = request.param
    return chosen


@pytest.fixture
def vendor(card: tuple[RealGpu, int]) -> RealGpu:
    return card[0]


@pytest.fixture
def gpu(card: tuple[RealGpu, int]) -> Iterator[api.Device]:
    """The GPU, with offloadrt running its vendor's platform (and the host)."""
    vendor, ordinal = card
    with running(vendor.backend, ordinal) as device:
        yield device


@pytest.fixture
def host(gpu: api.Device) -> api.Device:
    return host_device()


@pytest.fixture
def program(vendor: RealGpu, gpu: api.Device) -> api.Program:
    return api.olCreateProgram(gpu, vendor.program(gpu))


# ---- device info -----------------------------------------------------------------------------------

def test_device_info(vendor: RealGpu, gpu: api.Device) -> None:
    assert api.olGetDeviceInfo(gpu, DeviceInfo.TYPE) == DeviceType.GPU
    name = api.olGetDeviceInfo(gpu, DeviceInfo.NAME)
    assert name and name == (vendor.expected_name(gpu) or name)
    assert api.olGetDeviceInfoSize(gpu, DeviceInfo.NAME) == len(name.encode()) + 1
    product = api.olGetDeviceInfo(gpu, DeviceInfo.PRODUCT_NAME)
    assert isinstance(product, str) and product.strip()
    assert api.olGetDeviceInfo(gpu, DeviceInfo.VENDOR_ID) == vendor.vendor_id
    assert vendor.vendor_name in api.olGetDeviceInfo(gpu, DeviceInfo.VENDOR)
    assert api.olGetDeviceInfo(gpu, DeviceInfo.UID).startswith("GPU-")
    assert vendor.driver_version in api.olGetDeviceInfo(gpu, DeviceInfo.DRIVER_VERSION)
    assert api.olGetDeviceInfo(gpu, DeviceInfo.NUM_COMPUTE_UNITS) > 0
    assert api.olGetDeviceInfo(gpu, DeviceInfo.MAX_CLOCK_FREQUENCY) > 0
    assert api.olGetDeviceInfo(gpu, DeviceInfo.MEMORY_CLOCK_RATE) >= 0
    assert api.olGetDeviceInfo(gpu, DeviceInfo.ADDRESS_BITS) == 64
    total = api.olGetDeviceInfo(gpu, DeviceInfo.GLOBAL_MEM_SIZE)
    assert total > vendor.min_global_memory
    assert 0 < api.olGetDeviceInfo(gpu, DeviceInfo.MAX_MEM_ALLOC_SIZE) <= total
    group = api.olGetDeviceInfo(gpu, DeviceInfo.MAX_WORK_GROUP_SIZE)
    assert group >= 1024
    per_dim = api.olGetDeviceInfo(gpu, DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION)
    assert isinstance(per_dim, Dimensions)
    assert 1 <= per_dim.z and 1 <= per_dim.y and 256 <= per_dim.x <= group
    assert api.olGetDeviceInfo(gpu, DeviceInfo.MAX_WORK_SIZE) >= group
    work = api.olGetDeviceInfo(gpu, DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION)
    assert work.x >= per_dim.x and work.y >= per_dim.y and work.z >= per_dim.z
    assert api.olGetDeviceInfo(gpu, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE) >= vendor.min_local_memory


# ---- memory ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(AllocType), ids=lambda k: k.name)
def test_memcpy_round_trip(gpu: api.Device, host: api.Device, kind: AllocType) -> None:
    size = 1 << 20
    src = bytearray(i % 251 for i in range(size))
    src_buf = (ctypes.c_ubyte * size).from_buffer(src)
    dst_buf = (ctypes.c_ubyte * size)()
    device = api.olMemAlloc(gpu, kind, size)
    other = api.olMemAlloc(gpu, AllocType.DEVICE, size)
    assert api.olGetMemInfo(device + 100, MemInfo.DEVICE) is gpu
    assert api.olGetMemInfo(device + 100, MemInfo.BASE) == device
    assert api.olGetMemInfo(device + 100, MemInfo.SIZE) == size
    assert api.olGetMemInfo(device + 100, MemInfo.TYPE) == kind
    assert api.olGetMemInfoSize(device, MemInfo.BASE) == 8
    queue = api.olCreateQueue(gpu)
    api.olMemcpy(queue, device, gpu, ctypes.addressof(src_buf), host, size)  # host -> GPU memory
    api.olMemcpy(queue, other, gpu, device, gpu, size)  # GPU memory -> GPU memory
    api.olMemcpy(queue, ctypes.addressof(dst_buf), host, other, gpu, size)  # GPU memory -> host
    api.olSyncQueue(queue)
    assert_same_bytes(bytes(dst_buf), bytes(src))
    api.olMemcpy(None, ctypes.addressof(dst_buf), host, device, gpu, 4096)  # synchronous
    assert_same_bytes(bytes(dst_buf[:4096]), bytes(src[:4096]))
    # odd sizes at odd offsets
    api.olMemcpy(queue, device + 3, gpu, ctypes.addressof(src_buf) + 5, host, 1001)
    api.olMemcpy(queue, other + 7, gpu, device + 3, gpu, 1001)
    api.olSyncQueue(queue)
    assert_same_bytes(read_back(host, gpu, other + 7, 1001), bytes(src[5:1006]))
    if kind != AllocType.DEVICE:
        # host-accessible memory reads directly, and the host device names it in copies
        api.olMemcpy(None, device, gpu, ctypes.addressof(src_buf), host, size)
        assert_same_bytes(bytes((ctypes.c_ubyte * size).from_address(device)), bytes(src))
        out = (ctypes.c_ubyte * 64)()
        api.olMemcpy(None, ctypes.addressof(out), host, device + 64, host, 64)
        assert_same_bytes(bytes(out), bytes(src[64:128]))
        api.olMemcpy(queue, other, gpu, device, host, size)  # as the host side of a queued copy
        api.olSyncQueue(queue)
        assert_same_bytes(read_back(host, gpu, other, size), bytes(src))
    api.olDestroyQueue(queue)
    api.olMemFree(device)
    api.olMemFree(other)


FILL_PATTERNS = [b"\x5a", b"\x01\x02", b"abc", b"\xde\xad\xbe\xef", b"12345", b"12345678",
                 b"\x80\x00\xff\x7f\x01\x02\x03\xfe", bytes(range(16)), bytes(range(0xF0, 0x100)), bytes(range(17))]


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("pattern", FILL_PATTERNS, ids=lambda p: f"{len(p)}B-{p[:2].hex()}")
def test_fill_any_pattern(gpu: api.Device, host: api.Device, pattern: bytes, offset: int) -> None:
    count = 1000
    size = len(pattern) * count
    total = size + 64
    buf = api.olMemAlloc(gpu, AllocType.DEVICE, total)
    api.olMemFill(None, buf, b"\x00", total)
    queue = api.olCreateQueue(gpu)
    api.olMemFill(queue, buf + offset, pattern, size)
    out = (ctypes.c_ubyte * total)()
    api.olMemcpy(queue, ctypes.addressof(out), host, buf, gpu, total)
    api.olSyncQueue(queue)
    assert_same_bytes(bytes(out), bytes(offset) + pattern * count + bytes(total - offset - size))
    api.olDestroyQueue(queue)
    api.olMemFree(buf)


# ---- kernels ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(AllocType), ids=lambda k: k.name)
def test_launch_and_argument_blob(gpu: api.Device, host: api.Device, program: api.Program,
                                  kind: AllocType) -> None:
    out = api.olMemAlloc(gpu, kind, 4 * 256)
    queue = api.olCreateQueue(gpu)
    api.olLaunchKernel(queue, gpu, kernel(program, "foo"), ctypes.c_uint64(out), one_d(4, 64))
    api.olSyncQueue(queue)
    assert read_u32(host, gpu, out, 256) == list(range(256))
    if kind != AllocType.DEVICE:
        assert list((ctypes.c_uint32 * 256).from_address(out)) == list(range(256))

    class Args(ctypes.Structure):  # the kernel's parameters with C alignment: Pair at 4, out at 16
        _fields_ = [("n", ctypes.c_uint8), ("a", ctypes.c_uint32), ("b", ctypes.c_uint32), ("out", ctypes.c_void_p)]

    api.olLaunchKernel(queue, gpu, kernel(program, "composite"), bytes(Args(1, 2, 3, out)), one_d(1, 64))
    api.olSyncQueue(queue)
    assert read_u32(host, gpu, out, 64) == [6 + i for i in range(64)]

    class Mixed(ctypes.Structure):  # big at 8, half at 16, out at 24
        _fields_ = [("tag", ctypes.c_uint8), ("big", ctypes.c_uint64), ("half", ctypes.c_uint16),
                    ("out", ctypes.c_void_p)]

    big = 0x0123_4567_89AB_CDEF
    api.olLaunchKernel(None, gpu, kernel(program, "mixed"), bytes(Mixed(0xA7, big, 0xBEEF, out)), one_d(1, 1))
    assert read_u32(host, gpu, out, 4) == [0xA7, big & 0xFFFFFFFF, big >> 32, 0xBEEF]
    api.olDestroyQueue(queue)
    api.olMemFree(out)


def test_dynamic_shared_memory_up_to_the_device_limit(vendor: RealGpu, gpu: api.Device, host: api.Device,
                                                      program: api.Program) -> None:
    """As much dynamic shared memory (LDS) as the device reports: above 48 KiB on NVIDIA GPUs
    that have an opt-in limit beyond it."""
    limit = api.olGetDeviceInfo(gpu, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE)
    words = limit // 4
    out = api.olMemAlloc(gpu, AllocType.DEVICE, 4)

    class Args(ctypes.Structure):
        _fields_ = [("out", ctypes.c_void_p), ("words", ctypes.c_uint32)]

    api.olLaunchKernel(None, gpu, kernel(program, "big_shared"), bytes(Args(out, words)), one_d(1, 256, words * 4))
    assert read_u32(host, gpu, out, 1) == [(words * (words - 1) // 2) & 0xFFFFFFFF]
    api.olMemFree(out)


def test_globals_symbols_and_occupancy(gpu: api.Device, host: api.Device, program: api.Program) -> None:
    table = api.olGetSymbol(program, "table", SymbolKind.GLOBAL_VARIABLE)
    assert api.olGetSymbol(program, "table", SymbolKind.GLOBAL_VARIABLE) is table
    assert api.olGetSymbolInfo(table, SymbolInfo.KIND) == SymbolKind.GLOBAL_VARIABLE
    assert api.olGetSymbolInfo(table, SymbolInfo.NAME) == "table"
    assert api.olGetSymbolInfo(table, SymbolInfo.GLOBAL_VARIABLE_SIZE) == 64
    assert api.olGetSymbolInfoSize(table, SymbolInfo.GLOBAL_VARIABLE_ADDRESS) == 8
    address = api.olGetSymbolInfo(table, SymbolInfo.GLOBAL_VARIABLE_ADDRESS)
    assert address
    assert read_u32(host, gpu, address, 16) == list(range(16))  # the initializer

    values = (ctypes.c_uint32 * 16)(*(100 + i for i in range(16)))
    api.olMemcpy(None, address, gpu, ctypes.addressof(values), host, 64)
    out = api.olMemAlloc(gpu, AllocType.DEVICE, 64)
    api.olLaunchKernel(None, gpu, kernel(program, "read_table"), ctypes.c_uint64(out), one_d(1, 16))
    assert read_u32(host, gpu, out, 16) == [2 * (100 + i) for i in range(16)]

    foo = kernel(program, "foo")
    assert api.olGetSymbolInfo(foo, SymbolInfo.KIND) == SymbolKind.KERNEL
    assert api.olGetSymbolInfo(foo, SymbolInfo.NAME) == "foo"
    with pytest.raises(OffloadError) as info:
        api.olGetSymbolInfo(foo, SymbolInfo.GLOBAL_VARIABLE_SIZE)
    assert info.value.code == ErrorCode.SYMBOL_KIND
    with pytest.raises(OffloadError) as info:
        kernel(program, "no_such_kernel")
    assert info.value.code == ErrorCode.NOT_FOUND
    occupancy = api.olCalculateOptimalOccupancy(gpu, foo, 0)
    assert 0 < occupancy <= api.olGetDeviceInfo(gpu, DeviceInfo.MAX_WORK_GROUP_SIZE)
    api.olMemFree(out)


# ---- queues, events, host functions ----------------------------------------------------------------

def test_events_waits_and_elapsed_time(vendor: RealGpu, gpu: api.Device, program: api.Program) -> None:
    spin = kernel(program, "spin")
    flag = api.olMemAlloc(gpu, AllocType.MANAGED, 4)
    ctypes.c_uint32.from_address(flag).value = 0
    first, second = api.olCreateQueue(gpu), api.olCreateQueue(gpu)
    start = api.olCreateEvent(first, EventFlags.ENABLE_PROFILING)
    api.olLaunchKernel(first, gpu, spin, bytes(SpinArgs(vendor.spin_ticks, flag)), one_d(1, 1))
    end = api.olCreateEvent(first, EventFlags.ENABLE_PROFILING)
    assert api.olGetEventInfo(end, EventInfo.QUEUE) is first
    assert api.olGetEventInfoSize(end, EventInfo.IS_COMPLETE) == 1
    seen: list[int] = []
    api.olWaitEvents(second, [end])
    api.olLaunchHostFunction(second, lambda _: seen.append(ctypes.c_uint32.from_address(flag).value))
    api.olSyncQueue(second)
    assert seen == [1], "the second queue ran before the event it waited on"
    api.olSyncEvent(end)
    assert api.olGetEventInfo(end, EventInfo.IS_COMPLETE)
    assert api.olQueryQueue(first)
    assert api.olGetQueueInfo(first, QueueInfo.EMPTY)
    assert api.olGetQueueInfo(first, QueueInfo.DEVICE) is gpu
    elapsed = api.olGetEventElapsedTime(start, end)
    assert 0.0 < elapsed < 60_000.0, elapsed
    for event in (start, end):
        api.olDestroyEvent(event)
    for q in (first, second):
        api.olDestroyQueue(q)
    api.olMemFree(flag)


def test_host_function_never_deadlocks_with_a_syncing_thread(gpu: api.Device) -> None:
    """A host function that needs the GIL runs while another Python thread waits in a sync."""
    queue = api.olCreateQueue(gpu)
    entered, release = threading.Event(), threading.Event()
    order: list[str] = []

    def host_function(_: object) -> None:
        entered.set()
        release.wait(30)
        order.append("host function")

    def sync() -> None:
        api.olSyncQueue(queue)
        order.append("synced")

    api.olLaunchHostFunction(queue, host_function)
    syncer = threading.Thread(target=sync)
    syncer.start()
    assert entered.wait(30), "the host function never started"
    release.set()
    syncer.join(30)
    assert not syncer.is_alive(), "olSyncQueue deadlocked with the host function"
    assert order == ["host function", "synced"]
    api.olDestroyQueue(queue)


def test_raising_host_function_fails_the_queue(gpu: api.Device) -> None:
    queue = api.olCreateQueue(gpu)
    api.olLaunchHostFunction(queue, lambda _: 1 / 0)
    with pytest.raises(OffloadError) as info:
        call_with_timeout(api.olSyncQueue, queue)
    assert info.value.code == ErrorCode.QUEUE_ERROR
    error, failing = api.olGetQueueError(queue)
    assert error is not None and "ZeroDivisionError" in error.details and failing is queue
    api.olDestroyQueue(queue)


# ---- several GPUs ----------------------------------------------------------------------------------

def test_peer_copies_and_waits_between_gpus(vendor: RealGpu, gpu: api.Device, host: api.Device,
                                            program: api.Program) -> None:
    others = [d for d in devices_of(vendor.backend) if d is not gpu]
    if not others:
        pytest.skip(f"one {vendor.name} GPU: no peer copy to test")
    other = others[0]
    size = 1 << 20
    a = api.olMemAlloc(gpu, AllocType.DEVICE, size)
    b = api.olMemAlloc(other, AllocType.DEVICE, size)
    api.olMemFill(None, a, b"\x17", size)
    api.olMemcpy(None, b, other, a, gpu, size)  # synchronous, gpu -> other
    assert_same_bytes(read_back(host, other, b, size), b"\x17" * size)

    api.olMemFill(None, b, b"\x2a\x2b\x2c", size - size % 3)
    queue = api.olCreateQueue(other)  # a queued copy runs on the source's queue
    api.olMemcpy(queue, a + 1, gpu, b, other, size - 1)  # other -> gpu, unaligned
    api.olSyncQueue(queue)
    expected = (b"\x2a\x2b\x2c" * (size // 3))[:size - 1]
    assert_same_bytes(read_back(host, gpu, a + 1, size - 1), expected)

    # a queue of one GPU waits for an event of the other
    flag = api.olMemAlloc(gpu, AllocType.MANAGED, 4)
    ctypes.c_uint32.from_address(flag).value = 0
    first = api.olCreateQueue(gpu)
    api.olLaunchKernel(first, gpu, kernel(program, "spin"), bytes(SpinArgs(vendor.spin_ticks, flag)), one_d(1, 1))
    done = api.olCreateEvent(first)
    seen: list[int] = []
    api.olWaitEvents(queue, [done])
    api.olLaunchHostFunction(queue, lambda _: seen.append(ctypes.c_uint32.from_address(flag).value))
    api.olSyncQueue(queue)
    assert seen == [1], "the other GPU's queue ran before the event it waited on"
    api.olDestroyEvent(done)
    for q in (first, queue):
        api.olDestroyQueue(q)
    for address in (a, b, flag):
        api.olMemFree(address)


# ---- registered host memory ------------------------------------------------------------------------

def test_registered_host_memory(gpu: api.Device, host: api.Device, program: api.Program) -> None:
    """olMemRegister: a kernel writes host memory through the returned address (which may differ
    from the host address), copies use it, a range inside counts one more user, a partial overlap
    is refused."""
    size = 1 << 16
    mapping, view, address = page_buffer(size)
    pinned = api.olMemRegister(gpu, address, size)
    assert api.olMemRegister(gpu, address + 4096, 4096) == pinned + 4096
    with pytest.raises(OffloadError) as info:
        api.olMemRegister(gpu, address + size - 4096, 8192)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT
    queue = api.olCreateQueue(gpu)
    api.olLaunchKernel(queue, gpu, kernel(program, "foo"), ctypes.c_uint64(pinned + 8192), one_d(4, 64))
    api.olSyncQueue(queue)
    assert list((ctypes.c_uint32 * 256).from_address(address + 8192)) == list(range(256))
    data = bytes(i % 253 for i in range(4096))
    ctypes.memmove(address, data, 4096)
    device = api.olMemAlloc(gpu, AllocType.DEVICE, 4096)
    api.olMemcpy(queue, device, gpu, address, host, 4096)  # registered memory as the host side
    api.olMemcpy(queue, address + 4096, host, device, gpu, 4096)
    api.olSyncQueue(queue)
    assert_same_bytes(bytes(view[4096:8192]), data)
    api.olMemUnregister(gpu, address + 4096)
    api.olMemUnregister(gpu, address)
    with pytest.raises(OffloadError) as info:
        api.olMemUnregister(gpu, address)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT
    api.olDestroyQueue(queue)
    api.olMemFree(device)
    del view


def test_memory_registered_by_another_library_stays_registered(vendor: RealGpu, gpu: api.Device) -> None:
    """Memory the driver reports as registered already is used at its device address and never unregistered."""
    mapping, view, address = page_buffer(8192)
    vendor.register_elsewhere(gpu, address, 8192)
    try:
        expected = vendor.device_pointer_elsewhere(address + 4096)
        assert api.olMemRegister(gpu, address + 4096, 4096) == expected
        api.olMemUnregister(gpu, address + 4096)
    finally:
        vendor.unregister_elsewhere(address)  # offloadrt left it registered
    del view
