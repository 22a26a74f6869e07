"""A TEST DOUBLE for hip-python's ``hip.hiprtc`` module (not AMD code): HIP runtime compilation with clang.

ROCm's ``libhiprtc.so`` is absent on the test machines, so hip-python's real ``hiprtc`` can only
be imported, not called. This module has the same function names, parameters and
``(hiprtcResult, *outputs)`` results (checked against the real module by
tests/test_compile_gpu.py) and really compiles: ``hiprtcCompileProgram`` runs
``clang -x hip --offload-arch=<arch> -nogpulib -nogpuinc --cuda-device-only
--no-gpu-bundle-output`` (clang >= 20 with the AMDGPU target and ``ld.lld``), which links an
AMDGPU code object as hiprtc does. Without HIP's headers clang knows none of HIP's names, so the
source is compiled after a small prelude (:data:`PRELUDE`) that defines the part of HIP's device
API the tests use, as hiprtc's own built-in header does: ``__global__``/``__device__``/
``__shared__``/``__constant__``, ``threadIdx``/``blockIdx``/``blockDim``/``gridDim``,
``__syncthreads``, ``warpSize``, ``atomicAdd``, ``size_t`` and the ``<stdint.h>`` types.
Anything else of HIP's headers is missing and fails to compile, with clang's log.

Controls: :func:`install` (make ``offloadrt.compile`` use this module), :func:`inject` (make the
next calls of a function return a result, with a log), :func:`set_library_missing` (every call
raises hip-python's RuntimeError about ``libhiprtc.so``), :data:`calls` (every call's name), :data:`compiled_options`,
:func:`find_clang` (the clang used, or None: tests skip then).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections import deque
from enum import IntEnum
from pathlib import Path
from typing import Any

import pytest

__standin__ = True
VERSION = (6, 4)  # what hiprtcVersion reports (ROCm 6.4's hiprtc)


class hiprtcResult(IntEnum):  # noqa: N801  # hip-python's name
    HIPRTC_SUCCESS = 0
    HIPRTC_ERROR_OUT_OF_MEMORY = 1
    HIPRTC_ERROR_PROGRAM_CREATION_FAILURE = 2
    HIPRTC_ERROR_INVALID_INPUT = 3
    HIPRTC_ERROR_INVALID_PROGRAM = 4
    HIPRTC_ERROR_INVALID_OPTION = 5
    HIPRTC_ERROR_COMPILATION = 6
    HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE = 7
    HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION = 8
    HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION = 9
    HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID = 10
    HIPRTC_ERROR_INTERNAL_ERROR = 11
    HIPRTC_ERROR_LINKING = 100


PRELUDE = r"""
/* hip_standin's HIP prelude (a test double of what hiprtc's built-in header provides). */
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
typedef __INT8_TYPE__ int8_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __INT16_TYPE__ int16_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __INT32_TYPE__ int32_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT64_TYPE__ uint64_t;
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((amdgpu_flat_work_group_size(1, __VA_ARGS__)))
#define __HIP_DIM3_VAR(NAME, FN)                                                                   \
  struct __hip_##NAME##_t {                                                                        \
    __declspec(property(get = __x)) unsigned x;                                                    \
    __declspec(property(get = __y)) unsigned y;                                                    \
    __declspec(property(get = __z)) unsigned z;                                                    \
    static __device__ __forceinline__ unsigned __x() { return FN(x); }                             \
    static __device__ __forceinline__ unsigned __y() { return FN(y); }                             \
    static __device__ __forceinline__ unsigned __z() { return FN(z); }                             \
  };                                                                                               \
  extern const __device__ __attribute__((weak)) __hip_##NAME##_t NAME;
