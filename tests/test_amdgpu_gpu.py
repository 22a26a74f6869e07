"""The AMDGPU plugin on real AMD GPUs: the ol* surface on every AMD device present.

Marked ``amdgpu``; the whole module is skipped where hip-python, ``libamdhip64``, an AMD GPU or
``libhiprtc`` is missing. Kernels are HIP C compiled at test time with hiprtc for the device's
``gcnArchName`` (features included), so every program is a code object the device can run. The
kernel-fault test runs in a subprocess: on ROCm a GPU fault usually aborts the whole process.
CI covers the plugin against a stand-in for ``hip.hip`` instead (tests/test_amdgpu_plugin.py).
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import struct
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import call_with_timeout, run_threads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import offloadrt
from offloadrt import (
    AllocType,
    DeviceInfo,
    DeviceType,
    Dimensions,
    ErrorCode,
    EventInfo,
    KernelLaunchSizeArgs,
    MemInfo,
    OffloadError,
    PlatformBackend,
    PlatformInfo,
    QueueInfo,
    SymbolInfo,
    SymbolKind,
    api,
)

pytestmark = pytest.mark.amdgpu

KERNELS = rb"""
extern "C" {
__device__ unsigned int table[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
}
extern "C" __global__ void foo(unsigned int *out) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = i;
}
extern "C" __global__ void grid3d(unsigned int *out) {
  unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned int y = blockIdx.y * blockDim.y + threadIdx.y;
  unsigned int z = blockIdx.z * blockDim.z + threadIdx.z;
  unsigned int w = gridDim.x * blockDim.x, h = gridDim.y * blockDim.y;
  out[(z * h + y) * w + x] = (z << 16) | (y << 8) | x;
}
struct Pair { unsigned int a, b; };
extern "C" __global__ void composite(unsigned char n, Pair f, unsigned int *out) {
  out[threadIdx.x] = n + f.a + f.b + threadIdx.x;
}
extern "C" __global__ void mixed(unsigned char tag, unsigned long long big, unsigned short half,
                                 unsigned int *out) {
  out[0] = tag;
  out[1] = (unsigned int)big;
  out[2] = (unsigned int)(big >> 32);
  out[3] = half;
}
extern "C" __global__ void store(unsigned int *out, unsigned int value) { *out = value; }
extern "C" __global__ void read_table(unsigned int *out) { out[threadIdx.x] = table[threadIdx.x] * 2u; }
extern "C" __global__ void big_shared(unsigned int *out, unsigned int words) {
  extern __shared__ unsigned int shared[];
  for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) shared[i] = i;
  __syncthreads();
  if (threadIdx.x == 0) { unsigned int s = 0; for (unsigned int i = 0; i < words; ++i) s += shared[i]; *out = s; }
}
extern "C" __global__ void spin(unsigned long long ticks, unsigned int *flag) {
  long long start = wall_clock64();  // a constant-rate counter, unlike the shader clock
  while ((unsigned long long)(wall_clock64() - start) < ticks) {}
  *flag = 1;
}
extern "C" __global__ void fault(unsigned int *bad) { *bad = 1; }
extern "C" __global__ void trap_kernel() { __builtin_trap(); }
"""

# ELF layout (64-bit, little-endian: all AMDGPU code objects)
E_IDENT_ABIVERSION = 8
E_FLAGS = 48
MACH_GFX900, MACH_GFX90A = 0x2C, 0x3F
XNACK_SHIFT = 8  # two bits from code object v4 on: 2 = off, 3 = on
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"

# ---- environment ------------------------------------------------------------------------------------


def _missing_hip_python() -> str:
    """Why hip-python (hip.hip and hiprtc) cannot be used, or ""."""
    try:
        import hip  # noqa: PLC0415
        from hip import hiprtc  # noqa: F401, PLC0415
    except ImportError as exc:
        return f"hip-python is not installed ({exc})"
    if getattr(hip, "hip", None) is None:
        return "hip-python has no hip.hip module"
    return ""


def _backend(device: api.Device) -> PlatformBackend:
    return api.olGetPlatformInfo(api.olGetDeviceInfo(device, DeviceInfo.PLATFORM), PlatformInfo.BACKEND)


def all_devices() -> list[api.Device]:
    devices: list[api.Device] = []
    api.olIterateDevices(lambda d, _: devices.append(d))
    return devices


def amd_devices() -> list[api.Device]:
    return [d for d in all_devices() if _backend(d) == PlatformBackend.AMDGPU]


def _count_amd_devices() -> tuple[int, str]:
    """The number of AMD devices offloadrt finds, and why there are none."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", offloadrt.OffloadWarning)  # no AMD GPU is what this asks about
        api.olInit([PlatformBackend.AMDGPU])
    try:
        count = len(amd_devices())
        reason = ""
        if not count:
            reasons = {p.name: p.reason for p in offloadrt.unavailable_platforms()}
            reason = reasons.get("amdgpu", "no devices")
        return count, reason
    finally:
        api.olShutDown()


