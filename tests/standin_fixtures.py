"""Helpers of the driver stand-ins' own tests, and their vendor table.

``tests/test_standins.py`` pins down what both stand-ins simulate alike (stream order, host
functions, events, faults, injection) once, through :class:`StandinDriver`: one object per
stand-in that names its calls by role and its statuses by a vendor-neutral name, installs it and
makes a device current. What only one driver has (contexts, hip-python's argument conversion,
image formats, signatures against the real bindings) stays in ``tests/test_cuda_standin.py`` and
``tests/test_hip_standin.py``, which use the helpers here too.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import cuda_standin
import hip_standin
import pytest

WAIT = 10.0  # the longest a test waits for something that should happen at once
HOST_FN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_alive: list[Any] = []  # C function pointers must outlive every stream that may call them


def _diagnostics(status: Any) -> list[str]:
    standin = hip_standin if type(status).__name__ == "hipError_t" else cuda_standin
    return standin.diagnostics[-1:]


def ok(result: tuple[Any, ...]) -> Any:
    """The outputs of a successful call (one unpacked, several as a tuple)."""
    assert int(result[0]) == 0, f"driver call failed: {result[0]!r}; {_diagnostics(result[0])}"
    return result[1] if len(result) == 2 else result[1:] or None


def code(result: tuple[Any, ...]) -> str:
    """The name of a call's status (``CUDA_ERROR_NOT_READY``, ``hipErrorNotReady``)."""
    return str(result[0].name)


class HostFn:
    """A Python callable behind a C function pointer (a CUhostFn or hipHostFn_t); records the
    threads it ran on."""

    def __init__(self, body: Callable[[int | None], None] = lambda _: None) -> None:
        self.threads: list[int] = []

        def trampoline(data: int | None) -> None:
            self.threads.append(threading.get_ident())
            body(data)

        self.c_function = HOST_FN_TYPE(trampoline)
        _alive.append(self.c_function)
        self.address = ctypes.cast(self.c_function, ctypes.c_void_p).value

    def launch(self, bindings: ModuleType, stream: Any, user_data: int | None = None) -> None:
        """Queue it on ``stream`` through ``bindings`` (the CUDA or the HIP stand-in's module)."""
        if hasattr(bindings, "cuLaunchHostFunc"):
            ok(bindings.cuLaunchHostFunc(stream, bindings.CUhostFn(self.address), user_data or 0))
        else:
            ok(bindings.hipLaunchHostFunc(stream, self.address, user_data))


class Gate(HostFn):
    """A host function that holds its stream until opened."""

    def __init__(self) -> None:
        self.entered, self.opened = threading.Event(), threading.Event()
        super().__init__(self._hold)

    def _hold(self, _data: int | None) -> None:
        self.entered.set()
        assert self.opened.wait(WAIT)


def run_alone(script: str, done: str) -> None:
    """Run ``script`` (Python, dedented) in a fresh interpreter in tests/; it must print ``done``."""
    finished = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                              timeout=60, cwd=Path(__file__).parent)
    assert finished.returncode == 0 and done in finished.stdout, finished.stderr


def extra_array(blob: bytes, end: int) -> tuple[Any, ...]:
    """An ``extra`` launch array for ``blob`` ending with ``end`` (CUDA: 0, HIP: 3): (array,
    blob buffer, size); keep all three alive until the launch returned."""
    buffer = ctypes.create_string_buffer(blob, max(1, len(blob)))
    size = ctypes.c_size_t(len(blob))
    array = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), end)
    return array, buffer, size


