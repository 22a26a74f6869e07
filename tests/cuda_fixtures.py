"""Helpers for the CUDA plugin's CI tests (tests/test_cuda_plugin.py) on the driver stand-in.

Program images the stand-in loads (PTX text, a header-only cubin, a fatbin), a runtime on
stand-in GPUs with a guaranteed teardown, gates that hold a queue, calls on a brand-new
thread, views of the driver calls the plugin made (``cuda_standin.calls``), and the workload
and helpers of the check against the real ``cuda.bindings.driver``.
"""

from __future__ import annotations

import ctypes
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any

import cuda_standin as standin
import pytest
from conftest import call_with_timeout
from cuda_standin import KernelFault

from offloadrt import (
    AllocType,
    DeviceType,
    Dimensions,
    ErrorCode,
    EventInfo,
    KernelLaunchSizeArgs,
    OffloadError,
    PlatformBackend,
    SymbolKind,
    api,
)
from offloadrt.plugins.cuda import driver as cuda_driver
from offloadrt.plugins.cuda.plugin import CudaDevice
from offloadrt.types import DeviceInfo, PlatformInfo

WAIT = 10.0  # the longest a test waits for something that should happen at once
CUresult = standin.driver.CUresult
KERNEL, GLOBAL = SymbolKind.KERNEL, SymbolKind.GLOBAL_VARIABLE

# Kernels and globals the stand-in reads from PTX; the tests give them Python bodies with
# standin.register_kernel.
PTX = b"""
.version 8.0
.target sm_90
.address_size 64

.visible .global .align 4 .u32 counter = 7;
.visible .global .align 8 .b8 table[24];

.visible .entry record()
{
    ret;
}

.visible .entry other()
{
    ret;
}

.visible .entry small()
.maxntid 128, 1, 1
{
    ret;
}

.visible .entry boom()
{
    ret;
}
"""


def ptx(target: str = "sm_90") -> bytes:
    """:data:`PTX` for another ``.target``."""
    return PTX.replace(b"sm_90", target.encode())


def cubin(sm: int = 90, machine: int = 190) -> bytes:
    """A header-only 64-bit little-endian ELF: ``e_machine`` 190 (EM_CUDA), the SM in ``e_flags``.

    The stand-in takes its kernel and global names from ``standin.set_binary_symbols``.
    """
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, 0, 0, 0, sm, 64, 0, 0, 0, 0, 0)
    image = ident + header
    assert len(image) == 64
    return image


def fatbin() -> bytes:
    """A fatbin container: magic 0xBA55ED50, version, header size 16, an 8-byte body."""
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 8) + bytes(8)


def launch_size(groups: tuple[int, int, int] = (1, 1, 1), items: tuple[int, int, int] = (1, 1, 1),
                dyn: int = 0) -> KernelLaunchSizeArgs:
    return KernelLaunchSizeArgs(3, Dimensions(*groups), Dimensions(*items), dyn)


# ---- the driver calls the plugin made ------------------------------------------------------------

def call_names() -> list[str]:
    return [name for name, _ in list(standin.calls)]


def count(name: str) -> int:
    return call_names().count(name)


def calls_of(name: str) -> list[tuple[Any, ...]]:
    return [args for call, args in list(standin.calls) if call == name]


# ---- a runtime on stand-in GPUs -------------------------------------------------------------------

class Runtime:
    """An initialised runtime on the stand-in: its GPUs (all of ``backend``), the host device, gates to open."""

    backend = PlatformBackend.CUDA

    def __init__(self) -> None:
        self.gates: list[Gate] = []
        self.refresh()

    def refresh(self) -> None:
        devices: list[api.Device] = []
        api.olIterateDevices(lambda device, _: devices.append(device))
        self.gpus = [d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.GPU]
        self.host = next(d for d in devices if api.olGetDeviceInfo(d, DeviceInfo.TYPE) == DeviceType.HOST)
        for gpu in self.gpus:
            platform = api.olGetDeviceInfo(gpu, DeviceInfo.PLATFORM)
            assert api.olGetPlatformInfo(platform, PlatformInfo.BACKEND) == self.backend

    def gate(self, queue: api.Queue) -> Gate:
        """A gate launched on ``queue`` (opened at teardown if the test does not)."""
        gate = Gate(queue)
        self.gates.append(gate)
        return gate


@contextmanager
def stand_in_runtime(monkeypatch: pytest.MonkeyPatch, **reset_args: Any) -> Iterator[Runtime]:
    """The stand-in installed (``reset_args`` as for ``standin.install``), then ``olInit``;
    afterwards every gate is opened, the runtime shut down and the stand-in stopped."""
    standin.install(monkeypatch, **reset_args)
    runtime: Runtime | None = None
    try:
        api.olInit()
        runtime = Runtime()
        yield runtime
    finally:
        if runtime is not None:
            for gate in runtime.gates:
                gate.open()
        try:
            in_new_thread(shut_down_fully, timeout=3 * WAIT)  # drains every queue: bounded too
        finally:
            standin.shutdown()


