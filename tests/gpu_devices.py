"""The real GPUs of this machine, for the real-hardware tests, and what their vendors differ in.

``tests/test_gpus.py`` runs the ol* surface both GPU plugins offer alike on every NVIDIA and AMD
GPU present, through :class:`RealGpu` (one object per vendor: how to find its GPUs and why they
are missing, how to build its test program, the vendor's facts, and how another library pins host
memory with the vendor's driver). ``tests/test_cuda_gpu.py`` and ``tests/test_amdgpu_gpu.py`` keep
the cases only one vendor has. Importing this module never skips or fails: a vendor without GPUs
(or without its packages) gives its tests a skip mark with the reason.

CUDA programs are CUDA C built with NVRTC (PTX, or a cubin); AMD programs are HIP C built with
hiprtc for the device's ``gcnArchName``, so every program is one the device can run.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import struct
import warnings
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from _pytest.mark import ParameterSet

import offloadrt
from offloadrt import DeviceInfo, Dimensions, KernelLaunchSizeArgs, PlatformBackend, PlatformInfo, SymbolKind, api

# What both programs hold: foo, composite, mixed, read_table over an initialised table, big_shared
# (dynamic shared memory); each vendor's adds spin (a busy wait of a number of clock ticks, then a
# flag) and trap_kernel in its own dialect, and the AMD program the kernels only its tests use.
_SHARED_KERNELS = rb"""
extern "C" __global__ void foo(unsigned int *out) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = i;
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
extern "C" __global__ void read_table(unsigned int *out) { out[threadIdx.x] = table[threadIdx.x] * 2u; }
extern "C" __global__ void big_shared(unsigned int *out, unsigned int words) {
  extern __shared__ unsigned int shared[];
  for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) shared[i] = i;
  __syncthreads();
  if (threadIdx.x == 0) { unsigned int s = 0; for (unsigned int i = 0; i < words; ++i) s += shared[i]; *out = s; }
}
"""

CUDA_KERNELS = rb"""
extern "C" __device__ unsigned int table[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
""" + _SHARED_KERNELS + rb"""
extern "C" __global__ void spin(unsigned long long cycles, unsigned int *flag) {
  unsigned long long start = clock64();
  while (clock64() - start < cycles) {}
  *flag = 1;
}
extern "C" __global__ void trap_kernel() { asm("trap;"); }
"""

AMD_KERNELS = rb"""
extern "C" {
__device__ unsigned int table[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
}
""" + _SHARED_KERNELS + rb"""
extern "C" __global__ void grid3d(unsigned int *out) {
  unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned int y = blockIdx.y * blockDim.y + threadIdx.y;
  unsigned int z = blockIdx.z * blockDim.z + threadIdx.z;
  unsigned int w = gridDim.x * blockDim.x, h = gridDim.y * blockDim.y;
  out[(z * h + y) * w + x] = (z << 16) | (y << 8) | x;
}
extern "C" __global__ void store(unsigned int *out, unsigned int value) { *out = value; }
extern "C" __global__ void spin(unsigned long long ticks, unsigned int *flag) {
  long long start = wall_clock64();  // a constant-rate counter, unlike the shader clock
  while ((unsigned long long)(wall_clock64() - start) < ticks) {}
  *flag = 1;
}
extern "C" __global__ void fault(unsigned int *bad) { *bad = 1; }
extern "C" __global__ void trap_kernel() { __builtin_trap(); }
"""


# ---- devices ---------------------------------------------------------------------------------------

def backend_of(device: api.Device) -> PlatformBackend:
    return api.olGetPlatformInfo(api.olGetDeviceInfo(device, DeviceInfo.PLATFORM), PlatformInfo.BACKEND)


def all_devices() -> list[api.Device]:
    devices: list[api.Device] = []
    api.olIterateDevices(lambda d, _: devices.append(d))
    return devices


def devices_of(backend: PlatformBackend) -> list[api.Device]:
    """The running runtime's devices of ``backend``, in the order offloadrt lists them."""
    return [d for d in all_devices() if backend_of(d) == backend]


@contextlib.contextmanager
def running(backend: PlatformBackend, ordinal: int) -> Iterator[api.Device]:
    """GPU ``ordinal`` of ``backend``, with offloadrt running that platform (and the host) meanwhile."""
    api.olInit([backend])
    try:
        yield devices_of(backend)[ordinal]
    finally:
        api.olShutDown()


def host_device() -> api.Device:
    return devices_of(PlatformBackend.HOST)[0]


def one_d(groups: int, size: int, dyn: int = 0) -> KernelLaunchSizeArgs:
    return KernelLaunchSizeArgs(1, Dimensions(groups), Dimensions(size), dyn)


def _count(backend: PlatformBackend, platform: str) -> tuple[int, str]:
    """How many GPUs of ``backend`` offloadrt finds, and why there are none."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", offloadrt.OffloadWarning)  # a missing platform is what this asks about
        api.olInit([backend])
    try:
        count = len(devices_of(backend))
        if count:
            return count, ""
        reasons = {p.name: p.reason for p in offloadrt.unavailable_platforms()}
        return 0, f"{platform} platform: {reasons.get(platform, 'no devices')}"
    finally:
        api.olShutDown()


# ---- helpers of the tests -------------------------------------------------------------------------

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


def page_buffer(size: int) -> tuple[mmap.mmap, ctypes.Array, int]:
    """Page-aligned host memory (the drivers page-lock whole pages): the mapping, a view, its address."""
    mapping = mmap.mmap(-1, size)
    view = (ctypes.c_ubyte * size).from_buffer(mapping)
    return mapping, view, ctypes.addressof(view)


class SpinArgs(ctypes.Structure):
    _fields_ = [("ticks", ctypes.c_uint64), ("flag", ctypes.c_void_p)]


# ---- CUDA ------------------------------------------------------------------------------------------

def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc  # noqa: PLC0415
    except ImportError:
        pytest.skip("cuda-bindings (NVRTC) is not installed")
    return nvrtc


@functools.cache
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


# ---- AMD -------------------------------------------------------------------------------------------

def missing_hip_python() -> str:
    """Why hip-python (hip.hip and hiprtc) cannot be used, or ""."""
    try:
        import hip  # noqa: PLC0415
        from hip import hiprtc  # noqa: F401, PLC0415
    except ImportError as exc:
        return f"hip-python is not installed ({exc})"
    if getattr(hip, "hip", None) is None:
        return "hip-python has no hip.hip module"
    return ""


def missing_hiprtc_library() -> str:
    """Why libhiprtc cannot be loaded (hip-python binds it on the first call), or ""."""
    from hip import hiprtc  # noqa: PLC0415

    try:
        hiprtc.hiprtcVersion()
    except (RuntimeError, OSError) as exc:
        return f"the hiprtc library could not be loaded: {exc}"
    return ""


def arch_of(device: api.Device) -> str:
    """An AMD device's gcnArchName, features included (``gfx90a:sramecc+:xnack-``)."""
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
    """What hiprtc returns for AMD_KERNELS on ``device``: a code object (or an offload bundle of one)."""
    return compile_hip(AMD_KERNELS, arch_of(device))


# ---- the vendor table ------------------------------------------------------------------------------

class RealGpu:
    """One vendor's real GPUs. Subclasses fill in the class attributes."""

    name: ClassVar[str]  # the id prefix of its GPUs ("cuda0")
    backend: ClassVar[PlatformBackend]
    mark: ClassVar[pytest.MarkDecorator]
    vendor_id: ClassVar[int]
    vendor_name: ClassVar[str]  # part of DeviceInfo.VENDOR
    driver_version: ClassVar[str]  # part of DeviceInfo.DRIVER_VERSION
    min_local_memory: ClassVar[int]  # the least WORK_GROUP_LOCAL_MEM_SIZE such a GPU has
    min_global_memory: ClassVar[int]  # the least GLOBAL_MEM_SIZE (APUs may report a small carve-out)
    spin_ticks: ClassVar[int]  # what makes ``spin`` run for 0.1 s or more

    def __repr__(self) -> str:
        return self.name

    @functools.cached_property
    def found(self) -> tuple[int, str]:
        """(how many GPUs offloadrt finds, why there are none)."""
        raise NotImplementedError

    def program(self, device: api.Device) -> bytes:
        """The test program, built for ``device``."""
        raise NotImplementedError

    def expected_name(self, device: api.Device) -> str | None:
        """What DeviceInfo.NAME must be, where the test can know it."""
        return None

    def register_elsewhere(self, device: api.Device, address: int, size: int) -> None:
        """Another library page-locks ``size`` bytes at ``address`` (portable, mapped) with the driver."""
        raise NotImplementedError

    def device_pointer_elsewhere(self, address: int) -> int:
        """The device address the driver gives another library for registered host memory."""
        raise NotImplementedError

    def unregister_elsewhere(self, address: int) -> None:
        raise NotImplementedError


class CudaGpus(RealGpu):
    name = "cuda"
    backend = PlatformBackend.CUDA
    mark = pytest.mark.cuda
    vendor_id = 0x10DE
    vendor_name = "NVIDIA"
    driver_version = "CUDA"
    min_local_memory = 48 * 1024
    min_global_memory = 1 << 30
    spin_ticks = 50_000_000  # clock64 cycles: 25 ms or more at 2 GHz

    @functools.cached_property
    def found(self) -> tuple[int, str]:
        count, why = _count(self.backend, "cuda")
        return count, "" if count else f"no CUDA device (or no NVIDIA driver) on this machine: {why}"

    def program(self, device: api.Device) -> bytes:
        return compile_cuda(CUDA_KERNELS)

    def _driver(self) -> Any:
        from cuda.bindings import driver  # type: ignore[import-untyped]  # noqa: PLC0415

        return driver

    def register_elsewhere(self, device: api.Device, address: int, size: int) -> None:
        driver = self._driver()
        driver.cuCtxSetCurrent(device._gdev.context)  # type: ignore[union-attr]
        flags = driver.CU_MEMHOSTREGISTER_PORTABLE | driver.CU_MEMHOSTREGISTER_DEVICEMAP
        assert int(driver.cuMemHostRegister(address, size, flags)[0]) == 0

    def device_pointer_elsewhere(self, address: int) -> int:
        return int(self._driver().cuMemHostGetDevicePointer(address, 0)[1])

    def unregister_elsewhere(self, address: int) -> None:
        assert int(self._driver().cuMemHostUnregister(address)[0]) == 0


class AmdGpus(RealGpu):
    name = "amdgpu"
    backend = PlatformBackend.AMDGPU
    mark = pytest.mark.amdgpu
    vendor_id = 0x1002
    vendor_name = "AMD"
    driver_version = "HIP "
    min_local_memory = 64 * 1024  # LDS
    min_global_memory = 1 << 28
    # 10**7 ticks of wall_clock64 (100 MHz on most AMD GPUs, 25 MHz on some): 0.1 to 0.4 s
    spin_ticks = 10_000_000

    @functools.cached_property
    def found(self) -> tuple[int, str]:
        why = missing_hip_python()
        if why:
            return 0, f"no AMD GPU tests: {why}"
        count, why = _count(self.backend, "amdgpu")
        if not count:
            return 0, f"no AMD GPU (or no ROCm) on this machine: {why}"
        why = missing_hiprtc_library()
        return (0, f"cannot build AMD device code: {why}") if why else (count, "")

    def program(self, device: api.Device) -> bytes:
        return hiprtc_output(device)

    def expected_name(self, device: api.Device) -> str | None:
        return arch_of(device).split(":")[0]  # the processor, without target features

    def register_elsewhere(self, device: api.Device, address: int, size: int) -> None:
        from hip import hip  # noqa: PLC0415

        assert int(hip.hipHostRegister(address, size, hip.hipHostRegisterPortable | hip.hipHostRegisterMapped)[0]) == 0

    def device_pointer_elsewhere(self, address: int) -> int:
        from hip import hip  # noqa: PLC0415

        return int(hip.hipHostGetDevicePointer(address, 0)[1])

    def unregister_elsewhere(self, address: int) -> None:
        from hip import hip  # noqa: PLC0415

        assert int(hip.hipHostUnregister(address)[0]) == 0


CUDA_GPUS, AMD_GPUS = CudaGpus(), AmdGpus()
REAL_GPUS = (CUDA_GPUS, AMD_GPUS)


def gpu_params(vendors: tuple[RealGpu, ...] = REAL_GPUS) -> list[ParameterSet]:
    """``(vendor, ordinal)`` for every GPU of ``vendors`` present, marked with the vendor's mark
    (ids ``cuda0``, ``amdgpu1``); a vendor without GPUs gives one skipped case with the reason."""
    params = []
    for vendor in vendors:
        count, why = vendor.found
        if not count:
            params.append(pytest.param((vendor, 0), id=f"{vendor.name}0", marks=[vendor.mark, pytest.mark.skip(why)]))
        params.extend(pytest.param((vendor, i), id=f"{vendor.name}{i}", marks=vendor.mark) for i in range(count))
    return params


def skip_unless_present(vendor: RealGpu) -> int:
    """The number of ``vendor``'s GPUs; skips the calling test module where there are none."""
    count, why = vendor.found
    if not count:
        pytest.skip(why, allow_module_level=True)
    return count

