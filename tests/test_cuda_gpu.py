"""The CUDA plugin on real NVIDIA GPUs: the ol* surface on every CUDA device present.

Marked ``cuda``; skipped where cuda-bindings, NVRTC or a GPU is missing. Kernels are CUDA C
compiled at test time with NVRTC. The sticky-fault test runs in a subprocess, because a
trapped kernel poisons the GPU context for the rest of the process.
"""

from __future__ import annotations

import ctypes
import mmap
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from offloadrt import (
    AllocType,
    DeviceInfo,
    DeviceType,
    Dimensions,
    ErrorCode,
    KernelLaunchSizeArgs,
    OffloadError,
    PlatformBackend,
    PlatformInfo,
    SymbolInfo,
    SymbolKind,
    api,
)

pytestmark = pytest.mark.cuda

KERNELS = rb"""
extern "C" __global__ void foo(unsigned int *out) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = i;
}
struct Pair { unsigned int a, b; };
extern "C" __global__ void composite(unsigned char n, Pair f, unsigned int *out) {
  out[threadIdx.x] = n + f.a + f.b + threadIdx.x;
}
extern "C" __global__ void big_shared(unsigned int *out, unsigned int words) {
  extern __shared__ unsigned int shared[];
  for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) shared[i] = i;
  __syncthreads();
  if (threadIdx.x == 0) { unsigned int s = 0; for (unsigned int i = 0; i < words; ++i) s += shared[i]; *out = s; }
}
extern "C" __global__ void spin(unsigned long long cycles, unsigned int *flag) {
  unsigned long long start = clock64();
  while (clock64() - start < cycles) {}
  *flag = 1;
}
extern "C" __global__ void trap_kernel() { asm("trap;"); }
extern "C" __device__ unsigned int table[16];
"""


def _nvrtc():
    try:
        from cuda.bindings import nvrtc  # noqa: PLC0415
    except ImportError:
        pytest.skip("cuda-bindings (NVRTC) is not installed")
    return nvrtc


def compile_cuda(source: bytes, cubin_arch: str | None = None) -> bytes:
    """PTX (or a cubin for ``cubin_arch`` like "sm_90") of ``source``, built with NVRTC."""
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source, b"test.cu", 0, [], [])
    arch = f"--gpu-architecture={cubin_arch}" if cubin_arch else "--gpu-architecture=compute_75"
    options = [arch.encode(), b"-default-device"]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise AssertionError(log.decode(errors="replace"))
    if cubin_arch:
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        out = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, out)
        return out
    _, size = nvrtc.nvrtcGetPTXSize(prog)
    out = b" " * size
    nvrtc.nvrtcGetPTX(prog, out)
    return out


def _backend(device: api.Device) -> PlatformBackend:
    return api.olGetPlatformInfo(api.olGetDeviceInfo(device, DeviceInfo.PLATFORM), PlatformInfo.BACKEND)


def _count_cuda_devices() -> int:
    api.olInit()
    try:
        devices: list[api.Device] = []
        api.olIterateDevices(lambda d, _: devices.append(d))
        return sum(1 for d in devices if _backend(d) == PlatformBackend.CUDA)
    finally:
        api.olShutDown()


CUDA_DEVICES = _count_cuda_devices()
if not CUDA_DEVICES:
    pytest.skip("no CUDA device (or no NVIDIA driver) on this machine", allow_module_level=True)


@pytest.fixture(params=range(CUDA_DEVICES), ids=lambda i: f"cuda{i}")
def gpu(request: pytest.FixtureRequest) -> Iterator[api.Device]:
    api.olInit()
    devices: list[api.Device] = []
    api.olIterateDevices(lambda d, _: devices.append(d))
    yield [d for d in devices if _backend(d) == PlatformBackend.CUDA][request.param]
    api.olShutDown()


@pytest.fixture
def host(gpu: api.Device) -> api.Device:
    devices: list[api.Device] = []
    api.olIterateDevices(lambda d, _: devices.append(d))
    return next(d for d in devices if _backend(d) == PlatformBackend.HOST)