#define __hip_tid(d) __builtin_amdgcn_workitem_id_##d()
#define __hip_bid(d) __builtin_amdgcn_workgroup_id_##d()
#define __hip_bdim(d) __builtin_amdgcn_workgroup_size_##d()
#define __hip_gdim(d) (__builtin_amdgcn_grid_size_##d() / __builtin_amdgcn_workgroup_size_##d())
__HIP_DIM3_VAR(threadIdx, __hip_tid)
__HIP_DIM3_VAR(blockIdx, __hip_bid)
__HIP_DIM3_VAR(blockDim, __hip_bdim)
__HIP_DIM3_VAR(gridDim, __hip_gdim)
#define warpSize __builtin_amdgcn_wavefrontsize()
static __device__ __forceinline__ void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
template <typename T> static __device__ __forceinline__ T atomicAdd(T *address, T value) {
  return __hip_atomic_fetch_add(address, value, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
"""
_ALLOWED_OPTION = re.compile(r"^(-O[0-3s]?|-D\S+|-U\S+|-I\S+|-std=\S+|-ffast-math|-fno-\S+|-W\S*|-w|-g|"
                             r"--offload-arch=\S+|--gpu-architecture=\S+|-mcumode|-mno-cumode|-mwavefrontsize64)$")

_lock = threading.Lock()  # guards _injections and _library_missing
_injections: dict[str, deque[tuple[hiprtcResult, str, int]]] = {}
_library_missing = False
calls: list[str] = []
compiled_options: list[list[str]] = []  # the options of each hiprtcCompileProgram that reached the compiler


class hiprtcProgram:  # noqa: N801  # hip-python's name
    """A program: its source, headers, and after a compile its code object and log."""

    def __init__(self, source: bytes, name: bytes, headers: list[bytes], include_names: list[bytes]) -> None:
        self.source = source
        self.name = name.decode() or "program.hip"
        self.headers = dict(zip(include_names, headers))
        self.code: bytes | None = None
        self.log = ""
        self.destroyed = False


@functools.cache
def find_clang() -> str | None:
    """A clang >= 20 that can build AMDGPU code objects (``$OFFLOADRT_CLANG``, ``clang``,
    ``clang-NN`` on PATH) with ``ld.lld`` at hand, or None."""
    candidates = [os.environ.get("OFFLOADRT_CLANG", ""), "clang"] + [f"clang-{n}" for n in range(30, 19, -1)]
    for candidate in candidates:
        path = shutil.which(candidate) if candidate else None
        if path is None:
            continue
        try:
            shown = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        match = re.search(r"clang version (\d+)", shown.stdout)
        if match and int(match.group(1)) >= 20 and _lld(path, int(match.group(1))):
            return path
    return None


def _lld(clang: str, major: int) -> bool:
    return any(shutil.which(name) for name in ("ld.lld", f"ld.lld-{major}")) or \
        (Path(clang).resolve().parent / "ld.lld").exists()


def _enter(name: str) -> tuple[hiprtcResult, str] | None:
    """Record the call; raise as hip-python does without libhiprtc; an injected result, if any."""
    with _lock:
        calls.append(name)
        if _library_missing:
            raise RuntimeError("failed to dlopen 'b'libhiprtc.so'': b'libhiprtc.so: cannot open shared object "
                               "file: No such file or directory'")
        queue = _injections.get(name)
        if queue:
            result, log, times = queue.popleft()
            if times > 1:
                queue.appendleft((result, log, times - 1))
            return result, log
    return None


def _bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"expected str or bytes, got {type(value).__name__}")


def hiprtcGetErrorString(result: Any) -> tuple[hiprtcResult, bytes]:
    _enter("hiprtcGetErrorString")
    try:
        return hiprtcResult.HIPRTC_SUCCESS, hiprtcResult(int(result)).name.encode()
    except ValueError:
        return hiprtcResult.HIPRTC_SUCCESS, b"Invalid HIPRTC error code"


def hiprtcVersion() -> tuple[hiprtcResult, int, int]:
    injected = _enter("hiprtcVersion")
    if injected:
        return injected[0], 0, 0
    return hiprtcResult.HIPRTC_SUCCESS, *VERSION


def hiprtcCreateProgram(src: Any, name: Any, numHeaders: int, headers: Any,  # noqa: N803
                        includeNames: Any) -> tuple[hiprtcResult, hiprtcProgram | None]:  # noqa: N803
    injected = _enter("hiprtcCreateProgram")
    if injected:
        return injected[0], None
    if src is None:
        return hiprtcResult.HIPRTC_ERROR_INVALID_INPUT, None
    headers, names = list(headers or []), list(includeNames or [])
    if int(numHeaders) != len(headers) or len(headers) != len(names):
        return hiprtcResult.HIPRTC_ERROR_INVALID_INPUT, None
    return hiprtcResult.HIPRTC_SUCCESS, hiprtcProgram(_bytes(src), _bytes(name or b""),
                                                      [_bytes(h) for h in headers], [_bytes(n) for n in names])


def _live(prog: Any) -> hiprtcProgram | None:
    return prog if isinstance(prog, hiprtcProgram) and not prog.destroyed else None


def hiprtcCompileProgram(prog: Any, numOptions: int, options: Any) -> tuple[hiprtcResult]:  # noqa: N803
    injected = _enter("hiprtcCompileProgram")
    program = _live(prog)
    if program is None:
        return (hiprtcResult.HIPRTC_ERROR_INVALID_PROGRAM,)
    if injected:
        program.log = injected[1]
        return (injected[0],)
    flags = [_bytes(option).decode() for option in list(options or [])]
    if int(numOptions) != len(flags):
        return (hiprtcResult.HIPRTC_ERROR_INVALID_INPUT,)
    with _lock:
        compiled_options.append(flags)
    bad = [flag for flag in flags if not _ALLOWED_OPTION.match(flag)]
    if bad:
        program.log = f"hiprtc (hip_standin): unsupported option(s): {' '.join(bad)}"
        return (hiprtcResult.HIPRTC_ERROR_INVALID_OPTION,)
    arch = next((f.split("=", 1)[1] for f in flags if f.startswith(("--offload-arch=", "--gpu-architecture="))),
                None)
    if arch is None:
        program.log = "hiprtc (hip_standin): no --offload-arch given"
        return (hiprtcResult.HIPRTC_ERROR_INVALID_OPTION,)
    clang = find_clang()
    if clang is None:
        program.log = "hiprtc (hip_standin): no clang >= 20 with ld.lld to compile with"
        return (hiprtcResult.HIPRTC_ERROR_INTERNAL_ERROR,)
    rest = [f for f in flags if not f.startswith(("--offload-arch=", "--gpu-architecture="))]
    with tempfile.TemporaryDirectory(prefix="hiprtc-standin-") as work:
        folder = Path(work)
        (folder / "__hip_standin_prelude.h").write_text(PRELUDE)
        for include_name, text in program.headers.items():
            target = folder / "include" / include_name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(text)
        source = folder / Path(program.name).name
        source.write_bytes(program.source)
        output = folder / "code.o"
        command = [clang, "-x", "hip", f"--offload-arch={arch}", "-nogpulib", "-nogpuinc", "--cuda-device-only",
                   "--no-gpu-bundle-output", "-O3", "-I", str(folder / "include"), "-include",
                   str(folder / "__hip_standin_prelude.h"), *rest, str(source), "-o", str(output)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=work, timeout=600, check=False)
        program.log = (done.stdout + done.stderr).replace(str(folder) + "/", "")
        if done.returncode != 0:
            return (hiprtcResult.HIPRTC_ERROR_COMPILATION,)
        program.code = output.read_bytes()
    return (hiprtcResult.HIPRTC_SUCCESS,)


def hiprtcGetProgramLogSize(prog: Any) -> tuple[hiprtcResult, int]:
    injected = _enter("hiprtcGetProgramLogSize")
    program = _live(prog)
    if injected or program is None:
        return (injected[0] if injected else hiprtcResult.HIPRTC_ERROR_INVALID_PROGRAM), 0
    return hiprtcResult.HIPRTC_SUCCESS, len(program.log.encode()) + 1


def hiprtcGetProgramLog(prog: Any, log: Any) -> tuple[hiprtcResult]:
    injected = _enter("hiprtcGetProgramLog")
    program = _live(prog)
    if injected or program is None:
        return (injected[0] if injected else hiprtcResult.HIPRTC_ERROR_INVALID_PROGRAM,)
    return _copy_out(program.log.encode() + b"\0", log)


def hiprtcGetCodeSize(prog: Any) -> tuple[hiprtcResult, int]:
    injected = _enter("hiprtcGetCodeSize")
    program = _live(prog)
    if injected or program is None:
        return (injected[0] if injected else hiprtcResult.HIPRTC_ERROR_INVALID_PROGRAM), 0
    if program.code is None:
        return hiprtcResult.HIPRTC_ERROR_INVALID_PROGRAM, 0
    return hiprtcResult.HIPRTC_SUCCESS, len(program.code)


def hiprtcGetCode(prog: Any, code: Any) -> tuple[hiprtcResult]:
    injected = _enter("hiprtcGetCode")
    program = _live(prog)
    if injected or program is None:
        return (injected[0] if injected else hiprtcResult.HIPRTC_ERROR_INVALID_PROGRAM,)
    if program.code is None:
        return (hiprtcResult.HIPRTC_ERROR_INVALID_PROGRAM,)
    return _copy_out(program.code, code)


def _copy_out(data: bytes, out: Any) -> tuple[hiprtcResult]:
    """Copy into the caller's writable buffer (hip-python passes its address on; too small a
    buffer would be overrun in C: the double refuses it instead)."""
    try:
        view = memoryview(out).cast("B")
    except TypeError:
        return (hiprtcResult.HIPRTC_ERROR_INVALID_INPUT,)
    if view.readonly or len(view) < len(data):
        return (hiprtcResult.HIPRTC_ERROR_INVALID_INPUT,)
    view[:len(data)] = data
    return (hiprtcResult.HIPRTC_SUCCESS,)


def hiprtcDestroyProgram(prog: Any) -> tuple[hiprtcResult]:
    injected = _enter("hiprtcDestroyProgram")
    if injected:
        return (injected[0],)
    program = _live(prog)
    if program is None:
        return (hiprtcResult.HIPRTC_ERROR_INVALID_INPUT,)
    program.destroyed = True
    return (hiprtcResult.HIPRTC_SUCCESS,)


FUNCTIONS = ("hiprtcGetErrorString", "hiprtcVersion", "hiprtcCreateProgram", "hiprtcCompileProgram",
             "hiprtcGetProgramLogSize", "hiprtcGetProgramLog", "hiprtcGetCodeSize", "hiprtcGetCode",
             "hiprtcDestroyProgram")
for _function in FUNCTIONS:
    globals()[_function].__hip_standin__ = True


def inject(function_name: str, result: Any, *, log: str = "", times: int = 1) -> None:
    """Make the next ``times`` calls of ``function_name`` return ``result`` and do nothing else
    (``hiprtcCompileProgram`` sets the program's log to ``log``)."""
    if function_name not in FUNCTIONS:
        raise ValueError(f"hiprtc stand-in has no function {function_name!r}")
    with _lock:
        _injections.setdefault(function_name, deque()).append((hiprtcResult(int(result)), log, times))


def set_library_missing(missing: bool = True) -> None:
    """Make every call raise hip-python's RuntimeError about ``libhiprtc.so`` (or stop doing so)."""
    global _library_missing
    with _lock:
        _library_missing = missing


def reset() -> None:
    """No injections, the library present, no calls recorded."""
    set_library_missing(False)
    with _lock:
        _injections.clear()
        calls.clear()
        compiled_options.clear()


def install(monkeypatch: pytest.MonkeyPatch) -> Any:
    """:func:`reset`, then make ``offloadrt.compile`` reach this module instead of ``hip.hiprtc``
    for the rest of the test; returns this module."""
    import sys

    from offloadrt.compile import _hiprtc

    reset()
    module = sys.modules[__name__]
    monkeypatch.setattr(_hiprtc, "hiprtc_module", lambda: module)
    return module
