"""Kernels from source for GPUs, over the driver stand-ins: CUDA C++ through the real NVRTC (the
nvidia-cuda-nvrtc wheel needs no GPU) to PTX the CUDA plugin loads, and HIP through the hiprtc
test double (tests/hip_standin/hiprtc.py, which compiles with clang) to a code object the AMDGPU
plugin loads; signatures from the source, C++ kernels by their source name, compile errors with
the log, and missing compilers. The double's functions are checked against hip-python's real
hiprtc module."""

from __future__ import annotations

import ctypes
import inspect
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cuda_standin
import hip_standin
import numpy as np
import pytest
from hip_standin import hiprtc as hiprtc_standin

import offloadrt
from offloadrt import ErrorCode, OffloadError
from offloadrt.compile import Target, build
from offloadrt.core import _runtime

SAXPY_CUDA = r"""
extern "C" __global__ void saxpy(float a, const float *x, float *y, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
struct Affine { int shift; double scale; };
__global__ void fill(Affine s, double *out, size_t n) {   // C++ linkage: a mangled symbol
  size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = s.scale * i + s.shift;
}
template <typename T> __global__ void twice(T *p) { p[threadIdx.x] *= 2; }
template __global__ void twice<float>(float *);
template <typename T> __global__ void many(T *p) { p[threadIdx.x] += 1; }
template __global__ void many<float>(float *);
template __global__ void many<int>(int *);
"""


def nvrtc_available() -> bool:
    try:
        from offloadrt.compile import _nvrtc

        _nvrtc.version()
    except OffloadError:
        return False
    return True


needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (cuda-bindings + nvidia-cuda-nvrtc) missing")
needs_clang = pytest.mark.skipif(hiprtc_standin.find_clang() is None,
                                 reason="the hiprtc stand-in needs clang >= 20 with the AMDGPU target and ld.lld")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("OFFLOADRT_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> Iterator[offloadrt.Device]:
    """The layer over one stand-in CUDA GPU (compute capability 9.0)."""
    _runtime.shutdown()
    cuda_standin.install(monkeypatch, devices=1)
    try:
        yield offloadrt.device("cuda")
    finally:
        try:
            _runtime.shutdown()
        finally:
            cuda_standin.shutdown()


@pytest.fixture
def amd(monkeypatch: pytest.MonkeyPatch) -> Iterator[offloadrt.Device]:
    """The layer over one stand-in AMD GPU (gfx90a:sramecc+:xnack-), with the hiprtc double installed."""
    _runtime.shutdown()
    hip_standin.install(monkeypatch, devices=1)
    hiprtc_standin.install(monkeypatch)
    try:
        yield offloadrt.device("amdgpu")
    finally:
        try:
            _runtime.shutdown()
        finally:
            hip_standin.shutdown()


def saxpy_body(params: bytes, grid: Any, block: Any, shared: int, device: int) -> None:
    """What the stand-ins run for saxpy: the kernel's arithmetic on the packed blob."""
    a, x, y, n = struct.unpack("<f4xQQI", params)  # the parameter buffer: 28 bytes, no tail padding
    xs = (ctypes.c_float * n).from_address(x)
    ys = (ctypes.c_float * n).from_address(y)
    for i in range(n):
        ys[i] = a * xs[i] + ys[i]


def run_saxpy(gpu: offloadrt.Device, program: offloadrt.Program) -> None:
    kernel = program.kernel("saxpy")
    assert kernel.signature == ("float32", "ptr", "ptr", "uint32")
    x = offloadrt.asarray(np.arange(16, dtype=np.float32), gpu)
    y = offloadrt.asarray(np.ones(16, dtype=np.float32), gpu)
    with gpu.queue() as queue:
        queue.launch(kernel, 4, 4, 2.0, x, y, 16)
    np.testing.assert_array_equal(y.numpy(), 2 * np.arange(16) + 1)


# ---- CUDA through NVRTC ---------------------------------------------------------------------------

@needs_nvrtc
def test_nvrtc_compiles_cuda_to_ptx_the_plugin_loads_and_runs(cuda: offloadrt.Device) -> None:
    cuda_standin.register_kernel("saxpy", saxpy_body)
    program = cuda.compile(SAXPY_CUDA)
    image = program._compiled.image
    assert b".target sm_90" in image and b".entry saxpy(" in image
    run_saxpy(cuda, program)
    fill = program.kernel("fill")  # found by its source name, though the PTX has _Z4fill6AffinePdm
    assert program._compiled.symbols["fill"].startswith("_Z4fill")
    affine = fill.signature[0]
    assert [name for name, _ in affine._fields_] == ["shift", "scale"] and fill.signature[1:] == ("ptr", "uint64")
    assert program.kernel(program._compiled.symbols["fill"]).signature == fill.signature
    assert program.kernel("twice").signature == ("ptr",)  # the one instantiation of a template
    many = [name for name in program.kernel_names if name.startswith("_Z4many")]  # two: by mangled name only
    assert len(many) == 2 and "many" not in program.kernel_names
    assert all(program.kernel(name).signature == ("ptr",) for name in many)  # from the PTX alone
    with pytest.raises(OffloadError) as info:
        program.kernel("many")
    assert info.value.code == ErrorCode.NOT_FOUND and many[0] in info.value.details


@needs_nvrtc
def test_a_real_architecture_gives_a_cubin_the_plugin_loads(cuda: offloadrt.Device) -> None:
    cuda_standin.register_kernel("saxpy", saxpy_body)
    program = offloadrt.Program.from_source(cuda, SAXPY_CUDA, ["-arch=sm_90"], "cuda")
    image = program._compiled.image
    assert image[:4] == b"\x7fELF" and struct.unpack_from("<H", image, 18)[0] == 190  # EM_CUDA
    assert (struct.unpack_from("<I", image, 48)[0] >> 8) & 0xFF == 90  # e_flags: sm_90 (CUDA 12.8+ layout)
    run_saxpy(cuda, program)  # the signature still comes from the PTX of the same compile


@needs_nvrtc
def test_nvrtc_targets_the_compute_capability_and_takes_options(cuda: offloadrt.Device) -> None:
    compiled = build(SAXPY_CUDA, ["-DUNUSED=1", "--gpu-architecture=compute_80"], "cuda", Target("cuda", "sm_90"))
    assert b".target sm_80" in compiled.image
    newest = build(SAXPY_CUDA, (), "cuda", Target("cuda", "sm_999"))  # newer than NVRTC knows: its newest
    assert b".target sm_" in newest.image
    with pytest.raises(OffloadError) as info:
        build(SAXPY_CUDA, (), "cuda", Target("cuda", "sm_20"))
    assert info.value.code == ErrorCode.UNSUPPORTED and "sm_20" in info.value.details
    with pytest.raises(OffloadError) as info:
        build(SAXPY_CUDA, ["--no-such-option"], "cuda", Target("cuda", "sm_90"))
    assert info.value.code == ErrorCode.INVALID_ARGUMENT and "no-such-option" in info.value.details


@needs_nvrtc
def test_an_nvrtc_compile_error_carries_the_whole_log(cuda: offloadrt.Device) -> None:
    source = "__global__ void k(int *p) {\n  p[0] = first_missing;\n  p[1] = second_missing;\n}\n"
    with pytest.raises(OffloadError) as info:
        offloadrt.Program.from_source(cuda, source, name="broken")
    assert info.value.code == ErrorCode.COMPILE_FAILURE
    assert "first_missing" in info.value.details and "second_missing" in info.value.details
    assert "broken.cu(2)" in info.value.details


def test_without_nvrtc_cuda_source_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from offloadrt.compile import _nvrtc

    def missing(name: str) -> Any:
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(_nvrtc.importlib, "import_module", missing)
    with pytest.raises(OffloadError) as info:
        build(SAXPY_CUDA, (), "cuda", Target("cuda", "sm_90"))
    assert info.value.code == ErrorCode.HOST_TOOL_NOT_FOUND and "nvidia-cuda-nvrtc" in info.value.details


# ---- HIP through hiprtc (the test double) ---------------------------------------------------------

SAXPY_HIP = SAXPY_CUDA.replace("template <typename T> __global__ void twice(T *p) { p[threadIdx.x] *= 2; }\n"
                               "template __global__ void twice<float>(float *);\n",
                               "__global__ void reduce(const float *in, float *out) {\n"
                               "  __shared__ float part[64];\n"
                               "  part[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];\n"
                               "  __syncthreads();\n"
                               "  if (threadIdx.x == 0) { float s = 0; for (int i = 0; i < 64; ++i) s += part[i];\n"
                               "    atomicAdd(out, s); }\n"
                               "}\n")


def test_the_hiprtc_double_matches_hip_pythons_hiprtc() -> None:
    from offloadrt.compile import _hiprtc

    try:
        real = _hiprtc.hiprtc_module()  # the function the hiprtc fixture replaces: here the real module
    except OffloadError:
        pytest.skip("hip-python is not installed")
    assert not getattr(real, "__standin__", False)
    for name in hiprtc_standin.FUNCTIONS:
        expected = list(inspect.signature(getattr(real, name)).parameters)
        assert list(inspect.signature(getattr(hiprtc_standin, name)).parameters) == expected, name
    assert {m.name: int(m) for m in real.hiprtcResult} == {m.name: int(m) for m in hiprtc_standin.hiprtcResult}


@needs_clang
def test_hiprtc_builds_a_code_object_the_amdgpu_plugin_loads_and_runs(amd: offloadrt.Device) -> None:
    hip_standin.register_kernel("saxpy", saxpy_body)
    program = amd.compile(SAXPY_HIP)
    image = program._compiled.image
    assert image[:4] == b"\x7fELF" and struct.unpack_from("<H", image, 18)[0] == 224  # EM_AMDGPU
    assert "--offload-arch=gfx90a:sramecc+:xnack-" in hiprtc_standin.compiled_options[-1]
    run_saxpy(amd, program)
    fill = program.kernel("fill")
    assert program._compiled.symbols["fill"].startswith("_Z4fill") and fill.signature[1:] == ("ptr", "uint64")
    assert program.kernel("reduce").signature == ("ptr", "ptr")


@needs_clang
def test_a_hiprtc_compile_error_carries_the_log(amd: offloadrt.Device) -> None:
    with pytest.raises(OffloadError) as info:
        amd.compile("__global__ void k(int *p) { p[0] = not_declared_anywhere; }\n")
    assert info.value.code == ErrorCode.COMPILE_FAILURE and "not_declared_anywhere" in info.value.details
    hiprtc_standin.inject("hiprtcCompileProgram", hiprtc_standin.hiprtcResult.HIPRTC_ERROR_COMPILATION,
                          log="injected: the whole log\nsecond line")
    with pytest.raises(OffloadError) as info:
        offloadrt.Program.from_source(amd, SAXPY_HIP, cache=False)
    assert info.value.code == ErrorCode.COMPILE_FAILURE and "injected: the whole log\nsecond line" in info.value.details
    assert hiprtc_standin.calls.count("hiprtcDestroyProgram") == hiprtc_standin.calls.count("hiprtcCreateProgram")


def test_without_libhiprtc_hip_source_says_what_to_install(amd: offloadrt.Device) -> None:
    hiprtc_standin.set_library_missing()
    with pytest.raises(OffloadError) as info:
        amd.compile(SAXPY_HIP)
    assert info.value.code == ErrorCode.HOST_TOOL_NOT_FOUND and "libhiprtc" in info.value.details


def test_a_lang_for_another_backend_is_refused(amd: offloadrt.Device) -> None:
    with pytest.raises(OffloadError) as info:
        amd.compile(SAXPY_CUDA, (), "cuda")
    assert info.value.code == ErrorCode.UNSUPPORTED and "'hip'" in info.value.details


def test_the_real_hiprtc_without_libhiprtc_says_what_to_install() -> None:
    from offloadrt.compile import _hiprtc

    try:
        real = _hiprtc.hiprtc_module()
    except OffloadError:
        pytest.skip("hip-python is not installed")
    try:
        real.hiprtcVersion()
    except RuntimeError:
        pass  # libhiprtc.so is absent, as on the test machines
    else:
        pytest.skip("libhiprtc.so is installed here")
    with pytest.raises(OffloadError) as info:
        build(SAXPY_HIP, (), "hip", Target("amdgpu", "gfx90a"))
    assert info.value.code == ErrorCode.HOST_TOOL_NOT_FOUND and "libhiprtc" in info.value.details