@pytest.fixture
def program(gpu: api.Device) -> api.Program:
    return api.olCreateProgram(gpu, compile_cuda(KERNELS))


def one_d(groups: int, size: int, dyn: int = 0) -> KernelLaunchSizeArgs:
    return KernelLaunchSizeArgs(1, Dimensions(groups), Dimensions(size), dyn)


def test_device_info(gpu: api.Device) -> None:
    assert api.olGetDeviceInfo(gpu, DeviceInfo.TYPE) == DeviceType.GPU
    assert api.olGetDeviceInfo(gpu, DeviceInfo.VENDOR_ID) == 0x10DE
    assert api.olGetDeviceInfo(gpu, DeviceInfo.UID).startswith("GPU-")
    assert api.olGetDeviceInfo(gpu, DeviceInfo.NUM_COMPUTE_UNITS) > 0
    assert api.olGetDeviceInfo(gpu, DeviceInfo.GLOBAL_MEM_SIZE) > 1 << 30
    assert api.olGetDeviceInfo(gpu, DeviceInfo.MAX_WORK_GROUP_SIZE) >= 1024
    assert "CUDA" in api.olGetDeviceInfo(gpu, DeviceInfo.DRIVER_VERSION)
    assert api.olGetDeviceInfo(gpu, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE) >= 48 * 1024


@pytest.mark.parametrize("kind", list(AllocType), ids=lambda k: k.name)
def test_memcpy_round_trip(gpu: api.Device, host: api.Device, kind: AllocType) -> None:
    size = 1 << 20
    src = bytearray(i % 251 for i in range(size))
    src_buf = (ctypes.c_ubyte * size).from_buffer(src)
    dst_buf = (ctypes.c_ubyte * size)()
    device = api.olMemAlloc(gpu, kind, size)
    other = api.olMemAlloc(gpu, AllocType.DEVICE, size)
    queue = api.olCreateQueue(gpu)
    api.olMemcpy(queue, device, gpu, ctypes.addressof(src_buf), host, size)
    api.olMemcpy(queue, other, gpu, device, gpu, size)
    api.olMemcpy(queue, ctypes.addressof(dst_buf), host, other, gpu, size)
    api.olSyncQueue(queue)
    assert bytes(dst_buf) == bytes(src)
    api.olMemcpy(None, ctypes.addressof(dst_buf), host, device, gpu, 4096)  # synchronous
    assert bytes(dst_buf[:4096]) == bytes(src[:4096])
    api.olDestroyQueue(queue)
    api.olMemFree(device)
    api.olMemFree(other)


@pytest.mark.parametrize("pattern", [b"\x5a", b"\x01\x02", b"\xde\xad\xbe\xef", b"abc", b"12345678",
                                     bytes(range(16)), bytes(range(17))], ids=lambda p: f"{len(p)}B")
def test_fill_any_pattern(gpu: api.Device, host: api.Device, pattern: bytes) -> None:
    count = 1000
    size = len(pattern) * count
    buf = api.olMemAlloc(gpu, AllocType.DEVICE, size + 64)
    api.olMemFill(None, buf, b"\x00", size + 64)
    queue = api.olCreateQueue(gpu)
    api.olMemFill(queue, buf, pattern, size)
    out = (ctypes.c_ubyte * (size + 64))()
    api.olMemcpy(queue, ctypes.addressof(out), host, buf, gpu, size + 64)
    api.olSyncQueue(queue)
    assert bytes(out[:size]) == pattern * count
    assert bytes(out[size:]) == bytes(64)
    api.olDestroyQueue(queue)
    api.olMemFree(buf)