class StandinDriver:
    """One driver stand-in, by role. Calls return the stand-in's result tuple unchanged."""

    name: ClassVar[str]
    standin: ClassVar[ModuleType]
    #: vendor-neutral status name -> the driver's
    statuses: ClassVar[dict[str, str]]
    #: role -> the driver function (for injections and the record of calls)
    functions: ClassVar[dict[str, str]]
    stream_thread: ClassVar[str]  # the prefix of its stream threads' names
    extra_end: ClassVar[int]  # what ends an ``extra`` launch array
    sticky: ClassVar[frozenset[int]]  # the fault codes that poison a device, as the driver documents them
    invalid_event_flags: ClassVar[int]  # event flags the driver refuses
    #: what a launch whose ``extra`` buffer size exceeds the parameters returns (None: it launches)
    oversized_buffer_status: ClassVar[str | None]
    #: the largest pageable host-to-device copy the driver stages during the call (None: any size)
    staged_copy_limit: ClassVar[int | None]
    #: inject() refuses a code the bindings could not return (hip-python's hipError_t is closed)
    checks_injected_codes: ClassVar[bool] = False

    def __init__(self) -> None:
        self.m: Any = None  # the installed module (cuda.bindings.driver or hip.hip)

    def __repr__(self) -> str:
        return self.name

    def status(self, name: str) -> str:
        return self.statuses[name]

    def member(self, name: str) -> Any:
        """The driver's status enum member of a vendor-neutral name."""
        raise NotImplementedError

    def start(self, monkeypatch: pytest.MonkeyPatch, **reset_args: Any) -> None:
        """Install a fresh stand-in (``reset_args`` as for its ``install``) and make device 0 current."""
        raise NotImplementedError

    def select(self, ordinal: int) -> None:
        """Make device ``ordinal`` current on the calling thread (CUDA: its primary context)."""
        raise NotImplementedError

    def enter_thread(self) -> None:
        """What a new thread does before it uses device 0 (CUDA: make its context current)."""

    def make_current(self, ordinal: int) -> None:
        """Make device ``ordinal`` current on this thread without retaining or initialising
        anything (CUDA: cuCtxSetCurrent of its primary context), poisoned or not."""
        raise NotImplementedError

    def stream(self, nonblocking: bool = True) -> Any:
        raise NotImplementedError

    def sync(self, stream: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def query(self, stream: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def destroy(self, stream: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def drain_device(self) -> None:
        """Wait for every stream of the current device, destroyed ones still draining included."""
        raise NotImplementedError

    def alloc(self, size: int) -> tuple[Any, ...]:
        raise NotImplementedError

    def copy_in(self, dst: Any, src: Any, stream: Any, size: int | None = None) -> tuple[Any, ...]:
        """An asynchronous host-to-device copy from ``src`` (a buffer, or an address with ``size``)."""
        raise NotImplementedError

    def fill32(self, dst: Any, value: int, count: int, stream: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def event(self, timed: bool = True) -> Any:
        raise NotImplementedError

    def record(self, event: Any, stream: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def event_sync(self, event: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def event_query(self, event: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def elapsed(self, start: Any, end: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def event_destroy(self, event: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def wait(self, stream: Any, event: Any, flags: int = 0) -> tuple[Any, ...]:
        raise NotImplementedError

    def create_event(self, flags: int) -> tuple[Any, ...]:
        raise NotImplementedError

    def calls_on_a_poisoned_device(self, event: Any) -> list[tuple[Any, ...]]:
        """Driver-specific calls that return device 0's sticky fault (``event`` is one of its events)."""
        raise NotImplementedError

    def after_sticky_fault(self) -> None:
        """What the driver still does, or how it recovers, after device 0's sticky fault."""
        raise NotImplementedError

    def kernel(self, name: str, params: tuple[int, ...] = (1,)) -> Any:
        """A function for kernel ``name``, loaded on the current device from a one-kernel image
        that declares its parameters (their sizes, each aligned to itself as in C)."""
        raise NotImplementedError

    def copy_out(self, dst: Any, src: Any, size: int, stream: Any) -> tuple[Any, ...]:
        """An asynchronous device-to-host copy of ``size`` bytes into ``dst`` (a host address)."""
        raise NotImplementedError

    def host_alloc(self, size: int) -> int:
        """Page-locked host memory from the driver (cuMemAllocHost, hipHostMalloc)."""
        raise NotImplementedError

    def launch(self, function: Any, stream: Any, blob: bytes = b"", grid: tuple[int, int, int] = (1, 1, 1),
               block: tuple[int, int, int] = (1, 1, 1), shared: int = 0) -> tuple[Any, ...]:
        """Launch with ``blob`` as the argument blob (through ``extra``)."""
        raise NotImplementedError



class CudaDriver(StandinDriver):
    name = "cuda"
    standin: ClassVar[ModuleType] = cuda_standin
    statuses = {"SUCCESS": "CUDA_SUCCESS", "NOT_READY": "CUDA_ERROR_NOT_READY",
                "INVALID_HANDLE": "CUDA_ERROR_INVALID_HANDLE", "INVALID_VALUE": "CUDA_ERROR_INVALID_VALUE",
                "UNKNOWN": "CUDA_ERROR_UNKNOWN", "OUT_OF_MEMORY": "CUDA_ERROR_OUT_OF_MEMORY",
                "ILLEGAL_ADDRESS": "CUDA_ERROR_ILLEGAL_ADDRESS", "LAUNCH_FAILED": "CUDA_ERROR_LAUNCH_FAILED",
                "ASSERT": "CUDA_ERROR_ASSERT", "LAUNCH_OUT_OF_RESOURCES": "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
                # what a driver call from a host function returns (the driver "may" refuse it)
                "CALLED_FROM_HOST_FUNCTION": "CUDA_ERROR_NOT_PERMITTED",
                # what a destroyed stream's handle is
                "DESTROYED_STREAM": "CUDA_ERROR_INVALID_HANDLE"}
    functions = {"alloc": "cuMemAlloc", "stream_create": "cuStreamCreate", "stream_query": "cuStreamQuery"}
    stream_thread = "cuda-standin-stream"
    extra_end = 0
    sticky = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719, 721, 226, 911})
    invalid_event_flags = 8  # beyond CU_EVENT_BLOCKING_SYNC | DISABLE_TIMING | INTERPROCESS
    oversized_buffer_status = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"  # the H100's answer
    staged_copy_limit = None  # the H100 staged pageable sources (measured with NumPy arrays)

    def member(self, name: str) -> Any:
        return getattr(self.m.CUresult, self.statuses[name])

    def start(self, monkeypatch: pytest.MonkeyPatch, **reset_args: Any) -> None:
        self.m = cuda_standin.install(monkeypatch, **reset_args)
        ok(self.m.cuInit(0))
        self.select(0)

    def context(self, ordinal: int) -> Any:
        return ok(self.m.cuDevicePrimaryCtxRetain(ok(self.m.cuDeviceGet(ordinal))))

    def select(self, ordinal: int) -> None:
        ok(self.m.cuCtxSetCurrent(self.context(ordinal)))

    def enter_thread(self) -> None:
        self.make_current(0)

    def make_current(self, ordinal: int) -> None:
        ok(self.m.cuCtxSetCurrent(cuda_standin.state().devices[ordinal].context.handle))

    def stream(self, nonblocking: bool = True) -> Any:
        return ok(self.m.cuStreamCreate(int(nonblocking)))

    def sync(self, stream: Any) -> tuple[Any, ...]:
        return self.m.cuStreamSynchronize(stream)

    def query(self, stream: Any) -> tuple[Any, ...]:
        return self.m.cuStreamQuery(stream)

    def destroy(self, stream: Any) -> tuple[Any, ...]:
        return self.m.cuStreamDestroy(stream)

    def drain_device(self) -> None:
        ok(self.m.cuCtxSynchronize())

    def alloc(self, size: int) -> tuple[Any, ...]:
        return self.m.cuMemAlloc(size)

    def copy_in(self, dst: Any, src: Any, stream: Any, size: int | None = None) -> tuple[Any, ...]:
        return self.m.cuMemcpyHtoDAsync(dst, src, len(src) if size is None else size, stream)

    def fill32(self, dst: Any, value: int, count: int, stream: Any) -> tuple[Any, ...]:
        return self.m.cuMemsetD32Async(dst, value, count, stream)

    def event(self, timed: bool = True) -> Any:
        return ok(self.m.cuEventCreate(0 if timed else self.m.CUevent_flags.CU_EVENT_DISABLE_TIMING))

    def record(self, event: Any, stream: Any) -> tuple[Any, ...]:
        return self.m.cuEventRecord(event, stream)

    def event_sync(self, event: Any) -> tuple[Any, ...]:
        return self.m.cuEventSynchronize(event)

    def event_query(self, event: Any) -> tuple[Any, ...]:
        return self.m.cuEventQuery(event)

    def elapsed(self, start: Any, end: Any) -> tuple[Any, ...]:
        return self.m.cuEventElapsedTime(start, end)

    def event_destroy(self, event: Any) -> tuple[Any, ...]:
        return self.m.cuEventDestroy(event)

    def wait(self, stream: Any, event: Any, flags: int = 0) -> tuple[Any, ...]:
        return self.m.cuStreamWaitEvent(stream, event, flags)

    def create_event(self, flags: int) -> tuple[Any, ...]:
        return self.m.cuEventCreate(flags)

    def calls_on_a_poisoned_device(self, event: Any) -> list[tuple[Any, ...]]:
        return [self.m.cuEventCreate(0), self.m.cuCtxSynchronize()]

    def after_sticky_fault(self) -> None:
        """As the H100 answered after ``__trap()``: releases succeed and the state reads inactive,
        a retain returns the fault, a reset succeeds and a retain after it still returns it."""
        self.make_current(0)  # device 0's context, without a retain
        fault = code(self.alloc(8))
        assert int(getattr(self.m.CUresult, fault)) in self.sticky
        for _ in range(cuda_standin.state().devices[0].context.refcount):
            ok(self.m.cuDevicePrimaryCtxRelease(0))
        assert ok(self.m.cuDevicePrimaryCtxGetState(0))[1] == 0
        assert code(self.m.cuDevicePrimaryCtxRetain(0)) == fault
        ok(self.m.cuDevicePrimaryCtxReset(0))
        assert code(self.m.cuDevicePrimaryCtxRetain(0)) == fault
        assert code(self.alloc(8)) == fault  # the released context is still current here
        self.select(1)
        ok(self.alloc(8))  # the other device is unaffected

    def kernel(self, name: str, params: tuple[int, ...] = (1,)) -> Any:
        types = {1: ".u8", 2: ".u16", 4: ".u32", 8: ".u64"}
        declared = ", ".join(f".param {types[size]} {name}_param_{i}" for i, size in enumerate(params))
        ptx = (f".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry {name}({declared})\n"
               f"{{\n    ret;\n}}\n")
        module = ok(self.m.cuModuleLoadDataEx(ptx.encode() + b"\0", 0, None, None))
        return ok(self.m.cuModuleGetFunction(module, name.encode()))

    def copy_out(self, dst: Any, src: Any, size: int, stream: Any) -> tuple[Any, ...]:
        return self.m.cuMemcpyDtoHAsync(dst, src, size, stream)

    def host_alloc(self, size: int) -> int:
        return int(ok(self.m.cuMemAllocHost(size)))

    def launch(self, function: Any, stream: Any, blob: bytes = b"", grid: tuple[int, int, int] = (1, 1, 1),
               block: tuple[int, int, int] = (1, 1, 1), shared: int = 0) -> tuple[Any, ...]:
        array, *_keep = extra_array(blob, self.extra_end)
        return self.m.cuLaunchKernel(function, *grid, *block, shared, stream, None, ctypes.addressof(array))


class HipDriver(StandinDriver):
    name = "hip"
    standin: ClassVar[ModuleType] = hip_standin
    statuses = {"SUCCESS": "hipSuccess", "NOT_READY": "hipErrorNotReady", "INVALID_HANDLE": "hipErrorInvalidHandle",
                "INVALID_VALUE": "hipErrorInvalidValue", "UNKNOWN": "hipErrorUnknown",
                "OUT_OF_MEMORY": "hipErrorOutOfMemory", "ILLEGAL_ADDRESS": "hipErrorIllegalAddress",
                "LAUNCH_FAILED": "hipErrorLaunchFailure", "ASSERT": "hipErrorAssert",
                "LAUNCH_OUT_OF_RESOURCES": "hipErrorLaunchOutOfResources",
                # HIP documents that host functions must not call HIP; the stand-in refuses
                "CALLED_FROM_HOST_FUNCTION": "hipErrorNotSupported",
                # HIP's check of a stream handle
                "DESTROYED_STREAM": "hipErrorContextIsDestroyed"}
    functions = {"alloc": "hipMalloc", "stream_create": "hipStreamCreateWithFlags", "stream_query": "hipStreamQuery"}
    stream_thread = "hip-standin-stream"
    extra_end = 3
    sticky = frozenset({700, 702, 710, 719, 214})
    invalid_event_flags = 4  # hipEventInterprocess needs hipEventDisableTiming
    checks_injected_codes = True
    oversized_buffer_status = None  # HIP never reads HIP_LAUNCH_PARAM_BUFFER_SIZE (clr hip_module.cpp)
    staged_copy_limit = (1 << 20) + (4 << 10)  # ROCclr's stagedXferSize_ (clr hip_memory.cpp ihipMemcpy)

    def member(self, name: str) -> Any:
        return getattr(self.m.hipError_t, self.statuses[name])

    def start(self, monkeypatch: pytest.MonkeyPatch, **reset_args: Any) -> None:
        self.m = hip_standin.install(monkeypatch, **reset_args)
        self.select(0)

    def select(self, ordinal: int) -> None:
        ok(self.m.hipSetDevice(ordinal))

    def make_current(self, ordinal: int) -> None:
        self.select(ordinal)  # hipSetDevice works on a poisoned device

    def stream(self, nonblocking: bool = True) -> Any:
        return ok(self.m.hipStreamCreateWithFlags(int(nonblocking)))

    def sync(self, stream: Any) -> tuple[Any, ...]:
        return self.m.hipStreamSynchronize(stream)

    def query(self, stream: Any) -> tuple[Any, ...]:
        return self.m.hipStreamQuery(stream)

    def destroy(self, stream: Any) -> tuple[Any, ...]:
        return self.m.hipStreamDestroy(stream)

    def drain_device(self) -> None:
        ok(self.m.hipFree(ok(self.m.hipMalloc(8))))  # hipFree's implicit hipDeviceSynchronize

    def alloc(self, size: int) -> tuple[Any, ...]:
        return self.m.hipMalloc(size)

    def copy_in(self, dst: Any, src: Any, stream: Any, size: int | None = None) -> tuple[Any, ...]:
        return self.m.hipMemcpyHtoDAsync(dst, src, len(src) if size is None else size, stream)

    def fill32(self, dst: Any, value: int, count: int, stream: Any) -> tuple[Any, ...]:
        return self.m.hipMemsetD32Async(dst, value - (1 << 32) if value >= 1 << 31 else value, count, stream)

    def event(self, timed: bool = True) -> Any:
        return ok(self.m.hipEventCreateWithFlags(0 if timed else self.m.hipEventDisableTiming))

    def record(self, event: Any, stream: Any) -> tuple[Any, ...]:
        return self.m.hipEventRecord(event, stream)

    def event_sync(self, event: Any) -> tuple[Any, ...]:
        return self.m.hipEventSynchronize(event)

    def event_query(self, event: Any) -> tuple[Any, ...]:
        return self.m.hipEventQuery(event)

    def elapsed(self, start: Any, end: Any) -> tuple[Any, ...]:
        return self.m.hipEventElapsedTime(start, end)

    def event_destroy(self, event: Any) -> tuple[Any, ...]:
        return self.m.hipEventDestroy(event)

    def wait(self, stream: Any, event: Any, flags: int = 0) -> tuple[Any, ...]:
        return self.m.hipStreamWaitEvent(stream, event, flags)

    def create_event(self, flags: int) -> tuple[Any, ...]:
        return self.m.hipEventCreateWithFlags(flags)

    def calls_on_a_poisoned_device(self, event: Any) -> list[tuple[Any, ...]]:
        return [self.m.hipEventCreateWithFlags(0), self.m.hipEventQuery(event),
                self.m.hipModuleLoadData(hip_standin.images.code_object())]

    def after_sticky_fault(self) -> None:
        """Device queries, answered from cached properties, still work; hipDeviceReset succeeds
        (HIP documents hipSuccess only) but the fault stays for the process."""
        self.select(0)
        fault = code(self.alloc(8))
        assert int(getattr(self.m.hipError_t, fault)) in self.sticky
        ok(self.m.hipGetDeviceProperties(0))
        ok(self.m.hipDeviceReset())
        assert code(self.alloc(8)) == fault
        assert code(self.m.hipStreamCreateWithFlags(0)) == fault
        self.select(1)
        ok(self.alloc(8))  # the other device is unaffected

    def kernel(self, name: str, params: tuple[int, ...] = (1,)) -> Any:
        image = hip_standin.images.code_object("gfx90a", kernels=(name,), args={name: params})
        module = ok(self.m.hipModuleLoadData(image))
        return ok(self.m.hipModuleGetFunction(module, name.encode()))

    def copy_out(self, dst: Any, src: Any, size: int, stream: Any) -> tuple[Any, ...]:
        return self.m.hipMemcpyDtoHAsync(dst, src, size, stream)

    def host_alloc(self, size: int) -> int:
        return int(ok(self.m.hipHostMalloc(size, 0)))

    def launch(self, function: Any, stream: Any, blob: bytes = b"", grid: tuple[int, int, int] = (1, 1, 1),
               block: tuple[int, int, int] = (1, 1, 1), shared: int = 0) -> tuple[Any, ...]:
        array, *_keep = extra_array(blob, self.extra_end)
        return self.m.hipModuleLaunchKernel(function, *grid, *block, shared, stream, None, ctypes.addressof(array))


DRIVERS = (CudaDriver(), HipDriver())