def _missing_hiprtc_library() -> str:
    """Why libhiprtc cannot be loaded (hip-python binds it on the first call), or ""."""
    from hip import hiprtc  # noqa: PLC0415

    try:
        hiprtc.hiprtcVersion()
    except (RuntimeError, OSError) as exc:
        return f"the hiprtc library could not be loaded: {exc}"
    return ""


_why = _missing_hip_python()
if _why:
    pytest.skip(f"no AMD GPU tests: {_why}", allow_module_level=True)
AMD_DEVICES, _why = _count_amd_devices()
if not AMD_DEVICES:
    pytest.skip(f"no AMD GPU (or no ROCm) on this machine: amdgpu platform: {_why}", allow_module_level=True)
_why = _missing_hiprtc_library()
if _why:
    pytest.skip(f"cannot build AMD device code: {_why}", allow_module_level=True)


# ---- device code ------------------------------------------------------------------------------------


def arch_of(device: api.Device) -> str:
    """The device's gcnArchName, features included (``gfx90a:sramecc+:xnack-``)."""
    return str(device._gdev.arch)  # type: ignore[union-attr]


@functools.cache
def compile_hip(source: bytes, arch: str) -> bytes:
    """The code object of HIP C ``source`` for ``arch`` (a gcnArchName), built with hiprtc."""
    from hip import hiprtc  # noqa: PLC0415

    err, prog = hiprtc.hiprtcCreateProgram(source, b"offloadrt_test.hip", 0, [], [])
    assert int(err) == 0, f"hiprtcCreateProgram: {err}"
    try:
        options = [f"--offload-arch={arch}".encode()]
        (err,) = hiprtc.hiprtcCompileProgram(prog, len(options), options)
        if int(err) != 0:
            _, size = hiprtc.hiprtcGetProgramLogSize(prog)
            log = bytearray(size)
            hiprtc.hiprtcGetProgramLog(prog, log)
            raise AssertionError(f"hiprtc failed to build for {arch}: {log.decode(errors='replace')}")
        _, size = hiprtc.hiprtcGetCodeSize(prog)
        code = bytearray(size)
        (err,) = hiprtc.hiprtcGetCode(prog, code)
        assert int(err) == 0, f"hiprtcGetCode: {err}"
        return bytes(code)
    finally:
        hiprtc.hiprtcDestroyProgram(prog.createRef())


def hiprtc_output(device: api.Device) -> bytes:
    """What hiprtc returns for KERNELS on ``device``: a code object (or an offload bundle of one)."""
    return compile_hip(KERNELS, arch_of(device))


def code_object(device: api.Device) -> bytes:
    """The ELF code object of KERNELS for ``device``, taken out of a bundle if hiprtc returned one."""
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
    api.olInit([PlatformBackend.AMDGPU])
    yield amd_devices()[request.param]
    api.olShutDown()


@pytest.fixture
def host(gpu: api.Device) -> api.Device:
    return next(d for d in all_devices() if _backend(d) == PlatformBackend.HOST)


@pytest.fixture
def program(gpu: api.Device) -> api.Program:
    return api.olCreateProgram(gpu, hiprtc_output(gpu))


def one_d(groups: int, size: int, dyn: int = 0) -> KernelLaunchSizeArgs:
    return KernelLaunchSizeArgs(1, Dimensions(groups), Dimensions(size), dyn)


def kernel(program: api.Program, name: str) -> api.Symbol:
    return api.olGetSymbol(program, name, SymbolKind.KERNEL)


def read_back(host: api.Device, device: api.Device, address: int, size: int) -> bytes:
    """``size`` bytes at ``address`` on ``device``, copied to the host synchronously."""
    out = (ctypes.c_ubyte * size)()
    api.olMemcpy(None, ctypes.addressof(out), host, address, device, size)
    return bytes(out)