def shut_down_fully() -> None:
    """``olShutDown`` until the runtime is stopped (a test may have left it initialised)."""
    while True:
        try:
            api.olShutDown()
        except OffloadError as exc:
            if exc.code == ErrorCode.UNINITIALIZED:
                return
            raise


class Gate:
    """A host function that holds its queue until opened; ``entered`` once the queue reached it."""

    def __init__(self, queue: api.Queue) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        api.olLaunchHostFunction(queue, self)

    def __call__(self, _user_data: object) -> None:
        self.entered.set()
        if not self.opened.wait(3 * WAIT):
            raise TimeoutError("a test gate was never opened")

    def open(self) -> None:
        self.opened.set()

    def wait_entered(self) -> None:
        assert self.entered.wait(WAIT), "the queue never reached the gate"


def in_new_thread(fn: Callable[..., Any], *args: Any, timeout: float = WAIT) -> Any:
    """``fn(*args)`` on a brand-new Python thread; its result, or its exception re-raised here."""
    return call_with_timeout(fn, *args, timeout=timeout)


def host_buffer(data: bytes | int) -> tuple[ctypes.Array, int]:
    """A ctypes buffer (kept alive by the caller) and its address."""
    buffer = ctypes.create_string_buffer(data, data if isinstance(data, int) else len(data))
    return buffer, ctypes.addressof(buffer)


# ---- kernels, programs, the representative workload -------------------------------------------

def program(device: api.Device, image: bytes | bytearray = PTX) -> api.Program:
    return api.olCreateProgram(device, image)


def cuda_device(device: api.Device) -> CudaDevice:
    """The plugin's device behind a handle (for white-box checks)."""
    gdev = device._gdev
    assert isinstance(gdev, CudaDevice)
    return gdev


def recorder() -> tuple[list[tuple[Any, ...]], Callable[..., None]]:
    """A kernel body that records ``(params, grid, block, shared_mem, device)`` of each launch."""
    seen: list[tuple[Any, ...]] = []
    return seen, lambda *launch: seen.append(launch)