def test_launch_and_argument_blob(gpu: api.Device, host: api.Device, program: api.Program) -> None:
    foo = api.olGetSymbol(program, "foo", SymbolKind.KERNEL)
    out = api.olMemAlloc(gpu, AllocType.MANAGED, 4 * 256)
    queue = api.olCreateQueue(gpu)
    api.olLaunchKernel(queue, gpu, foo, ctypes.c_uint64(out), one_d(4, 64))
    api.olSyncQueue(queue)
    assert list((ctypes.c_uint32 * 256).from_address(out)) == list(range(256))

    class Args(ctypes.Structure):
        _fields_ = [("n", ctypes.c_uint8), ("a", ctypes.c_uint32), ("b", ctypes.c_uint32), ("out", ctypes.c_void_p)]

    composite = api.olGetSymbol(program, "composite", SymbolKind.KERNEL)
    api.olLaunchKernel(queue, gpu, composite, bytes(Args(1, 2, 3, out)), one_d(1, 64))
    api.olSyncQueue(queue)
    assert list((ctypes.c_uint32 * 64).from_address(out)) == [6 + i for i in range(64)]
    api.olDestroyQueue(queue)
    api.olMemFree(out)


def test_dynamic_shared_memory_above_48k(gpu: api.Device, program: api.Program) -> None:
    limit = api.olGetDeviceInfo(gpu, DeviceInfo.WORK_GROUP_LOCAL_MEM_SIZE)
    if limit <= 48 * 1024:
        pytest.skip("this GPU has no opt-in shared memory above 48 KiB")
    words = (64 * 1024) // 4
    kernel = api.olGetSymbol(program, "big_shared", SymbolKind.KERNEL)
    out = api.olMemAlloc(gpu, AllocType.MANAGED, 4)

    class Args(ctypes.Structure):
        _fields_ = [("out", ctypes.c_void_p), ("words", ctypes.c_uint32)]

    api.olLaunchKernel(None, gpu, kernel, bytes(Args(out, words)), one_d(1, 256, words * 4))
    assert ctypes.c_uint32.from_address(out).value == (words * (words - 1) // 2) & 0xFFFFFFFF
    api.olMemFree(out)


def test_globals_and_occupancy(gpu: api.Device, host: api.Device, program: api.Program) -> None:
    table = api.olGetSymbol(program, "table", SymbolKind.GLOBAL_VARIABLE)
    assert api.olGetSymbolInfo(table, SymbolInfo.GLOBAL_VARIABLE_SIZE) == 64
    foo = api.olGetSymbol(program, "foo", SymbolKind.KERNEL)
    assert api.olCalculateOptimalOccupancy(gpu, foo, 0) > 0


def test_program_formats_and_bad_images(gpu: api.Device) -> None:
    ptx = compile_cuda(KERNELS)
    assert api.olIsValidBinary(gpu, ptx)
    gdev = gpu._gdev
    major, minor = gdev.cc  # type: ignore[union-attr]
    cubin = compile_cuda(KERNELS, f"sm_{major}{minor}")
    assert api.olIsValidBinary(gpu, cubin)
    api.olDestroyProgram(api.olCreateProgram(gpu, cubin))
    with pytest.raises(OffloadError) as info:
        api.olCreateProgram(gpu, b".version 8.0\n.target sm_75\n.address_size 64\nthis is not ptx\n")
    assert info.value.code == ErrorCode.INVALID_BINARY
    assert "cuModuleLoadDataEx" in info.value.details
    assert not api.olIsValidBinary(gpu, b"garbage")


def test_events_waits_and_elapsed_time(gpu: api.Device, program: api.Program) -> None:
    spin = api.olGetSymbol(program, "spin", SymbolKind.KERNEL)
    flag = api.olMemAlloc(gpu, AllocType.MANAGED, 4)
    ctypes.c_uint32.from_address(flag).value = 0
    first, second = api.olCreateQueue(gpu), api.olCreateQueue(gpu)

    class Args(ctypes.Structure):
        _fields_ = [("cycles", ctypes.c_uint64), ("flag", ctypes.c_void_p)]

    start = api.olCreateEvent(first)
    api.olLaunchKernel(first, gpu, spin, bytes(Args(50_000_000, flag)), one_d(1, 1))
    end = api.olCreateEvent(first)
    seen: list[int] = []
    api.olWaitEvents(second, [end])
    api.olLaunchHostFunction(second, lambda _: seen.append(ctypes.c_uint32.from_address(flag).value))
    api.olSyncQueue(second)
    assert seen == [1], "the second queue ran before the event it waited on"
    assert api.olGetEventElapsedTime(start, end) > 0.0
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

    api.olLaunchHostFunction(queue, host_function)
    syncer = threading.Thread(target=lambda: (api.olSyncQueue(queue), order.append("synced")))
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
        api.olSyncQueue(queue)
    assert info.value.code == ErrorCode.QUEUE_ERROR
    error, failing = api.olGetQueueError(queue)
    assert error is not None and "ZeroDivisionError" in error.details and failing is queue
    api.olDestroyQueue(queue)


def test_peer_copy_between_gpus(gpu: api.Device, host: api.Device) -> None:
    if CUDA_DEVICES < 2:
        pytest.skip("one GPU: no peer copy to test")
    devices: list[api.Device] = []
    api.olIterateDevices(lambda d, _: devices.append(d))
    other = next(d for d in devices if _backend(d) == PlatformBackend.CUDA and d is not gpu)
    size = 1 << 20
    a = api.olMemAlloc(gpu, AllocType.DEVICE, size)
    b = api.olMemAlloc(other, AllocType.DEVICE, size)
    api.olMemFill(None, a, b"\x17", size)
    api.olMemcpy(None, b, other, a, gpu, size)
    out = (ctypes.c_ubyte * size)()
    api.olMemcpy(None, ctypes.addressof(out), host, b, other, size)
    assert bytes(out) == b"\x17" * size
    api.olMemFree(a)
    api.olMemFree(b)


def page_buffer(size: int) -> tuple[mmap.mmap, ctypes.Array, int]:
    """Page-aligned host memory (the driver page-locks whole pages): the mapping, a view, its address."""
    mapping = mmap.mmap(-1, size)
    view = (ctypes.c_ubyte * size).from_buffer(mapping)
    return mapping, view, ctypes.addressof(view)


def test_registered_host_memory(gpu: api.Device, host: api.Device, program: api.Program) -> None:
    """olMemRegister: a kernel writes host memory through the returned address, copies use it,
    a range inside counts one more user, a partial overlap is refused."""
    size = 1 << 16
    mapping, view, address = page_buffer(size)
    pinned = api.olMemRegister(gpu, address, size)
    assert api.olMemRegister(gpu, address + 4096, 4096) == pinned + 4096
    with pytest.raises(OffloadError) as info:
        api.olMemRegister(gpu, address + size - 4096, 8192)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT
    queue = api.olCreateQueue(gpu)
    foo = api.olGetSymbol(program, "foo", SymbolKind.KERNEL)
    api.olLaunchKernel(queue, gpu, foo, ctypes.c_uint64(pinned + 8192), one_d(4, 64))
    api.olSyncQueue(queue)
    assert list((ctypes.c_uint32 * 256).from_address(address + 8192)) == list(range(256))
    data = bytes(i % 253 for i in range(4096))
    ctypes.memmove(address, data, 4096)
    device = api.olMemAlloc(gpu, AllocType.DEVICE, 4096)
    api.olMemcpy(queue, device, gpu, address, host, 4096)  # registered memory as the host side
    api.olMemcpy(queue, address + 4096, host, device, gpu, 4096)
    api.olSyncQueue(queue)
    assert bytes(view[4096:8192]) == data
    api.olMemUnregister(gpu, address + 4096)
    api.olMemUnregister(gpu, address)
    with pytest.raises(OffloadError) as info:
        api.olMemUnregister(gpu, address)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT
    api.olDestroyQueue(queue)
    api.olMemFree(device)
    del view


def test_memory_registered_by_another_library_stays_registered(gpu: api.Device) -> None:
    """Memory the driver reports as registered already is used at its device address and never unregistered."""
    from cuda.bindings import driver  # type: ignore[import-untyped]  # noqa: PLC0415

    mapping, view, address = page_buffer(8192)
    driver.cuCtxSetCurrent(gpu._gdev.context)  # type: ignore[union-attr]
    flags = driver.CU_MEMHOSTREGISTER_PORTABLE | driver.CU_MEMHOSTREGISTER_DEVICEMAP
    assert int(driver.cuMemHostRegister(address, 8192, flags)[0]) == 0
    try:
        expected = int(driver.cuMemHostGetDevicePointer(address + 4096, 0)[1])
        assert api.olMemRegister(gpu, address + 4096, 4096) == expected
        api.olMemUnregister(gpu, address + 4096)
    finally:
        assert int(driver.cuMemHostUnregister(address)[0]) == 0  # offloadrt left it registered
    del view


def test_two_gpus_register_the_same_memory(gpu: api.Device, host: api.Device) -> None:
    if CUDA_DEVICES < 2:
        pytest.skip("one GPU: nothing to share a registration with")
    devices: list[api.Device] = []
    api.olIterateDevices(lambda d, _: devices.append(d))
    other = next(d for d in devices if _backend(d) == PlatformBackend.CUDA and d is not gpu)
    mapping, view, address = page_buffer(8192)
    pinned = api.olMemRegister(gpu, address, 8192)
    assert api.olMemRegister(other, address, 8192) == pinned
    api.olMemUnregister(gpu, address)  # still registered for the other GPU
    buffer = api.olMemAlloc(other, AllocType.DEVICE, 4096)
    api.olMemFill(None, buffer, b"\x3c", 4096)
    api.olMemcpy(None, pinned, other, buffer, other, 4096)  # the other GPU writes at the registered address
    assert bytes(view[:4096]) == b"\x3c" * 4096
    api.olMemUnregister(other, address)
    api.olMemFree(buffer)
    del view


def test_kernel_fault_is_a_queue_error_then_sticky() -> None:
    """A trap: QUEUE_ERROR with the driver's error, later calls say the device must be re-initialised,
    and olShutDown + olInit brings the device back."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_cuda_gpu import compile_cuda, KERNELS, one_d, _backend
        from offloadrt import api, AllocType, ErrorCode, OffloadError, PlatformBackend, SymbolKind
        api.olInit()
        devices = []
        api.olIterateDevices(lambda d, _: devices.append(d))
        gpu = next(d for d in devices if _backend(d) == PlatformBackend.CUDA)
        program = api.olCreateProgram(gpu, compile_cuda(KERNELS))
        trap = api.olGetSymbol(program, "trap_kernel", SymbolKind.KERNEL)
        queue = api.olCreateQueue(gpu)
        api.olLaunchKernel(queue, gpu, trap, None, one_d(1, 1))
        try:
            api.olSyncQueue(queue)
            sys.exit("sync did not fail")
        except OffloadError as exc:
            assert exc.code == ErrorCode.QUEUE_ERROR, exc
        error, failing = api.olGetQueueError(queue)
        assert failing is queue and "CUDA_ERROR" in error.details, error
        try:
            api.olMemAlloc(gpu, AllocType.DEVICE, 64)
            sys.exit("a call after the sticky fault succeeded")
        except OffloadError as exc:
            assert "re-initialised" in exc.details, exc
        api.olDestroyQueue(queue)
        try:
            api.olShutDown()
        except OffloadError:
            pass  # releasing the poisoned context reports its errors; re-initialising is what is tested
        api.olInit()
        devices = []
        api.olIterateDevices(lambda d, _: devices.append(d))
        gpu = next(d for d in devices if _backend(d) == PlatformBackend.CUDA)
        api.olMemFree(api.olMemAlloc(gpu, AllocType.DEVICE, 64))
        api.olShutDown()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "ok" in done.stdout, done.stdout + done.stderr