def read_u32(host: api.Device, device: api.Device, address: int, count: int) -> list[int]:
    return list(struct.unpack(f"<{count}I", read_back(host, device, address, 4 * count)))


def assert_same_bytes(actual: bytes, expected: bytes) -> None:
    """Byte-for-byte equality, reporting the first differing byte rather than two long dumps."""
    assert len(actual) == len(expected), f"{len(actual)} bytes, expected {len(expected)}"
    if actual != expected:
        at = next(i for i, (a, b) in enumerate(zip(actual, expected)) if a != b)
        raise AssertionError(f"byte {at} is {actual[at]:#04x}, expected {expected[at]:#04x} "
                             f"(got {actual[at:at + 16].hex()}, expected {expected[at:at + 16].hex()})")


class StoreArgs(ctypes.Structure):
    _fields_ = [("out", ctypes.c_void_p), ("value", ctypes.c_uint32)]


class SpinArgs(ctypes.Structure):
    _fields_ = [("ticks", ctypes.c_uint64), ("flag", ctypes.c_void_p)]


# 10**7 ticks of wall_clock64 (100 MHz on most AMD GPUs, 25 MHz on some): 0.1 to 0.4 s
SPIN_TICKS = 10_000_000


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


def test_device_info(gpu: api.Device) -> None:
    arch = arch_of(gpu)
    processor = arch.split(":")[0]
    assert processor.startswith("gfx"), arch
    assert api.olGetDeviceInfo(gpu, DeviceInfo.TYPE) == DeviceType.GPU
    assert api.olGetDeviceInfo(gpu, DeviceInfo.NAME) == processor
    assert api.olGetDeviceInfoSize(gpu, DeviceInfo.NAME) == len(processor) + 1
    product = api.olGetDeviceInfo(gpu, DeviceInfo.PRODUCT_NAME)
    assert isinstance(product, str) and product.strip()
    assert api.olGetDeviceInfo(gpu, DeviceInfo.VENDOR_ID) == 0x1002
    assert "AMD" in api.olGetDeviceInfo(gpu, DeviceInfo.VENDOR)
    assert api.olGetDeviceInfo(gpu, DeviceInfo.UID).startswith("GPU-")
    assert api.olGetDeviceInfo(gpu, DeviceInfo.DRIVER_VERSION).startswith("HIP ")
    assert api.olGetDeviceInfo(gpu, DeviceInfo.NUM_COMPUTE_UNITS) > 0
    assert api.olGetDeviceInfo(gpu, DeviceInfo.MAX_CLOCK_FREQUENCY) > 0
    assert api.olGetDeviceInfo(gpu, DeviceInfo.MEMORY_CLOCK_RATE) >= 0
    assert api.olGetDeviceInfo(gpu, DeviceInfo.ADDRESS_BITS) == 64
    total = api.olGetDeviceInfo(gpu, DeviceInfo.GLOBAL_MEM_SIZE)
    assert total > 1 << 28  # APUs may report a small carve-out
    assert 0 < api.olGetDeviceInfo(gpu, DeviceInfo.MAX_MEM_ALLOC_SIZE) <= total
    group = api.olGetDeviceInfo(gpu, DeviceInfo.MAX_WORK_GROUP_SIZE)
    assert group >= 1024
    per_dim = api.olGetDeviceInfo(gpu, DeviceInfo.MAX_WORK_GROUP_SIZE_PER_DIMENSION)
    assert isinstance(per_dim, Dimensions)
    assert 1 <= per_dim.z and 1 <= per_dim.y and 256 <= per_dim.x <= group
    assert api.olGetDeviceInfo(gpu, DeviceInfo.MAX_WORK_SIZE) >= group
    work = api.olGetDeviceInfo(gpu, DeviceInfo.MAX_WORK_SIZE_PER_DIMENSION)
    assert work.x >= per_dim.x and work.y >= per_dim.y and work.z >= per_dim.z
    assert api.olGetDeviceInfo(gpu, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE) >= 64 * 1024  # LDS


def test_every_device_info_query_answers(gpu: api.Device) -> None:
    for prop in DeviceInfo:
        value = api.olGetDeviceInfo(gpu, prop)
        assert value is not None, prop.name
        assert api.olGetDeviceInfoSize(gpu, prop) > 0, prop.name