def spin(seconds: float) -> None:
    """Busy for ``seconds``: a measurable gap between two events (not a wait for work)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def faulting_kernel(code: Any) -> Callable[..., None]:
    """A kernel body that faults with CUresult ``code`` (reported asynchronously, as on a GPU)."""

    def fault(*_: Any) -> None:
        raise KernelFault(code, "load from 0x0")

    return fault


def representative_workload(runtime: Runtime) -> None:
    """Every driver call the plugin can make, each kind of argument included; ends shut down."""
    gpu0, gpu1 = runtime.gpus
    standin.register_kernel("record", lambda *_: None)
    standin.register_kernel("boom", faulting_kernel(CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES))
    standin.set_binary_symbols(kernels=["vector_add"], globals={"state": 8})
    source, source_address = host_buffer(bytes(range(64)))
    queues = [api.olCreateQueue(gpu) for gpu in (gpu0, gpu0, gpu1)]
    pointers = {kind: api.olMemAlloc(gpu0, kind, 256) for kind in AllocType}
    other = api.olMemAlloc(gpu1, AllocType.DEVICE, 256)
    for queue in (None, queues[0]):
        api.olMemcpy(queue, pointers[AllocType.DEVICE], gpu0, source_address, runtime.host, 64)
        api.olMemcpy(queue, pointers[AllocType.MANAGED], gpu0, pointers[AllocType.DEVICE], gpu0, 64)
        api.olMemcpy(queue, other, gpu1, pointers[AllocType.DEVICE], gpu0, 64)
        api.olMemcpy(queue, source_address, runtime.host, pointers[AllocType.MANAGED], gpu0, 64)
        for width in (1, 2, 4, 3, 6, 8, 12, 17):
            api.olMemFill(queue, pointers[AllocType.DEVICE], bytes(range(1, width + 1)), width * 4)
    api.olMemFill(None, pointers[AllocType.HOST] + 1, b"\x01\x02\x03\x04\x05\x06", 12)
    prog = program(gpu0)
    for image in (cubin(90), fatbin()):
        api.olDestroyProgram(program(gpu0, image))
    for bad in (PTX + b"// standin-invalid\n", ptx("sm_100")):
        with pytest.raises(OffloadError):
            program(gpu0, bad)
    exercise_kernels_events_and_teardown(runtime, prog, queues, lambda: [
        standin.inject(name, CUresult.CUDA_ERROR_OUT_OF_MEMORY)
        for name in ("cuMemAlloc", "cuMemAllocHost", "cuMemAllocManaged")])


def exercise_kernels_events_and_teardown(runtime: Runtime, prog: api.Program, queues: list[api.Queue],
                                         fail_allocations: Callable[[], object]) -> None:
    """The second half of a GPU stand-in's representative workload, the same for every GPU plugin:
    registered host memory, symbols, launches, occupancy, events, waits, a faulting kernel, failed
    allocations (after ``fail_allocations`` arranged them), a parked queue, another thread's
    device, full shutdown (which unregisters what is left). ``prog`` must have kernels ``record``
    and ``boom`` (which faults) and a global ``counter``."""
    gpu0, gpu1 = runtime.gpus
    staging, staging_address = host_buffer(4096)
    api.olMemRegister(gpu0, staging_address, 4096)  # pinned and mapped
    api.olMemRegister(gpu1, staging_address + 64, 64)  # a user of gpu0's pin
    api.olMemUnregister(gpu1, staging_address + 64)
    api.olMemUnregister(gpu0, staging_address)  # unpinned
    pinned_by_gpu1 = api.olMemAlloc(gpu1, AllocType.HOST, 256)
    api.olMemRegister(gpu0, pinned_by_gpu1 + 16, 64)  # the driver finds it page-locked already
    api.olMemUnregister(gpu0, pinned_by_gpu1 + 16)
    api.olMemRegister(gpu1, staging_address, 4096)  # left for the shutdown
    record = api.olGetSymbol(prog, "record", KERNEL)
    api.olGetSymbol(prog, "counter", GLOBAL)
    for symbol_kind in (KERNEL, GLOBAL):
        with pytest.raises(OffloadError):
            api.olGetSymbol(prog, "missing", symbol_kind)
    for queue in (None, queues[0]):
        api.olLaunchKernel(queue, gpu0, record, struct.pack("<QI", 1, 2), launch_size((2, 3, 4), (32, 2, 1), 1024))
        api.olLaunchKernel(queue, gpu0, record, None, launch_size(dyn=64 * 1024))
    api.olCalculateOptimalOccupancy(gpu0, record, 1024)
    start = api.olCreateEvent(queues[0])
    api.olLaunchHostFunction(queues[0], lambda _: None)
    end = api.olCreateEvent(queues[0])
    api.olGetEventInfo(end, EventInfo.IS_COMPLETE)
    api.olWaitEvents(queues[1], [end])
    api.olWaitEvents(queues[2], [end])
    api.olSyncEvent(end)
    api.olGetEventElapsedTime(start, end)
    for queue in queues:
        api.olQueryQueue(queue)
        api.olSyncQueue(queue)
    api.olLaunchKernel(queues[1], gpu0, api.olGetSymbol(prog, "boom", KERNEL), None, launch_size())
    with pytest.raises(OffloadError):
        api.olSyncQueue(queues[1])
    fail_allocations()
    for kind in AllocType:
        with pytest.raises(OffloadError):
            api.olMemAlloc(gpu0, kind, 64)
    gate_queue = api.olCreateQueue(gpu0)
    gate = runtime.gate(gate_queue)
    api.olDestroyQueue(gate_queue)  # parked while busy
    gate.open()
    for event in (start, end):
        api.olDestroyEvent(event)
    for queue in queues:
        api.olDestroyQueue(queue)
    in_new_thread(lambda: api.olMemFree(api.olMemAlloc(gpu1, AllocType.DEVICE, 8)))  # another thread's device
    shut_down_fully()  # frees, unloads, destroys the pools, releases the devices


def plugin_driver_calls() -> set[str]:
    """Every ``cu*`` function the plugin's source calls (its package), directly or through ``DRIVER_CALLS``."""
    package = Path(cuda_driver.__file__).parent
    text = "".join(path.read_text() for path in sorted(package.glob("*.py")))
    from offloadrt.plugins.cuda.plugin import CudaDevice as Device

    direct = set(re.findall(r"\b(?:d|mod|self\.d)\.(cu[A-Z]\w*)\b", text))
    return direct | set(Device.DRIVER_CALLS.values())


def to_real(value: Any, real: Any) -> Any:
    """A stand-in look-alike handle or enum as the real bindings' type of the same name."""
    if isinstance(value, (list, tuple)):
        return type(value)(to_real(v, real) for v in value)
    kind = type(value)
    if kind.__module__.startswith("cuda_standin"):
        target = getattr(real, kind.__name__)
        return target(int(value)) if not isinstance(value, Enum) else target(value.value)
    return value


def call_key(name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What makes two calls of ``name`` different for argument conversion: types, and for plain
    ints their size and sign."""

    def describe(value: Any) -> Any:
        if isinstance(value, (bytes, bytearray)):
            return (type(value).__name__, len(value))
        if isinstance(value, (list, tuple)):
            return tuple(describe(v) for v in value)
        if isinstance(value, int) and type(value) is int:
            return ("int", value.bit_length(), value < 0)
        return (type(value).__qualname__, repr(value)[:60])

    return (name, describe(args))
