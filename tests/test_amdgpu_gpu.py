"""The AMDGPU plugin on real AMD GPUs: what only the AMDGPU plugin has, on every AMD device present.

Marked ``amdgpu``; the whole module is skipped where hip-python, ``libamdhip64``, an AMD GPU or
``libhiprtc`` is missing. What both GPU plugins offer alike runs on AMD GPUs from
tests/test_gpus.py; here: the platform's facts, every info query, fills (against a host model,
and on an idle queue), 3-D launches, code objects and offload bundles, pending work, queue
recycling, launches from any thread, and kernel faults, which run in a subprocess: on ROCm a GPU
fault usually aborts the whole process. Kernels are HIP C (``gpu_devices.AMD_KERNELS``) compiled
at test time with hiprtc for the device's ``gcnArchName`` (features included), so every program
is a code object the device can run. CI covers the plugin against a stand-in for ``hip.hip``
instead (tests/gpu_plugins, tests/test_amdgpu_plugin.py).
"""

from __future__ import annotations

import ctypes
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_threads
from gpu_devices import (
    AMD_GPUS,
    SpinArgs,
    arch_of,
    assert_same_bytes,
    hiprtc_output,
    host_device,
    kernel,
    one_d,
    read_back,
    read_u32,
    running,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offloadrt import (
    AllocType,
    DeviceInfo,
    Dimensions,
    ErrorCode,
    EventInfo,
    KernelLaunchSizeArgs,
    OffloadError,
    PlatformBackend,
    PlatformInfo,
    QueueInfo,
    api,
)

pytestmark = pytest.mark.amdgpu

AMD_DEVICES = AMD_GPUS.found[0]
if not AMD_DEVICES:
    pytest.skip(AMD_GPUS.found[1], allow_module_level=True)

# ELF layout (64-bit, little-endian: all AMDGPU code objects)
E_IDENT_ABIVERSION = 8
E_FLAGS = 48
MACH_GFX900, MACH_GFX90A = 0x2C, 0x3F
XNACK_SHIFT = 8  # two bits from code object v4 on: 2 = off, 3 = on
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"

# ---- images -----------------------------------------------------------------------------------------

def code_object(device: api.Device) -> bytes:
    """The ELF code object of AMD_KERNELS for ``device``, taken out of a bundle if hiprtc returned one."""
    image = hiprtc_output(device)
    if image.startswith(BUNDLE_MAGIC):
        (count,) = struct.unpack_from("<Q", image, len(BUNDLE_MAGIC))
        pos = len(BUNDLE_MAGIC) + 8
        for _ in range(count):
            offset, size, id_size = struct.unpack_from("<QQQ", image, pos)
            entry_id = image[pos + 24:pos + 24 + id_size].decode()
            pos += 24 + id_size
            if "amdgcn" in entry_id and size:
                return image[offset:offset + size]
    if image[:4] != b"\x7fELF":
        pytest.skip("hiprtc returned neither a code object nor an uncompressed offload bundle of one")
    return image


def with_flags(image: bytes, flags: int) -> bytes:
    """``image`` with its ELF ``e_flags`` replaced."""
    patched = bytearray(image)
    struct.pack_into("<I", patched, E_FLAGS, flags)
    return bytes(patched)


def e_flags(image: bytes) -> int:
    return int(struct.unpack_from("<I", image, E_FLAGS)[0])


def offload_bundle(entries: list[tuple[str, bytes]]) -> bytes:
    """A clang offload bundle of ``(bundle id, image)`` entries, images 4 KiB aligned as the bundler does."""
    header = len(BUNDLE_MAGIC) + 8 + sum(24 + len(triple) for triple, _ in entries)
    offset = -(-header // 4096) * 4096
    table, data = b"", b""
    for triple, image in entries:
        table += struct.pack("<QQQ", offset + len(data), len(image), len(triple)) + triple.encode()
        data += image + bytes(-len(image) % 4096)
    head = BUNDLE_MAGIC + struct.pack("<Q", len(entries)) + table
    return head + bytes(offset - len(head)) + data


# ---- fixtures and helpers ---------------------------------------------------------------------------


@pytest.fixture(params=range(AMD_DEVICES), ids=lambda i: f"amdgpu{i}")
def gpu(request: pytest.FixtureRequest) -> Iterator[api.Device]:
    with running(PlatformBackend.AMDGPU, request.param) as device:
        yield device


@pytest.fixture
def host(gpu: api.Device) -> api.Device:
    return host_device()


@pytest.fixture
def program(gpu: api.Device) -> api.Program:
    return api.olCreateProgram(gpu, hiprtc_output(gpu))


class StoreArgs(ctypes.Structure):
    _fields_ = [("out", ctypes.c_void_p), ("value", ctypes.c_uint32)]


# ---- platform and device info -----------------------------------------------------------------------


def test_platform_info(gpu: api.Device) -> None:
    platform = api.olGetDeviceInfo(gpu, DeviceInfo.PLATFORM)
    assert api.olGetPlatformInfo(platform, PlatformInfo.BACKEND) == PlatformBackend.AMDGPU
    assert api.olGetPlatformInfo(platform, PlatformInfo.NAME)
    assert "Advanced Micro Devices" in api.olGetPlatformInfo(platform, PlatformInfo.VENDOR_NAME)
    version = api.olGetPlatformInfo(platform, PlatformInfo.VERSION)
    assert version.startswith("HIP "), version
    assert api.olGetPlatformInfoSize(platform, PlatformInfo.VERSION) == len(version.encode()) + 1
    assert api.olGetPlatformInfoSize(platform, PlatformInfo.BACKEND) == 4


def test_every_device_info_query_answers(gpu: api.Device) -> None:
    for prop in DeviceInfo:
        value = api.olGetDeviceInfo(gpu, prop)
        assert value is not None, prop.name
        assert api.olGetDeviceInfoSize(gpu, prop) > 0, prop.name


# ---- memory -----------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pattern=st.binary(min_size=1, max_size=16), count=st.integers(1, 300), offset=st.integers(0, 7),
       queued=st.booleans())
def test_fills_match_a_host_model(gpu: api.Device, host: api.Device, pattern: bytes, count: int, offset: int,
                                  queued: bool) -> None:
    size = len(pattern) * count
    total = offset + size + 16
    buf = api.olMemAlloc(gpu, AllocType.DEVICE, total)
    try:
        api.olMemFill(None, buf, b"\xa5", total)
        queue = api.olCreateQueue(gpu) if queued else None
        api.olMemFill(queue, buf + offset, pattern, size)
        if queue is not None:
            api.olSyncQueue(queue)
            api.olDestroyQueue(queue)
        assert_same_bytes(read_back(host, gpu, buf, total), b"\xa5" * offset + pattern * count + b"\xa5" * 16)
    finally:
        api.olMemFree(buf)


@pytest.mark.parametrize("kind", [AllocType.HOST, AllocType.MANAGED], ids=lambda k: k.name)
def test_fill_on_an_idle_queue_is_done_on_return(gpu: api.Device, kind: AllocType) -> None:
    """As LLVM's AMDGPU plugin: the host may read the memory as soon as olMemFill returns."""
    size = 4096
    buf = api.olMemAlloc(gpu, kind, size)
    queue = api.olCreateQueue(gpu)
    api.olMemFill(queue, buf, b"\x11\x22\x33\x44", size)
    assert api.olGetQueueInfo(queue, QueueInfo.EMPTY)
    assert_same_bytes(bytes((ctypes.c_ubyte * size).from_address(buf)), b"\x11\x22\x33\x44" * (size // 4))
    api.olMemFill(None, buf, b"\x09\x08", size)  # synchronous
    assert_same_bytes(bytes((ctypes.c_ubyte * size).from_address(buf)), b"\x09\x08" * (size // 2))
    api.olDestroyQueue(queue)
    api.olMemFree(buf)


# ---- kernels ----------------------------------------------------------------------------------------


def test_three_dimensional_launch(gpu: api.Device, host: api.Device, program: api.Program) -> None:
    groups, sizes = Dimensions(2, 3, 2), Dimensions(4, 2, 3)
    w, h, d = groups.x * sizes.x, groups.y * sizes.y, groups.z * sizes.z
    out = api.olMemAlloc(gpu, AllocType.DEVICE, 4 * w * h * d)
    api.olLaunchKernel(None, gpu, kernel(program, "grid3d"), ctypes.c_uint64(out),
                       KernelLaunchSizeArgs(3, groups, sizes))
    expected = [(z << 16) | (y << 8) | x for z in range(d) for y in range(h) for x in range(w)]
    assert read_u32(host, gpu, out, w * h * d) == expected
    api.olMemFree(out)


# ---- programs ---------------------------------------------------------------------------------------


def test_code_object_from_hiprtc_loads_and_unloads(gpu: api.Device, host: api.Device) -> None:
    raw = hiprtc_output(gpu)
    assert api.olIsValidBinary(gpu, raw)
    api.olDestroyProgram(api.olCreateProgram(gpu, raw))
    image = code_object(gpu)
    assert api.olIsValidBinary(gpu, image)
    program = api.olCreateProgram(gpu, image)
    out = api.olMemAlloc(gpu, AllocType.DEVICE, 4)
    api.olLaunchKernel(None, gpu, kernel(program, "store"), bytes(StoreArgs(out, 77)), one_d(1, 1))
    assert read_u32(host, gpu, out, 1) == [77]
    api.olDestroyProgram(program)
    with pytest.raises(OffloadError) as info:
        kernel(program, "store")
    assert info.value.code == ErrorCode.INVALID_ARGUMENT
    api.olMemFree(out)


def test_code_object_for_another_processor_is_invalid(gpu: api.Device) -> None:
    image = code_object(gpu)
    flags = e_flags(image)
    processor = arch_of(gpu).split(":")[0]
    other_mach, other = (MACH_GFX90A, "gfx90a") if processor == "gfx900" else (MACH_GFX900, "gfx900")
    foreign = with_flags(image, (flags & ~0xFF) | other_mach)
    assert not api.olIsValidBinary(gpu, foreign)
    with pytest.raises(OffloadError) as info:
        api.olCreateProgram(gpu, foreign)
    assert info.value.code == ErrorCode.INVALID_BINARY
    assert other in info.value.details


def test_code_object_with_other_pinned_features_is_invalid(gpu: api.Device) -> None:
    arch = arch_of(gpu)
    pinned = {s[:-1]: s[-1] for s in arch.split(":")[1:] if s.endswith(("+", "-"))}
    image = code_object(gpu)
    if "xnack" not in pinned or image[E_IDENT_ABIVERSION] < 2:
        pytest.skip(f"{arch} does not pin xnack, or the code object predates per-feature flags")
    opposite = 3 if pinned["xnack"] == "-" else 2  # on where the device runs with it off, and back
    foreign = with_flags(image, (e_flags(image) & ~(3 << XNACK_SHIFT)) | (opposite << XNACK_SHIFT))
    assert not api.olIsValidBinary(gpu, foreign)
    with pytest.raises(OffloadError) as info:
        api.olCreateProgram(gpu, foreign)
    assert info.value.code == ErrorCode.INVALID_BINARY
    assert "xnack" in info.value.details


def test_offload_bundles(gpu: api.Device, host: api.Device) -> None:
    arch = arch_of(gpu)
    image = code_object(gpu)
    host_entry = ("host-x86_64-unknown-linux-gnu-", b"")
    bundle = offload_bundle([host_entry, (f"hipv4-amdgcn-amd-amdhsa--{arch}", image)])
    assert api.olIsValidBinary(gpu, bundle)
    program = api.olCreateProgram(gpu, bundle)
    out = api.olMemAlloc(gpu, AllocType.DEVICE, 4)
    api.olLaunchKernel(None, gpu, kernel(program, "store"), bytes(StoreArgs(out, 5)), one_d(1, 1))
    assert read_u32(host, gpu, out, 1) == [5]
    api.olMemFree(out)
    api.olDestroyProgram(program)

    other = "gfx90a" if arch.split(":")[0] == "gfx900" else "gfx900"
    elsewhere = offload_bundle([host_entry, (f"hipv4-amdgcn-amd-amdhsa--{other}", image)])
    assert not api.olIsValidBinary(gpu, elsewhere)
    with pytest.raises(OffloadError) as info:
        api.olCreateProgram(gpu, elsewhere)
    assert info.value.code == ErrorCode.INVALID_BINARY


@pytest.mark.parametrize("image", [
    b"garbage",
    b"\x7fELF" + bytes(60),  # an ELF header that is no AMDGPU code object
    b".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry k() { ret; }\n",  # PTX
], ids=["garbage", "foreign-elf", "ptx"])
def test_images_that_are_not_amdgpu_code_are_invalid(gpu: api.Device, image: bytes) -> None:
    assert not api.olIsValidBinary(gpu, image)
    with pytest.raises(OffloadError) as info:
        api.olCreateProgram(gpu, image)
    assert info.value.code == ErrorCode.INVALID_BINARY
    assert info.value.details


# ---- queues, events, host functions -----------------------------------------------------------------


def test_query_sees_pending_work(gpu: api.Device, program: api.Program) -> None:
    flag = api.olMemAlloc(gpu, AllocType.MANAGED, 4)
    queue = api.olCreateQueue(gpu)
    released = threading.Event()
    api.olLaunchHostFunction(queue, lambda _: released.wait(30))  # holds the queue until the test lets go
    api.olLaunchKernel(queue, gpu, kernel(program, "spin"), bytes(SpinArgs(1000, flag)), one_d(1, 1))
    event = api.olCreateEvent(queue)
    try:
        assert not api.olQueryQueue(queue)
        assert not api.olGetQueueInfo(queue, QueueInfo.EMPTY)
        assert not api.olGetEventInfo(event, EventInfo.IS_COMPLETE)
    finally:
        released.set()
    api.olSyncEvent(event)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE)
    assert api.olQueryQueue(queue)
    api.olDestroyEvent(event)
    api.olDestroyQueue(queue)
    api.olMemFree(flag)


def test_queue_recycling(gpu: api.Device, host: api.Device, program: api.Program) -> None:
    """Many queues created and destroyed with work still pending: every launch completes, and
    queues made afterwards are fresh and idle."""
    store = kernel(program, "store")
    count = 200
    out = api.olMemAlloc(gpu, AllocType.DEVICE, 4 * count)
    api.olMemFill(None, out, b"\x00", 4 * count)
    events: list[api.Event] = []
    for i in range(count):
        queue = api.olCreateQueue(gpu)
        api.olLaunchKernel(queue, gpu, store, bytes(StoreArgs(out + 4 * i, i + 1)), one_d(1, 1))
        events.append(api.olCreateEvent(queue))
        if i % 10 == 0:
            api.olSyncQueue(queue)  # an idle queue goes back to the pool at once
        api.olDestroyQueue(queue)  # a busy one is parked and finishes on its own
    for event in events:
        api.olSyncEvent(event)
        api.olDestroyEvent(event)
    assert read_u32(host, gpu, out, count) == list(range(1, count + 1))
    for _ in range(8):
        queue = api.olCreateQueue(gpu)
        assert api.olQueryQueue(queue)
        assert api.olGetQueueError(queue) == (None, None)
        api.olDestroyQueue(queue)
    api.olMemFree(out)


def test_any_thread_can_use_the_device(gpu: api.Device, host: api.Device, program: api.Program) -> None:
    """Each thread selects the device itself (hipSetDevice per thread): launches from fresh threads work."""
    store = kernel(program, "store")
    threads = 8
    out = api.olMemAlloc(gpu, AllocType.DEVICE, 4 * threads)
    api.olMemFill(None, out, b"\x00", 4 * threads)

    def body(index: int) -> None:
        queue = api.olCreateQueue(gpu)
        for round_ in range(10):
            api.olLaunchKernel(queue, gpu, store, bytes(StoreArgs(out + 4 * index, 1000 * index + round_)),
                               one_d(1, 1))
        api.olSyncQueue(queue)
        api.olDestroyQueue(queue)

    run_threads(threads, body)
    assert read_u32(host, gpu, out, threads) == [1000 * i + 9 for i in range(threads)]
    api.olMemFree(out)


# ---- kernel faults ----------------------------------------------------------------------------------

FAULT_SCRIPT = """
import ctypes, sys
sys.path.insert(0, {tests!r})
from gpu_devices import devices_of, hiprtc_output, one_d
from offloadrt import api, AllocType, ErrorCode, OffloadError, PlatformBackend, SymbolKind
api.olInit([PlatformBackend.AMDGPU])
gpu = devices_of(PlatformBackend.AMDGPU)[0]
program = api.olCreateProgram(gpu, hiprtc_output(gpu))
kernel = api.olGetSymbol(program, {name!r}, SymbolKind.KERNEL)
args = ctypes.c_uint64(0x1000) if {name!r} == "fault" else None  # an address nothing maps
queue = api.olCreateQueue(gpu)
print("launching", flush=True)
api.olLaunchKernel(queue, gpu, kernel, args, one_d(1, 1))
try:
    api.olSyncQueue(queue)
except OffloadError as exc:
    assert exc.code == ErrorCode.QUEUE_ERROR, exc
else:
    raise AssertionError("the faulting kernel's queue synced without an error")
error, failing = api.olGetQueueError(queue)
assert failing is queue and error is not None and "hip" in error.details, error
if "sticky" in error.details:
    try:
        api.olMemAlloc(gpu, AllocType.DEVICE, 64)
    except OffloadError as exc:
        assert "sticky" in exc.details, exc
    else:
        raise AssertionError("a call after the sticky fault succeeded")
api.olDestroyQueue(queue)
try:
    api.olShutDown()
except OffloadError:
    pass  # de-initialising a device that faulted reports its errors; the checks above are what count
print("queue-error", flush=True)
"""


@pytest.mark.parametrize("name", ["fault", "trap_kernel"])
def test_kernel_fault_fails_the_queue_or_the_process(name: str) -> None:
    """A kernel that writes to an unmapped address, or traps: a QUEUE_ERROR naming the HIP error,
    or the end of the process.

    ROCm's HSA runtime handles a GPU memory fault or a queue exception by default by printing
    "Memory access fault by GPU node-..." (or the queue error) and aborting the whole process;
    only where the runtime reports the fault instead (a HIP error from the stream sync) can
    offloadrt turn it into the queue's error, which then must be a QUEUE_ERROR and, for sticky
    faults, refuse later calls. The kernel runs in a subprocess so that either outcome is
    observable; the subprocess must neither hang nor fail a check of its own.
    """
    script = FAULT_SCRIPT.format(tests=str(Path(__file__).parent), name=name)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    output = f"exit status {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "launching" in done.stdout, f"the subprocess failed before launching the kernel\n{output}"
    assert "Traceback" not in done.stderr, output
    if done.returncode == 0:
        assert "queue-error" in done.stdout, output
    # otherwise the runtime ended the process (SIGABRT from HSA's default fault handler)