# ---- memory -----------------------------------------------------------------------------------------


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


FILL_PATTERNS = [b"\x5a", b"\x01\x02", b"abc", b"\xde\xad\xbe\xef", b"12345", b"\x80\x00\xff\x7f\x01\x02\x03\xfe",
                 bytes(range(0xF0, 0x100))]


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("pattern", FILL_PATTERNS, ids=lambda p: f"{len(p)}B")
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


def test_three_dimensional_launch(gpu: api.Device, host: api.Device, program: api.Program) -> None:
    groups, sizes = Dimensions(2, 3, 2), Dimensions(4, 2, 3)
    w, h, d = groups.x * sizes.x, groups.y * sizes.y, groups.z * sizes.z
    out = api.olMemAlloc(gpu, AllocType.DEVICE, 4 * w * h * d)
    api.olLaunchKernel(None, gpu, kernel(program, "grid3d"), ctypes.c_uint64(out),
                       KernelLaunchSizeArgs(3, groups, sizes))
    expected = [(z << 16) | (y << 8) | x for z in range(d) for y in range(h) for x in range(w)]
    assert read_u32(host, gpu, out, w * h * d) == expected
    api.olMemFree(out)


def test_dynamic_lds_up_to_the_device_limit(gpu: api.Device, host: api.Device, program: api.Program) -> None:
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


def test_events_waits_and_elapsed_time(gpu: api.Device, program: api.Program) -> None:
    spin = kernel(program, "spin")
    flag = api.olMemAlloc(gpu, AllocType.MANAGED, 4)
    ctypes.c_uint32.from_address(flag).value = 0
    first, second = api.olCreateQueue(gpu), api.olCreateQueue(gpu)
    start = api.olCreateEvent(first)
    api.olLaunchKernel(first, gpu, spin, bytes(SpinArgs(SPIN_TICKS, flag)), one_d(1, 1))
    end = api.olCreateEvent(first)
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


# ---- several GPUs -----------------------------------------------------------------------------------


def test_peer_copies_and_waits_between_gpus(gpu: api.Device, host: api.Device, program: api.Program) -> None:
    if AMD_DEVICES < 2:
        pytest.skip("one AMD GPU: no peer copy to test")
    other = next(d for d in amd_devices() if d is not gpu)
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
    api.olLaunchKernel(first, gpu, kernel(program, "spin"), bytes(SpinArgs(SPIN_TICKS, flag)), one_d(1, 1))
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


# ---- registered host memory -------------------------------------------------------------------------


def page_buffer(size: int) -> tuple[mmap.mmap, ctypes.Array, int]:
    """Page-aligned host memory (HIP page-locks whole pages): the mapping, a view, its address."""
    mapping = mmap.mmap(-1, size)
    view = (ctypes.c_ubyte * size).from_buffer(mapping)
    return mapping, view, ctypes.addressof(view)


def test_registered_host_memory(gpu: api.Device, host: api.Device, program: api.Program) -> None:
    """olMemRegister: a kernel writes host memory through the returned address (which may differ
    from the host address on AMD GPUs), copies use it, users are counted, partial overlaps refused."""
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
    api.olMemcpy(queue, device, gpu, address, host, 4096)
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


def test_memory_registered_by_another_library_stays_registered(gpu: api.Device) -> None:
    from hip import hip  # noqa: PLC0415

    mapping, view, address = page_buffer(8192)
    assert int(hip.hipHostRegister(address, 8192, hip.hipHostRegisterPortable | hip.hipHostRegisterMapped)[0]) == 0
    try:
        expected = int(hip.hipHostGetDevicePointer(address + 4096, 0)[1])
        assert api.olMemRegister(gpu, address + 4096, 4096) == expected
        api.olMemUnregister(gpu, address + 4096)
    finally:
        assert int(hip.hipHostUnregister(address)[0]) == 0  # offloadrt left it registered
    del view


# ---- kernel faults ----------------------------------------------------------------------------------

FAULT_SCRIPT = """
import ctypes, sys
sys.path.insert(0, {tests!r})
from test_amdgpu_gpu import amd_devices, hiprtc_output, one_d
from offloadrt import api, AllocType, ErrorCode, OffloadError, PlatformBackend, SymbolKind
api.olInit([PlatformBackend.AMDGPU])
gpu = amd_devices()[0]
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
